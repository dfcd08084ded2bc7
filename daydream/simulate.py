"""Replay a task graph: the simulator of the Daydream paper (section 4.4), rules in docs/model.md.

The simulator reads only task durations, CPU gaps, edges, the trace start and the two per-trace
constants (launch latency ``L`` and GPU gap ``G``). It never reads a GPU task's recorded start:
GPU tasks are placed by their launch, their stream and their cross-stream producers only, and a
blocking call lasts until what it waits for has finished, plus its own cost. A graph with streams
scheduled by priority (:func:`daydream.transform.set_priority`) is replayed event by event by
:mod:`daydream.schedule` instead, which also reads the priorities.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import DaydreamError, TraceFormatError
from .graph import NODE_CPU, TaskGraph, simulation_edges


@dataclass
class Timeline:
    """Simulated (or recorded) times of every node of a graph, int64 ns, length ``graph.n``.

    ``blocked_ns`` is the time a blocking CPU call spent waiting for the GPU (0 elsewhere).
    """

    start_ns: np.ndarray
    end_ns: np.ndarray
    blocked_ns: np.ndarray

    @property
    def span_end_ns(self) -> int:
        return int(self.end_ns.max()) if len(self.end_ns) else 0


def check_topological(graph: TaskGraph, order: np.ndarray) -> None:
    """Raise DaydreamError when ``order`` cannot drive :func:`simulate` on ``graph``.

    Every node must come after its lane predecessor, its launching call and its cross-stream
    producers. A blocking CPU call only needs what it waits for to come before the *next* task on
    its thread: its start is fixed when it is visited, its end when its thread moves on (so a
    blocking copy can wait for the copy it launched itself).
    """
    n = graph.n
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(len(order))
    s, d = simulation_edges(graph.lane_prev, graph.launch, graph.node_kind == NODE_CPU, graph.pred_ptr, graph.pred_idx)
    if len(s) and np.any(rank[s] >= rank[d]):
        bad = int(np.count_nonzero(rank[s] >= rank[d]))
        raise DaydreamError(f"internal: node order violates {bad} graph edges (the graph has a cycle)")


def _is_valid_order(graph: TaskGraph, order: np.ndarray) -> bool:
    """True when ``order`` is a permutation of the nodes that passes :func:`check_topological`
    (and every lane holds only CPU or only GPU tasks): :func:`_simulate_fast` can replay it."""
    n = graph.n
    if len(order) != n:
        return False
    if n == 0:
        return True
    o = np.asarray(order)
    if o.dtype.kind not in "iu" or o.min() < 0 or o.max() >= n:
        return False
    seen = np.zeros(n, dtype=bool)
    seen[o] = True
    if not seen.all():
        return False
    lp = graph.lane_prev
    has = lp >= 0
    is_cpu = graph.node_kind == NODE_CPU
    if np.any(is_cpu[lp[has]] != is_cpu[has]):  # a lane mixing CPU and GPU tasks
        return False
    try:
        check_topological(graph, o)
    except DaydreamError:
        return False
    return True


def simulate(graph: TaskGraph, order: np.ndarray | None = None) -> Timeline:
    """Replay ``graph``; nodes are visited in ``order`` (default ``graph.order``), which must
    satisfy :func:`check_topological`.

    Returns:
        Timeline with one start/end per node (ns on the trace clock).

    Raises:
        DaydreamError: ``order`` visits a node before something it depends on.
        TraceFormatError: a replayed time does not fit in int64 ns (damaged timestamps).
    """
    if order is None:
        order = graph.order
    if graph.annotations.get("priority_lanes"):
        from .schedule import simulate_events  # a lane scheduled by priority: event-driven replay

        return simulate_events(graph)
    try:
        if not _is_valid_order(graph, order):
            # the checked replay says which dependency the order breaks (or replays an order that
            # visits a launch after its kernel exactly as it always did)
            return _simulate_checked(graph, order)
        return _simulate_fast(graph, order)
    except OverflowError:  # times are Python ints in the loop; int64 when they are stored
        raise TraceFormatError(
            graph.table.meta.source or "the trace", "",
            "the replayed timeline runs past the int64 nanosecond range (about year 2262): "
            "the trace's timestamps or durations are damaged") from None


def _simulate_fast(graph: TaskGraph, order: np.ndarray) -> Timeline:
    """The replay loop for an order already checked by :func:`_is_valid_order`.

    Same arithmetic as :func:`_simulate_checked`, without its per-node state checks: the node
    attributes are permuted into visiting order up front and walked with ``zip``; a blocking call
    is finished when the next task on its thread is visited (the order check guarantees that what
    it waits for is done by then) or at the end. Three virtual nodes remove the branches for
    "no launching call" (ready at t0) and "first task of its lane" (CPU: after t0; GPU: no bound).
    """
    n = graph.n
    t0 = int(graph.t0_ns)
    L = int(graph.launch_latency_ns)
    G = int(graph.gpu_gap_ns)
    V_LAUNCH, V_CPU0, V_GPU0 = n, n + 1, n + 2
    order = np.asarray(order, dtype=np.int64)
    is_cpu = graph.node_kind == NODE_CPU
    blocking = graph.blocking & is_cpu
    ptr = graph.pred_ptr
    has_x = (ptr[1:] > ptr[:-1]) & ~is_cpu
    lane_prev = graph.lane_prev
    has_prev = lane_prev >= 0
    prev_blocking = np.zeros(n, dtype=bool)
    prev_blocking[has_prev] = blocking[lane_prev[has_prev]]
    # per node: 0 GPU task, 1 CPU call (the common cases), 2 GPU task with cross-stream
    # producers, 3 CPU call that is blocking or follows a blocking call
    code = np.where(is_cpu, np.where(blocking | prev_blocking, 3, 1), np.where(has_x, 2, 0)).astype(np.int8)
    prev = np.where(has_prev, lane_prev, np.where(is_cpu, V_CPU0, V_GPU0))
    # one column for what only one side uses: the gap of a CPU call, the launch of a GPU task
    gap_or_launch = np.where(is_cpu, graph.gap_ns, np.where(graph.launch >= 0, graph.launch, V_LAUNCH))
    pidx = graph.pred_idx.tolist()
    ptr_l = ptr.tolist()
    dur_all = graph.dur_ns
    # blocking calls: (awaited tasks, own cost); GPU tasks with producers: the producers
    xp: dict[int, list[int]] = {v: pidx[ptr_l[v] : ptr_l[v + 1]] for v in np.flatnonzero(has_x).tolist()}
    bw: dict[int, tuple[list[int], int]] = {
        v: (pidx[ptr_l[v] : ptr_l[v + 1]], int(dur_all[v])) for v in np.flatnonzero(blocking).tolist()
    }
    start = [0] * (n + 3)
    end = [0] * (n + 3)
    blocked = [0] * n
    start[V_LAUNCH] = t0 - L
    end[V_CPU0] = t0
    end[V_GPU0] = -(1 << 200)  # below any time: a lane's first GPU task is bound by its launch only
    for v, p, c, a, d in zip(
        order.tolist(),
        prev[order].tolist(),
        code[order].tolist(),
        gap_or_launch[order].tolist(),
        dur_all[order].tolist(),
    ):
        if c == 1:  # CPU call: after the previous call on its thread plus the gap (a)
            s = end[p] + a
            start[v] = s
            end[v] = s + d
        elif c == 0:  # GPU task: after its launch (a) and its stream predecessor
            s = start[a] + L
            e = end[p] + G
            if e > s:
                s = e
            start[v] = s
            end[v] = s + d
        elif c == 2:  # GPU task with cross-stream producers
            s = start[a] + L
            e = end[p] + G
            if e > s:
                s = e
            for x in xp[v]:
                e = end[x] + G
                if e > s:
                    s = e
            start[v] = s
            end[v] = s + d
        else:  # CPU call that blocks, or follows a blocking call (finished now: its thread moves on)
            if p in bw:
                xs, own = bw[p]
                w = s_p = start[p]
                for x in xs:
                    if end[x] > w:
                        w = end[x]
                blocked[p] = w - s_p
                end[p] = w + own
            s = end[p] + a
            start[v] = s
            if v not in bw:
                end[v] = s + d
    # blocking calls that are the last task of their thread
    has_next = np.zeros(n, dtype=bool)
    has_next[lane_prev[has_prev]] = True
    for u in np.flatnonzero(blocking & ~has_next).tolist():
        xs, own = bw[u]
        w = s_u = start[u]
        for x in xs:
            if end[x] > w:
                w = end[x]
        blocked[u] = w - s_u
        end[u] = w + own
    return Timeline(
        np.fromiter(start, dtype=np.int64, count=n),
        np.fromiter(end, dtype=np.int64, count=n),
        np.array(blocked, dtype=np.int64),
    )


def _simulate_checked(graph: TaskGraph, order: np.ndarray) -> Timeline:
    """The replay loop with a state check at every node (used for orders that fail the check)."""
    n = graph.n
    t0 = int(graph.t0_ns)
    L = int(graph.launch_latency_ns)
    G = int(graph.gpu_gap_ns)
    # Python lists: element access is several times faster than on numpy arrays in this loop
    is_cpu = (graph.node_kind == NODE_CPU).tolist()
    lane_prev = graph.lane_prev.tolist()
    dur = graph.dur_ns.tolist()
    gap = graph.gap_ns.tolist()
    blocking = graph.blocking.tolist()
    launch = graph.launch.tolist()
    ptr = graph.pred_ptr.tolist()
    pidx = graph.pred_idx.tolist()
    start = [0] * n
    end = [0] * n
    blocked = [0] * n
    state = [0] * n  # 0 not visited, 1 started (blocking call, end pending), 2 done

    def finish(u: int) -> None:
        w = s_u = start[u]
        for i in range(ptr[u], ptr[u + 1]):
            x = pidx[i]
            if state[x] != 2:
                raise DaydreamError("internal: a blocking call's awaited task was not simulated before its thread moved on")
            if end[x] > w:
                w = end[x]
        blocked[u] = w - s_u
        end[u] = w + dur[u]
        state[u] = 2

    for v in np.asarray(order).tolist():
        p = lane_prev[v]
        if p >= 0 and state[p] != 2:
            if state[p] == 1:
                finish(p)
            else:
                raise DaydreamError("internal: node order is not topological (lane predecessor not yet simulated)")
        if is_cpu[v]:
            s = (end[p] if p >= 0 else t0) + gap[v]
            start[v] = s
            if blocking[v]:
                state[v] = 1
                continue
            end[v] = s + dur[v]
        else:
            lch = launch[v]
            s = start[lch] + L if lch >= 0 else t0
            if p >= 0 and end[p] + G > s:
                s = end[p] + G
            for i in range(ptr[v], ptr[v + 1]):
                x = pidx[i]
                if state[x] != 2:
                    raise DaydreamError("internal: a cross-stream producer was not simulated before its consumer")
                if end[x] + G > s:
                    s = end[x] + G
            start[v] = s
            end[v] = s + dur[v]
        state[v] = 2
    for v in range(n):
        if state[v] == 1:
            finish(v)
    return Timeline(np.asarray(start, dtype=np.int64), np.asarray(end, dtype=np.int64), np.asarray(blocked, dtype=np.int64))


def recorded(graph: TaskGraph) -> Timeline:
    """The measured timeline of the graph's nodes, as recorded in the trace."""
    blocked = np.zeros(graph.n, dtype=np.int64)
    b = np.nonzero(graph.blocking)[0]
    if len(b):
        # recorded blocked time = recorded duration minus own cost
        blocked[b] = np.maximum(graph.rec_end_ns[b] - graph.rec_start_ns[b] - graph.dur_ns[b], 0)
    return Timeline(graph.rec_start_ns.copy(), graph.rec_end_ns.copy(), blocked)
