"""Shortcuts of the graph builder (issue 18) against the straightforward computation they replace:
each must give exactly the same answer."""

from __future__ import annotations

import pytest
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daydream.graph.edges import RULES
from daydream.testing.emulator import emulate, programs, to_kineto
from daydream.graph.order import _keeps_constraints, visit_constraints

KINDS = sorted(RULES)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11), st.sampled_from(KINDS)), max_size=30),
       st.integers(0, 2**32))
def test_keeps_constraints_equals_the_built_pairs(n, edges, seed):
    """The order check without materialized pairs says what checking every visit-constraint pair says."""
    a0 = np.array([a % n for a, _, _ in edges], dtype=np.int64)
    b0 = np.array([b % n for _, b, _ in edges], dtype=np.int64)
    kind = np.array([k for _, _, k in edges], dtype=np.uint8)
    rng = np.random.default_rng(seed)
    # as drawn, and pointing forward in node order (mostly valid orders: the END-edge readers decide)
    for src, dst in ((a0, b0), (np.minimum(a0, b0), np.maximum(a0, b0))):
        for order in (np.arange(n), rng.permutation(n)):
            rank = np.empty(n, np.int64)
            rank[order] = np.arange(n)
            a, b, _ = visit_constraints(n, src, dst, kind)
            want = not np.any(rank[a] >= rank[b])
            assert _keeps_constraints(n, rank, src, dst, kind) == want
            for method in ("numpy", "python", "compiled"):  # the array passes and the kernel agree
                assert _keeps_constraints(n, rank, src, dst, kind, method=method) == want, method
            fw = int(rng.integers(0, len(src) + 1))  # some first edges taken as forward: the methods still agree
            got = {m: _keeps_constraints(n, rank, src, dst, kind, fw, method=m) for m in ("numpy", "python", "compiled")}
            assert len(set(got.values())) == 1, got


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.integers(1, 4), st.sampled_from([3, 1000, 2**40, 2**62]), st.integers(0, 2**32))
def test_unique_columns_equals_numpy_unique_rows(n, k, span, seed):
    """Packed (few bits or ranked) or not: the rows, their order and the inverse are numpy's."""
    from daydream.graph._arrays import unique_columns, unique_rows

    rng = np.random.default_rng(seed)
    keys = rng.integers(-span, span, (n, k), dtype=np.int64)
    keys[n // 2:] = keys[: n - n // 2]  # repeats
    want_u, want_inv = np.unique(keys, axis=0, return_inverse=True)
    for u, inv in (unique_columns([keys[:, c].copy() for c in range(k)]), unique_rows(keys),
                   unique_columns([keys[:, c].copy() for c in range(k)], few=True)):
        assert np.array_equal(u, want_u.reshape(-1, k)) and np.array_equal(inv, want_inv.reshape(-1))


def _bench_and_real_tables():
    from pathlib import Path

    from daydream.formats import load_trace

    traces = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
    rels = ["nsys_ai/mfu_2gpu_before.sqlite", "extrap/profile1.sqlite", "hta/nccl_data.json.gz",
            "hta/mi250_minitoy_train_ROCm6_2_kineto.json.gz", "hta/sampled_rank-0.json.gz"]
    return [load_trace(str(traces / r)) for r in rels if (traces / r).exists()]


def test_seeded_lane_prev_and_launch_equal_the_edges():
    """build_graph hands its lane predecessors and launches to the graph; they equal what the
    graph derives from its edges (thread/stream and launch/staged kinds)."""
    from daydream.graph import build_graph
    from daydream.graph.edges import rule_arrays

    tables = _bench_and_real_tables()
    assert tables
    for tb in tables:
        g = build_graph(tb)
        assert "lane_prev" in g.__dict__
        assert np.array_equal(g.lane_prev, g._single(rule_arrays().lane))
        assert np.array_equal(g.launch, g._single(rule_arrays().launch))


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_seeded_views_equal_the_edges_on_emulated_traces(tmp_path_factory, program):
    from daydream.formats import load_trace
    from daydream.graph import build_graph
    from daydream.graph.edges import rule_arrays

    path = tmp_path_factory.mktemp("emu") / "t.json"
    to_kineto(emulate(program), str(path))
    g = build_graph(load_trace(str(path)))
    assert np.array_equal(g.lane_prev, g._single(rule_arrays().lane))
    assert np.array_equal(g.launch, g._single(rule_arrays().launch))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.integers(0, 30), st.integers(0, 30), st.sampled_from([2, 50, 10**6, 2**41]), st.booleans(), st.booleans(), st.integers(0, 2**32))
