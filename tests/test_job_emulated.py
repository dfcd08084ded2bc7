"""Emulated jobs (daydream.testing.job_emulator) judge the coupled replay: it reproduces every
rank's timeline, and a change on one rank predicted equals the emulator's run of the changed job."""

from __future__ import annotations

import pytest
import tempfile

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from daydream.job import analyze_job
from daydream.job.whatif import parse_job_specs, predict
from daydream.testing.emulator import (
    measure_latencies,
    EventRecord,
    HostWork,
    Launch,
    Program,
    StreamSync,
    StreamWaitEvent,
    Thread,
)
from daydream.testing.job_emulator import ALL_REDUCE, ALL_TO_ALL, emulate_job, write_job

COMPUTE, COMM = 7, 20
L, G = 5_000, 1_000


@st.composite
def jobs(draw, max_ranks: int = 4, max_colls: int = 3):
    """Random jobs: 2..max_ranks ranks, 1..max_colls collectives (the same transfers on every
    rank); per rank one thread: host work (the skew), compute kernels ``gemm_<i>`` on stream 7,
    each collective on stream 20 after an event from stream 7 (or on stream 7), sometimes a
    stream synchronize after it (the CPU then waits for its peers too)."""
    R = draw(st.integers(2, max_ranks))
    K = draw(st.integers(1, max_colls))
    transfer = [draw(st.integers(1, 50)) * 1_000 for _ in range(K)]
    name = [draw(st.sampled_from((ALL_REDUCE, ALL_TO_ALL))) for _ in range(K)]
    progs = []
    for _ in range(R):
        # a prefix that shows L (a launch on an idle stream) and G (a ready kernel behind a busy one)
        ops = [Launch(COMPUTE, "warm_a", 60_000, 4_000), Launch(COMPUTE, "warm_b", 2_000, 4_000),
               StreamSync(COMPUTE, 1_000), HostWork(draw(st.integers(0, 200)) * 1_000)]
        for k in range(K):
            for i in range(draw(st.integers(0, 3))):
                ops += [HostWork(draw(st.integers(0, 30)) * 1_000),
                        Launch(COMPUTE, f"gemm_{k}_{i}", draw(st.integers(1, 100)) * 2_000, 4_000)]
            if draw(st.booleans()):
                ops += [EventRecord(("e", k), COMPUTE, 2_000), StreamWaitEvent(COMM, ("e", k), 2_000),
                        Launch(COMM, name[k], transfer[k], 4_000)]
                sync = COMM
            else:
                ops += [Launch(COMPUTE, name[k], transfer[k], 4_000)]
                sync = COMPUTE
            if draw(st.booleans()):
                ops += [StreamSync(sync, 1_000)]
        ops += [Launch(COMPUTE, "gemm_tail", draw(st.integers(1, 50)) * 2_000, 4_000), StreamSync(COMPUTE, 1_000)]
        progs.append(Program([Thread(ops)], launch_latency_ns=L, gpu_gap_ns=G))
    return progs


def _analyze(progs):
    job = emulate_job(progs)
    for run in job.runs:  # the trace shows the emulator's L and G (as tests/test_replay_emulator.py)
        assume(measure_latencies(run) == (L, G))
    with tempfile.TemporaryDirectory() as d:
        write_job(job, d)
        return job, analyze_job([d])


@pytest.mark.slow
@given(jobs())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_coupled_replay_reproduces_every_rank(progs):
    job, res = _analyze(progs)
    m = res.matching
    assert m.clock == "shared" and len(m) == len(job.arrive_ns)
    assert list(m.arrive_ns) == list(job.arrive_ns)
    for i, (g, tl) in enumerate(zip(res.coupled.graphs, res.coupled.timelines)):
        real = g.row >= 0
        assert np.array_equal(tl.start_ns[real], g.rec_start_ns[real]), f"rank {i} starts"
        assert np.array_equal(tl.end_ns[real], g.rec_end_ns[real]), f"rank {i} ends"
    for r in res.report.rank_rows:
        assert r.error_pct == 0.0 and r.wait_measured_ns == r.wait_replayed_ns
    # the job's critical path tiles [trace start of the rank it starts on, the job's last end]
    cp = res.report.critical_path
    segs = cp.segments
    assert all(v >= 0 for v in cp.by_cause_ns.values()) and sum(cp.by_cause_ns.values()) == cp.total_ns
    assert all(a.start_ns == b.end_ns for a, b in zip(segs, segs[1:]))
    first = res.coupled.graphs[segs[-1].rank]
    assert segs[-1].start_ns == first.t0_ns and segs[0].end_ns - segs[-1].start_ns == cp.total_ns


@pytest.mark.slow
@given(jobs(), st.data())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_change_on_one_rank_equals_emulator(progs, data):
    """Compute kernels of one rank x2 or x0.5: every rank's predicted window equals the
    emulator's run of the changed job."""
    _one_rank_scaled_equals_emulator(progs, data, lambda name: name.startswith("gemm_"), "^gemm_")


