"""Format adapters and content sniffing.

Each adapter module exposes::

    NAME: str                                   # "kineto", "nsys", "cupti-jsonl"
    DESCRIPTION: str                            # one line, shown when a file is not recognized
    def sniff(head: bytes, path: str) -> bool   # head: the first 64 KiB, gunzipped if gzip
    def load(path: str, *, strict: bool = False) -> EventTable

:func:`load_trace` picks the adapter from the file's content (SQLite header, gzip magic, JSON
object with ``traceEvents``, JSON Lines header), never from the extension alone.
"""

from __future__ import annotations

import importlib
import os
import stat
import zlib
from typing import Protocol, runtime_checkable

from ..errors import TraceFormatError
from ..events.table import EventTable
from .own_timeline import prediction_only

#: adapter modules, in sniffing order (each a :class:`FormatReader`)
ADAPTER_MODULES = ("nsys", "saved", "cupti_jsonl", "kineto")


@runtime_checkable
class FormatReader(Protocol):
    """What an adapter module provides (checked for every module of :data:`ADAPTER_MODULES`).

    ``sniff`` sees at most the first 64 KiB of the file (gunzipped when gzip) and must not raise;
    ``load`` returns the whole table or raises :class:`~daydream.errors.TraceFormatError` naming
    the file and the place, and counts what it skips in ``table.meta.accounting``."""

    NAME: str
    DESCRIPTION: str

    def sniff(self, head: bytes, path: str) -> bool: ...

    def load(self, path: str, *, strict: bool = False) -> EventTable: ...

HEAD_BYTES = 65536
GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
#: every time in a table lies strictly within +-TIME_LIMIT_NS (2^62 ns, about 146 years from the
#: clock's zero: Unix-epoch clocks up to the year 2116), so that the graph, the replay and the
#: reports can add and subtract times without overflowing int64. Adapters skip (and count) the
#: events outside; :func:`load_trace` refuses a table that still has one.
TIME_LIMIT_NS = 2**62
#: the largest world size read from a trace (Kineto ``distributedInfo``, the cupti-jsonl header;
#: ``world-size:n`` takes the same range)
MAX_WORLD_SIZE = 1 << 20


def checked_rank(rank: int | None, world_size: int | None, acc, where: str, rank_key: str = "rank",
                 world_key: str = "world_size") -> tuple[int, int]:
    """(rank, world size) as a trace gives them (None: absent), -1 where absent or out of range: a
    world size not from 1 to :data:`MAX_WORLD_SIZE`, a rank not from 0 to world size - 1. Each value
    ignored is counted in ``acc`` (an :class:`~daydream.events.table.Accounting`) as
    ``{where}{world_key} ...`` / ``{where}{rank_key} ...``."""
    w, r = world_size, rank
    if w is not None and not 1 <= w <= MAX_WORLD_SIZE:
        acc.add("notes", f"{where}{world_key} not a count of ranks from 1 to 2^20 (ignored)", 1)
        w = None
    if r is not None and not 0 <= r < (w if w is not None else MAX_WORLD_SIZE):
        acc.add("notes", f"{where}{rank_key} not a rank from 0 to {world_key} - 1 (ignored)", 1)
        r = None
    return (-1 if r is None else r), (-1 if w is None else w)
#: a compressed stream (a .gz trace, a compressed member of a saved table) may inflate to at most
#: :func:`inflate_limit` bytes; more is refused as a decompression bomb. Real traces inflate 8-30
#: times (../shared/traces: 17, 18 and 30); a run of whitespace over 1000 times.
INFLATE_RATIO = 100
INFLATE_FLOOR = 64 << 20
#: the memory promise (docs/errors.md, "Resource bounds"): peak memory under
#: MEMORY_PER_FILE_BYTE x the file's size + MEMORY_ALLOWANCE
MEMORY_PER_FILE_BYTE, MEMORY_ALLOWANCE = 10, 300 << 20
#: of the allowance, what the process holds before it reads (the interpreter, numpy and daydream's
#: modules: 38 MB ``ru_maxrss`` after the imports, measured on the development machine) and the
#: table being built, rounded up
MEMORY_BASE = 100 << 20
#: bytes of memory per inflated byte held: a reader's buffer grows by concatenation (``bytes +
#: bytes``), the old and the new buffer alive together
INFLATE_HOLD = 2


