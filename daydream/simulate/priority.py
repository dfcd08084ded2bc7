"""Event-driven replay with a scheduling policy (the paper's "reschedule" primitive, section 5).

The fast replay keeps every lane in its recorded order (threads and CUDA streams are FIFO). An
optimization that changes the *order* in which work runs on a stream, e.g. priority-based
parameter communication (P3), marks the stream as priority-scheduled
(:func:`daydream.transform.set_priority`): its tasks then ignore their stream-order edge and run
as soon as their other in-edges allow, one at a time, the stream picking among the tasks ready
at that moment the one of highest priority (ties: recorded order), ``G`` after the previous one
ended. Every other edge follows the same rules as the fast replay (:mod:`daydream.graph.edges`).

With no priority lane this replay equals the fast one task by task (a property test checks it).
"""

from __future__ import annotations

import heapq

import numpy as np

from ..errors import DaydreamError
from ..graph import Phase, TaskGraph, rule_arrays

_START, _END, _READY, _LANE_FREE = 0, 1, 2, 3
_NEG = -(1 << 200)


class _State:
    """Per-task replay state and the event heap."""

    def __init__(self, graph: TaskGraph):
        n = graph.n
        self.t0 = int(graph.t0_ns)
        self.base = [self.t0] * n
        self.ready = [_NEG] * n
        self.wait_to = [_NEG] * n
        self.start = [-1] * n
        self.end = [-1] * n
        self.blocked = [0] * n
        self.started = [False] * n
        self.heap: list[tuple[int, int, int, int]] = []
        self.seq = 0

    def push(self, t: int, kind: int, v: int) -> None:
        heapq.heappush(self.heap, (t, kind, self.seq, v))
        self.seq += 1


def _dependents(graph: TaskGraph, on_plane: list[bool]):
    """Per task: what its start and its end release ((dst, phase, offset) lists), and per task
    how many start-side and end-side in-edges it waits for. A lane-order edge into a task on a
    priority lane is not a dependency (the lane is a resource there)."""
    n = graph.n
    ra = rule_arrays()
    k, src, dst = graph.edge_kind, graph.edge_src, graph.edge_dst
    use = ~(ra.lane[k] & np.asarray(on_plane, bool)[dst]) if n else np.zeros(0, bool)
    ph = ra.phase[k]
    off = ra.edge_offsets_ns(graph)
    on_start: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
    on_end: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
    need_start = np.bincount(dst[use & (ph != Phase.END)], minlength=n).tolist()
    wait_left = np.bincount(dst[use & (ph == Phase.END)], minlength=n).tolist()
    for u, v, ae, p, o in zip(src[use].tolist(), dst[use].tolist(), ra.anchor_end[k][use].tolist(), ph[use].tolist(), off[use].tolist()):
        (on_end if ae else on_start)[u].append((v, p, o))
    return on_start, on_end, need_start, wait_left


def simulate_priority(graph: TaskGraph, dur: np.ndarray | None = None) -> tuple[list, list, list]:
    """(start, end, blocked) of every task, honouring the graph's priority lanes. ``dur``: the
    durations to replay (int64 (n,), ns), default ``graph.dur_ns``.

    Raises:
        DaydreamError: the dependencies cannot all be satisfied (a cycle).
    """
    n = graph.n
    G = int(graph.gpu_gap_ns)
    plane = set(graph.priority_lanes)
    lane = graph.lane.tolist()
    on_plane = [lane[v] in plane for v in range(n)]
    on_start, on_end, need_start, wait_left = _dependents(graph, on_plane)
    prio = graph.priority.tolist() if graph.priority is not None else [0] * n
    rank = np.empty(n, dtype=np.int64)
    rank[graph.order] = np.arange(n)
    rank = rank.tolist()
    dur, gap = (graph.dur_ns if dur is None else dur).tolist(), graph.gap_ns.tolist()
    st = _State(graph)
    cands: dict[int, list[tuple[int, int, int]]] = {ln: [] for ln in plane}
    lane_free = {ln: st.t0 for ln in plane}
    lane_busy = {ln: False for ln in plane}

    def resolved(v: int) -> None:
        st.push(max(st.base[v] + gap[v], st.ready[v]), _READY if on_plane[v] else _START, v)

    def finish_at(v: int, t: int) -> None:
        w = max(st.wait_to[v], st.start[v])
        st.blocked[v] = w - st.start[v]
        st.push(max(w, t) + dur[v], _END, v)

    def notify(deps, t: int) -> None:
        for w, p, o in deps:
            if p == Phase.END:
                st.wait_to[w] = max(st.wait_to[w], t + o)
                wait_left[w] -= 1
                if wait_left[w] == 0 and st.started[w]:
                    finish_at(w, t)
                continue
            if p == Phase.BASE:
                st.base[w] = max(st.base[w], t + o)
            else:
                st.ready[w] = max(st.ready[w], t + o)
            need_start[w] -= 1
            if need_start[w] == 0:
                resolved(w)

    for v in range(n):
        if need_start[v] == 0:
            resolved(v)
    done = 0
    while st.heap:
        t = st.heap[0][0]
        while st.heap and st.heap[0][0] == t:
            _, ev, _, v = heapq.heappop(st.heap)
            if ev == _START:
                st.start[v], st.started[v] = t, True
                notify(on_start[v], t)
                if wait_left[v] == 0:
                    finish_at(v, t)
            elif ev == _END:
                st.end[v] = t
                done += 1
                if on_plane[v]:
                    lane_busy[lane[v]], lane_free[lane[v]] = False, t + G
                    st.push(t + G, _LANE_FREE, lane[v])
                notify(on_end[v], t)
            elif ev == _READY:
                heapq.heappush(cands[lane[v]], (-prio[v], rank[v], v))
        for ln in plane:  # dispatch idle priority lanes at time t
            if not lane_busy[ln] and cands[ln] and lane_free[ln] <= t:
                _, _, v = heapq.heappop(cands[ln])
                lane_busy[ln] = True
                st.push(t, _START, v)
    if done != n:
        raise DaydreamError("the graph's dependencies cannot all be satisfied (a cycle) under the scheduling policy")
    return st.start, st.end, st.blocked
