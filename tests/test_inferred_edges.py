"""Cross-stream waits whose event the trace does not name: edges inferred from timing
(daydream/graph/build/inferred.py; docs/model.md, "Inferred cross-stream waits").

Hand-built tables check each part of the rule; properties over the emulator's random programs,
written without the waits' event links, check that no inferred edge is false and that the
replay only gets closer to the emulator's timeline (exact once every wait that delayed its task
is inferred).
"""

from __future__ import annotations

import pytest
import dataclasses

import numpy as np
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from daydream.events.table import Kind, SyncKind
from daydream.formats import load_trace
from daydream.graph import EdgeKind, Origin, build_graph
from daydream.graph.build.inferred import AMBIGUOUS, INFERRED, LATE, SAME_STREAM, UNLINKED, tolerance_ns
from daydream.simulate import simulate
from daydream.testing.emulator import (
    EventRecord,
    HostWork,
    Launch,
    Program,
    StreamWaitEvent,
    Thread,
    emulate,
    measure_latencies,
    programs,
    to_kineto,
    training_step_program,
)
from daydream.transform import add_kernel_after, remove, scale, select
from tablebuilder import TB
from test_transform import _drop_launch, _gap_ops, _same_interleaving

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _inferred(g) -> set[tuple[int, int]]:
    m = (g.edge_kind == EdgeKind.XSTREAM) & (g.edge_origin == Origin.INFERRED)
    return set(zip(g.edge_src[m].tolist(), g.edge_dst[m].tolist()))


def _table(wait: bool = True, c_launch: int = 8000, c_start: int = 61000, rival: bool = False,
           wait_stream: int = -1, other_first: bool = False):
    """L = 5000, G = 1000. Kernel b (stream 7) ends at 60000; then, on the same thread, maybe a
    cudaStreamWaitEvent without its event, and a launch of c on stream 20 starting at ``c_start``.
    ``rival``: a kernel on stream 24 that also ends at 60000; ``wait_stream``: a sync record naming
    the waiting stream; ``other_first``: the thread launches d on stream 7 between wait and c."""
    b = TB()
    k = b.call("cudaLaunchKernel", 0, 1000)
    b.gpu(k, 5000, 50000, stream=7)
    k = b.call("cudaLaunchKernel", 2000, 3000)
    b.gpu(k, 51000, 60000, stream=7, name="b")
    if rival:
        k = b.call("cudaLaunchKernel", 3100, 3500)
        b.gpu(k, 8100, 60000, stream=24)
    b.call("cudaEventRecord", 4000, 5000)
    k = b.call("cudaStreamWaitEvent" if wait else "cudaGetDevice", 6000, 7000)
    if wait and wait_stream >= 0:
        b.sync(k, 6000, 7000, SyncKind.STREAM_WAIT_EVENT, stream=wait_stream)
    if other_first:
        k = b.call("cudaLaunchKernel", 7100, 7500)
        b.gpu(k, 61000, 62000, stream=7, name="d")
    k = b.call("cudaLaunchKernel", c_launch, c_launch + 1000)
    b.gpu(k, c_start, c_start + 9000, stream=20, name="c")
    g = build_graph(b.table())
    assert (g.launch_latency_ns, g.gpu_gap_ns) == (5000, 1000)
    return g


def _node(g, name: str) -> int:
    return int(np.nonzero(g.node_names() == name)[0][0])


def test_edge_inferred_when_tied_to_a_wait():
    g = _table()
    assert _inferred(g) == {(_node(g, "b"), _node(g, "c"))}
    assert g.counts.get(INFERRED) == 1 and UNLINKED not in g.counts
    assert g.edge_counts()["cross-stream wait"] == {"inferred": 1}
    assert simulate(g).start_ns[_node(g, "c")] == 61000


def test_no_edge_without_a_wait_call():
    g = _table(wait=False)
    assert not _inferred(g) and INFERRED not in g.counts


def test_no_edge_when_launch_explains_the_start():
    g = _table(c_launch=56000, c_start=61000)  # ready at 56000 + L = 61000
    assert not _inferred(g)
    assert g.counts.get(UNLINKED) == 1


