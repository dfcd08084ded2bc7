"""The compiled split of host time by CPU range (daydream/graph/range_timeline.py: _split_kernel, with
its galloping search _gallop) gives the rows of the numpy reference, split_by_range_numpy, bit
for bit and in the same order, run plain and compiled."""

from __future__ import annotations

import pytest
import importlib

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

R = importlib.import_module("daydream.graph.range_timeline")


@st.composite
def timelines_and_queries(draw):
    """A RangeTimeline (threads by key, each with sorted, disjoint, often adjacent segments) and
    host intervals on those threads and others, in time order, reversed, or shuffled."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    parts = []
    for k in sorted(rng.choice(12, int(rng.integers(0, 4)), replace=False).tolist()):
        n = int(rng.integers(2, 200))
        b = np.sort(rng.choice(5000, n, replace=False))
        keep = rng.random(n - 1) < draw(st.floats(0.1, 1.0))
        parts.append((np.full(int(keep.sum()), k), b[:-1][keep], b[1:][keep], rng.integers(0, 6, int(keep.sum()))))
    cols = [np.concatenate(c).astype(np.int64) for c in zip(*parts)] if parts else [np.zeros(0, np.int64)] * 4
    rt = R.RangeTimeline(*cols, [str(i) for i in range(6)])
    m = draw(st.integers(0, 400))
    key = rng.integers(0, 12, m).astype(np.int64)
    a = rng.integers(-20, 5100, m).astype(np.int64)
    b = a + rng.integers(-5, 400, m) * (rng.random(m) < 0.7)  # points, spans, reversed spans
    order = draw(st.sampled_from(["time", "reversed", "shuffled"]))
    o = np.argsort(a, kind="stable") if order == "time" else np.argsort(-a, kind="stable") if order == "reversed" else rng.permutation(m)
    w = rng.integers(0, 10_000, m).astype(np.float64)
    return rt, key[o], a[o], b[o].astype(np.int64), w


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(timelines_and_queries())
def test_compiled_split_equals_numpy(case):
    rt, key, a, b, w = case
    ref = R.split_by_range_numpy(rt, key, a, b, w)
    fns = [R._split_kernel] + ([R._split_fn()] if R._split_fn() is not None else [])
    for fn in fns:
        out = R._split_compiled(fn, rt, key, a, b, w)
        for x, y in zip(ref, out):
            assert x.dtype == y.dtype and np.array_equal(x, y)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-50, 50), max_size=40), st.integers(-60, 60), st.booleans(), st.integers(-5, 50), st.data())
def test_gallop_is_searchsorted(values, x, strict, hint, data):
    arr = np.sort(np.asarray(values, np.int64))
    lo = data.draw(st.integers(0, len(arr)))
    hi = data.draw(st.integers(lo, len(arr)))
    want = lo + int(np.searchsorted(arr[lo:hi], x, side="right" if strict else "left"))
    assert R._gallop(arr, lo, hi, x, strict, hint) == want