def _one_rank_scaled_equals_emulator(progs, data, which, pattern: str) -> None:
    """One rank (drawn) with the kernels ``which(name)`` x2 or x0.5: every rank's window predicted
    by ``scale-kernels:pattern=PATTERN`` on that rank equals the emulator's run of the changed job."""
    rank = data.draw(st.integers(0, len(progs) - 1))
    factor = data.draw(st.sampled_from((2, 0.5)))

    def change(op):
        if isinstance(op, Launch) and which(op.kernel_name):
            return Launch(op.stream, op.kernel_name, int(op.kernel_dur_ns * factor), op.call_dur_ns)
        return op

    job2 = emulate_job([p.map_ops(change) if r == rank else p for r, p in enumerate(progs)])
    _, res = _analyze(progs)
    p = predict(res.ranks, res.matching, res.coupled,
                parse_job_specs([f"scale-kernels:pattern={pattern},factor={factor}"], len(progs)), only=[rank])
    assert p.rank_predicted_ns == [max(t.end_ns for t in run.tasks) - run.trace_t0_ns for run in job2.runs]


@pytest.mark.slow
@given(jobs(), st.data())
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_slower_or_faster_transfer_on_one_rank_changes_the_collective_for_all(progs, data):
    """One rank's collective kernels x2 (a slower link on that rank) or x0.5: a collective ends on
    every participant together, so x2 delays every rank and x0.5 alone changes nothing; each rank's
    predicted window equals the emulator's run (was: only that rank's transfer changed, and its
    peers finished the same all-reduce before it)."""
    _one_rank_scaled_equals_emulator(progs, data, lambda name: name in (ALL_REDUCE, ALL_TO_ALL), "^nccl")


def test_mixed_formats_one_job(tmp_path):
    """Ranks in different formats (Kineto JSON, CUPTI JSON Lines, a saved table), numbered by
    their file names, are one job: the same matching and an exact coupled replay."""
    from daydream.formats import load_trace
    from daydream.formats.cupti_export import write_cupti_jsonl

    def rank(skew, work):
        return Program([Thread([Launch(COMPUTE, "warm_a", 60_000, 4_000), Launch(COMPUTE, "warm_b", 2_000, 4_000),
                                StreamSync(COMPUTE, 1_000), HostWork(skew), Launch(COMPUTE, "gemm_0", work, 4_000),
                                Launch(COMPUTE, ALL_REDUCE, 20_000, 4_000), StreamSync(COMPUTE, 1_000)])],
                       launch_latency_ns=L, gpu_gap_ns=G)

    job = emulate_job([rank(0, 10_000), rank(50_000, 30_000), rank(20_000, 2_000)])
    paths = write_job(job, tmp_path)
    write_cupti_jsonl(load_trace(paths[1]), tmp_path / "trace_rank1.jsonl")
    load_trace(paths[2]).save(str(tmp_path / "trace_rank2.npz"))
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (tmp_path / "rank0.json").rename(mixed / "trace_rank0.json")
    (tmp_path / "trace_rank1.jsonl").rename(mixed / "trace_rank1.jsonl")
    (tmp_path / "trace_rank2.npz").rename(mixed / "trace_rank2.npz")
    res = analyze_job([str(mixed)])
    assert [r.rank_source for r in res.ranks] == ["file name"] * 3
    assert [r.fmt for r in res.ranks][:2] == ["kineto", "cupti-jsonl"] and res.ranks[2].path.endswith(".npz")
    assert list(res.matching.arrive_ns) == list(job.arrive_ns)
    assert int(res.matching.ranks[res.matching.last[0]]) == 1
    for g, tl in zip(res.coupled.graphs, res.coupled.timelines):
        real = g.row >= 0
        assert np.array_equal(tl.end_ns[real], g.rec_end_ns[real])


@given(jobs(max_colls=2), st.lists(st.integers(-5_000, 5_000), min_size=4, max_size=4))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_clock_offsets(progs, offs):
    """Ranks recorded on clocks offset by up to +-5 ms: where the offsets leave a matched
    collective without a common instant they are estimated from the collectives' ends (exactly:
    the ends agree), counted as inferred, and the coupled replay is exact on every rank's own clock."""
    job = emulate_job(progs)
    for run in job.runs:
        assume(measure_latencies(run) == (L, G))
    offs = [o * 1_000 - offs[0] * 1_000 for o in offs[: len(progs)]]
    with tempfile.TemporaryDirectory() as d:
        write_job(job, d, offsets_ns=offs)
        res = analyze_job([d])
    m = res.matching
    if m.clock == "estimated":
        assert list(m.offset_ns) == offs
        assert m.counts["rank clock offset estimated from collective ends (inferred)"] == sum(o != 0 for o in offs)
    else:
        assert not m.offset_ns.any()
    for g, tl in zip(res.coupled.graphs, res.coupled.timelines):
        real = g.row >= 0
        if m.clock == "estimated":
            assert np.array_equal(tl.end_ns[real], g.rec_end_ns[real])
