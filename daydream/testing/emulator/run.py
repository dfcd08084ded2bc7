"""The emulation: :func:`emulate` runs a :class:`~.program.Program` under the rules of
``docs/model.md`` (summarised in the package docstring) into a :class:`Run` of call, task and
range records, in integer nanoseconds; :func:`measure_latencies` reads ``L`` and ``G`` back off
a run.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import statistics
from dataclasses import dataclass
from typing import Any

from .ops import (
    Allocate,
    DeviceSync,
    EventRecord,
    EventSync,
    GraphLaunch,
    Handover,
    HostWork,
    RangeBegin,
    StreamSync,
    StreamWaitEvent,
    WaitHandover,
    _Call,
    _GpuWork,
)
from .program import Program


@dataclass(frozen=True)
class CallRecord:
    """One executed API call.

    Attributes:
        thread: index of its thread in ``Program.threads``.
        op_index: index of the op in that thread's ``ops``.
        op: the op itself.
        name: CUDA API name (``cudaLaunchKernel``, ...).
        cbid: CUPTI runtime callback id.
        pid, tid: of its thread.
        start_ns, end_ns: CPU interval, ns.
        correlation: correlation id (unique, increasing in launch order, per process).
        external_id: External id of the innermost enclosing cpu_op/user_annotation range, or None.
        blocking: whether the call waited for GPU work.
        waits_for: indices (into ``Run.tasks``) of the tasks whose end it waited for.
        task: index of the GPU task it launched, or None (a :class:`GraphLaunch`: its first
            kernel; the others follow it in ``Run.tasks``, see ``TaskRecord.graph_node``).
        bound_record: for EventSync/StreamWaitEvent, index (into ``Run.calls``) of the
            EventRecord it bound to, or None when the event had not been recorded.
        queued_for: for a launching call, the task whose end frees the launch-queue slot it
            needs (``Program.launch_queue_depth`` places before its task on the stream; the
            latest-ending one for several tasks), or None when the stream had a free slot.
    """

    thread: int
    op_index: int
    op: Any
    name: str
    cbid: int
    pid: int
    tid: int
    start_ns: int
    end_ns: int
    correlation: int
    external_id: int | None
    blocking: bool
    waits_for: tuple[int, ...] = ()
    task: int | None = None
    bound_record: int | None = None
    queued_for: int | None = None


@dataclass(frozen=True)
class TaskRecord:
    """One GPU task (kernel, memcpy or memset).

    Attributes:
        kind: ``"kernel"``, ``"memcpy"`` or ``"memset"``.
        name: name as written in the trace (kernel name, ``Memcpy DtoH (Device -> Pageable)``, ...).
        device, stream: its lane.
        call: index (into ``Run.calls``) of the launching call.
        correlation: the launching call's correlation id.
        ready_ns: launching call start + L.
        start_ns, end_ns: GPU interval, ns.
        preds: indices (into ``Run.tasks``) of its GPU predecessors (stream predecessor first).
        bytes: bytes moved/set (0 for kernels).
        external_id: the launching call's External id, or None.
        graph_node: its node index in the launching :class:`GraphLaunch`, or None.
    """

    kind: str
    name: str
    device: int
    stream: int
    call: int
    correlation: int
    ready_ns: int
    start_ns: int
    end_ns: int
    preds: tuple[int, ...]
    bytes: int = 0
    external_id: int | None = None
    graph_node: int | None = None


@dataclass(frozen=True)
class RangeRecord:
    """One CPU range (annotation, cpu_op, python_function).

    Attributes:
        thread: thread index. name, cat: as given. start_ns, end_ns: interval, ns.
        external_id: per-process id for cpu_op/user_annotation ranges, None for python_function.
        python_id, python_parent_id: for python_function ranges (else None).
    """

    thread: int
    name: str
    cat: str
    start_ns: int
    end_ns: int
    external_id: int | None = None
    python_id: int | None = None
    python_parent_id: int | None = None
    dims: tuple | None = None
    types: tuple | None = None


@dataclass(frozen=True)
class AllocRecord:
    """One :class:`~.ops.Allocate` as the emulated allocator made it.

    Attributes:
        thread, op_index: the op. ts_ns: when. bytes: + allocated, - freed. device: GPU, -1 host.
        seq: its place in the allocator's order (time, then thread index, then op index): Kineto's
            ``Ev Idx``. total_allocated: bytes allocated on the device after it (from the level
            before the program: see :func:`_allocator`). total_reserved: the emulated caching allocator's pool after it: it
            never returns memory, so the high-water mark of ``total_allocated``.
    """

    thread: int
    op_index: int
    ts_ns: int
    bytes: int
    device: int
    seq: int
    total_allocated: int
    total_reserved: int


def _allocator(raw: list[tuple[int, int, int, int, int]], before: dict[int, int] | None = None) -> tuple[AllocRecord, ...]:
    """The records of ``raw`` (ts, thread, op index, bytes, device) in the allocator's order. A
    device's level starts at what its frees of blocks never allocated in the program need (blocks
    allocated before it: the smallest start that keeps the level at or above 0), or at ``before``'s
    bytes for the device where that is more."""
    out, level, low = [], {}, {}
    for ts, th, k, b, d in sorted(raw):
        level[d] = level.get(d, 0) + b
        low[d] = min(low.get(d, 0), level[d])
    level = {d: max(-v, (before or {}).get(d, 0)) for d, v in low.items()}
    high = dict(level)
    for seq, (ts, th, k, b, d) in enumerate(sorted(raw)):
        level[d] = level.get(d, 0) + b
        high[d] = max(high.get(d, 0), level[d])
        out.append(AllocRecord(th, k, ts, b, d, seq, level[d], high[d]))
    return tuple(out)


def level_before(run: "Run") -> dict[int, int]:
    """Per device: bytes allocated before ``run``'s program (:func:`_allocator`)."""
    out: dict[int, int] = {}
    for a in run.allocs:
        out.setdefault(a.device, a.total_allocated - a.bytes)
    return out


