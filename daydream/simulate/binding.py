"""Which edge bound each task in a replay (the records the critical path walks).

Computed from the replayed times and the rules of :mod:`daydream.graph.edges`, vectorized: an
edge binds its destination when its bound equals the time it constrains. Among several edges
giving the same bound, the rule's ``prefer`` decides, then the smaller source id.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..util import jit
from ..graph import Phase, TaskGraph, rule_arrays
from ..graph.memo import cached, rules_key
from .result import BOUND_BY_LANE

#: graphs with fewer tasks bind by numpy passes unless forced (numba is imported by then in a
#: run this big: :data:`daydream.simulate.compiled.MIN_TASKS`)
MIN_TASKS = 100_000


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
    key = ("binding.rules", rules_key(ra, graph), int(graph.launch_latency_ns), int(graph.gpu_gap_ns), int(graph.staging_latency_ns),
           graph.staging_key())
    return cached(graph, key, lambda: _make_rules(graph, ra))


def _make_rules(graph: TaskGraph, ra) -> _Rules:
    k, src, dst = graph.edge_kind, graph.edge_src, graph.edge_dst
    ph = ra.phase[k]
    o = _lexsort3(dst, ra.prefer[k], src, graph.n)  # the tie rule of _pick, once per graph
    ph_o = ph[o]
    b = np.flatnonzero(ph == Phase.BASE)
    b = b[np.argsort(dst[b], kind="stable")]
    first = np.flatnonzero(np.r_[True, dst[b][1:] != dst[b][:-1]]) if len(b) else np.zeros(0, np.int64)
    return _Rules(ra.anchor_end[k], ra.edge_offsets_ns(graph), b, first,
                  o[ph_o == Phase.START], o[ph_o == Phase.END], o[ph_o == Phase.BASE])


def _lexsort3(a: np.ndarray, b: np.ndarray, c: np.ndarray, n: int) -> np.ndarray:
    """``np.lexsort((c, b, a))`` (by a, then b, then c; stable) for node ids ``a``, ``c`` in
    [0, n) and small integers ``b``: one stable sort of packed int64 keys when they fit in 62
    bits, else the lexsort."""
    if not len(a):
        return np.zeros(0, np.int64)
    b = b.astype(np.int64)
    lo, hi = int(b.min()), int(b.max())
    nb, pb = max(int(n).bit_length(), 1), max((hi - lo).bit_length(), 1)
    if 2 * nb + pb > 62 or int(a.min()) < 0 or int(c.min()) < 0 or max(int(a.max()), int(c.max())) >= n:
        return np.lexsort((c, b, a))
    key = (a.astype(np.int64) << (nb + pb)) | ((b - lo) << nb) | c.astype(np.int64)
    return np.argsort(key, kind="stable")


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
    """(bound_start, bound_base, bound_end) edge ids per task (see :class:`~.result.Timeline`).

    From :data:`MIN_TASKS` tasks one compiled pass over each task's incoming edges
    (:func:`_bind_kernel`), else numpy passes over all edges; the same records
    (tests/test_memo.py compares both with :func:`bindings_reference`)."""
    if jit.wanted(graph.n, MIN_TASKS, jit.loaded(_bind_kernel)):
        fn = jit.compiled(_bind_kernel)
        if fn is not None:
            return bind_compiled(fn, graph, start, end, blocked)
    return bindings_numpy(graph, start, end, blocked)


def bindings_numpy(graph: TaskGraph, start: np.ndarray, end: np.ndarray, blocked: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`bindings` by numpy passes over the memoized edge orders."""
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


def _edge_ptrs(graph: TaskGraph, r: _Rules) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per node, where its run starts in ``r``'s base, start and end orders (n + 1 each; kept in
    the memo under the rules' key)."""
    ra = rule_arrays()
    key = ("binding.ptrs", rules_key(ra, graph), int(graph.launch_latency_ns), int(graph.gpu_gap_ns), int(graph.staging_latency_ns))
    def ptr(o):
        return np.concatenate([[0], np.cumsum(np.bincount(graph.edge_dst[o], minlength=graph.n))]).astype(np.int64)
    return cached(graph, key, lambda: tuple(ptr(o) for o in (r.base_order, r.start_order, r.end_order)))


def bind_compiled(fn, graph: TaskGraph, start: np.ndarray, end: np.ndarray, blocked: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`bindings` by the kernel ``fn`` (:func:`_bind_kernel`, compiled or not)."""
    r = _edge_rules(graph)
    bp, sp, ep = _edge_ptrs(graph, r)
    c = np.ascontiguousarray
    return jit.call(fn, int(graph.t0_ns), c(start, np.int64), c(end, np.int64), c(blocked, np.int64), c(graph.gap_ns, np.int64),
                    c(graph.edge_src, np.int64), c(r.anchor_end, np.bool_), c(r.off, np.int64),
                    c(r.base_order, np.int64), bp, c(r.start_order, np.int64), sp, c(r.end_order, np.int64), ep, BOUND_BY_LANE)


def _bind_kernel(t0, start, end, blocked, gap, src, anchor_end, off, b_ord, b_ptr, s_ord, s_ptr, e_ord, e_ptr, by_lane):
    """:func:`bindings_numpy` task by task over its incoming edges in (prefer, source) order:
    the base is the latest base edge (or ``t0``), each record the first edge of its phase whose
    bound equals the time it constrains. int64 sums wrap as numpy's do (no range check needed)."""
    n = len(start)
    bs = np.full(n, -1, np.int64)
    bb = np.full(n, -1, np.int64)
    be = np.full(n, -1, np.int64)
    for v in range(n):
        base = t0
        for i in range(b_ptr[v], b_ptr[v + 1]):
            e = b_ord[i]
            val = (end[src[e]] if anchor_end[e] else start[src[e]]) + off[e]
            if val > base:
                base = val
        for i in range(b_ptr[v], b_ptr[v + 1]):
            e = b_ord[i]
            if (end[src[e]] if anchor_end[e] else start[src[e]]) + off[e] == base:
                bb[v] = e
                break
        for i in range(s_ptr[v], s_ptr[v + 1]):
            e = s_ord[i]
            if (end[src[e]] if anchor_end[e] else start[src[e]]) + off[e] == start[v]:
                bs[v] = e
                break
        if bs[v] < 0 and base + gap[v] != start[v]:
            bs[v] = by_lane
        if blocked[v] > 0:
            w = start[v] + blocked[v]
            for i in range(e_ptr[v], e_ptr[v + 1]):
                e = e_ord[i]
                if (end[src[e]] if anchor_end[e] else start[src[e]]) + off[e] == w:
                    be[v] = e
                    break
    return bs, bb, be


def bindings_reference(graph: TaskGraph, start: np.ndarray, end: np.ndarray, blocked: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`bindings` computed from scratch, edge by edge masks and a sort per call (the
    reference the tests compare the memoized one with)."""
    n = graph.n
    ra = rule_arrays()
    k, src, dst = graph.edge_kind, graph.edge_src, graph.edge_dst
    val = np.where(ra.anchor_end[k], end[src], start[src]) + ra.edge_offsets_ns(graph)
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
