"""Replay a task graph: the simulator of the Daydream paper (section 4.4), rules in docs/model.md.

The simulator reads only task durations (stretched by the contention model when a graph has it
on, :mod:`.stretched_replay`), CPU gaps, edges with their rules
(:mod:`daydream.graph.edges`), the trace start and the two per-trace constants (launch latency
``L`` and GPU gap ``G``). It never reads a GPU task's recorded start. A graph with streams
scheduled by priority is replayed event by event (:mod:`.priority`) under the same rules.
Which edge bound each task follows from the replayed times by the same rules (:mod:`.binding`,
:func:`with_bindings`); the critical path walks those records.
"""

from __future__ import annotations

import numpy as np

from ..errors import DaydreamError, InternalError, TraceFormatError
from ..graph import TaskGraph, check_topological, is_valid_order
from .binding import bindings
from .stretched_replay import contended
from .priority import simulate_priority
from .replay import replay
from .result import BOUND_BY_LANE, Timeline, recorded

__all__ = ["BOUND_BY_LANE", "Timeline", "check_topological", "recorded", "simulate", "simulate_events", "with_bindings"]


def simulate(graph: TaskGraph, order: np.ndarray | None = None) -> Timeline:
    """Replay ``graph``; nodes are visited in ``order`` (default ``graph.order``).

    Returns:
        Timeline with one start/end per node (ns on the trace clock); :func:`with_bindings` adds
        which edge bound each task (the critical path asks for it).

    Raises:
        InternalError: ``order`` visits a node before something it depends on (a bug: every
            order daydream makes is topological).
        DaydreamError: the graph has a cycle under its scheduling policy; with the contention
            model on (``graph.contention_factor > 0``), no fixed point within
            :data:`.stretched_replay.MAX_ROUNDS` replays.
        TraceFormatError: a replayed time does not fit in int64 ns (damaged timestamps).
    """
    order = graph.order if order is None else np.asarray(order, dtype=np.int64)
    return _run(graph, order, event_driven=bool(graph.priority_lanes))


def simulate_events(graph: TaskGraph) -> Timeline:
    """Replay ``graph`` event by event (:mod:`.priority`), whatever its policy: equal to
    :func:`simulate` task by task when no lane is scheduled by priority.

    Raises:
        DaydreamError: the dependencies cannot all be satisfied (a cycle).
    """
    return _run(graph, graph.order, event_driven=True)


def _run(graph: TaskGraph, order: np.ndarray, event_driven: bool) -> Timeline:
    try:
        if not event_driven and not (graph.order_valid if order is graph.order else is_valid_order(graph, order)):
            check_topological(graph, order)  # says which dependency the order breaks
            raise InternalError("the visiting order is not a permutation of the tasks")
        if event_driven:
            def run(dur=None):
                return simulate_priority(graph, dur)
        else:
            def run(dur=None):
                return replay(graph, order, dur=dur)
        stretched = -1
        if graph.contention_factor > 0:  # the contention model (docs/model.md): its fixed point
            s, e, b, stretched, _ = contended(graph, run)
        else:
            s, e, b = run()
        start = s if isinstance(s, np.ndarray) else np.fromiter(s, dtype=np.int64, count=graph.n)
        end = e if isinstance(e, np.ndarray) else np.fromiter(e, dtype=np.int64, count=graph.n)
    except OverflowError:  # times are Python ints in the loop; int64 when they are stored
        src = getattr(getattr(graph.table, "meta", None), "source", "") or "the trace"
        raise TraceFormatError(
            src, "", "the replayed timeline runs past the int64 nanosecond range (about year 2262): "
            "the trace's timestamps or durations are damaged") from None
    return Timeline(start, end, np.asarray(b, dtype=np.int64), contention_stretched=stretched)


def with_bindings(graph: TaskGraph, tl: Timeline) -> Timeline:
    """``tl`` with its binding records (which edge set each task's start, base and end; see
    :mod:`.binding`), derived from the replayed times by the same rules the replay used."""
    if tl.bound_start is None:
        tl.bound_start, tl.bound_base, tl.bound_end = bindings(graph, tl.start_ns, tl.end_ns, tl.blocked_ns)
    return tl
