"""The CPU what-ifs (``dataloader``, ``scale-cpu``, ``remove-syncs``) and the critical path across
threads, on emulated programs with known answers: the prediction made from the baseline trace
equals the emulator's run of the changed program (``daydream/testing/emulator/``)."""

from __future__ import annotations

import pytest
import dataclasses

import numpy as np
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from daydream.errors import NotApplicable
from daydream.formats import load_trace
from daydream.graph import build_graph
from daydream.mapping.rules import PHASES
from daydream.mapping import map_events
from daydream.optimizations import parse_spec
from daydream.simulate.critical_path import critical_path
from daydream.simulate import simulate
from daydream.testing.emulator import (
    Handover,
    HostWork,
    Launch,
    OtherCall,
    Program,
    RangeBegin,
    RangeEnd,
    StreamSync,
    Thread,
    WaitHandover,
    emulate,
    measure_latencies,
    to_kineto,
)

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
DL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
L, G = 5_000, 1_000


def _graph(tmp, prog):
    run = emulate(prog)
    p = tmp / "t.json"
    to_kineto(run, str(p))
    t = load_trace(str(p))
    return run, build_graph(t, map_events(t))


def _gpu(g, tl):
    """Replayed (start, end) of the recorded GPU tasks, in start order."""
    m = ~g.is_cpu & (g.row >= 0)
    return sorted(zip(tl.start_ns[m].tolist(), tl.end_ns[m].tolist()))


def _gpu_run(run):
    return sorted((t.start_ns, t.end_ns) for t in run.tasks)


def _predict(g, spec):
    opt, params = parse_spec(spec)
    g2, note = opt.apply(g, params)
    return g2, simulate(g2), note


# ------------------------------------------------------------------------------ dataloader ---
@st.composite
def loader_programs(draw):
    """A training thread: per step, a DataLoader fetch (host work in the DataLoader range), then
    host work and kernel launches, and a stream sync at the end of the step."""
    steps = draw(st.integers(2, 6))
    fetch = [draw(st.integers(10_000, 400_000)) for _ in range(steps)]
    post = [draw(st.integers(0, 20_000)) for _ in range(steps)]
    kern = [[draw(st.integers(1_000, 150_000)) for _ in range(draw(st.integers(1, 3)))] for _ in range(steps)]
    return steps, fetch, post, kern


def _loader_main(fetch, post, kern, sync_own=2_000, call=3_000):
    ops = []
    for k in range(len(fetch)):
        ops += [RangeBegin(DL), HostWork(fetch[k]), RangeEnd(), HostWork(post[k])]
        ops += [Launch(7, "gemm_fwd", d, call) for d in kern[k]]
        ops.append(StreamSync(7, sync_own))
    return ops


def _loader_changed(fetch, post, kern, workers, prefetch, h, sync_own=2_000, call=3_000):
    """The same training with ``workers`` DataLoader workers (the mechanism of the module doc)."""
    ahead = workers * prefetch
    n = len(fetch)
    main = []
    for k in range(n):
        if k == 0:
            main += [HostWork(h + post[0])]
        else:
            main += [WaitHandover(("ready", k)), OtherCall("cudaGetDevice", h)]
            if k + ahead < n:
                main.append(Handover(("req", k + ahead)))
            main.append(HostWork(post[k]))
        main += [Launch(7, "gemm_fwd", d, call) for d in kern[k]]
        if k == 0 and ahead < n:
            main.insert(len(main) - len(kern[k]) + 1, Handover(("req", ahead)))
        main.append(StreamSync(7, sync_own))
    threads = [Thread(main, tid=4242)]
    for w in range(workers):
        ops = []
        for k in range(w, n, workers):
            if k >= ahead:
                ops += [WaitHandover(("req", k)), HostWork(fetch[k])]
            ops += [OtherCall("cudaGetDevice", 0), Handover(("ready", k))]
        if ops:
            threads.append(Thread(ops, tid=9000 + w, name=f"worker{w}"))
    return Program(threads, launch_latency_ns=L, gpu_gap_ns=G)


@SETTINGS
@given(loader_programs(), st.integers(1, 3), st.integers(1, 2), st.integers(0, 50_000))
def test_dataloader_predicts_the_program_with_workers(tmp_path_factory, spec, workers, prefetch, h):
    steps, fetch, post, kern = spec
    prog = Program([Thread(_loader_main(fetch, post, kern))], launch_latency_ns=L, gpu_gap_ns=G)
    run, g = _graph(tmp_path_factory.mktemp("t"), prog)
    assume(measure_latencies(run) == (L, G))
    g2, tl2, note = _predict(g, f"dataloader:num_workers={workers},prefetch_factor={prefetch},handoff_us={h / 1e3}")
    changed = emulate(_loader_changed(fetch, post, kern, workers, prefetch, h))
    assert _gpu(g2, tl2) == _gpu_run(changed)
    assert f"{steps} batches" in note


