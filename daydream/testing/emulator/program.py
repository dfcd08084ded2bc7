"""The emulator's program: a :class:`Thread` (a CPU thread's ops, :mod:`.ops`, in program order)
and a :class:`Program` (threads plus the model's constants ``L``, ``G``, ``D``, ``S``, ``W``),
validated on construction. All times are integer nanoseconds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from ...events.cuda_api import LAUNCH_QUEUE_DEPTH, ApiRole, api_role
from .ops import (
    EMULATED_STAGING_BYTES,
    _COPY_KINDS,
    Allocate,
    _HOST_MEMORY,
    _RANGE_CATS,
    GraphLaunch,
    Handover,
    HostWork,
    Memcpy,
    MemcpyAsync,
    Op,
    OtherCall,
    RangeBegin,
    RangeEnd,
    WaitHandover,
    _Call,
    _Copy,
)

#: Default emulated start time: an epoch-like absolute ns value with a non-zero sub-second part.
DEFAULT_T0_NS = 1_700_000_000_123_456_789


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
        staging_bytes: the size above which a pageable HtoD ``cudaMemcpyAsync`` synchronizes its
            stream and stages (default :data:`.ops.EMULATED_STAGING_BYTES`, the emulator's own);
            set on every copy op of the program.
        staging_ns_per_byte: a staged copy's DMA is ready ``L + S + round(bytes * this)`` after
            its call (the first chunk grows with the copy); default 0.
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
    staging_bytes: int = EMULATED_STAGING_BYTES
    staging_ns_per_byte: float = 0.0

    def __post_init__(self) -> None:
        threads = []
        for th in self.threads:  # every copy stages by the program's threshold
            if isinstance(th, Thread) and any(isinstance(op, _Copy) and op.staging_bytes != self.staging_bytes for op in th.ops):
                th = dataclasses.replace(th, ops=tuple(dataclasses.replace(op, staging_bytes=self.staging_bytes)
                                                       if isinstance(op, _Copy) else op for op in th.ops))
            threads.append(th)
        object.__setattr__(self, "threads", tuple(threads))
        self.validate()

    def staging_ns(self, op) -> int:
        """How long after ``L`` the DMA of ``op`` is ready: ``S + round(bytes * staging_ns_per_byte)``
        for a staged copy, else 0."""
        if not getattr(op, "staged", False):
            return 0
        return self.staging_latency_ns + int(round(op.bytes * self.staging_ns_per_byte))

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
        if self.staging_bytes < 0 or self.staging_ns_per_byte < 0:
            raise ValueError("staging_bytes and staging_ns_per_byte must be >= 0")
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
                if isinstance(op, Allocate):
                    if not (isinstance(op.delta_bytes, int) and isinstance(op.device, int) and op.device >= -1):
                        raise ValueError(f"{where}: delta_bytes must be an int and device an int >= -1")
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
