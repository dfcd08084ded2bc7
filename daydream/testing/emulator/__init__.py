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
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Union

from ...events.cuda_api import LAUNCH_QUEUE_DEPTH, PAGEABLE_STAGING_BYTES, ApiRole, api_role

__all__ = [
    "HostWork", "Launch", "GraphLaunch", "MemcpyAsync", "Memcpy", "MemsetAsync", "DeviceSync", "StreamSync",
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
class _Call:
    """Base of the ops that are CUDA runtime calls.

    A non-blocking call lasts ``call_dur_ns`` on the CPU. A blocking one (:attr:`blocking`) first
    waits for GPU work, then spends its own cost ``call_own_ns``. ``API`` is the (name, CUPTI cbid)
    written to the trace.
    """

    API: ClassVar[tuple[str, int]] = ("", 0)

    @property
    def blocking(self) -> bool:
        """Whether the call waits for GPU work before spending :meth:`cpu_cost`."""
        return False

    def cpu_cost(self) -> int:
        """``call_dur_ns`` of a non-blocking call, ``call_own_ns`` of a blocking one."""
        return self.call_own_ns if self.blocking else self.call_dur_ns

    def api(self) -> tuple[str, int]:
        return self.API


@dataclass(frozen=True)
class _Blocking(_Call):
    """A call that always waits for GPU work (attribute ``call_own_ns``: own CPU cost, ns)."""

    @property
    def blocking(self) -> bool:
        return True


@dataclass(frozen=True)
class _DeviceCall(_Call):
    """A call about one GPU (``device``: its index; keyword-only, default 0)."""

    device: int = field(default=0, kw_only=True)


@dataclass(frozen=True)
class _GpuWork(_DeviceCall):
    """A call that enqueues one GPU task on ``stream`` of ``device``."""

    def gpu_dur(self) -> int:
        """The task's execution time on the GPU, ns."""
        raise NotImplementedError

    def task_name(self) -> tuple[str, str]:
        """(task kind, name as written in the trace)."""
        raise NotImplementedError

    def host_waits(self, task: int, stream_prev: int | None) -> list[int]:
        """The tasks whose end the call waits for, given its own ``task`` and the last task
        launched before it on its stream (None: none)."""
        return [task] if self.blocking else []


@dataclass(frozen=True)
class Launch(_GpuWork):
    """``cudaLaunchKernel``: enqueue a kernel on ``stream``; the CPU does not wait.

    Attributes:
        stream: stream id the kernel runs on.
        kernel_name: kernel name as written in the trace.
        kernel_dur_ns: kernel execution time on the GPU, ns.
        call_dur_ns: duration of the API call on the CPU, ns.
        device: GPU device index (keyword).
    """

    API: ClassVar[tuple[str, int]] = ("cudaLaunchKernel", 211)
    stream: int
    kernel_name: str
    kernel_dur_ns: int
    call_dur_ns: int

    def gpu_dur(self) -> int:
        return self.kernel_dur_ns

    def task_name(self) -> tuple[str, str]:
        return "kernel", self.kernel_name


@dataclass(frozen=True)
class _Copy(_GpuWork):
    """A copy of ``bytes`` bytes of ``kind`` (``"HtoD"``, ``"DtoH"``, ``"DtoD"``) on ``stream``,
    taking ``copy_dur_ns`` on the GPU; ``host_memory`` (``"pinned"``/``"pageable"``) is the host
    side of an HtoD/DtoH copy."""

    SYNCHRONOUS: ClassVar[bool] = False  #: ``cudaMemcpy`` (True) or ``cudaMemcpyAsync``
    stream: int
    kind: str
    bytes: int
    copy_dur_ns: int

    def gpu_dur(self) -> int:
        return self.copy_dur_ns

    @property
    def pageable_htod(self) -> bool:
        return self.kind == "HtoD" and self.host_memory == "pageable"

    @property
    def staged(self) -> bool:
        """A pageable HtoD copy above the staging size: the call synchronizes its stream first."""
        return self.pageable_htod and self.bytes > PAGEABLE_STAGING_BYTES

    def host_waits(self, task: int, stream_prev: int | None) -> list[int]:
        if not self.blocking:
            return []
        if self.pageable_htod:  # a stream sync, then staging; the DMA may run on after the return
            return [stream_prev] if stream_prev is not None else []
        return [task]

    def task_name(self) -> tuple[str, str]:
        host = "Pinned" if self.host_memory == "pinned" else "Pageable"
        src, dst = {"HtoD": (host, "Device"), "DtoH": ("Device", host), "DtoD": ("Device", "Device")}[self.kind]
        return "memcpy", f"Memcpy {self.kind} ({src} -> {dst})"


@dataclass(frozen=True)
class MemcpyAsync(_Copy):
    """``cudaMemcpyAsync``: enqueue a copy on ``stream``.

    Blocking (as in CUDA) when it copies device to *pageable* host memory: the call then returns
    ``call_dur_ns`` after its own copy ended (or after its start if later), i.e. ``call_dur_ns``
    is the call's own cost. From pageable memory to the device above ``PAGEABLE_STAGING_BYTES``
    (:attr:`staged`) the driver synchronizes the stream, then stages: the call returns
    ``call_dur_ns`` after the last task launched before it on its stream ended (or after its
    start if later); at most that size the data are staged at once and it does not wait.
    Otherwise non-blocking: the call lasts ``call_dur_ns``.

    Attributes:
        stream, kind, bytes, copy_dur_ns: the copy (see ``_Copy``).
        call_dur_ns: CPU duration of the call (own cost when blocking), ns.
        host_memory: ``"pinned"`` or ``"pageable"`` (ignored for DtoD).
        device: GPU device index (keyword).
    """

    API: ClassVar[tuple[str, int]] = ("cudaMemcpyAsync", 41)
    call_dur_ns: int
    host_memory: str = "pinned"

    @property
    def blocking(self) -> bool:
        return (self.kind == "DtoH" and self.host_memory == "pageable") or self.staged

    def cpu_cost(self) -> int:
        return self.call_dur_ns


@dataclass(frozen=True)
class Memcpy(_Copy):
    """``cudaMemcpy``: a synchronous copy on ``stream`` (CUDA "API synchronization behavior").

    * DtoH, or HtoD from pinned memory: the call ends at ``max(start, copy.end) + call_own_ns``.
    * HtoD from pageable memory: a stream sync, then staging (the DMA may run on after the call):
      the call ends at ``max(start, W) + call_own_ns`` where ``W`` is the end of the last task
      launched before it on its stream.
    * DtoD: no host synchronization: the call lasts ``call_own_ns``.

    Attributes: as :class:`MemcpyAsync`, with ``call_own_ns`` the call's own CPU cost, ns.
    """

    API: ClassVar[tuple[str, int]] = ("cudaMemcpy", 31)
    SYNCHRONOUS: ClassVar[bool] = True
    call_own_ns: int
    host_memory: str = "pageable"

    @property
    def blocking(self) -> bool:
        return self.kind != "DtoD"

    def cpu_cost(self) -> int:
        return self.call_own_ns


@dataclass(frozen=True)
class MemsetAsync(_GpuWork):
    """``cudaMemsetAsync``: enqueue a memset on ``stream``; non-blocking.

    Attributes:
        stream: stream id.
        bytes: bytes set.
        set_dur_ns: memset time on the GPU, ns.
        call_dur_ns: CPU duration of the call, ns.
        device: GPU device index (keyword).
    """

    API: ClassVar[tuple[str, int]] = ("cudaMemsetAsync", 51)
    stream: int
    bytes: int
    set_dur_ns: int
    call_dur_ns: int

    def gpu_dur(self) -> int:
        return self.set_dur_ns

    def task_name(self) -> tuple[str, str]:
        return "memset", "Memset (Device)"


@dataclass(frozen=True)
class GraphLaunch(_DeviceCall):
    """``cudaGraphLaunch``: one call that enqueues the kernels of an instantiated CUDA graph on
    ``stream``; the CPU does not wait.

    Semantics (``docs/model.md``, "CUDA-graph launches"): the graph is a chain on one stream: every
    kernel is ready at the call's start + ``L`` and they run in the given order, each after the
    previous one + ``G`` (a stream predecessor like any other); a pending cross-stream wait on
    ``stream`` gates the first kernel. In the trace every kernel carries the call's correlation id
    (CUPTI correlates one ``cudaGraphLaunch`` to one record per node; ``graph id``/``graph node id``
    args as recent Kineto writes them).

    Attributes:
        stream: stream id the graph runs on.
        kernels: ``(kernel name, kernel_dur_ns)`` per node, in execution order (a list is
            converted to a tuple; at least one).
        call_dur_ns: CPU duration of the call, ns.
        graph_id: the ``graph id`` written on its kernels.
        device: GPU device index (keyword).
    """

    API: ClassVar[tuple[str, int]] = ("cudaGraphLaunch", 311)
    stream: int
    kernels: tuple
    call_dur_ns: int
    graph_id: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "kernels", tuple((str(n), d) for n, d in self.kernels))

    def nodes(self) -> list[Launch]:
        """The graph's kernels as launches on its stream (how the emulator enqueues them)."""
        return [Launch(self.stream, n, d, self.call_dur_ns, device=self.device) for n, d in self.kernels]


