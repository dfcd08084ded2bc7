"""The job report's split of each rank's window (daydream/job/reporting.py ``idle_split``,
``RankIdle``): compute, bubble (waits at send/recv), peer wait (waits at other collectives),
transfer and idle; communication exposed / hidden. Judged on a two-stage GPipe pipeline the job
emulator runs (each rank's split equals the one read off the emulator's own run) and on the DLRM
job (the parts add up to the window; exposed + hidden = the rank's replayed waits + transfers)."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from daydream.job import analyze_job
from daydream.job.reporting import idle_split
from daydream.testing.emulator import Launch, Program, Thread
from daydream.testing.job_emulator import ALL_TO_ALL, emulate_job, write_job

S0 = 7
L, G = 5_000, 1_000
P2P = ALL_TO_ALL  # an ncclKernel_SendRecv_* kernel: a point-to-point transfer


def gpipe(m: int, f: int, b: int, t: int) -> list[Program]:
    """Two stages, ``m`` micro-batches, GPipe order (all forwards, then all backwards), one stream
    per rank: stage 0 sends each activation after its forward and receives each gradient before
    its backward; stage 1 receives before each forward and sends each gradient after its backward
    (``t`` ns of transfer each; every p2p is one collective of both ranks, in the same order)."""
    s0 = [x for i in range(m) for x in (Launch(S0, f"fwd_{i}", f, 2_000), Launch(S0, P2P, t, 2_000))]
    s0 += [x for i in range(m) for x in (Launch(S0, P2P, t, 2_000), Launch(S0, f"bwd_{i}", b, 2_000))]
    s1 = [x for i in range(m) for x in (Launch(S0, P2P, t, 2_000), Launch(S0, f"fwd_{i}", f, 2_000))]
    s1 += [x for i in range(m) for x in (Launch(S0, f"bwd_{i}", b, 2_000), Launch(S0, P2P, t, 2_000))]
    return [Program([Thread(s)], launch_latency_ns=L, gpu_gap_ns=G) for s in (s0, s1)]


@pytest.mark.slow
def test_pipeline_bubble_equals_the_emulators_waits(tmp_path):
    job = emulate_job(gpipe(4, 100_000, 200_000, 10_000))
    res = analyze_job(write_job(job, tmp_path))
    for r, x in enumerate(res.report.idle):
        run = job.runs[r]
        coll = job.collective_tasks(r)
        tasks = run.tasks
        waits = [job.arrive_ns[k] - tasks[i].start_ns for k, i in enumerate(coll)]
        xfer = [tasks[i].end_ns - job.arrive_ns[k] for k, i in enumerate(coll)]
        comp = sum(t.end_ns - t.start_ns for j, t in enumerate(tasks) if j not in set(coll))
        assert x.bubble_ns == sum(waits) and x.peer_wait_ns == 0
        assert x.transfer_ns == sum(xfer) and x.compute_ns == comp and x.hidden_comm_ns == 0
        assert x.compute_ns + x.bubble_ns + x.peer_wait_ns + x.transfer_ns + x.idle_ns == x.window_ns
    # stage 1 waits for stage 0's first forward, stage 0 for stage 1's backwards: both have a bubble
    assert all(x.bubble_ns > 100_000 for x in res.report.idle)


def test_idle_split_gives_shared_instants_to_the_earlier_set():
    iv = (lambda *p: (np.array([a for a, _ in p]), np.array([b for _, b in p])))
    d = idle_split((0, 100), iv((0, 10)), iv((5, 20)), iv((15, 30)), iv((25, 40), (90, 95)))
    assert d == {"window_ns": 100, "compute_ns": 10, "bubble_ns": 10, "peer_wait_ns": 10, "transfer_ns": 15, "idle_ns": 55,
                 "exposed_comm_ns": 35, "hidden_comm_ns": 5}


DLRM = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "traces", "param_dlrm")


@pytest.mark.slow
def test_dlrm_job_split_adds_up():
    paths = sorted(glob.glob(os.path.join(DLRM, "*.gz")))
    if not paths:
        pytest.skip("shared traces not present")
    r = analyze_job(paths).report
    assert len(r.idle) == 8
    for x, row in zip(r.idle, r.rank_rows):
        assert x.compute_ns + x.bubble_ns + x.peer_wait_ns + x.transfer_ns + x.idle_ns == x.window_ns
        assert x.bubble_ns == 0  # DLRM has all-reduces and all-to-alls, no send/recv
        assert x.exposed_comm_ns + x.hidden_comm_ns == pytest.approx(row.wait_replayed_ns + row.transfer_ns, rel=0.05)
