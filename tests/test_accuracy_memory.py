"""scripts/accuracy_memory.py, the memory section of docs/accuracy.md: its rows are computed from the
traces (checked against the emulator's own peaks), traces without allocator events are listed,
unreadable ones refused with their reason, and names from traces are escaped in the table."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

from daydream.testing.emulator import (
    Allocate, HostWork, Launch, Program, RangeBegin, RangeEnd, StreamSync, Thread, emulate, memory_peaks, to_kineto,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def acc():
    spec = importlib.util.spec_from_file_location("accuracy_memory", ROOT / "scripts" / "accuracy_memory.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["accuracy_memory"] = mod
    spec.loader.exec_module(mod)
    return mod


def _prog(mem: bool) -> Program:
    ops = [RangeBegin("ProfilerStep#1"), HostWork(1_000), Launch(7, "k", 20_000, 2_000), HostWork(500),
           StreamSync(7, 1_000), RangeEnd()]
    if mem:
        # a block allocated before the trace, freed while the new one is alive: the offset matters
        ops[2:2] = [Allocate(1 << 20), Allocate(4096, device=-1)]
        ops[-1:-1] = [Allocate(-3_000), Allocate(-(1 << 20))]
    return Program([Thread(ops)])


def test_rows_are_the_traces_own_numbers(acc, tmp_path):
    run = emulate(_prog(True))
    to_kineto(run, str(tmp_path / "with_totals.json"))
    to_kineto(run, str(tmp_path / "no_totals.json"), memory_totals=False)
    to_kineto(emulate(_prog(False)), str(tmp_path / "none.json"))
    (tmp_path / "bad.json").write_text("{not json")
    lines = acc.section(tmp_path, tmp_path)
    assert lines[0].startswith("## ")
    peak = memory_peaks(run, ("ProfilerStep#1",))[0][1][0]
    assert peak == (1 << 20) + 3_000  # what was allocated before, plus the block
    rows = {tuple(c.strip() for c in ln.split("|")[1:3]): ln for ln in lines if ln.startswith("| with") or ln.startswith("| no")}
    known = rows[("with_totals.json", "GPU 0")]
    assert f"| {peak:,} | {peak:,} | 0.000 | known |" in known and known.rstrip(" |").endswith("| ok")
    unknown = rows[("no_totals.json", "GPU 0")]  # without totals the offset is inferred: the smallest that keeps the curve >= 0
    assert f"| {peak:,} | {peak:,} | 0.000 | unknown (lower bound) |" in unknown and "lower bounds" in unknown
    assert ("with_totals.json", "host") in rows
    assert any("without allocator events (1): none.json" in ln for ln in lines)
    assert any(ln.startswith("Traces refused (1): bad.json (") for ln in lines)
    assert any("4 of the 4 judged device rows are (0 not judged" in ln for ln in lines)  # two traces x (GPU 0, host)


def test_table_cells_are_escaped(acc):
    assert acc._esc("a|b\n<script>") == "a\\|b &lt;script&gt;"
