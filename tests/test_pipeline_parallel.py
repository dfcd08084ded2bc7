"""Pipeline parallelism (``daydream/optimizations/pipeline_schedule.py``, ``pipeline_parallel.py``):
the schedule model against the job emulator running the stages' programs
(``daydream/testing/pipeline_programs.py``: one rank per stage, send/recv kernels matched per
link), the bubble formula, the activations held, and the job report's bubble on the emulated job."""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from daydream.optimizations import parse_spec
from daydream.optimizations.pipeline_parallel import cut_units, plan
from daydream.optimizations.pipeline_schedule import (
    BWD,
    FWD,
    P2P,
    SCHEDULES,
    ideal_bubble_fraction,
    run_schedule,
    stage_order,
)
from daydream.simulate import simulate
from daydream.testing.emulator import emulate
from daydream.testing.emulator.layered import layered_steps
from daydream.testing.job_emulator import emulate_job, write_job
from daydream.testing.pipeline_programs import pipeline_job

sys.path.insert(0, os.path.dirname(__file__))
from test_activation_checkpointing import _graph


@st.composite
def pipelines(draw):
    S = draw(st.integers(1, 5))
    M = draw(st.integers(1, 8))
    t = st.integers(1_000, 200_000)
    fwd = draw(st.lists(t, min_size=S, max_size=S))
    bwd = draw(st.lists(t, min_size=S, max_size=S))
    p2p = draw(st.lists(st.integers(0, 50_000), min_size=S - 1, max_size=S - 1))
    L = draw(st.integers(0, 20_000))
    G = draw(st.integers(0, L))
    call = draw(st.integers(0, 30_000))
    return fwd, bwd, p2p, M, draw(st.sampled_from(SCHEDULES)), {"call_ns": call, "launch_latency_ns": L, "gpu_gap_ns": G}


@pytest.mark.slow
@settings(max_examples=60, deadline=None, derandomize=True)
@given(pipelines())
def test_schedule_model_equals_the_emulated_job(pl):
    fwd, bwd, p2p, M, sched, kw = pl
    model = run_schedule(fwd, bwd, p2p, M, sched, **kw)
    job = emulate_job(pipeline_job(fwd, bwd, p2p, M, sched, **kw))
    t0 = job.runs[0].program.t0_ns
    step = max(t.end_ns for run in job.runs for t in run.tasks) - t0
    assert model.step_ns == step
    for s, run in enumerate(job.runs):
        assert [t.start_ns - t0 for t in run.tasks] == model.start_ns[s].tolist()
        assert [t.end_ns - t0 for t in run.tasks] == model.end_ns[s].tolist()
        coll = job.collective_tasks(s)
        waits = [a - run.tasks[i].start_ns for a, i in zip(job.rank_arrivals(s), coll)]
        assert sum(waits) == model.bubble_ns[s]


@st.composite
def interleaved_pipelines(draw):
    """Interleaved jobs: 2-4 ranks, 2-3 chunks each, ``M`` a multiple of ``S`` (Megatron's rule)."""
    S = draw(st.integers(2, 4))
    V = draw(st.integers(2, 3))
    M = S * draw(st.integers(1, 3))
    t = st.integers(1_000, 200_000)
    fwd = draw(st.lists(t, min_size=S * V, max_size=S * V))
    bwd = draw(st.lists(t, min_size=S * V, max_size=S * V))
    p2p = draw(st.lists(st.integers(0, 50_000), min_size=S, max_size=S))
    L = draw(st.integers(0, 20_000))
    G = draw(st.integers(0, L))
    call = draw(st.integers(0, 30_000))
    return fwd, bwd, p2p, M, "interleaved", {"call_ns": call, "launch_latency_ns": L, "gpu_gap_ns": G, "chunks": V}


@pytest.mark.slow
@settings(max_examples=45, deadline=None, derandomize=True)
@given(interleaved_pipelines())
def test_interleaved_schedule_model_equals_the_emulated_job(pl):
    """Every item's start and end, the step and each rank's bubble of the interleaved schedule (V
    chunks per rank, the wrap link from the last rank to the first) equal the job emulator's run."""
    test_schedule_model_equals_the_emulated_job.hypothesis.inner_test(pl)


