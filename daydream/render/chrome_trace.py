"""Write simulated timelines as Chrome-trace JSON that Perfetto, chrome://tracing and daydream's own
Kineto adapter open.

One file holds the predicted timeline (real process, thread and stream ids) and, when given, the
baseline replay beside it (process ids + ``BASELINE_PID_OFFSET`` and devices +
``BASELINE_DEVICE_OFFSET``, correlation ids + ``BASELINE_CORRELATION_OFFSET``, named
"baseline ..."). ``process_sort_index`` puts the baseline's processes above the prediction's, each
side's critical-path track first, then its host processes, then its GPUs (chrome://tracing has
always honoured the sort index; Perfetto's JSON importer does since google/perfetto PR 3273,
2025-10, and orders processes by other rules before). A GPU is drawn on a pid
of its own, above every host pid in the file (:func:`_gpu_pid_base`), so it never shares a
process's row; ``args.device`` keeps the device id. Every task is a Kineto-style event:
``cuda_runtime``/``cuda_driver`` calls on their thread, ``kernel``/``gpu_memcpy``/``gpu_memset`` on
the GPU's pid and tid = stream, with the correlation ids, ``args.daydream_pid`` (the task's
process: the Kineto reader takes it over the join by correlation id, which is ambiguous when two
processes' ids collide and empty for a task launched before the trace), ``ac2g`` launch flows (one
per GPU task, each with its own id: a graph launch draws one to each of its tasks), and
``cuda_sync`` records that name what each synchronizing call and cross-stream wait depended on,
so reading the file back rebuilds the same graph; a record is drawn at its call's times on its
device at thread stream + ``SYNC_TID_OFFSET`` (named "stream S sync"), not on the stream's own
track, where it would overlap the kernels without nesting. Every track has a name. Layer, phase and op are in ``args`` when the
graph is mapped. The CPU ranges of the trace (framework ops, annotations, DataLoader, optimizer;
:mod:`daydream.simulate.carry`) are drawn on both copies, moved with their thread's calls. Other
dependency edges are flow arrows of category ``dependency``, or ``dependency_inferred`` (name
suffixed ``(inferred)``) / ``dependency_inserted`` for edges the trace did not record.

Each side has a track ("critical path and step windows"): the critical path as slices named by
cause (CPU, GPU compute, communication, launch latency, sync; the report's ``critical_path`` split
at the tasks it was charged at, :func:`critical_segments`), with flow arrows (category
``critical_path``) only where the path passes from one lane to another, never backwards in time;
and each ProfilerStep's window with the GPU work it launched. Tasks on the path carry
``args.critical_path = 1``. The adapter skips those track events when reading the file back
(unknown categories, counted).

Beside the terminal text (:mod:`daydream.render.text`) and the JSON document
(:func:`daydream.report.report_model.report_json`), this is the third rendering of an analysis: it
draws the graphs and timelines the report was computed from, with the report's step windows
(:func:`daydream.report.windows.step_windows`). Each kind of event has its own function below.
"""

from __future__ import annotations

import gzip
from typing import NamedTuple

import numpy as np
import orjson

from ..util.arrays import sorted_unique
from ..events.table import Kind, SyncKind
# the baseline copy's id offsets and the file's traceName: defined with the reader that reads them back
from ..formats.kineto.rows import _VIRTUAL_SYNC_TID_OFFSET
from ..formats.own_timeline import (
    BASELINE_CORRELATION_OFFSET,
    BASELINE_DEVICE_OFFSET,
    BASELINE_PID_OFFSET,
    TRACE_NAME_PREFIX,
)
from ..simulate.memory_replay import replay_memory
from ..simulate.critical_path import CAUSES, communication_mask, critical_path
from ..graph import NODE_CPU, RULES, Origin, Phase, TaskGraph, kind_name, profiler_steps, rule_arrays
from ..simulate.carry import carry, cpu_range_rows
from ..report.windows import step_windows
from ..simulate import Timeline, with_bindings

