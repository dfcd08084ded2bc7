"""A small reference emulator of CUDA execution semantics, and a Kineto trace writer for its runs.

The emulator runs a :class:`Program` (CPU threads issuing CUDA runtime calls) under exactly the
rules of ``docs/model.md`` and reports when every CPU call and every GPU task started and ended.
:func:`to_kineto` writes such a :class:`Run` as a PyTorch-profiler (Kineto) Chrome-trace JSON, so
tests can check that daydream rebuilds the graph from the trace and replays it to the nanosecond,
and that its predictions for a changed program equal the emulator's run of that changed program.

It is a reference: plain Python, clarity over speed. All times are integer nanoseconds.

Semantics in short (``docs/model.md`` is the contract):

* CPU: a thread's next API call starts at the end of its previous call plus the :class:`HostWork`
  in between (the first at ``Program.t0_ns`` plus the leading host work). A non-blocking call ends
  at ``start + call_dur_ns``; a blocking call at ``max(start, W) + call_own_ns`` where ``W`` is the
  latest end of the GPU tasks it waits for.
* GPU: a task launched by a call starting at ``s`` is ready at ``s + L``; it starts at
  ``max(ready, max(pred.end + G))`` over its GPU predecessors: the previous task on its stream
  (streams are FIFO in launch order) and, for the first task on a stream launched after a
  :class:`StreamWaitEvent`, the last task on the recorded stream launched before the
  :class:`EventRecord` the wait binds to (the latest record of the event issued before the wait).
* "Launched before" means: the launching call's start is earlier. Calls of different threads
  that start at the same nanosecond are ordered by (thread index, op index); the emulator gives
  correlation ids in that order, so ordering ties by correlation id reproduces it.

Calls are executed in that global order with a heap keyed by ``(start, thread, op)``. Everything
a call depends on (earlier launches, earlier records) was launched earlier, hence is already
computed when the call is reached, so one pass suffices.

Typical use::

    prog = Program([Thread([Launch(7, "k", 10_000, 3_000), StreamSync(7, 500)])])
    run = emulate(prog)
    trace = to_kineto(run, "out.json.gz")
"""

from __future__ import annotations

import dataclasses
import gzip
import heapq
import io
import json
import os
import random
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Union

from ..cuda_api import ApiRole, api_role

__all__ = [
    "HostWork", "Launch", "MemcpyAsync", "Memcpy", "MemsetAsync", "DeviceSync", "StreamSync",
    "EventRecord", "EventSync", "StreamWaitEvent", "OtherCall", "RangeBegin", "RangeEnd", "Handover", "WaitHandover",
    "Op", "Thread", "Program", "CallRecord", "TaskRecord", "RangeRecord", "Run",
    "emulate", "to_kineto", "measure_latencies", "programs", "training_step_program",
    "DEFAULT_T0_NS",
]

#: Default emulated start time: an epoch-like absolute ns value with a non-zero sub-second part.
DEFAULT_T0_NS = 1_700_000_000_123_456_789

_COPY_KINDS = ("HtoD", "DtoH", "DtoD")
_HOST_MEMORY = ("pinned", "pageable")
_RANGE_CATS = ("user_annotation", "cpu_op", "python_function")


# ------------------------------------------------------------------------------------------------
# Ops
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HostWork:
    """CPU time spent between API calls (framework/Python code); becomes the next call's gap.

    Attributes:
        dur_ns: CPU time, ns (>= 0).
    """

    dur_ns: int


@dataclass(frozen=True)
class Launch:
    """``cudaLaunchKernel``: enqueue a kernel on ``stream``; the CPU does not wait.

    Attributes:
        stream: stream id the kernel runs on.
        kernel_name: kernel name as written in the trace.
        kernel_dur_ns: kernel execution time on the GPU, ns.
        call_dur_ns: duration of the API call on the CPU, ns.
        device: GPU device index.
    """

    stream: int
    kernel_name: str
    kernel_dur_ns: int
    call_dur_ns: int
    device: int = 0


@dataclass(frozen=True)
class MemcpyAsync:
    """``cudaMemcpyAsync``: enqueue a copy on ``stream``.

    Blocking (as in CUDA) when it copies device to *pageable* host memory: the call then returns
    ``call_dur_ns`` after its own copy ended (or after its start if later), i.e. ``call_dur_ns``
    is the call's own cost. Otherwise non-blocking: the call lasts ``call_dur_ns``.

    Attributes:
        stream: stream id the copy runs on.
        kind: ``"HtoD"``, ``"DtoH"`` or ``"DtoD"``.
        bytes: bytes copied.
        copy_dur_ns: copy time on the GPU, ns.
        call_dur_ns: CPU duration of the call (own cost when blocking), ns.
        host_memory: ``"pinned"`` or ``"pageable"``: the host side of an HtoD/DtoH copy
            (ignored for DtoD).
        device: GPU device index.
    """

    stream: int
    kind: str
    bytes: int
    copy_dur_ns: int
    call_dur_ns: int
    host_memory: str = "pinned"
    device: int = 0

    @property
    def blocking(self) -> bool:
        return self.kind == "DtoH" and self.host_memory == "pageable"


@dataclass(frozen=True)
class Memcpy:
    """``cudaMemcpy``: a copy on ``stream`` that the CPU waits for (always blocking).

    The call ends at ``max(start, copy.end) + call_own_ns``.

    Attributes: as :class:`MemcpyAsync`, with ``call_own_ns`` the call's own CPU cost, ns.
    """

    stream: int
    kind: str
    bytes: int
    copy_dur_ns: int
    call_own_ns: int
    host_memory: str = "pageable"
    device: int = 0


@dataclass(frozen=True)
class MemsetAsync:
    """``cudaMemsetAsync``: enqueue a memset on ``stream``; non-blocking.

    Attributes:
        stream: stream id.
        bytes: bytes set.
        set_dur_ns: memset time on the GPU, ns.
        call_dur_ns: CPU duration of the call, ns.
        device: GPU device index.
    """

    stream: int
    bytes: int
    set_dur_ns: int
    call_dur_ns: int
    device: int = 0


@dataclass(frozen=True)
class DeviceSync:
    """``cudaDeviceSynchronize``: waits, on every stream of ``device`` that the process has
    launched to so far, for the last task launched before the call.

    Attributes:
        call_own_ns: the call's own CPU cost, ns (added after the wait).
        device: GPU device index.
    """

    call_own_ns: int
    device: int = 0


