"""The batched insertion as it was before its per-task loops were vectorized: daydream/transform/insertion.py
at commit 0d985f7 from its imports on, unchanged but for the imports made absolute. The reference that
tests/test_insertion_batch.py compares the vectorized insert_tasks and insert_launches with, output for output."""
from __future__ import annotations

import dataclasses
from typing import Iterable, NamedTuple

import numpy as np

from daydream.util.arrays import sorted_unique
from daydream.errors import DaydreamError
from daydream.graph import NODE_CPU, EdgeKind, Origin, TaskGraph
from daydream.graph.queue import requeue
from daydream.transform.graph_copy import _relink_lane_successors, _take_nodes, _with_valid_order
from daydream.transform.selection import KIND_NAMES


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
    nxt = int(graph.lane_next[after])
    if nxt >= 0 and nxt in preds:
        raise DaydreamError("insert: the new task would wait for the task that follows it on its lane (a cycle)")
    g, new = insert_tasks(graph, after=[after], dur_ns=dur_ns, names=[name], kind=kind, lane=ln,
                          launch=-1 if launch is None else launch, gap_ns=gap_ns, preds=[(0, p) for p in preds],
                          succs=[(0, s) for s in succs])
    return g, int(new[0])


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
    return insert_tasks(graph, after=after, dur_ns=dur_ns, names=[name] * k_n, kind="cpu", gap_ns=gap_ns, at_ns=at_ns)


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
    by :func:`~daydream.transform.lanes.add_stream`): launched by ``launch`` (ready at its start + L), after the lane's last
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
    if not 0 <= like < graph.n or graph.node_kind[like] == NODE_CPU:
        raise DaydreamError("insert_on_stream: `like` must be a GPU task")
    for x in [*preds, *([launch] if launch is not None else [])]:
        if not 0 <= x < graph.n:
            raise DaydreamError(f"insert_on_stream: {x} is not a node")
    g, new = insert_tasks(graph, after=[-1], lane=[lane], like=[like], dur_ns=dur_ns, names=[name],
                          launch=-1 if launch is None else int(launch), preds=[(0, p) for p in preds])
    return g, int(new[0])


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
    after = np.empty(2 * k_n, np.int64)
    last_call: dict = {}
    for k, a in enumerate(anchor.tolist()):  # each call after the calls inserted at its anchor before it
        after[2 * k], after[2 * k + 1] = last_call.get(a, a), -1
        last_call[a] = n + 2 * k
    calls = n + 2 * np.arange(k_n)
    g, new = insert_tasks(graph, after=after, lane=np.repeat(graph.lane[anchor], 2) * np.tile([1, 0], k_n) + np.tile([0, lane], k_n),
                          like=np.stack([np.full(k_n, -1), like], 1).ravel(),
                          launch=np.stack([np.full(k_n, -1), calls], 1).ravel(),
                          dur_ns=np.stack([np.zeros(k_n, np.int64), np.asarray(dur_ns, np.int64)], 1).ravel(),
                          names=[x for nm in names for x in (call_name, nm)], kind=["cpu", "kernel"] * k_n, gap_ns=0,
                          preds=[(2 * k + 1, x) for k, x in enumerate(like.tolist())])
    return g, new[1::2]


