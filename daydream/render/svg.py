"""Pictures of a :class:`~daydream.report.report_model.Report`: hand-written SVG (``--plot FILE.svg``) and one
self-contained HTML page holding the same figures inline (``--plot FILE.html``).

Like :mod:`daydream.render.text` this module lays out the report model only. The figures:

The page (and the SVG) opens with the answer (:func:`headline`: daydream.render.text's answer
lines, then the trace); the HTML title is the trace's file name (:func:`page_title`). The figures:

1. *Baseline and predictions* (``fig-causes``): the replayed baseline and each prediction (``--opt``,
   or every applicable one of ``--opt all``, ``Ranked.by_cause_ns``) side by side: the traced
   window's critical path by cause; with ``--opt``, each ProfilerStep's time (one bar as long as the
   step); the GPU time of the top ops (``Report.pictures.ops``; with ``--opt all`` the
   :data:`OP_PREDICTIONS` fastest predictions).
2. *Speed-up of each optimization alone* (``fig-ranking``, ``--opt all``): one bar per applicable
   optimization on an axis that starts at x1 (lower only when one is slower), a line at x1; the ones
   that do not apply listed as text.
3. *One step, baseline and predicted* (``fig-timeline``): ``Report.pictures.step``, the lanes'
   busy intervals of the baseline replay above the prediction's, on one time axis.
4. *GPU busy vs idle*: per window, measured and replayed, in ms summed over devices.
4b. *Memory* (``fig-memory``, where the trace has allocator events): the allocated bytes over the
   window (``MemorySummary.curves``), the replayed baseline and each prediction as step curves on
   one time axis, one plot per GPU (at most 4), the capacity as a dashed line when near.
5. *Predicted against measured* (``--compare-to``): per window, kernel class and critical-path
   cause, the prediction (or, without ``--opt``, this trace) beside the other trace's
   measurement, with the error in % (where the quantity is above the comparison's floor).

Every series has its own lightness and its own hatch, so the figures read in grey-scale print.
Every string from the trace goes through :func:`daydream.util.display.markup_text`, cut first to the
width it has (monospace text, so widths are known and labels never overlap).
"""

from __future__ import annotations

import os
from typing import NamedTuple

from ..simulate.critical_path import CAUSES
from ..util.display import markup_text, terminal_text
from ..report.report_model import Prediction, Report, WindowStats
from .text import answer_lines

WIDTH = 820  #: every figure's viewBox width
CHAR_W = 6.7  #: width of one 11 px monospace character
LABEL_X, SUB_X, PLOT_X0, PLOT_X1 = 10, 162, 262, 700
GROUP_CHARS, SUB_CHARS = 22, 14  #: characters the two label columns hold
ROW_H, BAR_H = 18, 13
MAX_STEPS = 24  #: ProfilerSteps drawn; the others are counted in a note

