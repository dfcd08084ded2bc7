"""Vectorized array helpers of the graph builder (segmented scans, packed unique rows, searches)."""

from __future__ import annotations

import numpy as np

from ..util import jit
from ..util.arrays import stable_group_order
from ..events.links import HASH_MIN, _hash_join


class Counts(dict):
    """What the builder kept as artefacts or could not link, by reason (``reason -> count``);
    ``missing`` holds the reasons that are links the trace lacks (a GPU task without its launch,
    a wait without its event), which the report's trust signal lists."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.missing: set[str] = set()


def count(counts: dict[str, int], key: str, n, missing: bool = False) -> None:
    """Add ``n`` to ``counts[key]`` (nothing when 0); ``missing``: the reason is a link the trace
    lacks (recorded in ``counts.missing`` when ``counts`` is a :class:`Counts`)."""
    n = int(n)
    if n:
        counts[key] = counts.get(key, 0) + n
        if missing and isinstance(counts, Counts):
            counts.missing.add(key)


def corr_key(pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """One int64 key per (process, correlation id) pair (pid in the high bits)."""
    return (pid.astype(np.int64, copy=False) << np.int64(40)) ^ (corr.astype(np.int64, copy=False) & np.int64((1 << 40) - 1))


def triples(keys, pos, tie) -> np.ndarray:
    """(key, pos, tie) int64 triples as one structured array (compared field by field)."""
    rec = np.empty(len(keys), dtype=_TRIPLE)
    rec["k"], rec["p"], rec["t"] = keys, pos, tie
    return rec


_TRIPLE = np.dtype([("k", np.int64), ("p", np.int64), ("t", np.int64)])


def search_pairs(keys, pos, tie, q_keys, q_pos, q_tie, side: str, rec: np.ndarray | None = None) -> np.ndarray:
    """``np.searchsorted`` on (key, pos, tie) triples: items must be sorted by (key, pos, tie).
    ``rec``: :func:`triples` of the items when the caller keeps it (searched many times)."""
    rec = triples(keys, pos, tie) if rec is None else rec
    return np.searchsorted(rec, triples(q_keys, q_pos, q_tie), side=side)


def trimmed_mean(x: np.ndarray, trim: float) -> int:
    """Mean of ``x`` without the ``trim`` fraction at each end, rounded to an int (0 when empty)."""
    if len(x) == 0:
        return 0
    x = np.sort(x)
    k = int(len(x) * trim)
    if len(x) - 2 * k > 0:
        x = x[k : len(x) - k]
    return int(round(float(x.mean())))


def lower_median(x: np.ndarray) -> int:
    """The lower median of ``x`` (an element of ``x``; 0 when empty): with few samples a slow first
    call (context or module initialization) does not set it."""
    if len(x) == 0:
        return 0
    k = (len(x) - 1) // 2
    return int(np.partition(np.asarray(x), k)[k])


def small_ints(x: np.ndarray, bound: int) -> np.ndarray:
    """``x`` (values in [0, bound)) in the narrowest integer type: numpy's stable sort is a radix
    sort for 16-bit and smaller types."""
    return x.astype(np.int16) if bound < (1 << 15) else x


def unique_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, axis=0, return_inverse=True)`` for an (n, k) int64 array (rows sorted
    lexicographically), without sorting rows as opaque records: :func:`unique_columns` of its
    columns."""
    n, k = keys.shape
    return unique_columns([np.ascontiguousarray(keys[:, c]) for c in range(k)])


#: :func:`few_unique_columns` gives up (the sorting path decides) beyond this many distinct rows
FEW_ROWS = 256


