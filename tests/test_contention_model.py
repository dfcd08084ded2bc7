"""The contention model (docs/model.md, "Contention between streams"): a kernel that starts while
another stream's kernel of its device runs lasts ``f`` x its duration. The emulator runs programs
under that rule (``emulate(prog, contention=f)``, its own implementation); daydream's replay of the
trace with the model on (``with_contention``) must give the emulator's run to the nanosecond, and
a prediction (scale-kernels) the emulator's run of the changed program with the same ``f``."""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from daydream.errors import DaydreamError
from daydream.events.table import Kind
from daydream.formats import load_trace
from daydream.graph import NODE_CPU, build_graph
from daydream.graph.contention import started_overlapped, stretched_ns, with_contention
from daydream.simulate import simulate, simulate_events
from daydream.simulate import stretched_replay as sim_contention
from daydream.simulate.replay import replay
from daydream.testing.emulator import DeviceSync, GraphLaunch, Launch, Program, RangeBegin, RangeEnd, Thread, emulate, measure_latencies, programs, to_kineto
from daydream.transform import scale, set_priority
from emulated_checks import cross_device_waits


def _graph(run):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.json"
        to_kineto(run, str(p))
        return build_graph(load_trace(str(p)))


def _times(run, graph, tl):
    """(expected, got): {correlation: (start, end)} of calls and of GPU tasks (plus graph node)."""
    corr = graph.table.correlation[graph.row]
    cpu = graph.node_kind == NODE_CPU
    exp = ({c.correlation: (c.start_ns, c.end_ns) for c in run.calls},
           sorted((t.correlation, t.start_ns, t.end_ns) for t in run.tasks))
    got = ({int(c): (int(s), int(e)) for c, s, e in zip(corr[cpu], tl.start_ns[cpu], tl.end_ns[cpu])},
           sorted((int(c), int(s), int(e)) for c, s, e in zip(corr[~cpu], tl.start_ns[~cpu], tl.end_ns[~cpu])))
    return exp, got


def _holds_the_rule(g, tl) -> bool:
    """Every kernel of the replay ``tl`` of ``g`` lasts f x its duration (rounded half up) exactly
    when another stream's kernel of its device was running at its start, else its duration."""
    k = np.flatnonzero(g.node_kind == Kind.KERNEL)
    dev, stream = g.lane_keys[g.lane[k], 2], g.lane_keys[g.lane[k], 3]
    over = started_overlapped(tl.start_ns[k], tl.end_ns[k], dev, stream)
    want = np.where(over, stretched_ns(g.dur_ns[k], g.contention_factor), g.dur_ns[k])
    return ((tl.end_ns[k] - tl.start_ns[k]) == want + tl.blocked_ns[k]).all() and tl.contention_stretched == int(over.sum())


def _two_streams(long_ns=100_000):
    ops = [Launch(7, "long", long_ns, 1_000), Launch(20, "a", 10_000, 1_000), Launch(20, "b", 10_000, 1_000), DeviceSync(100),
           Launch(20, "c", 10_000, 1_000), DeviceSync(100)]
    return Program([Thread(ops)], launch_latency_ns=5_000, gpu_gap_ns=1_000)


def test_started_overlapped_is_a_start_inside_another_streams_interval():
    start = np.array([0, 10, 50, 60, 0, 5, 70])
    end = np.array([50, 20, 55, 65, 5, 5, 80])
    dev = np.array([0, 0, 0, 0, 1, 1, 0])
    stream = np.array([1, 2, 2, 1, 1, 2, 3])
    # 1 starts inside 0's [0, 50); 2 starts at 50 = 0's end (not running); 3 and 6 start on idle
    # devices' other streams; 5 is empty and starts at 4's end; on device 1 nothing runs at 0
    assert started_overlapped(start, end, dev, stream).tolist() == [False, True, False, False, False, False, False]
    assert started_overlapped(np.array([0, 0]), np.array([10, 10]), np.zeros(2, int), np.array([1, 2])).tolist() == [True, True]


def test_stretch_rounds_half_up():
    assert stretched_ns(np.array([10, 3, 0, 1]), 1.5).tolist() == [15, 5, 0, 2]  # 4.5 -> 5, 1.5 -> 2


