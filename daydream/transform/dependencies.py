"""Edges: dependencies added (any registered kind; inferred latent waits) or removed between kept tasks."""

from __future__ import annotations

import numpy as np

from ..util.arrays import sorted_unique
from ..errors import DaydreamError
from ..graph import EdgeKind, Origin, TaskGraph, dedupe_edges, rule_arrays
from .graph_copy import _with_valid_order


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
