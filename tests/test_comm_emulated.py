"""The emulator judges the all-reduce insertion of the data-parallel what-ifs: a graph built from
an emulated trace, with all-reduces inserted by ``insert_allreduces`` (costed by comm_model),
predicts exactly the emulator's run of the program that issues those all-reduces."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from daydream.errors import DaydreamError
from daydream.costmodel import comm as cm
from daydream.formats import load_trace
from daydream.graph import NODE_CPU, build_graph
from daydream.optimizations.comm_common import buckets, insert_allreduces
from daydream.simulate import simulate
from daydream.testing.ddp_programs import with_allreduces
from daydream.testing.emulator import Launch, emulate, measure_latencies, programs, to_kineto

from test_transform import _baseline_keys, _by_corr, _emulated_by_key

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
NET = cm.Network(cm.PRESETS["pcie3"])


@pytest.mark.slow
@SETTINGS
@given(programs(max_threads=1), st.integers(0, 2**32), st.lists(st.integers(1, 64 << 20), min_size=1, max_size=4),
       st.sampled_from([2, 8, 64]), st.booleans())
def test_inserted_allreduces_equal_the_emulator(tmp_path_factory, prog, seed, sizes, world, wait):
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    launches = [c for c in run.calls if isinstance(c.op, Launch)]
    assume(len(launches) >= 2)
    rng = np.random.default_rng(seed)
    k = min(len(sizes), len(launches) - 1)
    picked = sorted(rng.choice(len(launches) - 1, size=k, replace=False).tolist())
    anchors = [launches[i] for i in picked]
    waiter = launches[int(rng.integers(picked[-1] + 1, len(launches)))] if wait else None
    durs = cm.collective_ns(cm.ALL_REDUCE, np.asarray(sizes[:k]), world, NET).tolist()

    p = tmp_path_factory.mktemp("c") / "t.json"
    to_kineto(run, str(p))
    g = build_graph(load_trace(str(p)))
    corr = g.table.correlation[np.maximum(g.row, 0)]
    node_of = {int(c): i for i, c in enumerate(corr.tolist()) if g.node_kind[i] != NODE_CPU and g.row[i] >= 0}
    ready = np.array([node_of[a.correlation] for a in anchors])
    w = np.full(k, -1)
    if waiter is not None:
        w[-1] = node_of[waiter.correlation]
    g2, nodes = insert_allreduces(g, ready, np.asarray(durs), w)
    pred = simulate(g2)

    changed, where, ar = with_allreduces(prog, 0, [a.op_index for a in anchors], durs, waiter.op_index if waiter else None)
    crun = emulate(changed)
    keys = _baseline_keys(run)
    calls, tasks = _by_corr(g2, pred)
    e_calls, e_tasks = _emulated_by_key(crun)
    assert {(keys[c][0], where[keys[c][1]]): v for c, v in calls.items()} == {kk: e_calls[kk] for kk in
                                                                            [(keys[c][0], where[keys[c][1]]) for c in calls]}
    assert {(keys[c][0], where[keys[c][1]]): v for c, v in tasks.items()} == {kk: e_tasks[kk] for kk in
                                                                            [(keys[c][0], where[keys[c][1]]) for c in tasks]}
    got = [(int(pred.start_ns[v]), int(pred.end_ns[v])) for v in nodes]
    assert got == [e_tasks[(0, i)] for i in ar]
    # doubling the bandwidth never slows the prediction
    fast = cm.collective_ns(cm.ALL_REDUCE, np.asarray(sizes[:k]), world, cm.Network(cm.PRESETS["pcie4"]))
    assert simulate(insert_allreduces(g, ready, fast, w)[0]).end_ns.max() <= pred.end_ns.max()


def test_buckets_follow_ddp():
    r = np.arange(6)
    b = np.array([1, 1, 3, 2, 2, 5]) * (1 << 20)
    # the first bucket closes at >= 1 MiB, the next ones at >= 4 MiB
    br, bb = buckets(r, b, 4 << 20, 1 << 20)
    assert br.tolist() == [0, 2, 4, 5] and (bb >> 20).tolist() == [1, 4, 4, 5]
    br, bb = buckets(r, b, 100 << 20, 100 << 20)  # one bucket, closed by the last gradient
    assert br.tolist() == [5] and (bb >> 20).tolist() == [14]


def test_one_bucket_on_a_small_program_exact(tmp_path):
    """Hand-computed: L = 5 us, G = 1 us; k1 (10 us) then, 2 us of host work later, the optimizer
    kernel k2 (5 us) on the same stream; one 1 MiB all-reduce over 2 ranks after k1."""
    from daydream.testing.emulator import HostWork, Program, Thread

    prog = Program([Thread([Launch(7, "volta_sgemm_bwd", 10_000, 1_000), HostWork(2_000), Launch(7, "adam_kernel", 5_000, 1_000)])],
                   launch_latency_ns=5_000, gpu_gap_ns=1_000)
    run = emulate(prog)
    p = tmp_path / "t.json"
    to_kineto(run, str(p))
    g = build_graph(load_trace(str(p)))
    k1, k2 = [int(v) for v in np.nonzero(g.node_kind != NODE_CPU)[0]]
    D = int(cm.collective_ns(cm.ALL_REDUCE, 1 << 20, 2, NET))
    assert D == 8400 + 2 * 5700 + round((1 << 20) / 15.754e9 * 1e9)  # b + 2(n-1) a + 2(n-1)/n S/B
    g2, nodes = insert_allreduces(g, np.array([k1]), np.array([D]), np.array([k2]))
    tl = simulate(g2)
    t0 = g.t0_ns
    assert (tl.start_ns[k1] - t0, tl.end_ns[k1] - t0) == (5_000, 15_000)
    ar = int(nodes[0])
    assert (tl.start_ns[ar] - t0, tl.end_ns[ar] - t0) == (16_000, 16_000 + D)  # after k1 + G
    assert tl.start_ns[k2] - t0 == 17_000 + D  # the optimizer waits for the all-reduce + G


def _same_graph(a, b):
    import dataclasses

    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name in ("table", "mapping", "order"):  # any valid visiting order (the one-by-one one may be a topological sort)
            continue
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), f.name
        else:
            assert x == y, f.name
    assert a.order_valid and b.order_valid and sorted(a.order.tolist()) == sorted(b.order.tolist())
    assert (a.mapping is None) == (b.mapping is None)
    if a.mapping is not None:
        for f in ("phase", "layer_id", "op_id"):
            assert np.array_equal(getattr(a.mapping, f), getattr(b.mapping, f)), f


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**32), st.integers(1, 12), st.booleans(), st.booleans())
def test_batched_allreduce_insertion_is_the_one_by_one_graph(tmp_path_factory, prog, seed, k, wait, twice):
    """insert_allreduces (all buckets at once) makes the graph the one-by-one insertion makes:
    node arrays, names, edges in order (a valid visiting order, not always the same), and the
    same replay to the ns; several buckets ready
    at one kernel, and a second insertion after a first (calls inserted there before)."""
    from daydream.optimizations.comm_common import insert_allreduces_one_by_one

    run = emulate(prog)
    p = tmp_path_factory.mktemp("b") / "t.json"
    to_kineto(run, str(p))
    g = build_graph(load_trace(str(p)))
    gpu = np.nonzero((g.node_kind != NODE_CPU) & (g.launch >= 0))[0]
    assume(len(gpu) >= 1)
    rng = np.random.default_rng(seed)
    ready = np.sort(rng.choice(gpu, size=k, replace=True))  # repeats: buckets ready at one kernel
    ready = ready[np.lexsort((np.arange(k), g.position_ns[ready]))]
    durs = rng.integers(1, 50_000, k)
    waiter = np.where(rng.random(k) < 0.5, rng.choice(gpu, size=k), -1) if wait else np.full(k, -1)
    waiter[waiter >= 0] = np.maximum(waiter[waiter >= 0], ready[waiter >= 0])
    waiter[waiter == ready] = -1
    try:
        a, na = insert_allreduces_one_by_one(g, ready, durs, waiter, [f"ar{i}" for i in range(k)])
    except Exception as e:  # a cycle: the batched insertion refuses it too
        with pytest.raises(type(e)):
            insert_allreduces(g, ready, durs, waiter, [f"ar{i}" for i in range(k)])
        return
    b, nb = insert_allreduces(g, ready, durs, waiter, [f"ar{i}" for i in range(k)])
    assert np.array_equal(na, nb)
    _same_graph(a, b)
    if twice:
        a, _ = insert_allreduces_one_by_one(a, ready, durs[::-1], np.full(k, -1))
        b, _ = insert_allreduces(b, ready, durs[::-1], np.full(k, -1))
        _same_graph(a, b)
    ta, tb = simulate(a), simulate(b)
    assert np.array_equal(ta.start_ns, tb.start_ns) and np.array_equal(ta.end_ns, tb.end_ns)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**32), st.integers(1, 12))
def test_batched_cpu_insertion_is_the_one_by_one_graph(tmp_path_factory, prog, seed, k):
    """transform.insert_cpu_tasks (dataloader's hand-offs, all at once) makes the graph that
    transform.insert(kind="cpu") makes one anchor at a time: node arrays, names, edges in order,
    a valid visiting order, and the same replay to the ns."""
    from daydream.transform import insert, insert_cpu_tasks

    run = emulate(prog)
    p = tmp_path_factory.mktemp("c") / "t.json"
    to_kineto(run, str(p))
    g = build_graph(load_trace(str(p)))
    cpu = np.nonzero(g.node_kind == NODE_CPU)[0]
    assume(len(cpu) >= 1)
    rng = np.random.default_rng(seed)
    after = rng.choice(cpu, size=min(k, len(cpu)), replace=False)
    durs, gaps = rng.integers(0, 50_000, len(after)), rng.integers(0, 50_000, len(after))
    a = g
    ids = []
    for x, d, gp in zip(after.tolist(), durs.tolist(), gaps.tolist()):
        a, v = insert(a, after=x, dur_ns=d, name="h", kind="cpu", gap_ns=gp)
        ids.append(v)
    b, nb = insert_cpu_tasks(g, after=after, dur_ns=durs, gap_ns=gaps, name="h")
    assert nb.tolist() == ids
    _same_graph(a, b)
    ta, tb = simulate(a), simulate(b)
    assert np.array_equal(ta.start_ns, tb.start_ns) and np.array_equal(ta.end_ns, tb.end_ns)
    with pytest.raises(DaydreamError):
        insert_cpu_tasks(g, after=np.r_[after[0], after[0]], dur_ns=1, gap_ns=0, name="h")
