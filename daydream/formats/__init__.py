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

import gzip
import importlib
import os
import zlib

from ..errors import TraceFormatError
from ..events import EventTable

#: adapter modules, in sniffing order
ADAPTER_MODULES = ("nsys", "saved", "cupti_jsonl", "kineto")

HEAD_BYTES = 65536
GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
#: every time in a table lies strictly within +-TIME_LIMIT_NS (2^62 ns, about 146 years from the
#: clock's zero: Unix-epoch clocks up to the year 2116), so that the graph, the replay and the
#: reports can add and subtract times without overflowing int64. Adapters skip (and count) the
#: events outside; :func:`load_trace` refuses a table that still has one.
TIME_LIMIT_NS = 2**62


def _adapters():
    out = []
    for m in ADAPTER_MODULES:
        try:
            out.append(importlib.import_module(f"{__name__}.{m}"))
        except ModuleNotFoundError as e:  # adapter not written yet
            if e.name != f"{__name__}.{m}":
                raise
    return out


def read_head(path: str) -> bytes:
    """The first ``HEAD_BYTES`` of the file's content, gunzipped when it is gzip.

    Raises:
        TraceFormatError: the file cannot be opened, or its gzip stream is damaged at the start.
    """
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


def open_maybe_gzip(path: str) -> bytes:
    """The whole content of ``path``, gunzipped when it starts with the gzip magic.

    A gzip stream cut short returns what could be decompressed; the caller's parser then sees a
    truncated document and reports it. Raises TraceFormatError for unreadable or corrupt files.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise TraceFormatError(path, "", f"cannot read ({e.strerror or e})") from None
    if raw[:2] != GZIP_MAGIC:
        return raw
    try:
        return gzip.decompress(raw)
    except EOFError:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            return d.decompress(raw)
        except zlib.error as e:
            raise TraceFormatError(path, "gzip stream", f"damaged gzip data ({e})") from None
    except (OSError, zlib.error) as e:
        raise TraceFormatError(path, "gzip stream", f"damaged gzip data ({e})") from None


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
        raise TraceFormatError(path, "", "the file is empty")
    adapters = _adapters()
    for a in adapters:
        if a.sniff(head, path):
            return a
    accepted = "; ".join(f"{a.NAME}: {a.DESCRIPTION}" for a in adapters)
    raise TraceFormatError(path, "", f"not a trace daydream can read. Accepted formats: {accepted}")


def load_trace(path: str, *, strict: bool = False) -> EventTable:
    """Read any supported trace into an :class:`EventTable` (format picked by content).

    Raises:
        TraceFormatError: the file cannot be read (see each adapter), or its table has a time
            outside +-:data:`TIME_LIMIT_NS`.
    """
    table = detect(path).load(str(path), strict=strict)
    check_time_range(str(path), table)
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
