"""CPU hand-over between threads (``docs/model.md``, "CPU hand-over between threads").

Hand-built tables check the recovery rule (:mod:`daydream.graph.build.handover`); emulated programs with
an autograd thread check that the replay reproduces them and, the test that tells a dependency
from a fit, that predictions for changed programs equal the emulator's run of the changed program.
"""

from __future__ import annotations

import pytest
import dataclasses

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from daydream.events.table import Kind
from daydream.formats import load_trace
from daydream.graph import EdgeKind, Origin, build_graph
from daydream.graph.build.handover import RESUME_TOLERANCE_NS
from daydream.simulate import simulate
from daydream.testing.emulator import (
    Handover,
    HostWork,
    Launch,
    MemsetAsync,
    OtherCall,
    Program,
    RangeBegin,
    RangeEnd,
    StreamSync,
    Thread,
    WaitHandover,
    emulate,
    measure_latencies,
    to_kineto,
)
from daydream.transform import remove, scale

from tablebuilder import TB

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
ENGINE = "autograd::engine::evaluate_function: AddmmBackward0"
ACCUMULATE = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
MAIN, AG = 1, 2  # tids in the hand-built tables


# ------------------------------------------------------------------ hand-built tables ------
def _cpu_op(tb: TB, name: str, start: int, end: int, tid: int) -> None:
    tb._row(kind=Kind.CPU_OP, name=name, cat="cpu_op", start_ns=start, end_ns=end, pid=tb.pid, tid=tid)


def _backward_table(*, engine=ENGINE, main_op_at=None, resume=100, u_prev_end=None) -> tuple[TB, dict]:
    """main: p [0, 10] ... v [resume, resume + 10]; autograd: a [25, 35], b [40, 55] in an engine op."""
    tb = TB()
    ids = {}
    ids["p"] = tb.call("cudaLaunchKernel", 0, 10, tid=MAIN)
    if u_prev_end is not None:
        ids["u0"] = tb.call("cudaLaunchKernel", u_prev_end - 5, u_prev_end, tid=AG)
    _cpu_op(tb, engine, 20, 60, AG)
    ids["a"] = tb.call("cudaLaunchKernel", 25, 35, tid=AG)
    ids["b"] = tb.call("cudaLaunchKernel", 40, 55, tid=AG)
    if main_op_at is not None:
        _cpu_op(tb, "aten::add", main_op_at, main_op_at + 2, MAIN)
    _cpu_op(tb, "Optimizer.step#SGD.step", resume, resume + 20, MAIN)
    ids["v"] = tb.call("cudaLaunchKernel", resume, resume + 10, tid=MAIN)
    return tb, ids


def _node(g, corr: int) -> int:
    return int(np.nonzero((g.correlation == corr) & g.is_cpu)[0][0])


def _handovers(g) -> set[tuple[int, int]]:
    s, d = g.edges_of(EdgeKind.HANDOVER)
    return {(int(g.correlation[a]), int(g.correlation[b])) for a, b in zip(s, d)}


def test_release_and_join_edges_and_own_gaps():
    tb, c = _backward_table()
    g = build_graph(tb.table())
    assert _handovers(g) == {(c["p"], c["a"]), (c["b"], c["v"])}
    assert set(g.edge_origin[g.edge_kind == EdgeKind.HANDOVER].tolist()) == {Origin.INFERRED}
    assert g.counts["CPU hand-over between threads (inferred edges)"] == 2
    assert g.edge_counts()["thread hand-over"] == {"inferred": 2}
    a, v = _node(g, c["a"]), _node(g, c["v"])
    assert g.gap_ns[a] == 25 - 10  # from the release (p ends at 10), not from t0
    assert g.gap_ns[v] == 100 - 55  # from the join (b ends at 55), not from p
    tl = simulate(g)
    assert np.array_equal(tl.start_ns, g.rec_start_ns) and np.array_equal(tl.end_ns, g.rec_end_ns)