def test_no_edge_outside_the_window():
    # a producer may end from G - tol up to G + L before the consumer's start (a wait's own
    # latency beyond G is at most L)
    assert not _inferred(_table(c_start=60000 + 1000 + 5000 + 1))
    assert not _inferred(_table(c_start=60000 + 1000 - tolerance_ns(1000) - 1, c_launch=2000))


def test_ambiguous_producers_give_no_edge_and_are_counted():
    g = _table(rival=True)
    assert not _inferred(g)
    assert g.counts.get(AMBIGUOUS) == 1 and g.counts.get(UNLINKED) == 1


def test_waiting_stream_from_a_sync_record_without_event():
    # the record names stream 20: the consumer is c, although the thread launches d (stream 7) first
    g = _table(wait_stream=20, other_first=True)
    assert _inferred(g) == {(_node(g, "b"), _node(g, "c"))}
    # without the record the thread's next launch (d, explained by its stream) is the consumer
    g = _table(other_first=True)
    assert not _inferred(g)


# ------------------------------------------------------------------ emulator properties --------


def _graphs(tmp_path, run, **kw):
    path = tmp_path / "emu.json"
    to_kineto(run, str(path), wait_event_links=False, **kw)
    return build_graph(load_trace(str(path)))


def _truth(run) -> set[tuple[int, int]]:
    """(producer, consumer) correlation ids of the emulator's cross-stream dependencies."""
    t = run.tasks
    return {(t[p].correlation, x.correlation) for x in t for p in x.preds
            if (t[p].device, t[p].stream) != (x.device, x.stream)}


def _binding(run, margin: int = 0) -> set[int]:
    """Correlation ids of the tasks a cross-stream wait delayed (beyond launch and stream order)
    by more than ``margin`` ns."""
    t, G = run.tasks, run.program.G
    out = set()
    for x in t:
        lane = [p for p in x.preds if (t[p].device, t[p].stream) == (x.device, x.stream)]
        other = max([x.ready_ns] + [t[p].end_ns + G for p in lane])
        if any(t[p].end_ns + G == x.start_ns > other + margin for p in x.preds if p not in lane):
            out.add(x.correlation)
    return out


def _corr_edges(g, edges) -> set[tuple[int, int]]:
    return {(int(g.correlation[s]), int(g.correlation[d])) for s, d in edges}


@pytest.mark.slow
@SETTINGS
@given(programs())
def test_no_inferred_edge_is_false(tmp_path_factory, prog):
    run = emulate(prog)
    for kw in ({}, {"event_records": False}):
        g = _graphs(tmp_path_factory.mktemp("e"), run, **kw)
        assume((g.launch_latency_ns, g.gpu_gap_ns) == (prog.L, prog.G))
        assert _corr_edges(g, _inferred(g)) <= _truth(run)


@pytest.mark.slow
@SETTINGS
@given(programs())
def test_inference_only_brings_the_replay_closer(tmp_path_factory, prog):
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graphs(tmp_path_factory.mktemp("e"), run)
    assume((g.launch_latency_ns, g.gpu_gap_ns) == (prog.L, prog.G))
    inf = (g.edge_kind == EdgeKind.XSTREAM) & (g.edge_origin == Origin.INFERRED)
    without = g.with_edges(g.edge_src[~inf], g.edge_dst[~inf], g.edge_kind[~inf], g.edge_origin[~inf])
    s_with, s_without = simulate(g).start_ns, simulate(without).start_ns
    truth = {c.correlation: c.start_ns for c in run.calls} | {t.correlation: t.start_ns for t in run.tasks}
    gpu = g.node_kind != 0
    want = np.array([truth[int(c)] for c in g.correlation[gpu]])
    assert (s_without[gpu] <= s_with[gpu]).all() and (s_with[gpu] <= want).all()
    if _binding(run) <= {int(g.correlation[d]) for _, d in _inferred(g)}:
        assert (s_with[gpu] == want).all()


