"""The compiled range timeline (daydream/graph/range_timeline.py: _timeline_kernel, one sweep per
thread) gives the segments of the numpy reference, range_timeline_numpy, to the nanosecond and
in the same order, run plain and compiled: nested, overlapping, equal and touching ranges, ties
of start and end, several threads and priority levels, levels whose ranges disagree on the
outermost flag (the first range's decides)."""

from __future__ import annotations

import importlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

R = importlib.import_module("daydream.graph.range_timeline")


@st.composite
def labelled_ranges(draw):
    """Labelled ranges as range_timeline keeps them: (names, key, s, e, nid, pr, outer), e > s."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = draw(st.integers(0, 300))
    span = draw(st.sampled_from([8, 60, 5000]))  # few distinct times: many ties
    s = rng.integers(-span, span, n).astype(np.int64)
    e = s + rng.integers(1, max(2, span // draw(st.sampled_from([1, 4, 40]))), n)
    if draw(st.booleans()):
        o = np.argsort(s, kind="stable")  # trace order (the usual case), or any order
        s, e = s[o], e[o]
    key = R.thread_key(rng.integers(0, 3, n), rng.integers(0, draw(st.sampled_from([1, 3])), n) * 7)
    n_names = draw(st.integers(1, 12))
    nid = rng.integers(0, n_names, n).astype(np.int64)
    pr = rng.choice(np.array([20, 30, 40, 50]), n).astype(np.int64) if draw(st.booleans()) else np.full(n, 20, np.int64)
    outer = rng.random(n) < draw(st.sampled_from([0.0, 0.5, 1.0]))
    return [f"r{i}" for i in range(n_names)], key, s, e, nid, pr, outer


def _same(a, b):
    for f in ("key", "lo", "hi", "label"):
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and np.array_equal(x, y), f
    assert a.labels == b.labels


@settings(max_examples=200, deadline=None)
@given(labelled_ranges())
def test_compiled_timeline_equals_numpy(case):
    ref = R.range_timeline_numpy(*case)
    fns = [R._timeline_kernel] + ([R._timeline_fn()] if R._timeline_fn() is not None else [])
    for fn in fns:
        _same(ref, R._timeline_compiled(fn, *case))
        _same(ref, R._timeline_compiled(fn, *_among_others(case)))


def _among_others(case):
    """``case``'s ranges at ascending positions ``idx`` of longer arrays (range_timeline hands the
    kernel every CPU range and the positions of those it keeps)."""
    names, *cols = case
    n = len(cols[0])
    rng = np.random.default_rng(n)
    total = n + int(rng.integers(0, 20))
    idx = np.sort(rng.choice(total, n, replace=False)).astype(np.int64)
    full = []
    for c in cols:
        f = rng.integers(-5, 5, total).astype(c.dtype)
        f[idx] = c
        full.append(f)
    return (names, *full, idx)


def test_long_run_of_one_start():
    """A run of equal starts longer than the insertion sort's reach is sorted stably as well."""
    rng = np.random.default_rng(3)
    n = 200
    s = np.zeros(n, np.int64)
    e = rng.integers(1, 30, n).astype(np.int64)
    case = (["a", "b", "c"], np.zeros(n, np.int64), s, e, rng.integers(0, 3, n).astype(np.int64),
            rng.choice(np.array([20, 30]), n).astype(np.int64), rng.random(n) < 0.5)
    ref = R.range_timeline_numpy(*case)
    for fn in [R._timeline_kernel] + ([R._timeline_fn()] if R._timeline_fn() is not None else []):
        _same(ref, R._timeline_compiled(fn, *case))



def test_labelled_timeline_is_the_numpy_timeline_in_every_jit_mode(monkeypatch):
    """The report's op timeline (daydream/report/tables.py) goes through labelled_timeline: every
    range at one level, innermost, name ids as the table stores them (int32); compiled (JIT on)
    or not (off), the numpy passes' segments."""
    rng = np.random.default_rng(5)
    n = 400
    s = rng.integers(0, 3000, n).astype(np.int64)
    e = s + rng.integers(1, 500, n)
    key = R.thread_key(rng.integers(0, 2, n), rng.integers(0, 3, n))
    nid = rng.integers(0, 9, n).astype(np.int32)
    case = ([f"op{i}" for i in range(9)], key, s, e, nid, np.zeros(n, np.int64), np.zeros(n, bool))
    ref = R.range_timeline_numpy(*case)
    for mode in ("off", "on"):
        monkeypatch.setenv("DAYDREAM_JIT", mode)
        _same(ref, R.labelled_timeline(*case))
