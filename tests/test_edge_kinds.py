"""A new edge kind is one rule (plus the stage that emits it): the replays, the order checks,
the critical path, ``remove`` and the timeline all honour it without further changes."""

from __future__ import annotations

import gzip

import numpy as np
import orjson
import pytest

from daydream.simulate.critical_path import critical_path
from daydream.graph import (
    NODE_CPU,
    EdgeKind,
    Offset,
    Phase,
    Rule,
    build_graph,
    register_kind,
    unregister_kind,
)
from daydream.simulate import simulate, simulate_events, with_bindings
from daydream.render.chrome_trace import write_timeline
from daydream.transform import add_edges, remove

from tablebuilder import TB

TOY = 40  #: a kind id no built-in uses


@pytest.fixture
def toy_kind():
    """A host-callback-like dependency: a GPU task starts 7 ns after a CPU call ends."""
    register_kind(TOY, Rule("toy host callback", Phase.START, True, Offset.ZERO, "sync", prefer=5))
    yield TOY
    unregister_kind(TOY)


def _two_stream_graph():
    b = TB()
    c1 = b.call("cudaLaunchKernel", 0, 10)
    b.gpu(c1, 20, 100, stream=7, name="k_a")
    b.call("cudaGetDevice", 2, 8, tid=2)
    b.call("busy_host_work", 10, 400, tid=2)  # a long CPU call on another thread, no GPU work
    c3 = b.call("cudaLaunchKernel", 400, 410)
    b.gpu(c3, 420, 500, stream=9, name="k_b")
    c4 = b.call("cudaLaunchKernel", 410, 415)
    b.gpu(c4, 425, 450, stream=7, name="k_c")
    return build_graph(b.table())


def _node(g, name):
    return int(np.flatnonzero(g.node_names() == name)[0])


def test_toy_edge_bounds_the_replay_and_both_replays_agree(toy_kind):
    g = _two_stream_graph()
    k_c, busy = _node(g, "k_c"), _node(g, "busy_host_work")
    base = simulate(g)
    # without the edge k_c starts L after its launch; make its call wait much longer
    g2 = add_edges(g, [busy], [k_c], toy_kind)
    g2 = _with_dur(g2, busy, 5000)
    tl = simulate(g2)
    assert tl.start_ns[k_c] == tl.end_ns[busy] + 0
    assert tl.start_ns[k_c] > base.start_ns[k_c]
    ev = simulate_events(g2)
    assert np.array_equal(ev.start_ns, tl.start_ns) and np.array_equal(ev.end_ns, tl.end_ns)
    assert g2.edge_counts()["toy host callback"] == {"inserted": 1}


def _with_dur(g, v, d):
    import dataclasses

    dur = g.dur_ns.copy()
    dur[v] = d
    return dataclasses.replace(g, dur_ns=dur)


def test_toy_edge_is_followed_by_the_critical_path(toy_kind):
    g = _two_stream_graph()
    k_c, busy = _node(g, "k_c"), _node(g, "busy_host_work")
    g2 = _with_dur(add_edges(g, [busy], [k_c], toy_kind), busy, 5000)
    tl = with_bindings(g2, simulate(g2))
    e = int(tl.bound_start[k_c])
    assert g2.edge_kind[e] == toy_kind and g2.edge_src[e] == busy
    path, cp = critical_path(g2, tl)
    assert k_c in path.tolist() and busy in path.tolist()
    assert cp.length_ns == int(tl.end_ns.max()) - g2.t0_ns


def test_toy_edge_survives_removal_of_its_source_through_the_lane(toy_kind):
    g = _two_stream_graph()
    k_c, busy = _node(g, "k_c"), _node(g, "busy_host_work")
    g2 = add_edges(g, [busy], [k_c], toy_kind)
    first_call = int(g2.lane_prev[busy])
    g3 = remove(g2, np.arange(g2.n) == busy)
    # the edge now comes from the call before the removed one on its thread
    src, dst = g3.edges_of(toy_kind)
    names = g3.node_names()
    assert [(names[s], names[d]) for s, d in zip(src.tolist(), dst.tolist())] == [(g2.name(first_call), "k_c")]
    simulate(g3)


def test_toy_edge_is_drawn_in_the_timeline(toy_kind, tmp_path):
    g = _two_stream_graph()
    k_c, busy = _node(g, "k_c"), _node(g, "busy_host_work")
    g2 = add_edges(g, [busy], [k_c], toy_kind)
    p = tmp_path / "t.json.gz"
    write_timeline(str(p), (g2, simulate(g2)))
    ev = orjson.loads(gzip.decompress(p.read_bytes()))["traceEvents"]
    flows = [e for e in ev if e.get("name") == "toy host callback"]
    assert [e["ph"] for e in flows] == ["s", "f"]
    assert flows[0]["args"] == {"origin": "inserted"}


def test_a_kind_without_a_rule_is_refused():
    g = _two_stream_graph()
    from daydream.errors import DaydreamError

    with pytest.raises(DaydreamError, match="no rule"):
        add_edges(g, [0], [1], 41)


def test_rules_cover_the_builtin_kinds():
    from daydream.graph import RULES

    assert set(EdgeKind) <= set(RULES)
    assert NODE_CPU == 0