def test_emulator_stretches_what_starts_beside_another_stream():
    """By hand: ``a`` starts while ``long`` runs (stretched), ``b`` too (``a``'s stream, ``long``
    still running); ``long`` started first (not); ``c`` runs alone."""
    run = emulate(_two_streams(), 1.5)
    assert [(t.name, t.end_ns - t.start_ns) for t in run.tasks] == [("long", 100_000), ("a", 15_000), ("b", 15_000), ("c", 10_000)]
    assert [t.end_ns - t.start_ns for t in emulate(_two_streams()).tasks] == [100_000, 10_000, 10_000, 10_000]
    # ``long`` short enough that ``b`` starts after it: ``b`` is not stretched
    run = emulate(_two_streams(long_ns=12_000), 2.0)
    assert [t.end_ns - t.start_ns for t in run.tasks] == [12_000, 20_000, 10_000, 10_000]


def test_another_devices_kernel_does_not_stretch():
    """Only another stream *of the same device*: ``a`` on device 0 starts while ``long`` runs on
    device 1 (not stretched), ``b`` on device 1's other stream while ``long`` runs (stretched);
    the replay agrees."""
    ops = [Launch(7, "long", 100_000, 1_000, device=1), Launch(20, "a", 10_000, 1_000, device=0),
           Launch(20, "b", 10_000, 1_000, device=1), DeviceSync(100, device=1), DeviceSync(100, device=0)]
    run = emulate(Program([Thread(ops)], launch_latency_ns=5_000, gpu_gap_ns=1_000), 2.0)
    assert [(t.name, t.end_ns - t.start_ns) for t in run.tasks] == [("long", 100_000), ("a", 10_000), ("b", 20_000)]
    g = with_contention(_graph(run), 2.0, "given")
    exp, got = _times(run, g, simulate(g))
    assert got == exp and g.counts["contention_unstretched"] == 1


def test_emulator_settles_a_kernel_launched_later_that_starts_first():
    """``x`` is launched first on stream 7 behind a long kernel, ``y`` later on idle stream 20: in
    call order ``x`` is enqueued before ``y`` exists, yet ``x`` starts while ``y`` runs."""
    ops = [Launch(7, "head", 50_000, 1_000), Launch(7, "x", 10_000, 1_000), Launch(20, "y", 100_000, 1_000), DeviceSync(100)]
    run = emulate(Program([Thread(ops)], launch_latency_ns=2_000, gpu_gap_ns=0), 2.0)
    # y starts (at its launch + L) while head runs: stretched; x starts at head's end while y runs: stretched
    assert [(t.name, t.end_ns - t.start_ns) for t in run.tasks] == [("head", 50_000), ("x", 20_000), ("y", 200_000)]


def test_replay_with_the_model_gives_the_recorded_times_and_counts_what_it_unstretched():
    run = emulate(_two_streams(), 1.5)
    g = _graph(run)
    g2 = with_contention(g, 1.5, "given")
    assert g2.counts["contention_unstretched"] == 2 and g2.contention_source == "given"
    k = g.node_kind != NODE_CPU
    assert (g2.dur_ns[k] == [100_000, 10_000, 10_000, 10_000]).all()
    exp, got = _times(run, g2, simulate(g2))
    assert got == exp
    exp0, got0 = _times(run, g, simulate(g))  # off: the recorded durations as they are
    assert got0 == exp0
    off = simulate(dataclasses.replace(g2, contention_factor=0.0))  # the alone durations without the model
    on = simulate(g2)
    assert ((on.end_ns - on.start_ns)[k] - (off.end_ns - off.start_ns)[k]).tolist() == [0, 5_000, 5_000, 0]


def test_the_model_keeps_the_links_the_trace_lacks():
    """Bug: with_contention copied ``counts`` into a plain dict, and the trust line lost its
    "links missing from the trace" (seen on hta/df_index_resolver: 3,918 with the model off, none on)."""
    from daydream.graph._arrays import Counts, count
    g = _graph(emulate(_two_streams(), 1.5))
    c = Counts(g.counts)
    count(c, "gpu_task_without_launch", 3, missing=True)
    g2 = with_contention(dataclasses.replace(g, counts=c), 1.5, "given")
    assert g2.counts.missing == {"gpu_task_without_launch"} and g2.counts["gpu_task_without_launch"] == 3


