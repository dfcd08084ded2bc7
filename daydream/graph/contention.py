"""Contention between streams, measured from a trace's own recorded timeline (docs/model.md,
"Contention between streams").

Two kernels on two streams of one GPU share its SMs and memory: each may run slower than alone.
The trace shows it where the same kernel (by name) ran both alone and overlapped by other
streams' kernels: :func:`measure_contention` takes, per kernel name on a device, the ratio of the
median recorded duration of its instances that started while another stream's kernel of the
device was running (:func:`started_overlapped`) to the median of those no other stream's kernel
overlapped at all, and the factor is the lower median of those ratios over the names that have
both. That is the recorded counterpart of the model the replay can apply (docs/model.md,
"Contention between streams"): a kernel that starts while another stream's kernel of its device
runs lasts ``factor`` x its alone time. It also measures how late
collective (NCCL/RCCL) kernels start after what their launch (+ ``L``) and stream predecessor
(+ ``G``) allow, apart for those whose ready time fell while another stream's kernel ran.

The numbers are reported (``docs/accuracy.md``); :func:`with_contention` turns the model on for
a graph (``--contention``), and :mod:`daydream.simulate` then stretches the kernels its replay
starts while another stream's kernel runs (``simulate/stretched_replay.py``).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from ..events.table import Kind
from .kernels import kernel_info
from .model import NODE_CPU, TaskGraph

#: the fewest kernel names with both alone and overlapped-at-start instances for a factor, a limit:
#: the lower median of three ratios is the fewest that one odd name cannot set by itself (what
#: "enough" means here; chosen before looking at any trace)
MIN_CONTENTION_NAMES = 3


@dataclass(frozen=True)
class Contention:
    """What a trace shows of contention between its streams.

    Attributes:
        factor: lower median over ``names`` of (median duration overlapped / median duration
            alone), dimensionless; 0.0 when fewer than :data:`MIN_CONTENTION_NAMES` names have
            both (``reason`` says so).
        names: kernel names (per device) with instances both alone and overlapped at their start.
        alone, overlapped: their instances, alone (no other stream's kernel overlapped them at
            all) and overlapped at their start (another stream's kernel was running when they
            started), over those names.
        kernels: kernels looked at (with a recorded interval, duration > 0).
        comm_late_alone_ns, comm_late_overlapped_ns: median lateness (ns) of collective
            kernels whose ready time found no other stream's kernel running / found one running
            (-1 when there is none); lateness = recorded start - max(launch start + L, stream
            predecessor end + G, other GPU predecessors' ends + G), clamped at 0.
        comm_alone, comm_overlapped: how many collective kernels each median is over.
        reason: "" when a factor was measured, else why not.
    """

    factor: float
    names: int
    alone: int
    overlapped: int
    kernels: int
    comm_late_alone_ns: int = -1
    comm_late_overlapped_ns: int = -1
    comm_alone: int = 0
    comm_overlapped: int = 0
    reason: str = ""

    def describe(self) -> str:
        """One line in words."""
        if self.reason:
            return f"contention not measured: {self.reason}"
        return (f"contention x{self.factor:.3f}: lower median of {self.names:,} kernel names' overlapped / alone median "
                f"durations ({self.overlapped:,} overlapped-at-start and {self.alone:,} alone instances)")


def _covered(a: np.ndarray, b: np.ndarray, us: np.ndarray, ue: np.ndarray) -> np.ndarray:
    """Length (ns) of each interval ``[a, b]`` covered by the union of disjoint sorted intervals
    ``[us, ue]``. Shapes (n,) and (m,)."""
    if not len(us):
        return np.zeros(len(a), np.int64)
    cum = np.concatenate(([0], np.cumsum(ue - us)))

    def upto(x):  # union length in (-inf, x]
        j = np.searchsorted(us, x, side="right") - 1
        jj = np.maximum(j, 0)
        part = np.clip(np.minimum(x, ue[jj]) - us[jj], 0, None)
        return np.where(j >= 0, cum[jj] + part, 0)

    return upto(b) - upto(a)


def _union(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals ``[s, e]`` as disjoint sorted intervals (starts, ends)."""
    if not len(s):
        return s, e
    o = np.argsort(s, kind="stable")
    s, e = s[o], np.maximum.accumulate(e[o])
    new = np.r_[True, s[1:] > e[:-1]]
    starts = s[new]
    ends = np.r_[e[np.flatnonzero(new)[1:] - 1], e[-1]]
    return starts, ends


def other_stream_cover(start: np.ndarray, end: np.ndarray, device: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """Per interval: ns of it covered by intervals of other streams of the same device (the union
    of those, so two overlapping others count once). Shapes (n,); one pass per (device, stream)
    (streams are few)."""
    out = np.zeros(len(start), np.int64)
    for d in np.unique(device).tolist():
        on_d = device == d
        for s in np.unique(stream[on_d]).tolist():
            mine = on_d & (stream == s)
            others = on_d & ~mine
            us, ue = _union(start[others], end[others])
            out[mine] = _covered(start[mine], end[mine], us, ue)
    return out


def started_overlapped(start: np.ndarray, end: np.ndarray, device: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """Per interval (a kernel's ``[start, end)``, ns): whether an interval of another stream of the
    same device was running at its start, ``other.start <= start < other.end`` (an empty
    ``other`` never runs). Shapes (n,) in, bool (n,) out; one pass per (device, stream)."""
    out = np.zeros(len(start), bool)
    run = end > start
    for d in np.unique(device).tolist():
        on_d = device == d
        for s in np.unique(stream[on_d]).tolist():
            mine = on_d & (stream == s)
            us, ue = _union(start[on_d & ~mine & run], end[on_d & ~mine & run])
            if not len(us):
                continue
            t = start[mine]
            j = np.searchsorted(us, t, side="right") - 1
            out[mine] = (j >= 0) & (t < ue[np.maximum(j, 0)])
    return out


def _group_median(key: np.ndarray, val: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct keys, the median of ``val`` per key, as ``np.median``: the mean of the two
    middle values for an even count). Shapes (n,) in, (k,) out; one sort, no loop."""
    o = np.lexsort((val, key))
    k, v = key[o], val[o].astype(np.float64)
    first = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    n = np.diff(np.r_[first, len(k)])
    lo, hi = first + (n - 1) // 2, first + n // 2
    return k[first], (v[lo] + v[hi]) / 2


def contention_factor(dur: np.ndarray, alone: np.ndarray, over: np.ndarray, key: np.ndarray) -> tuple[float, int, int, int]:
    """(factor, names, alone, overlapped) from kernel durations ``dur`` (ns), whether each ran
    ``alone`` (bool: no other stream's kernel overlapped it) or ``over`` (bool: started while
    another stream's kernel ran) and a per-kernel ``key`` (name and device). Shapes (n,). Factor
    0.0 when fewer than :data:`MIN_CONTENTION_NAMES` keys have both."""
    alone = alone & ~over
    over = over & (dur > 0)
    ka, kb = np.unique(key[alone]), np.unique(key[over])
    both = np.intersect1d(ka, kb)
    if len(both) < MIN_CONTENTION_NAMES:
        return 0.0, int(len(both)), 0, 0
    ka_m = _group_median(key[alone], dur[alone])
    kb_m = _group_median(key[over], dur[over])
    ratios = np.sort(kb_m[1][np.searchsorted(kb_m[0], both)] / ka_m[1][np.searchsorted(ka_m[0], both)])
    sel = np.isin(key, both)
    return float(ratios[(len(ratios) - 1) // 2]), int(len(both)), int((sel & alone).sum()), int((sel & over).sum())


def measure_contention(graph: TaskGraph) -> Contention:
    """The :class:`Contention` of ``graph``'s recorded timeline (its kernels' recorded intervals,
    lanes, names, launches, ``L`` and ``G``; not its table)."""
    k = np.flatnonzero((graph.node_kind == Kind.KERNEL) & (graph.rec_end_ns > graph.rec_start_ns))
    if not len(k):
        return Contention(0.0, 0, 0, 0, 0, reason="no kernel with a recorded interval")
    s, e = graph.rec_start_ns[k], graph.rec_end_ns[k]
    dev, stream = graph.lane_keys[graph.lane[k], 2], graph.lane_keys[graph.lane[k], 3]
    cover = other_stream_cover(s, e, dev, stream)
    key = graph.name_id[k].astype(np.int64) * (int(dev.max()) + 2) + (dev + 1)
    f, names, n_alone, n_over = contention_factor(e - s, cover == 0, started_overlapped(s, e, dev, stream), key)
    reason = "" if f > 0 else (f"{names:,} kernel name{'s' * (names != 1)} ran both alone and started while another "
                               f"stream's kernel ran (at least {MIN_CONTENTION_NAMES} needed)")
    late = _comm_lateness(graph, k, s, e, dev, stream)
    return Contention(f, names, n_alone, n_over, len(k), *late, reason=reason)


def _comm_lateness(graph: TaskGraph, k, s, e, dev, stream) -> tuple[int, int, int, int]:
    """(median late alone, median late overlapped, count alone, count overlapped) of the
    collective kernels among ``k``: lateness = start - max(launch + L, stream predecessor + G),
    split by whether another stream's kernel of the device was running at that ready time."""
    comm = kernel_info(graph).is_class("communication")[k]
    la = graph.launch[k]
    use = comm & (la >= 0)
    if not use.any():
        return -1, -1, 0, 0
    v = k[use]
    prev = graph.lane_prev[v]
    ready = graph.rec_start_ns[la[use]] + graph.launch_latency_ns
    ready = np.where(prev >= 0, np.maximum(ready, graph.rec_end_ns[np.maximum(prev, 0)] + graph.gpu_gap_ns), ready)
    # and the GPU predecessors the graph holds (cross-stream waits, graph-launch order): + G
    gpu_src = (graph.node_kind[graph.edge_src] != NODE_CPU) & (graph.edge_src != graph.lane_prev[graph.edge_dst])
    at = np.full(graph.n, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(at, graph.edge_dst[gpu_src], graph.rec_end_ns[graph.edge_src[gpu_src]] + graph.gpu_gap_ns)
    ready = np.maximum(ready, at[v])
    late = np.maximum(s[use] - ready, 0)
    # another stream's kernel running at the ready time: a zero-length probe [ready, ready + 1]
    busy = np.zeros(len(v), bool)
    for d in np.unique(dev[use]).tolist():
        for st in np.unique(stream[use & (dev == d)]).tolist():
            mine = (dev[use] == d) & (stream[use] == st)
            others = (dev == d) & (stream != st)
            us, ue = _union(s[others], e[others])
            busy[mine] = _covered(ready[mine], ready[mine] + 1, us, ue) > 0
    med = [int(np.median(late[m])) if m.any() else -1 for m in (~busy, busy)]
    return med[0], med[1], int((~busy).sum()), int(busy.sum())


def kernel_lanes(graph: TaskGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kernel node ids, their device, their stream): the tasks the contention model stretches
    and the lanes it compares. Shapes (k,)."""
    k = np.flatnonzero(graph.node_kind == Kind.KERNEL)
    return k, graph.lane_keys[graph.lane[k], 2], graph.lane_keys[graph.lane[k], 3]


def stretched_ns(dur: np.ndarray, factor: float) -> np.ndarray:
    """``factor`` x ``dur`` (ns, int64 (n,)) rounded half up: the duration of a kernel that starts
    while another stream's kernel runs (docs/model.md, "Contention between streams")."""
    return np.floor(dur.astype(np.float64) * factor + 0.5).astype(np.int64)


def with_contention(graph: TaskGraph, factor: float, source: str) -> TaskGraph:
    """``graph`` with the contention model on (``graph.contention_factor = factor``, ``source``
    saying where the factor came from): every replay of it and of the graphs what-ifs make from
    it stretches the kernels it starts while another stream's kernel of their device runs
    (:mod:`daydream.simulate.stretched_replay`).

    The recording already holds the stretch: a kernel that started while another stream's kernel
    of its device ran (:func:`started_overlapped` over the recorded intervals) gets the duration
    it would have alone, recorded / ``factor`` rounded half up (ns), so the baseline replay
    stretches it back (exactly, for ``factor >= 1``: ``round(round(f d) / f) = d``). How many
    were so changed is counted (``counts["contention_unstretched"]``).

    Raises:
        ValueError: ``factor`` not finite and > 0.
    """
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"a contention factor is a finite number > 0, not {factor!r}")
    k, dev, stream = kernel_lanes(graph)
    s, e = graph.rec_start_ns[k], graph.rec_end_ns[k]
    was = started_overlapped(s, e, dev, stream)
    dur = graph.dur_ns.copy()
    kk = k[was]
    dur[kk] = np.floor(dur[kk].astype(np.float64) / factor + 0.5).astype(np.int64)
    counts = copy.copy(graph.counts)  # a Counts keeps its ``missing`` (the links the trust line lists)
    counts["contention_unstretched"] = int(was.sum())
    return dataclasses.replace(graph, dur_ns=dur, counts=counts, contention_factor=float(factor), contention_source=source)
