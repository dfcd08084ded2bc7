"""Shortcuts of the prediction path (issue 18: a second prediction, ``--opt all``) against the
straightforward computation they replace: each must give exactly the same answer."""

from __future__ import annotations

import pytest
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from daydream.errors import DaydreamError
from daydream.graph import kahn_order, topological_order, visit_constraints
from daydream.graph.edges import RULES
from daydream.graph.order import kahn
from daydream.graph import is_valid_order

KINDS = sorted(RULES)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 14), st.lists(st.tuples(st.integers(0, 13), st.integers(0, 13)), max_size=40),
       st.lists(st.integers(-3, 3), min_size=14, max_size=14), st.booleans())
def test_kahn_kernel_equals_kahn_order(n, pairs, keys, forward):
    """The compiled heap (and the kernel run as Python) pops what heapq pops; None on a cycle alike."""
    a = np.array([x % max(n, 1) for x, _ in pairs if n], dtype=np.int64)
    b = np.array([y % max(n, 1) for _, y in pairs if n], dtype=np.int64)
    if forward:  # acyclic: pointing forward in node order (self-loops dropped)
        a, b = np.minimum(a, b), np.maximum(a, b)
        keep = a != b
        a, b = a[keep], b[keep]
    key = np.array(keys[:n], dtype=np.int64)
    want = kahn_order(n, a, b, key.tolist())
    for method in ("compiled", "python", "numpy"):
        got = kahn(n, a, b, key, method)
        assert (got is None) == (want is None), method
        if want is not None:
            assert got.dtype == np.int64 and np.array_equal(got, want), method


def _graph_like(n, edges, pos):
    """A minimal object with what the order functions read (no lane mixing: every node a CPU task)."""
    import types

    src = np.array([e[0] % n for e in edges], np.int64)
    dst = np.array([e[1] % n for e in edges], np.int64)
    kind = np.array([e[2] for e in edges], np.uint8)
    return types.SimpleNamespace(n=n, edge_src=src, edge_dst=dst, edge_kind=kind, position_ns=np.asarray(pos, np.int64),
                                 lane_prev=np.full(n, -1, np.int64), is_cpu=np.ones(n, bool))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11), st.sampled_from(KINDS)), max_size=30),
       st.lists(st.integers(0, 4), min_size=12, max_size=12), st.booleans(), st.integers(0, 2**32))
def test_topological_order_and_validity_equal_the_graph_functions(n, edges, pos, forward, seed):
    """topological_order (sorted shortcut, compiled Kahn) is Kahn's order by position (method
    "numpy", the reference), error included; is_valid_order (one pass over the edges) is the check
    of every materialized constraint pair (method "pairs"), on drawn and sorted orders."""
    if forward:
        edges = [(min(a % n, b % n), max(a % n, b % n), k) for a, b, k in edges]
    g = _graph_like(n, edges, pos[:n])
    try:
        want = topological_order(g, "numpy")
    except DaydreamError:
        want = None
    for method in ("auto", "compiled", "python"):
        if want is None:
            try:
                topological_order(g, method)
            except DaydreamError:
                continue
            raise AssertionError("no error on a cycle")
        assert np.array_equal(topological_order(g, method), want), method
    rng = np.random.default_rng(seed)
    for order in (np.arange(n), rng.permutation(n), np.argsort(g.position_ns, kind="stable"), *([want] if want is not None else [])):
        assert is_valid_order(g, order) == is_valid_order(g, order, "pairs")


# ------------------------------------------------------- batched primitives (the dataloader) ---
_FIELDS = ("row", "node_kind", "lane", "name_id", "pid", "tid", "device", "stream", "correlation", "copy_kind", "dur_ns", "gap_ns",
           "rec_start_ns", "rec_end_ns", "position_ns", "edge_src", "edge_dst", "edge_kind", "edge_origin", "order", "lane_is_gpu",
           "lane_keys")


def _same_graph(a, b):
    for f in _FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and np.array_equal(x, y), f
    assert a.names == b.names and a.lanes == b.lanes


def _real_graph():
    from pathlib import Path

    from daydream.formats import load_trace
    from daydream.graph import build_graph
    from daydream.mapping import map_events

    p = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "hta" / "alexnet_benchmark_result_2869224_1695835535_trace.json.gz"
    if not p.exists():
        p = Path(__file__).resolve().parents[1] / "fixtures" / "train_step.json.gz"
    t = load_trace(str(p))
    return build_graph(t, map_events(t))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=0, max_size=4), st.integers(0, 2**32))
