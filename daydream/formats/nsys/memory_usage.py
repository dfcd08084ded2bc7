"""The allocator's events of an export: ``CUDA_GPU_MEMORY_USAGE_EVENTS`` into the table's memory part.

``nsys profile --cuda-memory-usage=true`` records one row per CUDA allocation or free (``start``
ns, ``globalPid``, ``deviceId``, ``address``, ``bytes``, ``memKind``, ``memoryOperationType``: 0
allocation, 1 free, ``correlationId`` of the API call). Exports without the table (the option
off) have no memory events. Rules (``docs/memory.md``): the thread is that of the runtime call
with the row's correlation id (the table names none; -1 where the id is 0 or unmatched: such
events are not anchored, they keep their recorded time); ``memKind`` is nsys's
``CUDA_MEMOPR_MEMORY_KIND`` (0 pageable, 1 pinned, 2 device, 3 array, 4 managed, 5 device static,
6 managed static): device kinds count on ``deviceId``, the others on the host (-1); no totals are
recorded (the level before the window is unknown). Every row is counted: read, kept, or skipped by
reason (a NULL or out-of-range time, an operation type other than 0/1, negative bytes).
"""

from __future__ import annotations

import numpy as np

from ...events.memory import MemoryEvents
from .id_columns import _FAR, _out_of_range, _pid_of, _tid_of
from .reader_state import ReaderState

MEMORY_USAGE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
#: ``memKind`` values of device memory (CUDA_MEMOPR_MEMORY_KIND: device, device static)
DEVICE_KINDS = (2, 5)


def read_memory_usage(r: ReaderState) -> MemoryEvents:
    """The export's memory events (empty when it has no such table); counted in ``r.acc``."""
    q = r.q
    if not q.exec("SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?", "sqlite_master", (MEMORY_USAGE,)):
        return MemoryEvents.empty()
    q.tables.add(MEMORY_USAGE)
    q.require(MEMORY_USAGE, "start", "globalPid", "deviceId", "address", "bytes", "memKind", "memoryOperationType")
    has_rt = bool(q.exec("SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?", "sqlite_master", (RUNTIME_TABLE,)))
    corr = "correlationId" in q.columns(MEMORY_USAGE)
    tid = (f"(SELECT rt.globalTid FROM {RUNTIME_TABLE} rt WHERE rt.correlationId = m.correlationId LIMIT 1)"
           if has_rt and corr else "NULL")
    q.counts[MEMORY_USAGE] = n = q.count(MEMORY_USAGE)
    r.acc.add("read", MEMORY_USAGE, n)
    if not n:
        return MemoryEvents.empty()
    exprs = []
    for c in ("start", "globalPid", "deviceId", "address", "bytes", "memKind", "memoryOperationType"):
        exprs += q.int_expr(MEMORY_USAGE, "m", c)
    exprs += [f"COALESCE({tid}, -1)", "m.rowid"]
    ints, _ = q.fetch(MEMORY_USAGE, exprs, [], f"FROM {MEMORY_USAGE} m ORDER BY m.start, m.rowid")
    (start, start_null, gpid, gpid_null, dev, dev_null, addr, addr_null, nbytes, bytes_null, kind, _, op, _,
     gtid, rowid) = ints
    null = np.stack([start_null, gpid_null, dev_null, addr_null, bytes_null], 1).astype(bool)
    bad_t = null[:, 0] | _out_of_range(start)
    r.skip(MEMORY_USAGE, _FAR + " or NULL start", int(bad_t.sum()))
    bad_op = ~bad_t & ~np.isin(op, (0, 1))
    r.skip(MEMORY_USAGE, "memoryOperationType neither 0 (allocation) nor 1 (free)", int(bad_op.sum()))
    bad_b = ~bad_t & ~bad_op & (null[:, 4] | (nbytes < 0))
    r.skip(MEMORY_USAGE, "bytes NULL or negative", int(bad_b.sum()))
    keep = ~(bad_t | bad_op | bad_b)
    r.acc.add("kept", MEMORY_USAGE, int(keep.sum()))
    tids = _tid_of(gtid, gtid < 0)
    r.note(MEMORY_USAGE, "memory event without its API call's thread (not anchored: kept at its recorded time)",
           int(np.count_nonzero(keep & (tids < 0))))
    k = np.flatnonzero(keep)
    return MemoryEvents.from_columns({
        "ts_ns": start[k], "bytes": np.where(op[k] == 1, -nbytes[k], nbytes[k]), "addr": np.where(null[k, 3], -1, addr[k]),
        "seq": rowid[k], "pid": _pid_of(gpid[k], null[k, 1]), "tid": tids[k],
        "device": np.where(np.isin(kind[k], DEVICE_KINDS) & ~null[k, 2] & (dev[k] >= 0), dev[k], -1),
    })
