"""Insert: new tasks placed on lanes, after an anchor or at a lane's end, with their launches and waits.

One batched primitive, :func:`insert_tasks`, does every insertion; :func:`insert` (one task),
:func:`insert_cpu_tasks` (CPU tasks after distinct anchors), :func:`insert_on_stream` (a kernel at
a stream's end), :func:`insert_launches` (launch calls with their kernels) and
:func:`add_kernel_after` (a kernel and its call after another) are its cases, each keeping its own
checks and messages.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, NamedTuple

import numpy as np

from ..util.arrays import sorted_unique
from ..errors import DaydreamError
from ..graph import NODE_CPU, EdgeKind, Origin, TaskGraph
from ..graph.queue import requeue
from .graph_copy import _relink_lane_successors, _take_nodes, _with_valid_order
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
    calls = n + 2 * np.arange(k_n)
    o = np.argsort(anchor, kind="stable")  # each call after the call inserted at its anchor just before it
    same = np.r_[False, anchor[o][1:] == anchor[o][:-1]]
    after = np.full(2 * k_n, -1, np.int64)
    after[2 * o] = np.where(same, calls[np.r_[o[0], o[:-1]]], anchor[o])
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
    pred_k: np.ndarray  #: (P,) task index of each given pred pair, in the order given
    pred_x: np.ndarray  #: (P,) its node
    succ_k: np.ndarray  #: (S,) likewise for succs
    succ_x: np.ndarray


def _roots(par: np.ndarray) -> np.ndarray:
    """Per element the end of its chain of ``par`` links (``par[i] <= i``; a root links to
    itself), by pointer doubling: O(K log depth)."""
    while True:
        nxt = par[par]
        if np.array_equal(nxt, par):
            return par
        par = nxt


def _pairs(given, name: str, k_n: int, n_all: int) -> tuple[np.ndarray, np.ndarray]:
    """(task index, node) arrays of ``preds`` or ``succs`` pairs, checked."""
    a = np.asarray([(int(k), int(x)) for k, x in given] if not isinstance(given, np.ndarray) else given, np.int64).reshape(-1, 2)
    k, x = a[:, 0].copy(), a[:, 1].copy()
    if ((k < 0) | (k >= k_n) | (x < 0) | (x >= n_all)).any():
        raise DaydreamError(f"insert_tasks: {name} must pair a task index with a node")
    return k, x


def _task_table(graph, after, dur_ns, names, kind, lane, like, launch, gap_ns, at_ns, preds, succs) -> _Tasks | None:
    """The arguments of :func:`insert_tasks` checked, one value per task (None: no task). The
    model task and the lane of a task anchored on an inserted task are its anchor's, resolved
    along anchor chains by pointer doubling (no loop over the tasks)."""
    n = graph.n
    after = np.atleast_1d(np.asarray(after, np.int64))
    k_n = len(after)
    if k_n == 0:
        return None
    new = n + np.arange(k_n, dtype=np.int64)
    if isinstance(kind, str):
        if kind not in KIND_NAMES:
            raise DaydreamError(f"insert_tasks: one kind per task, of {sorted(KIND_NAMES)}")
        code = np.full(k_n, KIND_NAMES[kind], np.int64)
    else:
        kinds = list(kind)
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
    idx = np.arange(k_n, dtype=np.int64)
    on_new = after >= n
    up = np.where(on_new, after - n, idx)  # an anchor inserted earlier: its task index (< own)
    like_out = np.where(like_in >= 0, like_in, after)[_roots(np.where((like_in < 0) & on_new, up, idx))]
    old_anchor = (after >= 0) & ~on_new
    base_lane = ln.copy()
    base_lane[old_anchor] = graph.lane[after[old_anchor]]
    lanes = base_lane[_roots(up)]  # the lane of the chain's first task (its old anchor's, or given at a lane's end)
    no_model = (like_in < 0) & (after < 0)
    mismatch = (after >= 0) & (ln >= 0) & (ln != lanes)
    if no_model.any() or mismatch.any():  # the first offending task's message, as a loop over the tasks says it
        first_nm = int(np.argmax(no_model)) if no_model.any() else k_n
        if first_nm <= (int(np.argmax(mismatch)) if mismatch.any() else k_n):
            raise DaydreamError("insert_tasks: a task at a lane's end needs a model task (like)")
        raise DaydreamError("insert: the anchor must be on the lane the task is inserted on")
    if (lanes < 0).any() or (lanes >= len(graph.lanes)).any() or (graph.lane_is_gpu[lanes] != (code != NODE_CPU)).any():
        raise DaydreamError("insert: the lane does not fit the task kind (CPU tasks go on threads, GPU tasks on streams)")
    pk, px = _pairs(preds, "preds", k_n, n + k_n)
    sk, sx = _pairs(succs, "succs", k_n, n + k_n)
    return _Tasks(new, after, code, lanes, like_out, launch, per(dur_ns, 0), np.where(code == NODE_CPU, per(gap_ns, 0), 0),
                  None if at_ns is None else per(at_ns, 0), names, pk, px, sk, sx)


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


class _Chains(NamedTuple):
    """The anchor chains of one call: each node anchors one task at most, so the tasks anchored
    (directly or through inserted tasks) on a node ``r`` that is an old node or a task at a lane's
    end form a path after it, task indices increasing along it."""

    root: np.ndarray  #: (K,) node id: an anchored task's chain root; a task at a lane's end: its own id
    key: np.ndarray  #: sorted ``root * (K + 1) + k`` of the anchored tasks
    k: np.ndarray  #: their task indices, in ``key``'s order


def _chains(graph: TaskGraph, t: _Tasks) -> _Chains:
    n, k_n = graph.n, len(t.new)
    idx = np.arange(k_n, dtype=np.int64)
    a = t.after
    par_task = np.clip(a - n, 0, k_n - 1)
    up = (a >= n) & (a[par_task] >= 0)  # anchored on an inserted task that is itself anchored
    top = _roots(np.where(up, par_task, idx))
    root = np.where(a >= 0, a[top], n + idx)
    anch = np.flatnonzero(a >= 0)
    key = root[anch] * (k_n + 1) + anch
    o = np.argsort(key, kind="stable")
    return _Chains(root, key[o], anch[o])


def _chain_end(c: _Chains, r: np.ndarray, before: np.ndarray, k_n: int, n: int) -> np.ndarray:
    """Per root node ``r`` (-1: none, answered -1): the last node of its chain made of the tasks
    of index < ``before``: the last such task (``n + k``), or ``r`` itself."""
    if not len(c.key):
        return r.copy()
    q = np.searchsorted(c.key, np.maximum(r, 0) * (k_n + 1) + before, "left") - 1
    ok = (q >= 0) & (r >= 0)
    hit = ok.copy()
    hit[ok] = c.key[q[ok]] // (k_n + 1) == r[ok]
    return np.where(hit, n + c.k[np.maximum(q, 0)], r)


def _splice(graph: TaskGraph, t: _Tasks) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The lane links of the new tasks, as the one-by-one insertion makes them: (per task the
    source of its lane edge, -1 none; per old node the task its old lane-successor edge now leaves
    from, -1 unchanged; per task its lane predecessor when it was inserted).

    An anchored task follows its anchor; its chain (:class:`_Chains`) ends before the anchor's old
    lane successor. A task at a lane's end follows, when inserted, the end of the chain of the
    lane's previous end task (or of the lane's old tail) so far, and at the end, that chain's
    last task."""
    n, k_n = graph.n, len(t.new)
    c = _chains(graph, t)
    lane_src = np.where(t.after >= 0, t.after, -1)
    first_src = np.full(k_n, -1, np.int64)
    at = np.full(n, -1, np.int64)
    roots_old = c.key // (k_n + 1)
    is_last = np.r_[roots_old[1:] != roots_old[:-1], True] if len(roots_old) else np.zeros(0, bool)
    last_root, last_k = roots_old[is_last], c.k[is_last]
    old = last_root < n
    moved = last_root[old]
    has_next = graph.lane_next[moved] >= 0  # an old node's lane-successor edge leaves from its chain's last task
    at[moved[has_next]] = n + last_k[old][has_next]
    end = np.flatnonzero(t.after < 0)
    if len(end):
        tails = np.flatnonzero(graph.lane_next < 0)
        tail = np.full(len(graph.lanes), -1, np.int64)
        tail[graph.lane[tails]] = tails
        o = end[np.argsort(t.lane[end], kind="stable")]  # the lane-end tasks by lane, then index
        ln = t.lane[o]
        new_lane = np.r_[True, ln[1:] != ln[:-1]]
        prev = np.where(new_lane, tail[ln], n + np.r_[-1, o[:-1]])  # the root each one follows
        first_src[o] = _chain_end(c, prev, o, k_n, n)
        lane_src[o] = _chain_end(c, prev, np.full(len(o), k_n), k_n, n)
    return lane_src, at, first_src


