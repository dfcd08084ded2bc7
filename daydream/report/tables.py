"""The tables the peer tools have (HTA, TraceLens, ``nsys stats``), from the recorded trace: kernels
(by name and launching op), framework ops, CUDA API calls, and collectives by kind and size.

Every time here is recorded (measured) ns, as the peers give them, not replayed. Computed columnar
(one ``np.unique`` / ``bincount`` pass per table); rendered by :mod:`daydream.render.table_text` (text
and CSV) and carried whole in ``--json`` (:class:`Tables`).

Sources of the definitions: a kernel's launching op is the innermost framework op (Kineto
``cpu_op``) enclosing its launch call on the launching thread (TraceLens' "parent op" and HTA's
kernel-to-op correlation take the op that encloses the launch); an op's self time is the time it is
the innermost op of its thread (HTA's ``cpu_op`` exclusive time); the bus bandwidth of a collective
is nccl-tests' ``busbw`` (docs/distributed.md); a collective's overlap with compute is the share of
its time during which a non-communication kernel of the same GPU runs.
"""

from __future__ import annotations

import msgspec
import numpy as np

from ..events.table import Kind
from ..graph import NODE_CPU, TaskGraph
from ..graph.collectives import OP_LABELS, Op, find_collectives
from ..graph.kernels import CLASSES, kernel_info
from ..graph.memo import cached
from ..mapping.rules import nvtx_base_name
from ..simulate.carry import cpu_range_rows
from ..graph.range_timeline import labelled_timeline, split_by_range, thread_key
from ..simulate import Timeline
from ..simulate.critical_path import communication_mask
from ..util.arrays import unique_inverse

#: the op a GPU task without a launching op (no enclosing ``cpu_op``, or no launch call) is listed under
NO_OP = "(no op)"


class KernelRow(msgspec.Struct, forbid_unknown_fields=True):
    """GPU tasks of one name launched from one op (recorded ns)."""

    name: str
    op: str  #: the innermost framework op enclosing the launch call, or NO_OP
    cls: str  #: kernel class (daydream.graph.kernels.CLASSES; copies and sets by their kind)
    calls: int
    total_ns: int
    mean_ns: int
    min_ns: int
    max_ns: int
    gpu_pct: float  #: share of all GPU task time of the trace (summed over devices), %


class OpRow(msgspec.Struct, forbid_unknown_fields=True):
    """Framework ops (Kineto ``cpu_op``) of one name, over all threads (recorded ns)."""

    name: str
    calls: int
    cpu_total_ns: int  #: wall time of the calls (a call nested in one of the same name counted in both)
    cpu_self_ns: int  #: time during which a call of this name is the innermost op of its thread
    gpu_ns: int  #: GPU time of the tasks it launched (as their innermost enclosing op)
    launches: int  #: GPU tasks it launched


class ApiRow(msgspec.Struct, forbid_unknown_fields=True):
    """CUDA/HIP runtime and driver calls of one name, over all threads (recorded ns)."""

    name: str
    calls: int
    total_ns: int
    mean_ns: int
    min_ns: int
    max_ns: int
    pct: float  #: share of all API call time, %


class CommRow(msgspec.Struct, forbid_unknown_fields=True):
    """Collectives of one kind and one message size (nccl-tests' ``S``; -1 unknown)."""

    op: str
    size_bytes: int
    count: int
    total_ns: int
    busbw_median_gbps: float | None  #: None where the size or group size is unknown
    overlap_pct: float  #: share of their time during which a non-communication kernel of the same GPU runs, %


class Tables(msgspec.Struct, forbid_unknown_fields=True):
    """The peers' tables, whole (the text shows the top rows): sorted by total time, then name."""

    kernels: list[KernelRow] = []
    ops: list[OpRow] = []
    cuda_api: list[ApiRow] = []
    communication: list[CommRow] = []


def _pct(x, total) -> float:
    return float(round(100.0 * float(x) / float(total), 2)) if total > 0 else 0.0


