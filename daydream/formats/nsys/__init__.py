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
"""

from __future__ import annotations

import functools
import itertools
import operator
import os
import re
import shutil
import sqlite3
import tempfile
import urllib.parse
from typing import Iterable

import numpy as np

from ...util.arrays import sorted_unique
from ...events.cuda_api import ApiRole, roles_of_names
from ...errors import TraceFormatError
from ...events.table import (
    COLUMNS,
    DTYPES,
    MISSING,
    Accounting,
    CopyKind,
    DeviceInfo,
    EventTable,
    Kind,
    MemKind,
    NameTable,
    SyncKind,
    TraceMeta,
)
from .. import SQLITE_MAGIC, TIME_LIMIT_NS, sqlite_arrow

NAME = "nsys"
DESCRIPTION = "Nsight Systems SQLite export (nsys export --type sqlite)"

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

_U32_NONE = 0xFFFFFFFF  # CUPTI's "invalid" stream/device/event id

#: nsys ENUM_CUDA_MEMCPY_OPER labels (used when the export has no enum table)
_MEMCPY_LABELS = {0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
                  4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
                  8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer",
                  11: "Unified Host-to-Device", 12: "Unified Device-to-Host", 13: "Unified Device-to-Device"}
#: nsys copyKind -> CUPTI CopyKind (0-10 are equal; the unified-memory kinds fold onto their direction)
_COPY_LUT = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, CopyKind.HTOD, CopyKind.DTOH, CopyKind.DTOD], dtype=np.int8)
#: nsys ENUM_CUDA_MEM_KIND (0 pageable .. 6 managed static, 7 unknown) -> CUPTI MemKind
_MEMKIND_LUT = np.array([MemKind.PAGEABLE, MemKind.PINNED, MemKind.DEVICE, MemKind.ARRAY, MemKind.MANAGED,
                         MemKind.DEVICE_STATIC, MemKind.MANAGED_STATIC, MemKind.UNKNOWN], dtype=np.int8)

#: NVTX_EVENTS eventType names (ENUM_NSYS_EVENT_TYPE) and the literals NVIDIA's scripts use
_NVTX_RANGE_TYPES = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60, "NvtxtPushPopRange": 70, "NvtxtStartEndRange": 71}
_NVTX_MARK_TYPES = {"NvtxMark": 34, "NvtxtMark": 65}
_NVTX_META_TYPES = {"NvtxCategory": 33, "NvtxThread": 39, "NvtxtCategory": 64, "NvtxtMetaThread": 72,
                    "NvtxtMetaProcess": 73, "NvtxtMetaFileDisplay": 74, "NvtxDomainCreate": 75,
                    "NvtxDomainDestroy": 76, "NvtxNameCudaDevice": 97, "NvtxNameCudaContext": 98,
                    "NvtxNameCudaStream": 99}
_NVTX_DOMAIN_CREATE = "NvtxDomainCreate"

_SYNC_NAMES = {SyncKind.NONE: "Unknown Sync", SyncKind.EVENT_SYNC: "Event Sync",
               SyncKind.STREAM_WAIT_EVENT: "Stream Wait Event", SyncKind.STREAM_SYNC: "Stream Sync",
               SyncKind.CONTEXT_SYNC: "Context Sync"}
_ROLE_TO_SYNC = {ApiRole.EVENT_SYNC: SyncKind.EVENT_SYNC, ApiRole.STREAM_WAIT_EVENT: SyncKind.STREAM_WAIT_EVENT,
                 ApiRole.STREAM_SYNC: SyncKind.STREAM_SYNC, ApiRole.DEVICE_SYNC: SyncKind.CONTEXT_SYNC}

#: skip reasons that are not defects of the input (``strict`` does not refuse them)
_BENIGN_SKIPS = ("metadata", "not waited on", "unsupported eventType")


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
    return _Reader(str(path), strict).read()


# ---------------------------------------------------------------------------------------------
# small vectorized helpers


def _match_ids(rec_keys: list[np.ndarray], qry_keys: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Integer ids of multi-column keys, equal exactly when the keys are equal (records, queries)."""
    n = len(rec_keys[0])
    cols = [np.concatenate([r, q]).astype(np.int64, copy=False) for r, q in zip(rec_keys, qry_keys)]
    if len(cols[0]) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # pack the columns into one int64 when their ranges fit (the usual case: pid 24 bits, ids 32)
    lows = [int(c.min()) for c in cols]
    bits = [max(int(c.max()) - lo, 0).bit_length() for c, lo in zip(cols, lows)]
    if sum(bits) <= 62:
        key = np.zeros(len(cols[0]), np.int64)
        for c, lo, nb in zip(cols, lows, bits):
            key = (key << np.int64(nb)) | (c - lo)
    else:
        _, key = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
        key = np.asarray(key).reshape(-1).astype(np.int64)
    return key[:n], key[n:]


def _lookup_exact(rec_keys: list[np.ndarray], qry_keys: list[np.ndarray]) -> np.ndarray:
    """For each query row, the index of the first record row with equal keys, else -1."""
    nq = len(qry_keys[0])
    if len(rec_keys[0]) == 0 or nq == 0:
        return np.full(nq, -1, np.int64)
    rk, qk = _match_ids(rec_keys, qry_keys)
    order = np.argsort(rk, kind="stable")
    srt = rk[order]
    pos = np.minimum(np.searchsorted(srt, qk), len(srt) - 1)
    return np.where(srt[pos] == qk, order[pos], -1)


def _lookup_latest_before(rec_keys: list[np.ndarray], rec_order: np.ndarray,
                          qry_keys: list[np.ndarray], qry_order: np.ndarray) -> np.ndarray:
    """For each query, the record with equal keys and the largest ``rec_order < qry_order``, else -1."""
    nq, nr = len(qry_keys[0]), len(rec_keys[0])
    if nr == 0 or nq == 0:
        return np.full(nq, -1, np.int64)
    rk, qk = _match_ids(rec_keys, qry_keys)
    _, kinv = np.unique(np.concatenate([rk, qk]), return_inverse=True)
    rk, qk = kinv[:nr].astype(np.int64), kinv[nr:].astype(np.int64)
    _, oinv = np.unique(np.concatenate([rec_order, qry_order]), return_inverse=True)
    oinv = np.asarray(oinv).reshape(-1).astype(np.int64)
    width = np.int64(oinv.max() + 2)
    comp = rk * width + oinv[:nr]
    order = np.argsort(comp, kind="stable")
    srt = comp[order]
    j = np.searchsorted(srt, qk * width + oinv[nr:], side="left") - 1
    jj = np.clip(j, 0, None)
    ok = (j >= 0) & (srt[jj] // width == qk)
    return np.where(ok, order[jj], -1)


def _pid_of(g: np.ndarray, null: np.ndarray) -> np.ndarray:
    """OS pid from a serialized ``globalTid``/``globalPid`` (bits 24-47); -1 where NULL."""
    return np.where(null, -1, (g >> 24) & 0xFFFFFF)


def _tid_of(g: np.ndarray, null: np.ndarray) -> np.ndarray:
    """OS tid from a serialized ``globalTid`` (bits 0-23); -1 where NULL."""
    return np.where(null, -1, g & 0xFFFFFF)


def _u32_id(a: np.ndarray) -> np.ndarray:
    """Device/stream/event ids with CUPTI's invalid value (0xFFFFFFFF) and negatives as -1."""
    return np.where((a < 0) | (a == _U32_NONE), -1, a)


#: exports contain user strings that are not always valid UTF-8 (e.g. Windows user names)
_TEXT_REPLACE = functools.partial(str, encoding="utf-8", errors="replace")

#: rows fetched and converted at a time
_FETCH_BATCH = 1 << 16


def _texts(col, default: str) -> list[str]:
    """Strings of a fetched text column: NULL -> ``default``; blobs decoded; numbers as text."""
    return [default if v is None else v if type(v) is str
            else v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v) for v in col]


