"""Insert: new tasks placed on lanes after anchors, with their launches and waits."""

from __future__ import annotations

import dataclasses
from typing import Iterable

import numpy as np

from ..util.arrays import sorted_unique
from ..errors import DaydreamError
from ..events.table import Kind
from ..graph import NODE_CPU, EdgeKind, Origin, TaskGraph
from ..graph.queue import requeue
from .graph_copy import _append_node, _relink_lane_successors, _take_nodes, _with_valid_order
from .selection import KIND_NAMES


def insert(
    graph: TaskGraph,
    *,
    after: int,
    dur_ns: int,
    name: str,
    kind: str = "kernel",
    lane: int | None = None,
    launch: int | None = None,
    gap_ns: int = 0,
    preds: Iterable[int] = (),
    succs: Iterable[int] = (),
) -> tuple[TaskGraph, int]:
    """New graph with one task inserted right after ``after`` on ``lane`` (default: after's lane).

    Args:
        after: anchor node; the new task follows it on the lane (the anchor's lane successor now
            follows the new task).
        dur_ns: duration, ns. kind: "cpu", "kernel", "memcpy" or "memset".
        launch: for GPU tasks, the CPU node launching it (its start + L makes it ready).
        gap_ns: for CPU tasks, the CPU gap before it.
        preds: GPU tasks the new task waits for: cross-stream producers of a new GPU task, or
            GPU tasks a new CPU task blocks on (which makes it a blocking call).
        succs: tasks that wait for the new (GPU) task: cross-stream consumers (GPU) or blocking
            calls (CPU).

    Returns:
        (new graph, id of the new node).

    Raises:
        DaydreamError: bad node ids, a kind/lane mismatch, or dependencies that make a cycle.
    """
    n = graph.n
    if not 0 <= after < n:
        raise DaydreamError(f"insert: anchor {after} is not a node")
    code = KIND_NAMES.get(kind)
    if code is None:
        raise DaydreamError(f"insert: unknown kind {kind!r}")
    ln = int(graph.lane[after] if lane is None else lane)
    if ln < 0 or ln >= len(graph.lanes) or bool(graph.lane_is_gpu[ln]) != (code != NODE_CPU):
        raise DaydreamError("insert: the lane does not fit the task kind (CPU tasks go on threads, GPU tasks on streams)")
    if graph.lane[after] != ln:
        raise DaydreamError("insert: the anchor must be on the lane the task is inserted on")
    preds = sorted({int(p) for p in preds})
    succs = sorted({int(s) for s in succs})
    for x in [*preds, *succs, *([launch] if launch is not None else [])]:
        if not 0 <= x < n:
            raise DaydreamError(f"insert: {x} is not a node")
    v = n
    g = _append_node(graph, like=after, code=code, lane=ln, dur_ns=dur_ns, gap_ns=gap_ns, name=name)
    lane_kind = EdgeKind.THREAD if code == NODE_CPU else EdgeKind.STREAM
    at = np.full(n, -1, np.int64)
    at[after] = v
    src, dst = _relink_lane_successors(graph, at), graph.edge_dst
    nxt = int(graph.lane_next[after])
    new = [([after], [v], lane_kind)]
    if launch is not None and code != NODE_CPU:
        new.append(([int(launch)], [v], EdgeKind.LAUNCH))
    new.append((preds, [v] * len(preds), EdgeKind.WAIT if code == NODE_CPU else EdgeKind.XSTREAM))
    for s in succs:
        new.append(([v], [s], EdgeKind.WAIT if graph.node_kind[s] == NODE_CPU else EdgeKind.XSTREAM))
    add_s = np.concatenate([np.asarray(x[0], np.int64) for x in new])
    add_d = np.concatenate([np.asarray(x[1], np.int64) for x in new])
    add_k = np.concatenate([np.full(len(x[0]), x[2], np.uint8) for x in new])
    order = np.insert(graph.order, int(np.flatnonzero(graph.order == after)[0]) + 1, v)
    g = dataclasses.replace(
        g, edge_src=np.concatenate([src, add_s]), edge_dst=np.concatenate([dst, add_d]),
        edge_kind=np.concatenate([graph.edge_kind, add_k]),
        edge_origin=np.concatenate([graph.edge_origin, np.full(len(add_s), Origin.INSERTED, np.uint8)]),
        order=order.astype(np.int64, copy=False))
    if nxt >= 0 and nxt in preds:
        raise DaydreamError("insert: the new task would wait for the task that follows it on its lane (a cycle)")
    return _with_valid_order(requeue(g)), v