def _new_edges(graph: TaskGraph, t: _Tasks, lane_src: np.ndarray, at: np.ndarray):
    """The edge arrays: the old edges (lane-successor edges relinked to the new tasks), then each
    new task's edges in the order of its single insertion (after an anchor: lane edge, launch,
    waits, consumers; at a lane's end: waits, launch, lane edge, consumers), by one sort."""
    n, k_n = graph.n, len(t.new)
    src = _relink_lane_successors(graph, at)
    node_cpu = np.append(graph.node_kind == NODE_CPU, t.code == NODE_CPU)
    cpu = node_cpu[n:]
    anchored = t.after >= 0
    wait_kind = np.where(cpu, int(EdgeKind.WAIT), int(EdgeKind.XSTREAM))
    le = np.flatnonzero(lane_src >= 0)
    la = np.flatnonzero((t.launch >= 0) & ~cpu)
    parts = [  # (task, slot, sub, source, destination, kind)
        (le, np.where(anchored[le], 0, 2), np.zeros(len(le), np.int64), lane_src[le], n + le,
         np.where(cpu[le], int(EdgeKind.THREAD), int(EdgeKind.STREAM))),
        (la, np.ones(len(la), np.int64), np.zeros(len(la), np.int64), t.launch[la], n + la, np.full(len(la), int(EdgeKind.LAUNCH))),
        (t.pred_k, np.where(anchored[t.pred_k], 2, 0), np.arange(len(t.pred_k)), t.pred_x, n + t.pred_k, wait_kind[t.pred_k]),
        (t.succ_k, np.full(len(t.succ_k), 3), np.arange(len(t.succ_k)), n + t.succ_k, t.succ_x,
         np.where(node_cpu[t.succ_x], int(EdgeKind.WAIT), int(EdgeKind.XSTREAM))),
    ]
    k, slot, sub, s, d, kd = (np.concatenate([np.asarray(p[i], np.int64) for p in parts]) for i in range(6))
    o = np.lexsort((sub, slot, k))
    return (np.concatenate([src, s[o]]), np.concatenate([graph.edge_dst, d[o]]),
            np.concatenate([graph.edge_kind, kd[o].astype(np.uint8)]),
            np.concatenate([graph.edge_origin, np.full(len(o), Origin.INSERTED, np.uint8)]))


