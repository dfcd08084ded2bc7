"""Event-driven replay with a scheduling policy (the paper's "reschedule" primitive, section 5).

:func:`daydream.simulate.simulate` keeps every lane in its recorded order (threads and CUDA
streams are FIFO). An optimization that changes the *order* in which work is issued on a lane,
e.g. priority-based parameter communication (P3: send the gradients the next forward pass needs
first), marks that GPU lane as priority-scheduled: its tasks then run as soon as their own
dependencies (launch, cross-stream producers) allow, one at a time, the lane picking among the
tasks ready at that moment the one of highest priority (ties: recorded order). Rules are
otherwise those of docs/model.md (``L``, ``G``, gaps, blocking calls).

With no priority lane this replay equals :func:`~daydream.simulate.simulate` task by task (a
property test checks it); it is slower, so ``simulate`` hands over to it only when needed.
"""

from __future__ import annotations

import heapq

import numpy as np

from .errors import DaydreamError
from .graph import NODE_CPU, TaskGraph
from .simulate import Timeline

PRIORITY_KEY = "priority"  #: graph.annotations key: int64 per node, larger runs first
LANES_KEY = "priority_lanes"  #: graph.annotations key: tuple of lane ids scheduled by priority

_START, _END, _READY, _LANE_FREE = 0, 1, 2, 3


def priority_lanes(graph: TaskGraph) -> tuple[int, ...]:
    return tuple(graph.annotations.get(LANES_KEY, ()))


def simulate_events(graph: TaskGraph) -> Timeline:
    """Replay ``graph`` honouring its priority lanes (see module docstring).

    Raises:
        DaydreamError: the dependencies cannot all be satisfied (a cycle).
    """
    n = graph.n
    t0, L, G = int(graph.t0_ns), int(graph.launch_latency_ns), int(graph.gpu_gap_ns)
    plane = set(priority_lanes(graph))
    prio = graph.annotations.get(PRIORITY_KEY)
    prio = prio.tolist() if prio is not None else [0] * n
    lane = graph.lane.tolist()
    on_plane = [lane[v] in plane for v in range(n)]
    is_cpu = (graph.node_kind == NODE_CPU).tolist()
    lane_prev = graph.lane_prev.tolist()
    launch = graph.launch.tolist()
    dur, gap, blocking = graph.dur_ns.tolist(), graph.gap_ns.tolist(), graph.blocking.tolist()
    ptr, idx = graph.pred_ptr.tolist(), graph.pred_idx.tolist()
    rank = np.empty(n, dtype=np.int64)
    rank[graph.order] = np.arange(n)
    rank = rank.tolist()

    # dependents: on start (GPU tasks launched by a call), on end (everything else)
    on_start: list[list[int]] = [[] for _ in range(n)]
    on_end: list[list[int]] = [[] for _ in range(n)]
    need_start = [0] * n  # deps to resolve before the start time is known
    wait_left = [0] * n  # blocking calls: awaited GPU tasks not yet ended
    for v in range(n):
        p = lane_prev[v]
        if p >= 0 and not on_plane[v]:
            on_end[p].append(v)
            need_start[v] += 1
        if launch[v] >= 0:
            on_start[launch[v]].append(v)
            need_start[v] += 1
        for i in range(ptr[v], ptr[v + 1]):
            u = idx[i]
            if is_cpu[v]:
                wait_left[v] += 1
            else:
                need_start[v] += 1
            on_end[u].append(v)

    ready = [t0] * n  # earliest start from resolved dependencies
    for v in range(n):
        if is_cpu[v]:
            ready[v] = t0 + gap[v] if lane_prev[v] < 0 else t0
    start = [-1] * n
    end = [-1] * n
    blocked = [0] * n
    started = [False] * n
    ended = [False] * n
    heap: list[tuple[int, int, int, int]] = []
    seq = 0

    def push(t: int, kind: int, v: int) -> None:
        nonlocal seq
        heapq.heappush(heap, (t, kind, seq, v))
        seq += 1

    cands: dict[int, list[tuple[int, int, int]]] = {ln: [] for ln in plane}  # lane -> heap of (-prio, rank, v)
    lane_free = {ln: t0 for ln in plane}
    lane_busy = {ln: False for ln in plane}

    def resolved(v: int) -> None:
        """All start dependencies of v are known: its start can be scheduled."""
        if on_plane[v]:
            push(ready[v], _READY, v)
        else:
            push(ready[v], _START, v)

    for v in range(n):
        if need_start[v] == 0:
            resolved(v)

    done = 0
    while heap:
        t = heap[0][0]
        while heap and heap[0][0] == t:
            _, kind, _, v = heapq.heappop(heap)
            if kind == _START:
                start[v] = t
                started[v] = True
                for w in on_start[v]:  # GPU tasks launched by v
                    ready[w] = max(ready[w], t + L)
                    need_start[w] -= 1
                    if need_start[w] == 0:
                        resolved(w)
                if is_cpu[v] and blocking[v]:
                    if wait_left[v] == 0:
                        w_end = max([end[idx[i]] for i in range(ptr[v], ptr[v + 1])] + [t])
                        blocked[v] = w_end - t
                        push(w_end + dur[v], _END, v)
                else:
                    push(t + dur[v], _END, v)
            elif kind == _END:
                end[v] = t
                ended[v] = True
                done += 1
                if on_plane[v]:
                    ln = lane[v]
                    lane_busy[ln] = False
                    lane_free[ln] = t + G
                    push(t + G, _LANE_FREE, ln)
                for w in on_end[v]:
                    if is_cpu[w]:
                        if lane_prev[w] == v:  # the next call on v's thread
                            ready[w] = t + gap[w]
                            need_start[w] -= 1
                            if need_start[w] == 0:
                                resolved(w)
                        else:  # v is a GPU task w waits for
                            wait_left[w] -= 1
                            if wait_left[w] == 0 and started[w]:
                                w_end = max([end[idx[i]] for i in range(ptr[w], ptr[w + 1])] + [start[w]])
                                blocked[w] = w_end - start[w]
                                push(max(w_end, t) + dur[w], _END, w)
                    else:
                        ready[w] = max(ready[w], t + G)
                        need_start[w] -= 1
                        if need_start[w] == 0:
                            resolved(w)
            elif kind == _READY:
                heapq.heappush(cands[lane[v]], (-prio[v], rank[v], v))
            # _LANE_FREE: nothing to record; dispatch below
        # dispatch idle priority lanes at time t
        for ln in plane:
            if not lane_busy[ln] and cands[ln] and lane_free[ln] <= t:
                _, _, v = heapq.heappop(cands[ln])
                lane_busy[ln] = True
                push(t, _START, v)
    if done != n:
        raise DaydreamError("the graph's dependencies cannot all be satisfied (a cycle) under the scheduling policy")
    return Timeline(np.asarray(start, dtype=np.int64), np.asarray(end, dtype=np.int64), np.asarray(blocked, dtype=np.int64))