def test_priority_scheduled_stream_with_the_model():
    """The event-driven replay (stream 20 scheduled by priority) runs the model too: the rule
    holds on its result, which differs from the replay without the model (``a`` and ``b`` start
    beside ``long``)."""
    g = with_contention(_graph(emulate(_two_streams(), 1.5)), 1.5, "given")
    names = [g.name(v) for v in range(g.n)]
    pr = np.array([5 if nm == "c" else 0 for nm in names])
    lane20 = int(g.lane[names.index("a")])
    gp = set_priority(g, pr, [lane20])
    tl = simulate(gp)
    assert _holds_the_rule(gp, tl)
    off = simulate(dataclasses.replace(gp, contention_factor=0.0))
    assert tl.end_ns.tolist() != off.end_ns.tolist()


def test_bad_factor_is_refused():
    g = _graph(emulate(_two_streams()))
    for f in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            with_contention(g, f, "given")


def test_no_fixed_point_is_said(monkeypatch):
    g = with_contention(_graph(emulate(_two_streams(), 1.5)), 1.5, "given")
    monkeypatch.setattr(sim_contention, "MAX_ROUNDS", 1)  # the first round finds stretches: a second is needed
    with pytest.raises(DaydreamError, match="no fixed point in 1 replays"):
        simulate(g)


def _scaled(prog: Program, x: int) -> Program:
    def f(op):
        if isinstance(op, Launch):
            return dataclasses.replace(op, kernel_dur_ns=op.kernel_dur_ns * x)
        if isinstance(op, GraphLaunch):
            return dataclasses.replace(op, kernels=tuple((n, d * x) for n, d in op.kernels))
        return op
    return prog.map_ops(f)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs(max_threads=2, max_ops=30, graph_launches=True, graph_streams=True, max_devices=2), st.integers(100, 400),
       st.sampled_from([2, 3]))
def test_prediction_with_contention_equals_the_emulator(prog, pct, x):
    """Over 150 derandomized programs (1-2 threads, 1-2 devices with cross-device event waits,
    1-3 streams, graph launches, some on streams of their own; some with stretched kernels, some
    needing 3+ rounds) and factors
    1.00-4.00: the baseline replay of the trace recorded with contention ``f`` (model on, ``f``)
    is the emulator's run; the prediction of every kernel ``x`` times longer is the emulator's run
    of that program with ``f`` (where the calls keep their order); the compiled, Python and
    event-driven replays agree."""
    f = pct / 100
    run = emulate(prog, f)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = with_contention(_graph(run), f, "given")
    tl = simulate(g)
    exp, got = _times(run, g, tl)
    assert got == exp
    assert _holds_the_rule(g, tl)
    ev = simulate_events(g)
    assert ev.start_ns.tolist() == tl.start_ns.tolist() and ev.end_ns.tolist() == tl.end_ns.tolist()
    py = sim_contention.contended(g, lambda d: replay(g, g.order, compiled=False, dur=d))
    cc = sim_contention.contended(g, lambda d: replay(g, g.order, compiled=True, dur=d))
    assert [a.tolist() for a in py[:3]] == [a.tolist() for a in cc[:3]] and py[3:] == cc[3:]
    assert py[0].tolist() == tl.start_ns.tolist() and py[1].tolist() == tl.end_ns.tolist()
    event(f"kernels stretched: {'some' if py[3] else 'none'}; rounds {min(py[4], 3)}{'+' * (py[4] > 3)}")
    event(f"cross-device event waits: {'some' if cross_device_waits(run) else 'none'}")
    changed = emulate(_scaled(prog, x), f)
    assume([(c.thread, c.op_index) for c in run.calls] == [(c.thread, c.op_index) for c in changed.calls])
    g2 = scale(g, g.node_kind == Kind.KERNEL, float(x))
    exp2, got2 = _times(changed, g2, simulate(g2))
    assert got2 == exp2
    event("prediction checked")