@dataclass(frozen=True)
class DeviceSync(_Blocking, _DeviceCall):
    """``cudaDeviceSynchronize``: waits, on every stream of ``device`` that the process has
    launched to so far, for the last task launched before the call.

    Attributes:
        call_own_ns: the call's own CPU cost, ns (added after the wait).
        device: GPU device index (keyword).
    """

    API: ClassVar[tuple[str, int]] = ("cudaDeviceSynchronize", 165)
    call_own_ns: int


@dataclass(frozen=True)
class StreamSync(_Blocking, _DeviceCall):
    """``cudaStreamSynchronize``: waits for the last task on ``stream`` launched before the call.

    Attributes:
        stream: stream id.
        call_own_ns: own CPU cost, ns.
        device: GPU device index (keyword).
    """

    API: ClassVar[tuple[str, int]] = ("cudaStreamSynchronize", 131)
    stream: int
    call_own_ns: int


@dataclass(frozen=True)
class EventRecord(_DeviceCall):
    """``cudaEventRecord(event, stream)``: marks the position of ``stream``; non-blocking.

    Attributes:
        event: any hashable event handle (events are per process).
        stream: stream id.
        call_dur_ns: CPU duration, ns.
        device: GPU device index of the stream (keyword).
    """

    API: ClassVar[tuple[str, int]] = ("cudaEventRecord", 135)
    event: Any
    stream: int
    call_dur_ns: int