def same_level_before(*runs: "Run") -> tuple["Run", ...]:
    """``runs`` of one program and its changed versions, each device's level before the program
    made the same in all: the largest of theirs. What a process held before the traced window does
    not depend on the order the window's events come in, but the smallest level that keeps a run's
    curve at or above 0 does (another thread's free before an allocation, or after it), so a run's
    own level is only a lower bound of the process's; the largest of them is the lower bound that
    holds for every run (issue 32: scale-cpu and scale-kernels reorder events across threads)."""
    before: dict[int, int] = {}
    for r in runs:
        for d, v in level_before(r).items():
            before[d] = max(before.get(d, 0), v)
    return tuple(dataclasses.replace(r, allocs=_allocator([(a.ts_ns, a.thread, a.op_index, a.bytes, a.device) for a in r.allocs],
                                                           before)) for r in runs)


def memory_peaks(run: "Run", steps: tuple[str, ...] = ()) -> dict[int, tuple[int, list[int]]]:
    """Per device: (peak bytes allocated, and per named CPU range of ``steps`` (e.g.
    ``ProfilerStep#1``) that has events in it, the peak over its events and the level before its
    first one). Levels include what was allocated before the program (:func:`_allocator`)."""
    out = {}
    for d in sorted({a.device for a in run.allocs}):
        ev = [a for a in run.allocs if a.device == d]
        peak = max(ev[0].total_allocated - ev[0].bytes, *(a.total_allocated for a in ev))
        per = []
        for name in steps:
            for r in run.ranges:
                if r.name != name:
                    continue
                inside = [a for a in ev if r.start_ns <= a.ts_ns < r.end_ns]
                if inside:
                    per.append(max(inside[0].total_allocated - inside[0].bytes, *(a.total_allocated for a in inside)))
        out[d] = (peak, per)
    return out