def _names_program(names=4):
    """``names`` kernels alone on stream 7, then each again on stream 20 beside a 150 us kernel
    on stream 7, one ProfilerStep around it all. With contention 1.5: k0 (60 us), k1 (75 us) and
    k2 (90 us) start while it runs and are stretched, k3 starts after it (at 234 us): alone."""
    ops = [RangeBegin("ProfilerStep#1")]
    durs = [40_000 + 10_000 * i for i in range(names)]
    for i, d in enumerate(durs):
        ops += [Launch(7, f"k{i}", d, 1_000), DeviceSync(100)]
    ops += [Launch(7, "long", 150_000, 1_000)] + [Launch(20, f"k{i}", d, 1_000) for i, d in enumerate(durs)]
    ops += [DeviceSync(100), RangeEnd()]
    return Program([Thread(ops)], launch_latency_ns=5_000, gpu_gap_ns=1_000)


@pytest.mark.slow
def test_cli_contention_measured_and_given(tmp_path, capsys):
    """Through daydream-analyze: ``measured`` finds the trace's 1.5 and says so (text and JSON),
    the replay is exact with it; a prediction (every kernel 2x) equals the emulator's run of
    that program with 1.5 (the window ends with stream 20's kernels, so ``f`` shows); a given
    factor is said as given; off says nothing new."""
    from daydream.cli import main
    prog = _names_program()
    trace = tmp_path / "t.json"
    to_kineto(emulate(prog, 1.5), str(trace))
    out_json = tmp_path / "r.json"
    assert main([str(trace), "--contention", "measured", "--opt", "scale-kernels:factor=2", "--json", str(out_json), "--details"]) == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("contention:"))
    assert "x1.500 (measured on this trace: lower median over 3 kernel names of 3 overlapped-at-start / 3 alone" in line
    assert "3 recorded kernels taken back to their alone duration" in line
    r = json.loads(out_json.read_text())
    assert (r["graph"]["contention_applied"], r["graph"]["contention_unstretched"]) == (1.5, 3)
    assert r["graph"]["contention_applied_from"].startswith("measured on this trace")
    w = r["window"]
    assert w["replayed_ns"] == w["measured_ns"]  # exact baseline with the model on
    assert r["graph"]["contention_stretched"] == 3  # k0-k2 again
    p = r["predictions"][0]
    # 2x (us after the launch call): long runs 5-305; k0 6-126, k1 127-277, k2 278-458 start beside it, k3 at 459 alone
    assert p["contention_stretched"] == 3
    assert p["optimizations"][-1]["note"].endswith("contention x1.500: 3 kernels start beside another stream's and are stretched (baseline 3)")
    changed = emulate(_scaled(prog, 2), 1.5)
    assert r["predictions"][0]["window"]["predicted_ns"] == changed.end_ns - changed.trace_t0_ns
    assert r["predictions"][0]["window"]["predicted_ns"] != emulate(_scaled(prog, 2)).end_ns - changed.trace_t0_ns  # f matters
    assert main([str(trace), "--contention", "1.2", "--json", str(out_json)]) == 0
    assert json.loads(out_json.read_text())["graph"]["contention_applied_from"] == "given: --contention 1.2"
    assert main([str(trace), "--json", str(out_json)]) == 0
    g = json.loads(out_json.read_text())["graph"]
    assert g["contention_applied"] == 0.0 and g["contention"].endswith("measured, not used (--contention off)")


def test_cli_bad_contention_is_one_line_exit_2(tmp_path, capsys):
    from daydream.cli import main
    trace = tmp_path / "t.json"
    to_kineto(emulate(_two_streams()), str(trace))
    for bad in ("fast", "0", "-1", "nan", "inf"):
        assert main([str(trace), "--contention", bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--contention" in err[0] and "Traceback" not in err[0]
    assert main([str(trace), str(trace), "--contention", "measured"]) == 2  # a job: refused
    assert "--contention apply to one trace" in capsys.readouterr().err


def test_measured_without_a_factor_is_off_with_a_warning(tmp_path, capsys):
    from daydream.cli import main
    trace = tmp_path / "t.json"
    to_kineto(emulate(_two_streams(), 1.5), str(trace))  # 3 names, none both alone and overlapped
    out_json = tmp_path / "r.json"
    assert main([str(trace), "--contention", "measured", "--json", str(out_json)]) == 0
    r = json.loads(out_json.read_text())
    assert r["graph"]["contention_applied"] == 0.0
    assert any(w.startswith("--contention measured: contention not measured") for w in r["warnings"])
