"""The Kineto writer: :func:`to_kineto` writes an emulated :class:`~.run.Run` as a
PyTorch-profiler (Kineto) Chrome-trace JSON whose times are exact to the nanosecond.
"""

from __future__ import annotations

import gzip
import io
import json
import os
from typing import Any

from .ops import DeviceSync, EventRecord, EventSync, StreamSync, StreamWaitEvent
from .run import CallRecord, Run


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

    def __init__(self, base: int, whole_us: bool = False) -> None:
        self.base = base
        self.q = 1000 if whole_us else 1  # whole microseconds: each time rounded down to one

    def us(self, t: int) -> _Us:
        d = t - self.base
        return _Us(d - d % self.q)

    def dur(self, a: int, b: int) -> _Us:
        return _Us(self.us(b).ns - self.us(a).ns)


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
            if rg.dims is not None:
                args.update({"Input Dims": [list(d) for d in rg.dims], "Input type": list(rg.types or ())})
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


def _launch_of(op, t):
    """The :class:`Launch` a kernel task ran (a graph launch's node, else the call's op)."""
    return op.nodes()[t.graph_node] if t.graph_node is not None else op


def _task_events(run: Run, ck: _Clock) -> list[dict]:
    """GPU tasks, each followed by its flow end."""
    ev = []
    for t in run.tasks:
        c = run.calls[t.call]
        args = {} if t.external_id is None else {"External id": t.external_id}
        if t.kind == "kernel":
            args.update({"queued": 0, "device": t.device, "context": 1, "stream": t.stream, "correlation": t.correlation,
                         "registers per thread": 32, "shared memory": 0, "blocks per SM": 1.0, "warps per SM": 8.0,
                         "grid": list(_launch_of(c.op, t).grid), "block": list(_launch_of(c.op, t).block),
                         "est. achieved occupancy %": 12})
            args.update(dict(getattr(_launch_of(c.op, t), "comm", ())))
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


def _memory_events(run: Run, ck: _Clock, totals: bool) -> list[dict]:
    """The allocator's ``[memory]`` instants on their threads; ``totals``: with ``Total Allocated``,
    ``Total Reserved``, ``Addr`` and ``Ev Idx`` (PyTorch >= 1.10), else ``Bytes`` and the device
    only and no category (PyTorch 1.8)."""
    ev = []
    for a in run.allocs:
        th = run.program.threads[a.thread]
        args = {"Device Type": 0 if a.device < 0 else 1, "Device Id": a.device, "Bytes": a.bytes}
        e = {"ph": "i", "s": "t", "name": "[memory]", "pid": th.pid, "tid": th.tid, "ts": ck.us(a.ts_ns), "args": args}
        if totals:
            addr = getattr(th.ops[a.op_index], "addr", None)  # the op's block address where it gives one
            args.update({"Total Reserved": a.total_reserved, "Total Allocated": a.total_allocated,
                         "Addr": 0x7F0000000000 + a.seq * 512 if addr is None else addr, "Ev Idx": a.seq})
            e["cat"] = "cpu_instant_event"
        ev.append(e)
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
        if e["ph"] in ("X", "i"):  # an instant: kept when it lies in the window
            s = ck.base + e["ts"].ns
            kept = s >= lo and (hi is None or s + e.get("dur", _Us(0)).ns <= hi)
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
              window: tuple[int, int | None] | None = None, whole_us: bool = False,
              memory_totals: bool = True) -> dict:
    """Write ``run`` as a Kineto (PyTorch profiler) Chrome-trace JSON; return the parsed document.

    Layout follows recent PyTorch/Kineto: ``schemaVersion`` 1, ``deviceProperties``,
    ``baseTimeNanoseconds``; event ``ts``/``dur`` in microseconds relative to it, written with
    exactly three decimals, so ``base + Decimal(ts) * 1000`` is the exact ns time of the run.
    Events: ``cuda_runtime`` calls (``cbid``, ``correlation``, ``External id``), ``kernel`` /
    ``gpu_memcpy`` / ``gpu_memset`` on pid = device, tid = stream, ``ac2g`` flows, ``cuda_sync``
    records (when ``emit_sync_events``), ``user_annotation`` / ``cpu_op`` / ``python_function``
    ranges, the allocator's ``[memory]`` instants, and ``M`` process/thread metadata.

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
        whole_us: write every start and end rounded down to a whole microsecond (as Kineto
            before PyTorch 2 and the DLRM traces of ``../shared/traces`` do): the run's times
            are then up to 1 us off in the trace.
        memory_totals: write the allocator's ``[memory]`` instants with their totals (PyTorch
            >= 1.10); False: without them, as PyTorch 1.8 did (:func:`_memory_events`).

    Returns:
        the document as ``json.loads`` reads the written text.

    Raises:
        ValueError: ``base_time_ns`` later than some timestamp.
    """
    t0 = run.trace_t0_ns
    ck = _Clock(t0 - t0 % 1_000_000_000 if base_time_ns is None else int(base_time_ns), whole_us)
    ev = _range_events(run, ck) + _call_events(run, ck, event_records) + _task_events(run, ck)
    ev += _memory_events(run, ck, memory_totals)
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
