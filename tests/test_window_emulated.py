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
(d) measured L is never below the emulator's (a backlog only lengthens a sample), equals it
    when the samples of the kind the builder uses are clean, and where it is wrong the graph says
    so (L measured only on tasks first on their stream in the trace).
"""

from __future__ import annotations

import pytest
import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from daydream.formats import load_trace
from daydream.graph import NODE_CPU, build_graph
from daydream.graph.build.latency import L_DEFAULT, L_UNPROVEN
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


@pytest.mark.slow
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


@pytest.mark.slow
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


def _provably_exact(run, kept_calls, kept_tasks, G):
    """Indices of the kept calls ("c", i) and tasks ("t", i) whose replay must be exact: their
    binding constraints all lie inside the trace and come from nodes that are exact themselves.

    A thread's first kept call starts at its recorded time (its gap counts from t0); a later one
    needs its predecessor. A blocking call needs each waited-for task that is kept and ended after
    the call started (what the trace lacks only lowers the replay, never the call's end, as its
    own cost is measured from what the trace holds). A task needs the largest of its launch
    (kept call + L) and its kept stream predecessor (+ G) to equal its start, from exact nodes;
    cross-stream producers and missing predecessors may only have been lower."""
    prev_call, lane_prev, exact = {}, {}, set()
    for th in range(len(run.program.threads)):
        calls = [i for i, c in enumerate(run.calls) if c.thread == th]
        prev_call.update(zip(calls[1:], calls[:-1]))
    for lane in run.lane_tasks().values():
        lane_prev.update(zip(lane[1:], lane[:-1]))
    L = run.program.L
    events = sorted([(c.start_ns, 0, i) for i in kept_calls for c in [run.calls[i]]]
                    + [(t.start_ns, 1, i) for i in kept_tasks for t in [run.tasks[i]]])
    for _, is_task, i in events:  # every constraint of a node starts (or ends) before it starts
        if not is_task:
            c = run.calls[i]
            p = prev_call.get(i)
            ok = p not in kept_calls or ("c", p) in exact
            ok &= all(("t", w) in exact for w in c.waits_for if w in kept_tasks and run.tasks[w].end_ns > c.start_ns)
        else:
            t = run.tasks[i]
            cands = []
            if t.call in kept_calls:
                cands.append((run.calls[t.call].start_ns + L, ("c", t.call)))
            sp = lane_prev.get(i)
            if sp in kept_tasks:
                cands.append((run.tasks[sp].end_ns + G, ("t", sp)))
            ok = bool(cands) and max(v for v, _ in cands) == t.start_ns
            ok &= all(k in exact for v, k in cands if v == t.start_ns)
        if ok:
            exact.add(("t" if is_task else "c", i))
    return exact


@pytest.mark.slow
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
    index = {id(r): i for i, r in enumerate(run.calls)} | {id(r): i for i, r in enumerate(run.tasks)}
    cpu = g.node_kind == NODE_CPU
    kept_calls = {index[id(rec[i])] for i in np.nonzero(cpu)[0]}
    kept_tasks = {index[id(rec[i])] for i in np.nonzero(~cpu)[0]}
    exact = _provably_exact(run, kept_calls, kept_tasks, prog.G)
    for i, r in enumerate(rec):
        if ("c" if cpu[i] else "t", index[id(r)]) in exact:
            assert (tl.start_ns[i], tl.end_ns[i]) == (r.start_ns, r.end_ns), i


def _latency_samples(run, kept_calls, kept_tasks, first: bool | None = None):
    """(clean, contaminated) launch-latency samples a cut leaves, by the emulator's knowledge:
    kept tasks with a kept launch whose stream predecessor in the trace, if any, was launched
    in it (what the builder measures L on) and whose predecessors in the trace had ended by the
    launch; contaminated when a predecessor the trace lacks was still running then (a backlog
    the trace cannot show: the sample is start - launch > L). ``first``: only the first tasks
    of their stream in the trace (True), only the others (False), all (None)."""
    lane_prev = {b: a for lane in run.lane_tasks().values() for a, b in zip(lane, lane[1:])}
    clean = contaminated = 0
    for i in kept_tasks:
        t = run.tasks[i]
        s = run.calls[t.call].start_ns
        sp = lane_prev.get(i)
        while sp is not None and sp not in kept_tasks:  # the predecessor in the trace, if any
            sp = lane_prev.get(sp)
        if t.call not in kept_calls or (sp is not None and run.tasks[sp].call not in kept_calls):
            continue
        if first is not None and first != (sp is None):
            continue
        if any(run.tasks[p].end_ns > s for p in t.preds if p in kept_tasks):
            continue
        if any(run.tasks[p].end_ns > s for p in t.preds if p not in kept_tasks):
            contaminated += 1
        else:
            clean += 1
    return clean, contaminated


@pytest.mark.slow
@SETTINGS
@given(programs(graph_launches=True), st.floats(0.0, 1.0))
def test_backlog_never_lowers_the_measured_launch_latency(tmp_path_factory, prog, f_lo):
    """Every sample is >= L (a task never starts before launch + L), so a window's L is the
    default (no sample: said, docs/model.md "A GPU backlogged throughout the trace"; 0 with no
    launched GPU task) or >= the emulator's. The builder samples the first task of a stream in the trace
    (whose stream may hold a backlog the trace lacks) only when no task shows its stream idle by
    a predecessor in the trace: L equals the emulator's when the samples of the kind used are
    all clean."""
    run = emulate(prog)
    lo = _window_start(run, f_lo)
    g, _ = _cut(tmp_path_factory.mktemp("w"), run, lo)
    by_default = any(k.startswith(L_DEFAULT) for k in g.counts)
    assert g.launch_latency_ns == 0 or g.launch_latency_ns >= prog.L or by_default
    rec = _records(run, g)
    index = {id(r): i for i, r in enumerate(run.calls)} | {id(r): i for i, r in enumerate(run.tasks)}
    cpu = g.node_kind == NODE_CPU
    kept_calls = {index[id(rec[i])] for i in np.nonzero(cpu)[0]}
    kept_tasks = {index[id(rec[i])] for i in np.nonzero(~cpu)[0]}
    clean, contaminated = _latency_samples(run, kept_calls, kept_tasks, first=False)
    if not clean + contaminated:
        clean, contaminated = _latency_samples(run, kept_calls, kept_tasks, first=True)
    if clean and not contaminated:
        assert g.launch_latency_ns == prog.L
    # a wrong L is said (it rests on first-of-stream tasks only, or a wait's producer is missing)
    # wherever the trace shows a cut: it holds GPU tasks launched before it
    said = L_UNPROVEN in g.counts or "cross-stream wait with no producer or no consumer task in the trace" in g.counts
    cut_shows = bool(((g.node_kind != NODE_CPU) & (g.launch < 0)).any())
    assert g.launch_latency_ns in (0, prog.L) or by_default or said or not cut_shows, dict(g.counts)
