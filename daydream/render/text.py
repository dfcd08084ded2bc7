"""The terminal rendering of a :class:`~daydream.report.report_model.Report`: plain text, fixed-width tables.

The report is built elsewhere (:mod:`daydream.report.make`; its structs are
:mod:`daydream.report.report_model`); this module only lays it out. The text is a list of sections
separated by one blank line, each rendered by one small function from the report alone. A table is
a list of :class:`Col`: a new column is one more ``Col`` line.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ..simulate.critical_path import CAUSES, CriticalPath
from ..util.display import CUT, terminal_text
from .memory_text import memory_answer_lines, memory_section, prediction_memory_lines
from ..mapping.rules import nvtx_base_name
from ..report.report_model import (
    STARTUP_WORDS,
    TRUNCATED_REASON,
    UNLINKED_WORDS,
    Breakdown,
    Prediction,
    Report,
    Trust,
    requested_not_applicable,
)
from ..report.summary import ANSWER_NAME_MAX, EMPTY_PATH, answer_speedup, answer_steps, median
from .table_text import tables_text
from ..report.compare import largest_differences


def _pct(x: float) -> str:
    return f"{x:.2f}" if abs(x) >= 0.005 else "0.00"


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.3f}"


# ---------------------------------------------------------------- tables ---------------------
@dataclass(frozen=True)
class Col:
    """One column of a fixed-width table: its heading, its width and how a row's cell reads."""

    head: str
    width: int
    cell: Callable[[Any], str]
    left: bool = False  #: left-aligned (the name column); others are right-aligned


def _fit(text: str, col: Col) -> str:
    """``text`` aligned in ``col``; a value wider than its column keeps one blank on the side of
    its neighbour, so wide numbers never run into each other."""
    text = terminal_text(text)  # names from the trace: escapes made visible before aligning
    if len(text) >= col.width:
        return text + " " if col.left else " " + text
    return f"{text:<{col.width}}" if col.left else f"{text:>{col.width}}"


def _table(cols: list[Col], rows: Iterable[Any], *, rule: bool = False, tail: Callable[[Any], str] | None = None) -> list[str]:
    """The heading line (and a rule under it), then one line per row; ``tail`` adds text after a row."""
    head = "  " + "".join(_fit(c.head, c) for c in cols)
    out = [head] + (["  " + "-" * (len(head) - 2)] if rule else [])
    for row in rows:
        out.append("  " + "".join(_fit(c.cell(row), c) for c in cols) + (tail(row) if tail else ""))
    return out


def _ms_col(head: str, width: int, field: str) -> Col:
    return Col(head, width, lambda row: _ms(getattr(row, field)))


_WINDOW_NAME = Col("window", 28, lambda w: w.name[:27], left=True)

WINDOW_COLS = [
    _WINDOW_NAME,
    _ms_col("measured ms", 14, "measured_ns"),
    _ms_col("replayed ms", 14, "replayed_ns"),
    Col("error %", 9, lambda w: _pct(w.error_pct)),
    _ms_col("GPU busy ms", 13, "gpu_busy_measured_ns"),
    _ms_col("GPU idle ms", 13, "gpu_idle_measured_ns"),
    Col("kernels", 9, lambda w: f"{w.kernels:,}"),
]

#: (heading, field of :class:`~daydream.report.report_model.Breakdown`)
BREAKDOWN_FIELDS = [
    ("CPU runtime", "cpu_runtime_ns"),
    ("CPU gaps", "cpu_gap_ns"),
    ("sync wait", "sync_wait_ns"),
    ("kernels", "kernel_ns"),
    ("memcpy", "memcpy_ns"),
    ("memset", "memset_ns"),
]


def _breakdown_col(head: str, field: str) -> Col:
    return Col(head, 13, lambda w: _ms(getattr(w.breakdown, field)))


BREAKDOWN_COLS = [_WINDOW_NAME] + [_breakdown_col(h, f) for h, f in BREAKDOWN_FIELDS]

LAYER_COLS = [
    Col("top layers by GPU time", 60, lambda p: p.name if len(p.name) <= 58 else "..." + p.name[-55:], left=True),
    _ms_col("GPU ms", 12, "gpu_ns"),
    _ms_col("CPU ms", 12, "cpu_ns"),
    Col("launches", 10, lambda p: f"{p.launches:,}"),
]

PREDICTION_COLS = [
    _WINDOW_NAME,
    _ms_col("measured ms", 14, "measured_ns"),
    _ms_col("replayed ms", 14, "replayed_ns"),
    _ms_col("predicted ms", 14, "predicted_ns"),
    Col("speed-up", 10, lambda w: f"{w.speedup:.3f}x"),
]


