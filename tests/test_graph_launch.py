"""CUDA-graph launches: one ``cudaGraphLaunch`` whose kernels all carry its correlation id.

The emulator's :class:`GraphLaunch` enqueues its kernels as a chain on one stream, each ready one
launch latency after the call (docs/model.md, "CUDA-graph launches"). Daydream links every kernel
to the one call (a launch edge each), orders them on the stream by recorded start, and must
replay such programs to the nanosecond and predict changed ones (kernels scaled, a graph node
removed) exactly as the emulator runs them.
"""

from __future__ import annotations

import pytest
import dataclasses

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from daydream.formats import load_trace
from daydream.graph import NODE_CPU, build_graph
from daydream.graph.build.graph_launch import ORDERED, UNKNOWN
from daydream.graph.edges import EdgeKind, Origin
from daydream.simulate import check_topological, simulate
from daydream.errors import NotApplicable
from daydream.optimizations import parse_spec
from daydream.testing.emulator import (
    EventRecord,
    GraphLaunch,
    HostWork,
    Launch,
    MemcpyAsync,
    OtherCall,
    Program,
    RangeBegin,
    RangeEnd,
    StreamSync,
    StreamWaitEvent,
    Thread,
    emulate,
    measure_latencies,
    programs,
    to_kineto,
)
from daydream.transform import remove, scale, select

# derandomized: the same examples each run (a counterexample is a bug to record, not a flaky CI run)
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _graph(tmp, run):
    p = tmp / "g.json"
    to_kineto(run, str(p))
    table = load_trace(str(p))
    assert table.accounting.balanced
    g = build_graph(table)
    check_topological(g, g.order)
    return g


def _task_key(run, t):
    c = run.calls[t.call]
    return (c.thread, c.op_index, t.graph_node)


def _emulated(run):
    """Emulator times keyed by (thread, op index) for calls, (thread, op index, graph node) for tasks."""
    calls = {(c.thread, c.op_index): (c.start_ns, c.end_ns) for c in run.calls}
    tasks = {_task_key(run, t): (t.start_ns, t.end_ns) for t in run.tasks}
    return calls, tasks


def _replayed(run, g, tl, node_of=lambda key: key):
    """Replayed times under the same keys: a graph's kernels are told apart by their place in
    the baseline run (recorded start order within one correlation id)."""
    corr = g.table.correlation[np.maximum(g.row, 0)]
    call_key = {c.correlation: (c.thread, c.op_index) for c in run.calls}
    base_tasks = {}
    for t in run.tasks:
        base_tasks.setdefault(t.correlation, []).append((t.start_ns, _task_key(run, t)))
    cpu = g.node_kind == NODE_CPU
    calls = {call_key[int(corr[i])]: (int(tl.start_ns[i]), int(tl.end_ns[i])) for i in np.nonzero(cpu & (g.row >= 0))[0]}
    tasks = {}
    for i in np.nonzero(~cpu & (g.row >= 0))[0]:
        rec = int(g.rec_start_ns[i])
        key = next(k for s, k in base_tasks[int(corr[i])] if s == rec)
        tasks[node_of(key)] = (int(tl.start_ns[i]), int(tl.end_ns[i]))
    return calls, tasks


def _has_graph(prog):
    return any(isinstance(op, GraphLaunch) for th in prog.threads for op in th.ops)


def test_graph_kernels_share_the_call_and_replay_exactly(tmp_path):
    prog = Program([Thread([Launch(7, "a", 10_000, 3_000),
                            GraphLaunch(7, [("g1", 5_000), ("g2", 7_000), ("g3", 1_000)], 4_000),
                            HostWork(2_000), Launch(20, "b", 3_000, 3_000), StreamSync(7, 500)])])
    run = emulate(prog)
    g = _graph(tmp_path, run)
    corr = g.table.correlation[g.row]
    graph_kernels = np.nonzero((corr == 2) & (g.node_kind != NODE_CPU))[0]
    assert len(graph_kernels) == 3
    call = int(np.nonzero((corr == 2) & (g.node_kind == NODE_CPU))[0][0])
    assert (g.launch[graph_kernels] == call).all()  # one launching call, a launch edge to each
    assert (g.launch_latency_ns, g.gpu_gap_ns) == (prog.L, prog.G)
    tl = simulate(g)
    assert _replayed(run, g, tl) == _emulated(run)
    t0 = prog.t0_ns
    # the chain: g1 after kernel a (+G), g2 and g3 each after the previous node (+G)
    assert [t.start_ns - t0 for t in run.tasks if t.graph_node is not None] == [16_000, 22_000, 30_000]


