"""docs/accuracy.md section: the memory rules of cuda-graphs, dataloader, ddp and fsdp/zero on the
shared traces with allocator events (``docs/memory.md``). Every number is computed by this run.

    section(traces, kernels) -> list[str]   (called by scripts/accuracy.py, SECTIONS)
"""

from __future__ import annotations

from accuracy_common import MEMORY_TRACES, mapped_graph, mib, peaks

from pathlib import Path

from daydream.errors import DaydreamError, NotApplicable
from daydream.optimizations import parse_spec

TRACES = MEMORY_TRACES
SPECS = ("cuda-graphs", "dataloader", "ddp:world=8", "zero:stage=1,world=8", "zero:stage=2,world=8", "fsdp:world=8")
RESNET50 = "kineto_tbplugin/resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"


def resnet50_parameters() -> int:
    """torchvision ResNet-50's parameter count from its architecture (He et al. 2016, table 1;
    torchvision's Bottleneck, expansion 4): convolution and fc weights, the fc bias, and each
    BatchNorm's weight and bias."""
    conv, bn, inp = 3 * 64 * 7 * 7, 64, 64
    for w, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for i in range(blocks):
            conv += inp * w + w * w * 9 + w * w * 4 + (inp * w * 4 if i == 0 else 0)
            bn += w + w + 4 * w + (4 * w if i == 0 else 0)
            inp = w * 4
    return conv + 2048 * 1000 + 1000 + 2 * bn


def _words(note: str) -> str:
    i = note.find("memory")
    return note[i:].replace("|", "/") if i >= 0 else "no memory change"


def section(traces: Path, kernels: Path) -> list[str]:
    out = ["## Memory rules of cuda-graphs, dataloader, ddp, fsdp/zero", "",
           "Written by `scripts/accuracy_memory_rules.py`: each what-if's predicted peak (GPU and host, MiB; \"≥\": the",
           "trace records no totals, a lower bound) against the replayed baseline's, on the shared traces with allocator",
           "events (rules in `docs/memory.md`; the emulator properties in `tests/test_memory_rules.py` judge them).", "",
           "| trace | what-if | GPU peak MiB: baseline -> predicted | host peak MiB: baseline -> predicted | memory note |",
           "|---|---|---|---|---|"]
    buckets = None
    na: dict[str, list[str]] = {}
    for rel in TRACES:
        p = traces / rel
        if not p.exists():
            out.append(f"| {rel} | – | – | – | trace not present |")
            continue
        try:
            g = mapped_graph(p)
        except DaydreamError as e:
            out.append(f"| {rel} | – | – | – | refused: {e} |")
            continue
        base = peaks(g)
        for spec in SPECS:
            opt, params = parse_spec(spec)
            try:
                g2, note = opt.apply(g, params)
            except NotApplicable as e:
                na.setdefault(str(e).split(';')[0], []).append(f"{spec} on {rel}")
                continue
            pred = peaks(g2)
            cells = []
            for side in ("gpu", "host"):
                devs = sorted(d for d in set(base) | set(pred) if (d >= 0) == (side == "gpu"))
                cells.append(", ".join(
                    f"{'GPU ' + str(d) + ': ' if side == 'gpu' else ''}{'≥' if base.get(d, (0, False))[1] else ''}"
                    f"{mib(base.get(d, (0, False))[0])} -> {'≥' if pred.get(d, (0, False))[1] else ''}{mib(pred.get(d, (0, False))[0])}"
                    for d in devs) or "–")
            out.append(f"| {rel} | {spec} | {cells[0]} | {cells[1]} | {_words(note)[:160]} |")
            if rel == RESNET50 and spec.startswith("ddp"):
                d = max(k for k in pred if k >= 0)
                buckets = pred[d][0] - base[d][0]
    if na:
        out += ["", "Not applicable (the what-if's own reason):"]
        out += [f"* {why}: {len(which)} ({', '.join(which[:3])}{', ...' if len(which) > 3 else ''})" for why, which in na.items()]
    if buckets is not None:
        n = resnet50_parameters()
        out += ["", f"Check of the `ddp` rule on ResNet-50: the bucket buffers raise the GPU peak by {buckets:,} B; "
                f"4 B x torchvision ResNet-50's {n:,} parameters (counted from its architecture) = {4 * n:,} B "
                f"({'equal' if buckets == 4 * n else 'differ by ' + format(buckets - 4 * n, ',') + ' B'})."]
    return out
