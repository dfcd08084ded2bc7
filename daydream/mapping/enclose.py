"""The enclosure search: for many queries ``[s, e]`` on one thread, the innermost interval
enclosing each (the latest-starting one with ``start <= s`` and ``end >= e``).

Three tiers, the same answers: a numpy max-end sparse table (:class:`_Enclosers`), a compiled
stack sweep (:func:`_sweep_innermost`, from :data:`SWEEP_MIN` items), and one fused sweep that
answers every category of a thread's contexts at once (:func:`_sweep_fused`, chosen by
:func:`_fused_kernel`).
"""

from __future__ import annotations

import numpy as np

from ..util import jit

#: below this many intervals + queries :meth:`_Enclosers.innermost` uses its numpy sparse table
#: instead of the compiled sweep (importing numba costs ~0.3 s; the table does ~10^5 in ~0.02 s)
SWEEP_MIN = 50_000


class _Enclosers:
    """Intervals of one thread sorted by (start asc, end desc).

    :meth:`innermost` answers, for many queries ``[s, e]`` at once, the latest-starting interval
    with ``start <= s`` and ``end >= e`` (index into the sorted order, -1 none): by a stack
    sweep compiled with numba (:func:`_sweep_innermost`, O(n + q log n)) for big inputs, else
    by a max-end sparse table in numpy (O((n + q) log n)); both give the same answers.
    """

    def __init__(self, start: np.ndarray, end: np.ndarray) -> None:
        ident = len(start) < 2 or bool(np.all(start[1:] >= start[:-1]))  # contexts come in start order
        if ident:
            o, ss = np.arange(len(start)), start
        else:
            o = np.argsort(start, kind="stable")
            ss = start[o]
        if len(o) > 1:  # equal starts: the longer first (np.lexsort((-end, start)) on the tied ones only)
            eq = ss[1:] == ss[:-1]
            if eq.any():
                tied = np.zeros(len(o), dtype=bool)
                tied[1:] = eq
                tied[:-1] |= eq
                p = np.flatnonzero(tied)  # runs of equal starts, in start order
                sub = o[p]
                srt = sub[np.lexsort((-end[sub], start[sub]))]
                ident = ident and bool((srt == sub).all())
                o[p] = srt
        self.order = o
        #: the order is the identity (``start``/``end`` are then the arrays given, not copies)
        self.identity = ident
        self.start = start if ident else start[o]
        self.end = end if ident else end[o]

    def __len__(self) -> int:
        return len(self.order)

    def _levels(self) -> list[np.ndarray]:
        """The sparse table: level l holds max(end[i : i + 2**l])."""
        levels = [self.end]
        w = 1
        while 2 * w <= len(self.end):
            prev = levels[-1]
            levels.append(np.maximum(prev[: len(prev) - w], prev[w:]))
            w *= 2
        return levels

    def innermost(self, qs: np.ndarray, qe: np.ndarray, k: np.ndarray | None = None, method: str = "auto") -> np.ndarray:
        """Largest sorted index j < k with end[j] >= qe (k defaults to #starts <= qs); -1 none.

        ``method``: "table" (numpy), "sweep" (compiled; the table without numba), "sweep-py"
        (the sweep uncompiled, for tests), "auto" (sweep from :data:`SWEEP_MIN` items).
        """
        if len(self) == 0:
            return np.full(len(qe), -1, dtype=np.int64)
        if k is None:
            k = np.searchsorted(self.start, qs, side="right")
        k = np.asarray(k, dtype=np.int64)
        qe = np.asarray(qe, dtype=np.int64)
        if method == "sweep-py":
            return _by_sweep(_sweep_innermost, self.end, k, qe)
        if method != "table" and jit.wanted(len(self) + len(qe), SWEEP_MIN, forced=method == "sweep"):
            fn = jit.compiled(_sweep_innermost)
            if fn is not None:
                return _by_sweep(fn, self.end, k, qe)
        return self._by_table(k, qe)

    def _by_table(self, k: np.ndarray, qe: np.ndarray) -> np.ndarray:
        levels = self._levels()
        cur = k.copy()
        for lvl in range(len(levels) - 1, -1, -1):
            w = 1 << lvl
            can = np.flatnonzero(cur >= w)
            if len(can) == 0:
                continue
            blk_max = levels[lvl][cur[can] - w]
            skip = can[blk_max < qe[can]]
            cur[skip] -= w
        j = cur - 1
        ok = j >= 0
        ok[ok] = self.end[j[ok]] >= qe[ok]
        return np.where(ok, j, -1)

    def any_enclosing(self, qs: np.ndarray, qe: np.ndarray) -> np.ndarray:
        """Whether some interval encloses each query (prefix max of ends)."""
        if len(self) == 0:
            return np.zeros(len(qe), dtype=bool)
        k = np.searchsorted(self.start, qs, side="right")
        pm = np.maximum.accumulate(self.end)
        ok = k > 0
        ok[ok] = pm[k[ok] - 1] >= qe[ok]
        return ok

    def parents(self) -> np.ndarray:
        """For each sorted interval, the innermost earlier interval enclosing it (-1 none)."""
        n = len(self)
        return self.innermost(self.start, self.end, np.arange(n, dtype=np.int64))