@dataclass(frozen=True)
class StreamSync:
    """``cudaStreamSynchronize``: waits for the last task on ``stream`` launched before the call.

    Attributes:
        stream: stream id.
        call_own_ns: own CPU cost, ns.
        device: GPU device index.
    """

    stream: int
    call_own_ns: int
    device: int = 0


@dataclass(frozen=True)
class EventRecord:
    """``cudaEventRecord(event, stream)``: marks the position of ``stream``; non-blocking.

    Attributes:
        event: any hashable event handle (events are per process).
        stream: stream id.
        call_dur_ns: CPU duration, ns.
        device: GPU device index of the stream.
    """

    event: Any
    stream: int
    call_dur_ns: int
    device: int = 0


@dataclass(frozen=True)
class EventSync:
    """``cudaEventSynchronize(event)``: waits for the last task on the event's stream launched
    before the latest record of ``event`` issued before this call. Returns at once
    (after ``call_own_ns``) when the event was never recorded or nothing preceded the record.

    Attributes:
        event: event handle.
        call_own_ns: own CPU cost, ns.
    """

    event: Any
    call_own_ns: int


@dataclass(frozen=True)
class StreamWaitEvent:
    """``cudaStreamWaitEvent(stream, event)``: GPU-side wait; the CPU does not block.

    The first task on ``stream`` launched after this call gets, as GPU predecessor, the last task
    on the recorded stream launched before the record this wait binds to (the latest record of
    ``event`` issued before the wait). No effect when the event was never recorded.

    Attributes:
        stream: the waiting stream.
        event: event handle.
        call_dur_ns: CPU duration, ns.
        device: GPU device index of the waiting stream.
    """

    stream: int
    event: Any
    call_dur_ns: int
    device: int = 0


@dataclass(frozen=True)
class OtherCall:
    """Any other, non-blocking runtime call that does no GPU work (``cudaGetDevice``,
    ``cudaStreamIsCapturing``, ``cudaEventQuery``, ...).

    Attributes:
        name: API name; must have role ``OTHER`` in :mod:`daydream.cuda_api`.
        call_dur_ns: CPU duration, ns.
        cbid: CUPTI callback id written to the trace (0 when unknown).
    """

    name: str
    call_dur_ns: int
    cbid: int = 0


@dataclass(frozen=True)
class RangeBegin:
    """Opens a named CPU range at the thread's current time (takes no time).

    Attributes:
        name: e.g. ``"ProfilerStep#3"``, ``"aten::addmm"``, ``"nn.Module: Linear_0"``.
        cat: ``"user_annotation"`` (record_function, ProfilerStep#N), ``"cpu_op"`` (ATen op) or
            ``"python_function"`` (``nn.Module: ...``).
    """

    name: str
    cat: str = "user_annotation"


@dataclass(frozen=True)
class RangeEnd:
    """Closes the innermost open range of the thread at its current time."""


@dataclass(frozen=True)
class Handover:
    """Releases ``token`` at the end of the thread's previous call (its start time if none):
    e.g. the main thread entering ``loss.backward()`` hands over to the autograd thread, or the
    autograd thread's last backward call hands back. Takes no time; not written to the trace
    (real traces show no record of it). Each token is released once per program.
    """

    token: Any


@dataclass(frozen=True)
class WaitHandover:
    """Blocks the thread until ``token`` is released (:class:`Handover` on another thread).

    The thread's next call starts at ``max(end of its previous call, release time)`` plus all the
    :class:`HostWork` between its previous call and that call (``docs/model.md``, "CPU hand-over
    between threads"): the thread waits right after its previous call, then does its own work.
    Not written to the trace.
    """

    token: Any


Op = Union[HostWork, Launch, MemcpyAsync, Memcpy, MemsetAsync, DeviceSync, StreamSync, EventRecord,
           EventSync, StreamWaitEvent, OtherCall, RangeBegin, RangeEnd, Handover, WaitHandover]

_CALL_TYPES = (Launch, MemcpyAsync, Memcpy, MemsetAsync, DeviceSync, StreamSync, EventRecord, EventSync,
               StreamWaitEvent, OtherCall)
_GPU_TYPES = (Launch, MemcpyAsync, Memcpy, MemsetAsync)

#: (API name, CUPTI cbid) per call type; OtherCall carries its own.
_API = {
    Launch: ("cudaLaunchKernel", 211),
    MemcpyAsync: ("cudaMemcpyAsync", 41),
    Memcpy: ("cudaMemcpy", 31),
    MemsetAsync: ("cudaMemsetAsync", 51),
    DeviceSync: ("cudaDeviceSynchronize", 165),
    StreamSync: ("cudaStreamSynchronize", 131),
    EventRecord: ("cudaEventRecord", 135),
    EventSync: ("cudaEventSynchronize", 137),
    StreamWaitEvent: ("cudaStreamWaitEvent", 147),
}


def _is_blocking(op: Op) -> bool:
    return isinstance(op, (Memcpy, DeviceSync, StreamSync, EventSync)) or (isinstance(op, MemcpyAsync) and op.blocking)


def _cpu_cost(op: Op) -> int:
    """call_dur_ns of a non-blocking call, call_own_ns (or call_dur_ns) of a blocking one."""
    return op.call_own_ns if hasattr(op, "call_own_ns") else op.call_dur_ns


def _gpu_dur(op: Op) -> int:
    if isinstance(op, Launch):
        return op.kernel_dur_ns
    if isinstance(op, MemsetAsync):
        return op.set_dur_ns
    return op.copy_dur_ns


# ------------------------------------------------------------------------------------------------
# Program
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Thread:
    """One CPU thread: its ops in program order.

    Attributes:
        ops: the thread's ops (a list is converted to a tuple).
        pid: OS process id written to the trace.
        tid: OS thread id written to the trace.
        name: thread name for the trace metadata (``thread <tid> (<name>)``).
    """

    ops: tuple
    pid: int = 4242
    tid: int = 4242
    name: str = "pt_main_thread"

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", tuple(self.ops))


