"""One thread's answers: the layer path, op and phase of its runtime calls and of the CPU gaps
before them.

By the fused sweep (:func:`_thread_fused`) with its answers written into the row maps by one
compiled pass (:func:`_finish_thread`), or by one numpy search per context class
(:func:`_layer_ids`, :func:`_op_ids`, :func:`_thread_phases`); the same answers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..util import jit
from .contexts import _Contexts, _Interner, _path_labels
from .enclose import _CAT_BW, _CAT_LEVEL0, _CAT_OP, _Enclosers
from .rules import (
    AUTOGRAD_THREAD_RULE,
    AUTOGRAD_THREAD_SHARE,
    BACKWARD,
    OTHER,
    PHASE_CODE,
    UNMAPPED,
)


@dataclass
class _ThreadContexts:
    """The contexts of one thread: ``c`` indexes the arrays of ``ctx``; start/end in ns."""

    ctx: _Contexts
    c: np.ndarray
    cs: np.ndarray  #: start_ns of each context
    ce: np.ndarray  #: end_ns of each context

    def subset(self, mask: np.ndarray) -> tuple[_Enclosers, np.ndarray]:
        """(interval finder of the contexts selected by ``mask``, their ``ctx`` indices in its sorted order)."""
        enc = _Enclosers(self.cs[mask], self.ce[mask])
        return enc, self.c[mask][enc.order]


def _query_order(qs: np.ndarray, nq: int) -> np.ndarray:
    """An order of the queries ``qs`` (the ``nq`` call starts, then their gap midpoints) with
    ``qs`` ascending: each call's gap midpoint before its start, when that is ascending (calls in
    start order, as the gap rule makes the midpoint of call i lie between the starts of calls
    i - 1 and i), else a stable argsort. The fused sweep's answers do not depend on the order
    among equal ``qs``."""
    qo = np.empty(len(qs), np.int64)
    qo[0::2] = np.arange(nq, len(qs))
    qo[1::2] = np.arange(nq)
    s = qs[qo]
    if bool(np.all(s[1:] >= s[:-1])):
        return qo
    return np.argsort(qs, kind="stable")


def _thread_fused(fn, ctx: _Contexts, c: np.ndarray, in_order: bool | None, qs: np.ndarray, qe: np.ndarray, nq: int,
                  levels: list[int], intern: _Interner, op_label: np.ndarray, finish=None, qo=None):
    """(layer ids, op ids of the calls or None, phase codes, is autograd thread) of one thread's
    queries by one :func:`_sweep_fused` pass over its contexts ``c`` (indices into ``ctx``,
    ascending; ``in_order``: they are in (start asc, end desc) order already, None: unknown);
    the same answers as :func:`_layer_ids`, :func:`_op_ids` and :func:`_thread_phases` (a
    category's members keep the order the thread's (start asc, end desc) sort gives them, which
    is their own sort).

    ``finish``: (:func:`_finish_thread` to run, the thread's call rows (nq,), the
    :class:`_RowMaps` to fill): the answers are written into the row maps at those rows (calls
    and gaps) by that pass instead, and only whether the thread is an autograd thread returned.
    ``qo``: the queries' sweep order when the caller has it (else :func:`_query_order`)."""
    c_start, c_end = ctx.columns[2], ctx.columns[3]
    srt = c
    if not in_order:
        enc = _Enclosers(c_start[c], c_end[c])
        if not enc.identity:
            srt = c[enc.order]
    bk = ctx.by_key
    (hit_mod, hit_scope, op_hit, ph, lev, enclosed, n_bw, counts, sub_mod, par_mod, sub_scope, par_scope) = jit.call(
        fn, c_start, c_end, np.ascontiguousarray(srt), ctx.rk, bk["member"], bk["phase"], op_label[bk["op_name"]],
        _CAT_LEVEL0 + len(levels), _CAT_LEVEL0, np.ascontiguousarray(qs, np.int64), np.ascontiguousarray(qe, np.int64),
        _query_order(qs, nq) if qo is None else qo, nq)
    if finish is not None:
        fin, rows, out = finish
        path = [_path_labels(par, bk["comp"][ctx.rk[srt[sub]]], ctx.comp_names, intern)
                for sub, par in ((sub_mod, par_mod), (sub_scope, par_scope))]
        is_autograd = bool(counts[_CAT_BW]) and _is_autograd(int(n_bw), int(np.count_nonzero(enclosed[:nq])))
        ag = AUTOGRAD_THREAD_RULE.priority
        jit.call(fin, np.ascontiguousarray(rows, np.int64), nq, hit_mod, path[0], hit_scope, path[1], op_hit,
                 bool(counts[_CAT_OP]), ph, lev, enclosed, is_autograd, levels.index(ag) if ag in levels else -2,
                 PHASE_CODE[AUTOGRAD_THREAD_RULE.phase], OTHER, UNMAPPED, out.layer_id, out.gap_layer_id, out.op_id, out.phase,
                 out.gap_phase)
        return is_autograd
    lay = np.full(len(qs), -1, dtype=np.int64)
    for sub, par, hit in ((sub_mod, par_mod, hit_mod), (sub_scope, par_scope, hit_scope)):
        if not len(sub):
            continue
        paths = _path_labels(par, bk["comp"][ctx.rk[srt[sub]]], ctx.comp_names, intern)
        take = (hit >= 0) & (lay < 0)
        lay[take] = paths[hit[take]]
    op_ids = op_hit if counts[_CAT_OP] else None
    ph, is_autograd = _phases_from_hits(int(n_bw), ph, lev, bool(counts[_CAT_BW]), enclosed, nq, levels)
    return lay, op_ids, ph, is_autograd


