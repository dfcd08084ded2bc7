#!/usr/bin/env python3
"""Fit ``graph.build.latency.GAP_TRIM`` (the fraction of queued-pair gaps cut from each end before
their mean gives the GPU gap ``G``) on a fit set of real traces, which are then not used to judge it.

    python scripts/fit_gap_trim.py [--traces ../shared/traces]

Fit set (:data:`FIT`): the H100 Owlv2 inference trace and the 2-GPU Nsight export
``nsys_ai/mfu_2gpu_before`` (thousands of queued pairs each, two vendors' tools). The ResNet-50
development trace that first chose 5 % is not in it. For each trim of :data:`GRID` every fit trace
is replayed with the G it gives; the objective is the mean over the fit traces of the GPU start
error p50 (``report.trust.gpu_start_error_p50_us``, in % of the trace's median step or window), the
quantity G moves (gaps add up along a queue). Ties go to the smaller trim. Prints the table and the
chosen trim; the judged traces are the rest of ``scripts/accuracy.py``'s (docs/accuracy.md says which
rows are fit data).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daydream.analysis import analyze  # noqa: E402
from daydream.formats import load_trace  # noqa: E402
from daydream.graph.build import latency  # noqa: E402

FIT = ("tracelens/h100_google_owlv2-large-patch14-ensemble__1016001.json.gz", "nsys_ai/mfu_2gpu_before.sqlite")
GRID = (0.0, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4)


def objective(tables: dict, trim: float) -> dict[str, float]:
    """GPU start error p50 in % of the step (median ProfilerStep, else the window) per fit trace."""
    old = latency.GAP_TRIM
    latency.GAP_TRIM = trim
    try:
        out = {}
        for name, t in tables.items():
            r = analyze(t).report
            steps = sorted(s.measured_ns for s in r.steps) or [r.window.measured_ns]
            out[name] = 100.0 * r.trust.gpu_start_error_p50_us * 1e3 / steps[(len(steps) - 1) // 2]
        return out
    finally:
        latency.GAP_TRIM = old


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", default=str(ROOT.parent / "shared" / "traces"))
    a = ap.parse_args(argv)
    tables = {n: load_trace(str(Path(a.traces) / n)) for n in FIT}
    rows = [(trim, objective(tables, trim)) for trim in GRID]
    print("| trim | " + " | ".join(FIT) + " | mean |")
    best = None
    for trim, per in rows:
        m = sum(per.values()) / len(per)
        print(f"| {trim:g} | " + " | ".join(f"{per[n]:.4f}" for n in FIT) + f" | {m:.4f} |")
        if best is None or m < best[1] - 1e-12:
            best = (trim, m)
    print(f"chosen GAP_TRIM = {best[0]:g} (mean start error p50 {best[1]:.4f} % of the step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
