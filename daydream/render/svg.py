"""Pictures of a :class:`~daydream.report.report_model.Report`: hand-written SVG (``--plot FILE.svg``) and one
self-contained HTML page holding the same figures inline (``--plot FILE.html``).

Like :mod:`daydream.render.text` this module lays out the report model only. The figures:

1. *Step time by cause*: the traced window's critical path split by cause (CPU, GPU compute,
   communication, launch latency, sync), the replayed baseline above each prediction; then, per
   ProfilerStep, the step's time by task kind (the report has no per-step critical path), summed
   over CPU threads and GPU streams, so a bar may be longer than the step: a black tick marks the
   step's own time.
2. *Speed-up of each optimization alone* (``--opt all``): one bar per applicable optimization,
   a line at x1; the ones that do not apply listed as text.
3. *GPU busy vs idle*: per window, measured and replayed, in ms summed over devices.
4. *Predicted against measured* (``--compare-to``): per window, kernel class and critical-path
   cause, the prediction (or, without ``--opt``, this trace) beside the other trace's
   measurement, with the error in %.

Every series has its own lightness and its own hatch, so the figures read in grey-scale print.
Every string from the trace goes through :func:`daydream.util.display.markup_text`, cut first to the
width it has (monospace text, so widths are known and labels never overlap).
"""

from __future__ import annotations

from typing import NamedTuple

from ..simulate.critical_path import CAUSES
from ..util.display import markup_text, terminal_text
from ..report.report_model import Prediction, Report, WindowStats

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
    "before": ("this trace, measured", "#9ecae1", "diag"),
    "predicted": ("predicted", "#0b2f6b", "solid"),
    "after": ("other trace, measured", "#e69f00", "dots"),
}
#: the job figure's series (daydream.render.job_svg): a rank's step, its wait split by the peer
#: waited for, and transfer; kept apart so that one trace's SVG defines only SERIES
JOB_SERIES: dict[str, tuple[str, str, str]] = {
    "step_measured": ("measured", "#9ecae1", "diag"),
    "step_replayed": ("coupled replay", "#0b2f6b", "solid"),
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
          ".title{font-size:15px;font-weight:bold}.sub{font-size:12px;font-weight:bold}.note{fill:#444}"
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
                   f'stroke-width="0.5"><title>{name or _series(key)[0]}: {v:,.3f}</title></rect>')
        label = f"{name} {v:.2f}" if name else f"{v:.2f}"
        if name and w < len(label) * CHAR_W + 6:
            label = name
        if w >= len(label) * CHAR_W + 6:
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
           mark: float | None = None) -> tuple[str, float]:
    """A panel: a heading, one bar per row, an x axis (ticks, unit) and a legend; returns (svg, next y)."""
    top = max((sum(max(v, 0) for _, v in r.segments) for r in rows), default=0.0)
    vmax = max(vmax or 0.0, top, *(r.tick or 0 for r in rows), mark or 0.0) or 1.0
    ticks = _ticks(vmax)
    vmax = max(vmax, ticks[-1])
    scale = (PLOT_X1 - PLOT_X0) / vmax
    out = [_text(LABEL_X, y + 14, heading, cls="sub")]
    y0 = y + 24
    bottom = y0 + len(rows) * ROW_H
    for t in ticks:
        x = PLOT_X0 + t * scale
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{y0 - 2:.1f}" x2="{x:.1f}" y2="{bottom + 2:.1f}"/>')
        out.append(_text(x, bottom + 14, f"{t:g}", "middle"))
    if mark is not None:
        x = PLOT_X0 + mark * scale
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


def _cause_rows(r: Report) -> list[Row]:
    rows = [Row(_name(r.window.name, GROUP_CHARS), "baseline", [(c, _ms(r.critical_path.by_cause_ns.get(c, 0))) for c in CAUSES],
                right=f"{_ms(r.critical_path.length_ns):.3f} ms", cls="row base")]
    for p in r.predictions:
        cp = p.critical_path
        rows.append(Row("", _name(_opt_label(p), SUB_CHARS), [(c, _ms(cp.by_cause_ns.get(c, 0))) for c in CAUSES],
                        right=f"x{p.window.speedup:.3f}", cls="row prediction"))
    return rows


def _kind_rows(r: Report) -> list[Row]:
    rows = []
    for s in r.steps[:MAX_STEPS]:
        b = s.breakdown
        rows.append(Row(_name(s.name, GROUP_CHARS), "baseline", [(k, _ms(getattr(b, k))) for k in KINDS], _ms(s.replayed_ns),
                        f"{_ms(s.replayed_ns):.3f} ms", "row base"))
        for p in r.predictions:
            w = next((x for x in p.steps if x.name == s.name), None)
            if w is not None:
                rows.append(Row("", _name(_opt_label(p), SUB_CHARS), [(k, _ms(getattr(w.breakdown, k))) for k in KINDS],
                                _ms(w.predicted_ns), f"x{w.speedup:.3f}", "row prediction"))
    return rows


def _more_steps(r: Report, y: float) -> tuple[str, float]:
    extra = len(r.steps) - MAX_STEPS
    if extra <= 0:
        return "", y
    return _text(LABEL_X, y + 12, f"{extra:,} more ProfilerSteps not drawn (see the text or --json report)", cls="note"), y + 20