_FAR = "start or end more than 2^62 ns (about 146 years) from the clock's zero"


def _out_of_range(t: np.ndarray) -> np.ndarray:
    """Times outside +-TIME_LIMIT_NS (see :mod:`daydream.formats`)."""
    return (t <= -TIME_LIMIT_NS) | (t >= TIME_LIMIT_NS)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


# ---------------------------------------------------------------------------------------------


class _Reader:
    def __init__(self, path: str, strict: bool) -> None:
        self.path = path
        self.strict = strict
        self.acc = Accounting()
        self.names = NameTable()
        #: emitted rows: (row count, columns: arrays in the table's dtypes, or scalars)
        self.parts: list[tuple[int, dict[str, np.ndarray]]] = []
        self._cols_cache: dict[str, list[str]] = {}
        self._ctx_dev: list[np.ndarray] = []

    # ---- database access ----------------------------------------------------------------------
    def _open(self) -> None:
        path = self.path
        if os.path.isdir(path):
            raise TraceFormatError(path, "", "is a directory, not a trace file")
        try:
            with open(path, "rb") as f:
                head = f.read(len(SQLITE_MAGIC))
        except FileNotFoundError:
            raise TraceFormatError(path, "", "no such file") from None
        except OSError as e:
            raise TraceFormatError(path, "", f"cannot read ({e.strerror or e})") from None
        if head != SQLITE_MAGIC:
            raise TraceFormatError(
                path, "", "not a SQLite database; if this is an Nsight Systems report (.nsys-rep/.qdrep), "
                "export it first: nsys export --type sqlite --output trace.sqlite REPORT.nsys-rep")
        uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro&immutable=1"
        private = bool(_side_files(path))
        if private:  # committed content beside the file: read a private copy
            uri = self._private_copy()
        try:
            self.con = sqlite3.connect(uri, uri=True)
        except sqlite3.Error as e:
            raise TraceFormatError(path, "", f"cannot open the SQLite database ({e})") from None
        # the private copy (rare) is read by sqlite3 alone, which applied its -wal / -journal file
        self._arrow_uri = None if private else uri
        # exports contain user strings that are not always valid UTF-8 (e.g. Windows user names)
        self.con.text_factory = _TEXT_REPLACE

    def _exec(self, sql: str, where: str, params: Iterable = ()) -> list[tuple]:
        try:
            return self.con.execute(sql, tuple(params)).fetchall()
        except sqlite3.Error as e:
            raise TraceFormatError(self.path, where, f"cannot read the SQLite database ({e})") from None
        except UnicodeDecodeError:  # sqlite's message quotes a damaged schema's bytes
            raise TraceFormatError(self.path, where, "cannot read the SQLite database (damaged: its schema is not valid text)") from None

    def columns(self, table: str) -> list[str]:
        """Column names of ``table`` ([] when absent)."""
        if table not in self.tables:
            return []
        if table not in self._cols_cache:
            rows = self._exec(f"PRAGMA table_info({_q(table)})", f"table {table}")
            self._cols_cache[table] = [r[1] for r in rows]
        return self._cols_cache[table]

    def _count(self, table: str) -> int:
        return int(self._exec(f"SELECT COUNT(*) FROM {_q(table)}", f"table {table}")[0][0])

    def _require(self, table: str, *cols: str) -> None:
        have = self.columns(table)
        for c in cols:
            if c not in have:
                raise TraceFormatError(self.path, f"table {table}", f"has no column '{c}' (columns: {', '.join(have)})")

    def _fetch(self, table: str, int_exprs: list[str], text_exprs: list[str], tail: str,
               intern: list[str] | None = None) -> tuple[list[np.ndarray], list]:
        """``SELECT int_exprs, text_exprs tail``: int64 arrays for the first, object arrays for the rest.

        With ``intern`` (a default string per text expression), each text column comes back as
        ``(ids, null)`` instead: the ids of its values interned in row order (NULL as the default,
        as :func:`_texts`) and the mask of its NULLs. The NULL tests among ``int_exprs`` (``... IS
        NULL)``, or ``1`` for an absent column) are read as one packed integer per row and come back
        as int8 0/1. Rows are read through Arrow when :mod:`.sqlite_arrow` can (same result), else
        by ``sqlite3`` a batch at a time, so they never all exist as Python objects at once. A
        value that is not an integer sends the query to :meth:`_fetch_all`, which reports it as it
        always did.
        """
        k, nt = len(int_exprs), len(text_exprs)
        flags = [i for i, e in enumerate(int_exprs) if e.endswith(" IS NULL)") or e == "1"][:7]  # 7 bits: int8
        sel = [e for i, e in enumerate(int_exprs) if i not in flags]
        if flags:  # fewer values per row: each costs a Python object in sqlite3
            sel.append("(" + " | ".join(f"({int_exprs[i]} << {j})" for j, i in enumerate(flags)) + ")")
        sql = f"SELECT {', '.join(sel + text_exprs)} {tail}"
        got = None
        if self._arrow is not None and (intern is not None or not nt):
            got = self._arrow.fetch(sql, len(sel), nt, self._counts.get(table, 0), (len(sel) - 1,) if flags else ())
            if got is not None:
                got = got[0], [self._intern_codes(c, v, d) for (c, v), d in zip(got[1], intern or [])]
        if got is None:
            got = self._fetch_rows(table, sql, len(sel), nt, intern)
            if got is None:
                return self._fetch_all(table, int_exprs, text_exprs, tail, intern)
        fetched, texts = got
        if not flags:
            return fetched, texts
        packed = fetched.pop()
        values = iter(fetched)
        ints = [((packed >> flags.index(i)) & 1).astype(np.int8) if i in flags else next(values) for i in range(k)]
        return ints, texts

    def _fetch_rows(self, table: str, sql: str, k: int, nt: int, intern: list[str] | None):
        """:meth:`_fetch` by ``sqlite3``, a batch at a time; None on a value that is not an integer.

        Text is decoded by ``str`` (C), and only a query that meets text that is not UTF-8 is run
        again with the connection's replacing decoder: the same strings, without a Python call per value.
        """
        try:
            self.con.text_factory = str
            try:
                return self._fetch_batches(table, sql, k, nt, intern)
            except sqlite3.OperationalError as e:
                if "decode" not in str(e):
                    raise
            self.con.text_factory = _TEXT_REPLACE
            return self._fetch_batches(table, sql, k, nt, intern)
        except sqlite3.Error as e:
            raise TraceFormatError(self.path, f"table {table}", f"cannot read the SQLite database ({e})") from None
        except UnicodeDecodeError:  # sqlite's message quotes a damaged schema's bytes
            raise TraceFormatError(self.path, f"table {table}", "cannot read the SQLite database (damaged: its schema is not valid text)") from None
        finally:
            self.con.text_factory = _TEXT_REPLACE

    def _fetch_batches(self, table: str, sql: str, k: int, nt: int, intern: list[str] | None):
        int_parts: list[np.ndarray] = []
        text_parts: list[list] = [[] for _ in range(nt)]
        ints_of = operator.itemgetter(slice(0, k))
        cur = self.con.execute(sql)
        while True:
            rows = cur.fetchmany(_FETCH_BATCH)
            if not rows:
                break
            n = len(rows)
            try:
                flat = itertools.chain.from_iterable(map(ints_of, rows) if nt else rows)
                # column-major per batch, so each column is later one contiguous copy per batch
                int_parts.append(np.ascontiguousarray(np.fromiter(flat, np.int64, count=n * k).reshape(n, k).T))
            except (TypeError, ValueError, OverflowError):
                cur.close()
                return None
            for j in range(nt):
                col = list(map(operator.itemgetter(k + j), rows))
                if intern is None:
                    arr = np.empty(len(col), dtype=object)
                    arr[:] = col
                    text_parts[j].append(arr)
                else:
                    text_parts[j].append(self._intern_texts(col, intern[j]))
            del rows
        ints = [np.concatenate([p[i] for p in int_parts]) if int_parts else np.zeros(0, np.int64) for i in range(k)]
        del int_parts
        texts: list = []
        for j in range(nt):
            parts = text_parts[j]
            if intern is None:
                texts.append(np.concatenate(parts) if parts else np.zeros(0, object))
            else:
                texts.append((np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int32),
                              np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, bool)))
        return ints, texts

    def _intern_texts(self, col: list, default: str) -> tuple[np.ndarray, np.ndarray]:
        """(interned ids of ``_texts(col, default)``, mask of the NULLs) of one fetched text column."""
        null = np.fromiter(map(operator.is_, col, itertools.repeat(None)), dtype=bool, count=len(col))
        strings = col if set(map(type, col)) == {str} else _texts(col, default)
        return self._intern(strings), null

    def _intern_codes(self, codes: np.ndarray, values: list[str], default: str) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`_intern_texts` of a dictionary-encoded column (``codes`` into ``values``, -1 NULL).

        Interns in order of first appearance in the rows, as the row-by-row path does, so the
        name ids are the same.
        """
        null = codes < 0
        if not len(codes):
            return np.zeros(0, np.int32), null
        key = np.where(null, np.int32(len(values)), codes).astype(np.int32, copy=False)
        strings = values + [default]
        run_max = np.maximum.accumulate(codes)
        if codes[0] <= 0 and np.all(codes[1:] <= run_max[:-1] + 1):
            # values already in order of first appearance (Arrow's hash encoding): only the
            # default's place is to find, after the values seen before the first NULL
            first_null = int(np.argmax(null)) if null.any() else len(codes)
            m = int(run_max[first_null - 1]) + 1 if first_null > 0 else 0
            seq = list(range(m)) + ([len(values)] if first_null < len(codes) else []) + list(range(m, len(values)))
        else:
            uniq, first = np.unique(key, return_index=True)
            seq = uniq[np.argsort(first)].tolist()
        lut = np.zeros(len(strings), np.int32)
        lut[seq] = self._intern([strings[i] for i in seq])
        return lut[key], null

    def _fetch_all(self, table: str, int_exprs: list[str], text_exprs: list[str], tail: str,
                   intern: list[str] | None = None) -> tuple[list[np.ndarray], list]:
        """:meth:`_fetch` with all rows fetched at once (names the column of a non-integer value)."""
        sql = f"SELECT {', '.join(int_exprs + text_exprs)} {tail}"
        rows = self._exec(sql, f"table {table}")
        k = len(int_exprs)
        if not rows:
            return [np.zeros(0, np.int64) for _ in int_exprs], [np.zeros(0, object) for _ in text_exprs]
        try:
            if text_exprs:
                obj = np.array(rows, dtype=object)
                ints = obj[:, :k].astype(np.int64)
                texts = [obj[:, k + j] for j in range(len(text_exprs))]
            else:
                ints, texts = np.array(rows, dtype=np.int64), []
        except (TypeError, ValueError, OverflowError):
            obj = np.array(rows, dtype=object)
            for i, expr in enumerate(int_exprs):
                try:
                    obj[:, i].astype(np.int64)
                except (TypeError, ValueError, OverflowError):
                    m = re.search(r'"([^"]+)"', expr)
                    col = f"column {m.group(1)}" if m else "a column"
                    raise TraceFormatError(self.path, f"table {table}", f"{col} holds a value that is not an integer") from None
            raise TraceFormatError(self.path, f"table {table}", "unreadable values") from None
        if intern is not None:
            texts = [self._intern_texts(list(col), d) for col, d in zip(texts, intern)]
        return [np.ascontiguousarray(ints[:, i]) for i in range(k)], texts

    def _int_expr(self, table: str, alias: str, col: str, missing: int = -1) -> tuple[str, str]:
        """SQL for (COALESCE(col, missing), col IS NULL); a literal when the column is absent."""
        if col in self.columns(table):
            c = f"{alias}.{_q(col)}"
            return f"COALESCE({c}, {missing})", f"({c} IS NULL)"
        self.acc.add("notes", f"{table}: column {col} absent", self._counts.get(table, 0))
        return str(missing), "1"

    # ---- accounting ---------------------------------------------------------------------------
    def _skip(self, table: str, reason: str, n: int) -> None:
        if not n:
            return
        if self.strict and not any(reason.startswith(b) for b in _BENIGN_SKIPS):
            raise TraceFormatError(self.path, f"table {table}", f"{n} row(s) with {reason}")
        self.acc.add("skipped", f"{table}: {reason}", n)

    def _note(self, table: str, what: str, n) -> None:
        self.acc.add("notes", f"{table}: {what}", int(n))

    def _emit(self, table: str, keep: np.ndarray, cols: dict[str, np.ndarray]) -> None:
        n = int(np.count_nonzero(keep))
        self.acc.add("kept", table, n)
        if n:
            # arrays in their table dtype (as the concatenation would cast them), scalars as they
            # are; each column is taken out of ``cols`` (emptied) as its kept rows are copied, so
            # a caller that kept no other reference frees one full-length column at a time
            part = {}
            for c in list(cols):
                a = cols.pop(c)
                part[c] = np.asarray(a)[keep].astype(DTYPES[c], copy=False) if np.ndim(a) else a
                del a
            self.parts.append((n, part))
        cols.clear()

    def _intern(self, strings) -> np.ndarray:
        return self.names.intern_many(strings)

    def _private_copy(self) -> str:
        """URI of a copy of the database with its -wal or -journal file, in a temporary folder.

        SQLite's immutable open ignores those files: a WAL holds committed transactions not yet
        written to the database file, a hot rollback journal the pages an unfinished transaction
        overwrote. A normal (read-write) open of the copy makes SQLite apply the first and roll
        back the second, so the copy reads exactly what any SQLite reader of the original would;
        the original file and its folder are never written.
        """
        self._tmp = tempfile.TemporaryDirectory(prefix="daydream-sqlite-")
        dst = os.path.join(self._tmp.name, "trace.sqlite")
        try:
            shutil.copyfile(self.path, dst)
            for suffix in _side_files(self.path):
                shutil.copyfile(self.path + suffix, dst + suffix)
        except OSError as e:
            self._tmp.cleanup()
            self._tmp = None
            raise TraceFormatError(
                self.path, "", f"cannot copy the database and its {' / '.join(_side_files(self.path))} file to read its committed "
                f"content ({e.strerror or e}); make a clean copy first: sqlite3 FILE \".backup clean.sqlite\"") from None
        return "file:" + urllib.parse.quote(dst) + "?mode=rw"

    # ---- main ---------------------------------------------------------------------------------
    def read(self) -> EventTable:
        self._tmp = None
        self._arrow = None
        try:
            self._open()
            try:
                return self._read()
            finally:
                self.con.close()
                if self._arrow is not None:
                    self._arrow.close()
        finally:
            if self._tmp is not None:
                self._tmp.cleanup()

    def _absent_tables(self) -> None:
        """Note an export whose CUDA calls are there but whose kernel table is not (nsys writes it
        whenever kernels ran; a file that lost it reads as a GPU that did nothing), and event
        tables present as views (a view is not read: only tables hold recorded data)."""
        views = {r[0] for r in self._exec("SELECT name FROM sqlite_master WHERE type = 'view'", "sqlite_master")}
        for t in sorted(views & set(EVENT_TABLES)):
            self.acc.add("notes", f"{t} is a view, not a table: not read", 1)
        if KERNEL not in self.tables and RUNTIME in self.tables:
            self.acc.add("notes", f"no {KERNEL} table: the CUDA calls' kernels are not in the trace", 1)

    def _read(self) -> EventTable:
        # data only: no function that is not marked innocuous runs from the file's schema (views,
        # triggers, generated columns); the file itself is opened read-only and immutable
        self._exec("PRAGMA trusted_schema = OFF", "")
        rows = self._exec("SELECT name FROM sqlite_master WHERE type = 'table'", "sqlite_master")
        self.tables = {r[0] for r in rows}
        cuda = sorted(t for t in self.tables if t.startswith("CUPTI_ACTIVITY_KIND_"))
        if not cuda and NVTX not in self.tables:
            what = "has no tables" if not self.tables else f"has tables {', '.join(sorted(self.tables)[:8])}{' ...' if len(self.tables) > 8 else ''}"
            raise TraceFormatError(
                self.path, "", f"SQLite database is not an Nsight Systems export: expected tables "
                f"CUPTI_ACTIVITY_KIND_* (KERNEL, RUNTIME, MEMCPY, ...), NVTX_EVENTS and StringIds, but it {what}")
        if STRINGS not in self.tables:
            raise TraceFormatError(self.path, "table StringIds", "missing: an nsys export keeps names in StringIds; the file is incomplete")
        self._counts = {t: self._count(t) for t in EVENT_TABLES if t in self.tables}
        # the event queries go through Arrow when it is installed and pays for its import (see sqlite_arrow)
        if self._arrow_uri is not None and sqlite_arrow.wanted(sum(self._counts.values())):
            try:
                self._arrow = sqlite_arrow.ArrowReader(self._arrow_uri)
            except Exception:  # noqa: BLE001 - the driver could not open it: sqlite3 reads it (and words errors)
                self._arrow = None
        for t, n in self._counts.items():
            self.acc.add("read", t, n)
        if not self._counts:
            raise TraceFormatError(self.path, "", "Nsight Systems export without CUDA or NVTX tables: profile with nsys profile -t cuda,nvtx")

        self._absent_tables()
        rt = self._runtime() if RUNTIME in self.tables else None
        gpu_devices = []
        if KERNEL in self.tables:
            gpu_devices.append(self._kernels())
        if MEMCPY in self.tables:
            gpu_devices.append(self._memcpy())
        if MEMSET in self.tables:
            gpu_devices.append(self._memset())
        seen = sorted_unique(np.concatenate(gpu_devices)) if gpu_devices else np.zeros(0, np.int64)
        del gpu_devices
        if SYNC in self.tables:
            self._sync(rt)
        elif CUDA_EVENT in self.tables:
            self._skip(CUDA_EVENT, "not waited on by any synchronization record", self._counts[CUDA_EVENT])
        del rt
        self._ctx_dev = []  # only SYNC rows needed them
        nvtx_open = self._nvtx() if NVTX in self.tables else None
        if self._arrow is not None:  # every query is read: give back the driver's and Arrow's memory
            self._arrow.close()
            self._arrow = None

        cols = self._sorted_columns(nvtx_open is not None)
        meta = TraceMeta(source=self.path, format=NAME, devices=self._devices(seen[seen >= 0]), extra=self._extra())
        # text is decoded as sqlite3 decodes it, invalid UTF-8 replaced: say how many names that changed
        self.acc.add("notes", "names with bytes that are not UTF-8 (replaced by U+FFFD)", sum("\ufffd" in n for n in self.names.names))
        return EventTable.from_columns(cols, self.names.names, meta, self.acc, sort=False)

    def _sorted_columns(self, nvtx_open: bool) -> dict[str, np.ndarray]:
        """Every column of the emitted parts in the table's row order, the parts freed as they go
        (unterminated NVTX ranges, when ``nvtx_open``, end at the trace's last timestamp)."""
        cols = {c: self._column(c) for c in ("kind", "start_ns", "end_ns")}
        # trace end: the latest timestamp of any row; unterminated NVTX ranges end there
        if len(cols["kind"]):
            t_max = int(max(cols["start_ns"].max(), cols["end_ns"].max()))
        else:
            t_max = 0
        if nvtx_open:
            open_rows = cols["end_ns"] == np.iinfo(np.int64).min
            cols["end_ns"][open_rows] = np.maximum(t_max, cols["start_ns"][open_rows])
            if len(cols["kind"]):
                t_max = int(max(t_max, cols["end_ns"].max()))
        neg = np.count_nonzero(cols["start_ns"] < 0) if len(cols["kind"]) else 0
        if neg:
            self.acc.add("notes", "negative start timestamp (before the collection start)", neg)

        # the table's row order (EventTable.from_columns's sort: start, kind, end, ties in adapter
        # order). Each column is then written straight into its sorted places (a scatter through
        # the inverse of the order, a chunk at a time) from its parts, which are freed as it goes:
        # no unsorted copy of a whole column exists beside its sorted one
        dest = None
        if len(cols["kind"]):
            order = np.lexsort((cols["end_ns"], cols["kind"], cols["start_ns"]))
            if not np.all(order[:-1] < order[1:]):
                dest = _inverse_permutation(order)
            del order
        for c in COLUMNS:
            if c in cols:
                col = cols.pop(c)
                cols[c] = col if dest is None else _scatter(np.empty_like(col), dest, 0, col)
                del col
            else:
                cols[c] = self._column(c, dest)
            _release_freed_memory()
        del dest
        self.parts = []
        _release_freed_memory()  # the inverse order and the emptied parts
        return cols

    def _column(self, c: str, dest: np.ndarray | None = None) -> np.ndarray:
        """Column ``c`` of all emitted parts, in emission order (its missing value where a part
        lacks it), taken out of the parts; with ``dest``, emitted row ``i`` is put at ``dest[i]``."""
        out = np.empty(sum(n for n, _ in self.parts), DTYPES[c])
        at = 0
        for n, part in self.parts:
            values = part.pop(c) if c in part else MISSING[c]
            if dest is None:
                out[at: at + n] = values
            else:
                _scatter(out, dest, at, values, n)
            del values
            at += n
        return out
    # ---- common row checks ----------------------------------------------------------------------
    def _times(self, table: str, start, start_null, end, end_null):
        """Keep mask after skipping (and counting) rows with a NULL start or end; end < start is clamped and noted."""
        keep = start_null == 0
        self._skip(table, "NULL start", int(np.count_nonzero(~keep)))
        bad_end = keep & (end_null != 0)
        self._skip(table, "NULL end", int(np.count_nonzero(bad_end)))
        keep &= ~bad_end
        far = keep & (_out_of_range(start) | _out_of_range(end))
        self._skip(table, _FAR, int(np.count_nonzero(far)))
        keep &= ~far
        back = keep & (end < start)
        if back.any():
            self._note(table, "end before start (end set to start)", np.count_nonzero(back))
            end = np.where(back, start, end)
        return keep, end

    def _corr(self, table: str, corr: np.ndarray, keep: np.ndarray) -> np.ndarray:
        missing = corr <= 0
        n = np.count_nonzero(missing & keep)
        if n:
            self._note(table, "no correlationId (NULL or 0)", n)
        return np.where(missing, -1, corr)

    # ---- CPU API calls ------------------------------------------------------------------------
    def _runtime(self) -> dict[str, np.ndarray]:
        t = RUNTIME
        self._require(t, "start", "end", "nameId")
        s, sn = self._int_expr(t, "r", "start")
        e, en = self._int_expr(t, "r", "end")
        g, gn = self._int_expr(t, "r", "globalTid")
        c, _ = self._int_expr(t, "r", "correlationId", 0)
        (start, start_n, end, end_n, gtid, gtid_n, corr), ((name_id, unknown),) = self._fetch(
            t, [s, sn, e, en, g, gn, c], ["s.value"], f"FROM {t} r LEFT JOIN StringIds s ON s.id = r.nameId",
            intern=["<unknown API>"])
        keep, end = self._times(t, start, start_n, end, end_n)
        pid, tid = _pid_of(gtid, gtid_n != 0), _tid_of(gtid, gtid_n != 0)
        if np.count_nonzero(gtid_n[keep]):
            self._note(t, "no globalTid (pid/tid -1)", np.count_nonzero(gtid_n[keep]))
        corr = self._corr(t, corr, keep)
        if unknown.any():
            self._note(t, "nameId not in StringIds", np.count_nonzero(unknown & keep))
        # category by name prefix: cu* driver calls, everything else (cuda*) runtime
        api_names = list(self.names.names)
        cat_of_name = self._intern(
            "cuda_driver" if (s_.startswith("cu") and not s_.startswith("cuda")) else "cuda_runtime"
            for s_ in api_names)
        cat_id = cat_of_name[name_id] if len(name_id) else np.zeros(0, np.int32)
        dup = keep & (corr >= 0)
        if dup.any():
            key, _ = _match_ids([pid[dup], corr[dup]], [np.zeros(0, np.int64)] * 2)
            _, inv, cnt = np.unique(key, return_inverse=True, return_counts=True)
            shared = np.count_nonzero(cnt[inv.reshape(-1)] > 1)
            if shared:
                self._note(t, "correlationId shared with another call of the process (nested runtime/driver call)", shared)
        self._emit(t, keep, dict(kind=np.uint8(Kind.RUNTIME), start_ns=start, end_ns=end, pid=pid, tid=tid,
                                 correlation=corr, name_id=name_id, cat_id=cat_id))
        return {"pid": pid[keep], "corr": corr[keep], "name_id": name_id[keep]}

    # ---- GPU work -----------------------------------------------------------------------------
    def _gpu_common(self, t: str, alias: str) -> tuple[list[str], int]:
        self._require(t, "start", "end", "deviceId", "streamId")
        exprs = []
        for col, miss in (("start", -1), ("end", -1), ("globalPid", -1)):
            exprs.extend(self._int_expr(t, alias, col, miss))
        for col, miss in (("deviceId", -1), ("streamId", -1), ("correlationId", 0)):
            exprs.append(self._int_expr(t, alias, col, miss)[0])
        have = self.columns(t)
        exprs.append(f"COALESCE({alias}.contextId, -1)" if "contextId" in have else "-1")
        return exprs, len(exprs)

    def _gpu_rows(self, t: str, ints: list[np.ndarray]):
        start, start_n, end, end_n, gpid, gpid_n, dev, stream, corr, ctx = ints[:10]
        keep, end = self._times(t, start, start_n, end, end_n)
        pid = _pid_of(gpid, gpid_n != 0)
        # (process, context) -> device of the GPU work, to place SYNC rows (see _sync)
        self._ctx_dev.append(np.stack([pid[keep], ctx[keep], _u32_id(dev[keep])], axis=1))
        if np.count_nonzero(gpid_n[keep]):
            self._note(t, "no globalPid (pid -1)", np.count_nonzero(gpid_n[keep]))
        corr = self._corr(t, corr, keep)
        cols = dict(start_ns=start, end_ns=end, pid=pid, tid=np.int64(-1), device=_u32_id(dev),
                    stream=_u32_id(stream), correlation=corr)
        return keep, cols

    def _kernels(self) -> np.ndarray:
        t = KERNEL
        have = self.columns(t)
        name_cols = [c for c in ("demangledName", "shortName") if c in have]
        if not name_cols:
            self._require(t, "demangledName")
        exprs, n = self._gpu_common(t, "k")
        joins = " ".join(f"LEFT JOIN StringIds n{i} ON n{i}.id = k.{_q(c)}" for i, c in enumerate(name_cols))
        name_sql = "COALESCE(" + ", ".join(f"NULLIF(n{i}.value, '')" for i in range(len(name_cols))) + ", NULL)"
        ints, ((name_id, unknown),) = self._fetch(t, exprs, [name_sql], f"FROM {t} k {joins}", intern=["<unknown kernel>"])
        keep, cols = self._gpu_rows(t, ints)
        if np.count_nonzero(unknown & keep):
            self._note(t, "kernel name not in StringIds", np.count_nonzero(unknown & keep))
        cols["name_id"] = name_id
        cols["cat_id"] = np.int32(self.names.intern(t))
        cols["kind"] = np.uint8(Kind.KERNEL)
        devices = cols["device"][keep]
        self._emit(t, keep, cols)
        return devices

    def _memcpy(self) -> np.ndarray:
        t = MEMCPY
        exprs, n = self._gpu_common(t, "m")
        for col in ("bytes", "copyKind", "srcKind", "dstKind"):
            exprs.append(self._int_expr(t, "m", col, -1)[0])
        ints, _ = self._fetch(t, exprs, [], f"FROM {t} m")
        keep, cols = self._gpu_rows(t, ints)
        nbytes, ck, sk, dk = ints[n:]
        labels = dict(_MEMCPY_LABELS)
        if "ENUM_CUDA_MEMCPY_OPER" in self.tables and {"id", "label"} <= set(self.columns("ENUM_CUDA_MEMCPY_OPER")):
            for i, label in self._exec("SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER", "table ENUM_CUDA_MEMCPY_OPER"):
                if isinstance(i, int) and isinstance(label, str):
                    labels[i] = label
        uk, inv = np.unique(ck, return_inverse=True)
        label_ids = self._intern(f"[CUDA memcpy {labels.get(int(v), 'Unknown')}]" for v in uk)
        cols["name_id"] = label_ids[inv.reshape(-1)] if len(uk) else np.zeros(0, np.int32)
        in_lut = (ck >= 0) & (ck < len(_COPY_LUT))
        cols["copy_kind"] = np.where(in_lut, _COPY_LUT[np.clip(ck, 0, len(_COPY_LUT) - 1)], CopyKind.UNKNOWN)
        if np.count_nonzero(keep & (ck >= 11) & in_lut):
            self._note(t, "unified-memory copyKind folded onto HtoD/DtoH/DtoD", np.count_nonzero(keep & (ck >= 11) & in_lut))
        if np.count_nonzero(keep & ~in_lut):
            self._note(t, "unknown copyKind (copy_kind 0)", np.count_nonzero(keep & ~in_lut))
        for src, dst in ((sk, "src_kind"), (dk, "dst_kind")):
            ok = (src >= 0) & (src < len(_MEMKIND_LUT))
            cols[dst] = np.where(ok, _MEMKIND_LUT[np.clip(src, 0, len(_MEMKIND_LUT) - 1)], MemKind.UNKNOWN)
        cols["bytes"] = nbytes
        cols["cat_id"] = np.int32(self.names.intern(t))
        cols["kind"] = np.uint8(Kind.MEMCPY)
        devices = cols["device"][keep]
        self._emit(t, keep, cols)
        return devices

    def _memset(self) -> np.ndarray:
        t = MEMSET
        exprs, n = self._gpu_common(t, "m")
        exprs.append(self._int_expr(t, "m", "bytes", -1)[0])
        ints, _ = self._fetch(t, exprs, [], f"FROM {t} m")
        keep, cols = self._gpu_rows(t, ints)
        cols["bytes"] = ints[n]
        cols["name_id"] = np.int32(self.names.intern("[CUDA memset]"))
        cols["cat_id"] = np.int32(self.names.intern(t))
        cols["kind"] = np.uint8(Kind.MEMSET)
        devices = cols["device"][keep]
        self._emit(t, keep, cols)
        return devices

    # ---- synchronization ------------------------------------------------------------------------
    def _sync_type_lut(self) -> np.ndarray:
        """syncType value -> SyncKind: by the enum table's names when present, else CUPTI numbering."""
        lut = {k.value: k for k in SyncKind}
        et = "ENUM_CUPTI_SYNC_TYPE"
        if et in self.tables and {"id", "name"} <= set(self.columns(et)):
            lut = {}
            for i, nm in self._exec(f"SELECT id, name FROM {et}", f"table {et}"):
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

    def _sync(self, rt: dict[str, np.ndarray] | None) -> None:
        t = SYNC
        self._require(t, "start", "end")
        have = self.columns(t)
        exprs, _ = self._gpu_common_sync(t)
        ints, _ = self._fetch(t, exprs, [], f"FROM {t} s")
        start, start_n, end, end_n, gpid, gpid_n, dev, stream, corr, ctx, stype, event_id, esync = ints
        keep, end = self._times(t, start, start_n, end, end_n)
        pid = _pid_of(gpid, gpid_n != 0)
        corr = self._corr(t, corr, keep)

        # kind from syncType, then from the name of the synchronizing call it correlates with:
        # exports disagree on syncType numbering (older nsys wrote 1 for a context sync and 2 for
        # an event sync), while the call name is unambiguous
        lut = self._sync_type_lut()
        kind = np.where((stype >= 0) & (stype < 256), lut[np.clip(stype, 0, 255)], SyncKind.NONE).astype(np.int8)
        by_name = np.full(len(kind), -1, np.int8)
        if rt is not None and len(rt["pid"]):
            roles = roles_of_names(self.names.names)[rt["name_id"]]
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
            self._note(t, "syncType disagrees with the synchronizing call; sync_kind from the call name", np.count_nonzero(differ))
        if np.count_nonzero(keep & ~named):
            self._note(t, "no synchronizing API call with this correlationId; sync_kind from syncType", np.count_nonzero(keep & ~named))
        kind = np.where(named, by_name, kind).astype(np.int8)

        # nsys writes deviceId 0 on the SYNC rows of every process (seen in a 2-GPU export); the
        # device of the context's GPU work is the right one when the context ran any
        dev = _u32_id(dev)
        if self._ctx_dev:
            cd = np.concatenate(self._ctx_dev)
            cd = cd[(cd[:, 1] >= 0) & (cd[:, 2] >= 0)]
            idx = _lookup_exact([cd[:, 0], cd[:, 1]], [pid, ctx])
            hit = (idx >= 0) & (ctx >= 0)
            ctx_dev = np.where(hit, cd[np.clip(idx, 0, max(len(cd) - 1, 0)), 2] if len(cd) else -1, dev)
            moved = keep & hit & (ctx_dev != dev)
            if moved.any():
                self._note(t, "deviceId replaced by the device of the context's GPU work", np.count_nonzero(moved))
            dev = ctx_dev
        link_stream, link_corr = self._event_links(t, pid, ctx, corr, event_id, esync, keep, have)
        uk, inv = np.unique(kind, return_inverse=True)
        name_ids = np.array([self.names.intern(_SYNC_NAMES.get(int(k), "Unknown Sync")) for k in uk], np.int32)
        self._emit(t, keep, dict(kind=np.uint8(Kind.SYNC), start_ns=start, end_ns=end, pid=pid, tid=np.int64(-1),
                                 device=dev, stream=_u32_id(stream), correlation=corr, sync_kind=kind,
                                 link_stream=link_stream, link_correlation=link_corr,
                                 name_id=name_ids[inv.reshape(-1)] if len(uk) else np.zeros(0, np.int32),
                                 cat_id=np.int32(self.names.intern(t))))

    def _gpu_common_sync(self, t: str) -> tuple[list[str], int]:
        exprs = []
        for col, miss in (("start", -1), ("end", -1), ("globalPid", -1)):
            exprs.extend(self._int_expr(t, "s", col, miss))
        for col, miss in (("deviceId", -1), ("streamId", -1), ("correlationId", 0), ("contextId", -1),
                          ("syncType", 0), ("eventId", -1), ("eventSyncId", -1)):
            if col in self.columns(t):
                exprs.append(f"COALESCE(s.{_q(col)}, {miss})")
            else:
                exprs.append(str(miss))
        return exprs, len(exprs)

    def _event_links(self, t, pid, ctx, corr, event_id, esync, keep, sync_cols):
        """link_stream/link_correlation of SYNC rows from CUPTI_ACTIVITY_KIND_CUDA_EVENT.

        With ``eventSyncId`` on both tables, the join is exact. Exports whose CUDA_EVENT table has no
        ``eventSyncId`` (nsys 2022) still list every cudaEventRecord with its eventId: a wait then
        binds to the latest record of the same event (same process and context) with a smaller
        correlation id. Without the CUDA_EVENT table nothing is linked (-1).
        """
        n = len(pid)
        link_stream = np.full(n, -1, np.int64)
        link_corr = np.full(n, -1, np.int64)
        if CUDA_EVENT not in self.tables:
            return link_stream, link_corr
        et = CUDA_EVENT
        ecols = self.columns(et)
        for c in ("streamId", "correlationId", "eventId"):
            if c not in ecols:
                raise TraceFormatError(self.path, f"table {et}", f"has no column '{c}' (columns: {', '.join(ecols)})")
        sel = ["COALESCE(globalPid, -1)" if "globalPid" in ecols else "-1",
               "COALESCE(contextId, -1)" if "contextId" in ecols else "-1",
               "COALESCE(streamId, -1)", "COALESCE(correlationId, 0)", "COALESCE(eventId, -1)",
               "COALESCE(eventSyncId, -1)" if "eventSyncId" in ecols else "-1",
               "(globalPid IS NULL)" if "globalPid" in ecols else "1"]
        (egp, ectx, estream, ecorr, eid, esid, egp_n), _ = self._fetch(et, sel, [], f"FROM {et}")
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
            self._note(t, how, np.count_nonzero(hit))
        waits = keep & ((event_id >= 0) & (event_id != _U32_NONE))
        if np.count_nonzero(waits & ~hit):
            self._note(t, "event wait without a matching CUDA_EVENT record (link -1)", np.count_nonzero(waits & ~hit))
        self.acc.add("kept", et, int(np.count_nonzero(used)))
        self._skip(et, "not waited on by any synchronization record", int(np.count_nonzero(~used)))
        return link_stream, link_corr

    # ---- NVTX ---------------------------------------------------------------------------------
    def _nvtx_types(self) -> tuple[set[int], set[int], set[int], int]:
        ranges, marks, meta = dict(_NVTX_RANGE_TYPES), dict(_NVTX_MARK_TYPES), dict(_NVTX_META_TYPES)
        et = "ENUM_NSYS_EVENT_TYPE"
        if et in self.tables and {"id", "name"} <= set(self.columns(et)):
            by_name = {nm: i for i, nm in self._exec(f"SELECT id, name FROM {et}", f"table {et}") if isinstance(i, int)}
            for d in (ranges, marks, meta):
                for k in d:
                    if k in by_name:
                        d[k] = by_name[k]
        return set(ranges.values()), set(marks.values()), set(meta.values()), meta[_NVTX_DOMAIN_CREATE]

    def _nvtx(self) -> bool:
        t = NVTX
        self._require(t, "start", "eventType")
        have = self.columns(t)
        range_t, mark_t, meta_t, domain_create = self._nvtx_types()
        if "text" in have and "textId" in have:
            name_sql, join = "COALESCE(n.text, st.value)", "LEFT JOIN StringIds st ON st.id = n.textId"
        elif "textId" in have:
            name_sql, join = "st.value", "LEFT JOIN StringIds st ON st.id = n.textId"
        elif "text" in have:
            name_sql, join = "n.text", ""
        else:
            name_sql, join = "NULL", ""
            self._note(t, "columns text and textId absent", self._counts[t])
        exprs = []
        for col in ("start", "end", "globalTid"):
            exprs.extend(self._int_expr(t, "n", col))
        exprs.append("COALESCE(n.eventType, -1)")
        exprs.append(self._int_expr(t, "n", "domainId", 0)[0])
        exprs.append("(n.endGlobalTid IS NOT NULL AND n.endGlobalTid != n.globalTid)" if "endGlobalTid" in have and "globalTid" in have else "0")
        ints, ((name_id, unnamed),) = self._fetch(t, exprs, [name_sql], f"FROM {t} n {join}", intern=["(unnamed)"])
        start, start_n, end, end_n, gtid, gtid_n, etype, domain, cross = ints
        pid, tid = _pid_of(gtid, gtid_n != 0), _tid_of(gtid, gtid_n != 0)
        del ints, gtid, gtid_n  # 2.4 M rows at 4 M events: every column counts

        is_range = np.isin(etype, list(range_t))
        is_mark = np.isin(etype, list(mark_t))
        is_meta = np.isin(etype, list(meta_t))
        other = ~(is_range | is_mark | is_meta)
        self._skip(t, "metadata (NVTX domain/category/thread naming)", int(np.count_nonzero(is_meta)))
        if other.any():
            for v, c in zip(*np.unique(etype[other], return_counts=True)):
                self._skip(t, f"unsupported eventType {int(v)}", int(c))
        events = is_range | is_mark
        null_start = events & (start_n != 0)
        self._skip(t, "NULL start", int(np.count_nonzero(null_start)))
        keep = events & ~null_start
        far = keep & (_out_of_range(start) | (is_range & (end_n == 0) & _out_of_range(end)))
        self._skip(t, _FAR, int(np.count_nonzero(far)))
        keep &= ~far

        open_range = keep & is_range & (end_n != 0)
        if open_range.any():
            self._note(t, "unterminated range (end set to the trace end)", np.count_nonzero(open_range))
        end = np.where(is_mark, start, end)
        end = np.where(open_range, np.iinfo(np.int64).min, end)  # filled in once the trace end is known
        back = keep & is_range & ~open_range & (end < start)
        if back.any():
            self._note(t, "end before start (end set to start)", np.count_nonzero(back))
            end = np.where(back, start, end)
        if np.count_nonzero(keep & (cross != 0)):
            self._note(t, "start/end range ended on another thread (kept on the starting thread)", np.count_nonzero(keep & (cross != 0)))

        if np.count_nonzero(unnamed & keep):
            self._note(t, "no message (name '(unnamed)')", np.count_nonzero(unnamed & keep))

        # domain names: NvtxDomainCreate rows of the same process, joined on (pid, domainId)
        cat_id = np.full(len(start), self.names.intern("nvtx"), np.int32)
        dom_rows = np.flatnonzero(etype == domain_create)
        named_domain = keep & (domain != 0)
        if named_domain.any():
            idx = _lookup_exact([pid[dom_rows], domain[dom_rows]], [pid, domain]) if len(dom_rows) else np.full(len(start), -1)
            hit = named_domain & (idx >= 0)
            if hit.any():
                src = dom_rows[idx[hit]]
                # the domain's name: the row's text (its interned name), "nvtx" where it has none
                texts = np.asarray(self.names.names, dtype=object)[name_id[src]]
                texts[unnamed[src]] = "nvtx"
                cat_id[hit] = self._intern(texts.tolist())
            if np.count_nonzero(named_domain & ~hit):
                self._note(t, "domain name unknown (no NvtxDomainCreate row; cat 'nvtx')", np.count_nonzero(named_domain & ~hit))
            del idx
        kind = np.where(is_range, np.uint8(Kind.RANGE), np.uint8(Kind.MARKER)).astype(np.uint8)
        cols = dict(kind=kind, start_ns=start, end_ns=end, pid=pid, tid=tid, name_id=name_id, cat_id=cat_id)
        # the largest table (2.4 M of 4 M rows in the benchmark): _emit frees each full column
        # as it copies its kept rows, once nothing else here refers to it
        del kind, start, end, pid, tid, name_id, cat_id, etype, domain
        self._emit(t, keep, cols)
        return bool(open_range.any())

    # ---- metadata -----------------------------------------------------------------------------
    def _devices(self, seen: np.ndarray) -> list[DeviceInfo]:
        fields = {"name": ("name",), "compute_major": ("computeMajor", "computeCapabilityMajor"),
                  "compute_minor": ("computeMinor", "computeCapabilityMinor"),
                  "num_sms": ("smCount", "numMultiprocessors"), "total_memory_bytes": ("totalMemory", "globalMemorySize")}
        cuda_id: dict[int, int] = {}
        if {"gpuId", "cudaId"} <= set(self.columns("TARGET_INFO_CUDA_DEVICE")):
            for g, c in self._exec("SELECT gpuId, cudaId FROM TARGET_INFO_CUDA_DEVICE", "table TARGET_INFO_CUDA_DEVICE"):
                if isinstance(g, int) and isinstance(c, int):
                    cuda_id.setdefault(g, c)
        found: dict[int, DeviceInfo] = {}
        for table, id_cols in (("TARGET_INFO_GPU", ("cuDevice", "deviceId", "id")),
                               ("TARGET_INFO_CUDA_GPU", ("deviceId", "cuDevice", "id"))):
            have = self.columns(table)
            if not have:
                continue
            sel = {f: next((c for c in cands if c in have), None) for f, cands in fields.items()}
            idc = next((c for c in id_cols if c in have), None)
            if idc is None:
                continue
            use_map = table == "TARGET_INFO_GPU" and cuda_id and "id" in have
            cols = [idc] + (["id"] if use_map else []) + [c for c in sel.values() if c]
            for row in self._exec(f"SELECT {', '.join(_q(c) for c in cols)} FROM {table}", f"table {table}"):
                vals = dict(zip(cols, row))
                dev = cuda_id.get(vals["id"], vals[idc]) if use_map else vals[idc]
                if not isinstance(dev, int):
                    continue
                info = {f: vals[c] for f, c in sel.items() if c}
                if info.get("compute_major") == 0 or info.get("num_sms") == 0:
                    continue  # a non-CUDA adapter listed by nsys (e.g. integrated graphics)
                d = found.setdefault(dev, DeviceInfo(id=dev))
                for f, v in info.items():
                    if f == "name" and isinstance(v, str) and not d.name:
                        d.name = v
                    elif f != "name" and isinstance(v, int) and getattr(d, f) == -1:
                        setattr(d, f, v)
        for dev in seen.tolist():
            found.setdefault(int(dev), DeviceInfo(id=int(dev)))
        return [found[k] for k in sorted(found)]

    def _extra(self) -> dict[str, str]:
        extra: dict[str, str] = {}
        for mt in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if {"name", "value"} <= set(self.columns(mt)):
                extra["metadata_table"] = mt
                for k, v in self._exec(f"SELECT name, value FROM {mt} WHERE name IN "
                                       "('EXPORT_PRODUCT_VERSION', 'EXPORT_SCHEMA_VERSION', 'DERIVED_WINDOW_NS')", f"table {mt}"):
                    extra[str(k)] = str(v)
                break
        used = set(EVENT_TABLES) | set(LOOKUP_TABLES)
        for tname in sorted(self.tables):
            if tname in used or tname.startswith(("ENUM_", "sqlite_")):
                continue
            n = self._count(tname)
            if n:
                extra[f"not used: {tname}"] = f"{n} rows"
        return extra


#: rows per chunk of the final scatter (bounds its temporary index arrays: 8 MB)
_SCATTER_CHUNK = 1 << 20


def _inverse_permutation(order: np.ndarray) -> np.ndarray:
    """``dest`` with ``dest[order[j]] == j`` (shape ``(n,)``; int32 when ``n`` allows, to save memory)."""
    n = len(order)
    dest = np.empty(n, np.int32 if n < 2**31 else np.intp)
    for a in range(0, n, _SCATTER_CHUNK):
        b = min(a + _SCATTER_CHUNK, n)
        dest[order[a:b]] = np.arange(a, b, dtype=dest.dtype)
    return dest


def _scatter(out: np.ndarray, dest: np.ndarray, at: int, values, n: int | None = None) -> np.ndarray:
    """``out[dest[at + i]] = values[i]`` for the ``n`` rows from ``at`` (``values`` an array of
    ``n`` rows, or a scalar), a chunk at a time; returns ``out``."""
    n = len(values) if n is None else n
    scalar = np.ndim(values) == 0
    for a in range(0, n, _SCATTER_CHUNK):
        b = min(a + _SCATTER_CHUNK, n)
        out[dest[at + a: at + b]] = values if scalar else values[a:b]
    return out


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    """glibc's ``malloc_trim``, or None (another C library, or no ctypes)."""
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (ImportError, OSError, AttributeError):
        return None


def _release_freed_memory() -> None:
    """Give the pages of freed memory back to the system (glibc only; else nothing).

    The parts of the table are freed column by column while the sorted columns are allocated, but
    glibc keeps freed blocks in the middle of its heap mapped, so the process's peak memory grows
    by what the freed parts leave behind (measured: 70-90 MB at 4 M rows, 23 MB at 1 M).
    ``malloc_trim(0)`` unmaps those pages; it frees nothing in use.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


#: the first bytes of a WAL file (big-endian magic 0x377f0682 or 0x377f0683) and of a hot rollback
#: journal (0xd9d505f920a163d7): SQLite file format, "The WAL File Format" and "The Rollback Journal"
_SIDE_MAGIC = {"-wal": (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83"), "-journal": (b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7",)}


def _side_files(path: str) -> list[str]:
    """The ``-wal`` / ``-journal`` files SQLite keeps beside ``path`` that SQLite would apply: regular
    files that begin with their format's magic number. Others SQLite ignores (a WAL with a bad header
    is empty to it), and so does this reader: a 50 GB all-zero ``-wal`` beside a 372 KB export was
    copied to the temporary folder in full."""
    out = []
    for suffix, magic in _SIDE_MAGIC.items():
        p = path + suffix
        try:
            if not os.path.isfile(p) or os.path.getsize(p) == 0:
                continue
            with open(p, "rb") as f:
                head = f.read(8)
        except OSError:
            continue
        if any(head.startswith(m) for m in magic):
            out.append(suffix)
    return out