@dataclass(frozen=True)
class EventSync(_Blocking):
    """``cudaEventSynchronize(event)``: waits for the last task on the event's stream launched
    before the latest record of ``event`` issued before this call. Returns at once
    (after ``call_own_ns``) when the event was never recorded or nothing preceded the record.

    Attributes:
        event: event handle.
        call_own_ns: own CPU cost, ns.
    """

    API: ClassVar[tuple[str, int]] = ("cudaEventSynchronize", 137)
    event: Any
    call_own_ns: int


@dataclass(frozen=True)
class StreamWaitEvent(_DeviceCall):
    """``cudaStreamWaitEvent(stream, event)``: GPU-side wait; the CPU does not block.

    The first task on ``stream`` launched after this call gets, as GPU predecessor, the last task
    on the recorded stream launched before the record this wait binds to (the latest record of
    ``event`` issued before the wait). No effect when the event was never recorded.

    Attributes:
        stream: the waiting stream.
        event: event handle.
        call_dur_ns: CPU duration, ns.
        device: GPU device index of the waiting stream (keyword).
    """

    API: ClassVar[tuple[str, int]] = ("cudaStreamWaitEvent", 147)
    stream: int
    event: Any
    call_dur_ns: int


@dataclass(frozen=True)
class OtherCall(_Call):
    """Any other, non-blocking runtime call that does no GPU work (``cudaGetDevice``,
    ``cudaStreamIsCapturing``, ``cudaEventQuery``, ...).

    Attributes:
        name: API name; must have role ``OTHER`` in :mod:`daydream.events.cuda_api`.
        call_dur_ns: CPU duration, ns.
        cbid: CUPTI callback id written to the trace (0 when unknown).
    """

    name: str
    call_dur_ns: int
    cbid: int = 0

    def api(self) -> tuple[str, int]:
        return self.name, self.cbid


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


