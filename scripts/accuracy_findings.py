"""docs/accuracy.md section: what the try-out findings of issues 31/36/37 changed, measured on the
shared traces. Every number is computed by this run.

    section(traces, kernels) -> list[str]   (called by scripts/accuracy.py, SECTIONS)

* A kernel's first launch in its process that loads its module (lazy loading) keeps its one-time
  part under ``fusion`` and ``cuda-graphs`` (``daydream/graph/startup.py``,
  ``first_launch_one_time_ns``): per trace, the first launches with a one-time part, their time,
  and each what-if's predicted speed-up with that part kept.
* The kernel table's launching op on Nsight Systems traces (the mapper's op: the op-like NVTX range
  enclosing the launch): the share of GPU task time left "(no op)", and the GPU tasks without a
  launching call in the trace (the only ones that should stay so).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from daydream.analysis import analyze
from daydream.errors import DaydreamError
from daydream.events.table import Kind
from daydream.formats import load_trace
from daydream.graph.startup import first_launch_one_time_ns
from daydream.report.tables import NO_OP

ONE_TIME = ("nsys_ai/mock.sqlite", "hta/simple_add.json.gz",
            "kineto_tbplugin/resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz",
            "nsys_ai/mfu_2gpu_before.sqlite")
NSYS = ("nsys_ai/mfu_2gpu_before.sqlite", "nsys_ai/mfu_2gpu_after.sqlite", "nsys_ai/mock.sqlite",
        "extrap/profile1.sqlite", "extrap/con_kernel.sqlite", "extrap/ex-gpu.s10.sqlite")


def _speedup(t, opt: str) -> str:
    try:
        r = analyze(t, opts=[opt]).report
    except DaydreamError as e:
        return f"error: {e}"
    if not r.predictions:
        return "not applicable"
    w = r.predictions[0].window
    return f"{w.speedup:.3f}x ({w.replayed_ns / 1e6:,.3f} -> {w.predicted_ns / 1e6:,.3f} ms)"


def section(traces: Path, kernels: Path) -> list[str]:
    out = ["## Try-out findings: first launches and the nsys launching op", "",
           "Written by `scripts/accuracy_findings.py`. A kernel's first launch in its process that lasts over",
           "`STARTUP_MIN_NS` loads its module (lazy loading); its time beyond the process's longest repeat launch is",
           "one-time and stays under `fusion` and `cuda-graphs` (`docs/optimizations.md`).", "",
           "| trace | first launches with a one-time part | one-time ms | fusion | cuda-graphs |", "|---|---|---|---|---|"]
    for name in ONE_TIME:
        p = traces / name
        if not p.exists():
            out.append(f"| {name} | trace absent | | | |")
            continue
        t = load_trace(str(p))
        g = analyze(t).graph
        once = first_launch_one_time_ns(g)
        out.append(f"| {name} | {int((once > 0).sum()):,} | {int(once.sum()) / 1e6:,.3f} | {_speedup(t, 'fusion')} | "
                   f"{_speedup(t, 'cuda-graphs')} |")
    out += ["", "The kernel table's launching op on Nsight Systems traces: the mapper's op (the op-like NVTX range",
            "enclosing the launch, `docs/mapping.md`). GPU tasks left `(no op)`: their share of GPU task time, and how",
            "many of them have no launching call in the trace.", "",
            "| trace | GPU tasks | `(no op)` tasks | `(no op)` share of GPU time | `(no op)` tasks without a launch call | distinct ops |",
            "|---|---|---|---|---|---|"]
    for name in NSYS:
        p = traces / name
        if not p.exists():
            out.append(f"| {name} | trace absent | | | | |")
            continue
        r = analyze(load_trace(str(p)))
        g, rows = r.graph, r.report.tables.kernels
        gpu = np.flatnonzero(g.node_kind != 0)
        no = [k for k in rows if k.op == NO_OP]
        total = max(sum(k.total_ns for k in rows), 1)
        op = g.mapping.op_id[gpu] if g.mapping is not None else np.full(len(gpu), -1)
        unlaunched = int(((op < 0) & (g.launch[gpu] < 0)).sum())
        kern = int((g.node_kind[gpu] == Kind.KERNEL).sum())
        out.append(f"| {name} | {len(gpu):,} ({kern:,} kernels) | {sum(k.calls for k in no):,} | "
                   f"{100 * sum(k.total_ns for k in no) / total:.1f} % | {unlaunched:,} | {len({k.op for k in rows} - {NO_OP}):,} |")
    return out
