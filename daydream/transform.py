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
"""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Iterable

import numpy as np

from .errors import DaydreamError
from .events import Kind
from .graph import NODE_CPU, TaskGraph, kahn_order, simulation_edges

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
    t = graph.table
    if stream is not None:
        streams = [stream] if isinstance(stream, int) else list(stream)
        s = np.where(graph.row >= 0, t.stream[np.maximum(graph.row, 0)], -1)
        m &= (graph.node_kind != NODE_CPU) & np.isin(s, streams)
    if thread is not None:
        threads = [thread] if isinstance(thread, int) else list(thread)
        s = np.where(graph.row >= 0, t.tid[np.maximum(graph.row, 0)], -1)
        m &= (graph.node_kind == NODE_CPU) & np.isin(s, threads)
    if phase is not None or layer is not None or op is not None:
        ann = graph.annotations
        if not ann:
            raise DaydreamError("selecting by layer, phase or op needs a mapped graph (build_graph(table, mapping))")
        if phase is not None:
            from .mapping import PHASES

            phases = [phase] if isinstance(phase, str) else list(phase)
            bad = [p for p in phases if p not in PHASES]
            if bad:
                raise DaydreamError(f"unknown phase {bad[0]!r}; use one of {', '.join(PHASES)}")
            m &= np.isin(ann["phase"], [PHASES.index(p) for p in phases])
        labels = np.asarray(ann.get("labels", []), dtype=object)
        for key, pat in (("layer_id", layer), ("op_id", op)):
            if pat is None:
                continue
            ids = ann[key]
            lab_m = _regex_mask(labels, pat) if len(labels) else np.zeros(0, bool)
            m &= (ids >= 0) & lab_m[np.maximum(ids, 0)] if len(labels) else np.zeros(graph.n, bool)
    if where is not None:
        m &= np.asarray(where(graph), dtype=bool)
    return m


def name_mask(graph: TaskGraph, pattern: str, subset: np.ndarray | None = None) -> np.ndarray:
    """Nodes (of ``subset``, default all) whose name matches ``pattern`` (``re.search``), decided
    once per distinct name (kernel names can be thousands of characters long).

    Raises:
        DaydreamError: a bad regular expression.
    """
    try:
        rx = re.compile(pattern)
    except re.error as e:
        raise DaydreamError(f"bad regular expression {pattern!r}: {e}") from None
    out = np.zeros(graph.n, dtype=bool)
    cand = np.ones(graph.n, dtype=bool) if subset is None else np.asarray(subset, dtype=bool)
    has = cand & (graph.row >= 0)
    if has.any():
        t = graph.table
        uniq, inv = np.unique(t.name_id[graph.row[has]], return_inverse=True)
        hit = np.fromiter((rx.search(t.names[int(i)]) is not None for i in uniq), dtype=bool, count=len(uniq))
        out[has] = hit[inv.reshape(-1)]
    for v, s in graph.inserted_names.items():
        if cand[v]:
            out[v] = rx.search(s) is not None
    return out


def _regex_mask(strings: np.ndarray, pattern: str) -> np.ndarray:
    try:
        rx = re.compile(pattern)
    except re.error as e:
        raise DaydreamError(f"bad regular expression {pattern!r}: {e}") from None
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
    if len(scaled) and scaled.max() >= MAX_DURATION_NS:
        raise DaydreamError(f"scale: a scaled duration would exceed {MAX_DURATION_NS / 1e9 / 86400:.0f} days; use a smaller factor")
    dur[ids] = scaled.astype(np.int64)
    return dataclasses.replace(graph, dur_ns=dur)


def set_duration(graph: TaskGraph, mask: np.ndarray, dur_ns: np.ndarray | int) -> TaskGraph:
    """New graph with the selected tasks' durations set to ``dur_ns`` (ns, scalar or per task)."""
    dur = graph.dur_ns.copy()
    dur[np.asarray(mask, dtype=bool)] = np.asarray(dur_ns, dtype=np.int64)
    return dataclasses.replace(graph, dur_ns=dur)


