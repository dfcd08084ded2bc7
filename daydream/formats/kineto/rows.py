"""Kineto rows: which events become rows of the :class:`EventTable`, and the rows' columns.

From the per-event columns (:mod:`.columns`): X events, instants and B/E pairs that become rows
(the others skipped by reason, every event counted in the accounting), their pid/tid or
device/stream, correlation (with :mod:`.flows`), external id, names, copy and sync columns, and
the rows sorted as ``EventTable.from_columns`` sorts them (package docstring, "Columns").
"""

from __future__ import annotations

import numpy as np

from ...events.table import DTYPES, Accounting, EventTable, Kind, NameTable, TraceMeta
from ...util.arrays import sorted_unique
from .. import TIME_LIMIT_NS
from . import times
from .categories import (
    _C_B,
    _C_E,
    _C_INSTANT,
    _C_ROW,
    _C_SKIP,
    _SYNC_BY_NAME,
    _classify,
    _parse_memcpy_name,
    _Reasons,
)
from .columns import _Columns, _EventCols, _PairInfo, _Rows
from .flows import _flow_end_places, _flow_links
from .memory_events import memory_events
from .projection import _ABSENT, _NONNUM, _Event, _missing_to
from .times import _INT64_MAX, _INT64_MIN

#: newest Kineto puts "Stream Sync" cuda_sync events on the virtual tid stream + 1,000,000
_VIRTUAL_SYNC_TID_OFFSET = 1_000_000
#: stream ids written as unsigned 32-bit -1 (Context Sync in 2023 traces)
_UINT32_MAX = 2**32 - 1
_OUT_OF_RANGE = "ts out of range (more than 2^62 ns, about 146 years, from the clock's zero)"


