"""The contention model in the replay (docs/model.md, "Contention between streams").

Rule: **a kernel that starts while another stream's kernel of its device is running lasts
``f`` x its duration** (rounded half up, ns; :func:`daydream.graph.contention.stretched_ns`),
``f`` = ``TaskGraph.contention_factor``; decided at its start, so a task's end is still fixed when
it starts. A first-order model: overlap that begins after a kernel started does not slow it. The
Daydream paper measured NCCL ~1.34x slower overlapped with compute (Zhu et al., ATC 2020, sections
6-7); Echo reports compute kernels 4.67 % slower beside communication: the kind of effect ``f``
stands for.

Whether a kernel starts while another runs depends on tasks a topological pass may visit after it
(a kernel on another stream launched later can start earlier), so the replay finds the rule's
fixed point: replay with a stretch set, recompute the set from the replayed times
(:func:`daydream.graph.contention.started_overlapped`), until it does not change. The fixed point
is unique and the iteration reaches it (every duration is fixed by events at or before its start
and edge offsets are >= 0, so each round settles the schedule up to a strictly later time than the
last: the earliest task where two rounds differ moves forward). The fast replay (Python and
compiled tiers) and the event-driven one (priority lanes) are both run this way.
"""

from __future__ import annotations

import numpy as np

from ..errors import DaydreamError
from ..graph import TaskGraph
from ..graph.contention import kernel_lanes, started_overlapped, stretched_ns

#: the most replays one contended replay may take: a limit on the cost, not a model constant (the
#: rounds each development trace took are in docs/accuracy.md)
MAX_ROUNDS = 100


def contended(graph: TaskGraph, run) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """(start, end, blocked, stretched kernels, rounds) of ``graph`` under its contention factor:
    ``run(dur)`` replays with durations ``dur`` (int64 (n,), ns) and gives (start, end, blocked)
    (lists or arrays).

    Raises:
        DaydreamError: no fixed point within :data:`MAX_ROUNDS` replays.
    """
    f = float(graph.contention_factor)
    k, dev, stream = kernel_lanes(graph)
    base = np.asarray(graph.dur_ns, np.int64)
    longer = stretched_ns(base[k], f)
    flags = np.zeros(len(k), bool)
    for rounds in range(1, MAX_ROUNDS + 1):
        dur = base.copy()
        dur[k[flags]] = longer[flags]
        s, e, b = run(dur)
        s_a, e_a = np.asarray(s, np.int64), np.asarray(e, np.int64)
        now = started_overlapped(s_a[k], e_a[k], dev, stream)
        if np.array_equal(now, flags):
            return s_a, e_a, np.asarray(b, np.int64), int(flags.sum()), rounds
        flags = now
    raise DaydreamError(f"the contention model (x{f:g}) found no fixed point in {MAX_ROUNDS} replays "
                        "(docs/model.md, 'Contention between streams'); run with --contention off")
