"""Reader for ``cupti-jsonl`` v1, daydream's own raw CUPTI activity dump (JSON Lines).

The format is documented in ``docs/cupti-jsonl.md`` and its JSON Schema is generated from the
msgspec structs of :mod:`.line_schema` into ``schemas/cupti-jsonl.schema.json`` (``python
scripts/write_schemas.py``). In short: line 1 is a ``HEADER`` object, every
other line is one CUPTI activity record, ``{"kind": "<CUPTI kind name without prefix>", ...}``,
with the C struct's camelCase field names. All times are CUPTI nanoseconds (``cupti_ns``), kept
as they are on the table's clock. ``scripts/collect_cupti.py`` writes such files on a GPU machine;
:func:`daydream.formats.cupti_export.write_cupti_jsonl` writes any event table in this format.

Reading is columnar: every line is decoded by msgspec into one flat struct (:class:`_Line` of
:mod:`.line_decoding`, absent fields hold a sentinel), columns are pulled out with ``np.fromiter`` and all joins
(API call <-> GPU work, external correlation, SYNCHRONIZATION <-> CUDA_EVENT, marker START <->
END) are sorted-array lookups, so records may come in any order.

The package, along its seams: :mod:`.cupti_codes` (CUPTI's numbers and names), :mod:`.line_schema`
(the documented line shapes and their JSON Schema), :mod:`.line_decoding` (header and record
lines), :mod:`.record_columns` (columns and key lookups), :mod:`.record_joins` (cross-record
links), :mod:`.row_blocks` (records -> rows); this module: sniffing, loading, the table.
"""

from __future__ import annotations

import itertools
import warnings
from collections import defaultdict

import msgspec
import numpy as np

from ...errors import TraceFormatError
from ...events.table import Accounting, EventTable, Kind, TraceMeta
from .. import checked_rank, read_maybe_gzip
from .line_decoding import _Line, _read_header, decode_records
from .line_schema import RECORD_TYPES, Header
from .record_columns import _out_of_range_error, _OutOfRange
from .row_blocks import build_rows

NAME = "cupti-jsonl"
DESCRIPTION = (
    'raw CUPTI activity dump: JSON Lines (plain or gzip) whose first line is {"kind":"HEADER","format":"cupti-jsonl",...}, '
    "as written by scripts/collect_cupti.py"
)


def sniff(head: bytes, path: str) -> bool:
    """True when the first line of ``head`` is a cupti-jsonl HEADER object, or a cupti-jsonl
    record (a dump whose header is missing: :func:`load` then says so)."""
    body = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not body.startswith(b"{"):
        return False
    first = body.split(b"\n", 1)[0]
    if b"cupti-jsonl" not in first and b'"kind"' not in first:
        return False
    try:
        obj = msgspec.json.decode(first)
    except msgspec.DecodeError:
        return False
    if not isinstance(obj, dict):
        return False
    if obj.get("format") == "cupti-jsonl" and obj.get("kind") == "HEADER":
        return True
    return obj.get("kind") in _RECORD_KINDS and "traceEvents" not in obj


#: the record kinds of the format (a first line of one of these is a dump without its header)
_RECORD_KINDS = frozenset(t.__struct_config__.tag for t in RECORD_TYPES)


def _note_truncation(path: str, data: bytes, bad: list[int], gz_cut: bool, kept: int, acc: Accounting) -> None:
    """Note and warn (once) when the dump was cut: its last line, without a newline, is malformed
    (``bad`` holds it), or the gzip stream ended without its end marker (``gz_cut``) though what it
    inflated ends at a line end."""
    last = data.count(b"\n") + 1 if data and not data.endswith(b"\n") else -1
    if bad and bad[-1] == last:
        acc.add("notes", f"truncated file: line {last} cut short")
        what = f"its last line ({last}) is cut short and was skipped; kept the {kept:,} complete records before it"
    elif gz_cut:
        acc.add("notes", "truncated file: gzip stream cut short")
        what = f"its gzip stream ends without its end marker; kept the {kept:,} records it holds, those after the cut are lost"
    else:
        return
    warnings.warn(f"{path}: the file is truncated: {what} (--strict refuses such a file)", UserWarning, stacklevel=3)


