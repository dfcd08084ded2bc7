"""daydream.util.arrays.sorted_unique equals np.unique on every dtype it takes."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from daydream.util.arrays import sorted_unique, unique_inverse


@given(hnp.arrays(st.sampled_from([np.int64, np.int32, np.int8, np.uint16, np.bool_]), hnp.array_shapes(max_dims=2, max_side=40)))
def test_equals_np_unique(a):
    got, want = sorted_unique(a), np.unique(a)
    assert got.dtype == want.dtype and np.array_equal(got, want)


@given(st.one_of(hnp.arrays(st.sampled_from([np.int64, np.int32, np.int8, np.uint16, np.bool_]), st.integers(0, 300)),
                 hnp.arrays(np.int64, st.integers(0, 50), elements=st.integers(-(2**62), 2**62))))
def test_unique_inverse_equals_np_unique(a):
    (u, inv), (wu, winv) = unique_inverse(a), np.unique(a, return_inverse=True)
    assert u.dtype == wu.dtype and np.array_equal(u, wu)
    assert inv.dtype == np.int64 and np.array_equal(inv, winv.reshape(-1))


def test_other_dtypes_and_edges():
    f = np.array([2.0, np.nan, 1.0, np.nan])
    assert np.array_equal(sorted_unique(f), np.unique(f), equal_nan=True)
    assert sorted_unique(["b", "a", "b"]).tolist() == ["a", "b"]
    assert sorted_unique(np.zeros(0, np.int64)).dtype == np.int64 and len(sorted_unique([])) == 0
    assert sorted_unique([5]).tolist() == [5] and sorted_unique(np.int64(3)).tolist() == [3]
    big = np.array([2**62, -(2**62), 2**62, 0], np.int64)
    assert sorted_unique(big).tolist() == [-(2**62), 0, 2**62]


@given(st.lists(st.sampled_from([-(2**62), -3, 0, 7, 2**40, 2**62]), max_size=60), st.integers(0, 20),
       st.sampled_from([np.int64, np.int32, np.uint16]))
def test_stable_group_order_equals_argsort(vals, limit, dtype):
    """stable_group_order is np.argsort(kind="stable") whatever the number of distinct keys
    against the limit; few_distinct is np.unique up to its limit."""
    from daydream.util.arrays import few_distinct, stable_group_order

    a = np.array(vals, np.int64)
    if dtype != np.int64:
        a = (a % 1000).astype(dtype)
    assert np.array_equal(stable_group_order(a, limit), np.argsort(a, kind="stable"))
    u = few_distinct(a, limit)
    assert (u is None) == (len(np.unique(a)) > limit) and (u is None or np.array_equal(u, np.unique(a)))


def test_small_pages_restores_numpy_setting(monkeypatch):
    from daydream.util import arrays

    if arrays._set_madvise_hugepage is None:
        pytest.skip("numpy without the huge-page switch")
    monkeypatch.delenv("DAYDREAM_HUGEPAGES", raising=False)
    seen = []

    @arrays.small_pages
    def inner(fail):
        seen.append(arrays._set_madvise_hugepage(False))  # the setting while running
        if fail:
            raise ValueError("x")
        return 7

    was = arrays._set_madvise_hugepage(True)
    try:
        assert inner(False) == 7
        with pytest.raises(ValueError):
            inner(True)
        assert seen == [False, False]
        assert arrays._set_madvise_hugepage(True) is True  # restored after each call
        monkeypatch.setenv("DAYDREAM_HUGEPAGES", "keep")
        assert inner(False) == 7 and seen[-1] is True
    finally:
        arrays._set_madvise_hugepage(was)


def test_report_and_what_if_stages_run_on_small_pages():
    """The stages whose big temporaries grew the kernel time faster than the input at 4 M rows
    (docs/performance.md) run under small_pages, as the mapping and the graph build do."""
    from daydream.util import arrays

    if arrays._set_madvise_hugepage is None:
        pytest.skip("numpy without the huge-page switch")
    from daydream.analysis import apply_all
    from daydream.graph.build import build_graph
    from daydream.report.make import build_prediction, build_report

    for fn in (build_graph, build_report, build_prediction, apply_all):
        assert getattr(fn, "__wrapped__", None) is not None and fn.__code__ is arrays.small_pages(lambda: 0).__code__, fn
