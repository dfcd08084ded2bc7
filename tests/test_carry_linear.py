"""daydream.simulate.carry.boundaries places a range end over the run of calls it touches only
(issue 38: a ProfilerStep's end, asked once per step and prediction, computed the zero-length
run answer over the whole thread: the second prediction grew with steps x calls)."""

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daydream.simulate import carry


def _thread(starts, lens):
    """A fake graph of one thread's calls (node i: recorded start, length), sorted by start."""
    rs = np.sort(np.asarray(starts, np.int64))
    re = rs + np.asarray(lens, np.int64)
    n = len(rs)
    g = SimpleNamespace(rec_start_ns=rs, rec_end_ns=re, gap_ns=np.full(n, 5, np.int64), host_scales=None)
    tl = SimpleNamespace(start_ns=rs * 2, end_ns=re * 2)
    return g, tl, np.arange(n)


calls = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 2)), min_size=1, max_size=40)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(calls, st.integers(0, 39))
def test_a_slice_ending_at_a_run_end_gives_the_whole_threads_answer(c, lo):
    g, _, nodes = _thread([s for s, _ in c], [d for _, d in c])
    rs = g.rec_start_ns
    full = carry._past_empty_calls(g, nodes, rs)
    lo = min(lo, len(nodes) - 1)
    hi = int(np.searchsorted(rs, rs[lo], side="right"))
    part = carry._past_empty_calls(g, nodes[lo:hi], rs[lo:hi]) + lo
    assert part.tolist() == full[lo:hi].tolist()


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(calls, st.lists(st.integers(-1, 14), min_size=1, max_size=6), st.lists(st.booleans(), min_size=6, max_size=6))
def test_boundaries_equal_the_whole_thread_reference(c, b, ends):
    g, tl, nodes = _thread([s for s, _ in c], [d for _, d in c])
    b = np.asarray(b, np.int64)
    e = np.asarray(ends[: len(b)], bool)
    got = carry.boundaries(g, tl, nodes, b, ends=e)
    # the reference: the rule over the whole thread, as before the change
    rs = g.rec_start_ns
    k = np.searchsorted(rs, b, side="left")
    kk = np.minimum(k, len(nodes) - 1)
    at_b = e & (k < len(nodes)) & (rs[kk] == b)
    k = np.where(at_b, carry._past_empty_calls(g, nodes, rs)[kk], k)
    inside = k < len(nodes)
    x = nodes[np.minimum(k, len(nodes) - 1)]
    before = tl.start_ns[x] - np.clip(rs[x] - b, 0, g.gap_ns[x])
    after = tl.end_ns[nodes[-1]] + (b - g.rec_end_ns[nodes[-1]])
    assert got.tolist() == np.where(inside, before, after).tolist()


def test_one_range_end_reads_its_run_of_calls_not_the_thread(monkeypatch):
    n = 100_000
    g, tl, nodes = _thread(np.arange(n) * 10, np.full(n, 3))
    g.rec_end_ns[500:503] = g.rec_start_ns[500:503]  # calls of no length
    g.rec_start_ns[500:503] = g.rec_start_ns[500]
    g.rec_end_ns[500:503] = g.rec_start_ns[500]
    seen = []
    real = carry._past_empty_calls
    monkeypatch.setattr(carry, "_past_empty_calls", lambda gr, nd, rs: seen.append(len(nd)) or real(gr, nd, rs))
    b = np.array([g.rec_start_ns[500]], np.int64)
    got = carry.boundaries(g, tl, nodes, b, ends=True)
    assert seen == [3]  # the run of calls starting at the end, not the 100 k of the thread
    assert got[0] == tl.start_ns[503] - min(int(g.rec_start_ns[503] - b[0]), 5)