def test_add_threads_equals_add_thread_one_by_one(sizes, seed):
    """Several threads at once: the node ids, nodes, edges, lanes and order one add_thread a thread makes."""
    from daydream.transform import add_thread, add_threads

    g = _graph_cache()
    rng = np.random.default_rng(seed)
    cpu = np.flatnonzero(g.is_cpu)
    specs = [dict(pid=7, tid=(1 << 30) + i, like=int(rng.choice(cpu)), dur_ns=rng.integers(0, 100, k), gap_ns=rng.integers(0, 100, k),
                  names=[f"w{i} {j}" for j in range(k)]) for i, k in enumerate(sizes)]
    want, want_nodes = g, []
    for sp in specs:
        want, new = add_thread(want, **sp)
        want_nodes.append(new)
    got, nodes = add_threads(g, specs)
    _same_graph(got, want)
    assert all(np.array_equal(a, b) for a, b in zip(nodes, want_nodes)) and len(nodes) == len(want_nodes)
    assert got.order_valid


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 6), st.integers(0, 6))
def test_add_edges_of_several_kinds_equals_one_call_per_kind(seed, k1, k2):
    """Edge sets of two kinds in one add_edges: the edges and the (repaired) order of two calls."""
    from daydream.graph import EdgeKind
    from daydream.transform import add_edges, add_threads

    g = _graph_cache()
    rng = np.random.default_rng(seed)
    cpu = np.flatnonzero(g.is_cpu)
    # a new thread, whose tasks then wait for / hand over to existing calls (the dataloader's pattern: out of order)
    g, (new,) = add_threads(g, [dict(pid=7, tid=1 << 30, like=int(cpu[0]), dur_ns=np.zeros(6, np.int64), gap_ns=np.full(6, 10, np.int64),
                                     names=[f"w {j}" for j in range(6)])])
    a_src, a_dst = rng.choice(new, k1), rng.choice(cpu, k1)
    b_src, b_dst = rng.choice(cpu, k2), rng.choice(new, k2)
    try:
        want = add_edges(add_edges(g, a_src, a_dst, 48 if _has_48() else EdgeKind.WAIT), b_src, b_dst, EdgeKind.HANDOVER)
    except DaydreamError:
        want = None
    kinds = np.concatenate([np.full(k1, 48 if _has_48() else EdgeKind.WAIT, np.int64), np.full(k2, EdgeKind.HANDOVER, np.int64)])
    try:
        got = add_edges(g, np.concatenate([a_src, b_src]), np.concatenate([a_dst, b_dst]), kinds)
    except DaydreamError:
        got = None
    assert (got is None) == (want is None)
    if want is not None:
        _same_graph(got, want)


def _has_48():
    import daydream.optimizations.dataloader  # noqa: F401  (registers the batch-ready kind)
    from daydream.graph import rule_arrays

    return bool(rule_arrays().known[48])


_G = []


def _graph_cache():
    if not _G:
        _G.append(_real_graph())
    return _G[0]


