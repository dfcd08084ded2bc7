"""Compiled passes of the mapping and graph build (issue 18, pipeline throughput) against their
plain-numpy references: each must give exactly the same arrays (values and dtypes)."""

from __future__ import annotations

import pytest
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from daydream.graph.build.assemble import order_edges

METHODS = ("compiled", "python")


def _same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and np.array_equal(g, w)
        else:
            assert g == w


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 30), st.integers(-1, 30), st.booleans(), st.booleans()), max_size=30),
       st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=10),
       st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(0, 7), st.integers(0, 2)), max_size=10))
def test_order_edges_compiled_equals_numpy(nodes, queue, tail):
    """graph.assemble.order_edges: the compiled pass and the kernel in Python give the masked
    concatenation's edges, in its order, and the same count of lane and launch edges."""
    lane_prev = np.array([x[0] for x in nodes], np.int64)
    launch = np.array([x[1] for x in nodes], np.int64)
    is_gpu = np.array([x[2] for x in nodes], bool)
    staged = np.array([x[3] for x in nodes], bool)
    qs = np.array([x[0] for x in queue], np.int64)
    qd = np.array([x[1] for x in queue], np.int64)
    t = (np.array([x[0] for x in tail], np.int64), np.array([x[1] for x in tail], np.int64),
         np.array([x[2] for x in tail], np.uint8), np.array([x[3] for x in tail], np.uint8))
    want = order_edges(lane_prev, launch, is_gpu, staged, qs, qd, t, method="numpy")
    for m in METHODS:
        _same(order_edges(lane_prev, launch, is_gpu, staged, qs, qd, t, method=m), want)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 3), st.integers(0, 9), st.sampled_from([1, 2, 3, 4]), st.integers(-1, 2),
                          st.integers(0, 50), st.integers(0, 9), st.integers(-1, 5)), min_size=1, max_size=25),
       st.data(), st.integers(-1, 3))
def test_node_columns_compiled_equals_numpy(rows, data, only):
    """graph.assemble.node_columns: the compiled pass and the kernel in Python give node_arrays'
    nodes and the gathered columns (dtypes too), and the same count of early GPU tasks."""
    from types import SimpleNamespace

    from daydream.events.table import DTYPES
    from daydream.graph.build.assemble import node_columns

    n = len(rows)
    cols = dict(pid=[r[0] for r in rows], tid=[r[1] for r in rows], kind=[r[2] for r in rows], device=[r[3] for r in rows],
                start_ns=[r[4] for r in rows], end_ns=[r[4] + r[5] for r in rows], stream=[r[6] for r in rows],
                correlation=[r[6] * 3 for r in rows], name_id=[r[5] for r in rows], copy_kind=[r[5] % 4 - 1 for r in rows])
    table = SimpleNamespace(**{k: np.array(v, DTYPES[k]) for k, v in cols.items()})
    cpu_rows = np.array(sorted(data.draw(st.sets(st.integers(0, n - 1)))), np.int64)
    gpu_rows = np.array(sorted(data.draw(st.sets(st.integers(0, n - 1)))), np.int64)
    g_launch = np.array([data.draw(st.integers(-1, len(cpu_rows) - 1)) for _ in gpu_rows], np.int64)
    cpu = SimpleNamespace(cpu_rows=cpu_rows)
    c0: dict = {}
    want_nodes, want_cols = node_columns(table, cpu, gpu_rows, g_launch, only, c0, method="numpy")
    for m in METHODS:
        c1: dict = {}
        nodes, got_cols = node_columns(table, cpu, gpu_rows, g_launch, only, c1, method=m)
        assert c1 == c0 and nodes.n_cpu == want_nodes.n_cpu
        _same([getattr(nodes, f) for f in ("row", "node_kind", "launch", "pid", "tid", "device", "stream")],
              [getattr(want_nodes, f) for f in ("row", "node_kind", "launch", "pid", "tid", "device", "stream")])
        _same(got_cols[:6], want_cols[:6])
        assert want_cols[6] is None
        kind, launch, corr = want_nodes.node_kind, want_nodes.launch, want_cols[3]
        lc = corr[np.maximum(launch, 0)]
        lc[launch < 0] = -1
        _same(got_cols[6], ((kind != 0).astype(np.int64), np.where(kind == 0, want_nodes.tid, want_nodes.device),
                            np.where(kind != 0, want_nodes.stream, 0).astype(np.int64), lc))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-2, 3), st.integers(-1, 4), st.integers(-50, 50), st.booleans()), max_size=40),
       st.sampled_from([1024, 2, 1]))