#: series: key -> (legend label, fill, hatch); fills differ in lightness within each figure
SERIES: dict[str, tuple[str, str, str]] = {
    "cpu": ("CPU (calls, gaps)", "#0b2f6b", "solid"),
    "gpu_compute": ("GPU compute", "#e69f00", "diag"),
    "communication": ("communication", "#2f8f5b", "dots"),
    "launch": ("launch latency", "#c77cae", "cross"),
    "sync": ("sync", "#f3eb7a", "horiz"),
    "copy": ("copies", "#56b4e9", "backdiag"),
    "cpu_runtime_ns": ("API calls", "#0b2f6b", "solid"),
    "cpu_gap_ns": ("CPU gaps", "#9ecae1", "diag"),
    "sync_wait_ns": ("sync wait", "#f3eb7a", "horiz"),
    "kernel_ns": ("kernels", "#d55e00", "backdiag"),
    "memcpy_ns": ("memcpy", "#2f8f5b", "dots"),
    "memset_ns": ("memset", "#555555", "cross"),
    "busy": ("GPU busy", "#1f4e3d", "solid"),
    "idle": ("GPU idle", "#e4e4e4", "diag"),
    "speedup": ("speed-up", "#3b6fb6", "vert"),
    "base": ("replayed baseline", "#9ecae1", "diag"),
    "cpu_lane": ("CPU thread busy (calls, CPU time between them)", "#0b2f6b", "solid"),
    "gpu_lane": ("GPU stream busy", "#e69f00", "solid"),
    "before": ("this trace, measured", "#9ecae1", "diag"),
    "predicted": ("predicted", "#0b2f6b", "solid"),
    "after": ("other trace, measured", "#e69f00", "dots"),
}
#: the job figure's series (daydream.render.job_svg): a rank's step, its wait split by the peer
#: waited for, and transfer; kept apart so that one trace's SVG defines only SERIES
JOB_SERIES: dict[str, tuple[str, str, str]] = {
    "step_measured": ("measured", "#9ecae1", "diag"),
    "step_replayed": ("coupled replay", "#0b2f6b", "solid"),
    "step_predicted": ("predicted (coupled replay after --opt)", "#d55e00", "backdiag"),
    "wait_a": ("waiting for peer rN (rank N)", "#e69f00", "dots"),
    "wait_b": ("the next peer waited for", "#f3eb7a", "horiz"),
    "transfer": ("transfer (after the last arrival)", "#2f8f5b", "backdiag"),
}
KINDS = ("cpu_runtime_ns", "cpu_gap_ns", "sync_wait_ns", "kernel_ns", "memcpy_ns", "memset_ns")
_HATCH = {
    "solid": "", "diag": "M-1,1L1,-1M0,6L6,0M5,7L7,5", "backdiag": "M0,0L6,6M-1,5L1,7M5,-1L7,1",
    "horiz": "M0,3L6,3", "vert": "M3,0L3,6", "cross": "M0,3L6,3M3,0L3,6", "dots": "",
}
_STYLE = ("text{font-family:'DejaVu Sans Mono',Menlo,Consolas,monospace;font-size:11px;fill:#111}"
          ".title{font-size:15px;font-weight:bold}.head{font-weight:bold}.sub{font-size:12px;font-weight:bold}.note{fill:#444}"
          ".seg{paint-order:stroke;stroke:#fff;stroke-width:3px}.grid{stroke:#ccc;stroke-width:1}")


def _name(text: str, chars: int) -> str:
    """A name from the trace (or anything shown): cut to ``chars`` on the terminal's rules, then escaped."""
    return markup_text(terminal_text(text, chars))


