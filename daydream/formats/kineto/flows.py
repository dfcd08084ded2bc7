"""Kineto launch flows: ``ac2g``/``async`` flow ends bound to their slices (package docstring,
"Launch flows"), giving the launch link where a runtime call or GPU task lacks ``args.correlation``.

Vectorized: sorted keys and ``searchsorted``, no Python work per event.
"""

from __future__ import annotations

import numpy as np

from ...events.table import Accounting, Kind
from ...util.arrays import sorted_unique
from ...util.intern import _Ids
from .. import TIME_LIMIT_NS
from .columns import _Columns, _EventCols, _Rows
from .projection import _NONNUM, _missing_to
from .times import _INT64_MAX, _INT64_MIN


def _flow_end_places(cc: _Columns, ev: _EventCols, base_ns: int) -> None:
    """Adds the sparse columns ``flow_pid``, ``flow_tid``, ``flow_ts`` (ns, base time added) and
    ``flow_ok`` (numeric ts and pid, time in range, an id) of the launch flow ends to ``cc``."""
    at = cc.column("flow@", np.int64)
    if len(at) == 0:
        return
    ts = ev.ts_ns[at]
    lo_b = max(-TIME_LIMIT_NS + 1 - base_ns, _INT64_MIN)
    ok = ev.ts_ok[at] & ev.pid_ok[at] & (ts >= lo_b) & (ts <= ev.hi_b) & (cc.column("flow", np.int64) > _NONNUM)
    cats = _Ids()  # the lower-cased category of each (ph, cat) pair -> a small id
    pair_cat = np.array([cats[c.lower()] if isinstance(c, str) else -1 for _, c in cc.pair_ix], np.int64)
    pair_f = np.array([p == "f" for p, _ in cc.pair_ix], bool)
    pair_of = cc.column("pair", np.int32)[at]
    cc._put("flow_cat", pair_cat[pair_of])
    cc._put("flow_f", pair_f[pair_of])
    cc._put("flow_pid", ev.pid[at])
    cc._put("flow_tid", _missing_to(ev.tid[at]))
    cc._put("flow_ts", np.where(ok, ts, 0) + base_ns)
    cc._put("flow_ok", ok)


#: when True, launch flows are read even where every launch carries args.correlation (tests)
_FLOW_LINKS_ALWAYS = False
_FLOW_COLS = ("flow@", "flow", "flow_cat", "flow_f", "flow_bp_e", "flow_pid", "flow_tid", "flow_ts", "flow_ok")


def _flow_links(
    cc: _Columns, rows: _Rows, r_pid: np.ndarray, r_tid: np.ndarray, linked_kind: np.ndarray,
    correlation: np.ndarray, max_corr: int, acct: Accounting,
) -> np.ndarray:
    """``correlation`` with the launch links that only the ``ac2g`` flows carry filled in.

    Done only when some runtime/driver call or GPU task (``linked_kind``) has no correlation id.
    Each flow end is bound to its slice on its (pid, tid), as the Chrome trace format does: a start
    to the runtime/driver call enclosing its ts; a finish with ``bp: "e"`` to the GPU task
    enclosing its ts, without it to the next GPU task starting at or after its ts. A finish pairs
    with the latest start of the same (cat, id) at or before it. Where one side of a bound pair
    lacks a correlation id it takes the other's, where both lack one they get a fresh id above
    every recorded one (``max_corr`` and the syncs' event-record ids); ids both sides carry are
    kept, a flow disagreeing with them counted.
    """
    is_rt = rows.kind == Kind.RUNTIME
    if len(cc.column("flow@", np.int64)) == 0 or not (
        _FLOW_LINKS_ALWAYS or np.any((correlation < 0) & (is_rt | linked_kind))
    ):
        cc.drop(*_FLOW_COLS)
        return correlation
    f_key, f_cat, is_f = cc.column("flow", np.int64), cc.column("flow_cat", np.int64), cc.column("flow_f", bool)
    ok, bp_e = cc.column("flow_ok", bool), cc.column("flow_bp_e", bool)
    f_pid, f_tid, f_ts = cc.column("flow_pid", np.int64), cc.column("flow_tid", np.int64), cc.column("flow_ts", np.int64)
    cc.drop(*_FLOW_COLS)
    acct.add("notes", "launch flow end without a numeric ts/pid or an id (not read)", int(np.count_nonzero(~ok)))
    s, f = _pair_flow_ends(f_key, f_cat, is_f, f_ts, ok, acct)
    rt = _bind(np.flatnonzero(is_rt), r_pid, r_tid, rows, f_pid[s], f_tid[s], f_ts[s], np.ones(len(s), bool))
    gpu = _bind(np.flatnonzero(linked_kind), r_pid, r_tid, rows, f_pid[f], f_tid[f], f_ts[f], bp_e[f])
    acct.add("notes", "launch flow whose start is not within a runtime/driver call (not read)", int(np.count_nonzero(rt < 0)))
    acct.add("notes", "launch flow whose finish is not on a GPU task (not read)", int(np.count_nonzero(gpu < 0)))
    both = (rt >= 0) & (gpu >= 0)
    return _link_pairs(cc, correlation, rt[both], gpu[both], max_corr, acct)