# ------------------------------------------------------------------------------- remove ------
def remove(graph: TaskGraph, mask: np.ndarray) -> TaskGraph:
    """New graph without the selected tasks; dependencies through them are kept transitively.

    See the module docstring for what happens to gaps, launches and waits.
    """
    mask = np.asarray(mask, dtype=bool)
    if not mask.any():
        return graph
    n = graph.n
    removed = mask
    lane_prev = graph.lane_prev
    # nearest kept lane predecessor of every node (through removed ones)
    kept_prev = lane_prev.copy()
    # resolve chains: iterate pointer jumping until no pointer lands on a removed node
    for _ in range(64):
        bad = (kept_prev >= 0) & removed[np.maximum(kept_prev, 0)]
        if not bad.any():
            break
        kept_prev[bad] = lane_prev[kept_prev[bad]]
        # pointer jumping: also jump through chains faster
        bad2 = (kept_prev >= 0) & removed[np.maximum(kept_prev, 0)]
        kept_prev[bad2] = kept_prev[kept_prev[bad2]]
    else:  # pragma: no cover - chains longer than 2**64 cannot happen
        raise DaydreamError("internal: removal chain did not resolve")

    # Dependencies through removed GPU tasks (docs/model.md semantics):
    # * a call waiting for a removed task, or a cross-stream consumer of one, now waits for the
    #   task before it on its stream (waiting for a stream position covers what is before it);
    # * the next kept task on the stream also inherits the removed tasks' cross-stream producers
    #   (it becomes the first task launched after their cudaStreamWaitEvent).
    ptr, idx = graph.pred_ptr, graph.pred_idx
    pred_lists = np.split(idx, ptr[1:-1]) if n else []

    def stand_in(p: int) -> list[int]:
        return [int(kept_prev[p])] if kept_prev[p] >= 0 else []

    new_preds: list[list[int]] = []
    for v in range(n):
        if removed[v]:
            new_preds.append([])
            continue
        out: list[int] = []
        for p in pred_lists[v].tolist():
            out.extend(stand_in(p) if removed[p] else [p])
        if graph.node_kind[v] != NODE_CPU:
            u = int(lane_prev[v])
            while u >= 0 and removed[u]:  # removed stream predecessors between kept_prev and v
                for p in pred_lists[u].tolist():
                    out.extend(stand_in(p) if removed[p] else [p])
                u = int(lane_prev[u])
            out = [x for x in out if x != int(kept_prev[v])]
        new_preds.append(sorted(set(out)))

    # launches of kept GPU nodes whose launching call is removed
    launch = graph.launch.copy()
    bad_l = (launch >= 0) & removed[np.maximum(launch, 0)]
    launch[bad_l] = kept_prev[launch[bad_l]]

    keep = ~removed
    new_id = np.full(n, -1, dtype=np.int64)
    new_id[keep] = np.arange(int(keep.sum()))

    def remap(a: np.ndarray) -> np.ndarray:
        return np.where(a >= 0, new_id[np.maximum(a, 0)], -1)

    kept_ids = np.nonzero(keep)[0]
    counts = np.fromiter((len(new_preds[v]) for v in kept_ids), dtype=np.int64, count=len(kept_ids))
    pred_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    flat = [p for v in kept_ids for p in new_preds[v]]
    pred_idx = new_id[np.asarray(flat, dtype=np.int64)] if flat else np.zeros(0, np.int64)
    blocking = graph.blocking[keep] & (counts > 0)  # a call left with nothing to wait for no longer blocks
    order = new_id[graph.order[keep[graph.order]]]
    return dataclasses.replace(
        graph,
        row=graph.row[keep],
        node_kind=graph.node_kind[keep],
        lane=graph.lane[keep],
        lane_prev=remap(kept_prev)[keep],
        dur_ns=graph.dur_ns[keep],
        gap_ns=graph.gap_ns[keep],
        blocking=blocking,
        launch=remap(launch)[keep],
        pred_ptr=pred_ptr,
        pred_idx=pred_idx,
        rec_start_ns=graph.rec_start_ns[keep],
        rec_end_ns=graph.rec_end_ns[keep],
        position_ns=graph.position_ns[keep],
        order=order,
        inserted_names={int(new_id[v]): s for v, s in graph.inserted_names.items() if keep[v]},
        annotations={k: (a[keep] if isinstance(a, np.ndarray) and len(a) == n else a) for k, a in graph.annotations.items()},
    )