def _pair_be(
    idx: np.ndarray, is_b: np.ndarray, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Pair B/E events per (pid, tid) by nesting depth; returns (B indices, matching E indices)."""
    if len(idx) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    _, thr = np.unique(np.stack([pid, tid], axis=1), axis=0, return_inverse=True)
    thr = thr.reshape(-1)
    o = np.lexsort((idx, ts, thr))
    thr_o, b_o, idx_o = thr[o], is_b[o], idx[o]
    step = np.where(b_o, 1, -1)
    cs = np.cumsum(step)
    first = np.ones(len(o), bool)
    first[1:] = thr_o[1:] != thr_o[:-1]
    grp = np.cumsum(first) - 1
    start_cs = (cs - step)[first]
    depth = cs - start_cs[grp]
    level = np.where(b_o, depth, depth + 1)
    pos = np.arange(len(o))
    o2 = np.lexsort((pos, level, thr_o))
    b2, thr2, lev2, idx2 = b_o[o2], thr_o[o2], level[o2], idx_o[o2]
    pair = b2[:-1] & ~b2[1:] & (thr2[:-1] == thr2[1:]) & (lev2[:-1] == lev2[1:])
    k = np.nonzero(pair)[0]
    return idx2[k], idx2[k + 1]


def _build_table(cc: _Columns, base_ns: int, meta: TraceMeta, acct: Accounting) -> EventTable:
    """The table of the events added to ``cc`` (exactly as one :meth:`_Columns.add` of all of them)."""
    cc.launch.finish(list(cc.name_ix))  # only the ops some kernel names are kept
    cols, names = _table_columns(cc, base_ns, acct)  # its intermediates are freed on return
    cc.parts.clear()
    # rows sorted as EventTable.from_columns sorts them (same keys, stable), one column at a
    # time so that the unsorted column is freed as its sorted copy is made
    for c, a in cols.items():
        cols[c] = np.asarray(a).astype(DTYPES[c], copy=False)
    if len(cols["kind"]):
        order = _row_order(cols["start_ns"], cols["kind"], cols["end_ns"])
        if not np.all(order[:-1] < order[1:]):
            for c in list(cols):
                cols[c] = cols[c][order]
    table = EventTable.from_columns(cols, names, meta, acct, sort=False)
    table.launch = cc.launch
    table.memory = cc.memory
    return table


def _row_order(start: np.ndarray, kind: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``np.lexsort((end, kind, start))``: a stable sort by start, then only the rows sharing a
    start with another re-sorted by (start, kind, end) in their places (few in real traces)."""
    if not times._FAST:
        return np.lexsort((end, kind, start))
    order = np.argsort(start, kind="stable")
    s = start[order]
    tie = np.zeros(len(s), bool)
    eq = s[1:] == s[:-1]
    tie[1:] |= eq
    tie[:-1] |= eq
    at = np.flatnonzero(tie)
    if len(at):
        sub = order[at]  # in start order, ascending row index within a start (stable)
        order[at] = sub[np.lexsort((end[sub], kind[sub], start[sub]))]
    return order


def _build(events: list[_Event], base_ns: int, meta: TraceMeta, acct: Accounting) -> EventTable:
    """The table of a whole decoded document."""
    cols = _Columns()
    cols.add(events)
    return _build_table(cols, base_ns, meta, acct)


def _table_columns(cc: _Columns, base_ns: int, acct: Accounting) -> tuple[dict[str, np.ndarray], list[str]]:
    """The table's columns (rows in event order, not yet sorted) and names.

    Each stage drops from ``cc`` the per-event columns it is the last to use, so that memory
    stays near the size of the columns still needed.
    """
    why = _Reasons()
    pairs = _classify_pairs(list(cc.pair_ix), why)
    pair_of = cc.column("pair", np.int32)
    rows, r_pid, r_tid, reason = _choose_rows(cc, pairs, pair_of, base_ns, why, acct)
    is_sync = rows.kind == Kind.SYNC
    cols = {"kind": rows.kind, "start_ns": rows.start, "end_ns": rows.end}
    cols.update(_place_rows(cc, rows, r_pid, r_tid, is_sync, acct))  # pid, tid, device, stream, correlation, external_id
    cc.memory = memory_events(cc, rows.src, rows.start, rows.kind == Kind.MARKER, cols["pid"], cols["tid"], acct)
    del r_pid, r_tid
    names, cols["name_id"], cols["cat_id"] = _row_names(cc, rows.src, pair_of, pairs.cat_names)
    cols.update(_copy_columns(cc, rows.src, rows.kind, cols["name_id"], names))
    cols.update(_sync_columns(cc, rows.src, is_sync, cols["name_id"], names))
    _count_events(acct, pairs, pair_of, reason, why)
    return cols, names.names


def _classify_pairs(uniq: list, why: _Reasons) -> _PairInfo:
    """Classify each distinct (ph, cat) pair once (Python work per distinct pair, not per event)."""
    k = len(uniq)
    info = _PairInfo(
        cls=np.zeros(k, np.int8),
        kind=np.zeros(k, np.int16),
        gpu=np.zeros(k, bool),
        reason=np.zeros(k, np.int32),
        readkey=np.zeros(k, np.int32),
        readkey_names=[],
        cat_names=[],
    )
    readkey_ids: dict[str, int] = {}
    for i, (p, c) in enumerate(uniq):
        info.cls[i], info.kind[i], info.gpu[i], info.reason[i] = _classify(p, c, why)
        key = c if isinstance(c, str) and c else f"ph {p}"
        if key not in readkey_ids:
            readkey_ids[key] = len(info.readkey_names)
            info.readkey_names.append(key)
        info.readkey[i] = readkey_ids[key]
        info.cat_names.append(c if isinstance(c, str) else "")
    return info


def _event_cols(cc: _Columns, pairs: _PairInfo, pair_of: np.ndarray, base_ns: int, why: _Reasons) -> _EventCols:
    """Gather the per-event columns; events whose ts is out of range are skipped here."""
    n = cc.n
    cls = pairs.cls[pair_of]
    reason = pairs.reason[pair_of]  # int32, a new array (written in place by the selections)
    pid = cc.column("pid", np.int64)
    tid = cc.column("tid", np.int64)
    ts_ns, ts_ok = cc.column("ts", np.int64), cc.column("ts_ok", bool)
    dur_ns, dur_ok = np.zeros(n, np.int64), np.zeros(n, bool)  # set for X events, the only users
    x_at = cc.column("dur@", np.int64)
    dur_ns[x_at] = cc.column("dur", np.int64)
    dur_ok[x_at] = cc.column("dur_ok", bool)
    # times must stay within +-TIME_LIMIT_NS on the trace clock (base time included), so that
    # the graph and the replay can add and subtract them without overflowing int64
    lo_b = max(-TIME_LIMIT_NS + 1 - base_ns, _INT64_MIN)
    hi_b = min(TIME_LIMIT_NS - 1 - base_ns, _INT64_MAX)
    in_play = cls != _C_SKIP
    bad = in_play & ts_ok & ((ts_ns < lo_b) | (ts_ns > hi_b))
    reason[bad] = why(_OUT_OF_RANGE)
    in_play &= ~bad
    return _EventCols(cls, reason, in_play, pid, tid, pid > _NONNUM, ts_ns, ts_ok, dur_ns, dur_ok, hi_b)


def _complete_events(ev: _EventCols, is_marker: np.ndarray, why: _Reasons) -> np.ndarray:
    """Indices of the X events that become rows (``is_marker``: per event, its kind is MARKER).

    The others get the reason of the first check they fail, in the order below.
    """
    x = (ev.cls == _C_ROW) & ev.in_play
    bad = x & ~ev.ts_ok
    ev.reason[bad] = why("X event without a numeric ts")
    x &= ~bad
    bad = x & (ev.pid == _ABSENT)
    ev.reason[bad] = why("X event without pid")
    x &= ~bad
    bad = x & ~ev.pid_ok
    ev.reason[bad] = why("X event with a non-numeric pid")
    x &= ~bad
    is_marker_x = x & is_marker
    bad = x & ~ev.dur_ok & ~is_marker_x
    ev.reason[bad] = why("X event without a numeric dur")
    x &= ~bad
    bad = x & ~is_marker_x & (ev.dur_ns > ev.hi_b - ev.ts_ns)  # ts_ns in [lo_b, hi_b]: no overflow
    ev.reason[bad] = why("ts + dur out of range (more than 2^62 ns, about 146 years, from the clock's zero)")
    x &= ~bad
    return np.nonzero(x)[0]


def _instant_events(ev: _EventCols, why: _Reasons) -> np.ndarray:
    """Indices of the instant events that become MARKER rows; the others get their skip reason."""
    inst = (ev.cls == _C_INSTANT) & ev.in_play
    bad = inst & ~ev.ts_ok
    ev.reason[bad] = why("instant event without a numeric ts")
    inst &= ~bad
    bad = inst & ~ev.pid_ok
    ev.reason[bad] = why("trace structure instant (pid is not a process id)")
    inst &= ~bad
    return np.nonzero(inst)[0]


def _begin_end_pairs(ev: _EventCols, why: _Reasons) -> tuple[np.ndarray, np.ndarray]:
    """(B indices, matching E indices) of the B/E pairs that become rows.

    Unpaired events are skipped; a pair whose B category is skipped has both events skipped
    with that reason.
    """
    be = ((ev.cls == _C_B) | (ev.cls == _C_E)) & ev.in_play
    bad = be & ~(ev.ts_ok & ev.pid_ok)
    ev.reason[bad] = why("B/E event without a numeric ts or pid")
    be &= ~bad
    be_idx = np.nonzero(be)[0]
    b_idx, e_idx = _pair_be(be_idx, ev.cls[be_idx] == _C_B, ev.pid[be_idx], ev.tid[be_idx], ev.ts_ns[be_idx])
    unmatched = be
    unmatched[b_idx] = False
    unmatched[e_idx] = False
    ev.reason[unmatched] = why("unmatched B/E event")
    b_skip = ev.reason[b_idx] >= 0
    ev.reason[e_idx[b_skip]] = ev.reason[b_idx[b_skip]]
    return b_idx[~b_skip], e_idx[~b_skip]


def _choose_rows(
    cc: _Columns, pairs: _PairInfo, pair_of: np.ndarray, base_ns: int, why: _Reasons, acct: Accounting
) -> tuple[_Rows, np.ndarray, np.ndarray, np.ndarray]:
    """(rows, pid of their events, tid of their events, skip reason of every event).

    The pids keep the _ABSENT / _NONNUM sentinels, missing tids are -1; the reasons are int32
    codes, -1 for the events kept.

    Drops the per-event time, pid and tid columns from ``cc``.
    """
    ev = _event_cols(cc, pairs, pair_of, base_ns, why)
    x_idx = _complete_events(ev, pairs.kind[pair_of] == Kind.MARKER, why)
    i_idx = _instant_events(ev, why)
    b_idx, e_idx = _begin_end_pairs(ev, why)
    src = np.concatenate([x_idx, i_idx, b_idx]).astype(np.int64, copy=False)
    start = ev.ts_ns[src] + base_ns
    dur = np.concatenate([ev.dur_ns[x_idx], np.zeros(len(i_idx), np.int64), ev.ts_ns[e_idx] - ev.ts_ns[b_idx]])
    kind = pairs.kind[pair_of[src]].astype(np.int64)
    kind[len(x_idx) : len(x_idx) + len(i_idx)] = Kind.MARKER
    dur = np.where(kind == Kind.MARKER, 0, dur)
    acct.add("notes", "negative dur clamped to 0", int((dur < 0).sum()))
    end = start + np.maximum(dur, 0)
    rows = _Rows(src, start, end, kind, pairs.gpu[pair_of[src]])
    r_pid, r_tid = ev.pid[src], _missing_to(ev.tid[src])
    acct.add("notes", "CPU rows whose tid is absent or not a number (kept with tid -1: on no thread, so not used as "
             "calls or ranges)", int(np.count_nonzero(~rows.on_gpu & (ev.tid[src] <= _NONNUM))))
    _flow_end_places(cc, ev, base_ns)
    cc.drop("dur@", "dur", "dur_ok", "ts", "ts_ok", "pid", "tid")
    return rows, r_pid, r_tid, ev.reason


def _place_rows(
    cc: _Columns, rows: _Rows, r_pid: np.ndarray, r_tid: np.ndarray, is_sync: np.ndarray, acct: Accounting
) -> dict[str, np.ndarray]:
    """Columns pid, tid, device, stream, correlation and external_id of the rows.

    ``r_pid``/``r_tid``: the pid and tid of each row's event (as :func:`_choose_rows` gives them).

    Reads (then drops) the sparse args columns of ``cc``; args are absent where the accumulator
    did not take them (rows that do not use them).
    """
    src, kind, on_gpu = rows.src, rows.kind, rows.on_gpu
    a_dev = cc.sparse("device", src, _ABSENT, np.int64)
    a_stream = cc.sparse("stream", src, _ABSENT, np.int64)
    a_corr = cc.sparse("correlation", src, _ABSENT, np.int64)
    acct.add("notes", "args.correlation not an integer within int64 (no launch link)", int(np.count_nonzero(a_corr == _NONNUM)))
    a_corr = _missing_to(a_corr)
    ext = _missing_to(cc.sparse("ext", src, _ABSENT, np.int64))
    a_proc = cc.sparse("daydream_pid", src, _ABSENT, np.int64)
    cc.drop("device@", "device", "stream@", "stream", "correlation@", "correlation", "ext@", "ext", "daydream_pid@", "daydream_pid")
    device, stream = _device_and_stream(on_gpu, is_sync, a_dev, a_stream, r_pid, r_tid)
    del a_dev, a_stream
    acct.add("notes", "GPU event with a negative device id (args.device)", int(np.count_nonzero(on_gpu & (device < 0))))
    linked_kind = on_gpu & (kind != Kind.RANGE)  # kernels, copies, sets, syncs
    correlation = np.where(linked_kind | (kind == Kind.RUNTIME), a_corr, -1)
    correlation = _flow_links(cc, rows, r_pid, r_tid, linked_kind, correlation, int(a_corr.max(initial=-1)), acct)
    del a_corr
    gpu_pid = _gpu_row_pids(kind, linked_kind, correlation, r_pid, acct)
    # daydream's own timeline names each GPU task's and sync record's process (args.daydream_pid):
    # correlation ids of several processes can collide, and a task without its launch has none
    gpu_pid = np.where(linked_kind & (a_proc > _NONNUM), a_proc, gpu_pid)
    return {
        "pid": _missing_to(np.where(on_gpu, gpu_pid, r_pid)),
        "tid": np.where(on_gpu, -1, r_tid),
        "device": device,
        "stream": stream,
        "correlation": correlation,
        "external_id": ext,
    }


def _device_and_stream(
    on_gpu: np.ndarray, is_sync: np.ndarray, a_dev: np.ndarray, a_stream: np.ndarray, r_pid: np.ndarray, r_tid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(device, stream) of the rows, -1 for CPU rows and where unknown.

    GPU rows: device from args.device (else the pid), stream from args.stream (else the tid,
    less the virtual sync tid offset for SYNC rows); a stream of 4294967295 is -1.
    """
    device = np.where(on_gpu, np.where(a_dev > _NONNUM, a_dev, r_pid), -1)
    stream = np.where(a_stream > _NONNUM, a_stream, _ABSENT)
    from_tid = stream == _ABSENT
    stream = np.where(from_tid, r_tid, stream)
    virt = from_tid & is_sync & (stream >= _VIRTUAL_SYNC_TID_OFFSET)
    stream = np.where(virt, stream - _VIRTUAL_SYNC_TID_OFFSET, stream)
    stream = np.where(stream == _UINT32_MAX, -1, stream)
    stream = np.where(on_gpu, stream, -1)
    return _missing_to(device), _missing_to(stream)


def _gpu_row_pids(
    kind: np.ndarray, linked_kind: np.ndarray, correlation: np.ndarray, r_pid: np.ndarray, acct: Accounting
) -> np.ndarray:
    """pid of each row as a GPU row: that of the runtime/driver call with the same correlation id.

    A sorted-array join on the correlation ids of the RUNTIME rows. Rows without such a call
    (``linked_kind``: the GPU tasks and syncs) take the trace's only CPU process, else -1; both
    cases are counted in ``acct.notes``.
    """
    m = len(kind)
    rt = (kind == Kind.RUNTIME) & (correlation >= 0)
    rt_corr, rt_pid = correlation[rt], r_pid[rt]
    o = np.argsort(rt_corr, kind="stable")
    sc, sp = rt_corr[o], rt_pid[o]
    cpu_pids = sorted_unique(r_pid[kind == Kind.RUNTIME])
    if len(cpu_pids) == 0:
        cpu_pids = sorted_unique(r_pid[kind == Kind.CPU_OP])
    fallback_pid = int(cpu_pids[0]) if len(cpu_pids) == 1 else -1
    gpu_pid = np.full(m, fallback_pid, np.int64)
    q = linked_kind & (correlation >= 0)
    hit = np.zeros(m, bool)
    if len(sc) and q.any():
        j = np.searchsorted(sc, correlation[q])
        jj = np.minimum(j, len(sc) - 1)
        h = (j < len(sc)) & (sc[jj] == correlation[q])
        hit[np.nonzero(q)[0][h]] = True
        gpu_pid[np.nonzero(q)[0][h]] = sp[jj[h]]
        dup = np.zeros(len(sc), bool)
        if len(sc) > 1:
            d = (sc[1:] == sc[:-1]) & (sp[1:] != sp[:-1])
            dup[1:] |= d
            dup[:-1] |= d
        acct.add("notes", "GPU rows whose correlation id matches calls of several processes (first taken)", int(dup[jj[h]].sum()))
    miss = linked_kind & ~hit
    if fallback_pid >= 0:
        acct.add("notes", "GPU rows without a runtime/driver call of the same correlation id (pid: the trace's only process)", int(miss.sum()))
    else:
        acct.add("notes", "GPU rows without a runtime/driver call of the same correlation id (pid unknown)", int(miss.sum()))
    return gpu_pid


def _row_names(cc: _Columns, src: np.ndarray, pair_of: np.ndarray, cat_names: list[str]) -> tuple[NameTable, np.ndarray, np.ndarray]:
    """(names, name_id, cat_id) of the rows; drops the name column of ``cc``.

    Names are interned in order of first appearance among the rows (as a dict over the rows
    would), then the categories of the pairs, in pair order.
    """
    names = NameTable()
    m = len(src)
    row_name = cc.column("name", np.int32)[src]
    name_id = np.zeros(m, np.int32)
    if m:
        values = list(cc.name_ix)
        if times._FAST:  # first row of each name id: one O(rows) pass instead of a sort
            first = np.full(len(values), m, np.int64)
            np.minimum.at(first, row_name, np.arange(m))
            u = np.flatnonzero(first < m)
            in_order = u[np.argsort(first[u], kind="stable")]
        else:
            u, first = np.unique(row_name, return_index=True)
            in_order = u[np.argsort(first)]
        lut = np.zeros(len(values), np.int32)
        for i in in_order.tolist():
            v = values[i]
            lut[i] = names.intern(v if isinstance(v, str) else "")
        name_id = lut[row_name]
    del row_name
    cc.drop("name")
    cat_of_pair = np.fromiter((names.intern(c) for c in cat_names), np.int32, count=len(cat_names))
    return names, name_id, cat_of_pair[pair_of[src]]


def _copy_columns(cc: _Columns, src: np.ndarray, kind: np.ndarray, name_id: np.ndarray, names: NameTable) -> dict[str, np.ndarray]:
    """Columns bytes, copy_kind, src_kind and dst_kind of the rows.

    bytes from args.bytes on MEMCPY/MEMSET rows (else -1); the kinds parsed from the memcpy
    name, once per distinct name (0: unknown, and on every other row).
    """
    m = len(src)
    is_copy = kind == Kind.MEMCPY
    nbytes = np.where(is_copy | (kind == Kind.MEMSET), _missing_to(cc.sparse("bytes", src, _ABSENT, np.int64)), -1)
    copy_kind = np.zeros(m, np.int8)
    src_kind = np.zeros(m, np.int8)
    dst_kind = np.zeros(m, np.int8)
    if is_copy.any():
        ids = sorted_unique(name_id[is_copy])
        ck = np.zeros(len(names.names), np.int8)
        sk = np.zeros(len(names.names), np.int8)
        dk = np.zeros(len(names.names), np.int8)
        for i in ids.tolist():
            ck[i], sk[i], dk[i] = _parse_memcpy_name(names.names[i])
        copy_kind[is_copy] = ck[name_id[is_copy]]
        src_kind[is_copy] = sk[name_id[is_copy]]
        dst_kind[is_copy] = dk[name_id[is_copy]]
    return {"bytes": nbytes, "copy_kind": copy_kind, "src_kind": src_kind, "dst_kind": dst_kind}


def _sync_columns(cc: _Columns, src: np.ndarray, is_sync: np.ndarray, name_id: np.ndarray, names: NameTable) -> dict[str, np.ndarray]:
    """Columns sync_kind, link_stream and link_correlation of the rows (SYNC rows only).

    sync_kind from args.cuda_sync_kind, else from the name; the links from
    args.wait_on_stream / args.wait_on_cuda_event_record_corr_id (-1 when absent or negative).
    """
    m = len(src)
    sync_kind = np.zeros(m, np.int8)
    link_stream = np.full(m, -1, np.int64)
    link_corr = np.full(m, -1, np.int64)
    if is_sync.any():
        srows = np.nonzero(is_sync)[0]
        s_src = src[srows]
        sk_arr = cc.sparse("cuda_sync_kind", s_src, 0, np.int8)
        by_name = np.zeros(len(names.names), np.int8)
        for i in sorted_unique(name_id[srows]).tolist():
            by_name[i] = _SYNC_BY_NAME.get(names.names[i].strip().lower(), 0)
        sk_arr = np.where(sk_arr > 0, sk_arr, by_name[name_id[srows]])
        sync_kind[srows] = sk_arr
        ws = cc.sparse("wait_on_stream", s_src, _ABSENT, np.int64)
        ws = np.where((ws <= _NONNUM) | (ws == _UINT32_MAX) | (ws < 0), -1, ws)
        wc = cc.sparse("wait_on_cuda_event_record_corr_id", s_src, _ABSENT, np.int64)
        wc = np.where((wc <= _NONNUM) | (wc < 0), -1, wc)
        link_stream[srows] = ws
        link_corr[srows] = wc
    return {"sync_kind": sync_kind, "link_stream": link_stream, "link_correlation": link_corr}


def _count_events(acct: Accounting, pairs: _PairInfo, pair_of: np.ndarray, reason: np.ndarray, why: _Reasons) -> None:
    """Count every event in ``acct.read`` (by category), then in ``kept`` or ``skipped`` (by reason)."""
    readkey = pairs.readkey[pair_of]
    nk = len(pairs.readkey_names)
    read_counts = np.bincount(readkey, minlength=nk)
    kept_counts = np.bincount(readkey[reason < 0], minlength=nk)
    skip_counts = np.bincount(reason[reason >= 0], minlength=len(why.names))
    for k, c in zip(pairs.readkey_names, read_counts.tolist()):
        acct.add("read", k, c)
    for k, c in zip(pairs.readkey_names, kept_counts.tolist()):
        acct.add("kept", k, c)
    for k, c in zip(why.names, skip_counts.tolist()):
        acct.add("skipped", k, c)
