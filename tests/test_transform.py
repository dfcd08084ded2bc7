"""Transformation primitives: properties, and predictions equal to the emulator's changed programs.

The emulator test is the one that shows the graph holds every dependency the GPU had: a replay of
an unchanged trace can look right with edges missing, a prediction cannot.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from daydream.testing.emulator import Launch, emulate, measure_latencies, programs
from daydream.errors import DaydreamError
from daydream.graph import NODE_CPU, build_graph
from daydream.simulate import check_topological, simulate
from daydream.transform import add_kernel_after, insert, remove, scale, select, topological_order

from tablebuilder import TB
from emulated_checks import (  # noqa: F401  (importers of these names from here keep working)
    _baseline_keys, _by_corr, _check_prediction, _check_removal, _drop_launch, _emulated_by_key, _gap_ops, _graph_of,
    _predict_removal, _random_transform, _same_interleaving,
)

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


# ------------------------------------------------------------------- identity properties ----
@pytest.mark.slow
@SETTINGS
@given(programs())
def test_identity_transforms_leave_replay_unchanged(tmp_path_factory, prog):
    g = _graph_of(tmp_path_factory.mktemp("t"), emulate(prog))
    base = simulate(g)
    for g2 in (scale(g, np.ones(g.n, bool), 1.0), remove(g, np.zeros(g.n, bool))):
        tl = simulate(g2)
        assert np.array_equal(tl.start_ns, base.start_ns) and np.array_equal(tl.end_ns, base.end_ns)


@pytest.mark.slow
@SETTINGS
@given(programs(), st.floats(0.0, 1.0), st.integers(0, 2**32))
def test_shrinking_durations_never_delays_any_task(tmp_path_factory, prog, f, seed):
    g = _graph_of(tmp_path_factory.mktemp("t"), emulate(prog))
    rng = np.random.default_rng(seed)
    m = rng.random(g.n) < 0.5
    base = simulate(g)
    tl = simulate(scale(g, m, f))
    assert np.all(tl.end_ns <= base.end_ns)
    assert np.all(tl.start_ns <= base.start_ns)


@pytest.mark.slow
@SETTINGS
@given(programs(), st.lists(st.tuples(st.sampled_from(["scale", "remove", "insert"]), st.integers(0, 2**32)), max_size=6))
def test_any_sequence_of_primitives_keeps_graph_acyclic(tmp_path_factory, prog, steps):
    g = _graph_of(tmp_path_factory.mktemp("t"), emulate(prog))
    for what, seed in steps:
        if g.n == 0:
            break
        g = _random_transform(g, what, seed)
        check_topological(g, g.order)
        check_topological(g, topological_order(g))
        simulate(g)


def test_transforms_do_not_change_the_baseline(tmp_path):
    b = TB()
    c = b.call("cudaLaunchKernel", 0, 10)
    b.gpu(c, 5, 100)
    g = build_graph(b.table())
    before = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in g.__dict__.items()}
    scale(g, np.ones(g.n, bool), 0.5)
    remove(g, np.array([False, True]))
    add_kernel_after(g, 1, dur_ns=5, name="x", call_dur_ns=3)
    for k, v in before.items():
        if isinstance(v, np.ndarray):
            assert np.array_equal(v, getattr(g, k)), k


def test_insert_rejects_bad_input():
    b = TB()
    c = b.call("cudaLaunchKernel", 0, 10)
    b.gpu(c, 5, 100)
    g = build_graph(b.table())
    with pytest.raises(DaydreamError):
        insert(g, after=99, dur_ns=1, name="x")
    with pytest.raises(DaydreamError):
        insert(g, after=0, dur_ns=1, name="x", kind="kernel")  # a kernel on a CPU lane
    with pytest.raises(DaydreamError):
        select(g, kind="bogus")
    with pytest.raises(DaydreamError):
        select(g, name="(")


# ------------------------------------------------------- predictions equal the emulator ----
@pytest.mark.slow
@SETTINGS
@given(programs(), st.sampled_from(["sgemm", "elementwise", "reduce", "nccl"]), st.sampled_from([0.0, 0.25, 0.5, 1.5, 3.0]))
def test_scaling_kernels_predicts_the_changed_program(tmp_path_factory, prog, pattern, factor):
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graph_of(tmp_path_factory.mktemp("t"), run)
    pred = simulate(scale(g, select(g, kind="kernel", name=pattern), factor))

    def change(op):
        if isinstance(op, Launch) and pattern in op.kernel_name:
            return dataclasses.replace(op, kernel_dur_ns=int(np.rint(op.kernel_dur_ns * factor)))
        return op

    changed = emulate(prog.map_ops(change))
    assume(_same_interleaving(run, changed))
    _check_prediction(g, pred, run, changed)


@pytest.mark.slow
@SETTINGS
@given(programs(), st.integers(0, 2**32))
def test_removing_a_kernel_and_its_launch_predicts_the_changed_program(tmp_path_factory, prog, seed):
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    r = _predict_removal(prog, run, seed, _graph_of(tmp_path_factory.mktemp("t"), run))
    assert r.mask.sum() == 2  # the launch call and its kernel
    # match the changed run's (thread, op index) back to the baseline's
    assume(_same_interleaving(run, r.changed, r.new_key, skip={(r.victim.thread, r.victim.op_index)}))
    _check_removal(r.graph, r.pred, run, r.changed, r.new_key)


@pytest.mark.slow
@SETTINGS
@given(programs(max_threads=1), st.integers(0, 2**32), st.integers(1_000, 100_000), st.integers(1_000, 20_000))
def test_adding_a_kernel_predicts_the_changed_program(tmp_path_factory, prog, seed, kdur, cdur):
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    launches = [c for c in run.calls if isinstance(c.op, Launch)]
    assume(launches)
    anchor = launches[np.random.default_rng(seed).integers(len(launches))]
    g = _graph_of(tmp_path_factory.mktemp("t"), run)
    corr = g.table.correlation[g.row]
    k = int(np.nonzero((corr == anchor.correlation) & (g.node_kind != NODE_CPU))[0][0])
    g2, new_k = add_kernel_after(g, k, dur_ns=kdur, name="added", call_dur_ns=cdur)
    pred = simulate(g2)
    th = prog.threads[anchor.thread]
    ops = list(th.ops)
    ops.insert(anchor.op_index + 1, Launch(anchor.op.stream, "added", kdur, cdur, device=anchor.op.device))
    changed = emulate(dataclasses.replace(prog, threads=(dataclasses.replace(th, ops=tuple(ops)),)))
    keys = _baseline_keys(run)
    calls, tasks = _by_corr(g2, pred)

    def new_key(key):
        t, i = key
        return (t, i + 1) if i > anchor.op_index else key

    e_calls, e_tasks = _emulated_by_key(changed)
    new_call = int(g2.launch[new_k])
    got_calls = {new_key(keys[c]): v for c, v in calls.items()}
    got_calls[(anchor.thread, anchor.op_index + 1)] = (int(pred.start_ns[new_call]), int(pred.end_ns[new_call]))
    got_tasks = {new_key(keys[c]): v for c, v in tasks.items()}
    got_tasks[(anchor.thread, anchor.op_index + 1)] = (int(pred.start_ns[new_k]), int(pred.end_ns[new_k]))
    assert got_calls == e_calls
    assert got_tasks == e_tasks


# --------------------------------------------------------- batched insert, merge, lanes ----
def _same_graph(a, b):
    for f in ("node_kind", "lane", "name_id", "pid", "tid", "stream", "copy_kind", "dur_ns", "gap_ns", "rec_start_ns",
              "rec_end_ns", "position_ns", "edge_src", "edge_dst", "edge_kind", "edge_origin"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert a.names == b.names and a.lanes == b.lanes


def test_insert_tasks_is_the_one_by_one_insertion():
    """One insert_tasks call (a call after an anchor, a kernel at a new stream's end launched by
    it, a call chained after the first, a kernel after a recorded kernel with a consumer) makes the
    graph that insert / insert_on_stream make one task at a time, and the same prediction."""
    from daydream import load_trace
    from daydream.transform import add_stream, insert_on_stream, insert_tasks

    g = build_graph(load_trace("fixtures/train_step.json.gz"))
    cpu, gpu = np.flatnonzero(g.node_kind == NODE_CPU), np.flatnonzero((g.node_kind != NODE_CPU) & (g.launch >= 0))
    a, k, like = int(cpu[5]), int(gpu[3]), int(gpu[0])
    waiter = int(g.lane_next[g.launch[k]])
    g, lane = add_stream(g, pid=int(g.pid[like]), device=int(g.device[like]))
    n = g.n
    one, _ = insert(g, after=a, dur_ns=10, name="c0", kind="cpu", gap_ns=3)
    one, _ = insert_on_stream(one, lane=lane, like=like, dur_ns=500, name="k1", launch=n, preds=[like])
    one, _ = insert(one, after=n, dur_ns=20, name="c2", kind="cpu")
    one, _ = insert(one, after=k, dur_ns=700, name="k3", succs=[waiter])
    batch, ids = insert_tasks(g, after=[a, -1, n, k], lane=[int(g.lane[a]), lane, int(g.lane[a]), int(g.lane[k])],
                              like=[-1, like, -1, -1], kind=["cpu", "kernel", "cpu", "kernel"], dur_ns=[10, 500, 20, 700],
                              gap_ns=[3, 0, 0, 0], names=["c0", "k1", "c2", "k3"], launch=[-1, n, -1, -1],
                              preds=[(1, like)], succs=[(3, waiter)])
    assert ids.tolist() == [n, n + 1, n + 2, n + 3]
    _same_graph(one, batch)
    assert np.array_equal(simulate(one).end_ns, simulate(batch).end_ns)


def test_merge_is_set_duration_then_remove():
    from daydream import load_trace
    from daydream.transform import merge, set_duration

    g = build_graph(load_trace("fixtures/train_step.json.gz"))
    rank = np.empty(g.n, np.int64)
    rank[g.order] = np.arange(g.n)
    gpu_lanes = g.lane[g.node_kind != NODE_CPU]
    on = np.flatnonzero(g.lane == np.bincount(gpu_lanes).argmax())  # the busiest stream
    on = on[np.argsort(rank[on])]
    group = np.full(g.n, -1, np.int64)
    group[on[2:5]], group[on[8:10]] = 4, 1  # groups in increasing id order: 1, then 4
    heads = np.zeros(g.n, bool)
    heads[[on[8], on[2]]] = True
    dur = np.zeros(g.n, np.int64)
    dur[on[8]], dur[on[2]] = 111, 444
    ref = remove(set_duration(g, heads, dur[heads]), (group >= 0) & ~heads)
    got = merge(g, group, [111, 444])
    _same_graph(ref, got)


def test_add_lanes_adds_threads_then_streams():
    from daydream import load_trace
    from daydream.transform import add_lanes, add_stream, add_threads

    g = build_graph(load_trace("fixtures/train_step.json.gz"))
    like = int(np.flatnonzero(g.node_kind == NODE_CPU)[0])
    th = [dict(pid=int(g.pid[like]), tid=77777 + i, like=like, dur_ns=[5, 6], gap_ns=[1, 2], names=["a", "b"]) for i in range(2)]
    got, news, lanes = add_lanes(g, threads=th, streams=[dict(pid=int(g.pid[like]), device=0)])
    ref, ref_news = add_threads(g, th)
    ref, ln = add_stream(ref, pid=int(g.pid[like]), device=0)
    _same_graph(ref, got)
    assert lanes == [ln] and all(np.array_equal(x, y) for x, y in zip(news, ref_news))
