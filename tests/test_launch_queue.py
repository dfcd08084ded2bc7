"""Launch-queue back-pressure (docs/model.md, "Launch-queue back-pressure").

A stream holds at most ``D`` launched, unfinished tasks; the call launching task ``k`` returns
its own cost after task ``k - D`` of its stream ended. Hand-built tables check the edges and the
own costs; emulated programs with a small depth check that the replay is exact and that
predictions after slowing the GPU, removing a kernel or adding one equal the emulator's run of
the changed program (without the edges the CPU would run ahead of a slowed GPU).
"""

from __future__ import annotations

import pytest
import dataclasses

import numpy as np
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from daydream.simulate.critical_path import critical_path
from daydream.events.cuda_api import LAUNCH_QUEUE_DEPTH
from daydream.formats import load_trace
from daydream.graph import NODE_CPU, EdgeKind, build_graph
from daydream.simulate import simulate, simulate_events
from daydream.testing.emulator import (
    GraphLaunch,
    HostWork,
    Launch,
    Program,
    StreamSync,
    Thread,
    emulate,
    measure_latencies,
    programs,
    to_kineto,
)
from daydream.transform import add_kernel_after, remove, scale, select

from tablebuilder import TB
from test_replay_emulator import _assert_exact
from emulated_checks import _baseline_keys, _by_corr, _check_prediction, _check_removal, _emulated_by_key, _predict_removal, _same_interleaving

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _graph(tmp, run, depth):
    p = tmp / "q.json"
    to_kineto(run, str(p))
    return build_graph(load_trace(str(p)), launch_queue_depth=depth)


def _edges(g, kind=EdgeKind.QUEUE):
    s, d = g.edges_of(kind)
    return sorted(zip(s.tolist(), d.tolist()))


# ------------------------------------------------------------------ hand-built tables ----
def _five_launches():
    """Five launches on stream 7 (calls every 100 ns), each kernel done before the next call."""
    b = TB()
    for i in range(5):
        c = b.call("cudaLaunchKernel", 100 * i, 100 * i + 5)
        b.gpu(c, 100 * i + 10, 100 * i + 15, name=f"k{i}")
    return b.table()


def test_edges_go_from_the_task_depth_places_before_to_the_launching_call():
    g = build_graph(_five_launches(), launch_queue_depth=2)
    calls = np.flatnonzero(g.node_kind == NODE_CPU)
    ks = [int(np.flatnonzero(g.node_names() == f"k{i}")[0]) for i in range(5)]
    assert _edges(g) == sorted((ks[i - 2], int(calls[i])) for i in range(2, 5))
    assert _edges(build_graph(_five_launches(), launch_queue_depth=0)) == []
    assert build_graph(_five_launches()).launch_queue_depth == LAUNCH_QUEUE_DEPTH
    assert _edges(build_graph(_five_launches())) == []  # fewer tasks than the default depth


def test_a_graph_launch_is_one_queue_entry(tmp_path):
    """A cudaGraphLaunch's nodes hold one slot of the launch queue, freed by the last node (the
    graph is one submission): with depth 2, a 10-node graph is not held by its own nodes, and
    the launch two entries after it waits for the graph's last node (fifth try-out: each node took
    a slot, so ResNet-50's cuda-graphs launches blocked 34 ms each)."""
    k = Launch(7, "k", 1_000, 2_000)
    prog = Program([Thread([k, GraphLaunch(7, [("n", 1_000)] * 10, 2_000), k, k, StreamSync(7, 0)])], launch_queue_depth=2)
    run = emulate(prog)
    calls = run.thread_calls(0)
    graph_tasks = [t for t in run.tasks if t.graph_node is not None]
    assert calls[1].queued_for is None  # was held by its own 8th node
    assert calls[2].queued_for == 0 and calls[3].queued_for == run.tasks.index(graph_tasks[-1])
    g = _graph(tmp_path, run, 2)
    last = int(np.flatnonzero(g.node_names() == "n")[-1])
    assert [s_ for s_, _ in _edges(g)] == [int(np.flatnonzero(g.node_names() == "k")[0]), last]
    _assert_exact(run, g, simulate(g))


