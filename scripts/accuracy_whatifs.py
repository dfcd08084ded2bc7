"""docs/accuracy.md's what-if section: every prediction the repository's traces can check against a
measurement (``scripts/accuracy.py``, ``SECTIONS``).

A row is a what-if applied to one trace, the tool's prediction of its step, and the step measured
in the trace recorded with that change made for real, where the repository holds one:

* ``gpu-upgrade`` between the two bert-small inference traces (tracelens: H100 and MI300X, the same
  program), both directions: the default prediction, and the one a user with a trace of the target
  platform would make (``launch_latency_ns`` and ``launch_cpu_ns`` taken from that trace, as
  ``scripts/cross_gpu.py`` does);
* the nsys_ai ``mfu_2gpu_before`` / ``after`` pair: ../shared/traces/SOURCES.md says the repository
  does not state what changed, so no what-if corresponds to it; the row gives the measured change
  only;
* ``dataloader`` on the ResNet-50 trace recorded with ``num_workers=0``: the prediction, with no
  measured trace (the tb_plugin sample recorded with workers is not kept in ../shared/traces).

Columns: the what-if, predicted and measured step (ms; a trace's steps summed), the error of the
prediction in % of the measurement, the tool's range of the speed-up (``report.predictions[].range``:
what the per-kernel library leaves open, where the what-if gives one) and whether the measured
speed-up lies in it, and the tool's verdict on the source's baseline replay (``report.trust``).
Every number is computed by this run.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daydream.analysis import analyze  # noqa: E402
from daydream.costmodel.gpus import gpu_of_device  # noqa: E402
from daydream.formats import load_trace  # noqa: E402
from daydream.optimizations.common import median_launch_ns  # noqa: E402

BERT = ("tracelens/h100_gaunernst_bert-small-uncased__1016001.json.gz",
        "tracelens/mi300_gaunernst_bert-small-uncased__1016001.json.gz")
MFU = ("nsys_ai/mfu_2gpu_before.sqlite", "nsys_ai/mfu_2gpu_after.sqlite")
RESNET = "kineto_tbplugin/resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"


def _verdict(report) -> str:
    t = report.trust
    if t is None:
        return "–"
    order = {"good": 0, "fair": 1, "unreliable": 2}
    extra = f"; start error {t.start_verdict}" if order.get(t.start_verdict, 0) > order.get(t.verdict, 0) else ""
    return t.verdict + extra


def _measured_ns(report) -> int:
    """The steps' measured time summed (the window's where the trace has no ProfilerStep)."""
    return sum(s.measured_ns for s in report.steps) if report.steps else report.window.measured_ns


def _predicted(pred) -> tuple[int, int]:
    """(predicted, replayed) time of the steps summed (the window's without steps)."""
    if pred.steps:
        return sum(s.predicted_ns for s in pred.steps), sum(s.replayed_ns for s in pred.steps)
    return pred.window.predicted_ns, pred.window.replayed_ns


def _row(what: str, src_report, pred, measured_ns: int) -> str:
    p, rep = _predicted(pred)
    src = _measured_ns(src_report)
    err = 100.0 * (p - measured_ns) / measured_ns
    measured_speedup = src / measured_ns
    rng, inside = "–", "–"
    if pred.range is not None:
        lo, hi = pred.range.speedup_low, pred.range.speedup_high
        rng = f"{lo:.3f}x – {hi:.3f}x"
        inside = "yes" if lo <= measured_speedup <= hi else "no"
    return (f"| {what} | {p / 1e6:,.3f} | {measured_ns / 1e6:,.3f} | {err:+.1f} % | {rep / p:.3f}x | {measured_speedup:.3f}x | "
            f"{rng} | {inside} | {_verdict(src_report)} |")


def _gpu_rows(traces: Path) -> list[str]:
    rows = []
    tables = [load_trace(str(traces / p)) for p in BERT]
    base = [analyze(t) for t in tables]
    for i, j in ((0, 1), (1, 0)):
        src, tgt = base[i], base[j]
        gs, gt = gpu_of_device(src.graph.devices[0]), gpu_of_device(tgt.graph.devices[0])
        measured = _measured_ns(tgt.report)
        host = {"launch_latency_ns": int(tgt.graph.launch_latency_ns), "launch_cpu_ns": int(median_launch_ns(tgt.graph))}
        for label, extra in (("", {}), (", host from the target trace", host)):
            r = analyze(tables[i], [("gpu-upgrade", {"target": gt.name, **extra})])
            if not r.report.predictions:
                rows.append(f"| gpu-upgrade {gs.name} -> {gt.name}{label} | not applicable: "
                            f"{'; '.join(r.report.not_applicable.values())} | | | | | | | |")
                continue
            rows.append(_row(f"`gpu-upgrade:target={gt.name}` ({gs.name} -> {gt.name}{label})", src.report,
                             r.report.predictions[-1], measured))
    busy = [sum(s.gpu_busy_measured_ns for s in b.report.steps) / _measured_ns(b.report) for b in base]
    cpu = [sum(s.breakdown.cpu_gap_ns for s in b.report.steps) / _measured_ns(b.report) for b in base]
    names = [gpu_of_device(b.graph.devices[0]).name for b in base]
    rows += ["", f"Why the error: the GPU is busy {100 * busy[0]:.1f} % of the step on the {names[0]} and {100 * busy[1]:.1f} % "
             f"on the {names[1]}, and the host's time between calls is {100 * cpu[0]:.1f} % and {100 * cpu[1]:.1f} % of it: the "
             "step is bound by the host, which `gpu-upgrade` keeps (only the launch costs change with the `host from the",
             "target trace` variant), while the two recordings ran on different hosts and software stacks. The baseline",
             "verdict judges the source's replay, not the what-if's assumption that the host stays the same; the range",
             "covers the kernel library's open choices only, so it is as narrow as the GPU's share of the step."]
    return rows


def _mfu_line(traces: Path) -> list[str]:
    before, after = (analyze(load_trace(str(traces / p))).report for p in MFU)
    b, a = before.window.measured_ns, after.window.measured_ns
    return [f"`{MFU[0]}` -> `{MFU[1]}`: no row. ../shared/traces/SOURCES.md says the repository that holds them does not",
            "state what changed between the two exports (two 0.3 s windows cut from a 2-GPU `torchrun` run), so no",
            f"what-if corresponds to the change; measured, the traced window is {b / 1e6:,.3f} ms before and "
            f"{a / 1e6:,.3f} ms after ({100.0 * (a - b) / b:+.1f} %; baseline verdicts {_verdict(before)} / {_verdict(after)})."]


def _dataloader_line(traces: Path) -> list[str]:
    r = analyze(load_trace(str(traces / RESNET)), [("dataloader", {})])
    if not r.report.predictions:
        return [f"`dataloader` on `{RESNET}`: not applicable ({'; '.join(r.report.not_applicable.values())})."]
    p, rep = _predicted(r.report.predictions[-1])
    return [f"`dataloader` (defaults: 4 workers, prefetch 2) on `{RESNET}` (recorded with `num_workers=0`): predicted",
            f"{rep / 1e6:,.3f} -> {p / 1e6:,.3f} ms over its steps ({rep / p:.3f}x; baseline verdict {_verdict(r.report)}).",
            "No measurement: the trace of the same run with worker processes (the tb_plugin sample",
            "`resnet50_num_workers_4`) is not kept in ../shared/traces, so the prediction is unchecked."]


def section(traces: Path, kernels: Path) -> list[str]:
    """The Markdown lines of the section (its ``## `` heading first)."""
    out = ["## What-ifs against measurements", "",
           "Each prediction below is the tool's (`daydream.analysis.analyze` with the what-if, as `--opt` runs it),",
           "put beside the step measured in the trace recorded with the change made for real, where the",
           "repository holds one (`scripts/accuracy_whatifs.py`). Steps are the traces' ProfilerSteps, summed;",
           "error = (predicted - measured) / measured. The range is the tool's speed-up range for the",
           "prediction (what the kernel library leaves open), \"in range\" whether the measured speed-up",
           "(source's measured step / target's) lies in it; the verdict is the tool's on the source's baseline replay.",
           "",
           "| what-if (source -> target) | predicted ms | measured ms | error | predicted speed-up | measured speed-up | tool's range | in range | tool verdict |",
           "|---|---:|---:|---:|---:|---:|---|---|---|",
           *_gpu_rows(traces), "",
           *_mfu_line(traces), "",
           *_dataloader_line(traces)]
    return out


if __name__ == "__main__":
    print("\n".join(section(ROOT.parent / "shared" / "traces", ROOT.parent / "shared" / "kernels")))