#: passes of :func:`_visit_order`'s vectorized ranks before it ranks task by task instead (each
#: pass settles one level of dependency between tasks at different lanes' ends: the what-ifs need
#: one or two; a longer chain would make the passes quadratic)
RANK_PASSES = 16


def _ranks_in_turn(old_rank: np.ndarray, t: _Tasks, first_src: np.ndarray) -> np.ndarray:
    """The new tasks' ranks one at a time (O(K) Python steps): an anchored task its anchor's, a task at
    a lane's end the latest of its lane predecessor, launch and waits (-1 none)."""
    rk = old_rank.tolist()
    n = len(rk)
    waits: dict[int, list[int]] = {}
    for k, x in zip(t.pred_k.tolist(), t.pred_x.tolist()):
        waits.setdefault(k, []).append(x)
    for k, (a, fs, la) in enumerate(zip(t.after.tolist(), first_src.tolist(), t.launch.tolist())):
        if a >= 0:
            rk.append(rk[a])
        else:
            srcs = [x for x in (fs, la, *waits.get(k, ())) if x >= 0]
            rk.append(max(rk[x] for x in srcs) if srcs else -1)
    return np.asarray(rk[n:], np.int64)


def _visit_order(graph: TaskGraph, t: _Tasks, first_src: np.ndarray) -> np.ndarray:
    """A visiting order: the old one, each new task right after its anchor (by task index among
    those), a task at a lane's end right after the latest of its lane predecessor, launch and
    waits (after the anchored ones at that place). Valid unless a task waits for something
    visited after its anchor (the caller repairs that).

    An anchored task takes its chain root's place; a task at a lane's end the latest of its
    launch and waits and of the lane's previous end task (or old tail: the chain its lane
    predecessor is on), so along a lane a running maximum. Ranks that depend on tasks at other
    lanes' ends settle by repeating the two steps until nothing changes (a pass per such level
    of dependency: one or two in the what-ifs)."""
    n, k_n = graph.n, len(t.new)
    rank = np.empty(n + k_n, np.int64)
    rank[graph.order] = np.arange(n)
    rank[n:] = -1
    c = _chains(graph, t)
    anch = np.flatnonzero(t.after >= 0)
    end = np.flatnonzero(t.after < 0)
    o = end[np.argsort(t.lane[end], kind="stable")]
    ln = t.lane[o]
    new_lane = np.r_[True, ln[1:] != ln[:-1]] if len(o) else np.zeros(0, bool)
    seg = np.cumsum(new_lane) - 1
    tails = np.flatnonzero(graph.lane_next < 0)
    tail = np.full(len(graph.lanes), -1, np.int64)
    tail[graph.lane[tails]] = tails
    head_src = np.where(new_lane, first_src[o], -1)  # a lane's first end task: its predecessor (on the old tail's chain)
    own_k = np.concatenate([o, o, t.pred_k[t.after[t.pred_k] < 0]])
    own_x = np.concatenate([head_src, t.launch[o], t.pred_x[t.after[t.pred_k] < 0]])
    keep = own_x >= 0
    own_k, own_x = own_k[keep], own_x[keep]
    pos = np.empty(k_n, np.int64)
    pos[o] = np.arange(len(o))
    span = n + k_n + 2
    for _ in range(RANK_PASSES):
        before = rank[n:].copy()
        rank[n + anch] = rank[c.root[anch]]
        if len(o):
            own = np.full(len(o), -1, np.int64)
            np.maximum.at(own, pos[own_k], rank[own_x])
            run = np.maximum.accumulate(seg * span + own + 1) - seg * span - 1  # a running maximum per lane
            rank[n + o] = run
        if np.array_equal(before, rank[n:]):
            break
    else:  # long chains of dependencies across lanes' ends: task by task, as the one-by-one insertion ranks them
        rank[n:] = _ranks_in_turn(rank[:n], t, first_src)
    grp = np.zeros(n + k_n, np.int64)
    grp[n:] = np.where(t.after >= 0, 1, 2)
    sub = np.concatenate([np.zeros(n, np.int64), np.arange(k_n)])
    ids = np.concatenate([graph.order, t.new])
    return ids[np.lexsort((sub[ids], grp[ids], rank[ids]))].astype(np.int64)
