"""The job report's definitions (``daydream-analyze`` on several traces; ``docs/jobs.md``), as
msgspec structs whose JSON Schema is ``schemas/job_report.schema.json``. Built by
:mod:`daydream.job.reporting`. All times ns.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from .report_model import NOT_APPLICABLE_DOC

JOB_REPORT_VERSION = 3  #: 2: replay trust per rank and for the job; 3: per-rank memory


class Segment(msgspec.Struct, forbid_unknown_fields=True):
    rank: int
    start_ns: int  #: on the lowest rank's clock
    end_ns: int
    via_collective: int  #: the collective the path left this rank by (-1: it starts here)


class JobCriticalPath(msgspec.Struct, forbid_unknown_fields=True):
    total_ns: int  #: last end minus the trace start of the rank the path starts on
    by_cause_ns: dict[str, int]
    segments: list[Segment]  #: latest first


class RankRow(msgspec.Struct, forbid_unknown_fields=True):
    """One rank (times ns)."""

    rank: int
    trace: str  #: file name (not the folder)
    rank_from: str  #: "trace" (distributedInfo), "file name" or "order"
    clock_offset_ns: int  #: its clock minus the lowest rank's (0 on a shared clock)
    measured_ns: int  #: its traced window (first ProfilerStep start .. last GPU task end), as recorded
    replayed_ns: int  #: the same window in the coupled replay
    error_pct: float
    alone_error_pct: float  #: the rank replayed alone (collectives keep their recorded durations)
    wait_measured_ns: int  #: time inside collectives before the last participant arrived, recorded
    wait_replayed_ns: int  #: the same in the coupled replay
    waited_for: dict[str, int]  #: recorded wait by the rank that arrived last ("7": ns)
    transfer_ns: int  #: time inside collectives after the last arrival, recorded
    comm_overlap_pct: float  #: share of its communication time (replayed) overlapped by its compute kernels
    last_arrivals: int  #: collectives it reached last
    critical_path: dict[str, int]  #: its coupled replay's critical path by cause; ``peers``: before the last peer arrived
    #: how far its coupled replay is trusted ("good", "fair", "unreliable"; the single-trace rule of
    #: ``report.trust_verdict`` on its window error, and its GPU start error without steps); listed
    #: in the job's reason, never deciding the job's verdict
    trust: str = ""
    gpu_start_error_p99_us: float = 0.0  #: p99 |replayed - recorded start| of its GPU tasks, coupled replay
    gpu_start_error_p99_pct: float = 0.0  #: the same as % of its median measured ProfilerStep (its window without steps)


class RankIdle(msgspec.Struct, forbid_unknown_fields=True):
    """One rank's window in the coupled replay, split by what its GPU does (times ns; the parts of
    ``window_ns`` are ``compute_ns + bubble_ns + peer_wait_ns + transfer_ns + idle_ns``). Sets of
    instants: C compute (GPU tasks that are not collectives); P waiting at point-to-point
    transfers (send/recv) for the other side: a pipeline's bubble; W waiting at the other
    collectives for the last participant; T transfers (after the last arrival). ``bubble_ns`` =
    |P minus C|, ``peer_wait_ns`` = |W minus (P u C)|, ``transfer_ns`` = |T minus (W u P u C)|, ``idle_ns`` =
    the window outside them all (no GPU work, nothing pending: host-bound gaps).
    ``exposed_comm_ns`` = |(T u W u P) minus C|, ``hidden_comm_ns`` = |(T u W u P) n C|."""

    rank: int
    window_ns: int
    compute_ns: int
    bubble_ns: int
    peer_wait_ns: int
    transfer_ns: int
    idle_ns: int
    exposed_comm_ns: int
    hidden_comm_ns: int


class CollectiveRow(msgspec.Struct, forbid_unknown_fields=True):
    index: int
    op: str
    group: str
    size_bytes: int
    last_rank: int  #: recorded
    last_rank_replayed: int
    wait_max_ns: int  #: longest recorded wait of a participant
    transfer_ns: int  #: the last arrival's recorded duration


class Straggler(msgspec.Struct, forbid_unknown_fields=True):
    rank: int
    caused_wait_ns: int  #: peers' recorded wait at the collectives it reached last
    late_start_ns: int  #: its first step started this much after the median rank's (before the traced window)
    cause: str  #: in words
    critical_path: dict[str, int]  #: its own by cause (cpu, gpu_compute, communication, launch, sync)


class RankMemory(msgspec.Struct, forbid_unknown_fields=True):
    """One rank's GPU memory (``docs/memory.md``; the allocator's events of its trace replayed on
    its coupled timeline): the peak of its GPU with the highest peak, what the step at that peak
    is made of, and whether it fits. Bytes."""

    rank: int
    device: int  #: the GPU (its index on the rank's host)
    peak_allocated_bytes: int
    at_least: bool  #: the trace does not record what was allocated before it: a lower bound
    step: str  #: the ProfilerStep at the peak ("" none)
    parts: dict[str, int]  #: that step's parts at its peak (``MemoryPart`` names: bytes; {} without addresses)
    shares_pct: dict[str, float]  #: each part's share of the step's peak allocated bytes, %
    needs_bytes: int  #: peak x the fragmentation margin
    capacity_bytes: int  #: -1 unknown
    fits: bool | None  #: None: capacity unknown
    verdict: str


class JobPrediction(msgspec.Struct, forbid_unknown_fields=True):
    """A job-level what-if, replayed coupled (times ns)."""

    name: str  #: the optimizations, composed in order
    ranks: list[int]  #: ranks the single-trace optimizations were applied to ([] for straggler alone)
    replayed_ns: int  #: the job's step (slowest rank's window), baseline coupled replay
    predicted_ns: int
    speedup: float  #: replayed / predicted
    rank_predicted_ns: list[int]  #: each rank's window, predicted
    notes: dict[str, str]  #: per rank: what was changed, or why the optimization did not apply
    #: per rank (of the ranks with allocator events), its predicted GPU memory (:class:`RankMemory`)
    memory: list[RankMemory] = []


class JobReport(msgspec.Struct, forbid_unknown_fields=True):
    report_version: int
    ranks: int
    world_size: int
    clock: str  #: "shared" or "estimated" (offsets inferred from collective ends)
    collectives: int
    rounds: int  #: coupled replay rounds until settled
    step_measured_ns: int  #: the slowest rank's window
    step_replayed_ns: int
    step_error_pct: float
    rank_rows: list[RankRow]
    collective_rows: list[CollectiveRow]
    straggler: Straggler | None
    counts: dict[str, int]
    predictions: list[JobPrediction] = []
    not_applicable: Annotated[dict[str, str], msgspec.Meta(description=NOT_APPLICABLE_DOC)] = {}
    #: True under --opt all: ``predictions`` is the ranking, each optimization alone, best first
    ranked: bool = False
    critical_path: JobCriticalPath | None = None  #: of the coupled replay, across ranks
    #: how far the coupled baseline replay is trusted: the job step's own error decides ("good",
    #: "fair", "unreliable"); the reason lists every rank's verdict
    trust: str = ""
    trust_reason: str = ""
    #: per rank, its coupled replay's window split into compute, peer wait, transfer and bubble,
    #: and its communication exposed / hidden (:class:`RankIdle`)
    idle: list[RankIdle] = []
    #: per rank with allocator events in its trace (``profile_memory=True``), its GPU memory in the
    #: coupled replay (:class:`RankMemory`)
    memory: list[RankMemory] = []


def job_report_schema() -> dict:
    """JSON Schema of a job's ``--json`` report (written to ``schemas/job_report.schema.json``)."""
    s = msgspec.json.schema(JobReport)
    s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    s["title"] = "Daydream job report"
    return s
