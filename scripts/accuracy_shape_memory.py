"""docs/accuracy.md section: memory at a new batch (the shape what-ifs' memory,
``daydream/optimizations/shape_memory.py``; docs/memory.md, "shape") on the shared traces with
allocator events. Every number is computed by this run.

    section(traces, kernels) -> list[str]   (called by scripts/accuracy.py, SECTIONS)

There is no recorded run at another batch in ../shared/traces: the judge of the sizes is the
emulator (tests/test_shape_memory.py). What this section shows on real traces is what a user
reads: at batch x1 the baseline's peak and parts (the identity), and at x2 / x0.5 whether the
model state stays and the rest of the step's peak follows the batch (activations ∝ batch).
"""

from __future__ import annotations

from accuracy_common import MEMORY_TRACES, mapped_graph, mib

from pathlib import Path

from daydream.errors import DaydreamError, NotApplicable
from daydream.optimizations import parse_spec
from daydream.report.memory_fit import memory_summary
from daydream.simulate import simulate

TRACES = MEMORY_TRACES
FACTORS = (1, 2, 4, 0.5)
STATE = "parameters and persistent"
#: what-ifs whose fit answer is reported: the batch alone, and the batch at seq x2 (the alias keeps its factor)
FITS = ("batch:fit=true", "seq:fit=true,factor=2")


def _gpu_step(g) -> tuple[int, int, int] | None:
    """(peak of the first GPU's first step, its parameters-and-persistent part, -1 where the step
    has no parts, the device); None without a GPU's memory."""
    s = memory_summary(g, simulate(g)) if g.memory is not None else None
    for d in (s.devices if s is not None else ()):
        if d.device >= 0 and d.steps:
            st = d.steps[0]
            parts = {q.name: q.bytes for q in st.parts}
            return st.peak_allocated_bytes, (parts.get(STATE, 0) if parts else -1), d.device
    return None


def _memory_words(note: str) -> str:
    for key in ("memory at the new shapes", "memory not predicted", "memory as recorded"):
        i = note.find(key)
        if i >= 0:
            j = note.find(" (", i)
            return note[i:j if key == "memory at the new shapes" and j > 0 else None].replace("|", "/")[:160]
    return "–"


def section(traces: Path, kernels: Path) -> list[str]:
    out = ["## Memory at a new batch (shape what-ifs)", "",
           "Written by `scripts/accuracy_shape_memory.py`: `batch:factor=F` on the shared traces with allocator events,",
           "the first GPU's first step: its peak (MiB) and \"parameters and persistent\" part (model state: alive across",
           "steps, allocated before the trace), baseline -> predicted, and the rest of the peak's ratio",
           "(predicted / baseline; activations follow the batch, so it should be near F). No real run at another batch",
           "is in `../shared/traces`: the sizes' judge is the emulator (`tests/test_shape_memory.py`); rules in",
           "`docs/memory.md`, \"shape\". A ratio farther from F than the 512-byte blocks' rounding: the predicted peak",
           "falls where a block the rules keep (a workspace freed within its op: no tensor of its size) is alive.", "",
           "| trace | F | peak MiB: baseline -> predicted | model state MiB | rest ratio | memory note |",
           "|---|---:|---|---|---:|---|"]
    fits = []
    for rel in TRACES:
        p = traces / rel
        if not p.exists():
            out.append(f"| {rel} | – | – | – | – | trace not present |")
            continue
        try:
            g = mapped_graph(p)
        except DaydreamError as e:
            out.append(f"| {rel} | – | – | – | – | refused: {e} |")
            continue
        base = _gpu_step(g)
        if base is None:
            out.append(f"| {rel} | – | – | – | – | no GPU allocator events |")
            continue
        for f in FACTORS:
            opt, params = parse_spec(f"batch:factor={f}")
            try:
                g2, note = opt.apply(g, params)
            except NotApplicable as e:
                out.append(f"| {rel} | {f:g} | – | – | – | not applicable: {str(e).replace('|', '/')} |")
                continue
            new = _gpu_step(g2)
            if new is None:
                out.append(f"| {rel} | {f:g} | {mib(base[0])} -> no verdict | – | – | {_memory_words(note)} |")
                continue
            state = f"{mib(base[1])} -> {mib(new[1])}" if base[1] >= 0 and new[1] >= 0 else "– (no parts: no addresses)"
            ratio = (f"{(new[0] - new[1]) / (base[0] - base[1]):.3f}" if base[1] >= 0 and new[1] >= 0 and base[0] > base[1]
                     else "–")
            out.append(f"| {rel} | {f:g} | {mib(base[0])} -> {mib(new[0])} | {state} | {ratio} | {_memory_words(note)} |")
        for spec in FITS:
            opt, params = parse_spec(spec)
            try:
                _, note = opt.apply(g, params)
                i = note.find("batch fit:")
                j = note.find("; kernel time", i)  # the fit's words come before the kernel time's
                fits.append(f"| {rel} | `{spec}` | {note[i:j if j > 0 else None].replace('|', '/')} |")
            except NotApplicable as e:
                fits.append(f"| {rel} | `{spec}` | not applicable: {str(e).replace('|', '/')} |")
    out += ["", "The fit (`fit=true`: the largest batch whose predicted peak x the recorded margin fits the GPU; an alias's",
            "own factor kept):", "", "| trace | what-if | answer |", "|---|---|---|", *fits]
    return out