_GPU_CAT = {int(Kind.KERNEL): "kernel", int(Kind.MEMCPY): "gpu_memcpy", int(Kind.MEMSET): "gpu_memset"}
#: ac2g flow ids of the second and later GPU tasks of one launch (a graph launch): above every
#: (process index << 40) + correlation id of the first ones, below the baseline copy's 1 << 52
EXTRA_FLOW_IDS = 3 << 50
#: a synchronization record is drawn on its device at thread (stream + this), a track of its own
#: beside the stream's (as newest Kineto does; the Kineto reader takes the stream from args.stream)
SYNC_TID_OFFSET = _VIRTUAL_SYNC_TID_OFFSET
_SYNC_NAME = {int(SyncKind.EVENT_SYNC): "Event Sync", int(SyncKind.STREAM_WAIT_EVENT): "Stream Wait Event",
              int(SyncKind.STREAM_SYNC): "Stream Sync", int(SyncKind.CONTEXT_SYNC): "Context Sync"}


class _Drawn:
    """One graph and its timeline as drawn in the file: where each node goes (process or device,
    thread or stream), the correlation ids it carries, and its times in microseconds from ``base_ns``."""

    def __init__(self, graph: TaskGraph, tl: Timeline, base_ns: int, pid_off: int, dev_off: int, corr_off: int, gpu_pid: int = 0) -> None:
        self.graph, self.t, self.tl = graph, graph.table, tl
        self.base_ns, self.pid_off, self.dev_off, self.corr_off = base_ns, pid_off, dev_off, corr_off
        self.gpu_pid = gpu_pid  #: pid of device 0 (+ dev_off): above every host pid in the file
        self.row = graph.row
        self.r0 = np.maximum(self.row, 0)
        self.has_row = self.row >= 0
        self.lk = graph.lane_keys[graph.lane]
        self.pid = self.lk[:, 1] + pid_off
        self.cpu = graph.node_kind == NODE_CPU
        self.corr = self._correlation_ids()
        self.starts, self.ends = tl.start_ns.tolist(), tl.end_ns.tolist()
        self.flow_base = (1 << 52) if corr_off else 0  # the baseline copy's flows apart from the prediction's

    def _correlation_ids(self) -> np.ndarray:
        """Keep the trace's; new ones for inserted calls; a GPU task takes its launching call's id
        (its launch may have changed by a transformation)."""
        graph, cpu = self.graph, self.cpu
        corr = np.where(self.has_row, self.t.correlation[self.r0], -1).astype(np.int64)
        nxt = int(corr.max()) + 1 if graph.n else 1
        new = cpu & (corr < 0)
        corr[new] = np.arange(nxt, nxt + int(new.sum()))
        gl = graph.launch
        corr[~cpu] = np.where(gl[~cpu] >= 0, corr[np.maximum(gl[~cpu], 0)], -1)
        corr[corr >= 0] += self.corr_off
        return corr

    def us(self, x) -> float:
        return (int(x) - self.base_ns) / 1000.0  # exact: < 16 significant digits

    def dur(self, v: int) -> float:
        return (self.ends[v] - self.starts[v]) / 1000.0

    def place(self, v: int) -> tuple[int, int]:
        """(pid, tid) of node ``v``: its process and thread, or its device and stream."""
        if self.cpu[v]:
            return int(self.pid[v]), int(self.lk[v, 2])
        return int(self.lk[v, 2]) + self.dev_off + self.gpu_pid, int(self.lk[v, 3])


def _flow(ph: str, cat: str, name: str, fid: int, place: tuple[int, int], ts: float) -> dict:
    """One end of a flow arrow: ``s`` (start) or ``f`` (finish, bound to the enclosing slice)."""
    e = {"ph": ph, "cat": cat, "name": name, "id": fid, "pid": place[0], "tid": place[1], "ts": ts}
    if ph == "f":
        e["bp"] = "e"
    return e


def _task_args(d: _Drawn, v: int, crit: np.ndarray, ann: dict) -> dict:
    args: dict = {"correlation": int(d.corr[v])} if d.corr[v] >= 0 else {}
    if crit[v]:
        args["critical_path"] = 1
    for key, (codes, labels) in ann.items():
        c = int(codes[v])
        if c >= 0:
            args[key] = labels[c]
    return args


