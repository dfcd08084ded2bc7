"""Each thread's runtime calls, contexts and gap midpoints, as the mapping iterates them.

One compiled grouping pass (:func:`_group_contexts`, chosen by :func:`_group_kernel`) or its
numpy twin by packed keys and sorts (:func:`_by_thread`); the midpoints of the CPU gaps before
the calls (:func:`_gap_midpoints`). The same answers.
"""

from __future__ import annotations

import numpy as np

from ..events.table import EventTable
from ..events.threads import (
    PREV_MAX_MIN,
    CallThreads,
    _first_pair,
    _with_first_pair,
    pair_keys,
    prev_max_end,
)
from ..util import jit
from ..util.arrays import few_distinct
from .enclose import SWEEP_MIN

_first_pair_c = _first_pair  # rebound to the compiled helper by _with_first_pair()


def _group_contexts(c_pid, c_tid, c_start, c_end, th_pid, th_tid):
    """The contexts of each thread (pid, tid) of ``th_pid``/``th_tid`` (int64, (T,), sorted by
    (pid, tid), distinct), from the contexts' int64 columns (n,), n below 2**31: returns ``idx``
    (int32: the indices of the contexts on one of the threads, grouped by thread in that order,
    ascending within), ``off`` (int64 (T + 1,): thread k's are ``idx[off[k]:off[k + 1]]``) and
    ``in_order`` (bool (T,): thread k's contexts in index order are in (start asc, end desc)
    order, the order :class:`_Enclosers` sorts them into). Two passes (count, fill), a binary
    search per run of contexts on one thread in each; what :func:`_by_thread` gives by packed
    keys or lexsort."""
    n = len(c_pid)
    nt = len(th_pid)
    off = np.zeros(nt + 1, np.int64)
    pos = np.zeros(nt, np.int64)
    idx = np.empty(0, np.int32)
    in_order = np.ones(nt, np.bool_)
    last_s = np.zeros(nt, np.int64)
    last_e = np.zeros(nt, np.int64)
    for rep in range(2):
        have = False
        lp = 0
        lt = 0
        lk = -1
        for i in range(n):
            p = c_pid[i]
            t = c_tid[i]
            if not have or p != lp or t != lt:
                lo = _first_pair_c(th_pid, th_tid, nt, p, t)
                lk = lo if lo < nt and th_pid[lo] == p and th_tid[lo] == t else -1
                have = True
                lp = p
                lt = t
            if lk < 0:
                continue
            if rep == 0:
                off[lk + 1] += 1
                continue
            j = pos[lk]
            s = c_start[i]
            e = c_end[i]
            if j > off[lk] and (s < last_s[lk] or (s == last_s[lk] and e > last_e[lk])):
                in_order[lk] = False
            last_s[lk] = s
            last_e[lk] = e
            idx[j] = i
            pos[lk] = j + 1
        if rep == 0:
            for k in range(nt):
                off[k + 1] += off[k]
                pos[k] = off[k]
            idx = np.empty(off[nt], np.int32)
    return idx, off, in_order


def _group_kernel(method: str, size: int):
    """:func:`_group_contexts` to use for ``size`` contexts + queries (compiled; uncompiled for
    "fused-py"), or None for :func:`_by_thread` (``method`` "numpy", or "auto" below
    :data:`SWEEP_MIN` / without numba)."""
    if method == "fused-py":
        return _group_contexts if size < 1 << 31 else None
    if method == "numpy" or not jit.wanted(size, SWEEP_MIN, forced=method in ("fused", "fused-np")) or size >= 1 << 31:
        return None
    return _with_first_pair(_group_contexts)


def _grouped_threads(fn, table: EventTable, rt_rows: np.ndarray, threads: "CallThreads", columns: tuple):
    """What :func:`_map_runtime_calls` iterates, by :func:`_group_contexts` (``fn``): per thread
    with calls and contexts, in (pid, tid) order, ((pid, tid), its calls (ascending rows), its
    context indices (ascending), whether those are in sweep order, the gap midpoints of its calls);
    the threads, calls and contexts :func:`_by_thread` yields, and :func:`_gap_midpoints`."""
    c_pid, c_tid, c_start, c_end = columns
    firsts = np.flatnonzero(threads.new_thread)
    th_pid = table.pid[threads.rt_rows[firsts]].astype(np.int64)
    th_tid = table.tid[threads.rt_rows[firsts]].astype(np.int64)
    idx, off, in_order = jit.call(fn, c_pid, c_tid, c_start, c_end, th_pid, th_tid)
    mid = _gap_midpoints(table, rt_rows, threads, in_thread_order=True)
    bounds = np.append(firsts, len(threads.rt_rows)).tolist()
    off = off.tolist()
    for k in range(len(firsts)):
        if off[k + 1] > off[k]:
            a, b = bounds[k], bounds[k + 1]
            yield ((int(th_pid[k]), int(th_tid[k])), threads.rt_rows[a:b], idx[off[k]:off[k + 1]], bool(in_order[k]),
                   mid[a:b])


