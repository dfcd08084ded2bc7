"""NVTX ranges and marks of an nsys export.

``NVTX_EVENTS`` becomes RANGE and MARKER rows.

Push/pop and start/end ranges, marks, and the domain names of ``NvtxDomainCreate`` rows; metadata
rows are skipped, unterminated ranges end at the trace end (filled in by the table assembly).
"""

from __future__ import annotations

import numpy as np

from ...events.table import Kind
from .export_schema import NVTX
from .id_columns import _FAR, _lookup_exact, _out_of_range, _pid_of, _tid_of
from .reader_state import ReaderState

#: NVTX_EVENTS eventType names (ENUM_NSYS_EVENT_TYPE) and the literals NVIDIA's scripts use
_NVTX_RANGE_TYPES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxtPushPopRange": 70, "NvtxtStartEndRange": 71}
_NVTX_MARK_TYPES = {"NvtxMark": 34, "NvtxtMark": 65}
_NVTX_META_TYPES = {"NvtxCategory": 33, "NvtxThread": 39, "NvtxtCategory": 64, "NvtxtMetaThread": 72,
                    "NvtxtMetaProcess": 73, "NvtxtMetaFileDisplay": 74, "NvtxDomainCreate": 75,
                    "NvtxDomainDestroy": 76, "NvtxNameCudaDevice": 97, "NvtxNameCudaContext": 98,
                    "NvtxNameCudaStream": 99}
_NVTX_DOMAIN_CREATE = "NvtxDomainCreate"


def _nvtx_types(r: ReaderState) -> tuple[set[int], set[int], set[int], int]:
    ranges, marks, meta = dict(_NVTX_RANGE_TYPES), dict(_NVTX_MARK_TYPES), dict(_NVTX_META_TYPES)
    et = "ENUM_NSYS_EVENT_TYPE"
    if et in r.q.tables and {"id", "name"} <= set(r.q.columns(et)):
        by_name = {nm: i for i, nm in r.q.exec(f"SELECT id, name FROM {et}", f"table {et}") if isinstance(i, int)}
        for d in (ranges, marks, meta):
            for k in d:
                if k in by_name:
                    d[k] = by_name[k]
    return set(ranges.values()), set(marks.values()), set(meta.values()), meta[_NVTX_DOMAIN_CREATE]


def read_nvtx(r: ReaderState) -> bool:
    t = NVTX
    r.q.require(t, "start", "eventType")
    have = r.q.columns(t)
    range_t, mark_t, meta_t, domain_create = _nvtx_types(r)
    if "text" in have and "textId" in have:
        name_sql, join = "COALESCE(n.text, st.value)", "LEFT JOIN StringIds st ON st.id = n.textId"
    elif "textId" in have:
        name_sql, join = "st.value", "LEFT JOIN StringIds st ON st.id = n.textId"
    elif "text" in have:
        name_sql, join = "n.text", ""
    else:
        name_sql, join = "NULL", ""
        r.note(t, "columns text and textId absent", r.q.counts[t])
    exprs = []
    for col in ("start", "end", "globalTid"):
        exprs.extend(r.q.int_expr(t, "n", col))
    exprs.append("COALESCE(n.eventType, -1)")
    exprs.append(r.q.int_expr(t, "n", "domainId", 0)[0])
    exprs.append("(n.endGlobalTid IS NOT NULL AND n.endGlobalTid != n.globalTid)" if "endGlobalTid" in have and "globalTid" in have else "0")
    ints, ((name_id, unnamed),) = r.q.fetch(t, exprs, [name_sql], f"FROM {t} n {join}", intern=["(unnamed)"])
    start, start_n, end, end_n, gtid, gtid_n, etype, domain, cross = ints
    pid, tid = _pid_of(gtid, gtid_n != 0), _tid_of(gtid, gtid_n != 0)
    del ints, gtid, gtid_n  # 2.4 M rows at 4 M events: every column counts

    is_range = np.isin(etype, list(range_t))
    is_mark = np.isin(etype, list(mark_t))
    is_meta = np.isin(etype, list(meta_t))
    other = ~(is_range | is_mark | is_meta)
    r.skip(t, "metadata (NVTX domain/category/thread naming)", int(np.count_nonzero(is_meta)))
    if other.any():
        for v, c in zip(*np.unique(etype[other], return_counts=True)):
            r.skip(t, f"unsupported eventType {int(v)}", int(c))
    events = is_range | is_mark
    null_start = events & (start_n != 0)
    r.skip(t, "NULL start", int(np.count_nonzero(null_start)))
    keep = events & ~null_start
    far = keep & (_out_of_range(start) | (is_range & (end_n == 0) & _out_of_range(end)))
    r.skip(t, _FAR, int(np.count_nonzero(far)))
    keep &= ~far

    open_range = keep & is_range & (end_n != 0)
    if open_range.any():
        r.note(t, "unterminated range (end set to the trace end)", np.count_nonzero(open_range))
    end = np.where(is_mark, start, end)
    end = np.where(open_range, np.iinfo(np.int64).min, end)  # filled in once the trace end is known
    back = keep & is_range & ~open_range & (end < start)
    if back.any():
        r.note(t, "end before start (end set to start)", np.count_nonzero(back))
        end = np.where(back, start, end)
    if np.count_nonzero(keep & (cross != 0)):
        r.note(t, "start/end range ended on another thread (kept on the starting thread)", np.count_nonzero(keep & (cross != 0)))

    if np.count_nonzero(unnamed & keep):
        r.note(t, "no message (name '(unnamed)')", np.count_nonzero(unnamed & keep))

    # domain names: NvtxDomainCreate rows of the same process, joined on (pid, domainId)
    cat_id = np.full(len(start), r.names.intern("nvtx"), np.int32)
    dom_rows = np.flatnonzero(etype == domain_create)
    named_domain = keep & (domain != 0)
    if named_domain.any():
        idx = _lookup_exact([pid[dom_rows], domain[dom_rows]], [pid, domain]) if len(dom_rows) else np.full(len(start), -1)
        hit = named_domain & (idx >= 0)
        if hit.any():
            src = dom_rows[idx[hit]]
            # the domain's name: the row's text (its interned name), "nvtx" where it has none
            texts = np.asarray(r.names.names, dtype=object)[name_id[src]]
            texts[unnamed[src]] = "nvtx"
            cat_id[hit] = r.intern(texts.tolist())
        if np.count_nonzero(named_domain & ~hit):
            r.note(t, "domain name unknown (no NvtxDomainCreate row; cat 'nvtx')", np.count_nonzero(named_domain & ~hit))
        del idx
    kind = np.where(is_range, np.uint8(Kind.RANGE), np.uint8(Kind.MARKER)).astype(np.uint8)
    cols = dict(kind=kind, start_ns=start, end_ns=end, pid=pid, tid=tid, name_id=name_id, cat_id=cat_id)
    # the largest table (2.4 M of 4 M rows in the benchmark): ReaderState.emit frees each full column
    # as it copies its kept rows, once nothing else here refers to it
    del kind, start, end, pid, tid, name_id, cat_id, etype, domain
    r.emit(t, keep, cols)
    return bool(open_range.any())