def _by_sweep(fn, end: np.ndarray, k: np.ndarray, qe: np.ndarray) -> np.ndarray:
    """:meth:`_Enclosers.innermost` by the sweep ``fn`` (:func:`_sweep_innermost`, compiled or not)."""
    o = np.argsort(k, kind="stable")
    out = np.empty(len(k), dtype=np.int64)
    out[o] = jit.call(fn, np.ascontiguousarray(end, np.int64), k[o], qe[o])
    return out


def _sweep_innermost(end, k, qe):
    """Per query t (``k`` ascending): the largest j < k[t] with end[j] >= qe[t], -1 none.

    Intervals are pushed in order on a stack that keeps only those no later interval outlasts
    (ends strictly decreasing upwards): the answer is always on it (nothing after it reaches
    ``qe``), the topmost entry with end >= qe, found by bisection. O(n + q log n).
    """
    n = len(end)
    q = len(k)
    out = np.empty(q, np.int64)
    stack = np.empty(n, np.int64)
    top = 0
    i = 0
    for t in range(q):
        kk = k[t]
        while i < kk:
            e = end[i]
            while top > 0 and end[stack[top - 1]] <= e:
                top -= 1
            stack[top] = i
            top += 1
            i += 1
        x = qe[t]
        lo = 0
        hi = top
        while lo < hi:  # first stack position whose end is below x
            mid = (lo + hi) // 2
            if end[stack[mid]] >= x:
                lo = mid + 1
            else:
                hi = mid
        out[t] = stack[lo - 1] if lo > 0 else -1
    return out


#: categories of the fused sweep (:func:`_sweep_fused`): bit i of a context's membership word
_CAT_MODULE, _CAT_SCOPE, _CAT_OP, _CAT_BW = range(4)


#: first category bit of the priority levels (one bit per level, highest priority first)
_CAT_LEVEL0 = 4


def _sweep_fused(start, end, c, rk, member_k, phase_k, oplab_k, ncat, nflat, qs, qe, qo, nq):
    """Every category's :func:`_sweep_innermost` of one thread in one pass, queries in ``qs`` order.

    Contexts: ``c`` (int32 or int64, (n,)) lists the thread's contexts in (start asc, end desc)
    order as indices into ``start``/``end`` (int64 ns) and ``rk`` (key index) of all contexts;
    per key k: ``member_k[k]`` (bit c: category c < ``ncat``), ``phase_k[k]`` (phase code),
    ``oplab_k[k]`` (op label id, -1 none). Categories ``0 .. nflat-1`` (module, scope, op,
    backward) are answered each; the later ones are priority levels (highest first), of which
    only the first with a hit is. Queries ``qs``/``qe`` (int64 ns, (q,); the first ``nq`` the
    calls) are taken in the order ``qo`` (``qs[qo]`` ascending). A category's hit for a query:
    its latest member j (in ``c`` order) starting at or before qs with end[j] >= qe.

    Returns (int64 unless said): ``hit_mod``, ``hit_scope`` (q,): the hit's index among the
    category's members, -1 none; ``op_hit`` (nq,): the op hit's label; ``ph``, ``lev`` (q,):
    the phase code of the first level's hit and that level's index; ``enclosed`` (q,) bool:
    some context starting at or before qs ends at or after qe; ``n_bw``: calls with a backward
    hit; ``counts`` (ncat,): members per category; ``sub_mod``, ``par_mod`` / ``sub_scope``,
    ``par_scope``: per module / scope member, its position in ``c`` and its parent's member
    index (:meth:`_Enclosers.parents` of the category, -1 none). One stack of (end, payload)
    per category, ends strictly decreasing upwards (:func:`_sweep_innermost`), the payload what
    the caller reads of a hit (member index, op label, phase code). O((n + q) ncat log n)."""
    n = len(c)
    q = len(qs)
    counts = np.zeros(ncat, np.int64)
    for i in range(n):
        m = member_k[rk[c[i]]]
        cc = 0
        while (m >> cc) != 0:
            counts[cc] += (m >> cc) & 1
            cc += 1
    offset = np.zeros(ncat + 1, np.int64)  # each category's part of one stack array
    for cc in range(ncat):
        offset[cc + 1] = offset[cc] + counts[cc]
    st_end = np.empty(max(offset[ncat], 1), np.int64)
    st_val = np.empty(max(offset[ncat], 1), np.int64)
    top = np.zeros(ncat, np.int64)
    sub_mod = np.empty(counts[_CAT_MODULE], np.int64)
    par_mod = np.empty(counts[_CAT_MODULE], np.int64)
    sub_scope = np.empty(counts[_CAT_SCOPE], np.int64)
    par_scope = np.empty(counts[_CAT_SCOPE], np.int64)
    nsub = np.zeros(2, np.int64)  # next slot of the module and the scope members
    hit_mod = np.full(q, -1, np.int64)
    hit_scope = np.full(q, -1, np.int64)
    op_hit = np.full(nq, -1, np.int64)
    ph = np.full(q, -1, np.int64)
    lev = np.full(q, -1, np.int64)
    enclosed = np.zeros(q, np.bool_)
    n_bw = 0
    i = 0
    run_max = 0  # largest end pushed so far (meaningful once i > 0)
    for t in range(q + 1):
        x_s = qs[qo[t]] if t < q else 0
        while i < n and (t == q or start[c[i]] <= x_s):  # after the last query: the rest (their parents)
            ci = c[i]
            e = end[ci]
            if i == 0 or e > run_max:
                run_max = e
            k = rk[ci]
            _push_c(st_end, st_val, offset, top, member_k[k], e, i, oplab_k[k], phase_k[k], nflat, sub_mod, par_mod, sub_scope,
                    par_scope, nsub)
            i += 1
        if t == q:
            break
        r = qo[t]
        x = qe[r]
        enclosed[r] = i > 0 and run_max >= x
        hit_mod[r] = _reach_c(st_end, st_val, offset[_CAT_MODULE], top[_CAT_MODULE], x)
        hit_scope[r] = _reach_c(st_end, st_val, offset[_CAT_SCOPE], top[_CAT_SCOPE], x)
        if r < nq:
            op_hit[r] = _reach_c(st_end, st_val, offset[_CAT_OP], top[_CAT_OP], x)
            if _reach_c(st_end, st_val, offset[_CAT_BW], top[_CAT_BW], x) >= 0:
                n_bw += 1
        for cc in range(nflat, ncat):
            v = _reach_c(st_end, st_val, offset[cc], top[cc], x)
            if v >= 0:
                ph[r] = v
                lev[r] = cc - nflat
                break
    return hit_mod, hit_scope, op_hit, ph, lev, enclosed, n_bw, counts, sub_mod, par_mod, sub_scope, par_scope


