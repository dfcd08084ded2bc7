"""``network``, ``world-size``, ``buckets``: re-cost the collectives a trace already has.

Each sized collective (:mod:`daydream.graph.collectives`) gets ``new = max(recorded + model_new -
model_old, 0)``: the model's change is added to what was recorded, so the part of a recorded
collective that is waiting for peers (or anything the model does not see) is kept, and the same
network gives the recorded time back. ``model_old`` is :func:`daydream.costmodel.comm.collective_ns`
on the trace's own network, calibrated from it (bandwidth: the highest bus bandwidth any of its
collectives achieved; latency: the ``link`` preset's, lowered where a collective was faster), at
the recorded group size. Compute is unchanged; collectives without a size in the trace are left as
recorded (counted in the note).

* ``network:bandwidth=...,latency=...,inter=...``: the given network instead of the one the trace
  ran on. Both are costed at their links' nominal bandwidths: the traced link is ``traced=`` or the
  board link of the trace's GPU (:data:`daydream.costmodel.gpus.BOARD_LINKS`), so the link the trace ran on
  gives the recorded time back and a slower one never a faster time. The calibrated per-step
  latency is kept, plus NCCL's hwLat difference between the two kinds of link.
* ``world-size:n=N``: N ranks instead of the recorded group size, on the calibrated network with
  the parameters' ``inter``, ``gpus_per_node``, ``contention`` and ``algorithm`` (all-reduce, broadcast,
  all-to-all keep their message; all-gather and reduce-scatter keep each rank's shard, so their
  ``S`` scales by N/n). ``n=1``: no peers, so every collective costs 0 (recorded waits included).
* ``buckets:size=MB``: the all-reduces of each iteration re-bucketed: their bytes, in stream
  order, cut into buckets of ``size`` MiB; a bucket is charged to the recorded all-reduce during
  which its last byte was recorded (its gradients were ready by then), each bucket paying the
  model's latency.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..util.arrays import sorted_unique
from ..costmodel import comm as cm
from ..graph.collectives import Algo, Op
from ..errors import NotApplicable
from ..costmodel.gpus import BOARD_LINKS
from ..transform import set_duration
from . import Optimization, Param, register
from .gpu_upgrade import source_gpu
from .comm_common import (
    DDP_BUCKET_MB,
    MIB,
    NETWORK_PARAMS,
    check_pieces,
    comm_collectives,
    link_text,
    network_of,
    step_of_nodes,
)


def calibrated(c, like: cm.Network, fit_bandwidth: bool = True) -> cm.Network:
    """``like`` as the trace's own network: one node (no inter-node link), contention 1 (the recorded
    times hold the contention there was), its intra-node link's bandwidth fitted to the collectives
    ``c`` (:func:`daydream.costmodel.comm.calibrate`; ``fit_bandwidth=False`` keeps ``like``'s, the
    nominal bandwidth of the link the trace ran on), and its base and per-step latencies lowered
    in proportion where a recorded collective was faster than they allow (so no recorded collective
    is shorter than the calibrated model says). In proportion, so that the latency still grows with
    the ring's steps: lowering the per-step latency alone drove it to 0 on the DLRM job, whose
    transfers (the peer waits taken out) are 7-10 us, and 64 ranks cost the latency of 8."""
    link = cm.calibrate(c.op, c.size_bytes, c.group_size, c.dur_ns, like.intra) if fit_bandwidth else like.intra
    if link is None:
        return like
    net = dataclasses.replace(like, intra=link, inter=None, contention=1.0)
    m = _sized(c) & (c.group_size > 1)
    if m.any() and fit_bandwidth:
        net = _latency_then_bandwidth(c, m, net)
        link = net.intra
    if m.any():
        zero = dataclasses.replace(net, base_latency_ns=0.0, intra=dataclasses.replace(link, latency_ns=0.0))
        xfer = cm.collective_ns(c.op[m], c.size_bytes[m], c.group_size[m], zero)
        lat = cm.collective_ns(c.op[m], c.size_bytes[m], c.group_size[m], net) - xfer  # base + steps x per-step latency
        s = float(np.clip(np.divide(c.dur_ns[m] - xfer, lat, out=np.ones(len(lat)), where=lat > 0), 0.0, 1.0).min())
        net = dataclasses.replace(net, base_latency_ns=net.base_latency_ns * s, intra=dataclasses.replace(link, latency_ns=link.latency_ns * s))
    return net


def _latency_then_bandwidth(c, m, net: cm.Network) -> cm.Network:
    """``net`` (its bandwidth the collectives' best bus bandwidth, which takes them as latency-free)
    fitted latency first: the base and per-step latency scaled by the largest ``s <= 1`` with which
    no collective ``m`` is shorter than its latency alone, then the bandwidth the lowest with which
    none is shorter than that latency plus its transfer. The best bus bandwidth alone left the
    collective that set it no time for latency, so the proportional scaling of :func:`calibrated`
    took every latency to 0 on every trace whose link is not known (buckets:size=1, 25 and 1000
    all predicted the same)."""
    op, size, n, dur = c.op[m], c.size_bytes[m], c.group_size[m], c.dur_ns[m].astype(np.float64)
    link = net.intra
    zero = dataclasses.replace(net, base_latency_ns=0.0, intra=dataclasses.replace(link, latency_ns=0.0))
    x0 = cm.collective_ns(op, size, n, zero).astype(np.float64)  # transfer at the best bus bandwidth
    lat = cm.collective_ns(op, size, n, net).astype(np.float64) - x0
    s0 = float(np.clip(np.divide(dur, lat, out=np.ones(len(lat)), where=lat > 0), 0.0, 1.0).min())
    room = dur - s0 * lat
    ok = (room > 0) & (x0 > 0)
    if not ok.any():
        return net
    bw = link.bandwidth * float((x0[ok] / room[ok]).max())  # x0 scales as 1 / bandwidth
    return dataclasses.replace(net, intra=dataclasses.replace(link, bandwidth=max(bw, link.bandwidth)))


def traced_algorithm(c) -> str:
    """The all-reduce algorithm the trace's collectives ran ("ring" or "tree", from the NCCL kernel
    names; "ring", NCCL's usual choice, where they do not say). The trace's own network takes it;
    ``algorithm=`` sets the new one only (it was applied to both, so ``algorithm=tree`` on a RING trace
    changed nothing at the traced size)."""
    ar = c.op == Op.ALL_REDUCE
    tree = int(np.count_nonzero(ar & (c.algo == Algo.TREE)))
    return "tree" if tree > int(np.count_nonzero(ar & (c.algo == Algo.RING))) else "ring"


def _own_link(p: dict) -> dict:
    """``p`` with the link of :func:`calibrated`'s starting point (NVLink 2's latency caps the fitted
    one): ``world-size`` and ``buckets`` take no ``bandwidth``/``latency`` (they re-cost on the
    trace's own network; given, they were ignored without a word)."""
    return {**p, "bandwidth": "nvlink2", "latency": ""}


def own_network(graph, c, p: dict) -> tuple[cm.Network, cm.Network, str]:
    """(the trace's own network, the one ``p`` asks for, a note) for ``world-size`` and ``buckets``.

    Where the link the trace ran on is known (:func:`traced_link`), both are costed at nominal
    bandwidths, as ``network`` costs them: that link for the trace, with the parameters'
    ``inter``/``gpus_per_node``/``contention``/``algorithm`` for the new one. Otherwise the trace's
    collectives' best bus bandwidth stands for the link on both sides, and an inter-node link, whose
    nominal bandwidth could not be compared with it, is refused (ranks spread over slower nodes
    predicted faster collectives: nccl_data, 2 ranks on 2 nodes over IB 200, 46.876 -> 36.022 ms).

    Raises:
        NotApplicable: ``inter=`` given and the traced link not known.
    """
    try:
        traced, how = traced_link(graph, c, p)
    except NotApplicable as e:
        if p.get("inter"):
            raise NotApplicable(f"inter= needs the link the trace ran on: {e}") from None
        own = calibrated(c, network_of({**_own_link(p), "algorithm": traced_algorithm(c)}))
        return own, with_changes(own, p), " (on the bandwidth the trace's collectives reached: the link it ran on is not known)"
    own = calibrated(c, traced, fit_bandwidth=False)
    return own, with_changes(own, p), f" (the trace ran on {own.intra.name}, {how})"


def with_changes(own: cm.Network, p: dict) -> cm.Network:
    """The trace's own network ``own`` (:func:`calibrated`) with what the parameters ``p`` change
    besides the link: the inter-node link, GPUs per node, contention and algorithm (``world-size``
    and ``buckets`` re-cost on the traced link; ``inter=`` was dropped with the calibration, so 64
    ranks with ``inter=ib200`` were costed as one node)."""
    given = network_of(_own_link(p))
    return dataclasses.replace(own, inter=given.inter, gpus_per_node=given.gpus_per_node,
                               contention=given.contention, algorithm=given.algorithm)


def _sized(c):
    return (c.size_bytes >= 0) & (c.group_size >= 1) & (c.op != Op.UNKNOWN)


def recost(graph, c, m, new_size, new_n, new_net, old_net):
    """Graph with collectives ``c.node[m]`` re-costed (module docstring); (graph, old ns, new ns)."""
    old_model = cm.collective_ns(c.op[m], c.size_bytes[m], c.group_size[m], old_net)
    new_model = cm.collective_ns(c.op[m], new_size[m], new_n[m], new_net)
    new = np.maximum(c.dur_ns[m] + new_model - old_model, 0)
    mask = np.zeros(graph.n, bool)
    mask[c.node[m]] = True
    dur = graph.dur_ns.copy()
    dur[c.node[m]] = new
    return set_duration(graph, mask, dur[mask]), int(c.dur_ns[m].sum()), int(new.sum())


def _note(c, m, old, new, what):
    left = int((~m).sum())
    s = f"{int(m.sum()):,} collectives re-costed for {what}: {old / 1e6:,.3f} -> {new / 1e6:,.3f} ms"
    return s + (f"; {left:,} others (no size in the trace, or not concerned) left as recorded" if left else "")


def _network(graph, p):
    c = comm_collectives(graph)
    m = _sized(c)
    new_net = network_of(p)
    traced, how = traced_link(graph, c, p)
    old_net = calibrated(c, traced, fit_bandwidth=False)
    what = new_net.intra.name + (f" + {new_net.inter.name}" if new_net.inter else "")
    what += f" (the trace ran on {old_net.intra.name}, {old_net.intra.bandwidth / 1e9:.4g} GB/s, {how}"
    if not p.get("latency"):
        if p["bandwidth"].strip().lower() not in cm.PRESETS:  # a bandwidth as a number: the traced link's kind and hwLat
            new_net = dataclasses.replace(new_net, intra=dataclasses.replace(new_net.intra, latency_ns=traced.intra.latency_ns))
        new_net = keep_latency(new_net, old_net, traced.intra)
        extra = round(new_net.intra.latency_ns - old_net.intra.latency_ns, 3)  # (no float noise in the note)
        what += (f"; per-step latency calibrated from it {old_net.intra.latency_ns / 1e3:.3g} us" +
                 (f", {extra / 1e3:+.3g} us NCCL hwLat of this link over it" if extra else "") + "; latency= sets it")
    else:  # latency= is the per-step latency; the base latency stays the trace's calibrated one (the
        # preset's, uncalibrated, made a lower latency= predict slower collectives: DLRM 100 ns 0.222 ms, 3.4 us 0.476 ms)
        new_net = dataclasses.replace(new_net, base_latency_ns=old_net.base_latency_ns)
    g, old, new = recost(graph, c, m, c.size_bytes, c.group_size, new_net, old_net)
    return g, _note(c, m, old, new, what + ")")


def _traced(text: str) -> str:
    return link_text(text)


_traced.__name__ = "traced: empty (the GPU's board link), or a link preset or a bandwidth with its unit"


def traced_link(graph, c, p) -> tuple[cm.Network, str]:
    """(the network the trace's collectives ran on, one node of its link at nominal bandwidth and
    the link preset's latency; how the link is known).

    ``traced=`` when given, else the board link of the trace's GPU (:data:`daydream.costmodel.gpus.BOARD_LINKS`,
    inferred). Re-costing compares the nominal bandwidths of the two links: comparing the bandwidth
    the trace's collectives achieved (below nominal: protocol overhead, small messages, waits) with
    another link's nominal one predicted faster collectives on the very link they ran on (hta
    nccl_data, A100 SXM: 46.9 -> 24.2 ms on NVLink 3, and faster still on PCIe 3).

    Raises:
        NotApplicable: the GPU is not known or has no board link in the table, or the collectives
            achieved more bus bandwidth than the link allows (they ran on a faster one).
    """
    given = p.get("traced", "")
    if given:
        text, how = given, "given by traced="
    else:
        # the GPU the trace recorded (a gpu-upgrade before this renamed the devices, not the link)
        rec = graph if graph.recorded_devices is None else dataclasses.replace(graph, devices=graph.recorded_devices)
        gpu, dev = source_gpu(rec, "")
        if gpu is None or gpu.name not in BOARD_LINKS:
            who = f"GPU {dev!r}, whose board daydream/costmodel/gpus.py BOARD_LINKS does not list" if dev else "the trace names no GPU"
            raise NotApplicable(f"the link this trace's collectives ran on is not known ({who}): give it as traced=LINK "
                                "(a link preset or a bandwidth, e.g. nvlink3, 25GB/s)")
        text = BOARD_LINKS[gpu.name][0]
        how = f"inferred from the GPU, {gpu.name}; traced= sets it"
    net = network_of({**p, "bandwidth": text, "latency": "", "inter": "", "algorithm": traced_algorithm(c)})
    link = net.intra
    fit = cm.calibrate(c.op, c.size_bytes, c.group_size, c.dur_ns, link)
    if fit is not None and fit.bandwidth > link.bandwidth * (1 + 1e-9):
        raise NotApplicable(f"the trace's collectives reached a bus bandwidth of {fit.bandwidth / 1e9:.4g} GB/s, more than "
                            f"the {link.bandwidth / 1e9:.4g} GB/s of the link it is taken to have run on ({link.name}, {how}): it ran on a "
                            "faster one; give it as network:traced=LINK")
    return net, how


def keep_latency(net: cm.Network, traced: cm.Network, traced_link: cm.Link) -> cm.Network:
    """``net`` with the latencies of ``traced`` (the trace's own network, calibrated), plus the
    difference between ``net``'s link preset and ``traced_link``'s, the nominal link the trace ran
    on (NCCL's hwLat per link type: NVLink 3.4 us, PCI 5.7 us, NET 14 us per step,
    :data:`daydream.costmodel.comm.PRESETS`; a bandwidth given as a number has NVLink's).

    A recorded collective faster than a preset's latency allows shows that the traced system's
    latency is lower than the preset's (:func:`calibrated`); another bandwidth on the same kind of
    link keeps it, another kind of link adds its hwLat difference. Without this, re-costing on the
    traced link (or a faster one) made collectives slower (found by a new user: DLRM rank 7,
    1.746 ms recorded -> 1.911 ms on NVLink 2, 1.891 ms on NVLink 4)."""
    lat = max(traced.intra.latency_ns + net.intra.latency_ns - traced_link.latency_ns, 0.0)
    base = max(traced.base_latency_ns + net.base_latency_ns - cm.BASE_LATENCY_NS, 0.0)
    return dataclasses.replace(net, intra=dataclasses.replace(net.intra, latency_ns=lat), base_latency_ns=base)


def _world(graph, p):
    if p["n"] == 1:  # costs nothing whatever the sizes: none are needed
        return _one_rank(graph, comm_collectives(graph, sized=False))
    c = comm_collectives(graph)
    m = _sized(c) & (c.group_size > 1)
    own, net, said = own_network(graph, c, p)  # the group size changes, and inter= etc.
    n = np.full(len(c), p["n"], np.int64)
    shard = np.isin(c.op, (Op.ALL_GATHER, Op.REDUCE_SCATTER))
    size = np.where(shard, np.rint(c.size_bytes * (p["n"] / np.maximum(c.group_size, 1))).astype(np.int64), c.size_bytes)
    g, old, new = recost(graph, c, m, size, n, net, own)
    return g, _note(c, m, old, new, f"{p['n']} ranks{said}")


def _one_rank(graph, c):
    """``world-size:n=1``: every collective of a group of more than one rank (or of unknown size), sized
    or not, costs 0. A group of one rank has no peers: NCCL moves no bytes between ranks and no rank waits for another
    (what is left is at most a local copy of an out-of-place buffer); the rule ``recorded +
    model_new - model_old`` would keep the recorded waits for peers, about half of the time here."""
    m = c.group_size != 1  # more than one rank, or unknown: a collective of one rank is left as it is
    mask = np.zeros(graph.n, bool)
    mask[c.node[m]] = True
    old = int(c.dur_ns[m].sum())
    left = int((~m).sum())
    note = f"{int(m.sum()):,} collectives cost 0 for 1 rank (no peers: nothing crosses a link, no rank waits): {old / 1e6:,.3f} -> 0.000 ms"
    if left:
        note += f"; {left:,} others (a group of one rank already) left as recorded"
    return set_duration(graph, mask, np.zeros(int(mask.sum()), np.int64)), note


def rebucket(c, m_ar, steps, bucket_bytes, net) -> np.ndarray:
    """New model time (ns) per collective of ``m_ar`` (all-reduces, in node order) when each
    iteration's all-reduce bytes are re-bucketed (module docstring)."""
    out = np.zeros(len(c), np.int64)
    for s in sorted_unique(steps[m_ar]).tolist():  # iterations: a handful
        idx = np.nonzero(m_ar & (steps == s))[0]
        idx = idx[np.argsort(c.node[idx], kind="stable")]
        cum = np.cumsum(c.size_bytes[idx])
        total = int(cum[-1])
        ends = np.minimum(np.arange(1, check_pieces(total, bucket_bytes, "buckets: size") + 1) * bucket_bytes, total)
        sizes = np.diff(np.concatenate([[0], ends]))
        owner = np.minimum(np.searchsorted(cum, ends - 1e-9), len(idx) - 1)
        t = cm.collective_ns(cm.ALL_REDUCE, sizes, c.group_size[idx[owner]], net)
        np.add.at(out, idx[owner], t)
    return out


def _buckets(graph, p):
    c = comm_collectives(graph)
    m = _sized(c) & (c.op == Op.ALL_REDUCE) & (c.group_size > 1)
    if not m.any():
        return graph, "no sized all-reduce to re-bucket; nothing changed"
    own, net, said = own_network(graph, c, p)
    steps = step_of_nodes(graph)[c.node]
    new_model = rebucket(c, m, steps, p["size"] * MIB, net)
    old_model = cm.collective_ns(c.op[m], c.size_bytes[m], c.group_size[m], own)
    new = np.maximum(c.dur_ns[m] + new_model[m] - old_model, 0)
    mask = np.zeros(graph.n, bool)
    mask[c.node[m]] = True
    dur = graph.dur_ns.copy()
    dur[c.node[m]] = new
    return set_duration(graph, mask, dur[mask]), _note(c, m, int(c.dur_ns[m].sum()), int(new.sum()), f"{p['size']:g} MiB buckets{said}")


_TRACED = Param("", "the link the trace ran on: a preset or a bandwidth with its unit; default: the board link of the trace's GPU "
                "(daydream/costmodel/gpus.py BOARD_LINKS), inferred; read by network, and by world-size/buckets with inter=", _traced)

for _name, _summary, _fn, _own in (
    ("network", "re-cost the trace's collectives on another network (bandwidth, latency, inter-node link)", _network,
     {"traced": _TRACED}),
    ("world-size", "re-cost the trace's collectives for N ranks", _world,
     {"n": Param(16, "number of ranks", int, lambda v: 1 <= v <= 1 << 20, "1 to 2^20"), "traced": _TRACED}),
    ("buckets", "re-bucket the trace's all-reduces (DDP bucket size)", _buckets,
     {"size": Param(DDP_BUCKET_MB, "bucket size, MiB (PyTorch DDP bucket_cap_mb default 25)", float, lambda v: v > 0, "> 0"),
      "traced": _TRACED}),
):
    shared = {k: v for k, v in NETWORK_PARAMS.items() if _name == "network" or k not in ("bandwidth", "latency")}
    register(Optimization(name=_name, summary=_summary, apply=_fn, what_if=True, params={**_own, **shared}))
