"""Cross-GPU check: predict one trace on the other trace's GPU with ``gpu-upgrade`` and put the
predicted step time and total kernel time beside the measured ones.

Usage::

    python scripts/cross_gpu.py [TRACE_A TRACE_B ...] [--write docs/cross_gpu.md]

Without arguments it runs the development pair (../shared/traces/tracelens: h100 and mi300
bert-small), both directions. Pairs are given as consecutive arguments (A B: A -> B and B -> A).

Columns per direction and variant:
  * measured: the target trace's ProfilerStep (its measured window, report.step_windows) and its
    total kernel time; the source's own beside it;
  * predicted: the source replayed after ``gpu-upgrade:target=<target GPU>`` with
    - ``launch``: the per-kernel model with default parameters (host unchanged);
    - ``launch, host from target trace``: plus ``launch_latency_ns`` and ``launch_cpu_ns`` set to the
      target trace's measured L and median launch-call cost (what a user who has one trace of the
      target platform would pass);
    - ``launch, source floor``: the target's kernel floor not taken from the measured table
      (``target_floor_ns`` = the source's), to show what that table entry contributes;
    - ``peak``: the first model (``kernel_model=peak``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daydream.events.table import Kind  # noqa: E402
from daydream.formats import load_trace  # noqa: E402
from daydream.costmodel.gpus import gpu_of_device  # noqa: E402
from daydream.graph import build_graph  # noqa: E402
from daydream.mapping import map_events  # noqa: E402
from daydream.optimizations import parse_spec  # noqa: E402
from daydream.optimizations.common import median_launch_ns  # noqa: E402
from daydream.costmodel.kernel_model import kernel_floor_ns  # noqa: E402
from daydream.optimizations.kernel_cost import range_ends  # noqa: E402
from daydream.report.windows import step_windows  # noqa: E402
from daydream.simulate import simulate  # noqa: E402

PAIR = ("tracelens/h100_gaunernst_bert-small-uncased__1016001.json.gz",
        "tracelens/mi300_gaunernst_bert-small-uncased__1016001.json.gz")
TRACES = ROOT / ".." / "shared" / "traces"


def load(path: str):
    t = load_trace(path)
    g = build_graph(t, map_events(t))
    return g, simulate(g)


def step_ns(g, tl, replayed: bool) -> int:
    """Sum over the ProfilerSteps of their time (measured or replayed); the whole window without steps."""
    w = step_windows(g, tl)
    if not w:
        return int(tl.end_ns.max() - tl.start_ns.min()) if replayed else int(g.rec_end_ns.max() - g.rec_start_ns.min())
    return int(sum((s.replayed_end_ns - s.replayed_start_ns) if replayed else (s.end_ns - s.start_ns) for s in w))


def kernel_ns(g) -> int:
    return int(g.dur_ns[g.node_kind == Kind.KERNEL].sum())


def direction(a, b) -> list[list[str]]:
    (ga, ta), (gb, tb) = a, b
    src, tgt = gpu_of_device(ga.devices[0]), gpu_of_device(gb.devices[0])
    ms, mk = step_ns(gb, tb, False), kernel_ns(gb)
    rows = [[f"{src.name} -> {tgt.name}", "measured on target", f"{ms / 1e3:,.1f}", f"{mk / 1e3:,.1f}", "", ""],
            ["", "source as traced (replayed)", f"{step_ns(ga, ta, True) / 1e3:,.1f}", f"{kernel_ns(ga) / 1e3:,.1f}",
             _err(step_ns(ga, ta, True), ms), _err(kernel_ns(ga), mk)]]
    host = f",launch_latency_ns={gb.launch_latency_ns},launch_cpu_ns={median_launch_ns(gb)}"
    variants = [("library", ""), ("library, host from target trace", host), ("launch (before)", ",kernel_model=launch"),
                ("launch, source floor", f",kernel_model=launch,target_floor_ns={kernel_floor_ns(src, ga)}"),
                ("peak", ",kernel_model=peak")]
    for label, extra in variants:
        opt, p = parse_spec(f"gpu-upgrade:target={tgt.name}{extra}")
        g2, _ = opt.apply(ga, p)
        graphs = [(f"predicted: {label}", g2)]
        ends = range_ends(g2) if label == "library" else None
        if ends is not None:
            graphs += [("  library, fast end", ends[0]), ("  library, slow end", ends[1])]
        for what, gx in graphs:
            tl2 = simulate(gx)
            s, k = step_ns(gx, tl2, True), kernel_ns(gx)
            rows.append(["", what, f"{s / 1e3:,.1f}", f"{k / 1e3:,.1f}", _err(s, ms), _err(k, mk)])
    return rows


def class_rows(a, b) -> list[list[str]]:
    """Kernel time per class (daydream.graph.kernels): source, predicted (launch model, then the
    library with its fast and slow ends), measured on the target."""
    from daydream.graph.kernels import CLASSES, kernel_info

    (ga, _), (gb, _) = a, b
    tgt = gpu_of_device(gb.devices[0])
    opt, p = parse_spec(f"gpu-upgrade:target={tgt.name},kernel_model=launch")
    g_launch, _ = opt.apply(ga, p)
    opt, p = parse_spec(f"gpu-upgrade:target={tgt.name}")
    g2, _ = opt.apply(ga, p)
    ends = range_ends(g2) or (g2, g2, {})
    out = []
    sums = []
    for g in (ga, g_launch, g2, ends[0], ends[1], gb):
        info = kernel_info(g)
        k = g.node_kind == Kind.KERNEL
        sums.append(np.bincount(info.cls[k], weights=g.dur_ns[k], minlength=len(CLASSES)))
    src = gpu_of_device(ga.devices[0])
    for i, c in enumerate(CLASSES):
        if any(s[i] > 0 for s in sums):
            m = int(sums[5][i])
            out.append([f"{src.name} -> {tgt.name}", c, f"{sums[0][i] / 1e3:,.1f}", f"{m / 1e3:,.1f}",
                        f"{sums[1][i] / 1e3:,.1f}", _err(int(sums[1][i]), m), f"{sums[2][i] / 1e3:,.1f}", _err(int(sums[2][i]), m),
                        f"{_err(int(sums[3][i]), m)} .. {_err(int(sums[4][i]), m)}"])
    return out


def kernel_rows(a, b, n: int) -> list[str]:
    """The n largest kernel groups of direction a -> b: name, class, reason, source and predicted time."""
    from daydream.util.display import markup_text
    from daydream.costmodel import kernel_model as KM

    (ga, _), (gb, _) = a, b
    src, tgt = gpu_of_device(ga.devices[0]), gpu_of_device(gb.devices[0])
    data = ga.facts.launch
    floor_s = KM.kernel_floor_ns(src, ga)
    pl = KM.plan(ga, src, tgt, data, floor_s, KM.KERNEL_FLOOR_NS.get(tgt.name, floor_s))
    out = ["", f"Largest kernels, {src.name} -> {tgt.name}:", "", "| kernel | class | reason | tasks | source (us) | predicted (us) |",
           "|---|---|---|---|---|---|"]
    for name, cls, why, cnt, ts, tp in KM.reasons(ga, pl, src, tgt)[:n]:
        short = markup_text(name[:70]).replace("|", "\\|")
        out.append(f"| {short} | {cls} | {why} | {cnt} | {ts / 1e3:,.1f} | {tp / 1e3:,.1f} |")
    return out


def _err(pred: int, meas: int) -> str:
    return f"{(pred - meas) / meas * 100:+.1f} %" if meas else ""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", help="pairs of traces of the same program on two GPUs")
    ap.add_argument("--write", help="also write the table as Markdown to this file")
    ap.add_argument("--kernels", type=int, default=0, metavar="N", help="also list the N largest kernel groups of each "
                    "direction with their rule and reason")
    a = ap.parse_args(argv)
    paths = a.traces or [str(TRACES / p) for p in PAIR]
    if len(paths) % 2:
        ap.error("give traces in pairs")
    head = ["direction", "what", "step time (us)", "kernel time (us)", "step error", "kernel error"]
    rows = []
    for i in range(0, len(paths), 2):
        x, y = load(paths[i]), load(paths[i + 1])
        rows += direction(x, y) + direction(y, x)
    md = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]
    head2 = ["direction", "kernel class", "source (us)", "measured on target (us)", "launch (us)", "launch error",
             "library (us)", "library error", "library range (fast .. slow end)"]
    crow = []
    for i in range(0, len(paths), 2):
        x, y = load(paths[i]), load(paths[i + 1])
        crow += class_rows(x, y) + class_rows(y, x)
    md += ["", "Kernel time per class (launch model before, the library now):", "", "| " + " | ".join(head2) + " |", "|" + "---|" * len(head2)]
    md += ["| " + " | ".join(r) + " |" for r in crow]
    if a.kernels:
        for i in range(0, len(paths), 2):
            x, y = load(paths[i]), load(paths[i + 1])
            md += kernel_rows(x, y, a.kernels) + kernel_rows(y, x, a.kernels)
    text = "\n".join(md)
    print(text)
    if a.write:
        pre = (Path(a.write).read_text(encoding="utf-8").split("<!-- table -->")[0] + "<!-- table -->\n"
               if Path(a.write).exists() else "")
        Path(a.write).write_text(pre + text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
