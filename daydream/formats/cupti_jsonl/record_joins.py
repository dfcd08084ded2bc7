"""Joins across cupti-jsonl records, as sorted-array lookups (records may come in any order).

SYNCHRONIZATION <-> CUDA_EVENT, EXTERNAL_CORRELATION -> external ids, NVTX marker START <-> END.
"""

from __future__ import annotations

import numpy as np

from ...events.table import Accounting, Kind
from .cupti_codes import (
    ABSENT,
    EXTERNAL_KIND_CUSTOM0,
    INVALID32,
    MARKER_END,
    MARKER_INSTANTANEOUS,
    MARKER_START,
)
from .record_columns import (
    _codes,
    _fill_names,
    _ints,
    _isnone,
    _last_per_key,
    _lookup,
    _objs,
    _occurrence,
    _or,
    _stream,
)


def _link_syncs(sb: dict, rs: list, ev: list, ev_used: np.ndarray, acc: Accounting) -> None:
    """Fill link_stream/link_correlation of SYNC rows from CUDA_EVENT records (in place)."""
    cols = sb["cols"]
    m = len(rs)
    s_corr = cols["correlation"]
    s_sid = _ints(rs, "cudaEventSyncId")
    s_ctx = _ints(rs, "contextId")
    s_eid = _ints(rs, "cudaEventId")
    link = np.full(m, -1, dtype=np.int64)
    if ev:
        e_corr = _ints(ev, "correlationId")
        e_sid = _ints(ev, "cudaEventSyncId")
        e_ctx = _ints(ev, "contextId")
        e_eid = _ints(ev, "eventId")
        # 1. cudaEventSyncId, when both sides have it
        bad = (ABSENT, -1, INVALID32)
        e_ok = ~np.isin(e_sid, bad)
        s_ok = ~np.isin(s_sid, bad)
        ukeys, last = _last_per_key(e_sid[e_ok])
        pos = _lookup(ukeys, s_sid[s_ok])
        link[np.flatnonzero(s_ok)[pos >= 0]] = np.flatnonzero(e_ok)[last[pos[pos >= 0]]]
        # 2. (contextId, eventId): the latest record with a smaller correlationId
        s_try = (link < 0) & ~np.isin(s_eid, bad) & (s_corr >= 0)
        e_try = ~np.isin(e_eid, bad) & (e_corr != ABSENT)
        if s_try.any() and e_try.any():
            si, ei = np.flatnonzero(s_try), np.flatnonzero(e_try)
            code = _codes(np.concatenate([s_ctx[si], e_ctx[ei]]), np.concatenate([s_eid[si], e_eid[ei]]))
            rank = _codes(np.concatenate([s_corr[si], e_corr[ei]]))
            width = int(rank.max()) + 2
            s_key = code[: len(si)] * width + rank[: len(si)]
            e_key = code[len(si):] * width + rank[len(si):]
            order = np.argsort(e_key, kind="stable")
            ek = e_key[order]
            pos = np.searchsorted(ek, s_key, side="left") - 1
            posc = np.maximum(pos, 0)
            ok = (pos >= 0) & (ek[posc] // width == s_key // width)
            link[si[ok]] = ei[order[posc[ok]]]
        linked = link >= 0
        ev_used[link[linked]] = True
        e_stream = _stream(_ints(ev, "streamId"))
        cols["link_stream"][linked] = e_stream[link[linked]]
        cols["link_correlation"][linked] = _or(e_corr, -1)[link[linked]]
    wants = (~np.isin(s_sid, (ABSENT, -1, INVALID32))) | (~np.isin(s_eid, (ABSENT, -1, INVALID32)))
    acc.add("notes", "SYNCHRONIZATION on an event without its CUDA_EVENT record", int((wants & (link < 0)).sum()))


def _resolve_external(xs: list, corr: np.ndarray, rows: np.ndarray, ext: np.ndarray, acc: Accounting) -> None:
    """ext[rows] = externalId of the EXTERNAL_CORRELATION record of each row's correlationId.

    Several records for one correlationId: a CUSTOM0 one (or one without externalKind) wins over
    other kinds, then the last in the file.
    """
    if not xs:
        return
    x_corr, x_ext, x_kind = _ints(xs, "correlationId"), _ints(xs, "externalId"), _ints(xs, "externalKind")
    valid = (x_corr != ABSENT) & (x_ext != ABSENT)
    acc.add("skipped", "EXTERNAL_CORRELATION without correlationId/externalId", int((~valid).sum()))
    vi = np.flatnonzero(valid)
    pri = ((x_kind[vi] == EXTERNAL_KIND_CUSTOM0) | (x_kind[vi] == ABSENT)).astype(np.int64)
    order = np.lexsort((vi, pri, x_corr[vi]))  # by corr, then priority, then file order
    sc = x_corr[vi][order]
    last = np.ones(len(sc), dtype=bool)
    last[:-1] = sc[1:] != sc[:-1]
    chosen = vi[order[last]]
    ukeys = sc[last]
    acc.add("skipped", "EXTERNAL_CORRELATION superseded by another for the same correlationId", len(vi) - len(chosen))
    pos = _lookup(ukeys, corr[rows])
    hit = pos >= 0
    ri = np.flatnonzero(rows)
    ext[ri[hit]] = x_ext[chosen[pos[hit]]]
    used = np.zeros(len(chosen), dtype=bool)
    used[pos[hit]] = True
    acc.add("kept", "EXTERNAL_CORRELATION", int(used.sum()))
    acc.add("skipped", "EXTERNAL_CORRELATION without a record of its correlationId", int((~used).sum()))


def _marker_rows(idx: np.ndarray, mk: list, blocks: list, derive_pid: list, acc: Accounting) -> np.ndarray:
    """Append RANGE rows (START/END pairs) and MARKER rows; return the mask of open ranges.

    The mask is over the concatenation of all blocks (the RANGE block is appended last but one).
    """
    flags = _or(_ints(mk, "flags"), 0)
    is_start = (flags & MARKER_START) != 0
    is_end = ~is_start & ((flags & MARKER_END) != 0)
    is_inst = ~is_start & ~is_end & ((flags & MARKER_INSTANTANEOUS) != 0)
    other = ~(is_start | is_end | is_inst)
    ids = _ints(mk, "id")
    ts = _or(_ints(mk, "timestamp"), -1)
    si, ei = np.flatnonzero(is_start), np.flatnonzero(is_end)
    # k-th START of an id pairs with the k-th END of that id, in file order
    s_key = np.stack([ids[si], _occurrence(ids[si])], axis=1)
    e_key = np.stack([ids[ei], _occurrence(ids[ei])], axis=1)
    code = _codes(np.concatenate([s_key[:, 0], e_key[:, 0]]), np.concatenate([s_key[:, 1], e_key[:, 1]]))
    s_code, e_code = code[: len(si)], code[len(si):]
    ukeys, first = _last_per_key(e_code)  # (id, occurrence) codes are unique among ENDs
    pos = _lookup(ukeys, s_code)
    matched = pos >= 0
    end_of = np.where(matched, ei[first[np.maximum(pos, 0)]] if len(ei) else 0, -1)

    acc.add("kept", "MARKER", int(len(si) + matched.sum() + is_inst.sum()))
    acc.add("skipped", "MARKER END without a matching START", int(len(ei) - matched.sum()))
    acc.add("skipped", "MARKER with flags neither START, END nor INSTANTANEOUS", int(other.sum()))
    acc.add("notes", "MARKER START without END (range runs to the trace end)", int((~matched).sum()))

    pid = _or(_ints(mk, "objectId.processId"), -1)
    tid = _or(_ints(mk, "objectId.threadId"), -1)
    dev = _or(_ints(mk, "objectId.deviceId"), -1)
    stream = _stream(_ints(mk, "objectId.streamId"))
    names = _objs(mk, "name")
    names = _fill_names(names, _isnone(names), lambda miss: "")
    cats = _objs(mk, "cat")
    dom = _objs(mk, "domain")
    cats = np.where(_isnone(cats), np.where(_isnone(dom), "MARKER", dom), cats)

    def block(rows: np.ndarray, kind: Kind, end: np.ndarray) -> None:
        r = len(rows)
        blocks.append({
            "src": idx[rows],
            "cols": {
                "kind": np.full(r, int(kind), dtype=np.int64),
                "start_ns": ts[rows], "end_ns": end,
                "pid": pid[rows], "tid": tid[rows], "device": dev[rows], "stream": stream[rows],
                "correlation": np.full(r, -1, dtype=np.int64),
                "bytes": np.full(r, -1, dtype=np.int64),
                "copy_kind": np.zeros(r, dtype=np.int64), "src_kind": np.zeros(r, dtype=np.int64),
                "dst_kind": np.zeros(r, dtype=np.int64), "sync_kind": np.zeros(r, dtype=np.int64),
                "link_stream": np.full(r, -1, dtype=np.int64), "link_correlation": np.full(r, -1, dtype=np.int64),
            },
            "names": names[rows], "cats": cats[rows],
        })
        derive_pid.append(np.zeros(r, dtype=bool))

    before = sum(len(b["src"]) for b in blocks)
    block(si, Kind.RANGE, np.where(matched, ts[np.maximum(end_of, 0)], -1))
    open_mask = np.zeros(before + len(si), dtype=bool)
    open_mask[before:] = ~matched
    block(np.flatnonzero(is_inst), Kind.MARKER, ts[is_inst])
    return np.concatenate([open_mask, np.zeros(int(is_inst.sum()), dtype=bool)])