@pytest.mark.slow
@SETTINGS
@given(programs(max_devices=2, graph_launches=True))
def test_replay_of_graph_launch_programs_is_exact(tmp_path_factory, prog):
    assume(_has_graph(prog))
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graph(tmp_path_factory.mktemp("g"), run)
    assert (g.launch_latency_ns, g.gpu_gap_ns) == (prog.L, prog.G)
    assert _replayed(run, g, simulate(g)) == _emulated(run)


def _same_interleaving(a, b, key=lambda k: k):
    ka = [key((c.thread, c.op_index)) for c in a.calls]
    kb = [(c.thread, c.op_index) for c in b.calls]
    return ka == kb


@pytest.mark.slow
@SETTINGS
@given(programs(graph_launches=True), st.sampled_from(["sgemm", "elementwise", "reduce", "nccl"]),
       st.sampled_from([0.0, 0.25, 0.5, 1.5, 3.0]))
def test_scaling_graph_kernels_predicts_the_changed_program(tmp_path_factory, prog, pattern, factor):
    assume(_has_graph(prog))
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graph(tmp_path_factory.mktemp("g"), run)
    pred = simulate(scale(g, select(g, kind="kernel", name=pattern), factor))

    def dur(name, d):
        return int(np.rint(d * factor)) if pattern in name else d

    def change(op):
        if isinstance(op, Launch):
            return dataclasses.replace(op, kernel_dur_ns=dur(op.kernel_name, op.kernel_dur_ns))
        if isinstance(op, GraphLaunch):
            return dataclasses.replace(op, kernels=[(n, dur(n, d)) for n, d in op.kernels])
        return op

    changed = emulate(prog.map_ops(change))
    assume(_same_interleaving(run, changed))
    assert _replayed(run, g, pred) == _emulated(changed)


@pytest.mark.slow
@SETTINGS
@given(programs(graph_launches=True), st.integers(0, 2**32))
def test_removing_a_graph_node_predicts_the_changed_program(tmp_path_factory, prog, seed):
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    cands = [t for t in run.tasks if t.graph_node is not None and len(run.calls[t.call].op.kernels) > 1]
    assume(cands)
    victim = cands[np.random.default_rng(seed).integers(len(cands))]
    vc = run.calls[victim.call]
    g = _graph(tmp_path_factory.mktemp("g"), run)
    m = (g.table.correlation[g.row] == victim.correlation) & (g.node_kind != NODE_CPU) & (g.rec_start_ns == victim.start_ns)
    assert m.sum() == 1
    pred = simulate(remove(g, m))
    th = prog.threads[vc.thread]
    ops = list(th.ops)
    op = ops[vc.op_index]
    ops[vc.op_index] = dataclasses.replace(op, kernels=[k for j, k in enumerate(op.kernels) if j != victim.graph_node])
    threads = list(prog.threads)
    threads[vc.thread] = dataclasses.replace(th, ops=ops)
    changed = emulate(dataclasses.replace(prog, threads=threads))
    assume(_same_interleaving(run, changed))

    def node_of(key):  # the nodes after the removed one move up by one
        t, i, n = key
        return (t, i, n - 1) if (t, i) == (vc.thread, vc.op_index) and n > victim.graph_node else key

    calls, tasks = _replayed(run, remove(g, m), pred, node_of)
    e_calls, e_tasks = _emulated(changed)
    assert calls == e_calls
    assert tasks == e_tasks


# ------------------------------------- graphs whose kernels run on streams of their own --------
def _own_stream_program(tail_ops):
    """a on stream 7 (10 us), then a graph launched into 7 whose kernels run on stream 101, then ``tail_ops``."""
    return Program([Thread([Launch(7, "a", 10_000, 3_000),
                            GraphLaunch(7, [("g1", 5_000), ("g2", 7_000)], 4_000, node_stream=101),
                            *tail_ops])])


def test_graph_on_a_stream_of_its_own_follows_and_precedes_its_launch_stream(tmp_path):
    """The trace records g1, g2 on stream 101 and names no stream for the cudaGraphLaunch: without
    the graph-order edges g1 starts at its launch + L, under kernel a (which ends at 15 us)."""
    prog = _own_stream_program([Launch(7, "b", 3_000, 3_000), StreamSync(7, 500)])
    run = emulate(prog)
    t0 = prog.t0_ns
    assert [(t.stream, t.start_ns - t0) for t in run.tasks] == [(7, 5_000), (101, 16_000), (101, 22_000), (7, 30_000)]
    g = _graph(tmp_path, run)
    gk = g.edge_kind == EdgeKind.GRAPH
    names = [g.names[i] for i in g.name_id]
    pairs = sorted((names[s], names[d]) for s, d in zip(g.edge_src[gk], g.edge_dst[gk]))
    assert pairs == [("a", "g1"), ("g2", "b")]  # entry and exit
    assert (g.edge_origin[gk] == Origin.INFERRED).all()
    assert g.counts[ORDERED] == 1
    assert _replayed(run, g, simulate(g)) == _emulated(run)