def _phase_cols(total_gpu_ns: int) -> list[Col]:
    return [
        Col("phase", 28, lambda p: p.name, left=True),
        _ms_col("GPU ms", 12, "gpu_ns"),
        Col("GPU %", 8, lambda p: f"{p.gpu_ns / total_gpu_ns * 100:.1f}"),
        _ms_col("CPU ms", 12, "cpu_ns"),
        Col("launches", 10, lambda p: f"{p.launches:,}"),
    ]


# ---------------------------------------------------------------- sections -------------------
def _devices(r: Report) -> str:
    """The devices line: the GPUs with work in the trace, by name when the trace has it."""
    m, gpus = r.trace, r.graph.gpus
    used = [d for d in m.devices if d.id in gpus] or ([] if gpus else list(m.devices))
    if not used and len(gpus) == 1 and len(m.devices) == 1:  # one GPU, one device's properties, ids differ (ROCm: 2 vs 0)
        d = m.devices[0]
        return f"{gpus[0]}: {d.name or 'name not recorded'} (the name of the trace's only device properties, recorded as device {d.id}: ids differ)"
    if not used:
        ids = ", ".join(str(d.id) for d in m.devices)
        other = f" (device properties recorded for {ids} only: ids differ, no name given)" if m.devices else ""
        return ("GPU " + ", ".join(map(str, gpus)) + other) if gpus else "no GPU work"
    dev = ", ".join(f"{d.id}: {d.name or 'name not recorded'}" for d in used)
    more = len(m.devices) - len(used)
    return dev + (f" (+{more} more in the node, without work in the trace)" if more > 0 else "")


def _rank(r: Report) -> str:
    m = r.trace
    if m.rank < 0:
        return ""
    return f"   rank {m.rank}" + (f" of {m.world_size}" if m.world_size > 0 else "")


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'s' * (n != 1)}"


def trust_line(t: Trust | None) -> list[str]:
    """How faithful the baseline replay is: the verdict and the numbers behind it (one line); the
    GPU start error with what it risks when over the target, or what the trace cannot show held
    the GPU (a second line); when not good, the wait the replay misses most (a third)."""
    if t is None:
        return []
    err = f"max step error {_pct(t.max_step_error_pct)} %" if t.steps else f"window error {_pct(t.window_error_pct)} %"
    inferred = sum(t.inferred_edges.values())
    by_kind = ", ".join(f"{k} {v:,}" for k, v in t.inferred_edges.items())
    incomplete = f", {sum(t.incomplete.values()):,} links missing from the trace" if t.incomplete else ""
    return [
        f"  baseline replay: {t.verdict} ({err}, GPU start error p50 {t.gpu_start_error_p50_us:,.0f} us / "
        f"p99 {t.gpu_start_error_p99_us:,.0f} us; {_plural(inferred, 'inferred edge')}{f' ({by_kind})' if inferred else ''}{incomplete})",
        *([f"    {t.reason.split('; ')[0]}"] if t.reason.startswith(TRUNCATED_REASON) else []),
        *([f"    {t.held_line}"] if t.held_line else []),
        *([f"    {t.start_line}"] if t.start_line else []),
        *([f"    {t.cause}"] if t.cause else []),
    ]


def _source(meta) -> str:
    """The file read: a saved table names itself and the trace it was saved from."""
    saved = meta.extra.get("saved_table", "")
    return f"{saved} (saved table of {meta.extra.get('saved_from') or 'a trace'})" if saved else meta.source


def _unreliable(t: Trust | None) -> str:
    """The mark of a prediction made on an unreliable baseline ('' otherwise)."""
    return f"  UNRELIABLE: {t.reason}" if t is not None and t.verdict == "unreliable" else ""


def header_section(r: Report) -> list[str]:
    """What was read, the baseline replay's trust, on which devices, the graph, L and G, and the warnings."""
    g = r.graph
    return [
        f"daydream: {_source(r.trace)}  [{r.trace.format}]",
        *trust_line(r.trust),
        f"  devices: {_devices(r)}{_rank(r)}",
        f"  graph: {g.cpu_tasks:,} CPU tasks on {_plural(g.cpu_lanes, 'thread')}, "
        f"{g.gpu_tasks:,} GPU tasks on {_plural(g.gpu_lanes, 'stream')}; "
        f"edges: {g.launch_edges:,} launch, {g.sync_edges:,} sync, {g.cross_stream_edges:,} cross-stream",
        (f"  launch latency L = {g.launch_latency_ns / 1e3:,.3f} us, GPU gap G = {g.gpu_gap_ns / 1e3:,.3f} us"
         + (f", pageable staging S = {g.staging_latency_ns / 1e3:,.3f} us" if g.staging_latency_ns else "") + " (measured)"
         if g.gpu_tasks else "  launch latency L, GPU gap G: not measured (no GPU task in the trace)"),
        *_contention_line(g),
        *(f"  warning: {w}" for w in r.warnings),
    ]


