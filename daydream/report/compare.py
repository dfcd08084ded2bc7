"""``--compare-to AFTER``: a prediction against the measurement of the trace recorded with the
change made for real, quantity by quantity; or, without a prediction, one trace against another.

The rows (:class:`~daydream.report.report_model.CompareRow`), each with this trace's measurement
(``before``), the prediction (``predicted``; without ``--opt`` the measurement of this trace
again, so the error is the difference between the two traces) and AFTER's measurement, and the
error ``predicted - after`` in ns and % of ``after``:

* ``window``: the traced window and each ProfilerStep (paired by order: the N-th step of one
  trace with the N-th of the other), the report's numbers (``measured_ns``, ``predicted_ns``);
* ``GPU busy``: the same windows' GPU busy time (union of GPU task intervals, per device, summed);
* ``critical path``: the window's critical path by cause; a critical path exists only for a
  replay, so both traces' are those of their replays (the report's ``critical_path``);
* ``phase GPU`` / ``phase CPU``: kernels, copies and sets by the phase that launched them, and
  the time of API calls (less blocked time) by phase (mapped traces);
* ``kernel class``: GPU task time by class (:data:`daydream.graph.kernels.CLASSES`);
* ``CPU range``: total time of the CPU ranges of each name (framework ops, annotations,
  emit_nvtx ranges by op: ``aten::mm, seq = 12, op_id = 7`` counts as ``aten::mm``,
  DataLoader, optimizer; :func:`daydream.simulate.carry.cpu_range_rows`), the :data:`TOP_RANGES` names
  with the most time in either trace; the prediction's ranges are carried into its timeline
  (:func:`daydream.simulate.carry.carry`).

All times are sums over threads and streams (ns). Comparing a trace with itself gives zero error
in every row (tests/test_compare.py).

**Unrelated traces are refused** (:func:`check_related`, :class:`~daydream.errors.UsageError`,
exit status 2): AFTER must record the same program with the change made. A change replaces a
part of a program, so most names survive it: two traces are related when, for the kernel names or
for the CPU range names (ops and annotations, emit_nvtx ranges folded by op, ProfilerStep ranges
left out), the names both traces hold are at least as many as those only one holds (Jaccard index
of the distinct names >= :data:`RELATED_MIN_JACCARD`). Either kind suffices: another GPU vendor
or an optimization such as AMP renames the kernels but keeps the ops (bert-small on H100 and
MI300X: kernel names 0.14, CPU range names 1.00), CUDA graphs drop the per-op ranges but keep the
kernels. A kind whose names neither trace holds does not count; traces with no names at all are
not judged.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..util.arrays import sorted_unique
from ..simulate.critical_path import CAUSES
from ..errors import UsageError
from ..events.table import Kind
from ..graph import NODE_CPU, TaskGraph
from ..graph.kernels import CLASSES, kernel_info
from ..mapping.rules import PHASES, nvtx_base_name
from ..simulate.carry import carry, cpu_range_rows
from .report_model import CompareRow, Comparison, Report
from .summary import answer_steps, median, median_step_speedup
from .tables import gpu_time_by_op
from .trust import truncation_note
from ..simulate import Timeline, recorded

#: CPU range names compared (those with the most time in either trace)
TOP_RANGES = 15
GROUPS = ("window", "GPU busy", "critical path", "phase GPU", "phase CPU", "op GPU", "kernel class", "CPU range")
#: ops compared by their GPU time (those with the most GPU time in either trace)
TOP_OPS = 15


#: Relative errors are given only for quantities of at least this share (%) of the other trace's
#: step (its median ProfilerStep, or its window): the project's accuracy target for a step
#: (docs/accuracy.md: 1 %). A quantity under it cannot move the step by more than the target, and its
#: relative error, a ratio of two small numbers (0.04 ms predicted +27,572 % off), says nothing; its
#: error in ms is still given. The floor in ns is derived per comparison (``Comparison.rel_floor_ns``).
REL_FLOOR_PCT = 1.0


def _row(group: str, name: str, before: int, predicted: int, after: int, floor_ns: int = 0) -> CompareRow:
    err = int(predicted) - int(after)
    pct = round(err / after * 100.0, 4) + 0.0 if after > 0 and after >= floor_ns else None
    return CompareRow(group, name, int(before), int(predicted), int(after), err, pct)


def measures(graph: TaskGraph, tl: Timeline, ranges_tl: Timeline | None, ref: TaskGraph | None = None) -> dict[str, dict[str, int]]:
    """Per group (``phase GPU``, ``phase CPU``, ``op GPU``, ``kernel class``, ``CPU range``), ns per
    name in the timeline ``tl`` of ``graph``; CPU ranges carried into ``ranges_tl`` (None: as
    recorded); ``ref``: the baseline a predicted ``graph`` was made from (its tasks keep their ops)."""
    out: dict[str, dict[str, int]] = {}
    cpu = graph.node_kind == NODE_CPU
    dur = (tl.end_ns - tl.start_ns).astype(np.int64)
    own = dur - tl.blocked_ns
    if graph.mapping is not None and graph.n:
        ph = graph.mapping.phase.astype(np.int64)
        ok = ph >= 0
        g = np.bincount(ph[ok & ~cpu], weights=dur[ok & ~cpu], minlength=len(PHASES))
        c = np.bincount(ph[ok & cpu], weights=own[ok & cpu], minlength=len(PHASES))
        out["phase GPU"] = {PHASES[i]: int(g[i]) for i in range(len(PHASES)) if g[i]}
        out["phase CPU"] = {PHASES[i]: int(c[i]) for i in range(len(PHASES)) if c[i]}
    out["op GPU"] = gpu_time_by_op(graph, tl, ref)
    cls = kernel_info(graph).cls.astype(np.int64)
    k = np.bincount(cls[~cpu], weights=dur[~cpu], minlength=len(CLASSES)) if (~cpu).any() else np.zeros(len(CLASSES))
    out["kernel class"] = {CLASSES[i]: int(k[i]) for i in range(len(CLASSES)) if k[i]}
    t = graph.table
    r = carry(graph, ranges_tl, cpu_range_rows(t))
    by_name = np.bincount(t.name_id[r.rows].astype(np.int64), weights=r.end_ns - r.start_ns, minlength=len(t.names)) if len(r.rows) else np.zeros(0)
    ranges: dict[str, int] = defaultdict(int)
    for i in np.nonzero(by_name)[0].tolist():  # distinct names; emit_nvtx ones summed per op
        ranges[nvtx_base_name(t.names[i])] += int(by_name[i])
    out["CPU range"] = dict(ranges)
    return out


#: Least Jaccard index of the kernel names or of the CPU range names for which two traces count
#: as recordings of one program: the shared names at least as many as those of one trace only
#: (a change replaces a part of the program, not most of it). A stated rule, not a fitted value:
#: of the 465 pairs of ../shared/traces, those of one program or job reach 0.83-1.00 in one kind,
#: pairs of different programs at most 0.39.
RELATED_MIN_JACCARD = 0.5


def _names(graph: TaskGraph, ranges: dict[str, int]) -> dict[str, set[str]]:
    """The distinct kernel names of ``graph`` and its CPU range names (``ranges``: measures()'s
    ``CPU range``) without ProfilerStep ranges."""
    k = sorted_unique(graph.name_id[graph.node_kind == int(Kind.KERNEL)]).tolist()
    return {"kernel names": {graph.names[i] for i in k},
            "CPU range names": {x for x in ranges if not x.startswith("ProfilerStep#")}}


def name_overlap(before: dict[str, set[str]], after: dict[str, set[str]]) -> dict[str, float]:
    """Jaccard index |A & B| / |A | B| per kind of names (kinds that both lack are left out)."""
    return {k: len(before[k] & after[k]) / len(before[k] | after[k]) for k in before if before[k] | after[k]}


def check_related(before: Report, after: Report, overlap: dict[str, float]) -> None:
    """Raise :class:`UsageError` (one line) when no kind of names overlaps by
    :data:`RELATED_MIN_JACCARD`: ``after`` is not a recording of ``before``'s program."""
    if not overlap or max(overlap.values()) >= RELATED_MIN_JACCARD:
        return
    shares = ", ".join(f"{k} {v:.2f}" for k, v in overlap.items())
    raise UsageError(f"{after.trace.source}: not a recording of the program of {before.trace.source}: they share few names "
                     f"({shares}; Jaccard index, at least {RELATED_MIN_JACCARD:g} in one is needed); "
                     "--compare-to takes the same program recorded with the change made")


