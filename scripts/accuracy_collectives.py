"""docs/accuracy.md section: the collective-cost fit (``daydream/costmodel/comm_fit.py``) on every
trace or job in ../shared/traces with sized collectives, per operation: the fit's residuals
(|relative error| median / p90 of the trace's own times: a job's transfers, one rank's kernel
durations) and the link preset's error on the same collectives (the GPU's board link, inferred).
The fit and its residuals use the same collectives (in-sample: how well the alpha-beta form fits,
not a prediction's error). Hooked into ``scripts/accuracy.py`` (``SECTIONS``)."""

from __future__ import annotations

import glob
import os
from pathlib import Path

from daydream.errors import DaydreamError
from daydream.job.transfers import fit_job, fit_trace

#: (label, paths relative to the traces folder: one file, or a job's rank files by glob)
SUBJECTS = [("param_dlrm, 8 ranks", "param_dlrm/*.json.gz"), ("hta/nccl_data, one rank", "hta/nccl_data.json.gz"),
            ("tracelens/b200_eager_trace, one rank", "tracelens/b200_eager_trace.json.gz")]


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def section(traces: Path, kernels: Path) -> list[str]:
    out = ["## Collective costs: the fit's residuals and the presets' error",
           "",
           "Per operation on each trace with sized collectives (`daydream-comm-fit`): the alpha-beta fit",
           "`t = L + w(op, n) S / B` on the trace's own times (a job: every rank's transfer after the last",
           "arrival; one rank: kernel durations, waits for peers included), its |relative error| median / p90 on",
           "those same collectives (in-sample), and the link preset's (the GPU's board link, inferred) on them;",
           "bias: the preset's median signed error (+: slower than recorded).",
           "",
           "| trace (time fitted) | operation | collectives | sizes (B) | fit: L, busbw | fit error median / p90 | preset | preset error median / p90 (bias) |",
           "|---|---|---|---|---|---|---|---|"]
    for label, rel in SUBJECTS:
        paths = sorted(glob.glob(os.path.join(str(traces), rel)))
        if not paths:
            out.append(f"| {label} | (trace not present) | | | | | | |")
            continue
        try:
            doc = fit_job(paths) if len(paths) > 1 else fit_trace(paths[0])
        except DaydreamError as e:
            out.append(f"| {label} | not fitted: {e} | | | | | | |")
            continue
        what = "transfers" if len(paths) > 1 else "durations, with waits"
        for name, o in doc["ops"].items():
            fr, pr = o["fit_residual"], o["preset_residual"]
            scale = o.get("one_size_preset_scale")
            fit = (f"{o['latency_us']:,.1f} us, {o['busbw_GBps']:,.1f} GB/s" if not scale else
                   f"one size, not a fit: preset x {scale:.2f}")
            err = f"{_pct(fr['median_abs'])} / {_pct(fr['p90_abs'])}" if not scale else "-"
            pre = (f"{_pct(pr['median_abs'])} / {_pct(pr['p90_abs'])} ({pr['median_signed']:+.1%})" if pr else
                   "- (link not known)")
            out.append(f"| {label} ({what}) | {name} | {o['count']} x n={o['group_size']} | {o['size_min_bytes']:,} - "
                       f"{o['size_max_bytes']:,} | {fit} | {err} | {doc['preset'] or '-'} | {pre} |")
    return out
