"""The sharded data-parallel what-ifs (fsdp / zero) and the collective-cost fit.

The emulator judges the prefetched all-gathers (``insert_prefetched``): a graph built from an
emulated trace, with all-gathers inserted and their consumers waiting, predicts exactly the
emulator's run of the program that issues them (``with_prefetched``), reduce-scatters after them
as DDP's hook issues them (``insert_allreduces`` / ``with_allreduces``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

from daydream.costmodel import comm as cm
from daydream.costmodel import comm_fit as cf
from daydream.formats import load_trace
from daydream.graph import NODE_CPU, build_graph
from daydream.optimizations.comm_common import insert_allreduces
from daydream.optimizations.sharding import insert_prefetched, sharded_state_bytes
from daydream.simulate import simulate
from daydream.testing.ddp_programs import with_allreduces, with_prefetched
from daydream.testing.emulator import Launch, emulate, measure_latencies, programs, to_kineto

from test_transform import _baseline_keys, _by_corr, _emulated_by_key

NET = cm.Network(cm.PRESETS["pcie3"])


def _pick(rng, n_launch, k):
    """k (anchor, consumer) launch indices: anchor_k < consumer_k <= anchor_{k+1}."""
    pts = sorted(rng.choice(n_launch, size=min(2 * k, n_launch), replace=False).tolist())
    pairs = [(pts[i], pts[i + 1]) for i in range(0, len(pts) - 1, 2)]
    return [a for a, _ in pairs], [c for _, c in pairs]


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(programs(max_threads=1), st.integers(0, 2**32), st.lists(st.integers(1, 64 << 20), min_size=1, max_size=4),
       st.sampled_from([2, 8, 64]), st.booleans())
def test_prefetched_allgathers_equal_the_emulator(tmp_path_factory, prog, seed, sizes, world, reduce_scatter):
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    launches = [c for c in run.calls if isinstance(c.op, Launch)]
    assume(len(launches) >= 2)
    rng = np.random.default_rng(seed)
    ai, ci = _pick(rng, len(launches), len(sizes))
    assume(ai)
    k = len(ai)
    durs = cm.collective_ns(cm.ALL_GATHER, np.asarray(sizes[:k]), world, NET).tolist()
    p = tmp_path_factory.mktemp("s") / "t.json"
    to_kineto(run, str(p))
    g = build_graph(load_trace(str(p)))
    corr = g.table.correlation[np.maximum(g.row, 0)]
    node_of = {int(c): i for i, c in enumerate(corr.tolist()) if g.node_kind[i] != NODE_CPU and g.row[i] >= 0}
    anchor = np.array([node_of[launches[i].correlation] for i in ai])
    consumer = np.array([node_of[launches[i].correlation] for i in ci])
    g2, nodes = insert_prefetched(g, anchor, consumer, np.asarray(durs), ["ncclKernel_AllGather_RING_LL_Sum_float"] * k)
    changed, where, ag = with_prefetched(prog, 0, [launches[i].op_index for i in ai], [launches[i].op_index for i in ci], durs)
    if reduce_scatter:  # then one reduce-scatter after the last consumer, as the backward's hook issues it
        rs_d = cm.collective_ns(cm.REDUCE_SCATTER, np.asarray(sizes[:1]), world, NET)
        g2, rs = insert_allreduces(g2, consumer[-1:], rs_d, np.array([-1]))
        changed, w2, rs_ops = with_allreduces(changed, 0, [where[launches[ci[-1]].op_index]], rs_d.tolist(), None)
        where = {i: w2[j] for i, j in where.items()}
        ag = [w2[j] for j in ag]
    pred = simulate(g2)
    crun = emulate(changed)
    keys = _baseline_keys(run)
    calls, tasks = _by_corr(g2, pred)
    e_calls, e_tasks = _emulated_by_key(crun)
    assert {(keys[c][0], where[keys[c][1]]): v for c, v in calls.items()} == {kk: e_calls[kk] for kk in
                                                                            [(keys[c][0], where[keys[c][1]]) for c in calls]}
    assert {(keys[c][0], where[keys[c][1]]): v for c, v in tasks.items()} == {kk: e_tasks[kk] for kk in
                                                                            [(keys[c][0], where[keys[c][1]]) for c in tasks]}
    assert [(int(pred.start_ns[v]), int(pred.end_ns[v])) for v in nodes] == [e_tasks[(0, i)] for i in ag]
    # each consumer starts after its all-gather ends (+G)
    assert all(pred.start_ns[c] >= pred.end_ns[v] + g.gpu_gap_ns for c, v in zip(consumer, nodes))


def test_sharded_state_bytes_follow_zero():
    """ZeRO §5: stage 1 shards the optimizer state, 2 also gradients, 3 also parameters."""
    assert sharded_state_bytes(800, 8, 0) == {"parameters": 800, "gradients": 800, "optimizer_state": 1600}
    assert sharded_state_bytes(800, 8, 1) == {"parameters": 800, "gradients": 800, "optimizer_state": 200}
    assert sharded_state_bytes(800, 8, 2) == {"parameters": 800, "gradients": 100, "optimizer_state": 200}
    assert sharded_state_bytes(800, 8, 3) == {"parameters": 100, "gradients": 100, "optimizer_state": 200}


def test_fit_recovers_a_known_line_and_the_presets_residual():
    """Times made by the alpha-beta form with L = 20 us, busbw = 40 GB/s (8 ranks, all-reduce):
    the fit gives them back with zero residual; the NVLink 2 preset is off by a known amount."""
    s = np.array([1 << 10, 1 << 16, 1 << 20, 1 << 24])
    t = 20_000 + 2 * 7 / 8 * s / 40e9 * 1e9
    f = cf.fit(np.full(4, cm.ALL_REDUCE), s, np.full(4, 8), t, cm.Network(cm.PRESETS["nvlink2"]), "test")
    o = f.ops[cm.ALL_REDUCE]
    assert o.latency_ns == pytest.approx(20_000, rel=1e-9) and o.busbw == pytest.approx(40e9, rel=1e-9)
    assert o.fit_residual["max_abs"] == 0
    pre = cm.collective_ns(cm.ALL_REDUCE, s, 8, cm.Network(cm.PRESETS["nvlink2"]))
    assert o.preset_residual["max_abs"] == pytest.approx(float(np.max(np.abs(pre - t) / t)), abs=1e-4)
    # used within a factor 2 of the fitted sizes, the preset beyond
    got, used = cf.collective_ns(f, cm.ALL_REDUCE, np.array([1 << 20, 1 << 30]), 8, cm.Network(cm.PRESETS["nvlink2"]))
    assert used == 1 and got[0] == round(20_000 + 2 * 7 / 8 * (1 << 20) / 40e9 * 1e9)
    assert got[1] == cm.collective_ns(cm.ALL_REDUCE, 1 << 30, 8, cm.Network(cm.PRESETS["nvlink2"]))


def test_fit_with_one_size_scales_the_preset():
    net = cm.Network(cm.PRESETS["nvlink5"])
    pre = int(cm.collective_ns(cm.ALL_GATHER, 402_176, 8, net))
    f = cf.fit(np.array([cm.ALL_GATHER]), np.array([402_176]), np.array([8]), np.array([2 * pre]), net, "test")
    o = f.ops[cm.ALL_GATHER]
    assert np.isfinite(o.busbw) and o.fit_residual["max_abs"] == 0  # a bug: it gave an infinite bandwidth
    assert cf.collective_ns(f, cm.ALL_GATHER, np.array([402_176]), 8, net)[0][0] == pytest.approx(2 * pre, abs=1)


def test_overlap_slowdown_measures_kernels_of_one_name():
    """Kernel "a" lasts 10 alone and 13 under a collective (x2 each): slowdown 1.3; kernel "b"
    never overlaps and does not count."""
    start = np.array([0, 20, 100, 120, 100, 300])
    end = np.array([10, 30, 113, 133, 200, 310])
    name = np.array([0, 0, 0, 0, 9, 1])
    comm = np.array([0, 0, 0, 0, 1, 0], bool)
    s, d = cf.overlap_slowdown(start, end, np.zeros(6), name, comm, ~comm)
    assert s == pytest.approx(1.3) and d["names compared"] == 1 and d["compute kernels overlapped"] == 2
    assert cf.overlap_slowdown(start, end, np.zeros(6), name, np.zeros(6, bool), ~comm)[0] == 1.0


RESNET = "../shared/traces/kineto_tbplugin/resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"


@pytest.mark.slow
def test_sharding_on_resnet_identity_and_monotone():
    """World 1 and stage 0 are the baseline; a slower link never predicts a faster step; the
    stage-1/2 and stage-3 programs are inserted (no dependency cycle: stage 1 used to make one,
    waiting on zero_grad's kernels, which the trace maps to the optimizer before backward)."""
    import os

    from daydream.analysis import analyze

    path = os.path.join(os.path.dirname(__file__), "..", RESNET)
    if not os.path.exists(path):
        pytest.skip("shared traces not present")
    t = load_trace(path)
    w = {}
    for spec in ["fsdp:world=1", "zero:stage=0", "fsdp", "fsdp:bandwidth=pcie3", "zero:stage=1", "zero:stage=2,bandwidth=pcie3"]:
        r = analyze(t, [spec]).report
        assert not r.not_applicable, spec
        w[spec] = r.predictions[-1].window.predicted_ns
        if spec in ("fsdp:world=1", "zero:stage=0"):
            assert w[spec] == r.predictions[-1].window.replayed_ns, spec
    assert w["fsdp:bandwidth=pcie3"] >= w["fsdp"]


def _fit_doc(op: str, lat_us: float, bw_gbps: float, lo: int, hi: int, n: int = 8) -> dict:
    return {"source": "test", "ops": {op: {"count": 4, "group_size": n, "size_min_bytes": lo, "size_max_bytes": hi,
                                           "latency_us": lat_us, "busbw_GBps": bw_gbps}}}


def test_trace_fit_reads_a_comm_fit_document_and_refuses_a_bad_one(tmp_path):
    import json

    from daydream.errors import UsageError
    from daydream.optimizations.comm_common import trace_fit

    p = tmp_path / "fit.json"
    p.write_text(json.dumps(_fit_doc("all-gather", 20.0, 40.0, 1 << 20, 1 << 24)))
    net = cm.Network(cm.PRESETS["nvlink2"])
    f, how = trace_fit(None, net, str(p))
    assert str(p) in how
    t, used = cf.collective_ns(f, cm.ALL_GATHER, np.array([1 << 22]), 8, net)
    assert used == 1 and t[0] == round(20_000 + 7 / 8 * (1 << 22) / 40e9 * 1e9)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"ops": {"all-gather": {"count": 1}}}))
    with pytest.raises(UsageError, match="bad.json"):
        trace_fit(None, net, str(bad))
    with pytest.raises(UsageError, match="missing.json"):
        trace_fit(None, net, str(tmp_path / "missing.json"))


