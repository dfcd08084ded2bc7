"""The normalized columnar event table every format adapter produces.

One row per activity (CPU op, runtime/driver API call, kernel, memcpy, memset, synchronization,
annotation range, instant marker); one numpy array per column. All times are int64 nanoseconds on
the trace's single clock. Names are interned: ``name_id`` and ``cat_id`` index ``EventTable.names``.

The columns are defined once, by :class:`EventColumns` (a msgspec struct whose JSON Schema is
generated into ``schemas/event_table.schema.json``). :class:`EventTable` holds the same columns as
numpy arrays and is saved and loaded (``.npz``, no pickle) with :data:`SCHEMA_VERSION`, so a big
trace is parsed once.
"""

from __future__ import annotations

import enum
import os
import zipfile
from dataclasses import dataclass, field
from typing import Annotated, Any, Iterable

import msgspec
import numpy as np

from ..errors import TraceFormatError
from .memory import MEMORY_COLUMNS, SAVED_PREFIX, MemoryEvents

#: Version of the saved table layout; bump on any change of columns or their meaning.
SCHEMA_VERSION = 1


class Kind(enum.IntEnum):
    """What a row is (column ``kind``)."""

    CPU_OP = 0  #: framework op on a CPU thread (Kineto ``cpu_op``)
    RUNTIME = 1  #: CUDA/HIP runtime or driver API call on a CPU thread
    KERNEL = 2  #: kernel execution on a GPU stream
    MEMCPY = 3  #: memory copy on a GPU stream
    MEMSET = 4  #: memory set on a GPU stream
    SYNC = 5  #: what a synchronizing call waited on (Kineto ``cuda_sync``, CUPTI SYNCHRONIZATION)
    RANGE = 6  #: annotation range: NVTX, ``user_annotation``, ``python_function``, GPU annotations
    MARKER = 7  #: instant: NVTX mark, ``cpu_instant_event``


GPU_TASK_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)


class SyncKind(enum.IntEnum):
    """Column ``sync_kind`` of SYNC rows; values are CUPTI's ``CUpti_ActivitySynchronizationType``."""

    NONE = 0
    EVENT_SYNC = 1  #: cudaEventSynchronize
    STREAM_WAIT_EVENT = 2  #: cudaStreamWaitEvent
    STREAM_SYNC = 3  #: cudaStreamSynchronize
    CONTEXT_SYNC = 4  #: cudaDeviceSynchronize / cuCtxSynchronize


class CopyKind(enum.IntEnum):
    """Column ``copy_kind`` of MEMCPY rows; values are CUPTI's ``CUpti_ActivityMemcpyKind``."""

    UNKNOWN = 0
    HTOD = 1
    DTOH = 2
    HTOA = 3
    ATOH = 4
    ATOA = 5
    ATOD = 6
    DTOA = 7
    DTOD = 8
    HTOH = 9
    PTOP = 10


class MemKind(enum.IntEnum):
    """Columns ``src_kind``/``dst_kind``; values are CUPTI's ``CUpti_ActivityMemoryKind``.

    Note nsys's ``ENUM_CUDA_MEM_KIND`` numbers differ (0 pageable ...); the nsys adapter maps them.
    """

    UNKNOWN = 0
    PAGEABLE = 1
    PINNED = 2
    DEVICE = 3
    ARRAY = 4
    MANAGED = 5
    DEVICE_STATIC = 6
    MANAGED_STATIC = 7


def _col(dtype: str, doc: str) -> Any:
    return Annotated[list[int], msgspec.Meta(description=doc, extra={"dtype": dtype})]