@dataclass(frozen=True)
class Run:
    """The result of :func:`emulate`.

    Attributes:
        program: the program run.
        calls: every API call, in launch order (start, thread index, op index).
        tasks: every GPU task, in launch order.
        ranges: every CPU range, in the order they were opened per thread (threads interleaved
            as executed).
    """

    program: Program
    calls: tuple[CallRecord, ...]
    tasks: tuple[TaskRecord, ...]
    ranges: tuple[RangeRecord, ...]
    #: every :class:`~.ops.Allocate`, in the allocator's order (:class:`AllocRecord`)
    allocs: tuple[AllocRecord, ...] = ()

    @property
    def trace_t0_ns(self) -> int:
        """Earliest timestamp the trace will hold (the model's ``t0``), ns."""
        times = [c.start_ns for c in self.calls] + [r.start_ns for r in self.ranges] + [a.ts_ns for a in self.allocs]
        return min(times) if times else self.program.t0_ns

    @property
    def end_ns(self) -> int:
        """Latest end of any call, task or range, ns."""
        times = ([c.end_ns for c in self.calls] + [t.end_ns for t in self.tasks] + [r.end_ns for r in self.ranges]
                 + [a.ts_ns for a in self.allocs])
        return max(times) if times else self.program.t0_ns

    def thread_calls(self, thread: int) -> list[CallRecord]:
        """Calls of one thread, in program order."""
        return sorted((c for c in self.calls if c.thread == thread), key=lambda c: c.op_index)

    def lane_tasks(self) -> dict[tuple[int, int], list[int]]:
        """Task indices per (device, stream), in stream (launch) order."""
        lanes: dict[tuple[int, int], list[int]] = {}
        for i, t in enumerate(self.tasks):
            lanes.setdefault((t.device, t.stream), []).append(i)
        return lanes