def _contention_line(g) -> list[str]:
    """The contention model's line when the replay used it (``--contention``)."""
    if not g.contention_applied:
        return []
    return [f"  contention: kernels that start while another stream's kernel runs last x{g.contention_applied:.3f} "
            f"({terminal_text(g.contention_applied_from)}); {g.contention_unstretched:,} recorded kernels taken back to their alone duration, "
            f"{g.contention_stretched:,} stretched by the replay"]


def windows_section(r: Report) -> list[str]:
    """Measured vs replayed time of the traced window, each process and each step."""
    return [
        "  GPU busy/idle: measured, summed over the GPUs of the window; speed-up = replayed / predicted",
        *_table(WINDOW_COLS, [r.window, *r.processes, *r.steps], rule=True, tail=lambda w: f"  ({w.note})" if w.note else ""),
    ]


def breakdown_section(r: Report) -> list[str]:
    """Time by task kind of the traced window and each step, and what no step holds (the window less
    the steps, when the steps do not overlap: e.g. a synchronize after the last step), so that the
    rows add up."""
    rows = [r.window, *r.steps]
    if r.steps:
        rest = {f: getattr(r.window.breakdown, f) - sum(getattr(w.breakdown, f) for w in r.steps) for _, f in BREAKDOWN_FIELDS}
        if all(v >= 0 for v in rest.values()) and any(rest.values()):
            rows.append(_Row("outside the steps", Breakdown(**rest)))
    return ["  time by task kind (replayed, ms; summed over threads and streams)", *_table(BREAKDOWN_COLS, rows)]


class _Row:
    """A table row that is not a window of the report (name and breakdown only)."""

    def __init__(self, name: str, breakdown: Breakdown) -> None:
        self.name, self.breakdown = name, breakdown


def phases_section(r: Report) -> list[str]:
    """Time per phase (mapped traces only)."""
    if not r.phases:
        return []
    return _table(_phase_cols(sum(p.gpu_ns for p in r.phases) or 1), r.phases)


def layers_section(r: Report) -> list[str]:
    """The top layers by GPU time (mapped traces only)."""
    return _table(LAYER_COLS, r.layers) if r.layers else []


def communication_section(r: Report) -> list[str]:
    """The trace's collectives per operation with the bus bandwidth they achieved (nccl-tests)."""
    c = r.communication
    if c is None:
        return []
    head = f"communication: {c.collectives:,} collectives" + (f", {c.without_size:,} without a message size in the trace" if c.without_size else "")
    if c.other_tasks:
        head += (f"; {c.other_tasks:,} other communication tasks (not NCCL/RCCL collectives: symmetric-memory kernels, "
                 "peer-to-peer copies): no size read, not re-costed by the communication what-ifs")
    rows = []
    for o in c.by_op:
        bw = f"busbw median {o.busbw_median_gbps:,.2f} GB/s, best {o.busbw_max_gbps:,.2f} GB/s" if o.busbw_median_gbps is not None else "busbw unknown"
        rows.append(f"  {o.op:<15} {o.count:>7,}  sized {o.sized:>7,}  {o.bytes / 2**20:>10,.1f} MiB  {_ms(o.time_ns):>10} ms  {bw}")
    return [head, *rows]


def critical_path_section(title: str, cp: CriticalPath) -> list[str]:
    """The length of a critical path, its time by cause, and by phase when mapped."""

    def share(c: str) -> float:
        return cp.by_cause_ns.get(c, 0) / cp.length_ns * 100 if cp.length_ns else 0

    causes = ", ".join(f"{c.replace('_', ' ')} {_ms(cp.by_cause_ns.get(c, 0))} ms ({share(c):.0f} %)" for c in CAUSES)
    out = [f"  {title}: {_ms(cp.length_ns)} ms over {cp.tasks:,} tasks", "    " + causes]
    for phase, d in cp.by_phase_ns.items():
        by_cause = ", ".join(f"{c.replace('_', ' ')} {_ms(v)}" for c, v in d.items() if v)
        out.append(f"    {phase:<14}{_ms(sum(d.values())):>12} ms: " + by_cause)
    return out