def _group_stats(key: np.ndarray, dur: np.ndarray):
    """(unique keys, calls, total, min, max) of ``dur`` (int64 ns) grouped by ``key``."""
    uk, inv = unique_inverse(key)
    inv = inv.reshape(-1)
    k = len(uk)
    calls = np.bincount(inv, minlength=k)
    tot = np.zeros(k, np.int64)
    np.add.at(tot, inv, dur)
    lo = np.full(k, np.iinfo(np.int64).max, np.int64)
    hi = np.full(k, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(lo, inv, dur)
    np.maximum.at(hi, inv, dur)
    return uk, calls, tot, lo, hi


def _op_timeline(graph: TaskGraph, rows: np.ndarray | None = None):
    """(op rows, the innermost-op timeline of every thread) from the table's ``cpu_op`` rows (or
    the given table ``rows``); of the ``cpu_op`` rows, kept in the graph's structure memo (the
    report's tables and its op labels share it)."""
    if rows is None:
        return cached(graph, "op_timeline", lambda: _op_timeline_of(graph, None))
    return _op_timeline_of(graph, rows)


def _op_timeline_of(graph: TaskGraph, rows: np.ndarray | None):
    t = graph.table
    r = np.flatnonzero((t.kind == Kind.CPU_OP) & (t.end_ns > t.start_ns)) if rows is None else rows[t.end_ns[rows] > t.start_ns[rows]]
    key = thread_key(t.pid[r].astype(np.int64), t.tid[r].astype(np.int64))
    n = len(r)
    rt = labelled_timeline(list(t.names), key, t.start_ns[r], t.end_ns[r], t.name_id[r].astype(np.int64),
                           np.zeros(n, np.int64), np.zeros(n, bool))
    return r, rt


def _launch_labels(graph: TaskGraph, gpu: np.ndarray, rt) -> np.ndarray:
    """Per GPU task of ``gpu`` (node indices), the index into ``rt.labels`` of the innermost op
    enclosing its launch call at the call's recorded start, -1 where none (no launch, no op)."""
    la = graph.launch[gpu]
    has = la >= 0
    op_lab = np.full(len(gpu), -1, np.int64)
    if has.any() and len(rt.lo):
        lv = la[has]
        a = graph.rec_start_ns[lv]
        qi, lab, share = split_by_range(rt, thread_key(graph.pid[lv], graph.tid[lv]), a, a, np.ones(len(lv)))
        hit = (lab >= 0) & (share > 0)
        sub = np.full(len(lv), -1, np.int64)
        sub[qi[hit]] = lab[hit]
        op_lab[has] = sub
    return op_lab


def _op_labels(graph: TaskGraph) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(GPU task nodes, their launching op's index into the labels or -1, the labels: op names);
    kept in the graph's structure memo (they read nodes, launches and recorded times only), so the
    report's, each prediction's and the pictures' op tables of one baseline compute them once."""
    return cached(graph, "op_labels", lambda: _op_labels_of(graph))


def _op_labels_of(graph: TaskGraph) -> tuple[np.ndarray, np.ndarray, list[str]]:
    t = graph.table
    rows = None
    if not (t.kind == Kind.CPU_OP).any():
        rows = cpu_range_rows(t)
    _, rt = _op_timeline(graph, rows)
    gpu = np.flatnonzero(graph.node_kind != NODE_CPU)
    return gpu, _launch_labels(graph, gpu, rt), list(rt.labels)


def gpu_time_by_op(graph: TaskGraph, tl: Timeline, ref: TaskGraph | None = None) -> dict[str, int]:
    """GPU task time (ns, from the timeline ``tl`` of ``graph``: recorded, replayed or predicted)
    by launching op (:class:`KernelRow`'s ``op``: the innermost framework op enclosing the launch
    call, :data:`NO_OP` where none). A trace without ``cpu_op`` rows (Nsight Systems) gives the
    innermost CPU range instead (NVTX: with ``torch.autograd.profiler.emit_nvtx`` the op,
    ``aten::mm, seq = 12, op_id = 7`` counted as ``aten::mm``), so an op matches across formats and
    vendors by its name.

    ``ref``: the baseline graph ``graph`` was transformed from; each GPU task then keeps the op of
    the recorded task it is (by table row), so a what-if that removes or replaces launch calls
    (CUDA graphs) does not move its kernels' time to NO_OP; a task it inserted is under NO_OP."""
    gpu, lab, labels = _op_labels(graph if ref is None else ref)
    if not len(gpu) or graph.n == 0:
        return {}
    if ref is not None:
        src = ref.row[gpu].astype(np.int64)
        o = np.argsort(src, kind="stable")
        src, lab_sorted = src[o], lab[o]
        gpu = np.flatnonzero(graph.node_kind != NODE_CPU)
        rows = graph.row[gpu].astype(np.int64)
        pos = np.searchsorted(src, rows).clip(0, max(len(src) - 1, 0))
        hit = (rows >= 0) & (src[pos] == rows) if len(src) else np.zeros(len(rows), bool)
        lab = np.where(hit, lab_sorted[pos] if len(src) else -1, -1)
    dur = (tl.end_ns - tl.start_ns)[gpu].astype(np.int64)
    tot = np.bincount(lab + 1, weights=dur, minlength=len(labels) + 1)
    out: dict[str, int] = {}
    for i in np.flatnonzero(tot).tolist():  # distinct names (emit_nvtx ones folded per op)
        k = nvtx_base_name(labels[i - 1]) if i else NO_OP
        out[k] = out.get(k, 0) + int(round(tot[i]))
    return out


def _kernel_ops(graph: TaskGraph, gpu: np.ndarray, rt) -> tuple[np.ndarray, list[str]]:
    """(per GPU task of ``gpu``, the index of its launching op into the labels or -1; the labels)
    for the kernel table: the innermost ``cpu_op`` enclosing the launch call (``rt``: the op
    timeline of :func:`_op_timeline`), or, in a trace without ``cpu_op`` rows (Nsight Systems),
    the mapper's op (docs/mapping.md, "Layer path, op": the innermost op-like NVTX range enclosing
    the launch, such as emit_nvtx's or ``--pytorch=autograd-nvtx``'s ``aten::mm, seq = 12, op_id = 7``
    as ``aten::mm``)."""
    if (graph.table.kind == Kind.CPU_OP).any() or graph.mapping is None:
        return _launch_labels(graph, gpu, rt), list(rt.labels)
    return graph.mapping.op_id[gpu].astype(np.int64), list(graph.mapping.labels)


def build_tables(graph: TaskGraph, rec: Timeline) -> Tables:
    """The :class:`Tables` of a graph's recorded timeline ``rec``."""
    t = graph.table
    r_ops, rt = _op_timeline(graph)
    # ---- kernels, by (name, launching op)
    gpu = np.flatnonzero(graph.node_kind != NODE_CPU)
    dur = (rec.end_ns - rec.start_ns)[gpu].astype(np.int64)
    op_lab, labels = _kernel_ops(graph, gpu, rt)
    kernels: list[KernelRow] = []
    if len(gpu):
        cls = kernel_info(graph).cls[gpu].astype(np.int64)
        key = (graph.name_id[gpu].astype(np.int64) * (len(labels) + 1) + (op_lab + 1))
        uk, calls, tot, lo, hi = _group_stats(key, dur)
        first = np.zeros(len(uk), np.int64)
        _, inv = unique_inverse(key)
        first[inv.reshape(-1)[::-1]] = np.arange(len(key))[::-1]
        all_gpu = int(dur.sum())
        for i in np.lexsort((uk, -tot)).tolist():  # one row per (name, op): the table itself
            nid, ol = divmod(int(uk[i]), len(labels) + 1)
            c = int(cls[first[i]])
            kernels.append(KernelRow(graph.names[nid], labels[ol - 1] if ol else NO_OP, CLASSES[c] if c < len(CLASSES) else "other",
                                     int(calls[i]), int(tot[i]), int(tot[i] // calls[i]), int(lo[i]), int(hi[i]), _pct(tot[i], all_gpu)))
    # ---- ops
    ops: list[OpRow] = []
    if len(r_ops):
        nid = t.name_id[r_ops].astype(np.int64)
        uk, calls, tot, _, _ = _group_stats(nid, (t.end_ns - t.start_ns)[r_ops].astype(np.int64))
        at = {int(u): i for i, u in enumerate(uk.tolist())}
        self_ns = np.zeros(len(uk), np.int64)
        seg = np.bincount(rt.label, weights=(rt.hi - rt.lo).astype(np.float64), minlength=len(rt.labels)) if len(rt.lo) else np.zeros(0)
        gpu_ns = np.zeros(len(uk), np.int64)
        launches = np.zeros(len(uk), np.int64)
        by_name = {t.names[u]: i for u, i in at.items()}
        name_to_row = np.array([by_name[x] for x in rt.labels], np.int64)  # one per distinct op name
        if len(seg):
            np.add.at(self_ns, name_to_row, np.rint(seg).astype(np.int64))
        with_op = op_lab >= 0
        if with_op.any():
            np.add.at(gpu_ns, name_to_row[op_lab[with_op]], dur[with_op])
            np.add.at(launches, name_to_row[op_lab[with_op]], 1)
        for i in np.lexsort((uk, -tot)).tolist():
            ops.append(OpRow(t.names[int(uk[i])], int(calls[i]), int(tot[i]), int(self_ns[i]), int(gpu_ns[i]), int(launches[i])))
    # ---- CUDA API
    api: list[ApiRow] = []
    r_api = np.flatnonzero(t.kind == Kind.RUNTIME)
    if len(r_api):
        d = np.maximum(t.end_ns[r_api] - t.start_ns[r_api], 0).astype(np.int64)
        uk, calls, tot, lo, hi = _group_stats(t.name_id[r_api].astype(np.int64), d)
        all_api = int(d.sum())
        for i in np.lexsort((uk, -tot)).tolist():
            api.append(ApiRow(t.names[int(uk[i])], int(calls[i]), int(tot[i]), int(tot[i] // calls[i]), int(lo[i]), int(hi[i]),
                              _pct(tot[i], all_api)))
    return Tables(kernels, ops, api, _comm_rows(graph, rec))


def _comm_rows(graph: TaskGraph, rec: Timeline) -> list[CommRow]:
    """Collectives by kind and size, with their median bus bandwidth and overlap with compute."""
    c = find_collectives(graph)
    if not len(c):
        return []
    over = overlap_ns(graph, rec, c.node)
    dur = (rec.end_ns - rec.start_ns)[c.node].astype(np.int64)
    key = c.op.astype(np.int64) * (1 << 48) + (c.size_bytes + 1)
    uk, inv = unique_inverse(key)
    inv = inv.reshape(-1)
    tot = np.bincount(inv, weights=dur, minlength=len(uk))
    ov = np.bincount(inv, weights=over, minlength=len(uk))
    cnt = np.bincount(inv, minlength=len(uk))
    rows = []
    for i in np.lexsort((uk, -tot)).tolist():  # one row per (kind, size)
        op, size = divmod(int(uk[i]), 1 << 48)
        bw = c.busbw[(inv == i) & np.isfinite(c.busbw)] / 1e9
        rows.append(CommRow(OP_LABELS[Op(op)], size - 1, int(cnt[i]), int(tot[i]), float(np.median(bw)) if len(bw) else None,
                            _pct(ov[i], tot[i])))
    return rows


def overlap_ns(graph: TaskGraph, rec: Timeline, nodes: np.ndarray) -> np.ndarray:
    """Per node of ``nodes`` (GPU tasks): ns of its recorded interval during which a GPU task of
    the same device that is not communication (:func:`communication_mask`) runs."""
    comp = (graph.node_kind != NODE_CPU) & ~communication_mask(graph)
    dev = graph.lane_keys[graph.lane, 2]
    out = np.zeros(len(nodes), np.float64)
    for d in np.unique(dev[nodes]).tolist():  # devices are few
        m = comp & (dev == d)
        s, e = rec.start_ns[m], rec.end_ns[m]
        keep = e > s
        s, e = s[keep], e[keep]
        q = nodes[dev[nodes] == d]
        if not len(s) or not len(q):
            continue
        o = np.argsort(s, kind="stable")
        s, e = s[o], np.maximum.accumulate(e[o])
        new = np.concatenate([[True], s[1:] > e[:-1]])
        blk = np.cumsum(new) - 1
        us = s[new]
        ue = np.zeros(int(blk[-1]) + 1, np.int64)
        np.maximum.at(ue, blk, e)
        cum = np.concatenate([[0], np.cumsum(ue - us)])  # covered ns before each block

        def covered(x):  # covered ns in (-inf, x]
            j = np.searchsorted(us, x, side="right") - 1
            inside = np.where(j >= 0, np.minimum(x, ue[np.maximum(j, 0)]) - us[np.maximum(j, 0)], 0)
            return np.where(j >= 0, cum[np.maximum(j, 0)] + np.maximum(inside, 0), 0)

        out[dev[nodes] == d] = covered(rec.end_ns[q]) - covered(rec.start_ns[q])
    return out