def _task_events(d: _Drawn, critical: np.ndarray | None, annotations: dict | None) -> list[dict]:
    """Each task as a slice (API calls on their thread, GPU tasks on device and stream), and the
    launch flow (``ac2g``) from a GPU task's launching call to it."""
    graph, t, lk, cpu, has_row, r0 = d.graph, d.t, d.lk, d.cpu, d.has_row, d.r0
    n = graph.n
    names = graph.node_names()
    cats = np.asarray(t.names, dtype=object)[t.cat_id[r0]] if len(t.names) else np.full(n, "", object)
    crit = critical if critical is not None else np.zeros(n, bool)
    ann = annotations or {}
    gl = graph.launch
    pid_index = np.unique(lk[:, 1], return_inverse=True)[1].reshape(-1)
    ev: list[dict] = []
    # a launch of several GPU tasks (a graph launch) draws one flow to each: flow ids stay unique per
    # (cat, id), the first task's Kineto-style (process, correlation), the others' from EXTRA_FLOW_IDS on
    first = np.zeros(n, bool)
    launched = np.nonzero(~cpu & (gl >= 0))[0]
    first[launched[np.unique(gl[launched], return_index=True)[1]]] = True
    extra = d.flow_base + EXTRA_FLOW_IDS
    for v in range(n):
        args = _task_args(d, v, crit, ann)
        if cpu[v]:
            cat = cats[v] if has_row[v] and cats[v] in ("cuda_runtime", "cuda_driver") else "cuda_runtime"
            ev.append({"ph": "X", "cat": cat, "name": names[v], "pid": int(d.pid[v]), "tid": int(lk[v, 2]),
                       "ts": d.us(d.starts[v]), "dur": d.dur(v), "args": args})
            continue
        gpid, stream = d.place(v)
        dev = int(lk[v, 2]) + d.dev_off
        args.update({"device": dev, "stream": stream})
        if lk[v, 1] >= 0:  # its process: correlation ids of two processes can collide, an unlaunched task has none
            args["daydream_pid"] = int(d.pid[v])
        if has_row[v] and graph.node_kind[v] != Kind.KERNEL and t.bytes[r0[v]] >= 0:
            args["bytes"] = int(t.bytes[r0[v]])
        ev.append({"ph": "X", "cat": _GPU_CAT[int(graph.node_kind[v])], "name": names[v], "pid": gpid, "tid": stream,
                   "ts": d.us(d.starts[v]), "dur": d.dur(v), "args": args})
        if gl[v] >= 0:
            # flow ids are global in Chrome traces: make (process, correlation) unique
            if first[v]:
                fl = int(d.flow_base + int(pid_index[v]) * (1 << 40) + d.corr[v])
            else:
                fl, extra = extra, extra + 1
            ev.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": fl, "pid": int(d.pid[gl[v]]), "tid": int(lk[gl[v], 2]), "ts": d.us(d.starts[gl[v]])})
            ev.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": fl, "bp": "e", "pid": gpid, "tid": stream, "ts": d.us(d.starts[v])})
    return ev


def _sync_events(d: _Drawn) -> list[dict]:
    """The synchronization records (``cuda_sync``) of the calls that had them in the trace."""
    t, row = d.t, d.row
    sy = np.nonzero(t.kind == Kind.SYNC)[0]
    if not len(sy):
        return []
    key = {(int(t.pid[r]), int(t.correlation[r])): r for r in sy.tolist()}
    ev = []
    # record calls' new correlation ids: same as the trace's (kept rows keep theirs)
    for v in np.nonzero(d.cpu & d.has_row)[0].tolist():
        r = key.get((int(t.pid[row[v]]), int(t.correlation[row[v]])))
        if r is None:
            continue
        sk = int(t.sync_kind[r])
        a = {"cuda_sync_kind": _SYNC_NAME.get(sk, "Unknown"), "stream": int(t.stream[r]), "correlation": int(d.corr[v]),
             "device": int(t.device[r]) + d.dev_off if t.device[r] >= 0 else -1}
        if t.pid[r] >= 0:
            a["daydream_pid"] = int(t.pid[r]) + d.pid_off
        if sk in (SyncKind.EVENT_SYNC, SyncKind.STREAM_WAIT_EVENT):
            a["wait_on_stream"] = int(t.link_stream[r])
            lc = int(t.link_correlation[r])
            a["wait_on_cuda_event_record_corr_id"] = lc + d.corr_off if lc >= 0 else -1
        ev.append({"ph": "X", "cat": "cuda_sync", "name": a["cuda_sync_kind"], "pid": a["device"] + d.gpu_pid if a["device"] >= 0 else d.gpu_pid - 3,
                   "tid": a["stream"] + SYNC_TID_OFFSET, "ts": d.us(d.starts[v]), "dur": d.dur(v), "args": a})
    tracks = sorted({(e["pid"], e["tid"]) for e in ev})
    names = [{"ph": "M", "name": "thread_name", "pid": p_, "tid": tid_,
              "args": {"name": f"stream {tid_ - SYNC_TID_OFFSET} sync" if tid_ >= SYNC_TID_OFFSET else "sync without a stream"}} for p_, tid_ in tracks]
    if any(p_ == d.gpu_pid - 3 for p_, _ in tracks):
        names.append({"ph": "M", "name": "process_name", "pid": d.gpu_pid - 3, "tid": 0, "args": {"name": "synchronization records without a device"}})
    return ev + names


