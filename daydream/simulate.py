"""Replay a task graph: the simulator of the Daydream paper (section 4.4), rules in docs/model.md.

The simulator reads only task durations, CPU gaps, edges, the trace start and the two per-trace
constants (launch latency ``L`` and GPU gap ``G``). It never reads a GPU task's recorded start:
GPU tasks are placed by their launch, their stream and their cross-stream producers only, and a
blocking call lasts until what it waits for has finished, plus its own cost.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import DaydreamError
from .graph import NODE_CPU, TaskGraph


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
    v = np.arange(n)
    lp = graph.lane_prev >= 0
    la = graph.launch >= 0
    src = [graph.lane_prev[lp], graph.launch[la]]
    dst = [v[lp], v[la]]
    xdst = np.repeat(v, np.diff(graph.pred_ptr))
    xsrc = graph.pred_idx
    cpu_dst = graph.node_kind[xdst] == NODE_CPU
    src.append(xsrc[~cpu_dst])
    dst.append(xdst[~cpu_dst])
    # waits: before the waiting call's lane successor
    lane_next = np.full(n, -1, dtype=np.int64)
    lane_next[graph.lane_prev[lp]] = v[lp]
    nxt = lane_next[xdst[cpu_dst]]
    has = nxt >= 0
    src.append(xsrc[cpu_dst][has])
    dst.append(nxt[has])
    s = np.concatenate(src)
    d = np.concatenate(dst)
    if len(s) and np.any(rank[s] >= rank[d]):
        bad = int(np.count_nonzero(rank[s] >= rank[d]))
        raise DaydreamError(f"internal: node order violates {bad} graph edges (the graph has a cycle)")


def simulate(graph: TaskGraph, order: np.ndarray | None = None) -> Timeline:
    """Replay ``graph``; nodes are visited in ``order`` (default ``graph.order``), which must
    satisfy :func:`check_topological`.

    Returns:
        Timeline with one start/end per node (ns on the trace clock).

    Raises:
        DaydreamError: ``order`` visits a node before something it depends on.
    """
    n = graph.n
    if order is None:
        order = graph.order
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

    for v in order.tolist():
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
