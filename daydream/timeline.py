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
"""

from __future__ import annotations

import gzip

import numpy as np
import orjson

from .events import Kind, SyncKind
from .graph import NODE_CPU, TaskGraph, profiler_steps
from .report import step_windows
from .simulate import Timeline

BASELINE_PID_OFFSET = 10_000_000
BASELINE_DEVICE_OFFSET = 1000
BASELINE_CORRELATION_OFFSET = 1 << 36  #: keeps the two copies' correlation ids apart
_GPU_CAT = {int(Kind.KERNEL): "kernel", int(Kind.MEMCPY): "gpu_memcpy", int(Kind.MEMSET): "gpu_memset"}
_SYNC_NAME = {int(SyncKind.EVENT_SYNC): "Event Sync", int(SyncKind.STREAM_WAIT_EVENT): "Stream Wait Event",
              int(SyncKind.STREAM_SYNC): "Stream Sync", int(SyncKind.CONTEXT_SYNC): "Context Sync"}


def _events(graph: TaskGraph, tl: Timeline, base_ns: int, label: str, pid_off: int, dev_off: int,
            critical: np.ndarray | None, annotations: dict | None, corr_off: int = 0) -> list[dict]:
    t = graph.table
    n = graph.n
    names = graph.node_names()
    row = graph.row
    r0 = np.maximum(row, 0)
    has_row = row >= 0
    lk = graph.lane_keys[graph.lane]
    pid = lk[:, 1] + pid_off
    cpu = graph.node_kind == NODE_CPU
    # correlation ids: keep the trace's; new ones for inserted calls; a GPU task takes its
    # launching call's id (its launch may have changed by a transformation)
    corr = np.where(has_row, t.correlation[r0], -1).astype(np.int64)
    nxt = int(corr.max()) + 1 if n else 1
    new = cpu & (corr < 0)
    corr[new] = np.arange(nxt, nxt + int(new.sum()))
    gl = graph.launch
    corr[~cpu] = np.where(gl[~cpu] >= 0, corr[np.maximum(gl[~cpu], 0)], -1)
    corr[corr >= 0] += corr_off
    cats = np.asarray(t.names, dtype=object)[t.cat_id[r0]] if len(t.names) else np.full(n, "", object)
    us = lambda x: (int(x) - base_ns) / 1000.0  # noqa: E731 - exact: < 16 significant digits
    crit = critical if critical is not None else np.zeros(n, bool)
    ann = annotations or {}
    ev: list[dict] = []
    starts, ends = tl.start_ns.tolist(), tl.end_ns.tolist()
    pid_index = np.unique(lk[:, 1], return_inverse=True)[1].reshape(-1)
    flow_base = (1 << 52) if corr_off else 0  # the baseline copy's flows apart from the prediction's
    for v in range(n):
        args: dict = {"correlation": int(corr[v])} if corr[v] >= 0 else {}
        if crit[v]:
            args["critical_path"] = 1
        for key, (codes, labels) in ann.items():
            c = int(codes[v])
            if c >= 0:
                args[key] = labels[c]
        if cpu[v]:
            cat = cats[v] if has_row[v] and cats[v] in ("cuda_runtime", "cuda_driver") else "cuda_runtime"
            ev.append({"ph": "X", "cat": cat, "name": names[v], "pid": int(pid[v]), "tid": int(lk[v, 2]),
                       "ts": us(starts[v]), "dur": (ends[v] - starts[v]) / 1000.0, "args": args})
        else:
            dev = int(lk[v, 2]) + dev_off
            stream = int(lk[v, 3])
            args.update({"device": dev, "stream": stream})
            if has_row[v] and graph.node_kind[v] != Kind.KERNEL and t.bytes[r0[v]] >= 0:
                args["bytes"] = int(t.bytes[r0[v]])
            ev.append({"ph": "X", "cat": _GPU_CAT[int(graph.node_kind[v])], "name": names[v], "pid": dev, "tid": stream,
                       "ts": us(starts[v]), "dur": (ends[v] - starts[v]) / 1000.0, "args": args})
            if gl[v] >= 0:
                # flow ids are global in Chrome traces: make (process, correlation) unique
                fl = int(flow_base + int(pid_index[v]) * (1 << 40) + corr[v])
                ev.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": fl, "pid": int(pid[gl[v]]), "tid": int(lk[gl[v], 2]), "ts": us(starts[gl[v]])})
                ev.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": fl, "bp": "e", "pid": dev, "tid": stream, "ts": us(starts[v])})
    # synchronization records of the calls that had them in the trace
    sy = np.nonzero(t.kind == Kind.SYNC)[0]
    if len(sy):
        key = {(int(t.pid[r]), int(t.correlation[r])): r for r in sy.tolist()}
        # record calls' new correlation ids: same as the trace's (kept rows keep theirs)
        for v in np.nonzero(cpu & has_row)[0].tolist():
            r = key.get((int(t.pid[row[v]]), int(t.correlation[row[v]])))
            if r is None:
                continue
            sk = int(t.sync_kind[r])
            a = {"cuda_sync_kind": _SYNC_NAME.get(sk, "Unknown"), "stream": int(t.stream[r]), "correlation": int(corr[v]),
                 "device": int(t.device[r]) + dev_off if t.device[r] >= 0 else -1}
            if sk in (SyncKind.EVENT_SYNC, SyncKind.STREAM_WAIT_EVENT):
                a["wait_on_stream"] = int(t.link_stream[r])
                lc = int(t.link_correlation[r])
                a["wait_on_cuda_event_record_corr_id"] = lc + corr_off if lc >= 0 else -1
            ev.append({"ph": "X", "cat": "cuda_sync", "name": a["cuda_sync_kind"], "pid": a["device"] if a["device"] >= 0 else 0,
                       "tid": a["stream"], "ts": us(starts[v]), "dur": (ends[v] - starts[v]) / 1000.0, "args": a})
    # dependency arrows (waits and cross-stream) and the critical path chain
    dst = np.repeat(np.arange(n), np.diff(graph.pred_ptr))
    fid = (1 << 50) + flow_base
    for s_, d_ in zip(graph.pred_idx.tolist(), dst.tolist()):
        for v, ph, tt in ((s_, "s", ends[s_]), (d_, "f", ends[d_] if cpu[d_] else starts[d_])):
            p_, tid_ = (int(pid[v]), int(lk[v, 2])) if cpu[v] else (int(lk[v, 2]) + dev_off, int(lk[v, 3]))
            e = {"ph": ph, "cat": "dependency", "name": "dependency", "id": fid, "pid": p_, "tid": tid_, "ts": us(tt)}
            if ph == "f":
                e["bp"] = "e"
            ev.append(e)
        fid += 1
    # process / thread names
    for k in graph.lane_keys.tolist():
        if k[0]:
            p_, tid_, nm = k[2] + dev_off, k[3], f"stream {k[3]}"
            ev.append({"ph": "M", "name": "process_name", "pid": p_, "tid": 0, "args": {"name": f"{label}GPU {k[2]}"}})
        else:
            p_, tid_, nm = k[1] + pid_off, k[2], f"thread {k[2]}"
            ev.append({"ph": "M", "name": "process_name", "pid": p_, "tid": 0, "args": {"name": f"{label}process {k[1]}"}})
        ev.append({"ph": "M", "name": "thread_name", "pid": p_, "tid": tid_, "args": {"name": nm}})
    # steps, on the thread of their ProfilerStep
    for (name, _s, _e, rs, r_e, _m, _note), (_n, _a, _b, spid, stid) in zip(step_windows(graph, tl), profiler_steps(graph.table)):
        ev.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": spid + pid_off, "tid": stid, "ts": us(rs), "dur": (r_e - rs) / 1000.0, "args": {}})
    return ev


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
    g, tl = predicted
    t0 = int(g.t0_ns)
    base_ns = (t0 // 1_000_000_000) * 1_000_000_000
    crit_masks = []
    for i, (gg, _) in enumerate([predicted] + ([baseline] if baseline else [])):
        m = np.zeros(gg.n, bool)
        if critical and i in critical:
            m[critical[i]] = True
        crit_masks.append(m)
    ann = annotations or [None, None]
    events = _events(g, tl, base_ns, "predicted: " if baseline else "", 0, 0, crit_masks[0], ann[0])
    if baseline:
        bg, btl = baseline
        events += _events(bg, btl, base_ns, "baseline: ", BASELINE_PID_OFFSET, BASELINE_DEVICE_OFFSET, crit_masks[1],
                          ann[1] if len(ann) > 1 else None, corr_off=BASELINE_CORRELATION_OFFSET)
    # critical path chains as flows
    fid = 1 << 41
    for i, (gg, gtl) in enumerate([predicted] + ([baseline] if baseline else [])):
        if not critical or i not in critical:
            continue
        off_p, off_d = (0, 0) if i == 0 else (BASELINE_PID_OFFSET, BASELINE_DEVICE_OFFSET)
        chain = critical[i][::-1].tolist()
        lk = gg.lane_keys[gg.lane]
        for a, b in zip(chain, chain[1:]):
            for v, ph, tt in ((a, "s", gtl.start_ns[a]), (b, "f", gtl.start_ns[b])):
                if gg.node_kind[v] == NODE_CPU:
                    p_, tid_ = int(lk[v, 1]) + off_p, int(lk[v, 2])
                else:
                    p_, tid_ = int(lk[v, 2]) + off_d, int(lk[v, 3])
                e = {"ph": ph, "cat": "critical_path", "name": "critical path", "id": fid, "pid": p_, "tid": tid_, "ts": (int(tt) - base_ns) / 1000.0}
                if ph == "f":
                    e["bp"] = "e"
                events.append(e)
            fid += 1
    doc = {
        "schemaVersion": 1,
        "displayTimeUnit": "ns",
        "baseTimeNanoseconds": base_ns,
        "deviceProperties": [{"id": d.id, "name": d.name} for d in g.table.meta.devices],
        "traceName": f"daydream timeline of {g.table.meta.source}",
        "traceEvents": events,
    }
    data = orjson.dumps(doc)
    if str(path).endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    with open(path, "wb") as f:
        f.write(data)
