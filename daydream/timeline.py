"""Write simulated timelines as Chrome-trace JSON that Perfetto, chrome://tracing and daydream's own
Kineto adapter open.

One file holds the predicted timeline (real process, thread, device and stream ids) and, when
given, the baseline replay beside it (process ids + ``BASELINE_PID_OFFSET`` and devices +
``BASELINE_DEVICE_OFFSET``, correlation ids + ``BASELINE_CORRELATION_OFFSET``, named
"baseline ..."). Every task is a Kineto-style event:
``cuda_runtime``/``cuda_driver`` calls on their thread, ``kernel``/``gpu_memcpy``/``gpu_memset`` on
pid = device, tid = stream, with the correlation ids, ``ac2g`` launch flows, and ``cuda_sync``
records that name what each synchronizing call and cross-stream wait depended on, so reading the
file back rebuilds the same graph. Layer, phase and op are in ``args`` when the graph is mapped;
the critical path is marked (``args.critical_path = 1``) and drawn as a chain of flow arrows
(category ``critical_path``); other dependency edges are flow arrows of category ``dependency``.

Beside the terminal text (:mod:`daydream.render_text`) and the JSON document
(:func:`daydream.report.report_json`), this is the third rendering of an analysis: it draws the
graphs and timelines the report was computed from, with the report's step windows
(:func:`daydream.report.step_windows`). Each kind of event has its own function below.
"""

from __future__ import annotations

import gzip

import numpy as np
import orjson

from .events import Kind, SyncKind
from .graph import NODE_CPU, Origin, Phase, TaskGraph, kind_name, profiler_steps, rule_arrays
from .report import step_windows
from .simulate import Timeline

BASELINE_PID_OFFSET = 10_000_000
BASELINE_DEVICE_OFFSET = 1000
BASELINE_CORRELATION_OFFSET = 1 << 36  #: keeps the two copies' correlation ids apart
_GPU_CAT = {int(Kind.KERNEL): "kernel", int(Kind.MEMCPY): "gpu_memcpy", int(Kind.MEMSET): "gpu_memset"}
_SYNC_NAME = {int(SyncKind.EVENT_SYNC): "Event Sync", int(SyncKind.STREAM_WAIT_EVENT): "Stream Wait Event",
              int(SyncKind.STREAM_SYNC): "Stream Sync", int(SyncKind.CONTEXT_SYNC): "Context Sync"}


class _Drawn:
    """One graph and its timeline as drawn in the file: where each node goes (process or device,
    thread or stream), the correlation ids it carries, and its times in microseconds from ``base_ns``."""

    def __init__(self, graph: TaskGraph, tl: Timeline, base_ns: int, pid_off: int, dev_off: int, corr_off: int) -> None:
        self.graph, self.t, self.tl = graph, graph.table, tl
        self.base_ns, self.pid_off, self.dev_off, self.corr_off = base_ns, pid_off, dev_off, corr_off
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
        return int(self.lk[v, 2]) + self.dev_off, int(self.lk[v, 3])


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
    for v in range(n):
        args = _task_args(d, v, crit, ann)
        if cpu[v]:
            cat = cats[v] if has_row[v] and cats[v] in ("cuda_runtime", "cuda_driver") else "cuda_runtime"
            ev.append({"ph": "X", "cat": cat, "name": names[v], "pid": int(d.pid[v]), "tid": int(lk[v, 2]),
                       "ts": d.us(d.starts[v]), "dur": d.dur(v), "args": args})
            continue
        dev, stream = d.place(v)
        args.update({"device": dev, "stream": stream})
        if has_row[v] and graph.node_kind[v] != Kind.KERNEL and t.bytes[r0[v]] >= 0:
            args["bytes"] = int(t.bytes[r0[v]])
        ev.append({"ph": "X", "cat": _GPU_CAT[int(graph.node_kind[v])], "name": names[v], "pid": dev, "tid": stream,
                   "ts": d.us(d.starts[v]), "dur": d.dur(v), "args": args})
        if gl[v] >= 0:
            # flow ids are global in Chrome traces: make (process, correlation) unique
            fl = int(d.flow_base + int(pid_index[v]) * (1 << 40) + d.corr[v])
            ev.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": fl, "pid": int(d.pid[gl[v]]), "tid": int(lk[gl[v], 2]), "ts": d.us(d.starts[gl[v]])})
            ev.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": fl, "bp": "e", "pid": dev, "tid": stream, "ts": d.us(d.starts[v])})
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
        if sk in (SyncKind.EVENT_SYNC, SyncKind.STREAM_WAIT_EVENT):
            a["wait_on_stream"] = int(t.link_stream[r])
            lc = int(t.link_correlation[r])
            a["wait_on_cuda_event_record_corr_id"] = lc + d.corr_off if lc >= 0 else -1
        ev.append({"ph": "X", "cat": "cuda_sync", "name": a["cuda_sync_kind"], "pid": a["device"] if a["device"] >= 0 else 0,
                   "tid": a["stream"], "ts": d.us(d.starts[v]), "dur": d.dur(v), "args": a})
    return ev