def test_a_launch_held_by_the_queue_gets_its_own_cost_and_the_baseline_is_kept():
    b = TB()
    c0 = b.call("cudaLaunchKernel", 0, 5)
    b.gpu(c0, 10, 1000, name="k0")
    c1 = b.call("cudaLaunchKernel", 10, 1007)  # queue full (depth 1): returns 7 ns after k0 ends
    b.gpu(c1, 1010, 1100, name="k1")
    g = build_graph(b.table(), launch_queue_depth=1)
    k0 = int(np.flatnonzero(g.node_names() == "k0")[0])
    call1 = int(np.flatnonzero(g.rec_start_ns == 10)[0])
    assert g.node_kind[call1] == NODE_CPU and _edges(g) == [(k0, call1)]
    assert g.dur_ns[call1] == 7 and g.blocking[call1]
    tl = simulate(g)
    assert np.array_equal(tl.start_ns, g.rec_start_ns) and np.array_equal(tl.end_ns, g.rec_end_ns)
    slow = simulate(scale(g, select(g, kind="kernel"), 2.0))
    assert slow.end_ns[call1] == slow.end_ns[k0] + 7
    _, cp = critical_path(g, slow)
    assert cp.by_cause_ns["launch"] >= 7


def test_a_recorded_launch_that_did_not_wait_drops_the_edge_and_says_so():
    b = TB()
    c0 = b.call("cudaLaunchKernel", 0, 5)
    b.gpu(c0, 10, 1000)
    c1 = b.call("cudaLaunchKernel", 10, 17)  # returned while k0 ran: the queue is deeper than 1
    b.gpu(c1, 1010, 1100)
    g = build_graph(b.table(), launch_queue_depth=1)
    assert _edges(g) == [] and g.dur_ns.tolist()[:2] == [5, 7]
    assert any("launch-queue depth" in k for k in g.counts)


def _burst_program(depth, kernel_ns=50_000, n=8):
    """One thread launches ``n`` kernels of ``kernel_ns`` on one stream (calls of 2 us), then
    does host work and synchronizes the stream."""
    ops = [Launch(7, f"k{i}", kernel_ns, 2_000) for i in range(n)] + [HostWork(30_000), StreamSync(7, 1_000)]
    return Program([Thread(ops)], launch_latency_ns=5_000, gpu_gap_ns=1_000, launch_queue_depth=depth)


def test_slowing_the_gpu_needs_the_queue_edges(tmp_path):
    prog = _burst_program(depth=3)
    run = emulate(prog)
    g = _graph(tmp_path, run, depth=3)
    g_free = build_graph(g.table, launch_queue_depth=0)
    assert len(_edges(g)) == 5 and _edges(g_free) == []
    _assert_exact(run, g, simulate(g))
    _assert_exact(run, g_free, simulate(g_free))  # the baseline never filled the queue
    slow = emulate(prog.map_ops(lambda op: dataclasses.replace(op, kernel_dur_ns=op.kernel_dur_ns * 5) if isinstance(op, Launch) else op))
    assert sum(c.queued_for is not None for c in slow.calls) == 5
    pred = simulate(scale(g, select(g, kind="kernel"), 5.0))
    _check_prediction(g, pred, run, slow)
    free = simulate(scale(g_free, select(g_free, kind="kernel"), 5.0))
    calls = np.flatnonzero(g.node_kind == NODE_CPU)
    last_launch = int(calls[7])
    assert free.end_ns[last_launch] < pred.end_ns[last_launch]  # the CPU ran ahead of the queue
    assert np.array_equal(simulate_events(scale(g, select(g, kind="kernel"), 5.0)).end_ns, pred.end_ns)


def test_remove_and_insert_remake_the_queue_edges(tmp_path):
    prog = _burst_program(depth=2, n=6)
    g = _graph(tmp_path, emulate(prog), depth=2)
    ks = [int(np.flatnonzero(g.node_names() == f"k{i}")[0]) for i in range(6)]
    g2 = remove(g, np.isin(np.arange(g.n), [ks[2], int(g.launch[ks[2]])]))
    names = g2.node_names()
    by = {names[s]: int(g2.node_kind[d] == NODE_CPU) for s, d in _edges(g2)}
    assert sorted(by) == ["k0", "k1", "k3"]  # k0 -> launch of k3, k1 -> of k4, k3 -> of k5
    launched = {names[s]: names[int(np.flatnonzero(g2.launch == d)[0])] for s, d in _edges(g2)}
    assert launched == {"k0": "k3", "k1": "k4", "k3": "k5"}
    g3, new = add_kernel_after(g, ks[0], dur_ns=1_000, name="added", call_dur_ns=1_000)
    names = g3.node_names()
    launched = {names[s]: names[int(np.flatnonzero(g3.launch == d)[0])] for s, d in _edges(g3)}
    assert launched == {"k0": "k1", "added": "k2", "k1": "k3", "k2": "k4", "k3": "k5"}


