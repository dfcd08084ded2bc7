"""Contention between streams, measured from the trace (daydream/graph/contention.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daydream.formats import load_trace
from daydream.graph import build_graph
from daydream.graph.contention import MIN_CONTENTION_NAMES, contention_factor, measure_contention, other_stream_cover
from daydream.graph.edges import EdgeKind
from daydream.testing.emulator import DeviceSync, EventRecord, Launch, Program, StreamWaitEvent, Thread, emulate, to_kineto


NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def test_other_stream_cover_counts_the_union_once():
    start = np.array([0, 10, 15, 100, 0])
    end = np.array([50, 30, 40, 120, 5])
    dev = np.array([0, 0, 0, 0, 1])
    stream = np.array([1, 2, 3, 2, 1])
    # kernel 0 [0, 50] is covered by [10, 40] (two overlapping kernels, counted once)
    assert other_stream_cover(start, end, dev, stream).tolist() == [30, 20, 25, 0, 0]


def test_factor_is_the_lower_median_of_per_name_ratios():
    dur = np.array([100, 100, 130, 200, 300, 50, 60, 10, 10, 20])
    alone = np.array([1, 1, 0, 1, 0, 1, 0, 0, 1, 0], bool)
    over = np.array([0, 0, 1, 0, 1, 0, 1, 0, 0, 1], bool)  # kernel 7 was overlapped after its start: neither
    key = np.array([1, 1, 1, 2, 2, 3, 3, 3, 4, 4])
    assert contention_factor(dur, alone, over, key) == (1.3, 4, 5, 4)  # ratios 1.2, 1.3, 1.5, 2.0: the lower median
    assert contention_factor(dur[:5], alone[:5], over[:5], key[:5])[0] == 0.0  # 2 names < MIN_CONTENTION_NAMES
    assert MIN_CONTENTION_NAMES == 3


def _program(names=4, L=5_000):
    """Each of ``names`` kernels runs alone on stream 7 (a device sync after each), then again on
    stream 20 while a long kernel runs on stream 7: emulated with contention ``f``
    (``emulate(prog, f)``), each of those starts while ``long`` runs and lasts ``f`` x, the trace
    a GPU with that contention would record (``long`` started on an idle GPU: not stretched)."""
    ops = []
    durs = [40_000 + 10_000 * i for i in range(names)]
    for i, d in enumerate(durs):
        ops += [Launch(7, f"k{i}", d, 1_000), DeviceSync(100)]
    ops += [Launch(7, "long", 10_000_000, 1_000)]
    ops += [Launch(20, f"k{i}", d, 1_000) for i, d in enumerate(durs)]
    ops += [DeviceSync(100)]
    return Program([Thread(ops)], launch_latency_ns=L, gpu_gap_ns=0)


def test_measured_factor_on_a_trace_built_to_show_it(tmp_path):
    p = tmp_path / "c.json"
    to_kineto(emulate(_program(), 1.5), str(p))
    c = measure_contention(build_graph(load_trace(str(p))))
    assert (c.factor, c.names, c.alone, c.overlapped, c.reason) == (1.5, 4, 4, 4, "")
    assert "x1.500" in c.describe()


def test_too_few_names_is_said(tmp_path):
    p = tmp_path / "c.json"
    to_kineto(emulate(_program(names=2), 1.5), str(p))
    c = measure_contention(build_graph(load_trace(str(p))))
    assert c.factor == 0.0 and c.names == 2 and "at least 3 needed" in c.reason
    assert c.describe().startswith("contention not measured")


def test_collective_late_start_is_split_by_a_running_stream(tmp_path):
    """Two NCCL kernels on stream 20: one launched while a long kernel runs on stream 7 (no
    dependency: it starts at its launch + L, 0 late, "overlapped" since the long kernel runs
    then), one launched on an idle GPU (0 late, "alone")."""
    ops = [Launch(7, "long", 1_000_000, 1_000), Launch(20, NCCL, 50_000, 1_000), DeviceSync(100),
           Launch(20, NCCL, 50_000, 1_000), DeviceSync(100)]
    p = tmp_path / "n.json"
    to_kineto(emulate(Program([Thread(ops)], launch_latency_ns=5_000, gpu_gap_ns=1_000)), str(p))
    c = measure_contention(build_graph(load_trace(str(p))))
    assert (c.comm_alone, c.comm_overlapped, c.comm_late_alone_ns, c.comm_late_overlapped_ns) == (1, 1, 0, 0)


def test_collective_late_start_counts_what_the_graph_does_not_hold(tmp_path):
    """An NCCL kernel held by a cross-stream wait: with the event link, its wait is an edge (0
    late, and "alone": its producer has ended at the time the graph allows it); with the link
    call left out of the trace (no edge, none inferred) it is late by what held it, while
    the long kernel of stream 7 runs ("overlapped")."""
    ops = [Launch(7, "long", 1_000_000, 1_000), Launch(7, "other", 100_000, 1_000), EventRecord("e", 7, 1_000),
           StreamWaitEvent(20, "e", 1_000), Launch(20, NCCL, 50_000, 1_000), DeviceSync(100)]
    run = emulate(Program([Thread(ops)], launch_latency_ns=5_000, gpu_gap_ns=1_000))
    p = tmp_path / "linked.json"
    to_kineto(run, str(p))
    c = measure_contention(build_graph(load_trace(str(p))))
    assert (c.comm_alone, c.comm_late_alone_ns, c.comm_overlapped) == (1, 0, 0)
    doc = to_kineto(run, None, wait_event_links=False, emit_sync_events=False)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") != "cudaStreamWaitEvent"]  # a wait the trace lost
    p = tmp_path / "stripped.json"
    p.write_text(json.dumps(doc))
    g = build_graph(load_trace(str(p)))
    assert not (g.edge_kind == EdgeKind.XSTREAM).any()
    c = measure_contention(g)
    t = next(t for t in run.tasks if t.name == NCCL)
    held = t.start_ns - (run.calls[t.call].start_ns + 5_000)
    assert held > 0 and (c.comm_overlapped, c.comm_late_overlapped_ns, c.comm_alone) == (1, held, 0)


def test_group_median_is_numpys_per_group():
    from daydream.graph.contention import _group_median
    rng = np.random.default_rng(0)
    key = rng.integers(0, 7, 200)
    val = rng.integers(0, 1_000, 200)
    keys, med = _group_median(key, val)
    assert keys.tolist() == sorted(set(key.tolist()))
    assert med.tolist() == [float(np.median(val[key == k])) for k in keys.tolist()]


@pytest.mark.slow
@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.integers(100, 400), st.integers(3, 6), st.integers(2_000, 15_000))
def test_measured_factor_is_the_stretch_the_trace_was_built_with(tmp_path_factory, pct, names, L):
    """Over programs the emulator runs with contention ``pct / 100`` (durations multiples of
    10_000 ns, so every name's stretched duration, rounded, is exactly ``pct / 100`` x), the
    measured factor is that stretch, from every name and instance: measuring and applying agree."""
    p = tmp_path_factory.mktemp("c") / "c.json"
    to_kineto(emulate(_program(names=names, L=L), pct / 100), str(p))
    c = measure_contention(build_graph(load_trace(str(p))))
    assert c.factor == pytest.approx(pct / 100, rel=1e-12)
    assert (c.names, c.alone, c.overlapped, c.reason) == (names, names, names, "")
