"""The job's critical path: across ranks, through the collectives.

Within a rank it is the single-rank critical path (:mod:`daydream.simulate.critical_path`, the walk back
over the replay's binding records; compiled on big graphs as there). Where a collective's end was bound by its peer-arrival pin
(the rank waited for a peer), the walk leaves the rank: the pin's time is not CPU time of this
rank, and the walk goes on from the collective's start on the rank that arrived last, whose own
charge for the collective is dropped (the transfer was charged once, on the rank the walk came
from). It starts at the task that ends last on the rank with the longest window (the job's step)
and ends at the trace start of the rank where it stops; ``segments`` say which rank each piece of
the path lies on.
"""

from __future__ import annotations

import numpy as np

from ..simulate.critical_path import CAUSES, _Charges, _compiled_walk, _Walk, gpu_relevant  # the single-rank walk, reused as is
from ..report.job_model import JobCriticalPath, Segment
from ..simulate import with_bindings
from .couple import Coupled
from .match import Matching


def _walk(g, tl, v: int, acc: _Charges):
    """The single-rank walk of ``tl`` from node ``v``, by the compiled kernel where
    :func:`daydream.simulate.critical_path.critical_path` uses it (big graphs with numba), else in Python;
    its ns per cause added to ``acc.by_cause``. The path (node ids, last to first)."""
    one = _Charges(None, None, None)  # a walk's own charges (the compiled walk replaces .parts)
    path = _compiled_walk(g, tl, v, one)
    if path is None:
        path = _Walk(g, tl, tl.bound_start.tolist(), tl.bound_base.tolist(), tl.bound_end.tolist(), one).run(v)
    for k, x in one.by_cause.items():
        acc.by_cause[k] = acc.by_cause.get(k, 0) + int(x)
    return path


def job_critical_path(m: Matching, c: Coupled, slowest: int) -> JobCriticalPath:
    """The critical path of the coupled replay ``c``, from rank row ``slowest``'s last task."""
    pin_of = {}  # (row, pin node) -> collective
    for i in range(c.pin.shape[0]):
        for k in np.nonzero(c.pin[i] >= 0)[0].tolist():
            pin_of[(i, int(c.pin[i, k]))] = k
    acc = _Charges(None, None, None)
    segs: list[Segment] = []
    i = slowest
    g, tl = c.graphs[i], with_bindings(c.graphs[i], c.timelines[i])
    v = int(np.argmax(np.where(gpu_relevant(g), tl.end_ns, np.iinfo(np.int64).min)))
    end = int(tl.end_ns[v])
    drop = 0
    for _ in range(c.pin.shape[1] + 1):  # at most one jump per collective
        path = _walk(g, tl, v, acc)
        acc.by_cause["communication"] -= drop
        last = int(path[-1])
        k = pin_of.get((i, last))
        off = int(m.offset_ns[i])
        if k is None:
            segs.append(Segment(int(m.ranks[i]), int(g.t0_ns) - off, end - off, -1))
            break
        acc.by_cause["cpu"] -= int(tl.end_ns[last] - g.t0_ns)  # the pin's gap: waiting, not CPU
        segs.append(Segment(int(m.ranks[i]), int(tl.end_ns[last]) - off, end - off, int(k)))
        i = int(c.last[k])
        g, tl = c.graphs[i], with_bindings(c.graphs[i], c.timelines[i])
        v = int(m.node[i, k])
        drop = int(tl.end_ns[v] - tl.start_ns[v])
        end = int(tl.start_ns[v])
    by = {k: int(acc.by_cause.get(k, 0)) for k in (*CAUSES, *sorted(set(acc.by_cause) - set(CAUSES)))}
    return JobCriticalPath(int(sum(by.values())), by, segs)


def rank_critical_path(c: Coupled, i: int) -> dict[str, int]:
    """Rank row ``i``'s own critical path by cause (ns), from its last task: as the single-rank
    one, except that where it reaches a peer-arrival pin the time before the last peer arrived is
    charged to ``peers`` (not to this rank's CPU)."""
    g, tl = c.graphs[i], with_bindings(c.graphs[i], c.timelines[i])
    acc = _Charges(None, None, None)
    v = int(np.argmax(np.where(gpu_relevant(g), tl.end_ns, np.iinfo(np.int64).min)))
    last = int(_walk(g, tl, v, acc)[-1])
    by = {k: int(x) for k, x in acc.by_cause.items()}
    by["peers"] = 0
    if last in set(c.pin[i][c.pin[i] >= 0].tolist()):
        by["cpu"] -= int(tl.end_ns[last] - g.t0_ns)
        by["peers"] = int(tl.end_ns[last] - g.t0_ns)
    return by
