"""Copies from and to pageable host memory (docs/model.md, "Copies from and to pageable memory").

CUDA "API synchronization behavior": a synchronous ``cudaMemcpy`` from pageable memory to the
device first synchronizes its stream, stages the data and returns; above the staging size
(the trace's own staging threshold, ``graph/build/staging.py``) a copy from pageable memory returns only after
its DMA started; a device-to-host copy returns when it is done; a device-to-device ``cudaMemcpy``
does not synchronize the host. Hand-built tables check the edges; emulated programs check that
the replay is exact and that predictions after scaling or removing kernels equal the emulator's
run of the changed program.
"""

from __future__ import annotations

import pytest
import dataclasses

import numpy as np
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from daydream.events.table import CopyKind, Kind, MemKind
from daydream.graph import NODE_CPU, EdgeKind, build_graph
from daydream.simulate import simulate
from daydream.testing.emulator import (
    HostWork,
    Launch,
    Memcpy,
    MemcpyAsync,
    Program,
    StreamSync,
    Thread,
    emulate,
    measure_latencies,
)
from daydream.transform import scale, select

from tablebuilder import TB
from test_replay_emulator import _assert_exact, _replay
from emulated_checks import _check_prediction, _check_removal, _graph_of, _predict_removal

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
SMALL = 92_928  #: a copy size (the largest seen returning while its stream ran on alexnet: any size does)
BIG = SMALL + 1


# ------------------------------------------------------------------ hand-built tables ----
def _copy(b, api, start, end, g0, g1, ck, src, dst, nbytes, stream=7):
    c = b.call(api, start, end)
    b.gpu(c, g0, g1, stream=stream, kind=Kind.MEMCPY, name="Memcpy", copy_kind=ck, src_kind=src, dst_kind=dst, bytes=nbytes)
    return c


def _edges(g, kind):
    s, d = g.edges_of(kind)
    return sorted(zip(s.tolist(), d.tolist()))


def test_sync_pageable_htod_waits_for_its_stream_not_for_its_copy():
    b = TB()
    k = b.call("cudaLaunchKernel", 0, 10)
    b.gpu(k, 15, 200)
    _copy(b, "cudaMemcpy", 20, 230, 205, 400, CopyKind.HTOD, MemKind.PAGEABLE, MemKind.DEVICE, 4096)
    g = build_graph(b.table())
    kernel = int(np.nonzero((g.node_kind != NODE_CPU) & (g.rec_start_ns == 15))[0][0])
    call = int(np.nonzero((g.node_kind == NODE_CPU) & (g.rec_start_ns == 20))[0][0])
    assert _edges(g, EdgeKind.WAIT) == [(kernel, call)]  # the stream sync, not its own copy
    assert g.dur_ns[call] == 30  # own cost after the stream sync: staging
    tl = simulate(g)
    assert tl.end_ns[call] == max(tl.start_ns[call], tl.end_ns[kernel]) + 30


def _async_pair(first_end, shown: bool = True):
    """A kernel, then a large and a small async pageable HtoD copy on its stream; ``shown``: on
    stream 20 a small copy returns while the kernel before it runs (the trace shows that copies
    up to SMALL do not synchronize: the threshold)."""
    b = TB()
    k = b.call("cudaLaunchKernel", 0, 10)
    b.gpu(k, 15, 200)
    if shown:
        k2 = b.call("cudaLaunchKernel", 11, 12)
        b.gpu(k2, 13, 300, stream=20)
        _copy(b, "cudaMemcpyAsync", 14, 16, 301, 305, CopyKind.HTOD, MemKind.PAGEABLE, MemKind.DEVICE, SMALL, stream=20)
    _copy(b, "cudaMemcpyAsync", 20, first_end, 210, 450, CopyKind.HTOD, MemKind.PAGEABLE, MemKind.DEVICE, BIG)
    _copy(b, "cudaMemcpyAsync", 500, 520, 530, 540, CopyKind.HTOD, MemKind.PAGEABLE, MemKind.DEVICE, SMALL)
    return build_graph(b.table())


def _call_at(g, t):
    return int(np.nonzero((g.node_kind == NODE_CPU) & (g.rec_start_ns == t))[0][0])


def test_large_async_pageable_copy_synchronizes_its_stream():
    g = _async_pair(first_end=400)
    assert (g.staging_fit.threshold_bytes, g.staging_fit.threshold_source) == (SMALL, "trace")
    big, small = _call_at(g, 20), _call_at(g, 500)
    kernel = int(np.nonzero((g.node_kind != NODE_CPU) & (g.rec_start_ns == 15))[0][0])
    assert _edges(g, EdgeKind.WAIT) == [(kernel, big)]  # the large copy only
    assert g.dur_ns[big] == 200 and g.dur_ns[small] == 20
    assert g.blocking.sum() == 1
    slow = simulate(scale(g, g.node_kind != NODE_CPU, 3.0))
    assert slow.end_ns[big] == slow.end_ns[kernel] + 200