def _dependency_events(d: _Drawn) -> list[dict]:
    """A flow arrow per edge that is not lane order or a launch (those are drawn as lanes and
    launch flows), named by its kind (``blocking wait``, ``cross-stream wait``, any registered
    kind); an edge the trace did not record has category ``dependency_inferred`` (derived by a
    rule; named ``KIND (inferred)``) or ``dependency_inserted`` (by a transformation), and
    ``args.origin``, so a filter on the category shows or hides them; from the point its rule anchors at on the source (end or start) to the point it bounds
    on the destination (a waiting call's end; otherwise the destination's start)."""
    graph = d.graph
    ra = rule_arrays()
    k = graph.edge_kind
    m = ~ra.lane[k] & ~ra.launch[k]
    e_ids = np.nonzero(m)[0]
    e_ids = e_ids[np.lexsort((graph.edge_src[e_ids], graph.edge_dst[e_ids]))]
    fid = (1 << 50) + d.flow_base
    origins = {int(o): o.name.lower() for o in Origin}
    ev = []
    for e in e_ids.tolist():
        s_, d_, kk = int(graph.edge_src[e]), int(graph.edge_dst[e]), int(k[e])
        t_s = d.ends[s_] if ra.anchor_end[kk] else d.starts[s_]
        t_d = d.ends[d_] if ra.phase[kk] == Phase.END else d.starts[d_]
        origin = origins[int(graph.edge_origin[e])]
        cat, name = ("dependency", kind_name(kk)) if origin == "recorded" else (f"dependency_{origin}", kind_name(kk))
        if origin == "inferred":
            name += " (inferred)"
        ev.append(_flow("s", cat, name, fid, d.place(s_), d.us(t_s)))
        f = _flow("f", cat, name, fid, d.place(d_), d.us(t_d))
        if origin != "recorded":
            ev[-1]["args"] = f["args"] = {"origin": origin}
        ev.append(f)
        fid += 1
    return ev


def _lane_name_events(graph: TaskGraph, label: str, pid_off: int, dev_off: int, gpu_pid: int = 0) -> list[dict]:
    """Process and thread names: "process P" / "thread T", "GPU D" / "stream S"."""
    ev = []
    for k in graph.lane_keys.tolist():
        if k[0]:
            p_, tid_, nm = k[2] + dev_off + gpu_pid, k[3], f"stream {k[3]}"
            ev.append({"ph": "M", "name": "process_name", "pid": p_, "tid": 0, "args": {"name": f"{label}GPU {k[2]}"}})
        else:
            p_, tid_, nm = k[1] + pid_off, k[2], f"thread {k[2]}"
            ev.append({"ph": "M", "name": "process_name", "pid": p_, "tid": 0, "args": {"name": f"{label}process {k[1]}"}})
        ev.append({"ph": "M", "name": "thread_name", "pid": p_, "tid": tid_, "args": {"name": nm}})
    return ev


def _step_events(d: _Drawn) -> list[dict]:
    """The replayed ProfilerSteps, on the thread of their ProfilerStep: the step's CPU range (the
    GPU work it launched may run on past it; ``args`` give the step's window with that work)."""
    ev = []
    for w, (_n, _a, _b, spid, stid) in zip(step_windows(d.graph, d.tl), profiler_steps(d.t)):
        ev.append({"ph": "X", "cat": "user_annotation", "name": w.name, "pid": spid + d.pid_off, "tid": stid,
                   "ts": d.us(w.replayed_cpu_start_ns), "dur": (w.replayed_cpu_end_ns - w.replayed_cpu_start_ns) / 1000.0,
                   "args": {"step window with its GPU work, ms": (w.replayed_end_ns - w.replayed_start_ns) / 1e6}})
    return ev


def _events(d: _Drawn, label: str, critical: np.ndarray | None, annotations: dict | None) -> list[dict]:
    """All events of one graph and timeline: tasks and launch flows, synchronization records,
    dependency arrows, lane names, steps and CPU ranges."""
    return (_task_events(d, critical, annotations) + _sync_events(d) + _dependency_events(d)
            + _lane_name_events(d.graph, label, d.pid_off, d.dev_off, d.gpu_pid) + _step_events(d) + _range_events(d))


