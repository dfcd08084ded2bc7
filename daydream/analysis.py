"""The facade: table -> graph -> (optimizations) -> simulation -> report, in one call.

    import daydream
    result = daydream.analyze(daydream.load_trace("trace.json.gz"), ["amp", ("fusion", {"reads": 3})])
    print(result.report.predictions[0].window.speedup)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import DaydreamError, NotApplicable, UsageError
from .events.table import EventTable
from .graph import TaskGraph, build_graph
from .graph.contention import measure_contention, with_contention
from .mapping import map_events
from .optimizations import Optimization, check_composition, echo, load_all, parse_spec
from .optimizations.kernel_cost import range_ends, range_words
from .render.chrome_trace import write_timeline
from .report.report_model import AppliedOpt, PredictionRange, Ranked, Report, WaitBound
from .report.make import build_prediction, build_report, contention_note
from .report.pictures import add_prediction_ops, pictures, step_picture
from .report.windows import window_end_ns
from .report.summary import WHATIF_MIN_SPEEDUP, answer_speedup, answer_whatifs, change_summary, median_step_speedup
from .simulate import Timeline, recorded
from .simulate.critical_path import critical_path
from .simulate.launch_order import settle
from .transform import with_latent_waits
from .util import jit
from .util.arrays import small_pages


@dataclass
class Result:
    """Everything one analysis produced: the report, and the graphs and timelines behind it."""

    report: Report
    graph: TaskGraph
    replay: Timeline
    predicted_graph: TaskGraph | None = None
    predicted: Timeline | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    def write_timeline(self, path: str) -> None:
        """Chrome-trace JSON of the prediction beside the baseline (or the baseline alone)."""
        base = (self.graph, self.replay)
        try:
            if self.predicted_graph is not None:
                crit = {0: critical_path(self.predicted_graph, self.predicted)[0], 1: critical_path(*base)[0]}
                write_timeline(path, (self.predicted_graph, self.predicted), base, critical=crit)
            else:
                write_timeline(path, base, critical={0: critical_path(*base)[0]})
        except OSError as e:
            raise UsageError(f"cannot write {path}: {e.strerror or e}") from None


@small_pages  # the what-ifs' graph copies and temporaries (daydream.util.arrays.small_pages)
def apply_all(graph: TaskGraph, opts: list[tuple[Optimization, dict[str, Any]]]) -> tuple[TaskGraph, list[AppliedOpt]]:
    """Apply optimizations in order (each sees the graph the previous one made).

    Raises:
        NotApplicable: one of them does not apply (its message says why; with more than one, it
            starts with the name of the one that does not apply).
    """
    applied = []
    for opt, params in opts:
        try:
            g2, note = opt.apply(graph, params)
        except NotApplicable as e:
            if len(opts) == 1:
                raise
            after = f" (after {' + '.join(a.name for a in applied)})" if applied else ""
            raise NotApplicable(f"{opt.name}{after}: {e}") from e
        applied.append(AppliedOpt(opt.name, echo(params), note, change_summary(graph, g2)))
        graph = g2
    return graph, applied


def resolve_opt(spec) -> tuple[Optimization, dict[str, Any]]:
    """One optimization as (optimization, resolved parameters), from ``"name"``,
    ``"name:p=v,q=w"``, ``("name", {"p": v})`` or an already resolved pair.

    Raises:
        UsageError: unknown optimization or bad parameters. TypeError: another type.
    """
    if isinstance(spec, str):
        return parse_spec(spec)
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], dict):
        name, params = spec
        if isinstance(name, Optimization):
            return name, params
        if isinstance(name, str):
            opt, _ = parse_spec(name)
            return opt, opt.resolve({str(k): str(v) for k, v in params.items()})
    raise TypeError(f"an optimization is 'name', 'name:p=v', ('name', {{'p': v}}) or a parse_spec() result, not {spec!r}")


def analyze(table: EventTable, opts=(), *, rank_all: bool = False, contention: str | float = "off") -> Result:
    """Replay ``table``, apply ``opts`` composed in order (see :func:`resolve_opt` for the
    accepted forms) and predict; with ``rank_all`` also rank every optimization alone.
    ``contention``: the contention model (docs/model.md, "Contention between streams") for the
    replay and every prediction: "off" (default), "measured" (the trace's own factor,
    :func:`daydream.graph.contention.measure_contention`; off, with a warning, where it cannot be
    measured) or a factor > 0.

    Raises:
        TypeError: ``table`` is not an EventTable or an optimization has another form.
        UsageError: unknown optimization, bad parameters, or one given twice; a bad ``contention``.
    """
    if not isinstance(table, EventTable):
        raise TypeError("analyze() takes an EventTable: analyze(load_trace(path), ...)")
    return _analyze(table, [resolve_opt(o) for o in opts], rank_all, contention_arg(contention))


def contention_arg(value: str | float) -> str | float:
    """``--contention``'s value checked: "off", "measured" or a finite factor > 0 (a float).

    Raises:
        UsageError: anything else.
    """
    if isinstance(value, str) and value.strip().lower() in ("off", "measured"):
        return value.strip().lower()
    try:
        f = float(value)
    except (TypeError, ValueError):
        f = float("nan")
    if not (f > 0 and f < float("inf")):
        raise UsageError(f"--contention {value!r}: 'off', 'measured' or a factor > 0 (e.g. 1.34)")
    return f


def with_contention_option(graph: TaskGraph, contention: str | float, warnings: list[str]) -> TaskGraph:
    """``graph`` with the contention model as ``contention`` asks (:func:`contention_arg` values);
    "measured" where the trace shows no factor: ``graph`` unchanged and a line in ``warnings``."""
    if contention == "off":
        return graph
    if contention == "measured":
        c = measure_contention(graph)
        if c.reason:
            warnings.append(f"--contention measured: {c.describe()}; replayed without the contention model")
            return graph
        return with_contention(graph, c.factor, f"measured on this trace: lower median over {c.names:,} kernel names of "
                                                f"{c.overlapped:,} overlapped-at-start / {c.alone:,} alone instances")
    return with_contention(graph, float(contention), f"given: --contention {float(contention):g}")


def _analyze(table: EventTable, opts: list[tuple[Optimization, dict[str, Any]]], rank_all: bool,
             contention: str | float = "off") -> Result:
    """Replay ``table``'s graph, apply ``opts`` (composed in order) and predict; with
    ``rank_all``, predict every registered optimization alone with its defaults and rank them.
    ``contention``: as :func:`analyze` (checked).

    An optimization in ``opts`` that does not apply is reported in ``report.not_applicable`` with
    its reason (and there is no prediction).
    """
    jit.add_workload(len(table))  # small traces never import numba (daydream.util.jit: the workload gate)
    unsettled: list[str] = []
    graph = with_contention_option(build_graph(table, map_events(table)), contention, unsettled)
    graph, tl = _replay(graph, unsettled, "the baseline replay")
    report = build_report(graph, tl, recorded(graph))
    report.graph.contention_stretched = tl.contention_stretched
    report.warnings += unsettled
    result = Result(report, graph, tl)
    report.pictures = pictures(graph, tl, report.steps)
    if opts:
        check_composition(list(opts))
        try:
            g2, applied = apply_all(graph, list(opts))
        except NotApplicable as e:
            names = " + ".join(o.name for o, _ in opts)
            report.not_applicable[names] = str(e)
            return result
        report.warnings += [f"{o.name}: {w}" for o, prm in opts if o.warn is not None for w in o.warn(graph, prm)]
        g2, tl2 = _replay(g2, report.warnings, "the prediction " + " + ".join(o.name for o, _ in opts))
        report.predictions.append(build_prediction(report, g2, tl2, applied))
        applied[-1].note += contention_note(report, g2, tl2)
        report.predictions[-1].wait_bound = wait_bound(graph, g2)
        report.predictions[-1].range = prediction_range(report, g2, report.warnings)
        result.predicted_graph, result.predicted = g2, tl2
        label = "+".join(o.name for o, _ in opts)
        add_prediction_ops(report.pictures.ops, label, g2, tl2, graph)
        report.pictures.step = step_picture(graph, tl, g2, tl2, label, report.pictures.step_position)
    if rank_all:
        rows = []
        best = None  # (speed-up, name, graph, timeline) of the fastest prediction: the step picture's
        for name, opt in load_all().items():
            if opt.what_if:
                continue
            params = {k: p.default for k, p in opt.params.items()}
            try:
                g2, applied = apply_all(graph, [(opt, params)])
            except NotApplicable as e:
                rows.append(Ranked(name, -1, 0.0, str(e)))
                continue
            except DaydreamError as e:  # one optimization's failure (on damaged input) does not end the ranking
                rows.append(Ranked(name, -1, 0.0, f"failed: {e}"))
                continue
            g2, tl2 = _replay(g2, report.warnings, f"--opt all's {name}")
            pred = build_prediction(report, g2, tl2, applied)
            b = wait_bound(graph, g2)
            rows.append(Ranked(name, pred.window.predicted_ns, pred.window.speedup, applied[0].note + contention_note(report, g2, tl2),
                               b.speedup if b else 0.0,
                               median_step_speedup(report.steps, pred.steps),
                               memory=pred.memory.line if pred.memory is not None else "", fits=_fits(pred.memory),
                               by_cause_ns=dict(pred.critical_path.by_cause_ns)))
            add_prediction_ops(report.pictures.ops, name, g2, tl2, graph)
            if report.pictures.step is None and (best is None or (-answer_speedup(rows[-1]), name) < (-best[0], best[1])):
                best = (answer_speedup(rows[-1]), name, g2, tl2)
        rows.sort(key=lambda r: (r.predicted_ns < 0, -answer_speedup(r), r.name))
        report.ranking = rows
        report.not_applicable.update({r.name: r.note for r in rows if r.predicted_ns < 0})
        if best is not None:
            report.pictures.step = step_picture(graph, tl, best[2], best[3], best[1], report.pictures.step_position)
    if report.summary is not None:
        if report.ranking:
            answer_whatifs(report.summary, report.ranking)
        else:
            cheap_whatifs(graph, report)
    return result


def _replay(graph: TaskGraph, warnings: list[str] | None = None, what: str = "") -> tuple[TaskGraph, Timeline]:
    """``graph`` replayed, with every stream that several threads launch on in the launch order of
    that replay (:func:`daydream.simulate.launch_order.settle`), and the replay; where that order
    did not settle, a line in ``warnings`` naming ``what`` was replayed."""
    s = settle(graph)
    if s.unsettled and warnings is not None:
        warnings.append(f"{what}: {s.unsettled}; the replay keeps the last order (a synchronize keeps the tasks it was "
                        "recorded waiting for, docs/model.md, 'A stream shared by threads')")
    return s.graph, s.timeline


def prediction_range(report: Report, g2: TaskGraph, warnings: list[str] | None = None) -> PredictionRange | None:
    """The prediction's range (:class:`~daydream.report.report_model.PredictionRange`) where a
    what-if gave kernels a duration range (``TaskGraph.dur_range``): ``g2`` replayed with every
    ranged kernel at its fast end and at its slow end; the sentence is added to the note of the
    last optimization applied. None where there is none."""
    ends = range_ends(g2)
    if ends is None:
        return None
    fast_g, slow_g, codes = ends
    pred = report.predictions[-1]
    base = pred.window.replayed_ns
    out = []
    for ge, what in ((fast_g, "fast"), (slow_g, "slow")):
        ge, tle = _replay(ge, warnings, f"the prediction's {what} end")
        out.append(build_prediction(report, ge, tle, pred.optimizations).window.predicted_ns)
    fast_ns, slow_ns = min(out), max(out)
    fast, slow = range_words(codes)
    r = PredictionRange(fast_ns, slow_ns, base / max(fast_ns, 1), base / max(slow_ns, 1), fast, slow,
                        int(len(g2.dur_range[0])))
    if pred.optimizations:
        pred.optimizations[-1].note += (f"; range {r.speedup_low:.2f}\u2013{r.speedup_high:.2f}x (fast end: {fast}; "
                                        f"slow end: {slow})")
    return r


def wait_bound(graph: TaskGraph, g2: TaskGraph) -> WaitBound | None:
    """The :class:`~daydream.report.report_model.WaitBound` of the prediction ``g2`` made from ``graph``: both
    replayed with the latent cross-stream waits (:func:`daydream.transform.with_latent_waits`);
    None when the trace has none or the prediction's graph holds none of them."""
    if not graph.latent_waits:
        return None
    try:
        g3, k = with_latent_waits(g2)
        base = _latent_baseline_ns(graph)
    except DaydreamError:  # a transformation that reordered them into a cycle: no bound
        return None
    if not k:
        return None
    g3, tl3 = _replay(g3)
    pred = window_end_ns(g3, tl3) - g3.t0_ns
    return WaitBound(k, base, pred, round(base / pred, 4) if pred > 0 else 0.0)


