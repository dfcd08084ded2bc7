"""Builder stages: the tasks of a trace, their launch links, lanes, visiting order, gaps.

Each stage is a function of arrays (``docs/model.md``, "Tasks and lanes" and "Order and ties");
:func:`daydream.graph.build.build_graph` runs them in order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...util import jit
from ...util.arrays import stable_group_order
from ...events.table import EventTable, Kind
from ...events.links import launch_rows
from ...events.threads import CallThreads, call_threads, pair_keys, prev_max_end, task_rows
from .._arrays import count, few_unique_columns, lane_chains, segmented_cummax, small_ints, unique_columns
from ..model import NODE_CPU


@dataclass
class CpuTasks:
    """The CPU tasks: runtime/driver calls with nested calls folded into the call enclosing them.

    Attributes:
        rt_rows: every runtime row, sorted by (pid, tid, row).
        nested: per ``rt_rows`` entry, True when folded into an enclosing call.
        rt_node: per ``rt_rows`` entry, the CPU node (index into ``cpu_rows``) that stands for it.
        cpu_rows: the rows that became CPU nodes (node id = index).
    """

    rt_rows: np.ndarray
    nested: np.ndarray
    rt_node: np.ndarray
    cpu_rows: np.ndarray


def cpu_tasks(table: EventTable, counts: dict[str, int], threads: CallThreads | None = None, method: str = "auto") -> CpuTasks:
    """Stage 1: runtime calls of each thread; a call inside another call of its thread is folded
    into the outer one (counted); a call overlapping the previous one is kept (counted).
    ``threads``: :func:`daydream.events.threads.call_threads` of the table's RUNTIME rows when the
    mapping has them (``Mapping.call_threads``); computed here otherwise. ``method``: "auto"
    classifies the calls in one compiled pass (:func:`_cpu_tasks_kernel`) from
    :data:`DURATIONS_MIN` calls when numba is there ("compiled" whatever the size, "python" the
    kernel uncompiled, "numpy" the array passes); the same answers."""
    if threads is None:
        threads = call_threads(table, np.nonzero(table.kind == Kind.RUNTIME)[0])
    rt_rows, prev_end = threads.rt_rows, threads.prev_end
    fn = jit.kernel_for(_cpu_tasks_kernel, len(rt_rows), DURATIONS_MIN, method)
    if fn is not None:
        nested, rt_node = np.empty(len(rt_rows), np.bool_), np.empty(len(rt_rows), np.int64)
        n_nested, n_over = jit.call(fn, np.ascontiguousarray(rt_rows, np.int64), np.ascontiguousarray(prev_end, np.int64),
                                    table.start_ns, table.end_ns, nested, rt_node)
        count(counts, "API call nested inside another call on its thread (folded into the outer call)", n_nested)
        count(counts, "API call overlapping the previous call on its thread (kept, start unchanged)", n_over)
        return CpuTasks(rt_rows, nested, rt_node, rt_rows[~nested])
    rs, re_ = table.start_ns[rt_rows], table.end_ns[rt_rows]
    nested = (rs < prev_end) & (re_ <= prev_end)
    overlapping = (rs < prev_end) & (re_ > prev_end)
    count(counts, "API call nested inside another call on its thread (folded into the outer call)", nested.sum())
    count(counts, "API call overlapping the previous call on its thread (kept, start unchanged)", overlapping.sum())
    kept = ~nested
    # a nested call always follows its enclosing kept call in start order (same thread)
    rt_node = (np.cumsum(kept) - 1).astype(np.int64, copy=False)
    return CpuTasks(rt_rows, nested, rt_node, rt_rows[kept])


def _cpu_tasks_kernel(rt_rows, prev_end, start, end, nested, rt_node):
    """:func:`cpu_tasks`' pass: ``nested`` and ``rt_node`` per call (written in place); returns
    (nested calls, overlapping calls)."""
    n_nested = 0
    n_over = 0
    k = -1
    for i in range(len(rt_rows)):
        r = rt_rows[i]
        pe = prev_end[i]
        inside = start[r] < pe
        nst = inside and end[r] <= pe
        if nst:
            n_nested += 1
        elif inside:
            n_over += 1
        if not nst:
            k += 1
        nested[i] = nst
        rt_node[i] = k
    return n_nested, n_over


def gpu_task_rows(table: EventTable) -> np.ndarray:
    """Stage 2: the GPU task rows (kernels, memcpys, memsets), in table order."""
    return task_rows(table.kind, rt=False)[1]


def link_launches(table: EventTable, cpu: CpuTasks, gpu_rows: np.ndarray, only: int, counts: dict[str, int],
                  mapping=None, method: str = "auto") -> np.ndarray:
    """Stage 3: the CPU node that launched each GPU task (-1 none), by (pid, correlation id)
    (:func:`daydream.events.links.launch_rows`; ``only``: the only API-calling process, or -1); a
    nested launch call links to its enclosing call. ``mapping``: the table's
    :class:`~daydream.mapping.maps.Mapping`, whose ``launch_row`` is this link when it says
    ``launch_unique`` (no shared ids: the same link whatever the calls' order); linked here
    otherwise. ``method``: "auto" maps the launching rows to nodes and counts in one compiled
    kernel (:func:`_link_kernel`) from :data:`DURATIONS_MIN` GPU tasks when numba is there
    ("compiled" whatever the size, "python" uncompiled, "numpy" the array passes); the same answers."""
    if mapping is not None and mapping.launch_unique and len(mapping.launch_row) == len(table):
        lrow, dup = mapping.launch_row[gpu_rows], np.zeros(len(cpu.rt_rows), bool)
    else:
        lrow, dup = launch_rows(table, cpu.rt_rows, gpu_rows, only)
    count(counts, "runtime calls sharing a correlation id with an earlier call of their process", (dup & ~cpu.nested).sum())
    fn = jit.kernel_for(_link_kernel, len(gpu_rows), DURATIONS_MIN, method)
    if fn is not None:
        out = np.empty(len(lrow), np.int64)
        missing, shared = jit.call(fn, np.ascontiguousarray(lrow, np.int64), np.ascontiguousarray(cpu.rt_rows, np.int64),
                                   np.ascontiguousarray(cpu.rt_node, np.int64), len(table), len(cpu.cpu_rows), out)
        count(counts, "GPU task without a launching call in the trace (ready at trace start)", missing, missing=True)
        count(counts, _SHARED_LAUNCH, shared)
        return out
    node_of_rt_row = np.full(len(table), -1, np.int64)
    node_of_rt_row[cpu.rt_rows] = cpu.rt_node
    out = np.where(lrow >= 0, node_of_rt_row[np.maximum(lrow, 0)], -1)
    count(counts, "GPU task without a launching call in the trace (ready at trace start)", (out < 0).sum(), missing=True)
    linked = out[out >= 0]
    if len(linked):  # one call, several GPU tasks: a CUDA graph launch, or several tasks recorded with one correlation id
        per_call = np.bincount(linked)
        count(counts, _SHARED_LAUNCH, int(np.count_nonzero(per_call[linked] > 1)))
    return out


_SHARED_LAUNCH = ("GPU tasks sharing their launching call with another GPU task (a graph launch, or one correlation "
                  "id given to several tasks)")


def _link_kernel(lrow, rt_rows, rt_node, n_rows, n_cpu, out):
    """:func:`link_launches`' passes: the CPU node of each GPU task's launching row ``lrow`` (-1
    none) in ``out``; returns (GPU tasks without one, GPU tasks sharing theirs with another)."""
    node_of = np.full(n_rows, -1, np.int64)
    for i in range(len(rt_rows)):
        node_of[rt_rows[i]] = rt_node[i]
    per_call = np.zeros(max(n_cpu, 1), np.int64)
    missing = 0
    for j in range(len(lrow)):
        r = lrow[j]
        v = node_of[r] if r >= 0 else -1
        out[j] = v
        if v < 0:
            missing += 1
        else:
            per_call[v] += 1
    shared = 0
    for j in range(len(out)):
        if out[j] >= 0 and per_call[out[j]] > 1:
            shared += 1
    return missing, shared


@dataclass
class Lanes:
    """Lanes and the visiting order (``docs/model.md``, "Order and ties").

    Attributes:
        lane: per node, the lane id; keys: (n_lanes, 4) (is_gpu, pid, tid or device, stream);
        names: display name of each lane; is_gpu: per lane.
        order: all nodes by (position, CPU before GPU, launch correlation id, recorded start, row).
        by_lane: ``order`` grouped by lane (stable). lane_prev: previous node on the lane or -1.
        launch_corr: per node, the correlation id of its launching call (-1 none).
    """

    lane: np.ndarray
    keys: np.ndarray
    names: list[str]
    is_gpu: np.ndarray
    order: np.ndarray
    by_lane: np.ndarray
    lane_prev: np.ndarray
    launch_corr: np.ndarray
    position: np.ndarray

    def split(self, n_cpu: int) -> tuple[np.ndarray, np.ndarray]:
        """(CPU nodes, GPU nodes) of ``by_lane``, each in its order (``n_cpu``: how many nodes are
        CPU tasks): views of ``by_lane`` when the CPU lanes are numbered before the GPU lanes
        (:func:`lane_ids` numbers them so: lane keys start with is_gpu), else gathered."""
        ig = self.is_gpu
        if not np.any(ig[:-1] & ~ig[1:]):  # CPU lanes, then GPU lanes: by_lane holds the CPU nodes first
            return self.by_lane[:n_cpu], self.by_lane[n_cpu:]
        m = ig[self.lane[self.by_lane]]
        return self.by_lane[~m], self.by_lane[m]


def unlaunched_positions(lane: np.ndarray, is_gpu: np.ndarray, launch: np.ndarray, position: np.ndarray,
                         rec_start: np.ndarray, method: str = "auto") -> np.ndarray:
    """Positions of GPU tasks with no launching call in the trace (launched before a window cut
    from a longer run), so that streams stay FIFO in their *recorded* order.

    Such a task has no launch to place it, and its own start can lie far behind a backlog of
    later-launched work. Its position becomes the smallest position of any launched task that
    ran after it on its stream (never later than its own start): order from the record, never
    timing (``docs/model.md``, "Work launched before the window").

    ``method``: "auto" takes the suffix minima and sets the positions in one compiled backward
    pass (:func:`_unlaunched_kernel`) from :data:`LATER_MIN_MIN` GPU tasks when numba is there
    ("compiled" whatever the size, "python" the kernel uncompiled, "numpy" the array passes);
    the same answers.
    """
    nl = is_gpu & (launch < 0)
    if not nl.any():
        return position
    g = np.nonzero(is_gpu)[0]
    o = g[np.lexsort((rec_start[g], small_ints(lane[g], int(lane.max()) + 1)))]  # each stream in recorded execution order
    big = min(int(position.max()) + 1, int(np.iinfo(np.int64).max))  # above every position: "no launched task after it" (min() keeps the position)
    fn = jit.kernel_for(_unlaunched_kernel, len(o), LATER_MIN_MIN, method)
    if fn is not None:
        out = np.array(position, dtype=np.int64)  # a copy
        jit.call(fn, np.ascontiguousarray(o, np.int64), np.ascontiguousarray(launch, np.int64), np.ascontiguousarray(lane, np.int64),
                 np.int64(big), out)
        return out
    val = np.where(launch[o] >= 0, position[o], big)
    after = later_min(val, lane[o], big)  # suffix minimum within each lane, exclusive of the task itself
    out = position.copy()
    m = nl[o]
    out[o[m]] = np.minimum(position[o[m]], after[m])
    return out


def _unlaunched_kernel(o, launch, lane, big, out):
    """:func:`unlaunched_positions`' backward pass over the GPU tasks ``o`` (by stream, then
    recorded start): each unlaunched task's position in ``out`` (the positions, updated in place)
    becomes the smallest position of a launched task after it on its stream, when smaller."""
    cur = big
    for k in range(len(o) - 1, -1, -1):
        v = o[k]
        if k == len(o) - 1 or lane[v] != lane[o[k + 1]]:
            cur = big
        if launch[v] < 0:
            if cur < out[v]:
                out[v] = cur
        elif out[v] < cur:
            cur = out[v]


def later_min(val: np.ndarray, seg: np.ndarray, big: int, method: str = "auto") -> np.ndarray:
    """Per item: the smallest ``val`` of the later items of its run of equal ``seg`` (int64,
    1-d, one length), ``big`` for a run's last item (``big`` >= every value). One compiled
    backward pass (:func:`_later_min_kernel`) from :data:`LATER_MIN_MIN` items when numba is
    there ("auto"; "compiled" whatever the size, "python" the kernel uncompiled, "numpy" never),
    else a segmented running maximum of the reversed, negated values; the same answers."""
    n = len(val)
    fn = jit.kernel_for(_later_min_kernel, n, LATER_MIN_MIN, method)
    if fn is not None:
        out = np.empty(n, np.int64)
        jit.call(fn, np.ascontiguousarray(val, np.int64), np.ascontiguousarray(seg, np.int64), np.int64(big), out)
        return out
    rev = val[::-1]
    seg = seg[::-1]
    start = np.ones(len(rev), bool)
    start[1:] = seg[1:] != seg[:-1]
    shifted = np.empty_like(rev)
    if len(rev):
        shifted[0] = big
    shifted[1:] = rev[:-1]
    shifted[start] = big
    suf = -segmented_cummax(-shifted, start) if len(rev) else shifted
    after = np.empty_like(val)
    after[::-1] = suf
    return after


#: :func:`later_min` compiles its pass from this many items ("auto")
LATER_MIN_MIN = 50_000


def _later_min_kernel(val, seg, big, out):
    """:func:`later_min`'s backward pass, writing ``out`` in place."""
    cur = big
    for k in range(len(val) - 1, -1, -1):
        if k == len(val) - 1 or seg[k] != seg[k + 1]:
            cur = big
        out[k] = cur
        if val[k] < cur:
            cur = val[k]