def test_syncs_and_events_on_the_launch_stream_wait_for_the_graph(tmp_path):
    """A stream synchronize and an event record on the launch stream right after the graph (no
    task on stream 7 between) wait for the graph's last kernel, as CUDA orders them."""
    prog = _own_stream_program([EventRecord("e", 7, 2_000), StreamWaitEvent(20, "e", 2_000), Launch(20, "c", 1_000, 2_000),
                                StreamSync(7, 500)])
    run = emulate(prog)
    last = max(t.end_ns for t in run.tasks if t.stream == 101)
    assert run.calls[-1].end_ns == last + 500
    g = _graph(tmp_path, run)
    assert _replayed(run, g, simulate(g)) == _emulated(run)


def test_graph_launch_stream_unknown_is_counted(tmp_path):
    """A thread whose first launch is a graph on a stream of its own: its launch stream cannot be
    told from the trace; nothing is ordered, and that is counted."""
    prog = Program([Thread([GraphLaunch(7, [("g1", 5_000)], 4_000, node_stream=101), Launch(7, "b", 3_000, 3_000)])])
    g = _graph(tmp_path, emulate(prog))
    assert not (g.edge_kind == EdgeKind.GRAPH).any()
    assert g.counts[UNKNOWN] == 1


def test_pageable_copy_after_a_graph_on_its_own_stream_waits_for_the_graph(tmp_path):
    """Issue 36's 1 ns counterexample (shrunk by hypothesis from the property below): a pageable
    ``cudaMemcpyAsync`` (documented rule: a stream sync before staging) launched after a graph
    whose kernel runs on a stream of its own waits for the graph, which stands in the launch
    stream (docs/model.md, "CUDA-graph launches"), not for the stream's task before the graph.
    The edge came from that earlier kernel: the copy call's own cost was measured from it
    (2,001 ns, not 1,000), and with the kernels scaled x0 the call ended 1 ns after the
    emulator's."""
    prog = Program([Thread([Launch(7, "a", 1_000, 1_000), HostWork(1),
                            GraphLaunch(7, [("g1", 1_000)], 1_000, node_stream=101),
                            MemcpyAsync(7, "HtoD", 1, 1_000, staging_bytes=0, call_dur_ns=1_000, host_memory="pageable")])],
                   launch_latency_ns=2_000, gpu_gap_ns=0, staging_bytes=0)
    run = emulate(prog)
    g = _graph(tmp_path, run)
    copy_call = int(np.nonzero((g.node_kind == NODE_CPU) & (g.table.correlation[g.row] == 3))[0][0])
    graph_kernel = int(np.nonzero((g.node_kind != NODE_CPU) & (g.table.correlation[g.row] == 2))[0][0])
    waits = g.edge_src[(g.edge_dst == copy_call) & (g.edge_kind == EdgeKind.WAIT)]
    assert waits.tolist() == [graph_kernel]
    assert _replayed(run, g, simulate(g)) == _emulated(run)

    def zero(op):
        if isinstance(op, Launch):
            return dataclasses.replace(op, kernel_dur_ns=0)
        if isinstance(op, GraphLaunch):
            return dataclasses.replace(op, kernels=[(n, 0) for n, _ in op.kernels])
        return op

    changed = emulate(prog.map_ops(zero))
    assert _replayed(run, g, simulate(scale(g, select(g, kind="kernel"), 0.0))) == _emulated(changed)


@pytest.mark.slow
@SETTINGS
@given(programs(max_devices=2, graph_launches=True, graph_streams=True), st.sampled_from([0.0, 0.5, 3.0]))
def test_graphs_on_streams_of_their_own_replay_and_predict_exactly(tmp_path_factory, prog, factor):
    """Replay exact and every kernel scaled by ``factor`` predicts the emulator's changed run,
    over programs whose graphs often run on a stream of their own."""
    assume(any(isinstance(op, GraphLaunch) and op.node_stream is not None for th in prog.threads for op in th.ops))
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graph(tmp_path_factory.mktemp("g"), run)
    assert (g.launch_latency_ns, g.gpu_gap_ns) == (prog.L, prog.G)
    assert _replayed(run, g, simulate(g)) == _emulated(run)

    def change(op):
        if isinstance(op, Launch):
            return dataclasses.replace(op, kernel_dur_ns=int(np.rint(op.kernel_dur_ns * factor)))
        if isinstance(op, GraphLaunch):
            return dataclasses.replace(op, kernels=[(n, int(np.rint(d * factor))) for n, d in op.kernels])
        return op

    changed = emulate(prog.map_ops(change))
    assume(_same_interleaving(run, changed))
    pred = simulate(scale(g, select(g, kind="kernel"), factor))
    assert _replayed(run, g, pred) == _emulated(changed)