def test_threshold_not_shown_takes_the_documented_behaviour():
    """Without a copy returning while its stream ran, every pageable async copy synchronizes its
    stream first (cudaMemcpy's documented pageable rule; the Async page says the driver 'may')."""
    g = _async_pair(first_end=400, shown=False)
    assert g.staging_fit.threshold_bytes == 0 and "API synchronization behavior" in g.staging_fit.threshold_source
    big, small = _call_at(g, 20), _call_at(g, 500)
    assert {d for _, d in _edges(g, EdgeKind.WAIT)} == {big, small}


def test_a_copy_returning_while_its_stream_runs_raises_the_threshold():
    g = _async_pair(first_end=100)  # returned before the kernel before it ended: it did not synchronize
    assert _edges(g, EdgeKind.WAIT) == []
    assert g.staging_fit.threshold_bytes == BIG


def test_dtod_cudamemcpy_does_not_block_but_hip_and_dtoh_do():
    b = TB()
    _copy(b, "cudaMemcpy", 0, 20, 25, 100, CopyKind.DTOD, MemKind.DEVICE, MemKind.DEVICE, 64)
    _copy(b, "hipMemcpy", 110, 200, 115, 190, CopyKind.DTOD, MemKind.DEVICE, MemKind.DEVICE, 64)
    _copy(b, "cudaMemcpy", 210, 300, 215, 290, CopyKind.DTOH, MemKind.DEVICE, MemKind.PAGEABLE, 64)
    _copy(b, "cudaMemcpy", 310, 400, 315, 390, CopyKind.HTOD, MemKind.PINNED, MemKind.DEVICE, 64)
    g = build_graph(b.table())
    waiting = sorted(g.rec_start_ns[d] for _, d in _edges(g, EdgeKind.WAIT))
    assert waiting == [110, 210, 310]


