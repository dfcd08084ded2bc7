"""The RUNTIME and GPU task rows of an event table, and its runtime calls by thread.

The per-thread view that the mapping (:func:`daydream.mapping.map_events`) and the graph
builder (:mod:`daydream.graph.build.tasks`) share: :func:`task_rows`, :func:`call_threads`
(:class:`CallThreads`: the calls sorted by (pid, tid, row), thread starts, running max of the
earlier ends), :func:`prev_max_end` and :func:`pair_keys`. Each compiled pass keeps its numpy
twin (``method``; :mod:`daydream.util.jit`); the same answers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..util import jit
from ..util.arrays import stable_group_order
from .table import EventTable, Kind


def _first_pair(ap, at, n, p, t):
    """The first index ``i < n`` with ``(ap[i], at[i]) >= (p, t)`` (``n`` if none); ``ap``/``at``
    ascending by (pid, tid) over ``[0, n)``: the binary search of
    :func:`daydream.mapping.grouping._group_contexts` and :func:`_call_threads_kernel` (compiled with them, :func:`_with_first_pair`)."""
    lo = 0
    hi = n
    while lo < hi:
        mid = (lo + hi) // 2
        if ap[mid] < p or (ap[mid] == p and at[mid] < t):
            lo = mid + 1
        else:
            hi = mid
    return lo


_first_pair_c = _first_pair  # rebound to the compiled helper by _with_first_pair()


def _with_first_pair(kernel):
    """``kernel`` compiled with :func:`_first_pair` compiled for it (None without numba): bound to
    the name ``_first_pair_c`` in the kernel's module, which calls it by that name."""
    return jit.compiled_calling(kernel.__globals__, "_first_pair_c", _first_pair, kernel)


@dataclass
class CallThreads:
    """The RUNTIME rows of a table by thread, as the mapping and the graph builder both need them.

    Attributes:
        rt_rows: the RUNTIME rows sorted by (pid, tid, row).
        new_thread: bool per entry: the first call of its thread.
        prev_end: per entry, the largest end of the earlier calls of its thread in that order
            (:func:`prev_max_end`), ``np.iinfo(np.int64).min`` for a thread's first call.
    """

    rt_rows: np.ndarray
    new_thread: np.ndarray
    prev_end: np.ndarray


#: :func:`task_rows` runs its compiled passes from this many rows ("auto")
TASK_ROWS_MIN = 50_000


def task_rows(kind: np.ndarray, rt: bool = True, gpu: bool = True, method: str = "auto") -> tuple:
    """(the RUNTIME rows, the GPU task rows: KERNEL, MEMCPY and MEMSET) of a table's ``kind``
    column, int64, ascending; None in place of those not asked for (``rt``, ``gpu``). Two
    compiled passes (:func:`_task_rows_kernel`: count, fill) from :data:`TASK_ROWS_MIN` rows
    when numba is there ("auto"; "compiled" whatever the size, "python" the kernel uncompiled,
    "numpy" never), else numpy's comparisons; the same answers."""
    fn = jit.kernel_for(_task_rows_kernel, len(kind), TASK_ROWS_MIN, method)
    if fn is not None:
        r, g = jit.call(fn, np.ascontiguousarray(kind, np.uint8), np.uint8(Kind.RUNTIME), np.uint8(Kind.KERNEL),
                        np.uint8(Kind.MEMCPY), np.uint8(Kind.MEMSET), rt, gpu)
    else:
        r = np.flatnonzero(kind == Kind.RUNTIME) if rt else None
        g = np.flatnonzero((kind == Kind.KERNEL) | (kind == Kind.MEMCPY) | (kind == Kind.MEMSET)) if gpu else None
    return (r if rt else None), (g if gpu else None)


def _task_rows_kernel(kind, k_rt, k_kernel, k_memcpy, k_memset, rt, gpu):
    """:func:`task_rows`' passes (the rows not asked for: empty)."""
    n_rt = 0
    n_g = 0
    for i in range(len(kind)):
        k = kind[i]
        if k == k_rt:
            n_rt += 1
        elif k == k_kernel or k == k_memcpy or k == k_memset:
            n_g += 1
    r = np.empty(n_rt if rt else 0, np.int64)
    g = np.empty(n_g if gpu else 0, np.int64)
    a = 0
    b = 0
    for i in range(len(kind)):
        k = kind[i]
        if k == k_rt:
            if rt:
                r[a] = i
                a += 1
        elif gpu and (k == k_kernel or k == k_memcpy or k == k_memset):
            g[b] = i
            b += 1
    return r, g