def fig_causes(r: Report) -> tuple[str, float]:
    """Figure 1: the traced window's critical path by cause; each ProfilerStep's time by task kind."""
    out = [_text(LABEL_X, 22, "Step time by cause", cls="title")]
    svg, y = _panel(34, "Traced window: critical path by cause (replayed baseline, then each prediction)",
                    _cause_rows(r), "time on the critical path (ms)", list(CAUSES))
    out.append(svg)
    if r.steps:
        svg, y = _panel(y + 8, "Each ProfilerStep: time by task kind (no per-step critical path in the report)",
                        _kind_rows(r), "time (ms), summed over CPU threads and GPU streams: a bar can pass the step's time (black tick)",
                        list(KINDS))
        out.append(svg)
        more, y = _more_steps(r, y)
        out.append(more)
    return "".join(out), y


def fig_ranking(r: Report) -> tuple[str, float]:
    """Figure 2: the ``--opt all`` ranking; the optimizations that do not apply as text."""
    out = [_text(LABEL_X, 22, "Speed-up of each optimization alone (--opt all)", cls="title")]
    ok = [x for x in r.ranking if x.predicted_ns >= 0 and x.speedup > 0]
    rows = [Row(_name(x.name, GROUP_CHARS), "", [("speedup", x.speedup)], right=f"x{x.speedup:.3f}", cls="row rank") for x in ok]
    y = 34
    if rows:
        svg, y = _panel(y, "Predicted speed-up of the traced window (replayed baseline / predicted); dashed line: x1, no change",
                        rows, "speed-up (x)", ["speedup"], mark=1.0)
        out.append(svg)
    for x in (x for x in r.ranking if x not in ok):
        out.append(_text(LABEL_X, y + 12, _name(f"{x.name}: {x.note}" if x.note.startswith("failed: ") else f"not applicable: {x.name}: {x.note}", int((WIDTH - 2 * LABEL_X) / CHAR_W)), cls="note"))
        y += 16
    return "".join(out), y + 4


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


def figures(r: Report) -> list[tuple[str, str, float]]:
    """(id, SVG body, height) of each figure the report has data for."""
    figs = [("fig-causes", *fig_causes(r))]
    if r.ranking:
        figs.append(("fig-ranking", *fig_ranking(r)))
    figs.append(("fig-gpu", *fig_gpu(r)))
    if r.comparison is not None:
        figs.append(("fig-compare", *fig_compare(r)))
    return figs


def _svg(body: str, height: float, ident: str = "", series: dict[str, tuple[str, str, str]] = SERIES) -> str:
    i = f' id="{ident}"' if ident else ""
    h = int(height + 0.999)
    return (f'<svg xmlns="http://www.w3.org/2000/svg"{i} viewBox="0 0 {WIDTH} {h}" width="{WIDTH}" height="{h}" role="img">'
            f"<style>{_STYLE}</style>{_defs(series)}<rect width=\"{WIDTH}\" height=\"{h}\" fill=\"#fff\"/>{body}</svg>")


def _heading(r: Report) -> str:
    trust = f"; baseline replay: {r.trust.verdict}" if r.trust is not None else ""
    return _name(f"daydream: {r.trace.extra.get('saved_table') or r.trace.source or 'trace'}{trust}", int((WIDTH - 2 * LABEL_X) / CHAR_W))


def render_svg(r: Report) -> str:
    """One SVG document: a heading line, then the figures one below the other."""
    parts, y = [_text(LABEL_X, 18, _heading(r), cls="note")], 26.0
    for ident, body, h in figures(r):
        parts.append(f'<g class="figure" id="{ident}" transform="translate(0,{y:.0f})">{body}</g>')
        y += round(h) + 12
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + _svg("".join(parts), y) + "\n"


def render_html(r: Report) -> str:
    """One self-contained HTML page (no scripts, nothing fetched) with each figure as inline SVG."""
    figs = "\n".join(f"<figure>{_svg(body, h, ident)}</figure>" for ident, body, h in figures(r))
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{_name(r.trace.source or 'daydream report', 120)}</title>\n"
            "<style>body{font-family:sans-serif;margin:1em auto;max-width:860px}figure{margin:0 0 1.5em}</style>\n"
            f"</head>\n<body>\n<h1>{_heading(r)}</h1>\n"
            "<p>Times in ms. Step time by cause: the critical path of the traced window by cause, and each "
            "ProfilerStep's time by task kind; then the ranking of --opt all (when run) and GPU busy vs idle time.</p>\n"
            f"{figs}\n</body>\n</html>\n")


def render_figure(r: Report, ident: str = "fig-causes") -> str:
    """One figure (``ident``: ``fig-causes``, ``fig-ranking``, ``fig-gpu`` or ``fig-compare``) as
    its own SVG document, under the same heading line as :func:`render_svg`.

    Raises:
        KeyError: the report has no data for that figure (e.g. ``fig-ranking`` without ``--opt all``).
    """
    body, h = {i: (b, hh) for i, b, hh in figures(r)}[ident]
    head = _text(LABEL_X, 18, _heading(r), cls="note")
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            + _svg(f'{head}<g class="figure" id="{ident}" transform="translate(0,26)">{body}</g>', h + 30) + "\n")