def lanes_and_order(node_kind, pid, tid_or_dev, stream, position, launch, launch_corr_of_call, row, rec_start,
                    columns=None) -> Lanes:
    """Stage 4: lanes (CPU: (pid, tid); GPU: (pid, device, stream)) and the visiting order.

    Ties in position (calls of several threads at the same ns) go in correlation-id order, the
    order the process issued its calls in. ``columns``: (is GPU 0/1, ``tid_or_dev``, stream (0 on
    CPU nodes), the launching call's ``launch_corr_of_call`` (-1 none)), int64 per node, when the
    caller made them (:func:`daydream.graph.build.assemble.node_columns`); ``tid_or_dev`` and
    ``stream`` are then not read.
    """
    n = len(node_kind)
    gpu = node_kind != NODE_CPU
    if columns is not None:
        is_gpu, tid_or_dev, stream0, launch_corr = columns
    else:
        is_gpu = gpu.astype(np.int64)
        stream0 = np.where(gpu, stream, 0).astype(np.int64, copy=False)
    uniq, lane = lane_ids(is_gpu, np.asarray(pid, dtype=np.int64), np.asarray(tid_or_dev, dtype=np.int64), stream0)
    lane_is_gpu = uniq[:, 0] == 1 if len(uniq) else np.zeros(0, bool)
    names = [(f"gpu {k[2]} stream {k[3]} (pid {k[1]})" if k[0] else f"cpu pid {k[1]} tid {k[2]}") for k in uniq.tolist()]
    position = unlaunched_positions(lane, gpu, launch, position, rec_start)
    if columns is None:
        has_launch = launch >= 0
        launch_corr = launch_corr_of_call[np.maximum(launch, 0)]  # -1 where no launch (in place)
        launch_corr[~has_launch] = -1
    order = visit_order(position, is_gpu, launch_corr, rec_start, row)
    by_lane, lane_prev = lane_chains(order, lane, len(uniq))
    return Lanes(lane, uniq.astype(np.int64) if len(uniq) else np.zeros((0, 4), np.int64), names, lane_is_gpu,
                 order.astype(np.int64, copy=False), by_lane, lane_prev, launch_corr, position)