def test_training_step_waits_are_all_inferred(tmp_path):
    run = emulate(training_step_program(n_layers=4, steps=3))
    g = _graphs(tmp_path, run)
    got = _corr_edges(g, _inferred(g))
    assert got and got <= _truth(run)
    assert _binding(run) <= {d for _, d in got}
    gpu = g.node_kind != 0
    want = {t.correlation: t.start_ns for t in run.tasks}
    assert all(int(s) == want[int(c)] for s, c in zip(simulate(g).start_ns[gpu], g.correlation[gpu]))
    assert g.table.count(Kind.SYNC) > 0


# ------------------------------------------------- a wait whose own latency exceeds G ---------
# (docs/model.md, "Inferred cross-stream waits": a consumer held more than L past its other
# constraints takes the only task that would bind it, even when it ended beyond G + tol before)


def test_the_only_task_ending_within_G_plus_L_is_the_producer():
    # c starts 66000; b ended 6 us before (G = 1 us, L = 5 us), the kernel before b 16 us before
    g = _table(c_start=66000)
    assert _inferred(g) == {(_node(g, "b"), _node(g, "c"))}
    assert g.counts.get(LATE) == 1 and g.counts.get(INFERRED) == 1
    assert simulate(g).start_ns[_node(g, "c")] == 61000  # G after b: d - G early
    g = _table(c_start=61000)
    assert LATE not in g.counts and g.counts.get(INFERRED) == 1


def test_two_tasks_within_the_window_give_no_edge():
    for c_start in (61000, 63000, 66000):
        g = _table(c_start=c_start, rival=True)
        assert not _inferred(g)
        assert g.counts.get(AMBIGUOUS) == 1 and LATE not in g.counts


def _binding_w(run) -> set[int]:
    """:func:`_binding` when a wait's own latency is ``W`` beyond ``G``."""
    t, G, W = run.tasks, run.program.G, run.program.wait_latency_ns
    out = set()
    for x in t:
        lane = [p for p in x.preds if (t[p].device, t[p].stream) == (x.device, x.stream)]
        other = max([x.ready_ns] + [t[p].end_ns + G for p in lane])
        if any(t[p].end_ns + G + W == x.start_ns > other for p in x.preds if p not in lane):
            out.add(x.correlation)
    return out


def _gpu_starts(g, tl, run_or_changed, key=None):
    """(predicted, emulated) GPU task starts, matched by (thread, op index) of the baseline."""
    calls = {c.correlation: (c.thread, c.op_index) for c in key.calls} if key is not None else None
    want = {(run_or_changed.calls[t.call].thread, run_or_changed.calls[t.call].op_index): t.start_ns
            for t in run_or_changed.tasks}
    gpu = np.flatnonzero(g.node_kind != 0)
    got = {calls[int(g.correlation[i])]: int(tl.start_ns[i]) for i in gpu}
    ks = sorted(got)
    return np.array([got[k] for k in ks]), np.array([want[k] for k in ks])


@st.composite
def _wait_programs(draw):
    """One thread: rounds of a producer kernel on stream 7, its event, maybe a kernel on stream 24
    (a rival end), a wait on stream 20 and a consumer there followed by a short queue; random
    durations, host work, L, G and the wait's own latency W in 0..L."""
    L = draw(st.integers(2_000, 15_000))
    G = draw(st.integers(0, min(L, 3_000)))
    W = draw(st.one_of(st.just(0), st.integers(0, L)))
    dur, host = st.integers(1_000, 200_000), st.integers(0, 50_000)
    ops = []
    for r in range(draw(st.integers(1, 4))):
        ops += [Launch(7, "ncclKernel_SendRecv", draw(st.one_of(dur, st.integers(100_000, 1_000_000))), draw(st.integers(1_000, 20_000))),
                EventRecord(("e", r), 7, 1_000)]
        if draw(st.booleans()):
            ops.append(Launch(24, "rival", draw(dur), 2_000))
        ops += [HostWork(draw(host)), StreamWaitEvent(20, ("e", r), 1_000), HostWork(draw(host))]
        for k in range(draw(st.integers(1, 4))):
            ops.append(Launch(20, f"consumer{k}", draw(dur), draw(st.integers(1_000, 20_000))))
        ops.append(HostWork(draw(host)))
    return Program([Thread(ops)], launch_latency_ns=L, gpu_gap_ns=G, wait_latency_ns=W)


