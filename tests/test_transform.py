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

from daydream.testing.emulator import HostWork, Launch, RangeBegin, RangeEnd, emulate, measure_latencies, programs, to_kineto
from daydream.errors import DaydreamError
from daydream.formats import load_trace
from daydream.graph import NODE_CPU, build_graph
from daydream.simulate import check_topological, simulate
from daydream.transform import add_kernel_after, insert, remove, scale, select, topological_order

from tablebuilder import TB

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _graph_of(tmp, run):
    p = tmp / "t.json"
    to_kineto(run, str(p))
    return build_graph(load_trace(str(p)))


def _by_corr(graph, tl):
    corr = graph.table.correlation[np.maximum(graph.row, 0)]
    cpu = graph.node_kind == NODE_CPU
    calls = {int(c): (int(s), int(e)) for c, s, e, r in zip(corr[cpu], tl.start_ns[cpu], tl.end_ns[cpu], graph.row[cpu]) if r >= 0}
    tasks = {int(c): (int(s), int(e)) for c, s, e, r in zip(corr[~cpu], tl.start_ns[~cpu], tl.end_ns[~cpu], graph.row[~cpu]) if r >= 0}
    return calls, tasks


def _emulated_by_key(run):
    """Emulator times keyed by (thread, op index) so a changed program can be matched up."""
    calls = {(c.thread, c.op_index): (c.start_ns, c.end_ns) for c in run.calls}
    tasks = {(run.calls[t.call].thread, run.calls[t.call].op_index): (t.start_ns, t.end_ns) for t in run.tasks}
    return calls, tasks


def _same_interleaving(base_run, changed_run, new_key=lambda k: k, skip=frozenset()):
    """True when the calls of different threads are issued in the same global order in both runs.

    A dependency graph is built from one run's order of events; when an optimization changes the
    order in which threads issue their calls (which launch reaches a shared stream first, which
    record a wait binds to), the program has a different graph. Daydream, like the paper, assumes
    the structure stays; these tests check predictions exactly where it does.
    """
    a = [new_key((c.thread, c.op_index)) for c in base_run.calls if (c.thread, c.op_index) not in skip]
    b = [(c.thread, c.op_index) for c in changed_run.calls]
    b = [k for k in b if k in set(a)]
    return a == b


def _baseline_keys(run):
    """correlation id -> (thread, op index) in the baseline run."""
    return {c.correlation: (c.thread, c.op_index) for c in run.calls}


# ------------------------------------------------------------------- identity properties ----
@SETTINGS
@given(programs())
def test_identity_transforms_leave_replay_unchanged(tmp_path_factory, prog):
    g = _graph_of(tmp_path_factory.mktemp("t"), emulate(prog))
    base = simulate(g)
    for g2 in (scale(g, np.ones(g.n, bool), 1.0), remove(g, np.zeros(g.n, bool))):
        tl = simulate(g2)
        assert np.array_equal(tl.start_ns, base.start_ns) and np.array_equal(tl.end_ns, base.end_ns)


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


@SETTINGS
@given(programs(), st.lists(st.tuples(st.sampled_from(["scale", "remove", "insert"]), st.integers(0, 2**32)), max_size=6))
def test_any_sequence_of_primitives_keeps_graph_acyclic(tmp_path_factory, prog, steps):
    g = _graph_of(tmp_path_factory.mktemp("t"), emulate(prog))
    for what, seed in steps:
        if g.n == 0:
            break
        rng = np.random.default_rng(seed)
        if what == "scale":
            g = scale(g, rng.random(g.n) < 0.3, float(rng.random() * 2))
        elif what == "remove":
            g = remove(g, rng.random(g.n) < 0.2)
        else:
            gpu = np.nonzero((g.node_kind != NODE_CPU) & (g.launch >= 0))[0]
            if len(gpu):
                k = int(gpu[rng.integers(len(gpu))])
                g, _ = add_kernel_after(g, k, dur_ns=int(rng.integers(1, 10_000)), name="new", call_dur_ns=1000)
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
def _check_prediction(graph, pred_tl, base_run, changed_run, dropped_keys=frozenset()):
    keys = _baseline_keys(base_run)
    calls, tasks = _by_corr(graph, pred_tl)
    e_calls, e_tasks = _emulated_by_key(changed_run)
    got_calls = {keys[c]: v for c, v in calls.items()}
    got_tasks = {keys[c]: v for c, v in tasks.items()}
    assert got_calls == e_calls
    assert got_tasks == e_tasks


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


def _gap_ops(ops, op_index):
    """Indices of the host work between the previous API call and ops[op_index] (range markers
    in between are not calls and stay)."""
    out = set()
    j = op_index - 1
    while j >= 0 and isinstance(ops[j], (HostWork, RangeBegin, RangeEnd)):
        if isinstance(ops[j], HostWork):
            out.add(j)
        j -= 1
    return out


def _drop_launch(prog, thread, op_index):
    """The program without one Launch op and the host work right before it."""
    th = prog.threads[thread]
    ops = list(th.ops)
    drop = _gap_ops(ops, op_index) | {op_index}
    ops = [op for i, op in enumerate(ops) if i not in drop]
    threads = list(prog.threads)
    threads[thread] = dataclasses.replace(th, ops=tuple(ops))
    return dataclasses.replace(prog, threads=tuple(threads))


@SETTINGS
@given(programs(), st.integers(0, 2**32))
def test_removing_a_kernel_and_its_launch_predicts_the_changed_program(tmp_path_factory, prog, seed):
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    first_calls = {min((c.op_index for c in run.calls if c.thread == t), default=-1) for t in range(len(prog.threads))}
    cands = [c for c in run.calls if isinstance(c.op, Launch) and c.op_index not in first_calls]
    assume(cands)
    victim = cands[np.random.default_rng(seed).integers(len(cands))]
    g = _graph_of(tmp_path_factory.mktemp("t"), run)
    corr = g.table.correlation[g.row]
    m = corr == victim.correlation  # the launch call and its kernel
    assert m.sum() == 2
    pred = simulate(remove(g, m))
    changed_prog = _drop_launch(prog, victim.thread, victim.op_index)
    changed = emulate(changed_prog)
    # match the changed run's (thread, op index) back to the baseline's
    keys = _baseline_keys(run)
    g2 = remove(g, m)
    calls, tasks = _by_corr(g2, pred)
    shift = {}
    th_ops = prog.threads[victim.thread].ops
    removed_idx = {victim.op_index} | _gap_ops(list(th_ops), victim.op_index)

    def new_key(k):
        t, i = k
        if t != victim.thread:
            return k
        return (t, i - sum(1 for r in removed_idx if r < i))

    assume(_same_interleaving(run, changed, new_key, skip={(victim.thread, victim.op_index)}))
    e_calls, e_tasks = _emulated_by_key(changed)
    assert {new_key(keys[c]): v for c, v in calls.items()} == e_calls
    assert {new_key(keys[c]): v for c, v in tasks.items()} == e_tasks


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