def test_the_waiting_thread_follows_the_other_threads_work():
    tb, c = _backward_table()
    g = build_graph(tb.table())
    b, v = _node(g, c["b"]), _node(g, c["v"])
    m = np.zeros(g.n, bool)
    m[b] = True
    tl = simulate(scale(g, m, 3.0))  # b lasts 45 instead of 15: v moves by 30
    assert tl.start_ns[v] == 130
    g2 = remove(g, m)  # the join passes to the call before b: a ends at 35
    assert simulate(g2).start_ns[_node(g2, c["v"])] == 35 + 45


def test_no_edges_without_an_engine_op():
    tb, _ = _backward_table(engine="aten::mm")
    assert _handovers(build_graph(tb.table())) == set()


def test_no_edges_when_the_waiting_thread_was_busy():
    tb, _ = _backward_table(main_op_at=30)
    assert _handovers(build_graph(tb.table())) == set()


def test_no_edges_when_the_waiting_thread_resumes_late():
    tb, _ = _backward_table(resume=55 + RESUME_TOLERANCE_NS + 1)
    assert _handovers(build_graph(tb.table())) == set()


def test_no_edges_when_the_other_thread_was_busy_at_the_release():
    tb, _ = _backward_table(u_prev_end=12)  # its previous call ends after p
    assert _handovers(build_graph(tb.table())) == set()
    tb, c = _backward_table(u_prev_end=8)
    assert _handovers(build_graph(tb.table())) == {(c["p"], c["a"]), (c["b"], c["v"])}


# ------------------------------------------------------------- emulated programs -----------
_BWD = ("ampere_sgemm_bwd", "elementwise_bwd")
_FWD = ("ampere_sgemm_fwd", "elementwise_fwd")


@st.composite
def handover_programs(draw, main_engine: bool = False):
    """A main thread and an autograd thread handing each backward pass over and back, per step;
    optionally a pipeline thread launching copies-like kernels on its own stream. ``main_engine``:
    the main thread runs an engine op of its own while it waits (the CPU-device work the thread
    that called backward() runs: an AccumulateGrad of a CPU tensor, as on the DLRM ranks)."""
    L = draw(st.integers(2_000, 15_000))
    G = draw(st.integers(0, min(L, 3_000)))
    gpu = st.integers(1_000, 200_000)
    call = st.integers(1_000, 20_000)
    host = st.integers(0, 50_000)
    main, ag = [], []
    for step in range(draw(st.integers(1, 3))):
        for _ in range(draw(st.integers(1, 4))):  # forward: ends with a call
            main += [HostWork(draw(host)), Launch(7, draw(st.sampled_from(_FWD)), draw(gpu), draw(call))]
        main.append(Handover(("bwd", step)))
        if main_engine:
            main += [HostWork(draw(st.integers(0, 2_000))), RangeBegin(ACCUMULATE, "cpu_op"), HostWork(draw(st.integers(0, 2_000))), RangeEnd()]
        main += [WaitHandover(("done", step)), HostWork(draw(host)),
                 RangeBegin("Optimizer.step#SGD.step", "user_annotation")]
        for _ in range(draw(st.integers(1, 3))):
            main += [HostWork(draw(host)), Launch(7, "multi_tensor_apply_kernel", draw(gpu), draw(call))]
        main.append(RangeEnd())
        if draw(st.booleans()):
            main += [HostWork(draw(host)), StreamSync(7, draw(st.integers(0, 20_000)))]
        ag.append(WaitHandover(("bwd", step)))
        for _ in range(draw(st.integers(1, 4))):
            ag += [HostWork(draw(host)), RangeBegin(ENGINE, "cpu_op"), HostWork(draw(host))]
            for _ in range(draw(st.integers(1, 3))):
                what = draw(st.sampled_from(["launch", "launch", "memset", "other"]))
                if what == "launch":
                    ag.append(Launch(draw(st.sampled_from([7, 20])), draw(st.sampled_from(_BWD)), draw(gpu), draw(call)))
                elif what == "memset":
                    ag.append(MemsetAsync(7, 64, draw(gpu), draw(call)))
                else:
                    ag.append(OtherCall("cudaGetDevice", draw(call)))
            ag.append(RangeEnd())
        ag.append(Handover(("done", step)))
    threads = [Thread(main, tid=4242), Thread(ag, tid=5001, name="autograd")]
    if draw(st.booleans()):
        pipe = []
        for _ in range(draw(st.integers(1, 8))):
            pipe += [HostWork(draw(st.integers(0, 200_000))), Launch(24, "pipeline_copy_kernel", draw(gpu), draw(call))]
        threads.append(Thread(pipe, tid=5002, name="pin_memory"))
    return Program(threads, launch_latency_ns=L, gpu_gap_ns=G)


