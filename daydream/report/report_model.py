"""The report's data model: the msgspec structs of one trace's analysis (:class:`Report` and its
parts), its ``--json`` form (:func:`report_json`) and its JSON Schema (:func:`report_schema`,
written to ``schemas/report.schema.json``), with the words that mark some of its reasons and
warnings.

The report is computed elsewhere (:mod:`daydream.report.make`, from a graph and its timelines);
renderers (:mod:`daydream.render.text`, :mod:`daydream.render.svg`) read these structs only.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from ..simulate.critical_path import CriticalPath
from ..events.table import Accounting, TraceMeta
from .summary import Summary
from .tables import Tables

REPORT_VERSION = 1

#: How the reason of a verdict decided by the GPU start error begins (render_text shows it).
START_ERROR_REASON = "GPU start error p99"

#: How the reason of a verdict decided by a salvaged truncated file begins (render_text shows it).
TRUNCATED_REASON = "the trace file is truncated"

#: the words that mark the start-up warning (the answer line refers to it)
STARTUP_WORDS = "one-time start-up"

#: the words that mark the warning about cross-stream waits without their event (the answer line refers to it)
UNLINKED_WORDS = "cross-stream waits (cudaStreamWaitEvent) do not say which event they wait for"


class Breakdown(msgspec.Struct, forbid_unknown_fields=True):
    """Time by task kind in a window (ns, summed over lanes, so it can exceed the window)."""

    cpu_runtime_ns: int = 0  #: API calls on CPU threads, excluding time blocked on the GPU
    cpu_gap_ns: int = 0  #: CPU time between API calls (framework and Python code)
    sync_wait_ns: int = 0  #: time CPU threads spent blocked in synchronizing calls
    kernel_ns: int = 0
    memcpy_ns: int = 0
    memset_ns: int = 0


class WindowStats(msgspec.Struct, forbid_unknown_fields=True):
    """One window (the whole trace or one ProfilerStep): measured and replayed."""

    name: str
    measured_ns: int
    replayed_ns: int
    error_pct: float  #: (replayed - measured) / measured * 100
    gpu_busy_measured_ns: int  #: union of the intervals of its GPU tasks (a step: those it launched), summed over devices
    gpu_idle_measured_ns: int  #: devices x window - busy
    gpu_busy_replayed_ns: int
    gpu_idle_replayed_ns: int
    kernels: int
    breakdown: Breakdown  #: from the replayed timeline
    note: str = ""


class GraphSummary(msgspec.Struct, forbid_unknown_fields=True):
    cpu_tasks: int
    gpu_tasks: int
    cpu_lanes: int
    gpu_lanes: int
    launch_edges: int
    sync_edges: int  #: GPU task -> blocking CPU call
    cross_stream_edges: int
    launch_latency_ns: int  #: L, measured (docs/model.md rule 5)
    gpu_gap_ns: int  #: G, measured
    counts: dict[str, int]  #: artefacts kept and links that could not be made, by reason
    gpus: list[int] = []  #: devices with GPU tasks in the trace
    staging_latency_ns: int = 0  #: S, measured: DMA delay of staged pageable copies (0: none seen); the fit's intercept
    #: pageable staging as fitted on the trace's own copies (graph/build/staging.py): the staging
    #: threshold (bytes; -1 no pageable copy), where it comes from ("trace" or the documented rule),
    #: ns per byte of staging beyond S (0: no slope fitted), and the fit in words
    staging_threshold_bytes: int = -1
    staging_threshold_source: str = ""
    staging_ns_per_byte: float = 0.0
    staging_fit: str = ""
    #: contention between streams as the trace shows it (graph/contention.py): the factor
    #: (overlapped-at-start / alone durations of the same kernel names; 0.0 not measured), the
    #: names and instances it comes from, in words
    contention_factor: float = 0.0
    contention: str = ""
    #: the contention model's factor the replay and every prediction used (``--contention``;
    #: docs/model.md, "Contention between streams"; 0.0: off), where it came from, in words, and
    #: how many kernels' recorded durations it took back to their alone duration (inferred)
    contention_applied: float = 0.0
    contention_applied_from: str = ""
    contention_unstretched: int = 0
    #: kernels the baseline replay stretched under the model (-1: off)
    contention_stretched: int = -1


class AppliedOpt(msgspec.Struct, forbid_unknown_fields=True):
    """One optimization as applied: its parameters and what it changed."""

    name: str
    params: dict[str, str]
    note: str
    changed: str = ""  #: GPU and host time before and after, tasks changed / removed / added / left alone (daydream.report.summary.change_summary)


class PredictedWindow(msgspec.Struct, forbid_unknown_fields=True):
    """A window of the predicted timeline next to the baseline."""

    name: str
    measured_ns: int  #: baseline as recorded
    replayed_ns: int  #: baseline as replayed (the reference for the speed-up)
    predicted_ns: int
    speedup: float  #: replayed / predicted
    gpu_busy_predicted_ns: int
    breakdown: Breakdown  #: from the predicted timeline


class WaitBound(msgspec.Struct, forbid_unknown_fields=True):
    """The pessimistic side of a prediction on a trace whose cross-stream waits name no event:
    baseline and prediction replayed with every dependency those waits can have
    (``TaskGraph.latent_waits``, a superset: never earlier than the program would run)."""

    waits: int  #: the latent (producer, consumer) pairs the prediction's graph still holds, added as edges
    baseline_ns: int  #: the traced window replayed with them
    predicted_ns: int  #: the prediction's traced window replayed with them
    speedup: float  #: baseline_ns / predicted_ns


class MemoryPart(msgspec.Struct, forbid_unknown_fields=True):
    """One part of a step's memory at its peak (``docs/memory.md``, "What memory is")."""

    name: str  #: "parameters and persistent", "activations", "gradients", "optimizer state", "temporaries", "other", "allocator slack"
    bytes: int
    how: str  #: "recorded" (read from the allocator's totals) or "inferred: <the rule>"


