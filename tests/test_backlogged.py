"""A GPU backlogged throughout the trace (docs/model.md, "A GPU backlogged throughout the trace").

A trace cut from a run whose CPU launches far ahead of the GPU holds no launched task that finds
its stream idle: rule 5 has no ``L`` sample. It measured ``L = 0`` and so ``G = 0`` (``G <= L``),
which shrank the cross-stream wait inference's window ``G - tol .. G + max(tol, L)`` to nothing.
Now ``L`` is the sourced default of the trace's GPU generation
(:func:`daydream.events.cuda_api.default_launch_latency`), said in the graph's counts, and ``G``
is measured with it. The emulator builds such traces: a program launches a long kernel on each
stream, then many short ones with cross-stream waits, and the trace is cut while the long
kernels run (they run across the window's start, so they are missing).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from daydream.events.cuda_api import (
    DEFAULT_LAUNCH_LATENCY_NS,
    DEFAULT_LAUNCH_LATENCY_OTHER_NS,
    default_launch_latency,
    gpu_generation,
)
from daydream.events.table import DeviceInfo
from daydream.formats import load_trace
from daydream.graph import NODE_CPU, EdgeKind, Origin, build_graph
from daydream.graph.build.latency import L_DEFAULT, launch_latency_and_gap
from daydream.simulate import simulate
from daydream.testing.emulator import DeviceSync, EventRecord, Launch, Program, StreamWaitEvent, Thread, emulate, to_kineto

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def test_generation_of_the_development_gpus():
    cases = [("Tesla V100-SXM2-32GB", 7, 0, "volta"), ("NVIDIA A100-PG509-200", 8, 0, "ampere"), ("A100-PCIE-40GB", -1, -1, "ampere"),
             ("NVIDIA H100 80GB HBM3", 9, 0, "hopper"), ("NVIDIA B200", 10, 0, "blackwell"), ("AMD Radeon Graphics", 9, 0, "cdna2"),
             ("AMD Instinct MI300X VF", 9, 4, "cdna3"), ("GeForce GTX 1060 with Max-Q Design", 6, 1, ""), ("", -1, -1, "")]
    for name, a, b, gen in cases:
        assert gpu_generation(name, a, b) == gen, name


def test_default_launch_latency_names_its_source():
    v, src = default_launch_latency([DeviceInfo(id=0, name="NVIDIA H100 80GB HBM3", compute_major=9, compute_minor=0)])
    assert v == DEFAULT_LAUNCH_LATENCY_NS["hopper"][0] and "h100_google_owlv2" in src
    v, src = default_launch_latency([DeviceInfo(id=0, name="GeForce GTX 1060", compute_major=6, compute_minor=1)])
    vals = sorted(x for x, _ in DEFAULT_LAUNCH_LATENCY_NS.values())
    assert v == DEFAULT_LAUNCH_LATENCY_OTHER_NS == vals[(len(vals) - 1) // 2] and "not known" in src
    assert default_launch_latency([])[0] == DEFAULT_LAUNCH_LATENCY_OTHER_NS


@pytest.mark.slow
@pytest.mark.parametrize("gen", sorted(DEFAULT_LAUNCH_LATENCY_NS))
def test_each_default_is_the_measured_L_of_its_trace(gen):
    """The defaults are measurements: each is rule 5's L on the trace it names, of its generation."""
    v, src = DEFAULT_LAUNCH_LATENCY_NS[gen]
    path = TRACES / src.split(" ")[0]
    if not path.exists():
        pytest.skip(f"{path} not here")
    g = build_graph(load_trace(str(path)))
    assert g.launch_latency_ns == v
    assert not any(k.startswith(L_DEFAULT) for k in g.counts)
    assert {gpu_generation(d.name, d.compute_major, d.compute_minor) for d in g.table.meta.devices} == {gen}


# ---------------------------------------------------------------- emulated backlogged traces ----


