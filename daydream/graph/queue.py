"""Builder stage: launch-queue back-pressure (``docs/model.md``, "Launch-queue back-pressure").

A CUDA stream holds at most ``D`` launched, unfinished tasks
(:data:`daydream.cuda_api.LAUNCH_QUEUE_DEPTH`); a launching call that finds its stream full
blocks until a slot frees. With the stream's tasks in launch order, the slot of task ``k`` frees
when task ``k - D`` ends, so the call launching ``k`` gets a ``QUEUE`` edge (phase END, anchored
at the source's end, offset 0) from task ``k - D``. The edges are made for every launched task
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

from ..arrays import sorted_unique
from ._arrays import count
from .edges import EdgeKind, Origin


def queue_pairs(by_lane: np.ndarray, lane: np.ndarray, is_gpu: np.ndarray, launch: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """(task ``k - depth``, launching call of task ``k``) for every launched GPU task ``k`` with
    a task ``depth`` places before it on its stream. ``by_lane``: the nodes grouped by lane, each
    lane in lane order (a visiting order sorted stably by lane: stream-order edges are visit
    constraints)."""
    z = np.zeros(0, np.int64)
    if depth <= 0:
        return z, z.copy()
    g = by_lane[is_gpu[by_lane]]
    if len(g) <= depth:
        return z, z.copy()
    ln = lane[g]
    same = ln[depth:] == ln[:-depth]
    src, k = g[:-depth][same], g[depth:][same]
    dst = launch[k]
    ok = dst >= 0
    return src[ok].astype(np.int64, copy=False), dst[ok].astype(np.int64, copy=False)


def _deepest_seen(by_lane, lane, is_gpu, launch, rec_end) -> int:
    """The smallest depth no recorded launch contradicts: one more than the most tasks of its
    stream a launching call left unfinished when it returned (tasks before the first one still
    running, by the running maximum of their ends, count as finished)."""
    g = by_lane[is_gpu[by_lane]]
    out = 0
    for ln in sorted_unique(lane[g]).tolist():
        t = g[lane[g] == ln]
        call = launch[t]
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