@dataclass(frozen=True)
class Program:
    """CPU threads issuing CUDA calls, plus the two GPU constants of the model.

    Attributes:
        threads: the CPU threads (a list is converted to a tuple); (pid, tid) must be distinct.
        launch_latency_ns: ``L``: a task is ready ``L`` ns after its launching call starts.
        gpu_gap_ns: ``G``: minimum gap between a task and a GPU predecessor; ``0 <= G <= L``.
        t0_ns: absolute time (ns) at which every thread starts.

    Raises:
        ValueError: invalid constants, negative durations, unknown copy kinds or range
            categories, unbalanced ranges, duplicate threads, or an OtherCall with a
            GPU-relevant API name.
    """

    threads: tuple
    launch_latency_ns: int = 5_000
    gpu_gap_ns: int = 1_000
    t0_ns: int = DEFAULT_T0_NS

    def __post_init__(self) -> None:
        object.__setattr__(self, "threads", tuple(self.threads))
        self.validate()

    @property
    def L(self) -> int:  # noqa: N802 - the model's name
        return self.launch_latency_ns

    @property
    def G(self) -> int:  # noqa: N802
        return self.gpu_gap_ns

    def validate(self) -> None:
        """Check the program (called on construction); raises ValueError."""
        if not (0 <= self.gpu_gap_ns <= self.launch_latency_ns):
            raise ValueError(f"need 0 <= G <= L, got L={self.launch_latency_ns} G={self.gpu_gap_ns}")
        if self.t0_ns < 0:
            raise ValueError("t0_ns must be >= 0")
        seen = set()
        for ti, th in enumerate(self.threads):
            if not isinstance(th, Thread):
                raise ValueError(f"thread {ti}: not a Thread")
            if (th.pid, th.tid) in seen:
                raise ValueError(f"thread {ti}: duplicate (pid, tid) {(th.pid, th.tid)}")
            seen.add((th.pid, th.tid))
            depth = 0
            for k, op in enumerate(th.ops):
                where = f"thread {ti} op {k} ({type(op).__name__})"
                if isinstance(op, RangeBegin):
                    if op.cat not in _RANGE_CATS:
                        raise ValueError(f"{where}: range category must be one of {_RANGE_CATS}")
                    depth += 1
                    continue
                if isinstance(op, RangeEnd):
                    depth -= 1
                    if depth < 0:
                        raise ValueError(f"{where}: RangeEnd without RangeBegin")
                    continue
                if isinstance(op, Handover):
                    if ("handover", op.token) in seen:
                        raise ValueError(f"{where}: token {op.token!r} released twice")
                    seen.add(("handover", op.token))
                if isinstance(op, (Handover, WaitHandover)):
                    continue
                if not isinstance(op, (HostWork,) + _CALL_TYPES):
                    raise ValueError(f"{where}: unknown op")
                for f in dataclasses.fields(op):
                    v = getattr(op, f.name)
                    if f.name.endswith("_ns") or f.name == "bytes":
                        if not isinstance(v, int) or v < 0:
                            raise ValueError(f"{where}: {f.name} must be an int >= 0, got {v!r}")
                if isinstance(op, (MemcpyAsync, Memcpy)):
                    if op.kind not in _COPY_KINDS:
                        raise ValueError(f"{where}: kind must be one of {_COPY_KINDS}")
                    if op.host_memory not in _HOST_MEMORY:
                        raise ValueError(f"{where}: host_memory must be one of {_HOST_MEMORY}")
                if isinstance(op, OtherCall) and api_role(op.name) != ApiRole.OTHER:
                    raise ValueError(f"{where}: {op.name} is not a plain (role OTHER) call; use its op type")
            if depth:
                raise ValueError(f"thread {ti}: {depth} range(s) left open")

    def map_ops(self, fn: Callable[[Op], "Op | None"]) -> "Program":
        """A copy with every op replaced by ``fn(op)`` (``None`` drops the op).

        Handy for changed programs, e.g. halving one kernel::

            prog.map_ops(lambda op: dataclasses.replace(op, kernel_dur_ns=op.kernel_dur_ns // 2)
                         if isinstance(op, Launch) and op.kernel_name == "gemm" else op)
        """
        threads = []
        for th in self.threads:
            ops = [fn(op) for op in th.ops]
            threads.append(dataclasses.replace(th, ops=tuple(o for o in ops if o is not None)))
        return dataclasses.replace(self, threads=tuple(threads))


# ------------------------------------------------------------------------------------------------
# Run
# ------------------------------------------------------------------------------------------------


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
        task: index of the GPU task it launched, or None.
        bound_record: for EventSync/StreamWaitEvent, index (into ``Run.calls``) of the
            EventRecord it bound to, or None when the event had not been recorded.
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

    @property
    def trace_t0_ns(self) -> int:
        """Earliest timestamp the trace will hold (the model's ``t0``), ns."""
        times = [c.start_ns for c in self.calls] + [r.start_ns for r in self.ranges]
        return min(times) if times else self.program.t0_ns

    @property
    def end_ns(self) -> int:
        """Latest end of any call, task or range, ns."""
        times = [c.end_ns for c in self.calls] + [t.end_ns for t in self.tasks] + [r.end_ns for r in self.ranges]
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


# ------------------------------------------------------------------------------------------------
# Emulation
# ------------------------------------------------------------------------------------------------


def _task_name(op: Op) -> tuple[str, str]:
    if isinstance(op, Launch):
        return "kernel", op.kernel_name
    if isinstance(op, MemsetAsync):
        return "memset", "Memset (Device)"
    host = "Pinned" if op.host_memory == "pinned" else "Pageable"
    src, dst = {"HtoD": (host, "Device"), "DtoH": ("Device", host), "DtoD": ("Device", "Device")}[op.kind]
    return "memcpy", f"Memcpy {op.kind} ({src} -> {dst})"


