"""The report model and its computation: measured vs replayed time for the traced window, each
ProfilerStep and each process, GPU busy/idle time, a breakdown by task kind, the critical path,
time by phase and top layers (mapped traces), warnings, what the adapter and graph builder skipped
or flagged, and the predictions (and ``--opt all`` ranking) of optimizations.

The report is a msgspec struct (:class:`Report`) built from a graph and its timelines by
:func:`build_report` and :func:`build_prediction`. Renderers only lay it out: the
terminal text (:mod:`daydream.render.text`), the ``--json`` document (:func:`report_json`; its
schema ``schemas/report.schema.json`` is generated from the structs) and, from the same graphs
and timelines, the Chrome trace (:mod:`daydream.render.chrome_trace`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import msgspec

from ..util.arrays import sorted_unique
from ..graph.collectives import find_collectives
from ..simulate.critical_path import CriticalPath, communication_mask, critical_path, gpu_relevant
from ..events.table import Accounting, EventTable, Kind, TraceMeta
from ..graph import NODE_CPU, EdgeKind, TaskGraph, profiler_steps
from ..graph.startup import startup_calls
from ..graph.kernels import classify_name
from ..mapping.rules import PHASES
from ..graph.memo import cached, memo
from ..simulate.carry import boundaries
from ..simulate import Timeline
from .summary import Summary, answer_steps, build_summary

REPORT_VERSION = 1


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
    staging_latency_ns: int = 0  #: S, measured: DMA delay of staged pageable copies (0: none seen)


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


class Prediction(msgspec.Struct, forbid_unknown_fields=True):
    """The predicted effect of one optimization or a composition of several."""

    optimizations: list[AppliedOpt]
    window: PredictedWindow
    steps: list[PredictedWindow]
    critical_path: CriticalPath
    processes: list[PredictedWindow] = []  #: each process (rank) of a multi-process trace, as in Report.processes
    wait_bound: WaitBound | None = None  #: set where the trace has cross-stream waits without their event (daydream.analysis)


class Ranked(msgspec.Struct, forbid_unknown_fields=True):
    """One row of ``--opt all``: an optimization alone, or why it does not apply."""

    name: str
    predicted_ns: int  #: -1 when not applicable
    speedup: float  #: 0 when not applicable
    note: str
    speedup_bound: float = 0.0  #: the :class:`WaitBound` speed-up; 0 when there is none


class GroupStats(msgspec.Struct, forbid_unknown_fields=True):
    """Time of one phase or layer in the replayed baseline (ns, summed over lanes)."""

    name: str
    gpu_ns: int  #: kernels, copies and sets launched from it
    cpu_ns: int  #: its API calls, and the CPU gaps spent in it (gap phase / layer when mapped)
    launches: int  #: GPU tasks launched from it


#: Replay error (|%|, per ProfilerStep or of the traced window) above which the baseline replay
#: is only "fair": the project's accuracy target of 1 % per step (docs/accuracy.md, where a trace
#: within it is "ok"). Above :data:`TRUST_UNRELIABLE_PCT` it is "unreliable": predictions made
#: from it are marked (and ``--strict`` refuses them). Both are the project's stated accuracy
#: targets, chosen by hand, not constants fitted to data.
TRUST_FAIR_PCT = 1.0
TRUST_UNRELIABLE_PCT = 5.0



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
    not_applicable: dict[str, str] = {}  #: requested optimizations that do not apply: name -> reason
    processes: list[WindowStats] = []  #: each process (rank) of a multi-process trace, its own window
    warnings: list[str] = []  #: what limits the trust in the replay or the predictions
    phases: list[GroupStats] = []  #: forward / backward / optimizer / communication / other / unmapped
    layers: list[GroupStats] = []  #: top layers by GPU time
    trust: Trust | None = None  #: how faithful the baseline replay is (set by build_report)
    summary: Summary | None = None  #: the opening answer and the top tables (daydream.report.summary)
    communication: "CommSummary | None" = None  #: the trace's collectives (None: it has none)
    comparison: "Comparison | None" = None  #: ``--compare-to``: predicted (or this trace) against another trace's measurement


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
    error_pct: float  #: error_ns / after_ns * 100 (0 when after_ns is 0)


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


# ---------------------------------------------------------------- computation -----------------
def _union_length(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> int:
    """Length (ns) of the union of intervals clipped to [lo, hi]."""
    s = np.clip(starts, lo, hi)
    e = np.clip(ends, lo, hi)
    keep = e > s
    s, e = s[keep], e[keep]
    if len(s) == 0:
        return 0
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    run_end = np.maximum.accumulate(e)
    # a new merged block starts where s > the running end of everything before it
    new_block = np.ones(len(s), dtype=bool)
    new_block[1:] = s[1:] > run_end[:-1]
    b_start = s[new_block]
    # a block's end: the running end at its last interval (earlier blocks all ended before its start)
    last = np.ones(len(s), dtype=bool)
    last[:-1] = new_block[1:]
    b_end = run_end[last]
    return int((b_end - b_start).sum())


def _gpu_busy(graph: TaskGraph, start: np.ndarray, end: np.ndarray, lo: int, hi: int, members: np.ndarray | None = None,
              per_device: list[np.ndarray] | None = None) -> tuple[int, int]:
    """(busy, idle) ns of the GPUs in [lo, hi]; busy is the union of GPU task intervals per device
    (``per_device``: the members' GPU tasks by device, as :func:`_device_tasks`, when known)."""
    if per_device is None:
        per_device = _device_tasks(graph, members)
    busy = 0
    for idx in per_device:
        busy += _union_length(start[idx], end[idx], lo, hi)
    return busy, max(len(per_device), 1) * max(hi - lo, 0) - busy


def _device_tasks(graph: TaskGraph, members: np.ndarray | None) -> list[np.ndarray]:
    """The GPU tasks (among ``members``) of each device, by device id: structure only, kept in the
    graph's memo per ``members`` array (the whole graph, each step's members; the memo holds the
    array, so its id names it while it is kept)."""
    seen = memo(graph).setdefault("report.device_tasks", {})
    hit = seen.get(id(members))
    if hit is not None and hit[0] is members:
        return hit[1]
    # the members' GPU tasks first (one pass over the graph), then grouped by device among them:
    # a step's members are few, and a trace has many steps (O(steps x tasks) passes grew faster
    # than the trace: the second prediction at 16 M Kineto events, 122 steps)
    idx = np.flatnonzero(members if members is not None else graph.node_kind != NODE_CPU)
    if members is not None:
        idx = idx[graph.node_kind[idx] != NODE_CPU]
    out = _by_device(graph, idx)
    if len(seen) >= 64:
        seen.clear()
    seen[id(members)] = (members, out)
    return out


def _by_device(graph: TaskGraph, idx: np.ndarray) -> list[np.ndarray]:
    """GPU task ids ``idx`` (ascending) grouped by device: one array per device, by device id, node
    order kept within one."""
    dev = graph.lane_keys[graph.lane[idx], 2]
    order = np.argsort(dev, kind="stable")  # ascending device, node order kept within one
    idx, dev = idx[order], dev[order]
    cut = np.flatnonzero(np.diff(dev)) + 1
    return np.split(idx, cut) if len(idx) else []


def _breakdown(graph: TaskGraph, tl: Timeline, members: np.ndarray, kinds: tuple[np.ndarray, ...] | None = None) -> Breakdown:
    """Time by task kind of ``members`` (``kinds``: their ids by kind, as :func:`_member_kinds`, when known)."""
    cpu, kern, cp, st = _member_kinds(graph, members) if kinds is None else kinds
    return Breakdown(
        cpu_runtime_ns=int((tl.end_ns[cpu] - tl.start_ns[cpu] - tl.blocked_ns[cpu]).sum()),
        cpu_gap_ns=int(graph.gap_ns[cpu].sum()),
        sync_wait_ns=int(tl.blocked_ns[cpu].sum()),
        kernel_ns=int((tl.end_ns[kern] - tl.start_ns[kern]).sum()),
        memcpy_ns=int((tl.end_ns[cp] - tl.start_ns[cp]).sum()),
        memset_ns=int((tl.end_ns[st] - tl.start_ns[st]).sum()),
    )


def _member_kinds(graph: TaskGraph, members: np.ndarray) -> tuple[np.ndarray, ...]:
    """(CPU tasks, kernels, memcpys, memsets) among ``members``, as node ids: structure only, kept
    in the graph's memo per ``members`` array (as :func:`_device_tasks`)."""
    seen = memo(graph).setdefault("report.member_kinds", {})
    hit = seen.get(id(members))
    if hit is not None and hit[0] is members:
        return hit[1]
    out = _kinds_of(graph, np.flatnonzero(members))  # one pass over the graph, then among the members (see _device_tasks)
    if len(seen) >= 64:
        seen.clear()
    seen[id(members)] = (members, out)
    return out


def _kinds_of(graph: TaskGraph, idx: np.ndarray) -> tuple[np.ndarray, ...]:
    """(CPU tasks, kernels, memcpys, memsets) among the node ids ``idx``, order kept."""
    k = graph.node_kind[idx]
    return tuple(idx[k == c] for c in (NODE_CPU, Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET))


def _error_pct(measured: int, replayed: int) -> float:
    return round((replayed - measured) / measured * 100.0, 4) + 0.0 if measured > 0 else 0.0  # + 0.0: no -0.0


def _window(name, graph, tl, rec, lo_m, hi_m, lo_r, hi_r, members, note="", busy_members=None, group=None) -> WindowStats:
    """One :class:`WindowStats`; ``group``: the :class:`_StepGroup` of a step (its members and
    busy members), whose node ids by kind and device are known."""
    per_device, kinds = (group.devices, group.kinds) if group is not None else (None, None)
    bm, im = _gpu_busy(graph, rec.start_ns, rec.end_ns, lo_m, hi_m, busy_members, per_device)
    br, ir = _gpu_busy(graph, tl.start_ns, tl.end_ns, lo_r, hi_r, busy_members, per_device)
    measured, replayed = hi_m - lo_m, hi_r - lo_r
    kernels = len(kinds[1]) if kinds is not None else int(np.count_nonzero((graph.node_kind == Kind.KERNEL) & members))
    return WindowStats(
        name=name,
        measured_ns=int(measured),
        replayed_ns=int(replayed),
        error_pct=_error_pct(measured, replayed),
        gpu_busy_measured_ns=bm,
        gpu_idle_measured_ns=im,
        gpu_busy_replayed_ns=br,
        gpu_idle_replayed_ns=ir,
        kernels=kernels,
        breakdown=_breakdown(graph, tl, members, kinds),
        note=note,
    )


class StepWindow(NamedTuple):
    """One ProfilerStep: where it lies measured and replayed (ns), and the nodes that belong to it."""

    name: str
    start_ns: int  #: measured: the step's CPU start, or the previous step's end when that is later
    end_ns: int  #: measured: the step's CPU end, or its members' last end when that is later
    replayed_start_ns: int
    replayed_end_ns: int
    members: np.ndarray  #: the members' node ids, ascending (a mask per step made memory grow as steps x nodes)
    note: str  #: why replayed = measured, when it is
    cpu_start_ns: int = 0  #: the ProfilerStep range itself (measured), without the GPU work it launched
    cpu_end_ns: int = 0
    replayed_cpu_start_ns: int = 0  #: where those boundaries lie replayed
    replayed_cpu_end_ns: int = 0


class _StepGroup(NamedTuple):
    """One ProfilerStep's members (:func:`_step_members`)."""

    name: str
    start_ns: int  #: the ProfilerStep range (measured)
    end_ns: int
    pid: int
    tid: int
    idx: np.ndarray  #: the members' node ids, ascending
    kinds: tuple[np.ndarray, ...]  #: the members' (CPU tasks, kernels, memcpys, memsets), as :func:`_member_kinds`
    devices: list[np.ndarray]  #: the members' GPU tasks by device, as :func:`_device_tasks`


#: up to this many ProfilerSteps, :func:`_step_members` finds each step's members by a pass over
#: the graph (cheaper than its sort; both find the same members)
FEW_STEPS = 8


def _step_members(graph: TaskGraph) -> list[_StepGroup]:
    """Each ProfilerStep's members (:func:`step_windows`): the nodes whose position lies in its range,
    on its process, among ``gpu_relevant``. Structure only, kept in the graph's memo (the arrays are
    shared: do not change them).

    One sort of the candidate nodes by (process, position), then each step's members are one
    slice of it (two binary searches): the cost is the graph once plus the steps' members, not
    the graph once per step (a trace's step count grows with its length)."""
    def make():
        steps = profiler_steps(graph.table)
        if len(steps) <= FEW_STEPS:  # a pass over the graph per step costs less than the sort
            rel, proc = gpu_relevant(graph), graph.lane_keys[graph.lane, 1]
            out = []
            for name, s, e, pid, tid in steps:
                idx = np.flatnonzero((graph.position_ns >= s) & (graph.position_ns < e) & (proc == pid) & rel)
                gpu = idx[graph.node_kind[idx] != NODE_CPU]
                out.append(_StepGroup(name, s, e, pid, tid, idx, _kinds_of(graph, idx), _by_device(graph, gpu)))
            return out
        cand = np.flatnonzero(gpu_relevant(graph))
        proc, pos = graph.lane_keys[graph.lane[cand], 1], graph.position_ns[cand]
        o = np.lexsort((pos, proc))
        cand, proc, pos = cand[o], proc[o], pos[o]
        out = []
        for name, s, e, pid, tid in steps:  # ProfilerSteps: a few per process and trace minute
            p_lo, p_hi = np.searchsorted(proc, pid, "left"), np.searchsorted(proc, pid, "right")
            lo, hi = p_lo + np.searchsorted(pos[p_lo:p_hi], [s, e], "left")
            idx = np.sort(cand[lo:hi])
            gpu = idx[graph.node_kind[idx] != NODE_CPU]
            out.append(_StepGroup(name, s, e, pid, tid, idx, _kinds_of(graph, idx), _by_device(graph, gpu)))
        return out
    return cached(graph, "report.step_members", make)


def _step_groups(graph: TaskGraph, sw: list) -> list:
    """The :class:`_StepGroup` of each of ``step_windows(graph, ...)``, in order."""
    return _step_members(graph)[: len(sw)]


def step_windows(graph: TaskGraph, tl: Timeline) -> list[StepWindow]:
    """Each ProfilerStep as a :class:`StepWindow` (a tuple: name, measured start and end, replayed
    start and end, member mask, note, and the step's own CPU range measured and replayed).

    Members are the nodes whose position (CPU start, or launching call's start) lies in the
    measured ProfilerStep range, on the step's process: its API calls (with the waits they made)
    and the GPU work they launched; calls of threads that never launch or wait for GPU work (an
    NCCL watchdog polling events) are no step's (see ``gpu_relevant``).

    A step runs from its CPU start until its last member has ended (or its CPU end, if later), so
    its time includes the GPU work it launched and the waits it made; when the previous step of
    its thread ends later than this step's CPU start (its GPU work still running), this step
    starts there instead. Steps so never overlap and their times add up to at most the traced
    window, and every per-step column (:func:`_window`) is computed over the step's members.
    Measured windows come from the recorded times, replayed ones from the replayed times.
    """
    out = []
    prev: dict[tuple[int, int], tuple[int, int]] = {}  # (pid, tid) -> previous step's (measured, replayed) end
    for name, s, e, pid, tid, idx, _, _ in _step_members(graph):
        cpu = _replayed_boundaries(graph, tl, s, e, pid, tid)
        rs, re_ = (s, e) if cpu is None else cpu
        end_m, end_r = _covering(e, graph.rec_end_ns, idx), _covering(re_, tl.end_ns, idx)
        pm, pr = prev.get((pid, tid), (s, rs))
        note = "no API call inside the step on its thread; replayed = measured" if cpu is None else ""
        out.append(StepWindow(name, min(max(s, pm), end_m), end_m, min(max(rs, pr), end_r), end_r, idx, note, s, e, rs, re_))
        prev[(pid, tid)] = (max(pm, end_m), max(pr, end_r))
    return out


def _replayed_boundaries(graph: TaskGraph, tl: Timeline, s: int, e: int, pid: int, tid: int) -> tuple[int, int] | None:
    """Where the ProfilerStep range [s, e] of thread (pid, tid) lies in the replay ``tl``; None
    when no API call of the thread lies inside it.

    A boundary ``b`` lies in the CPU gap before some API call ``x`` (the first call starting at
    or after ``b``) and keeps its share of that gap, the rule every CPU range moves by
    (:mod:`daydream.simulate.carry`): so when a transformation removes calls (and their gaps) a boundary
    moves with the work that is left, host time added after a step's start (its DataLoader
    fetch) stays in the step, and consecutive boundaries never cross. After the thread's last
    call, a boundary keeps its recorded distance to that call's end.
    """
    nodes = _thread_calls(graph, pid, tid)
    # structure only, kept in the memo (a step's windows are asked again for every prediction)
    rs_sorted, later_end = cached(graph, f"report.thread_call_starts_ends {pid} {tid}", lambda: _starts_and_later_ends(graph, nodes))
    k = int(np.searchsorted(rs_sorted, s, side="left"))  # the calls starting at or after s: k, k + 1, ...
    if k == len(nodes) or later_end[k] > e:  # none of them ends by e
        return None

    got = boundaries(graph, tl, nodes, np.array([s, e], np.int64), rs_sorted, ends=np.array([False, True]))
    return int(got[0]), int(got[1])


def _starts_and_later_ends(graph: TaskGraph, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(recorded starts of ``nodes``, ascending; per position, the earliest recorded end from there on)."""
    return graph.rec_start_ns[nodes], np.minimum.accumulate(graph.rec_end_ns[nodes][::-1])[::-1]


def _thread_calls(graph: TaskGraph, pid: int, tid: int) -> np.ndarray:
    """The API calls of thread (pid, tid) by recorded start (stable): structure only, kept in the
    graph's memo."""
    def make():
        lanes = np.nonzero((graph.lane_keys == np.array([0, pid, tid, 0])).all(axis=1))[0]
        nodes = np.nonzero((graph.lane == (lanes[0] if len(lanes) else -1)) & (graph.node_kind == NODE_CPU))[0]
        return nodes[np.argsort(graph.rec_start_ns[nodes], kind="stable")]
    return cached(graph, f"report.thread_calls {pid} {tid}", make)


def _covering(end: int, ends: np.ndarray, idx: np.ndarray) -> int:
    """``end``, or the last end of the members (node ids ``idx``) when that is later."""
    return max(end, int(ends[idx].max())) if len(idx) else end


def _graph_summary(graph: TaskGraph) -> GraphSummary:
    n_cpu = int(np.count_nonzero(graph.node_kind == NODE_CPU))
    dep = graph.dependency_edges
    n_gpu_edges_x = int(np.count_nonzero(graph.node_kind[graph.edge_dst[dep]] != NODE_CPU))
    n_waits = int(np.count_nonzero(graph.edge_kind == EdgeKind.WAIT))  # blocking waits (not launch-queue slots)
    return GraphSummary(
        cpu_tasks=n_cpu,
        gpu_tasks=graph.n - n_cpu,
        cpu_lanes=int(np.count_nonzero(~graph.lane_is_gpu)),
        gpu_lanes=int(np.count_nonzero(graph.lane_is_gpu)),
        launch_edges=int(np.count_nonzero(graph.launch >= 0)),
        sync_edges=n_waits,
        cross_stream_edges=n_gpu_edges_x,
        launch_latency_ns=int(graph.launch_latency_ns),
        gpu_gap_ns=int(graph.gpu_gap_ns),
        staging_latency_ns=int(graph.staging_latency_ns),
        counts=dict(sorted(graph.counts.items())),
        gpus=sorted(set(graph.lane_keys[graph.lane_is_gpu, 2].tolist())),
    )


def _window_end(graph: TaskGraph, end_ns: np.ndarray, rel: np.ndarray, step_ends: list[int]) -> int:
    """End of the traced window: the last GPU-relevant task's end (see ``gpu_relevant``) or step end."""
    return max([int(end_ns[rel].max()) if rel.any() else graph.t0_ns] + step_ends)


def window_end_ns(graph: TaskGraph, tl: Timeline) -> int:
    """The end (ns) of the traced window of the replay ``tl`` of ``graph``, as reports place it."""
    return _window_end(graph, tl.end_ns, gpu_relevant(graph), [w.replayed_end_ns for w in step_windows(graph, tl)])


def _window_note(graph: TaskGraph, rel: np.ndarray) -> str:
    """The traced window's note when threads without GPU work are left out of it."""
    n_out = int(np.count_nonzero(~graph.lane_is_gpu)) - len(sorted_unique(graph.lane[rel & (graph.node_kind == NODE_CPU)]))
    return f"ends with the GPU work; {n_out} thread(s) that never launch or wait for GPU work not counted" if n_out > 0 and rel.any() else ""


#: The note of a step measured at 0 ns that replays longer (:func:`_zero_length_steps`).
ZERO_STEP_NOTE = "measured 0 ms (earlier GPU work ran past its whole range): error relative to the median measured step"


def _zero_length_steps(steps: list[WindowStats], window: WindowStats) -> list[WindowStats]:
    """``steps`` with the error of each step measured at 0 ns (an earlier step's GPU work ran past
    its whole CPU range) that replays longer taken relative to the median step measured longer than
    0 (the window when none is), and :data:`ZERO_STEP_NOTE`: a ratio to 0 ns has no value, and
    showed as 0.00 % (a kernel of 10^15 us recorded in the first step made the others 0 ms
    measured, 1 ms replayed, and the verdict "good")."""
    if not any(w.measured_ns == 0 and w.replayed_ns > 0 for w in steps):
        return steps
    lens = [w.measured_ns for w in steps if w.measured_ns > 0]
    ref = float(np.median(lens)) if lens else float(window.measured_ns)
    return [msgspec.structs.replace(w, error_pct=round(w.replayed_ns / ref * 100.0, 4) if ref > 0 else 0.0,
                                    note="; ".join(x for x in (w.note, ZERO_STEP_NOTE) if x))
            if w.measured_ns == 0 and w.replayed_ns > 0 else w for w in steps]


def build_report(graph: TaskGraph, tl: Timeline, rec: Timeline) -> Report:
    """Assemble the report of a replay ``tl`` against the recorded timeline ``rec``."""
    t = graph.table
    summary = _graph_summary(graph)
    t0 = graph.t0_ns
    rel = gpu_relevant(graph)
    sw = step_windows(graph, tl)
    hi_m = _window_end(graph, rec.end_ns, rel, [w.end_ns for w in sw])
    hi_r = _window_end(graph, tl.end_ns, rel, [w.replayed_end_ns for w in sw])
    window = _window("traced window", graph, tl, rec, t0, hi_m, t0, hi_r, cached(graph, "report.all_nodes", lambda: np.ones(graph.n, dtype=bool)),
                     _window_note(graph, rel))
    steps = _zero_length_steps([_window(w.name, graph, tl, rec, w.start_ns, w.end_ns, w.replayed_start_ns, w.replayed_end_ns, w.members,
                                        w.note, w.members, grp) for w, grp in zip(sw, _step_groups(graph, sw))], window)
    phases, layers = _groups(graph, tl)
    detail: dict = {}
    _, cp = critical_path(graph, tl, *_phase_args(graph), detail=detail)
    return Report(REPORT_VERSION, t.meta, t.accounting, summary, window, steps, cp, processes=_process_windows(graph, tl, rec),
                  phases=phases, layers=layers, warnings=_warnings(graph), trust=build_trust(graph, tl, rec, window, steps),
                  summary=build_summary(graph, tl, rec, cp, detail, steps, window), communication=comm_summary(graph))


def comm_summary(graph: TaskGraph) -> CommSummary | None:
    """The :class:`CommSummary` of ``graph``'s collectives and other communication tasks, None
    when it has neither."""
    c = find_collectives(graph)
    comm = communication_mask(graph).copy()  # the memo's mask is shared: changed on a copy
    comm[c.node] = False
    other = int(comm.sum())
    if not len(c) and not other:
        return None
    by = [CollectiveStats(op, v["count"], v["sized"], v["bytes"], v["time_ns"], v["busbw_median_GBps"], v["busbw_max_GBps"])
          for op, v in c.summary().items()]
    return CommSummary(len(c), int((c.size_bytes < 0).sum()), by, dict(c.counts), other)


def trust_verdict(max_step_error_pct: float, window_error_pct: float, steps: int = 1, start_error_pct: float = 0.0,
                  start_error_us: float = 0.0) -> tuple[str, str]:
    """(verdict, reason) from the absolute replay errors (%): the worse of the two decides, and the
    GPU start error (p99 ``start_error_us``, ``start_error_pct`` of the median step or the window)
    when it is worse still (:func:`start_error_verdict`)."""
    what, err = ("max step error", max_step_error_pct) if steps and max_step_error_pct >= window_error_pct else ("window error", window_error_pct)
    by_start = start_error_verdict(start_error_pct, start_error_us, steps)
    if by_start is not None and start_error_pct > err:
        return by_start
    if err > TRUST_UNRELIABLE_PCT:
        return "unreliable", f"{what} {err:.2f} % > {TRUST_UNRELIABLE_PCT:g} %: the baseline replay does not reproduce the trace"
    if err > TRUST_FAIR_PCT:
        return "fair", f"{what} {err:.2f} % > {TRUST_FAIR_PCT:g} % (the accuracy target)"
    return "good", f"{what} {err:.2f} % <= {TRUST_FAIR_PCT:g} %"


#: How the reason of a verdict decided by the GPU start error begins (render_text shows it).
START_ERROR_REASON = "GPU start error p99"


def start_error_verdict(start_error_pct: float, start_error_us: float, steps: int = 1) -> tuple[str, str] | None:
    """(verdict, reason) from the p99 GPU start error as % of the median step (the window without
    steps), or None when it is within TRUST_FAIR_PCT. A GPU task replayed e away from its recorded
    start has its slack misplaced by e: a prediction that changes the work around it can move by
    up to e, so e as a share of the step bounds a prediction error on the same scale as the step
    error, and is held to the same targets (docs/model.md, "How far the baseline replay is trusted")."""
    ref = "the median step" if steps else "the window"
    what = f"{START_ERROR_REASON} {start_error_us:,.0f} us is {start_error_pct:.2f} % of {ref}"
    if start_error_pct > TRUST_UNRELIABLE_PCT:
        return "unreliable", f"{what} > {TRUST_UNRELIABLE_PCT:g} %: the replay does not reproduce when GPU work runs"
    if start_error_pct > TRUST_FAIR_PCT:
        return "fair", f"{what} > {TRUST_FAIR_PCT:g} %: predictions that move GPU work can be off by as much"
    return None


#: How the reason of a verdict decided by a salvaged truncated file begins (render_text shows it).
TRUNCATED_REASON = "the trace file is truncated"


def truncation_note(table: EventTable) -> str:
    """The adapter's note of a salvaged truncated file (``Accounting.notes``), or "" when it was whole."""
    return next((k for k in table.accounting.notes if k.startswith("truncated file")), "")


def build_trust(graph: TaskGraph, tl: Timeline, rec: Timeline, window: WindowStats, steps: list[WindowStats]) -> Trust:
    """The :class:`Trust` of a baseline replay ``tl`` against the recorded timeline ``rec``."""
    step_err = max((abs(w.error_pct) for w in steps), default=0.0)
    win_err = abs(window.error_pct)
    gpu = (graph.node_kind != NODE_CPU) & (graph.rec_end_ns >= graph.rec_start_ns)
    d_us = np.abs(tl.start_ns[gpu] - rec.start_ns[gpu]) / 1e3
    p50, p99 = (float(np.percentile(d_us, 50)), float(np.percentile(d_us, 99))) if len(d_us) else (0.0, 0.0)
    worked = answer_steps(steps)  # as the answer's step (summary.build_summary)
    lens = [w.measured_ns for w in worked if w.measured_ns > 0]  # a step measured at 0 ns is no scale
    ref_ns = float(np.median(lens)) if lens else float(window.measured_ns)
    p99_pct = round(p99 * 1e5 / ref_ns, 3) if ref_ns > 0 else 0.0
    verdict, reason = trust_verdict(step_err, win_err, len(steps), p99_pct, p99)
    cut = truncation_note(graph.table)
    if cut:  # the replay can only match what survived: the steps' work after the cut is not in the trace
        verdict, reason = "unreliable", (f"{TRUNCATED_REASON} ({cut.removeprefix('truncated file: ')}): the steps and the window "
                                         "miss the work recorded after the cut")
    inferred = {k: v["inferred"] for k, v in sorted(graph.edge_counts().items()) if v.get("inferred")}
    missing = getattr(graph.counts, "missing", ())
    incomplete = {k: v for k, v in sorted(graph.counts.items()) if v and k in missing}
    cause = replay_cause(graph, tl, rec, window.measured_ns) if verdict != "good" else ""
    return Trust(verdict, f"{reason}; {cause}" if cause else reason, step_err + 0.0, len(steps), win_err + 0.0, round(p50, 3), round(p99, 3),
                 int(np.count_nonzero(gpu)), inferred, incomplete, cause, p99_pct)


def replay_cause(graph: TaskGraph, tl: Timeline, rec: Timeline, window_ns: int) -> str:
    """In words, the blocking call whose recorded wait the replay reproduces least, when that
    alone is worth more than the accuracy target (TRUST_FAIR_PCT of the window), and what held
    the GPU work it waited for in the trace: the task of that stream that started latest after
    what the graph lets it wait for (launch + L, stream predecessor + G), and the task of another
    stream of the device that ended last before it. A collective (NCCL/RCCL) kernel there is named
    as such: its recorded duration includes waiting for peer ranks, which a one-rank trace cannot
    show. '' when no wait is missed by that much.
    """
    b = np.nonzero(graph.blocking)[0]
    miss = rec.blocked_ns[b] - tl.blocked_ns[b]
    if not len(b) or int(miss.max()) * 100 <= TRUST_FAIR_PCT * window_ns:
        return ""
    i = int(b[np.argmax(miss)])
    out = (f"largest missed wait: {graph.name(i)} blocked {rec.blocked_ns[i] / 1e6:,.3f} ms in the trace, "
           f"{tl.blocked_ns[i] / 1e6:,.3f} ms replayed")
    waited = graph.preds(i, EdgeKind.WAIT)
    if not len(waited):
        return out
    w = int(waited[np.argmax(rec.end_ns[waited])])
    x, late = _held_task(graph, rec, w, int(rec.start_ns[i]))
    out += (f"; the {_short(graph.name(x))} it waited for" if x == w else f"; the GPU work it waited for queued behind {_short(graph.name(x))}, which")
    out += f" started {late / 1e3:,.0f} us later than its launch and stream allow"
    p = _ended_before(graph, rec, x)
    if p < 0:
        return out
    out += f", {(rec.start_ns[x] - rec.end_ns[p]) / 1e3:,.0f} us after {_short(graph.name(p))} (stream {graph.lane_keys[graph.lane[p], 3]}) ended"
    unlinked = sum(v for k, v in graph.counts.items() if k.startswith("cudaStreamWaitEvent without"))
    if unlinked:
        out += f" (a cross-stream wait the trace does not link? {unlinked:,} cudaStreamWaitEvent without an event id)"
    if classify_name(graph.name(p))[0] == "communication":
        out += (f"; collective kernels' durations include waiting for peer ranks ({(rec.end_ns[p] - rec.start_ns[p]) / 1e6:,.3f} ms here), "
                "which a one-rank trace cannot show")
    return out


def _short(name: str, n: int = 48) -> str:
    return name if len(name) <= n else name[: n - 3] + "..."


def _held_task(graph: TaskGraph, rec: Timeline, w: int, since: int) -> tuple[int, int]:
    """(task, ns): of ``w`` and the tasks before it on its stream still unfinished at ``since``,
    the one whose recorded start is latest after its launch (+ L) and stream predecessor (+ G)."""
    best, late = w, -1
    x = w
    while x >= 0 and rec.end_ns[x] > since:
        prev, lc = int(graph.lane_prev[x]), int(graph.launch[x])
        ready = max(int(rec.start_ns[lc]) + graph.launch_latency_ns if lc >= 0 else graph.t0_ns,
                    int(rec.end_ns[prev]) + graph.gpu_gap_ns if prev >= 0 else graph.t0_ns)
        if int(rec.start_ns[x]) - ready > late:
            best, late = x, int(rec.start_ns[x]) - ready
        x = prev
    return best, max(late, 0)


def _ended_before(graph: TaskGraph, rec: Timeline, x: int) -> int:
    """The GPU task of another stream of ``x``'s device, placed before ``x``, that ended last at or
    before ``x``'s recorded start; -1 when there is none."""
    dev = graph.lane_keys[graph.lane, 2]
    m = ((graph.node_kind != NODE_CPU) & (graph.lane != graph.lane[x]) & (dev == dev[x]) & (graph.position_ns <= graph.position_ns[x])
         & (rec.end_ns <= rec.start_ns[x]))
    c = np.nonzero(m)[0]
    return int(c[np.argmax(rec.end_ns[c])]) if len(c) else -1


#: a measured launch latency above this looks like a one-off (lazy module loading, a cold start)
#: rather than the launch path (typically 3-30 us on the traces in ../shared/traces)
SUSPICIOUS_LAUNCH_LATENCY_NS = 1_000_000


def overlapping_steps(steps: list[tuple[str, int, int, int, int]]) -> int:
    """How many ProfilerStep ranges (:func:`daydream.graph.profiler_steps`: name, start, end, pid,
    tid) end after the next step of their process starts (steps of different processes may overlap:
    ranks of one job)."""
    by_pid: dict[int, list[tuple[int, int]]] = {}
    for _name, s, e, pid, _tid in steps:  # ProfilerSteps: a few per process
        by_pid.setdefault(pid, []).append((s, e))
    return sum(sum(1 for (_, e), (s2, _) in zip(v, v[1:]) if s2 < e) for v in (sorted(x) for x in by_pid.values()))


#: the words that mark the start-up warning (the answer line refers to it)
STARTUP_WORDS = "one-time start-up"
#: the words that mark the warning about cross-stream waits without their event (the answer line refers to it)
UNLINKED_WORDS = "cross-stream waits (cudaStreamWaitEvent) do not say which event they wait for"


def _world_size(graph: TaskGraph) -> int:
    """The world size the trace names (``meta.world_size``), or -1."""
    meta = getattr(graph.table, "meta", None)
    return int(getattr(meta, "world_size", -1) or -1)


def _streams_side_by_side(graph: TaskGraph) -> bool:
    """Whether some process has GPU tasks on two or more streams of one device: only then can a
    cross-stream wait the trace did not link let streams overlap in a prediction."""
    gk = graph.lane_keys[graph.lane_is_gpu][:, 1:3]
    return len(gk) > len(np.unique(gk, axis=0))


def _warnings(graph: TaskGraph) -> list[str]:
    out = []
    c = graph.counts
    waits = sum(v for k, v in c.items() if k.startswith("cudaStreamWaitEvent without"))
    if waits and _streams_side_by_side(graph):  # with one stream per GPU a missing cross-stream edge orders nothing
        out.append(
            f"{waits:,} {UNLINKED_WORDS}, so those edges are missing: "
            "predictions may let streams (e.g. NCCL) overlap more than the program allows; each prediction's 'bound' line "
            "(and --opt all's '>=') replays it with every dependency those waits can have. Record with "
            "torch.profiler._ExperimentalConfig(enable_cuda_sync_events=True) or Nsight Systems for exact edges."
        )
    gpu = int(np.count_nonzero(graph.node_kind != NODE_CPU))
    if gpu == 0:
        acc = graph.table.accounting if graph.table is not None else None
        skipped = {k: v for k, v in acc.skipped.items() if not k.startswith(("flow event", "metadata event"))} if acc is not None else {}
        top = max(skipped.items(), key=lambda kv: kv[1]) if skipped else None
        why = (f" The reader skipped {sum(skipped.values()):,} records ({top[1]:,}: {top[0]}); if the GPU events are among "
               "them, the answer is not the trace's (see 'input').") if top else ""
        out.append("the trace has no GPU kernels, copies or sets: only its CPU side is replayed, and no GPU optimization applies." + why)
    orphans = sum(v for k, v in c.items() if k.startswith("GPU task without a launching call"))
    if gpu and orphans > 0.1 * gpu:
        out.append(f"{orphans:,} of {gpu:,} GPU tasks have no launching call in the trace (a cut or sampled trace?): they are placed by stream order only.")
    over = overlapping_steps(profiler_steps(graph.table))
    if over:
        out.append(f"{over:,} ProfilerStep ranges overlap the next step of their process (a malformed or merged trace?): the tasks "
                   "in both are counted in both steps, so the step rows do not add up to the window.")
    pids, procs = _process_ids(graph)
    comm = communication_mask(graph) & (pids >= 0)
    if gpu and comm.any() and len(sorted_unique(pids[comm])) > 1:
        out.append(f"this trace holds {len(procs):,} processes whose {int(comm.sum()):,} collective kernels talk to each "
                   "other; they are replayed as independent processes: each collective keeps its recorded time, its wait for "
                   "peers included, so a what-if that speeds up one process does not shorten its peers' waits. For coupled ranks "
                   "give one trace per rank (docs/jobs.md).")
    elif gpu and comm.any() and _world_size(graph) > 1:
        meta = graph.table.meta
        out.append(f"this trace is {'rank ' + str(meta.rank) if meta.rank >= 0 else 'one rank'} of a job of {_world_size(graph):,} ranks "
                   f"(its distributedInfo): its {int(comm.sum()):,} collective kernels keep their recorded time, their wait for "
                   "peers included, which one rank's trace cannot tell from the transfer; a what-if that changes the collectives "
                   "or the work before them is judged without the peers. For the job, give every rank's trace (docs/jobs.md).")
    slow = np.nonzero(startup_calls(graph))[0]
    span = int(graph.rec_end_ns.max()) - int(graph.t0_ns) if graph.n else 0
    if len(slow) and graph.dur_ns[slow].sum() * 100 >= TRUST_FAIR_PCT * max(span, 1):  # material: as much as the accuracy target
        top = slow[np.argsort(-graph.dur_ns[slow], kind="stable")[:3]]
        names = ", ".join(f"{graph.name(int(v))} {graph.dur_ns[v] / 1e6:,.1f} ms" for v in top)
        out.append(f"{len(slow):,} API call{'s' * (len(slow) != 1)} that do{'es' * (len(slow) == 1)} not wait for the GPU take {graph.dur_ns[slow].sum() / 1e6:,.1f} ms ({names}): "
                   f"{STARTUP_WORDS} (context creation on the first GPU runtime call, module loading on a kernel's first "
                   "launch, library handles). The window is not a steady-state step: record after warm-up (torch.profiler "
                   "schedule(wait=, warmup=, active=)) before judging a what-if on it.")
    if graph.launch_latency_ns > SUSPICIOUS_LAUNCH_LATENCY_NS:
        out.append(
            f"the measured launch latency L = {graph.launch_latency_ns / 1e3:,.0f} us is unusually large (few launches on an idle stream, "
            "or a cold start such as lazy module loading); replayed GPU start times are uncertain."
        )
    return out


def _process_windows(graph: TaskGraph, tl: Timeline, rec: Timeline) -> list[WindowStats]:
    """One window per process when the trace has several (e.g. one rank per GPU): from the
    trace start to the end of that process's last task (its API calls and the GPU work it launched)."""
    pids, uniq = _process_ids(graph)
    if len(uniq) < 2:
        return []
    out = []
    t0 = graph.t0_ns
    rel = gpu_relevant(graph)
    for p in uniq.tolist():
        m = pids == p
        e = _process_end_members(m, rel)
        devs = sorted(set(graph.lane_keys[graph.lane[m & (graph.node_kind != NODE_CPU)], 2].tolist()))
        name = f"process {p}" + (f" (GPU {', '.join(map(str, devs))})" if devs else "")
        out.append(_window(name, graph, tl, rec, t0, int(rec.end_ns[e].max()), t0, int(tl.end_ns[e].max()), m, busy_members=m))
    return out


def _process_ids(graph: TaskGraph) -> tuple[np.ndarray, np.ndarray]:
    """(process id per node, the distinct process ids): GPU tasks whose process the trace does not
    give (-1: no launching call, no ``daydream_pid``) make no process row of their own; the traced
    window holds them."""
    pids = graph.lane_keys[graph.lane, 1] if graph.n else np.zeros(0, np.int64)
    uniq = sorted_unique(pids)
    return pids, uniq[uniq >= 0]


def _process_end_members(m: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """The tasks whose last end closes a process's window: like the traced window's, those that bound
    it (``gpu_relevant``: not a thread that never launches or waits for GPU work), all of the process's
    when none does."""
    e = m & rel
    return e if e.any() else m


TOP_LAYERS = 10


def _phase_args(graph: TaskGraph):
    if graph.mapping is None:
        return None, None
    return list(PHASES), graph.mapping.phase


def _groups(graph: TaskGraph, tl: Timeline) -> tuple[list[GroupStats], list[GroupStats]]:
    """Per-phase and top-layer time of a mapped graph (empty lists when unmapped)."""
    mp = graph.mapping
    if mp is None or graph.n == 0:
        return [], []
    cpu = graph.node_kind == NODE_CPU
    dur = tl.end_ns - tl.start_ns - tl.blocked_ns
    gpu_ns = np.where(cpu, 0, dur)
    own_ns = np.where(cpu, dur, 0)  # a CPU node's own call time: its phase / layer
    gap_ns = np.where(cpu, graph.gap_ns, 0)  # the CPU gap before it: its gap phase / layer when mapped
    launched = (~cpu) & (graph.launch >= 0)

    def table(codes: np.ndarray, gap_codes: np.ndarray | None, names: list[str]) -> list[GroupStats]:
        k = len(names)
        c = np.where(codes >= 0, codes, k).astype(np.int64)
        gc = c if gap_codes is None else np.where(gap_codes >= 0, gap_codes, k).astype(np.int64)
        g = np.bincount(c, weights=gpu_ns, minlength=k + 1)
        u = np.bincount(c, weights=own_ns, minlength=k + 1) + np.bincount(gc, weights=gap_ns, minlength=k + 1)
        lc = np.bincount(c[launched], minlength=k + 1)
        return [GroupStats(names[i] if i < k else "(no layer)", int(g[i]), int(u[i]), int(lc[i])) for i in range(k + 1) if g[i] or u[i]]

    def codes(a: np.ndarray | None) -> np.ndarray | None:
        return a.astype(np.int64) if a is not None else None

    phases = [p for p in table(codes(mp.phase), codes(mp.gap_phase), list(PHASES)) if p.name != "(no layer)"]
    layers = sorted(table(codes(mp.layer_id), codes(mp.gap_layer_id), list(mp.labels)), key=lambda x: (-x.gpu_ns, -x.cpu_ns, x.name))
    return phases, layers[:TOP_LAYERS]


def _predicted(name, base: WindowStats, graph, tl, lo, hi, members, busy_members=None, group=None) -> PredictedWindow:
    """One :class:`PredictedWindow` (``group`` as :func:`_window`)."""
    per_device, kinds = (group.devices, group.kinds) if group is not None else (None, None)
    busy, _ = _gpu_busy(graph, tl.start_ns, tl.end_ns, lo, hi, busy_members, per_device)
    pred = hi - lo
    return PredictedWindow(
        name=name,
        measured_ns=base.measured_ns,
        replayed_ns=base.replayed_ns,
        predicted_ns=int(pred),
        speedup=round(base.replayed_ns / pred, 4) if pred > 0 else 0.0,
        gpu_busy_predicted_ns=busy,
        breakdown=_breakdown(graph, tl, members, kinds),
    )


def build_prediction(base: Report, graph: TaskGraph, tl: Timeline, applied: list[AppliedOpt]) -> Prediction:
    """The prediction made by simulating the transformed ``graph`` (timeline ``tl``)."""
    rel = gpu_relevant(graph)
    sw = step_windows(graph, tl)
    hi = _window_end(graph, tl.end_ns, rel, [w.replayed_end_ns for w in sw])
    everything = cached(graph, "report.all_nodes", lambda: np.ones(graph.n, dtype=bool))  # one array: its member kinds stay memoized
    window = _predicted("traced window", base.window, graph, tl, graph.t0_ns, hi, everything)
    groups = {id(w): grp for w, grp in zip(sw, _step_groups(graph, sw))}
    steps = [_predicted(w.name, b, graph, tl, w.replayed_start_ns, w.replayed_end_ns, w.members, w.members, groups[id(w)])
             for w, b in _step_pairs(sw, base.steps)]
    _, cp = critical_path(graph, tl, *_phase_args(graph))
    return Prediction(applied, window, steps, cp, _predicted_processes(base, graph, tl))


def _step_pairs(sw: list, base_steps: list[WindowStats]) -> list[tuple]:
    """Each predicted step window with its baseline row: by position (both come from the same
    ProfilerStep ranges of the same table, in the same order), so that steps sharing a name (two
    processes' ProfilerStep#5, a renamed step) keep their own baseline; by name, for names that occur
    once, if the lists differ."""
    if len(sw) == len(base_steps) and all(w.name == b.name for w, b in zip(sw, base_steps)):
        return list(zip(sw, base_steps))
    count: dict[str, int] = {}
    for b in base_steps:
        count[b.name] = count.get(b.name, 0) + 1
    by_name = {b.name: b for b in base_steps if count[b.name] == 1}
    return [(w, by_name[w.name]) for w in sw if w.name in by_name]


def _predicted_processes(base: Report, graph: TaskGraph, tl: Timeline) -> list[PredictedWindow]:
    """Each process row of the baseline (:func:`_process_windows`), predicted: from the trace start
    to the end of that process's last task in ``tl``."""
    if not base.processes:
        return []
    pids, uniq = _process_ids(graph)
    rel = gpu_relevant(graph)
    out = []
    for w, p in zip(base.processes, uniq.tolist()):
        m = pids == p
        if not m.any() or w.name.partition(" (")[0] != f"process {p}":
            return []  # the processes changed (not expected of a transform): no rows rather than wrong ones
        out.append(_predicted(w.name, w, graph, tl, graph.t0_ns, int(tl.end_ns[_process_end_members(m, rel)].max()), m, m))
    return out if len(out) == len(base.processes) else []


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