def test_call_threads_compiled_equals_numpy(rows, cap):
    """events.threads.call_threads: the compiled passes and the kernel in Python give the numpy sorts'
    calls by thread, thread starts and running max of earlier ends (dtypes too), also when the
    threads outnumber the kernel's table (numpy takes over)."""
    from types import SimpleNamespace

    import daydream.events.threads as M

    table = SimpleNamespace(pid=np.array([r[0] for r in rows], np.int64), tid=np.array([r[1] for r in rows], np.int64),
                            end_ns=np.array([r[2] for r in rows], np.int64))
    rt_rows = np.array([i for i, r in enumerate(rows) if r[3]], np.int64)
    want = M.call_threads(table, rt_rows, method="numpy")
    was = M.CALL_THREADS_MAX_THREADS
    M.CALL_THREADS_MAX_THREADS = cap
    try:
        for m in METHODS:
            got = M.call_threads(table, rt_rows, method=m)
            _same([got.rt_rows, got.new_thread, got.prev_end], [want.rt_rows, want.new_thread, want.prev_end])
    finally:
        M.CALL_THREADS_MAX_THREADS = was


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.integers(1, 30), st.data())
def test_inherit_and_for_nodes_compiled_equal_numpy(n, data):
    """mapping._inherit (GPU rows take their launching row's phase, layer, op) and
    Mapping.for_nodes (the row maps at graph nodes): compiled and in Python as numpy does."""
    import daydream.mapping as M
    from daydream.mapping.maps import Mapping

    ints = st.integers(-1, 9)
    base = M._RowMaps(np.array(data.draw(st.lists(st.integers(0, 6), min_size=n, max_size=n)), np.uint8),
                      np.array(data.draw(st.lists(ints, min_size=n, max_size=n)), np.int32),
                      np.array(data.draw(st.lists(ints, min_size=n, max_size=n)), np.int32),
                      np.full(n, -1, np.int64),
                      np.array(data.draw(st.lists(st.integers(0, 6), min_size=n, max_size=n)), np.uint8),
                      np.array(data.draw(st.lists(ints, min_size=n, max_size=n)), np.int32))
    rows = list(range(n))
    half = data.draw(st.integers(0, n))
    gpu_rows = np.array(rows[half:], np.int64)  # launched by the rows before them
    lr = np.array([data.draw(st.integers(-1, half - 1)) for _ in gpu_rows], np.int64)
    fields = ("phase", "layer_id", "op_id", "launch_row", "gap_phase", "gap_layer_id")

    def copy():
        return M._RowMaps(*(getattr(base, f).copy() for f in fields))

    want = copy()
    w_missing = M._inherit(gpu_rows, lr, want, method="numpy")
    for m in METHODS:
        got = copy()
        assert M._inherit(gpu_rows, lr, got, method=m) == w_missing
        _same([getattr(got, f) for f in fields], [getattr(want, f) for f in fields])
    mp = Mapping(want.phase, want.layer_id, want.op_id, want.launch_row, ["a", "b"], gap_phase=want.gap_phase,
                   gap_layer_id=want.gap_layer_id)
    nodes = np.array(data.draw(st.lists(st.integers(0, n - 1), max_size=40)), np.int64)
    nf = ("phase", "layer_id", "op_id", "gap_phase", "gap_layer_id")
    ref = mp.for_nodes(nodes, method="numpy")
    for m in METHODS:
        got = mp.for_nodes(nodes, method=m)
        _same([getattr(got, f) for f in nf], [getattr(ref, f) for f in nf])
        assert got.labels == ref.labels


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), st.data())
def test_prepare_compiled_equals_reference_on_random_graphs(n, data):
    """simulate.replay._prepare_structure: the compiled passes and the kernel in Python give the
    whole-edge reference's replay inputs (dtypes too) on random edge lists of every built kind,
    END edges eager and deferred, any visiting order."""
    from types import SimpleNamespace

    from daydream.graph import rule_arrays
    from daydream.simulate.replay import _prepare_reference, _prepare_structure

    edges = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), st.integers(0, 7)), max_size=30))
    g = SimpleNamespace(
        n=n, edge_src=np.array([e[0] for e in edges], np.int64), edge_dst=np.array([e[1] for e in edges], np.int64),
        edge_kind=np.array([e[2] for e in edges], np.uint8),
        is_cpu=np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool),
        lane_prev=np.array(data.draw(st.lists(st.integers(-1, n - 1), min_size=n, max_size=n)), np.int64),
        launch=np.array(data.draw(st.lists(st.integers(-1, n - 1), min_size=n, max_size=n)), np.int64),
        t0_ns=5, launch_latency_ns=data.draw(st.integers(0, 3)), gpu_gap_ns=data.draw(st.integers(0, 3)), staging_latency_ns=2,
        staging_extra_ns=lambda: None)  # no size-dependent staging (TaskGraph.staging_extra_ns)
    order = np.array(data.draw(st.permutations(range(n))), np.int64)
    want = _prepare_reference(g, order, rule_arrays())
    for m in ("numpy",) + METHODS:
        got = _prepare_structure(g, order, rule_arrays(), method=m)
        for f in want._fields:
            x, y = getattr(got, f), getattr(want, f)
            assert (isinstance(x, np.ndarray) and x.dtype == y.dtype and np.array_equal(x, y)) if isinstance(y, np.ndarray) else x == y, (m, f)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(-20, 40), st.integers(0, 15), st.booleans()),
                min_size=1, max_size=40), st.booleans())
