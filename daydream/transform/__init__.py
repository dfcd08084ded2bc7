"""The transformation primitives of the Daydream paper (section 5) over a :class:`TaskGraph`.

Optimizations (``daydream/optimizations/``) and users' own scripts are written only in terms of
these: :func:`select` tasks by a predicate, :func:`scale` their durations, :func:`remove` tasks
(keeping their dependencies transitively), :func:`insert` a task with given dependencies,
:func:`set_priority` to schedule a stream by priority (the paper's reschedule). Every
primitive returns a new graph; the graph it was given is never changed.

Semantics (they keep ``docs/model.md`` meaningful for the changed program):

* Scaling a CPU task scales its duration (for a blocking call: its own cost), not its gap.
* Removing a CPU task removes the gap before it too (the framework work that issued the call);
  the next task on its thread follows the previous one with its own gap. GPU tasks it launched,
  if kept, become launched by the previous kept call on the thread (or ready at trace start).
* Removing a GPU task: the next kept task on its stream follows the kept task before it and
  inherits its cross-stream producers; cross-stream consumers and calls that waited for it now
  depend on the kept task before it on its stream (none when it was the first).
* Inserting: a task is placed on a lane right after an anchor task (``after``), with extra
  predecessors (GPU tasks it waits for) and successors; an inserted GPU task may name the CPU
  task that launches it.
* Removing or inserting tasks makes the launch-queue edges again from the new stream order (the
  call launching a stream's task ``k`` waits for its task ``k - D``; ``docs/model.md``).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Iterable

import numpy as np

from ..util.arrays import sorted_unique, unique_inverse
from ..util.patterns import compile_user_pattern
from ..errors import DaydreamError
from ..events.table import Kind
from ..mapping.rules import PHASES
from ..graph.memo import same_structure
from ..graph import NODE_CPU, EdgeKind, Origin, TaskGraph, dedupe_edges, rule_arrays, topological_order
from ..graph.queue import requeue

#: longest task duration a transformation may produce (2^52 ns, about 52 days): keeps every replayed
#: time far inside int64 and exactly representable as a float
MAX_DURATION_NS = 2**52

KIND_NAMES = {"cpu": NODE_CPU, "runtime": NODE_CPU, "kernel": int(Kind.KERNEL), "memcpy": int(Kind.MEMCPY), "memset": int(Kind.MEMSET)}


# ------------------------------------------------------------------------------- select ------
def select(
    graph: TaskGraph,
    *,
    kind: str | Iterable[str] | None = None,
    name: str | None = None,
    layer: str | None = None,
    phase: str | Iterable[str] | None = None,
    op: str | None = None,
    stream: int | Iterable[int] | None = None,
    thread: int | Iterable[int] | None = None,
    where: Callable[[TaskGraph], np.ndarray] | None = None,
) -> np.ndarray:
    """Boolean mask (length ``graph.n``) of the tasks matching every given criterion.

    Args:
        kind: "cpu" (API calls), "kernel", "memcpy", "memset", or several.
        name: regular expression searched in the task name.
        layer, op: regular expressions searched in the mapped layer path / framework op
            (needs a mapping; tasks without one never match).
        phase: "forward", "backward", "optimizer", "communication", "other", "unmapped".
        stream: CUDA stream id(s) (GPU tasks only). thread: OS thread id(s) (CPU tasks only).
        where: any function of the graph returning a boolean mask.

    Raises:
        DaydreamError: unknown kind or phase, a bad regular expression, or layer/phase/op asked
            for on a graph without a mapping.
    """
    m = np.ones(graph.n, dtype=bool)
    if kind is not None:
        kinds = [kind] if isinstance(kind, str) else list(kind)
        try:
            codes = [KIND_NAMES[k] for k in kinds]
        except KeyError as e:
            raise DaydreamError(f"unknown task kind {e.args[0]!r}; use one of {sorted(KIND_NAMES)}") from None
        m &= np.isin(graph.node_kind, codes)
    if name is not None:
        m &= name_mask(graph, name)
    if stream is not None:
        streams = [stream] if isinstance(stream, int) else list(stream)
        m &= (graph.node_kind != NODE_CPU) & np.isin(graph.stream, streams)
    if thread is not None:
        threads = [thread] if isinstance(thread, int) else list(thread)
        m &= (graph.node_kind == NODE_CPU) & np.isin(graph.tid, threads)
    if phase is not None or layer is not None or op is not None:
        m &= _mapped_mask(graph, phase, layer, op)
    if where is not None:
        m &= np.asarray(where(graph), dtype=bool)
    return m


def _mapped_mask(graph: TaskGraph, phase, layer, op) -> np.ndarray:
    """Tasks whose mapped phase is one of ``phase`` and whose layer / op label matches."""
    mp = graph.mapping
    if mp is None:
        raise DaydreamError("selecting by layer, phase or op needs a mapped graph (build_graph(table, mapping))")
    m = np.ones(graph.n, dtype=bool)
    if phase is not None:
        phases = [phase] if isinstance(phase, str) else list(phase)
        bad = [p for p in phases if p not in PHASES]
        if bad:
            raise DaydreamError(f"unknown phase {bad[0]!r}; use one of {', '.join(PHASES)}")
        m &= np.isin(mp.phase, [PHASES.index(p) for p in phases])
    labels = np.asarray(mp.labels, dtype=object)
    for ids, pat in ((mp.layer_id, layer), (mp.op_id, op)):
        if pat is None:
            continue
        if not len(labels):
            return np.zeros(graph.n, bool)
        m &= (ids >= 0) & _regex_mask(labels, pat)[np.maximum(ids, 0)]
    return m


#: longest regular expression a user may give (``--opt ...:pattern=``, ``select(name=...)``): keeps
#: the cost of compiling it bounded; names from a trace are never compiled as patterns
MAX_PATTERN_CHARS = 1000


def compile_pattern(pattern: str) -> re.Pattern:
    """A user's regular expression, compiled.

    Raises:
        DaydreamError: it is longer than :data:`MAX_PATTERN_CHARS` or not a valid expression.
    """
    if len(pattern) > MAX_PATTERN_CHARS:
        raise DaydreamError(f"regular expression of {len(pattern):,} characters; at most {MAX_PATTERN_CHARS:,} are accepted")
    try:
        return compile_user_pattern(pattern)  # RE2: no catastrophic backtracking (daydream/util/patterns.py)
    except re.error as e:
        raise DaydreamError(f"bad regular expression {pattern!r}: {e}") from None


def name_mask(graph: TaskGraph, pattern: str, subset: np.ndarray | None = None) -> np.ndarray:
    """Nodes (of ``subset``, default all) whose name matches ``pattern`` (``re.search``), decided
    once per distinct name (kernel names can be thousands of characters long).

    Raises:
        DaydreamError: a bad or over-long regular expression.
    """
    rx = compile_pattern(pattern)
    out = np.zeros(graph.n, dtype=bool)
    cand = np.ones(graph.n, dtype=bool) if subset is None else np.asarray(subset, dtype=bool)
    if cand.any():
        uniq, inv = unique_inverse(graph.name_id[cand])
        hit = np.fromiter((rx.search(graph.names[i]) is not None for i in uniq.tolist()), dtype=bool, count=len(uniq))
        out[cand] = hit[inv]
    return out


def _regex_mask(strings: np.ndarray, pattern: str) -> np.ndarray:
    rx = compile_pattern(pattern)
    uniq, inv = np.unique(strings.astype(str), return_inverse=True)
    hit = np.fromiter((rx.search(s) is not None for s in uniq), dtype=bool, count=len(uniq))
    return hit[inv.reshape(-1)]


# -------------------------------------------------------------------------------- scale ------
def scale(graph: TaskGraph, mask: np.ndarray, factor: float | Callable[[TaskGraph, np.ndarray], np.ndarray]) -> TaskGraph:
    """New graph with the durations of the selected tasks multiplied by ``factor``.

    ``factor`` is a number or a function ``(graph, node_ids) -> factors`` (one per selected node).
    Durations are rounded to whole ns.

    Raises:
        DaydreamError: a negative or non-finite factor.
    """
    mask = np.asarray(mask, dtype=bool)
    ids = np.nonzero(mask)[0]
    f = np.asarray(factor(graph, ids) if callable(factor) else np.full(len(ids), float(factor)), dtype=np.float64)
    if f.shape != ids.shape:
        raise DaydreamError("scale: the factor function must return one factor per selected task")
    if len(f) and (not np.all(np.isfinite(f)) or np.any(f < 0)):
        raise DaydreamError("scale: factors must be finite and >= 0")
    dur = graph.dur_ns.copy()
    scaled = np.rint(dur[ids] * f)
    if len(scaled) and np.any((scaled >= MAX_DURATION_NS) & (scaled > dur[ids])):  # a longer task the trace held is kept, not grown
        raise DaydreamError(f"scale: a scaled duration would exceed {MAX_DURATION_NS / 1e9 / 86400:.0f} days; use a smaller factor")
    dur[ids] = scaled.astype(np.int64)
    return same_structure(graph, dataclasses.replace(graph, dur_ns=dur))


def set_duration(graph: TaskGraph, mask: np.ndarray, dur_ns: np.ndarray | int) -> TaskGraph:
    """New graph with the selected tasks' durations set to ``dur_ns`` (ns, scalar or per task)."""
    dur = graph.dur_ns.copy()
    dur[np.asarray(mask, dtype=bool)] = np.asarray(dur_ns, dtype=np.int64)
    return same_structure(graph, dataclasses.replace(graph, dur_ns=dur))