_WAITING = st.one_of(programs(wait_latency=True), _wait_programs())


@pytest.mark.slow
@SETTINGS
@given(_WAITING)
def test_no_inferred_edge_is_false_when_waits_take_longer_than_G(tmp_path_factory, prog):
    run = emulate(prog)
    for kw in ({}, {"event_records": False}):
        g = _graphs(tmp_path_factory.mktemp("e"), run, **kw)
        assume((g.launch_latency_ns, g.gpu_gap_ns) == (prog.L, prog.G))
        assert _corr_edges(g, _inferred(g)) <= _truth(run)


@pytest.mark.slow
@SETTINGS
@given(_WAITING, st.sampled_from([0.0, 0.5, 2.0, 5.0]))
def test_predictions_with_inferred_waits_follow_the_emulator(tmp_path_factory, prog, factor):
    """Replay and the prediction after scaling every kernel never run later than the emulator
    (every edge is true, none is late), and, where every wait that holds a task in the run was
    inferred, no earlier than ``W`` per wait call: exact when ``W = 0``."""
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graphs(tmp_path_factory.mktemp("e"), run)
    assume((g.launch_latency_ns, g.gpu_gap_ns) == (prog.L, prog.G))
    inferred = {int(g.correlation[d]) for _, d in _inferred(g)}
    changed = emulate(prog.map_ops(
        lambda op: dataclasses.replace(op, kernel_dur_ns=int(np.rint(op.kernel_dur_ns * factor))) if isinstance(op, Launch) else op))
    assume(_same_interleaving(run, changed))
    n_waits = sum(isinstance(c.op, StreamWaitEvent) for c in run.calls)
    slack = prog.wait_latency_ns * n_waits
    for g2, r2, binding in ((g, run, _binding_w(run)), (scale(g, select(g, kind="kernel"), factor), changed, None)):
        got, want = _gpu_starts(g2, simulate(g2), r2, key=run)
        assert (got <= want).all()
        keys = {c.correlation: (c.thread, c.op_index) for c in run.calls}
        held = binding if binding is not None else {next(k for k, v in keys.items() if v == (r2.calls[t.call].thread, r2.calls[t.call].op_index))
                                                      for t in r2.tasks if t.correlation in _binding_w(r2)}
        event(f"W {'> 0' if prog.wait_latency_ns else '= 0'}, {'all' if held <= inferred else 'not all'} held tasks inferred"
              + (", some inferred" if inferred else ""))
        if held <= inferred:
            assert (got >= want - slack).all()
            if prog.wait_latency_ns == 0:
                assert (got == want).all()


def _starts_by_key(g, tl, keys, new_key):
    """Predicted GPU task starts keyed by the (thread, op index) of the changed program."""
    gpu = np.flatnonzero(g.node_kind != 0)
    return {new_key(keys[int(g.correlation[i])]): int(tl.start_ns[i]) for i in gpu if int(g.correlation[i]) in keys}


def _check_changed(got: dict, changed, slack: int, exact: bool) -> None:
    want = {(changed.calls[t.call].thread, changed.calls[t.call].op_index): t.start_ns for t in changed.tasks}
    assert all(k in want for k in got)
    for k, v in got.items():
        assert v <= want[k] and (not exact or v >= want[k] - slack), (k, v, want[k])


@SETTINGS
@given(_wait_programs(), st.integers(0, 2**32))
def test_removing_a_kernel_with_inferred_waits_follows_the_emulator(tmp_path_factory, prog, seed):
    """Removing one kernel and its launch: never later than the emulator's run of the changed
    program; when every cross-stream dependency was inferred, within ``W`` per wait (exact at 0)."""
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graphs(tmp_path_factory.mktemp("e"), run)
    assume((g.launch_latency_ns, g.gpu_gap_ns) == (prog.L, prog.G))
    cands = [c for c in run.calls if isinstance(c.op, Launch) and c.op_index > 0]
    assume(cands)
    victim = cands[np.random.default_rng(seed).integers(len(cands))]
    ops = list(prog.threads[0].ops)
    removed = {victim.op_index} | _gap_ops(ops, victim.op_index)
    changed = emulate(_drop_launch(prog, 0, victim.op_index))
    g2 = remove(g, g.correlation == victim.correlation)
    keys = {c.correlation: (c.thread, c.op_index) for c in run.calls if c.correlation != victim.correlation}

    def new_key(k):
        return (k[0], k[1] - sum(1 for r in removed if r < k[1]))

    got = _starts_by_key(g2, simulate(g2), keys, new_key)
    n_waits = sum(isinstance(c.op, StreamWaitEvent) for c in run.calls)
    exact = _corr_edges(g, _inferred(g)) == _truth(run)
    event(f"W {'> 0' if prog.wait_latency_ns else '= 0'}, {'all' if exact else 'not all'} waits inferred")
    _check_changed(got, changed, prog.wait_latency_ns * n_waits, exact)