def kernel_launches(path: str) -> tuple[np.ndarray, np.ndarray, list[_Line]]:
    """The kernel rows of the dump ``path`` as :func:`load` makes them, for the launch data of the
    per-kernel models (:mod:`daydream.formats.launch_data`).

    Returns:
        (device, correlation, records): int64 arrays of length n (the rows' values, after the
        ``daydream`` overrides) and each kernel row's record, whose ``gridX`` .. ``blockZ``,
        ``registersPerThread``, ``staticSharedMemory`` and ``dynamicSharedMemory`` are as written
        (None when absent; not cleaned). Malformed lines are skipped, as :func:`load` skips them.

    Raises:
        TraceFormatError: what :func:`load` raises on the same file (without ``strict``).
    """
    path = str(path)
    data, _ = read_maybe_gzip(path)
    header, body_start, header_line = _read_header(path, data)
    acc = Accounting()
    recs, _ = decode_records(path, data, body_start, header_line + 1, False, acc)
    try:
        rows = build_rows(recs, -1 if header.pid is None else int(header.pid), acc)
    except _OutOfRange as e:
        raise _out_of_range_error(path, data, e) from None
    k = np.flatnonzero(rows.cols["kind"] == Kind.KERNEL)
    return rows.cols["device"][k], rows.cols["correlation"][k], [recs[i] for i in rows.src[k].tolist()]


def _rank_of(header: Header, acc: Accounting) -> dict[str, int]:
    """``rank`` and ``world_size`` of the header (-1 unknown); values out of range are ignored and
    counted, as the Kineto reader does with ``distributedInfo``."""
    r, w = checked_rank(None if header.rank is None else int(header.rank), None if header.worldSize is None else int(header.worldSize),
                        acc, "header ", "rank", "worldSize")
    return {"rank": r, "world_size": w}


def load(path: str, *, strict: bool = False) -> EventTable:
    """Read a cupti-jsonl v1 dump (plain or gzip) into an :class:`EventTable`.

    Times are CUPTI ns as recorded. Runtime/driver records become RUNTIME rows, kernels KERNEL,
    copies MEMCPY, sets MEMSET, SYNCHRONIZATION records SYNC rows (linked to their CUDA_EVENT),
    NVTX START/END pairs RANGE rows, instantaneous NVTX markers MARKER rows, DAYDREAM_CPU_OP
    records CPU_OP rows; EXTERNAL_CORRELATION records set ``external_id`` and DEVICE records
    ``meta.devices``. ``table.accounting`` says what was read, kept and skipped (balanced).

    Args:
        path: the dump.
        strict: raise on the first malformed line instead of skipping it.

    Raises:
        TraceFormatError: unreadable/corrupt file, missing or wrong header, unsupported version,
            or (``strict``) a malformed line, naming the line number.
    """
    path = str(path)
    data, gz_cut = read_maybe_gzip(path)
    if gz_cut and strict:
        raise TraceFormatError(path, "gzip stream", "the gzip stream is cut short (no end marker); strict mode does not salvage it")
    header, body_start, header_line = _read_header(path, data)
    acc = Accounting()
    recs, bad = decode_records(path, data, body_start, header_line + 1, strict, acc)
    header_pid = -1 if header.pid is None else int(header.pid)
    try:
        rows = build_rows(recs, header_pid, acc)
    except _OutOfRange as e:
        raise _out_of_range_error(path, data, e) from None

    order = np.argsort(rows.src, kind="stable")
    cols = {c: a[order] for c, a in rows.cols.items()}
    ids: defaultdict[str, int] = defaultdict(itertools.count().__next__)
    m = len(order)
    cols["name_id"] = np.fromiter(map(ids.__getitem__, rows.names[order].tolist()), dtype=np.int32, count=m)
    cols["cat_id"] = np.fromiter(map(ids.__getitem__, rows.cats[order].tolist()), dtype=np.int32, count=m)

    extra = {k: str(v) for k, v in header.extra.items()}
    for key in ("hostname", "clock", "cuptiVersion", "cudaDriverVersion", "wallClockAtStartNs", "cuptiTsAtStartNs", "pid"):
        v = getattr(header, key)
        if v is not None:
            extra[key] = str(v)
    if bad:
        extra["malformed_lines"] = ",".join(map(str, bad[:20])) + (",..." if len(bad) > 20 else "")
    _note_truncation(path, data, bad, gz_cut, len(recs), acc)
    meta = TraceMeta(source=path, format=NAME, devices=rows.devices, extra=extra, **_rank_of(header, acc))
    return EventTable.from_columns(cols, list(ids), meta, acc)