#: the critical path track's slice names, by cause (daydream.simulate.critical_path.CAUSES)
CAUSE_LABELS = {"cpu": "CPU", "gpu_compute": "GPU compute", "communication": "communication", "launch": "launch latency", "sync": "sync",
                "copy": "copy"}


class _NodeCodes:
    """Phase names for :func:`critical_path` when every node is its own "phase": code -> str(code)."""

    def __getitem__(self, code: int) -> str:
        return str(code)


class Segment(NamedTuple):
    """One piece of a critical path: [start_ns, end_ns) charged to ``cause`` while at ``node``."""

    start_ns: int
    end_ns: int
    cause: str
    node: int
    gap: bool = False  #: charged in the CPU gap (or launch gap) before the node, not while it ran


def _in_order(charges: dict[str, int], last: str) -> list[tuple[str, int]]:
    """A node's charges of one side in time order: the edge's cause first, its own cause last."""
    out = [(c, charges[c]) for c in CAUSES if c != last and charges.get(c, 0) > 0]
    return out + ([(last, charges[last])] if charges.get(last, 0) > 0 else [])


def critical_segments(graph: TaskGraph, tl: Timeline) -> tuple[np.ndarray, list[Segment]]:
    """The critical path of ``tl`` (node ids, last first, as :func:`critical_path`) and its
    segments in time order, tiling [start of the path, end of its last task] (ns).

    The segments are :func:`critical_path`'s own charges, obtained through its per-phase
    breakdown with every node its own phase (the CPU gap before a node its own gap phase), so
    they add up to the path's ``by_cause_ns``. Within a node the walk's order is kept: what set
    the node's base (an edge's offset, then the gap), or what set its start (an edge's offset or
    its busy lane), then its own duration; a blocking call reached at its end is charged only
    the time after what it waited for ended.
    """
    n = graph.n
    if n == 0:
        return np.zeros(0, np.int64), []
    codes = np.arange(n, dtype=np.int64)
    path, cp = critical_path(graph, tl, _NodeCodes(), codes, codes + n)  # type: ignore[arg-type]
    by = {k: dict(v) for k, v in cp.by_phase_ns.items()}
    cpu = graph.node_kind == NODE_CPU
    comm = communication_mask(graph)
    u, c = np.unique(path, return_counts=True)
    twice = set(u[c > 1].tolist())
    segs: list[Segment] = []
    t = int(tl.end_ns[path[0]]) if len(path) else 0
    for v in path.tolist():
        if v in twice:  # the later of its two visits: reached at its end, after a wait
            twice.discard(v)
            order = _wait_charge(graph, tl, v, by.setdefault(str(v), {}))
        else:
            own_last = "cpu" if cpu[v] else "copy" if graph.node_kind[v] == Kind.MEMCPY else ("communication" if comm[v] else "gpu_compute")
            order = ([(c_, ns, True) for c_, ns in _in_order(by.get(str(v + n), {}), "cpu" if cpu[v] else "launch")]
                     + [(c_, ns, False) for c_, ns in _in_order(by.get(str(v), {}), own_last)])
        for cause, ns, gap in reversed(order):
            segs.append(Segment(t - ns, t, cause, v, gap))
            t -= ns
    segs.reverse()
    return path, segs


def _wait_charge(graph: TaskGraph, tl: Timeline, v: int, charges: dict[str, int]) -> list[tuple[str, int, bool]]:
    """The charge of a blocking call's visit at its end (the walk returns to its start later,
    through an edge anchored there, e.g. a synchronous copy's launch): the time from what it
    waited for until its end, by the wait edge's cause; taken out of ``charges``."""
    tb = with_bindings(graph, tl)
    e = int(tb.bound_end[v])
    if e < 0:
        return []
    k = int(graph.edge_kind[e])
    src = int(graph.edge_src[e])
    tu = int(tl.end_ns[src]) if rule_arrays().anchor_end[k] else int(tl.start_ns[src])
    cause = RULES[k].cause if k in RULES else "cpu"
    ns = int(tl.end_ns[v]) - tu
    if ns <= 0:
        return []
    charges[cause] = charges.get(cause, 0) - ns
    return [(cause, ns, False)]


