"""Remove: tasks dropped with their dependencies kept transitively through them."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..graph import TaskGraph, dedupe_edges, rule_arrays
from ..graph.queue import requeue
from .graph_copy import _take_nodes, _with_valid_order


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
