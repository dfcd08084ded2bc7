"""Which edge bound each task in a replay (the records the critical path walks).

Computed from the replayed times and the rules of :mod:`daydream.graph.edges`, vectorized: an
edge binds its destination when its bound equals the time it constrains. Among several edges
giving the same bound, the rule's ``prefer`` decides, then the smaller source id.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..graph import Phase, TaskGraph, rule_arrays
from ..memo import cached, rules_key
from .result import BOUND_BY_LANE


def edge_bounds(graph: TaskGraph, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per edge: its bound on the destination, ns (anchor time of the source plus offset)."""
    r = _edge_rules(graph)
    return np.where(r.anchor_end, end[graph.edge_src], start[graph.edge_src]) + r.off


class _Rules(NamedTuple):
    """Per-edge rule columns and sort orders of a graph (structure only: kept in its memo)."""

    anchor_end: np.ndarray  #: bool per edge
    off: np.ndarray  #: int64 per edge, ns
    base_sorted: np.ndarray  #: BASE edges by destination
    base_first: np.ndarray  #: start of each destination's run in base_sorted
    start_order: np.ndarray  #: START edges by (destination, prefer, source)
    end_order: np.ndarray  #: END edges by (destination, prefer, source)
    base_order: np.ndarray  #: BASE edges by (destination, prefer, source)


def _edge_rules(graph: TaskGraph) -> _Rules:
    ra = rule_arrays()
    key = ("binding.rules", rules_key(ra, graph), int(graph.launch_latency_ns), int(graph.gpu_gap_ns), int(graph.staging_latency_ns))
    return cached(graph, key, lambda: _make_rules(graph, ra))


def _make_rules(graph: TaskGraph, ra) -> _Rules:
    k, src, dst = graph.edge_kind, graph.edge_src, graph.edge_dst
    ph = ra.phase[k]
    o = np.lexsort((src, ra.prefer[k], dst))  # the tie rule of _pick, once per graph
    ph_o = ph[o]
    b = np.flatnonzero(ph == Phase.BASE)
    b = b[np.argsort(dst[b], kind="stable")]
    first = np.flatnonzero(np.r_[True, dst[b][1:] != dst[b][:-1]]) if len(b) else np.zeros(0, np.int64)
    return _Rules(ra.anchor_end[k], ra.graph_offsets_ns(graph)[k], b, first,
                  o[ph_o == Phase.START], o[ph_o == Phase.END], o[ph_o == Phase.BASE])


def _pick_sorted(order: np.ndarray, ok: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """Per node: the first edge of ``order`` (sorted by destination, prefer, source) with ``ok``
    into it; -1 none. The same as :func:`_pick` over the edges with ``ok``."""
    out = np.full(n, -1, np.int64)
    o = order[ok[order]]
    if len(o):
        d = dst[o]
        first = np.ones(len(o), bool)
        first[1:] = d[1:] != d[:-1]
        out[d[first]] = o[first]
    return out


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
    dst = graph.edge_dst
    r = _edge_rules(graph)
    val = edge_bounds(graph, start, end)
    base = np.full(n, int(graph.t0_ns), np.int64)
    if len(r.base_sorted):
        d = dst[r.base_sorted[r.base_first]]
        base[d] = np.maximum(base[d], np.maximum.reduceat(val[r.base_sorted], r.base_first))
    bound_base = _pick_sorted(r.base_order, val == base[dst], dst, n)
    bound_start = _pick_sorted(r.start_order, val == start[dst], dst, n)
    by_lane = (bound_start < 0) & (base + graph.gap_ns != start)
    bound_start[by_lane] = BOUND_BY_LANE
    bound_end = _pick_sorted(r.end_order, (val == (start + blocked)[dst]) & (blocked[dst] > 0), dst, n)
    return bound_start, bound_base, bound_end


def bindings_reference(graph: TaskGraph, start: np.ndarray, end: np.ndarray, blocked: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`bindings` computed from scratch, edge by edge masks and a sort per call (the
    reference the tests compare the memoized one with)."""
    n = graph.n
    ra = rule_arrays()
    k, src, dst = graph.edge_kind, graph.edge_src, graph.edge_dst
    val = np.where(ra.anchor_end[k], end[src], start[src]) + ra.graph_offsets_ns(graph)[k]
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