Op = Union[HostWork, Launch, GraphLaunch, MemcpyAsync, Memcpy, MemsetAsync, DeviceSync, StreamSync, EventRecord,
           EventSync, StreamWaitEvent, OtherCall, RangeBegin, RangeEnd, Handover, WaitHandover]


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
        launch_queue_depth: ``D``: entries a stream holds launched and unfinished (an entry: one
            task, or a graph launch's nodes); a call that launches the entry ``D`` places after
            one still running on its stream returns its own cost after that entry's last task
            ends (``docs/model.md``, "Launch-queue back-pressure"); 0: unlimited.
        staging_latency_ns: ``S``: the DMA of a staged copy (pageable HtoD above the staging
            size) is ready ``L + S`` after its call starts: its first chunk is staged first.
        wait_latency_ns: ``W``: a cross-stream event wait holds its task until ``G + W`` after
            the producer ends (the wait's own latency beyond ``G``; the trace does not say it,
            ``docs/model.md``, "Inferred cross-stream waits"); ``0 <= W <= L``; default 0.

    Raises:
        ValueError: invalid constants, negative durations, unknown copy kinds or range
            categories, unbalanced ranges, duplicate threads, or an OtherCall with a
            GPU-relevant API name.
    """

    threads: tuple
    launch_latency_ns: int = 5_000
    gpu_gap_ns: int = 1_000
    t0_ns: int = DEFAULT_T0_NS
    launch_queue_depth: int = LAUNCH_QUEUE_DEPTH
    staging_latency_ns: int = 0
    wait_latency_ns: int = 0

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
        if self.launch_queue_depth < 0:
            raise ValueError("launch_queue_depth must be >= 0 (0: unlimited)")
        if self.staging_latency_ns < 0:
            raise ValueError("staging_latency_ns must be >= 0")
        if not 0 <= self.wait_latency_ns <= self.launch_latency_ns:
            raise ValueError("need 0 <= wait_latency_ns <= L")
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
                if not isinstance(op, (HostWork, _Call)):
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
                if isinstance(op, GraphLaunch) and not (op.kernels and all(isinstance(d, int) and d >= 0 for _, d in op.kernels)):
                    raise ValueError(f"{where}: kernels must be one or more (name, int ns >= 0)")
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


class _Emulator:
    """The state of one :func:`emulate` run: thread clocks, open ranges, lanes, events, the heap
    of next calls keyed by ``(start, thread, op)``."""

    def __init__(self, program: Program):
        self.program = program
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

    def run(self) -> Run:
        for i in range(len(self.threads)):
            self.advance(i)
        while self.heap:
            self.execute(*heapq.heappop(self.heap))
        if self.parked:
            raise ValueError(f"hand-over never released (deadlock): tokens {sorted(map(repr, self.parked))}")
        return Run(program=self.program, calls=tuple(self.calls), tasks=tuple(self.tasks),
                   ranges=tuple(RangeRecord(**r) for r in self.ranges))

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
                                external_id=ext, python_id=py, python_parent_id=parent))

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
        if isinstance(op, _GpuWork):
            stream_prev = self.lane_last.get((op.device, op.stream))
            task_idx = self.enqueue(op, pid, s, call_idx, corr, ext)
            waits = op.host_waits(task_idx, stream_prev)
        elif isinstance(op, GraphLaunch):  # one chain on its stream, every node ready at s + L
            waits = []
            for node, kernel in enumerate(op.nodes()):
                t = self.enqueue(kernel, pid, s, call_idx, corr, ext, slot=False)
                self.tasks[t] = dataclasses.replace(self.tasks[t], graph_node=node)
                task_idx = t if task_idx is None else task_idx
            self.take_queue_slot((op.device, op.stream), t)  # the graph is one launch-queue entry, freed by its last node
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

    def enqueue(self, op: _GpuWork, pid: int, s: int, call_idx: int, corr: int, ext: int | None, slot: bool = True) -> int:
        """Append the GPU task of ``op`` (launched at ``s``); returns its index. ``slot``: it takes
        a launch-queue slot of its own (a graph's nodes share their launch's one)."""
        lane = (op.device, op.stream)
        preds = [self.lane_last[lane]] if lane in self.lane_last else []
        waited = [p for p in self.pending_waits.pop(lane, []) if p not in preds]
        preds += list(dict.fromkeys(waited))
        ready = s + self.program.launch_latency_ns + (self.program.staging_latency_ns if getattr(op, "staged", False) else 0)
        G, W = self.program.gpu_gap_ns, self.program.wait_latency_ns
        start = max([ready] + [self.tasks[p].end_ns + G + (W if p in waited else 0) for p in preds])
        kind, tname = op.task_name()
        task_idx = len(self.tasks)
        self.tasks.append(TaskRecord(kind=kind, name=tname, device=op.device, stream=op.stream, call=call_idx,
                                     correlation=corr, ready_ns=ready, start_ns=start, end_ns=start + op.gpu_dur(),
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


def emulate(program: Program) -> Run:
    """Run ``program`` under the rules of ``docs/model.md``; all times in integer ns.

    Returns:
        the :class:`Run`: every call's and GPU task's start and end.
    """
    return _Emulator(program).run()


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
    S = run.program.staging_latency_ns if lat is not lat_staged else 0
    L = statistics.median_low(lat) if lat else 0
    gaps = []
    for lane in run.lane_tasks().values():
        for a, b in zip(lane, lane[1:]):
            prev, t = tasks[a], tasks[b]
            ready = calls[t.call].start_ns + L + (S if staged[b] else 0)
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


class _Clock:
    """Trace times relative to ``baseTimeNanoseconds``."""

    def __init__(self, base: int) -> None:
        self.base = base

    def us(self, t: int) -> _Us:
        return _Us(t - self.base)

    @staticmethod
    def dur(a: int, b: int) -> _Us:
        return _Us(b - a)


def _range_events(run: Run, ck: _Clock) -> list[dict]:
    """CPU ranges: by start, enclosing (longer) first."""
    ev = []
    rs = run.ranges
    for r in sorted(range(len(rs)), key=lambda r: (rs[r].start_ns, -rs[r].end_ns, rs[r].thread, r)):
        rg = rs[r]
        th = run.program.threads[rg.thread]
        if rg.cat == "python_function":
            args = {"Python id": rg.python_id, "Python parent id": rg.python_parent_id, "Python thread": rg.thread}
        else:
            args = {"External id": rg.external_id, "Record function id": 0}
        ev.append({"ph": "X", "cat": rg.cat, "name": rg.name, "pid": th.pid, "tid": th.tid,
                   "ts": ck.us(rg.start_ns), "dur": ck.dur(rg.start_ns, rg.end_ns), "args": args})
    return ev


def _call_events(run: Run, ck: _Clock, event_records: bool) -> list[dict]:
    """Runtime calls, each followed by its flow start."""
    ev = []
    for c in run.calls:
        if not event_records and isinstance(c.op, EventRecord):
            continue
        args = {} if c.external_id is None else {"External id": c.external_id}
        args.update({"cbid": c.cbid, "correlation": c.correlation})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": c.name, "pid": c.pid, "tid": c.tid,
                   "ts": ck.us(c.start_ns), "dur": ck.dur(c.start_ns, c.end_ns), "args": args})
        if c.task is not None:
            ev.append({"ph": "s", "id": c.correlation, "pid": c.pid, "tid": c.tid, "ts": ck.us(c.start_ns),
                       "cat": "ac2g", "name": "ac2g"})
    return ev


def _task_events(run: Run, ck: _Clock) -> list[dict]:
    """GPU tasks, each followed by its flow end."""
    ev = []
    for t in run.tasks:
        c = run.calls[t.call]
        args = {} if t.external_id is None else {"External id": t.external_id}
        if t.kind == "kernel":
            args.update({"queued": 0, "device": t.device, "context": 1, "stream": t.stream, "correlation": t.correlation,
                         "registers per thread": 32, "shared memory": 0, "blocks per SM": 1.0, "warps per SM": 8.0,
                         "grid": [132, 1, 1], "block": [256, 1, 1], "est. achieved occupancy %": 12})
            cat = "kernel"
            if t.graph_node is not None:  # a node of a cudaGraphLaunch: same correlation as its siblings
                args.update({"graph id": c.op.graph_id, "graph node id": (c.op.graph_id << 16) + t.graph_node + 1})
        else:
            d = t.end_ns - t.start_ns
            args.update({"device": t.device, "context": 1, "stream": t.stream, "correlation": t.correlation,
                         "bytes": t.bytes, "memory bandwidth (GB/s)": (t.bytes / d) if d else 0.0})
            cat = "gpu_memcpy" if t.kind == "memcpy" else "gpu_memset"
        ev.append({"ph": "X", "cat": cat, "name": t.name, "pid": t.device, "tid": t.stream,
                   "ts": ck.us(t.start_ns), "dur": ck.dur(t.start_ns, t.end_ns), "args": args})
        ev.append({"ph": "f", "id": c.correlation, "pid": t.device, "tid": t.stream, "ts": ck.us(t.start_ns),
                   "cat": "ac2g", "name": "ac2g", "bp": "e"})
    return ev


def _sync_record(run: Run, c: CallRecord, wait_event_links: bool) -> tuple[str, int, int, dict] | None:
    """(cuda_sync kind, device, tid, args) of the call's sync record; None for other calls."""
    op = c.op
    if isinstance(op, StreamSync):
        return "Stream Sync", op.device, op.stream, {"cuda_sync_kind": "Stream Sync", "stream": op.stream}
    if isinstance(op, DeviceSync):
        return "Context Sync", op.device, -1, {"cuda_sync_kind": "Context Sync", "stream": -1}
    if not isinstance(op, (EventSync, StreamWaitEvent)):
        return None
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
    return kind, dev, tid, args


def _sync_events(run: Run, ck: _Clock, wait_event_links: bool) -> tuple[list[dict], set[tuple[int, int]]]:
    """``cuda_sync`` records, and the (device, tid) lanes they are written on."""
    ev = []
    sync_tids: set[tuple[int, int]] = set()
    for c in run.calls:
        sr = _sync_record(run, c, wait_event_links)
        if sr is None:
            continue
        kind, dev, tid, args = sr
        base_args = {} if c.external_id is None else {"External id": c.external_id}
        args.update({"correlation": c.correlation, "device": dev, "context": 1})
        sync_tids.add((dev, tid))
        ev.append({"ph": "X", "cat": "cuda_sync", "name": kind, "pid": dev, "tid": tid,
                   "ts": ck.us(c.start_ns), "dur": ck.dur(c.start_ns, c.end_ns), "args": {**base_args, **args}})
    return ev, sync_tids


def _metadata_events(run: Run, ck: _Clock, sync_tids: set[tuple[int, int]],
                     t0_ns: int | None = None) -> tuple[list[dict], list[int]]:
    """``M`` process/thread metadata (at ``t0_ns``, default the run's first timestamp), and the
    devices written."""
    prog = run.program
    meta_ts = ck.us(run.trace_t0_ns if t0_ns is None else t0_ns)
    ev = []

    def meta(name: str, pid: int, tid: int, args: dict) -> None:
        ev.append({"name": name, "ph": "M", "ts": meta_ts, "pid": pid, "tid": tid, "args": args})

    for pid in dict.fromkeys(th.pid for th in prog.threads):
        meta("process_name", pid, 0, {"name": "python3.11"})
        meta("process_labels", pid, 0, {"labels": "CPU"})
        meta("process_sort_index", pid, 0, {"sort_index": pid})
    lanes = sorted({(t.device, t.stream) for t in run.tasks} | {lt for lt in sync_tids})
    devices = sorted({d for d, _ in lanes} | {0})
    for d in devices:
        meta("process_name", d, 0, {"name": "python3.11"})
        meta("process_labels", d, 0, {"labels": f"GPU {d}"})
        meta("process_sort_index", d, 0, {"sort_index": 16777216 + d})
    for d, s in lanes:
        meta("thread_name", d, s, {"name": f"Device {d}" if s == -1 else f"stream {s} "})
        meta("thread_sort_index", d, s, {"sort_index": s})
    for th in prog.threads:
        meta("thread_name", th.pid, th.tid, {"name": f"thread {th.tid} ({th.name})"})
        meta("thread_sort_index", th.pid, th.tid, {"sort_index": th.tid})
    return ev, devices


def _cut_window(ev: list[dict], ck: _Clock, window: tuple[int, int | None]) -> tuple[list[dict], int | None]:
    """The events a profiler active during ``window`` = ``(lo, hi)`` (absolute ns; ``hi`` None:
    to the end) records, and the earliest kept timestamp (None: nothing kept).

    Every activity (CPU range, runtime call and its ``cuda_sync`` record, GPU task) is kept only
    when it lies wholly in ``[lo, hi]``, as Kineto drops activities that start before its capture
    window or end after it (``docs/model.md``, "Windows cut from a longer run"); a flow event
    goes with the activity it follows."""
    lo, hi = window
    out: list[dict] = []
    kept = False
    for e in ev:
        if e["ph"] == "X":
            s = ck.base + e["ts"].ns
            kept = s >= lo and (hi is None or s + e["dur"].ns <= hi)
        if kept:
            out.append(e)
    first = min((ck.base + e["ts"].ns for e in out), default=None)
    return out, first


def _document_text(ev: list[dict], devices: list[int], base: int, trace_name: str) -> str:
    head = {"schemaVersion": 1, "deviceProperties": [_device_properties(d) for d in devices]}
    out = io.StringIO()
    out.write("{\n")
    for k, v in head.items():
        out.write(f"  {json.dumps(k)}: {_encode(v)},\n")
    out.write('  "traceEvents": [\n')
    out.write(",\n".join("  " + _encode(e) for e in ev))
    out.write("\n  ],\n")
    out.write(f'  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": {base},\n  "traceName": {json.dumps(trace_name)}\n}}\n')
    return out.getvalue()


def _write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (gzip, reproducibly with mtime 0, when ``path`` ends in ``.gz``)."""
    data = text.encode()
    if os.fspath(path).endswith(".gz"):
        with open(path, "wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as gz:
            gz.write(data)
    else:
        with open(path, "wb") as f:
            f.write(data)


def to_kineto(run: Run, path: str | os.PathLike | None = None, *, emit_sync_events: bool = True,
              base_time_ns: int | None = None, wait_event_links: bool = True, event_records: bool = True,
              window: tuple[int, int | None] | None = None) -> dict:
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
        window: ``(lo, hi)`` absolute ns (``hi`` None: open-ended): write only what a profiler
            active in that window records, as a trace cut from a longer run: activities wholly
            inside it (see :func:`_cut_window`); GPU tasks whose launching call started before
            ``lo`` appear without it. Metadata are stamped at the earliest kept event.

    Returns:
        the document as ``json.loads`` reads the written text.

    Raises:
        ValueError: ``base_time_ns`` later than some timestamp.
    """
    t0 = run.trace_t0_ns
    ck = _Clock(t0 - t0 % 1_000_000_000 if base_time_ns is None else int(base_time_ns))
    ev = _range_events(run, ck) + _call_events(run, ck, event_records) + _task_events(run, ck)
    sync_tids: set[tuple[int, int]] = set()
    if emit_sync_events:
        sync_ev, sync_tids = _sync_events(run, ck, wait_event_links)
        ev += sync_ev
    first = None
    if window is not None:
        ev, first = _cut_window(ev, ck, window)
    meta_ev, devices = _metadata_events(run, ck, sync_tids, first)
    trace_name = os.path.basename(os.fspath(path)) if path is not None else ""
    text = _document_text(ev + meta_ev, devices, ck.base, trace_name)
    if path is not None:
        _write_text(path, text)
    return json.loads(text)


# ------------------------------------------------------------------------------------------------
# Program generators
# ------------------------------------------------------------------------------------------------

_STREAMS = (7, 20, 24)
_KERNELS = ("ampere_sgemm_128x64_tn", "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float> >",
            "void at::native::reduce_kernel<512, 1>", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)")
_OTHER_CALLS = (("cudaGetDevice", 4), ("cudaStreamIsCapturing", 317), ("cudaEventQuery", 138))


_CHOICES = ("host", "host", "launch", "launch", "launch", "launch", "memcpy_async", "memcpy", "memset",
            "device_sync", "stream_sync", "record", "record", "event_sync", "wait", "wait", "other", "begin", "end")


class _ThreadDraw:
    """The ops of one drawn thread, and what later draws depend on (its recorded events, the lane
    it launched to last, the open ranges)."""

    def __init__(self, draw, st, ti: int, sync_events: bool) -> None:
        self.draw, self.st, self.ti, self.sync_events = draw, st, ti, sync_events
        self.gpu_dur = st.integers(1_000, 200_000)
        self.call = st.integers(1_000, 20_000)
        self.own = st.integers(0, 20_000)
        self.ops: list = []
        self.recorded: list = []  # events this thread recorded, in order
        self.last_lane = None
        self.depth = 0

    def step(self, choice: str, lane: tuple[int, int]) -> None:
        """Append the op for ``choice`` on ``lane`` (or nothing when it does not apply)."""
        getattr(self, "_" + choice)(lane)

    def _host(self, lane) -> None:
        self.ops.append(HostWork(self.draw(self.st.integers(0, 50_000))))

    def _launch(self, lane) -> None:
        d, s = lane
        draw = self.draw
        self.ops.append(Launch(s, draw(self.st.sampled_from(_KERNELS)), draw(self.gpu_dur), draw(self.call), device=d))
        self.last_lane = lane

    def _graph(self, lane) -> None:
        d, s = lane
        draw, st = self.draw, self.st
        kernels = draw(st.lists(st.tuples(st.sampled_from(_KERNELS), self.gpu_dur), min_size=1, max_size=4))
        self.ops.append(GraphLaunch(s, kernels, draw(self.call), graph_id=len(self.ops) + 1, device=d))
        self.last_lane = lane

    def _copy(self, cls, lane, cost) -> None:
        d, s = lane
        draw, st = self.draw, self.st
        kind = draw(st.sampled_from(_COPY_KINDS))
        self.ops.append(cls(s, kind, draw(st.integers(1, 1 << 24)), draw(self.gpu_dur), draw(cost),
                            host_memory=draw(st.sampled_from(_HOST_MEMORY)), device=d))
        self.last_lane = lane

    def _memcpy_async(self, lane) -> None:
        self._copy(MemcpyAsync, lane, self.call)

    def _memcpy(self, lane) -> None:
        self._copy(Memcpy, lane, self.own)

    def _memset(self, lane) -> None:
        d, s = lane
        draw = self.draw
        self.ops.append(MemsetAsync(s, draw(self.st.integers(1, 1 << 24)), draw(self.gpu_dur), draw(self.call), device=d))
        self.last_lane = lane

    def _device_sync(self, lane) -> None:
        self.ops.append(DeviceSync(self.draw(self.own), device=lane[0]))

    def _stream_sync(self, lane) -> None:
        if not self.sync_events:
            if self.last_lane is None:
                return
            lane = self.last_lane
        self.ops.append(StreamSync(lane[1], self.draw(self.own), device=lane[0]))

    def _record(self, lane) -> None:
        ev = self.draw(self.st.integers(0, 2))
        if not self.sync_events:
            # without cuda_sync records the record's stream is inferred as the one the thread
            # launched to last (a Kineto cudaEventRecord has no stream arg)
            if self.last_lane is None:
                return
            lane = self.last_lane
            ev = (self.ti, ev)
        self.ops.append(EventRecord(ev, lane[1], self.draw(self.call), device=lane[0]))
        self.recorded.append(ev)

    def _event_sync(self, lane) -> None:
        if not self.recorded:
            return
        ev = self.draw(self.st.sampled_from(self.recorded)) if self.sync_events else self.recorded[-1]
        self.ops.append(EventSync(ev, self.draw(self.own)))

    def _wait(self, lane) -> None:
        if not self.recorded or not self.sync_events:
            return
        d, s = lane
        self.ops.append(StreamWaitEvent(s, self.draw(self.st.sampled_from(self.recorded)), self.draw(self.call), device=d))

    def _other(self, lane) -> None:
        nm, cb = self.draw(self.st.sampled_from(_OTHER_CALLS))
        self.ops.append(OtherCall(nm, self.draw(self.call), cbid=cb))

    def _begin(self, lane) -> None:
        self.ops.append(RangeBegin(f"range_{len(self.ops)}", self.draw(self.st.sampled_from(_RANGE_CATS))))
        self.depth += 1

    def _end(self, lane) -> None:
        if self.depth:
            self.ops.append(RangeEnd())
            self.depth -= 1

    def thread(self) -> Thread:
        """The drawn thread, its open ranges closed."""
        ops = self.ops + [RangeEnd() for _ in range(self.depth)]
        ti = self.ti
        tid = 4242 if ti == 0 else 5000 + ti
        return Thread(ops, pid=4242, tid=tid, name="pt_main_thread" if ti == 0 else f"worker_{ti}")


def programs(*, max_threads: int = 3, max_streams: int = 3, max_ops: int = 40, max_devices: int = 1,
             sync_events: bool = True, graph_launches: bool = False, wait_latency: bool = False):
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
        graph_launches: also draw :class:`GraphLaunch` ops (1-4 kernels on one stream), about
            one op in ten (off by default, so other properties draw the programs they always did).
        wait_latency: also draw ``Program.wait_latency_ns`` in ``0..L`` (else 0).
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
        choices = _CHOICES + ("graph", "graph") if graph_launches else _CHOICES
        threads = []
        for ti in range(n_threads):
            td = _ThreadDraw(draw, st, ti, sync_events)
            for _ in range(draw(st.integers(0, max_ops))):
                choice = draw(st.sampled_from(choices))
                td.step(choice, draw(st.sampled_from(lanes)))
            threads.append(td.thread())
        W = draw(st.integers(0, L)) if wait_latency else 0
        return Program(threads, launch_latency_ns=L, gpu_gap_ns=G, wait_latency_ns=W)

    return _programs()


_GEMM = "ampere_sgemm_128x64_tn"
_GEMM_BWD = ("ampere_sgemm_128x64_nn", "ampere_sgemm_64x64_nt")
_RELU = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)"
_RELU_BWD = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}, at::detail::Array<char*, 3> >(int, at::native::(anonymous namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}, at::detail::Array<char*, 3>)"
_REDUCE = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)"
_SOFTMAX = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)"
_NLL = "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)"
_NLL_BWD = "void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, long>(float*, float const*, long const*, float const*, float const*, bool, int, int, long, long)"
_SOFTMAX_BWD = "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*, float const*, long)"
_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
_FOREACH = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)",
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::BinaryOpScalarFunctor<float, 1, 1, 0>, std::multiplies<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::BinaryOpScalarFunctor<float, 1, 1, 0>, std::multiplies<float>, float)",
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<3>, at::native::(anonymous namespace)::PointwiseOpScalarFunctor<float, 3, 3, 0>, std::multiplies<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<3>, at::native::(anonymous namespace)::PointwiseOpScalarFunctor<float, 3, 3, 0>, std::multiplies<float>, float)",
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::UnaryOpFunctor<float, 2, 1, 1>, at::native::sqrt_functor<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::UnaryOpFunctor<float, 2, 1, 1>, at::native::sqrt_functor<float>, float)")
_MAIN, _COMM, _COPY = 7, 20, 24  # the streams of training_step_program