def emulate(program: Program) -> Run:
    """Run ``program`` under the rules of ``docs/model.md``; all times in integer ns.

    Returns:
        the :class:`Run`: every call's and GPU task's start and end.
    """
    L, G = program.launch_latency_ns, program.gpu_gap_ns
    threads = program.threads
    n = len(threads)

    calls: list[CallRecord] = []
    tasks: list[TaskRecord] = []
    ranges: list[dict] = []  # mutable until closed

    cursor = [program.t0_ns] * n  # each thread's clock: last call end + host work since
    next_op = [0] * n
    open_ranges: list[list[int]] = [[] for _ in range(n)]  # indices into ranges
    corr_counter: dict[int, int] = {}  # per pid
    ext_counter: dict[int, int] = {}
    py_counter: dict[int, int] = {}

    lane_last: dict[tuple[int, int], int] = {}  # (device, stream) -> last task launched
    pending_waits: dict[tuple[int, int], list[int]] = {}  # lane -> producer tasks for its next task
    used_lanes: dict[int, dict[tuple[int, int], None]] = {}  # pid -> lanes launched to (ordered set)
    records: dict[tuple[int, Any], tuple[int, int | None]] = {}  # (pid, event) -> (record call, producer)
    heap: list[tuple[int, int, int]] = []

    def innermost_external_id(i: int) -> int | None:
        for r in reversed(open_ranges[i]):
            if ranges[r]["external_id"] is not None:
                return ranges[r]["external_id"]
        return None

    def advance(i: int) -> None:
        """Run thread i's non-call ops up to its next call and schedule that call."""
        th = threads[i]
        ops = th.ops
        k = next_op[i]
        while k < len(ops) and not isinstance(ops[k], _CALL_TYPES):
            op = ops[k]
            if isinstance(op, HostWork):
                cursor[i] += op.dur_ns
            elif isinstance(op, RangeBegin):
                ext = py = parent = None
                if op.cat == "python_function":
                    py = py_counter[th.pid] = py_counter.get(th.pid, 0) + 1
                    for r in reversed(open_ranges[i]):
                        if ranges[r]["python_id"] is not None:
                            parent = ranges[r]["python_id"]
                            break
                else:
                    ext = ext_counter[th.pid] = ext_counter.get(th.pid, 0) + 1
                open_ranges[i].append(len(ranges))
                ranges.append(dict(thread=i, name=op.name, cat=op.cat, start_ns=cursor[i], end_ns=None,
                                   external_id=ext, python_id=py, python_parent_id=parent))
            elif isinstance(op, Handover):
                released[op.token] = last_end[i]
                for w in parked.pop(op.token, ()):
                    advance(w)
            elif isinstance(op, WaitHandover):
                if op.token not in released:
                    next_op[i] = k
                    parked.setdefault(op.token, []).append(i)
                    return
                cursor[i] += max(0, released[op.token] - base[i])  # wait, then the host work
                base[i] = max(base[i], released[op.token])
            else:  # RangeEnd
                ranges[open_ranges[i].pop()]["end_ns"] = cursor[i]
            k += 1
        next_op[i] = k
        if k < len(ops):
            heapq.heappush(heap, (cursor[i], i, k))

    last_end = [program.t0_ns] * n  # end of each thread's previous call (hand-over anchor)
    base = [program.t0_ns] * n  # max(last_end, releases waited for since): the gap counts from here
    released: dict[Any, int] = {}  # hand-over token -> release time
    parked: dict[Any, list[int]] = {}  # token -> threads waiting for it
    for i in range(n):
        advance(i)

    while heap:
        s, i, k = heapq.heappop(heap)
        th = threads[i]
        op = th.ops[k]
        pid = th.pid
        corr = corr_counter[pid] = corr_counter.get(pid, 0) + 1
        ext = innermost_external_id(i)
        name, cbid = (op.name, op.cbid) if isinstance(op, OtherCall) else _API[type(op)]
        call_idx = len(calls)
        blocking = _is_blocking(op)
        waits: list[int] = []
        task_idx = None
        bound = None

        if isinstance(op, _GPU_TYPES):
            lane = (op.device, op.stream)
            preds = []
            if lane in lane_last:
                preds.append(lane_last[lane])
            for p in pending_waits.pop(lane, []):
                if p not in preds:
                    preds.append(p)
            ready = s + L
            start = max([ready] + [tasks[p].end_ns + G for p in preds])
            kind, tname = _task_name(op)
            task_idx = len(tasks)
            tasks.append(TaskRecord(kind=kind, name=tname, device=op.device, stream=op.stream, call=call_idx,
                                    correlation=corr, ready_ns=ready, start_ns=start, end_ns=start + _gpu_dur(op),
                                    preds=tuple(preds), bytes=getattr(op, "bytes", 0), external_id=ext))
            lane_last[lane] = task_idx
            used_lanes.setdefault(pid, {})[lane] = None
            if blocking:
                waits = [task_idx]
        elif isinstance(op, DeviceSync):
            waits = [lane_last[ln] for ln in used_lanes.get(pid, {}) if ln[0] == op.device]
        elif isinstance(op, StreamSync):
            lane = (op.device, op.stream)
            waits = [lane_last[lane]] if lane in lane_last else []
        elif isinstance(op, EventRecord):
            records[(pid, op.event)] = (call_idx, lane_last.get((op.device, op.stream)))
        elif isinstance(op, EventSync):
            rec = records.get((pid, op.event))
            if rec is not None:
                bound = rec[0]
                if rec[1] is not None:
                    waits = [rec[1]]
        elif isinstance(op, StreamWaitEvent):
            rec = records.get((pid, op.event))
            if rec is not None:
                bound = rec[0]
                if rec[1] is not None:
                    pending_waits.setdefault((op.device, op.stream), []).append(rec[1])
        # OtherCall: nothing on the GPU

        if blocking:
            w = max([tasks[t].end_ns for t in waits], default=s)
            end = max(s, w) + _cpu_cost(op)
        else:
            end = s + _cpu_cost(op)
        calls.append(CallRecord(thread=i, op_index=k, op=op, name=name, cbid=cbid, pid=pid, tid=th.tid,
                                start_ns=s, end_ns=end, correlation=corr, external_id=ext, blocking=blocking,
                                waits_for=tuple(waits), task=task_idx, bound_record=bound))
        cursor[i] = last_end[i] = base[i] = end
        next_op[i] = k + 1
        advance(i)

    if parked:
        raise ValueError(f"hand-over never released (deadlock): tokens {sorted(map(repr, parked))}")
    return Run(program=program, calls=tuple(calls), tasks=tuple(tasks),
               ranges=tuple(RangeRecord(**r) for r in ranges))


def measure_latencies(run: Run) -> tuple[int, int]:
    """``(L, G)`` as rule 5 of ``docs/model.md`` measures them from ``run``'s trace.

    They equal ``(program.L, program.G)`` whenever the trace shows at least one task launched on an
    idle stream and one "back-to-back" pair; otherwise the missing one measures 0. Tests of exact
    replay can ``assume(measure_latencies(run) == (prog.L, prog.G))`` or compare only then.
    """
    tasks, calls = run.tasks, run.calls
    lat = []
    for t in tasks:
        s = calls[t.call].start_ns
        if all(tasks[p].end_ns <= s for p in t.preds):
            lat.append(t.start_ns - s)
    L = statistics.median_low(lat) if lat else 0
    gaps = []
    for lane in run.lane_tasks().values():
        for a, b in zip(lane, lane[1:]):
            prev, t = tasks[a], tasks[b]
            if calls[t.call].start_ns + L <= prev.end_ns and all(tasks[p].end_ns <= prev.end_ns for p in t.preds if p != a):
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