def _spec(name: str, params: dict[str, str]) -> str:
    """``name:k=v,...`` as the optimization was asked for."""
    return name + (":" + ",".join(f"{k}={v}" for k, v in params.items()) if params else "")


def prediction_section(p: Prediction, trust: Trust | None = None) -> list[str]:
    """One prediction: what was applied, predicted time and speed-up per window, its critical path;
    marked UNRELIABLE when the baseline replay is."""
    return [
        "  prediction: " + " + ".join(_spec(o.name, o.params) for o in p.optimizations) + _unreliable(trust),
        *(line for o in p.optimizations for line in (f"    {o.name}: {o.note}", *([f"      changed: {o.changed}"] if o.changed else []))),
        *([_bound_line(p.wait_bound)] if p.wait_bound is not None else []),
        *(w for line in prediction_memory_lines(p) for w in wrap(line.strip(), "    ", "      ")),
        *_table(PREDICTION_COLS, [p.window, *p.processes, *p.steps], rule=True),
        *critical_path_section("critical path of the prediction", p.critical_path),
    ]


def _bound_line(b) -> str:
    return (f"    bound: with every dependency its cross-stream waits without an event can have ({b.waits:,} edges, a superset), "
            f"traced window {_ms(b.baseline_ns)} -> {_ms(b.predicted_ns)} ms ({b.speedup:.3f}x): the speed-up lies between this and the one below")


def not_applicable_section(name: str, why: str) -> list[str]:
    return [f"  prediction: {name}: not applicable: {why}"]


def ranking_section(r: Report) -> list[str]:
    """``--opt all``: each optimization alone, best first, then those that do not apply."""
    if not r.ranking:
        return []
    by = "its median step (the traced window's beside it)" if any(k.step_speedup > 0 for k in r.ranking) else "the traced window"
    out = [f"  what to try first (each optimization alone, by the predicted speed-up of {by}):" + _unreliable(r.trust)]
    helps = [k for k in r.ranking if k.predicted_ns >= 0 and answer_speedup(k) >= 1.0]
    slower = [k for k in r.ranking if k.predicted_ns >= 0 and answer_speedup(k) < 1.0]
    for i, k in enumerate(helps + slower + [k for k in r.ranking if k.predicted_ns < 0], 1):
        if k in slower and k is slower[0]:
            out.append("  predicted no faster (not something to try):")
        if k.predicted_ns >= 0:
            step = k.step_speedup > 0
            held = abs(k.speedup_bound - k.speedup) >= 0.0005 if k.speedup_bound else False
            low = f" (>= {k.speedup_bound:.3f}x{' window' if step else ''} with the waits held)" if held else ""
            num = f"{i:>3}." if k in helps else "   -"
            tag = "  [DOES NOT FIT in GPU memory]" if k.fits is False else ""
            nums = (f"{k.step_speedup:>8.3f}x step, window {k.speedup:.3f}x {_ms(k.predicted_ns)} ms" if step
                    else f"{k.speedup:>8.3f}x  {_ms(k.predicted_ns):>12} ms")
            out.append(f"  {num} {k.name:<16}{nums}{low}{tag}  {k.note}")
            out += [f"         memory: {k.memory}"] if k.memory else []
        else:
            out.append(f"    -  {k.name:<16}{'':>8}   {'':>12}     {k.note if k.note.startswith('failed: ') else 'not applicable: ' + k.note}")
    return out


#: reasons shown per kind in the text input section (all of them are in the JSON report)
MAX_COUNTED_LINES = 20


def _counted(label: str, counts: dict[str, int]) -> list[str]:
    """One line per reason, most frequent first; past :data:`MAX_COUNTED_LINES`, one line for the rest."""
    rows = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    out = [f"    {label:<8}{v:>9,}  {terminal_text(k, 200)}" for k, v in rows[:MAX_COUNTED_LINES]]
    if len(rows) > MAX_COUNTED_LINES:
        rest = rows[MAX_COUNTED_LINES:]
        out.append(f"    {label:<8}{sum(v for _, v in rest):>9,}  under {len(rest):,} other reasons (all in the --json report)")
    return out


def input_section(r: Report) -> list[str]:
    """What the adapter read, used and skipped, and what the graph builder counted."""
    a = r.accounting
    return [
        f"  input: {sum(a.read.values()):,} records read, {sum(a.kept.values()):,} used, {sum(a.skipped.values()):,} skipped",
        *_counted("skipped", a.skipped),
        *_counted("note", a.notes),
        *_counted("graph", r.graph.counts),
    ]