# -------------------------------------------------------------------- the batched insert ------
def insert_tasks(graph: TaskGraph, *, after, dur_ns, names, kind="kernel", lane=None, like=None, launch=None, gap_ns=0,
                 at_ns=None, preds=(), succs=()) -> tuple[TaskGraph, np.ndarray]:
    """New graph with ``K`` tasks inserted at once: the graph that inserting them one after the
    other (``k = 0 .. K-1``) makes, at one copy of the graph. Every other insertion is a case of it.

    Task ``k`` (node id ``n + k``) is placed right after ``after[k]`` on its lane (the anchor's
    lane successor now follows it), or, where ``after[k]`` is -1, at the end of ``lane[k]`` (which
    may be empty, e.g. made by :func:`~daydream.transform.lanes.add_stream`). An anchor, a launch or
    a predecessor may be a task inserted before it in the same call (``n + j``, ``j < k``).

    Args:
        after: (K,) anchor node ids, or -1 (end of the lane). Each node anchors one task at most.
        dur_ns: (K,) or scalar, ns. names: (K,) task names, or one name for all.
        kind: "cpu", "kernel", "memcpy" or "memset", for all or one per task.
        lane: (K,) lane ids, needed for tasks at a lane's end; default: the anchor's lane.
        like: (K,) nodes lending identity (pid, tid, device, stream, mapping, priority, position);
            default: the anchor (for an inserted anchor, the node that lent it its identity).
        launch: (K,) for GPU tasks the CPU task launching it (its start + L makes it ready), -1 none.
        gap_ns: (K,) or scalar: for CPU tasks, the CPU gap before it, ns.
        at_ns: (K,) or scalar, ns: the recorded instant each task stands for (recorded start, end
            and position); default: recorded at its model task's end, at its model's position.
        preds: (task index k, node) pairs: GPU tasks task ``k`` waits for (cross-stream producers
            of a GPU task, or GPU tasks a CPU task blocks on), in edge order.
        succs: (task index k, node) pairs: tasks that wait for task ``k`` (cross-stream consumers
            or blocking calls), in edge order.

    A GPU task at a lane's end takes the lane's stream, copy kind 0, and its launching call's
    position (``docs/model.md``). Each task's edges are added in the order the single insertions
    made them: after an anchor the lane edge, launch, waits, consumers; at a lane's end the waits,
    launch, lane edge. The visiting order puts a task right after its anchor, or at a lane's end
    right after the latest of its sources; it is repaired when that is not valid.

    Returns:
        (new graph, the inserted tasks' ids).

    Raises:
        DaydreamError: bad node ids, a kind/lane mismatch, an anchor given twice, a lane's end
            without a lane or without a model task.
    """
    t = _task_table(graph, after, dur_ns, names, kind, lane, like, launch, gap_ns, at_ns, preds, succs)
    if t is None:
        return graph, np.zeros(0, np.int64)
    g = _new_nodes(graph, t)
    lane_src, at, first_src = _splice(graph, t)
    src, dst, kind_e, origin = _new_edges(graph, t, lane_src, at)
    g = dataclasses.replace(g, edge_src=src, edge_dst=dst, edge_kind=kind_e, edge_origin=origin, order=_visit_order(graph, t, first_src))
    return _with_valid_order(requeue(g)), t.new


class _Tasks(NamedTuple):
    """The tasks of one :func:`insert_tasks` call, checked and one value per task."""

    new: np.ndarray  #: node ids n .. n + K - 1
    after: np.ndarray
    code: np.ndarray  #: node kind codes
    lane: np.ndarray
    like: np.ndarray  #: the original node lending identity
    launch: np.ndarray
    dur: np.ndarray
    gap: np.ndarray
    at_ns: np.ndarray | None
    names: list
    preds: dict  #: task index -> list of nodes
    succs: dict