def insert_cpu_tasks(graph: TaskGraph, *, after, dur_ns, gap_ns, name: str, at_ns=None) -> tuple[TaskGraph, np.ndarray]:
    """New graph with ``K`` CPU tasks inserted at once, task ``k`` right after ``after[k]`` on its thread:
    the graph that :func:`insert` (``kind="cpu"``) makes one by one for ``k = 0 .. K-1``. Node ids
    (``n + k``), names, node facts and edges, in the same order, are the same. The visiting order
    is a valid one. One copy of the graph instead of ``K``, so the cost is linear in the graph, not
    ``K`` times it.

    Args:
        after: (K,) distinct CPU task ids. dur_ns, gap_ns: (K,) or scalars, ns.
        at_ns: (K,) or scalar, ns: the recorded instant each new task stands for (its recorded
            start, end and position: where reports place it, e.g. in a ProfilerStep, and where
            the CPU ranges around it are); default: its anchor's recorded end (start and end)
            and position, as :func:`insert` records it.

    Returns:
        (new graph, the inserted tasks' ids).

    Raises:
        DaydreamError: an anchor that is not a CPU task of the graph, or an anchor given twice.
    """
    n = graph.n
    after = np.atleast_1d(np.asarray(after, np.int64))
    k_n = len(after)
    if k_n == 0:
        return graph, np.zeros(0, np.int64)
    if after.min() < 0 or after.max() >= n or (graph.node_kind[after] != NODE_CPU).any() or len(sorted_unique(after)) != k_n:
        raise DaydreamError("insert_cpu_tasks: the anchors must be distinct CPU tasks of the graph")
    new = n + np.arange(k_n, dtype=np.int64)
    g = _take_nodes(graph, np.concatenate([np.arange(n), after]))
    g.row[n:], g.correlation[n:], g.node_kind[n:] = -1, -1, NODE_CPU
    g.name_id[n:] = len(graph.names) + np.arange(k_n)
    g.dur_ns[n:], g.gap_ns[n:] = np.broadcast_to(np.asarray(dur_ns, np.int64), k_n), np.broadcast_to(np.asarray(gap_ns, np.int64), k_n)
    g.rec_start_ns[n:] = graph.rec_end_ns[after]
    if at_ns is not None:
        g.rec_start_ns[n:] = g.rec_end_ns[n:] = g.position_ns[n:] = np.broadcast_to(np.asarray(at_ns, np.int64), k_n)
    at = np.full(n, -1, np.int64)
    at[after] = new
    src = _relink_lane_successors(graph, at)  # each anchor's lane successor now follows its new task
    rank = np.empty(n, np.int64)
    rank[graph.order] = np.arange(n)
    ids = np.concatenate([np.arange(n), new])
    order = ids[np.lexsort((np.r_[np.zeros(n, np.int64), np.ones(k_n, np.int64)], np.concatenate([rank, rank[after]])))]
    g = dataclasses.replace(
        g, names=[*graph.names, *([name] * k_n)], edge_src=np.concatenate([src, after]),
        edge_dst=np.concatenate([graph.edge_dst, new]),
        edge_kind=np.concatenate([graph.edge_kind, np.full(k_n, EdgeKind.THREAD, np.uint8)]),
        edge_origin=np.concatenate([graph.edge_origin, np.full(k_n, Origin.INSERTED, np.uint8)]),
        order=order.astype(np.int64, copy=False))
    return _with_valid_order(requeue(g)), new


def add_kernel_after(graph: TaskGraph, kernel: int, *, dur_ns: int, name: str, call_dur_ns: int) -> tuple[TaskGraph, int]:
    """New graph with one more kernel, launched right after ``kernel``'s launching call, on the same
    thread (gap 0, duration ``call_dur_ns``) and the same stream (right after ``kernel``).

    Whatever waited for ``kernel`` (blocking calls, cross-stream consumers) now also waits for the
    new kernel: both were launched before it. Exact for a single launching thread; with several
    threads, a call of another thread that ran between the two launches is treated the same way.

    Returns:
        (new graph, id of the new kernel node).

    Raises:
        DaydreamError: ``kernel`` is not a launched GPU task.
    """
    if graph.node_kind[kernel] == NODE_CPU or graph.launch[kernel] < 0:
        raise DaydreamError("add_kernel_after: the anchor must be a GPU task with a launching call")
    lch = int(graph.launch[kernel])
    s, d = graph.edges_of(EdgeKind.WAIT, EdgeKind.XSTREAM)
    # the call that launched it (a blocking copy) returns before the new launch is issued
    waiters = sorted(set(d[s == kernel].tolist()) - {lch})
    g1, call = insert(graph, after=lch, dur_ns=call_dur_ns, name="cudaLaunchKernel", kind="cpu", gap_ns=0)
    return insert(g1, after=kernel, dur_ns=dur_ns, name=name, kind="kernel", launch=call, succs=waiters)


