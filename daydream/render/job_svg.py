"""Pictures of a job's report (:class:`~daydream.report.job_model.JobReport`, ``daydream-analyze
FOLDER --plot FILE.svg`` or ``.html``): per rank, its step measured and in the coupled replay
(with ``--opt``: and predicted, each what-if's coupled replay, as the single-trace plot draws it),
and its recorded time inside collectives split into waiting for each peer (the rank that
arrived last) and transfer (after the last arrival). The straggler's rows are marked.

Drawn with :mod:`daydream.render.svg`'s panels, series and conventions (grey-scale-safe fills
with hatches, every string from the trace through :func:`daydream.util.display.markup_text`). The
numbers are the JSON report's (``rank_rows``), in ms.
"""

from __future__ import annotations

from ..report.job_model import JobReport, RankRow
from .svg import (
    CHAR_W,
    GROUP_CHARS,
    JOB_SERIES,
    LABEL_X,
    MAX_STEPS,
    SUB_CHARS,
    WIDTH,
    Row,
    _ms,
    _name,
    _panel,
    _svg,
    _text,
)

#: ranks drawn; the others are counted in a note (the text and JSON reports have them all)
MAX_RANKS = MAX_STEPS


def _rank_label(r: RankRow, straggler: int | None) -> str:
    return _name(f"rank {r.rank}" + (" STRAGGLER" if r.rank == straggler else ""), GROUP_CHARS)


def _step_rows(rep: JobReport, straggler: int | None) -> list[Row]:
    rows = []
    for i, r in enumerate(rep.rank_rows[:MAX_RANKS]):
        cls = " straggler" if r.rank == straggler else ""
        rows.append(Row(_rank_label(r, straggler), "measured", [("step_measured", _ms(r.measured_ns))],
                        right=f"{_ms(r.measured_ns):.3f} ms", cls="row measured" + cls))
        rows.append(Row("", "coupled replay", [("step_replayed", _ms(r.replayed_ns))],
                        right=f"error {r.error_pct:+.2f} %", cls="row replayed" + cls))
        for p in rep.predictions:
            if i < len(p.rank_predicted_ns):
                ns = p.rank_predicted_ns[i]
                rows.append(Row("", _name(p.name, SUB_CHARS), [("step_predicted", _ms(ns))],
                                right=f"{r.replayed_ns / max(ns, 1):.3f}x", cls="row prediction" + cls))
    return rows


def _wait_rows(rep: JobReport, straggler: int | None) -> list[Row]:
    """One stacked bar per rank: its recorded wait for each peer (by rank, alternating shades),
    then the transfer time."""
    rows = []
    for r in rep.rank_rows[:MAX_RANKS]:
        peers = sorted(r.waited_for.items(), key=lambda kv: int(kv[0]) if kv[0].lstrip("-").isdigit() else 0)
        segs = [("wait_a" if i % 2 == 0 else "wait_b", _ms(ns)) for i, (_, ns) in enumerate(peers)] + [("transfer", _ms(r.transfer_ns))]
        labels = tuple(_name(f"r{p}", SUB_CHARS) for p, _ in peers) + ("transfer",)
        cls = "row wait straggler" if r.rank == straggler else "row wait"
        rows.append(Row(_rank_label(r, straggler), f"{r.last_arrivals} last", segs,
                        right=f"{_ms(r.wait_measured_ns + r.transfer_ns):.3f} ms", cls=cls, labels=labels))
    return rows


def fig_job(rep: JobReport) -> tuple[str, float]:
    """The job figure: each rank's step (measured, coupled replay), then its wait by peer and transfer."""
    s = rep.straggler
    who = s.rank if s is not None else None
    line = (f"straggler: rank {s.rank} (peers waited {_ms(s.caused_wait_ns):.3f} ms for it in all)" if s is not None
            else "no straggler found")
    full = int((WIDTH - 2 * LABEL_X) / CHAR_W)
    out = [_text(LABEL_X, 22, "Job: each rank's step and its wait for peers", cls="title"),
           _text(LABEL_X, 38, _name(f"{rep.ranks} ranks, {rep.collectives} collectives, clock {rep.clock}; {line}", full), cls="note")]
    whatifs = [f"what-if {p.name}: job step {_ms(p.replayed_ns):.3f} -> {_ms(p.predicted_ns):.3f} ms ({p.speedup:.3f}x)"
               for p in rep.predictions] + [f"what-if {k}: not applicable: {v}" for k, v in rep.not_applicable.items()]
    out += [_text(LABEL_X, 54 + 16 * k, _name(w, full), cls="note") for k, w in enumerate(whatifs)]
    top = 44 + 16 * len(whatifs)
    what = ", then each --opt's prediction (right: the rank's speed-up)" if rep.predictions else ""
    svg, y = _panel(top, f"Each rank's traced window: measured, then the coupled replay{what} (dashed: the job's step, measured)",
                    _step_rows(rep, who), "time (ms)",
                    ["step_measured", "step_replayed"] + (["step_predicted"] if rep.predictions else []),
                    mark=_ms(rep.step_measured_ns))
    out.append(svg)
    svg, y = _panel(y + 8, "Time inside collectives, recorded: waiting, by the peer that arrived last (rN), then transfer",
                    _wait_rows(rep, who), "time (ms); left of the bar: collectives the rank reached last", ["wait_a", "wait_b", "transfer"])
    out.append(svg)
    extra = len(rep.rank_rows) - MAX_RANKS
    if extra > 0:
        out.append(_text(LABEL_X, y + 12, f"{extra:,} more ranks not drawn (see the text or --json report)", cls="note"))
        y += 20
    return "".join(out), y


def _heading(rep: JobReport) -> str:
    step = f"job step {_ms(rep.step_measured_ns):.3f} ms measured, {_ms(rep.step_replayed_ns):.3f} ms coupled replay"
    return _name(f"daydream job: {rep.ranks} ranks; {step}", int((WIDTH - 2 * LABEL_X) / CHAR_W))


def render_job_svg(rep: JobReport) -> str:
    """One SVG document: a heading line, then the job figure."""
    body, h = fig_job(rep)
    head = _text(LABEL_X, 18, _heading(rep), cls="note")
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            + _svg(f'{head}<g class="figure" id="fig-job" transform="translate(0,26)">{body}</g>', h + 30, series=JOB_SERIES) + "\n")


def render_job_html(rep: JobReport) -> str:
    """One self-contained HTML page (no scripts, nothing fetched) with the job figure inline."""
    body, h = fig_job(rep)
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>daydream job report</title>\n"
            "<style>body{font-family:sans-serif;margin:1em auto;max-width:860px}figure{margin:0 0 1.5em}</style>\n"
            f"</head>\n<body>\n<h1>{_heading(rep)}</h1>\n"
            "<p>Times in ms. Per rank: its traced window measured and in the coupled replay"
            + (", then predicted by each what-if (the job replayed coupled after it)" if rep.predictions else "")
            + "; then its recorded time "
            "inside collectives, waiting for each peer that arrived last, and transfer.</p>\n"
            f"<figure>{_svg(body, h, 'fig-job', JOB_SERIES)}</figure>\n</body>\n</html>\n")