def test_dense_launch_link_equals_the_sorted_one(n_rt, n_gpu, corr_span, one_pid, shared_ids, seed):
    """links.launch_rows by its direct id table (when it takes it) and by its hash join (compiled
    and not) gives the sorted path's links and duplicate flags: shared ids, negative ids and pids,
    GPU rows of other processes, ids past 40 bits, calls in any order, ties in start."""
    from daydream.events.table import EventTable, Kind
    from daydream.events.links import launch_rows

    rng = np.random.default_rng(seed)
    n = n_rt + n_gpu
    cols = {}
    cols["kind"] = np.array([Kind.RUNTIME] * n_rt + [Kind.KERNEL] * n_gpu, np.int8)
    cols["start_ns"] = rng.integers(0, 5, n).astype(np.int64)
    cols["end_ns"] = cols["start_ns"] + 1
    ids = np.arange(n_rt) if not shared_ids else rng.integers(0, max(n_rt // 2, 1), n_rt)
    corr = np.concatenate([ids * max(corr_span // max(n_rt, 1), 1), rng.integers(-1, max(corr_span, 2), n_gpu)])
    corr[rng.random(n) < 0.1] = -1
    cols["correlation"] = corr.astype(np.int64)
    pid = np.full(n, 7, np.int64) if one_pid else rng.integers(-1, 3, n)
    pid[n_rt:][rng.random(n_gpu) < 0.2] = rng.choice([-1, 8, 7 + (1 << 24)])
    cols["pid"] = pid
    table = EventTable.from_columns(cols, ["k"], sort=False)
    rt = np.flatnonzero(cols["kind"] == Kind.RUNTIME)
    g = np.flatnonzero(cols["kind"] == Kind.KERNEL)
    for rows in (rt, rng.permutation(rt)):
        want, want_dup = launch_rows(table, rows, g, dense=False)
        for method in ("auto", "hash", "hash-py"):
            got, got_dup = launch_rows(table, rows, g, method=method)
            assert np.array_equal(got, want) and np.array_equal(got_dup, want_dup), method


def _same_graph(a, b) -> None:
    for f in ("row", "lane", "order", "edge_src", "edge_dst", "edge_kind", "edge_origin", "dur_ns", "gap_ns", "position_ns"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    for f in ("pid", "tid", "start_ns", "end_ns", "name_id"):
        x, y = getattr(a.cpu_ranges, f), getattr(b.cpu_ranges, f)
        assert np.array_equal(x, y) and x.dtype == y.dtype, f
    assert dict(a.counts) == dict(b.counts)


def test_graph_reuses_the_mappings_launch_link():
    """build_graph with the table's mapping (which hands on its launch link when no ids are
    shared, its calls by thread and its context columns) builds the graph it builds alone, on
    real traces, on calls sharing ids, on an op recorded on a device."""
    from daydream.events.table import Kind
    from daydream.graph import build_graph
    from daydream.mapping import map_events
    from tablebuilder import TB

    tb = TB()
    c1 = tb.call("cudaLaunchKernel", 0, 10)
    tb.call("cudaLaunchKernel", 2, 5, tid=2, corr=c1)  # shares its id
    tb.gpu(c1, 20, 30)
    tb2 = TB()
    tb2.call("cudaLaunchKernel", 0, 10)
    tb2._row(kind=Kind.CPU_OP, name="aten::mm", start_ns=0, end_ns=12, pid=100, tid=1)
    tb2._row(kind=Kind.CPU_OP, name="aten::mm", start_ns=0, end_ns=12, pid=100, tid=1, device=0)
    tables = _bench_and_real_tables() + [tb2.table(), tb.table()]
    for t in tables:
        m = map_events(t)
        _same_graph(build_graph(t, m), build_graph(t))
    assert not map_events(tables[-1]).launch_unique
    assert any(map_events(t).launch_unique for t in tables)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 60), st.sampled_from([3, 1000, 2**40, 2**62]), st.integers(0, 2**32))
def test_visit_order_equals_the_lexsort(n, span, seed):
    """graph.tasks.visit_order is the builder's five-key lexsort: ties in position, in launch,
    in recorded start; positions too wide to pack."""
    from daydream.graph.build.tasks import visit_order

    rng = np.random.default_rng(seed)
    position = rng.integers(-span, span, n, dtype=np.int64)
    position[rng.random(n) < 0.5] = position[0] if n else 0  # ties
    is_gpu = rng.integers(0, 2, n).astype(np.int64)
    launch_corr = np.where(is_gpu == 1, rng.integers(-1, 3, n), -1).astype(np.int64)
    rec_start = rng.integers(0, 3, n).astype(np.int64)
    row = rng.permutation(n).astype(np.int64)
    want = np.lexsort((row, rec_start, launch_corr, is_gpu.astype(np.int8), position))
    assert np.array_equal(visit_order(position, is_gpu, launch_corr, rec_start, row), want)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 40), st.integers(0, 60), st.integers(0, 80), st.integers(0, 2**32))
def test_by_thread_groups_as_the_naive_split(n_threads, n_q, n_c, seed):
    """mapping._by_thread (equality passes for a few threads, a sort for many) yields each thread
    with queries and contexts once, in key order, rows and contexts ascending."""
    from daydream.events.table import EventTable
    from daydream.mapping.grouping import _by_thread

    rng = np.random.default_rng(seed)
    n = n_q + n_c
    th = rng.integers(0, n_threads, n)
    pid, tid = (th % 3 + 1).astype(np.int64) * 1000, (th // 3).astype(np.int64)
    table = EventTable.from_columns({"pid": pid, "tid": tid, "start_ns": np.zeros(n, np.int64)}, ["x"], sort=False)
    q_rows, c_rows = np.arange(n_q), np.arange(n_q, n)
    want = []
    for p, t in sorted(set(zip(pid[:n_q].tolist(), tid[:n_q].tolist()))):
        c = np.flatnonzero((pid[c_rows] == p) & (tid[c_rows] == t))
        if len(c):
            want.append(((p, t), q_rows[(pid[:n_q] == p) & (tid[:n_q] == t)].tolist(), c.tolist()))
    got = [(k, q.tolist(), c.tolist()) for k, q, c in _by_thread(table, q_rows, c_rows)]
    assert got == want


def _same_prepared(graph) -> None:
    from daydream.graph import rule_arrays
    from daydream.simulate.replay import _prepare_reference, _prepare_structure

    order = graph.order
    b = _prepare_reference(graph, order, rule_arrays())
    for method in ("numpy", "compiled", "python"):  # the array passes, and their compiled kernel (issue 18)
        a = _prepare_structure(graph, order, rule_arrays(), method=method)
        for f in a._fields:
            x, y = getattr(a, f), getattr(b, f)
            assert (np.array_equal(x, y) and np.asarray(x).dtype == np.asarray(y).dtype) if isinstance(x, np.ndarray) else x == y, (method, f)


@pytest.mark.slow
def test_prepared_replay_inputs_equal_the_reference_on_real_traces():
    """The replay's prepared inputs (END-edge work on the END edges alone) equal the whole-edge
    reference, on real traces and after optimizations that add waits and queue edges."""
    from daydream.graph import build_graph

    for t in _bench_and_real_tables():
        _same_prepared(build_graph(t))


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_prepared_replay_inputs_equal_the_reference_on_emulated_traces(tmp_path_factory, program):
    from daydream.formats import load_trace
    from daydream.graph import build_graph

    path = tmp_path_factory.mktemp("emu") / "t.json"
    to_kineto(emulate(program), str(path))
    _same_prepared(build_graph(load_trace(str(path))))


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["aten::mm", ", ", "seq = ", "op_id = ", "sizes = ", "stashed seq = ", "input_op_ids = ", "seq",
                                 " = ", ",", " ", "\n", "x", "12", "[[1]]", "#"]), max_size=10))
