"""Kineto streaming reader: a well-formed document (plain or gzip) decoded a slice of events at a
time, so memory stays at the table's columns plus one slice whatever the file's size.

It gives up (None) on anything it does not take, and the whole-document path (:mod:`.repair`)
then reads, repairs or refuses the file. Also the load's environment: the cyclic GC paused and
numpy's huge-page hint off while loading.
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import zlib
from typing import Optional

import msgspec
import numpy as np

from ...events.table import Accounting, EventTable
from .. import GZIP_MAGIC, PYTHON_ROW_PEAK_BYTES, ROW_PEAK_BYTES, TASK_PEAK_BYTES, inflate_limit, inflate_refused, row_budget, rows_refused
from . import times
from .columns import _Columns
from .metadata import _base_time_ns, _meta
from .projection import _INT_DOC, _Doc, _SliceDecoder
from .rows import _build_table


@contextlib.contextmanager
def _gc_paused():
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _hugepage_switch():
    """numpy's switch of ``madvise(MADV_HUGEPAGE)`` on its large allocations (returns the old
    setting), or None where this numpy has none."""
    for mod in ("_core", "core"):
        ma = getattr(getattr(np, mod, None), "multiarray", None)
        fn = getattr(ma, "_set_madvise_hugepage", None)
        if fn is not None:
            return fn
    return None


@contextlib.contextmanager
def _small_pages():
    """numpy's arrays of 4 MiB and more allocated without the huge-page hint while loading.

    numpy asks the kernel for transparent huge pages on its large arrays; where the system sets
    THP to ``madvise`` (with ``defrag`` ``madvise``), each first touch of such an array may then
    compact memory before the fault returns, a cost that grows with the system's fragmentation
    and with the size of the temporaries (measured on the bench VM: ``_table_columns`` of
    kineto_1m.json.gz took 0.20 s CPU with 4 KiB pages, 0.2-1.2 s with the hint). The loader's
    arrays are filled once and mostly freed soon, so small pages cost it nothing measurable. The
    previous setting is restored on exit (numpy's setting is process-wide: another thread's
    allocations during the load get small pages too, which changes no result).
    """
    fn = _hugepage_switch()
    was = fn(False) if fn is not None else None
    try:
        yield
    finally:
        if was:
            fn(True)


# ---------------------------------------------------------------------------------------------
# streaming: a well-formed document is decoded a slice of events at a time
# ---------------------------------------------------------------------------------------------
#: bytes of JSON text decoded at a time by the streaming reader: small enough that a slice's
#: decoded events stay in cache while :meth:`_Columns.add` makes its dozen passes over them
#: (kineto_1m.json.gz: 2.28 s CPU with 2 MiB, 2.40 s with 16 MiB; kineto_4m: 8.8 vs 9.4 s)
_STREAM_CHUNK = 2 << 20
#: bytes read at a time from a plain file (a copy that stays in L2 cache on its way to the
#: window: 0.11 vs 0.13 s CPU for 1 MiB reads of kineto_1m.json); a gzip stream is read
#: ``_READ_BLOCK // 2`` compressed bytes at a time and inflated ``4 * _READ_BLOCK`` at most at a
#: time (small compressed reads keep ``unconsumed_tail``, a copy of the rest, short)
_READ_BLOCK = 256 << 10
#: the traceEvents key must appear within this many bytes of the start
_HEAD_LIMIT = 64 << 20
#: the head is searched for the key each time this many more bytes are read
_HEAD_STEP = 4 << 20
_TE_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
#: a candidate boundary between two events of the array (checked by decoding what precedes it)
_EV_SPLIT = re.compile(rb"\}\s*(,)\s*\{")
_SPLIT_TRIES = 4


try:  # ISA-L's inflate: the same gzip stream ~3.5x faster than zlib (optional: pip install isal)
    from isal import isal_zlib as _fast_zlib

    _INFLATE_ERRORS: tuple = (zlib.error, _fast_zlib.error)
except ImportError:  # pragma: no cover - depends on the environment
    _fast_zlib = None
    _INFLATE_ERRORS = (zlib.error,)


class _NotStreamable(Exception):
    """The streaming reader gives up; the whole-document path reads the file instead."""


def _blocks(f, gz: bool, path: str = ""):
    """The file's content (gunzipped when ``gz``) in blocks of at most ``_READ_BLOCK`` bytes
    (gunzipped: ``4 * _READ_BLOCK``).

    The gzip stream is inflated by ISA-L (the optional ``isal`` package) where installed, else
    by zlib; both give the same bytes (measured on kineto_1m.json.gz: 0.22 vs 0.77 s CPU).

    Raises TraceFormatError when the gzip stream inflates past ``formats.inflate_limit``.
    """
    return _gz_blocks(f, path) if gz else _PlainBlocks(f)


class _PlainBlocks:
    """The blocks of a plain file (an iterator of bytes), and :meth:`readinto` for the streaming
    reader, which reads the file straight into its window (one copy less than ``read``)."""

    def __init__(self, f) -> None:
        self._f = f

    def __iter__(self):
        return self

    def __next__(self) -> bytes:
        b = self._f.read(_READ_BLOCK)
        if not b:
            raise StopIteration
        return b

    def readinto(self, mv) -> int:
        """Read up to ``len(mv)`` bytes into ``mv``; 0 at the end of the file."""
        return self._f.readinto(mv) or 0


def _gz_blocks(f, path: str):
    """:func:`_blocks` of a gzip file."""
    d = (_fast_zlib if _fast_zlib is not None and times._FAST else zlib).decompressobj(16 + zlib.MAX_WBITS)
    out_max, raw_max = 4 * _READ_BLOCK, max(_READ_BLOCK // 2, 1)
    size = os.fstat(f.fileno()).st_size
    left = limit = inflate_limit(path, size, held=False)  # one slice held at a time
    while True:
        raw = f.read(raw_max)
        if not raw:
            raise _NotStreamable("truncated gzip stream")
        while raw:
            out = d.decompress(raw, out_max)
            raw = d.unconsumed_tail
            left -= len(out)
            if left < 0:
                raise inflate_refused(path, "gzip stream", limit, size)
            if out:
                yield out
        if d.eof:
            if d.unused_data or f.read(1):
                raise _NotStreamable("more than one gzip member, or data after the gzip stream")
            return


def _load_streaming(path: str, strict: bool = False) -> Optional[EventTable]:
    """The table of a well-formed Kineto document, read a slice of events at a time.

    Memory stays at the table's columns plus one slice of the document (``_STREAM_CHUNK``
    bytes of JSON and its decoded events), whatever the file's size. Returns None (nothing
    consumed but time) for anything it does not take: a top-level array, a
    ``traceEvents`` key that is not found early or appears twice, a gzip stream that is damaged,
    truncated or has several members, and every JSON or type error (the whole-document path then
    repairs or reports it as documented). The result is the same table as the whole-document path
    gives: the events are the same, in the same order, and are accumulated into the same columns.
    """
    try:
        f = open(path, "rb")
    except OSError:
        return None
    try:
        with f:
            gz = f.read(2) == GZIP_MAGIC
            f.seek(0)
            return _stream(path, _blocks(f, gz, path), strict)
    except (_NotStreamable, OSError, EOFError, BufferError) + _INFLATE_ERRORS:
        return None


def _stream(path: str, blocks, strict: bool = False) -> Optional[EventTable]:
    """The table of the document whose content ``blocks`` yields, or None when this reader gives up.

    The head (the keys before ``traceEvents``) is decoded on its own, the events a slice at a
    time, then the last events with the keys after the array.
    """
    dec_events = _SliceDecoder()
    dec_doc = msgspec.json.Decoder(_Doc)
    got = _stream_head(blocks, dec_doc)
    if got is None:
        return None
    head_doc, buf = got
    cols = _Columns()
    bound = _RowBound(path)
    if not _stream_events(blocks, buf, dec_events, cols, bound):
        return None
    tail_doc, typed = _stream_tail(buf, dec_doc)
    del buf
    if tail_doc is None:
        return None
    cols.add(tail_doc.traceEvents, typed)
    bound.check(cols)
    # a key written both before and after the array: the later one, as a whole-document decode
    for f in _Doc.__struct_fields__:
        if f != "traceEvents" and not bytes(getattr(tail_doc, f)):
            setattr(tail_doc, f, getattr(head_doc, f))
    tail_doc.traceEvents = None
    acct = Accounting()
    meta = _meta(path, tail_doc, acct, strict)
    base_ns = _base_time_ns(path, tail_doc)
    return _build_table(cols, base_ns, meta, acct)


class _RowBound:
    """The memory promise on the streaming path: the rows decoded so far, and the graph tasks among
    them, may need at most ``formats.row_budget`` of the file's size (:data:`ROW_PEAK_BYTES` per
    row, :data:`PYTHON_ROW_PEAK_BYTES` per ``python_function`` row, :data:`TASK_PEAK_BYTES` more per
    task), checked after each slice. A small .gz inflating
    to a dense valid trace (640 k kernels from 242 KB) peaked at 680 MB where 302 MB were promised."""

    def __init__(self, path: str) -> None:
        self.path = path
        try:
            self.size = os.stat(path).st_size if path else 0
        except OSError:
            self.size = 0
        self.budget = row_budget(self.size) if path else None

    def check(self, cols: _Columns) -> None:
        """Raise TraceFormatError when ``cols`` holds more rows than the budget allows."""
        need = cols.row_events * ROW_PEAK_BYTES + cols.python_events * PYTHON_ROW_PEAK_BYTES + cols.task_events * TASK_PEAK_BYTES
        if self.budget is not None and need > self.budget:
            raise rows_refused(self.path, cols.row_events + cols.python_events, cols.task_events, self.size)


def _stream_head(blocks, dec_doc: msgspec.json.Decoder) -> Optional[tuple[_Doc, bytearray]]:
    """(the document's keys before ``traceEvents``, the text from the array's '[' on).

    Reads blocks until the ``traceEvents`` key is found; None when the document is not an
    object, the key is not within ``_HEAD_LIMIT`` bytes, appears twice, or the head is not JSON.
    """
    head = bytearray()
    checked = 0
    while True:
        blk = next(blocks, None)
        if blk is not None:
            head += blk
            if len(head) - checked < _HEAD_STEP:  # searched once per _HEAD_STEP bytes read (or at the end)
                continue
        checked = len(head)
        if head[:3] == b"\xef\xbb\xbf":  # a UTF-8 byte-order mark: not part of the document
            head = head[3:]
        if head.lstrip(b" \t\r\n")[:1] not in (b"", b"{"):
            return None
        m = _TE_KEY.search(head)
        if m is not None:
            break
        if blk is None or len(head) > _HEAD_LIMIT:
            return None
    if b'"traceEvents"' in head[: m.start()]:
        return None
    try:
        head_doc = dec_doc.decode(head[: m.end()] + b"]}")
    except (msgspec.DecodeError, RecursionError):
        return None
    return head_doc, bytearray(head[m.end() - 1 :])


def _stream_events(blocks, buf: bytearray, dec_events: _SliceDecoder, cols: _Columns, bound: Optional[_RowBound] = None) -> bool:
    """Add to ``cols`` the events of ``buf`` and the blocks after it, a slice of events at a time.

    ``buf`` always starts with the array's '['; it is read into up to ``_STREAM_CHUNK`` bytes
    (more while no event boundary is found, up to 8 times that), then the complete events are
    cut off its front. When the blocks end, ``buf`` (changed in place) holds the rest of the
    document. False when the reader gives up: an event too large, or a JSON or type error.

    The text is gathered in one work buffer (:class:`_Window`) allocated once and reused for
    every slice: the rest after a cut moves to its front, so no large buffer is allocated (and
    faulted in) again per slice (measured on kineto_1m.json.gz: 0.26 vs 0.38 s CPU for the
    reading and cutting alone, 0.5 k vs 75 k page faults).
    """
    win = _Window(buf, _STREAM_CHUNK + 8 * _READ_BLOCK)
    fill = getattr(blocks, "readinto", None)  # a plain file: read straight into the window
    eof = False
    need = _STREAM_CHUNK
    seen = 0  # text[:seen] holds no boundary: only its last 1 MiB is searched again (else give up)
    while True:
        while not eof and win.end < need:
            if fill is not None:
                eof = win.fill(fill, _READ_BLOCK) == 0
                continue
            blk = next(blocks, None)
            if blk is None:
                eof = True
            else:
                win.append(blk)
        if eof:
            buf[:] = memoryview(win.buf)[: win.end]
            return True
        text, end = win.buf, win.end
        # only the last _SPLIT_TRIES candidates are tried: the last 64 KiB first, else the last 1 MiB
        cands = [mm.start(1) for mm in _EV_SPLIT.finditer(text, max(0, end - (1 << 16)), end)]
        if len(cands) < _SPLIT_TRIES:
            cands = [mm.start(1) for mm in _EV_SPLIT.finditer(text, max(0, end - (1 << 20)), end)]
        if not cands:
            cands = [mm.start(1) for mm in _EV_SPLIT.finditer(text, max(0, seen - (1 << 20)), end)]
        if not cands:  # no event boundary in the buffer yet (a huge event): read on
            if need >= 8 * _STREAM_CHUNK:
                return False
            need = seen = end
            need += _STREAM_CHUNK
            continue
        need, seen = _STREAM_CHUNK, 0
        if not _add_slice(win, cands, dec_events, cols):
            return False
        if bound is not None:
            bound.check(cols)


class _Window:
    """A reusable text buffer: ``buf[:end]`` holds the document text not yet decoded.

    ``buf`` is allocated once (grown, by doubling, only for an event larger than it) and refilled
    in place; ``arr`` is a numpy view of it for the move of the rest to the front.
    """

    def __init__(self, text, capacity: int) -> None:
        self.end = 0
        self._alloc(max(capacity, 2 * len(text)))
        self.append(text)

    def _alloc(self, size: int) -> None:
        old = getattr(self, "buf", None)
        self.buf = bytearray(size)
        self.arr = np.frombuffer(self.buf, np.uint8)
        if old is not None:
            self.arr[: self.end] = np.frombuffer(old, np.uint8, count=self.end)

    def append(self, blk) -> None:
        """Put ``blk`` (bytes-like) after the text."""
        n = len(blk)
        if self.end + n > len(self.buf):
            self._alloc(max(2 * len(self.buf), self.end + n))
        self.buf[self.end : self.end + n] = blk  # the same length: copied in place, never resized
        self.end += n

    def fill(self, readinto, n: int) -> int:
        """Read up to ``n`` bytes after the text with ``readinto`` (a file's); the count read."""
        if self.end + n > len(self.buf):
            self._alloc(max(2 * len(self.buf), self.end + n))
        with memoryview(self.buf) as mv, mv[self.end : self.end + n] as part:
            k = readinto(part)
        self.end += k
        return k

    def cut(self, c: int) -> None:
        """Drop the text before offset ``c`` and start the rest with '[' (byte ``c`` is a comma)."""
        r = self.end - c
        if r > 1:
            self.arr[1:r] = self.arr[c + 1 : self.end]  # numpy copies overlapping ranges correctly
        self.arr[0] = 0x5B  # '['
        self.end = r


def _add_slice(win: _Window, cands: list[int], dec_events: _SliceDecoder, cols: _Columns) -> bool:
    """Add the events of ``win``'s text before one of the candidate cuts, and remove them from it.

    ``cands``: offsets of commas that may separate two events. The last ``_SPLIT_TRIES`` are
    tried from the end: the comma is turned into ']' for the decode (so the text is never
    copied), then the rest moves to the front after a '['. False when none of them decodes (a
    JSON or type error: the whole-document path reports or repairs it).
    """
    events = None
    buf = win.buf
    for c in reversed(cands[-_SPLIT_TRIES:]):
        buf[c] = 0x5D  # ']'
        try:
            events, typed = dec_events.decode(memoryview(buf)[: c + 1])
            break
        except (msgspec.DecodeError, RecursionError):  # a '}, {' inside an event or a string
            buf[c] = 0x2C  # ','
    if events is None:
        return False
    cols.add(events, typed)
    del events  # the decoded events hold views of the buffer: free them before it changes
    win.cut(c)
    return True


def _stream_tail(buf: bytearray, dec_doc: msgspec.json.Decoder) -> tuple[Optional[_Doc], bool]:
    """(the last events and the keys after the array, from the rest of the document (``buf``),
    decoded as ``_IntDoc``?); (None, False) where it does not decode."""
    if b'"traceEvents"' in buf:
        return None, False
    text = b'{"traceEvents":' + buf
    if times._FAST:
        try:
            return _INT_DOC.decode(text), True
        except (msgspec.DecodeError, RecursionError):  # incl. ValidationError: decoded as _Doc below
            pass
    try:
        return dec_doc.decode(text), False
    except (msgspec.DecodeError, RecursionError):
        return None, False