class MemoryStep(msgspec.Struct, forbid_unknown_fields=True):
    """Peak memory of one ``ProfilerStep#N`` on one device, and what it is made of at that peak."""

    name: str
    peak_allocated_bytes: int
    peak_reserved_bytes: int = -1  #: -1 where the trace does not record the allocator's reserve
    parts: list[MemoryPart] = []  #: at the step's peak; [] where blocks cannot be told apart (no addresses)


class DeviceMemoryStats(msgspec.Struct, forbid_unknown_fields=True):
    """One device's memory over the (replayed or predicted) window, and whether it fits."""

    device: int  #: GPU index; -1 host memory (never judged against a capacity)
    events: int  #: allocator events (allocations and frees)
    peak_allocated_bytes: int
    at_least: bool  #: the trace does not record what was allocated before it (no totals): peaks are lower bounds
    peak_reserved_bytes: int  #: the caching allocator's pool at most; -1 not recorded
    fragmentation: float  #: reserved / allocated: the margin the fit uses
    fragmentation_source: str
    needs_bytes: int  #: peak allocated x fragmentation
    capacity_bytes: int  #: -1 unknown
    capacity_source: str
    fits: bool | None  #: None: capacity unknown (or host memory)
    verdict: str  #: "fits (peak 12.3 of 79.6 GiB)", "does not fit (needs 87.3 GiB of 79.6 GiB)", ...
    steps: list[MemoryStep] = []


class MemoryCurve(msgspec.Struct, forbid_unknown_fields=True):
    """One device's allocated bytes over the replayed (or predicted) window, for the ``--plot``
    memory figure: at most ``2 x memory_fit.CURVE_BUCKETS`` points, each bucket of consecutive
    events kept as its lowest and highest level (in time order), so the peak is drawn exactly."""

    device: int  #: GPU index; -1 host memory
    t_ns: list[int]  #: replayed time of each point, ns from the window's start
    allocated_bytes: list[int]  #: bytes allocated after the event at that time


class MemorySummary(msgspec.Struct, forbid_unknown_fields=True):
    """The memory of the window, from the allocator's events replayed (``docs/memory.md``)."""

    devices: list[DeviceMemoryStats]
    line: str  #: the one-line answer ("GPU 0: fits (peak ...)")
    unanchored_events: int = 0  #: events on threads without CPU tasks (kept at their recorded time)
    curves: list[MemoryCurve] = []  #: per device, its allocated curve, downsampled (the --plot memory figure)