def _nodes_in_ranges_reference(graph, ranges, same_thread):
    """daydream.optimizations.common.cpu_nodes_in_ranges as it was: one pass over the calls per range."""
    pid, tid, s, e = ranges
    out = np.full(graph.n, -1, dtype=np.int64)
    cpu = (graph.node_kind == 0) & (graph.row >= 0)
    idx = np.nonzero(cpu)[0]
    for i in range(len(s)):
        m = (graph.pid[cpu] == pid[i]) & (graph.rec_start_ns[cpu] >= s[i]) & (graph.rec_end_ns[cpu] <= e[i])
        if same_thread:
            m &= graph.tid[cpu] == tid[i]
        out[idx[m]] = i
    return out


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 12), st.booleans(), st.booleans())
def test_cpu_nodes_in_ranges_equals_one_pass_per_range(seed, k, same_thread, odd):
    """Slices of the sorted calls: the enclosing range (the last one, when ranges overlap) a pass per range finds."""
    import dataclasses

    from daydream.graph import NODE_CPU
    from daydream.optimizations.common import cpu_nodes_in_ranges

    g = _graph_cache()
    assert NODE_CPU == 0
    rng = np.random.default_rng(seed)
    if odd:  # some calls recorded ending before they start
        rs, re_ = g.rec_start_ns.copy(), g.rec_end_ns.copy()
        bad = rng.random(g.n) < 0.05
        re_[bad] = rs[bad] - rng.integers(0, 10_000, int(bad.sum()))
        g = dataclasses.replace(g, rec_start_ns=rs, rec_end_ns=re_)
    cpu = np.flatnonzero(g.is_cpu)
    lo, hi = int(g.rec_start_ns[cpu].min()), int(g.rec_end_ns[cpu].max())
    pick = rng.choice(cpu, k)
    s = np.sort(rng.integers(lo - 1000, hi, k))
    e = s + rng.integers(0, (hi - lo) // 3 + 1, k)  # overlapping ranges too
    pids = np.where(rng.random(k) < 0.8, g.pid[pick], 12345)
    tids = np.where(rng.random(k) < 0.8, g.tid[pick], 12345)
    ranges = (pids.astype(np.int64), tids.astype(np.int64), s.astype(np.int64), e.astype(np.int64))
    assert np.array_equal(cpu_nodes_in_ranges(g, ranges, same_thread=same_thread), _nodes_in_ranges_reference(g, ranges, same_thread))


@pytest.mark.slow
def test_step_members_by_pass_and_by_sort_agree(monkeypatch):
    """Few steps (a pass per step) or many (one sort, a slice per step): the same members, kinds and devices."""
    import daydream.report.windows as rp
    from daydream.formats import load_trace
    from daydream.graph import build_graph, profiler_steps
    from daydream.mapping import map_events
    from pathlib import Path

    traces = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
    for rel in ("hta/df_index_resolver.json.gz", "tracelens/b200_eager_trace.json.gz", "hta/nccl_data.json.gz", "nsys_ai/mfu_2gpu_before.sqlite"):
        if not (traces / rel).exists():
            continue
        t = load_trace(str(traces / rel))
        got = []
        for few in (0, 10**9):
            monkeypatch.setattr(rp, "FEW_STEPS", few)
            got.append(rp._step_members(build_graph(t, map_events(t))))
        a, b = got
        assert len(a) == len(b) == len(profiler_steps(t))
        for x, y in zip(a, b):
            assert x[:5] == y[:5] and np.array_equal(x.idx, y.idx)  # the ids are the members (the per-step mask is gone)
            assert all(np.array_equal(p, q) for p, q in zip(x.kinds, y.kinds))
            assert len(x.devices) == len(y.devices) and all(np.array_equal(p, q) for p, q in zip(x.devices, y.devices))


def test_cpu_nodes_in_ranges_with_spans_too_wide_for_one_key():
    """Times so far apart that the shifted starts would not fit an int64: the ranks' key (the
    fallback branch) gives what a pass per range gives."""
    import dataclasses

    from daydream.optimizations.common import cpu_nodes_in_ranges

    g = _graph_cache()
    cpu = np.flatnonzero(g.is_cpu & (g.row >= 0))
    rs, re_ = g.rec_start_ns.copy(), g.rec_end_ns.copy()
    lo_c, hi_c = cpu[0], cpu[-1]
    rs[lo_c], re_[lo_c] = -(5 << 60), -(5 << 60) + 10  # about -5.8e18 and +5.8e18 ns: spans over 2**62
    rs[hi_c], re_[hi_c] = 5 << 60, (5 << 60) + 10
    g = dataclasses.replace(g, rec_start_ns=rs, rec_end_ns=re_)
    s = np.array([-(6 << 60), int(np.median(rs[cpu])), 4 << 60], np.int64)
    e = np.array([-(4 << 60), int(np.median(rs[cpu])) + 10**9, 6 << 60], np.int64)
    ranges = (g.pid[[lo_c, cpu[len(cpu) // 2], hi_c]].astype(np.int64), g.tid[[lo_c, cpu[len(cpu) // 2], hi_c]].astype(np.int64), s, e)
    for same in (True, False):
        got = cpu_nodes_in_ranges(g, ranges, same_thread=same)
        assert np.array_equal(got, _nodes_in_ranges_reference(g, ranges, same))
        assert got[lo_c] == 0 and got[hi_c] == 2