def test_nvtx_base_equals_the_suffix_regex(parts):
    """mapping._nvtx_base (str.find) captures what _NVTX_SUFFIX_RE does, None where it does not match."""
    from daydream.mapping.rules import _NVTX_SUFFIX_RE, _nvtx_base

    s = "".join(parts)
    m = _NVTX_SUFFIX_RE.match(s)
    assert _nvtx_base(s) == (m.group(1) if m else None)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(-(2**63), 2**63 - 1)), max_size=40), st.sampled_from([3, 2**40, 2**63]),
       st.integers(0, 2**32))
def test_segmented_cummax_equals_the_loop(items, span, seed):
    """graph._arrays.segmented_cummax (on offset values when they fit, else on ranks) is the
    running maximum restarting at each segment start."""
    from daydream.graph._arrays import segmented_cummax

    x = np.array([v % span - span // 2 if span < 2**63 else v for _, v in items], np.int64)
    starts = np.array([b for b, _ in items], bool)
    if len(starts):
        starts[0] = True
    want, cur = [], None
    for v, st_ in zip(x.tolist(), starts.tolist()):
        cur = v if st_ or cur is None else max(cur, v)
        want.append(cur)
    assert segmented_cummax(x, starts).tolist() == want


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 30), st.integers(0, 30), st.integers(1, 4), st.booleans(), st.integers(0, 2**32))
def test_lane_ids_equal_unique_columns(n_cpu, n_gpu, spread, by_thread, seed):
    """graph.tasks.lane_ids (CPU runs read off, GPU keys sorted) is unique_columns of the lane
    keys, CPU nodes first by thread or in any order, GPU nodes anywhere."""
    from daydream.graph._arrays import unique_columns
    from daydream.graph.build.tasks import lane_ids

    rng = np.random.default_rng(seed)
    pid = rng.integers(0, spread, n_cpu + n_gpu).astype(np.int64) * 1000
    tid = rng.integers(0, spread + 1, n_cpu + n_gpu).astype(np.int64)
    if by_thread and n_cpu:
        o = np.lexsort((tid[:n_cpu], pid[:n_cpu]))
        pid[:n_cpu], tid[:n_cpu] = pid[:n_cpu][o], tid[:n_cpu][o]
    is_gpu = np.r_[np.zeros(n_cpu, np.int64), np.ones(n_gpu, np.int64)]
    if not by_thread:
        is_gpu = rng.permutation(is_gpu)
    stream = np.where(is_gpu == 1, rng.integers(0, 3, n_cpu + n_gpu), 0).astype(np.int64)
    want_u, want_l = unique_columns([is_gpu, pid, tid, stream])
    got_u, got_l = lane_ids(is_gpu, pid, tid, stream)
    assert np.array_equal(got_u, want_u) and np.array_equal(got_l, want_l) and got_l.dtype == want_l.dtype


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 50), st.booleans()), max_size=40), st.integers(0, 2**32))
def test_ffill_by_compiled_equals_numpy(items, seed):
    """graph._arrays.ffill_by: the compiled pass, the kernel in Python and the numpy scans agree,
    over any index order (a thread's calls forwards or backwards) and a subset of positions."""
    from daydream.graph._arrays import ffill_by

    rng = np.random.default_rng(seed)
    values = np.array([v for v, _ in items], np.int64)
    idx = rng.permutation(len(values))[: max(len(values) - 2, 0)].astype(np.int64)
    start = np.array([b for _, b in items], bool)[: len(idx)]
    if len(start):
        start[0] = True
    want = ffill_by(values, idx, start, method="numpy")
    for m in ("python", "compiled", "auto"):
        assert np.array_equal(ffill_by(values, idx, start, method=m), want), m


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["nccl", "NCCL", "rccl", "Kernel", "\u212a", "void ", "Dev", "x", "_", " ", "\u0130", "\u017f", "ncc",
                                 "l", "AllReduce", "ǅ"]), max_size=8), st.text(max_size=5))
