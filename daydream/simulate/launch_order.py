"""Streams in launch order when several threads launch on one stream.

A stream runs its tasks in the order they were launched (``docs/model.md``, rule 4; the emulator:
the order of the launching calls' starts, ties by thread then op). The graph keeps each stream's
*recorded* order, which is that order as long as the threads keep their recorded interleaving. A
prediction that moves one thread's launches past another's changes it: the CUDA stream then runs
them in the new order, while a replay of the recorded order would run a task before one launched
earlier (a worker's launch 1 ns before the main thread's second launch, halved kernels). The read-back
of such a timeline, ordered by launch as CUDA runs it, replayed differently.

:func:`settle` replays, orders each such stream's launched tasks by the replayed start of their
launching call (ties, launches of two threads at one nanosecond, keep the recorded order: which
goes first is a race, and the recorded order is the one the trace saw; the tasks of one graph
launch keep their order), replaces the stream's order edges and replays again, until the order holds (at
most :data:`MAX_ROUNDS` rounds: one on the programs whose synchronizations keep binding to the same
tasks; where they would bind otherwise, which the graph does not follow, the order can swing back,
and :func:`settle` says so). Tasks with no launching call in the trace keep
their places. Streams launched from one thread are never touched (their order is the thread's).
A reordering that would close a dependency cycle is not made (the graph is replayed as it was).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from ..errors import DaydreamError
from ..graph import NODE_CPU, EdgeKind, Origin, TaskGraph, topological_order
from ..graph.queue import requeue
from ..graph.memo import cached
from . import simulate
from .result import Timeline

#: rounds :func:`settle` replays at most (each reorders every stream whose launches moved)
MAX_ROUNDS = 8


def shared_streams(graph: TaskGraph) -> np.ndarray:
    """GPU lanes (ids) with launched tasks from more than one CPU lane (thread), sorted; kept in the
    graph's structure memo (a prediction that changes durations only shares it)."""
    return cached(graph, "launch_order.shared_streams", lambda: _shared_streams(graph))


def _shared_streams(graph: TaskGraph) -> np.ndarray:
    gpu = np.nonzero((graph.node_kind != NODE_CPU) & (graph.launch >= 0))[0]
    if not len(gpu):
        return np.zeros(0, np.int64)
    lane, by = graph.lane[gpu], graph.lane[graph.launch[gpu]]
    n = int(graph.lane.max()) + 1
    lo, hi = np.full(n, n, np.int64), np.full(n, -1, np.int64)
    np.minimum.at(lo, lane, by)
    np.maximum.at(hi, lane, by)
    out = np.nonzero((hi >= 0) & (lo < hi))[0].astype(np.int64)
    return out[~np.isin(out, np.asarray(graph.priority_lanes, np.int64))]


def launch_ordered(graph: TaskGraph, tl: Timeline) -> dict[int, np.ndarray]:
    """Per shared stream whose order differs from its launch order in ``tl``: its tasks in launch order."""
    out = {}
    shared = shared_streams(graph)
    if not len(shared):
        return out
    rank = np.empty(graph.n, np.int64)
    rank[graph.order] = np.arange(graph.n)  # a valid visiting order runs each lane in its order
    on = np.nonzero(np.isin(graph.lane, shared))[0]
    on = on[np.lexsort((rank[on], graph.lane[on]))]
    cut = np.searchsorted(graph.lane[on], shared)
    for lane, nodes in zip(shared.tolist(), np.split(on, cut[1:])):
        la = graph.launch[nodes]
        has = la >= 0
        if has.sum() < 2:
            continue
        cur = np.arange(len(nodes))
        key_t = np.where(has, tl.start_ns[np.maximum(la, 0)], 0)
        sub = np.nonzero(has)[0]  # unlaunched tasks keep their places; the launched fill the others
        o = sub[np.lexsort((cur[sub], key_t[sub]))]  # ties (one nanosecond): the recorded order
        if np.array_equal(o, sub):
            continue
        new = nodes.copy()
        new[sub] = nodes[o]
        out[lane] = new
    return out


def with_stream_order(graph: TaskGraph, lanes: dict[int, np.ndarray]) -> TaskGraph:
    """``graph`` with the order edges of each lane in ``lanes`` (lane id -> its tasks in the new
    order) made again, its launch-queue edges too, and a valid visiting order.

    Raises:
        DaydreamError: the new order closes a dependency cycle.
    """
    moved = np.zeros(graph.n, bool)
    for nodes in lanes.values():
        moved[nodes] = True
    k, dst = graph.edge_kind, graph.edge_dst
    keep = ~((k == EdgeKind.STREAM) & moved[dst])
    src_new = np.concatenate([nodes[:-1] for nodes in lanes.values()])
    dst_new = np.concatenate([nodes[1:] for nodes in lanes.values()])
    g = graph.with_edges(np.concatenate([graph.edge_src[keep], src_new]), np.concatenate([dst[keep], dst_new]),
                         np.concatenate([k[keep], np.full(len(src_new), EdgeKind.STREAM, np.uint8)]),
                         np.concatenate([graph.edge_origin[keep], np.full(len(src_new), Origin.RECORDED, np.uint8)]))
    g = requeue(g)
    return dataclasses.replace(g, order=topological_order(g)).known_valid()


class Settled(NamedTuple):
    """What :func:`settle` gives: the graph and its replay, how many stream reorderings were made,
    and ``unsettled``: "" when every shared stream runs in its replay's launch order, else why not
    (the rounds ran out, or a reordering would close a cycle)."""

    graph: TaskGraph
    timeline: Timeline
    moved: int
    unsettled: str = ""


def settle(graph: TaskGraph, tl: Timeline | None = None) -> Settled:
    """``graph`` with every stream shared by threads in the launch order of its own replay (module
    doc). Where the order does not settle (a synchronize keeps the tasks it was recorded waiting
    for, so a reordering can move the launches back: seen on emulated programs whose syncs then
    bind to other tasks), the last graph, with the reason in ``unsettled``.

    Raises:
        DaydreamError: as :func:`daydream.simulate.simulate`.
    """
    tl = simulate(graph) if tl is None else tl
    if not len(shared_streams(graph)):
        return Settled(graph, tl, 0)
    g, moved = graph, 0
    for _ in range(MAX_ROUNDS):
        lanes = launch_ordered(g, tl)
        if not lanes:
            return Settled(g, tl, moved)
        try:
            g2 = with_stream_order(g, lanes)
        except DaydreamError:
            return Settled(g, tl, moved, "reordering a stream by launch would close a dependency cycle")
        g, tl = g2, simulate(g2)
        moved += len(lanes)
    if launch_ordered(g, tl):
        return Settled(g, tl, moved, f"the launch order of streams several threads launch on did not settle in {MAX_ROUNDS} replays")
    return Settled(g, tl, moved)