def _phases_from_hits(n_bw: int, ph: np.ndarray, lev: np.ndarray, has_bw: bool, enclosed: np.ndarray,
                      nq: int, levels: list[int]) -> tuple[np.ndarray, bool]:
    """:func:`_thread_phases` from the fused sweep's answers (``n_bw``: calls with an enclosing
    backward context; ``ph``: per query, the phase of the context its first level with a hit
    gives, -1 none; ``has_bw``: the thread has backward contexts; ``enclosed``: some context of
    the thread encloses the query)."""
    is_autograd = has_bw and _is_autograd(n_bw, int(np.count_nonzero(enclosed[:nq])))
    if is_autograd:
        enclosed[:] = True
    if is_autograd and AUTOGRAD_THREAD_RULE.priority in levels:  # below its level: the autograd rule
        ph[(lev < 0) | (lev > levels.index(AUTOGRAD_THREAD_RULE.priority))] = PHASE_CODE[AUTOGRAD_THREAD_RULE.phase]
    return np.where(ph >= 0, ph, np.where(enclosed, OTHER, UNMAPPED)).astype(np.uint8), is_autograd


def _is_autograd(n_bw: int, n_enclosed: int) -> bool:
    """Rule 2 of :func:`map_events`: a thread with backward contexts whose ``n_enclosed`` calls
    enclosed by some context include ``n_bw`` with a backward one is an autograd engine thread
    when those are more than :data:`AUTOGRAD_THREAD_SHARE` of them (decided by the calls alone)."""
    return n_enclosed > 0 and bool(n_bw > AUTOGRAD_THREAD_SHARE * n_enclosed)


def _finish_kernel(method: str, kernel=None):
    """``kernel`` (default :func:`_finish_thread`, to run after the fused sweep; or
    :func:`_thread_queries`) compiled, uncompiled for "fused-py", or None for the numpy steps
    (``method`` "fused-np", or without numba)."""
    kernel = _finish_thread if kernel is None else kernel
    if method == "fused-py":
        return kernel
    if method == "fused-np":
        return None
    return jit.compiled(kernel)


def _thread_queries(q, start, end, mid):
    """One thread's queries for the fused sweep, as :func:`_map_runtime_calls`' numpy steps and
    :func:`_query_order` make them: ``qs`` = (the calls' ``start`` at rows ``q``, then the gap
    midpoints ``mid``), ``qe`` = (their ``end``, then ``mid``) (int64, (2 nq,)), and ``qo``,
    each call's gap midpoint before its start, with ``ok`` whether ``qs[qo]`` is ascending (else
    the caller sorts)."""
    nq = len(q)
    qs = np.empty(2 * nq, np.int64)
    qe = np.empty(2 * nq, np.int64)
    qo = np.empty(2 * nq, np.int64)
    ok = True
    last = np.int64(0)
    for i in range(nq):
        r = q[i]
        s = np.int64(start[r])
        m = mid[i]
        qs[i] = s
        qe[i] = end[r]
        qs[nq + i] = m
        qe[nq + i] = m
        qo[2 * i] = nq + i
        qo[2 * i + 1] = i
        if m > s or (i > 0 and m < last):
            ok = False
        last = s
    return qs, qe, qo, ok