@pytest.mark.parametrize("S,V,M", [(2, 2, 2), (2, 3, 4), (3, 2, 3), (4, 2, 8), (4, 3, 4), (4, 4, 12), (5, 2, 10)])
def test_interleaved_equal_chunks_idle_the_papers_bubble(S, V, M):
    """Derived from the schedule (Narayanan et al. SC 2021 §2.2.2): with a rank's micro-batch of
    forward ``V f`` and backward ``V b`` cut into ``V`` equal chunks (``f``, ``b`` each), no
    transfer and no host cost, each rank computes ``V M (f + b)``. The last rank's first forward
    waits for chunk 0 of micro-batch 0 on ranks ``0..S-2`` (``(S-1) f``), rank 0's last backward
    for chunk 0's gradient from ranks ``S-1..1`` (``(S-1) b``); the schedule adds no other stall,
    so every rank idles ``(S-1)(f+b)``, the paper's bubble ``(S-1)(t_f + t_b)/V`` of a rank's
    micro-batch ``t = V (f + b)``, and the step is ``(V M + S - 1)(f + b)``: an idle fraction
    ``(S-1)/(V M + S - 1)`` (the paper's ``(S-1)/(V M)`` is relative to the ideal ``V M (f + b)``)."""
    f, b = 3_000, 7_000
    r = run_schedule([f] * (S * V), [b] * (S * V), [0] * S, M, "interleaved", chunks=V)
    assert r.idle_ns.tolist() == [(S - 1) * (f + b)] * S
    assert r.step_ns == (V * M + S - 1) * (f + b)
    assert r.bubble_fraction == pytest.approx((S - 1) / (V * M + S - 1))
    assert r.bubble_fraction == pytest.approx(ideal_bubble_fraction(S, M, V))
    one = run_schedule([V * f] * S, [V * b] * S, [0] * (S - 1), M, "1f1b")
    assert one.idle_ns.tolist() == [V * x for x in r.idle_ns.tolist()]  # the bubble shrinks V-fold


@pytest.mark.parametrize("S,M", [(1, 1), (2, 3), (4, 8), (5, 2)])
def test_interleaved_one_chunk_is_1f1b(S, M):
    for s in range(S):
        assert stage_order(S, M, "interleaved", s, 1) == stage_order(S, M, "1f1b", s)
    fwd, bwd, p2p = list(range(1_000, 1_000 + S)), list(range(5_000, 5_000 + S)), [700] * (S - 1)
    a = run_schedule(fwd, bwd, p2p, M, "interleaved", chunks=1, call_ns=300, launch_latency_ns=900)
    b = run_schedule(fwd, bwd, p2p, M, "1f1b", call_ns=300, launch_latency_ns=900)
    assert a.step_ns == b.step_ns and a.bubble_ns.tolist() == b.bubble_ns.tolist()


@pytest.mark.parametrize("S,M,V", [(3, 4, 2), (4, 6, 2), (1, 4, 2), (2, 3, 3)])
def test_interleaved_refuses_micro_batches_not_a_multiple_of_stages(S, M, V):
    with pytest.raises(ValueError, match="multiple of S"):
        stage_order(S, M, "interleaved", 0, V)