def test_gap_midpoints_compiled_equals_numpy(rows, by_start):
    """mapping.grouping._gap_midpoints in thread order: the compiled pass and the kernel in Python give the
    numpy midpoints, calls in start order or not."""
    from types import SimpleNamespace

    from daydream.events.threads import call_threads
    from daydream.mapping.grouping import _gap_midpoints

    if by_start:
        rows = sorted(rows, key=lambda r: r[2])
    table = SimpleNamespace(pid=np.array([r[0] for r in rows], np.int64), tid=np.array([r[1] for r in rows], np.int64),
                            start_ns=np.array([r[2] for r in rows], np.int64),
                            end_ns=np.array([r[2] + r[3] for r in rows], np.int64))
    rt_rows = np.array([i for i, r in enumerate(rows) if r[4]], np.int64)
    th = call_threads(table, rt_rows, method="numpy")
    want = _gap_midpoints(table, rt_rows, th, in_thread_order=True, method="numpy")
    for m in METHODS:
        _same([_gap_midpoints(table, rt_rows, th, in_thread_order=True, method=m)], [want])


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.booleans(), st.integers(-1, 4)), max_size=40), st.integers(-1, 4), st.data())
def test_queue_pairs_compiled_equals_numpy(nodes, depth, data):
    """graph.queue.queue_pairs: the compiled passes and the kernel in Python give the numpy
    passes' QUEUE pairs (entries of graph launches included) at any depth."""
    from daydream.graph.queue import queue_pairs

    n = len(nodes)
    lane = np.array([x[0] for x in nodes], np.int64)
    is_gpu = np.array([x[1] for x in nodes], bool)
    launch = np.array([x[2] % max(n, 1) if x[2] >= 0 else -1 for x in nodes], np.int64)
    perm = np.array(data.draw(st.permutations(range(n))), np.int64)
    by_lane = perm[np.argsort(lane[perm], kind="stable")] if n else np.zeros(0, np.int64)
    want = queue_pairs(by_lane, lane, is_gpu, launch, depth, method="numpy")
    for m in METHODS:
        _same(queue_pairs(by_lane, lane, is_gpu, launch, depth, method=m), want)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 9), max_size=40), st.booleans(), st.booleans())
def test_task_rows_compiled_equals_numpy(kinds, rt, gpu):
    """mapping.task_rows: the compiled passes and the kernel in Python give numpy's RUNTIME and
    GPU task rows (None where not asked for)."""
    from daydream.events.threads import task_rows

    kind = np.array(kinds, np.uint8)
    want = task_rows(kind, rt, gpu, method="numpy")
    for m in METHODS:
        got = task_rows(kind, rt, gpu, method=m)
        for g, w in zip(got, want):
            assert (g is None) == (w is None) and (w is None or (g.dtype == w.dtype and np.array_equal(g, w)))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.integers(0, 8), st.integers(0, 8), st.data())
def test_wait_index_compiled_equals_numpy(n_cpu, n_gpu, data):
    """graph.waits.WaitIndex: the compiled pass and the kernel in Python gather the numpy
    columns (GPU lanes, positions, launch ids; thread starts; launched lanes and their fill)."""
    from types import SimpleNamespace

    from daydream.graph.build.waits import WaitIndex

    n = n_cpu + n_gpu
    lane = np.array(data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), np.int64)
    cpu_lo = np.array(data.draw(st.permutations(range(n_cpu))), np.int64)
    cpu_lo = cpu_lo[np.argsort(lane[cpu_lo], kind="stable")]
    g_nodes = np.array(data.draw(st.permutations(range(n_cpu, n))), np.int64)
    launch = np.array([-1] * n_cpu + [data.draw(st.integers(-1, n_cpu - 1)) for _ in range(n_gpu)], np.int64)
    lanes = SimpleNamespace(split=lambda k: (cpu_lo, g_nodes), lane=lane, keys=np.zeros((5, 4), np.int64),
                            is_gpu=np.zeros(5, bool),
                            launch_corr=np.array(data.draw(st.lists(st.integers(-1, 9), min_size=n, max_size=n)), np.int64))
    nodes = SimpleNamespace(n_cpu=n_cpu, pid=np.zeros(n, np.int64), launch=launch)
    pos = np.array(data.draw(st.lists(st.integers(0, 99), min_size=n, max_size=n)), np.int64)
    rs, corr = pos + 1, pos + 2
    f = ("g_lane", "g_pos", "g_corr", "thread_start", "launched_lane", "last_launch_lane_before", "c_start", "c_corr", "c_pid")
    want = WaitIndex(nodes, lanes, pos, rs, corr, method="numpy")
    for m in METHODS:
        got = WaitIndex(nodes, lanes, pos, rs, corr, method=m)
        _same([getattr(got, x) for x in f], [getattr(want, x) for x in f])
