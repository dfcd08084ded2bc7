"""Builder stage: launch-queue back-pressure (``docs/model.md``, "Launch-queue back-pressure").

A CUDA stream holds at most ``D`` launched, unfinished entries
(:data:`daydream.events.cuda_api.LAUNCH_QUEUE_DEPTH`); a launching call that finds its stream full
blocks until a slot frees. An entry is one launched task, or the tasks one call launched in a row
on the stream (a ``cudaGraphLaunch``'s nodes: the graph is one submission, whose launch cost does
not grow with its nodes; NVIDIA technical blog, "Constant Time Launch for Straight-Line CUDA
Graphs and Other Performance Enhancements", 2024). With the stream's entries in launch order, the
slot of entry ``k`` frees when entry ``k - D`` ends (its last task), so the call launching ``k``
gets a ``QUEUE`` edge (phase END, anchored at the source's end, offset 0) from that task. The edges are made for every launched task
with a task ``D`` places before it, not only where the recorded stream was full: a prediction
that slows the GPU can fill a queue the baseline never filled. Where the recorded queue never
filled, the source had ended before the call started and the edge leaves the baseline unchanged.
Where the trace shows a launch returning while the task ``D`` places before its own still ran,
the queue is deeper than ``D`` on that machine: the depth is raised to the smallest one the
trace does not contradict (counted), and the graph keeps it (``TaskGraph.launch_queue_depth``).

``remove`` and ``insert`` change the stream order, so they remake the edges (:func:`requeue`)
instead of passing them on.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..util import jit
from ..util.arrays import sorted_unique
from ._arrays import count
from .edges import EdgeKind, Origin


#: :func:`queue_pairs` runs its compiled passes from this many nodes ("auto")
QUEUE_MIN = 50_000


def queue_pairs(by_lane: np.ndarray, lane: np.ndarray, is_gpu: np.ndarray, launch: np.ndarray, depth: int,
                method: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """(last task of entry ``k - depth``, launching call of entry ``k``) for every launched entry
    ``k`` (:func:`_entries`) with an entry ``depth`` places before it on its stream. ``by_lane``: the nodes grouped by lane, each
    lane in lane order (a visiting order sorted stably by lane: stream-order edges are visit
    constraints). Two int64 arrays. ``method``: "auto" in compiled passes (:func:`_queue_kernel`)
    from :data:`QUEUE_MIN` nodes when numba is there ("compiled" whatever the size, "python" the
    kernel uncompiled, "numpy" never), else numpy passes; the same answers."""
    z = np.zeros(0, np.int64)
    if depth <= 0:
        return z, z.copy()
    fn = jit.kernel_for(_queue_kernel, len(by_lane), QUEUE_MIN, method)
    if fn is not None:
        return jit.call(fn, np.ascontiguousarray(by_lane, np.int64), np.ascontiguousarray(lane, np.int64),
                        np.ascontiguousarray(is_gpu, np.bool_), np.ascontiguousarray(launch, np.int64), np.int64(depth))
    g = by_lane[is_gpu[by_lane]]
    if len(g) <= depth:
        return z, z.copy()
    first, last = _entries(g, lane, launch)
    if len(first) <= depth:
        return z, z.copy()
    ln = lane[g[first]]
    same = ln[depth:] == ln[:-depth]
    src = g[last[:-depth][same]]  # the entry ``depth`` places before: its slot frees when its last task ends
    dst = launch[g[first[depth:][same]]]
    ok = dst >= 0
    return src[ok].astype(np.int64, copy=False), dst[ok].astype(np.int64, copy=False)


def _queue_kernel(by_lane, lane, is_gpu, launch, depth):
    """:func:`queue_pairs`' passes (``depth`` > 0): the GPU nodes of ``by_lane``, their entries
    (:func:`_entries`), then the pairs of entries ``depth`` apart on one stream."""
    ng = 0
    for i in range(len(by_lane)):
        if is_gpu[by_lane[i]]:
            ng += 1
    g = np.empty(ng, np.int64)
    j = 0
    for i in range(len(by_lane)):
        v = by_lane[i]
        if is_gpu[v]:
            g[j] = v
            j += 1
    if ng <= depth:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    first = np.empty(ng, np.int64)
    ne = 0
    for i in range(ng):
        v = g[i]
        if i == 0 or lane[v] != lane[g[i - 1]] or launch[v] != launch[g[i - 1]] or launch[v] < 0:
            first[ne] = i
            ne += 1
    if ne <= depth:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    src = np.empty(ne - depth, np.int64)
    dst = np.empty(ne - depth, np.int64)
    m = 0
    for k in range(depth, ne):
        a = g[first[k]]
        if lane[a] == lane[g[first[k - depth]]]:
            d = launch[a]
            if d >= 0:
                src[m] = g[first[k - depth + 1] - 1]  # the last task of entry k - depth
                dst[m] = d
                m += 1
    return src[:m].copy(), dst[:m].copy()


def _entries(g: np.ndarray, lane: np.ndarray, launch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The launch-queue entries of the GPU nodes ``g`` (grouped by lane, each lane in order): the
    tasks one call launched in a row on its stream (a ``cudaGraphLaunch``'s nodes) hold one slot;
    any other task holds its own. Returns the (first, last) positions in ``g`` of each entry."""
    ln, call = lane[g], launch[g]
    new = np.ones(len(g), bool)
    new[1:] = (ln[1:] != ln[:-1]) | (call[1:] != call[:-1]) | (call[1:] < 0)
    first = np.flatnonzero(new)
    return first, np.append(first[1:] - 1, len(g) - 1)