# ------------------------------------------------------------------------------- remove ------
def _nearest_kept(link: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """Follow ``link`` (lane predecessor or successor, -1 none) through removed tasks: per task,
    the nearest kept one along it (-1 none). Pointer jumping over the tasks whose link still
    reaches a removed task (a task whose link reaches a kept one, or none, is done): one pass over
    the graph, then O(removed x log chain) numpy work."""
    out = link.copy()
    bad = np.flatnonzero((out >= 0) & removed[np.maximum(out, 0)])
    while len(bad):
        out[bad] = out[out[bad]]  # jump: the link of the removed task reached (already partly resolved)
        o = out[bad]
        bad = bad[(o >= 0) & removed[np.maximum(o, 0)]]
    return out


def remove(graph: TaskGraph, mask: np.ndarray) -> TaskGraph:
    """New graph without the selected tasks; dependencies through them are kept transitively.

    Edge by edge (rules in :mod:`daydream.graph.edges`): an edge *from* a removed task now comes
    from the nearest kept task before it on its lane (a call's launches pass to the previous call
    on its thread; a wait for a removed GPU task becomes a wait for the kept task before it on its
    stream; lane order is spliced), or is dropped when there is none (a GPU task then becomes
    ready at the trace start). An edge *into* a removed task is dropped, unless its kind
    ``inherit``s: then it goes to the next kept task on the lane (a cross-stream wait holds for the
    first task launched after it). The gap before a removed call goes with it. Launch-queue edges
    are made again from the new stream order (:func:`daydream.graph.queue.requeue`).
    """
    mask = np.asarray(mask, dtype=bool)
    if not mask.any():
        return graph
    n = graph.n
    kept_prev = _nearest_kept(graph.lane_prev, mask)
    kept_next = _nearest_kept(graph.lane_next, mask)
    src, dst, kind, origin = graph.edge_src, graph.edge_dst, graph.edge_kind, graph.edge_origin
    src = np.where(mask[src], kept_prev[src], src)
    inherit = rule_arrays().inherit[kind]
    dst = np.where(mask[dst], np.where(inherit, kept_next[dst], -1), dst)
    ok = (src >= 0) & (dst >= 0)
    keep = ~mask
    new_id = np.full(n, -1, dtype=np.int64)
    new_id[keep] = np.arange(int(keep.sum()))
    s2, d2, k2, o2 = dedupe_edges(new_id[src[ok]], new_id[dst[ok]], kind[ok], origin[ok])
    g = _take_nodes(graph, np.nonzero(keep)[0])
    g = dataclasses.replace(g.with_edges(s2, d2, k2, o2), order=new_id[graph.order[keep[graph.order]]])
    return _with_valid_order(requeue(g)) if g.launch_queue_depth > 0 else g


def _take_nodes(graph: TaskGraph, idx: np.ndarray) -> TaskGraph:
    """The node arrays of ``graph`` at ``idx`` (edges and order left to the caller)."""
    per_node = ("row", "node_kind", "lane", "name_id", "pid", "tid", "device", "stream", "correlation", "copy_kind", "dur_ns",
                "gap_ns", "rec_start_ns", "rec_end_ns", "position_ns")
    kw = {f: getattr(graph, f)[idx] for f in per_node}
    kw["mapping"] = graph.mapping.take(idx) if graph.mapping is not None else None
    kw["priority"] = graph.priority[idx] if graph.priority is not None else None
    return dataclasses.replace(graph, **kw)


# ------------------------------------------------------------------------------- insert ------
def _append_node(graph: TaskGraph, *, like: int, code: int, lane: int, dur_ns: int, gap_ns: int, name: str) -> TaskGraph:
    """``graph`` with one more node (id ``graph.n``) on ``lane``: a copy of ``like`` (identity,
    mapping, priority, position) with its own kind, name, duration and gap, no table row and no
    correlation id, recorded as an instant at ``like``'s end."""
    g = _take_nodes(graph, np.append(np.arange(graph.n), like))
    v = graph.n
    g.row[v], g.node_kind[v], g.lane[v], g.correlation[v] = -1, code, lane, -1
    g.name_id[v] = len(graph.names)
    g.dur_ns[v], g.gap_ns[v] = int(dur_ns), int(gap_ns) if code == NODE_CPU else 0
    g.rec_start_ns[v] = graph.rec_end_ns[like]
    return dataclasses.replace(g, names=[*graph.names, name])


def _relink_lane_successors(graph: TaskGraph, at: np.ndarray) -> np.ndarray:
    """Edge sources with the new task ``at[x]`` in place of each anchor ``x`` (``at[x] >= 0``) on the
    lane edge from ``x`` to its lane successor: the successor now follows the inserted task."""
    src = graph.edge_src.copy()
    moved = (at[src] >= 0) & (graph.edge_dst == graph.lane_next[src]) & rule_arrays().lane[graph.edge_kind]
    src[moved] = at[src[moved]]
    return src


def add_edges(graph: TaskGraph, src, dst, kind, origin: int = Origin.INSERTED) -> TaskGraph:
    """New graph with edges ``src -> dst`` of ``kind`` added (the visiting order is repaired).

    ``kind``: one edge kind, or one per edge. Adding edge sets of several kinds in one call gives
    the graph that adding them one set after the other gives (the same edges, and the same order:
    Kahn's order by position is the smallest valid one, so an order repaired for the first set
    that the second keeps is the one repaired for both), at one copy and order check of the graph.

    Raises:
        DaydreamError: bad node ids, or the edges close a dependency cycle.
    """
    src = np.atleast_1d(np.asarray(src, np.int64))
    dst = np.atleast_1d(np.asarray(dst, np.int64))
    if len(src) != len(dst) or (len(src) and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= graph.n)):
        raise DaydreamError("add_edges: source and destination must be node ids of the graph, one each")
    kinds = np.broadcast_to(np.asarray(kind, np.int64), (len(src),)) if np.ndim(kind) else np.full(len(src), int(kind), np.int64)
    for x in (sorted_unique(kinds).tolist() if np.ndim(kind) else [int(kind)]):
        if not rule_arrays().known[x]:
            raise DaydreamError(f"add_edges: edge kind {x} has no rule (register_kind it first)")
    s, d, k, o = dedupe_edges(np.concatenate([graph.edge_src, src]), np.concatenate([graph.edge_dst, dst]),
                               np.concatenate([graph.edge_kind, kinds.astype(np.uint8)]),
                               np.concatenate([graph.edge_origin, np.full(len(src), origin, np.uint8)]))
    return _with_valid_order(graph.with_edges(s, d, k, o))