# ------------------------------------------------------------------------------- insert ------
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
        preds: extra predecessors: GPU tasks the new GPU task waits for, or GPU tasks a new CPU
            task blocks on (which makes it a blocking call).
        succs: nodes that gain the new task as an extra predecessor (it must be a GPU task, or
            they must be blocking-capable CPU tasks).

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
    preds = [int(p) for p in preds]
    succs = [int(s) for s in succs]
    for x in [*preds, *succs, *( [launch] if launch is not None else [])]:
        if not 0 <= x < n:
            raise DaydreamError(f"insert: {x} is not a node")
    v = n  # new node id
    lane_prev = np.append(graph.lane_prev, after)
    succ_on_lane = np.nonzero(graph.lane_prev == after)[0]
    lane_prev[succ_on_lane] = v
    # extra predecessors: the new node's, then successors gain v
    lists = np.split(graph.pred_idx, graph.pred_ptr[1:-1]) if n else []
    lists = [lst.tolist() for lst in lists] + [sorted(set(preds))]
    for s in succs:
        lists[s] = sorted(set(lists[s]) | {v})
    counts = np.fromiter((len(x) for x in lists), dtype=np.int64, count=n + 1)
    pred_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    pred_idx = np.asarray([p for x in lists for p in x], dtype=np.int64)
    blocking = np.append(graph.blocking, code == NODE_CPU and len(preds) > 0)
    for s in succs:
        if graph.node_kind[s] == NODE_CPU:
            blocking[s] = True
    pos = int(graph.position_ns[after])
    # order: right after the anchor; replaced by a topological sort below if that breaks a dependency
    order = graph.order.tolist()
    at = order.index(after) + 1
    order.insert(at, v)
    g2 = dataclasses.replace(
        graph,
        row=np.append(graph.row, -1),
        node_kind=np.append(graph.node_kind, np.uint8(code)),
        lane=np.append(graph.lane, ln),
        lane_prev=lane_prev,
        dur_ns=np.append(graph.dur_ns, int(dur_ns)),
        gap_ns=np.append(graph.gap_ns, int(gap_ns) if code == NODE_CPU else 0),
        blocking=blocking,
        launch=np.append(graph.launch, -1 if launch is None or code == NODE_CPU else int(launch)),
        pred_ptr=pred_ptr,
        pred_idx=pred_idx,
        rec_start_ns=np.append(graph.rec_start_ns, graph.rec_end_ns[after]),
        rec_end_ns=np.append(graph.rec_end_ns, graph.rec_end_ns[after]),
        position_ns=np.append(graph.position_ns, pos),
        order=np.asarray(order, dtype=np.int64),
        inserted_names={**graph.inserted_names, v: name},
        annotations={k: (np.append(a, a[after]) if isinstance(a, np.ndarray) and len(a) == n else a) for k, a in graph.annotations.items()},
    )
    from .simulate import check_topological

    try:
        check_topological(g2, g2.order)
    except DaydreamError:
        g2 = dataclasses.replace(g2, order=topological_order(g2))
    return g2, v


def topological_order(graph: TaskGraph) -> np.ndarray:
    """A visiting order for the simulator (Kahn's algorithm over the graph's dependencies).

    A blocking call's waits only need to precede the next task on its thread (see
    simulate.check_topological), so those edges are attached to that successor.

    Raises:
        DaydreamError: the dependencies contain a cycle.
    """
    src, dst = simulation_edges(graph.lane_prev, graph.launch, graph.node_kind == NODE_CPU, graph.pred_ptr, graph.pred_idx)
    out = kahn_order(graph.n, src, dst, graph.position_ns.tolist())
    if out is None:
        raise DaydreamError("the transformed graph has a dependency cycle")
    return out


def set_priority(graph: TaskGraph, priority: np.ndarray, lanes: Iterable[int] | None = None) -> TaskGraph:
    """New graph whose GPU ``lanes`` are scheduled by priority instead of in recorded order.

    On such a lane, a task starts as soon as its own dependencies allow and the lane is free, and
    among the tasks ready at that moment the one with the largest ``priority`` goes first (ties:
    recorded order); see :mod:`daydream.schedule`.

    Args:
        priority: int per node (length ``graph.n``); only tasks on ``lanes`` use it.
        lanes: lane ids (``graph.lane`` values) to schedule by priority; default: the GPU lanes
            of the tasks with a non-zero priority.

    Raises:
        DaydreamError: a wrong-sized priority array, or a lane that is not a GPU stream.
    """
    from .schedule import LANES_KEY, PRIORITY_KEY

    pr = np.asarray(priority, dtype=np.int64)
    if pr.shape != (graph.n,):
        raise DaydreamError("set_priority: one priority per task is needed")
    if lanes is None:
        lanes = np.unique(graph.lane[(pr != 0) & (graph.node_kind != NODE_CPU)]).tolist()
    lanes = sorted({int(x) for x in lanes})
    for ln in lanes:
        if not 0 <= ln < len(graph.lanes) or not graph.lane_is_gpu[ln]:
            raise DaydreamError(f"set_priority: lane {ln} is not a GPU stream (only streams can be rescheduled)")
    ann = dict(graph.annotations)
    ann[PRIORITY_KEY] = pr
    ann[LANES_KEY] = tuple(lanes)
    return dataclasses.replace(graph, annotations=ann)


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
    v = np.arange(graph.n)
    dst = np.repeat(v, np.diff(graph.pred_ptr))
    # the call that launched it (a blocking copy) returns before the new launch is issued
    waiters = sorted(set(dst[graph.pred_idx == kernel].tolist()) - {lch})
    g1, call = insert(graph, after=lch, dur_ns=call_dur_ns, name="cudaLaunchKernel", kind="cpu", gap_ns=0)
    return insert(g1, after=kernel, dur_ns=dur_ns, name=name, kind="kernel", launch=call, succs=waiters)