@pytest.mark.parametrize("S,M,V", [(2, 2, 2), (3, 6, 3), (4, 8, 2), (4, 4, 3)])
def test_interleaved_orders_hold_every_chunk_micro_batch_once_and_links_agree(S, M, V):
    from daydream.optimizations.pipeline_schedule import megatron_compute_order
    orders = [stage_order(S, M, "interleaved", s, V) for s in range(S)]
    for s, o in enumerate(orders):
        f = [x for k, x in o if k == FWD]
        b = [x for k, x in o if k == BWD]
        assert sorted(f) == sorted(b) == list(range(V * M))
        assert all(o.index((FWD, x)) < o.index((BWD, x)) for x in range(V * M))
        # Megatron's warm-up: (S-s-1) 2 + (V-1) S forwards before the first backward
        first_b = [k for k, _ in o if k != P2P].index(BWD)
        assert first_b == min((S - s - 1) * 2 + (V - 1) * S, V * M) + (1 if V * M > (S - s - 1) * 2 + (V - 1) * S else 0)
        # chunk order: micro-batches in groups of S, depth-first through the chunks
        assert f[:S * V] == [v * M + i for v in range(V) for i in range(S)][:len(f[:S * V])]
        assert megatron_compute_order(S, M, V, s)[0] == [(k, x) for k, x in o if k != P2P]
    for link in range(S):  # the wrap link S-1 joins the last rank and the first
        n = [sum(k == P2P and x == link for k, x in orders[q]) for q in (link, (link + 1) % S)]
        assert n[0] == n[1] > 0


@pytest.mark.parametrize("sched", SCHEDULES)
@pytest.mark.parametrize("S,M", [(1, 1), (1, 4), (2, 1), (2, 4), (4, 4), (4, 8), (8, 3), (5, 16)])
def test_equal_stages_idle_the_ideal_bubble(sched, S, M):
    # f + b per micro-batch, no transfer, no host: step (M+S-1)(f+b), each stage idle (S-1)(f+b)
    f, b = 3_000, 7_000
    r = run_schedule([f] * S, [b] * S, [0] * (S - 1), M, sched)
    assert r.step_ns == (M + S - 1) * (f + b)
    assert r.idle_ns.tolist() == [(S - 1) * (f + b)] * S
    assert r.bubble_fraction == pytest.approx(ideal_bubble_fraction(S, M))


@pytest.mark.parametrize("S,M", [(1, 3), (2, 5), (4, 2), (4, 8), (6, 6)])
def test_activations_held(S, M):
    one = run_schedule([1] * S, [1] * S, [0] * (S - 1), M, "1f1b").held.tolist()
    gp = run_schedule([1] * S, [1] * S, [0] * (S - 1), M, "gpipe").held.tolist()
    assert one == [min(S - s, M) for s in range(S)]
    assert gp == [M] * S


def test_orders_hold_every_micro_batch_once_in_dependency_order():
    for sched in SCHEDULES:
        for S, M in [(3, 5), (4, 2)]:
            for s in range(S):
                o = stage_order(S, M, sched, s)
                f = [x for k, x in o if k == FWD]
                b = [x for k, x in o if k == BWD]
                assert sorted(f) == sorted(b) == list(range(M))
                assert all(o.index((FWD, i)) < o.index((BWD, i)) for i in range(M))
            for link in range(S - 1):  # both stages of a link take part in as many exchanges on it
                n = [sum(k == P2P and x == link for k, x in stage_order(S, M, sched, q)) for q in (link, link + 1)]
                assert n[0] == n[1] == (2 * M if sched == "gpipe" else M + min(S - 1 - link, M))


@pytest.mark.slow
@pytest.mark.parametrize("sched", SCHEDULES)
def test_job_report_bubble_equals_the_schedules(tmp_path, sched):
    """The job report's bubble (waits at send/recv, ``daydream/job/reporting.py``) on the emulated
    3-stage job equals the schedule model's per stage."""
    from daydream.job import analyze_job
    fwd, bwd, p2p, M = [100_000, 140_000, 90_000], [200_000, 260_000, 170_000], [12_000, 9_000], 4
    kw = {"call_ns": 2_000, "launch_latency_ns": 5_000, "gpu_gap_ns": 1_000}
    model = run_schedule(fwd, bwd, p2p, M, sched, **kw)
    job = emulate_job(pipeline_job(fwd, bwd, p2p, M, sched, p2p_bytes=4 << 20, **kw))
    res = analyze_job(write_job(job, tmp_path))
    assert [x.bubble_ns for x in res.report.idle] == model.bubble_ns.tolist()
    assert [x.peer_wait_ns for x in res.report.idle] == [0, 0, 0]
    assert [x.compute_ns for x in res.report.idle] == model.busy_ns.tolist()
    assert [x.transfer_ns for x in res.report.idle] == model.transfer_ns.tolist()


