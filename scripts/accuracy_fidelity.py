"""docs/accuracy.md section: what the development traces show of work launched before the trace
(the first step's hold, said by the report, not modelled) and of contention between streams
(measured; the model ``--contention`` applies, off by default), with the baseline replay's error
with the measured factor on vs off: ``section(traces, kernels)``, every number computed by this run."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daydream.analysis import analyze  # noqa: E402
from daydream.errors import DaydreamError  # noqa: E402
from daydream.formats import load_trace  # noqa: E402
from daydream.graph import build_graph, profiler_steps  # noqa: E402
from daydream.graph.contention import MIN_CONTENTION_NAMES, measure_contention, with_contention  # noqa: E402
from daydream.simulate.stretched_replay import contended  # noqa: E402
from daydream.simulate.replay import replay  # noqa: E402
from daydream.report.trust import TRUST_FAIR_PCT, held_before_trace  # noqa: E402

PATTERNS = ("*.json.gz", "*.json", "*.sqlite", "*.jsonl", "*.jsonl.gz")


def _us(ns: int) -> str:
    return "–" if ns < 0 else f"{ns / 1e3:,.1f}"


def _row(rel: str, path: Path, on_off: list[str]) -> str:
    """The trace's row of the first table; its row of the on/off table appended to ``on_off``
    where a factor is measured."""
    try:
        table = load_trace(str(path))
    except DaydreamError as e:
        return f"| {rel} | refused: {e} | | | | | |"
    g = build_graph(table)
    held, streams = held_before_trace(g)
    steps = sorted(profiler_steps(table), key=lambda s: s[1])
    first = next((e - s for _, s, e, _, _ in steps if e > s), 0) or (int(g.rec_end_ns.max()) - int(g.t0_ns) if g.n else 0)
    pct = held * 100 / first if first > 0 else 0.0
    said = "said" if held > 0 and pct >= TRUST_FAIR_PCT else "–"
    c = measure_contention(g)
    factor = f"{c.factor:.3f}" if not c.reason else f"off ({c.names} name{'s' * (c.names != 1)})"
    comm = (f"{_us(c.comm_late_alone_ns)} ({c.comm_alone:,}) / {_us(c.comm_late_overlapped_ns)} ({c.comm_overlapped:,})"
            if c.comm_alone + c.comm_overlapped else "–")
    if not c.reason:
        on_off.append(_on_off(rel, table, g, c.factor))
    return (f"| {rel} | {_us(held) if held else '0'} | {pct:.2f} ({streams}) {said} | {factor} | {c.alone:,} / {c.overlapped:,} | "
            f"{c.kernels:,} | {comm} |")


def _on_off(rel: str, table, g, factor: float) -> str:
    """One row of the on/off table: the baseline replay's errors with ``--contention off`` and
    ``measured``, the kernels the model took back to their alone duration and stretched, and the
    replays its fixed point took (on the built graph, before the launch-order settling)."""
    r_off, r_on = (analyze(table, rank_all=True, contention=m).report for m in ("off", "measured"))
    off, on = r_off.trust, r_on.trust
    gc = with_contention(g, factor, "measured")
    _, _, _, stretched, rounds = contended(gc, lambda d: replay(gc, gc.order, dur=d))
    sp_on = {r.name: r.speedup for r in r_on.ranking if r.predicted_ns >= 0}
    moved = [(abs(sp_on[r.name] - r.speedup), r.name, r.speedup, sp_on[r.name]) for r in r_off.ranking
             if r.predicted_ns >= 0 and r.name in sp_on]
    most = max(moved, default=None)
    most_s = f"{most[1]} {most[2]:.3f}x / {most[3]:.3f}x" if most and most[0] > 0 else "none changed" if most else "–"
    return (f"| {rel} | {factor:.3f} | {gc.counts['contention_unstretched']:,} / {stretched:,} | {rounds} | "
            f"{off.window_error_pct:.3f} / {on.window_error_pct:.3f} | {off.max_step_error_pct:.3f} / {on.max_step_error_pct:.3f} "
            f"({on.steps}) | {off.gpu_start_error_p50_us:,.1f} / {on.gpu_start_error_p50_us:,.1f} | "
            f"{off.gpu_start_error_p99_us:,.1f} / {on.gpu_start_error_p99_us:,.1f} | {most_s} |")


def section(traces: Path, kernels: Path) -> list[str]:
    """Markdown lines of the section (``kernels`` unused)."""
    files = sorted({p for pat in PATTERNS for p in traces.rglob(pat)})
    on_off: list[str] = []
    rows = [_row(p.relative_to(traces).as_posix(), p, on_off) for p in files]
    return [
        "## Fidelity: work before the trace and contention",
        "",
        "Written by `scripts/accuracy_fidelity.py` (docs/model.md, \"Work launched before the window\" and",
        "\"Contention between streams\"). *Held*: the largest recorded start - t0 of a",
        "stream's first task without a launching call (`report.trust.held_before_trace`), in us, as % of the first",
        f"ProfilerStep (the window without steps) with the streams it holds; \"said\" where the verdict's line names",
        f"it (>= {TRUST_FAIR_PCT:g} %). *Contention*: the lower median over kernel names (per device) of the median",
        "duration of instances that started while another stream's kernel ran over that of instances no other",
        f"stream's kernel overlapped (`graph/contention.py`), with the instances it comes from; \"off\" with fewer than",
        f"{MIN_CONTENTION_NAMES} such names. *Collective late start*: median us after launch + L and stream predecessor",
        "+ G that collective kernels started, when no other stream's kernel ran at that time / when one did (count).",
        "The hold is not modelled; the contention factor is used only with `--contention measured`.",
        "",
        "| trace | held us | held % of first step (streams) | contention factor | alone / overlapped instances | kernels | collective late start us: alone / overlapped |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        "The baseline replay with the contention model off (the default) / on with the trace's measured factor",
        "(`--contention measured`), for the traces with a factor: the traced window's error and the largest",
        "ProfilerStep error (|replayed - measured| / measured, %, with the steps compared), and the GPU tasks'",
        "start error (median and p99 |replayed - recorded start|, us). *Kernels*: those the model took back to",
        "their alone duration (recorded / factor: they started while another stream's kernel ran) / those its",
        "replay stretched; *rounds*: the replays its fixed point took (`simulate/stretched_replay.py`). *Most moved*:",
        "the `--opt all` optimization whose predicted speed-up of the traced window the model changes most, off / on.",
        "",
        "| trace | factor | kernels taken back / stretched | rounds | window error % off / on | max step error % off / on (steps) | GPU start p50 us off / on | p99 us off / on | most moved: speed-up off / on |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        *on_off,
    ]


if __name__ == "__main__":
    print("\n".join(section(ROOT.parent / "shared" / "traces", ROOT.parent / "shared" / "kernels")))
