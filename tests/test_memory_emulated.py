"""The memory replay against the reference emulator: the emulator's programs allocate and free on
host threads (``Allocate``), its Kineto writer writes the ``[memory]`` instants (with totals, or
without them as PyTorch 1.8 did), and daydream's replay of the trace must give the emulator's own
allocated curve and per-step peaks; after a what-if that changes times only (scale-kernels), the
predicted peaks must equal the emulator's run of the changed program."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from emulated_checks import emulated_curves
from daydream.formats import load_trace
from daydream.graph import build_graph
from daydream.simulate import simulate
from daydream.simulate.memory_replay import replay_memory
from daydream.testing.emulator import (
    Allocate, DeviceSync, HostWork, Launch, OtherCall, Program, RangeBegin, RangeEnd, StreamSync, Thread, emulate, measure_latencies,
    memory_peaks, programs, same_level_before, to_kineto,
)
from daydream.transform import scale

STEP = "ProfilerStep#1"


def _stepped(prog: Program) -> Program:
    """``prog`` with thread 0's ops inside one ``ProfilerStep#1`` range."""
    th = prog.threads[0]
    t0 = dataclasses.replace(th, ops=(RangeBegin(STEP), *th.ops, RangeEnd()))
    return dataclasses.replace(prog, threads=(t0, *prog.threads[1:]))


def _graph(run, totals: bool):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.json"
        to_kineto(run, str(p), memory_totals=totals)
        return build_graph(load_trace(str(p)))


def _check(g, tl, run) -> None:
    got = {dm.device: dm for dm in replay_memory(g, tl)}
    want = emulated_curves(run)
    assert sorted(got) == sorted(want)
    peaks = memory_peaks(run, (STEP,))
    for d, (ts, lv) in want.items():
        dm = got[d]
        assert dm.ts_ns.tolist() == ts
        assert dm.allocated_bytes.tolist() == lv
        assert dm.peak_allocated_bytes == peaks[d][0]
        assert [s.allocated_bytes for s in dm.steps] == peaks[d][1]


def test_hand_example_allocations_follow_their_calls():
    prog = Program([Thread([HostWork(3_000), Allocate(1 << 20), HostWork(2_000), Launch(7, "k", 50_000, 4_000),
                            Allocate(4096, device=-1), StreamSync(7, 1_000), HostWork(500), Allocate(-(1 << 20))])])
    run = emulate(prog)
    assert [(a.bytes, a.total_allocated, a.total_reserved) for a in run.allocs] == [
        (1 << 20, 1 << 20, 1 << 20), (4096, 4096, 4096), (-(1 << 20), 0, 1 << 20)]
    for totals in (True, False):
        g = _graph(run, totals)
        _check(g, simulate(g), run)
    # the kernel twice as long: the free after the sync moves with it
    changed = emulate(prog.map_ops(lambda op: dataclasses.replace(op, kernel_dur_ns=100_000) if isinstance(op, Launch) else op))
    g = _graph(run, True)
    _check(g, simulate(scale(g, g.node_kind == 2, 2.0)), changed)


def test_a_step_holds_the_events_its_replayed_interval_holds():
    """Issue 32 (found with --hypothesis-seed=2): another thread's allocation recorded inside the
    step lies after the step's end once the step's kernel is twice as fast. A step's peak is over
    the events that happen while it runs in the predicted program, as the profiler of that program
    would count them, not over the events it held in the trace (that gave 1,500 here, the emulator
    500; without the first allocation, a step with events where the emulator has none)."""
    prog = _stepped(Program([
        Thread([Launch(7, "k", 100_000, 10_000), DeviceSync(call_own_ns=5_000)]),
        Thread([OtherCall("cudaEventQuery", 2_000), HostWork(1_000), Allocate(500), HostWork(60_000), Allocate(1_000),
                OtherCall("cudaEventQuery", 2_000)], tid=5002)]))
    run = emulate(prog)
    changed = emulate(prog.map_ops(lambda op: dataclasses.replace(op, kernel_dur_ns=50_000) if isinstance(op, Launch) else op))
    assert memory_peaks(run, (STEP,)) == {0: (1_500, [1_500])}
    assert memory_peaks(changed, (STEP,)) == {0: (1_500, [500])}  # the second allocation is after the step's end
    for totals in (True, False):
        g = _graph(run, totals)
        _check(g, simulate(g), run)
        _check(g, simulate(scale(g, g.node_kind == 2, 0.5)), changed)


@pytest.mark.xfail(strict=True, reason="open (issue 32, --hypothesis-seed=36 before derandomizing): an event recorded at the "
                   "instant of a call of no length is anchored to that call's start; after it in program order, it "
                   "should move to its end when a prediction makes the call wait (the trace does not say which)")
def test_an_allocation_after_a_sync_that_found_the_gpu_idle_moves_with_its_wait():
    prog = _stepped(Program([Thread([Launch(7, "k", 10_000, 1_000), HostWork(20_000), DeviceSync(call_own_ns=0), Allocate(512),
                                     OtherCall("cudaGetDevice", 500, cbid=17)])]))
    run = emulate(prog)
    changed = emulate(prog.map_ops(lambda op: dataclasses.replace(op, kernel_dur_ns=30_000) if isinstance(op, Launch) else op))
    assert changed.allocs[0].ts_ns > run.allocs[0].ts_ns  # the sync waits now, and the allocation after it
    g = _graph(run, True)
    _check(g, simulate(scale(g, g.node_kind == 2, 3.0)), changed)


@pytest.mark.slow
# (no shrinking: these programs take minutes to shrink; a failure prints its whole example)
@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(programs(max_threads=3, max_ops=30, memory=True), st.booleans(), st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5]))
def test_memory_replay_and_scale_kernels_equal_the_emulator(prog, totals, factor):
    prog = _stepped(prog)
    run = emulate(prog)
    assume(run.allocs)
    assume(measure_latencies(run) == (prog.L, prog.G))
    changed_prog = prog.map_ops(lambda op: dataclasses.replace(op, kernel_dur_ns=int(op.kernel_dur_ns * factor))
                                if isinstance(op, Launch) else op)
    changed = emulate(changed_prog)
    # one level before the program for both runs (a trace with totals records it; without totals the
    # reader knows the recorded run's own lower bound only)
    shared, changed = same_level_before(run, changed)
    run = shared if totals else run
    g = _graph(run, totals)
    _check(g, simulate(g), run)  # the baseline replay
    kern = g.node_kind == 2
    g2 = scale(g, kern, factor)
    tl2 = simulate(g2)
    # predictions are exact where the calls keep their interleaving and durations scale exactly
    assume(all(int(op.kernel_dur_ns * factor) == op.kernel_dur_ns * factor for th in prog.threads for op in th.ops
               if isinstance(op, Launch)))
    order_a = [(c.thread, c.op_index) for c in run.calls]
    order_b = [(c.thread, c.op_index) for c in changed.calls]
    assume(order_a == order_b)
    assume([(a.thread, a.op_index) for a in run.allocs] == [(a.thread, a.op_index) for a in changed.allocs])
    pred = {dm.device: dm.peak_allocated_bytes for dm in replay_memory(g2, tl2)}
    assert pred == {d: p for d, (p, _) in memory_peaks(changed, (STEP,)).items()}
    _check(g2, tl2, changed)