@st.composite
def backlogged_programs(draw):
    """One thread that launches a long kernel (2-4 ms) on streams 7 and 20, then rounds of short
    kernels (30-200 us) on 7, a record on 7, a wait of 20 on it and short kernels on 20 (calls
    1-5 us), and a device sync: the CPU runs far ahead of the GPU from the first launch on.
    Returns (program, calls after the first short launch on stream 20 that the window opens at)."""
    L = draw(st.integers(2_000, 15_000))
    G = draw(st.integers(0, min(L, 3_000)))
    call = st.integers(1_000, 5_000)
    short = st.integers(30_000, 200_000)
    ops = [Launch(7, "long_7", draw(st.integers(2_000_000, 4_000_000)), draw(call)),
           Launch(20, "long_20", draw(st.integers(2_000_000, 4_000_000)), draw(call))]
    for r in range(draw(st.integers(3, 10))):
        ops += [Launch(7, f"a{r}_{k}", draw(short), draw(call)) for k in range(draw(st.integers(1, 6)))]
        ops += [EventRecord(f"e{r}", 7, draw(call)), StreamWaitEvent(20, f"e{r}", draw(call))]
        ops += [Launch(20, f"b{r}_{k}", draw(short), draw(call)) for k in range(draw(st.integers(1, 6)))]
    ops.append(DeviceSync(draw(st.integers(0, 10_000))))
    return Program([Thread(ops)], launch_latency_ns=L, gpu_gap_ns=G), draw(st.integers(1, 3))


def _cut(tmp, run, lo):
    p = tmp / "backlogged.json"
    to_kineto(run, str(p), wait_event_links=False, window=(lo, None))
    return build_graph(load_trace(str(p)))


def _backlogged_everywhere(run, lo) -> bool:
    """Every task launched at or after ``lo`` finds a GPU predecessor unfinished 20 us after its launch."""
    calls = run.calls
    for t in run.tasks:
        s = calls[t.call].start_ns
        if s >= lo and not any(run.tasks[p].end_ns > s + 20_000 for p in t.preds[:1]):
            return False
    return True


def _in_trace(g):
    """Correlation id -> node of every node of the graph."""
    return {int(c): i for i, c in enumerate(g.correlation.tolist())}


@pytest.mark.slow
@SETTINGS
@given(backlogged_programs())
def test_backlogged_trace_gets_the_default_L_and_its_own_G(tmp_path_factory, drawn):
    prog, k = drawn
    run = emulate(prog)
    # every stream holds a task launched before the window: the GPU is backlogged from the
    # trace's first event (a window opening earlier gives first-of-stream samples: docs/model.md,
    # "Work launched before the window")
    first_b = next(i for i, c in enumerate(run.calls) if getattr(c.op, "kernel_name", "").startswith("b"))
    lo = run.calls[first_b + k].start_ns
    assume(_backlogged_everywhere(run, lo))
    g = _cut(tmp_path_factory.mktemp("b"), run, lo)
    want_L, src = default_launch_latency(g.table.meta.devices)
    said = [k for k in g.counts if k.startswith(L_DEFAULT)]
    assert g.launch_latency_ns == want_L and len(said) == 1 and src in said[0] and g.counts.missing >= set(said)
    # G is measured with it: every queued pair of an emulated run is exactly G apart
    assert g.gpu_gap_ns == prog.G
    # the bug: without a default, such a trace measured L = G = 0
    x = g.edge_kind == EdgeKind.XSTREAM
    gpu = g.node_kind != NODE_CPU
    assert launch_latency_and_gap(gpu, g.launch, g.lane_prev, g.rec_start_ns, g.rec_end_ns, g.edge_src[x], g.edge_dst[x],
                                  method="numpy") == (0, 0, 0)
    # the wait window no longer collapses: no false edge, and every consumer whose wait held it,
    # with its wait call, launch and producer in the trace, gets its edge
    inf = (g.edge_kind == EdgeKind.XSTREAM) & (g.edge_origin == Origin.INFERRED)
    got = {(int(g.correlation[s]), int(g.correlation[d])) for s, d in zip(g.edge_src[inf], g.edge_dst[inf])}
    t = run.tasks
    truth = {(t[p].correlation, x.correlation) for x in t for p in x.preds[1:]}
    assert got <= truth
    node = _in_trace(g)
    for x in t:
        lane = [x.ready_ns] + [t[p].end_ns + prog.G for p in x.preds[:1]]
        for p in x.preds[1:]:
            if t[p].end_ns + prog.G == x.start_ns > max(lane) and p_in_trace(run, t[p], node) and launched_in(run, x, lo):
                assert (t[p].correlation, x.correlation) in got
    # the replay never runs ahead of t0 nor behind the record (the missing long kernels make it
    # early: their work is not in the trace, docs/model.md)
    tl = simulate(g)
    assert (tl.start_ns[gpu] >= g.t0_ns).all() and (tl.start_ns[gpu] <= g.rec_start_ns[gpu]).all()