#: How the comparison's groups read in the text: what each measures, where the report's other tables
#: measure the same names differently (the phase table's CPU time holds the gaps too; the top-CPU-range
#: table's time is exclusive)
COMPARE_LABELS = {"phase CPU": "phase API calls", "CPU range": "CPU range incl.", "op GPU": "op GPU"}


def _err_pct(x) -> str:
    """A comparison row's relative error, "-" where the quantity is under the relative floor."""
    return _pct(x.error_pct) if x.error_pct is not None else "-"


def _cut(name: str, width: int) -> str:
    """``name`` in ``width`` columns, cut in the middle (names differ at both ends: ``aten::_scaled_dot...``)."""
    name = terminal_text(name)
    if len(name) <= width:
        return name
    h = (width - 3) // 2
    return name[: width - 3 - h] + "..." + name[len(name) - h:]


COMPARE_COLS = [
    Col("quantity", 44, lambda x: _cut(f"{COMPARE_LABELS.get(x.group, x.group)}: {x.name}", 43), left=True),
    _ms_col("this ms", 12, "before_ns"),
    _ms_col("predicted ms", 14, "predicted_ns"),
    _ms_col("other ms", 12, "after_ns"),
    Col("error ms", 12, lambda x: _ms(x.error_ns) if abs(x.error_ns) >= 500 else "0.000"),
    Col("error %", 10, _err_pct),
]

#: the groups the comparison's head names the largest differences of, and how many rows each
COMPARE_HEAD_GROUPS = (("op GPU", "GPU time by launching op"), ("kernel class", "GPU time by kernel class"))
COMPARE_HEAD_ROWS = 3


def _x(v: float) -> str:
    return f"{v:.3f}x" if v > 0 else "-"


def comparison_head(r: Report) -> list[str]:
    """The comparison's first lines: predicted vs measured speed-up and step side by side, then the
    largest differences by launching op and by kernel class (predicted, or this trace, against the
    other trace's measurement)."""
    c = r.comparison
    if c is None:
        return []
    names = " + ".join(x.split(":", 1)[0] for x in c.predicted_by.split(" + ")) if c.predicted_by else ""
    out = wrap(f"compared with {c.after} [{c.after_format}]", "", "    ")
    out += wrap(f"the prediction ({names}) against its measurement" if c.predicted_by else "this trace's measurement against the other's")
    if c.predicted_by:
        err = c.step_predicted_ns - c.step_after_ns
        pct = f" ({err / c.step_after_ns * 100:+.2f} %)" if c.step_after_ns > 0 else ""
        out += [f"  {'':<10}{'predicted':>12}{'measured':>12}   ({c.step_basis})",
                f"  {'speed-up':<10}{_x(c.speedup_predicted):>12}{_x(c.speedup_measured):>12}",
                f"  {'step ms':<10}{_ms(c.step_predicted_ns):>12}{_ms(c.step_after_ns):>12}   "
                f"error {err / 1e6:+,.3f} ms{pct}; this trace {_ms(c.step_before_ns)} ms"]
    else:
        out += [f"  {'':<10}{'this':>12}{'other':>12}   ({c.step_basis})",
                f"  {'speed-up':<10}{'':>12}{_x(c.speedup_measured):>12}   (this trace's step over the other's)",
                f"  {'step ms':<10}{_ms(c.step_before_ns):>12}{_ms(c.step_after_ns):>12}   "
                f"this - other {(c.step_before_ns - c.step_after_ns) / 1e6:+,.3f} ms"]
    what = "predicted" if c.predicted_by else "this"
    for group, title in COMPARE_HEAD_GROUPS:
        rows = largest_differences(c, group, COMPARE_HEAD_ROWS)
        if not rows:
            continue
        out.append(f"  {'largest differences, ' + title:<48}{what + ' ms':>12}{'other ms':>12}{'error ms':>11}{'error %':>9}")
        out += [f"    {_cut(x.name, 44):<46}{_ms(x.predicted_ns):>12}{_ms(x.after_ns):>12}{_ms(x.error_ns):>11}{_err_pct(x):>9}"
                for x in rows]
    out += wrap(f"(error % only where the other's quantity is at least {_ms(c.rel_floor_ns)} ms, 1 % of its step; "
                "--details: every quantity)")
    return out


