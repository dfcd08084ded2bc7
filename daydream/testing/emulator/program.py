"""The emulator's program model: what a :class:`Program` is made of.

The ops a CPU thread issues (:class:`HostWork`, the CUDA runtime calls, CPU ranges, handovers
between threads), a :class:`Thread` of them, and a :class:`Program`: threads plus the model's
constants (``L``, ``G``, ``D``, ``S``, ``W``), validated on construction. All times are integer
nanoseconds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Union

from ...events.cuda_api import LAUNCH_QUEUE_DEPTH, PAGEABLE_STAGING_BYTES, ApiRole, api_role

#: Default emulated start time: an epoch-like absolute ns value with a non-zero sub-second part.
DEFAULT_T0_NS = 1_700_000_000_123_456_789

_COPY_KINDS = ("HtoD", "DtoH", "DtoD")
_HOST_MEMORY = ("pinned", "pageable")
_RANGE_CATS = ("user_annotation", "cpu_op", "python_function")


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
