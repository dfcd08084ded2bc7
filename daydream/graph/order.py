"""Visiting orders for the replay: the constraints the edges impose, checks, Kahn's sort, repair.

A replay visits each task once. An edge whose rule bounds the destination's base or start
(``Phase.BASE``/``START``) needs its source visited before its destination. An ``END`` edge
(a blocking call waiting for a GPU task) only needs its source visited before whatever reads the
destination's *end*: the destination's out-edges anchored at its end (its next call on the
thread), so a blocking copy can wait for the copy it launches itself.
"""

from __future__ import annotations

import heapq

import numpy as np

from ..util import jit
from ..util.arrays import sorted_unique
from ..errors import DaydreamError, InternalError
from ._arrays import count
from .edges import Phase, rule_arrays


def visit_constraints(n: int, src: np.ndarray, dst: np.ndarray, kind: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a, b, edge) triples: node a must be visited before node b, because of edge ``edge``."""
    ra = rule_arrays()
    ph = ra.phase[kind]
    e = np.arange(len(src), dtype=np.int64)
    direct = ph != Phase.END
    a, b, ed = [src[direct]], [dst[direct]], [e[direct]]
    end_e = np.nonzero(~direct)[0]
    if len(end_e):
        # readers of a node's end: its out-edges anchored at the end
        rd = np.nonzero(ra.anchor_end[kind])[0]
        o = rd[np.argsort(src[rd], kind="stable")]
        rs = src[o]
        lo = np.searchsorted(rs, dst[end_e], "left")
        hi = np.searchsorted(rs, dst[end_e], "right")
        cnt = hi - lo
        rep = np.repeat(end_e, cnt)
        pos = np.repeat(lo, cnt) + (np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt))
        a.append(src[rep])
        b.append(dst[o[pos]])
        ed.append(rep)
    return np.concatenate(a), np.concatenate(b), np.concatenate(ed)


def order_violations(n: int, order: np.ndarray, src, dst, kind) -> np.ndarray:
    """Edge ids whose visit constraint ``order`` breaks (empty when the order is valid)."""
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(len(order))
    a, b, e = visit_constraints(n, src, dst, kind)
    return sorted_unique(e[rank[a] >= rank[b]]) if len(a) else np.zeros(0, np.int64)


def check_topological(graph, order: np.ndarray) -> None:
    """Raise InternalError (a bug) when ``order`` cannot drive a replay of ``graph``."""
    bad = order_violations(graph.n, np.asarray(order), graph.edge_src, graph.edge_dst, graph.edge_kind)
    if len(bad):
        raise InternalError(f"node order violates {len(bad)} graph edges (the graph has a cycle)")


def is_valid_order(graph, order: np.ndarray, method: str = "auto") -> bool:
    """True when ``order`` is a permutation of the nodes that satisfies every visit constraint
    and no lane mixes CPU and GPU tasks. The constraints are checked by :func:`_keeps_constraints`
    (``method`` as there) without materializing every pair; ``method="pairs"``: by the pairs
    (:func:`order_violations`), the reference: the same answer."""
    n = graph.n
    if len(order) != n:
        return False
    if n == 0:
        return True
    o = np.asarray(order)
    if o.dtype.kind not in "iu" or o.min() < 0 or o.max() >= n:
        return False
    seen = np.zeros(n, dtype=bool)
    seen[o] = True
    if not seen.all():
        return False
    lp = graph.lane_prev
    has = lp >= 0
    if np.any(graph.is_cpu[lp[has]] != graph.is_cpu[has]):
        return False
    if method == "pairs":
        return len(order_violations(n, o, graph.edge_src, graph.edge_dst, graph.edge_kind)) == 0
    rank = np.empty(n, np.int64)
    rank[o] = np.arange(n)
    return _keeps_constraints(n, rank, graph.edge_src, graph.edge_dst, graph.edge_kind, method=method)


def kahn_order(n: int, src: np.ndarray, dst: np.ndarray, key: list) -> np.ndarray | None:
    """A topological order of ``n`` nodes under constraints src -> dst, taking ready nodes by
    smallest ``key`` (deterministic); None when the constraints contain a cycle."""
    indeg = np.bincount(dst, minlength=n).tolist()
    o = np.argsort(src, kind="stable")
    adj_ptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))]).tolist()
    adj = dst[o].tolist()
    heap = [(key[u], u) for u in range(n) if indeg[u] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, u = heapq.heappop(heap)
        out.append(u)
        for i in range(adj_ptr[u], adj_ptr[u + 1]):
            w = adj[i]
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, (key[w], w))
    return np.asarray(out, dtype=np.int64) if len(out) == n else None


#: :func:`topological_order` sorts in one compiled kernel (:func:`_kahn_kernel`) from this many nodes ("auto")
KAHN_MIN = 20_000


def topological_order(graph, method: str = "auto") -> np.ndarray:
    """A visiting order for the replay: Kahn's algorithm over the visit constraints, ready tasks
    taken by smallest (position, id); int64 node ids, shape (n,).

    Found fast: when the nodes sorted by (position, id) keep every visit
    constraint, that sort is Kahn's answer (each next node in it is ready when its turn comes, and
    it is the smallest of those left), checked in one pass over the edges; otherwise Kahn's
    algorithm runs, in one compiled kernel (``method`` as :func:`daydream.util.jit.kernel_for`: "auto"
    compiled from :data:`KAHN_MIN` nodes, "compiled", "python" the kernel uncompiled; "numpy":
    :func:`kahn_order` alone, without the sorted shortcut: the reference).

    Raises:
        DaydreamError: the dependencies contain a cycle.
    """
    n = graph.n
    key = np.ascontiguousarray(graph.position_ns, np.int64)
    cand = np.argsort(key, kind="stable").astype(np.int64, copy=False)
    rank = np.empty(n, np.int64)
    rank[cand] = np.arange(n)
    if method != "numpy" and _keeps_constraints(n, rank, graph.edge_src, graph.edge_dst, graph.edge_kind):
        return cand
    a, b, _ = visit_constraints(n, graph.edge_src, graph.edge_dst, graph.edge_kind)
    out = kahn(n, a, b, key, method)
    if out is None:
        raise DaydreamError("the transformed graph has a dependency cycle")
    return out


def kahn(n: int, a: np.ndarray, b: np.ndarray, key: np.ndarray, method: str = "auto") -> np.ndarray | None:
    """:func:`kahn_order` (``n`` nodes, constraints ``a[i]`` before ``b[i]``, ready
    nodes taken by smallest (``key``, id); int64 arrays) in one compiled kernel from
    :data:`KAHN_MIN` nodes (``method`` as :func:`topological_order`); None on a cycle."""
    fn = jit.kernel_for(_kahn_kernel, n, KAHN_MIN, method)
    if fn is None:
        return kahn_order(n, np.asarray(a, np.int64), np.asarray(b, np.int64), np.asarray(key, np.int64).tolist())
    out, k = jit.call(fn, n, np.ascontiguousarray(a, np.int64), np.ascontiguousarray(b, np.int64), np.ascontiguousarray(key, np.int64))
    return out if k == n else None


def _kahn_kernel(n, a, b, key):
    """(order, count): Kahn's algorithm with a binary heap of (key, id) pairs in loops; ``count`` <
    ``n`` when the constraints close a cycle (:func:`kahn`)."""
    m = len(a)
    indeg = np.zeros(n, np.int64)
    ptr = np.zeros(n + 1, np.int64)
    for i in range(m):
        indeg[b[i]] += 1
        ptr[a[i] + 1] += 1
    for u in range(n):
        ptr[u + 1] += ptr[u]
    fill = ptr[:n].copy()
    adj = np.empty(m, np.int64)
    for i in range(m):
        adj[fill[a[i]]] = b[i]
        fill[a[i]] += 1
    hk = np.empty(n, np.int64)  # heap of (key, id), smallest first
    hv = np.empty(n, np.int64)
    size = 0
    out = np.empty(n, np.int64)
    cnt = 0
    for u in range(n):  # the nodes without constraints, sifted up
        if indeg[u] != 0:
            continue
        j = size
        size += 1
        while j > 0:
            p = (j - 1) >> 1
            if hk[p] < key[u] or (hk[p] == key[u] and hv[p] < u):
                break
            hk[j], hv[j] = hk[p], hv[p]
            j = p
        hk[j], hv[j] = key[u], u
    while size > 0:
        u = hv[0]
        out[cnt] = u
        cnt += 1
        size -= 1
        lk, lv = hk[size], hv[size]  # the last entry sifts down from the root
        j = 0
        while True:
            c = 2 * j + 1
            if c >= size:
                break
            if c + 1 < size and (hk[c + 1] < hk[c] or (hk[c + 1] == hk[c] and hv[c + 1] < hv[c])):
                c += 1
            if lk < hk[c] or (lk == hk[c] and lv < hv[c]):
                break
            hk[j], hv[j] = hk[c], hv[c]
            j = c
        hk[j], hv[j] = lk, lv
        for i in range(ptr[u], ptr[u + 1]):
            w = adj[i]
            indeg[w] -= 1
            if indeg[w] == 0:
                j = size
                size += 1
                while j > 0:
                    p = (j - 1) >> 1
                    if hk[p] < key[w] or (hk[p] == key[w] and hv[p] < w):
                        break
                    hk[j], hv[j] = hk[p], hv[p]
                    j = p
                hk[j], hv[j] = key[w], w
    return out, cnt


def repair_order(order: np.ndarray, src, dst, kind, counts: dict[str, int], forward: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``order`` made valid, or kept when it already is; returns (order, kept-edge mask).
    ``forward``: the first ``forward`` edges point forward in ``order`` by construction (the
    builder's lane and launch edges), so the check reads only the others' ranks.

    The order sorted by position breaks only on odd input (tied or contradictory timestamps).
    Then a topological sort that keeps the sorted order wherever it can replaces it; if the
    non-lane, non-launch edges close a cycle, those that point backwards in the sorted order are
    dropped (counted) and the sorted order is kept (lane and launch edges always point forward).
    """
    n = len(order)
    keep = np.ones(len(src), dtype=bool)
    if n == 0:
        return order, keep
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    if _keeps_constraints(n, rank, src, dst, kind, forward):  # the usual case, without building the constraints
        return order, keep
    a, b, e = visit_constraints(n, src, dst, kind)
    back = rank[a] >= rank[b]
    if not back.any():
        return order, keep
    out = kahn_order(n, a, b, rank.tolist())
    if out is not None:
        count(counts, "dependencies against the order of the recorded times (tied or inconsistent timestamps): order repaired", back.sum())
        return out, keep
    keep[sorted_unique(e[back])] = False
    count(counts, "wait or cross-stream dependency dropped: it closes a cycle (inconsistent timestamps)", (~keep).sum())
    return order, keep