def _window_rows(before: Report, after: Report, notes: list[str], floor: int) -> list[CompareRow]:
    """The traced window and the steps paired by order: time and GPU busy."""
    p = before.predictions[0] if before.predictions else None
    rows = [_row("window", "traced window", before.window.measured_ns, p.window.predicted_ns if p else before.window.measured_ns,
                 after.window.measured_ns, floor)]
    busy = [_row("GPU busy", "traced window", before.window.gpu_busy_measured_ns,
                 p.window.gpu_busy_predicted_ns if p else before.window.gpu_busy_measured_ns, after.window.gpu_busy_measured_ns, floor)]
    pred_steps = {s.name: s for s in p.steps} if p else {}
    n = min(len(before.steps), len(after.steps))
    if len(before.steps) != len(after.steps):
        notes.append(f"{len(before.steps)} ProfilerStep(s) in this trace, {len(after.steps)} in the other: the first {n} paired by order")
    for b, a in zip(before.steps[:n], after.steps[:n]):
        name = b.name if b.name == a.name else f"{b.name} / {a.name}"
        ps = pred_steps.get(b.name)
        rows.append(_row("window", name, b.measured_ns, ps.predicted_ns if ps else b.measured_ns, a.measured_ns, floor))
        busy.append(_row("GPU busy", name, b.gpu_busy_measured_ns, ps.gpu_busy_predicted_ns if ps else b.gpu_busy_measured_ns,
                         a.gpu_busy_measured_ns, floor))
    return rows + busy