class EventColumns(msgspec.Struct, forbid_unknown_fields=True):
    """The columns of the event table, one list per column, all of the same length.

    This struct is the single definition of the columns: :class:`EventTable` takes its column
    names, dtypes and meanings from here, and ``schemas/event_table.schema.json`` is generated
    from it. Missing values are -1 unless a column says otherwise.
    """

    kind: _col("uint8", "Kind: 0 cpu_op, 1 runtime, 2 kernel, 3 memcpy, 4 memset, 5 sync, 6 range, 7 marker")
    start_ns: _col("int64", "Start time, ns on the trace clock")
    end_ns: _col("int64", "End time, ns on the trace clock (== start_ns for markers)")
    pid: _col("int64", "OS process id; for GPU rows the launching process when known, else -1")
    tid: _col("int64", "OS thread id of CPU rows; -1 for GPU rows")
    device: _col("int32", "GPU device index of GPU rows (and GPU-side ranges); -1 for CPU rows")
    stream: _col("int64", "Stream id of GPU rows; for SYNC rows the stream synchronized or the waiting stream; -1 none")
    correlation: _col("int64", "CUPTI correlation id linking an API call to the GPU work it launched; -1 none")
    external_id: _col("int64", "Framework external correlation id (Kineto 'External id', CUPTI EXTERNAL_CORRELATION); -1 none")
    name_id: _col("int32", "Index into names: the event's name")
    cat_id: _col("int32", "Index into names: the source category (Kineto cat, nsys table or NVTX domain)")
    bytes: _col("int64", "Bytes moved or set by memcpy/memset; -1 otherwise")
    copy_kind: _col("int8", "MEMCPY: CopyKind (CUPTI numbering: 1 HtoD, 2 DtoH, 8 DtoD, 10 PtoP); 0 otherwise")
    src_kind: _col("int8", "MEMCPY: MemKind of the source (1 pageable, 2 pinned, 3 device); 0 unknown")
    dst_kind: _col("int8", "MEMCPY: MemKind of the destination; 0 unknown")
    sync_kind: _col("int8", "SYNC: SyncKind (1 event sync, 2 stream wait event, 3 stream sync, 4 context sync); 0 otherwise")
    link_stream: _col("int64", "SYNC: stream the awaited CUDA event was recorded on; -1 unknown")
    link_correlation: _col("int64", "SYNC: correlation id of the cudaEventRecord the wait binds to; -1 unknown")


#: distinct keys an :class:`Accounting` bucket holds before it counts new ones together
MAX_REASONS = 200
#: the key those are counted under
OTHER_REASONS = f"other categories or reasons (beyond the first {MAX_REASONS} distinct ones)"


class Accounting(msgspec.Struct, forbid_unknown_fields=True):
    """What an adapter read and what it did with it.

    ``read`` counts input records by source category (Kineto ``cat``/``ph``, nsys table, CUPTI
    kind). Every record is either kept (a row of the table, or folded into one, e.g. an NVTX
    start/end pair, a flow event that confirmed a link) or skipped with a reason. Invariant:
    ``sum(read) == sum(kept) + sum(skipped)``. ``notes`` counts kept rows with known artefacts.
    """

    read: dict[str, int] = {}
    kept: dict[str, int] = {}
    skipped: dict[str, int] = {}
    notes: dict[str, int] = {}

    def add(self, bucket: str, key: str, n: int = 1) -> None:
        """Count ``n`` under ``key``. A bucket holds at most :data:`MAX_REASONS` keys; later new
        keys are counted together under :data:`OTHER_REASONS` (a trace of 50,000 made-up categories
        gave a 50,100-line report); the sums, and so the balance, are kept."""
        if n:
            d = getattr(self, bucket)
            if key not in d and len(d) >= MAX_REASONS:
                key = OTHER_REASONS
            d[key] = d.get(key, 0) + int(n)

    @property
    def balanced(self) -> bool:
        return sum(self.read.values()) == sum(self.kept.values()) + sum(self.skipped.values())


class DeviceInfo(msgspec.Struct, forbid_unknown_fields=True):
    """A GPU seen in the trace (from Kineto ``deviceProperties`` or nsys ``TARGET_INFO_GPU``)."""

    id: int
    name: str = ""
    compute_major: int = -1
    compute_minor: int = -1
    num_sms: int = -1
    total_memory_bytes: int = -1


class TraceMeta(msgspec.Struct, forbid_unknown_fields=True):
    """Facts about the trace as a whole."""

    source: str = ""  #: the file the table was read from
    format: str = ""  #: adapter name: "kineto", "nsys", "cupti-jsonl", ...
    devices: list[DeviceInfo] = []
    rank: int = -1  #: distributed rank when the trace says so
    world_size: int = -1
    extra: dict[str, str] = {}


class SavedTableHeader(msgspec.Struct, forbid_unknown_fields=True):
    """The JSON header stored beside the column arrays in a saved table (``.npz``)."""

    schema_version: int
    n_rows: int
    names: list[str]
    meta: TraceMeta
    accounting: Accounting


COLUMNS: tuple[str, ...] = tuple(f.name for f in msgspec.structs.fields(EventColumns))
DTYPES: dict[str, np.dtype] = {
    f.name: np.dtype(f.type.__metadata__[0].extra["dtype"]) for f in msgspec.structs.fields(EventColumns)
}
#: Value of a missing entry per column (0 for enum columns, -1 otherwise).
MISSING: dict[str, int] = {
    c: (0 if c in ("kind", "copy_kind", "src_kind", "dst_kind", "sync_kind") else -1) for c in COLUMNS
}