def test_comm_kernel_prefilter_equals_the_regex(parts, noise):
    """mapping.is_comm_kernel_name (a substring test before the regex) answers as
    COMM_KERNEL_PATTERN does, odd Unicode case folds included."""
    import re

    from daydream.mapping.rules import COMM_KERNEL_PATTERN, NAME_PREFIX, is_comm_kernel_name

    name = "".join(parts) + noise
    assert is_comm_kernel_name(name) == bool(re.compile(COMM_KERNEL_PATTERN).search(name, 0, NAME_PREFIX))


def _lane_and_launch_edges_point_forward(g) -> None:
    from daydream.graph.edges import EdgeKind

    rank = np.empty(g.n, np.int64)
    rank[g.order] = np.arange(g.n)
    m = np.isin(g.edge_kind, [EdgeKind.THREAD, EdgeKind.STREAM, EdgeKind.LAUNCH, EdgeKind.STAGED])
    assert (rank[g.edge_src[m]] < rank[g.edge_dst[m]]).all()


def test_lane_and_launch_edges_point_forward_on_real_traces():
    """repair_order skips checking the builder's lane and launch edges: they point forward in
    its visiting order by construction."""
    from daydream.graph import build_graph

    for t in _bench_and_real_tables():
        _lane_and_launch_edges_point_forward(build_graph(t))


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_lane_and_launch_edges_point_forward_on_emulated_traces(tmp_path_factory, program):
    from daydream.formats import load_trace
    from daydream.graph import build_graph

    path = tmp_path_factory.mktemp("emu") / "t.json"
    to_kineto(emulate(program), str(path))
    _lane_and_launch_edges_point_forward(build_graph(load_trace(str(path))))


