"""``build_graph``: runs the builder stages in order (``docs/model.md`` is the contract).

formats -> events -> mapping -> **graph**: the stages read the :class:`EventTable` (and the
mapping's per-row arrays) and produce a self-contained :class:`TaskGraph`; nothing later reads
the table to replay or transform.
"""

from __future__ import annotations

import numpy as np

from ...util.arrays import small_pages
from ...events.cuda_api import LAUNCH_QUEUE_DEPTH, default_launch_latency
from ...events.table import EventTable, Kind
from ...events.links import only_process
from .._arrays import Counts, count
from ..edges import EdgeKind, Origin
from ..facts import trace_facts
from .graph_launch import graph_launches
from .inferred import infer_unlinked_waits, unlinked_consumers
from .assemble import node_columns, order_edges
from .handover import handover_edges, own_gaps
from .latency import launch_latency_and_gap
from .staging import measure_staging
from ..model import NODE_CPU, CpuRanges, TaskGraph, concat_edges, dedupe_edges
from ..order import repair_order
from ..memory_part import capture_memory
from ..queue import queue_edges
from .tasks import cpu_tasks, durations_and_gaps, gpu_task_rows, lanes_and_order, link_launches
from .waits import (
    RecordCalls,
    WaitIndex,
    api_roles,
    blocking_copy_waits,
    copy_classes,
    cross_stream_waits,
    device_sync_waits,
    event_sync_waits,
    pageable_copy_edges,
    stream_pred_at_launch,
    stream_sync_waits,
    sync_info,
)


def _wait_edges(table, nodes, lanes, position, rec_start, rec_end, corr, name_id, gpu_rows, only, counts):
    """Stages 6-7: blocking waits (WAIT edges) and cross-stream waits (XSTREAM edges), after the
    graph launches on streams of their own (GRAPH edges, ``graph_launch.py``); also
    returns the lookups (index, roles, sync records) the inference stage reuses. ``rec_end``,
    ``corr``, ``name_id``: the table's end, correlation id and name id of every node."""
    cpu_rows = nodes.row[: nodes.n_cpu]
    role = api_roles(table, cpu_rows, name_id[: nodes.n_cpu])
    si = sync_info(table, cpu_rows, nodes.pid[: nodes.n_cpu], only, corr[: nodes.n_cpu])
    ix = WaitIndex(nodes, lanes, position, rec_start, corr)
    gl = graph_launches(ix, nodes, lanes, name_id[: nodes.n_cpu], table.names, rec_start, counts)  # installs them in ix
    rec = RecordCalls(ix, role)
    copy_prev = stream_pred_at_launch(ix, nodes, lanes)
    copies = copy_classes(table, nodes, gpu_rows, role, copy_prev, rec_start, rec_end)
    pw_s, pw_d = pageable_copy_edges(copies, copy_prev, nodes.n_cpu, rec_end, counts)
    parts = [stream_sync_waits(ix, role, si, counts), device_sync_waits(ix, role, si),
             event_sync_waits(ix, role, si, rec, counts), blocking_copy_waits(copies, nodes.n_cpu), (pw_s, pw_d)]
    ws = np.concatenate([p[0] for p in parts])
    wd = np.concatenate([p[1] for p in parts])
    keep = ws >= 0
    xs, xd = cross_stream_waits(ix, role, si, rec, counts)
    return ws[keep], wd[keep], xs, xd, (ix, role, si), copies, (gl.src, gl.dst)


