"""Remove and edges: tasks removed with their dependencies kept transitively through them, and
dependency edges added (any registered kind; inferred latent waits) or removed between tasks."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..util.arrays import sorted_unique
from ..errors import DaydreamError
from ..graph import EdgeKind, Origin, TaskGraph, dedupe_edges, rule_arrays
from ..graph.queue import requeue
from .graph_copy import _take_nodes, _with_valid_order


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


# ------------------------------------------------------------------------------- remove ------