def _finish_thread(rows, nq, hit_mod, path_mod, hit_scope, path_scope, op_hit, has_op, ph, lev, enclosed, autograd,
                   ag_level, ag_code, other, unmapped, layer_id, gap_layer_id, op_id, phase, gap_phase):
    """What :func:`_thread_fused` and :func:`_phases_from_hits` make of one thread's fused-sweep
    answers (queries: the ``nq`` calls at table rows ``rows``, then their gap midpoints), written
    into the row maps (``layer_id``, ``gap_layer_id``, ``op_id`` int32; ``phase``, ``gap_phase``
    uint8; over table rows) in one pass: the layer is the module path of the query's module hit
    (``path_mod[hit_mod]``), else the scope path of its scope hit, else -1; the op (calls, when
    ``has_op``) the op hit; the phase the first level's hit ``ph`` (level ``lev``), on an
    ``autograd`` thread replaced by ``ag_code`` when that level is below the autograd rule's
    (``ag_level``, -2 when the rule is not among the levels), else ``other`` when some context
    (or the autograd rule) encloses the query, else ``unmapped``."""
    for t in range(2 * nq):
        r = rows[t] if t < nq else rows[t - nq]
        lay = -1
        h = hit_mod[t]
        if h >= 0:
            lay = path_mod[h]
        if lay < 0:
            h = hit_scope[t]
            if h >= 0:
                lay = path_scope[h]
        p = ph[t]
        if autograd and ag_level > -2 and (lev[t] < 0 or lev[t] > ag_level):
            p = ag_code
        if p < 0:
            p = other if (autograd or enclosed[t]) else unmapped
        if t < nq:
            layer_id[r] = lay
            phase[r] = p
            if has_op:
                op_id[r] = op_hit[t]
        else:
            gap_layer_id[r] = lay
            gap_phase[r] = p


def _layer_ids(th: _ThreadContexts, qs: np.ndarray, qe: np.ndarray, intern: _Interner) -> np.ndarray:
    """Label id of the layer path of each query ``[qs, qe]``: module chain, else scope chain; -1 none."""
    ctx, c = th.ctx, th.c
    lay = np.full(len(qs), -1, dtype=np.int64)
    for mask in (ctx.module[c], ctx.scope[c]):
        if not mask.any():
            continue
        enc, srt = th.subset(mask)
        paths = _path_labels(enc.parents(), ctx.comp[srt], ctx.comp_names, intern)
        hit = enc.innermost(qs, qe)
        take = (hit >= 0) & (lay < 0)
        lay[take] = paths[hit[take]]
    return lay


def _op_ids(th: _ThreadContexts, qs: np.ndarray, qe: np.ndarray, op_label: np.ndarray) -> np.ndarray:
    """Label id of the innermost framework op enclosing each call ``[qs, qe]``; -1 none."""
    ctx = th.ctx
    enc, srt = th.subset(ctx.op[th.c])
    hit = enc.innermost(qs, qe)
    ok = hit >= 0
    ids = np.full(len(qs), -1, dtype=np.int64)
    ids[ok] = op_label[ctx.op_name[srt[hit[ok]]]]
    return ids


def _thread_phases(th: _ThreadContexts, qs: np.ndarray, qe: np.ndarray, nq: int, levels: list[int]) -> tuple[np.ndarray, bool]:
    """(uint8 phase code of each query, whether the thread is an autograd engine thread).

    The first ``nq`` queries are the calls (they alone decide the autograd test). A query takes
    the highest priority level with an enclosing context, the innermost within it.
    """
    ctx = th.ctx
    enclosed = _Enclosers(th.cs, th.ce).any_enclosing(qs, qe)
    c_phase, c_prio = ctx.phase[th.c], ctx.prio[th.c]
    bw = c_phase == BACKWARD
    is_autograd = False
    if bw.any() and enclosed[:nq].any():  # decided by the calls alone
        bw_enc = _Enclosers(th.cs[bw], th.ce[bw]).any_enclosing(qs[:nq], qe[:nq])
        is_autograd = bool(bw_enc.sum() > AUTOGRAD_THREAD_SHARE * enclosed[:nq].sum())
    if is_autograd:
        enclosed[:] = True
    ph = np.full(len(qs), -1, dtype=np.int64)
    for p in levels:
        todo = np.flatnonzero(ph < 0)
        if len(todo) == 0:
            break
        mask = (c_prio == p) & (c_phase >= 0)
        if mask.any():
            enc, srt = th.subset(mask)
            hit = enc.innermost(qs[todo], qe[todo])
            ok = hit >= 0
            ph[todo[ok]] = ctx.phase[srt[hit[ok]]]
        if is_autograd and p == AUTOGRAD_THREAD_RULE.priority:
            ph[ph < 0] = PHASE_CODE[AUTOGRAD_THREAD_RULE.phase]
    return np.where(ph >= 0, ph, np.where(enclosed, OTHER, UNMAPPED)).astype(np.uint8), is_autograd