@pytest.mark.slow
@SETTINGS
@given(_wait_programs(), st.integers(0, 2**32), st.integers(1_000, 100_000))
def test_adding_a_kernel_with_inferred_waits_follows_the_emulator(tmp_path_factory, prog, seed, kdur):
    """Adding a kernel after a random one (``add_kernel_after``, same stream): as for removal."""
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graphs(tmp_path_factory.mktemp("e"), run)
    assume((g.launch_latency_ns, g.gpu_gap_ns) == (prog.L, prog.G))
    launches = [c for c in run.calls if isinstance(c.op, Launch)]
    anchor = launches[np.random.default_rng(seed).integers(len(launches))]
    k = int(np.flatnonzero((g.correlation == anchor.correlation) & (g.node_kind != 0))[0])
    g2, new_k = add_kernel_after(g, k, dur_ns=kdur, name="added", call_dur_ns=3_000)
    th = prog.threads[0]
    ops = list(th.ops)
    ops.insert(anchor.op_index + 1, Launch(anchor.op.stream, "added", kdur, 3_000))
    changed = emulate(dataclasses.replace(prog, threads=(dataclasses.replace(th, ops=tuple(ops)),)))
    keys = {c.correlation: (c.thread, c.op_index) for c in run.calls}

    def new_key(key):
        return (key[0], key[1] + 1) if key[1] > anchor.op_index else key

    tl = simulate(g2)
    got = _starts_by_key(g2, tl, keys, new_key)
    got[(0, anchor.op_index + 1)] = int(tl.start_ns[new_k])
    n_waits = sum(isinstance(c.op, StreamWaitEvent) for c in run.calls)
    exact = _corr_edges(g, _inferred(g)) == _truth(run)
    event(f"W {'> 0' if prog.wait_latency_ns else '= 0'}, {'all' if exact else 'not all'} waits inferred")
    _check_changed(got, changed, prog.wait_latency_ns * n_waits, exact)


@st.composite
def _slack_wait_programs(draw):
    """:func:`_wait_programs` whose waits do not hold their consumer in the run (the producer ends
    long before the consumer is launched: no timing shows the dependency, so no edge is inferred)
    until the kernels are scaled up."""
    L = draw(st.integers(2_000, 15_000))
    G = draw(st.integers(0, min(L, 3_000)))
    ops = []
    for r in range(draw(st.integers(1, 3))):
        ops += [Launch(7, "ncclKernel_AllReduce", draw(st.integers(1_000, 20_000)), draw(st.integers(1_000, 5_000))),
                EventRecord(("e", r), 7, 1_000)]
        if draw(st.booleans()):
            ops.append(Launch(24, "rival", draw(st.integers(1_000, 20_000)), 2_000))
        ops += [StreamWaitEvent(20, ("e", r), 1_000), HostWork(draw(st.integers(100_000, 300_000)))]
        for k in range(draw(st.integers(1, 3))):
            ops.append(Launch(20, f"consumer{k}", draw(st.integers(1_000, 50_000)), draw(st.integers(1_000, 5_000))))
        ops.append(HostWork(draw(st.integers(0, 50_000))))
    return Program([Thread(ops)], launch_latency_ns=L, gpu_gap_ns=G)