def _own_costs(dur, rec_start, rec_end, ws, wd, counts) -> None:
    """Rule 3: a blocking call's own cost is ``end - max(start, latest recorded end waited for)``."""
    if not len(wd):
        return
    w_end = np.full(len(dur), np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(w_end, wd, rec_end[ws])
    b = np.flatnonzero(w_end > np.iinfo(np.int64).min)  # the distinct destinations, sorted
    own = rec_end[b] - np.maximum(rec_start[b], w_end[b])
    count(counts, "blocking call returned before what it waited for ended (own cost set to 0)", (own < 0).sum())
    dur[b] = np.maximum(own, 0)


def _cpu_ranges(table: EventTable, mapping=None) -> CpuRanges:
    """The CPU-side ranges and framework ops (``Kind.RANGE``/``CPU_OP`` rows off the GPU); the
    mapping's columns of them (``Mapping.cpu_range_columns``) when it has them."""
    cols = getattr(mapping, "cpu_range_columns", None)
    if cols is not None and len(mapping.phase) == len(table):
        return CpuRanges(*cols)
    k = table.kind
    r = np.nonzero(((k == Kind.RANGE) | (k == Kind.CPU_OP)) & (table.device < 0))[0]

    def col(a):
        return a[r].astype(np.int64, copy=False)

    return CpuRanges(col(table.pid), col(table.tid), col(table.start_ns), col(table.end_ns), col(table.name_id))


def _trace_start(table, t0, row, kind, launch, rec_start, position, counts) -> int:
    """The trace start ``t0`` (the earliest timestamp, ``docs/model.md``), leaving out GPU tasks
    recorded before their launching call started (damaged or skewed times; the replay places them
    after their launch anyway): one kernel recorded 1,000 s before its launch made the first CPU
    gap of every thread 1,000 s long, and the answer "bound by host work"."""
    early = (kind != NODE_CPU) & (launch >= 0) & (rec_start < position)
    if not early.any() or int(rec_start[early].min()) > t0:
        return t0
    keep = np.ones(len(table), bool)
    keep[row[early]] = False
    t = int(table.start_ns[keep].min()) if keep.any() else t0
    count(counts, "GPU task recorded starting before its launching call and before the rest of the trace (left out of the trace start)",
          int(np.count_nonzero(rec_start[early] < t)))
    return t


@small_pages
def build_graph(table: EventTable, mapping=None, launch_queue_depth: int = LAUNCH_QUEUE_DEPTH) -> TaskGraph:
    """Build the task graph of ``table`` following ``docs/model.md``.

    ``mapping`` (a :class:`daydream.mapping.maps.Mapping` of the same table) attaches each node's
    phase, layer and op (``TaskGraph.mapping``). ``launch_queue_depth``: launches a stream holds
    before a launching call blocks (QUEUE edges, ``graph/queue.py``; 0: unlimited, no edges).

    Never raises for odd but readable input: artefacts (GPU tasks that start before their launch,
    GPU tasks with no launching call, nested or overlapping API calls on a thread, blocking calls
    whose waited work ends after they return, waits that cannot be linked) are kept and counted
    in ``TaskGraph.counts``.
    """
    counts = Counts()
    t0 = int(table.start_ns.min()) if len(table) else 0
    cpu = cpu_tasks(table, counts, mapping.call_threads if mapping is not None and len(mapping.phase) == len(table) else None)
    gpu_rows = gpu_task_rows(table)
    only = only_process(table, cpu.rt_rows)
    nodes, (rec_start, rec_end, position, corr, name_id, copy_kind, lane_cols) = node_columns(
        table, cpu, gpu_rows, link_launches(table, cpu, gpu_rows, only, counts, mapping), only, counts)
    row, kind, launch = nodes.row, nodes.node_kind, nodes.launch
    t0 = _trace_start(table, t0, row, kind, launch, rec_start, position, counts)
    lanes = lanes_and_order(kind, nodes.pid, np.where(kind == NODE_CPU, nodes.tid, nodes.device) if lane_cols is None else None,
                            nodes.stream, position, launch, corr, row, rec_start, lane_cols)
    del lane_cols  # (their memory serves the stages after)
    position = lanes.position
    dur, gap = durations_and_gaps(kind, rec_start, rec_end, lanes.lane_prev, t0, counts)
    ws, wd, xs, xd, wctx, copies, (gs, gd) = _wait_edges(table, nodes, lanes, position, rec_start, rec_end, corr, name_id, gpu_rows, only, counts)
    is_gpu = kind != NODE_CPU
    qs, qd, depth = queue_edges(lanes.by_lane, lanes.lane, is_gpu, launch, launch_queue_depth, rec_end, counts)
    held = rec_end[qs] > rec_start[qd]  # launches the recorded queue held; elsewhere own = duration
    _own_costs(dur, rec_start, rec_end, np.concatenate([ws, qs[held]]), np.concatenate([wd, qd[held]]), counts)
    hs, hd = handover_edges(table, nodes.pid, nodes.tid, rec_start, rec_end, nodes.n_cpu, counts)
    own_gaps(gap, rec_start, rec_end, lanes.lane_prev, t0, hs, hd)
    staged = np.concatenate([np.zeros(nodes.n_cpu, bool), copies.staged])
    xgs, xgd = np.concatenate([xs, gs]), np.concatenate([xd, gd])  # the GPU predecessors beside stream order
    default_L = default_launch_latency(table.meta.devices)  # L where no launched task shows its stream idle
    L, G, S = launch_latency_and_gap(is_gpu, launch, lanes.lane_prev, rec_start, rec_end, xgs, xgd, staged, counts, default=default_L,
                                     unknown_producer=unlinked_consumers(*wctx, launch))
    sn = np.flatnonzero(staged)  # S as a function of size, fitted on the staged copies (graph/build/staging.py)
    S, staging_rows, staging_fit = measure_staging(sn, copies.nbytes[sn - nodes.n_cpu], launch, lanes.lane_prev, rec_start, rec_end,
                                                   xgs, xgd, L, S, copies.threshold, row)
    # after L and G, which it needs; L and G are kept (docs/model.md, "Inferred cross-stream waits");
    # its window G - tol .. G + max(tol, L) never collapses: an L measured 0 (no launch-to-start
    # delay shows, e.g. skewed clocks) widens it by the default instead
    ys, yd, (ls, ld) = infer_unlinked_waits(*wctx, nodes, lanes, position, rec_start, rec_end, xgs, xgd, L if L > 0 else default_L[0], G, counts)
    R = Origin.RECORDED
    dep_edges = dedupe_edges(*concat_edges([
        (ws, wd, EdgeKind.WAIT, R),
        (xs, xd, EdgeKind.XSTREAM, R),
        (hs, hd, EdgeKind.HANDOVER, Origin.INFERRED),
        (ys, yd, EdgeKind.XSTREAM, Origin.INFERRED),
        (gs, gd, EdgeKind.GRAPH, Origin.INFERRED),
    ]))
    # order edges first (one per task at most, unique by construction), then the queue edges (one
    # per launched task), then the dependency edges; tied or inconsistent timestamps (odd input)
    # can put a task before what it waits for; lane and launch edges (the first n_forward) point
    # forward in the lane order by construction
    src, dst, ek, eo, n_forward = order_edges(lanes.lane_prev, launch, is_gpu, staged, qs, qd, dep_edges)
    order, keep = repair_order(lanes.order, src, dst, ek, counts, n_forward)  # valid by construction
    nm = mapping.for_nodes(row) if mapping is not None else None
    all_kept = bool(keep.all())
    if not all_kept:  # (src, dst, ek, eo are this build's own arrays: kept as they are otherwise)
        src, dst, ek, eo = src[keep], dst[keep], ek[keep], eo[keep]
    graph = TaskGraph(
        table=table, row=row, node_kind=kind, lane=lanes.lane, lanes=lanes.names, lane_is_gpu=lanes.is_gpu,
        lane_keys=lanes.keys, name_id=name_id, names=list(table.names),
        pid=nodes.pid, tid=nodes.tid, device=nodes.device, stream=nodes.stream, correlation=corr,
        copy_kind=copy_kind, devices=list(table.meta.devices), cpu_ranges=_cpu_ranges(table, mapping),
        dur_ns=dur, gap_ns=gap, rec_start_ns=rec_start, rec_end_ns=rec_end, position_ns=position,
        order=order.astype(np.int64, copy=False), edge_src=src, edge_dst=dst, edge_kind=ek, edge_origin=eo,
        t0_ns=t0, launch_latency_ns=L, gpu_gap_ns=G, counts=counts, mapping=nm, launch_queue_depth=depth,
        staging_latency_ns=S, staging_rows=staging_rows, staging_fit=staging_fit, latent_waits=(row[ls], row[ld]) if len(ls) else (), facts=trace_facts(table),
    )
    if all_kept:  # every lane and launch edge as built: seed the graph's views of them (same arrays)
        graph.__dict__["lane_prev"], graph.__dict__["launch"] = lanes.lane_prev, launch
    graph.memory = capture_memory(table, graph)
    return graph.known_valid()
