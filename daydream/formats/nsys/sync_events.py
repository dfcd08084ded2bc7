"""Synchronization records of an nsys export.

``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`` becomes SYNC rows, with ``CUPTI_ACTIVITY_KIND_CUDA_EVENT``
folded in.

``sync_kind`` from the synchronizing call's name (``syncType`` only without one), the device of
the context's GPU work, and ``link_stream``/``link_correlation`` from the awaited cudaEventRecord.
"""

from __future__ import annotations

import numpy as np

from ...errors import TraceFormatError
from ...events.cuda_api import ApiRole, roles_of_names
from ...events.table import Kind, SyncKind
from .export_schema import CUDA_EVENT, SYNC
from .id_columns import _U32_NONE, _lookup_exact, _lookup_latest_before, _pid_of, _u32_id
from .reader_state import ReaderState
from .sqlite_query import _q

_SYNC_NAMES = {SyncKind.NONE: "Unknown Sync", SyncKind.EVENT_SYNC: "Event Sync",
               SyncKind.STREAM_WAIT_EVENT: "Stream Wait Event", SyncKind.STREAM_SYNC: "Stream Sync",
               SyncKind.CONTEXT_SYNC: "Context Sync"}


_ROLE_TO_SYNC = {ApiRole.EVENT_SYNC: SyncKind.EVENT_SYNC, ApiRole.STREAM_WAIT_EVENT: SyncKind.STREAM_WAIT_EVENT,
                 ApiRole.STREAM_SYNC: SyncKind.STREAM_SYNC, ApiRole.DEVICE_SYNC: SyncKind.CONTEXT_SYNC}


def _sync_type_lut(r: ReaderState) -> np.ndarray:
    """syncType value -> SyncKind: by the enum table's names when present, else CUPTI numbering."""
    lut = {k.value: k for k in SyncKind}
    et = "ENUM_CUPTI_SYNC_TYPE"
    if et in r.q.tables and {"id", "name"} <= set(r.q.columns(et)):
        lut = {}
        for i, nm in r.q.exec(f"SELECT id, name FROM {et}", f"table {et}"):
            if not isinstance(i, int) or not isinstance(nm, str) or not 0 <= i < 256:
                continue
            for suffix, kind in (("EVENT_SYNCHRONIZE", SyncKind.EVENT_SYNC), ("STREAM_WAIT_EVENT", SyncKind.STREAM_WAIT_EVENT),
                                 ("STREAM_SYNCHRONIZE", SyncKind.STREAM_SYNC), ("CONTEXT_SYNCHRONIZE", SyncKind.CONTEXT_SYNC)):
                if nm.upper().endswith(suffix):
                    lut[i] = kind
    arr = np.zeros(256, np.int8)
    for i, k in lut.items():
        arr[i] = k
    return arr


def read_sync(r: ReaderState, rt: dict[str, np.ndarray] | None) -> None:
    t = SYNC
    r.q.require(t, "start", "end")
    have = r.q.columns(t)
    exprs, _ = _gpu_common_sync(r, t)
    ints, _ = r.q.fetch(t, exprs, [], f"FROM {t} s")
    start, start_n, end, end_n, gpid, gpid_n, dev, stream, corr, ctx, stype, event_id, esync = ints
    keep, end = r.times(t, start, start_n, end, end_n)
    pid = _pid_of(gpid, gpid_n != 0)
    corr = r.corr(t, corr, keep)

    # kind from syncType, then from the name of the synchronizing call it correlates with:
    # exports disagree on syncType numbering (older nsys wrote 1 for a context sync and 2 for
    # an event sync), while the call name is unambiguous
    lut = _sync_type_lut(r)
    kind = np.where((stype >= 0) & (stype < 256), lut[np.clip(stype, 0, 255)], SyncKind.NONE).astype(np.int8)
    by_name = np.full(len(kind), -1, np.int8)
    if rt is not None and len(rt["pid"]):
        roles = roles_of_names(r.names.names)[rt["name_id"]]
        role_kind = np.full(len(roles), -1, np.int8)
        for role, sk in _ROLE_TO_SYNC.items():
            role_kind[roles == role] = sk
        is_sync_call = role_kind >= 0
        idx = _lookup_exact([rt["pid"][is_sync_call], rt["corr"][is_sync_call]], [pid, corr])
        found = (idx >= 0) & (corr >= 0)
        by_name[found] = role_kind[is_sync_call][idx[found]]
    named = by_name >= 0
    differ = keep & named & (by_name != kind)
    if differ.any():
        r.note(t, "syncType disagrees with the synchronizing call; sync_kind from the call name", np.count_nonzero(differ))
    if np.count_nonzero(keep & ~named):
        r.note(t, "no synchronizing API call with this correlationId; sync_kind from syncType", np.count_nonzero(keep & ~named))
    kind = np.where(named, by_name, kind).astype(np.int8)

    # nsys writes deviceId 0 on the SYNC rows of every process (seen in a 2-GPU export); the
    # device of the context's GPU work is the right one when the context ran any
    dev = _u32_id(dev)
    if r.ctx_dev:
        cd = np.concatenate(r.ctx_dev)
        cd = cd[(cd[:, 1] >= 0) & (cd[:, 2] >= 0)]
        idx = _lookup_exact([cd[:, 0], cd[:, 1]], [pid, ctx])
        hit = (idx >= 0) & (ctx >= 0)
        ctx_dev = np.where(hit, cd[np.clip(idx, 0, max(len(cd) - 1, 0)), 2] if len(cd) else -1, dev)
        moved = keep & hit & (ctx_dev != dev)
        if moved.any():
            r.note(t, "deviceId replaced by the device of the context's GPU work", np.count_nonzero(moved))
        dev = ctx_dev
    link_stream, link_corr = _event_links(r, t, pid, ctx, corr, event_id, esync, keep, have)
    uk, inv = np.unique(kind, return_inverse=True)
    name_ids = np.array([r.names.intern(_SYNC_NAMES.get(int(k), "Unknown Sync")) for k in uk], np.int32)
    r.emit(t, keep, dict(kind=np.uint8(Kind.SYNC), start_ns=start, end_ns=end, pid=pid, tid=np.int64(-1),
                             device=dev, stream=_u32_id(stream), correlation=corr, sync_kind=kind,
                             link_stream=link_stream, link_correlation=link_corr,
                             name_id=name_ids[inv.reshape(-1)] if len(uk) else np.zeros(0, np.int32),
                             cat_id=np.int32(r.names.intern(t))))