def test_dataloader_workers_slower_than_the_step_bound_it():
    """One worker fetching 1 ms batches for 0.1 ms steps: the step waits for the worker (the
    prediction is not simply 'data loading removed')."""
    import tempfile
    from pathlib import Path

    fetch, post, kern = [1_000_000] * 6, [0] * 6, [[50_000]] * 6
    prog = Program([Thread(_loader_main(fetch, post, kern))], launch_latency_ns=L, gpu_gap_ns=G)
    with tempfile.TemporaryDirectory() as d:
        run, g = _graph(Path(d), prog)
    g2, tl2, _ = _predict(g, "dataloader:num_workers=1,prefetch_factor=1,handoff_us=0")
    changed = emulate(_loader_changed(fetch, post, kern, 1, 1, 0))
    assert _gpu(g2, tl2) == _gpu_run(changed)
    end_base, end_pred = max(e for _, e in _gpu_run(run)), max(e for _, e in _gpu(g2, tl2))
    assert end_pred > g.t0_ns + 4 * 1_000_000  # still about one fetch per step after the prefetched one
    assert end_pred < end_base


@SETTINGS
@given(loader_programs(), st.integers(1, 3), st.integers(1, 2), st.integers(0, 50_000), st.sampled_from([0.0, 0.5, 2.0, 3.0]))
@example((3, [10698, 19520, 114667], [13254, 0, 13513], [[1000], [1000], [46591, 1000]]), 3, 2, 0, 0.0)  # all prefetched (CI)
def test_scale_cpu_after_dataloader_scales_the_workers_fetches(tmp_path_factory, spec, workers, prefetch, h, f):
    """dataloader, then scale-cpu of the DataLoader ranges: the workers' fetches and the hand-offs
    (the multi-process iterator's __next__) take f times as long, as in the program whose workers
    fetch f times as long (before, the fetches moved to the workers kept their recorded length)."""
    steps, fetch, post, kern = spec
    prog = Program([Thread(_loader_main(fetch, post, kern))], launch_latency_ns=L, gpu_gap_ns=G)
    run, g = _graph(tmp_path_factory.mktemp("t"), prog)
    assume(measure_latencies(run) == (L, G))
    g1, tl1, _ = _predict(g, f"dataloader:num_workers={workers},prefetch_factor={prefetch},handoff_us={h / 1e3}")
    sc = [int(np.rint(x * f)) for x in fetch]
    changed = emulate(_loader_changed(sc, post, kern, workers, prefetch, int(np.rint(h * f))))
    try:
        g2, tl2, _ = _predict(g1, f"scale-cpu:range=DataLoader,factor={f}")
    except NotApplicable:  # every batch prefetched and no hand-off cost: no DataLoader host time is left to scale
        assert steps <= workers * prefetch and h == 0
        g2, tl2 = g1, tl1
    assert _gpu(g2, tl2) == _gpu_run(changed)


# ------------------------------------------------------------------------------- scale-cpu ---
from test_handover import ENGINE, _unambiguous, handover_programs  # noqa: E402


def _scale_in_ranges(prog, tid: int | None, name: str, f: float) -> Program:
    """The program with the host work and call costs inside ranges named ``name`` scaled by ``f``
    (on thread ``tid``, or every thread)."""
    threads = []
    for th in prog.threads:
        depth, ops = 0, []
        for op in th.ops:
            if isinstance(op, RangeBegin):
                depth += op.name == name
            elif isinstance(op, RangeEnd):
                depth = max(depth - 1, 0)  # ranges in these programs do not nest
            elif depth and (tid is None or th.tid == tid):
                if isinstance(op, HostWork):
                    op = HostWork(int(np.rint(op.dur_ns * f)))
                elif hasattr(op, "call_dur_ns"):
                    op = dataclasses.replace(op, call_dur_ns=int(np.rint(op.call_dur_ns * f)))
            ops.append(op)
        threads.append(dataclasses.replace(th, ops=tuple(ops)))
    return dataclasses.replace(prog, threads=tuple(threads))


def _main_calls(run):
    return [(c.start_ns, c.end_ns) for c in run.thread_calls(0)]