# ---------------------------------------------------------------- the pp what-if on a trace ------
_ITEM = re.compile(r"^pp stage (\d+)(?: chunk (\d+))? (forward|backward) micro-batch (\d+) ")
_XCH = re.compile(r"^ncclDevKernel_SendRecv pp link (\d+)-\d+ exchange (\d+) ")


@pytest.mark.slow
@settings(max_examples=40, deadline=None, derandomize=True)
@given(layered_steps(max_layers=6), st.integers(2, 4), st.integers(1, 6), st.sampled_from(SCHEDULES),
       st.integers(1, 1 << 24))
def test_pp_graph_runs_the_pipeline_the_emulator_runs(step, S, M, sched, act):
    """The what-if's graph, replayed, runs every stage's items and every exchange at the times the
    job emulator gives the stages' programs (given the plan's per-micro-batch times): one offset,
    the instant the pipeline starts."""
    assume(len(step.layers) >= S)
    _graph_runs_the_emulated_pipeline(step, S, M, sched, act, 1)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, derandomize=True)
@given(layered_steps(max_layers=6), st.sampled_from([(2, 2), (2, 3), (3, 2)]), st.integers(1, 3), st.integers(1, 1 << 24))
def test_pp_interleaved_graph_runs_the_pipeline_the_emulator_runs(step, SV, m, act):
    """As above for ``schedule=interleaved``: the layers cut into ``S V`` chunks, every chunk's
    items and every exchange (the wrap link too) at the job emulator's times."""
    S, V = SV
    assume(len(step.layers) >= S * V)
    _graph_runs_the_emulated_pipeline(step, S, S * m, "interleaved", act, V)


def _graph_runs_the_emulated_pipeline(step, S, M, sched, act, V):
    g = _graph(emulate(step.program()))
    opt, params = parse_spec(f"pp:stages={S},microbatches={M},schedule={sched},chunks={V},act_bytes={act},bandwidth=nvlink3")
    pl = plan(g, params)
    g2, note = opt.apply(g, params)
    tl = simulate(g2)
    names = g2.node_names()
    fs, bs = pl["stage_ns"][0]
    assert len(fs) == S * V and len(pl["p2p"]) == (S if V > 1 else S - 1)
    G = int(g.gpu_gap_ns)
    job = emulate_job(pipeline_job(fs, bs, pl["p2p"], M, sched, launch_latency_ns=G, gpu_gap_ns=G, chunks=V))
    t0 = job.runs[0].program.t0_ns
    emu, pred = {}, {}
    n_links = S if V > 1 else S - 1
    for s, run in enumerate(job.runs):
        for t in run.tasks:
            if t.name.startswith("pp_"):
                _, kind, x = t.name.split("_")
                v, mb = divmod(int(x), M) if V > 1 else (None, int(x))
                emu[(s, v, "forward" if kind == "fwd" else "backward", mb)] = (t.start_ns - t0, t.end_ns - t0)
        if s < n_links:  # the exchanges of link s: rank s's collectives in group pp_link_s, in order
            coll = job.collective_tasks(s)
            arr = job.rank_arrivals(s)
            k = 0
            for j, i in enumerate(coll):
                if run.program.threads[0].ops[job.places[s][j][1]].comm[0][1] == f"pp_link_{s}":
                    emu[("x", s, k)] = (arr[j] - t0, run.tasks[i].end_ns - t0)
                    k += 1
    for i, nm in enumerate(names.tolist()):
        m = _ITEM.match(nm) or _XCH.match(nm)
        if m is None:
            continue
        if m.re is _ITEM:
            key = (int(m.group(1)), None if m.group(2) is None else int(m.group(2)), m.group(3), int(m.group(4)))
        else:
            key = ("x", int(m.group(1)), int(m.group(2)))
        pred[key] = (int(tl.start_ns[i]), int(tl.end_ns[i]))
    assert set(pred) == set(emu), note
    k0 = (0, 0 if V > 1 else None, "forward", 0)
    off = pred[k0][0] - emu[k0][0]
    assert {k: (a - off, b - off) for k, (a, b) in pred.items()} == emu, note
    # the step's end (the final stream synchronize) waits for the pipeline's flush
    assert int(tl.end_ns.max()) >= max(b for _, b in pred.values())