class _Emulator:
    """The state of one :func:`emulate` run: thread clocks, open ranges, lanes, events, the heap
    of next calls keyed by ``(start, thread, op)``."""

    def __init__(self, program: Program, contention: float = 0.0, stretched: frozenset = frozenset()):
        self.program = program
        self.contention = contention  # the stretch factor of the kernels in ``stretched``
        self.stretched = stretched  # (thread, op index, graph node or None) of the kernels it stretches
        self.current: tuple[int, int] = (-1, -1)  # (thread, op index) of the call being executed
        self.threads = program.threads
        n = len(self.threads)
        self.calls: list[CallRecord] = []
        self.tasks: list[TaskRecord] = []
        self.ranges: list[dict] = []  # mutable until closed
        self.cursor = [program.t0_ns] * n  # each thread's clock: last call end + host work since
        self.next_op = [0] * n
        self.open_ranges: list[list[int]] = [[] for _ in range(n)]  # indices into ranges
        self.corr_counter: dict[int, int] = {}  # per pid
        self.ext_counter: dict[int, int] = {}
        self.py_counter: dict[int, int] = {}
        self.lane_last: dict[tuple[int, int], int] = {}  # (device, stream) -> last task launched
        self.lane_all: dict[tuple[int, int], list[int]] = {}  # (device, stream) -> its tasks, launch order
        self.queued_for: int | None = None  # the current call's launch-queue wait (enqueue sets it)
        self.pending_waits: dict[tuple[int, int], list[int]] = {}  # lane -> producer tasks for its next task
        self.used_lanes: dict[int, dict[tuple[int, int], None]] = {}  # pid -> lanes launched to (ordered set)
        self.records: dict[tuple[int, Any], tuple[int, int | None]] = {}  # (pid, event) -> (record call, producer)
        self.heap: list[tuple[int, int, int]] = []
        self.last_end = [program.t0_ns] * n  # end of each thread's previous call (hand-over anchor)
        self.base = [program.t0_ns] * n  # max(last_end, releases waited for since): the gap counts from here
        self.released: dict[Any, int] = {}  # hand-over token -> release time
        self.parked: dict[Any, list[int]] = {}  # token -> threads waiting for it
        self.allocs: list[tuple[int, int, int, int, int]] = []  # (ts, thread, op index, bytes, device)

    def run(self) -> Run:
        for i in range(len(self.threads)):
            self.advance(i)
        while self.heap:
            self.execute(*heapq.heappop(self.heap))
        if self.parked:
            raise ValueError(f"hand-over never released (deadlock): tokens {sorted(map(repr, self.parked))}")
        return Run(program=self.program, calls=tuple(self.calls), tasks=tuple(self.tasks),
                   ranges=tuple(RangeRecord(**r) for r in self.ranges), allocs=_allocator(self.allocs))

    def innermost_external_id(self, i: int) -> int | None:
        for r in reversed(self.open_ranges[i]):
            if self.ranges[r]["external_id"] is not None:
                return self.ranges[r]["external_id"]
        return None

    def advance(self, i: int) -> None:
        """Run thread i's non-call ops up to its next call and schedule that call."""
        ops = self.threads[i].ops
        k = self.next_op[i]
        while k < len(ops) and not isinstance(ops[k], _Call):
            op = ops[k]
            if isinstance(op, HostWork):
                self.cursor[i] += op.dur_ns
            elif isinstance(op, RangeBegin):
                self.open_range(i, op)
            elif isinstance(op, Allocate):
                self.allocs.append((self.cursor[i], i, k, op.delta_bytes, op.device))
            elif isinstance(op, Handover):
                self.released[op.token] = self.last_end[i]
                for w in self.parked.pop(op.token, ()):
                    self.advance(w)
            elif isinstance(op, WaitHandover):
                if op.token not in self.released:
                    self.next_op[i] = k
                    self.parked.setdefault(op.token, []).append(i)
                    return
                rel = self.released[op.token]
                self.cursor[i] += max(0, rel - self.base[i])  # wait, then the host work
                self.base[i] = max(self.base[i], rel)
            else:  # RangeEnd
                self.ranges[self.open_ranges[i].pop()]["end_ns"] = self.cursor[i]
            k += 1
        self.next_op[i] = k
        if k < len(ops):
            heapq.heappush(self.heap, (self.cursor[i], i, k))

    def open_range(self, i: int, op: RangeBegin) -> None:
        pid = self.threads[i].pid
        ext = py = parent = None
        if op.cat == "python_function":
            py = self.py_counter[pid] = self.py_counter.get(pid, 0) + 1
            for r in reversed(self.open_ranges[i]):
                if self.ranges[r]["python_id"] is not None:
                    parent = self.ranges[r]["python_id"]
                    break
        else:
            ext = self.ext_counter[pid] = self.ext_counter.get(pid, 0) + 1
        self.open_ranges[i].append(len(self.ranges))
        self.ranges.append(dict(thread=i, name=op.name, cat=op.cat, start_ns=self.cursor[i], end_ns=None,
                                external_id=ext, python_id=py, python_parent_id=parent, dims=op.dims, types=op.types))

    def execute(self, s: int, i: int, k: int) -> None:
        """Run the call ``k`` of thread ``i``, which starts at ``s``."""
        th = self.threads[i]
        op = th.ops[k]
        pid = th.pid
        corr = self.corr_counter[pid] = self.corr_counter.get(pid, 0) + 1
        ext = self.innermost_external_id(i)
        name, cbid = op.api()
        call_idx = len(self.calls)
        task_idx = bound = self.queued_for = None
        self.current = (i, k)
        if isinstance(op, _GpuWork):
            stream_prev = self.lane_last.get((op.device, op.stream))
            task_idx = self.enqueue(op, pid, s, call_idx, corr, ext)
            waits = op.host_waits(task_idx, stream_prev)
        elif isinstance(op, GraphLaunch):  # one chain on its stream, every node ready at s + L
            waits = []
            lane = (op.device, op.stream)
            entry: list[tuple[int, int]] = []
            if op.run_stream != op.stream:  # runs in the launch stream's order (docs/model.md)
                entry = [(self.lane_last[lane], 0)] if lane in self.lane_last else []
                entry += [(p, self.program.wait_latency_ns) for p in dict.fromkeys(self.pending_waits.pop(lane, []))]
            for node, kernel in enumerate(op.nodes()):
                t = self.enqueue(kernel, pid, s, call_idx, corr, ext, slot=False, entry=entry if node == 0 else (), node=node)
                self.tasks[t] = dataclasses.replace(self.tasks[t], graph_node=node)
                task_idx = t if task_idx is None else task_idx
            if op.run_stream != op.stream:  # what the launch stream runs next follows the graph
                self.lane_last[lane] = t
                self.used_lanes.setdefault(pid, {})[lane] = None
            self.take_queue_slot((op.device, op.run_stream), t)  # the graph is one launch-queue entry, freed by its last node
        else:
            waits, bound = self.sync_targets(op, pid, call_idx)
        q = self.tasks[self.queued_for].end_ns if self.queued_for is not None else s  # a full launch queue
        if op.blocking:
            w = max([self.tasks[t].end_ns for t in waits], default=s)
            end = max(s, w, q) + op.cpu_cost()
        else:
            end = max(s, q) + op.cpu_cost()
        self.calls.append(CallRecord(thread=i, op_index=k, op=op, name=name, cbid=cbid, pid=pid, tid=th.tid,
                                     start_ns=s, end_ns=end, correlation=corr, external_id=ext, blocking=op.blocking,
                                     waits_for=tuple(waits), task=task_idx, bound_record=bound, queued_for=self.queued_for))
        self.cursor[i] = self.last_end[i] = self.base[i] = end
        self.next_op[i] = k + 1
        self.advance(i)

    def enqueue(self, op: _GpuWork, pid: int, s: int, call_idx: int, corr: int, ext: int | None, slot: bool = True,
                entry=(), node: int | None = None) -> int:
        """Append the GPU task of ``op`` (launched at ``s``); returns its index. ``slot``: it takes
        a launch-queue slot of its own (a graph's nodes share their launch's one). ``entry``:
        further ``(predecessor task, extra latency ns)`` pairs, each bounding the start at its
        end + ``G`` + the extra (a graph launched into another stream: that stream's last task,
        0, and its pending cross-stream waits, ``W``)."""
        lane = (op.device, op.stream)
        preds = [self.lane_last[lane]] if lane in self.lane_last else []
        waited = [p for p in self.pending_waits.pop(lane, []) if p not in preds]
        preds += list(dict.fromkeys(waited))
        ready = s + self.program.launch_latency_ns + self.program.staging_ns(op)
        G, W = self.program.gpu_gap_ns, self.program.wait_latency_ns
        start = max([ready] + [self.tasks[p].end_ns + G + (W if p in waited else 0) for p in preds]
                    + [self.tasks[p].end_ns + G + extra for p, extra in entry])
        preds += [p for p, _ in entry if p not in preds]
        kind, tname = op.task_name()
        task_idx = len(self.tasks)
        dur = op.gpu_dur()
        if kind == "kernel" and (*self.current, node) in self.stretched:  # contention: f x, rounded half up
            dur = int(math.floor(dur * self.contention + 0.5))
        self.tasks.append(TaskRecord(kind=kind, name=tname, device=op.device, stream=op.stream, call=call_idx,
                                     correlation=corr, ready_ns=ready, start_ns=start, end_ns=start + dur,
                                     preds=tuple(preds), bytes=getattr(op, "bytes", 0), external_id=ext))
        self.lane_last[lane] = task_idx
        self.used_lanes.setdefault(pid, {})[lane] = None
        if slot:
            self.take_queue_slot(lane, task_idx)
        return task_idx

    def take_queue_slot(self, lane: tuple[int, int], task_idx: int) -> None:
        """Append the launch-queue entry ending with task ``task_idx`` to its stream; when the
        stream already holds ``D`` entries before it, the launching call waits for the end of the
        one ``D`` places before (its last task)."""
        on_lane = self.lane_all.setdefault(lane, [])
        d = self.program.launch_queue_depth
        if d and len(on_lane) >= d:
            t = on_lane[-d]
            if self.queued_for is None or self.tasks[t].end_ns > self.tasks[self.queued_for].end_ns:
                self.queued_for = t
        on_lane.append(task_idx)

    def sync_targets(self, op: _Call, pid: int, call_idx: int) -> tuple[list[int], int | None]:
        """(tasks a synchronizing call waits for, the EventRecord call it binds to); records
        events and cross-stream waits on the way. OtherCall: nothing on the GPU."""
        if isinstance(op, DeviceSync):
            return [self.lane_last[ln] for ln in self.used_lanes.get(pid, {}) if ln[0] == op.device], None
        if isinstance(op, StreamSync):
            lane = (op.device, op.stream)
            return ([self.lane_last[lane]] if lane in self.lane_last else []), None
        if isinstance(op, EventRecord):
            self.records[(pid, op.event)] = (call_idx, self.lane_last.get((op.device, op.stream)))
            return [], None
        if isinstance(op, (EventSync, StreamWaitEvent)):
            rec = self.records.get((pid, op.event))
            if rec is None:
                return [], None
            if rec[1] is None:
                return [], rec[0]
            if isinstance(op, EventSync):
                return [rec[1]], rec[0]
            self.pending_waits.setdefault((op.device, op.stream), []).append(rec[1])
            return [], rec[0]
        return [], None