def lane_ids(is_gpu: np.ndarray, pid: np.ndarray, tid_or_dev: np.ndarray, stream: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`unique_columns` of the lane key columns (int64, one per node; ``stream`` 0 on CPU
    nodes). The builder numbers CPU nodes first, by thread: their lanes are then the runs of
    (pid, tid), read off in one pass, and only the GPU nodes' keys are sorted; any other layout
    goes to :func:`unique_columns` whole."""
    n = len(is_gpu)
    k = n - int(np.count_nonzero(is_gpu))  # CPU nodes
    if k == 0 or k == n or bool(is_gpu[k - 1]) or not bool(is_gpu[k:].all()):
        return unique_columns([is_gpu, pid, tid_or_dev, stream])
    p, t = pid[:k], tid_or_dev[:k]
    dp = p[1:] != p[:-1]
    new = np.ones(k, bool)
    new[1:] = dp | (t[1:] != t[:-1])
    if not bool(np.all(np.where(dp, p[1:] > p[:-1], t[1:] >= t[:-1]))):  # (pid, tid) runs not ascending
        return unique_columns([is_gpu, pid, tid_or_dev, stream])
    first = np.flatnonzero(new)
    c_uniq = np.stack([np.zeros(len(first), np.int64), p[first], t[first], np.zeros(len(first), np.int64)], axis=1)
    g_uniq, g_lane = few_unique_columns([pid[k:], tid_or_dev[k:], stream[k:]])
    uniq = np.concatenate([c_uniq, np.concatenate([np.ones((len(g_uniq), 1), np.int64), g_uniq], axis=1)])
    return uniq, np.concatenate([np.cumsum(new) - 1, g_lane + len(first)])


def visit_order(position, is_gpu, launch_corr, rec_start, row) -> np.ndarray:
    """``np.lexsort((row, rec_start, launch_corr, is_gpu, position))`` (int64 arrays of one
    length; ``row`` distinct, so the order is total): one stable sort of ``position`` and
    ``is_gpu`` packed in an int64 (nodes come in runs of rising position, timsort's near-O(n)
    case), then the full lexsort on the few nodes tied on both (a call's launches at one
    instant, calls of two threads at one nanosecond). The plain lexsort when they do not fit."""
    n = len(position)
    if n == 0:
        return np.zeros(0, np.int64)
    lo = int(position.min())
    if (int(position.max()) - lo).bit_length() > 61:
        return np.lexsort((row, rec_start, launch_corr, is_gpu.astype(np.int8), position))
    key = position - np.int64(lo)  # ((position - lo) << 1) | is_gpu, in place (one array, not three)
    key <<= np.int64(1)
    key |= is_gpu
    o = np.argsort(key, kind="stable")
    ks = key[o]
    eq = ks[1:] == ks[:-1]
    if eq.any():
        tied = np.zeros(n, bool)
        tied[1:] = eq
        tied[:-1] |= eq
        p = np.flatnonzero(tied)  # runs of equal keys, in key order
        sub = o[p]
        o[p] = sub[np.lexsort((row[sub], rec_start[sub], launch_corr[sub], key[sub]))]
    return o


def durations_and_gaps(node_kind, rec_start, rec_end, lane_prev, t0: int, counts: dict[str, int],
                       method: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Stage 5: recorded durations (negative ones set to 0, counted) and the CPU gap before each
    CPU node (from the previous task on its thread, or from ``t0``; never negative); int64 ns,
    one per node. One compiled pass (:func:`_durations_kernel`) from :data:`DURATIONS_MIN` nodes
    when numba is there ("auto"; "compiled" whatever the size, "python" the kernel uncompiled,
    "numpy" never), else array passes; the same answers."""
    fn = jit.kernel_for(_durations_kernel, len(node_kind), DURATIONS_MIN, method)
    if fn is not None:
        dur, gap = np.empty(len(node_kind), np.int64), np.empty(len(node_kind), np.int64)
        neg = jit.call(fn, np.ascontiguousarray(node_kind, np.uint8), np.ascontiguousarray(rec_start, np.int64),
                       np.ascontiguousarray(rec_end, np.int64), np.ascontiguousarray(lane_prev, np.int64), np.int64(t0), dur, gap)
        count(counts, "task with negative duration (set to 0)", neg)
        return dur, gap
    dur = (rec_end - rec_start).astype(np.int64, copy=False)
    neg = dur < 0
    count(counts, "task with negative duration (set to 0)", neg.sum())
    dur[neg] = 0
    gap = np.zeros(len(node_kind), dtype=np.int64)
    cpu = np.nonzero(node_kind == NODE_CPU)[0]
    prev = lane_prev[cpu]
    prev_end = np.where(prev >= 0, rec_end[np.maximum(prev, 0)], t0)
    gap[cpu] = np.maximum(rec_start[cpu] - prev_end, 0)
    return dur, gap


#: :func:`durations_and_gaps` runs its compiled pass from this many nodes ("auto")
DURATIONS_MIN = 50_000


def _durations_kernel(node_kind, rec_start, rec_end, lane_prev, t0, dur, gap):
    """:func:`durations_and_gaps`' pass, writing ``dur`` and ``gap``; returns how many durations were negative."""
    neg = 0
    for v in range(len(node_kind)):
        d = rec_end[v] - rec_start[v]
        if d < 0:
            neg += 1
            d = 0
        dur[v] = d
        g = 0
        if node_kind[v] == 0:  # NODE_CPU
            p = lane_prev[v]
            g = rec_start[v] - (rec_end[p] if p >= 0 else t0)
            if g < 0:
                g = 0
        gap[v] = g
    return neg


@dataclass
class Nodes:
    """Node arrays after stages 1-3: CPU nodes first, then GPU nodes."""

    row: np.ndarray
    node_kind: np.ndarray
    launch: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    n_cpu: int


def node_arrays(table: EventTable, cpu: CpuTasks, gpu_rows: np.ndarray, g_launch: np.ndarray, only: int) -> Nodes:
    """The node arrays (CPU nodes, then GPU nodes) of the tasks found by stages 1-3 (each filled
    in place, CPU part then GPU part: no temporary per part)."""
    n_cpu, n_gpu = len(cpu.cpu_rows), len(gpu_rows)

    def two(c, g, dtype=np.int64):  # CPU part, then GPU part (arrays or scalars)
        out = np.empty(n_cpu + n_gpu, dtype)
        out[:n_cpu] = c
        out[n_cpu:] = g
        return out

    pid = two(table.pid[cpu.cpu_rows], table.pid[gpu_rows])
    if only >= 0:  # GPU rows without a process take the only API-calling one (links.pids_of)
        gp = pid[n_cpu:]
        gp[gp < 0] = only
    return Nodes(two(cpu.cpu_rows, gpu_rows), two(0, table.kind[gpu_rows], np.uint8), two(-1, g_launch), pid,
                 two(table.tid[cpu.cpu_rows], -1), two(-1, table.device[gpu_rows]), two(-1, table.stream[gpu_rows]), n_cpu)
