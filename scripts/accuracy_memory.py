"""The memory section of docs/accuracy.md (``scripts/accuracy.py``'s ``SECTIONS`` hook).

    python scripts/accuracy_memory.py [--traces DIR]     # prints the section alone

For every trace in ``../shared/traces`` with allocator events (``docs/memory.md``): per device the
events, the recorded per-step peak (from ``Total Allocated`` where the trace records it, else the
running sum of ``Bytes`` in recorded order from the smallest level that keeps it at or above zero,
said so), the replayed per-step peak (the baseline replay's timeline, ``simulate/memory_replay.py``),
the largest per-step error in %, whether the level before the window (the offset) is known, and
the report's memory line (the verdict). A trace or device that cannot be judged gets its reason.
Every number is computed by the run.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daydream.errors import DaydreamError  # noqa: E402
from daydream.formats import load_trace  # noqa: E402
from daydream.graph import build_graph  # noqa: E402
from daydream.mapping import map_events  # noqa: E402
from daydream.report.memory_fit import memory_summary  # noqa: E402
from daydream.simulate import simulate  # noqa: E402
from daydream.simulate.memory_replay import recorded_memory, recorded_peaks, replay_memory  # noqa: E402

#: the done-when bound of issue 32: the replayed per-step peak within this % of the recorded one
TOLERANCE_PCT = 1.0


def _files(root: Path) -> list[Path]:
    pats = ("*.json.gz", "*.json", "*.sqlite", "*.jsonl", "*.jsonl.gz")
    return sorted({p for pat in pats for p in root.rglob(pat)})


def _dev(d: int) -> str:
    return "host" if d < 0 else f"GPU {d}"


def _esc(s: str) -> str:
    """A table cell: the trace's names are untrusted (pipes and newlines would break the row)."""
    return s.replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")


def trace_rows(path: Path, rel: str) -> tuple[list[str], bool]:
    """The table rows of one trace and whether it has memory events; raises DaydreamError."""
    t = load_trace(str(path))
    g = build_graph(t, map_events(t))
    if g.memory is None or not len(g.memory):
        return [], False
    tl = simulate(g)
    rep = {dm.device: dm for dm in replay_memory(g, tl)}
    totals = recorded_peaks(g)  # devices whose events all carry Total Allocated
    curve = {dm.device: dm for dm in recorded_memory(g)}  # the running sum on the recorded times
    summ = memory_summary(g, tl)
    verdict = {d.device: d.verdict for d in summ.devices} if summ else {}
    ev = g.memory.events
    rows = []
    for d, dm in sorted(rep.items()):
        n = int((ev.device == d).sum())
        if d in totals:
            rec_peak, rec_steps = totals[d]
            source = "Total Allocated"
        else:
            rc = curve[d]
            rec_peak, rec_steps = rc.peak_allocated_bytes, [s.allocated_bytes for s in rc.steps]
            source = "running sum (no totals: at least)"
        got_steps = [s.allocated_bytes for s in dm.steps]
        if rec_steps and len(rec_steps) == len(got_steps):
            errs = [abs(b - a) / a * 100 if a else (0.0 if b == a else float("inf")) for a, b in zip(rec_steps, got_steps)]
            scope = f"{len(rec_steps)} step{'s' if len(rec_steps) > 1 else ''}"
            rec_show, got_show = max(rec_steps), max(got_steps)
        else:
            errs = [abs(dm.peak_allocated_bytes - rec_peak) / rec_peak * 100 if rec_peak else 0.0]
            scope, rec_show, got_show = "window", rec_peak, dm.peak_allocated_bytes
        err = max(errs)
        offset = "known" if dm.exact_before else "unknown (lower bound)"
        if not dm.exact_before and d in totals:
            offset = "unknown"
        on_dev = ev.device == d
        loose = int((on_dev & (g.memory.anchor_row == -1)).sum())
        if loose == n:  # nothing anchored: the replay keeps every recorded time, so equality is no test
            judged = "not judged: no event of the device is anchored to a CPU task (kept at its recorded time)"
        else:
            judged = "ok" if err <= TOLERANCE_PCT else f"**over {TOLERANCE_PCT:g} %**"
        if loose and loose < n:
            judged += f"; {loose:,} events on threads without CPU tasks keep their recorded time"
        if not dm.exact_before:
            judged += "; peaks are lower bounds: what was allocated before the window is not recorded"
        rows.append(f"| {_esc(rel)} | {_dev(d)} | {n:,} | {scope} | {source} | {rec_show:,} | {got_show:,} | {err:.3f} | "
                    f"{offset} | {_esc(verdict.get(d, '–'))} | {judged} |")
    return rows, True


def section(traces: Path, kernels: Path) -> list[str]:
    """Markdown lines of the memory section (``## Memory: ...``), computed from ``traces``."""
    rows, without, refused = [], [], []
    for p in _files(traces):
        rel = p.relative_to(traces).as_posix()
        try:
            r, has = trace_rows(p, rel)
        except DaydreamError as e:
            refused.append(f"{rel} ({_esc(str(e))[:120]})")
            continue
        if has:
            rows += r
        else:
            without.append(rel)
    n_ok = sum(1 for r in rows if r.rstrip(" |").split(" | ")[-1].startswith("ok"))
    n_judged = sum(1 for r in rows if not r.rstrip(" |").split(" | ")[-1].startswith("not judged"))
    return [
        "## Memory: replayed per-step peaks against the recorded ones",
        "",
        "Written by `scripts/accuracy_memory.py` (`docs/memory.md`). For every trace with allocator events, per device:",
        "the recorded peak of each `ProfilerStep` (from `Total Allocated` where the trace records it; else the running",
        "sum of `Bytes` on the recorded times from the smallest level that keeps it at or above zero, a lower bound),",
        "the baseline replay's peak of the same step, and the largest per-step error (the window's where there are no",
        "steps; the peak columns show the largest step). Offset: whether the bytes allocated before the window are",
        "known (recorded totals) or not. Verdict: the report's memory line for that device.",
        f"Target: within {TOLERANCE_PCT:g} % on every step; {n_ok} of the {n_judged} judged device rows are "
        f"({len(rows) - n_judged} not judged, their reason given).",
        "",
        "| trace | device | events | scope | recorded from | recorded peak (B) | replayed peak (B) | max error % | offset | verdict | judged |",
        "|---|---|---:|---|---|---:|---:|---:|---|---|---|",
        *rows,
        "",
        f"Traces without allocator events ({len(without)}): " + (", ".join(without) if without else "none") + ".",
        "",
        f"Traces refused ({len(refused)}): " + ("; ".join(refused) if refused else "none") + ".",
    ]


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default=str(ROOT.parent / "shared" / "traces"))
    a = ap.parse_args()
    print("\n".join(section(Path(a.traces), ROOT.parent / "shared" / "kernels")))