def _critical_track_events(d: _Drawn, segs: list[Segment], pid: int, fid: int) -> tuple[list[dict], int]:
    """The critical path as a track of slices named by cause on (``pid``, thread 0), each with
    the task it was charged at; a flow arrow where the path passes from one lane (thread or
    stream) to another, from the earlier task (at its last moment on the path) to the later one
    (at its start, or inside it when it was reached at its end), never backwards in time; and
    the next free flow id."""
    names = d.graph.node_names()
    lane = d.graph.lane
    ev = []
    for sg in segs:
        ev.append({"ph": "X", "cat": "critical_path", "name": CAUSE_LABELS.get(sg.cause, sg.cause), "pid": pid, "tid": 0,
                   "ts": d.us(sg.start_ns), "dur": (sg.end_ns - sg.start_ns) / 1000.0, "args": {("before task" if sg.gap else "task"): str(names[sg.node]), "cause": sg.cause}})
    prev, boundary = -1, 0
    for sg in segs:
        v = sg.node
        if prev >= 0 and v != prev and lane[v] != lane[prev]:
            s_ts = max(d.starts[prev], min(boundary, d.ends[prev] - 1))
            f_ts = max(s_ts, d.starts[v] if d.starts[v] >= boundary else d.ends[v] - 1)
            ev.append(_flow("s", "critical_path", "critical path", fid, d.place(prev), d.us(s_ts)))
            ev.append(_flow("f", "critical_path", "critical path", fid, d.place(v), d.us(f_ts)))
            fid += 1
        prev, boundary = v, sg.end_ns
    return ev, fid


def _window_events(d: _Drawn, pid: int) -> list[dict]:
    """Each ProfilerStep's window (its CPU range with the GPU work it launched, as the report
    counts it) as a slice on (``pid``, thread 1)."""
    return [{"ph": "X", "cat": "step_window", "name": f"{w.name} window", "pid": pid, "tid": 1, "ts": d.us(w.replayed_start_ns),
             "dur": (w.replayed_end_ns - w.replayed_start_ns) / 1000.0, "args": {"ms": (w.replayed_end_ns - w.replayed_start_ns) / 1e6}}
            for w in step_windows(d.graph, d.tl)]


def _memory_counter_events(d: _Drawn, pid: int) -> list[dict]:
    """A counter track "allocated bytes" per device (Chrome trace ``C`` events) from the memory
    replay of the drawn timeline: the bytes allocated after each allocator event."""
    if d.graph.memory is None:
        return []
    ev = []
    for dm in replay_memory(d.graph, d.tl):
        name = f"allocated bytes ({'host' if dm.device < 0 else f'GPU {dm.device}'})"
        ev += [{"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": d.us(t), "args": {"bytes": b}}
               for t, b in zip(dm.ts_ns.tolist(), dm.allocated_bytes.tolist())]
    return ev


def _range_events(d: _Drawn) -> list[dict]:
    """The CPU ranges (framework ops, annotations, DataLoader, optimizer; not ProfilerSteps,
    drawn by :func:`_step_events`) on their thread, moved with its calls (:func:`daydream.simulate.carry.carry`)."""
    t = d.t
    rows = cpu_range_rows(t)
    if not len(rows):
        return []
    steps = t.name_ids(lambda x: x.startswith("ProfilerStep#"))
    rows = rows[~steps[t.name_id[rows]]]
    r = carry(d.graph, d.tl, rows)
    cats = np.where(t.kind[rows] == Kind.CPU_OP, "cpu_op", "user_annotation")
    return [{"ph": "X", "cat": str(c), "name": t.names[int(t.name_id[x])], "pid": int(t.pid[x]) + d.pid_off, "tid": int(t.tid[x]),
             "ts": d.us(a), "dur": (b - a) / 1000.0} for x, a, b, c in zip(rows.tolist(), r.start_ns.tolist(), r.end_ns.tolist(), cats.tolist())]


def _order_events(g: TaskGraph, offsets: tuple[int, int, int], gpu_pid: int, cp_pid: int, first: int) -> tuple[list[dict], int]:
    """``process_sort_index`` of a side's processes from ``first`` on: its critical path and
    step windows, its host processes, its GPUs; and the next free index."""
    pid_off, dev_off, _ = offsets
    t = g.table
    host = sorted(set((g.lane_keys[~g.lane_is_gpu, 1] + pid_off).tolist()) | set((t.pid[t.device < 0] + pid_off).tolist()))
    gpus = sorted(set((g.lane_keys[g.lane_is_gpu, 2] + dev_off + gpu_pid).tolist()))
    ev = [{"ph": "M", "name": "process_sort_index", "pid": p, "tid": 0, "args": {"sort_index": first + i}}
          for i, p in enumerate([cp_pid, *host, *gpus])]
    return ev, first + len(ev)