def _critical_rows(before: Report, after: Report, floor: int) -> list[CompareRow]:
    p = before.predictions[0] if before.predictions else None
    pred = p.critical_path if p else before.critical_path
    rows = [_row("critical path", "length", before.critical_path.length_ns, pred.length_ns, after.critical_path.length_ns, floor)]
    for c in CAUSES:
        rows.append(_row("critical path", c, before.critical_path.by_cause_ns.get(c, 0), pred.by_cause_ns.get(c, 0),
                         after.critical_path.by_cause_ns.get(c, 0), floor))
    return rows


def _group_rows(mb: dict, mp: dict, ma: dict, floor: int) -> list[CompareRow]:
    """Rows of the per-name groups, names in a fixed order (phases and classes as defined; CPU
    ranges by the larger of the two measurements, the :data:`TOP_RANGES` first; ops by the largest
    of the three GPU times, the :data:`TOP_OPS` first)."""
    rows = []
    for group in GROUPS[3:]:
        b, p, a = mb.get(group, {}), mp.get(group, {}), ma.get(group, {})
        names = set(b) | set(a) | set(p)
        if group == "CPU range":
            order = sorted(names, key=lambda x: (-max(b.get(x, 0), a.get(x, 0)), x))[:TOP_RANGES]
        elif group == "op GPU":
            order = sorted(names, key=lambda x: (-max(b.get(x, 0), p.get(x, 0), a.get(x, 0)), x))[:TOP_OPS]
        else:
            ref = PHASES if group.startswith("phase") else CLASSES
            order = [x for x in ref if x in names]
        rows += [_row(group, x, b.get(x, 0), p.get(x, 0), a.get(x, 0), floor) for x in order]
    return rows


def step_of(steps: list, window_ns: int, field: str = "measured_ns") -> tuple[int, int]:
    """(the median of ``steps``' ``field`` over the answer's steps (:func:`answer_steps`), their
    count), or (``window_ns``, 0) without steps."""
    kept = answer_steps(steps)
    if not kept:
        return int(window_ns), 0
    return int(round(median(getattr(w, field) for w in kept))), len(kept)