def with_latent_waits(graph: TaskGraph) -> tuple[TaskGraph, int]:
    """(``graph`` with its ``latent_waits`` pairs added as inferred cross-stream edges, how many): the
    pairs whose two tasks the graph still has (their table rows), for the bound a prediction
    reports on traces whose cross-stream waits name no event. ``graph`` itself when there are none.

    Raises:
        DaydreamError: the edges close a dependency cycle.
    """
    if not graph.latent_waits:
        return graph, 0
    pr, cr = graph.latent_waits
    has = np.flatnonzero(graph.row >= 0)
    o = has[np.argsort(graph.row[has], kind="stable")]
    rows = graph.row[o]

    def node_of(r):
        j = np.minimum(np.searchsorted(rows, r), max(len(rows) - 1, 0))
        return np.where((len(rows) > 0) & (rows[j] == r), o[j], -1) if len(rows) else np.full(len(r), -1)

    s, d = node_of(pr), node_of(cr)
    ok = (s >= 0) & (d >= 0) & (s != d)
    if not ok.any():
        return graph, 0
    return add_edges(graph, s[ok], d[ok], EdgeKind.XSTREAM, Origin.INFERRED), int(ok.sum())


def _with_valid_order(g: TaskGraph) -> TaskGraph:
    """``g`` with a valid visiting order (its own when it is, else a topological sort), marked so."""
    if g.order_valid:
        return g
    return dataclasses.replace(g, order=topological_order(g)).known_valid()


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


