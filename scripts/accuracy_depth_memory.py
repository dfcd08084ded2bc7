"""docs/accuracy.md section: memory at a new depth (``layers:factor=F``) and a new problem size
(``problem-size:factor=S``), ``daydream/optimizations/shape_depth_memory.py`` (docs/memory.md,
"layers", "problem-size"). Every number is computed by this run.

    section(traces, kernels) -> list[str]   (called by scripts/accuracy.py, SECTIONS)
"""

from __future__ import annotations

from accuracy_common import MEMORY_TRACES, mapped_graph, mib, peaks

import tempfile
from pathlib import Path

from daydream.errors import DaydreamError, NotApplicable
from daydream.optimizations import parse_spec
from daydream.simulate import simulate
from daydream.simulate.memory_replay import replay_memory
from daydream.testing.emulator import emulate, memory_peaks, to_kineto
from daydream.testing.emulator.shaped import GPU, ShapedSpec, shaped_program

TRACES = MEMORY_TRACES
SPECS = ("layers:factor=2", "problem-size:factor=2")
#: emulated training steps with allocations (a backward the layers do not map), each deepened x2 and x3
EMULATED = (ShapedSpec(2, 64, 128, 2, ("ln", "linear"), 2, memory=True),
            ShapedSpec(8, 512, 64, 2, ("linear4", "gelu", "linear"), 3, memory=True),
            ShapedSpec(1, 16, 1024, 8, ("ln",), 2, memory=True),
            ShapedSpec(4, 128, 256, 4, ("ln", "bmm_qk", "softmax", "bmm_pv", "linear"), 2, "bf16", memory=True))


def _words(note: str) -> str:
    i = note.find("memory at")
    return note[i:].replace("|", "/") if i >= 0 else "no memory change"


def _graph_of(prog):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.json"
        to_kineto(emulate(prog), str(p))
        return mapped_graph(p)


def section(traces: Path, kernels: Path) -> list[str]:
    out = ["## Memory at a new depth and problem size", "",
           "Written by `scripts/accuracy_depth_memory.py`: the predicted GPU peak (MiB; \"≥\": the trace records no",
           "totals, a lower bound) of `layers:factor=2` and `problem-size:factor=2` against the replayed baseline's, on the",
           "shared traces with allocator events (rules: `docs/memory.md`, \"layers\", \"problem-size\").", "",
           "| trace | what-if | GPU peak MiB: baseline -> predicted | memory note |", "|---|---|---|---|"]
    na: dict[str, list[str]] = {}
    for rel in TRACES:
        p = traces / rel
        if not p.exists():
            out.append(f"| {rel} | – | – | trace not present |")
            continue
        try:
            g = mapped_graph(p)
        except DaydreamError as e:
            out.append(f"| {rel} | – | – | refused: {e} |")
            continue
        if g.memory is None or not len(g.memory):
            na.setdefault("no allocator events", []).append(rel)
            continue
        base = peaks(g)
        for spec in SPECS:
            opt, params = parse_spec(spec + f",gpu={GPU}")
            try:
                g2, note = opt.apply(g, params)
            except NotApplicable as e:
                na.setdefault(str(e).split(";")[0], []).append(f"{spec} on {rel}")
                continue
            new = peaks(g2)
            cell = "; ".join(f"GPU {d}: {'≥' if base[d][1] else ''}{mib(base[d][0])} -> "
                             f"{'≥' if new.get(d, (0, 0))[1] else ''}{mib(new.get(d, (0, 0))[0])}" for d in base if d >= 0)
            out.append(f"| {rel} | `{spec}` | {cell} | {_words(note)} |")
    if na:
        out += ["", "Not predicted (the what-if's reason):", ""]
        out += [f"* {why}: {', '.join(w)}" for why, w in sorted(na.items())]
    same = total = 0
    rows = []
    for spec in EMULATED:
        g = _graph_of(shaped_program(spec))
        for n in (2, 3):
            opt, params = parse_spec(f"layers:factor={n},gpu={GPU}")
            g2, _ = opt.apply(g, params)
            got = {d: v for d, v in ((dm.device, dm.peak_allocated_bytes) for dm in replay_memory(g2, simulate(g2)))}
            want = {d: v[0] for d, v in memory_peaks(emulate(shaped_program(spec, layers=n)), ("ProfilerStep#1",)).items()}
            total += 1
            same += got == want
            rows.append(f"| {spec.block} x{spec.layers}, B {spec.B}, S {spec.S}, H {spec.H}, {spec.dtype} | x{n} | "
                        f"{mib(got.get(0, 0))} | {mib(want.get(0, 0))} |")
    out += ["", (f"Emulated training steps (a backward the layers do not map: its block's part inferred), deepened: "
                 f"{same} of {total} predicted peaks equal the emulator's run of the deeper program (the properties over "
                 "random programs, mapped and unmapped backward: `tests/test_shape_depth_memory.py`)."), "",
            "| block x layers, shape | depth | predicted peak MiB | emulator's peak MiB |", "|---|---|---|---|", *rows]
    return out
