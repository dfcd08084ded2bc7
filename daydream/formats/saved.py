"""A saved event table (``daydream-analyze TRACE --save-table FILE.npz``), reloaded without parsing.

A saved table is data only: the arrays are read with ``np.load(allow_pickle=False)`` and the header
is JSON decoded into a msgspec struct, so nothing in the file is ever executed. Because the file
may have been edited or damaged since it was written, :func:`load` also checks what the rest of
daydream relies on (the invariants every adapter guarantees) and refuses the file with a
:class:`TraceFormatError` naming the column when one does not hold.
"""

from __future__ import annotations

import io
import os
import zipfile
import zlib

import msgspec
import numpy as np

from ..errors import TraceFormatError
from ..events.memory import MEMORY_COLUMNS, SAVED_PREFIX
from ..events.table import COLUMNS, EventTable, Kind, SavedTableHeader
from . import checked_rank, inflate_limit, inflate_refused
from .trace_side import load_side

NAME = "saved-table"
DESCRIPTION = "daydream saved event table (.npz, written by --save-table)"
ZIP_MAGIC = b"PK\x03\x04"


def sniff(head: bytes, path: str) -> bool:
    return head[:4] == ZIP_MAGIC


def _check_members(path: str) -> None:
    """Every member daydream reads is a 1-D .npy array of a plain dtype, of the header's length.

    Reads only the zip directory, each member's .npy header and the JSON header (once its size is
    known to be bounded): np.load returns the raw bytes of a member that is not a .npy file, reads
    a 2-D array as happily as a 1-D one, and allocates whatever length a .npy header claims.
    Nothing is allocated before the sizes are checked: the members together may inflate to at
    most ``formats.inflate_limit`` of the file's size, and each holds exactly what its .npy
    header declares.
    """
    try:
        with zipfile.ZipFile(path) as z:
            members = {i.filename: i for i in z.infolist()}
            size = os.path.getsize(path)
            limit = inflate_limit(path, size)
            side = tuple(k[:-4] for k in members if k.startswith("side.") and k.endswith(".npy"))  # trace_side.load_side reads them
            mem_keys = tuple(SAVED_PREFIX + c for c in MEMORY_COLUMNS)
            total = sum(members[k + ".npy"].file_size for k in ("__header__", *COLUMNS, *side, *mem_keys) if k + ".npy" in members)
            if total > limit:
                raise inflate_refused(path, "", limit, size)
            n_rows = None
            for key in ("__header__", *COLUMNS, *side):
                name = key + ".npy"
                if name not in members:
                    continue  # EventTable.load names what is missing
                rows = _check_member(path, z, members[name], key)
                if key.startswith("side."):
                    continue
                if key == "__header__":
                    n_rows = _header_rows(path, z, name)
                elif n_rows is not None and rows != n_rows:
                    raise TraceFormatError(path, f"column {key}", f"{rows:,} rows, but the header says the table has {n_rows:,}")
            n_mem = {k: _check_member(path, z, members[k + ".npy"], k) for k in mem_keys if k + ".npy" in members}
            if len(set(n_mem.values())) > 1:  # the allocator's events: one length, their own
                raise TraceFormatError(path, "memory columns", f"columns of different lengths ({sorted(set(n_mem.values()))})")
    except TraceFormatError:
        raise
    except _READ_ERRORS as e:
        raise TraceFormatError(path, "", f"not a saved daydream event table ({e or type(e).__name__})") from None


def _check_member(path: str, z: zipfile.ZipFile, info: zipfile.ZipInfo, key: str) -> int:
    """The row count of one member, after checking its .npy header against the member's size."""
    place = f"column {key}"
    with z.open(info) as f:
        try:
            version = np.lib.format.read_magic(f)
        except ValueError:
            raise TraceFormatError(path, place, "not a numpy array (.npy) member") from None
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, _, dtype = np.lib.format.read_array_header_2_0(f)
        data_at = f.tell()
    if dtype.hasobject:
        raise TraceFormatError(path, place, "an object array (refused: loading it would need pickle)")
    if len(shape) != 1:
        raise TraceFormatError(path, place, f"has {len(shape)} dimensions, not 1")
    if key == "__header__" and dtype != np.uint8:
        raise TraceFormatError(path, "header", "not a JSON header (uint8 bytes)")
    need = int(shape[0]) * dtype.itemsize
    if data_at + need != info.file_size:
        raise TraceFormatError(
            path, place, f"its .npy header declares {int(shape[0]):,} values ({need:,} bytes) but the member holds "
            f"{max(info.file_size - data_at, 0):,} bytes")
    return int(shape[0])


