"""The compiled critical-path walk (daydream/simulate/critical_walk.py) equals the Python walk.

On random emulator programs (plain, CUDA graphs, multi-device, copies with staging, thread
hand-overs) and the same graphs after random scale / remove / insert steps, with random phase
codes: the path, every charge (node, ns, part), the end-waited nodes, the summary and the full
breakdowns are identical. The kernel runs uncompiled (plain Python over arrays) in every example,
so the port is checked where numba is missing, and compiled where it is installed.
"""

from __future__ import annotations

import pytest
import contextlib
import os

import msgspec
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from daydream.simulate import critical_path as cp
from daydream.simulate import critical_walk, simulate, with_bindings
from daydream.testing.emulator import emulate, programs

from test_handover import handover_programs
from test_pageable_copies import copy_programs
from test_replay_compiled import _STEPS, SETTINGS, _transformed
from test_transform import _graph_of

HAS_NUMBA = critical_walk.kernel() is not None


@contextlib.contextmanager
def _jit(mode: str, fn=None):
    """DAYDREAM_JIT=mode; ``fn``: the kernel critical_walk.kernel() hands out (default its own)."""
    old, old_k = os.environ.get("DAYDREAM_JIT"), critical_walk.kernel
    os.environ["DAYDREAM_JIT"] = mode
    if fn is not None:
        critical_walk.kernel = lambda: fn
    try:
        yield
    finally:
        critical_walk.kernel = old_k
        if old is None:
            os.environ.pop("DAYDREAM_JIT", None)
        else:
            os.environ["DAYDREAM_JIT"] = old


def _run(g, tl, phases, seen):
    """critical_path with phases; the charges its walk recorded (spied on attribute)."""
    names, ph, gph = phases
    detail: dict = {}
    orig = cp.attribute

    def spy(graph, path, parts, end_waited=(), detail=None):
        seen.append((np.asarray(parts, np.int64).reshape(-1, 3), np.sort(np.asarray(end_waited, np.int64))))
        return orig(graph, path, parts, end_waited, detail)

    cp.attribute = spy
    try:
        path, summary = cp.critical_path(g, tl, names, ph, gph, detail=detail)
    finally:
        cp.attribute = orig
    return path, msgspec.json.encode(summary), detail


def _assert_walks_equal(g, seed):
    if g.n == 0:
        return
    tl = simulate(g)
    rng = np.random.default_rng(seed)
    phases = (["fwd", "bwd", "opt"], rng.integers(-1, 3, g.n), rng.integers(-1, 3, g.n))
    runs = []
    with _jit("off"):
        runs.append(_run(g, tl, phases, seen := []) + tuple(seen))
    kernels = [critical_walk._kernel] + ([critical_walk.kernel()] if HAS_NUMBA else [])
    for fn in kernels:
        acc = cp._Charges(None, None, None)
        with _jit("on", fn):
            assert cp._compiled_walk(g, with_bindings(g, tl), runs[0][0][0], acc) is not None, "the kernel did not run"
            runs.append(_run(g, tl, phases, seen := []) + tuple(seen))
    ref = runs[0]
    for got in runs[1:]:
        assert np.array_equal(np.asarray(got[0]), np.asarray(ref[0])), "path"
        assert got[1] == ref[1], "summary"
        assert got[2] == ref[2], "detail"
        assert np.array_equal(got[3][0], ref[3][0]), "charges"
        assert np.array_equal(got[3][1], ref[3][1]), "end waited"


@pytest.mark.slow
@SETTINGS
@given(st.one_of(programs(), programs(graph_launches=True), programs(max_devices=2, sync_events=False)), _STEPS, st.integers(0, 2**32))
def test_compiled_walk_equals_python_on_emulator_programs(tmp_path_factory, prog, steps, seed):
    g = _graph_of(tmp_path_factory.mktemp("w"), emulate(prog))
    _assert_walks_equal(g, seed)
    _assert_walks_equal(_transformed(g, steps), seed)


@pytest.mark.slow
@SETTINGS
@given(st.one_of(copy_programs(), copy_programs(staging=True), handover_programs()), _STEPS, st.integers(0, 2**32))
def test_compiled_walk_equals_python_on_copies_and_handovers(tmp_path_factory, prog, steps, seed):
    g = _graph_of(tmp_path_factory.mktemp("w"), emulate(prog))
    _assert_walks_equal(g, seed)
    _assert_walks_equal(_transformed(g, steps), seed)


def test_the_compiled_walk_runs_when_asked():
    """DAYDREAM_JIT=on really takes the kernel path (the comparison above is not Python vs Python)."""
    g = _graph_of_small()
    tl = with_bindings(g, simulate(g))
    acc = cp._Charges(None, None, None)
    with _jit("on", critical_walk._kernel):
        assert cp._compiled_walk(g, tl, int(np.argmax(tl.end_ns)), acc) is not None
    with _jit("off"):
        assert cp._compiled_walk(g, tl, int(np.argmax(tl.end_ns)), acc) is None


def test_times_near_the_int64_edge_walk_in_python():
    assert critical_walk.fits(0, np.array([1, -5], np.int64))
    assert not critical_walk.fits(0, np.array([critical_walk.LIMIT], np.int64))
    assert not critical_walk.fits(-critical_walk.LIMIT, np.zeros(0, np.int64))


def _graph_of_small():
    from test_replay_compiled import _blocking_copy_graph
    return _blocking_copy_graph()