@pytest.mark.slow
def test_fsdp_costs_its_collectives_with_a_given_fit(tmp_path):
    """A fit whose all-gathers and reduce-scatters are 100x slower than NVLink 2 makes the
    collectives (and the step) slower than the preset; the note counts them as costed by the fit
    (before, the fit was reported by daydream-comm-fit and unused by fsdp/zero)."""
    import json
    import os

    from daydream.analysis import analyze

    path = os.path.join(os.path.dirname(__file__), "..", RESNET)
    if not os.path.exists(path):
        pytest.skip("shared traces not present")
    doc = _fit_doc("all-gather", 50.0, 1.0, 1 << 10, 1 << 30)
    doc["ops"].update(_fit_doc("reduce-scatter", 50.0, 1.0, 1 << 10, 1 << 30)["ops"])
    p = tmp_path / "fit.json"
    p.write_text(json.dumps(doc))
    t = load_trace(path)
    base = analyze(t, ["fsdp"]).report.predictions[-1]
    slow = analyze(t, [f"fsdp:fit={p}"]).report.predictions[-1]
    note = slow.optimizations[0].note
    assert "collective times by the fit in" in note and " 0 of " not in note
    assert slow.window.predicted_ns > base.window.predicted_ns


@pytest.mark.parametrize("spec", ["zero:stage=1,world=1", "zero:stage=2,world=1", "fsdp:world=1", "zero:stage=0"])
def test_one_rank_is_the_baseline_without_gradient_shapes(tmp_path, spec):
    """world=1 (or stage 0) shards nothing: the baseline on every trace. It was not applicable
    ("gradient sizes not found", "already has collective kernels") where the trace lacked what
    only sharding over several ranks needs; world=8 still says so."""
    from daydream.errors import NotApplicable
    from daydream.optimizations import parse_spec
    from daydream.testing.emulator import Program, StreamSync, Thread

    prog = Program([Thread([Launch(7, "gemm", 10_000, 3_000), StreamSync(7, 1_000)])])
    p = tmp_path / "t.json"
    to_kineto(emulate(prog), str(p))
    g = build_graph(load_trace(str(p)))
    opt, params = parse_spec(spec)
    g1, note = opt.apply(g, params)
    assert g1 is g and "the baseline" in note
    opt, params = parse_spec(spec.replace("world=1", "world=8").replace("stage=0", "stage=2"))
    with pytest.raises(NotApplicable, match="gradient sizes"):
        opt.apply(g, params)