def emulate(program: Program, contention: float = 0.0) -> Run:
    """Run ``program`` under the rules of ``docs/model.md``; all times in integer ns.

    ``contention`` (> 0: on): a kernel that starts while a kernel of another stream of its device
    is running (that one's start <= its start < that one's end) lasts ``contention`` x its
    duration, rounded half up. The emulator enqueues tasks in call order, and a kernel launched
    later on an idle stream may start before one launched earlier, so the run is repeated with
    the set of stretched kernels the previous run showed until the set repeats itself.

    Returns:
        the :class:`Run`: every call's and GPU task's start and end.

    Raises:
        ValueError: with ``contention``, the stretched set cycles without settling.
    """
    if not contention > 0:
        return _Emulator(program).run()
    stretched: frozenset = frozenset()
    seen = {stretched}
    while True:
        run = _Emulator(program, contention, stretched).run()
        now = _started_while_other_stream_ran(run)
        if now == stretched:
            return run
        if now in seen:
            raise ValueError(f"contention x{contention}: the stretched kernels cycle without settling")
        seen.add(now)
        stretched = now


def _started_while_other_stream_ran(run: Run) -> frozenset:
    """(thread, op index, graph node) of every kernel of ``run`` that started while a kernel of
    another stream of its device ran (plain pairwise check: the reference, not fast)."""
    out = set()
    kernels = [t for t in run.tasks if t.kind == "kernel"]
    for t in kernels:
        if any(o.device == t.device and o.stream != t.stream and o.start_ns <= t.start_ns < o.end_ns for o in kernels):
            c = run.calls[t.call]
            out.add((c.thread, c.op_index, t.graph_node))
    return frozenset(out)