def _bind(
    cand: np.ndarray, r_pid: np.ndarray, r_tid: np.ndarray, rows: _Rows,
    q_pid: np.ndarray, q_tid: np.ndarray, q_ts: np.ndarray, enclosing: np.ndarray,
) -> np.ndarray:
    """The row (one of ``cand``) each flow end (q_*) binds to on its (pid, tid), -1 for none.

    ``enclosing``: the row starting last at or before ts (the shortest of those starting then),
    if it still runs at ts; else the first row starting at or after ts. Vectorized: rows and ends
    get a key (thread, rank of the time) and the ends are searched in the sorted row keys.
    """
    nc = len(cand)
    if nc == 0 or len(q_ts) == 0:
        return np.full(len(q_ts), -1, np.int64)
    c_start, c_end = rows.start[cand], rows.end[cand]
    _, pi = np.unique(np.concatenate([r_pid[cand], q_pid]), return_inverse=True)
    tids, ti = np.unique(np.concatenate([r_tid[cand], q_tid]), return_inverse=True)
    _, thr = np.unique(pi.reshape(-1) * len(tids) + ti.reshape(-1), return_inverse=True)
    thr = thr.reshape(-1)  # a thread id below the number of rows and ends
    times, rank = np.unique(np.concatenate([c_start, q_ts]), return_inverse=True)
    key = thr * len(times) + rank.reshape(-1)  # < (rows + ends)^2: no int64 overflow
    o = np.lexsort((-c_end, key[:nc]))
    kc = key[:nc][o]
    thr_c, thr_q = thr[:nc], thr[nc:]
    j = np.searchsorted(kc, key[nc:], side="right") - 1
    enc = o[np.maximum(j, 0)]
    hit_e = (j >= 0) & (thr_c[enc] == thr_q) & (c_end[enc] >= q_ts)
    k = np.searchsorted(kc, key[nc:], side="left")
    nxt = o[np.minimum(k, nc - 1)]
    hit_n = (k < nc) & (thr_c[nxt] == thr_q)
    return np.where(enclosing, np.where(hit_e, cand[enc], -1), np.where(hit_n, cand[nxt], -1))


def _pair_flow_ends(
    f_key: np.ndarray, f_cat: np.ndarray, is_f: np.ndarray, f_ts: np.ndarray, ok: np.ndarray, acct: Accounting
) -> tuple[np.ndarray, np.ndarray]:
    """(start, finish): the flow ends (indices) of each flow pair; unpaired ends are counted.

    Each finish pairs with the latest start of the same key at or before it (ends sorted by key,
    time, starts first); a start may serve several finishes (a graph launch).
    """
    sel = np.flatnonzero(ok)
    o = sel[np.lexsort((is_f[sel], f_ts[sel], f_key[sel], f_cat[sel]))]
    pos = np.arange(len(o))
    last_s = np.maximum.accumulate(np.where(is_f[o], -1, pos)) if len(o) else pos
    fin = np.flatnonzero(is_f[o])
    s_at = last_s[fin]
    s_o, f_o = o[np.maximum(s_at, 0)], o[fin]
    paired = (s_at >= 0) & (f_key[s_o] == f_key[f_o]) & (f_cat[s_o] == f_cat[f_o])
    acct.add("notes", "launch flow finish without a start of the same id (not read)", int(np.count_nonzero(~paired)))
    used = np.zeros(len(o), bool)
    used[s_at[paired]] = True
    acct.add("notes", "launch flow start without a finish of the same id (not read)", int(np.count_nonzero(~is_f[o] & ~used)))
    return o[s_at[paired]], o[fin[paired]]


def _link_pairs(
    cc: _Columns, correlation: np.ndarray, rt: np.ndarray, gpu: np.ndarray, max_corr: int, acct: Accounting
) -> np.ndarray:
    """``correlation`` with each (runtime row, GPU row) flow pair given one id where a side lacks one."""
    c_rt, c_gpu = correlation[rt], correlation[gpu]
    acct.add(
        "notes", "launch flow disagreeing with args.correlation (args.correlation kept)",
        int(np.count_nonzero((c_rt >= 0) & (c_gpu >= 0) & (c_rt != c_gpu))),
    )
    need = (c_rt < 0) | (c_gpu < 0)
    if not need.any():
        return correlation
    corr = correlation.copy()
    m = (c_rt < 0) & (c_gpu >= 0)
    corr[rt[m]] = c_gpu[m]  # a call without an id takes its task's
    calls = sorted_unique(rt[corr[rt] < 0])  # neither side has one: one fresh id per call
    if len(calls):
        link = cc.column("wait_on_cuda_event_record_corr_id", np.int64)
        first = max(max_corr, int(correlation.max(initial=-1)), int(link.max(initial=-1))) + 1
        if first <= _INT64_MAX - len(calls):
            corr[calls] = first + np.arange(len(calls))
    m = (c_gpu < 0) & (corr[rt] >= 0)
    corr[gpu[m]] = corr[rt[m]]  # a task without an id takes its call's
    linked = need & (corr[rt] >= 0)
    acct.add("notes", "launch link taken from a flow event", int(np.count_nonzero(linked)))
    acct.add("notes", "launch flow with no correlation id left to give (not read)", int(np.count_nonzero(need & ~linked)))
    return corr