def _header_rows(path: str, z: zipfile.ZipFile, name: str) -> int | None:
    """``n_rows`` of the JSON header (None when it cannot be read: EventTable.load says why)."""
    with z.open(name) as f:
        raw = f.read()
    try:
        body = np.load(io.BytesIO(raw), allow_pickle=False).tobytes()
        return msgspec.json.decode(body, type=SavedTableHeader).n_rows
    except (ValueError, msgspec.DecodeError):
        return None


#: what zipfile and numpy raise on a damaged, compressed-with-an-unknown-method or encrypted file
_READ_ERRORS = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, NotImplementedError, RuntimeError, zlib.error)


def _check_values(path: str, t: EventTable) -> None:
    """The invariants the graph builder and the reports rely on."""
    kinds = {int(k) for k in Kind}
    bad = ~np.isin(t.kind, np.asarray(sorted(kinds), dtype=t.kind.dtype))
    if bad.any():
        raise TraceFormatError(path, "column kind", f"{int(bad.sum())} row(s) with an unknown kind (first: {int(t.kind[bad.argmax()])})")
    n_names = len(t.names)
    for c, lowest in (("name_id", 0), ("cat_id", -1)):  # cat_id -1: missing (events.MISSING)
        a = t.cols[c]
        bad = (a < lowest) | (a >= n_names)
        if bad.any():
            raise TraceFormatError(path, f"column {c}", f"{int(bad.sum())} row(s) index past the {n_names} names (first: {int(a[bad.argmax()])})")
    bad = t.end_ns < t.start_ns
    if bad.any():
        raise TraceFormatError(path, "column end_ns", f"{int(bad.sum())} row(s) end before they start")
    m = t.memory
    if len(m) and (np.any(np.diff(m.ts_ns) < 0) or np.any(m.device < -1)):
        raise TraceFormatError(path, "column memory.ts_ns", "memory events out of time order, or a device below -1")
    if not t.accounting.balanced:
        a = t.accounting
        raise TraceFormatError(
            path, "header", f"accounting does not balance: {sum(a.read.values())} records read, "
            f"{sum(a.kept.values())} kept + {sum(a.skipped.values())} skipped")


def load(path: str, *, strict: bool = False) -> EventTable:
    """Load a table written by :meth:`EventTable.save`.

    Raises:
        TraceFormatError: not a saved table, one of another schema version, or one whose arrays
            or header break the table's invariants (unknown kinds, name ids past the names, rows
            that end before they start, unbalanced accounting).
    """
    _check_members(path)
    try:
        table = EventTable.load(path)
    except TraceFormatError:
        raise
    except _READ_ERRORS as e:  # what EventTable.load does not expect (e.g. a damaged compressed member)
        raise TraceFormatError(path, "", f"not a saved daydream event table ({e or type(e).__name__})") from None
    _check_values(path, table)
    try:
        side = load_side(path, table)
    except TraceFormatError:
        raise
    except _READ_ERRORS as e:  # a damaged side member
        raise TraceFormatError(path, "", f"not a saved daydream event table ({e or type(e).__name__})") from None
    return _named_by_its_file(path, table, side=side)


#: the note on a table saved before tables carried their launch data and collective arguments
OLD_TABLE_NOTE = ("saved by an older daydream without its launch data and collective arguments (a saved table never reads "
                  "the trace its header names): kernel launch configurations, op shapes and collective sizes are unknown; "
                  "parse the trace again and save it anew")


def _named_by_its_file(path: str, table: EventTable, side: bool = True) -> EventTable:
    """``table`` with the file it was read from in ``extra['saved_table']`` (reports name it) and the
    header's ``source`` (text from the file: untrusted) in ``extra['saved_from']``, shown only.
    ``meta.source``, the path later stages would read launch data and collective arguments back
    from, is always "": nothing in an input chooses a path to read (a tampered header pointing at
    /dev/zero grew to 9.7 GB, at a FIFO it hung, at another trace it took that trace's sizes; one
    pointing at a file with the recorded size and modification time was read). A table carries
    both itself (``side.*`` members, :mod:`.trace_side`); one saved before it did (``side``
    False) lacks them, counted in a note (:data:`OLD_TABLE_NOTE`). The rank and world size are
    checked as the trace readers check theirs: out of range, ignored and counted."""
    m = table.meta
    extra = {**m.extra, "saved_table": path}
    if m.source:
        extra["saved_from"] = m.source
    if not side:
        table.accounting.add("notes", OLD_TABLE_NOTE, 1)
    r, w = checked_rank(None if m.rank == -1 else m.rank, None if m.world_size == -1 else m.world_size, table.accounting, "saved header ")
    table.meta = msgspec.structs.replace(m, source="", extra=extra, rank=r, world_size=w)
    return table