@pytest.mark.slow
@SETTINGS
@given(st.one_of(_WAITING, _slack_wait_programs()), st.sampled_from([0.0, 0.5, 2.0, 5.0, 40.0]))
def test_the_latent_wait_bound_is_never_earlier_than_the_emulator(tmp_path_factory, prog, factor):
    """The bound a prediction reports (daydream.analysis.wait_bound): replayed with every
    dependency the waits without their event can have (graph.latent_waits, a superset), the
    baseline and the prediction after scaling every kernel never start a GPU task earlier than the
    emulator runs it, but for the waits' own latency ``W`` beyond ``G`` (the edges' offset is G)."""
    from daydream.transform import with_latent_waits
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graphs(tmp_path_factory.mktemp("e"), run)
    assume((g.launch_latency_ns, g.gpu_gap_ns) == (prog.L, prog.G))
    changed = emulate(prog.map_ops(
        lambda op: dataclasses.replace(op, kernel_dur_ns=int(np.rint(op.kernel_dur_ns * factor))) if isinstance(op, Launch) else op))
    assume(_same_interleaving(run, changed))
    slack = prog.wait_latency_ns * sum(isinstance(c.op, StreamWaitEvent) for c in run.calls)
    event("latent pairs" if g.latent_waits else "no latent pair")
    for g2, r2 in ((g, run), (scale(g, select(g, kind="kernel"), factor), changed)):
        g3, _ = with_latent_waits(g2)
        bound, want = _gpu_starts(g3, simulate(g3), r2, key=run)
        plain, _ = _gpu_starts(g2, simulate(g2), r2, key=run)
        assert (bound >= plain).all() and (bound >= want - slack).all()
        if (plain < want - slack).any():
            event("the plain prediction runs a task early; the bound does not")


# ------------------------------- same-stream candidates; whole-microsecond timestamps (issue 36) --
def test_candidates_on_one_stream_are_not_ambiguous():
    """a and b on stream 7 both end within the window before c: the stream is FIFO, so the later
    one (b) is the producer. Before, the two counted as ambiguous and c got no edge."""
    b = TB()
    k = b.call("cudaLaunchKernel", 0, 1000)
    b.gpu(k, 5000, 50000, stream=7)
    k = b.call("cudaLaunchKernel", 2000, 3000)
    b.gpu(k, 51000, 57000, stream=7, name="a")
    k = b.call("cudaLaunchKernel", 3100, 3500)
    b.gpu(k, 58000, 60000, stream=7, name="b")
    b.call("cudaEventRecord", 4000, 5000)
    b.call("cudaStreamWaitEvent", 6000, 7000)
    k = b.call("cudaLaunchKernel", 8000, 9000)
    b.gpu(k, 61000, 70000, stream=20, name="c")
    g = build_graph(b.table())
    assert (g.launch_latency_ns, g.gpu_gap_ns) == (5000, 1000)
    assert _inferred(g) == {(_node(g, "b"), _node(g, "c"))}
    assert AMBIGUOUS not in g.counts and g.counts.get(SAME_STREAM) == 1


def test_a_wait_recorded_at_its_producers_end_on_whole_microseconds():
    """Whole-us timestamps (G = 1 us): c recorded starting 0 us after b ended (the gap of up to
    1 us rounded away). Before, the lower bound G - G/2 = 0.5 us rejected it."""
    g = _table(c_start=60000)
    assert tolerance_ns(1000, whole_us=True) == 1000
    assert _inferred(g) == {(_node(g, "b"), _node(g, "c"))}


@st.composite
def _same_stream_programs(draw):
    """One thread: rounds of kernel a then a short kernel b on stream 7, an event after b, a wait
    on stream 20 and consumers there; W = 0, so a ends within G + L of the consumer's start
    whenever b is shorter than L - G."""
    L = draw(st.integers(3_000, 15_000))
    G = draw(st.integers(0, min(L, 3_000)))
    dur, host = st.integers(1_000, 200_000), st.integers(0, 50_000)
    ops = []
    for r in range(draw(st.integers(1, 4))):
        ops += [Launch(7, "a", draw(dur), draw(st.integers(1_000, 5_000))),
                Launch(7, "b", draw(st.integers(1_000, L)), draw(st.integers(1_000, 5_000))),
                EventRecord(("e", r), 7, 1_000), HostWork(draw(host)), StreamWaitEvent(20, ("e", r), 1_000), HostWork(draw(host))]
        for k in range(draw(st.integers(1, 3))):
            ops.append(Launch(20, f"consumer{k}", draw(dur), draw(st.integers(1_000, 20_000))))
        ops.append(HostWork(draw(host)))
    return Program([Thread(ops)], launch_latency_ns=L, gpu_gap_ns=G)