def _push(st_end, st_val, offset, top, m, e, i, oplab, phase, nflat, sub_mod, par_mod, sub_scope, par_scope, nsub):
    """:func:`_sweep_fused`: push context ``i`` (in ``c`` order; category bits ``m``, end ``e``,
    op label ``oplab``, phase code ``phase``) on the stacks of its categories, popping the
    entries it outlasts; a module or scope member takes the next slot ``nsub[category]`` of
    ``sub_*``/``par_*`` (its position; its parent's slot: the topmost entry reaching ``e``)."""
    cc = 0
    while (m >> cc) != 0:
        if (m >> cc) & 1:
            base = offset[cc]
            tp = top[cc]
            val = 0
            if cc == _CAT_MODULE or cc == _CAT_SCOPE:
                val = nsub[cc]
                par = _reach_c(st_end, st_val, base, tp, e)
                if cc == _CAT_MODULE:
                    sub_mod[val] = i
                    par_mod[val] = par
                else:
                    sub_scope[val] = i
                    par_scope[val] = par
                nsub[cc] = val + 1
            elif cc == _CAT_OP:
                val = oplab
            elif cc >= nflat:
                val = phase
            while tp > 0 and st_end[base + tp - 1] <= e:
                tp -= 1
            st_end[base + tp] = e
            st_val[base + tp] = val
            top[cc] = tp + 1
        cc += 1


def _reach(st_end, st_val, base, top, x):
    """The payload of the topmost entry p < ``top`` of the stack at ``base`` (ends strictly
    decreasing upwards) with end >= x, -1 none (payloads are >= 0): doubling steps down from
    the top, then bisection."""
    hi = top  # positions hi and above end below x
    step = 1
    lo = hi - 1
    while lo >= 0 and st_end[base + lo] < x:
        hi = lo
        lo -= step
        step *= 2
    lo = max(lo, -1) + 1  # positions below lo reach x
    while lo < hi:
        mid = (lo + hi) // 2
        if st_end[base + mid] >= x:
            lo = mid + 1
        else:
            hi = mid
    return st_val[base + lo - 1] if lo > 0 else -1


_reach_c = _reach  # rebound to the compiled helpers by _fused_kernel()
_push_c = _push


def _fused_kernel(method: str, size: int):
    """The fused sweep to use for a thread of ``size`` contexts + queries, or None for the
    per-search numpy path (``method`` "numpy", or "auto" below :data:`SWEEP_MIN` / without numba)."""
    if method == "fused-py":
        return _sweep_fused
    if method == "numpy" or not jit.wanted(size, SWEEP_MIN, forced=method in ("fused", "fused-np")):
        return None
    reach = jit.compiled(_reach)  # the kernel's helpers, compiled and bound to the names it calls them by
    if reach is None:
        return None
    globals()["_reach_c"] = reach
    return jit.compiled_calling(globals(), "_push_c", _push, _sweep_fused)
