"""The structure memo (daydream/graph/memo.py): a graph that shares its baseline's memo (a change of
durations only) predicts exactly what the same graph built fresh predicts, and the memoized
binding records equal the ones computed from scratch."""

from __future__ import annotations

import pytest
import dataclasses

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daydream.formats import load_trace
from daydream.graph import NODE_CPU, build_graph
from daydream.mapping import map_events
from daydream.graph.memo import memo
from daydream.report.make import build_prediction, build_report
from daydream.report.report_model import AppliedOpt
from daydream.simulate import recorded, simulate, with_bindings
from daydream.simulate.binding import bindings, bindings_reference
from daydream.simulate.replay import prepare
from daydream.testing.emulator import emulate, programs, to_kineto
from daydream.transform import scale, set_duration

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _graph(tmp, prog):
    p = tmp.mktemp("m") / "t.json"
    to_kineto(emulate(prog), str(p))
    t = load_trace(str(p))
    return build_graph(t, map_events(t))


def _fresh(g):
    """The same graph with no memo and no cached views."""
    return dataclasses.replace(g)


@pytest.mark.slow
@SETTINGS
@given(programs(), st.floats(0.0, 3.0), st.integers(0, 2**32))
def test_shared_memo_predicts_what_a_fresh_graph_predicts(tmp_path_factory, prog, f, seed):
    g = _graph(tmp_path_factory, prog)
    tl = simulate(g)
    rep = build_report(g, tl, recorded(g))  # fills the baseline's memo
    rng = np.random.default_rng(seed)
    g2 = scale(g, rng.random(g.n) < 0.5, f)
    g2 = set_duration(g2, (g2.node_kind != NODE_CPU) & (rng.random(g.n) < 0.2), int(rng.integers(0, 5000)))
    assert memo(g2) is memo(g)
    g3 = _fresh(g2)
    assert memo(g3) is not memo(g)
    t2, t3 = simulate(g2), simulate(g3)
    assert np.array_equal(t2.start_ns, t3.start_ns) and np.array_equal(t2.end_ns, t3.end_ns)
    p2 = build_prediction(rep, g2, t2, [AppliedOpt("x", {}, "", "")])
    p3 = build_prediction(rep, g3, t3, [AppliedOpt("x", {}, "", "")])
    assert repr(p2) == repr(p3)
    w = with_bindings(g2, t2)
    ref = bindings_reference(g3, t3.start_ns, t3.end_ns, t3.blocked_ns)
    assert all(np.array_equal(a, b) for a, b in zip((w.bound_start, w.bound_base, w.bound_end), ref))


@SETTINGS
@given(programs(), st.integers(0, 2**32))
def test_gaps_set_in_place_are_read_again(tmp_path_factory, prog, seed):
    """The coupled replay of a job sets CPU gaps in place between replays: the memo keeps no gap."""
    g = _graph(tmp_path_factory, prog)
    simulate(g)
    prepare(g, g.order)
    rng = np.random.default_rng(seed)
    cpu = np.flatnonzero(g.node_kind == NODE_CPU)
    g.gap_ns[cpu] = rng.integers(0, 10_000, len(cpu))
    a, b = simulate(g), simulate(_fresh(g))
    assert np.array_equal(a.start_ns, b.start_ns) and np.array_equal(a.end_ns, b.end_ns)
    assert all(np.array_equal(x, y) for x, y in zip(bindings(g, a.start_ns, a.end_ns, a.blocked_ns),
                                                    bindings_reference(g, a.start_ns, a.end_ns, a.blocked_ns)))


def _union_by_max_at(starts, ends, lo, hi):
    """The union length as computed before (a maximum.at per block), the reference."""
    s, e = np.clip(starts, lo, hi), np.clip(ends, lo, hi)
    keep = e > s
    s, e = s[keep], e[keep]
    if len(s) == 0:
        return 0
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    run_end = np.maximum.accumulate(e)
    nb = np.ones(len(s), bool)
    nb[1:] = s[1:] > run_end[:-1]
    bid = np.cumsum(nb) - 1
    b_end = np.zeros(bid[-1] + 1, np.int64)
    np.maximum.at(b_end, bid, e)
    return int((b_end - s[nb]).sum())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 200), st.integers(0, 80)), max_size=30), st.integers(0, 100), st.integers(0, 250))
def test_union_length_by_running_end(iv, lo, hi):
    from daydream.report.windows import _union_length

    s = np.array([a for a, _ in iv], np.int64)
    e = np.array([a + d for a, d in iv], np.int64)
    assert _union_length(s, e, lo, hi) == _union_by_max_at(s, e, lo, hi)


@given(st.lists(st.integers(0, 60), max_size=40))
def test_rows_distinct(rows):
    from daydream.report.summary import _distinct
    assert _distinct(np.asarray(rows, np.int64)) == (len(set(rows)) == len(rows))