class PredictionRange(msgspec.Struct, forbid_unknown_fields=True):
    """The traced window's predicted time when every kernel a cost model gave a range for
    (``gpu-upgrade``/``amp`` through the kernel-cost library, docs/kernels.md) is at its fast end,
    and at its slow end: each a full replay of the graph, so the range is the window's, not a sum."""

    fast_ns: int  #: the traced window replayed with every ranged kernel at its fast end
    slow_ns: int  #: ... at its slow end
    speedup_high: float  #: replayed baseline / fast_ns
    speedup_low: float  #: replayed baseline / slow_ns
    fast_end: str  #: what puts the kernels at the fast end (the library's reasons, largest kernel time first)
    slow_end: str  #: what puts them at the slow end
    kernels: int  #: kernels with a range


class Prediction(msgspec.Struct, forbid_unknown_fields=True):
    """The predicted effect of one optimization or a composition of several."""

    optimizations: list[AppliedOpt]
    window: PredictedWindow
    steps: list[PredictedWindow]
    critical_path: CriticalPath
    processes: list[PredictedWindow] = []  #: each process (rank) of a multi-process trace, as in Report.processes
    wait_bound: WaitBound | None = None  #: set where the trace has cross-stream waits without their event (daydream.analysis)
    memory: MemorySummary | None = None  #: the predicted memory (None: the trace has no allocator events)
    range: PredictionRange | None = None  #: set where a cost model gave kernels a range (daydream.analysis)
    #: kernels the contention model stretched in the prediction's replay (``--contention``); -1: off
    contention_stretched: int = -1


class Ranked(msgspec.Struct, forbid_unknown_fields=True):
    """One row of ``--opt all``: an optimization alone, or why it does not apply."""

    name: str
    predicted_ns: int  #: -1 when not applicable
    speedup: float  #: 0 when not applicable
    note: str
    speedup_bound: float = 0.0  #: the :class:`WaitBound` speed-up; 0 when there is none
    #: the median step's speed-up (daydream.report.summary.median_step_speedup); 0 without steps
    step_speedup: float = 0.0
    memory: str = ""  #: the prediction's memory verdict per GPU (MemorySummary.line); "" without allocator events
    #: False: the prediction does not fit on some GPU (its peak x margin above the capacity); True: it fits on every
    #: GPU whose capacity is known; None: no allocator events or no capacity known
    fits: bool | None = None
    by_cause_ns: dict[str, int] = {}  #: the prediction's critical path by cause (of the traced window)


class GroupStats(msgspec.Struct, forbid_unknown_fields=True):
    """Time of one phase or layer in the replayed baseline (ns, summed over lanes)."""

    name: str
    gpu_ns: int  #: kernels, copies and sets launched from it
    cpu_ns: int  #: its API calls, and the CPU gaps spent in it (gap phase / layer when mapped)
    launches: int  #: GPU tasks launched from it


class Trust(msgspec.Struct, forbid_unknown_fields=True):
    """How faithful the replay of the unmodified trace is, and so how far to trust predictions."""

    verdict: str  #: "good" (every error within TRUST_FAIR_PCT), "fair", or "unreliable" (over TRUST_UNRELIABLE_PCT)
    reason: str  #: the error that decided the verdict, in words
    max_step_error_pct: float  #: max |replayed - measured| / measured * 100 over ProfilerSteps (0 without steps)
    steps: int  #: ProfilerSteps compared
    window_error_pct: float  #: |error| of the traced window, %
    gpu_start_error_p50_us: float  #: median |replayed - recorded start| of GPU tasks with a recorded interval
    gpu_start_error_p99_us: float
    gpu_tasks_compared: int
    inferred_edges: dict[str, int] = {}  #: edges derived by a rule, not read from the trace: by kind
    incomplete: dict[str, int] = {}  #: graph counts of links the trace lacks (GPU tasks without a launch, ...)
    cause: str = ""  #: when not "good": the recorded wait the replay reproduces least, and what in the trace held it (see replay_cause)
    gpu_start_error_p99_pct: float = 0.0  #: gpu_start_error_p99_us as % of the median measured ProfilerStep (the window without steps); judged like the step error (see start_error_verdict)
    #: the start error judged alone ("good", "fair", "unreliable"): the verdict's with steps is the step error's
    start_verdict: str = ""
    #: the second trust line: the start error, what it risks, and what the trace cannot show held the GPU ("" none)
    start_line: str = ""
    #: how long GPU work launched before the trace held its streams after the trace start, us (the
    #: largest recorded start - t0 of a stream's first task without a launching call; not modelled:
    #: see trust.held_before_trace); 0 when no stream starts with such a task
    held_before_trace_us: float = 0.0
    #: the verdict's sentence on it where it is at least TRUST_FAIR_PCT of the first step (the
    #: window without steps): "first step held by work launched before the trace: N us ..., not
    #: modelled"; "" otherwise (also appended to ``reason``)
    held_line: str = ""