#: :func:`call_threads` runs its compiled passes from this many calls ("auto")
CALL_THREADS_MIN = 50_000


#: the compiled passes of :func:`call_threads` give up (numpy's sorts take over) beyond this many threads
CALL_THREADS_MAX_THREADS = 1024


def call_threads(table: EventTable, rt_rows: np.ndarray, method: str = "auto") -> CallThreads:
    """:class:`CallThreads` of the RUNTIME rows ``rt_rows`` (ascending). Three compiled passes
    (:func:`_call_threads_kernel`: the distinct threads, a counting placement, the running max)
    from :data:`CALL_THREADS_MIN` calls when numba is there and the calls are on at most
    :data:`CALL_THREADS_MAX_THREADS` threads ("auto"; "compiled" whatever the size, "python"
    the kernel uncompiled, "numpy" never), else numpy's sorts and scans; the same answers."""
    fn = jit.kernel_for(_call_threads_kernel, len(rt_rows), CALL_THREADS_MIN, method)
    if fn is not None and fn is not _call_threads_kernel:
        fn = _with_first_pair(_call_threads_kernel)
    if fn is not None:
        rows, new_thread, prev_end, ok = jit.call(fn, np.ascontiguousarray(rt_rows, np.int64), table.pid, table.tid, table.end_ns,
                                                  CALL_THREADS_MAX_THREADS)
        if ok:
            return CallThreads(rows, new_thread, prev_end)
    rt_pid, rt_tid = table.pid[rt_rows], table.tid[rt_rows]
    tk = pair_keys(rt_pid, rt_tid)
    # by (pid, tid, row); rows are already start-sorted within a thread
    o = stable_group_order(tk[0]) if tk is not None else np.lexsort((rt_rows, rt_tid, rt_pid))
    rt_rows = rt_rows[o]
    rt_pid, rt_tid = rt_pid[o], rt_tid[o]
    new_thread = np.ones(len(rt_rows), dtype=bool)
    if tk is not None:
        ko = tk[0][o]
        new_thread[1:] = ko[1:] != ko[:-1]
    else:
        new_thread[1:] = (rt_pid[1:] != rt_pid[:-1]) | (rt_tid[1:] != rt_tid[:-1])
    prev_end = np.full(len(rt_rows), np.iinfo(np.int64).min, dtype=np.int64)
    if len(rt_rows):  # running max of the previous calls' ends within each thread
        prev_end = prev_max_end(table.end_ns[rt_rows].astype(np.int64, copy=False), new_thread, np.iinfo(np.int64).min)
    return CallThreads(rt_rows, new_thread, prev_end)


def _call_threads_kernel(rt_rows, pid, tid, end, cap):
    """:func:`call_threads`' passes over the calls ``rt_rows`` (int64, ascending) of the table
    columns ``pid``, ``tid``, ``end``: each call's thread among the distinct (pid, tid) kept
    sorted as they are met (at most ``cap``, else ``ok`` False and nothing else filled), the
    calls placed by thread (ascending (pid, tid)) in row order, then per placed call whether it
    starts its thread and the running max of the earlier ends (int64 min for a thread's first).
    Returns (rows, new_thread, prev_end, ok)."""
    n = len(rt_rows)
    kp = np.empty(cap, np.int64)  # distinct (pid, tid), ascending, and the order they were met in
    kt = np.empty(cap, np.int64)
    kid = np.empty(cap, np.int64)
    th = np.empty(n, np.int32)  # each call's thread, by the order the threads were met in
    nk = 0
    lp = 0
    lt = 0
    lk = -1
    for i in range(n):
        r = rt_rows[i]
        p = np.int64(pid[r])
        t = np.int64(tid[r])
        if lk < 0 or p != lp or t != lt:  # runs of one thread cost a comparison
            lp = p
            lt = t
            lo = _first_pair_c(kp, kt, nk, p, t)
            if lo < nk and kp[lo] == p and kt[lo] == t:
                lk = kid[lo]
            else:
                if nk == cap:
                    return rt_rows[:0], np.zeros(0, np.bool_), np.zeros(0, np.int64), False
                for j in range(nk, lo, -1):
                    kp[j] = kp[j - 1]
                    kt[j] = kt[j - 1]
                    kid[j] = kid[j - 1]
                kp[lo] = p
                kt[lo] = t
                kid[lo] = nk
                lk = nk
                nk += 1
        th[i] = lk
    rank = np.empty(nk, np.int64)  # met order -> sorted position
    for j in range(nk):
        rank[kid[j]] = j
    off = np.zeros(nk + 1, np.int64)
    for i in range(n):
        off[rank[th[i]] + 1] += 1
    for k in range(nk):
        off[k + 1] += off[k]
    rows = np.empty(n, np.int64)
    new_thread = np.zeros(n, np.bool_)
    prev_end = np.empty(n, np.int64)
    pos = off[:nk].copy()
    for i in range(n):
        k = rank[th[i]]
        rows[pos[k]] = rt_rows[i]
        pos[k] += 1
    small = np.iinfo(np.int64).min
    best = small
    k = 0
    for j in range(n):
        while k < nk and off[k] == j:  # the first call of thread k (every thread has calls)
            k += 1
        e = np.int64(end[rows[j]])
        if j == off[k - 1]:
            new_thread[j] = True
            prev_end[j] = small
            best = e
        else:
            prev_end[j] = best
            if e > best:
                best = e
    return rows, new_thread, prev_end, True