def test_pp_one_stage_is_the_identity_and_cuts_balance():
    from daydream.testing.emulator.layered import LayeredStep, LayerOp
    op = LayerOp(7, 1_000, 2_000, 10_000, 1_500, 2_000, 20_000, 4096, 0)
    g = _graph(emulate(LayeredStep(((op,),) * 4, (1024,) * 4).program()))
    opt, params = parse_spec("pp:stages=1,microbatches=4")
    g2, _ = opt.apply(g, params)
    assert g2 is g
    assert cut_units(np.array([15, 25, 35, 45, 55, 65.0]), 3).tolist() == [0, 3, 5, 6]
    assert cut_units(np.ones(4), 4).tolist() == [0, 1, 2, 3, 4]
    assert cut_units(np.array([100.0, 1, 1, 1]), 3).tolist() == [0, 1, 2, 4]  # every stage keeps a unit


def test_pp_without_shapes_asks_for_act_bytes():
    """A trace whose kernels the kernel-cost library cannot describe (no shapes): not applicable,
    naming act_bytes (it was an IndexError: the forward kernels were read from the backward list)."""
    from daydream.errors import NotApplicable
    from daydream.testing.emulator.layered import LayeredStep, LayerOp
    op = LayerOp(7, 1_000, 2_000, 10_000, 1_500, 2_000, 20_000, 4096, 0)
    g = _graph(emulate(LayeredStep(((op,),) * 4, (1024,) * 4).program()))
    opt, params = parse_spec("pp:stages=2,microbatches=4,bandwidth=nvlink3")
    with pytest.raises(NotApplicable, match="act_bytes"):
        opt.apply(g, params)


@pytest.mark.slow
@pytest.mark.parametrize("path", __import__("test_tensor_parallel")._all_traces() or [None])
def test_one_stage_is_the_baseline_on_every_shared_trace(path):
    """pp:stages=1 through the facade: the predicted window is the replayed one on every shared
    trace (no pipeline: Megatron's no-pipelining path)."""
    if path is None:
        pytest.skip("shared traces not present")
    from daydream.analysis import analyze
    from daydream.formats import load_trace
    r = analyze(load_trace(path), ["pp:stages=1,microbatches=4"]).report
    assert not r.not_applicable
    for p in r.predictions:
        assert p.window.predicted_ns == p.window.replayed_ns