def _headline(rb: Report, ra: Report) -> dict:
    """The comparison's first lines: each trace's step (median of its ProfilerSteps when both have
    steps, else the traced windows), the prediction's, and the speed-ups predicted and measured."""
    p = rb.predictions[0] if rb.predictions else None
    both = bool(rb.steps) and bool(ra.steps)
    if both:
        before, n = step_of(rb.steps, rb.window.measured_ns)
        after, m = step_of(ra.steps, ra.window.measured_ns)
        basis = f"median of {n} ProfilerStep{'s' if n != 1 else ''}" + (f" (the other: {m})" if m != n else "")
    else:
        before, after, basis = rb.window.measured_ns, ra.window.measured_ns, "traced window"
    pred, sp = 0, 0.0
    if p is not None:
        if both and len(p.steps) == len(rb.steps):
            kept = {id(w) for w in answer_steps(rb.steps)}
            pred = int(round(median(ps.predicted_ns for w, ps in zip(rb.steps, p.steps) if id(w) in kept)))
            sp = median_step_speedup(rb.steps, p.steps)
        else:
            pred, sp = p.window.predicted_ns, p.window.speedup
    return dict(step_basis=basis, step_before_ns=int(before), step_predicted_ns=int(pred), step_after_ns=int(after),
                speedup_predicted=float(sp), speedup_measured=round(before / after, 4) if after > 0 else 0.0)


def _spec(name: str, params: dict[str, str]) -> str:
    """``name:k=v,...`` with every parameter, as the report's prediction line writes it (an empty
    value, such as gpu-upgrade's ``source=``, included: it means "from the trace")."""
    return name + (":" + ",".join(f"{k}={v}" for k, v in params.items()) if params else "")


def compare(before, after) -> Comparison:
    """``before`` (an analysis: ``report``, ``graph``, and ``predicted_graph``/``predicted`` when
    it made a prediction, as :class:`daydream.analysis.Result`) against ``after`` (the analysis of
    the trace recorded with the change), as a :class:`~daydream.report.report_model.Comparison`."""
    notes: list[str] = []
    rb, ra = before.report, after.report
    g, ga = before.graph, after.graph
    mb = measures(g, recorded(g), None)
    predicted = getattr(before, "predicted_graph", None) is not None and bool(rb.predictions)
    mp = measures(before.predicted_graph, before.predicted, before.predicted, g) if predicted else mb
    ma = measures(ga, recorded(ga), None)
    check_related(rb, ra, name_overlap(_names(g, mb["CPU range"]), _names(ga, ma["CPU range"])))
    head = _headline(rb, ra)
    floor = int(round(head["step_after_ns"] * REL_FLOOR_PCT / 100.0))
    rows = _window_rows(rb, ra, notes, floor) + _critical_rows(rb, ra, floor) + _group_rows(mb, mp, ma, floor)
    if not predicted and rb.not_applicable:
        notes.append("no prediction (" + "; ".join(f"{k}: not applicable" for k in rb.not_applicable) + "): this trace's measurement against the other's")
    if g.mapping is None or ga.mapping is None:
        notes.append("phases compared only where both traces are mapped")
    cut = truncation_note(ga.table) if ga.table is not None else ""
    if cut:  # the measurement the prediction is judged against lost its end
        notes.append(f"the other trace is a salvaged truncated file ({cut.removeprefix('truncated file: ')}): its window and steps "
                     "miss the work recorded after the cut, and the errors above hold that loss")
    elif ra.trust is not None and ra.trust.verdict == "unreliable":
        notes.append(f"the other trace's own replay is unreliable ({ra.trust.reason})")
    spec = " + ".join(_spec(o.name, o.params) for o in rb.predictions[0].optimizations) if predicted else ""
    steps = [abs(r.error_pct or 0.0) for r in rows if r.group == "window" and r.name != "traced window"]
    return Comparison(ra.trace.source, ra.trace.format, spec, rows, abs(rows[0].error_pct or 0.0) + 0.0, max(steps, default=0.0) + 0.0, notes,
                      rel_floor_ns=floor, **head)


def largest_differences(c: Comparison, group: str, k: int = 3) -> list[CompareRow]:
    """The ``k`` rows of ``group`` with the largest |predicted - other| (ns), largest first; rows
    with no difference left out."""
    rows = [r for r in c.rows if r.group == group and r.error_ns != 0]
    return sorted(rows, key=lambda r: (-abs(r.error_ns), r.name))[:k]