#: :func:`_keeps_constraints` checks in one compiled kernel from this many edges ("auto")
KEEPS_MIN = 50_000


def _keeps_constraints(n: int, rank: np.ndarray, src, dst, kind, forward: int = 0, method: str = "auto") -> bool:
    """Whether the order of ``rank`` (node -> position) keeps every :func:`visit_constraints`
    pair: ``not (rank[a] >= rank[b]).any()``, without materializing the pairs (an END edge's
    pairs hold when its source comes before the earliest reader of its destination's end).
    ``forward``: the first ``forward`` edges are known to point forward (not checked again).
    ``method``: "auto" checks in one compiled kernel (:func:`_keeps_kernel`) from
    :data:`KEEPS_MIN` edges when numba is there, "compiled" whatever the size, "python" the
    kernel uncompiled, "numpy" by array passes; the same answer."""
    ra = rule_arrays()
    fn = jit.kernel_for(_keeps_kernel, len(src), KEEPS_MIN, method)
    if fn is not None:
        return bool(jit.call(fn, n, np.ascontiguousarray(rank, np.int64), np.ascontiguousarray(src, np.int64),
                             np.ascontiguousarray(dst, np.int64), np.ascontiguousarray(kind, np.uint8), int(forward),
                             ra.phase != Phase.END, ra.anchor_end))
    direct = ra.phase[kind] != Phase.END
    if np.any((rank[src[forward:]] >= rank[dst[forward:]]) & direct[forward:]):
        return False
    end_e = np.flatnonzero(~direct)
    if len(end_e) == 0:
        return True
    waited = np.zeros(n, dtype=bool)
    waited[dst[end_e]] = True
    readers = np.flatnonzero(ra.anchor_end[kind] & waited[src])  # out-edges anchored at a waited node's end
    first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, src[readers], rank[dst[readers]])
    return not np.any(rank[src[end_e]] >= first[dst[end_e]])


def _keeps_kernel(n, rank, src, dst, kind, forward, direct_k, anchor_end_k):
    """:func:`_keeps_constraints` in loops over the edges (``direct_k``/``anchor_end_k``: per
    edge kind, the rule is not ``Phase.END`` / is anchored at the source's end)."""
    m = len(src)
    for e in range(forward, m):
        if direct_k[kind[e]] and rank[src[e]] >= rank[dst[e]]:
            return False
    waited = np.zeros(n, np.bool_)
    any_end = False
    for e in range(m):
        if not direct_k[kind[e]]:
            waited[dst[e]] = True
            any_end = True
    if not any_end:
        return True
    big = np.iinfo(np.int64).max
    first = np.full(n, big, np.int64)
    for e in range(m):
        s = src[e]
        if anchor_end_k[kind[e]] and waited[s]:
            r = rank[dst[e]]
            if r < first[s]:
                first[s] = r
    for e in range(m):
        if not direct_k[kind[e]] and rank[src[e]] >= first[dst[e]]:
            return False
    return True