def _main_pred(g, tl):
    m = g.is_cpu & (g.row >= 0) & (g.tid == 4242)
    return sorted(zip(tl.start_ns[m].tolist(), tl.end_ns[m].tolist()))


@pytest.mark.slow
@SETTINGS
@given(handover_programs(), st.sampled_from([0.0, 0.5, 2.0]))
def test_scale_cpu_on_the_autograd_thread_moves_the_main_thread(tmp_path_factory, prog, f):
    """Two threads: the autograd thread's engine ops take f times as long; the main thread, which
    waits for them in backward(), moves by what the emulator says."""
    run, g = _graph(tmp_path_factory.mktemp("t"), prog)
    assume(measure_latencies(run) == (prog.L, prog.G) and _unambiguous(run))
    changed = emulate(_scale_in_ranges(prog, None, ENGINE, f))
    assume([(c.thread, c.op_index) for c in run.calls] == [(c.thread, c.op_index) for c in changed.calls])
    g2, tl2, note = _predict(g, f"scale-cpu:range={ENGINE.split(':')[0].upper()},factor={f}")  # case-insensitive
    assert _gpu(g2, tl2) == _gpu_run(changed)
    assert _main_pred(g2, tl2) == _main_calls(changed)
    assert "left alone" in note


def test_scale_cpu_not_applicable_without_a_match(tmp_path):
    import pytest
    from daydream.errors import NotApplicable

    prog = Program([Thread([RangeBegin("aten::mm", "cpu_op"), HostWork(10_000), Launch(7, "k", 5_000, 2_000), RangeEnd()])])
    _, g = _graph(tmp_path, prog)
    with pytest.raises(NotApplicable, match="no CPU range"):
        _predict(g, "scale-cpu:range=nothing_like_this,factor=0.5")


def test_scale_cpu_on_a_cpu_only_trace_says_it_has_no_api_calls(capsys):
    """hta/cpu_only (210 ms of CPU ops, no CUDA call): the model carries host time on API calls and
    the gaps before them, so there is nothing to scale; the reason said "no host time lies inside
    them" of a trace that is all host time (fourth try-out)."""
    from pathlib import Path

    import pytest
    from daydream.cli import main

    trace = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "hta" / "cpu_only.json.gz"
    if not trace.exists():
        pytest.skip("../shared/traces/hta absent")
    assert main(["--details", str(trace), "--opt", "scale-cpu:range=."]) == 3
    out = capsys.readouterr()
    assert "no host time lies inside" not in out.out
    assert ("prediction: scale-cpu: not applicable: CPU ranges match '.', but the trace has no CUDA API calls: host time is "
            "carried by the calls and the CPU gaps before them (docs/model.md), so a trace without calls has none to scale") in out.out


# ---------------------------------------------------------------------------- remove-syncs ---
from daydream.testing.emulator import MemcpyAsync  # noqa: E402


@st.composite
def item_programs(draw):
    """Per step: kernels, then ``loss.item()`` (a DtoH copy inside aten::item ->
    aten::_local_scalar_dense, blocking itself (pageable) or followed by a stream sync), then host
    work; the changed program reads the value without waiting."""
    ops, changed = [], []
    for _ in range(draw(st.integers(1, 4))):
        for _ in range(draw(st.integers(1, 3))):
            op = [HostWork(draw(st.integers(0, 30_000))), Launch(7, "gemm", draw(st.integers(1_000, 200_000)), draw(st.integers(1_000, 8_000)))]
            ops += op
            changed += op
        pageable = draw(st.booleans())
        cd, own = draw(st.integers(1_000, 10_000)), draw(st.integers(500, 5_000))
        head = [RangeBegin("aten::item", "cpu_op"), RangeBegin("aten::_local_scalar_dense", "cpu_op")]
        copy = MemcpyAsync(7, "DtoH", 4, draw(st.integers(1_000, 5_000)), cd, host_memory="pageable" if pageable else "pinned")
        ops += [*head, copy] + ([] if pageable else [StreamSync(7, own)]) + [RangeEnd(), RangeEnd()]
        changed += [*head, dataclasses.replace(copy, host_memory="pinned")] + ([] if pageable else [OtherCall("cudaGetDevice", own)]) + [RangeEnd(), RangeEnd()]
        tail = [HostWork(draw(st.integers(0, 30_000)))]
        ops += tail
        changed += tail
    ops.append(Launch(7, "last", 1_000, 1_000))
    changed.append(Launch(7, "last", 1_000, 1_000))
    return Program([Thread(ops)], launch_latency_ns=L, gpu_gap_ns=G), Program([Thread(changed)], launch_latency_ns=L, gpu_gap_ns=G)