# ---------------------------------------------------- the cuda-graphs optimization -------------
def _captured(prog, glaunch):
    """The program with each run of non-blocking calls inside a ProfilerStep range (cut at
    blocking calls and range ends) that holds two or more kernel launches replaced by one
    GraphLaunch of the run's kernels, lasting ``glaunch``; the host work before the run's other
    calls goes with them. Returns (program, {baseline key -> new key}) for calls
    ((thread, op)) and kernels ((thread, op, None) -> (thread, op', node))."""
    th = prog.threads[0]
    ops, keys, out = list(th.ops), {}, []
    runs, cur, depth = [], [], 0
    for i, op in enumerate(ops):
        if isinstance(op, RangeBegin):
            depth += 1
        if isinstance(op, RangeEnd):
            depth -= 1
        if isinstance(op, (Launch, OtherCall)) and depth:
            cur.append(i)
        elif not isinstance(op, HostWork):
            runs.append(cur)
            cur = []
    runs.append(cur)
    head, dropped = {}, set()
    for r in runs:
        if sum(isinstance(ops[i], Launch) for i in r) >= 2:
            head[r[0]] = r
            for i in r[1:]:
                dropped.add(i)
                j = i - 1
                while isinstance(ops[j], HostWork):
                    dropped.add(j)
                    j -= 1
    for i, op in enumerate(ops):
        if i in dropped:
            continue
        k = len(out)
        if i in head:
            kern = [j for j in head[i] if isinstance(ops[j], Launch)]
            out.append(GraphLaunch(7, [(ops[j].kernel_name, ops[j].kernel_dur_ns) for j in kern], glaunch))
            keys.update({(0, j, None): (0, k, n) for n, j in enumerate(kern)})
        else:
            out.append(op)
            keys[(0, i, None)] = (0, k, None)
        keys[(0, i)] = (0, k)
    return dataclasses.replace(prog, threads=[dataclasses.replace(th, ops=out)]), keys


@st.composite
def _step_programs(draw):
    """One thread, kernels on stream 7, in 1-3 ProfilerStep ranges; calls, host work and stream
    syncs drawn at random."""
    L = draw(st.integers(2_000, 15_000))
    G = draw(st.integers(0, min(L, 3_000)))
    ops = [Launch(7, "first", 2_000, 3_000)]
    for step in range(draw(st.integers(1, 3))):
        ops.append(RangeBegin(f"ProfilerStep#{step}"))
        for _ in range(draw(st.integers(1, 12))):
            what = draw(st.sampled_from(["launch", "launch", "launch", "host", "sync", "other"]))
            if what == "launch":
                ops.append(Launch(7, draw(st.sampled_from(["ampere_sgemm_128x64_tn", "reduce_kernel"])),
                                  draw(st.integers(1_000, 100_000)), draw(st.integers(1_000, 20_000))))
            elif what == "host":
                ops.append(HostWork(draw(st.integers(0, 50_000))))
            elif what == "sync":
                ops.append(StreamSync(7, draw(st.integers(0, 20_000))))
            else:
                ops.append(OtherCall("cudaGetDevice", draw(st.integers(1_000, 20_000)), cbid=4))
        ops.append(RangeEnd())
    ops.append(StreamSync(7, 1_000))
    return Program([Thread(ops)], launch_latency_ns=L, gpu_gap_ns=G)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(_step_programs(), st.integers(500, 10_000))
def test_cuda_graphs_optimization_predicts_graph_launch_programs(tmp_path_factory, prog, glaunch):
    """cuda-graphs on an emulated trace equals the emulator's run of the program with those runs
    captured into GraphLaunch ops (one stream, one thread: the case both model alike)."""
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graph(tmp_path_factory.mktemp("g"), run)
    opt, params = parse_spec(f"cuda-graphs:graph_launch_ns={glaunch}")
    try:
        g2, _ = opt.apply(g, params)
    except NotApplicable:
        assume(False)
    changed_prog, keys = _captured(prog, glaunch)
    changed = emulate(changed_prog)
    calls, tasks = _replayed(run, g2, simulate(g2))
    e_calls, e_tasks = _emulated(changed)
    assert {keys[k]: v for k, v in calls.items()} == e_calls
    assert {keys[k]: v for k, v in tasks.items()} == e_tasks
