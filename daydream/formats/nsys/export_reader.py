"""Reading an Nsight Systems export end to end.

Open the file, discover its tables, read each record kind in order (runtime calls, kernels,
memcpy, memset, synchronization, NVTX), then assemble the sorted table with its metadata.
"""

from __future__ import annotations

import numpy as np

from ...errors import TraceFormatError
from ...events.table import Accounting, EventTable, NameTable, TraceMeta
from ...util.arrays import sorted_unique
from .. import sqlite_arrow
from .export_meta import read_devices, read_extra
from .export_schema import (
    CUDA_EVENT,
    KERNEL,
    MEMCPY,
    MEMSET,
    NAME,
    NVTX,
    RUNTIME,
    SYNC,
    absent_tables,
    discover_tables,
)
from .gpu_work import read_kernels, read_memcpy, read_memset
from .memory_usage import read_memory_usage
from .nvtx_events import read_nvtx
from .reader_state import ReaderState
from .runtime_calls import read_runtime
from .sqlite_file import ExportFile
from .sqlite_query import Query
from .sync_events import read_sync
from .table_assembly import sorted_columns


def read(path: str, strict: bool) -> EventTable:
    """The export at ``path`` as an :class:`EventTable` (see :func:`daydream.formats.nsys.load`);
    the connection, Arrow's reader and any private copy are closed and removed on every exit."""
    export = ExportFile(path)
    try:
        con, arrow_uri = export.connect()
        q = Query(path, con, Accounting(), NameTable())
        try:
            return _read(ReaderState(path, strict, q), arrow_uri)
        finally:
            con.close()
            if q.arrow is not None:
                q.arrow.close()
    finally:
        export.cleanup()


def _read(r: ReaderState, arrow_uri: str | None) -> EventTable:
    q = r.q
    discover_tables(q)
    # the event queries go through Arrow when it is installed and pays for its import (see sqlite_arrow)
    if arrow_uri is not None and sqlite_arrow.wanted(sum(q.counts.values())):
        try:
            q.arrow = sqlite_arrow.ArrowReader(arrow_uri)
        except Exception:  # noqa: BLE001 - the driver could not open it: sqlite3 reads it (and words errors)
            q.arrow = None
    for t, n in q.counts.items():
        r.acc.add("read", t, n)
    if not q.counts:
        raise TraceFormatError(r.path, "", "Nsight Systems export without CUDA or NVTX tables: profile with nsys profile -t cuda,nvtx")

    absent_tables(q, r.acc)
    rt = read_runtime(r) if RUNTIME in q.tables else None
    gpu_devices = []
    if KERNEL in q.tables:
        gpu_devices.append(read_kernels(r))
    if MEMCPY in q.tables:
        gpu_devices.append(read_memcpy(r))
    if MEMSET in q.tables:
        gpu_devices.append(read_memset(r))
    seen = sorted_unique(np.concatenate(gpu_devices)) if gpu_devices else np.zeros(0, np.int64)
    del gpu_devices
    if SYNC in q.tables:
        read_sync(r, rt)
    elif CUDA_EVENT in q.tables:
        r.skip(CUDA_EVENT, "not waited on by any synchronization record", q.counts[CUDA_EVENT])
    del rt
    r.ctx_dev = []  # only SYNC rows needed them
    nvtx_open = read_nvtx(r) if NVTX in q.tables else None
    memory = read_memory_usage(r)
    if q.arrow is not None:  # every query is read: give back the driver's and Arrow's memory
        q.arrow.close()
        q.arrow = None

    cols = sorted_columns(r, nvtx_open is not None)
    meta = TraceMeta(source=r.path, format=NAME, devices=read_devices(r, seen[seen >= 0]), extra=read_extra(r))
    # text is decoded as sqlite3 decodes it, invalid UTF-8 replaced: say how many names that changed
    r.acc.add("notes", "names with bytes that are not UTF-8 (replaced by U+FFFD)", sum("\ufffd" in n for n in r.names.names))
    table = EventTable.from_columns(cols, r.names.names, meta, r.acc, sort=False)
    table.memory = memory
    return table