def source_identity(path: str) -> str:
    """``"size:mtime_ns"`` of the file ``path``, or "" when it is not a readable file."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return ""
    return f"{st.st_size}:{st.st_mtime_ns}" if os.path.isfile(path) else ""


def with_source_identity(meta: TraceMeta) -> TraceMeta:
    """``meta`` with its source as an absolute path and the file's identity in ``extra``
    (:func:`source_identity`); unchanged when the source is not a file at hand."""
    ident = source_identity(meta.source) if meta.source else ""
    if not ident:
        return meta
    return msgspec.structs.replace(meta, source=os.path.abspath(meta.source), extra={**meta.extra, "source_identity": ident})


@dataclass
class EventTable:
    """Columnar event table: ``cols[name]`` is a 1-D numpy array of length ``len(self)``.

    Rows are sorted by (start_ns, kind, end_ns) with ties kept in adapter order, so tables built
    from the same input are identical. Construct with :meth:`from_columns`.
    """

    cols: dict[str, np.ndarray]
    names: list[str]
    meta: TraceMeta = field(default_factory=TraceMeta)
    accounting: Accounting = field(default_factory=Accounting)
    #: per-kernel launch facts the loader collected in its own pass (a
    #: ``daydream.formats.launch_data.LaunchFacts``), or None (read from ``meta.source`` on demand)
    launch: Any = None
    #: the trace's collective arguments (a ``daydream.formats.trace_side.CommSource``, decoded on first
    #: use), or None (a table made in memory: read from ``meta.source`` on demand)
    comm: Any = None
    #: the allocator's events (:class:`~daydream.events.memory.MemoryEvents`; empty when the trace has none)
    memory: MemoryEvents = field(default_factory=MemoryEvents.empty)

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def from_columns(
        cls,
        columns: dict[str, Any],
        names: list[str],
        meta: TraceMeta | None = None,
        accounting: Accounting | None = None,
        sort: bool = True,
    ) -> "EventTable":
        """Build a table from column arrays; absent columns are filled with their missing value.

        Raises:
            ValueError: columns of different lengths or an unknown column name.
        """
        unknown = set(columns) - set(COLUMNS)
        if unknown:
            raise ValueError(f"unknown event columns: {sorted(unknown)}")
        n = None
        for v in columns.values():
            ln = len(v)
            if n is None:
                n = ln
            elif ln != n:
                raise ValueError("event columns differ in length")
        n = n or 0
        cols = {}
        for c in COLUMNS:
            if c in columns:
                cols[c] = np.asarray(columns[c]).astype(DTYPES[c], copy=False)
            else:
                cols[c] = np.full(n, MISSING[c], dtype=DTYPES[c])
        if sort and n:
            order = np.lexsort((cols["end_ns"], cols["kind"], cols["start_ns"]))
            if not np.all(order[:-1] < order[1:]):
                cols = {c: a[order] for c, a in cols.items()}
        return cls(cols, list(names), meta or TraceMeta(), accounting or Accounting())

    # ---- access -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.cols["kind"])

    def __getattr__(self, name: str) -> np.ndarray:
        cols = self.__dict__.get("cols")
        if cols is not None and name in cols:
            return cols[name]
        raise AttributeError(name)

    def name_of(self, row: int) -> str:
        return self.names[int(self.cols["name_id"][row])]

    def name_ids(self, predicate) -> np.ndarray:
        """Ids of the interned names for which ``predicate(name)`` is true (bool mask over names)."""
        return np.fromiter((bool(predicate(s)) for s in self.names), dtype=bool, count=len(self.names))

    def mask(self, *kinds: Kind) -> np.ndarray:
        return np.isin(self.cols["kind"], np.asarray(kinds, dtype=np.uint8))

    def count(self, kind: Kind) -> int:
        return int(np.count_nonzero(self.cols["kind"] == kind))

    def take(self, rows: np.ndarray) -> "EventTable":
        """A new table with the given rows (indices or bool mask); names and meta are shared."""
        return EventTable({c: a[rows] for c, a in self.cols.items()}, self.names, self.meta, self.accounting, self.launch, self.comm,
                          self.memory)

    # ---- conversion -------------------------------------------------------------------------
    def to_struct(self) -> EventColumns:
        return EventColumns(**{c: self.cols[c].tolist() for c in COLUMNS})

    def equals(self, other: "EventTable") -> bool:
        """Same rows with the same names (name ids may differ between tables)."""
        if len(self) != len(other):
            return False
        for c in COLUMNS:
            if c in ("name_id", "cat_id"):
                a = np.asarray(self.names, dtype=object)[self.cols[c]] if len(self.names) else self.cols[c]
                b = np.asarray(other.names, dtype=object)[other.cols[c]] if len(other.names) else other.cols[c]
                if not np.array_equal(a, b):
                    return False
            elif not np.array_equal(self.cols[c], other.cols[c]):
                return False
        return True

    # ---- persistence ------------------------------------------------------------------------
    def save(self, path: str, members: dict[str, np.ndarray] | None = None) -> None:
        """Write the table to ``path`` as an uncompressed ``.npz`` with a JSON header (no pickle);
        ``members``: more arrays to store beside the columns (the launch data and collective args,
        :func:`daydream.formats.trace_side.save_table`).

        The header names the trace file by its absolute path and records its identity (size and
        modification time, ``meta.extra["source_identity"]``), so that what is read from it later
        (a table saved without ``members``: per-kernel launch data) is read only from the same,
        unchanged file."""
        header = SavedTableHeader(SCHEMA_VERSION, len(self), self.names, with_source_identity(self.meta), self.accounting)
        arrays = {**(members or {}), **{c: self.cols[c] for c in COLUMNS}}
        if len(self.memory):  # the allocator's events, when the trace has them (absent: none)
            arrays.update({SAVED_PREFIX + c: a for c, a in self.memory.columns().items()})
        arrays["__header__"] = np.frombuffer(msgspec.json.encode(header), dtype=np.uint8)
        with open(path, "wb") as f:
            np.savez(f, **arrays)

    @classmethod
    def load(cls, path: str) -> "EventTable":
        """Read a table written by :meth:`save`.

        Raises:
            TraceFormatError: not a saved table, a different schema version, or damaged arrays.
        """
        try:
            with np.load(path, allow_pickle=False) as z:
                header = msgspec.json.decode(z["__header__"].tobytes(), type=SavedTableHeader)
                if header.schema_version != SCHEMA_VERSION:
                    raise TraceFormatError(
                        path, "header", f"saved table has schema version {header.schema_version}, this daydream reads {SCHEMA_VERSION}; re-parse the trace"
                    )
                cols = {c: z[c] for c in COLUMNS}
                mem = {c: z[SAVED_PREFIX + c] for c in MEMORY_COLUMNS if SAVED_PREFIX + c in z.files}
        except TraceFormatError:
            raise
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, msgspec.DecodeError) as e:
            raise TraceFormatError(path, "", f"not a saved daydream event table ({e})") from None
        for c in COLUMNS:
            if cols[c].dtype != DTYPES[c] or len(cols[c]) != header.n_rows:
                raise TraceFormatError(path, f"column {c}", "wrong dtype or length")
        return cls(cols, header.names, header.meta, header.accounting, memory=_memory_of(path, mem))


def _memory_of(path: str, mem: dict[str, np.ndarray]) -> MemoryEvents:
    """The saved memory columns as :class:`MemoryEvents` (none saved: empty; all or none)."""
    if not mem:
        return MemoryEvents.empty()
    n = len(mem.get("ts_ns", ()))
    for c, d in MEMORY_COLUMNS.items():
        a = mem.get(c)
        if a is None or a.dtype != d or a.ndim != 1 or len(a) != n:
            raise TraceFormatError(path, f"column {SAVED_PREFIX}{c}", "missing, or of the wrong dtype or length")
    return MemoryEvents.from_columns(mem, sort=False)


class _NameIds(dict):
    """string -> id; looking up a new string appends it to ``names`` and gives it the next id."""

    __slots__ = ("names",)

    def __missing__(self, s: str) -> int:
        i = self[s] = len(self.names)
        self.names.append(s)
        return i


class NameTable:
    """Interns strings to int32 ids while an adapter builds a table."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names: list[str] = []
        self._ids = _NameIds()
        self._ids.names = self.names
        for s in names:
            self.intern(s)

    def intern(self, s: str) -> int:
        return self._ids[s]

    def intern_many(self, strings: Iterable[str]) -> np.ndarray:
        # one C-level pass: a dict lookup per string, the new ones added by _NameIds.__missing__
        return np.fromiter(map(self._ids.__getitem__, strings), dtype=np.int32)


def event_table_schema() -> dict:
    """JSON Schema of the event table's columns and saved header (written to ``schemas/``)."""
    (cols_schema, header_schema), defs = msgspec.json.schema_components([EventColumns, SavedTableHeader])
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://daydream.dev/schemas/event_table.schema.json",
        "title": "Daydream event table",
        "description": f"Columns (EventColumns) and saved-table header, schema version {SCHEMA_VERSION}.",
        "type": "object",
        "properties": {"columns": cols_schema, "header": header_schema},
        "required": ["columns", "header"],
        "$defs": defs,
    }

