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
* Contention (optional, ``emulate(program, contention=f)``; ``docs/model.md``, "Contention between
  streams"): a kernel that starts while a kernel of another stream of its device is running lasts
  ``f`` x its duration (rounded half up); the run is repeated with the stretched set the previous
  run showed until it repeats itself (a kernel launched later may start earlier).
* "Launched before" means: the launching call's start is earlier. Calls of different threads
  that start at the same nanosecond are ordered by (thread index, op index); the emulator gives
  correlation ids in that order, so ordering ties by correlation id reproduces it.

Calls are executed in that global order with a heap keyed by ``(start, thread, op)``. Everything
a call depends on (earlier launches, earlier records) was launched earlier, hence is already
computed when the call is reached, so one pass suffices.

The package, one concern a module: :mod:`.ops` (what a thread issues: :class:`HostWork`, the
runtime calls, ranges, handovers), :mod:`.program` (:class:`Thread`, :class:`Program`), :mod:`.run`
(the emulator: :func:`emulate` into a :class:`Run`; :func:`measure_latencies`), :mod:`.kineto_writer`
(:func:`to_kineto`) and :mod:`.generators` (:func:`programs`, :func:`training_step_program`).
Import from the package: it re-exports the public names.

Typical use::

    prog = Program([Thread([Launch(7, "k", 10_000, 3_000), StreamSync(7, 500)])])
    run = emulate(prog)
    trace = to_kineto(run, "out.json.gz")
"""

from __future__ import annotations

from .generators import programs, training_step_program
from .kineto_writer import to_kineto
from .ops import (
    EMULATED_STAGING_BYTES,
    Allocate,
    DeviceSync,
    EventRecord,
    EventSync,
    GraphLaunch,
    Handover,
    HostWork,
    Launch,
    Memcpy,
    MemcpyAsync,
    MemsetAsync,
    Op,
    OtherCall,
    RangeBegin,
    RangeEnd,
    StreamSync,
    StreamWaitEvent,
    WaitHandover,
)
from .program import DEFAULT_T0_NS, Program, Thread
from .run import AllocRecord, CallRecord, RangeRecord, Run, TaskRecord, emulate, level_before, measure_latencies, memory_peaks, same_level_before

__all__ = [
    "HostWork", "Allocate", "AllocRecord", "Launch", "GraphLaunch", "MemcpyAsync", "Memcpy", "MemsetAsync", "DeviceSync", "StreamSync",
    "EventRecord", "EventSync", "StreamWaitEvent", "OtherCall", "RangeBegin", "RangeEnd", "Handover", "WaitHandover",
    "Op", "Thread", "Program", "CallRecord", "TaskRecord", "RangeRecord", "Run",
    "emulate", "to_kineto", "measure_latencies", "memory_peaks", "level_before", "same_level_before", "programs", "training_step_program",
    "DEFAULT_T0_NS", "EMULATED_STAGING_BYTES",
]
