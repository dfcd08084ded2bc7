"""Daydream's replay of the reference emulator's traces reproduces every task to the nanosecond.

The emulator (daydream/testing/emulator/) runs random programs under the rules of docs/model.md and
writes Kineto traces; daydream reads each trace back, rebuilds the graph (without knowing the
program) and simulates it. Every CPU call and every GPU task must start and end exactly when the
emulator says; the graph must be acyclic; every input event is in the table or counted.
"""

from __future__ import annotations

import pytest
import numpy as np
from hypothesis import HealthCheck, assume, given, settings

from daydream.testing.emulator import emulate, measure_latencies, programs, to_kineto, training_step_program
from daydream.events.table import Kind
from daydream.formats import load_trace
from daydream.graph import NODE_CPU, build_graph
from daydream.simulate import check_topological, simulate

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _replay(tmp_path, run, emit_sync_events=True):
    path = tmp_path / "emu.json"
    to_kineto(run, str(path), emit_sync_events=emit_sync_events)
    table = load_trace(str(path))
    assert table.accounting.balanced
    graph = build_graph(table)
    check_topological(graph, graph.order)
    return graph, simulate(graph)


def _assert_exact(run, graph, tl):
    # expected times by (kind, correlation): calls and GPU tasks
    exp_call = {c.correlation: (c.start_ns, c.end_ns) for c in run.calls}
    exp_task = {t.correlation: (t.start_ns, t.end_ns) for t in run.tasks}
    corr = graph.table.correlation[graph.row]
    cpu = graph.node_kind == NODE_CPU
    assert int(cpu.sum()) == len(run.calls)
    assert int((~cpu).sum()) == len(run.tasks)
    got_call = {int(c): (int(s), int(e)) for c, s, e in zip(corr[cpu], tl.start_ns[cpu], tl.end_ns[cpu])}
    got_task = {int(c): (int(s), int(e)) for c, s, e in zip(corr[~cpu], tl.start_ns[~cpu], tl.end_ns[~cpu])}
    assert got_call == exp_call
    assert got_task == exp_task


@pytest.mark.slow
@SETTINGS
@given(programs())
def test_replay_reproduces_emulator_exactly(tmp_path_factory, prog):
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    graph, tl = _replay(tmp_path_factory.mktemp("e"), run)
    assert (graph.launch_latency_ns, graph.gpu_gap_ns) == (prog.L, prog.G)
    _assert_exact(run, graph, tl)


@pytest.mark.slow
@SETTINGS
@given(programs(sync_events=False))
def test_replay_without_cuda_sync_events(tmp_path_factory, prog):
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    graph, tl = _replay(tmp_path_factory.mktemp("e"), run, emit_sync_events=False)
    _assert_exact(run, graph, tl)


def test_training_fixture_program_replays_exactly(tmp_path):
    prog = training_step_program(n_layers=4, steps=3)
    run = emulate(prog)
    graph, tl = _replay(tmp_path, run)
    _assert_exact(run, graph, tl)
    # the training step has every edge type
    assert graph.blocking.any()
    dep_dst = graph.edge_dst[graph.dependency_edges]
    assert (graph.node_kind[dep_dst] != NODE_CPU).any(), "cross-stream edge expected"
    assert graph.table.count(Kind.SYNC) > 0
