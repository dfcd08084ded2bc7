"""Per-step windows (report.step_windows): a step covers the GPU work it launched and the waits
it made, and every per-step column is computed over the step's own tasks, so the columns add up."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from daydream.analysis import analyze
from daydream.events.table import Kind
from daydream.graph import NODE_CPU
from daydream.report.report_model import Report
from daydream.report.windows import step_windows
from daydream.simulate import recorded
from tablebuilder import TB

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
DLRM = [TRACES / "param_dlrm" / f"dlrm_8rank_worker{i}.pt.trace.json.gz" for i in range(8)]
RESNET = TRACES / "kineto_tbplugin" / "resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"
needs_traces = pytest.mark.skipif(not TRACES.exists(), reason="needs ../shared/traces")

ADDITIVE = ("cpu_runtime_ns", "cpu_gap_ns", "sync_wait_ns", "kernel_ns", "memcpy_ns", "memset_ns")


def pipelined_table():
    """Step 1 launches a 300 us kernel on stream 7 and a 100 us kernel on stream 8 that overlaps
    it, and its CPU range ends long before they do; step 2 launches one kernel and waits for it
    with a stream synchronize."""
    b = TB()
    b.range("ProfilerStep#1", 0, 50_000)
    c1 = b.call("cudaLaunchKernel", 10_000, 15_000)
    b.gpu(c1, 20_000, 320_000, stream=7)
    c2 = b.call("cudaLaunchKernel", 20_000, 25_000)
    b.gpu(c2, 30_000, 130_000, stream=8)
    b.range("ProfilerStep#2", 50_000, 600_000)
    c3 = b.call("cudaLaunchKernel", 60_000, 65_000)
    b.gpu(c3, 320_000, 420_000, stream=7)
    b.call("cudaStreamSynchronize", 70_000, 425_000)
    return b.table()


def trailing_sync_table():
    """One step that launches a kernel running past its end; the device synchronize that waits
    for it comes after the step (as the profiler's own one does)."""
    b = TB()
    b.range("ProfilerStep#1", 0, 40_000)
    c = b.call("cudaLaunchKernel", 10_000, 15_000)
    b.gpu(c, 20_000, 220_000)
    b.call("cudaDeviceSynchronize", 50_000, 222_000)
    return b.table()


def check_columns(r: Report, graph, tl) -> None:
    """The invariants of per-step columns against their tasks and the traced window."""
    rec = recorded(graph)
    sw = step_windows(graph, tl)
    assert [w.name for w in sw] == [s.name for s in r.steps]
    for w, s in zip(sw, r.steps):
        m = np.zeros(graph.n, bool)
        m[w.members] = True  # the members' node ids (a mask per step made memory grow as steps x nodes)
        gpu = m & (graph.node_kind != NODE_CPU)
        cpu = m & (graph.node_kind == NODE_CPU)
        # the window covers the GPU work the step launched and the calls (waits included) it made
        assert w.end_ns >= max(w.cpu_end_ns, int(rec.end_ns[m].max(initial=0)))
        assert w.replayed_end_ns >= max(w.replayed_cpu_end_ns, int(tl.end_ns[m].max(initial=0)))
        # a step's sync wait is the blocked time of its own calls
        assert s.breakdown.sync_wait_ns == int(tl.blocked_ns[cpu].sum())
        # GPU busy (a union) lies between the busiest single stream and the sum of task durations
        for busy, t, lo, hi in ((s.gpu_busy_measured_ns, rec, w.start_ns, w.end_ns), (s.gpu_busy_replayed_ns, tl, w.replayed_start_ns, w.replayed_end_ns)):
            d = np.clip(t.end_ns, lo, hi) - np.clip(t.start_ns, lo, hi)  # a stream runs one task at a time
            per_lane = [int(d[gpu & (graph.lane == ln)].sum()) for ln in np.unique(graph.lane[gpu])]
            assert max(per_lane, default=0) <= busy <= int(d[gpu].sum())
        b = s.breakdown
        assert s.gpu_busy_replayed_ns <= b.kernel_ns + b.memcpy_ns + b.memset_ns
        assert s.kernels == int(np.count_nonzero(m & (graph.node_kind == Kind.KERNEL)))
        assert s.gpu_busy_measured_ns + s.gpu_idle_measured_ns == max(len(np.unique(graph.lane_keys[graph.lane[gpu], 2])), 1) * s.measured_ns
    for a, b in zip(sw, sw[1:]):  # steps (of one thread) never overlap, so their times add up
        assert a.start_ns <= a.end_ns <= b.start_ns and a.replayed_start_ns <= a.replayed_end_ns <= b.replayed_start_ns
    assert sum(s.measured_ns for s in r.steps) <= r.window.measured_ns
    assert sum(s.replayed_ns for s in r.steps) <= r.window.replayed_ns
    for col in ADDITIVE:
        assert sum(getattr(s.breakdown, col) for s in r.steps) <= getattr(r.window.breakdown, col), col
    assert sum(s.kernels for s in r.steps) <= r.window.kernels


def test_step_covers_the_gpu_work_it_launched():
    res = analyze(pipelined_table())
    r = res.report
    s1, s2 = r.steps
    # step 1 ends when its last kernel does (320 us), not at its CPU range's end (50 us)
    assert (s1.measured_ns, s1.replayed_ns) == (320_000, 320_000)
    # its busy time is the union of its own two kernels, not step 2's kernel in the same span
    assert s1.gpu_busy_measured_ns == s1.gpu_busy_replayed_ns == 300_000
    assert s1.breakdown.kernel_ns == 400_000 and s1.kernels == 2
    # step 2, from step 1's end: its kernel and its wait for it (the stream synchronize, until 420 us)
    assert s2.gpu_busy_measured_ns == 100_000 and s2.breakdown.kernel_ns == 100_000
    assert s2.breakdown.sync_wait_ns == 420_000 - 70_000
    assert s2.measured_ns == 600_000 - 320_000 and s2.error_pct == 0.0
    check_columns(r, res.graph, res.replay)


def test_a_step_starts_when_the_previous_one_has_ended():
    res = analyze(pipelined_table())
    a, b = step_windows(res.graph, res.replay)
    assert (a.replayed_cpu_start_ns, a.replayed_cpu_end_ns, b.replayed_cpu_start_ns) == (0, 50_000, 50_000)
    # step 1's kernels run until 320 us: step 2's window starts there, and the steps tile the window
    assert (a.replayed_start_ns, a.replayed_end_ns, b.replayed_start_ns, b.replayed_end_ns) == (0, 320_000, 320_000, 600_000)
    assert (b.start_ns, b.end_ns) == (320_000, 600_000)
    r = res.report
    assert sum(s.measured_ns for s in r.steps) <= r.window.measured_ns


def test_wait_after_the_step_is_in_the_window_only():
    res = analyze(trailing_sync_table())
    r = res.report
    (s,) = r.steps
    assert s.measured_ns == s.replayed_ns == 220_000  # the kernel's end, not the CPU range's 40 us
    assert s.breakdown.sync_wait_ns == 0 and r.window.breakdown.sync_wait_ns > 0
    check_columns(r, res.graph, res.replay)


def test_predicted_step_includes_its_gpu_work():
    res = analyze(trailing_sync_table(), ["scale-kernels:factor=2"])
    (p,) = res.report.predictions[0].steps
    # the kernel (ready at 20 us) takes 400 us instead of 200 us: the step ends with it
    assert p.predicted_ns == 420_000 and p.replayed_ns == 220_000
    assert p.gpu_busy_predicted_ns == 400_000 == p.breakdown.kernel_ns


@needs_traces
@pytest.mark.parametrize("path", DLRM, ids=lambda p: p.name.split(".")[0])
def test_dlrm_step_columns_add_up(path):
    from daydream.formats import load_trace

    res = analyze(load_trace(str(path)))
    check_columns(res.report, res.graph, res.replay)
    (s,) = res.report.steps
    w = res.report.window
    # one step holds the whole iteration: its replayed time is within the window's, and so is its error
    assert s.replayed_ns <= w.replayed_ns and abs(s.error_pct - w.error_pct) < 1.0


@needs_traces
def test_resnet_steps_tile_behind_their_gpu_tail_and_columns_add_up():
    from daydream.formats import load_trace

    res = analyze(load_trace(str(RESNET)))
    r = res.report
    check_columns(r, res.graph, res.replay)
    sw = step_windows(res.graph, res.replay)
    assert all(w.end_ns > w.cpu_end_ns for w in sw)  # the GPU runs behind the CPU in every step
    for a, b in zip(sw, sw[1:]):
        assert a.end_ns == b.start_ns and a.replayed_end_ns == b.replayed_start_ns
    assert sum(s.measured_ns for s in r.steps) <= r.window.measured_ns
    assert sum(s.replayed_ns for s in r.steps) <= r.window.replayed_ns