class _StepWriter:
    """Appends the ops of :func:`training_step_program`, drawing the seeded jitter in program order."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ops: list = []
        self.add = self.ops.append

    def j(self, ns: int) -> int:
        return max(0, int(round(ns * self.rng.uniform(0.9, 1.1))))

    def cpu_op(self, name: str, *inner: Op, host: int = 2_500) -> None:
        self.add(RangeBegin(name, "cpu_op"))
        self.add(HostWork(self.j(host)))
        self.ops.extend(inner)
        self.add(RangeEnd())

    def kernel(self, name: str, dur: int, stream: int = _MAIN) -> Launch:
        return Launch(stream, name, self.j(dur), self.j(5_000))

    def batch_copy(self, wait_previous: bool) -> None:
        add, j = self.add, self.j
        add(HostWork(j(40_000)))  # dataloader __next__
        if wait_previous:
            add(EventSync("batch_copied", j(1_500)))  # pinned buffer reuse
        add(RangeBegin("aten::to", "cpu_op"))
        add(HostWork(j(3_000)))
        self.cpu_op("aten::copy_", MemcpyAsync(_COPY, "HtoD", 64 * 1024 * 4, j(30_000), j(7_000), host_memory="pinned"))
        add(RangeEnd())
        add(EventRecord("batch_copied", _COPY, j(2_000)))
        add(StreamWaitEvent(_MAIN, "batch_copied", j(2_000)))

    def forward(self, n_layers: int) -> None:
        add, j, cpu_op, kernel = self.add, self.j, self.cpu_op, self.kernel
        add(RangeBegin("nn.Module: Net_0", "python_function"))
        for i in range(n_layers):
            add(HostWork(j(8_000)))
            add(RangeBegin(f"nn.Module: Linear_{i}", "python_function"))
            add(RangeBegin("aten::linear", "cpu_op"))
            add(HostWork(j(2_000)))
            add(RangeBegin("aten::t", "cpu_op"))
            add(HostWork(j(1_500)))
            add(RangeEnd())
            cpu_op("aten::addmm", kernel(_GEMM, 45_000))
            add(RangeEnd())
            add(RangeEnd())
            add(HostWork(j(5_000)))
            add(RangeBegin(f"nn.Module: ReLU_{i}", "python_function"))
            cpu_op("aten::relu", kernel(_RELU, 4_000))
            add(RangeEnd())
        add(RangeEnd())
        add(HostWork(j(6_000)))
        add(RangeBegin("aten::cross_entropy_loss", "cpu_op"))
        cpu_op("aten::log_softmax", kernel(_SOFTMAX, 6_000))
        cpu_op("aten::nll_loss_forward", MemsetAsync(_MAIN, 4, j(1_500), j(4_000)), HostWork(j(1_000)), kernel(_NLL, 3_000))
        add(RangeEnd())

    def backward(self, n_layers: int) -> None:
        add, j, cpu_op, kernel = self.add, self.j, self.cpu_op, self.kernel
        add(HostWork(j(20_000)))
        for fn, kname, dur in (("NllLossBackward0", _NLL_BWD, 3_000), ("LogSoftmaxBackward0", _SOFTMAX_BWD, 5_000)):
            add(RangeBegin(f"autograd::engine::evaluate_function: {fn}", "cpu_op"))
            cpu_op(fn, kernel(kname, dur))
            add(RangeEnd())
        for i in reversed(range(n_layers)):
            add(HostWork(j(6_000)))
            add(RangeBegin("autograd::engine::evaluate_function: ReluBackward0", "cpu_op"))
            cpu_op("ReluBackward0", kernel(_RELU_BWD, 4_500))
            add(RangeEnd())
            add(HostWork(j(4_000)))
            add(RangeBegin("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op"))
            add(RangeBegin("AddmmBackward0", "cpu_op"))
            cpu_op("aten::mm", kernel(_GEMM_BWD[0], 50_000))
            if i:
                cpu_op("aten::mm", kernel(_GEMM_BWD[1], 48_000))
            cpu_op("aten::sum", kernel(_REDUCE, 7_000))
            add(RangeEnd())
            add(RangeEnd())

    def allreduce(self) -> None:
        add, j = self.add, self.j
        add(HostWork(j(10_000)))
        add(EventRecord("grads_ready", _MAIN, j(2_000)))
        add(StreamWaitEvent(_COMM, "grads_ready", j(2_000)))
        add(RangeBegin("nccl:all_reduce", "user_annotation"))
        self.cpu_op("record_param_comms", self.kernel(_ALLREDUCE, 150_000, stream=_COMM), host=6_000)
        add(RangeEnd())
        add(EventRecord("allreduce_done", _COMM, j(2_000)))
        add(StreamWaitEvent(_MAIN, "allreduce_done", j(2_000)))

    def optimizer_and_sync(self) -> None:
        add, j = self.add, self.j
        add(HostWork(j(15_000)))
        add(RangeBegin("Optimizer.step#Adam.step"))
        for _group in range(3):
            for op_name, kname in zip(("aten::_foreach_add_", "aten::_foreach_mul_", "aten::_foreach_addcmul_",
                                       "aten::_foreach_sqrt"), _FOREACH):
                self.cpu_op(op_name, self.kernel(kname, 6_000), host=3_000)
        add(RangeEnd())
        add(EventRecord("step_done", _MAIN, j(2_000)))  # step timer: end event
        # step timing: wait for the end event (waits for the optimizer kernels)
        add(HostWork(j(5_000)))
        add(EventSync("step_done", j(1_500)))
        # loss.item()
        add(HostWork(j(12_000)))
        add(RangeBegin("aten::item", "cpu_op"))
        self.cpu_op("aten::_local_scalar_dense",
                    MemcpyAsync(_MAIN, "DtoH", 4, j(2_000), j(4_000), host_memory="pageable"),
                    StreamSync(_MAIN, j(2_000)))
        add(RangeEnd())
        add(HostWork(j(20_000)))


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
    w = _StepWriter(seed)
    for step in range(first_step, first_step + steps):
        w.add(RangeBegin(f"ProfilerStep#{step}"))
        w.batch_copy(step > first_step)
        w.forward(n_layers)
        w.backward(n_layers)
        w.allreduce()
        w.optimizer_and_sync()
        w.add(RangeEnd())  # ProfilerStep
    # EMA copy of the weights, then torch.cuda.synchronize()
    w.add(HostWork(w.j(30_000)))
    w.cpu_op("aten::copy_", MemcpyAsync(_MAIN, "DtoD", 4 * 1024 * 1024 * n_layers, w.j(80_000), w.j(6_000)))
    w.add(HostWork(w.j(5_000)))
    w.add(DeviceSync(w.j(3_000)))
    return Program([Thread(w.ops, pid=4242, tid=4242, name="pt_main_thread")],
                   launch_latency_ns=launch_latency_ns, gpu_gap_ns=gpu_gap_ns)