# ------------------------------------------------------------------ emulated programs ----
def _with_depth(prog, depth):
    return dataclasses.replace(prog, launch_queue_depth=depth)


def _note_full(run, what):
    """Hypothesis statistics: how many examples had a launch held by a full queue."""
    event(f"{what}: a launch waited for the queue" if any(c.queued_for is not None for c in run.calls) else f"{what}: queue never full")


@pytest.mark.slow
@SETTINGS
@given(programs(graph_launches=True), st.integers(1, 4))
def test_replay_with_a_small_launch_queue_is_exact(tmp_path_factory, prog, depth):
    run = emulate(_with_depth(prog, depth))
    assume(measure_latencies(run) == (prog.L, prog.G))
    _note_full(run, "baseline")
    g = _graph(tmp_path_factory.mktemp("q"), run, depth)
    _assert_exact(run, g, simulate(g))


@pytest.mark.slow
@SETTINGS
@given(programs(graph_launches=True), st.integers(2, 4), st.sampled_from([3.0, 5.0, 10.0]))
def test_slowing_the_gpu_predicts_the_changed_program(tmp_path_factory, prog, depth, factor):
    prog = _with_depth(prog, depth)
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graph(tmp_path_factory.mktemp("q"), run, depth)
    pred = simulate(scale(g, select(g, kind="kernel"), factor))

    def change(op):
        if isinstance(op, GraphLaunch):
            return dataclasses.replace(op, kernels=tuple((k, int(np.rint(d * factor))) for k, d in op.kernels))
        return dataclasses.replace(op, kernel_dur_ns=int(np.rint(op.kernel_dur_ns * factor))) if isinstance(op, Launch) else op

    changed = emulate(prog.map_ops(change))
    assume(_same_interleaving(run, changed))
    _note_full(changed, "slowed")
    _check_prediction(g, pred, run, changed)


@pytest.mark.slow
@SETTINGS
@given(programs(), st.integers(1, 4), st.integers(0, 2**32))
def test_removing_a_kernel_predicts_the_changed_program(tmp_path_factory, prog, depth, seed):
    prog = _with_depth(prog, depth)
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    r = _predict_removal(prog, run, seed, _graph(tmp_path_factory.mktemp("q"), run, depth))
    assume(_same_interleaving(run, r.changed, r.new_key, skip={(r.victim.thread, r.victim.op_index)}))
    _check_removal(r.graph, r.pred, run, r.changed, r.new_key)


@pytest.mark.slow
@SETTINGS
@given(programs(max_threads=1), st.integers(1, 4), st.integers(0, 2**32), st.integers(1_000, 100_000))
def test_adding_a_kernel_predicts_the_changed_program(tmp_path_factory, prog, depth, seed, kdur):
    prog = _with_depth(prog, depth)
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    launches = [c for c in run.calls if isinstance(c.op, Launch)]
    assume(launches)
    anchor = launches[np.random.default_rng(seed).integers(len(launches))]
    g = _graph(tmp_path_factory.mktemp("q"), run, depth)
    k = int(np.flatnonzero((g.table.correlation[g.row] == anchor.correlation) & (g.node_kind != NODE_CPU))[0])
    g2, new_k = add_kernel_after(g, k, dur_ns=kdur, name="added", call_dur_ns=3_000)
    pred = simulate(g2)
    th = prog.threads[anchor.thread]
    ops = list(th.ops)
    ops.insert(anchor.op_index + 1, Launch(anchor.op.stream, "added", kdur, 3_000, device=anchor.op.device))
    changed = emulate(dataclasses.replace(prog, threads=(dataclasses.replace(th, ops=tuple(ops)),)))

    def new_key(key):
        return (key[0], key[1] + 1) if key[1] > anchor.op_index else key

    keys = _baseline_keys(run)
    calls, tasks = _by_corr(g2, pred)
    got_calls = {new_key(keys[c]): v for c, v in calls.items()}
    got_tasks = {new_key(keys[c]): v for c, v in tasks.items()}
    new_call = int(g2.launch[new_k])
    got_calls[(anchor.thread, anchor.op_index + 1)] = (int(pred.start_ns[new_call]), int(pred.end_ns[new_call]))
    got_tasks[(anchor.thread, anchor.op_index + 1)] = (int(pred.start_ns[new_k]), int(pred.end_ns[new_k]))
    e_calls, e_tasks = _emulated_by_key(changed)
    assert got_calls == e_calls
    assert got_tasks == e_tasks