def _latency_checked(monkeypatch):
    import daydream.graph.build as B
    from daydream.graph.build.latency import _launch_latency_and_gap_reference, launch_latency_and_gap

    calls = []

    def both(*a, **k):
        c1, c2 = {}, {}
        got = launch_latency_and_gap(*a[:-1], c1) if len(a) == 9 else launch_latency_and_gap(*a, **k)
        want = _launch_latency_and_gap_reference(*a[:-1], c2) if len(a) == 9 else _launch_latency_and_gap_reference(*a, **k)
        assert got == want and c1 == c2
        calls.append(got)
        return launch_latency_and_gap(*a, **k)

    monkeypatch.setattr(B, "launch_latency_and_gap", both)
    return calls


def test_latency_on_gpu_tasks_equals_the_reference(monkeypatch):
    """graph.latency.launch_latency_and_gap (on the GPU tasks' arrays) gives the reference's L,
    G, S and counts on real traces."""
    from daydream.graph import build_graph

    calls = _latency_checked(monkeypatch)
    for t in _bench_and_real_tables():
        build_graph(t)
    assert len(calls) == len(_bench_and_real_tables()) and any(c[0] > 0 for c in calls)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_latency_on_gpu_tasks_equals_the_reference_on_emulated_traces(tmp_path_factory, program):
    import pytest
    from daydream.formats import load_trace
    from daydream.graph import build_graph

    path = tmp_path_factory.mktemp("emu") / "t.json"
    to_kineto(emulate(program), str(path))
    with pytest.MonkeyPatch.context() as mp:
        _latency_checked(mp)
        build_graph(load_trace(str(path)))


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=60), st.integers(0, 2**32))
def test_lane_chains_compiled_equals_numpy(lanes, seed):
    """graph._arrays.lane_chains: the compiled passes, the kernel in Python and the numpy argsort
    agree (by_lane and lane_prev), over any visiting order and lanes with no node."""
    from daydream.graph._arrays import lane_chains

    rng = np.random.default_rng(seed)
    lane = np.array(lanes, np.int64)
    order = rng.permutation(len(lane)).astype(np.int64)
    n_lanes = int(lane.max()) + 1 + int(rng.integers(0, 3)) if len(lane) else int(rng.integers(0, 3))
    want = lane_chains(order, lane, n_lanes, method="numpy")
    for m in ("python", "compiled", "auto"):
        got = lane_chains(order, lane, n_lanes, method=m)
        assert all(np.array_equal(g, w) and g.dtype == w.dtype for g, w in zip(got, want)), m


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-2**62, 2**62)), max_size=40), st.booleans())
def test_later_min_compiled_equals_numpy(items, small):
    """graph.tasks.later_min (the smallest later value in each run): the compiled pass, the kernel
    in Python and the numpy scan agree, and equal the brute force."""
    from daydream.graph.build.tasks import later_min

    seg = np.array([s for s, _ in items], np.int64)
    val = np.array([v for _, v in items], np.int64) % (1000 if small else 2**63 - 1)
    big = int(val.max()) + 1 if len(val) else 0
    want = [min([int(val[j]) for j in range(k + 1, len(val)) if all(seg[k:j + 1] == seg[k])] + [big]) for k in range(len(val))]
    for m in ("numpy", "python", "compiled", "auto"):
        assert later_min(val, seg, big, method=m).tolist() == want, m


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-2, 2), st.integers(-1, 4)), max_size=60), st.integers(1, 3))
def test_few_unique_columns_compiled_equals_unique_columns(rows, k):
    """graph._arrays.few_unique_columns (rows numbered by first appearance in one compiled pass,
    the few distinct rows sorted after): the compiled pass and the kernel in Python give
    unique_columns' rows and inverse, also where there are more distinct rows than it keeps."""
    import daydream.graph._arrays as A

    cols = [np.array([r[c] for r in rows], np.int64) for c in range(k)]
    if not rows:
        return
    want = A.unique_columns(cols, few=True)
    for m in ("numpy", "python", "compiled", "auto"):
        got = A.few_unique_columns(cols, method=m)
        assert all(np.array_equal(g, w) and g.dtype == w.dtype and g.shape == w.shape for g, w in zip(got, want)), m
    keep = A.FEW_ROWS
    try:  # beyond the distinct rows the pass keeps: the sorting path answers
        A.FEW_ROWS = 2
        for m in ("python", "compiled"):
            got = A.few_unique_columns(cols, method=m)
            assert all(np.array_equal(g, w) and g.dtype == w.dtype for g, w in zip(got, want)), m
    finally:
        A.FEW_ROWS = keep


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(-3, 12), max_size=40), st.lists(st.integers(-3, 14), max_size=40), st.booleans(), st.integers(0, 2**32))
def test_lookup_first_compiled_equals_sorted(keys, queries, corr_keys, seed):
    """graph._arrays.lookup_first: the compiled hash join, the kernel in Python and the stable
    sort with a search give the first equal key's value, or -1 (invalid queries: -1)."""
    from daydream.graph._arrays import corr_key, lookup_first

    rng = np.random.default_rng(seed)
    k = np.array(keys, np.int64)
    q = np.array(queries, np.int64)
    if corr_keys:  # (process, correlation id) keys, as the builder looks them up (negative processes too)
        k = corr_key(rng.integers(-1, 2, len(k)), k)
        q = corr_key(rng.integers(-1, 2, len(q)), q)
    values = rng.integers(0, 1000, len(k)).astype(np.int64)
    valid = rng.random(len(q)) < 0.8
    want = np.array([next((int(values[i]) for i in range(len(k)) if k[i] == x), -1) if ok else -1 for x, ok in zip(q, valid)], np.int64)
    for m in ("numpy", "python", "compiled", "auto"):
        got = lookup_first(k, values, q, valid, method=m)
        assert np.array_equal(got, want) and got.dtype == np.int64, m


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.integers(0, 40), st.integers(0, 2**32), st.booleans(), st.booleans(), st.integers(0, 6))
def test_latency_compiled_equals_numpy(n, seed, with_x, with_staged, spread):
    """graph.latency.launch_latency_and_gap: the two compiled passes, the kernels in Python and the
    array passes give the same L, G, S and counts, on any launches, stream predecessors, times,
    cross-stream producers and staged copies (tied times included: ``spread`` narrows them)."""
    from daydream.graph.build.latency import launch_latency_and_gap

    rng = np.random.default_rng(seed)
    hi = 10 ** spread + 1
    is_gpu = rng.random(n) < 0.7
    launch = np.where(rng.random(n) < 0.85, rng.integers(-1, max(n, 1), n), -1).astype(np.int64)
    lane_prev = np.where(rng.random(n) < 0.7, rng.integers(-1, max(n, 1), n), -1).astype(np.int64)
    rec_start = rng.integers(0, hi, n).astype(np.int64)
    rec_end = rec_start + rng.integers(0, hi, n)
    m = int(rng.integers(0, 6)) if with_x and n else 0
    x_src, x_dst = rng.integers(0, max(n, 1), m).astype(np.int64), rng.integers(0, max(n, 1), m).astype(np.int64)
    staged = rng.random(n) < 0.3 if with_staged else None
    want_c: dict = {}
    want = launch_latency_and_gap(is_gpu, launch, lane_prev, rec_start, rec_end, x_src, x_dst, staged, want_c, method="numpy")
    for meth in ("python", "compiled", "auto"):
        got_c: dict = {}
        got = launch_latency_and_gap(is_gpu, launch, lane_prev, rec_start, rec_end, x_src, x_dst, staged, got_c, method=meth)
        assert got == want and got_c == want_c, meth


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 40), st.integers(0, 2**32), st.integers(0, 6))
def test_durations_and_gaps_compiled_equal_numpy(n, seed, spread):
    """graph.tasks.durations_and_gaps: the compiled pass, the kernel in Python and the array passes
    give the same durations, gaps and count (negative durations, gaps and times included)."""
    from daydream.graph.build.tasks import durations_and_gaps

    rng = np.random.default_rng(seed)
    hi = 10 ** spread + 1
    kind = rng.choice(np.array([0, 2, 3, 4], np.uint8), n)
    rec_start = rng.integers(-hi, hi, n).astype(np.int64)
    rec_end = rec_start + rng.integers(-hi // 4, hi, n)
    lane_prev = np.where(rng.random(n) < 0.7, rng.integers(-1, max(n, 1), n), -1).astype(np.int64)
    t0 = int(rng.integers(-hi, hi))
    want_c: dict = {}
    want = durations_and_gaps(kind, rec_start, rec_end, lane_prev, t0, want_c, method="numpy")
    for m in ("python", "compiled", "auto"):
        got_c: dict = {}
        got = durations_and_gaps(kind, rec_start, rec_end, lane_prev, t0, got_c, method=m)
        assert all(np.array_equal(g, w) and g.dtype == w.dtype for g, w in zip(got, want)) and got_c == want_c, m


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 40), st.integers(0, 2**32), st.integers(0, 6))
def test_unlaunched_positions_compiled_equal_numpy(n, seed, spread):
    """graph.tasks.unlaunched_positions: the compiled backward pass, the kernel in Python and the
    array passes give the same positions (ties in start and position included)."""
    from daydream.graph.build.tasks import unlaunched_positions

    rng = np.random.default_rng(seed)
    hi = 10 ** spread + 1
    lane = rng.integers(0, 4, n).astype(np.int64)
    is_gpu = rng.random(n) < 0.8
    launch = np.where(rng.random(n) < 0.6, rng.integers(0, max(n, 1), n), -1).astype(np.int64)
    position = rng.integers(0, hi, n).astype(np.int64)
    rec_start = rng.integers(0, hi, n).astype(np.int64)
    want = unlaunched_positions(lane, is_gpu, launch, position, rec_start, method="numpy")
    for m in ("python", "compiled", "auto"):
        got = unlaunched_positions(lane, is_gpu, launch, position, rec_start, method=m)
        assert np.array_equal(got, want) and got.dtype == want.dtype, m