class OpBars(msgspec.Struct, forbid_unknown_fields=True):
    """One op's GPU time (ns, the tasks it launched) in the baseline replay and per prediction."""

    name: str
    baseline_ns: int
    predicted_ns: dict[str, int]  #: prediction label (the optimizations, "a+b") -> ns


class LaneRow(msgspec.Struct, forbid_unknown_fields=True):
    """One lane (a CPU thread or a GPU stream) of a step picture: its busy intervals, [start, end]
    ns from the step's start, in the baseline replay and in the prediction."""

    lane: str
    gpu: bool
    baseline: list[list[int]]
    predicted: list[list[int]]


class StepPicture(msgspec.Struct, forbid_unknown_fields=True):
    """One step (the answer's median step, or the traced window) replayed and predicted, lane by lane
    (daydream.report.pictures)."""

    step: str
    prediction: str  #: the prediction's label
    baseline_ns: int  #: the step's length in the baseline replay
    predicted_ns: int  #: and in the prediction
    lanes: list[LaneRow]
    lanes_left_out: int  #: lanes with work in the step that are not drawn


class Pictures(msgspec.Struct, forbid_unknown_fields=True):
    """What ``--plot`` draws beyond the other sections (daydream.report.pictures)."""

    ops: list[OpBars]  #: the top ops by GPU time in the baseline replay
    step: StepPicture | None = None
    step_position: int | None = None  #: position in Report.steps of the step pictured (None: the window)


#: the schema's description of ``Report.not_applicable`` (and of a job report's)
NOT_APPLICABLE_DOC = ("Optimizations that do not apply: name -> reason. With --opt NAME: the optimizations asked for "
                      "(composed ones joined by ' + '), and exit status 3. With --opt all: every ranking row whose "
                      "predicted_ns is -1 (its note is the reason), and exit status 0.")


def requested_not_applicable(not_applicable: dict[str, str], ranking: list) -> dict[str, str]:
    """The entries of ``not_applicable`` asked for by name (``--opt NAME``): those that are not a
    row of ``ranking`` (``--opt all`` lists its rows that do not apply in both)."""
    ranked = {r.name for r in ranking}
    return {k: v for k, v in not_applicable.items() if k not in ranked}


class Report(msgspec.Struct, forbid_unknown_fields=True):
    """The whole analysis of one trace."""

    report_version: int
    trace: TraceMeta
    accounting: Accounting
    graph: GraphSummary
    window: WindowStats
    steps: list[WindowStats]
    critical_path: CriticalPath  #: of the replayed baseline
    predictions: list[Prediction] = []
    ranking: list[Ranked] = []
    not_applicable: Annotated[dict[str, str], msgspec.Meta(description=NOT_APPLICABLE_DOC)] = {}
    processes: list[WindowStats] = []  #: each process (rank) of a multi-process trace, its own window
    warnings: list[str] = []  #: what limits the trust in the replay or the predictions
    phases: list[GroupStats] = []  #: forward / backward / optimizer / communication / other / unmapped
    layers: list[GroupStats] = []  #: top layers by GPU time
    trust: Trust | None = None  #: how faithful the baseline replay is (set by build_report)
    summary: Summary | None = None  #: the opening answer and the top tables (daydream.report.summary)
    tables: Tables | None = None  #: the peers' tables: kernels, ops, CUDA API, collectives (daydream.report.tables)
    communication: "CommSummary | None" = None  #: the trace's collectives (None: it has none)
    comparison: "Comparison | None" = None  #: ``--compare-to``: predicted (or this trace) against another trace's measurement
    memory: MemorySummary | None = None  #: the replayed memory: peaks, parts, will it fit (None: no allocator events)
    pictures: Pictures | None = None  #: what --plot draws beyond the other sections (daydream.report.pictures)