def _side_events(side: tuple[TaskGraph, Timeline], base_ns: int, label: str, offsets: tuple[int, int, int], gpu_pid: int,
                 critical: dict[int, np.ndarray], i: int, annotations: dict | None, fid: int) -> tuple[list[dict], list[dict], int]:
    """The events of timeline ``i`` (0 predicted, 1 baseline), its critical path track, step
    windows and flows, and the next free flow id."""
    d = _Drawn(*side, base_ns, *offsets, gpu_pid=gpu_pid)
    mask = np.zeros(d.graph.n, bool)
    if i in critical:
        mask[critical[i]] = True
    events = _events(d, label, mask, annotations)
    cp_pid = gpu_pid - 1 - i  # within GPU_PID_BELOW
    names = "critical path" if i in critical else ""
    track = [{"ph": "M", "name": "process_name", "pid": cp_pid, "tid": 0, "args": {"name": f"{label}{names + ' and ' if names else ''}step windows"}},
             {"ph": "M", "name": "thread_name", "pid": cp_pid, "tid": 0, "args": {"name": "critical path (by cause)"}},
             {"ph": "M", "name": "thread_name", "pid": cp_pid, "tid": 1, "args": {"name": "ProfilerStep windows"}}]
    track += _window_events(d, cp_pid) + _memory_counter_events(d, cp_pid)
    if i in critical:
        ev, fid = _critical_track_events(d, critical_segments(*side)[1], cp_pid, fid)
        track += ev
    return events, track, fid


#: pids from the GPU base up: each side's GPUs (base + device, base + BASELINE_DEVICE_OFFSET + device)
GPU_PID_SPAN = 2 * BASELINE_DEVICE_OFFSET
#: pids below the GPU base: the two critical-path tracks and synchronization records without a device
GPU_PID_BELOW = 3