def insert_on_stream(graph: TaskGraph, *, lane: int, like: int, dur_ns: int, name: str, launch: int | None = None,
                     preds: Iterable[int] = ()) -> tuple[TaskGraph, int]:
    """New graph with a kernel appended at the end of GPU ``lane`` (which may be empty, e.g. made
    by :func:`add_stream`): launched by ``launch`` (ready at its start + L), after the lane's last
    task (+G) and its cross-stream producers ``preds`` (+G). ``like`` (a GPU node) lends its
    identity fields (pid, device, mapping); the new task takes the lane's stream.

    Returns:
        (new graph, id of the new node).

    Raises:
        DaydreamError: bad ids, or a lane that is not a GPU stream.
    """
    if not 0 <= lane < len(graph.lanes) or not graph.lane_is_gpu[lane]:
        raise DaydreamError(f"insert_on_stream: lane {lane} is not a GPU stream")
    preds = [int(p) for p in preds]
    on = np.nonzero(graph.lane == lane)[0]
    last = int(on[graph.lane_next[on] < 0][0]) if len(on) else -1
    if not 0 <= like < graph.n or graph.node_kind[like] == NODE_CPU:
        raise DaydreamError("insert_on_stream: `like` must be a GPU task")
    for x in [*preds, *([launch] if launch is not None else [])]:
        if not 0 <= x < graph.n:
            raise DaydreamError(f"insert_on_stream: {x} is not a node")
    g = _append_node(graph, like=like, code=int(Kind.KERNEL), lane=lane, dur_ns=dur_ns, gap_ns=0, name=name)
    v = graph.n
    g.stream[v] = int(graph.lane_keys[lane][3])
    g.copy_kind[v] = 0
    if launch is not None:  # a GPU task's place is its launching call's start (docs/model.md)
        g.position_ns[v] = graph.position_ns[launch]
    src = [*preds, *([int(launch)] if launch is not None else []), *([last] if last >= 0 else [])]
    kinds = ([EdgeKind.XSTREAM] * len(preds) + ([EdgeKind.LAUNCH] if launch is not None else [])
             + ([EdgeKind.STREAM] if last >= 0 else []))
    rank = np.empty(graph.n, np.int64)
    rank[graph.order] = np.arange(graph.n)
    pos = int(rank[src].max()) if src else -1  # visited after everything it depends on: the order stays valid
    order = np.insert(graph.order, pos + 1, v)
    g = dataclasses.replace(
        g, edge_src=np.concatenate([graph.edge_src, np.asarray(src, np.int64)]),
        edge_dst=np.concatenate([graph.edge_dst, np.full(len(src), v, np.int64)]),
        edge_kind=np.concatenate([graph.edge_kind, np.asarray(kinds, np.uint8)]),
        edge_origin=np.concatenate([graph.edge_origin, np.full(len(src), Origin.INSERTED, np.uint8)]),
        order=order.astype(np.int64))
    return _with_valid_order(requeue(g)), v


