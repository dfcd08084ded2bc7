"""CUDA runtime and driver calls of an nsys export.

``CUPTI_ACTIVITY_KIND_RUNTIME`` becomes RUNTIME rows.

CPU rows with pid/tid from ``globalTid``, raw API names and their category (``cuda_driver`` for
``cu*`` calls, else ``cuda_runtime``); the calls' pid, correlation and name are returned for the
SYNC rows.
"""

from __future__ import annotations

import numpy as np

from ...events.table import Kind
from .export_schema import RUNTIME
from .id_columns import _match_ids, _pid_of, _tid_of
from .reader_state import ReaderState


def read_runtime(r: ReaderState) -> dict[str, np.ndarray]:
    t = RUNTIME
    r.q.require(t, "start", "end", "nameId")
    s, sn = r.q.int_expr(t, "r", "start")
    e, en = r.q.int_expr(t, "r", "end")
    g, gn = r.q.int_expr(t, "r", "globalTid")
    c, _ = r.q.int_expr(t, "r", "correlationId", 0)
    (start, start_n, end, end_n, gtid, gtid_n, corr), ((name_id, unknown),) = r.q.fetch(
        t, [s, sn, e, en, g, gn, c], ["s.value"], f"FROM {t} r LEFT JOIN StringIds s ON s.id = r.nameId",
        intern=["<unknown API>"])
    keep, end = r.times(t, start, start_n, end, end_n)
    pid, tid = _pid_of(gtid, gtid_n != 0), _tid_of(gtid, gtid_n != 0)
    if np.count_nonzero(gtid_n[keep]):
        r.note(t, "no globalTid (pid/tid -1)", np.count_nonzero(gtid_n[keep]))
    corr = r.corr(t, corr, keep)
    if unknown.any():
        r.note(t, "nameId not in StringIds", np.count_nonzero(unknown & keep))
    # category by name prefix: cu* driver calls, everything else (cuda*) runtime
    api_names = list(r.names.names)
    cat_of_name = r.intern(
        "cuda_driver" if (s_.startswith("cu") and not s_.startswith("cuda")) else "cuda_runtime"
        for s_ in api_names)
    cat_id = cat_of_name[name_id] if len(name_id) else np.zeros(0, np.int32)
    dup = keep & (corr >= 0)
    if dup.any():
        key, _ = _match_ids([pid[dup], corr[dup]], [np.zeros(0, np.int64)] * 2)
        _, inv, cnt = np.unique(key, return_inverse=True, return_counts=True)
        shared = np.count_nonzero(cnt[inv.reshape(-1)] > 1)
        if shared:
            r.note(t, "correlationId shared with another call of the process (nested runtime/driver call)", shared)
    r.emit(t, keep, dict(kind=np.uint8(Kind.RUNTIME), start_ns=start, end_ns=end, pid=pid, tid=tid,
                             correlation=corr, name_id=name_id, cat_id=cat_id))
    return {"pid": pid[keep], "corr": corr[keep], "name_id": name_id[keep]}
