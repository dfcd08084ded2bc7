"""The memory report's per-step work made linear (issue 38): ``steps_parts``/``_steps`` of
report/memory_fit.py and the per-step peaks of simulate/memory_replay.py equal the per-step loops
they replaced (tests/memory_fit_reference.py, the code at commit 4db9d68) on random event sets:
random addresses, sizes, unpaired and mismatched frees, events without addresses, totals recorded
or not, steps and phases, and a random replayed order (frees before their allocations included)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import memory_fit_reference as ref
from daydream.events.memory import MemoryEvents
from daydream.graph.memory_part import GraphMemory
from daydream.mapping.rules import BACKWARD, FORWARD, OPTIMIZER
from daydream.report import memory_fit
from daydream.simulate import memory_replay


def _program(seed: int, n: int, n_steps: int, totals: bool, phases: bool) -> tuple[GraphMemory, np.ndarray]:
    rng = np.random.default_rng(seed)
    cols = {
        "ts_ns": np.arange(n, dtype=np.int64) * 10,
        "bytes": rng.choice([-300, -200, -100, 0, 100, 200, 300], n).astype(np.int64),
        "addr": rng.integers(-1, 5, n).astype(np.int64),
        "total_allocated": (rng.integers(-1, 2000, n) if totals else np.full(n, -1)).astype(np.int64),
        "total_reserved": (rng.integers(-1, 4000, n) if totals else np.full(n, -1)).astype(np.int64),
        "seq": np.arange(n, dtype=np.int64),
        "pid": np.ones(n, np.int64),
        "tid": np.ones(n, np.int64),
        "device": rng.integers(-1, 2, n).astype(np.int64),
    }
    if totals and rng.random() < 0.5:  # totals on every event: the exact level before the window
        cols["total_allocated"] = np.abs(cols["total_allocated"]) + 1000
        cols["total_reserved"] = np.abs(cols["total_reserved"])
    ev = MemoryEvents.from_columns(cols, sort=False)
    codes = np.array([0, FORWARD, BACKWARD, OPTIMIZER], np.uint8)
    gm = GraphMemory(ev, np.full(n, -1, np.int64), np.zeros(n, np.int64), np.zeros(n, bool),
                     rng.integers(-1, n_steps, n).astype(np.int32) if n_steps else np.full(n, -1, np.int32),
                     tuple(f"ProfilerStep#{i}" for i in range(n_steps)), 0,
                     codes[rng.integers(0, 4, n)] if phases else None)
    # a replayed order unlike the recorded one: random times with ties
    t = rng.integers(0, max(1, n // 2), n).astype(np.int64) if rng.random() < 0.8 else cols["ts_ns"]
    return gm, t


@pytest.mark.slow
@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 80), st.integers(0, 6), st.booleans(), st.booleans())
def test_linear_memory_report_equals_the_per_step_loops(seed, n, n_steps, totals, phases):
    gm, t = _program(seed, n, n_steps, totals, phases)
    # the reference (the per-step loops before the linear rewrite) judges membership by the recorded step;
    # memory_replay takes any per-event step index (the replay passes the replayed intervals' one): give it that
    new, old = memory_replay._curves(gm, t, np.asarray(gm.step)), ref._curves(gm, t)
    assert len(new) == len(old)
    for a, b in zip(new, old):
        assert a.steps == b.steps
        assert (a.device, a.before_bytes, a.peak_allocated_bytes, a.peak_reserved_bytes) == (b.device, b.before_bytes, b.peak_allocated_bytes, b.peak_reserved_bytes)
        assert np.array_equal(a.event, b.event) and np.array_equal(a.allocated_bytes, b.allocated_bytes)
        assert memory_fit._steps(a, gm) == ref._steps(b, gm)
        # every peak position a step can have (before its first event up to its last): the parts agree
        in_step = gm.step[a.event]
        for s in np.unique(in_step[(in_step >= 0) & (in_step < n_steps)]).tolist():
            at = np.flatnonzero(in_step == s)
            for p in range(int(at[0]) - 1, int(at[-1]) + 1):
                assert memory_fit.step_parts(a, gm, s, p) == ref.step_parts(b, gm, s, p)
    g = SimpleNamespace(memory=gm)
    assert memory_replay.recorded_peaks(g) == ref.recorded_peaks(g)


def test_a_free_replayed_before_its_allocation_is_never_held_from_before_the_step():
    """The case the prefix sums rest on (``steps_parts``): a block whose free is replayed before
    its allocation is alive at no position; one step, the allocation in it, the free before it."""
    cols = {"ts_ns": np.array([0, 10, 20], np.int64), "bytes": np.array([100, -100, 50], np.int64),
            "addr": np.array([7, 7, 8], np.int64), "device": np.zeros(3, np.int64)}
    gm = GraphMemory(MemoryEvents.from_columns(cols, sort=False), np.full(3, -1, np.int64), np.zeros(3, np.int64),
                     np.zeros(3, bool), np.array([0, -1, 0], np.int32), ("ProfilerStep#0",), 0, None)
    t = np.array([5, 1, 9], np.int64)  # replayed: the free, then the allocation, then the other block
    (dm,) = memory_replay._curves(gm, t, np.asarray(gm.step))
    assert dm.event.tolist() == [1, 0, 2]
    assert memory_fit._steps(dm, gm) == ref._steps(dm, gm)
    (s,) = memory_fit._steps(dm, gm)
    # no totals: the level before is the lower bound that keeps the replayed curve at or above zero (100,
    # docs/memory.md), so the levels are 0, 100, 150: the peak is the last event; the 100 bytes held from
    # before the window and the 50-byte block are alive there; block 7 (freed before it is allocated) at no position
    assert dm.before_bytes == 100 and dm.allocated_bytes.tolist() == [0, 100, 150]
    assert s.peak_allocated_bytes == 150
    assert [(p.name, p.bytes) for p in s.parts] == [("parameters and persistent", 100), ("other", 50)]


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 200))
def test_thread_order_hold_equals_the_loop_over_threads(seed, n):
    rng = np.random.default_rng(seed)
    t = rng.integers(0, 50, n).astype(np.int64)
    pid = rng.choice([1, 2, 2**40], n).astype(np.int64)  # a pid beyond 32 bits: no packed key may merge threads
    tid = rng.choice([1, 3, 2**33 + 1, -1], n).astype(np.int64)
    assert np.array_equal(memory_replay.hold_thread_order(t.copy(), pid, tid), ref.hold_thread_order(t.copy(), pid, tid))
