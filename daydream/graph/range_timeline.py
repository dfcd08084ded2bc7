"""Host time by CPU range: which named CPU range each instant of a CPU thread was in.

The critical path (:mod:`daydream.simulate.critical_path`), the report's CPU-range table and the
``scale-cpu`` what-if charge host time -- an API call's own time, the CPU gap before it -- to the
CPU ranges of the trace (``TaskGraph.cpu_ranges``: annotations and framework ops), named by the
rules of :data:`daydream.mapping.rules.RANGE_RULES`: at each instant of a thread, the enclosing ranges
of the highest rule priority decide, the outermost or the innermost of them as the rule says.

A thread's time is cut at every range boundary into elementary segments, each labelled once
(:func:`range_timeline`); an interval of host time is then split over the segments it overlaps
in proportion to the overlap (:func:`split_by_range`). Python loops run over threads and
priority levels only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..util import jit
from ..util.arrays import few_distinct, sorted_unique, stable_group_order, unique_inverse
from ..mapping.rules import NAME_PREFIX, RANGE_RULES, RangeRule
from .model import TaskGraph

NO_RANGE = "(no range)"


@dataclass(frozen=True)
class RangeTimeline:
    """Labelled segments of the CPU threads (arrays of one length, sorted by (key, lo)).

    key: int64 thread key (:func:`thread_key`); lo, hi: int64 ns; label: int64 index into
    ``labels`` (the range names). Instants outside every segment are in no named range.
    """

    key: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    label: np.ndarray
    labels: list[str]


def thread_key(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """One int64 per (pid, tid) (a lookup key)."""
    return (np.asarray(pid, np.int64) << np.int64(32)) ^ (np.asarray(tid, np.int64) & np.int64(0xFFFFFFFF))


def _classify(names: list[str], ids: np.ndarray, rules) -> tuple[np.ndarray, np.ndarray]:
    """(priority, outermost) per range of name ``ids``; priority -1 for ranges never a label.
    Each distinct name is matched once (a rule with an empty pattern matches without a search)."""
    uniq, inv = unique_inverse(ids)
    pr = np.full(len(uniq), -1, np.int64)
    outer = np.zeros(len(uniq), bool)
    compiled = [None if r.pattern == "" else re.compile(r.pattern) for r in rules]
    for u, i in enumerate(uniq.tolist()):  # one iteration per distinct range name
        for rx, r in zip(compiled, rules):
            if rx is None or rx.search(names[i], 0, NAME_PREFIX):
                pr[u], outer[u] = (r.priority if r.priority is not None else -1), r.outermost
                break
    return pr[inv], outer[inv]


def _pick(start: np.ndarray, end: np.ndarray, qs: np.ndarray, qe: np.ndarray, outermost: bool) -> np.ndarray:
    """Per query ``[qs, qe]``: index of the enclosing range (``start <= qs``, ``end >= qe``) that
    starts first (``outermost``) or last; -1 none. Vectorized (sort + prefix maxima)."""
    o = np.lexsort((-end, start))
    s, e = start[o], end[o]
    k = np.searchsorted(s, qs, "right")  # ranges starting at or before qs: s[:k]
    if outermost:
        pm = np.maximum.accumulate(e)
        j = np.searchsorted(pm, qe, "left")  # the first range whose end reaches qe
        ok = j < k
    else:
        # the last range of s[:k] with end >= qe: a suffix-free search by binary lifting
        j = _last_reaching(e, k, qe)
        ok = j >= 0
    return np.where(ok, o[np.minimum(np.maximum(j, 0), len(o) - 1)], -1)


def _last_reaching(e: np.ndarray, k: np.ndarray, qe: np.ndarray) -> np.ndarray:
    """Largest j < k with ``e[j] >= qe`` (-1 none): a max sparse table walked down by halves."""
    levels = [e]
    w = 1
    while 2 * w <= len(e):
        prev = levels[-1]
        levels.append(np.maximum(prev[: len(prev) - w], prev[w:]))
        w *= 2
    cur = np.asarray(k, np.int64).copy()
    for lvl in range(len(levels) - 1, -1, -1):
        w = 1 << lvl
        can = np.flatnonzero(cur >= w)
        if len(can):
            skip = can[levels[lvl][cur[can] - w] < qe[can]]
            cur[skip] -= w
    j = cur - 1
    ok = j >= 0
    ok[ok] = e[j[ok]] >= qe[ok]
    return np.where(ok, j, -1)


def range_timeline(graph: TaskGraph, rules: tuple[RangeRule, ...] = RANGE_RULES) -> RangeTimeline:
    """The labelled segments of every CPU thread with named ranges (see the module doc).

    From :data:`TIMELINE_MIN` labelled ranges (and numba importable, ``DAYDREAM_JIT`` not off)
    one compiled sweep per thread (:func:`_timeline_kernel`) gives the segments of the numpy
    passes (:func:`range_timeline_numpy`), the same to the nanosecond
    (tests/test_range_timeline.py)."""
    cr = graph.cpu_ranges
    if cr is None or not len(cr.pid):
        return _empty()
    pr, outer = _classify(graph.names, cr.name_id, rules)
    keep = np.flatnonzero((pr >= 0) & (cr.end_ns > cr.start_ns))
    if jit.wanted(len(keep), TIMELINE_MIN, jit.loaded(_timeline_kernel)):
        fn = _timeline_fn()
        if fn is not None:  # the kept ranges gathered once, in the kernel's order
            return _timeline_compiled(fn, graph.names, thread_key(cr.pid, cr.tid), cr.start_ns, cr.end_ns, cr.name_id, pr, outer, keep)
    key = thread_key(cr.pid, cr.tid)[keep]
    return range_timeline_numpy(graph.names, key, cr.start_ns[keep], cr.end_ns[keep], cr.name_id[keep], pr[keep], outer[keep])


#: labelled CPU ranges from which :func:`range_timeline` runs its compiled sweep (numba is
#: imported by then in a run this big, as for :data:`SPLIT_MIN`)
TIMELINE_MIN = 50_000


def labelled_timeline(names: list[str], key: np.ndarray, s: np.ndarray, e: np.ndarray, nid: np.ndarray,
                      pr: np.ndarray, outer: np.ndarray) -> RangeTimeline:
    """:func:`range_timeline_numpy`'s result (same arguments and shapes: int64 ``key``, ``s``, ``e``
    ns with ``e > s``, ``nid``, ``pr``; bool ``outer``), by the compiled sweep from
    :data:`TIMELINE_MIN` ranges as :func:`range_timeline` chooses it (the same segments, to the
    nanosecond: tests/test_range_timeline.py). The report's op timelines (innermost ``cpu_op``
    per instant, daydream/report/tables.py) take it: 1 M-event nsys bench table, 592,658 ranges,
    the numpy passes' sparse-table walk (``_last_reaching``) was 2.1 s of the ``--opt all`` run
    under cProfile."""
    if jit.wanted(len(s), TIMELINE_MIN, jit.loaded(_timeline_kernel)):
        fn = _timeline_fn()
        if fn is not None:
            return _timeline_compiled(fn, names, np.asarray(key, np.int64), np.asarray(s, np.int64), np.asarray(e, np.int64),
                                      np.asarray(nid, np.int64), np.asarray(pr, np.int64), np.asarray(outer, bool))
    return range_timeline_numpy(names, key, s, e, nid, pr, outer)


def _empty() -> RangeTimeline:
    z = np.zeros(0, np.int64)
    return RangeTimeline(z, z, z, z, [])


def _labelled(names: list[str], key, lo, hi, lab) -> RangeTimeline:
    """The :class:`RangeTimeline` of segments labelled by name id ``lab``: labels renumbered
    by name id (the distinct ids in ascending order)."""
    uniq, inv = unique_inverse(lab)
    return RangeTimeline(key, lo, hi, inv, [names[int(i)] for i in uniq])


def range_timeline_numpy(names: list[str], key: np.ndarray, s: np.ndarray, e: np.ndarray, nid: np.ndarray,
                         pr: np.ndarray, outer: np.ndarray) -> RangeTimeline:
    """:func:`range_timeline` by numpy passes, loops over threads and priority levels (the
    reference of the compiled :func:`_timeline_kernel`). The labelled ranges: thread ``key``,
    ``[s, e)`` (int64 ns, ``e > s``), name id ``nid``, rule priority ``pr`` (>= 0), ``outer``
    (the rule's outermost flag; a priority level takes that of its first range of the thread)."""
    parts = []
    for k in sorted_unique(key).tolist():  # threads are few
        m = key == k
        b = sorted_unique(np.concatenate([s[m], e[m]]))
        lo, hi = b[:-1], b[1:]
        lab = np.full(len(lo), -1, np.int64)
        for p in sorted(set(pr[m].tolist()), reverse=True):  # priority levels are few
            todo = np.flatnonzero(lab < 0)
            sel = np.flatnonzero(m & (pr == p))
            if not len(todo) or not len(sel):
                continue
            hit = _pick(s[sel], e[sel], lo[todo], hi[todo], bool(outer[sel[0]]))
            ok = hit >= 0
            lab[todo[ok]] = nid[sel[hit[ok]]]
        ok = lab >= 0
        parts.append((np.full(int(ok.sum()), k, np.int64), lo[ok], hi[ok], lab[ok]))
    if not parts:
        return _empty()
    k_, lo_, hi_, lab_ = (np.concatenate(x) for x in zip(*parts))
    return _labelled(names, k_, lo_, hi_, lab_)


def _timeline_compiled(fn, names: list[str], key, s, e, nid, pr, outer, idx: np.ndarray | None = None) -> RangeTimeline:
    """:func:`range_timeline_numpy`'s result by the kernel ``fn`` (:func:`_timeline_kernel`,
    compiled or not), for the ranges ``idx`` (ascending positions; default all) of the arrays.
    numpy sorts here (stable sorts of nearly sorted starts are fast): the ranges by thread,
    then start, then original position; each thread's ends on their own."""
    at = np.arange(len(s)) if idx is None else np.asarray(idx, np.int64)
    if not len(at):
        return _empty()
    o = at[np.argsort(s[at], kind="stable")]  # positions into the arrays
    o = o[stable_group_order(key[o])]
    ks = key[o]
    cut = np.flatnonzero(ks[1:] != ks[:-1]) + 1
    tkeys = ks[np.concatenate([[0], cut])]
    first = np.concatenate([[0], cut, [len(ks)]]).astype(np.int64)
    p = pr[o]
    levels = few_distinct(p, 64)
    if levels is None:
        levels = sorted_unique(p)
    lvl = (len(levels) - 1 - np.searchsorted(levels, p)).astype(np.int64)  # 0: the highest priority
    c = np.ascontiguousarray
    ss, ee = c(s[o], np.int64), c(e[o], np.int64)
    es = np.concatenate([np.sort(ee[first[t]:first[t + 1]]) for t in range(len(tkeys))])  # threads are few
    k, lo, hi, lab, uniq = jit.call(fn, first, c(tkeys, np.int64), ss, ee, es, lvl, c(outer[o], bool), c(nid[o], np.int64), c(o, np.int64),
                                    len(levels), len(names))
    return RangeTimeline(k, lo, hi, lab, [names[i] for i in uniq.tolist()])


def _timeline_kernel(first, tkeys, s, e, es, lvl, outer, nid, orig, nlev, n_names):
    """The labelled segments of the threads, one sweep each (:func:`_sweep`): thread ``t`` (key
    ``tkeys[t]``) holds the ranges ``[first[t], first[t + 1])``, sorted by start, then original
    position ``orig`` (``[s, e)`` int64 ns, ``e > s``; priority level ``lvl``, 0 the highest,
    of ``nlev``; ``outer``; name id ``nid`` < ``n_names``); ``es``: each thread's ends, sorted.
    Returns (thread key, lo, hi, label) per labelled segment, by thread, then time, and the
    name ids of the labels (ascending: label i names ``uniq[i]``, as :func:`_labelled`)."""
    cap = 2 * len(s)
    th_o = np.empty(cap, np.int64)
    lo_o = np.empty(cap, np.int64)
    hi_o = np.empty(cap, np.int64)
    lab_o = np.empty(cap, np.int64)
    n_out = 0
    for t in range(len(first) - 1):
        a, b = first[t], first[t + 1]
        if b == a:
            continue
        o = _start_order_c(s, e, a, b)
        flag, off, items = _levels_c(lvl, outer, orig, o, a, b, nlev)
        n_new = _sweep_c(s, e, es, lvl, nid, o, flag, off, items, a, b, lo_o, hi_o, lab_o, n_out)
        th_o[n_out:n_new] = tkeys[t]
        n_out = n_new
    rank = np.zeros(n_names + 1, np.int64)  # labels renumbered by name id: rank[i] = distinct ids < i
    for q in range(n_out):
        rank[lab_o[q] + 1] = 1
    for i in range(n_names):
        rank[i + 1] += rank[i]
    uniq = np.empty(rank[n_names], np.int64)
    for i in range(n_names):
        if rank[i + 1] > rank[i]:
            uniq[rank[i]] = i
    for q in range(n_out):
        lab_o[q] = rank[lab_o[q]]
    return th_o[:n_out].copy(), lo_o[:n_out].copy(), hi_o[:n_out].copy(), lab_o[:n_out].copy(), uniq


def _start_order(s, e, a, b):
    """The ranges ``[a, b)`` (sorted by start, then original position) in :func:`_pick`'s
    order: runs of one start put by end descending, stably (absolute indices)."""
    m = b - a
    o = np.arange(a, b)
    i = 0
    while i < m:
        j = i + 1
        while j < m and s[a + j] == s[a + i]:
            j += 1
        if j - i > 32:  # a long run: a stable sort
            run = o[i:j].copy()
            sub = np.argsort(-e[run], kind="mergesort")
            for q in range(j - i):
                o[i + q] = run[sub[q]]
        elif j - i > 1:
            for q in range(i + 1, j):  # insertion sort: runs are short
                r = o[q]
                x = q
                while x > i and e[o[x - 1]] < e[r]:
                    o[x] = o[x - 1]
                    x -= 1
                o[x] = r
        i = j
    return o


def _levels(lvl, outer, orig, o, a, b, nlev):
    """Per priority level of the ranges ``[a, b)``: its outermost flag (its first range's in
    the original order ``orig``), and its ranges in the order ``o``: ``items[off[l]:off[l + 1]]``."""
    flag = np.zeros(nlev, np.bool_)
    first_at = np.full(nlev, -1, np.int64)
    off = np.zeros(nlev + 1, np.int64)
    for r in range(a, b):
        lv = lvl[r]
        off[lv + 1] += 1
        if first_at[lv] < 0 or orig[r] < first_at[lv]:
            first_at[lv] = orig[r]
            flag[lv] = outer[r]
    for lv in range(nlev):
        off[lv + 1] += off[lv]
    items = np.empty(b - a, np.int64)
    fill = off[:nlev].copy()
    for q in range(b - a):
        r = o[q]
        items[fill[lvl[r]]] = r
        fill[lvl[r]] += 1
    return flag, off, items


def _sweep(s, e, es, lvl, nid, o, flag, off, items, a, b, lo_o, hi_o, lab_o, n_out):
    """One thread's sweep over its segments (consecutive distinct boundaries of ``[a, b)``):
    a segment's label at a level is the alive range (started at or before the segment's start,
    ending after it) of that level first in the order ``o`` (outermost: a pointer that skips
    ended ranges) or last (innermost: a stack that pops them); the highest level with one
    decides. Labelled segments are written from ``n_out``; returns the new count."""
    nlev = len(flag)
    ptr = off[:nlev].copy()
    added = off[:nlev].copy()
    top = off[:nlev].copy()
    stk = np.empty(b - a, np.int64)
    m = b - a
    i = 0
    j = a
    lo = s[a]
    while True:
        while i < m and s[o[i]] <= lo:  # ranges starting by lo join their level
            lv = lvl[o[i]]
            added[lv] += 1
            stk[top[lv]] = o[i]
            top[lv] += 1
            i += 1
        while j < b and es[j] <= lo:
            j += 1
        if j == b:
            return n_out
        hi = es[j]
        if i < m and s[o[i]] < hi:
            hi = s[o[i]]
        lab = -1
        for lv in range(nlev):
            if flag[lv]:
                p = ptr[lv]
                while p < added[lv] and e[items[p]] <= lo:
                    p += 1
                ptr[lv] = p
                if p < added[lv]:
                    lab = nid[items[p]]
                    break
            else:
                tp = top[lv]
                while tp > off[lv] and e[stk[tp - 1]] <= lo:
                    tp -= 1
                top[lv] = tp
                if tp > off[lv]:
                    lab = nid[stk[tp - 1]]
                    break
        if lab >= 0:
            lo_o[n_out], hi_o[n_out], lab_o[n_out] = lo, hi, lab
            n_out += 1
        lo = hi


#: rebound to the compiled helpers by :func:`_timeline_fn`
_start_order_c, _levels_c, _sweep_c = _start_order, _levels, _sweep


def _timeline_fn():
    """The compiled :func:`_timeline_kernel` (calling its compiled helpers), or None without numba."""
    g = globals()
    for name, helper in (("_start_order_c", _start_order), ("_levels_c", _levels)):
        h = jit.compiled(helper)
        if h is None:
            return None
        g[name] = h
    return jit.compiled_calling(g, "_sweep_c", _sweep, _timeline_kernel)


def split_by_range(rt: RangeTimeline, key: np.ndarray, a: np.ndarray, b: np.ndarray, w: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split weights ``w`` of host intervals ``[a, b]`` of threads ``key`` over the range labels.

    Each interval's weight goes to the labelled segments it overlaps in proportion to the overlap
    (an empty interval: all to the segment holding ``a``); the rest to label -1 (no named range).

    Returns:
        (query index, label (-1: none), ns as float64): one row per (query, segment) overlap and
        one per query for its unlabelled rest.

    From :data:`SPLIT_MIN` queries (and numba importable, ``DAYDREAM_JIT`` not off) one
    compiled pass (:func:`_split_kernel`, its searches started where the thread's last query
    ended: the critical path's queries come in time order) gives the same rows, bit for bit, as
    the numpy passes of :func:`split_by_range_numpy` (tests/test_range_split.py): 1 M-event nsys
    trace, 138 k queries over 1.06 M segments, 0.038 -> 0.011 s CPU.
    """
    key, a, b = np.asarray(key, np.int64), np.asarray(a, np.int64), np.asarray(b, np.int64)
    w = np.asarray(w, np.float64)
    if jit.wanted(len(a), SPLIT_MIN, jit.loaded(_split_kernel)):
        fn = _split_fn()
        if fn is not None:
            return _split_compiled(fn, rt, key, a, b, w)
    return split_by_range_numpy(rt, key, a, b, w)


#: queries from which :func:`split_by_range` runs its compiled kernel (numba is imported by
#: then in a run this big: the replay's kernel starts at 100 k tasks)
SPLIT_MIN = 50_000


def split_by_range_numpy(rt: RangeTimeline, key: np.ndarray, a: np.ndarray, b: np.ndarray, w: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`split_by_range` by numpy passes, a loop over threads (the reference of the
    compiled :func:`_split_kernel`; int64 ``key``/``a``/``b``, float64 ``w``)."""
    qi_out, lab_out, ns_out = [np.arange(len(a))], [np.full(len(a), -1, np.int64)], []
    covered = np.zeros(len(a), np.float64)
    for k in sorted_unique(key).tolist():  # threads are few
        lo_t, hi_t = np.searchsorted(rt.key, k, "left"), np.searchsorted(rt.key, k, "right")
        if lo_t == hi_t:
            continue
        q = np.flatnonzero(key == k)
        slo, shi, slab = rt.lo[lo_t:hi_t], rt.hi[lo_t:hi_t], rt.label[lo_t:hi_t]
        qa, qb = a[q], np.maximum(b[q], a[q])
        i0 = np.searchsorted(shi, qa, "right")
        i1 = np.maximum(np.searchsorted(slo, qb, "left"), i0)
        point = qb == qa
        i1 = np.where(point & (i0 < len(slo)) & (slo[np.minimum(i0, len(slo) - 1)] <= qa), i0 + 1, i1)
        cnt = i1 - i0
        rep = np.repeat(np.arange(len(q)), cnt)
        seg = i0[rep] + np.arange(len(rep)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        span = (qb - qa)[rep]
        ov = np.minimum(qb[rep], shi[seg]) - np.maximum(qa[rep], slo[seg])
        share = np.where(span > 0, np.maximum(ov, 0) / np.maximum(span, 1), 1.0) * w[q][rep]
        np.add.at(covered, q[rep], share)
        qi_out.append(q[rep])
        lab_out.append(slab[seg])
        ns_out.append(share)
    rest = np.maximum(w - covered, 0.0)
    return np.concatenate(qi_out), np.concatenate(lab_out), np.concatenate([rest, *ns_out])


def _split_compiled(fn, rt: RangeTimeline, key, a, b, w) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`split_by_range` by the kernel ``fn`` (:func:`_split_kernel`, compiled or not)."""
    c = np.ascontiguousarray
    return jit.call(fn, c(rt.key, np.int64), c(rt.lo, np.int64), c(rt.hi, np.int64), c(rt.label, np.int64), c(key), c(a), c(b), c(w))


def _split_kernel(rkey, slo, shi, slab, key, a, b, w):
    """:func:`split_by_range_numpy` in one compiled pass per query, rows in the same order
    (threads by key, then query index; so float sums over the rows come out the same) and the
    same int64 and float64 operations: int64 wraps as numpy's does, no range check needed.
    ``rkey``/``slo``/``shi``/``slab``: the timeline's columns (sorted by key, then lo)."""
    nt = 0
    for s in range(len(rkey)):  # the distinct thread keys of the timeline and their segments
        if s == 0 or rkey[s] != rkey[s - 1]:
            nt += 1
    tkeys = np.empty(nt, np.int64)
    first = np.empty(nt, np.int64)
    last = np.empty(nt, np.int64)
    t = -1
    for s in range(len(rkey)):
        if s == 0 or rkey[s] != rkey[s - 1]:
            t += 1
            tkeys[t], first[t] = rkey[s], s
        last[t] = s + 1
    m = len(a)
    th = np.full(m, -1, np.int64)
    hint = first.copy()  # per thread: where its last query's search ended (queries come in runs)
    i0 = np.zeros(m, np.int64)
    cnt = np.zeros(m, np.int64)
    per = np.zeros(nt + 1, np.int64)
    for q in range(m):  # the thread and the overlapped segments [i0, i0 + cnt) of each query
        lo, hi = 0, nt  # bisection (np.searchsorted's, written out: numba's is slower)
        while lo < hi:
            mid = (lo + hi) >> 1
            if tkeys[mid] < key[q]:
                lo = mid + 1
            else:
                hi = mid
        t = lo
        if t == nt or tkeys[t] != key[q]:
            continue
        lo_t, hi_t = first[t], last[t]
        qa, qb = a[q], max(b[q], a[q])
        j0 = _gallop_c(shi, lo_t, hi_t, qa, True, hint[t])  # the first segment with hi > qa
        if qb == qa and j0 < hi_t and slo[j0] <= qa:
            j1 = j0 + 1
        else:
            j1 = max(_gallop_c(slo, lo_t, hi_t, qb, False, j0), j0)  # the first segment with lo >= qb
        hint[t] = j0
        th[q], i0[q], cnt[q] = t, j0, j1 - j0
        per[t + 1] += j1 - j0
    for t in range(nt):
        per[t + 1] += per[t]
    total = per[nt]
    qi = np.empty(m + total, np.int64)
    lab = np.empty(m + total, np.int64)
    ns = np.empty(m + total, np.float64)
    covered = np.zeros(m, np.float64)
    at = per[:nt].copy() + m
    for q in range(m):
        t = th[q]
        if t < 0:
            continue
        qa, qb = a[q], max(b[q], a[q])
        span = qb - qa
        r = at[t]
        for s in range(i0[q], i0[q] + cnt[q]):
            if span > 0:
                share = max(min(qb, shi[s]) - max(qa, slo[s]), 0) / max(span, 1) * w[q]
            else:
                share = 1.0 * w[q]
            covered[q] += share
            qi[r], lab[r], ns[r] = q, slab[s], share
            r += 1
        at[t] = r
    for q in range(m):
        qi[q], lab[q], ns[q] = q, -1, max(w[q] - covered[q], 0.0)
    return qi, lab, ns


def _gallop(arr, lo: int, hi: int, x: int, strict: bool, hint: int) -> int:
    """The first index j of ``[lo, hi)`` with ``arr[j] > x`` (``strict``) or ``>= x``, ``hi``
    when none (``arr`` sorted there: ``np.searchsorted`` side right / left, plus ``lo``),
    searched outward from ``hint`` by doubling steps, then by bisection: O(log distance)."""
    if hi <= lo:
        return lo
    h = min(max(hint, lo), hi - 1)
    left, right, step = lo, hi, 1
    if (arr[h] > x) if strict else (arr[h] >= x):  # the answer is at h or before
        right = h
        while right - step >= left:
            j = right - step
            if (arr[j] > x) if strict else (arr[j] >= x):
                right = j
                step *= 2
            else:
                left = j + 1
                break
    else:  # after h
        left = h + 1
        while left + step - 1 < right:
            j = left + step - 1
            if (arr[j] > x) if strict else (arr[j] >= x):
                right = j
                break
            left = j + 1
            step *= 2
    while left < right:
        mid = (left + right) >> 1
        if (arr[mid] > x) if strict else (arr[mid] >= x):
            right = mid
        else:
            left = mid + 1
    return left


_gallop_c = _gallop  # rebound to the compiled _gallop by _split_fn()


def _split_fn():
    """The compiled :func:`_split_kernel` (calling the compiled :func:`_gallop`), or None without numba."""
    return jit.compiled_calling(globals(), "_gallop_c", _gallop, _split_kernel)