def measure_latencies(run: Run) -> tuple[int, int]:
    """``(L, G)`` as rule 5 of ``docs/model.md`` measures them from ``run``'s trace.

    They equal ``(program.L, program.G)`` whenever the trace shows at least one task launched on an
    idle stream and one "back-to-back" pair; otherwise the missing one measures 0. Staged copies
    give an ``L`` sample only when no other task does, and are ready ``L + S`` after their call
    (as in ``graph/latency.py``). Tests of exact
    replay can ``assume(measure_latencies(run) == (prog.L, prog.G))`` or compare only then.
    """
    tasks, calls = run.tasks, run.calls
    staged = [bool(getattr(calls[t.call].op, "staged", False)) for t in tasks]
    lat, lat_staged = [], []
    for t, st in zip(tasks, staged):
        s = calls[t.call].start_ns
        if all(tasks[p].end_ns <= s for p in t.preds):
            (lat_staged if st else lat).append(t.start_ns - s)
    lat = lat or lat_staged  # staged copies (ready L + S after the call) only when nothing else
    staged_ns = [run.program.staging_ns(calls[t.call].op) if lat is not lat_staged else 0 for t in tasks]
    L = statistics.median_low(lat) if lat else 0
    gaps = []
    for lane in run.lane_tasks().values():
        for a, b in zip(lane, lane[1:]):
            prev, t = tasks[a], tasks[b]
            ready = calls[t.call].start_ns + L + staged_ns[b]
            if ready <= prev.end_ns and all(tasks[p].end_ns <= prev.end_ns for p in t.preds if p != a):
                gaps.append(t.start_ns - prev.end_ns)
    if len(gaps) >= 20:  # rule 5: the 5 %-trimmed mean (all queued gaps equal G in an emulated run)
        gaps.sort()
        k = int(len(gaps) * 0.05)
        kept = gaps[k:len(gaps) - k] or gaps
        G = round(sum(kept) / len(kept))
    else:
        G = statistics.median_low(gaps) if gaps else 0
    G = min(max(G, 0), L)
    return L, G
