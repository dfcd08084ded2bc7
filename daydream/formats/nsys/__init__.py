"""Nsight Systems SQLite export adapter (``nsys export --type sqlite``).

Reads the CUDA and NVTX tables of an export into an :class:`~daydream.events.table.EventTable`:

===========================================  ==============================================
table                                        rows
===========================================  ==============================================
``CUPTI_ACTIVITY_KIND_KERNEL``               ``Kind.KERNEL`` (name: demangled, else short)
``CUPTI_ACTIVITY_KIND_MEMCPY``               ``Kind.MEMCPY`` (``[CUDA memcpy Host-to-Device]``)
``CUPTI_ACTIVITY_KIND_MEMSET``               ``Kind.MEMSET`` (``[CUDA memset]``)
``CUPTI_ACTIVITY_KIND_RUNTIME``              ``Kind.RUNTIME`` (runtime and driver calls, raw names)
``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION``      ``Kind.SYNC``
``CUPTI_ACTIVITY_KIND_CUDA_EVENT``           folded into SYNC rows (``link_stream``/``link_correlation``)
``NVTX_EVENTS``                              ``Kind.RANGE`` (push/pop, start/end), ``Kind.MARKER`` (marks)
===========================================  ==============================================

The schema is detected from the tables and columns present (``sqlite_master``, ``PRAGMA
table_info``), never from a version string: schema 3.x (``META_DATA_EXPORT``), 2.x
(``EXPORT_META_DATA``) and the oldest exports without a metadata table all read the same way.
Tables are created lazily by nsys, so a missing table means "no such events". NULL and 0 both
mean "missing" for correlation ids. All times are int64 ns on the session timeline (they may be
negative: the window is kept as it is, and negative timestamps are counted in the notes).

Judgement calls, each counted in ``accounting.notes`` when it applies:

- ``sync_kind`` comes from the name of the synchronizing API call the SYNC row correlates with
  (``cudaEventSynchronize`` -> event sync, ...), and from ``syncType`` only when no such call is
  found: real exports number ``syncType`` differently (nsys 2022 wrote 1 for ``cuCtxSynchronize``
  and 2 for ``cudaEventSynchronize``; a 2026.1 export wrote 2 for ``cudaStreamSynchronize``).
- SYNC rows take the device of their (process, context)'s GPU work: a 2-GPU export has
  ``deviceId`` 0 on the SYNC rows of both processes.
- ``link_stream``/``link_correlation``: exact join on ``eventSyncId`` when both tables have it;
  when the CUDA_EVENT table lacks it (nsys 2022), the latest earlier record of the same eventId
  in the same process and context. Without the CUDA_EVENT table: -1.

Reading: each event table is one query. With the optional ``fast`` extra installed (Arrow's
SQLite driver, :mod:`.sqlite_arrow`), big exports are read through Arrow without a Python object
per value; otherwise, or whenever Arrow's result could differ, by Python's ``sqlite3`` a batch at
a time. Both give the same table (tests/test_nsys_arrow.py). The table is then assembled and
sorted one column at a time.

Facts used: ``../shared/docs/formats.md`` sections A and S.

The package, along its seams: :mod:`.sqlite_file` (opening the file, its -wal / -journal),
:mod:`.sqlite_query` (queries, Arrow or sqlite3), :mod:`.name_interning` (text -> name ids),
:mod:`.export_schema` (table names, discovery), :mod:`.id_columns` (key lookups, pid/tid, ids),
:mod:`.reader_state` (accounting, emitted rows, common checks), one module per record kind
(:mod:`.runtime_calls`, :mod:`.gpu_work`, :mod:`.sync_events`, :mod:`.nvtx_events`),
:mod:`.export_meta` (GPUs, export facts), :mod:`.table_assembly` (the sorted table) and
:mod:`.export_reader` (the order of it all); this module: the adapter's face.
"""

from __future__ import annotations

from ...events.table import EventTable
from .. import SQLITE_MAGIC
from .export_reader import read
from .export_schema import NAME

__all__ = ["NAME", "DESCRIPTION", "sniff", "load"]

DESCRIPTION = "Nsight Systems SQLite export (nsys export --type sqlite)"


def sniff(head: bytes, path: str) -> bool:
    """True when ``head`` (the file's first bytes) is a SQLite database header.

    Only the nsys adapter reads SQLite; whether the database is an Nsight Systems export is
    checked by :func:`load`, which says which tables it expected when it is not.
    """
    return head[: len(SQLITE_MAGIC)] == SQLITE_MAGIC


def load(path: str, *, strict: bool = False) -> EventTable:
    """Read an Nsight Systems SQLite export into an :class:`EventTable`.

    Times are int64 nanoseconds on the export's session timeline. CPU rows (RUNTIME, NVTX) carry
    ``pid``/``tid`` from ``globalTid``; GPU and SYNC rows carry ``pid`` from ``globalPid`` and
    ``tid`` -1, so API calls and GPU work join on ``(pid, correlation)``.

    Args:
        path: the ``.sqlite`` file.
        strict: refuse inputs with defective rows (NULL start/end) instead of skipping and
            counting them in ``accounting.skipped``.

    Raises:
        TraceFormatError: not a SQLite file (e.g. an un-exported ``.nsys-rep``), a SQLite
            database that is not an nsys export, unreadable or damaged file, a needed table
            without a needed column, a non-integer value in an integer column, or (``strict``)
            a defective row.
    """
    return read(str(path), strict)