def _task_table(graph, after, dur_ns, names, kind, lane, like, launch, gap_ns, at_ns, preds, succs) -> _Tasks | None:
    """The arguments of :func:`insert_tasks` checked, one value per task (None: no task)."""
    n = graph.n
    after = np.atleast_1d(np.asarray(after, np.int64))
    k_n = len(after)
    if k_n == 0:
        return None
    new = n + np.arange(k_n, dtype=np.int64)
    kinds = [kind] * k_n if isinstance(kind, str) else list(kind)
    if len(kinds) != k_n or any(x not in KIND_NAMES for x in kinds):
        raise DaydreamError(f"insert_tasks: one kind per task, of {sorted(KIND_NAMES)}")
    code = np.array([KIND_NAMES[x] for x in kinds], np.int64)
    names = [names] * k_n if isinstance(names, str) else list(names)
    per = lambda v, fill: np.broadcast_to(np.asarray(fill if v is None else v, np.int64), (k_n,)).copy()  # noqa: E731
    launch, like_in = per(launch, -1), per(like, -1)
    ln = per(lane, -1)
    bad = (after < -1) | (after >= new) | (launch < -1) | (launch >= new) | (like_in < -1) | (like_in >= n)
    if bad.any() or len(names) != k_n or len(sorted_unique(after[after >= 0])) != int((after >= 0).sum()):
        raise DaydreamError("insert_tasks: anchors, launches and model tasks must be nodes (or earlier inserted tasks), "
                            "one per task, each anchor once")
    like_out: list[int] = []
    lanes = ln.tolist()
    anchor_lane = graph.lane[np.where((after >= 0) & (after < n), after, 0)].tolist() if n else [-1] * k_n
    for k, (a, lk) in enumerate(zip(after.tolist(), like_in.tolist())):
        if lk < 0 and a < 0:
            raise DaydreamError("insert_tasks: a task at a lane's end needs a model task (like)")
        like_out.append(lk if lk >= 0 else (like_out[a - n] if a >= n else a))
        if a >= 0:
            a_lane = anchor_lane[k] if a < n else lanes[a - n]
            lanes[k] = a_lane if lanes[k] < 0 else lanes[k]
            if lanes[k] != a_lane:
                raise DaydreamError("insert: the anchor must be on the lane the task is inserted on")
    ln, like_out = np.asarray(lanes, np.int64), np.asarray(like_out, np.int64)
    if (ln < 0).any() or (ln >= len(graph.lanes)).any() or (graph.lane_is_gpu[ln] != (code != NODE_CPU)).any():
        raise DaydreamError("insert: the lane does not fit the task kind (CPU tasks go on threads, GPU tasks on streams)")
    pairs = {}
    for name, given in (("preds", preds), ("succs", succs)):
        d: dict = {}
        for k, x in given:
            if not 0 <= int(k) < k_n or not 0 <= int(x) < n + k_n:
                raise DaydreamError(f"insert_tasks: {name} must pair a task index with a node")
            d.setdefault(int(k), []).append(int(x))
        pairs[name] = d
    return _Tasks(new, after, code, ln, like_out, launch, per(dur_ns, 0), np.where(code == NODE_CPU, per(gap_ns, 0), 0),
                  None if at_ns is None else per(at_ns, 0), names, pairs["preds"], pairs["succs"])


def _new_nodes(graph: TaskGraph, t: _Tasks) -> TaskGraph:
    """``graph`` with the node arrays of the new tasks appended (edges and order left as they are)."""
    n, new = graph.n, t.new
    g = _take_nodes(graph, np.concatenate([np.arange(n), t.like]))
    g.row[new], g.node_kind[new], g.lane[new], g.correlation[new] = -1, t.code, t.lane, -1
    g.name_id[new] = len(graph.names) + np.arange(len(new))
    g.dur_ns[new], g.gap_ns[new] = t.dur, t.gap
    g.rec_start_ns[new] = graph.rec_end_ns[t.like]
    if t.at_ns is not None:
        g.rec_start_ns[new] = g.rec_end_ns[new] = g.position_ns[new] = t.at_ns
    end = new[(t.after < 0) & (t.code != NODE_CPU)]
    if len(end):  # a GPU task at a lane's end: the lane's stream; placed at its launching call's start
        g.stream[end], g.copy_kind[end] = graph.lane_keys[g.lane[end], 3], 0
        la = end[t.launch[end - n] >= 0]
        g.position_ns[la] = g.position_ns[t.launch[la - n]]
    return dataclasses.replace(g, names=[*graph.names, *t.names])