@pytest.mark.slow
@pytest.mark.parametrize("M", [1, 2, 4, 8])
def test_micro_batch_times_and_activation_bytes_from_shapes(M):
    """On an emulated MLP training step with shapes (4 blocks, tokens T, hidden H; H100): the
    send/recv carries the row GEMM's output before the cut, T x H fp32 / M; the forward kernels are
    re-costed at T/M tokens by the library (the identity at M = 1: the recorded stage times, and
    the backward by the forward share); no micro-batch is cheaper than 1/M of its step (a GEMM's
    weights and launch floor do not shrink with the batch)."""
    import tempfile

    from test_tensor_parallel import load_trace, mlp_training_step, to_kineto

    from daydream.graph import build_graph
    from daydream.mapping import map_events

    T, H = 256, 64
    prog, _ = mlp_training_step(4, T, H)
    run = emulate(prog)
    with tempfile.TemporaryDirectory() as d:
        p = d + "/t.json"
        to_kineto(run, p)
        t = load_trace(p)
        g = build_graph(t, map_events(t))
    opt, params = parse_spec(f"pp:stages=2,microbatches={M},gpu=H100 SXM,bandwidth=nvlink4")
    pl = plan(g, params)
    assert pl["act"].tolist() == [T * H * 4 // M]
    assert pl["how"].startswith(f"12 forward kernels re-costed at batch/{M}")
    (f, bw), u = pl["steps"][0], pl["units"][0]
    st_of = np.searchsorted(pl["bounds"], np.arange(pl["n_units"]), "right") - 1
    rec = np.bincount(st_of[u], weights=g.dur_ns[f], minlength=2)
    fs, bs = pl["stage_ns"][0]
    if M == 1:
        assert fs.tolist() == rec.astype(np.int64).tolist()
        assert bs.tolist() == np.rint(g.dur_ns[bw].sum() * rec / rec.sum()).astype(np.int64).tolist()
    assert (fs * M >= rec - M).all()
    _, note = opt.apply(g, params)
    assert "2-stage pipeline" in note


def test_pp_pipelines_every_profiler_step():
    """Two ProfilerSteps of the same layered step: one pipeline each, the same stage times, and
    the second runs its items at the first's offsets from its own start (items have no launches:
    they follow the step's first forward kernel)."""
    import dataclasses

    from daydream.testing.emulator import RangeBegin
    from daydream.testing.emulator.layered import LayeredStep, LayerOp
    ops = lambda k: (LayerOp(7, 1_000, 2_000, k, 1_500, 2_000, 2 * k, 4096, 0),
                     LayerOp(8, 1_000, 2_000, 5_000, 1_500, 2_000, 10_000, 4096, 0))
    p1 = LayeredStep(tuple(ops(10_000 * (i + 1)) for i in range(4)), (1024,) * 4, 7, (0,) * 4).program()
    first = list(p1.threads[0].ops)
    second = [RangeBegin("ProfilerStep#2") if isinstance(o, RangeBegin) and o.name == "ProfilerStep#1" else o for o in first]
    prog = dataclasses.replace(p1, threads=(dataclasses.replace(p1.threads[0], ops=tuple(first + second)),))
    g = _graph(emulate(prog))
    opt, params = parse_spec("pp:stages=2,microbatches=3,act_bytes=100000,bandwidth=nvlink3")
    pl = plan(g, params)
    assert len(pl["steps"]) == 2
    assert [x.tolist() for x in pl["stage_ns"][0]] == [x.tolist() for x in pl["stage_ns"][1]]
    g2, _ = opt.apply(g, params)
    tl = simulate(g2)
    names = g2.node_names()
    items = np.nonzero(np.char.startswith(names.astype(str), "pp stage "))[0]
    n_per = len(items) // 2
    assert len(items) == 2 * n_per == 2 * 2 * 2 * 3  # 2 steps x 2 stages x (3 forwards + 3 backwards)
    s = tl.start_ns[items]
    o = np.argsort(s, kind="stable")
    a, b = s[o[:n_per]], s[o[n_per:]]
    assert (a - a[0]).tolist() == (b - b[0]).tolist()
    assert b[0] >= tl.end_ns[items[o[:n_per]]].max()  # the second step's pipeline after the first's flush


# ---------------------------------------------------------------- per-stage memory ------
def _stage_memory_case(step, S, M, sched, state, V=1):
    """(prediction per stage GPU: (peak, step peaks), the emulator's run of the stages' programs
    with the allocations the pipeline's semantics make, note)."""
    import dataclasses

    from daydream.simulate.memory_replay import replay_memory
    from daydream.testing.emulator import Allocate, HostWork, emulate, memory_peaks

    prog = step.program()
    th = prog.threads[0]
    if state:  # the model's state, allocated before the step and held (parameters)
        th = dataclasses.replace(th, ops=[Allocate(state, addr=0x100000), HostWork(1_000), *th.ops])
    prog = dataclasses.replace(prog, threads=[th])
    g = _graph(emulate(prog))
    opt, params = parse_spec(f"pp:stages={S},microbatches={M},schedule={sched},chunks={V},act_bytes=4096,bandwidth=nvlink3")
    pl = plan(g, params)
    g2, note = opt.apply(g, params)
    pred = {dm.device: (dm.peak_allocated_bytes, [s.allocated_bytes for s in dm.steps]) for dm in replay_memory(g2, simulate(g2))
            if dm.device >= 0}
    # the semantics: chunk s (rank s % S) runs layers [b[s], b[s+1]); a micro-batch's forward allocates each of its
    # ops' tensors at 1/M (ceil): the activation, the temporary (freed after the op's launch), the layer's output
    b = pl["bounds"]
    c = (lambda x: -(-x // M))
    fwd_mem, rec = [], []
    for s in range(S * V):
        ev = []
        for i in range(int(b[s]), int(b[s + 1])):
            for j, op in enumerate(step.layers[i]):
                ev.append((c(op.act_bytes), ("act", i, j)))
                if op.tmp_bytes:
                    ev.append((c(op.tmp_bytes), ("tmp", i, j)))
                if j == len(step.layers[i]) - 1:
                    ev.append((c(step.out_bytes[i]), ("out", i)))
                if op.tmp_bytes:
                    ev.append((-c(op.tmp_bytes), ("tmp", i, j)))
        fwd_mem.append(ev)
        rec.append(sum(op.fwd_kernel_ns for i in range(int(b[s]), int(b[s + 1])) for op in step.layers[i]))
    if not sum(rec):
        rec = np.diff(b).tolist()
    rec = [sum(rec[s::S]) for s in range(S)]  # a rank's chunks
    state_s = [state * int(x) // int(sum(rec)) for x in rec]
    fs, bs = pl["stage_ns"][0]
    job = emulate_job(pipeline_job(fs, bs, pl["p2p"], M, sched, state_bytes=state_s, fwd_mem=fwd_mem,
                                   call_ns=1_000, chunks=V))
    emu = {}
    for s, run in enumerate(job.runs):
        pk = memory_peaks(run, ("ProfilerStep#1",)).get(0, (0, [0]))
        emu[0 if s == 0 else s] = pk
    return pred, emu, note


@pytest.mark.slow
@settings(max_examples=40, deadline=None, derandomize=True)
@given(layered_steps(max_layers=6), st.integers(2, 4), st.integers(1, 6), st.sampled_from(SCHEDULES),
       st.sampled_from([0, 1 << 20, 12_345_678]))
def test_pp_stage_peaks_equal_the_emulated_stages(step, S, M, sched, state):
    """Each stage's (rank's) predicted peak and step peak equal the job emulator's run of the
    stages' programs allocating, per micro-batch, their layers' tensors at 1/M and holding their
    share of the model's state: ``state_s + activations held x`` a micro-batch's activations (plus
    the forward's temporaries)."""
    assume(len(step.layers) >= S)
    pred, emu, note = _stage_memory_case(step, S, M, sched, state)
    assert pred == emu, note


@pytest.mark.slow
@settings(max_examples=40, deadline=None, derandomize=True)
@given(layered_steps(max_layers=6), st.sampled_from([(2, 2), (2, 3), (3, 2)]), st.integers(1, 3),
       st.sampled_from([0, 1 << 20, 12_345_678]))
def test_pp_interleaved_stage_peaks_equal_the_emulated_stages(step, SV, m, state):
    """As above for ``schedule=interleaved``: each rank's forward of chunk ``v`` allocates that
    chunk's layers' tensors at 1/M and its backward frees them; every rank's peak and step peak
    equal the job emulator's."""
    S, V = SV
    assume(len(step.layers) >= S * V)
    pred, emu, note = _stage_memory_case(step, S, S * m, "interleaved", state, V)
    assert pred == emu, note


def test_pp_stage_memory_holds_the_schedules_micro_batches():
    """Four equal one-op layers of 1 MiB activations, no temporaries, 4 stages of 8 micro-batches:
    1F1B holds min(S-s, M) = 4/3/2/1 micro-batches of 128 KiB (+ the layer output's 1/8), GPipe 8 on every stage."""
    from daydream.testing.emulator.layered import LayeredStep, LayerOp
    op = LayerOp(7, 1_000, 2_000, 10_000, 1_500, 2_000, 20_000, 1 << 20, 0)
    step = LayeredStep(((op,),) * 4, (1 << 20,) * 4)
    mb = (1 << 20) // 8 * 2  # activation + output per micro-batch
    for sched, held in (("1f1b", [4, 3, 2, 1]), ("gpipe", [8] * 4)):
        pred, emu, note = _stage_memory_case(step, 4, 8, sched, 4 << 20)
        assert pred == emu, note
        assert [pred[d][0] for d in sorted(pred)] == [(1 << 20) + h * mb for h in held], note


@pytest.mark.parametrize("spec,needle", [
    ("pp:stages=4,microbatches=6,schedule=interleaved,chunks=2,act_bytes=4096", "multiple of stages"),
    ("pp:stages=2,microbatches=4,schedule=1f1b,chunks=2,act_bytes=4096", "needs schedule=interleaved"),
])
def test_pp_interleaved_bad_spec_exits_2_with_one_line(spec, needle, capsys):
    """Megatron refuses an interleaved run whose micro-batches are not a multiple of the stages;
    ``chunks`` without the interleaved schedule is a mistake: one line, exit 2, no traceback."""
    from pathlib import Path

    from daydream.cli import main
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "train_step.json.gz"
    code = main([str(fixture), "--opt", spec])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and needle in err[0] and "Traceback" not in err[0]


@pytest.mark.parametrize("S,V,M", [(2, 2, 2), (2, 3, 4), (4, 2, 8), (4, 3, 4), (5, 2, 15)])
def test_interleaved_activations_held(S, V, M):
    """Megatron's order holds, at its peak, its warm-up forwards ``w = (S-s-1) 2 + (V-1) S`` plus
    the first steady-state forward (each pair then backwards one), all ``V M`` when ``w >= V M``:
    chunk-micro-batches (rank 0 at S=4, V=2, M=8: 11 of 1/2 a stage's each, vs 1F1B's 4 whole)."""
    r = run_schedule([1] * (S * V), [1] * (S * V), [0] * S, M, "interleaved", chunks=V)
    want = [min((S - s - 1) * 2 + (V - 1) * S + 1, V * M) for s in range(S)]
    assert r.held.tolist() == want


@pytest.mark.slow
def test_interleaved_orders_agree_and_never_deadlock():
    """The claim of docs/distributed.md: for 2-6 ranks, 2-4 chunks and M up to 3S, the two ranks of
    every link agree on its exchanges' order (``interleaved_orders`` raises otherwise) and the
    schedule runs to the end (``run_schedule`` raises on a deadlock), every rank idling the bubble."""
    for S in range(2, 7):
        for V in range(2, 5):
            for M in (S, 2 * S, 3 * S):
                r = run_schedule([5] * (S * V), [9] * (S * V), [0] * S, M, "interleaved", chunks=V)
                assert r.idle_ns.tolist() == [(S - 1) * 14] * S


@pytest.mark.slow
def test_job_report_bubble_equals_the_interleaved_schedules(tmp_path):
    """As ``test_job_report_bubble_equals_the_schedules`` for 3 ranks of 2 chunks each (the wrap
    link's group joins ranks 2 and 0): the job report's bubble, compute and transfer per rank
    equal the schedule model's."""
    from daydream.job import analyze_job
    fwd = [100_000, 140_000, 90_000, 80_000, 120_000, 60_000]
    bwd = [200_000, 260_000, 170_000, 150_000, 230_000, 120_000]
    p2p, M = [12_000, 9_000, 15_000], 6
    kw = {"call_ns": 2_000, "launch_latency_ns": 5_000, "gpu_gap_ns": 1_000, "chunks": 2}
    model = run_schedule(fwd, bwd, p2p, M, "interleaved", **kw)
    job = emulate_job(pipeline_job(fwd, bwd, p2p, M, "interleaved", p2p_bytes=4 << 20, **kw))
    res = analyze_job(write_job(job, tmp_path))
    assert [x.bubble_ns for x in res.report.idle] == model.bubble_ns.tolist()
    assert [x.peer_wait_ns for x in res.report.idle] == [0, 0, 0]
    assert [x.compute_ns for x in res.report.idle] == model.busy_ns.tolist()
    assert [x.transfer_ns for x in res.report.idle] == model.transfer_ns.tolist()