@SETTINGS
@given(item_programs())
def test_remove_syncs_predicts_the_program_that_reads_later(tmp_path_factory, progs):
    prog, changed_prog = progs
    run, g = _graph(tmp_path_factory.mktemp("t"), prog)
    assume(measure_latencies(run) == (L, G))
    g2, tl2, note = _predict(g, "remove-syncs")
    changed = emulate(changed_prog)
    assert _gpu(g2, tl2) == _gpu_run(changed)
    assert _main_pred(g2, tl2) == _main_calls(changed)
    assert "aten::_local_scalar_dense" in note and "Memcpy DtoH" in note


def test_remove_syncs_leaves_input_copies_alone(tmp_path):
    import pytest
    from daydream.errors import NotApplicable

    prog = Program([Thread([Launch(7, "k", 50_000, 2_000), RangeBegin("aten::copy_", "cpu_op"),
                            MemcpyAsync(7, "HtoD", 4, 2_000, 3_000, host_memory="pinned"), StreamSync(7, 1_000), RangeEnd()])])
    _, g = _graph(tmp_path, prog)
    with pytest.raises(NotApplicable, match="no .item"):
        _predict(g, "remove-syncs")


# ------------------------------------------------------- critical path across threads, answer ---
def _report(tmp, prog, opts=(), rank_all=False):
    from daydream.analysis import analyze

    run = emulate(prog)
    p = tmp / "t.json"
    to_kineto(run, str(p))
    return run, analyze(load_trace(str(p)), list(opts), rank_all=rank_all).report


@SETTINGS
@given(handover_programs())
def test_the_wait_in_backward_is_charged_to_the_engine_thread(tmp_path_factory, prog):
    """The main thread idles in backward() while the autograd thread works: the critical path
    charges that time to the autograd thread's ranges, and names the wait."""
    run, r = _report(tmp_path_factory.mktemp("t"), prog)
    assume(measure_latencies(run) == (prog.L, prog.G) and _unambiguous(run))
    cp = r.critical_path
    waits = [w for w in cp.waits if w.waiter == "thread 4242" and w.waited_for == "thread 5001"]
    if waits:
        assert all(w.engine for w in waits)
        assert sum(w.ns for w in waits) <= cp.length_ns
    # no engine thread's idle time between backward passes is called a wait for the main thread
    assert not [w for w in cp.waits if w.waiter == "thread 5001" and w.waited_for == "thread 4242"]
    assert sum(cp.by_range_ns.values()) <= cp.by_cause_ns["cpu"] + cp.by_cause_ns["sync"] + 1


def test_data_loading_bounds_the_step_and_is_charged_to_the_dataloader(tmp_path):
    fetch, post, kern = [3_000_000] * 4, [10_000] * 4, [[200_000, 100_000]] * 4
    prog = Program([Thread([RangeBegin("ProfilerStep#1"), *_loader_main(fetch, post, kern), RangeEnd()])],
                   launch_latency_ns=L, gpu_gap_ns=G)
    run, r = _report(tmp_path, prog, rank_all=True)
    cp = r.critical_path
    # the phase takes whole gaps (by their midpoint, docs/mapping.md); the ranges split them exactly
    assert sum(fetch) <= cp.by_phase_ns["data_loading"]["cpu"] <= sum(fetch) + sum(post)
    assert cp.by_range_ns[DL] == sum(fetch)
    a = r.summary.answer
    assert a.bound_by == "data loading" and DL in a.bound_detail
    assert list(a.whatifs)[0] == "dataloader" and a.whatifs["dataloader"] > 1.5
    from daydream.render.text import render_text

    first = " ".join(x.strip() for x in render_text(r).split("\n\n", 1)[0].splitlines())  # the answer, wrapped at 100 columns
    assert first.startswith("answer: ") and "bound by data loading" in first and "try dataloader" in first
    assert r.summary.top_cpu_ranges[0].name == DL and r.summary.top_cpu_ranges[0].path_pct > 80
    assert [d.device for d in r.summary.gpu_devices] == [0]