def insert_launches(graph: TaskGraph, *, lane: int, anchor: np.ndarray, like: np.ndarray, dur_ns: np.ndarray,
                    names: list[str], call_name: str) -> tuple[TaskGraph, np.ndarray]:
    """New graph with ``K`` launched kernels at once: the graph :func:`insert` and
    :func:`insert_on_stream` make one by one for ``k = 0 .. K-1``: a CPU call of duration 0 and gap 0
    (named ``call_name``) right after ``anchor[k]`` on its thread, after the calls this inserted
    there for an earlier ``k``; then a kernel ``names[k]`` of ``dur_ns[k]`` appended to GPU
    ``lane``, launched by that call and waiting for ``like[k]`` (a GPU task, which lends its
    identity, as in :func:`insert_on_stream`). Node ids, names and edges are those of the one-by-one
    insertion (call ``k`` is ``n + 2k``, its kernel ``n + 2k + 1``); the visiting order is a
    valid one.

    Returns:
        (new graph, the inserted kernels).

    Raises:
        DaydreamError: bad ids, an anchor that is not a CPU task, or a lane that is not a GPU stream.
    """
    n, k_n = graph.n, len(anchor)
    anchor, like = np.asarray(anchor, np.int64), np.asarray(like, np.int64)
    if not 0 <= lane < len(graph.lanes) or not graph.lane_is_gpu[lane]:
        raise DaydreamError(f"insert_launches: lane {lane} is not a GPU stream")
    if k_n == 0:
        return graph, np.zeros(0, np.int64)
    if min(anchor.min(), like.min()) < 0 or max(anchor.max(), like.max()) >= n or (graph.node_kind[anchor] != NODE_CPU).any() \
            or (graph.node_kind[like] == NODE_CPU).any() or len(like) != k_n or len(dur_ns) != k_n or len(names) != k_n:
        raise DaydreamError("insert_launches: anchors must be CPU tasks and like GPU tasks of the graph, one per kernel")
    calls, kern = n + 2 * np.arange(k_n), n + 2 * np.arange(k_n) + 1
    g = _take_nodes(graph, np.concatenate([np.arange(n), np.stack([anchor, like], 1).ravel()]))
    g.row[n:], g.correlation[n:], g.gap_ns[n:] = -1, -1, 0
    g.node_kind[calls], g.node_kind[kern] = NODE_CPU, int(Kind.KERNEL)
    g.lane[kern] = lane
    g.name_id[n:] = len(graph.names) + np.arange(2 * k_n)
    g.dur_ns[calls], g.dur_ns[kern] = 0, np.asarray(dur_ns, np.int64)
    g.rec_start_ns[n:] = g.rec_end_ns[n:]
    g.stream[kern], g.copy_kind[kern] = int(graph.lane_keys[lane][3]), 0
    g.position_ns[kern] = graph.position_ns[anchor]
    names_all = list(graph.names)
    for x in names:
        names_all += [call_name, x]
    src, dst, kind, origin, order = _launch_edges(graph, lane, anchor, like, calls, kern)
    g = dataclasses.replace(g, names=names_all, edge_src=src, edge_dst=dst, edge_kind=kind, edge_origin=origin, order=order)
    return _with_valid_order(requeue(g)), kern


def _launch_edges(graph: TaskGraph, lane: int, anchor, like, calls, kern):
    """Edges and a visiting order for :func:`insert_launches`: each anchor's calls chained between
    it and its old thread successor (whose lane edge now leaves the last of them), each kernel
    after its call (LAUNCH), ``like`` (XSTREAM) and the previous kernel on ``lane`` (STREAM)."""
    n, k_n = graph.n, len(anchor)
    o = np.argsort(anchor, kind="stable")
    a_s = anchor[o]
    first = np.r_[True, a_s[1:] != a_s[:-1]]
    prev_call = np.where(first, a_s, np.r_[-1, calls[o][:-1]])  # thread predecessor of each call (by anchor, then k)
    pred = np.empty(k_n, np.int64)
    pred[o] = prev_call
    last_at = np.full(n, -1, np.int64)
    last_at[a_s] = calls[o]  # the last call at each anchor (the highest k)
    src = _relink_lane_successors(graph, last_at)
    on = np.nonzero(graph.lane == lane)[0]
    last = int(on[graph.lane_next[on] < 0][0]) if len(on) else -1
    prev_k = np.r_[last, kern[:-1]]
    has = prev_k >= 0
    # per k: anchor/previous call -> call (THREAD); like -> kernel (XSTREAM); call -> kernel (LAUNCH); previous kernel (STREAM)
    add_s = np.stack([pred, like, calls, prev_k], 1).ravel()
    add_d = np.stack([calls, kern, kern, kern], 1).ravel()
    add_k = np.tile(np.array([EdgeKind.THREAD, EdgeKind.XSTREAM, EdgeKind.LAUNCH, EdgeKind.STREAM], np.uint8), k_n)
    keep = np.stack([np.ones(k_n, bool), np.ones(k_n, bool), np.ones(k_n, bool), has], 1).ravel()
    src = np.concatenate([src, add_s[keep]])
    dst = np.concatenate([graph.edge_dst, add_d[keep]])
    kind = np.concatenate([graph.edge_kind, add_k[keep]])
    origin = np.concatenate([graph.edge_origin, np.full(int(keep.sum()), Origin.INSERTED, np.uint8)])
    rank = np.empty(n, np.int64)
    rank[graph.order] = np.arange(n)
    # visiting keys (primary rank, group, k): calls right after their anchor, kernels after their latest source
    prim = np.maximum.accumulate(np.maximum(rank[like], rank[anchor]))
    if last >= 0:
        prim = np.maximum(prim, rank[last])
    p_all = np.concatenate([rank, rank[anchor], prim])
    grp = np.concatenate([np.zeros(n, np.int64), np.ones(k_n, np.int64), np.full(k_n, 2, np.int64)])
    sub = np.concatenate([np.zeros(n, np.int64), np.arange(k_n), np.arange(k_n)])
    ids = np.concatenate([np.arange(n), calls, kern])
    order = ids[np.lexsort((sub, grp, p_all))]
    return src, dst, kind, origin, order.astype(np.int64)