def comparison_section(r: Report) -> list[str]:
    """``--compare-to``: the head (:func:`comparison_head`), then every compared quantity."""
    c = r.comparison
    if c is None:
        return []
    cols = COMPARE_COLS if c.predicted_by else [COMPARE_COLS[0], COMPARE_COLS[1], COMPARE_COLS[3], COMPARE_COLS[4], COMPARE_COLS[5]]
    win = [x for x in c.rows if x.group == "window"]
    steps = [x for x in win if x.name != "traced window"]
    worst = max(steps, key=lambda x: abs(x.error_pct or 0.0)) if steps else None  # signed, as in the table
    return [
        *comparison_head(r),
        "  every quantity: error = " + ("predicted" if c.predicted_by else "this") + " - other (ms, summed over threads and streams)",
        f"    window error {_err_pct(win[0]) if win else _pct(c.window_error_pct)} %, "
        + (f"largest step error {_err_pct(worst)} % ({worst.name})" if worst is not None else "no ProfilerSteps to compare"),
        *(f"    note: {n}" for n in c.notes),
        "    phase API calls: time in API calls (less blocked time) by phase, without the gaps between them; CPU range "
        "incl.: wall time of the ranges of each name, nested ranges included; op GPU: GPU time of the tasks each op launched",
        *_table(cols, c.rows, rule=True),
    ]


def short_sections(r: Report) -> list[list[str]]:
    """The default report: one screen first -- the file, the answer, the trust line (and at most a few
    warnings), within :data:`ANSWER_MAX_LINES` lines of at most :data:`WIDTH` columns; then the
    compact tables (daydream.render.table_text); everything else is behind ``--details``."""
    head = [_file_line(_source(r.trace), r.trace.format)] + answer_section(r)
    trust = [x for line in trust_line(r.trust) for x in wrap(line.strip(), "  ", "    ")]
    head = head + trust
    room = ANSWER_MAX_LINES - len(head) - 1
    warn = [x for w in r.warnings for x in wrap("warning: " + w)]
    if len(warn) > room:
        warn = warn[: max(room - 1, 0)] + [f"  ... {len(r.warnings):,} warnings in all (--details)"]
    if len(head) > ANSWER_MAX_LINES - 1:  # never more than one screen before the tables
        head = head[: ANSWER_MAX_LINES - 2] + ["  ... (the rest of the answer: --details)"]
        warn = []
    return [head + warn, comparison_head(r), *tables_text(r.tables),
            ["(--details: steps, phases, layers, critical path, waits, predictions, input" + (", comparisons)" if r.comparison else ")")]]


def sections(r: Report) -> list[list[str]]:
    """The report's sections in order (``--details``); an empty one is left out."""
    return [
        answer_section(r),
        comparison_section(r),
        header_section(r),
        windows_section(r),
        breakdown_section(r),
        phases_section(r),
        layers_section(r),
        top_tables_section(r),

        communication_section(r),
        memory_section(r),
        critical_path_section("critical path of the replayed baseline", r.critical_path),
        waits_section(r.critical_path),
        *(prediction_section(p, r.trust) for p in r.predictions),
        *(not_applicable_section(name, why) for name, why in requested_not_applicable(r.not_applicable, r.ranking).items()),
        ranking_section(r),
        *tables_text(r.tables),
        input_section(r),
    ]


def render_text(r: Report, details: bool = True) -> str:
    """The terminal report: its sections, one blank line apart; every line is terminal-safe
    (:mod:`daydream.util.display`: names from the trace cannot carry escape sequences through, and a
    newline inside a name is shown as ``\\n``: each line of a section is one line of output).
    ``details`` False: the one-screen answer and compact tables (:func:`short_sections`, the CLI's
    default); True: every section (``--details``)."""
    return "\n\n".join("\n".join(map(terminal_text, s)) for s in (sections(r) if details else short_sections(r)) if s) + "\n"


# ---------------------------------------------------------------- the answer first -----------
def wait_text(w) -> str:
    """One wait of a critical path in words: who waited, where, for what, and what that did."""
    during = nvtx_base_name(w.during)  # emit_nvtx's per-call ", seq = N, op_id = M" shown as the op (JSON keeps the name)
    where = f"in backward() (after {during})" if w.engine else f"in {during}"
    what = f"the autograd engine {w.waited_for}" if w.engine else w.waited_for
    top = ", ".join(f"{terminal_text(k, ANSWER_NAME_MAX)} {_ms(v)} ms" for k, v in w.top.items())
    src = ""
    if w.inferred_edges:  # inferred is reported: the wait rests on edges a rule derived
        src = ((f" [inferred: all {w.edges:,} edges" if w.edges > 1 else " [inferred: the edge")
               + f" from {w.waited_for} to {w.waiter} {'were' if w.edges > 1 else 'was'} derived by a rule]" if w.inferred_edges == w.edges
               else f" [{w.inferred_edges:,} of {w.edges:,} edges from {w.waited_for} to {w.waiter} inferred]")
    return (f"{w.waiter} waits {where} for {what}: {_ms(w.ns)} ms on the traced window's critical path" + (f" ({top})" if top else "")
            + src)


