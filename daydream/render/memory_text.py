"""The memory lines of the terminal report: the answer's memory line, the memory section (peaks
per device and step, what a step's memory is, will it fit) and a prediction's memory line. Reads
the report model only (:class:`~daydream.report.report_model.MemorySummary`); every line goes
through :func:`daydream.util.display.terminal_text` in :func:`daydream.render.text.render_text`."""

from __future__ import annotations

from ..report.report_model import MemorySummary, Prediction, Report

_GIB = float(1 << 30)


def _gib(b: int) -> str:
    return f"{b / _GIB:.2f}"


def _step_peaks(m: MemorySummary) -> str:
    """"peak per step 1.23-1.30 GiB" of the first GPU with steps ("" without)."""
    for d in m.devices:
        if d.device >= 0 and d.steps:
            p = [s.peak_allocated_bytes for s in d.steps]
            least = "at least " if d.at_least else ""
            rng = _gib(min(p)) if min(p) == max(p) else f"{_gib(min(p))}-{_gib(max(p))}"
            return f"peak allocated per step {least}{rng} GiB on GPU {d.device}"
    return ""


def memory_answer_lines(r: Report) -> list[str]:
    """The answer's memory line: peak per step and, per GPU, whether it fits."""
    m = r.memory
    if m is None:
        return []
    peaks = _step_peaks(m)
    return [f"  memory: {peaks + '; ' if peaks else ''}{m.line}"]


def prediction_memory_lines(p: Prediction) -> list[str]:
    """A prediction's memory line: its peak and verdict per GPU."""
    return [f"    memory: {p.memory.line}"] if p.memory is not None else []


def memory_section(r: Report) -> list[str]:
    """Peaks per device, the fit, and each step's parts at its peak."""
    m = r.memory
    if m is None:
        return []
    out = ["  memory (the allocator's events, replayed; GiB; docs/memory.md):"]
    for d in m.devices:
        who = "host" if d.device < 0 else f"GPU {d.device}"
        least = "at least " if d.at_least else ""
        res = f", reserved {_gib(d.peak_reserved_bytes)} GiB" if d.peak_reserved_bytes >= 0 else ""
        verdict = f"; {d.verdict}" if d.device >= 0 else ""
        out.append(f"    {who}: {d.events:,} events, peak allocated {least}{_gib(d.peak_allocated_bytes)} GiB{res}{verdict}")
        if d.device >= 0:
            out.append(f"      needs peak x {d.fragmentation:.2f} (fragmentation margin from {d.fragmentation_source})"
                       + (f"; capacity from {d.capacity_source}" if d.capacity_source else ""))
        if d.at_least:
            out.append("      the trace does not record what was allocated before it (no Total Allocated): peaks are lower bounds")
        for s in d.steps:
            parts = ", ".join(f"{p.name} {_gib(p.bytes)}" + ("" if p.how.startswith("inferred") else " (recorded)") for p in s.parts)
            out.append(f"      {s.name}: peak {least}{_gib(s.peak_allocated_bytes)} GiB" + (f": {parts}" if parts else ""))
    if m.unanchored_events:
        out.append(f"    {m.unanchored_events:,} events on threads without CPU tasks kept at their recorded time")
    return out