def few_unique_columns(cols: list[np.ndarray], method: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """:func:`unique_columns` (``few=True``) of rows taking few distinct values (lanes: the GPU
    tasks' (pid, device, stream)): one compiled pass (:func:`_few_rows_kernel`) numbers each row by
    its distinct value in order of first appearance, then the few distinct rows are sorted and the
    numbers mapped to their ranks; from :data:`FFILL_MIN` rows when numba is there ("auto";
    "compiled" whatever the size, "python" the kernel uncompiled, "numpy" never), and with at most
    :data:`FEW_ROWS` distinct rows, else :func:`unique_columns`; the same answers (unique rows
    (u, k) int64 sorted lexicographically, inverse (n,) int64)."""
    k = len(cols)
    n = len(cols[0]) if k else 0
    fn = jit.kernel_for(_few_rows_kernel, n, FFILL_MIN, method) if 0 < k <= 4 and n else None
    if fn is None:
        return unique_columns(cols, few=True)
    c = [np.ascontiguousarray(x, np.int64) for x in cols] + [np.zeros(n, np.int64)] * (4 - k)
    code = np.empty(n, np.int64)
    seen = np.empty((FEW_ROWS, 4), np.int64)
    u = int(jit.call(fn, c[0], c[1], c[2], c[3], FEW_ROWS, code, seen))
    if u < 0:
        return unique_columns(cols, few=True)
    seen = seen[:u, :k]
    o = np.lexsort(seen.T[::-1])  # the distinct rows in lexicographic order
    rank = np.empty(u, np.int64)
    rank[o] = np.arange(u)
    return np.ascontiguousarray(seen[o]), rank[code]


def _few_rows_kernel(a, b, c, d, limit, code, seen):
    """:func:`few_unique_columns`' pass: ``code[i]`` the number of row ``(a, b, c, d)[i]`` among
    the distinct rows in order of first appearance, written to ``seen``; returns how many, or -1
    beyond ``limit``."""
    u = 0
    last = -1
    for i in range(len(a)):
        x, y, z, w = a[i], b[i], c[i], d[i]
        if last >= 0 and seen[last, 0] == x and seen[last, 1] == y and seen[last, 2] == z and seen[last, 3] == w:
            code[i] = last
            continue
        j = 0
        while j < u:
            if seen[j, 0] == x and seen[j, 1] == y and seen[j, 2] == z and seen[j, 3] == w:
                break
            j += 1
        if j == u:
            if u == limit:
                return -1
            seen[u, 0] = x
            seen[u, 1] = y
            seen[u, 2] = z
            seen[u, 3] = w
            u += 1
        code[i] = j
        last = j
    return u


def unique_columns(cols: list[np.ndarray], few: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(unique rows (u, k) int64 sorted lexicographically, inverse (n,) int64) of the rows made
    of the int64 columns ``cols``: when the columns, shifted to start at 0, fit side by side in
    one int64, a stable sort of the packed keys; else each column is ranked on its own and the
    ranks are packed. ``few``: the rows take few distinct values (lanes), so the packed keys
    are sorted by :func:`daydream.util.arrays.stable_group_order` (the same order)."""
    k = len(cols)
    n = len(cols[0]) if k else 0
    if n == 0:
        return np.zeros((0, k), np.int64), np.zeros(0, np.int64)
    lows = [int(c.min()) for c in cols]
    bits = [max(int(c.max()) - lo, 0).bit_length() for c, lo in zip(cols, lows)]
    if sum(bits) <= 62:
        packed = np.zeros(n, np.int64)
        for c in range(k):
            packed = (packed << np.int64(bits[c])) | (cols[c] - np.int64(lows[c]))
        # node columns come in long runs: timsort's near-O(n) case; few distinct: a radix pass
        o = stable_group_order(packed) if few else np.argsort(packed, kind="stable")
        ps = packed[o]
        new = np.ones(n, dtype=bool)
        new[1:] = ps[1:] != ps[:-1]
        inv = np.empty(n, np.int64)
        inv[o] = np.cumsum(new) - 1
        rep = o[new]  # the first row of each distinct key
        return np.stack([c[rep] for c in cols], axis=1).astype(np.int64), inv
    packed = np.zeros(n, np.int64)
    span = 1
    for c in range(k):
        u, inv = np.unique(cols[c], return_inverse=True)
        span *= len(u)
        if span >= (1 << 62):
            uniq, lane = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
            return uniq, lane.reshape(-1).astype(np.int64)
        packed = packed * np.int64(len(u)) + inv.reshape(-1)
    _, first, inv = np.unique(packed, return_index=True, return_inverse=True)
    return np.stack([c[first] for c in cols], axis=1).astype(np.int64), inv.reshape(-1).astype(np.int64)


def segmented_cummax(x: np.ndarray, seg_start: np.ndarray) -> np.ndarray:
    """Running maximum of ``x`` restarting where ``seg_start`` is true (works on ranks, so int64
    values of any size are safe)."""
    if len(x) == 0:
        return x.copy()
    seg = np.cumsum(seg_start) - 1
    lo, hi = int(x.min()), int(x.max())
    span = hi - lo + 1
    if (int(seg[-1]) + 1) * span < (1 << 62):  # segment offsets on the values themselves, no sort
        off = seg * np.int64(span)
        return np.maximum.accumulate((x - np.int64(lo)) + off) - off + np.int64(lo)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=np.int64)
    ranks[order] = np.arange(len(x))
    span = len(x) + 1
    acc = np.maximum.accumulate(ranks + seg * span) - seg * span
    return x[order[acc]]


def segmented_ffill_exclusive(x: np.ndarray, seg_start: np.ndarray) -> np.ndarray:
    """For each i: the last value x[j] >= 0 with j < i in the same segment; -1 when none."""
    n = len(x)
    if n == 0:
        return x.copy()
    idx = np.where(x >= 0, np.arange(n), -1)
    prev = np.empty(n, dtype=np.int64)
    prev[0] = -1
    prev[1:] = idx[:-1]
    prev[seg_start] = -1
    seg_first = np.maximum.accumulate(np.where(seg_start, np.arange(n), 0))
    last = np.maximum.accumulate(prev)
    valid = last >= seg_first
    out = np.full(n, -1, dtype=np.int64)
    out[valid] = x[last[valid]]
    return out


#: from this many items :func:`ffill_by` runs its compiled kernel (importing numba costs ~0.3 s)
FFILL_MIN = 50_000


def ffill_by(values: np.ndarray, idx: np.ndarray, seg_start: np.ndarray, method: str = "auto") -> np.ndarray:
    """``out`` (int64, length ``len(values)``, -1 where ``idx`` does not reach) with
    ``out[idx] = segmented_ffill_exclusive(values[idx], seg_start)``: for each position k of
    ``idx``, the last ``values[idx[j]] >= 0`` with j < k in its segment (segments start where
    ``seg_start``), -1 none. One compiled pass (:func:`_ffill_kernel`) from :data:`FFILL_MIN`
    items when numba is there ("auto"; "compiled" whatever the size, "numpy" never, "python" the
    kernel uncompiled), else the numpy scans; the same answers."""
    out = np.full(len(values), -1, dtype=np.int64)
    if method == "python":  # the kernel uncompiled (tests)
        _ffill_kernel(values, idx, seg_start, out)
        return out
    if method != "numpy" and jit.wanted(len(idx), FFILL_MIN, forced=method == "compiled"):
        fn = jit.compiled(_ffill_kernel)
        if fn is not None:
            jit.call(fn, np.ascontiguousarray(values, np.int64), np.ascontiguousarray(idx, np.int64),
                     np.ascontiguousarray(seg_start, np.bool_), out)
            return out
    if len(idx):
        out[idx] = segmented_ffill_exclusive(values[idx].astype(np.int64, copy=False), seg_start)
    return out


def _ffill_kernel(values, idx, seg_start, out):
    """:func:`ffill_by`'s loop: one pass over ``idx``, writing ``out`` in place."""
    cur = -1
    for k in range(len(idx)):
        i = idx[k]
        if seg_start[k]:
            cur = -1
        out[i] = cur
        v = values[i]
        if v >= 0:
            cur = v


def lane_chains(order: np.ndarray, lane: np.ndarray, n_lanes: int, method: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """``(by_lane, lane_prev)`` of a visiting ``order`` (int64, a permutation of the n nodes)
    and each node's ``lane`` (ints in [0, ``n_lanes``)): ``by_lane`` (int64, n) is ``order``
    stably grouped by lane (``order[np.argsort(lane[order], kind="stable")]``); ``lane_prev``
    (int64, n) each node's predecessor in its lane's part of ``by_lane``, -1 for a lane's first.
    One counting pass and one placing pass compiled (:func:`_lane_chains_kernel`) from
    :data:`FFILL_MIN` nodes when numba is there ("auto"; "compiled" whatever the size, "numpy"
    never, "python" the kernel uncompiled), else a radix argsort and gathers; the same answers."""
    n = len(order)
    fn = jit.kernel_for(_lane_chains_kernel, n, FFILL_MIN, method)
    if fn is not None:
        by_lane, lane_prev = np.empty(n, np.int64), np.empty(n, np.int64)
        jit.call(fn, np.ascontiguousarray(order, np.int64), np.ascontiguousarray(lane, np.int64), int(n_lanes), by_lane, lane_prev)
        return by_lane, lane_prev
    by_lane = order[np.argsort(small_ints(lane[order], n_lanes), kind="stable")].astype(np.int64, copy=False)
    lane_prev = np.full(n, -1, dtype=np.int64)
    if n:
        same = lane[by_lane[1:]] == lane[by_lane[:-1]]
        lane_prev[by_lane[1:][same]] = by_lane[:-1][same]
    return by_lane, lane_prev


def _lane_chains_kernel(order, lane, n_lanes, by_lane, lane_prev):
    """:func:`lane_chains`'s loops: lane sizes, then ``order`` placed lane by lane, each node
    linked to the lane's previous one; writes ``by_lane`` and ``lane_prev`` in place."""
    n = len(order)
    at = np.zeros(n_lanes + 1, np.int64)
    for i in range(n):
        at[lane[i] + 1] += 1
    for k in range(n_lanes):
        at[k + 1] += at[k]
    last = np.full(max(n_lanes, 1), -1, np.int64)
    for t in range(n):
        v = order[t]
        k = lane[v]
        by_lane[at[k]] = v
        at[k] += 1
        lane_prev[v] = last[k]
        last[k] = v


def lookup_first(keys: np.ndarray, values: np.ndarray, q: np.ndarray, valid: np.ndarray, method: str = "auto") -> np.ndarray:
    """For each query key ``q`` (int64; where ``valid``): ``values[i]`` of the first ``i`` with
    ``keys[i] == q`` (int64 keys), else -1 (int64, length ``len(q)``). From
    :data:`daydream.events.links.HASH_MIN` keys and queries when numba is there ("auto"; "compiled"
    whatever the size, "python" uncompiled, "numpy" never) one pass through a hash table
    (:func:`daydream.events.links._hash_join`, O(keys + queries)), else a stable sort of the keys and
    :func:`lookup_sorted`; the same answers."""
    fn = jit.kernel_for(_hash_join, len(keys) + len(q), HASH_MIN, method) if len(keys) and len(q) else None
    if fn is None:
        o = np.argsort(keys, kind="stable")
        return lookup_sorted(keys[o], o, values, q, valid)
    keys = np.ascontiguousarray(keys, np.int64)
    j, _ = jit.call(fn, keys, np.ones(len(keys), np.bool_), np.arange(len(keys)), np.ascontiguousarray(q, np.int64),
                    np.ascontiguousarray(valid, np.bool_))
    out = np.full(len(q), -1, dtype=np.int64)
    ok = j >= 0
    out[ok] = values[j[ok]]
    return out


def lookup_sorted(sorted_keys: np.ndarray, order: np.ndarray, values: np.ndarray, q: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """For each query key ``q`` (where ``valid``): ``values[order[j]]`` of the first j with
    ``sorted_keys[j] == q``, else -1."""
    out = np.full(len(q), -1, dtype=np.int64)
    if len(sorted_keys) == 0 or len(q) == 0:
        return out
    j = np.searchsorted(sorted_keys, q)
    ok = (j < len(sorted_keys)) & valid
    ok[ok] &= sorted_keys[j[ok]] == q[ok]
    out[ok] = values[order[j[ok]]]
    return out
