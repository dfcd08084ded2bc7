"""docs/accuracy.md section: the parallelism what-ifs (``fsdp``, ``zero:stage=1|2|3``,
``tp:degree=2``, ``pp:stages=2``; issue 35) on every trace in ../shared/traces: where each predicts
(its predicted window and, where the trace has allocator events, the per-GPU memory verdict) and,
where it does not, the reasons by what the trace lacks, counted. Degree 1 (``tp:degree=1``,
``pp:stages=1``, ``zero:world=1``) is checked to be the identity by
``tests/test_parallelism_everywhere.py``, not here. Hooked into ``scripts/accuracy.py``
(``SECTIONS``)."""

from __future__ import annotations

import glob
import os
import re
from collections import Counter
from pathlib import Path

from daydream.analysis import analyze
from daydream.errors import DaydreamError
from daydream.formats import load_trace

SPECS = ("fsdp", "zero:stage=1", "zero:stage=2", "zero:stage=3", "tp:degree=2", "pp:stages=2")


def _reason(text: str) -> str:
    """The reason's first clause, its counts of kernels or units as N (so that the same reason groups)."""
    head = re.split(r"[;:]", text, maxsplit=1)[0].strip()
    return re.sub(r"\b\d[\d,]* (?=collective kernels|forward units)", "N ", head).replace("|", "\\|")


def section(traces: Path, kernels: Path) -> list[str]:
    out = ["## Parallelism what-ifs on every trace: predict or say why",
           "",
           "Each of `fsdp`, `zero:stage=1|2|3`, `tp:degree=2`, `pp:stages=2` with its defaults on every trace in",
           "`../shared/traces` (`scripts/accuracy_parallelism.py`): the traces it predicts (replayed -> predicted window;",
           "the memory verdict of one rank, or of each pipeline stage's GPU, where the trace has allocator events), and",
           "the reasons it is not applicable, each with the number of traces it stops.",
           ""]
    paths = sorted(p for p in glob.glob(os.path.join(str(traces), "*", "*")) if p.endswith((".json", ".json.gz", ".sqlite")))
    if not paths:
        return [*out, "(traces not present)"]
    ok: dict[str, list[str]] = {s: [] for s in SPECS}
    why: dict[str, Counter] = {s: Counter() for s in SPECS}
    for p in paths:  # traces: about 30
        name = os.path.relpath(p, str(traces))
        try:
            t = load_trace(p)
        except DaydreamError as e:
            for s in SPECS:
                why[s][f"unreadable: {type(e).__name__}"] += 1
            continue
        for s in SPECS:
            r = analyze(t, [s]).report
            if r.not_applicable:
                why[s][_reason(next(iter(r.not_applicable.values())))] += 1
                continue
            pr = r.predictions[0]
            mem = f"; {pr.memory.line}" if pr.memory is not None else "; no allocator events"
            ok[s].append(f"{name}: {pr.window.replayed_ns / 1e6:,.3f} -> {pr.window.predicted_ns / 1e6:,.3f} ms{mem}")
    out += ["| what-if | predicts on | not applicable (traces) |", "|---|---|---|"]
    for s in SPECS:
        pred = "<br>".join(ok[s]) if ok[s] else "none"
        na = "<br>".join(f"{k} ({v})" for k, v in why[s].most_common())
        out.append(f"| `{s}` | {pred} | {na} |")
    out += ["", (f"{len(paths)} traces. `pp` needs a training step whose forward has several layers and, for the send/recv "
                 "size, shapes the kernel-cost library describes at the cut (or `act_bytes=`); `fsdp`/`zero` a one-GPU trace "
                 "with `AccumulateGrad` input shapes; `tp` module annotations, shapes and a GPU of the table.")]
    return out
