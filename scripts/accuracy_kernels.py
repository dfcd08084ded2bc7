"""docs/accuracy.md section: the kernel-cost model (daydream.costmodel), per op class.

    section(traces, kernels) -> list[str]      # called by scripts/accuracy.py (SECTIONS)
    python scripts/accuracy_kernels.py         # prints the section alone

Two measurements, every number computed by the run:

1. Development GPUs (``kernels``/neusight: P100, T4, V100, A100): leave-one-GPU-out
   (:func:`daydream.kernel_tool.accuracy.leave_one_out`: constants fitted on three GPUs, each row
   of the fourth predicted from each other GPU's row of the same shape). Per source -> target pair
   and op class: median and 90th percentile of |predicted / measured - 1|; then per class the
   median over the pairs' medians beside the goal (issue 33, ``GOALS``).
2. Real traces (``traces``/tracelens: the H100 and MI300X bert-small steps): each trace predicted
   on the other's GPU with ``gpu-upgrade`` (default model: the library), as scripts/cross_gpu.py
   does. Step time (the ProfilerStep windows, replayed) and kernel time against the target's
   measured ones; per kernel class, kernels paired in launch order (the two traces run the same
   program: the class sequences are checked equal, else the per-kernel rows are left out with a
   line saying so) with the median and p90 per-kernel |error| and the error of the class's sum.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from daydream.kernel_tool.accuracy import CLASS_ORDER, GOALS, leave_one_out, load  # noqa: E402

HEADING = "## Kernel cost model (per op class)"


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _short(name: str) -> str:
    return name.replace(" PCIe", "").replace("40GB ", "")


def development(kernels: Path) -> list[str]:
    """Tables of part 1 (module docstring)."""
    data = load(kernels / "neusight")
    res = leave_one_out(data)
    cls = [c for c in CLASS_ORDER if any(r[2] == c for r in res["cross"])]
    L = ["Leave-one-GPU-out on the development GPUs (`../shared/kernels/neusight`, FP32): constants fitted on",
         "three GPUs, every row of the fourth predicted from each other GPU's row of the same op and shape",
         "(`daydream.kernel_tool.accuracy`). Each cell: median / p90 of |predicted / measured − 1| over the pair's rows.", "",
         "| source → target | " + " | ".join(cls) + " |", "|---|" + "---|" * len(cls)]
    by = {(r[0], r[1], r[2]): r for r in res["cross"]}
    for s, h in dict.fromkeys((r[0], r[1]) for r in res["cross"]):
        cells = []
        for c in cls:
            r = by.get((s, h, c))
            cells.append(f"{_pct(r[3])} / {_pct(r[4])}" if r else "–")
        L.append(f"| {_short(s)} → {_short(h)} | " + " | ".join(cells) + " |")
    npairs = len(dict.fromkeys((r[0], r[1]) for r in res["cross"]))
    L += ["", f"Per class, over the {npairs} ordered pairs (the goal is on the median of the pairs' medians):", "",
          "| class | rows | median of medians | worst pair median | median of p90s | in range (rows) | goal | |",
          "|---|---|---|---|---|---|---|---|"]
    for c in cls:
        rs = [r for r in res["cross"] if r[2] == c]
        med = float(np.median([r[3] for r in rs]))
        n = sum(r[5] for r in rs)
        inr = sum(r[5] * r[6] for r in rs) / max(n, 1)
        ok = "met" if med <= GOALS[c] else "**missed**"
        L.append(f"| {c} | {n:,} | {_pct(med)} | {_pct(max(r[3] for r in rs))} | {_pct(float(np.median([r[4] for r in rs])))} | "
                 f"{_pct(inr)} | ≤ {_pct(GOALS[c])} | {ok} |")
    return L


def _err(p: float, m: float) -> str:
    return f"{(p - m) / m * 100:+.1f} %" if m else "–"


def real_pair(traces: Path) -> list[str]:
    """Tables of part 2 (module docstring)."""
    import cross_gpu as X
    from daydream.costmodel.gpus import gpu_of_device
    from daydream.events.table import Kind
    from daydream.graph.kernels import CLASSES, kernel_info
    from daydream.optimizations import parse_spec
    from daydream.optimizations.kernel_cost import range_ends
    from daydream.simulate import simulate

    paths = [traces / p for p in X.PAIR]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        return ["", f"Real pair: not found ({', '.join(missing)}); not measured."]
    a, b = X.load(str(paths[0])), X.load(str(paths[1]))
    head = ["", "Real traces: the same Hugging Face bert-small bf16 inference step on an H100 and an MI300X",
            f"(`{X.PAIR[0]}`, `{X.PAIR[1]}`), each predicted on the other's GPU by `gpu-upgrade` (the library;",
            "host unchanged; docs/cross_gpu.md). Range: the replays with every kernel at the library's fast / slow end.", "",
            "| direction | step measured (us) | step predicted (us) | step error | kernel time measured (us) | kernel time predicted (us) | kernel error | kernel range |",
            "|---|---|---|---|---|---|---|---|"]
    per = ["", "Per kernel class of the same pair (kernels paired in launch order): median / p90 of the per-kernel",
           "|error|, and the error of the class's summed time.", "",
           "| direction | class | kernels | per-kernel median | per-kernel p90 | sum error |", "|---|---|---|---|---|---|"]
    for (ga, ta), (gb, tb) in ((a, b), (b, a)):
        src, tgt = gpu_of_device(ga.devices[0]), gpu_of_device(gb.devices[0])
        opt, p = parse_spec(f"gpu-upgrade:target={tgt.name}")
        g2, _ = opt.apply(ga, p)
        tl2 = simulate(g2)
        ms, mk = X.step_ns(gb, tb, False), X.kernel_ns(gb)
        ps, pk = X.step_ns(g2, tl2, True), X.kernel_ns(g2)
        ends = range_ends(g2)
        rng = f"{_err(X.kernel_ns(ends[0]), mk)} .. {_err(X.kernel_ns(ends[1]), mk)}" if ends else "–"
        d = f"{src.name} → {tgt.name}"
        head.append(f"| {d} | {ms / 1e3:,.1f} | {ps / 1e3:,.1f} | {_err(ps, ms)} | {mk / 1e3:,.1f} | {pk / 1e3:,.1f} | "
                    f"{_err(pk, mk)} | {rng} |")
        ka = np.nonzero(g2.node_kind == Kind.KERNEL)[0]
        kb = np.nonzero(gb.node_kind == Kind.KERNEL)[0]
        ka = ka[np.argsort(g2.rec_start_ns[ka], kind="stable")]
        kb = kb[np.argsort(gb.rec_start_ns[kb], kind="stable")]
        ca, cb = kernel_info(g2).cls[ka], kernel_info(gb).cls[kb]
        if len(ka) != len(kb) or not np.array_equal(ca, cb):
            per.append(f"| {d} | kernel sequences differ ({len(ka)} vs {len(kb)} kernels): not paired | | | | |")
            continue
        pred, meas = g2.dur_ns[ka].astype(float), gb.dur_ns[kb].astype(float)
        e = np.abs(pred / np.maximum(meas, 1) - 1)
        for ci in np.unique(ca).tolist():
            m = ca == ci
            per.append(f"| {d} | {CLASSES[ci]} | {int(m.sum())} | {_pct(float(np.median(e[m])))} | "
                       f"{_pct(float(np.percentile(e[m], 90)))} | {_err(pred[m].sum(), meas[m].sum())} |")
        per.append(f"| {d} | all | {len(ka)} | {_pct(float(np.median(e)))} | {_pct(float(np.percentile(e, 90)))} | "
                   f"{_err(pred.sum(), meas.sum())} |")
    return head + per


def section(traces: Path, kernels: Path) -> list[str]:
    """Markdown lines of the section (module docstring), starting with its heading."""
    return [HEADING, "", *development(Path(kernels)), *real_pair(Path(traces)),
            "", "Mechanisms, fits and the full per-pair table (rows, in-range shares, shape mode): docs/kernels.md."]


if __name__ == "__main__":
    print("\n".join(section(ROOT.parent / "shared" / "traces", ROOT.parent / "shared" / "kernels")))
