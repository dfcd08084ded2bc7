"""What ``--plot`` draws beyond the report's tables (:class:`~daydream.report.report_model.Pictures`):
the GPU time of the top ops in the baseline replay and in each prediction, and one step of the
baseline replay beside the same step predicted, lane by lane (threads and streams as rows).

Sources: a GPU task's op is its launching op (:func:`daydream.report.tables.gpu_time_by_op`); the
step is the answer's median step (:func:`daydream.report.summary.answer_steps`, the replayed step
whose length is the median; the traced window without steps), its bounds those of
:func:`daydream.report.windows.step_windows` in each timeline (the baseline's and the
prediction's own). A lane's busy time is the union of its tasks' intervals inside the step; CPU
lanes hold API calls and the CPU time between them (the graph's CPU tasks). Intervals closer than
one drawn pixel (:data:`PICTURE_COLUMNS` columns across the step) are merged, so a picture holds at
most a few hundred intervals per lane however big the trace; all ns, offsets from the step's start.
"""

from __future__ import annotations

import numpy as np

from ..graph import TaskGraph
from ..simulate import Timeline
from .report_model import LaneRow, OpBars, Pictures, StepPicture
from .summary import answer_steps
from .tables import NO_OP, gpu_time_by_op
from .windows import step_windows

#: ops drawn (those with the most GPU time in the baseline replay)
TOP_PLOT_OPS = 8
#: lanes drawn (those busiest in the baseline step); the others are counted
MAX_LANES = 12
#: horizontal resolution of the step picture: intervals closer than step / PICTURE_COLUMNS merge
#: (the plot area of daydream.render.svg is 438 px wide)
PICTURE_COLUMNS = 438


def top_ops(graph: TaskGraph, tl: Timeline, k: int = TOP_PLOT_OPS) -> list[OpBars]:
    """The ``k`` ops with the most GPU time in ``tl`` (the baseline replay), "(no op)" left out."""
    by = gpu_time_by_op(graph, tl)
    names = sorted((n for n in by if n != NO_OP), key=lambda n: (-by[n], n))[:k]
    return [OpBars(n, by[n], {}) for n in names]


def add_prediction_ops(ops: list[OpBars], label: str, graph: TaskGraph, tl: Timeline, base: TaskGraph) -> None:
    """Put each op's GPU time in the prediction ``label`` (graph ``graph`` transformed from ``base``,
    timeline ``tl``) into ``ops``; tasks keep their recorded op (:func:`gpu_time_by_op`'s ``ref``)."""
    by = gpu_time_by_op(graph, tl, base)
    for o in ops:
        o.predicted_ns[label] = int(by.get(o.name, 0))


def _step_bounds(graph: TaskGraph, tl: Timeline, pos: int | None) -> tuple[int, int, str]:
    """(start, end, name) of step ``pos`` of ``tl`` (None: the traced window)."""
    if pos is not None:
        sw = step_windows(graph, tl)
        if pos < len(sw):
            w = sw[pos]
            return int(w.replayed_start_ns), int(w.replayed_end_ns), w.name
    return int(tl.start_ns.min()) if graph.n else 0, int(tl.end_ns.max()) if graph.n else 0, "traced window"


def median_step_position(steps: list) -> int | None:
    """Position in ``steps`` (the report's) of the answer's median step (the lower middle of an even
    count); None without steps."""
    kept = answer_steps(steps)
    if not kept:
        return None
    order = sorted(kept, key=lambda w: (w.replayed_ns, w.name))
    mid = order[(len(order) - 1) // 2]
    return next(i for i, w in enumerate(steps) if w is mid)


def _lanes(graph: TaskGraph, tl: Timeline, lo: int, hi: int) -> dict[str, tuple[bool, np.ndarray, np.ndarray]]:
    """Per lane name with work in [lo, hi): (is GPU, merged interval starts, ends) as offsets from lo."""
    s = np.maximum(tl.start_ns, lo)
    e = np.minimum(tl.end_ns, hi)
    m = np.flatnonzero(e > s)
    if not len(m):
        return {}
    px = max((hi - lo) // PICTURE_COLUMNS, 1)
    lane = graph.lane[m].astype(np.int64)
    o = np.lexsort((s[m], lane))
    lane, ss, ee = lane[o], (s[m][o] - lo).astype(np.int64), (e[m][o] - lo).astype(np.int64)
    out = {}
    bounds = np.flatnonzero(np.diff(lane)) + 1
    for a, b in zip(np.r_[0, bounds].tolist(), np.r_[bounds, len(lane)].tolist()):  # one pass per lane (few lanes)
        x, y = ss[a:b], np.maximum.accumulate(ee[a:b])
        new = np.r_[True, x[1:] > y[:-1] + px]  # a gap wider than one column starts a new interval
        starts = x[new]
        ends = y[np.r_[np.flatnonzero(new)[1:] - 1, len(x) - 1]]
        li = int(lane[a])
        out[graph.lanes[li]] = (bool(graph.lane_is_gpu[li]), starts, ends)
    return out


def step_picture(base: TaskGraph, base_tl: Timeline, pred: TaskGraph, pred_tl: Timeline, label: str,
                 pos: int | None) -> StepPicture:
    """One step (position ``pos`` of the report's steps; None: the traced window) of the baseline
    replay and of the prediction ``label``, lane by lane: the :data:`MAX_LANES` lanes busiest in
    either, threads first, then streams, each by name."""
    blo, bhi, name = _step_bounds(base, base_tl, pos)
    plo, phi, _ = _step_bounds(pred, pred_tl, pos)
    b, p = _lanes(base, base_tl, blo, bhi), _lanes(pred, pred_tl, plo, phi)
    busy = {k: max(int((v[2] - v[1]).sum()) for v in (d[k] for d in (b, p) if k in d)) for k in set(b) | set(p)}
    keep = sorted(busy, key=lambda k: (-busy[k], k))[:MAX_LANES]
    gpu = {k: (b.get(k) or p.get(k))[0] for k in keep}
    keep.sort(key=lambda k: (gpu[k], k))

    def pairs(d, k):
        if k not in d:
            return []
        return np.stack([d[k][1], d[k][2]], axis=1).tolist()

    return StepPicture(name, label, bhi - blo, phi - plo, [LaneRow(k, gpu[k], pairs(b, k), pairs(p, k)) for k in keep],
                       len(busy) - len(keep))


def pictures(base: TaskGraph, base_tl: Timeline, steps: list) -> Pictures:
    """The baseline's part: the top ops (predictions are added with :func:`add_prediction_ops`)."""
    return Pictures(top_ops(base, base_tl), None, median_step_position(steps))
