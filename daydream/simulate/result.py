"""The result of a replay: start, end and blocked time of every task, and what bound each."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: ``Timeline.bound_start`` value of a task that waited for its lane (a priority-scheduled stream
#: busy with another task), not for an edge
BOUND_BY_LANE = -2


@dataclass
class Timeline:
    """Simulated (or recorded) times of every node of a graph, int64 ns, length ``graph.n``.

    ``blocked_ns``: time a blocking CPU call spent waiting (0 elsewhere). The binding records
    (set by a replay, None for a recorded timeline) name, per task, the edge id that set its
    start (``bound_start``; -1: its base plus gap did; :data:`BOUND_BY_LANE`: its lane was busy),
    the edge that set its base (``bound_base``; -1: the trace start ``t0``) and the edge that set
    its end after a wait (``bound_end``; -1: it did not wait).
    """

    start_ns: np.ndarray
    end_ns: np.ndarray
    blocked_ns: np.ndarray
    bound_start: np.ndarray | None = None
    bound_base: np.ndarray | None = None
    bound_end: np.ndarray | None = None
    #: kernels the contention model stretched in this replay (docs/model.md, "Contention between
    #: streams"); -1: the model was off (or a recorded timeline)
    contention_stretched: int = -1

    @property
    def span_end_ns(self) -> int:
        return int(self.end_ns.max()) if len(self.end_ns) else 0


def recorded(graph) -> Timeline:
    """The measured timeline of the graph's nodes, as recorded in the trace."""
    blocked = np.zeros(graph.n, dtype=np.int64)
    b = np.nonzero(graph.blocking)[0]
    if len(b):  # recorded blocked time = recorded duration minus own cost
        blocked[b] = np.maximum(graph.rec_end_ns[b] - graph.rec_start_ns[b] - graph.dur_ns[b], 0)
    return Timeline(graph.rec_start_ns.copy(), graph.rec_end_ns.copy(), blocked)
