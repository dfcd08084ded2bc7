"""The compiled binding records (daydream/simulate/binding.py: _bind_kernel) equal the records
computed from scratch (bindings_reference) and by the numpy passes (bindings_numpy), on random
emulator programs (plain, CUDA graphs, multi-device, copies with staging, thread hand-overs) and
the same graphs after random scale / remove / insert steps. The kernel runs uncompiled in every
example and compiled where numba is installed."""

from __future__ import annotations

import pytest
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from daydream.util import jit
from daydream.simulate import simulate
from daydream.simulate import binding
from daydream.testing.emulator import emulate, programs

from test_handover import handover_programs
from test_pageable_copies import copy_programs
from test_replay_compiled import _STEPS, SETTINGS, _transformed
from test_transform import _graph_of


def _assert_bindings_equal(g):
    tl = simulate(g)
    args = (g, tl.start_ns, tl.end_ns, tl.blocked_ns)
    ref = binding.bindings_reference(*args)
    got = [binding.bindings_numpy(*args), binding.bind_compiled(binding._bind_kernel, *args)]
    if jit.compiled(binding._bind_kernel) is not None:
        got.append(binding.bind_compiled(jit.compiled(binding._bind_kernel), *args))
    for out in got:
        for a, b in zip(out, ref):
            assert a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.slow
@SETTINGS
@given(st.one_of(programs(), programs(graph_launches=True), programs(max_devices=2, sync_events=False),
                 copy_programs(), copy_programs(staging=True), handover_programs()), _STEPS)
def test_compiled_bindings_equal_the_reference(tmp_path_factory, prog, steps):
    g = _graph_of(tmp_path_factory.mktemp("b"), emulate(prog))
    _assert_bindings_equal(g)
    _assert_bindings_equal(_transformed(g, steps))


@given(st.one_of(st.integers(1, 3000), st.just(2**40)), st.integers(0, 400), st.integers(0, 2**32), st.sampled_from([(0, 3), (-5, 60), (0, 0)]))
def test_packed_sort_is_the_lexsort(n, m, seed, prefer_range):
    rng = np.random.default_rng(seed)
    a, c = rng.integers(0, n, m), rng.integers(0, n, m)
    b = rng.integers(prefer_range[0], prefer_range[1] + 1, m).astype(np.uint8 if prefer_range[0] >= 0 else np.int64)
    assert np.array_equal(binding._lexsort3(a, b, c, n), np.lexsort((c, b, a)))
