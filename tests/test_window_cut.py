"""Windows cut from a longer run: GPU work launched before the window keeps its recorded place in
its stream (order only, never timing), and does not enter the launch-latency measurement."""

from __future__ import annotations

import numpy as np

from daydream.events.cuda_api import DEFAULT_LAUNCH_LATENCY_OTHER_NS
from daydream.graph.build.latency import L_DEFAULT

from daydream.graph import build_graph
from daydream.graph.build.tasks import unlaunched_positions
from daydream.simulate import simulate

from tablebuilder import TB


def _cut_window():
    """A stream with a backlog: two kernels launched before the window (no launch in the trace)
    run until 900; a kernel launched at 100 inside the window runs after them."""
    b = TB()
    b.gpu(-1, 0, 500, stream=7, name="before_a")
    b.gpu(-1, 500, 900, stream=7, name="before_b")
    c = b.call("cudaLaunchKernel", 100, 110)
    b.gpu(c, 900, 1000, stream=7, name="inside")
    return b.table()


def test_unlaunched_work_keeps_its_recorded_stream_order():
    g = build_graph(_cut_window())
    names = g.node_names()
    inside = int(np.flatnonzero(names == "inside")[0])
    before_b = int(np.flatnonzero(names == "before_b")[0])
    assert g.lane_prev[inside] == before_b  # FIFO in recorded order, not behind by start time
    tl = simulate(g)
    assert tl.start_ns[inside] >= tl.end_ns[before_b]


def test_backlogged_launch_is_not_a_launch_latency_sample():
    g = build_graph(_cut_window())
    # the only in-window launch waited for pre-window work: no sample (not 790 ns); the GPU is
    # backlogged at every launch, so L is the default (no device named: the other-GPU default), said,
    # at most the least launch-to-start delay (launch 100, start 900: no task starts before launch + L)
    assert g.launch_latency_ns == min(DEFAULT_LAUNCH_LATENCY_OTHER_NS, 900 - 100)
    assert [k for k in g.counts if k.startswith(L_DEFAULT)]


def test_unlaunched_positions_take_the_earliest_later_launch_on_their_stream():
    lane = np.array([0, 0, 0, 1])
    is_gpu = np.array([True, True, True, True])
    launch = np.array([-1, 5, -1, -1])
    position = np.array([800, 100, 950, 40])
    rec_start = np.array([800, 900, 950, 40])
    out = unlaunched_positions(lane, is_gpu, launch, position, rec_start)
    assert out.tolist() == [100, 100, 950, 40]