def _gap_midpoints(table: EventTable, rt_rows: np.ndarray, threads: CallThreads | None = None, by_row: bool = False,
                   in_thread_order: bool = False, method: str = "auto") -> np.ndarray:
    """Midpoint of the CPU gap before each runtime row (aligned with ``rt_rows``; ``by_row``: an
    int64 array over the table's rows instead, set at ``rt_rows`` only, the rest undefined;
    ``in_thread_order``: aligned with ``threads.rt_rows`` instead, ``threads`` required).

    The gap of call r on thread (pid, tid) is ``[prev_end, start_r]``, ``prev_end`` the largest
    end of the earlier calls of the thread (in start order, ties by row), or the table's earliest
    timestamp for the thread's first call. A call that starts before ``prev_end`` (nested in or
    overlapping an earlier call) has an empty gap: its midpoint is its start. ``threads``: the
    :func:`call_threads` of ``rt_rows`` (every RUNTIME row, ascending), used when the calls are
    in start order (its (pid, tid, row) order is then this one).

    ``method``: with ``in_thread_order``, "auto" checks the start order and makes the midpoints in
    one compiled pass each (:func:`_midpoints_kernel`) from :data:`PREV_MAX_MIN` calls when numba
    is there ("compiled" whatever the size, "python" the kernel uncompiled, "numpy" never); the
    same answers.
    """
    n = len(rt_rows)
    if n == 0:
        return np.zeros(len(table) if by_row else 0, dtype=np.int64)
    t0 = int(table.start_ns.min())
    fn = jit.kernel_for(_midpoints_kernel, n, PREV_MAX_MIN, method) if threads is not None and in_thread_order else None
    if fn is not None:
        mid, ok = jit.call(fn, np.ascontiguousarray(rt_rows, np.int64), np.ascontiguousarray(threads.rt_rows, np.int64),
                           threads.new_thread, threads.prev_end, table.start_ns, np.int64(t0))
        if ok:
            return mid
    s = table.start_ns[rt_rows].astype(np.int64, copy=False)
    if threads is not None and bool(np.all(s[1:] >= s[:-1])):  # rows in start order: ties already by row
        so = table.start_ns[threads.rt_rows].astype(np.int64, copy=False)
        prev_end = threads.prev_end.copy()
        prev_end[threads.new_thread] = t0
        lo = np.minimum(prev_end, so)
        if in_thread_order:
            return lo + (so - lo) // 2
        mid = np.empty(len(table), dtype=np.int64)  # by row, then back to the order of rt_rows
        mid[threads.rt_rows] = lo + (so - lo) // 2
        return mid if by_row else mid[rt_rows]
    pid, tid = table.pid[rt_rows].astype(np.int64, copy=False), table.tid[rt_rows].astype(np.int64, copy=False)
    e = table.end_ns[rt_rows].astype(np.int64, copy=False)
    o = np.lexsort((rt_rows, s, tid, pid))
    new = np.ones(n, dtype=bool)
    new[1:] = (pid[o][1:] != pid[o][:-1]) | (tid[o][1:] != tid[o][:-1])
    prev_end = prev_max_end(e[o], new, t0)
    so = s[o]
    lo = np.minimum(prev_end, so)
    mid = np.empty(n, dtype=np.int64)
    mid[o] = lo + (so - lo) // 2
    if in_thread_order:  # rt_rows ascending, threads.rt_rows a permutation of them
        return mid[np.searchsorted(rt_rows, threads.rt_rows)]
    if by_row:
        full = np.empty(len(table), dtype=np.int64)
        full[rt_rows] = mid
        return full
    return mid


def _midpoints_kernel(rt_rows, th_rows, new_thread, prev_end, start, t0):
    """:func:`_gap_midpoints` (``in_thread_order``, calls in start order): ``ok`` whether the
    calls ``rt_rows`` are in start order (nothing else made if not), and the midpoint of the gap
    before each call of ``th_rows`` (the calls by thread; its :class:`CallThreads`' thread starts
    and running max ``prev_end``), the gap starting at ``t0`` for a thread's first call."""
    n = len(rt_rows)
    for i in range(1, n):
        if start[rt_rows[i]] < start[rt_rows[i - 1]]:
            return np.zeros(0, np.int64), False
    mid = np.empty(len(th_rows), np.int64)
    for j in range(len(th_rows)):
        so = np.int64(start[th_rows[j]])
        lo = t0 if new_thread[j] else prev_end[j]
        if so < lo:
            lo = so
        mid[j] = lo + (so - lo) // 2
    return mid, True