@pytest.mark.slow
@SETTINGS
@given(_same_stream_programs())
def test_same_stream_candidates_give_the_true_edge(tmp_path_factory, prog):
    """Every consumer a wait held gets its edge, none is false, and the replay is exact, although
    two tasks of the producer's stream often end within the window."""
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graphs(tmp_path_factory.mktemp("s"), run)
    assume((g.launch_latency_ns, g.gpu_gap_ns) == (prog.L, prog.G))
    got = _corr_edges(g, _inferred(g))
    event(f"same-stream candidates dropped: {bool(g.counts.get(SAME_STREAM))}")
    assert got <= _truth(run)
    # a wait that held its consumer by no more than the tolerance is not told from timing (found:
    # a consumer held 1 ns, tolerance 500 ns; the replay then starts it 1 ns early)
    assert _binding(run, tolerance_ns(prog.G)) <= {d for _, d in got}
    if _binding(run) <= {d for _, d in got}:
        got_s, want_s = _gpu_starts(g, simulate(g), run, key=run)
        assert (got_s == want_s).all()


@st.composite
def _rounded_wait_programs(draw):
    """_wait_programs without rival kernels and with W = 0, G often below 1 us."""
    L = draw(st.integers(3_000, 15_000))
    G = draw(st.one_of(st.integers(0, 1_000), st.integers(0, 3_000)))
    dur, host = st.integers(1_000, 200_000), st.integers(0, 50_000)
    ops = []
    for r in range(draw(st.integers(2, 5))):
        ops += [Launch(7, "ncclKernel_SendRecv", draw(dur), draw(st.integers(1_000, 20_000))), EventRecord(("e", r), 7, 1_000),
                HostWork(draw(host)), StreamWaitEvent(20, ("e", r), 1_000), HostWork(draw(host))]
        for k in range(draw(st.integers(1, 4))):
            ops.append(Launch(20, f"consumer{k}", draw(dur), draw(st.integers(1_000, 20_000))))
        ops.append(HostWork(draw(host)))
    return Program([Thread(ops)], launch_latency_ns=L, gpu_gap_ns=G)


def _held_with_slack(run, slack: int) -> set[int]:
    """Correlation ids of the tasks a wait delayed by more than ``slack`` ns beyond launch and stream order."""
    t, G = run.tasks, run.program.G
    out = set()
    for x in t:
        lane = [p for p in x.preds if (t[p].device, t[p].stream) == (x.device, x.stream)]
        other = max([x.ready_ns] + [t[p].end_ns + G for p in lane])
        if any(t[p].end_ns + G == x.start_ns > other + slack for p in x.preds if p not in lane):
            out.add(x.correlation)
    return out


@pytest.mark.slow
@SETTINGS
@given(_rounded_wait_programs())
def test_whole_microsecond_traces_keep_their_waits(tmp_path_factory, prog):
    """The trace written with every time rounded down to a whole us (gaps up to 1 us off): no
    inferred edge is false, and every consumer a wait held more than 3 us beyond its launch and
    stream order gets its edge."""
    run = emulate(prog)
    path = tmp_path_factory.mktemp("w") / "emu.json"
    to_kineto(run, str(path), wait_event_links=False, whole_us=True)
    g = build_graph(load_trace(str(path)))
    # L and G measured to within the rounding (a tiny program can take a held task for its one
    # idle sample of L: the limit docs/model.md states, not this one)
    assume(abs(g.launch_latency_ns - prog.L) <= 1000 and abs(g.gpu_gap_ns - prog.G) <= 1000)
    got = _corr_edges(g, _inferred(g))
    event(f"G < 1 us: {prog.G < 1000}")
    assert got <= _truth(run)
    assert _held_with_slack(run, 3_000) <= {d for _, d in got}