class _Cols:
    """The few table columns the stage tests read (start_ns, end_ns), with a length."""

    def __init__(self, start, end):
        self.start_ns, self.end_ns = start, end

    def __len__(self):
        return len(self.start_ns)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.integers(0, 40), st.integers(0, 2**32), st.integers(0, 6))
def test_cpu_tasks_and_launch_links_compiled_equal_numpy(n, seed, spread):
    """graph.tasks.cpu_tasks (nested and overlapping calls) and link_launches (launch rows to
    nodes, missing and shared launches): the compiled passes, the kernels in Python and the array
    passes give the same arrays and counts, in the same order of reasons."""
    from types import SimpleNamespace

    from daydream.graph.build.tasks import cpu_tasks, link_launches
    from daydream.events.threads import CallThreads

    rng = np.random.default_rng(seed)
    hi = 10 ** spread + 1
    start = rng.integers(0, hi, n).astype(np.int64)
    table = _Cols(start, start + rng.integers(0, hi, n))
    rt_rows = np.sort(rng.choice(n, int(rng.integers(0, n + 1)), replace=False)).astype(np.int64)
    new = rng.random(len(rt_rows)) < 0.2
    if len(new):
        new[0] = True
    run_max = np.full(len(rt_rows), np.iinfo(np.int64).min, np.int64)
    for i in range(1, len(rt_rows)):  # the largest end of the earlier calls of the thread
        run_max[i] = np.iinfo(np.int64).min if new[i] else max(run_max[i - 1], int(table.end_ns[rt_rows[i - 1]]))
    threads = CallThreads(rt_rows, new, run_max)
    gpu_rows = np.setdiff1d(np.arange(n), rt_rows)
    launch_row = np.full(n, -1, np.int64)
    if len(rt_rows):
        launch_row[gpu_rows] = np.where(rng.random(len(gpu_rows)) < 0.8, rng.choice(rt_rows, len(gpu_rows)), -1)
    mapping = SimpleNamespace(launch_unique=True, launch_row=launch_row)
    want_c: dict = {}
    want = cpu_tasks(table, want_c, threads, method="numpy")
    want_l = link_launches(table, want, gpu_rows, -1, want_c, mapping, method="numpy")
    for m in ("python", "compiled", "auto"):
        got_c: dict = {}
        got = cpu_tasks(table, got_c, threads, method=m)
        for f in ("rt_rows", "nested", "rt_node", "cpu_rows"):
            a, b = getattr(got, f), getattr(want, f)
            assert np.array_equal(a, b) and a.dtype == b.dtype, (m, f)
        got_l = link_launches(table, got, gpu_rows, -1, got_c, mapping, method=m)
        assert np.array_equal(got_l, want_l) and got_l.dtype == want_l.dtype, m
        assert list(got_c.items()) == list(want_c.items()), m