def _by_thread(table: EventTable, q_rows: np.ndarray, c_rows: np.ndarray, c_cols: tuple | None = None):
    """Yield ((pid, tid), query rows, context indices into c_rows) per thread with queries
    (``c_cols``: the int64 pid and tid of ``c_rows`` when the caller has them)."""
    q_pid, q_tid = table.pid[q_rows].astype(np.int64, copy=False), table.tid[q_rows].astype(np.int64, copy=False)
    if c_cols is None:
        c_cols = table.pid[c_rows].astype(np.int64, copy=False), table.tid[c_rows].astype(np.int64, copy=False)
    c_pid, c_tid = c_cols
    ascending = len(q_rows) > 0 and bool(np.all(q_rows[1:] > q_rows[:-1]))
    if ascending and len(c_rows) and _one_thread(q_pid, q_tid, c_pid, c_tid):  # what the packed keys would yield, unpacked
        yield (int(q_pid[0]), int(q_tid[0])), q_rows, np.arange(len(c_rows), dtype=np.int64)
        return
    keys = pair_keys(q_pid, q_tid, c_pid, c_tid)
    if keys is not None and ascending:
        yield from _by_thread_key(q_rows, keys[0], keys[1], q_pid, q_tid)
        return
    qo = np.lexsort((q_tid, q_pid))
    co = np.lexsort((c_tid, c_pid))
    qp, qt = q_pid[qo], q_tid[qo]
    cp, ct = c_pid[co], c_tid[co]
    new = np.ones(len(qo), dtype=bool)
    new[1:] = (qp[1:] != qp[:-1]) | (qt[1:] != qt[:-1])
    firsts = np.flatnonzero(new)
    bounds = np.append(firsts, len(qo))
    for k in range(len(firsts)):
        pid, tid = int(qp[firsts[k]]), int(qt[firsts[k]])
        lo = np.searchsorted(cp, pid, "left")
        hi = np.searchsorted(cp, pid, "right")
        lo2 = lo + np.searchsorted(ct[lo:hi], tid, "left")
        hi2 = lo + np.searchsorted(ct[lo:hi], tid, "right")
        q = np.sort(q_rows[qo[bounds[k]:bounds[k + 1]]])
        c = np.sort(co[lo2:hi2])
        if len(c):
            yield (pid, tid), q, c


def _one_thread(q_pid: np.ndarray, q_tid: np.ndarray, c_pid: np.ndarray, c_tid: np.ndarray) -> bool:
    """Whether the queries and contexts (non-empty) are all on one thread: (pid, tid) of the first query."""
    p, t = q_pid[0], q_tid[0]
    return all(int(a.min()) == v == int(a.max()) for a, v in ((q_pid, p), (q_tid, t), (c_pid, p), (c_tid, t)))


def _by_thread_key(q_rows: np.ndarray, qk: np.ndarray, ck: np.ndarray, q_pid: np.ndarray, q_tid: np.ndarray):
    """:func:`_by_thread` on packed (pid, tid) keys (``q_rows`` ascending): a stable sort keeps
    each thread's rows and contexts ascending, as the lexsort and np.sort there do. With few
    threads (:func:`~daydream.util.arrays.few_distinct`), one equality pass per thread instead."""
    threads = few_distinct(qk)
    if threads is not None:
        for key in threads.tolist():  # ascending, as the sorted keys below
            qm = qk == key
            c = np.flatnonzero(ck == key)
            if len(c):
                f = int(np.argmax(qm))
                yield (int(q_pid[f]), int(q_tid[f])), q_rows[qm], c
        return
    qo = np.argsort(qk, kind="stable")
    co = np.argsort(ck, kind="stable")
    qs, cs = qk[qo], ck[co]
    new = np.ones(len(qo), dtype=bool)
    new[1:] = qs[1:] != qs[:-1]
    firsts = np.flatnonzero(new)
    bounds = np.append(firsts, len(qo)).tolist()
    for k, f in enumerate(firsts.tolist()):
        key = qs[f]
        c = co[np.searchsorted(cs, key, "left"):np.searchsorted(cs, key, "right")]
        if len(c):
            yield (int(q_pid[qo[f]]), int(q_tid[qo[f]])), q_rows[qo[bounds[k]:bounds[k + 1]]], c