def set_priority(graph: TaskGraph, priority: np.ndarray, lanes: Iterable[int] | None = None) -> TaskGraph:
    """New graph whose GPU ``lanes`` are scheduled by priority instead of in recorded order.

    On such a lane, a task starts as soon as its own dependencies allow and the lane is free, and
    among the tasks ready at that moment the one with the largest ``priority`` goes first (ties:
    recorded order); see :mod:`daydream.simulate.priority`.

    Args:
        priority: int per node (length ``graph.n``); only tasks on ``lanes`` use it.
        lanes: lane ids (``graph.lane`` values) to schedule by priority; default: the GPU lanes
            of the tasks with a non-zero priority.

    Raises:
        DaydreamError: a wrong-sized priority array, or a lane that is not a GPU stream.
    """
    pr = np.asarray(priority, dtype=np.int64)
    if pr.shape != (graph.n,):
        raise DaydreamError("set_priority: one priority per task is needed")
    if lanes is None:
        lanes = sorted_unique(graph.lane[(pr != 0) & (graph.node_kind != NODE_CPU)]).tolist()
    lanes = sorted({int(x) for x in lanes})
    for ln in lanes:
        if not 0 <= ln < len(graph.lanes) or not graph.lane_is_gpu[ln]:
            raise DaydreamError(f"set_priority: lane {ln} is not a GPU stream (only streams can be rescheduled)")
    return dataclasses.replace(graph, priority=pr, priority_lanes=tuple(lanes))


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


