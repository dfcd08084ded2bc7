"""CPU ranges (framework ops, annotations, DataLoader and optimizer ranges) carried into a replay.

A range is not a task of the graph: the replay moves the API calls of its thread, and the range
moves with them. Each boundary ``b`` of a range lies in the CPU gap before some API call ``x`` of
its thread (the first call starting at or after ``b``). Replayed, it stays before ``x`` by its
recorded distance ``x.start - b`` with the host time the what-ifs scaled in between scaled as they
scaled it (``TaskGraph.host_scales``: ``scale-cpu`` inside its ranges, a faster host CPU or a
straggler's work everywhere), and never more than the gap ``x`` now has: so host time added or
removed after a step's start (its DataLoader fetch) stays in the step, a range shrinks with the
calls and gaps a transformation removed, and nested ranges stay nested. After the thread's last
call a boundary keeps its recorded distance to that call's end (the host time in it scaled as the
what-ifs scaled it). This is the rule the report places
ProfilerStep boundaries by (``daydream.report.windows._replayed_boundaries``), vectorized over every range
of a thread. A range on a thread without API calls in the graph
keeps its recorded times.

Used by :mod:`daydream.report.compare` (CPU ranges predicted against measured) and
:mod:`daydream.render.chrome_trace` (the ranges drawn on the baseline and the prediction).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..util.arrays import sorted_unique
from ..events.table import EventTable, Kind
from ..graph import NODE_CPU, TaskGraph
from ..graph.host_clock import clock_of
from ..graph.range_timeline import thread_key
from . import Timeline

#: Kineto categories of RANGE rows that are not drawn or compared: Python stack frames (thousands
#: per step, names carrying object addresses) and GPU-side annotations.
SKIPPED_RANGE_CATEGORIES = frozenset({"python_function", "gpu_user_annotation"})


class Ranges(NamedTuple):
    """CPU ranges of a table: row ids and their times (int64 ns), shapes (n,)."""

    rows: np.ndarray  #: table rows
    start_ns: np.ndarray
    end_ns: np.ndarray
    carried: int  #: ranges moved with their thread's calls (the others keep their recorded times)


def cpu_range_rows(table: EventTable) -> np.ndarray:
    """Rows of CPU ranges: framework ops (``cpu_op``) and annotation ranges on a CPU thread
    (``user_annotation``, NVTX, DataLoader, ``Optimizer.step``), without Python stack frames and
    GPU annotations (:data:`SKIPPED_RANGE_CATEGORIES`); shape (k,), by start time."""
    m = ((table.kind == Kind.CPU_OP) | (table.kind == Kind.RANGE)) & (table.tid >= 0) & (table.device < 0)
    m &= table.end_ns >= table.start_ns
    cats = sorted_unique(table.cat_id[m])  # the few categories in use, not every interned name
    skipped = [int(c) for c in cats.tolist() if 0 <= c < len(table.names) and table.names[int(c)] in SKIPPED_RANGE_CATEGORIES]
    if skipped:
        m &= ~np.isin(table.cat_id, skipped)
    rows = np.nonzero(m)[0]
    return rows[np.argsort(table.start_ns[rows], kind="stable")]


def _past_empty_calls(graph: TaskGraph, nodes: np.ndarray, rs: np.ndarray) -> np.ndarray:
    """Per position ``i`` of ``nodes`` (sorted by recorded start ``rs``): the first position ``j >= i``
    that is not a call of no length starting where call ``i`` starts (``len(nodes)`` past the end).

    The answer for ``i`` only reads positions ``i`` up to the end of the run of calls starting at
    ``rs[i]``, so a caller may pass any slice of a thread's calls that ends at such a run's end
    and add the slice's offset: :func:`boundaries` does, so that one boundary (a ProfilerStep's
    end, asked once per step and prediction) costs its run of calls, not the whole thread."""
    n = len(nodes)
    idx = np.arange(n)
    zero = graph.rec_end_ns[nodes] <= rs
    nxt = np.minimum.accumulate(np.where(zero, n, idx)[::-1])[::-1]  # first call of some length from i on
    run_end = np.searchsorted(rs, rs, side="right")  # first call starting later
    return np.minimum(nxt, run_end)


def carry(graph: TaskGraph, tl: Timeline | None, rows: np.ndarray) -> Ranges:
    """Times of the CPU ranges ``rows`` (table rows of ``graph.table``) in the timeline ``tl``
    (a replay of ``graph``); ``tl`` None: the recorded times. Loops over CPU threads, vectorized
    over the ranges of each."""
    t = graph.table
    s = t.start_ns[rows].astype(np.int64)
    e = t.end_ns[rows].astype(np.int64)
    if tl is None or not len(rows):
        return Ranges(rows, s, e, 0)
    s, e = s.copy(), e.copy()
    carried = 0
    cpu_lanes = np.nonzero(~graph.lane_is_gpu)[0]
    keys = graph.lane_keys[cpu_lanes]
    nodes_all = np.nonzero(graph.node_kind == NODE_CPU)[0]
    lane_of = graph.lane[nodes_all]
    for li, (pid, tid) in zip(cpu_lanes.tolist(), keys[:, 1:3].tolist()):
        m = (t.pid[rows] == pid) & (t.tid[rows] == tid)
        if not m.any():
            continue
        nodes = nodes_all[lane_of == li]
        if not len(nodes):
            continue
        nodes = nodes[np.argsort(graph.rec_start_ns[nodes], kind="stable")]
        s[m] = boundaries(graph, tl, nodes, s[m])
        e[m] = np.maximum(boundaries(graph, tl, nodes, e[m], ends=True), s[m])
        carried += int(m.sum())
    return Ranges(rows, s, e, carried)


def boundaries(graph: TaskGraph, tl: Timeline, nodes: np.ndarray, b: np.ndarray, starts: np.ndarray | None = None,
               ends: np.ndarray | bool = False) -> np.ndarray:
    """Replayed places of recorded times ``b`` (shape (k,)) on the thread whose calls are
    ``nodes`` (sorted by recorded start; ``starts``: their recorded starts, when the caller keeps
    them). Also when ``b`` lies after the thread's last call (see the module doc).

    ``ends`` (bool, or one per ``b``): ``b`` ends a range, which holds the calls of no length that
    start at ``b`` (recorded within it): the boundary follows them. A range start holds every call
    starting at it. A range ending with a cudaDeviceSynchronize that had found the GPU idle (0 ns
    recorded) stayed put when a prediction made that call wait (emulator property)."""
    rs = graph.rec_start_ns[nodes] if starts is None else starts
    k = np.searchsorted(rs, b, side="left")
    ends = np.broadcast_to(np.asarray(ends, bool), np.shape(b))
    if ends.any() and len(nodes):
        kk = np.minimum(k, len(nodes) - 1)
        at_b = ends & (k < len(nodes)) & (rs[kk] == b)  # calls start at the range's end: those of no length are in it
        if at_b.any():  # only the run of calls from the first to the last such position: linear per call
            lo = int(kk[at_b].min())
            hi = int(np.searchsorted(rs, rs[kk[at_b]].max(), side="right"))
            past = _past_empty_calls(graph, nodes[lo:hi], rs[lo:hi]) + lo
            k = np.where(at_b, past[np.clip(kk - lo, 0, hi - lo - 1)], k)
    inside = k < len(nodes)
    x = nodes[np.minimum(k, len(nodes) - 1)]
    lead = graph.rec_start_ns[x] - b
    if graph.host_scales:  # host time the what-ifs scaled between b and x, as they scaled it
        lead = clock_of(graph).now(thread_key(graph.pid[x], graph.tid[x]), np.minimum(b, graph.rec_start_ns[x]), graph.rec_start_ns[x])
    before = tl.start_ns[x] - np.clip(lead, 0, graph.gap_ns[x])
    y = nodes[-1]
    tail = b - graph.rec_end_ns[y]
    if graph.host_scales:  # the host time after the thread's last call, as the what-ifs scaled it
        ye = np.full(np.shape(b), graph.rec_end_ns[y], np.int64)
        scaled = clock_of(graph).now(thread_key(np.full(np.shape(b), graph.pid[y]), np.full(np.shape(b), graph.tid[y])), ye,
                                     np.maximum(b, ye))
        tail = np.where(tail > 0, scaled, tail)
    after = tl.end_ns[y] + tail
    return np.where(inside, before, after).astype(np.int64)