def _gpu_pid_base(sides) -> int:
    """The pid of GPU 0 in the file: a multiple of 1000 whose block [base - GPU_PID_BELOW, base +
    GPU_PID_SPAN) holds no host pid drawn (a trace's process ids, + BASELINE_PID_OFFSET for the
    baseline), so a GPU never shares a host's pid: the first above every host pid when that stays
    below 2^31 (pids readers keep in 32 bits), else the lowest free block."""
    hosts = []
    for (g, _tl), _label, (pid_off, _d, _c) in sides:
        t = g.table
        hosts.append(np.concatenate([g.lane_keys[~g.lane_is_gpu, 1], t.pid[t.device < 0]]).astype(np.int64) + np.int64(pid_off))
    h = sorted_unique(np.concatenate(hosts)) if hosts else np.zeros(0, np.int64)
    above = ((int(h.max()) + GPU_PID_BELOW) // 1000 + 1) * 1000 if len(h) else 1000
    if above + GPU_PID_SPAN < 2**31:
        return above
    base = 1000
    while True:
        lo, hi = np.searchsorted(h, [base - GPU_PID_BELOW, base + GPU_PID_SPAN])
        if lo == hi:
            return base
        base += 1000


def _write(path: str, doc: dict) -> None:
    data = orjson.dumps(doc)
    if str(path).endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    with open(path, "wb") as f:
        f.write(data)


def write_timeline(path: str, predicted: tuple[TaskGraph, Timeline], baseline: tuple[TaskGraph, Timeline] | None = None,
                   *, critical: dict[int, np.ndarray] | None = None, annotations: list[dict | None] | None = None) -> None:
    """Write the predicted timeline (and the baseline replay, if given) to ``path`` (gzip if it
    ends in .gz).

    Args:
        predicted, baseline: (graph, timeline) pairs.
        critical: node ids on the critical path, by position (0 predicted, 1 baseline).
        annotations: per timeline, ``{"layer": (codes, labels), "phase": ..., "op": ...}``.

    Raises:
        OSError: the file cannot be written (the CLI turns it into a usage error).
    """
    _write(path, timeline_doc(predicted, baseline, critical=critical, annotations=annotations))


def write_job_timeline(path: str, ranks: list[tuple[int, dict, int]]) -> None:
    """Write one Chrome-trace JSON of a job (gzip if ``path`` ends in .gz): ``ranks`` holds per
    rank (rank number, its :func:`timeline_doc`, the ns to add to its times to put them on the
    job's clock: the lowest rank's). Each rank's processes (host, GPUs, critical path) get pids of
    their own, numbered from 1 in rank order, named ``rank R: ...``, and sorted rank by rank; flow
    ids are renumbered so that no two ranks share one; times move onto one base.

    Raises:
        OSError: the file cannot be written (the CLI turns it into a usage error).
    """
    base_ns = min((d["baseTimeNanoseconds"] + shift for _, d, shift in ranks), default=0)
    base_ns = (base_ns // 1_000_000_000) * 1_000_000_000
    events: list[dict] = []
    devices: list[dict] = []
    next_pid, next_flow, next_sort = 1, 1, 0
    for r, doc, shift in ranks:
        evs = doc["traceEvents"]
        pids = sorted({e["pid"] for e in evs if "pid" in e})
        pid_map = {p: next_pid + i for i, p in enumerate(pids)}
        next_pid += len(pids)
        flows = sorted({e["id"] for e in evs if "id" in e and e.get("ph") in ("s", "t", "f")})
        flow_map = {f: next_flow + i for i, f in enumerate(flows)}
        next_flow += len(flows)
        dt_us = (doc["baseTimeNanoseconds"] + shift - base_ns) / 1000.0
        for e in evs:  # the events of a rank's file, as the single-trace writer makes them
            e = dict(e)
            if "pid" in e:
                e["pid"] = pid_map[e["pid"]]
            if "ts" in e:
                e["ts"] = e["ts"] + dt_us
            if "id" in e and e.get("ph") in ("s", "t", "f"):
                e["id"] = flow_map[e["id"]]
            if e.get("ph") == "M" and e["name"] == "process_name":
                e["args"] = {"name": f"rank {r}: {e['args']['name']}"}
            elif e.get("ph") == "M" and e["name"] == "process_sort_index":
                e["args"] = {"sort_index": next_sort + e["args"]["sort_index"]}
            events.append(e)
        next_sort += 1 + max((e["args"]["sort_index"] for e in evs if e.get("ph") == "M" and e["name"] == "process_sort_index"), default=0)
        devices += [{"id": x["id"], "name": f"rank {r}: {x['name']}"} for x in doc.get("deviceProperties", [])]
    _write(path, {
        "schemaVersion": 1,
        "displayTimeUnit": "ns",
        "baseTimeNanoseconds": base_ns,
        "deviceProperties": devices,
        "traceName": f"{TRACE_NAME_PREFIX}job of {len(ranks)} ranks",
        "traceEvents": events,
    })


def timeline_doc(predicted: tuple[TaskGraph, Timeline], baseline: tuple[TaskGraph, Timeline] | None = None,
                 *, critical: dict[int, np.ndarray] | None = None, annotations: list[dict | None] | None = None) -> dict:
    """The Chrome-trace document :func:`write_timeline` writes (arguments as there)."""
    g = predicted[0]
    base_ns = (int(g.t0_ns) // 1_000_000_000) * 1_000_000_000
    sides = [(predicted, "predicted: " if baseline else "", (0, 0, 0))]
    if baseline:
        sides.append((baseline, "baseline: ", (BASELINE_PID_OFFSET, BASELINE_DEVICE_OFFSET, BASELINE_CORRELATION_OFFSET)))
    gpu_pid = _gpu_pid_base(sides)
    ann = annotations or [None, None]
    events, chains, order = [], [], []
    fid = 1 << 41  # critical path chains: after all other events, flow ids from here on
    for i, (side, label, offsets) in enumerate(sides):
        ev, chain, fid = _side_events(side, base_ns, label, offsets, gpu_pid, critical or {}, i, ann[i] if i < len(ann) else None, fid)
        events += ev
        chains += chain
    nxt = 0
    for i in reversed(range(len(sides))):  # the baseline above the prediction
        ev, nxt = _order_events(sides[i][0][0], sides[i][2], gpu_pid, gpu_pid - 1 - i, nxt)
        order += ev
    return {
        "schemaVersion": 1,
        "displayTimeUnit": "ns",
        "baseTimeNanoseconds": base_ns,
        "deviceProperties": [{"id": d.id, "name": d.name} for d in g.table.meta.devices],
        "traceName": f"{TRACE_NAME_PREFIX}{g.table.meta.source}",
        "traceEvents": order + events + chains,
    }
