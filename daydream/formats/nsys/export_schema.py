"""The tables of an Nsight Systems export and their discovery.

The table names daydream reads, found from ``sqlite_master`` (never from a version string: a
missing table means "no such events"); a database that is not an nsys export is refused, event
tables present as views and a lost kernel table are noted.
"""

from __future__ import annotations

from ...errors import TraceFormatError
from ...events.table import Accounting
from .sqlite_query import Query

NAME = "nsys"


KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
CUDA_EVENT = "CUPTI_ACTIVITY_KIND_CUDA_EVENT"
NVTX = "NVTX_EVENTS"
STRINGS = "StringIds"


#: tables whose rows become (or are folded into) event rows; in reading order
EVENT_TABLES = (RUNTIME, KERNEL, MEMCPY, MEMSET, SYNC, CUDA_EVENT, NVTX)
#: tables read for names, enum labels, devices and metadata (not counted as records)
LOOKUP_TABLES = ("StringIds", "TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU", "TARGET_INFO_CUDA_DEVICE",
                 "META_DATA_EXPORT", "EXPORT_META_DATA", "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUPTI_SYNC_TYPE",
                 "ENUM_NSYS_EVENT_TYPE")


def discover_tables(q: Query) -> None:
    """Set ``q.tables`` (the export's tables) and ``q.counts`` (the row count of each event table
    present); refuse a SQLite database that is not an nsys export, or one without StringIds."""
    # data only: no function that is not marked innocuous runs from the file's schema (views,
    # triggers, generated columns); the file itself is opened read-only and immutable
    q.exec("PRAGMA trusted_schema = OFF", "")
    rows = q.exec("SELECT name FROM sqlite_master WHERE type = 'table'", "sqlite_master")
    q.tables = {r[0] for r in rows}
    cuda = sorted(t for t in q.tables if t.startswith("CUPTI_ACTIVITY_KIND_"))
    if not cuda and NVTX not in q.tables:
        what = "has no tables" if not q.tables else f"has tables {', '.join(sorted(q.tables)[:8])}{' ...' if len(q.tables) > 8 else ''}"
        raise TraceFormatError(
            q.path, "", f"SQLite database is not an Nsight Systems export: expected tables "
            f"CUPTI_ACTIVITY_KIND_* (KERNEL, RUNTIME, MEMCPY, ...), NVTX_EVENTS and StringIds, but it {what}")
    if STRINGS not in q.tables:
        raise TraceFormatError(q.path, "table StringIds", "missing: an nsys export keeps names in StringIds; the file is incomplete")
    q.counts = {t: q.count(t) for t in EVENT_TABLES if t in q.tables}


def absent_tables(q: Query, acc: Accounting) -> None:
    """Note an export whose CUDA calls are there but whose kernel table is not (nsys writes it
    whenever kernels ran; a file that lost it reads as a GPU that did nothing), and event
    tables present as views (a view is not read: only tables hold recorded data)."""
    views = {r[0] for r in q.exec("SELECT name FROM sqlite_master WHERE type = 'view'", "sqlite_master")}
    for t in sorted(views & set(EVENT_TABLES)):
        acc.add("notes", f"{t} is a view, not a table: not read", 1)
    if KERNEL not in q.tables and RUNTIME in q.tables:
        acc.add("notes", f"no {KERNEL} table: the CUDA calls' kernels are not in the trace", 1)