def _graph_of(tmp, run):
    p = tmp / "t.json"
    to_kineto(run, str(p))
    return build_graph(load_trace(str(p)))


def _by_key(g, tl, run):
    """Predicted (start, end) of calls and tasks keyed by the baseline's (thread, op index)."""
    key = {c.correlation: (c.thread, c.op_index) for c in run.calls}
    out = ({}, {})
    for v in range(g.n):
        if g.row[v] >= 0:
            out[0 if g.is_cpu[v] else 1][key[int(g.correlation[v])]] = (int(tl.start_ns[v]), int(tl.end_ns[v]))
    return out


def _emulated(run):
    calls = {(c.thread, c.op_index): (c.start_ns, c.end_ns) for c in run.calls}
    tasks = {(run.calls[t.call].thread, run.calls[t.call].op_index): (t.start_ns, t.end_ns) for t in run.tasks}
    return calls, tasks


def _unambiguous(run) -> bool:
    """The pipeline thread (if any) is busy during every backward burst: it has a call that
    overlaps the autograd thread's calls of each step (otherwise it too looks like a waiter)."""
    if len(run.program.threads) < 3:
        return True
    pipe = [c for c in run.calls if c.thread == 2]
    ag = run.thread_calls(1)
    bursts, cur = [], []
    for op_i, op in enumerate(run.program.threads[1].ops):
        if isinstance(op, Handover):
            bursts.append(cur)
            cur = []
        cur += [c for c in ag if c.op_index == op_i]
    return all(any(c.start_ns < b[-1].end_ns and b[0].start_ns < c.end_ns for c in pipe) for b in bursts if b)


def _same_order(a, b) -> bool:
    """The calls of the threads are issued in the same global order (the graph's structure holds)."""
    return [(c.thread, c.op_index) for c in a.calls] == [(c.thread, c.op_index) for c in b.calls]


@pytest.mark.slow
@SETTINGS
@given(handover_programs())
def test_replay_reproduces_programs_with_a_handover(tmp_path_factory, prog):
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G) and _unambiguous(run))
    g = _graph_of(tmp_path_factory.mktemp("t"), run)
    steps = sum(isinstance(op, Handover) for op in prog.threads[1].ops)
    assert (g.edge_kind == EdgeKind.HANDOVER).sum() == 2 * steps
    assert _by_key(g, simulate(g), run) == _emulated(run)


@pytest.mark.slow
@SETTINGS
@given(handover_programs(), st.sampled_from(["bwd", "fwd", "all", "ag_calls"]), st.sampled_from([0.0, 0.25, 0.5, 2.0, 3.0]))
def test_predictions_follow_the_other_threads_work(tmp_path_factory, prog, what, factor):
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G) and _unambiguous(run))
    g = _graph_of(tmp_path_factory.mktemp("t"), run)

    changed, m = _changed(prog, g, what, factor)
    assume(_same_order(run, changed))
    assert _by_key(g, simulate(scale(g, m, factor)), run) == _emulated(changed)


def _changed(prog, g, what: str, factor: float):
    """(the emulator's run of ``prog`` with ``what`` x ``factor``: kernels whose name holds ``what``
    ("all": every kernel) or, "ag_calls", the autograd thread's calls; the mask of ``g``'s tasks the
    prediction scales for it)."""
    def change(op):
        if isinstance(op, Launch) and what != "ag_calls" and (what == "all" or what in op.kernel_name):
            return dataclasses.replace(op, kernel_dur_ns=int(np.rint(op.kernel_dur_ns * factor)))
        return op

    def change_ag(th):
        if what != "ag_calls" or th.tid != 5001:
            return th
        return dataclasses.replace(th, ops=tuple(dataclasses.replace(op, call_dur_ns=int(np.rint(op.call_dur_ns * factor)))
                                                 if hasattr(op, "call_dur_ns") else op for op in th.ops))

    changed_prog = prog.map_ops(change)
    changed = emulate(dataclasses.replace(changed_prog, threads=tuple(change_ag(t) for t in changed_prog.threads)))
    names = g.node_names()
    if what == "ag_calls":
        return changed, g.is_cpu & (g.tid == 5001)
    return changed, (g.node_kind == Kind.KERNEL) & np.array([what == "all" or what in s for s in names], bool)