#: bytes of peak memory of a whole run (load, graph, replay, report) per event that can become a
#: table row, and more per such event that becomes a graph task (a GPU task or a CUDA runtime call).
#: Fitted (the marginal cost of the worst family) on synthetic .json.gz families measured with
#: ``ru_maxrss`` of a forked ``daydream-analyze --details``: CPU ops only (100 k -> 400 k events:
#: 79 -> 215 MB, 451 B per event); kernels only, 4 events per timestamp (50 k -> 400 k: 81 -> 401 MB,
#: 914 B) and 64 per timestamp (200 k -> 640 k: 218 -> 680 MB, 1,050 B: 599 B over a CPU op). Not
#: judged on those: tests/test_stream_memory.py judges it on kernel/runtime/CPU-op mixes at other
#: sizes and tie patterns (within the memory bound at 95 % of the cap; refused past it).
ROW_PEAK_BYTES = 456
#: per graph task, more than ROW_PEAK_BYTES: fitted on the same families (1,050 - 451 B, rounded up)
TASK_PEAK_BYTES = 600
#: per ``python_function`` event (with_stack=True's Python frames, half of a real trace's events):
#: fitted on the same way on a python_function-only family (100 k -> 400 k events: 65 -> 131 MB, 218 B
#: per event); ``user_annotation`` ranges cost as much as CPU ops (443 B), so only this category is apart
PYTHON_ROW_PEAK_BYTES = 224


def row_budget(compressed_size: int) -> int:
    """Bytes the memory promise leaves for a table and what is built from it, for an input file of
    ``compressed_size`` bytes: :data:`MEMORY_PER_FILE_BYTE` x the size + :data:`MEMORY_ALLOWANCE`
    - :data:`MEMORY_BASE`. The streaming reader refuses a document whose rows and tasks
    (:data:`ROW_PEAK_BYTES`, :data:`TASK_PEAK_BYTES` each) need more (:func:`rows_refused`)."""
    return MEMORY_PER_FILE_BYTE * compressed_size + MEMORY_ALLOWANCE - MEMORY_BASE


def rows_refused(path: str, rows: int, tasks: int, compressed_size: int) -> TraceFormatError:
    """The error for a document (read a slice at a time) whose ``rows`` events that can become rows,
    ``tasks`` of them graph tasks, need more memory than :func:`row_budget` allows."""
    return TraceFormatError(
        path, "traceEvents", f"{rows:,} events or more ({tasks:,} of them GPU tasks or CUDA calls) from a file of "
        f"{compressed_size:,} bytes: analysing them needs more than daydream's memory bound of {MEMORY_PER_FILE_BYTE} x "
        f"the file's size + {MEMORY_ALLOWANCE >> 20} MB; refused as a possible decompression bomb (a real trace this "
        "dense can be read decompressed: gunzip it and pass the .json)")


def inflate_limit(path: str, compressed_size: int, held: bool = True) -> int:
    """The most bytes a compressed stream of ``compressed_size`` bytes in ``path`` may inflate to:
    max(:data:`INFLATE_FLOOR`, :data:`INFLATE_RATIO` x the size); where the inflated bytes are
    ``held`` whole in memory (the whole-document paths), also capped by the memory promise: what
    :data:`INFLATE_HOLD` copies of it need must fit in :data:`MEMORY_PER_FILE_BYTE` x the size +
    :data:`MEMORY_ALLOWANCE` - :data:`MEMORY_BASE` (a 3 MB file of ratio 97 peaked at 664 MB where
    332 MB were promised). The streaming Kineto reader holds one slice at a time (``held=False``):
    a real trace inflates 8-30 times, so the memory cap alone would refuse every .json.gz over a
    few tens of MB; it bounds instead the rows it decodes (:func:`row_budget`), and a stream without
    event boundaries for 16 MiB falls back to the whole-document path, which applies the cap."""
    by_ratio = max(INFLATE_FLOOR, INFLATE_RATIO * compressed_size)
    if not held:
        return by_ratio
    by_memory = (MEMORY_PER_FILE_BYTE * compressed_size + MEMORY_ALLOWANCE - MEMORY_BASE) // INFLATE_HOLD
    return min(by_ratio, by_memory)


def inflate_refused(path: str, where: str, limit: int, compressed_size: int) -> TraceFormatError:
    """The error for a compressed stream that inflates past ``limit`` bytes."""
    return TraceFormatError(
        path, where, f"decompresses to more than {limit:,} bytes from {compressed_size:,} (over {INFLATE_RATIO} times, "
        f"or {INFLATE_FLOOR >> 20} MiB for a small file, or more than daydream's memory bound of "
        f"{MEMORY_PER_FILE_BYTE} x the file's size + {MEMORY_ALLOWANCE >> 20} MB allows): refused as a possible "
        "decompression bomb; a real trace this large can be read decompressed (gunzip it and pass the .json)")


