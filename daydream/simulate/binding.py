"""Which edge bound each task in a replay (the records the critical path walks).

Computed from the replayed times and the rules of :mod:`daydream.graph.edges`, vectorized: an
edge binds its destination when its bound equals the time it constrains. Among several edges
giving the same bound, the rule's ``prefer`` decides, then the smaller source id.
"""

from __future__ import annotations

import numpy as np

from ..graph import Phase, TaskGraph, rule_arrays
from .result import BOUND_BY_LANE


def edge_bounds(graph: TaskGraph, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per edge: its bound on the destination, ns (anchor time of the source plus offset)."""
    ra = rule_arrays()
    k = graph.edge_kind
    s = graph.edge_src
    off = ra.graph_offsets_ns(graph)[k]
    return np.where(ra.anchor_end[k], end[s], start[s]) + off


def _pick(cand: np.ndarray, dst: np.ndarray, prefer: np.ndarray, src: np.ndarray, n: int) -> np.ndarray:
    """Per node: the candidate edge with the smallest (prefer, src) among those into it; -1 none."""
    out = np.full(n, -1, np.int64)
    if len(cand):
        o = cand[np.lexsort((src[cand], prefer[cand], dst[cand]))]
        first = np.ones(len(o), bool)
        first[1:] = dst[o[1:]] != dst[o[:-1]]
        out[dst[o[first]]] = o[first]
    return out


def bindings(graph: TaskGraph, start: np.ndarray, end: np.ndarray, blocked: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bound_start, bound_base, bound_end) edge ids per task (see :class:`~.result.Timeline`)."""
    n = graph.n
    ra = rule_arrays()
    k, src, dst = graph.edge_kind, graph.edge_src, graph.edge_dst
    val = edge_bounds(graph, start, end)
    ph = ra.phase[k]
    pref = ra.prefer[k]
    base = np.full(n, int(graph.t0_ns), np.int64)
    b = ph == Phase.BASE
    np.maximum.at(base, dst[b], val[b])
    bound_base = _pick(np.nonzero(b & (val == base[dst]))[0], dst, pref, src, n)
    bound_start = _pick(np.nonzero((ph == Phase.START) & (val == start[dst]))[0], dst, pref, src, n)
    by_lane = (bound_start < 0) & (base + graph.gap_ns != start)
    bound_start[by_lane] = BOUND_BY_LANE
    e = (ph == Phase.END) & (val == (start + blocked)[dst]) & (blocked[dst] > 0)
    bound_end = _pick(np.nonzero(e)[0], dst, pref, src, n)
    return bound_start, bound_base, bound_end
