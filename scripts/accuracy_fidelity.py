"""docs/accuracy.md section: what the development traces show of work launched before the trace
(the first step's hold, said by the report, not modelled) and of contention between streams
(measured, not modelled): ``section(traces, kernels)``, every number computed by this run."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daydream.errors import DaydreamError  # noqa: E402
from daydream.formats import load_trace  # noqa: E402
from daydream.graph import build_graph, profiler_steps  # noqa: E402
from daydream.graph.contention import MIN_CONTENTION_NAMES, measure_contention  # noqa: E402
from daydream.report.trust import TRUST_FAIR_PCT, held_before_trace  # noqa: E402

PATTERNS = ("*.json.gz", "*.json", "*.sqlite", "*.jsonl", "*.jsonl.gz")


def _us(ns: int) -> str:
    return "–" if ns < 0 else f"{ns / 1e3:,.1f}"


def _row(rel: str, path: Path) -> str:
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
    return (f"| {rel} | {_us(held) if held else '0'} | {pct:.2f} ({streams}) {said} | {factor} | {c.alone:,} / {c.overlapped:,} | "
            f"{c.kernels:,} | {comm} |")


def section(traces: Path, kernels: Path) -> list[str]:
    """Markdown lines of the section (``kernels`` unused)."""
    files = sorted({p for pat in PATTERNS for p in traces.rglob(pat)})
    rows = [_row(p.relative_to(traces).as_posix(), p) for p in files]
    return [
        "## Fidelity: work before the trace and contention",
        "",
        "Written by `scripts/accuracy_fidelity.py` (docs/model.md, \"Work launched before the window\" and",
        "\"Contention between streams: measured, not modelled\"). *Held*: the largest recorded start - t0 of a",
        "stream's first task without a launching call (`report.trust.held_before_trace`), in us, as % of the first",
        f"ProfilerStep (the window without steps) with the streams it holds; \"said\" where the verdict's line names",
        f"it (>= {TRUST_FAIR_PCT:g} %). *Contention*: the lower median over kernel names (per device) of the median",
        "duration of instances wholly overlapped by other streams' kernels over that of instances no other",
        f"stream's kernel overlapped (`graph/contention.py`), with the instances it comes from; \"off\" with fewer than",
        f"{MIN_CONTENTION_NAMES} such names. *Collective late start*: median us after launch + L and stream predecessor",
        "+ G that collective kernels started, when no other stream's kernel ran at that time / when one did (count).",
        "Neither is used by the replay or the predictions.",
        "",
        "| trace | held us | held % of first step (streams) | contention factor | alone / overlapped instances | kernels | collective late start us: alone / overlapped |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *rows,
    ]


if __name__ == "__main__":
    print("\n".join(section(ROOT.parent / "shared" / "traces", ROOT.parent / "shared" / "kernels")))