# ------------------------------------------------------------------ new threads and gaps -----
def set_gap(graph: TaskGraph, mask: np.ndarray, gap_ns: np.ndarray | int) -> TaskGraph:
    """New graph with the CPU gap before the selected CPU tasks set to ``gap_ns`` (ns, scalar or
    one per selected task; GPU tasks keep gap 0).

    Raises:
        DaydreamError: a selected task is a GPU task, or a gap is negative or too long.
    """
    mask = np.asarray(mask, dtype=bool)
    if (mask & (graph.node_kind != NODE_CPU)).any():
        raise DaydreamError("set_gap: only CPU tasks have a gap")
    gap = graph.gap_ns.copy()
    new = np.broadcast_to(np.asarray(gap_ns, dtype=np.int64), (int(mask.sum()),))
    if len(new) and (new.min() < 0 or new.max() >= MAX_DURATION_NS):
        raise DaydreamError("set_gap: gaps must be >= 0 ns and shorter than MAX_DURATION_NS")
    gap[mask] = new
    return dataclasses.replace(graph, gap_ns=gap)


def add_thread(graph: TaskGraph, *, pid: int, tid: int, like: int, dur_ns, gap_ns, names: list[str]) -> tuple[TaskGraph, np.ndarray]:
    """New graph with one more CPU thread (lane ``cpu pid/tid``) running ``len(names)`` tasks in
    thread order: task i lasts ``dur_ns[i]`` after a gap ``gap_ns[i]`` (ns). The tasks copy the
    identity and mapping of ``like`` (a CPU node) and have no table row; other dependencies are
    added with :func:`add_edges`.

    Returns:
        (new graph, ids of the new tasks in thread order).

    Raises:
        DaydreamError: ``like`` is not a CPU task, or the thread exists already.
    """
    if not 0 <= like < graph.n or graph.node_kind[like] != NODE_CPU:
        raise DaydreamError("add_thread: the model task must be a CPU task")
    key = np.array([0, pid, tid, 0], np.int64)
    if len(graph.lane_keys) and (graph.lane_keys == key).all(axis=1).any():
        raise DaydreamError(f"add_thread: thread {pid}/{tid} exists already")
    k = len(names)
    ln = len(graph.lanes)
    g = _take_nodes(graph, np.concatenate([np.arange(graph.n), np.full(k, like, np.int64)]))
    new = np.arange(graph.n, graph.n + k)
    g.row[new], g.lane[new], g.correlation[new], g.pid[new], g.tid[new] = -1, ln, -1, pid, tid
    g.name_id[new] = len(graph.names) + np.arange(k)
    g.dur_ns[new] = np.asarray(dur_ns, np.int64)
    g.gap_ns[new] = np.asarray(gap_ns, np.int64)
    g = dataclasses.replace(g, names=[*graph.names, *names], lanes=[*graph.lanes, f"cpu pid {pid} tid {tid}"],
                            lane_is_gpu=np.append(graph.lane_is_gpu, False), lane_keys=np.vstack([graph.lane_keys, key[None, :]]),
                            order=np.concatenate([graph.order, new]))
    g = g.with_edges(g.edge_src, g.edge_dst, g.edge_kind, g.edge_origin)
    if k > 1:
        g = add_edges(g, new[:-1], new[1:], EdgeKind.THREAD)
    return _with_valid_order(g), new