#: :func:`prev_max_end` compiles its scan from this many items ("auto")
PREV_MAX_MIN = 50_000


def prev_max_end(eo: np.ndarray, new: np.ndarray, t0: int, method: str = "auto") -> np.ndarray:
    """Per item: the largest ``eo`` of the earlier items of its segment (segments start where
    ``new``, and at item 0), ``t0`` for a segment's first item; int64, shape ``eo.shape`` (1-d).
    One compiled pass (:func:`_prev_max_kernel`) from :data:`PREV_MAX_MIN` items when numba is
    there ("auto"; "compiled" whatever the size, "numpy" never, "python" the kernel uncompiled);
    else numpy scans: segment offsets on the values when they fit in int64, else on ranks (int64
    timestamps of any size are safe). The same answers."""
    n = len(eo)
    fn = jit.kernel_for(_prev_max_kernel, n, PREV_MAX_MIN, method)
    if fn is not None:
        out = np.empty(n, np.int64)
        jit.call(fn, np.ascontiguousarray(eo, np.int64), np.ascontiguousarray(new, np.bool_), np.int64(t0), out)
        return out
    if n == 0:
        return np.zeros(0, np.int64)
    seg = np.cumsum(new) - 1
    lo = int(eo.min())
    span = int(eo.max()) - lo + 2
    if (int(seg[-1]) + 2) * span < (1 << 62):
        v, back = eo - np.int64(lo), None
    else:
        back = np.argsort(eo, kind="stable")
        v = np.empty(n, dtype=np.int64)
        v[back] = np.arange(n)
        span = n + 1
    shifted = np.empty(n, dtype=np.int64)
    shifted[0] = -1
    shifted[1:] = v[:-1]
    shifted[new] = -1  # nothing earlier on the thread
    acc = np.maximum.accumulate(shifted + 1 + seg * np.int64(span)) - seg * np.int64(span) - 1
    if back is None:
        return np.where(acc >= 0, acc + np.int64(lo), t0)
    return np.where(acc >= 0, eo[back[np.maximum(acc, 0)]], t0)


def _prev_max_kernel(eo, new, t0, out):
    """:func:`prev_max_end`'s scan: one pass, writing ``out`` in place."""
    best = t0
    have = False
    for i in range(len(eo)):
        if new[i]:
            have = False
        out[i] = best if have else t0
        v = eo[i]
        if not have or v > best:
            best = v
            have = True


def pair_keys(a: np.ndarray, b: np.ndarray, *more: np.ndarray) -> list[np.ndarray] | None:
    """One int64 per (a, b) pair, ordered as the pairs are (a first), for ``(a, b)`` and each
    further pair of arrays in ``more`` (a2, b2, ...) on one common scale; None when the packed
    pairs would not fit in 62 bits."""
    pairs = [(a, b)] + [(more[i], more[i + 1]) for i in range(0, len(more), 2)]
    alls = [x for x in (a,) + more[0::2] if len(x)]
    blls = [x for x in (b,) + more[1::2] if len(x)]
    if not alls:
        return [np.zeros(0, np.int64) for _ in pairs]
    alo, ahi = min(int(x.min()) for x in alls), max(int(x.max()) for x in alls)
    blo, bhi = min(int(x.min()) for x in blls), max(int(x.max()) for x in blls)
    bb = (bhi - blo).bit_length()
    if (ahi - alo).bit_length() + bb > 62:
        return None
    return [((x.astype(np.int64) - np.int64(alo)) << np.int64(bb)) | (y.astype(np.int64) - np.int64(blo)) for x, y in pairs]