# ------------------------------------------------------------------------------------------------
# Kineto writer
# ------------------------------------------------------------------------------------------------


class _Us:
    """A time written as microseconds with exactly three decimals (exact ns)."""

    __slots__ = ("ns",)

    def __init__(self, ns: int) -> None:
        if ns < 0:
            raise ValueError(f"negative relative time {ns} ns: base_time_ns is after a trace timestamp")
        self.ns = ns

    def text(self) -> str:
        return f"{self.ns // 1000}.{self.ns % 1000:03d}"


def _encode(v: Any) -> str:
    if isinstance(v, _Us):
        return v.text()
    if isinstance(v, dict):
        return "{" + ", ".join(json.dumps(str(k)) + ": " + _encode(x) for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_encode(x) for x in v) + "]"
    return json.dumps(v)


def _device_properties(dev: int) -> dict:
    return {"id": dev, "name": "Emulated GPU", "totalGlobalMem": 85899345920, "computeMajor": 9, "computeMinor": 0,
            "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
            "regsPerMultiprocessor": 65536, "warpSize": 32, "sharedMemPerBlock": 49152,
            "sharedMemPerMultiprocessor": 233472, "numSms": 132, "sharedMemPerBlockOptin": 232448}


def to_kineto(run: Run, path: str | os.PathLike | None = None, *, emit_sync_events: bool = True,
              base_time_ns: int | None = None, wait_event_links: bool = True, event_records: bool = True) -> dict:
    """Write ``run`` as a Kineto (PyTorch profiler) Chrome-trace JSON; return the parsed document.

    Layout follows recent PyTorch/Kineto: ``schemaVersion`` 1, ``deviceProperties``,
    ``baseTimeNanoseconds``; event ``ts``/``dur`` in microseconds relative to it, written with
    exactly three decimals, so ``base + Decimal(ts) * 1000`` is the exact ns time of the run.
    Events: ``cuda_runtime`` calls (``cbid``, ``correlation``, ``External id``), ``kernel`` /
    ``gpu_memcpy`` / ``gpu_memset`` on pid = device, tid = stream, ``ac2g`` flows, ``cuda_sync``
    records (when ``emit_sync_events``), ``user_annotation`` / ``cpu_op`` / ``python_function``
    ranges, and ``M`` process/thread metadata.

    Args:
        run: the emulated run.
        path: file to write (gzip when it ends in ``.gz``); None writes nothing.
        emit_sync_events: write ``cuda_sync`` events (Kineto's CUDA_SYNC activity).
        base_time_ns: ``baseTimeNanoseconds``; default: ``trace_t0_ns`` rounded down to a second.
        wait_event_links: False writes "Stream Wait Event" records without naming the event
            (``wait_on_stream`` and ``wait_on_cuda_event_record_corr_id`` -1), as Kineto does when
            it cannot name it (kineto#1552); the waiting stream is kept.
        event_records: False leaves the ``cudaEventRecord`` calls out of the trace.

    Returns:
        the document as ``json.loads`` reads the written text.

    Raises:
        ValueError: ``base_time_ns`` later than some timestamp.
    """
    prog = run.program
    t0 = run.trace_t0_ns
    base = t0 - t0 % 1_000_000_000 if base_time_ns is None else int(base_time_ns)

    def us(t: int) -> _Us:
        return _Us(t - base)

    def dur(a: int, b: int) -> _Us:
        return _Us(b - a)

    ev: list[dict] = []
    # CPU ranges: by start, enclosing (longer) first
    order = sorted(range(len(run.ranges)), key=lambda r: (run.ranges[r].start_ns, -run.ranges[r].end_ns,
                                                           run.ranges[r].thread, r))
    for r in order:
        rg = run.ranges[r]
        th = prog.threads[rg.thread]
        if rg.cat == "python_function":
            args = {"Python id": rg.python_id, "Python parent id": rg.python_parent_id, "Python thread": rg.thread}
        else:
            args = {"External id": rg.external_id, "Record function id": 0}
        ev.append({"ph": "X", "cat": rg.cat, "name": rg.name, "pid": th.pid, "tid": th.tid,
                   "ts": us(rg.start_ns), "dur": dur(rg.start_ns, rg.end_ns), "args": args})

    # runtime calls, each followed by its flow start
    for c in run.calls:
        if not event_records and isinstance(c.op, EventRecord):
            continue
        args = {} if c.external_id is None else {"External id": c.external_id}
        args.update({"cbid": c.cbid, "correlation": c.correlation})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": c.name, "pid": c.pid, "tid": c.tid,
                   "ts": us(c.start_ns), "dur": dur(c.start_ns, c.end_ns), "args": args})
        if c.task is not None:
            ev.append({"ph": "s", "id": c.correlation, "pid": c.pid, "tid": c.tid, "ts": us(c.start_ns),
                       "cat": "ac2g", "name": "ac2g"})

    # GPU tasks, each followed by its flow end
    for t in run.tasks:
        c = run.calls[t.call]
        args = {} if t.external_id is None else {"External id": t.external_id}
        if t.kind == "kernel":
            args.update({"queued": 0, "device": t.device, "context": 1, "stream": t.stream, "correlation": t.correlation,
                         "registers per thread": 32, "shared memory": 0, "blocks per SM": 1.0, "warps per SM": 8.0,
                         "grid": [132, 1, 1], "block": [256, 1, 1], "est. achieved occupancy %": 12})
            cat = "kernel"
        else:
            d = t.end_ns - t.start_ns
            args.update({"device": t.device, "context": 1, "stream": t.stream, "correlation": t.correlation,
                         "bytes": t.bytes, "memory bandwidth (GB/s)": (t.bytes / d) if d else 0.0})
            cat = "gpu_memcpy" if t.kind == "memcpy" else "gpu_memset"
        ev.append({"ph": "X", "cat": cat, "name": t.name, "pid": t.device, "tid": t.stream,
                   "ts": us(t.start_ns), "dur": dur(t.start_ns, t.end_ns), "args": args})
        ev.append({"ph": "f", "id": c.correlation, "pid": t.device, "tid": t.stream, "ts": us(t.start_ns),
                   "cat": "ac2g", "name": "ac2g", "bp": "e"})

    # cuda_sync records
    sync_tids: set[tuple[int, int]] = set()
    if emit_sync_events:
        for c in run.calls:
            op = c.op
            base_args = {} if c.external_id is None else {"External id": c.external_id}
            if isinstance(op, StreamSync):
                kind, dev, tid = "Stream Sync", op.device, op.stream
                args = {"cuda_sync_kind": kind, "stream": op.stream}
            elif isinstance(op, DeviceSync):
                kind, dev, tid = "Context Sync", op.device, -1
                args = {"cuda_sync_kind": kind, "stream": -1}
            elif isinstance(op, (EventSync, StreamWaitEvent)):
                rec = run.calls[c.bound_record] if c.bound_record is not None else None
                if isinstance(op, StreamWaitEvent) and not wait_event_links:
                    rec = None
                if isinstance(op, EventSync):
                    kind, tid, stream = "Event Sync", -1, -1
                    dev = rec.op.device if rec is not None else 0
                else:
                    kind, dev, tid, stream = "Stream Wait Event", op.device, op.stream, op.stream
                args = {"cuda_sync_kind": kind,
                        "wait_on_stream": rec.op.stream if rec is not None else -1,
                        "wait_on_cuda_event_record_corr_id": rec.correlation if rec is not None else -1,
                        "stream": stream}
            else:
                continue
            args.update({"correlation": c.correlation, "device": dev, "context": 1})
            sync_tids.add((dev, tid))
            ev.append({"ph": "X", "cat": "cuda_sync", "name": kind, "pid": dev, "tid": tid,
                       "ts": us(c.start_ns), "dur": dur(c.start_ns, c.end_ns), "args": {**base_args, **args}})

    # metadata
    meta_ts = us(t0)
    pids = list(dict.fromkeys(th.pid for th in prog.threads))
    for pid in pids:
        ev.append({"name": "process_name", "ph": "M", "ts": meta_ts, "pid": pid, "tid": 0, "args": {"name": "python3.11"}})
        ev.append({"name": "process_labels", "ph": "M", "ts": meta_ts, "pid": pid, "tid": 0, "args": {"labels": "CPU"}})
        ev.append({"name": "process_sort_index", "ph": "M", "ts": meta_ts, "pid": pid, "tid": 0, "args": {"sort_index": pid}})
    lanes = sorted({(t.device, t.stream) for t in run.tasks} | {lt for lt in sync_tids})
    devices = sorted({d for d, _ in lanes} | {0})
    for d in devices:
        ev.append({"name": "process_name", "ph": "M", "ts": meta_ts, "pid": d, "tid": 0, "args": {"name": "python3.11"}})
        ev.append({"name": "process_labels", "ph": "M", "ts": meta_ts, "pid": d, "tid": 0, "args": {"labels": f"GPU {d}"}})
        ev.append({"name": "process_sort_index", "ph": "M", "ts": meta_ts, "pid": d, "tid": 0,
                   "args": {"sort_index": 16777216 + d}})
    for d, s in lanes:
        tname = f"Device {d}" if s == -1 else f"stream {s} "
        ev.append({"name": "thread_name", "ph": "M", "ts": meta_ts, "pid": d, "tid": s, "args": {"name": tname}})
        ev.append({"name": "thread_sort_index", "ph": "M", "ts": meta_ts, "pid": d, "tid": s, "args": {"sort_index": s}})
    for th in prog.threads:
        ev.append({"name": "thread_name", "ph": "M", "ts": meta_ts, "pid": th.pid, "tid": th.tid,
                   "args": {"name": f"thread {th.tid} ({th.name})"}})
        ev.append({"name": "thread_sort_index", "ph": "M", "ts": meta_ts, "pid": th.pid, "tid": th.tid,
                   "args": {"sort_index": th.tid}})

    trace_name = os.path.basename(os.fspath(path)) if path is not None else ""
    head = {"schemaVersion": 1, "deviceProperties": [_device_properties(d) for d in devices]}
    out = io.StringIO()
    out.write("{\n")
    for k, v in head.items():
        out.write(f"  {json.dumps(k)}: {_encode(v)},\n")
    out.write('  "traceEvents": [\n')
    out.write(",\n".join("  " + _encode(e) for e in ev))
    out.write("\n  ],\n")
    out.write(f'  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": {base},\n  "traceName": {json.dumps(trace_name)}\n}}\n')
    text = out.getvalue()

    if path is not None:
        data = text.encode()
        if os.fspath(path).endswith(".gz"):
            with open(path, "wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as gz:
                gz.write(data)
        else:
            with open(path, "wb") as f:
                f.write(data)
    return json.loads(text)


# ------------------------------------------------------------------------------------------------
# Program generators
# ------------------------------------------------------------------------------------------------

_STREAMS = (7, 20, 24)
_KERNELS = ("ampere_sgemm_128x64_tn", "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float> >",
            "void at::native::reduce_kernel<512, 1>", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)")
_OTHER_CALLS = (("cudaGetDevice", 4), ("cudaStreamIsCapturing", 317), ("cudaEventQuery", 138))


def programs(*, max_threads: int = 3, max_streams: int = 3, max_ops: int = 40, max_devices: int = 1,
             sync_events: bool = True):
    """Hypothesis strategy of valid random programs.

    1..``max_threads`` threads (one process), streams from ``(7, 20, 24)[:max_streams]`` on
    ``max_devices`` devices, 0..``max_ops`` ops per thread. Durations in ns: kernels and copies
    1_000..200_000, calls 1_000..20_000, own costs of blocking calls 0..20_000, host work
    0..50_000; ``L`` in 2_000..15_000, ``G`` in 0..min(L, 3_000). A thread syncs on or waits for an
    event only after it recorded it itself; with several threads, events are shared, so which
    record a wait binds to depends on timing (the trace's ``cuda_sync`` records say).

    Args:
        sync_events: False restricts programs to those whose sync targets can be inferred from a
            trace *without* ``cuda_sync`` records (model.md fallback): stream syncs only on the
            stream the thread launched to last, event syncs only of the thread's last recorded
            event, records only on the stream the thread launched to last, thread-local events,
            no cudaStreamWaitEvent.
    """
    from hypothesis import strategies as st

    @st.composite
    def _programs(draw):
        L = draw(st.integers(2_000, 15_000))
        G = draw(st.integers(0, min(L, 3_000)))
        n_threads = draw(st.integers(1, max_threads))
        streams = _STREAMS[: draw(st.integers(1, max_streams))]
        devices = tuple(range(draw(st.integers(1, max_devices))))
        lanes = [(d, s) for d in devices for s in streams]
        gpu_dur = st.integers(1_000, 200_000)
        call = st.integers(1_000, 20_000)
        own = st.integers(0, 20_000)
        threads = []
        for ti in range(n_threads):
            ops: list = []
            recorded: list = []  # events this thread recorded, in order
            last_lane = None
            depth = 0
            n_ops = draw(st.integers(0, max_ops))
            for _ in range(n_ops):
                choice = draw(st.sampled_from(
                    ["host", "host", "launch", "launch", "launch", "launch", "memcpy_async", "memcpy", "memset",
                     "device_sync", "stream_sync", "record", "record", "event_sync", "wait", "wait", "other",
                     "begin", "end"]))
                lane = draw(st.sampled_from(lanes))
                d, s = lane
                if choice == "host":
                    ops.append(HostWork(draw(st.integers(0, 50_000))))
                elif choice == "launch":
                    ops.append(Launch(s, draw(st.sampled_from(_KERNELS)), draw(gpu_dur), draw(call), device=d))
                    last_lane = lane
                elif choice == "memcpy_async":
                    kind = draw(st.sampled_from(_COPY_KINDS))
                    ops.append(MemcpyAsync(s, kind, draw(st.integers(1, 1 << 24)), draw(gpu_dur), draw(call),
                                           host_memory=draw(st.sampled_from(_HOST_MEMORY)), device=d))
                    last_lane = lane
                elif choice == "memcpy":
                    kind = draw(st.sampled_from(_COPY_KINDS))
                    ops.append(Memcpy(s, kind, draw(st.integers(1, 1 << 24)), draw(gpu_dur), draw(own),
                                      host_memory=draw(st.sampled_from(_HOST_MEMORY)), device=d))
                    last_lane = lane
                elif choice == "memset":
                    ops.append(MemsetAsync(s, draw(st.integers(1, 1 << 24)), draw(gpu_dur), draw(call), device=d))
                    last_lane = lane
                elif choice == "device_sync":
                    ops.append(DeviceSync(draw(own), device=d))
                elif choice == "stream_sync":
                    if not sync_events:
                        if last_lane is None:
                            continue
                        d, s = last_lane
                    ops.append(StreamSync(s, draw(own), device=d))
                elif choice == "record":
                    ev = draw(st.integers(0, 2))
                    if not sync_events:
                        # without cuda_sync records the record's stream is inferred as the one
                        # the thread launched to last (a Kineto cudaEventRecord has no stream arg)
                        if last_lane is None:
                            continue
                        d, s = last_lane
                        ev = (ti, ev)
                    ops.append(EventRecord(ev, s, draw(call), device=d))
                    recorded.append(ev)
                elif choice == "event_sync":
                    if not recorded:
                        continue
                    ev = draw(st.sampled_from(recorded)) if sync_events else recorded[-1]
                    ops.append(EventSync(ev, draw(own)))
                elif choice == "wait":
                    if not recorded or not sync_events:
                        continue
                    ops.append(StreamWaitEvent(s, draw(st.sampled_from(recorded)), draw(call), device=d))
                elif choice == "other":
                    nm, cb = draw(st.sampled_from(_OTHER_CALLS))
                    ops.append(OtherCall(nm, draw(call), cbid=cb))
                elif choice == "begin":
                    ops.append(RangeBegin(f"range_{len(ops)}", draw(st.sampled_from(_RANGE_CATS))))
                    depth += 1
                elif choice == "end" and depth:
                    ops.append(RangeEnd())
                    depth -= 1
            ops.extend(RangeEnd() for _ in range(depth))
            tid = 4242 if ti == 0 else 5000 + ti
            threads.append(Thread(ops, pid=4242, tid=tid, name="pt_main_thread" if ti == 0 else f"worker_{ti}"))
        return Program(threads, launch_latency_ns=L, gpu_gap_ns=G)

    return _programs()


def training_step_program(n_layers: int = 4, steps: int = 3, *, seed: int = 0, first_step: int = 1,
                          launch_latency_ns: int = 5_000, gpu_gap_ns: int = 1_000) -> Program:
    """A realistic small data-parallel training loop on one thread, deterministic for a ``seed``.

    Per step (inside a ``ProfilerStep#N`` user annotation):

    * wait (``cudaEventSynchronize``) until the previous batch copy finished, then copy the next
      batch host-to-device from pinned memory on a side stream 24, ``cudaEventRecord`` there and
      ``cudaStreamWaitEvent`` on the compute stream 7;
    * forward: per layer an ``nn.Module: Linear_i`` (``aten::linear`` -> ``aten::addmm``, a long
      gemm) and ``nn.Module: ReLU_i`` (short elementwise kernel); loss (softmax, nll, a memset);
    * backward on stream 7 (two gemms, a bias reduction, a threshold backward per layer);
    * gradient all-reduce on stream 20 gated by record/wait events both ways;
    * ``Optimizer.step#Adam.step`` with many small multi-tensor kernels;
    * a step timer: ``cudaEventRecord`` after the optimizer, ``cudaEventSynchronize`` on it;
    * ``loss.item()``: ``cudaMemcpyAsync`` device-to-pageable (blocking) and
      ``cudaStreamSynchronize``.

    After the last step, a device-to-device copy and a ``cudaDeviceSynchronize`` that waits for it.
    Durations get +-10 % seeded jitter.
    """
    rng = random.Random(seed)

    def j(ns: int) -> int:
        return max(0, int(round(ns * rng.uniform(0.9, 1.1))))

    gemm = "ampere_sgemm_128x64_tn"
    gemm_bwd = ("ampere_sgemm_128x64_nn", "ampere_sgemm_64x64_nt")
    relu = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)"
    relu_bwd = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}, at::detail::Array<char*, 3> >(int, at::native::(anonymous namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}, at::detail::Array<char*, 3>)"
    reduce = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)"
    softmax = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)"
    nll = "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)"
    nll_bwd = "void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, long>(float*, float const*, long const*, float const*, float const*, bool, int, int, long, long)"
    softmax_bwd = "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*, float const*, long)"
    allreduce = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
    foreach = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)",
               "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::BinaryOpScalarFunctor<float, 1, 1, 0>, std::multiplies<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::BinaryOpScalarFunctor<float, 1, 1, 0>, std::multiplies<float>, float)",
               "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<3>, at::native::(anonymous namespace)::PointwiseOpScalarFunctor<float, 3, 3, 0>, std::multiplies<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<3>, at::native::(anonymous namespace)::PointwiseOpScalarFunctor<float, 3, 3, 0>, std::multiplies<float>, float)",
               "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::UnaryOpFunctor<float, 2, 1, 1>, at::native::sqrt_functor<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::UnaryOpFunctor<float, 2, 1, 1>, at::native::sqrt_functor<float>, float)")
    main, comm, copy = 7, 20, 24

    ops: list = []
    add = ops.append

    def cpu_op(name: str, *inner: Op, host: int = 2_500) -> None:
        add(RangeBegin(name, "cpu_op"))
        add(HostWork(j(host)))
        ops.extend(inner)
        add(RangeEnd())

    def kernel(name: str, dur: int, stream: int = main) -> Launch:
        return Launch(stream, name, j(dur), j(5_000))

    batch_bytes = 64 * 1024 * 4
    for step in range(first_step, first_step + steps):
        add(RangeBegin(f"ProfilerStep#{step}"))
        add(HostWork(j(40_000)))  # dataloader __next__
        if step > first_step:
            add(EventSync("batch_copied", j(1_500)))  # pinned buffer reuse
        add(RangeBegin("aten::to", "cpu_op"))
        add(HostWork(j(3_000)))
        cpu_op("aten::copy_", MemcpyAsync(copy, "HtoD", batch_bytes, j(30_000), j(7_000), host_memory="pinned"))
        add(RangeEnd())
        add(EventRecord("batch_copied", copy, j(2_000)))
        add(StreamWaitEvent(main, "batch_copied", j(2_000)))

        # forward
        add(RangeBegin("nn.Module: Net_0", "python_function"))
        for i in range(n_layers):
            add(HostWork(j(8_000)))
            add(RangeBegin(f"nn.Module: Linear_{i}", "python_function"))
            add(RangeBegin("aten::linear", "cpu_op"))
            add(HostWork(j(2_000)))
            add(RangeBegin("aten::t", "cpu_op"))
            add(HostWork(j(1_500)))
            add(RangeEnd())
            cpu_op("aten::addmm", kernel(gemm, 45_000))
            add(RangeEnd())
            add(RangeEnd())
            add(HostWork(j(5_000)))
            add(RangeBegin(f"nn.Module: ReLU_{i}", "python_function"))
            cpu_op("aten::relu", kernel(relu, 4_000))
            add(RangeEnd())
        add(RangeEnd())
        add(HostWork(j(6_000)))
        add(RangeBegin("aten::cross_entropy_loss", "cpu_op"))
        cpu_op("aten::log_softmax", kernel(softmax, 6_000))
        cpu_op("aten::nll_loss_forward", MemsetAsync(main, 4, j(1_500), j(4_000)), HostWork(j(1_000)), kernel(nll, 3_000))
        add(RangeEnd())

        # backward (same thread)
        add(HostWork(j(20_000)))
        add(RangeBegin("autograd::engine::evaluate_function: NllLossBackward0", "cpu_op"))
        cpu_op("NllLossBackward0", kernel(nll_bwd, 3_000))
        add(RangeEnd())
        add(RangeBegin("autograd::engine::evaluate_function: LogSoftmaxBackward0", "cpu_op"))
        cpu_op("LogSoftmaxBackward0", kernel(softmax_bwd, 5_000))
        add(RangeEnd())
        for i in reversed(range(n_layers)):
            add(HostWork(j(6_000)))
            add(RangeBegin("autograd::engine::evaluate_function: ReluBackward0", "cpu_op"))
            cpu_op("ReluBackward0", kernel(relu_bwd, 4_500))
            add(RangeEnd())
            add(HostWork(j(4_000)))
            add(RangeBegin("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op"))
            add(RangeBegin("AddmmBackward0", "cpu_op"))
            cpu_op("aten::mm", kernel(gemm_bwd[0], 50_000))
            if i:
                cpu_op("aten::mm", kernel(gemm_bwd[1], 48_000))
            cpu_op("aten::sum", kernel(reduce, 7_000))
            add(RangeEnd())
            add(RangeEnd())

        # gradient all-reduce on the communication stream
        add(HostWork(j(10_000)))
        add(EventRecord("grads_ready", main, j(2_000)))
        add(StreamWaitEvent(comm, "grads_ready", j(2_000)))
        add(RangeBegin("nccl:all_reduce", "user_annotation"))
        cpu_op("record_param_comms", kernel(allreduce, 150_000, stream=comm), host=6_000)
        add(RangeEnd())
        add(EventRecord("allreduce_done", comm, j(2_000)))
        add(StreamWaitEvent(main, "allreduce_done", j(2_000)))

        # optimizer
        add(HostWork(j(15_000)))
        add(RangeBegin("Optimizer.step#Adam.step"))
        for _group in range(3):
            for op_name, kname in zip(("aten::_foreach_add_", "aten::_foreach_mul_", "aten::_foreach_addcmul_",
                                       "aten::_foreach_sqrt"), foreach):
                cpu_op(op_name, kernel(kname, 6_000), host=3_000)
        add(RangeEnd())
        add(EventRecord("step_done", main, j(2_000)))  # step timer: end event

        # step timing: wait for the end event (waits for the optimizer kernels)
        add(HostWork(j(5_000)))
        add(EventSync("step_done", j(1_500)))

        # loss.item()
        add(HostWork(j(12_000)))
        add(RangeBegin("aten::item", "cpu_op"))
        cpu_op("aten::_local_scalar_dense",
               MemcpyAsync(main, "DtoH", 4, j(2_000), j(4_000), host_memory="pageable"),
               StreamSync(main, j(2_000)))
        add(RangeEnd())
        add(HostWork(j(20_000)))
        add(RangeEnd())  # ProfilerStep
    # EMA copy of the weights, then torch.cuda.synchronize()
    add(HostWork(j(30_000)))
    cpu_op("aten::copy_", MemcpyAsync(main, "DtoD", 4 * 1024 * 1024 * n_layers, j(80_000), j(6_000)))
    add(HostWork(j(5_000)))
    add(DeviceSync(j(3_000)))
    return Program([Thread(ops, pid=4242, tid=4242, name="pt_main_thread")],
                   launch_latency_ns=launch_latency_ns, gpu_gap_ns=gpu_gap_ns)
