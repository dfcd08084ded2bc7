"""Work launched before the trace holds the first step (docs/model.md, "Work launched before the
window"): the report says how long, from the trace alone, and does not model it.

Traces built to show it: the emulator runs a program whose first kernels on each stream (2-4 ms)
are launched before the recorded window and run across its start (Kineto drops them); the
window's first tasks were launched before it too and wait behind them.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daydream.analysis import analyze
from daydream.cli import main
from daydream.formats import load_trace
from daydream.graph import NODE_CPU, build_graph
from daydream.simulate import simulate
from daydream.report.trust import HELD_WORDS, held_before_trace, held_line
from daydream.testing.emulator import DeviceSync, Launch, Program, RangeBegin, RangeEnd, Thread, emulate, to_kineto

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _program(long_ns, short, L=5_000, G=1_000, call=2_000, streams=(7, 20)):
    """One thread: a long kernel on each stream, then (in ProfilerStep#1) short kernels
    alternating over the streams and a device sync. Returns (program, index of the first op in
    the step)."""
    ops = [Launch(s, f"long_{s}", d, call) for s, d in zip(streams, long_ns)]
    ops += [Launch(streams[0], "pre", short[0], call)]  # launched before the window: its call is cut
    k = len(ops)
    ops += [RangeBegin("ProfilerStep#1")]
    ops += [Launch(streams[i % len(streams)], f"k{i}", d, call) for i, d in enumerate(short[1:])]
    ops += [DeviceSync(500), RangeEnd()]
    return Program([Thread(ops)], launch_latency_ns=L, gpu_gap_ns=G), k


def _cut(tmp, run, k):
    """The trace of ``run`` from the start of its op ``k`` (the step's first op) on."""
    lo = next(c.start_ns for c in run.calls if c.op_index >= k)
    lo = min(lo, next(r.start_ns for r in run.ranges if r.name == "ProfilerStep#1"))
    p = tmp / "held.json"
    to_kineto(run, str(p), window=(lo, None))
    return p, lo


def _truth(run, lo, t0):
    """From the emulator's run: per stream, the recorded start of its first task whose kernel
    started in the window, minus ``t0``, for streams whose first such task was launched before
    the window; the largest (the hold of the missing long kernels and their gap G)."""
    first = {}
    for t in sorted(run.tasks, key=lambda t: t.start_ns):
        if t.start_ns >= lo:
            first.setdefault(t.stream, t)
    held = [t.start_ns - t0 for t in first.values() if run.calls[t.call].start_ns < lo]
    return max(held, default=0)


def test_held_first_step_is_said_with_the_emulators_hold(tmp_path, capsys):
    prog, k = _program([3_000_000, 2_000_000], [100_000] * 9)
    run = emulate(prog)
    p, lo = _cut(tmp_path, run, k)
    table = load_trace(str(p))
    g = build_graph(table)
    held, streams = held_before_trace(g)
    assert held == _truth(run, lo, g.t0_ns) > 0
    long_end = max(t.end_ns for t in run.tasks if t.name.startswith("long_"))
    assert held == long_end + prog.G - g.t0_ns  # the missing kernel, then the gap G
    trust = analyze(table).report.trust
    assert trust.held_before_trace_us == round(held / 1e3, 3)
    assert f"{HELD_WORDS}: {held / 1e3:,.0f} us" in trust.reason and "not modelled" in trust.reason
    assert trust.held_line and trust.held_line in trust.reason
    assert main([str(p)]) == 0
    out = capsys.readouterr().out
    assert " ".join(trust.held_line.split()) in " ".join(out.split())  # the text report's line (wrapped) under the verdict


def test_no_hold_without_work_launched_before_the_trace(tmp_path):
    """The whole program in the trace: no stream starts with an unlaunched task, nothing said."""
    prog, _ = _program([3_000_000, 2_000_000], [100_000] * 9)
    run = emulate(prog)
    p = tmp_path / "whole.json"
    to_kineto(run, str(p))
    table = load_trace(str(p))
    assert held_before_trace(build_graph(table)) == (0, 0)
    trust = analyze(table).report.trust
    assert trust.held_before_trace_us == 0.0 and HELD_WORDS not in trust.reason and trust.held_line == ""


def test_held_line_only_when_material():
    assert held_line(0, 0, 1e6, 1) == ""
    assert held_line(9_999, 1, 1e6, 1) == ""  # under 1 % of the first step
    assert held_line(10_000, 2, 1e6, 1).startswith(f"{HELD_WORDS}: 10 us (1.0 % of the first step; 2 streams")
    assert held_line(10_000, 1, 1e6, 0).startswith("window held by work launched before the trace: 10 us")


@pytest.mark.slow
@SETTINGS
@given(st.lists(st.integers(1_000_000, 4_000_000), min_size=2, max_size=2),
       st.lists(st.integers(20_000, 300_000), min_size=3, max_size=12),
       st.integers(2_000, 15_000), st.integers(0, 2_000))
def test_hold_equals_the_emulators_over_random_programs(tmp_path_factory, long_ns, short, L, G):
    """Over random programs cut after the long kernels' launches: the hold read from the trace
    equals the emulator's (first in-window start of a stream holding pre-window work, minus
    ``t0``) and is what the replay leaves out: the replay starts those tasks at ``t0``."""
    prog, k = _program(long_ns, short, L=L, G=min(G, L))
    run = emulate(prog)
    p, lo = _cut(tmp_path_factory.mktemp("h"), run, k)
    g = build_graph(load_trace(str(p)))
    held, _ = held_before_trace(g)
    assert held == _truth(run, lo, g.t0_ns) > 0
    tl = simulate(g)
    first = np.flatnonzero((g.node_kind != NODE_CPU) & (g.lane_prev < 0) & (g.launch < 0))
    assert int((g.rec_start_ns[first] - tl.start_ns[first]).max()) == held
