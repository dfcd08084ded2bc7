"""The emulator's ops: what a CPU thread issues, in program order.

:class:`HostWork` (CPU time between calls); the CUDA runtime calls (launches, copies, memsets,
graph launches, syncs, event records and waits, other calls), each with the (name, CUPTI cbid) it
is written with; CPU ranges (:class:`RangeBegin` / :class:`RangeEnd`); and handovers between
threads. All times are integer nanoseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Union


#: The emulator's own staging threshold (bytes) when a program names none: an emulator choice,
#: deliberately not the model's (which reads each trace's own, ``graph/build/staging.py``), so a
#: property can tell a wrong threshold from a right one; properties draw their own
#: (``Program.staging_bytes``).
EMULATED_STAGING_BYTES = 262_144
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
        grid, block: the launch configuration written to the trace (keyword; default the fixed
            ``[132, 1, 1]`` / ``[256, 1, 1]`` of unshaped programs): a shaped program's kernels
            (:func:`~daydream.testing.emulator.generators.shaped_program`) give the grid their
            cost function tiles.
        comm: (key, value) pairs written into the kernel's args (keyword; default none): a
            collective's ``Process Group Name`` / ``Group size`` / ``Collective name``, as
            PyTorch >= 2.1 copies them onto NCCL kernels (the job emulator matches collectives
            within a ``Process Group Name``).
    """

    API: ClassVar[tuple[str, int]] = ("cudaLaunchKernel", 211)
    stream: int
    kernel_name: str
    kernel_dur_ns: int
    call_dur_ns: int
    grid: tuple = field(default=(132, 1, 1), kw_only=True)
    block: tuple = field(default=(256, 1, 1), kw_only=True)
    comm: tuple = field(default=(), kw_only=True)

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
    #: the program's staging threshold (``Program.staging_bytes``; set by the program)
    staging_bytes: int = field(default=EMULATED_STAGING_BYTES, kw_only=True)

    def gpu_dur(self) -> int:
        return self.copy_dur_ns

    @property
    def pageable_htod(self) -> bool:
        return self.kind == "HtoD" and self.host_memory == "pageable"

    @property
    def staged(self) -> bool:
        """A pageable HtoD copy above the program's staging threshold: the call synchronizes its stream first."""
        return self.pageable_htod and self.bytes > self.staging_bytes

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
    is the call's own cost. From pageable memory to the device above ``Program.staging_bytes``
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

    Semantics (``docs/model.md``, "CUDA-graph launches"): the graph is a chain on one stream
    (``node_stream``, by default ``stream``): every kernel is ready at the call's start + ``L`` and
    they run in the given order, each after the previous one + ``G`` (a stream predecessor like any
    other); a pending cross-stream wait on ``stream`` gates the first kernel. In the trace every
    kernel carries the call's correlation id (CUPTI correlates one ``cudaGraphLaunch`` to one record
    per node; ``graph id``/``graph node id`` args as recent Kineto writes them).

    When ``node_stream`` differs from ``stream`` (the driver runs the graph's kernels on a stream of
    its own, and the trace records them there) the graph still runs in ``stream``'s order: its
    first kernel also follows the last task launched before it on ``stream`` (+ ``G``), and what
    ``stream`` runs next (a task, a stream synchronize, an event record) follows its last kernel:
    after the call, the graph's last kernel is ``stream``'s last task. The graph takes its one
    launch-queue slot on ``node_stream``, where its kernels are.

    Attributes:
        stream: stream id the graph is launched into.
        kernels: ``(kernel name, kernel_dur_ns)`` per node, in execution order (a list is
            converted to a tuple; at least one).
        call_dur_ns: CPU duration of the call, ns.
        graph_id: the ``graph id`` written on its kernels.
        node_stream: the stream id its kernels run on and are recorded on (None: ``stream``).
        device: GPU device index (keyword).
    """

    API: ClassVar[tuple[str, int]] = ("cudaGraphLaunch", 311)
    stream: int
    kernels: tuple
    call_dur_ns: int
    graph_id: int = 1
    node_stream: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kernels", tuple((str(n), d) for n, d in self.kernels))

    def nodes(self) -> list[Launch]:
        """The graph's kernels as launches on the stream they run on (how the emulator enqueues them)."""
        return [Launch(self.run_stream, n, d, self.call_dur_ns, device=self.device) for n, d in self.kernels]

    @property
    def run_stream(self) -> int:
        """The stream its kernels run on: ``node_stream``, else ``stream``."""
        return self.stream if self.node_stream is None else self.node_stream


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
        dims, types: a ``cpu_op``'s recorded ``Input Dims`` / ``Input type`` (as
            ``record_shapes=True`` writes them: one entry per input, a list of ints for a tensor,
            ``[]`` for a scalar); None: not written.
    """

    name: str
    cat: str = "user_annotation"
    dims: tuple | None = None
    types: tuple | None = None


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


@dataclass(frozen=True)
class Allocate:
    """The caching allocator allocates (``delta_bytes`` > 0) or frees (< 0) memory of ``device``
    (-1: host memory) at the thread's current time, inside the host work before its next call
    (the op that allocates runs on the CPU). Takes no time; written as a Kineto ``[memory]``
    instant on the thread (:func:`~.kineto_writer.to_kineto`).

    Attributes:
        delta_bytes: bytes allocated (+) or freed (-); any int.
        device: GPU index, or -1 for host memory (keyword).
        addr: the block's address, written as ``Addr`` (keyword; an allocation and its free give
            the same one, so that a reader can pair them); None: a distinct address per event.
    """

    delta_bytes: int
    device: int = field(default=0, kw_only=True)
    addr: int | None = field(default=None, kw_only=True)


Op = Union[HostWork, Allocate, Launch, GraphLaunch, MemcpyAsync, Memcpy, MemsetAsync, DeviceSync, StreamSync, EventRecord,
           EventSync, StreamWaitEvent, OtherCall, RangeBegin, RangeEnd, Handover, WaitHandover]
