"""daydream.graph.model.lexsort_packed, the order dedupe_edges keeps the first edge of each
constraint by, is np.lexsort: keys packed into one int64 when they fit, np.lexsort otherwise
(negative values, ranges whose product passes 2**62, uint64)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from daydream.graph.model import lexsort_packed


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 60), st.sampled_from([1, 3, 1000, 2**20, 2**40]), st.booleans())
def test_lexsort_packed_is_lexsort(seed, n, span, negative):
    """Packed or not, the order of np.lexsort."""
    rng = np.random.default_rng(seed)
    keys = [rng.integers(-3 if negative else 0, span, n), rng.integers(0, 4, n).astype(np.int16),
            rng.integers(0, span, n), rng.integers(0, 7, n).astype(np.uint8)]
    assert np.array_equal(lexsort_packed(keys), np.lexsort(keys))


def test_uint64_and_empty_keys():
    big = np.array([2**63 + 5, 3, 2**63 + 1], np.uint64)
    keys = [np.array([1, 0, 1]), big]
    assert np.array_equal(lexsort_packed(keys), np.lexsort(keys))
    assert np.array_equal(lexsort_packed([np.zeros(0, np.int64)]), np.lexsort([np.zeros(0, np.int64)]))