class CollectiveStats(msgspec.Struct, forbid_unknown_fields=True):
    """The collectives of one operation (daydream/graph/collectives.py): how many, how many with a
    message size in the trace, their bytes (nccl-tests' S) and recorded time, and the bus
    bandwidth they achieved (GB/s, nccl-tests' busbw; None when no size is known)."""

    op: str
    count: int
    sized: int
    bytes: int
    time_ns: int
    busbw_median_gbps: float | None
    busbw_max_gbps: float | None


class CommSummary(msgspec.Struct, forbid_unknown_fields=True):
    """The trace's collectives: total, those without a message size in the trace, per operation,
    and what detection counted (reasons)."""

    collectives: int
    without_size: int
    by_op: list[CollectiveStats]
    counts: dict[str, int]
    #: communication GPU tasks that are not NCCL/RCCL collectives (symmetric-memory ``multimem``
    #: all-reduce kernels, peer-to-peer copies): no size or group is read for them, no what-if re-costs them
    other_tasks: int = 0


class CompareRow(msgspec.Struct, forbid_unknown_fields=True):
    """One quantity of ``--compare-to``: this trace, the prediction and the other trace (ns)."""

    group: str  #: "window", "GPU busy", "critical path", "phase GPU", "phase CPU", "kernel class", "CPU range"
    name: str
    before_ns: int  #: measured in this trace (critical path: of its replay)
    predicted_ns: int  #: the prediction; equal to before_ns for a plain trace-against-trace comparison
    after_ns: int  #: measured in the other trace (critical path: of its replay)
    error_ns: int  #: predicted - after
    #: error_ns / after_ns * 100; None where after_ns is under the comparison's ``rel_floor_ns`` (a
    #: relative error of a quantity that small says nothing: daydream.report.compare.REL_FLOOR_PCT)
    error_pct: float | None


class Comparison(msgspec.Struct, forbid_unknown_fields=True):
    """``--compare-to AFTER``: the prediction (or, without ``--opt``, this trace's measurement)
    against the measurement of AFTER, the trace recorded with the change made (built by
    :func:`daydream.report.compare.compare`)."""

    after: str  #: the other trace's source
    after_format: str
    predicted_by: str  #: the optimizations as given ("a:p=v + b"); "" for a plain comparison of the two traces
    rows: list[CompareRow]
    window_error_pct: float  #: |error| of the traced window
    max_step_error_pct: float  #: max |error| over the steps paired by order (0 without steps)
    notes: list[str] = []  #: how the two were paired, and what could not be
    #: the step the headline compares: "median of N ProfilerSteps" (each trace's own median) or "traced window"
    step_basis: str = ""
    step_before_ns: int = 0  #: this trace's measured step (median over its steps, or its window)
    step_predicted_ns: int = 0  #: the prediction's step (median over its steps, or its window); 0 without a prediction
    step_after_ns: int = 0  #: the other trace's measured step (median over its steps, or its window)
    #: the prediction's speed-up as the answer says it (replayed baseline over prediction, median step); 0 without a prediction
    speedup_predicted: float = 0.0
    speedup_measured: float = 0.0  #: step_before_ns / step_after_ns: the speed-up the change made for real
    #: quantities under this many ns (in the other trace) get no relative error (REL_FLOOR_PCT of step_after_ns)
    rel_floor_ns: int = 0


# ---------------------------------------------------------------- JSON ------------------------
def report_json(r: Report) -> bytes:
    """The ``--json`` document: deterministic bytes for the same input."""
    return msgspec.json.format(msgspec.json.encode(r), indent=2) + b"\n"


def report_schema() -> dict:
    """JSON Schema of the ``--json`` report (written to ``schemas/report.schema.json``)."""
    s = msgspec.json.schema(Report)
    s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    s["title"] = "Daydream report"
    return s
