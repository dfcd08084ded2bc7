"""Communication cost model: alpha-beta time of a collective, per operation and algorithm.

Every communication what-if and multi-rank job uses this one module. Times are integer ns; sizes
are nccl-tests' ``S`` (bytes; :mod:`daydream.graph.collectives`); bandwidths are bytes per second per
direction per GPU; latencies are ns.

For ``n`` ranks on one kind of link (bandwidth ``B``, per-step latency ``a``, per-collective base
latency ``b``), with ``c`` the contention factor (it multiplies the transfer term):

==================  ==========================================  ====================
operation           time                                        algorithm
==================  ==========================================  ====================
all-reduce          ``b + 2(n-1) a + c 2(n-1)/n S/B``            ring
all-reduce          ``b + 2 ceil(log2 n) a + c 2 S/B``           tree (pipelined
                                                                 double binary tree)
all-gather          ``b + (n-1) a + c (n-1)/n S/B``              ring
reduce-scatter      ``b + (n-1) a + c (n-1)/n S/B``              ring
all-to-all          ``b + (n-1) a + c (n-1)/n S/B``              pairwise exchange
broadcast, reduce   ``b + (n-1) a + c S/B``                      pipelined ring
send/recv           ``b + a + c S/B``                            point to point
==================  ==========================================  ====================

Sources: the ring and pairwise forms are Thakur, Rabenseifner and Gropp, "Optimization of
Collective Communication Operations in MPICH" (IJHPCA 2005), and they make the transfer term
``busbw``-consistent with nccl-tests (``doc/PERFORMANCE.md``: a large collective's bus bandwidth
is the link bandwidth). The tree form is the full-bandwidth two-tree algorithm of Sanders, Speck
and Träff (Parallel Computing 2009) that NCCL's tree all-reduce implements (each tree carries half
the data, reduce then broadcast). With ``n = 1`` a collective costs 0 (NCCL's own cost table sets
0 for one rank: ``src/enqueue.cc`` ``updateCollCostTable``).

**Hierarchical** (``n = nodes x g``, ``nodes > 1``; intra-node link ``I``, inter-node link ``E``):
all-reduce = reduce-scatter(S, g, I) + all-reduce(S/g, nodes, E) + all-gather(S, g, I);
all-gather = all-gather(S/g, nodes, E) + all-gather(S, g, I) (reduce-scatter mirrored);
all-to-all = ``b + (g-1) a_I + (n-g) a_E + c ((g-1)/n S/B_I + (n-g)/n S/B_E)`` (each GPU its
own NIC, as on DGX systems); broadcast, reduce and send/recv use the inter-node link.

**Contention factor** ``c``: collectives overlapped with compute kernels run slower than on
exclusive links; the Daydream paper (Zhu et al., USENIX ATC 2020, evaluation of data-parallel
training) measured NCCL about 34 % slower than its exclusive-link estimate:
:data:`PAPER_CONTENTION` = 1.34. The default is 1 (exclusive links); it is a named parameter of
every communication what-if.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

#: NCCL ops in :class:`daydream.graph.collectives.Op` numbering (kept here so this module imports nothing)
ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, BROADCAST, REDUCE, SEND_RECV = 1, 2, 3, 4, 5, 6, 7
RING, TREE = 1, 2

#: contention factor the Daydream paper measured (NCCL ~34 % slower than the exclusive-link
#: estimate; Zhu et al., ATC 2020, distributed-training evaluation; section number not re-checked)
PAPER_CONTENTION = 1.34

#: per-collective base latency, ns: NCCL ``src/graph/tuning.cc`` ``baseLat`` Ring/Simple = 8.4 us
BASE_LATENCY_NS = 8400.0


@dataclass(frozen=True)
class Link:
    """One kind of link: ``bandwidth`` bytes/s per direction per GPU, ``latency_ns`` per step."""

    name: str
    bandwidth: float
    latency_ns: float
    source: str


_NCCL_LAT = "per-step latency: NCCL src/graph/tuning.cc hwLat Ring/Simple ({})"
#: named link presets, each with its source (spec sheets; per direction, per GPU)
PRESETS: dict[str, Link] = {
    "pcie3": Link("PCIe 3.0 x16", 15.754e9, 5700.0, "PCI-SIG PCIe 3.0 base spec: 8 GT/s x 16 lanes, 128b/130b; " + _NCCL_LAT.format("PCI 5.7 us")),
    "pcie4": Link("PCIe 4.0 x16", 31.508e9, 5700.0, "PCI-SIG PCIe 4.0 base spec: 16 GT/s x 16 lanes, 128b/130b; " + _NCCL_LAT.format("PCI 5.7 us")),
    "pcie5": Link("PCIe 5.0 x16", 63.015e9, 5700.0, "PCI-SIG PCIe 5.0 base spec: 32 GT/s x 16 lanes, 128b/130b; " + _NCCL_LAT.format("PCI 5.7 us")),
    "nvlink2": Link("NVLink 2 (V100)", 150e9, 3400.0, "NVIDIA Tesla V100 datasheet: 300 GB/s NVLink total (6 links x 25 GB/s per direction); " + _NCCL_LAT.format("NVLink 3.4 us")),
    "nvlink3": Link("NVLink 3 (A100)", 300e9, 3400.0, "NVIDIA A100 datasheet: 600 GB/s NVLink total (12 links x 25 GB/s per direction); " + _NCCL_LAT.format("NVLink 3.4 us")),
    "nvlink4": Link("NVLink 4 (H100)", 450e9, 3400.0, "NVIDIA H100 datasheet: 900 GB/s NVLink total (18 links x 25 GB/s per direction); " + _NCCL_LAT.format("NVLink 3.4 us")),
    "nvlink5": Link("NVLink 5 (B200)", 900e9, 3400.0, "NVIDIA Blackwell (HGX B200) datasheet: 1.8 TB/s NVLink total per GPU; " + _NCCL_LAT.format("NVLink 3.4 us")),
    "ib100": Link("InfiniBand EDR 100 Gb/s", 12.5e9, 14000.0, "InfiniBand Trade Association roadmap: EDR 4x = 100 Gb/s per port; " + _NCCL_LAT.format("NET 14 us")),
    "ib200": Link("InfiniBand HDR 200 Gb/s", 25e9, 14000.0, "InfiniBand Trade Association roadmap: HDR 4x = 200 Gb/s per port (ConnectX-6); " + _NCCL_LAT.format("NET 14 us")),
    "ib400": Link("InfiniBand NDR 400 Gb/s", 50e9, 14000.0, "InfiniBand Trade Association roadmap: NDR 4x = 400 Gb/s per port (ConnectX-7); " + _NCCL_LAT.format("NET 14 us")),
}


@dataclass(frozen=True)
class Network:
    """Where the ranks sit: ``intra`` link inside a node, ``inter`` link between nodes (None: one
    node whatever the size), ``gpus_per_node`` (g), ``contention`` (c >= 1 slows transfers),
    ``base_latency_ns`` (b) and the all-reduce ``algorithm`` (RING or TREE)."""

    intra: Link
    inter: Link | None = None
    gpus_per_node: int = 8
    contention: float = 1.0
    base_latency_ns: float = BASE_LATENCY_NS
    algorithm: int = RING


def flat(op, size, n, link: Link, *, contention: float = 1.0, base_ns: float = BASE_LATENCY_NS, algorithm: int = RING) -> np.ndarray:
    """Alpha-beta time (float64 ns) of ``op`` (int or array) moving ``size`` bytes among ``n``
    ranks over one kind of link (module table). Arrays broadcast; ``n <= 1`` gives 0; an unknown
    op gives NaN."""
    op, s, n = np.asarray(op), np.asarray(size, np.float64), np.asarray(n, np.float64)
    a, tb = link.latency_ns, contention * s / link.bandwidth * 1e9  # transfer of S bytes, ns
    nn = np.maximum(n, 1.0)
    frac = (nn - 1) / nn
    steps = np.full(np.broadcast(op, s, n).shape, np.nan)
    xfer = np.full(steps.shape, np.nan)
    ar = op == ALL_REDUCE
    tree = ar & (algorithm == TREE)
    ring = ar & ~tree
    steps = np.where(ring, 2 * (nn - 1), steps)
    xfer = np.where(ring, 2 * frac * tb, xfer)
    steps = np.where(tree, 2 * np.ceil(np.log2(nn)), steps)
    xfer = np.where(tree, 2 * tb, xfer)
    third = np.isin(op, (ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL))
    steps = np.where(third, nn - 1, steps)
    xfer = np.where(third, frac * tb, xfer)
    bc = np.isin(op, (BROADCAST, REDUCE))
    steps = np.where(bc, nn - 1, steps)
    xfer = np.where(bc, tb, xfer)
    p2p = op == SEND_RECV
    steps = np.where(p2p, 1.0, steps)
    xfer = np.where(p2p, tb, xfer)
    t = base_ns + steps * a + xfer
    return np.where(n <= 1, 0.0, t)


def collective_ns(op, size, n, net: Network) -> np.ndarray:
    """Time (int64 ns, rounded) of collectives on ``net`` (module docstring: flat on one node,
    hierarchical over several). ``op``, ``size`` (bytes), ``n`` (ranks) broadcast.

    Raises:
        ValueError: an unknown operation, a negative size, or a non-positive group size.
    """
    op, s, n = np.broadcast_arrays(np.asarray(op), np.asarray(size, np.float64), np.asarray(n, np.int64))
    if (s < 0).any() or (n < 1).any():
        raise ValueError("collective_ns: sizes must be >= 0 and group sizes >= 1")
    kw = dict(contention=net.contention, base_ns=net.base_latency_ns, algorithm=net.algorithm)
    g = max(int(net.gpus_per_node), 1)
    t = flat(op, s, n, net.intra, **kw)
    multi = (n > g) if net.inter is not None else np.zeros(n.shape, bool)
    if multi.any():
        t = np.where(multi, _hierarchical(op, s, n, g, net, kw), t)
    if np.isnan(t).any():
        raise ValueError("collective_ns: unknown collective operation")
    return np.rint(t).astype(np.int64)


def _hierarchical(op, s, n, g, net: Network, kw) -> np.ndarray:
    """Time (float ns) of collectives over ``n / g`` nodes of ``g`` GPUs (module docstring)."""
    I, E = net.intra, net.inter
    nodes = np.ceil(n / g)
    kw0 = dict(kw, base_ns=0.0)
    rs_i = flat(REDUCE_SCATTER, s, g, I, **kw0)
    ag_i = flat(ALL_GATHER, s, g, I, **kw0)
    b = kw["base_ns"]
    t = np.full(s.shape, np.nan)
    t = np.where(op == ALL_REDUCE, b + rs_i + flat(ALL_REDUCE, s / g, nodes, E, **kw0) + ag_i, t)
    t = np.where(np.isin(op, (ALL_GATHER, REDUCE_SCATTER)), b + flat(ALL_GATHER, s / g, nodes, E, **kw0) + ag_i, t)
    c = kw["contention"]
    a2a = b + (g - 1) * I.latency_ns + (n - g) * E.latency_ns + c * ((g - 1) / n * s / I.bandwidth + (n - g) / n * s / E.bandwidth) * 1e9
    t = np.where(op == ALL_TO_ALL, a2a, t)
    other = np.isin(op, (BROADCAST, REDUCE, SEND_RECV))
    return np.where(other, flat(op, s, n, E, **kw), t)


#: bandwidth units as written (case matters: an upper-case B is bytes, a lower-case b bits), bytes/s per unit
BANDWIDTH_UNITS = {"TB/s": 1e12, "GB/s": 1e9, "MB/s": 1e6, "kB/s": 1e3, "KB/s": 1e3, "B/s": 1.0, "GBps": 1e9, "MBps": 1e6,
                   "Tb/s": 1e12 / 8, "Gb/s": 1e9 / 8, "Mb/s": 1e6 / 8, "kb/s": 1e3 / 8, "Kb/s": 1e3 / 8, "b/s": 1 / 8,
                   "Gbps": 1e9 / 8, "Mbps": 1e6 / 8, "gbps": 1e9 / 8, "mbps": 1e6 / 8}
#: the accepted spellings, as error messages name them
BANDWIDTH_UNITS_HELP = "TB/s, GB/s, GBps, MB/s, MBps, kB/s or B/s for bytes, Tb/s, Gb/s, Gbps, Mb/s, Mbps, kb/s or b/s for bits"
#: the range of bandwidths taken (bytes/s): 1 B/s to 1 PB/s (beyond, the model's times leave the int64 ns range)
BANDWIDTH_RANGE = (1.0, 1e15)
#: the largest per-step latency taken, ns (1 s)
MAX_LATENCY_NS = 1e9
_UNIT = re.compile(r"^\s*([0-9.eE+-]+)\s*([A-Za-z/]+)\s*$", re.ASCII)


def parse_bandwidth(text: str) -> float:
    """``"25GB/s"``, ``"200Gb/s"``, ``"100Gbps"``, ``"12.5e9B/s"`` or a preset name -> bytes/s.

    A number needs a unit (:data:`BANDWIDTH_UNITS_HELP`), written as there: a bare ``25`` would be
    25 bytes/s, a million times slower than any link meant by it, and ``25gb/s`` could be bits or
    bytes (it was read as bits, 8x slower than ``25GB/s``, without a word).

    Raises:
        ValueError: not a bandwidth, a number without a unit, or a unit not written as listed.
    """
    t = text.strip()
    if t.lower() in PRESETS:
        return PRESETS[t.lower()].bandwidth
    m = _UNIT.match(t)
    if m is None:
        if _is_number(t):
            raise ValueError(f"bandwidth {text!r} has no unit: write it with one ({BANDWIDTH_UNITS_HELP}) or name a link ({', '.join(PRESETS)})")
        raise ValueError(f"not a positive bandwidth: {text!r} (a number with a unit: {BANDWIDTH_UNITS_HELP}; or a link: {', '.join(PRESETS)})")
    num, unit = m.groups()
    f = BANDWIDTH_UNITS.get(unit)
    if f is None:
        raise ValueError(f"bandwidth {text!r}: unit {unit!r} is not one of {BANDWIDTH_UNITS_HELP} (case matters: B bytes, b bits)")
    try:
        v = float(num) * f
    except ValueError:
        v = float("nan")
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"not a positive bandwidth: {text!r} (a number with a unit: {BANDWIDTH_UNITS_HELP}; or a link: {', '.join(PRESETS)})")
    if not BANDWIDTH_RANGE[0] <= v <= BANDWIDTH_RANGE[1]:
        raise ValueError(f"bandwidth {text!r} is outside 1 B/s to 1 PB/s")
    return v


def _is_number(t: str) -> bool:
    """``t`` is an ASCII decimal number (Python's float() also takes other scripts' digits)."""
    if not t.isascii():
        return False
    try:
        float(t)
    except ValueError:
        return False
    return True


def parse_latency(text: str) -> float:
    """``"5us"``, ``"1.5ms"``, ``"800ns"`` or a number of ns -> ns (>= 0).

    Raises:
        ValueError: not a latency.
    """
    t = text.strip().lower()
    if not t.isascii():
        raise ValueError(f"not a latency: {text!r} (5us, 800ns, 1ms, or ns)")
    try:
        for u, f in (("ns", 1.0), ("us", 1e3), ("ms", 1e6), ("s", 1e9)):
            if t.endswith(u):
                v = float(t[: -len(u)]) * f
                break
        else:
            v = float(t)
    except ValueError:
        v = float("nan")
    if not np.isfinite(v) or v < 0 or v > MAX_LATENCY_NS:
        raise ValueError(f"not a latency: {text!r} (5us, 800ns, 1ms, or ns; at most 1 s)")
    return v


def calibrate(op: np.ndarray, size: np.ndarray, n: np.ndarray, dur_ns: np.ndarray, like: Link) -> Link | None:
    """A link fitted to recorded collectives (sizes known, n > 1), or None when there are none.

    Bandwidth: the highest bus bandwidth achieved (``busbw = S/t x factor``); a recorded
    collective's time includes waiting for peers, which only lowers it, so the best is the least
    contaminated. Latency: ``like``'s (a recorded trace rarely holds enough small messages to fit
    it). The source names the number of collectives fitted.
    """
    from_ = (size > 0) & (n > 1) & (dur_ns > 0)
    if not from_.any():
        return None
    nn = n[from_].astype(np.float64)
    frac = (nn - 1) / nn
    o = op[from_]
    fac = np.where(o == ALL_REDUCE, 2 * frac, np.where(np.isin(o, (ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL)), frac, 1.0))
    bus = size[from_] / dur_ns[from_] * 1e9 * fac
    return Link(f"calibrated ({int(from_.sum())} collectives)", float(bus.max()), like.latency_ns,
                f"highest bus bandwidth achieved by {int(from_.sum())} recorded collectives; latency of {like.name}")
