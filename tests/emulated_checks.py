"""Shared helpers of the tests that check daydream against the reference emulator: graphs of
emulated runs, times keyed by (thread, op index) so a changed program's run can be matched to
the baseline's, the changed programs the tests build (a launch removed), and random sequences of
transformation primitives. Used by test_transform, test_pageable_copies, test_launch_queue,
test_replay_compiled and others."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import assume

from daydream.formats import load_trace
from daydream.graph import NODE_CPU, build_graph
from daydream.simulate import simulate
from daydream.testing.emulator import HostWork, Launch, RangeBegin, RangeEnd, StreamWaitEvent, emulate, to_kineto
from daydream.transform import add_kernel_after, remove, scale


def cross_device_waits(run) -> int:
    """How many ``cudaStreamWaitEvent`` calls of ``run`` wait for an event recorded on another device."""
    return sum(1 for c in run.calls if isinstance(c.op, StreamWaitEvent) and c.bound_record is not None
               and run.calls[c.bound_record].op.device != c.op.device)


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


def _check_prediction(graph, pred_tl, base_run, changed_run, dropped_keys=frozenset()):
    keys = _baseline_keys(base_run)
    calls, tasks = _by_corr(graph, pred_tl)
    e_calls, e_tasks = _emulated_by_key(changed_run)
    got_calls = {keys[c]: v for c, v in calls.items()}
    got_tasks = {keys[c]: v for c, v in tasks.items()}
    assert got_calls == e_calls
    assert got_tasks == e_tasks


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


def _pick_launch(prog, run, seed):
    """A Launch call of ``run`` that is not its thread's first call, drawn by ``seed`` (the
    example is rejected with hypothesis' ``assume`` when there is none)."""
    first = {min((c.op_index for c in run.calls if c.thread == t), default=-1) for t in range(len(prog.threads))}
    cands = [c for c in run.calls if isinstance(c.op, Launch) and c.op_index not in first]
    assume(cands)
    return cands[np.random.default_rng(seed).integers(len(cands))]


def _removal_key(prog, victim):
    """(thread, op index) of the baseline -> the same op's key in ``_drop_launch(prog, victim...)``."""
    removed = {victim.op_index} | _gap_ops(list(prog.threads[victim.thread].ops), victim.op_index)

    def new_key(k):
        t, i = k
        return k if t != victim.thread else (t, i - sum(1 for r in removed if r < i))
    return new_key


@dataclasses.dataclass
class Removal:
    """One launch (and its kernel) removed: in the graph, predicted, and run by the emulator."""

    victim: object  #: the removed Launch call of the baseline run (a CallRecord)
    mask: np.ndarray  #: the nodes removed (the call and its kernel)
    graph: object  #: the baseline graph without them
    pred: object  #: its replay, the prediction
    changed: object  #: the emulator's run of the program without the launch (_drop_launch)
    new_key: object  #: baseline (thread, op index) -> the changed program's (_removal_key)


def _predict_removal(prog, run, seed, graph) -> Removal:
    """Remove a launch drawn by ``seed`` (:func:`_pick_launch`) from ``graph`` (the graph of
    ``run``), predict, and run the changed program in the emulator."""
    victim = _pick_launch(prog, run, seed)
    m = graph.table.correlation[graph.row] == victim.correlation
    g2 = remove(graph, m)
    return Removal(victim, m, g2, simulate(g2), emulate(_drop_launch(prog, victim.thread, victim.op_index)), _removal_key(prog, victim))


def _check_removal(g2, pred, run, changed, new_key):
    """The prediction ``pred`` (a replay of ``g2``, the baseline graph with a launch removed)
    equals the emulator's run ``changed`` of the program without it, call by call and task by task."""
    keys = _baseline_keys(run)
    calls, tasks = _by_corr(g2, pred)
    e_calls, e_tasks = _emulated_by_key(changed)
    assert {new_key(keys[c]): v for c, v in calls.items()} == e_calls
    assert {new_key(keys[c]): v for c, v in tasks.items()} == e_tasks


def _random_transform(g, what, seed):
    """``g`` after one random ``scale`` (30 % of the nodes, factor in [0, 2)), ``remove`` (20 %)
    or ``insert`` (a kernel after a random launched GPU task), drawn by ``seed``."""
    rng = np.random.default_rng(seed)
    if what == "scale":
        return scale(g, rng.random(g.n) < 0.3, float(rng.random() * 2))
    if what == "remove":
        return remove(g, rng.random(g.n) < 0.2)
    gpu = np.nonzero((g.node_kind != NODE_CPU) & (g.launch >= 0))[0]
    if len(gpu):
        k = int(gpu[rng.integers(len(gpu))])
        g, _ = add_kernel_after(g, k, dur_ns=int(rng.integers(1, 10_000)), name="new", call_dur_ns=1000)
    return g


def emulated_curves(run) -> dict[int, tuple[list[int], list[int]]]:
    """Per device, the emulator's allocator curve: (event times, ``Total Allocated`` after each), in
    the allocator's order (what the memory replay's curve is judged against)."""
    out: dict[int, tuple[list[int], list[int]]] = {}
    for a in run.allocs:
        ts, lv = out.setdefault(a.device, ([], []))
        ts.append(a.ts_ns)
        lv.append(a.total_allocated)
    return out