#: the widest line of the default report
WIDTH = 100
#: most lines of the default report before its tables
ANSWER_MAX_LINES = 25


def _file_line(source: str, fmt: str, width: int = WIDTH) -> str:
    """``daydream: PATH  [format]`` on one line: a path too long is cut in its middle (the file
    name at its end stays whole where it fits), never wrapped mid-word."""
    tail = f"  [{fmt}]"
    room = width - len("daydream: ") - len(tail)
    src = terminal_text(source)
    if len(src) > room:
        keep = room - len(CUT)
        src = src[: keep // 3] + CUT + src[len(src) - (keep - keep // 3):]
    return f"daydream: {src}{tail}"


def wrap(text: str, first: str = "  ", rest: str = "    ", width: int = WIDTH) -> list[str]:
    """``text`` (made terminal-safe first) in lines of at most ``width`` columns, the first led by
    ``first``, the others by ``rest``; a word longer than a line is cut across lines."""
    return textwrap.wrap(terminal_text(text), width, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False) or [first.rstrip()]


def answer_lines(r: Report) -> list[str]:
    """The opening lines (daydream.report.summary): step time and GPU busy share; what bounds the
    step, named by its top contributor; the top what-ifs by the median step's speed-up; each
    ``--opt`` asked; the largest wait on the critical path. At most :data:`WIDTH` columns each. A
    line another part adds (e.g. memory) goes after the bound line: :func:`answer_head` and
    :func:`answer_rest` are the two halves."""
    head = answer_head(r)
    return head + answer_rest(r) if head else []


def answer_head(r: Report) -> list[str]:
    """The answer's first lines: the step and GPU busy share; the bound."""
    s = r.summary
    if s is None:
        return []
    a = s.answer
    step = (f"step {_ms(a.step_ns)} ms (" + (f"median of {a.steps} ProfilerSteps)" if a.steps > 1 else "one ProfilerStep)")
            if a.steps else f"window {_ms(a.step_ns)} ms")
    bound, detail = a.bound_by, a.bound_detail
    if bound == "host work" and detail.startswith("in "):  # the share is that phase's host work, not all host work
        where, _, detail = detail.partition("; ")
        bound += " " + where
    line = f"bound by {bound} ({a.bound_pct:.0f} % of the critical path" + (f"; {detail})" if detail else ")")
    if a.bound_detail == EMPTY_PATH:  # nothing on the critical path: no share to give
        line = f"bound by {bound} ({detail})"
    if any(STARTUP_WORDS in w for w in r.warnings):  # what bounds this window need not bound a step
        line += f"; the window holds {STARTUP_WORDS} (see the warning below)"
    out = wrap(f"answer: {step}, GPU busy {a.gpu_busy_pct:.0f} %" + ("; UNRELIABLE baseline replay (see below)"
                                                                     if r.trust is not None and r.trust.verdict == "unreliable" else ""), "", "  ")
    return out + wrap(line)


def answer_rest(r: Report) -> list[str]:
    """The answer's last lines: what to try, each ``--opt`` asked, the largest wait."""
    a = r.summary.answer
    out = []
    if a.whatifs:
        what = "median step" if a.steps else "traced window"
        def one(k: str, v: float) -> str:
            if k not in a.whatif_bounds:
                return f"{k} {v:.2f}x"
            win = a.whatif_windows.get(k, v)  # the range is the traced window's
            return f"{k} {a.whatif_bounds[k]:.2f}-{win:.2f}x" if not a.steps else f"{k} {v:.2f}x (window {a.whatif_bounds[k]:.2f}-{win:.2f}x)"

        line = "try " + ", ".join(one(k, v) for k, v in a.whatifs.items()) + f" (speed-up of the {what})"
        if a.whatif_bounds:  # a range: the low end holds every dependency the waits without their event can have
            line += " (a range where cross-stream waits name no event: see the warning below)"
        elif any(UNLINKED_WORDS in w for w in r.warnings):  # those speed-ups may overlap streams the program orders
            line += " (optimistic where streams wait on each other: cross-stream waits without their event, see below)"
        out += wrap(line)
    for x in asked_lines(r):
        out += wrap(x.strip())
    if a.wait is not None:
        out += wrap(wait_text(a.wait))
    return out


def _disagree(step: float, median: float, steps: int) -> bool:  # noqa: F811 (median: the value here)
    """The answer's median step's speed-up and the median of the per-step speed-ups tell different
    stories: one more than 1 % faster and the other more than 1 % slower, or 10 % apart (dataloader
    with one worker and x4 fetches on ResNet-50: the median step, fed by a prefetched batch, 1.486x;
    the steps' median 0.669x). Not with fewer than 3 steps: the lower of two is no median."""
    if steps < 3 or median <= 0:
        return False
    return (step - 1.0) * (median - 1.0) < 0 and min(abs(step - 1.0), abs(median - 1.0)) > 0.01 or abs(step / median - 1.0) > 0.1


def asked_lines(r: Report) -> list[str]:
    """The answer to each ``--opt`` asked, right under the answer line: the median step replayed and
    predicted (true medians over the answer's steps) and its speed-up, the spread of the per-step
    speed-ups, then the traced window's, labelled (the prediction's section has the details), and
    the prediction's memory verdict where the trace has allocator events; or why it does not apply."""
    out = []
    kept = {id(w) for w in answer_steps(r.steps)}  # the steps the answer's median is taken over
    steps = [i for i, w in enumerate(r.steps) if id(w) in kept]
    for p in r.predictions:
        w = p.window
        bad = r.trust is not None and r.trust.verdict == "unreliable"
        step = ""
        if r.summary is not None and r.summary.answer.steps and len(p.steps) == len(r.steps) and steps:
            before = median(r.steps[i].replayed_ns for i in steps)
            after = median(p.steps[i].predicted_ns for i in steps)
            sp = sorted(p.steps[i].speedup for i in steps)
            mid = median(sp)
            if after > 0:
                m = before / after
                step = f"median step {_ms(round(before))} -> {_ms(round(after))} ms ({m:.3f}x), "
                if _disagree(m, mid, len(sp)):  # the median step is not the steps' story (prefetched batches)
                    step += f"but the per-step speed-ups' median is {mid:.3f}x ({sp[0]:.3f}x to {sp[-1]:.3f}x), "
                    sp = []
            if len(sp) > 1:
                step += f"per-step speed-ups {sp[0]:.3f}x to {sp[-1]:.3f}x (median {mid:.3f}x), "
        out.append(f"  what-if {' + '.join(o.name for o in p.optimizations)}: {step}traced window {_ms(w.replayed_ns)} -> "
                   f"{_ms(w.predicted_ns)} ms ({w.speedup:.3f}x)" + ("  UNRELIABLE: see the baseline replay below" if bad else ""))
        if p.memory is not None:  # the prediction's verdict under its what-if (the memory line below is the baseline's)
            out.append(f"  predicted memory: {p.memory.line}")
    out += [f"  what-if {name}: not applicable: {why}" for name, why in requested_not_applicable(r.not_applicable, r.ranking).items()]
    return out


def answer_section(r: Report) -> list[str]:
    mem = memory_answer_lines(r) if r.summary is not None else []
    return answer_lines(r) + [w for line in mem for w in wrap(line.strip(), "  ", "    ")]


TOP_COLS = [
    Col("", 62, lambda t: t.name if len(t.name) <= 60 else t.name[:57] + "...", left=True),
    _ms_col("ms", 12, "total_ns"),
    Col("%", 7, lambda t: f"{t.total_pct:.1f}"),
    _ms_col("path ms", 12, "path_ns"),
    Col("path %", 8, lambda t: f"{t.path_pct:.1f}"),
]


def top_tables_section(r: Report) -> list[str]:
    """Top kernels and top CPU ranges by time and by share of the critical path; GPU use per device."""
    s = r.summary
    if s is None:
        return []
    out = []
    for title, rows in (("top GPU tasks by GPU time (kernels, copies, sets)", s.top_kernels), ("top CPU ranges by host time (calls and gaps, all threads)", s.top_cpu_ranges)):
        if rows:
            out += [*_table([dataclass_col(TOP_COLS[0], title), *TOP_COLS[1:]], rows), ""]
    if out:
        out.insert(0, "  replayed baseline; path: time on its critical path; other: the rest by kernel class / op namespace")
    for d in s.gpu_devices:
        out.append(f"  GPU {d.device}{f' ({d.name})' if d.name else ''}: busy {_ms(d.busy_ns)} of {_ms(d.window_ns)} ms ({d.busy_pct:.1f} %, measured)")
    return out[:-1] if out and out[-1] == "" else out


def dataclass_col(c: Col, head: str) -> Col:
    return Col(head, c.width, c.cell, c.left)


def waits_section(cp: CriticalPath) -> list[str]:
    """The waits of a critical path, largest first."""
    if not cp.waits:
        return []
    return ["  waits on the critical path (a thread left and came back to):", *(f"    {wait_text(w)}" for w in cp.waits)]