def add_threads(graph: TaskGraph, threads: list[dict]) -> tuple[TaskGraph, list[np.ndarray]]:
    """New graph with several CPU threads added: the graph that :func:`add_thread` makes for
    ``threads[0]``, ``threads[1]``, ... one after the other (each a dict of its keyword
    arguments: pid, tid, like, dur_ns, gap_ns, names), with the same node ids, edges and visiting
    order, at one copy of the graph instead of one per thread. (One after the other, the first
    thread of more than one task dedupes the edge list; the others append their thread edges,
    which repeat nothing: they join new tasks only.)

    Returns:
        (new graph, ids of each thread's new tasks in thread order).

    Raises:
        DaydreamError: as :func:`add_thread` (a model task that is not a CPU task, a thread that
            exists already).
    """
    keys = [(int(t["pid"]), int(t["tid"])) for t in threads]
    ok = (graph.order_valid and len(set(keys)) == len(keys)
          and all(0 <= t["like"] < graph.n and graph.node_kind[t["like"]] == NODE_CPU for t in threads)
          and not (len(graph.lane_keys) and any((graph.lane_keys == np.array([0, p, q, 0], np.int64)).all(axis=1).any() for p, q in keys)))
    if not ok or not threads:  # the one-by-one path says what is wrong (or repairs the order as it does)
        out = []
        for t in threads:
            graph, new = add_thread(graph, **t)
            out.append(new)
        return graph, out
    n, ln = graph.n, len(graph.lanes)
    ks = [len(t["names"]) for t in threads]
    first = n + np.cumsum([0, *ks[:-1]])
    news = [np.arange(f, f + k) for f, k in zip(first.tolist(), ks)]
    g = _take_nodes(graph, np.concatenate([np.arange(n)] + [np.full(k, t["like"], np.int64) for t, k in zip(threads, ks)]))
    names = list(graph.names)
    for i, (t, new) in enumerate(zip(threads, news)):
        g.row[new], g.lane[new], g.correlation[new], g.pid[new], g.tid[new] = -1, ln + i, -1, t["pid"], t["tid"]
        g.name_id[new] = len(names) + np.arange(len(new))
        g.dur_ns[new] = np.asarray(t["dur_ns"], np.int64)
        g.gap_ns[new] = np.asarray(t["gap_ns"], np.int64)
        names += list(t["names"])
    key_rows = np.array([[0, p, q, 0] for p, q in keys], np.int64)
    chain = [x for x in news if len(x) > 1]
    src, dst, kind, origin = graph.edge_src, graph.edge_dst, graph.edge_kind, graph.edge_origin
    if chain:
        src, dst, kind, origin = dedupe_edges(np.concatenate([src, *[x[:-1] for x in chain]]), np.concatenate([dst, *[x[1:] for x in chain]]),
                                              np.concatenate([kind, np.full(sum(len(x) - 1 for x in chain), EdgeKind.THREAD, np.uint8)]),
                                              np.concatenate([origin, np.full(sum(len(x) - 1 for x in chain), Origin.INSERTED, np.uint8)]))
    g = dataclasses.replace(g, names=names, lanes=[*graph.lanes, *(f"cpu pid {p} tid {q}" for p, q in keys)],
                            lane_is_gpu=np.append(graph.lane_is_gpu, np.zeros(len(keys), bool)),
                            lane_keys=np.vstack([graph.lane_keys, key_rows]), order=np.concatenate([graph.order, *news]))
    # the order stays valid: the new tasks come after all others, each thread's in thread order
    return g.with_edges(src, dst, kind, origin).known_valid(), news