def _splice(graph: TaskGraph, t: _Tasks) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The lane links of the new tasks, as the one-by-one insertion makes them: (per task the
    source of its lane edge, -1 none; per old node the task its old lane-successor edge now leaves
    from, -1 unchanged; per task its lane predecessor when it was inserted)."""
    n = graph.n
    lane_src = np.full(len(t.new), -1, np.int64)
    first_src = lane_src.copy()
    at = np.full(n, -1, np.int64)
    holder: dict = {}  # node -> who holds the lane edge leaving it: ("old", node) or ("new", task index)
    lane_end: dict = {}
    if (t.after < 0).any():
        tails = np.flatnonzero(graph.lane_next < 0)
        last = np.full(len(graph.lanes), -1, np.int64)
        last[graph.lane[tails]] = tails
        lane_end = dict(enumerate(last.tolist()))
    for k, (a, ln) in enumerate(zip(t.after.tolist(), t.lane.tolist())):
        v = n + k
        if a < 0:  # at the lane's end
            prev = lane_end[ln]
            lane_src[k] = first_src[k] = prev
            if prev >= 0:
                holder[prev] = ("new", k)
            lane_end[ln] = v
            continue
        h = holder.get(a, ("old", a))
        if h[0] == "old":
            at[h[1]] = v
        else:
            lane_src[h[1]] = v
        holder[v], holder[a] = h, ("new", k)
        lane_src[k] = a
        if lane_end.get(ln) == a:
            lane_end[ln] = v
    return lane_src, at, first_src


def _new_edges(graph: TaskGraph, t: _Tasks, lane_src: np.ndarray, at: np.ndarray):
    """The edge arrays: the old edges (lane-successor edges relinked to the new tasks), then each
    new task's edges in the order of its single insertion."""
    n = graph.n
    src = _relink_lane_successors(graph, at)
    node_cpu = np.append(graph.node_kind == NODE_CPU, t.code == NODE_CPU).tolist()
    add: list[tuple[int, int, int]] = []  # (source, destination, kind)
    for k, (a, ls, la) in enumerate(zip(t.after.tolist(), lane_src.tolist(), t.launch.tolist())):
        v, cpu = n + k, node_cpu[n + k]
        lane_e = [(ls, EdgeKind.THREAD if cpu else EdgeKind.STREAM)] if ls >= 0 else []
        launch_e = [(la, EdgeKind.LAUNCH)] if la >= 0 and not cpu else []
        wait_e = [(p, EdgeKind.WAIT if cpu else EdgeKind.XSTREAM) for p in t.preds.get(k, ())]
        for s, kd in (lane_e + launch_e + wait_e) if a >= 0 else (wait_e + launch_e + lane_e):
            add.append((s, v, int(kd)))
        add += [(v, s, int(EdgeKind.WAIT if node_cpu[s] else EdgeKind.XSTREAM)) for s in t.succs.get(k, ())]
    a = np.asarray(add, np.int64).reshape(-1, 3)
    return (np.concatenate([src, a[:, 0]]), np.concatenate([graph.edge_dst, a[:, 1]]),
            np.concatenate([graph.edge_kind, a[:, 2].astype(np.uint8)]),
            np.concatenate([graph.edge_origin, np.full(len(a), Origin.INSERTED, np.uint8)]))


def _visit_order(graph: TaskGraph, t: _Tasks, first_src: np.ndarray) -> np.ndarray:
    """A visiting order: the old one, each new task right after its anchor (by task index among
    those), a task at a lane's end right after the latest of its lane predecessor, launch and
    waits (after the anchored ones at that place). Valid unless a task waits for something
    visited after its anchor (the caller repairs that)."""
    n, k_n = graph.n, len(t.new)
    rank = np.empty(n + k_n, np.int64)
    rank[graph.order] = np.arange(n)
    rk = rank[:n].tolist()  # plain lists: one look-up per task
    grp = np.zeros(n + k_n, np.int64)
    grp[n:] = np.where(t.after >= 0, 1, 2)
    for k, (a, fs, la) in enumerate(zip(t.after.tolist(), first_src.tolist(), t.launch.tolist())):
        if a >= 0:
            rk.append(rk[a])
        else:
            srcs = [x for x in (fs, la, *t.preds.get(k, ())) if x >= 0]
            rk.append(max(rk[x] for x in srcs) if srcs else -1)
    rank[n:] = rk[n:]
    sub = np.concatenate([np.zeros(n, np.int64), np.arange(k_n)])
    ids = np.concatenate([graph.order, t.new])
    return ids[np.lexsort((sub[ids], grp[ids], rank[ids]))].astype(np.int64)