def _dependency_events(d: _Drawn) -> list[dict]:
    """A flow arrow per edge that is not lane order or a launch (those are drawn as lanes and
    launch flows), named by its kind (``blocking wait``, ``cross-stream wait``, any registered
    kind), from the point its rule anchors at on the source (end or start) to the point it bounds
    on the destination (a waiting call's end; otherwise the destination's start)."""
    graph = d.graph
    ra = rule_arrays()
    k = graph.edge_kind
    m = ~ra.lane[k] & ~ra.launch[k]
    e_ids = np.nonzero(m)[0]
    e_ids = e_ids[np.lexsort((graph.edge_src[e_ids], graph.edge_dst[e_ids]))]
    fid = (1 << 50) + d.flow_base
    ev = []
    for e in e_ids.tolist():
        s_, d_, kk = int(graph.edge_src[e]), int(graph.edge_dst[e]), int(k[e])
        t_s = d.ends[s_] if ra.anchor_end[kk] else d.starts[s_]
        t_d = d.ends[d_] if ra.phase[kk] == Phase.END else d.starts[d_]
        origin = Origin(int(graph.edge_origin[e])).name.lower()
        ev.append(_flow("s", "dependency", kind_name(kk), fid, d.place(s_), d.us(t_s)))
        f = _flow("f", "dependency", kind_name(kk), fid, d.place(d_), d.us(t_d))
        if origin != "recorded":
            ev[-1]["args"] = f["args"] = {"origin": origin}
        ev.append(f)
        fid += 1
    return ev


def _lane_name_events(graph: TaskGraph, label: str, pid_off: int, dev_off: int) -> list[dict]:
    """Process and thread names: "process P" / "thread T", "GPU D" / "stream S"."""
    ev = []
    for k in graph.lane_keys.tolist():
        if k[0]:
            p_, tid_, nm = k[2] + dev_off, k[3], f"stream {k[3]}"
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
    dependency arrows, lane names and steps."""
    return (_task_events(d, critical, annotations) + _sync_events(d) + _dependency_events(d)
            + _lane_name_events(d.graph, label, d.pid_off, d.dev_off) + _step_events(d))


def _critical_path_events(d: _Drawn, path: np.ndarray, fid: int) -> tuple[list[dict], int]:
    """The critical path (node ids, last first) as a chain of flow arrows from task start to task
    start, with flow ids from ``fid`` on; and the next free flow id."""
    chain = path[::-1].tolist()
    ev = []
    for a, b in zip(chain, chain[1:]):
        ev.append(_flow("s", "critical_path", "critical path", fid, d.place(a), d.us(d.starts[a])))
        ev.append(_flow("f", "critical_path", "critical path", fid, d.place(b), d.us(d.starts[b])))
        fid += 1
    return ev, fid


def _side_events(side: tuple[TaskGraph, Timeline], base_ns: int, label: str, offsets: tuple[int, int, int],
                 critical: dict[int, np.ndarray], i: int, annotations: dict | None, fid: int) -> tuple[list[dict], list[dict], int]:
    """The events of timeline ``i`` (0 predicted, 1 baseline), its critical path flows, and the next free flow id."""
    d = _Drawn(*side, base_ns, *offsets)
    mask = np.zeros(d.graph.n, bool)
    if i in critical:
        mask[critical[i]] = True
    events = _events(d, label, mask, annotations)
    chain: list[dict] = []
    if i in critical:
        chain, fid = _critical_path_events(d, critical[i], fid)
    return events, chain, fid


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
    g = predicted[0]
    base_ns = (int(g.t0_ns) // 1_000_000_000) * 1_000_000_000
    sides = [(predicted, "predicted: " if baseline else "", (0, 0, 0))]
    if baseline:
        sides.append((baseline, "baseline: ", (BASELINE_PID_OFFSET, BASELINE_DEVICE_OFFSET, BASELINE_CORRELATION_OFFSET)))
    ann = annotations or [None, None]
    events, chains = [], []
    fid = 1 << 41  # critical path chains: after all other events, flow ids from here on
    for i, (side, label, offsets) in enumerate(sides):
        ev, chain, fid = _side_events(side, base_ns, label, offsets, critical or {}, i, ann[i] if i < len(ann) else None, fid)
        events += ev
        chains += chain
    _write(path, {
        "schemaVersion": 1,
        "displayTimeUnit": "ns",
        "baseTimeNanoseconds": base_ns,
        "deviceProperties": [{"id": d.id, "name": d.name} for d in g.table.meta.devices],
        "traceName": f"daydream timeline of {g.table.meta.source}",
        "traceEvents": events + chains,
    })
