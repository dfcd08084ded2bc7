"""Links between rows of an :class:`~daydream.events.table.EventTable` that the trace records by id.

The launch link is written once here and used by the mapper and the graph builder alike: a GPU
task row (kernel, memcpy, memset) is launched by the runtime/driver call row of the same process
with the same correlation id (CUPTI, Kineto and nsys all record it; ``../shared/docs/formats.md``).
"""

from __future__ import annotations

import numpy as np

from ..util import jit
from .table import EventTable


def _corr_key(pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    return (pid.astype(np.int64, copy=False) << np.int64(40)) ^ (corr.astype(np.int64, copy=False) & np.int64((1 << 40) - 1))


def only_process(table: EventTable, rt_rows: np.ndarray) -> int:
    """The process that makes API calls (``rt_rows``) when there is exactly one, else -1."""
    if len(rt_rows) == 0:
        return -1
    pids = table.pid[rt_rows]
    lo = pids.min()
    return int(lo) if lo == pids.max() else -1


def pids_of(table: EventTable, rows: np.ndarray, only: int) -> np.ndarray:
    """Process id of each row (int64); rows without one (-1), such as GPU activity or sync
    records of some exports, take ``only`` (:func:`only_process`) when it is known."""
    pid = table.pid[rows].astype(np.int64, copy=False)
    if only >= 0:
        pid[pid < 0] = only
    return pid


def launch_rows(table: EventTable, rt_rows: np.ndarray, gpu_rows: np.ndarray, only: int | None = None,
                dense: bool = True, method: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """The launching runtime row of each GPU row by (process, correlation id), -1 when none.

    Args:
        rt_rows: candidate runtime-call rows; gpu_rows: GPU task rows (int arrays of table rows).
        only: :func:`only_process` of ``rt_rows`` when the caller has it (computed otherwise).
        dense: look ids up in a direct table where that gives the same answer
            (:func:`_dense_launch_rows`; False: always by sorting, the reference the tests use).
        method: when not dense, "auto" joins the keys through a hash table in one compiled
            pass (:func:`_hash_join`) from :data:`HASH_MIN` rows when numba is there, else by
            sorting; "sorted", "hash" (compiled whatever the size), "hash-py" (uncompiled, tests).
    Returns:
        (launch row per GPU row, int64 length ``len(gpu_rows)``; per runtime row, bool: it shares
        its correlation id with an earlier call of its process — the earliest one is the link).
    """
    out = np.full(len(gpu_rows), -1, dtype=np.int64)
    if len(gpu_rows) == 0 or len(rt_rows) == 0:
        return out, np.zeros(len(rt_rows), bool)
    rt_pid = table.pid[rt_rows].astype(np.int64, copy=False)
    rt_corr = table.correlation[rt_rows].astype(np.int64, copy=False)
    g_pid = pids_of(table, gpu_rows, only_process(table, rt_rows) if only is None else only)
    g_corr = table.correlation[gpu_rows].astype(np.int64, copy=False)
    direct = _dense_launch_rows(rt_rows, rt_pid, rt_corr, g_pid, g_corr) if dense else None
    if direct is not None:
        return direct, np.zeros(len(rt_rows), bool)
    rk = _corr_key(rt_pid, rt_corr)
    rs = table.start_ns[rt_rows]
    in_order = len(rs) < 2 or bool(np.all(rs[1:] >= rs[:-1]))  # calls in start order: ties in start stay in call order
    fn = _hash_kernel(method, len(rt_rows) + len(gpu_rows)) if dense else None
    if fn is not None:
        ins = np.arange(len(rt_rows)) if in_order else np.argsort(rs, kind="stable")  # (start, call order)
        gk = _corr_key(g_pid, g_corr)
        j, dup = jit.call(fn, rk, rt_corr >= 0, ins, gk, (g_corr >= 0) & (g_pid >= 0))
        out[j >= 0] = rt_rows[j[j >= 0]]
        return out, dup
    if in_order:
        o = np.argsort(rk, kind="stable")
    else:
        o = np.lexsort((rs, rk))
    o = o[rt_corr[o] >= 0]
    rk_sorted = rk[o]
    dup = np.zeros(len(rt_rows), bool)
    if len(rk_sorted) > 1:
        dup[o[1:][rk_sorted[1:] == rk_sorted[:-1]]] = True
    gk = _corr_key(g_pid, g_corr)
    j = np.searchsorted(rk_sorted, gk)
    ok = (j < len(rk_sorted)) & (g_corr >= 0) & (g_pid >= 0)
    ok[ok] &= rk_sorted[j[ok]] == gk[ok]
    out[ok] = rt_rows[o[j[ok]]]
    return out, dup


#: :func:`_dense_launch_rows` indexes correlation ids directly when their range is at most this
#: many times the number of rows (plus a constant), so that its table stays O(rows)
DENSE_SPAN_FACTOR = 4


def _dense_launch_rows(rt_rows, rt_pid, rt_corr, g_pid, g_corr) -> np.ndarray | None:
    """:func:`launch_rows` by a direct table over correlation ids, None where that does not
    give the same answer cheaply: the calls come from more than one process or one with a
    negative id, two calls share a correlation id (the earliest would have to win), or the ids
    span more than :data:`DENSE_SPAN_FACTOR` times the rows. Every key then is one call's, and
    a GPU row links to it when its (process, correlation id) key (:func:`_corr_key`) is equal."""
    pid = int(rt_pid[0])
    if pid < 0 or not bool((rt_pid == pid).all()):
        return None
    mask = np.int64((1 << 40) - 1)
    valid = rt_corr >= 0
    idx = np.flatnonzero(valid) if not valid.all() else None
    rc = (rt_corr if idx is None else rt_corr[idx]) & mask  # the corr bits of the calls' keys
    if len(rc) == 0:
        return np.full(len(g_corr), -1, np.int64)
    lo, hi = int(rc.min()), int(rc.max())
    span = hi - lo + 1
    if span > DENSE_SPAN_FACTOR * (len(rc) + len(g_corr)) + 4096:
        return None
    slot = np.full(span, -1, np.int64)
    slot[rc - lo] = rt_rows if idx is None else rt_rows[idx]
    if np.count_nonzero(slot >= 0) != len(rc):  # a shared correlation id: the ordered path decides
        return None
    gc = g_corr & mask
    ok = (g_corr >= 0) & (g_pid >= 0) & (gc >= lo) & (gc <= hi) & ((g_pid << np.int64(40)) == (np.int64(pid) << np.int64(40)))
    out = np.full(len(g_corr), -1, np.int64)
    out[ok] = slot[gc[ok] - lo]
    return out


#: from this many rows (calls + GPU tasks) :func:`launch_rows` joins ids through its compiled
#: hash table (importing numba costs ~0.3 s; sorting 10^5 keys takes a few ms)
HASH_MIN = 50_000


def _hash_kernel(method: str, size: int):
    """The hash join to use (:func:`_hash_join`, compiled or not), or None for sorting."""
    if method == "hash-py":
        return _hash_join
    if method == "sorted" or not jit.wanted(size, HASH_MIN, forced=method == "hash"):
        return None
    return jit.compiled(_hash_join)


#: 2**64 / golden ratio, as a signed int64 (multiplicative hashing's constant)
_FIB = -7046029254386353131


def _hash_join(rk, rvalid, ins, gk, gvalid):
    """:func:`launch_rows`' join of the calls' keys ``rk`` (where ``rvalid``) and the GPU rows'
    keys ``gk`` (where ``gvalid``) through an open-addressing table: calls are inserted in the
    order ``ins`` (start, then call order), the first of equal keys kept, the later ones flagged
    as sharing it (``dup``), as the stable sort does. Returns (index into the calls of each GPU
    row's link, -1 none; dup per call). O(calls + GPU rows)."""
    n = len(rk)
    cap = 2
    shift = 63
    while cap < 2 * n + 2:
        cap *= 2
        shift -= 1
    mask = cap - 1
    tkey = np.zeros(cap, np.int64)
    tval = np.full(cap, -1, np.int64)
    dup = np.zeros(n, np.bool_)
    for t in range(len(ins)):
        i = ins[t]
        if not rvalid[i]:
            continue
        key = rk[i]
        h = (key + (key >> 40) * _FIB) & mask  # ids stay adjacent (locality); processes spread apart
        while True:
            if tval[h] < 0:
                tkey[h] = key
                tval[h] = i
                break
            if tkey[h] == key:
                dup[i] = True
                break
            h = (h + 1) & mask
    out = np.full(len(gk), -1, np.int64)
    for j in range(len(gk)):
        if not gvalid[j]:
            continue
        key = gk[j]
        h = (key + (key >> 40) * _FIB) & mask  # ids stay adjacent (locality); processes spread apart
        while tval[h] >= 0:
            if tkey[h] == key:
                out[j] = tval[h]
                break
            h = (h + 1) & mask
    return out, dup