def _text(x: float, y: float, s: str, anchor: str = "start", cls: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{c}>{s}</text>'


def _series(key: str) -> tuple[str, str, str]:
    return SERIES[key] if key in SERIES else JOB_SERIES[key]


def _defs(series: dict[str, tuple[str, str, str]] = SERIES) -> str:
    out = []
    for key, (_, fill, hatch) in series.items():
        ink = "#fff" if _dark(fill) else "#000"
        mark = (f'<circle cx="3" cy="3" r="1.3" fill="{ink}"/>' if hatch == "dots"
                else f'<path d="{_HATCH[hatch]}" stroke="{ink}" stroke-width="1.2"/>' if _HATCH[hatch] else "")
        out.append(f'<pattern id="p-{key}" patternUnits="userSpaceOnUse" width="6" height="6">'
                   f'<rect width="6" height="6" fill="{fill}"/>{mark}</pattern>')
    return "<defs>" + "".join(out) + "</defs>"


def _dark(colour: str) -> bool:
    r, g, b = (int(colour[i:i + 2], 16) for i in (1, 3, 5))
    return 0.299 * r + 0.587 * g + 0.114 * b < 128


class Row(NamedTuple):
    """One bar: its labels (already escaped), segments (series key, value), a tick, text after it."""

    group: str
    sub: str
    segments: list[tuple[str, float]]
    tick: float | None = None
    right: str = ""
    cls: str = "row"
    labels: tuple[str, ...] = ()  #: per segment, shown before its value (e.g. the peer waited for); escaped
    values: bool = True  #: write each segment's value on it (not where the bar starts at another origin than 0)
    origin: float = 0.0  #: the axis' origin: a segment's <title> gives its value plus this (the speed-up itself)


def _ticks(vmax: float) -> list[float]:
    raw = vmax / 5
    mag = 10.0 ** _floor_log10(raw)
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    return [i * step for i in range(-int(-vmax // step - 1e-9) + 1)]


def _floor_log10(x: float) -> int:
    n = 0
    while x >= 10:
        x, n = x / 10, n + 1
    while x < 1:
        x, n = x * 10, n - 1
    return n


def _bar(row: Row, y: float, scale: float) -> str:
    """One stacked bar at ``y`` (its top), segments left to right, each with its hatch and, when
    wide enough, its value."""
    out = [f'<g class="{row.cls}">']
    out.append(_text(LABEL_X, y + BAR_H - 3, row.group) + _text(SUB_X, y + BAR_H - 3, row.sub, cls="note"))
    x = PLOT_X0
    for i, (key, v) in enumerate(row.segments):
        w = max(v, 0) * scale
        if w <= 0:
            continue
        name = row.labels[i] if i < len(row.labels) else ""
        out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{BAR_H}" fill="url(#p-{key})" stroke="#000" '
                   f'stroke-width="0.5"><title>{name or _series(key)[0]}: {v + row.origin:,.3f}</title></rect>')
        label = f"{name} {v:.2f}" if name else f"{v:.2f}"
        if name and w < len(label) * CHAR_W + 6:
            label = name
        if w >= len(label) * CHAR_W + 6 and (row.values or name):
            out.append(_text(x + w / 2, y + BAR_H - 3, label, "middle", "seg"))
        x += w
    if row.tick is not None:
        t = PLOT_X0 + row.tick * scale
        out.append(f'<line x1="{t:.1f}" y1="{y - 2:.1f}" x2="{t:.1f}" y2="{y + BAR_H + 2:.1f}" stroke="#000" stroke-width="2"/>')
    out.append(_text(max(x, PLOT_X0 + (row.tick or 0) * scale) + 5, y + BAR_H - 3, row.right))
    return "".join(out) + "</g>"


def _legend(y: float, keys: list[str]) -> tuple[str, float]:
    out, x = [], PLOT_X0
    for key in keys:
        label = _series(key)[0]
        w = 18 + len(label) * CHAR_W + 14
        if x + w > WIDTH - 10:
            x, y = PLOT_X0, y + 16
        out.append(f'<rect x="{x:.1f}" y="{y - 10:.1f}" width="12" height="12" fill="url(#p-{key})" stroke="#000" stroke-width="0.5"/>')
        out.append(_text(x + 17, y, label))
        x += w
    return "".join(out), y + 16


def _panel(y: float, heading: str, rows: list[Row], unit: str, keys: list[str], vmax: float | None = None,
           mark: float | None = None, origin: float = 0.0) -> tuple[str, float]:
    """A panel: a heading, one bar per row, an x axis (ticks, unit) and a legend; returns (svg, next y).
    ``origin``: the value at the axis' left end (a speed-up axis starts at 1: bars are drawn from
    there, so 1.074x is not drawn as long as 1.018x); rows' values are given as drawn, less ``origin``."""
    top = max((sum(max(v, 0) for _, v in r.segments) for r in rows), default=0.0)
    vmax = max(vmax or 0.0, top, *(r.tick or 0 for r in rows), (mark - origin) if mark is not None else 0.0) or 1.0
    ticks = _ticks(vmax)
    vmax = max(vmax, ticks[-1])
    scale = (PLOT_X1 - PLOT_X0) / vmax
    out = [_text(LABEL_X, y + 14, heading, cls="sub")]
    y0 = y + 24
    bottom = y0 + len(rows) * ROW_H
    for t in ticks:
        x = PLOT_X0 + t * scale
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{y0 - 2:.1f}" x2="{x:.1f}" y2="{bottom + 2:.1f}"/>')
        out.append(_text(x, bottom + 14, f"{round(t + origin, 6):g}", "middle"))
    if mark is not None:
        x = PLOT_X0 + (mark - origin) * scale
        out.append(f'<line x1="{x:.1f}" y1="{y0 - 4:.1f}" x2="{x:.1f}" y2="{bottom + 2:.1f}" stroke="#000" stroke-dasharray="4,3"/>')
    out.append(f'<line x1="{PLOT_X0}" y1="{bottom + 2:.1f}" x2="{PLOT_X1}" y2="{bottom + 2:.1f}" stroke="#000"/>')
    out.extend(_bar(r, y0 + i * ROW_H, scale) for i, r in enumerate(rows))
    out.append(_text((PLOT_X0 + PLOT_X1) / 2, bottom + 30, unit, "middle", "note"))
    legend, y = _legend(bottom + 50, keys)
    out.append(legend)
    return "".join(out), y + 6


def _opt_label(p: Prediction) -> str:
    return "+".join(o.name for o in p.optimizations) or "prediction"


def _ms(ns: float) -> float:
    return ns / 1e6


def _ranked(r: Report) -> list:
    """The --opt all predictions drawn beside the baseline: those that apply, fastest first."""
    return [x for x in r.ranking if x.predicted_ns >= 0 and x.speedup > 0]


def _speed(x: float) -> str:
    return f"x{x:.3f}" if x > 0 else ""


def _cause_rows(r: Report) -> list[Row]:
    """The baseline's critical path by cause, and each prediction's (``--opt`` and ``--opt all``) beside it."""
    rows = [Row(_name(r.window.name, GROUP_CHARS), "baseline", [(c, _ms(r.critical_path.by_cause_ns.get(c, 0))) for c in CAUSES],
                right=f"{_ms(r.critical_path.length_ns):.3f} ms", cls="row base")]
    for p in r.predictions:
        cp = p.critical_path
        rows.append(Row("", _name(_opt_label(p), SUB_CHARS), [(c, _ms(cp.by_cause_ns.get(c, 0))) for c in CAUSES],
                        right=_speed(p.window.speedup), cls="row prediction"))
    for x in _ranked(r):
        rows.append(Row("", _name(x.name, SUB_CHARS), [(c, _ms(x.by_cause_ns.get(c, 0))) for c in CAUSES],
                        right=_speed(x.speedup), cls="row prediction"))
    return rows


def _step_rows(r: Report) -> list[Row]:
    """Each ProfilerStep, replayed and predicted: one bar each, as long as the step."""
    rows = []
    for s in r.steps[:MAX_STEPS]:
        rows.append(Row(_name(s.name, GROUP_CHARS), "baseline", [("base", _ms(s.replayed_ns))], right=f"{_ms(s.replayed_ns):.3f} ms",
                        cls="row base"))
        for p in r.predictions:
            w = next((x for x in p.steps if x.name == s.name), None)
            if w is not None:
                rows.append(Row("", _name(_opt_label(p), SUB_CHARS), [("predicted", _ms(w.predicted_ns))], right=_speed(w.speedup),
                                cls="row prediction"))
    return rows


def _more_steps(r: Report, y: float) -> tuple[str, float]:
    extra = len(r.steps) - MAX_STEPS
    if extra <= 0:
        return "", y
    return _text(LABEL_X, y + 12, f"{extra:,} more ProfilerSteps not drawn (see the text or --json report)", cls="note"), y + 20


#: predictions drawn per op in the ops panel (with --opt all: the fastest)
OP_PREDICTIONS = 3


def _op_rows(r: Report) -> list[Row]:
    """Each top op's GPU time: baseline, then the predictions (the ``--opt`` one, or the fastest of ``--opt all``)."""
    pics = r.pictures
    if pics is None or not pics.ops:
        return []
    labels = [_opt_label(p) for p in r.predictions] or [x.name for x in _ranked(r)][:OP_PREDICTIONS]
    rows = []
    for o in pics.ops:
        rows.append(Row(_name(o.name, GROUP_CHARS), "baseline", [("base", _ms(o.baseline_ns))], right=f"{_ms(o.baseline_ns):.3f} ms",
                        cls="row base"))
        for lab in labels:
            if lab in o.predicted_ns:
                v = o.predicted_ns[lab]
                rows.append(Row("", _name(lab, SUB_CHARS), [("predicted", _ms(v))],
                                right=f"x{o.baseline_ns / v:.2f}" if v > 0 else "removed", cls="row prediction"))
    return rows


def fig_causes(r: Report) -> tuple[str, float]:
    """Figure 1: the baseline and each prediction side by side: the traced window's critical path by
    cause, each ProfilerStep's time, and the GPU time of the top ops."""
    out = [_text(LABEL_X, 22, "Baseline and prediction" + ("s" if len(r.predictions) + len(_ranked(r)) > 1 else ""), cls="title")]
    svg, y = _panel(34, "Traced window: critical path by cause (replayed baseline, then each prediction; right: speed-up)",
                    _cause_rows(r), "time on the critical path (ms)", list(CAUSES))
    out.append(svg)
    if r.steps and r.predictions:
        svg, y = _panel(y + 8, "Each ProfilerStep: its time, replayed baseline and predicted", _step_rows(r), "step time (ms)",
                        ["base", "predicted"])
        out.append(svg)
        more, y = _more_steps(r, y)
        out.append(more)
    ops = _op_rows(r)
    if ops:
        svg, y = _panel(y + 8, "Top ops by GPU time (the tasks each launched), replayed baseline and predicted", ops,
                        "GPU time (ms), summed over streams; right: speed-up of the op's GPU time", ["base", "predicted"])
        out.append(svg)
    return "".join(out), y


def fig_ranking(r: Report) -> tuple[str, float]:
    """Figure 2: the ``--opt all`` ranking, on an axis that starts at x1 (no change); the
    optimizations that do not apply as text."""
    out = [_text(LABEL_X, 22, "Speed-up of each optimization alone (--opt all)", cls="title")]
    ok = _ranked(r)
    origin = min([1.0] + [x.speedup for x in ok])
    origin = float(int(origin * 20)) / 20 if origin < 1.0 else 1.0  # below x1 only when a prediction is slower
    rows = [Row(_name(x.name, GROUP_CHARS), "", [("speedup", x.speedup - origin)], right=_speed(x.speedup), cls="row rank",
                values=False, origin=origin) for x in ok]
    y = 34
    if rows:
        svg, y = _panel(y, "Predicted speed-up of the traced window (replayed baseline / predicted); the axis starts at x1",
                        rows, "speed-up (x)", ["speedup"], mark=1.0, origin=origin)
        out.append(svg)
    for x in (x for x in r.ranking if x not in ok):
        out.append(_text(LABEL_X, y + 12, _name(f"{x.name}: {x.note}" if x.note.startswith("failed: ") else f"not applicable: {x.name}: {x.note}", int((WIDTH - 2 * LABEL_X) / CHAR_W)), cls="note"))
        y += 16
    return "".join(out), y + 4


LANE_H = 12  #: height of one lane of the step picture


def _lane_block(y: float, title: str, lanes, which: str, span_ns: float, length_ns: int) -> tuple[str, float]:
    """One timeline (baseline or predicted) of the step picture: a row per lane, its busy intervals."""
    scale = (PLOT_X1 - PLOT_X0) / span_ns
    out = [_text(LABEL_X, y + 10, title, cls="sub")]
    y += 16
    for ln in lanes:
        out.append(f'<g class="lane">{_text(LABEL_X, y + LANE_H - 2, _name(ln.lane, 35), cls="note")}')
        key = "gpu_lane" if ln.gpu else "cpu_lane"
        for a, b in getattr(ln, which):
            out.append(f'<rect x="{PLOT_X0 + a * scale:.1f}" y="{y:.1f}" width="{max((b - a) * scale, 0.6):.1f}" height="{LANE_H - 2}" '
                       f'fill="url(#p-{key})"/>')
        out.append("</g>")
        y += LANE_H
    end = PLOT_X0 + length_ns * scale
    out.append(f'<line x1="{end:.1f}" y1="{y - len(lanes) * LANE_H - 2:.1f}" x2="{end:.1f}" y2="{y + 2:.1f}" stroke="#000" stroke-width="2"/>')
    return "".join(out), y + 6


def fig_timeline(r: Report) -> tuple[str, float]:
    """Figure: one step (the answer's median step, or the traced window) of the replayed baseline
    above the same step predicted, on one time axis, lanes (threads, then streams) as rows; a black
    line marks each step's end."""
    pic = r.pictures.step if r.pictures is not None else None
    assert pic is not None
    span = max(pic.baseline_ns, pic.predicted_ns, 1)
    out = [_text(LABEL_X, 22, _name(f"One step, baseline and predicted: {pic.step}", int((WIDTH - 2 * LABEL_X) / CHAR_W) - 12),
                 cls="title")]
    b, y = _lane_block(34, f"replayed baseline: {_ms(pic.baseline_ns):.3f} ms", pic.lanes, "baseline", span, pic.baseline_ns)
    p, y = _lane_block(y + 4, _name(f"predicted ({pic.prediction}): {_ms(pic.predicted_ns):.3f} ms", 100), pic.lanes, "predicted", span,
                       pic.predicted_ns)
    out += [b, p]
    ticks = _ticks(span / 1e6)
    scale = (PLOT_X1 - PLOT_X0) / (span / 1e6)
    for t in ticks:
        if t * scale <= PLOT_X1 - PLOT_X0 + 0.5:
            out.append(_text(PLOT_X0 + t * scale, y + 10, f"{t:g}", "middle"))
    out.append(_text((PLOT_X0 + PLOT_X1) / 2, y + 26, "time from the step's start (ms)", "middle", "note"))
    y += 32
    if pic.lanes_left_out:
        out.append(_text(LABEL_X, y + 10, f"{pic.lanes_left_out:,} less busy lanes not drawn", cls="note"))
        y += 16
    legend, y = _legend(y + 14, ["cpu_lane", "gpu_lane"])
    return "".join(out) + legend, y + 4


def fig_gpu(r: Report) -> tuple[str, float]:
    """Figure 3: GPU busy and idle time of each window, measured and replayed."""
    rows = []
    for w in [r.window, *r.steps[:MAX_STEPS]]:
        rows += _busy_rows(w)
    out = [_text(LABEL_X, 22, "GPU busy vs idle", cls="title")]
    svg, y = _panel(34, "Each window, measured and replayed", rows, "GPU time (ms), summed over devices", ["busy", "idle"])
    more, y = _more_steps(r, y)
    return "".join(out) + svg + more, y


def _busy_rows(w: WindowStats) -> list[Row]:
    def pct(busy: int, idle: int) -> str:
        return f"busy {100 * busy / (busy + idle):.0f} %" if busy + idle > 0 else ""

    return [Row(_name(w.name, GROUP_CHARS), "measured", [("busy", _ms(w.gpu_busy_measured_ns)), ("idle", _ms(w.gpu_idle_measured_ns))],
                right=pct(w.gpu_busy_measured_ns, w.gpu_idle_measured_ns), cls="row base"),
            Row("", "replayed", [("busy", _ms(w.gpu_busy_replayed_ns)), ("idle", _ms(w.gpu_idle_replayed_ns))],
                right=pct(w.gpu_busy_replayed_ns, w.gpu_idle_replayed_ns), cls="row replayed")]


#: groups of the comparison drawn, with their panel headings (the rest is in the text and JSON)
COMPARE_PANELS = (("window", "Traced window and each ProfilerStep (paired by order)"),
                  ("kernel class", "GPU time by kernel class, summed over streams"),
                  ("critical path", "Critical path by cause (of each trace's replay)"))


def _compare_rows(rows, predicted: bool) -> list[Row]:
    """Per quantity: this trace's measurement (or the prediction) and the other's, each its own bar."""
    out = []
    for x in rows[:MAX_STEPS]:
        err = f"error {x.error_pct:+.2f} %" if x.error_pct is not None else ""
        first = [Row(_name(x.name, GROUP_CHARS), "predicted", [("predicted", _ms(x.predicted_ns))], right=err, cls="row predicted")] if predicted \
            else [Row(_name(x.name, GROUP_CHARS), "this trace", [("before", _ms(x.before_ns))], right=err, cls="row before")]
        out += first + [Row("", "other trace", [("after", _ms(x.after_ns))], right=f"{_ms(x.after_ns):.3f} ms", cls="row after")]
    return out


def fig_compare(r: Report) -> tuple[str, float]:
    """Figure 4 (``--compare-to``): the prediction (or this trace) against the other trace's
    measurement, per window, kernel class and critical-path cause, with the error in %."""
    c = r.comparison
    assert c is not None
    what = "Predicted against measured" if c.predicted_by else "This trace against the other"
    out = [_text(LABEL_X, 22, what, cls="title"),
           _text(LABEL_X, 38, _name(f"other trace: {c.after}" + (f"; prediction: {c.predicted_by}" if c.predicted_by else ""),
                                    int((WIDTH - 2 * LABEL_X) / CHAR_W)), cls="note")]
    y = 44.0
    keys = ["predicted" if c.predicted_by else "before", "after"]
    for group, heading in COMPARE_PANELS:
        rows = [x for x in c.rows if x.group == group and (x.before_ns or x.predicted_ns or x.after_ns)]
        if rows:
            svg, y = _panel(y, heading, _compare_rows(rows, bool(c.predicted_by)), "time (ms); error = (predicted - measured) / measured"
                            if c.predicted_by else "time (ms); error = (this - other) / other", keys)
            out.append(svg)
            y += 8
    return "".join(out), y


#: line styles of the memory figure's curves, in order: the baseline, then each prediction
#: (colour, dash pattern: told apart in grey-scale print by the dashes)
CURVE_STYLES = (("#0b2f6b", ""), ("#d55e00", "6,3"), ("#2f8f5b", "2,2"), ("#c77cae", "8,3,2,3"), ("#555555", "1,3"))
MEMORY_H = 150  #: height of one device's memory plot (px)


def _memory_series(r: Report) -> list[tuple[str, object]]:
    """(label, MemorySummary) of the baseline and each prediction with curves (labels not escaped)."""
    out = [("replayed baseline", r.memory)] if r.memory is not None and r.memory.curves else []
    out += [(f"predicted ({_opt_label(p)})", p.memory) for p in r.predictions if p.memory is not None and p.memory.curves]
    return out[:len(CURVE_STYLES)]


def fig_memory(r: Report) -> tuple[str, float]:
    """Figure: allocated memory over the window (``MemorySummary.curves``), the replayed baseline
    and each prediction on one time axis, one plot per GPU (host memory where no GPU has events);
    a dashed line at the device's capacity when it is within the plot."""
    series = _memory_series(r)
    devs = sorted({c.device for _, m in series for c in m.curves})
    devs = [d for d in devs if d >= 0] or devs
    out = [_text(LABEL_X, 22, "Memory allocated over the window, baseline and predicted", cls="title")]
    y = 34.0
    span = max((c.t_ns[-1] for _, m in series for c in m.curves if c.t_ns), default=1) or 1
    for d in devs[:4]:
        curves = [(lab, next((c for c in m.curves if c.device == d), None), m) for lab, m in series]
        top = max((max(c.allocated_bytes, default=0) for _, c, _ in curves if c is not None), default=0) / 2**30 or 1.0
        cap = next((x.capacity_bytes for _, _, m in curves for x in m.devices if x.device == d and x.capacity_bytes > 0), -1)
        cap_gib = cap / 2**30 if cap > 0 and cap / 2**30 <= 1.5 * top else None
        ticks = _ticks(max(top, cap_gib or 0))
        vmax = ticks[-1] or 1.0
        y0, y1 = y + 18, y + 18 + MEMORY_H
        sx, sy = (PLOT_X1 - PLOT_X0) / span, MEMORY_H / vmax
        out.append(_text(LABEL_X, y + 12, "host memory" if d < 0 else f"GPU {d}", cls="sub"))
        for t in ticks:
            yy = y1 - t * sy
            out.append(f'<line class="grid" x1="{PLOT_X0}" y1="{yy:.1f}" x2="{PLOT_X1}" y2="{yy:.1f}"/>')
            out.append(_text(PLOT_X0 - 6, yy + 4, f"{t:g}", "end"))
        out.append(_text(LABEL_X, (y0 + y1) / 2, "GiB allocated", cls="note"))
        if cap_gib is not None:
            yy = y1 - cap_gib * sy
            out.append(f'<line x1="{PLOT_X0}" y1="{yy:.1f}" x2="{PLOT_X1}" y2="{yy:.1f}" stroke="#000" stroke-dasharray="4,3"/>')
            out.append(_text(PLOT_X1, yy - 3, f"capacity {cap_gib:.1f} GiB", "end", "note"))
        for (lab, c, _), (colour, dash) in zip(curves, CURVE_STYLES):
            if c is None or not c.t_ns:
                continue
            xs = [PLOT_X0 + t * sx for t in c.t_ns]  # at most 2 x CURVE_BUCKETS points (memory_fit)
            ys = [y1 - b / 2**30 * sy for b in c.allocated_bytes]
            # a step curve: each level holds until the next event
            px = [v for v in xs for _ in (0, 1)][1:]
            py = [v for v in ys for _ in (0, 1)][:-1]
            pts = " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(px, py))
            da = f' stroke-dasharray="{dash}"' if dash else ""
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5"{da} points="{pts}">'
                       f"<title>{_name(lab, 80)}</title></polyline>")
        out.append(f'<line x1="{PLOT_X0}" y1="{y1:.1f}" x2="{PLOT_X1}" y2="{y1:.1f}" stroke="#000"/>')
        y = y1 + 4
    ticks = _ticks(span / 1e6)
    for t in ticks:
        if t * 1e6 * (PLOT_X1 - PLOT_X0) / span <= PLOT_X1 - PLOT_X0 + 0.5:
            out.append(_text(PLOT_X0 + t * 1e6 * (PLOT_X1 - PLOT_X0) / span, y + 10, f"{t:g}", "middle"))
    out.append(_text((PLOT_X0 + PLOT_X1) / 2, y + 26, "time from the window's start (ms)", "middle", "note"))
    y += 44
    x = PLOT_X0
    for (lab, _), (colour, dash) in zip(series, CURVE_STYLES):  # the legend: a line per series, its label
        text = _name(lab, 60)
        w = 30 + len(terminal_text(lab, 60)) * CHAR_W + 14
        if x + w > WIDTH - 10:
            x, y = PLOT_X0, y + 16
        da = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<line x1="{x:.1f}" y1="{y - 4:.1f}" x2="{x + 24:.1f}" y2="{y - 4:.1f}" stroke="{colour}" stroke-width="2"{da}/>')
        out.append(_text(x + 29, y, text))
        x += w
    return "".join(out), y + 10


def figures(r: Report) -> list[tuple[str, str, float]]:
    """(id, SVG body, height) of each figure the report has data for."""
    figs = [("fig-causes", *fig_causes(r))]
    if r.ranking:
        figs.append(("fig-ranking", *fig_ranking(r)))
    if r.pictures is not None and r.pictures.step is not None:
        figs.append(("fig-timeline", *fig_timeline(r)))
    figs.append(("fig-gpu", *fig_gpu(r)))
    if _memory_series(r):
        figs.append(("fig-memory", *fig_memory(r)))
    if r.comparison is not None:
        figs.append(("fig-compare", *fig_compare(r)))
    return figs


def _svg(body: str, height: float, ident: str = "", series: dict[str, tuple[str, str, str]] = SERIES) -> str:
    i = f' id="{ident}"' if ident else ""
    h = int(height + 0.999)
    return (f'<svg xmlns="http://www.w3.org/2000/svg"{i} viewBox="0 0 {WIDTH} {h}" width="{WIDTH}" height="{h}" role="img">'
            f"<style>{_STYLE}</style>{_defs(series)}<rect width=\"{WIDTH}\" height=\"{h}\" fill=\"#fff\"/>{body}</svg>")


#: characters of one heading line across the figure
HEAD_CHARS = int((WIDTH - 2 * LABEL_X) / CHAR_W)
#: answer lines at the head of the page / SVG
HEAD_LINES = 5


def headline(r: Report) -> list[str]:
    """The answer (daydream.render.text's opening lines: the step, the bound, the what-ifs), each
    line cut to the figure's width; the trace and the replay's verdict last. Not escaped."""
    lines = [x.strip() for x in answer_lines(r)][:HEAD_LINES]
    trust = f"; baseline replay: {r.trust.verdict}" if r.trust is not None else ""
    src = r.trace.extra.get("saved_table") or r.trace.source or "trace"
    return [terminal_text(x, HEAD_CHARS) for x in lines] + [terminal_text(f"daydream: {src}{trust}", HEAD_CHARS)]


def _heading(r: Report) -> str:
    """The SVG's head: the answer lines (escaped), then the trace; returns SVG text elements."""
    lines = headline(r)
    return "".join(_text(LABEL_X, 18 + 16 * i, markup_text(x), cls="head" if i == 0 else "note") for i, x in enumerate(lines))


def _head_h(r: Report) -> float:
    return 16.0 * len(headline(r)) + 10


def page_title(r: Report) -> str:
    """The HTML title: "daydream: " and the trace's file name (not its path), short, escaped."""
    src = r.trace.extra.get("saved_table") or r.trace.source or "report"
    return _name("daydream: " + os.path.basename(str(src).rstrip("/")), 60)


def render_svg(r: Report) -> str:
    """One SVG document: a heading line, then the figures one below the other."""
    parts, y = [_heading(r)], _head_h(r)
    for ident, body, h in figures(r):
        parts.append(f'<g class="figure" id="{ident}" transform="translate(0,{y:.0f})">{body}</g>')
        y += round(h) + 12
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + _svg("".join(parts), y) + "\n"


def render_html(r: Report) -> str:
    """One self-contained HTML page (no scripts, nothing fetched) with each figure as inline SVG."""
    figs = "\n".join(f"<figure>{_svg(body, h, ident)}</figure>" for ident, body, h in figures(r))
    head = headline(r)
    answer = "".join(f"<p class=\"answer\">{markup_text(x)}</p>\n" for x in head[1:-1])
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{page_title(r)}</title>\n"
            "<style>body{font-family:sans-serif;margin:1em auto;max-width:860px}figure{margin:0 0 1.5em}"
            "h1{font-size:1.3em;font-family:monospace}.answer,.src{font-family:monospace;margin:.2em 0}.src{color:#444}</style>\n"
            f"</head>\n<body>\n<h1>{markup_text(head[0])}</h1>\n{answer}<p class=\"src\">{markup_text(head[-1])}</p>\n"
            "<p>Times in ms. The baseline and each prediction side by side (critical path by cause, steps, top ops); "
            "the ranking of --opt all (when run); one step as a timeline, baseline and predicted; GPU busy vs idle time; "
            "memory allocated over the window, baseline and predicted (when the trace has allocator events).</p>\n"
            f"{figs}\n</body>\n</html>\n")


def render_figure(r: Report, ident: str = "fig-causes") -> str:
    """One figure (``ident``: ``fig-causes``, ``fig-ranking``, ``fig-gpu`` or ``fig-compare``) as
    its own SVG document, under the same heading line as :func:`render_svg`.

    Raises:
        KeyError: the report has no data for that figure (e.g. ``fig-ranking`` without ``--opt all``).
    """
    body, h = {i: (b, hh) for i, b, hh in figures(r)}[ident]
    top = _head_h(r)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            + _svg(f'{_heading(r)}<g class="figure" id="{ident}" transform="translate(0,{top:.0f})">{body}</g>', h + top + 4) + "\n")