@pytest.mark.slow
@SETTINGS
@given(handover_programs(), st.integers(0, 2**32))
def test_removing_an_autograd_launch_predicts_the_changed_program(tmp_path_factory, prog, seed):
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G) and _unambiguous(run))
    cands = [c for c in run.calls if c.thread == 1 and isinstance(c.op, Launch)]
    victim = cands[np.random.default_rng(seed).integers(len(cands))] if cands else None
    assume(victim is not None)
    ops = list(prog.threads[1].ops)
    drop = {victim.op_index}
    j = victim.op_index - 1
    while j >= 0 and isinstance(ops[j], (HostWork, RangeBegin, RangeEnd, WaitHandover)):
        if isinstance(ops[j], HostWork):
            drop.add(j)
        j -= 1
    th = dataclasses.replace(prog.threads[1], ops=tuple(op for i, op in enumerate(ops) if i not in drop))
    changed = emulate(dataclasses.replace(prog, threads=(prog.threads[0], th) + prog.threads[2:]))
    g = _graph_of(tmp_path_factory.mktemp("t"), run)
    m = g.correlation == victim.correlation
    g2 = remove(g, m)

    def new_key(k):
        t, i = k
        return k if t != 1 else (t, i - sum(1 for r in drop if r < i))

    keep_run = [new_key((c.thread, c.op_index)) for c in run.calls if c.correlation != victim.correlation]
    assume(keep_run == [(c.thread, c.op_index) for c in changed.calls])
    calls, tasks = _by_key(g2, simulate(g2), run)
    e_calls, e_tasks = _emulated(changed)
    assert {new_key(k): v for k, v in calls.items()} == e_calls
    assert {new_key(k): v for k, v in tasks.items()} == e_tasks


def _main_engine_ends_first(run) -> bool:
    """Each of the main thread's engine ops ends before the autograd thread's last call of that step
    (the rule's limit: the main thread goes on after the later of the two, not modelled)."""
    ends = [r.end_ns for r in run.ranges if r.thread == 0 and r.name == ACCUMULATE]
    last, cur = [], None
    for op_i, op in enumerate(run.program.threads[1].ops):
        if isinstance(op, Handover):
            last.append(cur)
        cur = next((c.end_ns for c in run.thread_calls(1) if c.op_index == op_i), cur)
    return len(ends) == len(last) and all(b is not None and e < b for e, b in zip(ends, last))


@pytest.mark.slow
@SETTINGS
@given(handover_programs(main_engine=True), st.sampled_from(["bwd", "ag_calls"]), st.sampled_from([0.25, 0.5, 2.0]))
def test_the_waiting_thread_may_run_engine_work_of_its_own(tmp_path_factory, prog, what, factor):
    """The main thread records an engine op (AccumulateGrad) while it waits: still a hand-over (the
    DLRM ranks' backward passes were pinned to their recorded start, so no what-if moved them), and
    the predictions follow the other thread's work."""
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G) and _unambiguous(run) and _main_engine_ends_first(run))
    g = _graph_of(tmp_path_factory.mktemp("t"), run)
    steps = sum(isinstance(op, Handover) for op in prog.threads[1].ops)
    assert (g.edge_kind == EdgeKind.HANDOVER).sum() == 2 * steps
    assert _by_key(g, simulate(g), run) == _emulated(run)

    changed, m = _changed(prog, g, what, factor)
    assume(_same_order(run, changed) and _main_engine_ends_first(changed))
    assert _by_key(g, simulate(scale(g, m, factor)), run) == _emulated(changed)
