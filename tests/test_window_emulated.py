"""Windows cut from a longer emulated run (``to_kineto(..., window=(lo, hi))``).

The trace holds only the activities that lie wholly in the window (docs/model.md, "Windows cut
from a longer run"): GPU tasks launched before ``lo`` appear without their launching call, and
what ran across ``lo`` is missing. Properties over random programs:

(a) every stream keeps the emulator's FIFO order (lane order = execution order);
(b) a window that starts when every stream is idle and nothing launched is pending replays
    exactly;
(c) in general the replay never runs ahead of t0 and never behind the record: every kept task
    starts in [t0, recorded start] and ends by its recorded end (the trace lacks constraints,
    never adds any), once L and G are measured right;
(d) measured L is never below the emulator's (a backlog only lengthens a sample), and equals it
    when the samples the window leaves are clean.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from daydream.formats import load_trace
from daydream.graph import NODE_CPU, build_graph
from daydream.simulate import check_topological, simulate
from daydream.testing.emulator import emulate, measure_latencies, programs, to_kineto

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _cut(tmp, run, lo, hi=None):
    p = tmp / "w.json"
    to_kineto(run, str(p), window=(lo, hi))
    table = load_trace(str(p))
    g = build_graph(table)
    check_topological(g, g.order)
    return g, simulate(g)


def _records(run, g):
    """Per node, the emulator's call or task it stands for (by correlation id and recorded start)."""
    corr = g.table.correlation[g.row]
    calls = {c.correlation: c for c in run.calls}
    tasks = {(t.correlation, t.start_ns): t for t in run.tasks}
    cpu = g.node_kind == NODE_CPU
    return [calls[int(corr[i])] if cpu[i] else tasks[(int(corr[i]), int(g.rec_start_ns[i]))] for i in range(g.n)]


def _window_start(run, f):
    return run.trace_t0_ns + int(f * (run.end_ns - run.trace_t0_ns))


def _idle_moments(run):
    """Call starts at which every task launched earlier has ended (no stream busy, nothing pending)."""
    out = []
    for c in run.calls:
        if all(t.end_ns <= c.start_ns for t in run.tasks if run.calls[t.call].start_ns < c.start_ns):
            out.append(c.start_ns)
    return out


@SETTINGS
@given(programs(graph_launches=True), st.floats(0.0, 1.0), st.one_of(st.none(), st.floats(0.0, 1.0)))
def test_streams_keep_the_recorded_fifo_order(tmp_path_factory, prog, f_lo, f_hi):
    run = emulate(prog)
    lo = _window_start(run, f_lo)
    hi = None if f_hi is None else max(lo, _window_start(run, f_hi))
    g, _ = _cut(tmp_path_factory.mktemp("w"), run, lo, hi)
    rec = _records(run, g)
    order = {i: k for lane in run.lane_tasks().values() for k, i in enumerate(lane)}
    index = {id(t): i for i, t in enumerate(run.tasks)}
    gpu = np.nonzero(g.node_kind != NODE_CPU)[0]
    kept = sorted(index[id(rec[i])] for i in gpu)
    for i in gpu:
        t = index[id(rec[i])]
        same = [k for k in kept if (run.tasks[k].device, run.tasks[k].stream) == (run.tasks[t].device, run.tasks[t].stream)
                and order[k] < order[t]]
        prev = max(same, key=order.get) if same else None
        got = index[id(rec[g.lane_prev[i]])] if g.lane_prev[i] >= 0 else None
        assert got == prev


@SETTINGS
@given(programs(graph_launches=True), st.integers(0, 2**32))
def test_window_starting_at_an_idle_moment_replays_exactly(tmp_path_factory, prog, seed):
    run = emulate(prog)
    idle = _idle_moments(run)
    assume(idle)
    lo = idle[np.random.default_rng(seed).integers(len(idle))]
    g, tl = _cut(tmp_path_factory.mktemp("w"), run, lo)
    assume(g.n and (g.launch_latency_ns, g.gpu_gap_ns) == (prog.L, prog.G))
    rec = _records(run, g)
    got = [(int(s), int(e)) for s, e in zip(tl.start_ns, tl.end_ns)]
    assert got == [(r.start_ns, r.end_ns) for r in rec]


@SETTINGS
@given(programs(graph_launches=True), st.floats(0.0, 1.0), st.one_of(st.none(), st.floats(0.0, 1.0)))
def test_cut_replay_stays_between_t0_and_the_record(tmp_path_factory, prog, f_lo, f_hi):
    run = emulate(prog)
    lo = _window_start(run, f_lo)
    hi = None if f_hi is None else max(lo, _window_start(run, f_hi))
    g, tl = _cut(tmp_path_factory.mktemp("w"), run, lo, hi)
    assume(g.n and (g.launch_latency_ns, g.gpu_gap_ns) == (prog.L, prog.G))
    rec = _records(run, g)
    t0 = int(g.t0_ns)
    assert t0 >= lo
    for i, r in enumerate(rec):
        assert t0 <= tl.start_ns[i] <= r.start_ns, i
        assert tl.end_ns[i] <= r.end_ns, i


@SETTINGS
@given(programs(graph_launches=True), st.floats(0.0, 1.0))
def test_backlog_never_lowers_the_measured_launch_latency(tmp_path_factory, prog, f_lo):
    run = emulate(prog)
    lo = _window_start(run, f_lo)
    g, _ = _cut(tmp_path_factory.mktemp("w"), run, lo)
    assert g.launch_latency_ns == 0 or g.launch_latency_ns >= prog.L
