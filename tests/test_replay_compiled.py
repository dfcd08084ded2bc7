"""The compiled replay kernel (daydream/simulate/compiled.py) equals the Python loop to the ns.

Every replay output is compared: start, end, blocked, and the binding records the critical path
walks (derived from those times). Graphs: the emulator's random programs (plain, with CUDA
graphs, copy-rich with blocking and staged copies, thread hand-overs), and the same graphs after
random sequences of scale / remove / insert. The kernel is also run uncompiled (plain Python over
arrays), so the statement-for-statement port is checked even where numba is missing.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daydream.util import jit
from daydream.errors import TraceFormatError
from daydream.events.table import CopyKind, Kind, MemKind
from daydream.graph import build_graph
from daydream.simulate import Timeline, compiled, simulate, with_bindings
from daydream.simulate.replay import prepare, replay
from daydream.testing.emulator import emulate, programs
from daydream.transform import scale

from tablebuilder import TB
from test_handover import handover_programs
from test_pageable_copies import copy_programs
from emulated_checks import _graph_of, _random_transform

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
HAS_NUMBA = compiled.kernel() is not None


def _timeline(graph, out) -> Timeline:
    s, e, b = (np.asarray(x, dtype=np.int64) for x in out)
    return with_bindings(graph, Timeline(s, e, b))


def _assert_paths_equal(graph, order=None):
    """Python loop, uncompiled kernel and (with numba) compiled kernel: identical outputs."""
    order = graph.order if order is None else order
    ref = _timeline(graph, replay(graph, order, compiled=False))
    p = prepare(graph, order)
    outs = [compiled.run(p, np.asarray(order, np.int64), graph.dur_ns, graph.gap_ns, fn=compiled._kernel)]
    if HAS_NUMBA:
        outs.append(replay(graph, order, compiled=True))
        assert isinstance(outs[-1][0], np.ndarray), "the compiled kernel did not run"
    for out in outs:
        got = _timeline(graph, out)
        for f in ("start_ns", "end_ns", "blocked_ns", "bound_start", "bound_base", "bound_end"):
            assert np.array_equal(getattr(got, f), getattr(ref, f)), f


def _transformed(g, steps):
    for what, seed in steps:
        if g.n == 0:
            break
        g = _random_transform(g, what, seed)
    return g


_STEPS = st.lists(st.tuples(st.sampled_from(["scale", "remove", "insert"]), st.integers(0, 2**32)), max_size=4)


@pytest.mark.slow
@SETTINGS
@given(st.one_of(programs(), programs(graph_launches=True), programs(max_devices=2, sync_events=False)), _STEPS)
def test_compiled_equals_python_on_emulator_programs(tmp_path_factory, prog, steps):
    g = _graph_of(tmp_path_factory.mktemp("c"), emulate(prog))
    _assert_paths_equal(g)
    _assert_paths_equal(_transformed(g, steps))


@pytest.mark.slow
@SETTINGS
@given(st.one_of(copy_programs(), copy_programs(staging=True), handover_programs()), _STEPS)
def test_compiled_equals_python_on_copies_and_handovers(tmp_path_factory, prog, steps):
    g = _graph_of(tmp_path_factory.mktemp("c"), emulate(prog))
    _assert_paths_equal(g)
    _assert_paths_equal(_transformed(g, steps))


def _blocking_copy_graph():
    b = TB()
    c1 = b.call("cudaMemcpy", 0, 60)
    b.gpu(c1, 5, 55, kind=Kind.MEMCPY, name="Memcpy HtoD", copy_kind=CopyKind.HTOD, src_kind=MemKind.PINNED, dst_kind=MemKind.DEVICE)
    c2 = b.call("cudaMemcpyAsync", 70, 140)
    b.gpu(c2, 75, 130, kind=Kind.MEMCPY, name="Memcpy DtoH", copy_kind=CopyKind.DTOH, src_kind=MemKind.DEVICE, dst_kind=MemKind.PAGEABLE)
    c3 = b.call("cudaLaunchKernel", 150, 160)
    b.gpu(c3, 170, 300)
    return build_graph(b.table())


def test_lazily_finished_ends_agree():
    """A blocking copy waits for the copy it launches itself: its end is finished lazily (the
    kernel's explicit stack); both paths agree."""
    g = _blocking_copy_graph()
    assert prepare(g, g.order).deferred.any()
    _assert_paths_equal(g)


def test_times_that_could_leave_int64_never_reach_the_kernel():
    """Compiled ints wrap silently: a graph whose times may pass the bound runs the Python loop,
    which raises the usual error when a time really leaves int64."""
    g = _blocking_copy_graph()
    assert compiled.fits_int64(prepare(g, g.order), g.dur_ns, g.gap_ns)
    big = scale(g, np.ones(g.n, bool), 1.0)
    big.dur_ns = big.dur_ns.copy()
    big.dur_ns[-1] = (1 << 62)  # fits int64 alone; the end passes it
    p = prepare(big, big.order)
    assert not compiled.fits_int64(p, big.dur_ns, big.gap_ns)
    assert not compiled.use_kernel(big, p, forced=True)
    out = replay(big, big.order, compiled=True)
    assert not isinstance(out[0], np.ndarray)  # the Python loop ran
    big.dur_ns[-1] = (1 << 63) - 1
    with pytest.raises(TraceFormatError, match="int64"):
        simulate(big)


def test_environment_forces_either_path(monkeypatch):
    g = _blocking_copy_graph()
    p = prepare(g, g.order)
    monkeypatch.delenv("DAYDREAM_JIT", raising=False)
    assert not compiled.use_kernel(g, p)  # small: the Python loop
    monkeypatch.setenv("DAYDREAM_JIT", "on")
    assert compiled.use_kernel(g, p) == HAS_NUMBA
    monkeypatch.setenv("DAYDREAM_JIT", "off")
    assert not compiled.use_kernel(g, p, forced=True)
    assert not isinstance(replay(g, g.order, compiled=True)[0], np.ndarray)


def test_without_a_writable_cache_the_kernel_compiles_in_memory():
    """numba refuses ``cache=True`` when no cache location is writable; the kernel is then
    compiled for the process instead of failing."""
    calls = []

    class FakeNumba:
        @staticmethod
        def njit(**kw):
            calls.append(kw)
            if kw.get("cache"):
                raise RuntimeError("cannot cache function: no locator available")
            return lambda fn: fn

    assert jit.compile_with(FakeNumba, compiled._finish) is compiled._finish
    assert [c.get("cache", False) for c in calls] == [True, False]