def _gpu_common_sync(r: ReaderState, t: str) -> tuple[list[str], int]:
    exprs = []
    for col, miss in (("start", -1), ("end", -1), ("globalPid", -1)):
        exprs.extend(r.q.int_expr(t, "s", col, miss))
    for col, miss in (("deviceId", -1), ("streamId", -1), ("correlationId", 0), ("contextId", -1),
                      ("syncType", 0), ("eventId", -1), ("eventSyncId", -1)):
        if col in r.q.columns(t):
            exprs.append(f"COALESCE(s.{_q(col)}, {miss})")
        else:
            exprs.append(str(miss))
    return exprs, len(exprs)


def _event_links(r: ReaderState, t, pid, ctx, corr, event_id, esync, keep, sync_cols):
    """link_stream/link_correlation of SYNC rows from CUPTI_ACTIVITY_KIND_CUDA_EVENT.

    With ``eventSyncId`` on both tables, the join is exact. Exports whose CUDA_EVENT table has no
    ``eventSyncId`` (nsys 2022) still list every cudaEventRecord with its eventId: a wait then
    binds to the latest record of the same event (same process and context) with a smaller
    correlation id. Without the CUDA_EVENT table nothing is linked (-1).
    """
    n = len(pid)
    link_stream = np.full(n, -1, np.int64)
    link_corr = np.full(n, -1, np.int64)
    if CUDA_EVENT not in r.q.tables:
        return link_stream, link_corr
    et = CUDA_EVENT
    ecols = r.q.columns(et)
    for c in ("streamId", "correlationId", "eventId"):
        if c not in ecols:
            raise TraceFormatError(r.path, f"table {et}", f"has no column '{c}' (columns: {', '.join(ecols)})")
    sel = ["COALESCE(globalPid, -1)" if "globalPid" in ecols else "-1",
           "COALESCE(contextId, -1)" if "contextId" in ecols else "-1",
           "COALESCE(streamId, -1)", "COALESCE(correlationId, 0)", "COALESCE(eventId, -1)",
           "COALESCE(eventSyncId, -1)" if "eventSyncId" in ecols else "-1",
           "(globalPid IS NULL)" if "globalPid" in ecols else "1"]
    (egp, ectx, estream, ecorr, eid, esid, egp_n), _ = r.q.fetch(et, sel, [], f"FROM {et}")
    epid = _pid_of(egp, egp_n != 0)
    used = np.zeros(len(epid), bool)
    exact = "eventSyncId" in ecols and "eventSyncId" in sync_cols
    if exact:
        valid_r = (esid > 0) & (esid != _U32_NONE)
        valid_q = keep & (esync > 0) & (esync != _U32_NONE)
        ridx = np.flatnonzero(valid_r)
        idx = _lookup_exact([epid[ridx], esid[ridx]], [pid, esync])
        idx = np.where(valid_q & (idx >= 0), ridx[np.clip(idx, 0, max(len(ridx) - 1, 0))] if len(ridx) else -1, -1)
        how = "linked to its cudaEventRecord by eventSyncId"
    else:
        valid_r = (eid >= 0) & (eid != _U32_NONE) & (ecorr > 0)
        valid_q = keep & (event_id >= 0) & (event_id != _U32_NONE) & (corr > 0)
        ridx = np.flatnonzero(valid_r)
        idx = _lookup_latest_before([epid[ridx], ectx[ridx], eid[ridx]], ecorr[ridx], [pid, ctx, event_id], corr)
        idx = np.where(valid_q & (idx >= 0), ridx[np.clip(idx, 0, max(len(ridx) - 1, 0))] if len(ridx) else -1, -1)
        how = "linked to the latest earlier cudaEventRecord of its eventId (no eventSyncId)"
    hit = idx >= 0
    link_stream[hit] = _u32_id(estream[idx[hit]])
    link_corr[hit] = np.where(ecorr[idx[hit]] > 0, ecorr[idx[hit]], -1)
    used[idx[hit]] = True
    if hit.any():
        r.note(t, how, np.count_nonzero(hit))
    waits = keep & ((event_id >= 0) & (event_id != _U32_NONE))
    if np.count_nonzero(waits & ~hit):
        r.note(t, "event wait without a matching CUDA_EVENT record (link -1)", np.count_nonzero(waits & ~hit))
    r.acc.add("kept", et, int(np.count_nonzero(used)))
    r.skip(et, "not waited on by any synchronization record", int(np.count_nonzero(~used)))
    return link_stream, link_corr