def test_named_optimization_that_does_not_apply_exits_3(tmp_path, capsys):
    from daydream.cli import main

    prog = Program([Thread([Launch(7, "k", 50_000, 2_000), StreamSync(7, 1_000)])], launch_latency_ns=L, gpu_gap_ns=G)
    p = tmp_path / "t.json"
    to_kineto(emulate(prog), str(p))
    assert main(["--details", str(p), "--opt", "dataloader"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("daydream-analyze: not applicable: dataloader: no single-process DataLoader range")
    assert main(["--details", str(p), "--opt", "all"]) == 0


# ------------------------------------------------------------------- the new primitives ---
def test_new_primitives_refuse_misuse(tmp_path):
    import pytest
    from daydream.errors import DaydreamError
    from daydream.graph import EdgeKind
    from daydream.transform import add_thread, remove_edges, set_gap

    prog = Program([Thread([HostWork(5_000), Launch(7, "k", 50_000, 2_000), HostWork(7_000), StreamSync(7, 1_000)])],
                   launch_latency_ns=L, gpu_gap_ns=G)
    _, g = _graph(tmp_path, prog)
    with pytest.raises(DaydreamError, match="only CPU tasks"):
        set_gap(g, ~g.is_cpu, 0)
    with pytest.raises(DaydreamError, match="lane-order and launch"):
        remove_edges(g, g.edge_kind == EdgeKind.LAUNCH)
    cpu = int(np.nonzero(g.is_cpu)[0][0])
    with pytest.raises(DaydreamError, match="exists already"):
        add_thread(g, pid=int(g.pid[cpu]), tid=int(g.tid[cpu]), like=cpu, dur_ns=[1], gap_ns=[0], names=["x"])
    # removing the wait: the sync returns after its own cost; nothing else moves
    g2 = remove_edges(g, g.edge_kind == EdgeKind.WAIT)
    tl, tl2 = simulate(g), simulate(g2)
    sync = int(np.nonzero(g.blocking)[0][0])
    assert tl2.end_ns[sync] == tl2.start_ns[sync] + g.dur_ns[sync] < tl.end_ns[sync]
    assert (tl2.start_ns[~g.is_cpu] == tl.start_ns[~g.is_cpu]).all()
    # a new thread runs its tasks in order, from the trace start, each after its gap
    g3, new = add_thread(g, pid=1, tid=2, like=cpu, dur_ns=[10, 20], gap_ns=[5, 7], names=["a", "b"])
    tl3 = simulate(g3)
    assert tl3.start_ns[new].tolist() == [g.t0_ns + 5, g.t0_ns + 5 + 10 + 7]
    g4 = set_gap(g, np.arange(g.n) == cpu, 0)
    assert simulate(g4).start_ns[cpu] == g.t0_ns


# --------------------------------------------------------------- step boundaries in a what-if ---
def _stepped_loader(fetch, post, kern, tail, sync_own=2_000, call=3_000):
    """_loader_main with each step in a ProfilerStep range that opens with the DataLoader fetch and
    closes after ``tail`` ns of host work following the step's stream sync."""
    ops = []
    for k in range(len(fetch)):
        ops += [RangeBegin(f"ProfilerStep#{k}"), RangeBegin(DL), HostWork(fetch[k]), RangeEnd(), HostWork(post[k])]
        ops += [Launch(7, "gemm_fwd", d, call) for d in kern[k]]
        ops += [StreamSync(7, sync_own), HostWork(tail[k]), RangeEnd()]
    return ops


@SETTINGS
@given(loader_programs(), st.sampled_from([0.0, 2.0, 10.0]), st.data())
def test_scale_cpu_keeps_each_step_its_own_data_loading(tmp_path_factory, spec, f, data):
    """scale-cpu of the DataLoader range that opens each ProfilerStep: every predicted step
    boundary is where the emulator's run of the changed program has it (was: the boundary kept its
    recorded distance to the step's first call, so each step carried the next one's fetch)."""
    from daydream.report.windows import step_windows

    steps, fetch, post, kern = spec
    tail = [data.draw(st.integers(0, 30_000)) for _ in range(steps)]
    prog = Program([Thread(_stepped_loader(fetch, post, kern, tail))], launch_latency_ns=L, gpu_gap_ns=G)
    run, g = _graph(tmp_path_factory.mktemp("t"), prog)
    assume(measure_latencies(run) == (L, G))
    g2, tl2, _ = _predict(g, f"scale-cpu:range=DataLoader,factor={f}")
    changed = emulate(_scale_in_ranges(prog, None, DL, f))
    assert _gpu(g2, tl2) == _gpu_run(changed)
    want = [(r.start_ns, r.end_ns) for r in changed.ranges if r.name.startswith("ProfilerStep#")]
    got = [(w.replayed_cpu_start_ns, w.replayed_cpu_end_ns) for w in step_windows(g2, tl2)]
    assert got == want