def p_in_trace(run, task, node) -> bool:
    return task.correlation in node


def launched_in(run, task, lo) -> bool:
    """The task's launching call and the wait before it on its thread started at or after ``lo``."""
    c = run.calls[task.call]
    waits = [w for w in run.calls[: task.call] if w.name == "cudaStreamWaitEvent" and w.op.stream == task.stream]
    return c.start_ns >= lo and bool(waits) and waits[-1].start_ns >= lo


def _one_backlogged_graph(tmp_path):
    ops = [Launch(7, "long_7", 2_000_000, 1_000), Launch(20, "long_20", 2_000_000, 1_000)]
    for r in range(3):
        ops += [Launch(7, f"a{r}_0", 30_000 + (r == 1), 1_000), EventRecord(f"e{r}", 7, 1_000),
                StreamWaitEvent(20, f"e{r}", 1_000), Launch(20, f"b{r}_0", 30_000, 1_000)]
    ops.append(DeviceSync(0))
    prog = Program([Thread(ops)], launch_latency_ns=2_000, gpu_gap_ns=0)
    run = emulate(prog)
    first_b = next(i for i, c in enumerate(run.calls) if getattr(c.op, "kernel_name", "").startswith("b"))
    return prog, run, _cut(tmp_path, run, run.calls[first_b + 1].start_ns)


def test_a_wait_is_not_taken_by_a_task_launched_before_the_trace(tmp_path):
    """Found by the property: b0_0 (launched before the window, no call in the trace) took the
    place of b1_0 in its stream, after the wait for e1, and was taken as its consumer: no edge was
    inferred. Now the first launched task after the wait is (b1_0 waits 1 ns for a1_0)."""
    prog, run, g = _one_backlogged_graph(tmp_path)
    inf = (g.edge_kind == EdgeKind.XSTREAM) & (g.edge_origin == Origin.INFERRED)
    got = {(g.name(int(s)), g.name(int(d))) for s, d in zip(g.edge_src[inf], g.edge_dst[inf])}
    assert ("a1_0", "b1_0") in got


def test_latency_paths_agree_with_a_default_and_unknown_producers(tmp_path):
    from daydream.graph.build.latency import _launch_latency_and_gap_reference

    _, _, g = _one_backlogged_graph(tmp_path)
    gpu = g.node_kind != NODE_CPU
    x = g.edge_kind == EdgeKind.XSTREAM
    unknown = np.flatnonzero(gpu & (g.launch >= 0))[:2]
    args = (gpu, g.launch, g.lane_prev, g.rec_start_ns, g.rec_end_ns, g.edge_src[x], g.edge_dst[x])
    want = _launch_latency_and_gap_reference(*args, default=(7_777, "test"), unknown_producer=unknown)
    for method in ("numpy", "python"):
        assert launch_latency_and_gap(*args, method=method, default=(7_777, "test"), unknown_producer=unknown) == want
    assert want[0] == 7_777