def _adapters():
    out = []
    for m in ADAPTER_MODULES:
        try:
            out.append(importlib.import_module(f"{__name__}.{m}"))
        except ModuleNotFoundError as e:  # adapter not written yet
            if e.name != f"{__name__}.{m}":
                raise
    return out


def _trace_side():
    """:mod:`.trace_side` (launch data and collective args taken at load), imported on first use
    as the adapters are: it imports this package."""
    return importlib.import_module(f"{__name__}.trace_side")


def read_head(path: str) -> bytes:
    """The first ``HEAD_BYTES`` of the file's content, gunzipped when it is gzip.

    Raises:
        TraceFormatError: the file cannot be opened, or its gzip stream is damaged at the start.
    """
    check_regular(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(HEAD_BYTES)
    except IsADirectoryError:
        raise TraceFormatError(path, "", "is a directory, not a trace file") from None
    except FileNotFoundError:
        raise TraceFormatError(path, "", "no such file") from None
    except PermissionError:
        raise TraceFormatError(path, "", "permission denied") from None
    except OSError as e:
        raise TraceFormatError(path, "", f"cannot read ({e.strerror or e})") from None
    if raw[:2] == GZIP_MAGIC:
        try:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            return d.decompress(raw, HEAD_BYTES)
        except zlib.error as e:
            raise TraceFormatError(path, "byte offset 0", f"damaged gzip stream ({e})") from None
    return raw


def check_regular(path: str) -> None:
    """Refuse, before any open(), a path that is not a regular file (a FIFO would block forever)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise TraceFormatError(path, "", "no such file") from None
    except PermissionError:
        raise TraceFormatError(path, "", "permission denied") from None
    except OSError as e:
        raise TraceFormatError(path, "", f"cannot read ({e.strerror or e})") from None
    if stat.S_ISDIR(mode):
        raise TraceFormatError(path, "", "is a directory, not a trace file")
    if not stat.S_ISREG(mode):
        what = ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
                else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "a special file")
        raise TraceFormatError(path, "", f"is {what}, not a regular file; save the trace to a file and name that")


def open_maybe_gzip(path: str) -> bytes:
    """The whole content of ``path``, gunzipped when it starts with the gzip magic.

    A gzip stream cut short returns what could be decompressed; the caller's parser then sees a
    truncated document and reports it (:func:`read_maybe_gzip` also says whether it was cut). Raises
    TraceFormatError for unreadable or corrupt files, and for a gzip stream that inflates past
    :func:`inflate_limit` (never holding more than that).
    """
    return read_maybe_gzip(path)[0]


def read_maybe_gzip(path: str) -> tuple[bytes, bool]:
    """(:func:`open_maybe_gzip`'s content, whether a gzip stream ended before its end marker: cut
    short, so content may be missing even where what was inflated ends cleanly, e.g. at a line
    boundary). Raises as :func:`open_maybe_gzip`."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise TraceFormatError(path, "", f"cannot read ({e.strerror or e})") from None
    if raw[:2] != GZIP_MAGIC:
        return raw, False
    limit = inflate_limit(path, len(raw))
    out = b""
    pos = 0
    while pos < len(raw):  # each gzip member in turn, as gzip.decompress reads them
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            out += d.decompress(raw[pos:] if pos else raw, limit + 1 - len(out))
        except zlib.error as e:
            raise TraceFormatError(path, "gzip stream", f"damaged gzip data ({e})") from None
        if len(out) > limit or d.unconsumed_tail:
            raise inflate_refused(path, "gzip stream", limit, len(raw))
        if not d.eof:  # cut short: what could be decompressed
            return out, True
        rest = d.unused_data
        if not rest.lstrip(b"\x00"):  # trailing zero padding, as gzip allows
            break
        if rest[:2] != GZIP_MAGIC:
            raise TraceFormatError(path, "gzip stream", "damaged gzip data (data after the end of the gzip stream)")
        pos = len(raw) - len(rest)
    return out, False


def detect(path: str):
    """The adapter module for ``path``.

    Raises:
        TraceFormatError: empty file, Nsight Systems report not exported, or unknown content.
    """
    lower = str(path).lower()
    if lower.endswith((".nsys-rep", ".qdrep")):
        raise TraceFormatError(
            path, "", "this is an Nsight Systems report; export it first: nsys export --type sqlite --output trace.sqlite " + os.path.basename(path)
        )
    head = read_head(path)
    if not head.strip():
        cut = _gzip_cut_at(path, head)
        if cut is not None:
            raise TraceFormatError(path, f"byte offset {cut}", "the gzip stream is cut short (the file is truncated): no content could be decompressed")
        raise TraceFormatError(path, "", "the file is empty")
    adapters = _adapters()
    for a in adapters:
        if a.sniff(head, path):
            return a
    hint = _not_json_hint(head)
    if hint:
        raise TraceFormatError(path, "", hint)
    cut = _gzip_cut_at(path, head)
    if cut is not None:
        raise TraceFormatError(path, f"byte offset {cut}", f"the gzip stream is cut short (the file is truncated): its first {len(head):,} "
                               "bytes of content are too few to tell the format")
    if _is_gzip(path):  # damaged deflate data can inflate to garbage; its CRC tells (raises when it fails)
        read_maybe_gzip(path)
    accepted = "; ".join(f"{a.NAME}: {a.DESCRIPTION}" for a in adapters)
    raise TraceFormatError(path, "", f"not a trace daydream can read. Accepted formats: {accepted}")


def _is_gzip(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == GZIP_MAGIC
    except OSError:
        return False


def _gzip_cut_at(path: str, head: bytes) -> int | None:
    """The file's size when it is a gzip stream cut short before ``HEAD_BYTES`` of content
    (``head``, :func:`read_head`) could be decompressed, else None (not gzip, complete, or longer)."""
    if len(head) >= HEAD_BYTES:
        return None
    try:
        with open(path, "rb") as f:
            raw = f.read(HEAD_BYTES + 1)
    except OSError:
        return None
    if raw[:2] != GZIP_MAGIC or len(raw) > HEAD_BYTES:
        return None
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        d.decompress(raw, HEAD_BYTES + 1)
    except zlib.error:
        return None
    return None if d.eof or d.unconsumed_tail else len(raw)


def _not_json_hint(head: bytes) -> str:
    """A specific reason for two near misses, UTF-16 text and a Python repr() dump ("" otherwise)."""
    if head[:2] in (b"\xff\xfe", b"\xfe\xff") or (len(head) >= 4 and (head[1::2][:2] == b"\x00\x00") != (head[0::2][:2] == b"\x00\x00")):
        return ("the file is UTF-16 text; traces are UTF-8: convert it first "
                "(iconv -f UTF-16 -t UTF-8 FILE > trace.json) and pass the converted file")
    h = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if h.startswith((b"{'", b"[{'", b"[ {'")) or h.startswith(b"{ '"):
        return ("a Python repr() dump (single-quoted keys), not JSON: write the trace with json.dump, "
                "prof.export_chrome_trace or the profiler's trace handler")
    return ""


def load_trace(path: str, *, strict: bool = False) -> EventTable:
    """Read any supported trace into an :class:`EventTable` (format picked by content).

    Raises:
        TraceFormatError: the file cannot be read (see each adapter), or its table has a time
            outside +-:data:`TIME_LIMIT_NS`.
    """
    adapter = detect(path)
    table = adapter.load(str(path), strict=strict)
    check_time_range(str(path), table)
    if adapter.NAME != "saved-table":  # (a saved table carries its own, formats/saved.py)
        _trace_side().capture(str(path), table)
    if table.meta.format == "kineto":
        table = prediction_only(str(path), table)
    return table


def check_time_range(path: str, table: EventTable) -> None:
    """Raise TraceFormatError naming the first row whose start or end is not within +-TIME_LIMIT_NS."""
    if len(table) == 0:
        return
    s, e = table.start_ns, table.end_ns
    bad = (s <= -TIME_LIMIT_NS) | (s >= TIME_LIMIT_NS) | (e <= -TIME_LIMIT_NS) | (e >= TIME_LIMIT_NS)
    if bad.any():
        r = int(bad.argmax())
        i = int(table.name_id[r])
        name = table.names[i] if 0 <= i < len(table.names) else "?"
        raise TraceFormatError(
            path, f"event '{name}' (start {int(s[r])} ns, end {int(e[r])} ns)",
            f"{int(bad.sum())} event(s) with a time more than 2^62 ns (about 146 years) from the clock's zero; "
            "the timestamps are damaged",
        )