def _latent_baseline_ns(graph: TaskGraph) -> int:
    """The traced window (ns) of ``graph`` replayed with its latent waits, once per graph (kept beside it)."""
    got = graph.__dict__.get("_latent_window")
    if got is None:
        g1, _ = with_latent_waits(graph)
        g1, tl1 = _replay(g1)
        got = graph.__dict__["_latent_window"] = window_end_ns(g1, tl1) - g1.t0_ns
    return got


#: the optimization that addresses each bound of daydream.report.summary.BOUNDS, predicted for the
#: opening lines when --opt all did not rank them all (one more replay)
ADDRESSES = {"data loading": "dataloader"}


def cheap_whatifs(graph: TaskGraph, report: Report) -> None:
    """The opening answer's what-if without ``--opt all``: the optimization that addresses the
    bound (:data:`ADDRESSES`), predicted alone with its defaults, when it applies."""
    name = ADDRESSES.get(report.summary.answer.bound_by)
    opt = load_all().get(name) if name else None
    if opt is None:
        return
    try:
        g2, applied = apply_all(graph, [(opt, {k: p.default for k, p in opt.params.items()})])
    except NotApplicable:
        return
    g2, tl2 = _replay(g2)
    pred = build_prediction(report, g2, tl2, applied)
    sp = median_step_speedup(report.steps, pred.steps) or pred.window.speedup
    if sp >= WHATIF_MIN_SPEEDUP:
        report.summary.answer.whatifs = {name: sp}


def _fits(mem) -> bool | None:
    """Whether a prediction's memory fits: False where some GPU does not, True where every GPU
    with a known capacity does, None without allocator events or capacities."""
    known = [d.fits for d in (mem.devices if mem is not None else []) if d.device >= 0 and d.fits is not None]
    return None if not known else all(known)
