"""Shared by the structural primitives: a graph's node arrays taken at given ids, lane edges relinked
to inserted tasks, and the visiting-order repair each of them ends with."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..graph import TaskGraph, rule_arrays, topological_order


def _take_nodes(graph: TaskGraph, idx: np.ndarray) -> TaskGraph:
    """The node arrays of ``graph`` at ``idx`` (edges and order left to the caller)."""
    per_node = ("row", "node_kind", "lane", "name_id", "pid", "tid", "device", "stream", "correlation", "copy_kind", "dur_ns",
                "gap_ns", "rec_start_ns", "rec_end_ns", "position_ns")
    kw = {f: getattr(graph, f)[idx] for f in per_node}
    kw["mapping"] = graph.mapping.take(idx) if graph.mapping is not None else None
    kw["priority"] = graph.priority[idx] if graph.priority is not None else None
    return dataclasses.replace(graph, **kw)


def _relink_lane_successors(graph: TaskGraph, at: np.ndarray) -> np.ndarray:
    """Edge sources with the new task ``at[x]`` in place of each anchor ``x`` (``at[x] >= 0``) on the
    lane edge from ``x`` to its lane successor: the successor now follows the inserted task."""
    src = graph.edge_src.copy()
    moved = (at[src] >= 0) & (graph.edge_dst == graph.lane_next[src]) & rule_arrays().lane[graph.edge_kind]
    src[moved] = at[src[moved]]
    return src


def _with_valid_order(g: TaskGraph) -> TaskGraph:
    """``g`` with a valid visiting order (its own when it is, else a topological sort), marked so."""
    if g.order_valid:
        return g
    return dataclasses.replace(g, order=topological_order(g)).known_valid()