def remove_edges(graph: TaskGraph, mask: np.ndarray) -> TaskGraph:
    """New graph without the selected edges (a mask over ``graph.edge_src``); the tasks stay.

    Removing a dependency never invalidates a visiting order, so the order is kept. Lane-order
    and launch edges cannot be removed this way (use :func:`remove` on tasks).

    Raises:
        DaydreamError: a wrong-sized mask, or a lane-order or launch edge selected.
    """
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != (graph.m,):
        raise DaydreamError("remove_edges: one flag per edge is needed")
    ra = rule_arrays()
    if (mask & (ra.lane[graph.edge_kind] | ra.launch[graph.edge_kind])).any():
        raise DaydreamError("remove_edges: lane-order and launch edges go with their tasks (use remove)")
    keep = ~mask
    g = graph.with_edges(graph.edge_src[keep], graph.edge_dst[keep], graph.edge_kind[keep], graph.edge_origin[keep])
    if graph.order_valid:
        g = g.known_valid()
    return g

# ------------------------------------------------------------------------------- host path ---
def scale_gaps(graph: TaskGraph, mask: np.ndarray, factor: float) -> TaskGraph:
    """New graph with the CPU gaps before the selected CPU tasks multiplied by ``factor`` (a faster
    or slower host CPU runs the framework code between API calls faster or slower); rounded to ns.
    When every CPU task is selected, ``host_scales`` records it (range boundaries in gaps move
    with the gaps).

    Raises:
        DaydreamError: a negative or non-finite factor.
    """
    if not np.isfinite(factor) or factor < 0:
        raise DaydreamError("scale_gaps: the factor must be finite and >= 0")
    m = np.asarray(mask, dtype=bool) & (graph.node_kind == NODE_CPU)
    gap = graph.gap_ns.copy()
    gap[m] = np.rint(gap[m] * float(factor)).astype(np.int64)
    every = bool(m.sum() == np.count_nonzero(graph.node_kind == NODE_CPU))  # all host time: instants in gaps move with it
    return dataclasses.replace(graph, gap_ns=gap, host_scales=graph.host_scales + ((None, float(factor)),) if every else graph.host_scales)


def set_launch_latency(graph: TaskGraph, latency_ns: int) -> TaskGraph:
    """New graph whose launch latency ``L`` (ns from a launching call's start to the earliest start
    of its task, ``docs/model.md`` rule 5) is ``latency_ns``; the GPU gap ``G`` is kept, capped at
    the new ``L`` (G <= L holds on every trace).

    Raises:
        DaydreamError: a negative latency.
    """
    if latency_ns < 0:
        raise DaydreamError("set_launch_latency: the latency must be >= 0")
    return dataclasses.replace(graph, launch_latency_ns=int(latency_ns), gpu_gap_ns=min(int(graph.gpu_gap_ns), int(latency_ns)))

def add_stream(graph: TaskGraph, *, pid: int, device: int, stream: int | None = None) -> tuple[TaskGraph, int]:
    """New graph with one more (empty) GPU stream lane on ``device`` of process ``pid``.

    Args:
        stream: the stream id; default: one more than the largest stream id of the graph.

    Returns:
        (new graph, id of the new lane).

    Raises:
        DaydreamError: the stream already has a lane.
    """
    if stream is None:
        gpu = graph.node_kind != NODE_CPU
        stream = int(graph.stream[gpu].max()) + 1 if gpu.any() else 0
    key = np.array([[1, pid, device, stream]], dtype=np.int64)
    if len(graph.lane_keys) and (graph.lane_keys == key).all(axis=1).any():
        raise DaydreamError(f"add_stream: stream {stream} of device {device} already has a lane")
    return dataclasses.replace(
        graph, lanes=[*graph.lanes, f"gpu {device} stream {stream} (pid {pid})"],
        lane_is_gpu=np.append(graph.lane_is_gpu, True), lane_keys=np.vstack([graph.lane_keys.reshape(-1, 4), key])), len(graph.lanes)


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