def _deepest_seen(by_lane, lane, is_gpu, launch, rec_end) -> int:
    """The smallest depth no recorded launch contradicts: one more than the most tasks of its
    stream a launching call left unfinished when it returned (tasks before the first one still
    running, by the running maximum of their ends, count as finished)."""
    g = by_lane[is_gpu[by_lane]]
    out = 0
    first, last = _entries(g, lane, launch)
    e_lane = lane[g[first]]
    for ln in sorted_unique(e_lane).tolist():
        on = e_lane == ln
        t, call = g[last[on]], launch[g[first[on]]]  # per entry: its last task, its launching call
        has = np.flatnonzero(call >= 0)
        if not len(has):
            continue
        done = np.searchsorted(np.maximum.accumulate(rec_end[t]), rec_end[call[has]], "right")
        out = max(out, int((has - np.minimum(done, has)).max()) + 1)
    return out


def queue_edges(by_lane, lane, is_gpu, launch, depth: int, rec_end, counts) -> tuple[np.ndarray, np.ndarray, int]:
    """The builder's QUEUE edges (sources, destinations) and the depth they are made for:
    ``depth``, or more where the trace shows a launch returning while the task ``depth`` places
    before its own was still running (the queue is deeper there; counted)."""
    src, dst = queue_pairs(by_lane, lane, is_gpu, launch, depth)
    if len(src) and (rec_end[src] > rec_end[dst]).any():
        deeper = _deepest_seen(by_lane, lane, is_gpu, launch, rec_end)
        count(counts, f"launch returned with more than {depth} unfinished tasks on its stream: launch-queue depth taken as {deeper}", 1)
        depth = max(depth, deeper)
        src, dst = queue_pairs(by_lane, lane, is_gpu, launch, depth)
    return src, dst, max(int(depth), 0)


def requeue(graph):
    """``graph`` with its QUEUE edges made again from its current stream order (after a change
    of the tasks on a stream); unchanged when it has none (depth 0)."""
    d = int(graph.launch_queue_depth)
    if d <= 0:
        return graph
    by_lane = graph.order[np.argsort(graph.lane[graph.order], kind="stable")]
    src, dst = queue_pairs(by_lane, graph.lane, graph.is_gpu, graph.launch, d)
    keep = graph.edge_kind != EdgeKind.QUEUE
    g = graph.with_edges(np.concatenate([graph.edge_src[keep], src]), np.concatenate([graph.edge_dst[keep], dst]),
                         np.concatenate([graph.edge_kind[keep], np.full(len(src), EdgeKind.QUEUE, np.uint8)]),
                         np.concatenate([graph.edge_origin[keep], np.full(len(src), Origin.RECORDED, np.uint8)]))
    return dataclasses.replace(g, launch_queue_depth=d)