# ------------------------------------------------------------------ emulated programs ----
@st.composite
def copy_programs(draw, max_threads: int = 2, staging: bool = False):
    """Programs rich in copies: kernels, cudaMemcpy/cudaMemcpyAsync of every kind and host
    memory, below and above the staging size, stream syncs, host work; streams 7 and 20.
    ``staging``: a staged copy's DMA starts ``S`` (drawn, > 0) after ``L``."""
    L = draw(st.integers(2_000, 15_000))
    G = draw(st.integers(0, min(L, 3_000)))
    dur = st.integers(1_000, 200_000)
    cost = st.integers(1_000, 20_000)
    T = draw(st.integers(1 << 10, 1 << 22))  # the emulator's own staging threshold, drawn
    nbytes = st.one_of(st.integers(1, T // 64), st.integers(T // 64 + 1, 1 << 20)).map(lambda k: 64 * k)
    threads = []
    for ti in range(draw(st.integers(1, max_threads))):
        ops: list = []
        for _ in range(draw(st.integers(1, 25))):
            what = draw(st.sampled_from(["host", "launch", "launch", "memcpy", "memcpy", "async", "async", "sync"]))
            s = draw(st.sampled_from([7, 20]))
            if what == "host":
                ops.append(HostWork(draw(st.integers(0, 50_000))))
            elif what == "launch":
                ops.append(Launch(s, draw(st.sampled_from(["sgemm", "elementwise"])), draw(dur), draw(cost)))
            elif what == "sync":
                ops.append(StreamSync(s, draw(cost)))
            else:
                cls = Memcpy if what == "memcpy" else MemcpyAsync
                ops.append(cls(s, draw(st.sampled_from(["HtoD", "DtoH", "DtoD"])), draw(nbytes), draw(dur), draw(cost),
                               host_memory=draw(st.sampled_from(["pinned", "pageable"]))))
        threads.append(Thread(ops, pid=4242, tid=4242 + ti))
    S = draw(st.integers(1, 300_000)) if staging else 0
    rate = draw(st.sampled_from([0.0, 1 / 64, 1 / 16, 1 / 4])) if staging else 0.0  # ns per byte: 64, 16, 4 GB/s
    return Program(threads, launch_latency_ns=L, gpu_gap_ns=G, staging_latency_ns=S, staging_bytes=T, staging_ns_per_byte=rate)


def _shows_threshold(prog, g) -> bool:
    """No pageable host-to-device copy of the program lies between the threshold the trace shows
    and the program's: the trace tells every copy's behaviour (a copy there is taken as staged)."""
    th = g.staging_fit.threshold_bytes
    assert th <= prog.staging_bytes  # a copy that returned while its stream ran never synchronized
    return not any(isinstance(op, (Memcpy, MemcpyAsync)) and op.pageable_htod and th < op.bytes <= prog.staging_bytes
                   for t in prog.threads for op in t.ops)


def _check_fit(prog, run, g) -> None:
    """The trace's staging fit is the emulator's: S0 = S and 1 / B = its ns per byte, wherever
    the staged copies that found their stream idle have two sizes or more (one size: S is their
    delay, no slope)."""
    f = g.staging_fit
    if f.sizes >= 2:
        assert f.intercept_ns == prog.staging_latency_ns and abs(f.ns_per_byte - prog.staging_ns_per_byte) < 1e-9
        assert f.max_residual_ns == 0


def _staged_after_kernel(kernel_ns: int, second_stream: int, G: int, S: int) -> Program:
    """A kernel, then pageable copies just above the staging size: the first is ready (L + S
    after its call) just after the kernel ends, so the G edge binds it. Found failing: the
    emulator's ``measure_latencies`` took it as a back-to-back pair (it left ``S`` out of the
    ready time) while the builder, which adds ``S``, did not, and measured G = 0."""
    big = BIG
    ops = [Launch(7, "sgemm", kernel_ns, 1_000), Memcpy(7, "HtoD", big, 1_000, 1_000, host_memory="pageable"),
           Memcpy(second_stream, "HtoD", big, 1_000, 1_000, host_memory="pageable")]
    return Program([Thread(ops)], launch_latency_ns=2_000, gpu_gap_ns=G, staging_latency_ns=S, staging_bytes=SMALL)


@pytest.mark.slow
@settings(SETTINGS, suppress_health_check=[*SETTINGS.suppress_health_check, HealthCheck.filter_too_much])
@given(copy_programs(staging=True), st.sampled_from([0.0, 0.5, 3.0]))
@example(_staged_after_kernel(1_058, 20, 2, 59), 0.0)
@example(_staged_after_kernel(1_000, 7, 1_001, 1), 0.0)
def test_staging_latency_is_measured_and_predictions_follow_the_emulator(tmp_path_factory, prog, factor):
    """The DMA of a staged copy starts L + S after its call: S is measured from the trace (when
    a staged copy and another task each found their stream idle) and the replay and the
    predictions after scaling the kernels equal the emulator's runs."""
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graph_of(tmp_path_factory.mktemp("p"), run)
    assume(_shows_threshold(prog, g))
    assume(g.staging_latency_ns == prog.staging_latency_ns)
    _check_fit(prog, run, g)
    graph, tl = _replay(tmp_path_factory.mktemp("q"), run)
    _assert_exact(run, graph, tl)
    pred = simulate(scale(g, select(g, kind="kernel"), factor))

    def change(op):
        return dataclasses.replace(op, kernel_dur_ns=int(np.rint(op.kernel_dur_ns * factor))) if isinstance(op, Launch) else op

    changed = emulate(prog.map_ops(change))
    assume([(c.thread, c.op_index) for c in run.calls] == [(c.thread, c.op_index) for c in changed.calls])
    _check_prediction(g, pred, run, changed)


@pytest.mark.slow
@SETTINGS
@given(copy_programs())
def test_replay_of_copy_programs_is_exact(tmp_path_factory, prog):
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    assume(_shows_threshold(prog, _graph_of(tmp_path_factory.mktemp("t"), run)))
    graph, tl = _replay(tmp_path_factory.mktemp("p"), run)
    _assert_exact(run, graph, tl)


@pytest.mark.slow
@SETTINGS
@given(copy_programs(), st.sampled_from(["sgemm", "elementwise"]), st.sampled_from([0.0, 0.5, 3.0, 10.0]))
def test_scaling_kernels_around_copies_predicts_the_changed_program(tmp_path_factory, prog, pattern, factor):
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graph_of(tmp_path_factory.mktemp("p"), run)
    assume(_shows_threshold(prog, g))
    pred = simulate(scale(g, select(g, kind="kernel", name=pattern), factor))

    def change(op):
        if isinstance(op, Launch) and op.kernel_name == pattern:
            return dataclasses.replace(op, kernel_dur_ns=int(np.rint(op.kernel_dur_ns * factor)))
        return op

    changed = emulate(prog.map_ops(change))
    keys = [(c.thread, c.op_index) for c in run.calls]
    assume(keys == [(c.thread, c.op_index) for c in changed.calls])  # same interleaving of threads
    _check_prediction(g, pred, run, changed)


@pytest.mark.slow
@SETTINGS
@given(copy_programs(), st.integers(0, 2**32))
def test_removing_a_kernel_before_copies_predicts_the_changed_program(tmp_path_factory, prog, seed):
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graph_of(tmp_path_factory.mktemp("p"), run)
    assume(_shows_threshold(prog, g))
    r = _predict_removal(prog, run, seed, g)
    base = [r.new_key((c.thread, c.op_index)) for c in run.calls if c is not r.victim]
    assume(base == [(c.thread, c.op_index) for c in r.changed.calls])
    _check_removal(r.graph, r.pred, run, r.changed, r.new_key)
