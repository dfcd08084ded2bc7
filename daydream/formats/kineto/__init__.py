"""PyTorch profiler / Kineto Chrome-trace JSON adapter (``.json``, ``.json.gz``).

Reads the files written by libkineto's ``ChromeTraceLogger`` (``torch.profiler`` with
``tensorboard_trace_handler`` or ``export_chrome_trace``), in every spelling seen in real traces
from 2021 to now (``../shared/docs/formats.md`` section B), into an :class:`EventTable`.

How events become rows
----------------------
* ``ph: "X"`` events by category (case-insensitive): ``cpu_op``/``Operator`` -> CPU_OP;
  ``cuda_runtime``/``Runtime``/``cuda_driver`` -> RUNTIME (``cat_id`` keeps the original string);
  ``kernel`` -> KERNEL; ``gpu_memcpy``/``Memcpy`` -> MEMCPY; ``gpu_memset``/``Memset`` -> MEMSET;
  ``cuda_sync`` -> SYNC; ``user_annotation``, ``python_function`` -> RANGE on a CPU thread;
  ``gpu_user_annotation`` -> RANGE on a GPU stream; ``cpu_instant_event`` -> MARKER.
  ``Trace`` spans, ``overhead``, ``cuda_event`` and unknown categories are skipped, by reason.
* ``ph: "i"``/``"I"`` instants (``cpu_instant_event``, ``[memory]``) -> MARKER
  (``start_ns == end_ns``); the global "Iteration Start"/"Record Window End" instants, which sit on
  non-numeric pids ("Traces", ""), are skipped as trace structure.
* ``ph: "B"``/``"E"`` pairs (never written by Kineto, accepted for other producers) are paired per
  (pid, tid) by nesting depth, vectorized, and become one row each (the ``B`` event's name,
  category and args); unmatched ones are skipped.
* Flow events (``s``/``t``/``f``: ``ac2g``, legacy ``async``, ``fwdbwd``), metadata (``M``) and
  counters (``C``) are not rows; they are counted as skipped with their reason. The launch link
  is ``args.correlation``; the ``ac2g`` flows are read only where a runtime/driver call or GPU task
  lacks one (see "Launch flows" below).

Every input event is counted in ``Accounting.read`` under its source category (``cat``, or
``"ph X"`` when it has none) and then in ``kept`` (same key) or ``skipped`` (by reason), so
``Accounting.balanced`` always holds. Events that cannot be placed (no numeric ``ts``, no
numeric ``pid``, an X event without ``dur``, a time more than 2^62 ns from the clock's zero:
``formats.TIME_LIMIT_NS``) are skipped by reason too.

Columns
-------
* CPU rows (CPU_OP, RUNTIME, CPU-side RANGE, MARKER): ``pid``/``tid`` of the event (numeric
  strings such as ``"25738"`` parsed), ``device = stream = -1``.
* GPU rows (KERNEL, MEMCPY, MEMSET, SYNC, ``gpu_user_annotation``): ``device = args.device``
  (else the event pid, which Kineto sets to the device), ``stream = args.stream`` (else the tid,
  ``"stream N"`` parsed; for SYNC rows a virtual tid >= 1,000,000 has the offset removed; a stream
  written as 4294967295 becomes -1), ``tid = -1``, ``pid`` = ``args.daydream_pid`` where given (daydream's
  own timeline writes it: correlation ids of several processes can collide, and a task launched
  before the window has none), else the pid of the RUNTIME row with the
  same ``args.correlation`` (a sorted-array join), else the trace's only CPU process (the single pid
  of its runtime rows, or of its CPU ops when it has none), else -1; such rows are counted in
  ``Accounting.notes``.
* ``correlation`` on RUNTIME and GPU task/SYNC rows; ``external_id`` from ``External id`` (or the
  2021 spelling ``external id``); ``bytes`` on MEMCPY/MEMSET; ``copy_kind``/``src_kind``/
  ``dst_kind`` parsed from the memcpy name (``"Memcpy DtoH (Device -> Pageable)"``, once per
  distinct name; ROCm's ``Host`` is MemKind.UNKNOWN); SYNC rows: ``sync_kind`` from
  ``args.cuda_sync_kind`` (string or number) or the name, ``link_stream = args.wait_on_stream``,
  ``link_correlation = args.wait_on_cuda_event_record_corr_id`` (-1 when absent or -1).

The decode uses msgspec structs that project only these fields; all per-event work is done with
C-level iteration (``map``/``np.fromiter``) and numpy, with Python loops only over distinct
values (names, categories, pids).

Fast paths (``_FAST``; each keeps its reference beside it and ``tests/test_kineto_fast.py`` loads
every Kineto trace both ways and compares the tables): slices are decoded as ``_IntEvent`` where they
fit (known categories as literals, no floats in the integer fields, so columns need no type pass),
else as ``_Event``; ts/dur texts are parsed from one joined buffer by numpy's C integer parser
(:func:`_us_join_parse`); (ph, cat) pairs are interned through one id per ph and per cat; sparse
columns are joined by a dense scatter; gzip is inflated by ISA-L where the optional ``isal``
package is installed (``pip install daydream[fast]``), else by zlib.

Launch flows
------------
Kineto writes one ``ac2g`` pair per launch (``id`` = the correlation id): ``ph: "s"`` at the
runtime call's ts on its pid/tid, ``ph: "f"`` with ``bp: "e"`` at the GPU task's ts on pid = device,
tid = stream; some versions also write lone ``f`` ends on CPU threads. Older PyTorch, other producers
and ROCm conversions may link a launch only this way. When some RUNTIME or GPU task/SYNC row has no
``args.correlation`` (one vectorized check), the ``ac2g``/``async``/``async_gpu`` ends are read:
each ``f`` pairs with the latest ``s`` of the same (cat, id) at or before it (one ``s`` may serve
several ``f``, as for a graph launch); an ``s`` binds to the runtime/driver call enclosing its ts on
its (pid, tid), an ``f`` with ``bp: "e"`` to the GPU task enclosing its ts, without it to the next
GPU task starting at or after its ts (sorted keys and ``searchsorted``, no per-event Python). A
bound pair with one side lacking a correlation id gives it the other side's; with both lacking,
both get a fresh id above every recorded one (correlation and event-record ids). Each is counted in
``Accounting.notes`` ("launch link taken from a flow event"); pairs whose ids both exist and differ
keep ``args.correlation`` and are counted ("launch flow disagreeing with args.correlation"), as are
ends left unpaired or unbound. A trace where every launch has its id is read as before (its flows
are not bound, so disagreements there are not counted).

Times
-----
``ts``/``dur`` are microseconds, as JSON integers (old traces) or decimals carrying ns
(``1234.567``). They are read as the number *text* (``msgspec.Raw``) and converted to int64 ns with
a vectorized decimal parser (:func:`_us_join_parse`, else :func:`_us_text_to_ns`'s byte matrix
or compiled kernel), so they are exact whatever their magnitude (no float rounding; more
than 3 decimals round half away from zero). ``baseTimeNanoseconds`` (newer traces) is added.

Document repairs
----------------
With ``strict=False`` (default) the adapter salvages what a crashed or hand-edited file holds:
a truncated file (no closing ``]}``) keeps the complete events before the cut and warns; ``NaN``/
``Infinity`` literals are read as null; trailing commas before ``]``/``}`` are dropped; bytes that
are not UTF-8 (a name copied from a file system in another encoding) become U+FFFD. Each repair
is counted in ``Accounting.notes``. With ``strict=True`` each of them raises
:class:`TraceFormatError` instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import itertools
import operator
import os
import re
import warnings
import zlib
from typing import Any, Optional

import msgspec
import numpy as np

from ...util.arrays import sorted_unique
from ...errors import TraceFormatError
from ...events.table import (
    DTYPES,
    Accounting,
    DeviceInfo,
    EventTable,
    Kind,
    NameTable,
    TraceMeta,
)
from .. import GZIP_MAGIC, TIME_LIMIT_NS, checked_rank, inflate_limit, inflate_refused, read_maybe_gzip
from ..launch_data import LaunchFacts, clean_ext, clean_ints, clean_triples
from ...util.intern import _Ids
from .times import _FAST, _INT64_MAX, _INT64_MIN, _us_join_parse, _us_text_to_ns
from .projection import _ABSENT, _Doc, _Event, _INT_DOC, _NONNUM, _NO_EVENT_ARGS, _SliceDecoder, _generic_args, _int_attr, _int_column, _int_column_typed, _missing_to
from .categories import _C_B, _C_E, _C_INSTANT, _C_ROW, _C_SKIP, _FLOW_ID_TYPES, _Reasons, _SYNC_BY_NAME, _classify, _is_launch_flow_end, _launch_class, _parse_memcpy_name, _sync_kind_value

NAME = "kineto"
DESCRIPTION = "PyTorch profiler / Kineto Chrome-trace JSON (.json, .json.gz)"

#: newest Kineto puts "Stream Sync" cuda_sync events on the virtual tid stream + 1,000,000
_VIRTUAL_SYNC_TID_OFFSET = 1_000_000
#: stream ids written as unsigned 32-bit -1 (Context Sync in 2023 traces)
_UINT32_MAX = 2**32 - 1


#: top-level keys kept as raw JSON text (their UTF-8 is checked by _utf8_checked)
_RAW_KEYS = tuple(f for f in _Doc.__struct_fields__ if f != "traceEvents")
#: top-level keys copied into TraceMeta.extra as strings
_EXTRA_KEYS = (
    "schemaVersion",
    "cupti_version",
    "cuda_runtime_version",
    "cuda_driver_version",
    "trace_id",
    "displayTimeUnit",
    "baseTimeNanoseconds",
    "record_shapes",
    "with_stack",
    "with_modules",
    "profile_memory",
    "traceName",
)


class _DeviceProp(msgspec.Struct, gc=False):
    id: Optional[int] = None
    name: Optional[str] = None
    computeMajor: Optional[int] = None
    computeMinor: Optional[int] = None
    numSms: Optional[int] = None
    totalGlobalMem: Optional[int] = None


# ---------------------------------------------------------------------------------------------
# public interface
# ---------------------------------------------------------------------------------------------
def sniff(head: bytes, path: str) -> bool:
    """True when ``head`` (the first bytes of the file, gunzipped) looks like a Kineto/Chrome trace.

    Accepts a JSON object naming ``traceEvents`` (or Kineto's ``schemaVersion`` and
    ``deviceProperties``, which precede it) in the head, or the Chrome JSON array form: ``[``
    followed by an event object with a ``"ph"`` key. Never raises.
    """
    h = head[3:] if head[:3] == b"\xef\xbb\xbf" else head
    h = h.lstrip()
    if h[:1] == b"{":
        return b'"traceEvents"' in h or (b'"schemaVersion"' in h and b'"deviceProperties"' in h)
    if h[:1] == b"[":
        return re.match(rb"\[\s*\{", h) is not None and b'"ph"' in h
    return False


def load(path: str, *, strict: bool = False) -> EventTable:
    """Read a Kineto Chrome-trace JSON file (plain or gzip) into an :class:`EventTable`.

    Times in the table are int64 nanoseconds on the trace clock (``ts`` microseconds x 1000, plus
    ``baseTimeNanoseconds`` when the file has it). See the module docstring for how each event
    is mapped and accounted.

    Args:
        path: the trace file.
        strict: refuse to repair the document (truncated file, NaN/Infinity literals, trailing
            commas, invalid UTF-8) and raise instead.

    Raises:
        TraceFormatError: unreadable or damaged gzip file, not JSON, no ``traceEvents`` array,
            a projected field of the wrong JSON type (place: ``traceEvents[i].field``), a
            truncated file with nothing to salvage, or (``strict=True``) any repair.

    Warns:
        UserWarning: a truncated file was salvaged (the note names the byte offset of the cut).
    """
    path = str(path)
    # millions of short-lived containers: the cyclic GC would only slow us; many fresh large
    # temporaries: 4 KiB pages fault in steadily where huge ones may stall (see _small_pages)
    with _gc_paused(), _small_pages():
        table = _load_streaming(path, strict)
        if table is None:
            # anything the streaming reader does not take (repairs, errors, array form, ...): the
            # whole document at once, repaired and reported as documented
            data, cut = read_maybe_gzip(path)
            _check_one_event_array(path, data)
            acct = Accounting()
            if cut:  # the JSON may still be whole: said, and refused with --strict
                if strict:
                    raise TraceFormatError(path, "gzip stream", "the gzip stream has no end marker (its CRC and size): "
                                           "the file is cut short (strict mode refuses to read it)")
                acct.add("notes", "gzip stream without its end marker (the file is cut short; its CRC was not checked)", 1)
                warnings.warn(f"{path}: the gzip stream has no end marker (the file is cut short); read what it holds", stacklevel=2)
            events, doc = _decode(path, data, strict, acct)
            del data
            meta = _meta(path, doc, acct, strict)
            base_ns = _base_time_ns(path, doc)
            table = _build(events, base_ns, meta, acct)
        _check_plausible(path, table)
        return table


#: a traceEvents key (a quote that is not escaped, so not inside a string)
_TE_KEY_ANY = re.compile(rb'(?<!\\)"traceEvents"\s*:')
_OUT_OF_RANGE = "ts out of range (more than 2^62 ns, about 146 years, from the clock's zero)"


def _check_one_event_array(path: str, data: bytes) -> None:
    """Refuse a document with several traceEvents keys: a JSON reader keeps only the last one."""
    keys = [m.start() for m in _TE_KEY_ANY.finditer(data)]
    if len(keys) > 1:
        raise TraceFormatError(
            path, f"byte offset {keys[1]}", f"a second traceEvents key ({len(keys)} in all): a JSON reader keeps only the "
            "last array and silently drops the events of the others; merge them into one traceEvents array")


def _check_plausible(path: str, table: EventTable) -> None:
    """Refuse a trace that lost more events to ts out of range than it kept (times in ns, not us)."""
    a = table.accounting
    out = a.skipped.get(_OUT_OF_RANGE, 0)
    if out > len(table):  # more events lost to the range than kept
        raise TraceFormatError(
            path, "traceEvents", f"{out:,} event(s) have a ts more than 2^62 ns from the clock's zero when read as "
            f"microseconds (only {len(table):,} usable): the times look like nanoseconds; Chrome-trace ts and dur are "
            "microseconds, write them so (divide by 1000)")


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
    d = (_fast_zlib if _fast_zlib is not None and _FAST else zlib).decompressobj(16 + zlib.MAX_WBITS)
    out_max, raw_max = 4 * _READ_BLOCK, max(_READ_BLOCK // 2, 1)
    size = os.fstat(f.fileno()).st_size
    left = limit = inflate_limit(path, size)
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
    if not _stream_events(blocks, buf, dec_events, cols):
        return None
    tail_doc, typed = _stream_tail(buf, dec_doc)
    del buf
    if tail_doc is None:
        return None
    cols.add(tail_doc.traceEvents, typed)
    # a key written both before and after the array: the later one, as a whole-document decode
    for f in _Doc.__struct_fields__:
        if f != "traceEvents" and not bytes(getattr(tail_doc, f)):
            setattr(tail_doc, f, getattr(head_doc, f))
    tail_doc.traceEvents = None
    acct = Accounting()
    meta = _meta(path, tail_doc, acct, strict)
    base_ns = _base_time_ns(path, tail_doc)
    return _build_table(cols, base_ns, meta, acct)


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


def _stream_events(blocks, buf: bytearray, dec_events: _SliceDecoder, cols: _Columns) -> bool:
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
    if _FAST:
        try:
            return _INT_DOC.decode(text), True
        except (msgspec.DecodeError, RecursionError):  # incl. ValidationError: decoded as _Doc below
            pass
    try:
        return dec_doc.decode(text), False
    except (msgspec.DecodeError, RecursionError):
        return None, False


# ---------------------------------------------------------------------------------------------
# decoding and repairs
# ---------------------------------------------------------------------------------------------
_BYTE_OFFSET = re.compile(r"\(byte (\d+)\)")
_VALIDATION_AT = re.compile(r"^(.*?) - at `\$(.*)`$", re.S)
_NONFINITE = re.compile(rb"-?(?:NaN|Infinity|nan|inf)(?![A-Za-z0-9_])")
_BULK_FIX = re.compile(
    rb'"(?:[^"\\]|\\.)*"|(-?(?:NaN|Infinity|nan|inf)(?![A-Za-z0-9_]))|(,)(?=\s*[\]}])', re.S
)
# truncation salvage: where one event ends and the next begins (or the data ends)
_EVENT_END = re.compile(rb"\}(?=\s*,\s*\{)|\}(?=\s*,?\s*\Z)")
# the end of the traceEvents array followed by more top-level keys
_ARRAY_END = re.compile(rb"\}\s*\](?=\s*,)")
_MAX_TARGETED_FIXES = 8
_MAX_SALVAGE_TRIES = 12


def _decode(path: str, data: bytes, strict: bool, acct: Accounting) -> tuple[list[_Event], Optional[_Doc]]:
    """Decode the document into the typed projection, repairing what can be repaired."""
    data, array_form, typ = _document_start(path, data)
    size = len(data)
    rep = _Repairs(path, strict, array_form, typ, acct)
    for _ in range(10_000):
        try:
            obj = msgspec.json.decode(data, type=typ)
            break
        except msgspec.ValidationError as e:
            raise _validation_error(path, e) from None
        except msgspec.DecodeError as e:
            msg = str(e)
        except RecursionError:
            raise TraceFormatError(path, "", "JSON nested too deeply to read") from None
        data = rep.fix(data, msg)
    else:  # pragma: no cover - defensive
        raise TraceFormatError(path, "", "too many JSON errors to repair")
    events = obj if array_form else obj.traceEvents
    if events is None:
        raise TraceFormatError(path, "", "no traceEvents array: not a PyTorch profiler / Kineto trace")
    if rep.salvaged:
        lost = ("all its events are there, the top-level data after them is lost" if rep.events_whole else
                f"kept the {len(events):,} complete events before byte {rep.cut}, the rest is lost")
        warnings.warn(
            f"{path}: the file is truncated: its JSON document ends at byte {size} (bytes of the document, after "
            f"decompression); {lost} (--strict refuses such a file)", UserWarning, stacklevel=3)
    return events, (None if array_form else obj)


def _document_start(path: str, data: bytes) -> tuple[bytes, bool, Any]:
    """(data without a byte-order mark, array form?, msgspec type to decode it as).

    Raises TraceFormatError when the document is empty or does not start with '{' or '['.
    """
    if data[:3] == b"\xef\xbb\xbf":
        data = data[3:]
    m = re.match(rb"\s*", data)
    i = m.end() if m else 0
    if i >= len(data):
        raise TraceFormatError(path, "", "the file is empty")
    first = data[i : i + 1]
    if first == b"{":
        return data, False, _Doc
    if first == b"[":
        return data, True, list[_Event]
    raise TraceFormatError(path, f"byte offset {i}", "not JSON: a Kineto trace is a JSON object with a traceEvents array")


@dataclasses.dataclass
class _Repairs:
    """The repairs made to one document so far, and how to make the next one."""

    path: str
    strict: bool  #: raise instead of repairing
    array_form: bool  #: the document is a bare array of events
    typ: Any  #: msgspec type the document is decoded as
    acct: Accounting  #: each repair is counted in its notes
    fixes: int = 0  #: targeted fixes made (trailing commas, NaN/Infinity literals)
    bulk_done: bool = False
    salvaged: bool = False
    utf8_fixed: bool = False
    cut: int = -1  #: byte offset where a truncated document was cut
    events_whole: bool = False  #: the cut fell after the traceEvents array (no event lost)

    def fix(self, data: bytes, msg: str) -> bytes:
        """``data`` with the error msgspec reported (``msg``) repaired; raises what cannot be.

        After ``_MAX_TARGETED_FIXES`` targeted fixes, every remaining NaN/Infinity literal and
        trailing comma is fixed at once.
        """
        path = self.path
        off_m = _BYTE_OFFSET.search(msg)
        off = int(off_m.group(1)) if off_m else None
        if "truncated" in msg.lower():
            return self._salvage(data)
        if off is not None and "trailing comma" in msg and (c := _comma_before(data, off)) is not None:
            if self.strict:
                raise TraceFormatError(path, f"byte offset {c}", "trailing comma (not JSON); strict mode does not repair it")
            data = data[:c] + data[c + 1 :]
            self.acct.add("notes", "trailing comma removed")
            self.fixes += 1
        elif "utf-8" in msg.lower() and not self.utf8_fixed and (bad_at := _first_bad_utf8(data)) is not None:
            if self.strict:
                raise TraceFormatError(path, f"byte offset {bad_at}", "invalid UTF-8 bytes (JSON must be UTF-8 text); strict mode does not repair them")
            before = data.count(b"\xef\xbf\xbd")
            data = data.decode("utf-8", "replace").encode("utf-8")
            self.acct.add("notes", "invalid UTF-8 bytes replaced by U+FFFD", data.count(b"\xef\xbf\xbd") - before)
            self.utf8_fixed = True
        elif off is not None and (nf := _nonfinite_at(data, off)) is not None:
            a, b = nf
            if self.strict:
                raise TraceFormatError(path, f"byte offset {a}", f"{data[a:b].decode()} is not JSON; strict mode does not repair it")
            data = data[:a] + b"null" + data[b:]
            self.acct.add("notes", "NaN/Infinity literal read as null")
            self.fixes += 1
        else:
            where = f"byte offset {off}" if off is not None else ""
            reason = msg.replace(f" (byte {off})", "") if off is not None else msg
            raise TraceFormatError(path, where, f"not valid JSON ({reason})")
        if self.fixes >= _MAX_TARGETED_FIXES and not self.bulk_done:
            data = _bulk_fix(data, self.acct)
            self.bulk_done = True
        return data

    def _salvage(self, data: bytes) -> bytes:
        """The truncated document cut after its last complete event (once; raises otherwise)."""
        path = self.path
        if self.strict:
            raise TraceFormatError(
                path, f"byte offset {len(data)}", "the file is truncated (the JSON document does not end); strict mode does not salvage it"
            )
        if self.salvaged:
            raise TraceFormatError(path, f"byte offset {len(data)}", "the file is truncated and could not be salvaged")
        got = _salvage_truncated(data, self.array_form, self.typ)
        if got is None:
            raise TraceFormatError(
                path, f"byte offset {len(data)}", "the file is truncated and no complete event could be recovered before the cut"
            )
        data, self.cut, self.events_whole = got
        self.salvaged = True
        if self.events_whole:  # every event is there: only top-level data after the array is lost
            self.acct.add("notes", f"file cut after its events: top-level data after byte {self.cut} of the JSON document lost")
        else:
            self.acct.add("notes", f"truncated file: events after byte {self.cut} of the JSON document lost")
        return data


def _validation_error(path: str, e: msgspec.ValidationError) -> TraceFormatError:
    msg = str(e)
    m = _VALIDATION_AT.match(msg)
    if m:
        place = m.group(2).lstrip(".") or "top level"
        return TraceFormatError(path, place, f"wrong JSON type: {m.group(1)}")
    return TraceFormatError(path, "", f"wrong JSON type: {msg}")


def _first_bad_utf8(data: bytes) -> Optional[int]:
    """Byte offset of the first byte that is not valid UTF-8, or None."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return e.start
    return None


def _comma_before(data: bytes, off: int) -> Optional[int]:
    """Offset of the comma before ``off`` (msgspec points at the closing bracket), skipping blanks."""
    j = min(off, len(data)) - 1
    while j >= 0 and data[j] in b" \t\r\n":
        j -= 1
    if j >= 0 and data[j : j + 1] == b",":
        return j
    if data[off : off + 1] == b",":
        return off
    return None


def _nonfinite_at(data: bytes, off: int) -> Optional[tuple[int, int]]:
    """(start, end) of a NaN/Infinity token at ``off`` (msgspec points after a leading '-')."""
    for a in (off - 1, off):
        if a < 0:
            continue
        m = _NONFINITE.match(data, a)
        if m:
            return m.start(), m.end()
    return None


def _bulk_fix(data: bytes, acct: Accounting) -> bytes:
    """Replace every NaN/Infinity token outside strings by null and drop trailing commas."""
    counts = [0, 0]

    def rep(m: re.Match) -> bytes:
        if m.group(1) is not None:
            counts[0] += 1
            return b"null"
        if m.group(2) is not None:
            counts[1] += 1
            return b""
        return m.group(0)

    out = _BULK_FIX.sub(rep, data)
    acct.add("notes", "NaN/Infinity literal read as null", counts[0])
    acct.add("notes", "trailing comma removed", counts[1])
    return out


def _salvage_truncated(data: bytes, array_form: bool, typ: Any) -> Optional[tuple[bytes, int, bool]]:
    """Cut ``data`` after the last complete event and close the document.

    Returns (repaired document, byte offset of the cut, whether the ``traceEvents`` array was whole:
    the cut fell after its closing bracket, in the top-level keys after it), or None when nothing
    could be salvaged. Tries the candidate cut points nearest to the end first, a bounded number of
    times.
    """
    if array_form:
        start = data.find(b"[")
    else:
        k = data.find(b'"traceEvents"')
        start = data.find(b"[", k) if k >= 0 else -1
    if start < 0:
        return None
    tried: set[int] = set()
    window = 1 << 16
    n = len(data)
    while len(tried) < _MAX_SALVAGE_TRIES:
        lo = max(start + 1, n - window)
        cands: list[tuple[int, bytes]] = [(m.end(), b"]" if array_form else b"]}") for m in _EVENT_END.finditer(data, lo)]
        if not array_form:
            cands += [(m.end(), b"}") for m in _ARRAY_END.finditer(data, lo)]
        cands.sort(reverse=True)
        for cut, closer in cands:
            if cut in tried:
                continue
            if len(tried) >= _MAX_SALVAGE_TRIES:
                break
            tried.add(cut)
            doc = data[:cut] + closer
            try:
                msgspec.json.decode(doc, type=typ)
            except (msgspec.DecodeError, RecursionError):  # incl. ValidationError: not an event-level cut
                continue
            return doc, cut, closer == b"}"
        if lo <= start + 1:
            break
        window *= 8
    return None


# ---------------------------------------------------------------------------------------------
# metadata
# ---------------------------------------------------------------------------------------------
def _raw_value(raw: msgspec.Raw) -> Any:
    b = bytes(raw)
    if not b:
        return None
    try:
        return msgspec.json.decode(b)
    except (msgspec.DecodeError, RecursionError):
        return None


def _as_int(v: Any) -> Optional[int]:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            return None
    return None


def _base_time_ns(path: str, doc: Optional[_Doc]) -> int:
    if doc is None:
        return 0
    b = bytes(doc.baseTimeNanoseconds)
    if not b or b == b"null":
        return 0
    v = _as_int(_raw_value(doc.baseTimeNanoseconds))
    if v is None:
        raise TraceFormatError(path, "baseTimeNanoseconds", "not an integer number of nanoseconds")
    if not (-TIME_LIMIT_NS < v < TIME_LIMIT_NS):
        raise TraceFormatError(path, "baseTimeNanoseconds", f"{v} is out of range (more than 2^62 ns, about 146 years, from the clock's zero)")
    return v


def _utf8_checked(path: str, doc: _Doc, strict: bool, acct: Accounting) -> None:
    """Repair (or, when ``strict``, refuse) invalid UTF-8 in the raw top-level values of ``doc``.

    msgspec does not validate the text of a ``Raw`` field, so the document-level repair never
    sees these bytes: they get the same treatment here (U+FFFD, counted in the notes).
    """
    for key in _RAW_KEYS:
        b = bytes(getattr(doc, key))
        if b.isascii():
            continue
        bad_at = _first_bad_utf8(b)
        if bad_at is None:
            continue
        if strict:
            raise TraceFormatError(path, key, f"invalid UTF-8 bytes at byte {bad_at} of its value (JSON must be UTF-8 text); strict mode does not repair them")
        fixed = b.decode("utf-8", "replace").encode("utf-8")
        acct.add("notes", "invalid UTF-8 bytes replaced by U+FFFD", fixed.count(b"\xef\xbf\xbd") - b.count(b"\xef\xbf\xbd"))
        setattr(doc, key, msgspec.Raw(fixed))


def _meta(path: str, doc: Optional[_Doc], acct: Accounting, strict: bool = False) -> TraceMeta:
    meta = TraceMeta(source=path, format=NAME)
    if doc is None:
        meta.extra["layout"] = "chrome json array"
        return meta
    _utf8_checked(path, doc, strict, acct)
    if bytes(doc.deviceProperties):
        try:
            props = msgspec.json.decode(bytes(doc.deviceProperties), type=Optional[list[_DeviceProp]]) or []
        except (msgspec.DecodeError, RecursionError):
            props = []
            acct.add("notes", "deviceProperties unreadable (ignored)")
        for i, p in enumerate(props):
            meta.devices.append(
                DeviceInfo(
                    id=p.id if p.id is not None else i,
                    name=p.name or "",
                    compute_major=p.computeMajor if p.computeMajor is not None else -1,
                    compute_minor=p.computeMinor if p.computeMinor is not None else -1,
                    num_sms=p.numSms if p.numSms is not None else -1,
                    total_memory_bytes=p.totalGlobalMem if p.totalGlobalMem is not None else -1,
                )
            )
    dist = _raw_value(doc.distributedInfo)
    if isinstance(dist, dict):
        meta.rank, meta.world_size = checked_rank(_as_int(dist.get("rank")), _as_int(dist.get("world_size")), acct, "distributedInfo.")
        if isinstance(dist.get("backend"), str):
            meta.extra["distributed_backend"] = dist["backend"]
    for key in _EXTRA_KEYS:
        v = _raw_value(getattr(doc, key))
        if v is None:
            continue
        meta.extra[key] = v if isinstance(v, str) else msgspec.json.encode(v).decode()
    return meta


def _pair_be(
    idx: np.ndarray, is_b: np.ndarray, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Pair B/E events per (pid, tid) by nesting depth; returns (B indices, matching E indices)."""
    if len(idx) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    _, thr = np.unique(np.stack([pid, tid], axis=1), axis=0, return_inverse=True)
    thr = thr.reshape(-1)
    o = np.lexsort((idx, ts, thr))
    thr_o, b_o, idx_o = thr[o], is_b[o], idx[o]
    step = np.where(b_o, 1, -1)
    cs = np.cumsum(step)
    first = np.ones(len(o), bool)
    first[1:] = thr_o[1:] != thr_o[:-1]
    grp = np.cumsum(first) - 1
    start_cs = (cs - step)[first]
    depth = cs - start_cs[grp]
    level = np.where(b_o, depth, depth + 1)
    pos = np.arange(len(o))
    o2 = np.lexsort((pos, level, thr_o))
    b2, thr2, lev2, idx2 = b_o[o2], thr_o[o2], level[o2], idx_o[o2]
    pair = b2[:-1] & ~b2[1:] & (thr2[:-1] == thr2[1:]) & (lev2[:-1] == lev2[1:])
    k = np.nonzero(pair)[0]
    return idx2[k], idx2[k + 1]


def _take(seq, idx: np.ndarray):
    """The items of ``seq`` at the sorted distinct positions ``idx`` (a tuple, or ``seq`` itself for all)."""
    k = len(idx)
    if k == len(seq):
        return seq
    if k == 0:
        return ()
    if k == 1:
        return (seq[int(idx[0])],)
    return operator.itemgetter(*idx.tolist())(seq)


class _Columns:
    """The per-event columns of a document, accumulated one slice of events at a time.

    :meth:`add` turns decoded events into numpy columns (so the events can be freed) and
    :func:`_build_table` makes the table from all of them, exactly as one call with all the events would.
    Dense columns (one entry per event): ``pair`` (id of the distinct (ph, cat)), ``name`` (id of
    the distinct name value), ``pid``, ``tid``, ``ts``/``ts_ok``. Sparse ones (event index in
    ``<col>@``, value), taken only from the events they are used for: ``dur`` of X events;
    ``args.device``/``stream``/``correlation`` of GPU and runtime events; ``External id`` of events
    that can become rows; ``bytes`` of memcpy/memset events; the ``cuda_sync`` args of sync events.
    """

    def __init__(self) -> None:
        self.n = 0
        self.pair_ix = _Ids()
        self.ph_ix = _Ids()  # the fast path's ids of ph and cat values, and (ph id, cat id) -> pair id
        self.cat_ix = _Ids()
        self._lut = np.zeros((0, 0), np.int32)
        self.name_ix = _Ids()
        self.parts: dict[str, list[np.ndarray]] = {}
        self._cls_p = np.zeros(0, np.int8)
        self._kind_p = np.zeros(0, np.int16)
        self._gpu_p = np.zeros(0, bool)
        self._flow_p = np.zeros(0, bool)
        self._launch_p = np.zeros(0, np.int8)  # 1 kernel, 0 op, -1 neither (launch_data's categories)
        self.launch = LaunchFacts()

    def _put(self, col: str, a: np.ndarray) -> None:
        self.parts.setdefault(col, []).append(a)

    def column(self, col: str, dtype) -> np.ndarray:
        parts = self.parts.get(col)
        if not parts:
            return np.zeros(0, dtype)
        if len(parts) > 1:  # keep the whole column only, not the slices too
            parts[:] = [np.concatenate(parts)]
        return parts[0]

    def drop(self, *cols: str) -> None:
        """Free columns that are no longer needed."""
        for c in cols:
            self.parts.pop(c, None)

    def sparse(self, col: str, rows: np.ndarray, fill: int, dtype) -> np.ndarray:
        """Values of sparse column ``col`` at event indices ``rows`` (``fill`` where it has none)."""
        idx = self.column(col + "@", np.int64)
        val = self.column(col, dtype)
        if _FAST and len(idx) and len(rows) * 8 >= self.n:  # many rows: scatter into a dense column, gather
            dense = np.full(self.n, fill, dtype)
            dense[idx] = val
            return dense[rows]
        out = np.full(len(rows), fill, dtype)
        if len(idx) and len(rows):
            j = np.minimum(np.searchsorted(idx, rows), len(idx) - 1)
            hit = idx[j] == rows
            out[hit] = val[j[hit]]
        return out

    def add(self, events, typed: bool = False) -> None:
        """Add the columns of ``events`` (``typed``: decoded as ``_IntEvent``, no floats in the
        integer fields, so they are read without a type check per value)."""
        n = len(events)
        if n == 0:
            return
        g = operator.attrgetter
        ints = _int_column_typed if typed else _int_column
        base = self.n
        pair_of = self._pair_ids(events) if _FAST else None
        if pair_of is None:
            pair_of = np.fromiter(map(self.pair_ix.__getitem__, zip(map(g("ph"), events), map(g("cat"), events))), np.int32, count=n)
        if len(self.pair_ix) > len(self._cls_p):  # classify the new (ph, cat) pairs
            info = [_classify(p, c, _Reasons())[:3] for p, c in list(self.pair_ix)[len(self._cls_p) :]]
            self._cls_p = np.concatenate([self._cls_p, np.array([i[0] for i in info], np.int8)])
            self._kind_p = np.concatenate([self._kind_p, np.array([i[1] for i in info], np.int16)])
            self._gpu_p = np.concatenate([self._gpu_p, np.array([i[2] for i in info], bool)])
            new = list(self.pair_ix)[len(self._flow_p) :]
            self._flow_p = np.concatenate([self._flow_p, np.array([_is_launch_flow_end(p, c) for p, c in new], bool)])
            self._launch_p = np.concatenate([self._launch_p, np.array([_launch_class(c) for _, c in new], np.int8)])
        cls = self._cls_p[pair_of]
        self._put("pair", pair_of)
        name_of = np.fromiter(map(self.name_ix.__getitem__, map(g("name"), events)), np.int32, count=n)
        self._put("name", name_of)
        self._put("pid", _int_attr(events, "pid", n, typed, True))
        self._put("tid", _int_attr(events, "tid", n, typed, True))
        ts, ok = _us_text_to_ns(list(map(g("ts"), events)), base)
        self._put("ts", ts)
        self._put("ts_ok", ok)
        # dur: only X events use it (the fast path parses every event's, absent ones cost little)
        xi = np.flatnonzero(cls == _C_ROW)
        got = _us_join_parse(list(map(g("dur"), events))) if _FAST else None
        if got is None:
            d, ok = _us_text_to_ns(list(map(g("dur"), _take(events, xi))), base)
        else:
            d, ok = got[0][xi], got[1][xi]
        self._put("dur@", xi + base)
        self._put("dur", d)
        self._put("dur_ok", ok)
        self._add_flow_ends(events, np.flatnonzero(self._flow_p[pair_of]), base)
        # args of the events that can become rows
        ri = np.flatnonzero((cls == _C_ROW) | (cls == _C_INSTANT) | (cls == _C_B))
        m = len(ri)
        if typed:  # every event's args (no copy of the rows' selection), the ext ids of the rows
            args = list(map(g("args"), events))
            ext_all = _int_attr(args, "external_id", n, True)
            self._add_launch(events, args, ext_all, pair_of, name_of)
            ext = ext_all[ri]
            del ext_all
            at = ri  # row i's args: args[at[i]]
        else:
            self._add_launch(events, None, None, pair_of, name_of)
            args = _generic_args(_take(events, ri))
            ext = ints(list(map(g("external_id"), args)), m)
            at = np.arange(m)
        legacy = np.flatnonzero(ext <= _NONNUM)
        if len(legacy):
            ext[legacy] = ints(list(map(g("external_id_legacy"), _take(args, at[legacy]))), len(legacy))
        self._put("ext@", ri + base)
        self._put("ext", ext)
        kind = self._kind_p[pair_of[ri]]
        gpu = self._gpu_p[pair_of[ri]]
        for cols, sel in (
            (("device", "stream", "correlation", "daydream_pid"), gpu | (kind == Kind.RUNTIME)),
            (("bytes",), (kind == Kind.MEMCPY) | (kind == Kind.MEMSET)),
            (("wait_on_stream", "wait_on_cuda_event_record_corr_id"), kind == Kind.SYNC),
        ):
            sel = np.flatnonzero(sel)
            sub = _take(args, at[sel])
            for c in cols:
                self._put(c + "@", ri[sel] + base)
                self._put(c, _int_attr(sub, c, len(sel), typed))
            if cols[0] == "wait_on_stream":
                raw = list(map(g("cuda_sync_kind"), sub))
                conv = {v: _sync_kind_value(v) for v in set(raw)}
                self._put("cuda_sync_kind@", ri[sel] + base)
                self._put("cuda_sync_kind", np.fromiter(map(conv.__getitem__, raw), np.int8, count=len(sel)))
        self.n += n

    def _add_launch(self, events, args: Optional[list], ext_all: Optional[np.ndarray], pair_of: np.ndarray, name_of: np.ndarray) -> None:
        """Add the launch facts of the kernel and op events (by category, any ph, as
        :func:`daydream.formats.launch_data.read_launch_data` reads them) to ``self.launch``.
        ``args``, ``ext_all``: every event's args and ``External id`` column (the typed path has
        them, decoded as ``_IntEvent``), else None."""
        lc = self._launch_p[pair_of]
        g = operator.attrgetter
        typed = args is not None
        ki = np.flatnonzero(lc == 1)
        if len(ki):
            a = list(_take(args, ki)) if typed else _generic_args(_take(events, ki))
            present = np.fromiter(map(operator.is_not, a, itertools.repeat(_NO_EVENT_ARGS[typed])), bool, len(a))
            if not present.all():  # a kernel without args is not read (one with an empty object is)
                a = list(itertools.compress(a, present.tolist()))
            if a:
                self.launch.add_kernels(clean_ints(list(map(g("device"), a)), typed), clean_ints(list(map(g("correlation"), a)), typed),
                                        clean_ext(list(map(g("external_id"), a)), list(map(g("external_id_legacy"), a)), _ABSENT, typed),
                                        clean_triples(list(map(g("grid"), a)), typed), clean_triples(list(map(g("block"), a)), typed),
                                        clean_ints(list(map(g("regs"), a)), typed), clean_ints(list(map(g("smem"), a)), typed))
        oi = np.flatnonzero(lc == 0)
        if not len(oi):
            return
        # an op without args has no external id: dropped with the others that have none
        if typed:  # the column's absent/null -> legacy key; out of the reference's range (incl. _NONNUM) -> -1
            ext = ext_all[oi]
            miss = np.flatnonzero(ext == _ABSENT)
            if len(miss):
                ext[miss] = clean_ints(list(map(g("external_id_legacy"), _take(args, oi[miss]))), True)
            ext[(ext >= 1 << 62) | (ext <= -(1 << 62))] = -1
            keep = ext >= 0
            oi, ext = oi[keep], ext[keep]
            a = _take(args, oi)
        else:
            a = _generic_args(_take(events, oi))
            ext = clean_ext(list(map(g("external_id"), a)), list(map(g("external_id_legacy"), a)), _ABSENT, False)
        if len(oi):
            self.launch.add_ops(ext, name_of[oi], list(map(g("dims"), a)), list(map(g("types"), a)))

    def _pair_ids(self, events) -> Optional[np.ndarray]:
        """The (ph, cat) pair id of each event (new pairs added to ``pair_ix`` in order of first
        appearance, as the reference's dict over (ph, cat) tuples does), from one id per ph and
        one per cat and a dense (ph, cat) table; None when that table would pass 4 M entries."""
        g = operator.attrgetter
        n = len(events)
        ph = np.fromiter(map(self.ph_ix.__getitem__, map(g("ph"), events)), np.int32, count=n)
        cat = np.fromiter(map(self.cat_ix.__getitem__, map(g("cat"), events)), np.int32, count=n)
        nph, ncat = len(self.ph_ix), len(self.cat_ix)
        if nph * ncat > 1 << 22:
            return None
        if self._lut.shape != (nph, ncat):
            lut = np.full((nph, ncat), -1, np.int32)
            lut[: self._lut.shape[0], : self._lut.shape[1]] = self._lut
            self._lut = lut
        pair_of = self._lut[ph, cat]
        new = np.flatnonzero(pair_of < 0)
        if len(new):
            key = ph[new].astype(np.int64) * ncat + cat[new]
            uk, first = np.unique(key, return_index=True)
            phs, cats = list(self.ph_ix), list(self.cat_ix)
            for k in uk[np.argsort(first)].tolist():
                self._lut[k // ncat, k % ncat] = self.pair_ix[(phs[k // ncat], cats[k % ncat])]
            pair_of = self._lut[ph, cat]
        return pair_of

    def _add_flow_ends(self, events, fi: np.ndarray, base: int) -> None:
        """Sparse columns of the launch flow ends ``fi``: ``flow`` (the id as an integer, a number
        written as text parsed; < 0 without one), and ``flow_bp_e`` (``bp: "e"``)."""
        if len(fi) == 0:
            return
        g = operator.attrgetter
        ends = _take(events, fi)
        m = len(fi)
        ids = list(map(g("id"), ends))
        if not set(map(type, ids)) <= _FLOW_ID_TYPES:  # an object or array as id: no id
            ids = [i if type(i) in _FLOW_ID_TYPES else None for i in ids]
        self._put("flow@", fi + base)
        self._put("flow", _int_column(ids, m))
        self._put("flow_bp_e", np.fromiter(map(operator.eq, map(g("bp"), ends), itertools.repeat("e")), bool, count=m))


def _build_table(cc: _Columns, base_ns: int, meta: TraceMeta, acct: Accounting) -> EventTable:
    """The table of the events added to ``cc`` (exactly as one :meth:`_Columns.add` of all of them)."""
    cc.launch.finish(list(cc.name_ix))  # only the ops some kernel names are kept
    cols, names = _table_columns(cc, base_ns, acct)  # its intermediates are freed on return
    cc.parts.clear()
    # rows sorted as EventTable.from_columns sorts them (same keys, stable), one column at a
    # time so that the unsorted column is freed as its sorted copy is made
    for c, a in cols.items():
        cols[c] = np.asarray(a).astype(DTYPES[c], copy=False)
    if len(cols["kind"]):
        order = _row_order(cols["start_ns"], cols["kind"], cols["end_ns"])
        if not np.all(order[:-1] < order[1:]):
            for c in list(cols):
                cols[c] = cols[c][order]
    table = EventTable.from_columns(cols, names, meta, acct, sort=False)
    table.launch = cc.launch
    return table


def _row_order(start: np.ndarray, kind: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``np.lexsort((end, kind, start))``: a stable sort by start, then only the rows sharing a
    start with another re-sorted by (start, kind, end) in their places (few in real traces)."""
    if not _FAST:
        return np.lexsort((end, kind, start))
    order = np.argsort(start, kind="stable")
    s = start[order]
    tie = np.zeros(len(s), bool)
    eq = s[1:] == s[:-1]
    tie[1:] |= eq
    tie[:-1] |= eq
    at = np.flatnonzero(tie)
    if len(at):
        sub = order[at]  # in start order, ascending row index within a start (stable)
        order[at] = sub[np.lexsort((end[sub], kind[sub], start[sub]))]
    return order


def _build(events: list[_Event], base_ns: int, meta: TraceMeta, acct: Accounting) -> EventTable:
    """The table of a whole decoded document."""
    cols = _Columns()
    cols.add(events)
    return _build_table(cols, base_ns, meta, acct)


def _table_columns(cc: _Columns, base_ns: int, acct: Accounting) -> tuple[dict[str, np.ndarray], list[str]]:
    """The table's columns (rows in event order, not yet sorted) and names.

    Each stage drops from ``cc`` the per-event columns it is the last to use, so that memory
    stays near the size of the columns still needed.
    """
    why = _Reasons()
    pairs = _classify_pairs(list(cc.pair_ix), why)
    pair_of = cc.column("pair", np.int32)
    rows, r_pid, r_tid, reason = _choose_rows(cc, pairs, pair_of, base_ns, why, acct)
    is_sync = rows.kind == Kind.SYNC
    cols = {"kind": rows.kind, "start_ns": rows.start, "end_ns": rows.end}
    cols.update(_place_rows(cc, rows, r_pid, r_tid, is_sync, acct))  # pid, tid, device, stream, correlation, external_id
    del r_pid, r_tid
    names, cols["name_id"], cols["cat_id"] = _row_names(cc, rows.src, pair_of, pairs.cat_names)
    cols.update(_copy_columns(cc, rows.src, rows.kind, cols["name_id"], names))
    cols.update(_sync_columns(cc, rows.src, is_sync, cols["name_id"], names))
    _count_events(acct, pairs, pair_of, reason, why)
    return cols, names.names


@dataclasses.dataclass
class _PairInfo:
    """What each distinct (ph, cat) pair of the document is; every array is indexed by pair id."""

    cls: np.ndarray  #: int8 event class (_C_ROW, _C_INSTANT, _C_B, _C_E, _C_SKIP)
    kind: np.ndarray  #: int16 row Kind, -1 for none
    gpu: np.ndarray  #: bool: its rows live on a GPU stream
    reason: np.ndarray  #: int32 skip reason (a _Reasons code), -1 when the category is not skipped
    readkey: np.ndarray  #: int32 index into ``readkey_names``
    readkey_names: list[str]  #: Accounting read/kept keys: the category, else "ph <ph>"
    cat_names: list[str]  #: the category of each pair ("" when it has none)


def _classify_pairs(uniq: list, why: _Reasons) -> _PairInfo:
    """Classify each distinct (ph, cat) pair once (Python work per distinct pair, not per event)."""
    k = len(uniq)
    info = _PairInfo(
        cls=np.zeros(k, np.int8),
        kind=np.zeros(k, np.int16),
        gpu=np.zeros(k, bool),
        reason=np.zeros(k, np.int32),
        readkey=np.zeros(k, np.int32),
        readkey_names=[],
        cat_names=[],
    )
    readkey_ids: dict[str, int] = {}
    for i, (p, c) in enumerate(uniq):
        info.cls[i], info.kind[i], info.gpu[i], info.reason[i] = _classify(p, c, why)
        key = c if isinstance(c, str) and c else f"ph {p}"
        if key not in readkey_ids:
            readkey_ids[key] = len(info.readkey_names)
            info.readkey_names.append(key)
        info.readkey[i] = readkey_ids[key]
        info.cat_names.append(c if isinstance(c, str) else "")
    return info


@dataclasses.dataclass
class _EventCols:
    """Per-event columns (one entry per input event) used to choose the events that become rows."""

    cls: np.ndarray  #: int8 event class
    reason: np.ndarray  #: int32 skip reason code, -1 while kept (the selections write it in place)
    in_play: np.ndarray  #: bool: not skipped by its class, ts not out of range
    pid: np.ndarray  #: int64, _ABSENT / _NONNUM when absent / not a number
    tid: np.ndarray  #: int64, same sentinels
    pid_ok: np.ndarray  #: bool: pid is a number
    ts_ns: np.ndarray  #: int64 ns on the trace clock, base time not added
    ts_ok: np.ndarray  #: bool: ts is a number
    dur_ns: np.ndarray  #: int64 ns, set for X events only
    dur_ok: np.ndarray  #: bool: dur is a number (X events only)
    hi_b: int  #: largest ts (ns, without base time) that keeps the time within TIME_LIMIT_NS


def _event_cols(cc: _Columns, pairs: _PairInfo, pair_of: np.ndarray, base_ns: int, why: _Reasons) -> _EventCols:
    """Gather the per-event columns; events whose ts is out of range are skipped here."""
    n = cc.n
    cls = pairs.cls[pair_of]
    reason = pairs.reason[pair_of]  # int32, a new array (written in place by the selections)
    pid = cc.column("pid", np.int64)
    tid = cc.column("tid", np.int64)
    ts_ns, ts_ok = cc.column("ts", np.int64), cc.column("ts_ok", bool)
    dur_ns, dur_ok = np.zeros(n, np.int64), np.zeros(n, bool)  # set for X events, the only users
    x_at = cc.column("dur@", np.int64)
    dur_ns[x_at] = cc.column("dur", np.int64)
    dur_ok[x_at] = cc.column("dur_ok", bool)
    # times must stay within +-TIME_LIMIT_NS on the trace clock (base time included), so that
    # the graph and the replay can add and subtract them without overflowing int64
    lo_b = max(-TIME_LIMIT_NS + 1 - base_ns, _INT64_MIN)
    hi_b = min(TIME_LIMIT_NS - 1 - base_ns, _INT64_MAX)
    in_play = cls != _C_SKIP
    bad = in_play & ts_ok & ((ts_ns < lo_b) | (ts_ns > hi_b))
    reason[bad] = why(_OUT_OF_RANGE)
    in_play &= ~bad
    return _EventCols(cls, reason, in_play, pid, tid, pid > _NONNUM, ts_ns, ts_ok, dur_ns, dur_ok, hi_b)


def _complete_events(ev: _EventCols, is_marker: np.ndarray, why: _Reasons) -> np.ndarray:
    """Indices of the X events that become rows (``is_marker``: per event, its kind is MARKER).

    The others get the reason of the first check they fail, in the order below.
    """
    x = (ev.cls == _C_ROW) & ev.in_play
    bad = x & ~ev.ts_ok
    ev.reason[bad] = why("X event without a numeric ts")
    x &= ~bad
    bad = x & (ev.pid == _ABSENT)
    ev.reason[bad] = why("X event without pid")
    x &= ~bad
    bad = x & ~ev.pid_ok
    ev.reason[bad] = why("X event with a non-numeric pid")
    x &= ~bad
    is_marker_x = x & is_marker
    bad = x & ~ev.dur_ok & ~is_marker_x
    ev.reason[bad] = why("X event without a numeric dur")
    x &= ~bad
    bad = x & ~is_marker_x & (ev.dur_ns > ev.hi_b - ev.ts_ns)  # ts_ns in [lo_b, hi_b]: no overflow
    ev.reason[bad] = why("ts + dur out of range (more than 2^62 ns, about 146 years, from the clock's zero)")
    x &= ~bad
    return np.nonzero(x)[0]


def _instant_events(ev: _EventCols, why: _Reasons) -> np.ndarray:
    """Indices of the instant events that become MARKER rows; the others get their skip reason."""
    inst = (ev.cls == _C_INSTANT) & ev.in_play
    bad = inst & ~ev.ts_ok
    ev.reason[bad] = why("instant event without a numeric ts")
    inst &= ~bad
    bad = inst & ~ev.pid_ok
    ev.reason[bad] = why("trace structure instant (pid is not a process id)")
    inst &= ~bad
    return np.nonzero(inst)[0]


def _begin_end_pairs(ev: _EventCols, why: _Reasons) -> tuple[np.ndarray, np.ndarray]:
    """(B indices, matching E indices) of the B/E pairs that become rows.

    Unpaired events are skipped; a pair whose B category is skipped has both events skipped
    with that reason.
    """
    be = ((ev.cls == _C_B) | (ev.cls == _C_E)) & ev.in_play
    bad = be & ~(ev.ts_ok & ev.pid_ok)
    ev.reason[bad] = why("B/E event without a numeric ts or pid")
    be &= ~bad
    be_idx = np.nonzero(be)[0]
    b_idx, e_idx = _pair_be(be_idx, ev.cls[be_idx] == _C_B, ev.pid[be_idx], ev.tid[be_idx], ev.ts_ns[be_idx])
    unmatched = be
    unmatched[b_idx] = False
    unmatched[e_idx] = False
    ev.reason[unmatched] = why("unmatched B/E event")
    b_skip = ev.reason[b_idx] >= 0
    ev.reason[e_idx[b_skip]] = ev.reason[b_idx[b_skip]]
    return b_idx[~b_skip], e_idx[~b_skip]


@dataclasses.dataclass
class _Rows:
    """The rows of the table, in event order: X events, then instants, then B/E pairs."""

    src: np.ndarray  #: int64 index of the event each row comes from (the B event of a pair)
    start: np.ndarray  #: int64 ns, base time added
    end: np.ndarray  #: int64 ns, >= start
    kind: np.ndarray  #: int64 Kind
    on_gpu: np.ndarray  #: bool: the row lives on a GPU stream


def _choose_rows(
    cc: _Columns, pairs: _PairInfo, pair_of: np.ndarray, base_ns: int, why: _Reasons, acct: Accounting
) -> tuple[_Rows, np.ndarray, np.ndarray, np.ndarray]:
    """(rows, pid of their events, tid of their events, skip reason of every event).

    The pids keep the _ABSENT / _NONNUM sentinels, missing tids are -1; the reasons are int32
    codes, -1 for the events kept.

    Drops the per-event time, pid and tid columns from ``cc``.
    """
    ev = _event_cols(cc, pairs, pair_of, base_ns, why)
    x_idx = _complete_events(ev, pairs.kind[pair_of] == Kind.MARKER, why)
    i_idx = _instant_events(ev, why)
    b_idx, e_idx = _begin_end_pairs(ev, why)
    src = np.concatenate([x_idx, i_idx, b_idx]).astype(np.int64, copy=False)
    start = ev.ts_ns[src] + base_ns
    dur = np.concatenate([ev.dur_ns[x_idx], np.zeros(len(i_idx), np.int64), ev.ts_ns[e_idx] - ev.ts_ns[b_idx]])
    kind = pairs.kind[pair_of[src]].astype(np.int64)
    kind[len(x_idx) : len(x_idx) + len(i_idx)] = Kind.MARKER
    dur = np.where(kind == Kind.MARKER, 0, dur)
    acct.add("notes", "negative dur clamped to 0", int((dur < 0).sum()))
    end = start + np.maximum(dur, 0)
    rows = _Rows(src, start, end, kind, pairs.gpu[pair_of[src]])
    r_pid, r_tid = ev.pid[src], _missing_to(ev.tid[src])
    acct.add("notes", "CPU rows whose tid is absent or not a number (kept with tid -1: on no thread, so not used as "
             "calls or ranges)", int(np.count_nonzero(~rows.on_gpu & (ev.tid[src] <= _NONNUM))))
    _flow_end_places(cc, ev, base_ns)
    cc.drop("dur@", "dur", "dur_ok", "ts", "ts_ok", "pid", "tid")
    return rows, r_pid, r_tid, ev.reason


def _place_rows(
    cc: _Columns, rows: _Rows, r_pid: np.ndarray, r_tid: np.ndarray, is_sync: np.ndarray, acct: Accounting
) -> dict[str, np.ndarray]:
    """Columns pid, tid, device, stream, correlation and external_id of the rows.

    ``r_pid``/``r_tid``: the pid and tid of each row's event (as :func:`_choose_rows` gives them).

    Reads (then drops) the sparse args columns of ``cc``; args are absent where the accumulator
    did not take them (rows that do not use them).
    """
    src, kind, on_gpu = rows.src, rows.kind, rows.on_gpu
    a_dev = cc.sparse("device", src, _ABSENT, np.int64)
    a_stream = cc.sparse("stream", src, _ABSENT, np.int64)
    a_corr = cc.sparse("correlation", src, _ABSENT, np.int64)
    acct.add("notes", "args.correlation not an integer within int64 (no launch link)", int(np.count_nonzero(a_corr == _NONNUM)))
    a_corr = _missing_to(a_corr)
    ext = _missing_to(cc.sparse("ext", src, _ABSENT, np.int64))
    a_proc = cc.sparse("daydream_pid", src, _ABSENT, np.int64)
    cc.drop("device@", "device", "stream@", "stream", "correlation@", "correlation", "ext@", "ext", "daydream_pid@", "daydream_pid")
    device, stream = _device_and_stream(on_gpu, is_sync, a_dev, a_stream, r_pid, r_tid)
    del a_dev, a_stream
    acct.add("notes", "GPU event with a negative device id (args.device)", int(np.count_nonzero(on_gpu & (device < 0))))
    linked_kind = on_gpu & (kind != Kind.RANGE)  # kernels, copies, sets, syncs
    correlation = np.where(linked_kind | (kind == Kind.RUNTIME), a_corr, -1)
    correlation = _flow_links(cc, rows, r_pid, r_tid, linked_kind, correlation, int(a_corr.max(initial=-1)), acct)
    del a_corr
    gpu_pid = _gpu_row_pids(kind, linked_kind, correlation, r_pid, acct)
    # daydream's own timeline names each GPU task's and sync record's process (args.daydream_pid):
    # correlation ids of several processes can collide, and a task without its launch has none
    gpu_pid = np.where(linked_kind & (a_proc > _NONNUM), a_proc, gpu_pid)
    return {
        "pid": _missing_to(np.where(on_gpu, gpu_pid, r_pid)),
        "tid": np.where(on_gpu, -1, r_tid),
        "device": device,
        "stream": stream,
        "correlation": correlation,
        "external_id": ext,
    }


def _flow_end_places(cc: _Columns, ev: _EventCols, base_ns: int) -> None:
    """Adds the sparse columns ``flow_pid``, ``flow_tid``, ``flow_ts`` (ns, base time added) and
    ``flow_ok`` (numeric ts and pid, time in range, an id) of the launch flow ends to ``cc``."""
    at = cc.column("flow@", np.int64)
    if len(at) == 0:
        return
    ts = ev.ts_ns[at]
    lo_b = max(-TIME_LIMIT_NS + 1 - base_ns, _INT64_MIN)
    ok = ev.ts_ok[at] & ev.pid_ok[at] & (ts >= lo_b) & (ts <= ev.hi_b) & (cc.column("flow", np.int64) > _NONNUM)
    cats = _Ids()  # the lower-cased category of each (ph, cat) pair -> a small id
    pair_cat = np.array([cats[c.lower()] if isinstance(c, str) else -1 for _, c in cc.pair_ix], np.int64)
    pair_f = np.array([p == "f" for p, _ in cc.pair_ix], bool)
    pair_of = cc.column("pair", np.int32)[at]
    cc._put("flow_cat", pair_cat[pair_of])
    cc._put("flow_f", pair_f[pair_of])
    cc._put("flow_pid", ev.pid[at])
    cc._put("flow_tid", _missing_to(ev.tid[at]))
    cc._put("flow_ts", np.where(ok, ts, 0) + base_ns)
    cc._put("flow_ok", ok)


#: when True, launch flows are read even where every launch carries args.correlation (tests)
_FLOW_LINKS_ALWAYS = False
_FLOW_COLS = ("flow@", "flow", "flow_cat", "flow_f", "flow_bp_e", "flow_pid", "flow_tid", "flow_ts", "flow_ok")


def _flow_links(
    cc: _Columns, rows: _Rows, r_pid: np.ndarray, r_tid: np.ndarray, linked_kind: np.ndarray,
    correlation: np.ndarray, max_corr: int, acct: Accounting,
) -> np.ndarray:
    """``correlation`` with the launch links that only the ``ac2g`` flows carry filled in.

    Done only when some runtime/driver call or GPU task (``linked_kind``) has no correlation id.
    Each flow end is bound to its slice on its (pid, tid), as the Chrome trace format does: a start
    to the runtime/driver call enclosing its ts; a finish with ``bp: "e"`` to the GPU task
    enclosing its ts, without it to the next GPU task starting at or after its ts. A finish pairs
    with the latest start of the same (cat, id) at or before it. Where one side of a bound pair
    lacks a correlation id it takes the other's, where both lack one they get a fresh id above
    every recorded one (``max_corr`` and the syncs' event-record ids); ids both sides carry are
    kept, a flow disagreeing with them counted.
    """
    is_rt = rows.kind == Kind.RUNTIME
    if len(cc.column("flow@", np.int64)) == 0 or not (
        _FLOW_LINKS_ALWAYS or np.any((correlation < 0) & (is_rt | linked_kind))
    ):
        cc.drop(*_FLOW_COLS)
        return correlation
    f_key, f_cat, is_f = cc.column("flow", np.int64), cc.column("flow_cat", np.int64), cc.column("flow_f", bool)
    ok, bp_e = cc.column("flow_ok", bool), cc.column("flow_bp_e", bool)
    f_pid, f_tid, f_ts = cc.column("flow_pid", np.int64), cc.column("flow_tid", np.int64), cc.column("flow_ts", np.int64)
    cc.drop(*_FLOW_COLS)
    acct.add("notes", "launch flow end without a numeric ts/pid or an id (not read)", int(np.count_nonzero(~ok)))
    s, f = _pair_flow_ends(f_key, f_cat, is_f, f_ts, ok, acct)
    rt = _bind(np.flatnonzero(is_rt), r_pid, r_tid, rows, f_pid[s], f_tid[s], f_ts[s], np.ones(len(s), bool))
    gpu = _bind(np.flatnonzero(linked_kind), r_pid, r_tid, rows, f_pid[f], f_tid[f], f_ts[f], bp_e[f])
    acct.add("notes", "launch flow whose start is not within a runtime/driver call (not read)", int(np.count_nonzero(rt < 0)))
    acct.add("notes", "launch flow whose finish is not on a GPU task (not read)", int(np.count_nonzero(gpu < 0)))
    both = (rt >= 0) & (gpu >= 0)
    return _link_pairs(cc, correlation, rt[both], gpu[both], max_corr, acct)


def _bind(
    cand: np.ndarray, r_pid: np.ndarray, r_tid: np.ndarray, rows: _Rows,
    q_pid: np.ndarray, q_tid: np.ndarray, q_ts: np.ndarray, enclosing: np.ndarray,
) -> np.ndarray:
    """The row (one of ``cand``) each flow end (q_*) binds to on its (pid, tid), -1 for none.

    ``enclosing``: the row starting last at or before ts (the shortest of those starting then),
    if it still runs at ts; else the first row starting at or after ts. Vectorized: rows and ends
    get a key (thread, rank of the time) and the ends are searched in the sorted row keys.
    """
    nc = len(cand)
    if nc == 0 or len(q_ts) == 0:
        return np.full(len(q_ts), -1, np.int64)
    c_start, c_end = rows.start[cand], rows.end[cand]
    _, pi = np.unique(np.concatenate([r_pid[cand], q_pid]), return_inverse=True)
    tids, ti = np.unique(np.concatenate([r_tid[cand], q_tid]), return_inverse=True)
    _, thr = np.unique(pi.reshape(-1) * len(tids) + ti.reshape(-1), return_inverse=True)
    thr = thr.reshape(-1)  # a thread id below the number of rows and ends
    times, rank = np.unique(np.concatenate([c_start, q_ts]), return_inverse=True)
    key = thr * len(times) + rank.reshape(-1)  # < (rows + ends)^2: no int64 overflow
    o = np.lexsort((-c_end, key[:nc]))
    kc = key[:nc][o]
    thr_c, thr_q = thr[:nc], thr[nc:]
    j = np.searchsorted(kc, key[nc:], side="right") - 1
    enc = o[np.maximum(j, 0)]
    hit_e = (j >= 0) & (thr_c[enc] == thr_q) & (c_end[enc] >= q_ts)
    k = np.searchsorted(kc, key[nc:], side="left")
    nxt = o[np.minimum(k, nc - 1)]
    hit_n = (k < nc) & (thr_c[nxt] == thr_q)
    return np.where(enclosing, np.where(hit_e, cand[enc], -1), np.where(hit_n, cand[nxt], -1))


def _pair_flow_ends(
    f_key: np.ndarray, f_cat: np.ndarray, is_f: np.ndarray, f_ts: np.ndarray, ok: np.ndarray, acct: Accounting
) -> tuple[np.ndarray, np.ndarray]:
    """(start, finish): the flow ends (indices) of each flow pair; unpaired ends are counted.

    Each finish pairs with the latest start of the same key at or before it (ends sorted by key,
    time, starts first); a start may serve several finishes (a graph launch).
    """
    sel = np.flatnonzero(ok)
    o = sel[np.lexsort((is_f[sel], f_ts[sel], f_key[sel], f_cat[sel]))]
    pos = np.arange(len(o))
    last_s = np.maximum.accumulate(np.where(is_f[o], -1, pos)) if len(o) else pos
    fin = np.flatnonzero(is_f[o])
    s_at = last_s[fin]
    s_o, f_o = o[np.maximum(s_at, 0)], o[fin]
    paired = (s_at >= 0) & (f_key[s_o] == f_key[f_o]) & (f_cat[s_o] == f_cat[f_o])
    acct.add("notes", "launch flow finish without a start of the same id (not read)", int(np.count_nonzero(~paired)))
    used = np.zeros(len(o), bool)
    used[s_at[paired]] = True
    acct.add("notes", "launch flow start without a finish of the same id (not read)", int(np.count_nonzero(~is_f[o] & ~used)))
    return o[s_at[paired]], o[fin[paired]]


def _link_pairs(
    cc: _Columns, correlation: np.ndarray, rt: np.ndarray, gpu: np.ndarray, max_corr: int, acct: Accounting
) -> np.ndarray:
    """``correlation`` with each (runtime row, GPU row) flow pair given one id where a side lacks one."""
    c_rt, c_gpu = correlation[rt], correlation[gpu]
    acct.add(
        "notes", "launch flow disagreeing with args.correlation (args.correlation kept)",
        int(np.count_nonzero((c_rt >= 0) & (c_gpu >= 0) & (c_rt != c_gpu))),
    )
    need = (c_rt < 0) | (c_gpu < 0)
    if not need.any():
        return correlation
    corr = correlation.copy()
    m = (c_rt < 0) & (c_gpu >= 0)
    corr[rt[m]] = c_gpu[m]  # a call without an id takes its task's
    calls = sorted_unique(rt[corr[rt] < 0])  # neither side has one: one fresh id per call
    if len(calls):
        link = cc.column("wait_on_cuda_event_record_corr_id", np.int64)
        first = max(max_corr, int(correlation.max(initial=-1)), int(link.max(initial=-1))) + 1
        if first <= _INT64_MAX - len(calls):
            corr[calls] = first + np.arange(len(calls))
    m = (c_gpu < 0) & (corr[rt] >= 0)
    corr[gpu[m]] = corr[rt[m]]  # a task without an id takes its call's
    linked = need & (corr[rt] >= 0)
    acct.add("notes", "launch link taken from a flow event", int(np.count_nonzero(linked)))
    acct.add("notes", "launch flow with no correlation id left to give (not read)", int(np.count_nonzero(need & ~linked)))
    return corr


def _device_and_stream(
    on_gpu: np.ndarray, is_sync: np.ndarray, a_dev: np.ndarray, a_stream: np.ndarray, r_pid: np.ndarray, r_tid: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(device, stream) of the rows, -1 for CPU rows and where unknown.

    GPU rows: device from args.device (else the pid), stream from args.stream (else the tid,
    less the virtual sync tid offset for SYNC rows); a stream of 4294967295 is -1.
    """
    device = np.where(on_gpu, np.where(a_dev > _NONNUM, a_dev, r_pid), -1)
    stream = np.where(a_stream > _NONNUM, a_stream, _ABSENT)
    from_tid = stream == _ABSENT
    stream = np.where(from_tid, r_tid, stream)
    virt = from_tid & is_sync & (stream >= _VIRTUAL_SYNC_TID_OFFSET)
    stream = np.where(virt, stream - _VIRTUAL_SYNC_TID_OFFSET, stream)
    stream = np.where(stream == _UINT32_MAX, -1, stream)
    stream = np.where(on_gpu, stream, -1)
    return _missing_to(device), _missing_to(stream)


def _gpu_row_pids(
    kind: np.ndarray, linked_kind: np.ndarray, correlation: np.ndarray, r_pid: np.ndarray, acct: Accounting
) -> np.ndarray:
    """pid of each row as a GPU row: that of the runtime/driver call with the same correlation id.

    A sorted-array join on the correlation ids of the RUNTIME rows. Rows without such a call
    (``linked_kind``: the GPU tasks and syncs) take the trace's only CPU process, else -1; both
    cases are counted in ``acct.notes``.
    """
    m = len(kind)
    rt = (kind == Kind.RUNTIME) & (correlation >= 0)
    rt_corr, rt_pid = correlation[rt], r_pid[rt]
    o = np.argsort(rt_corr, kind="stable")
    sc, sp = rt_corr[o], rt_pid[o]
    cpu_pids = sorted_unique(r_pid[kind == Kind.RUNTIME])
    if len(cpu_pids) == 0:
        cpu_pids = sorted_unique(r_pid[kind == Kind.CPU_OP])
    fallback_pid = int(cpu_pids[0]) if len(cpu_pids) == 1 else -1
    gpu_pid = np.full(m, fallback_pid, np.int64)
    q = linked_kind & (correlation >= 0)
    hit = np.zeros(m, bool)
    if len(sc) and q.any():
        j = np.searchsorted(sc, correlation[q])
        jj = np.minimum(j, len(sc) - 1)
        h = (j < len(sc)) & (sc[jj] == correlation[q])
        hit[np.nonzero(q)[0][h]] = True
        gpu_pid[np.nonzero(q)[0][h]] = sp[jj[h]]
        dup = np.zeros(len(sc), bool)
        if len(sc) > 1:
            d = (sc[1:] == sc[:-1]) & (sp[1:] != sp[:-1])
            dup[1:] |= d
            dup[:-1] |= d
        acct.add("notes", "GPU rows whose correlation id matches calls of several processes (first taken)", int(dup[jj[h]].sum()))
    miss = linked_kind & ~hit
    if fallback_pid >= 0:
        acct.add("notes", "GPU rows without a runtime/driver call of the same correlation id (pid: the trace's only process)", int(miss.sum()))
    else:
        acct.add("notes", "GPU rows without a runtime/driver call of the same correlation id (pid unknown)", int(miss.sum()))
    return gpu_pid


def _row_names(cc: _Columns, src: np.ndarray, pair_of: np.ndarray, cat_names: list[str]) -> tuple[NameTable, np.ndarray, np.ndarray]:
    """(names, name_id, cat_id) of the rows; drops the name column of ``cc``.

    Names are interned in order of first appearance among the rows (as a dict over the rows
    would), then the categories of the pairs, in pair order.
    """
    names = NameTable()
    m = len(src)
    row_name = cc.column("name", np.int32)[src]
    name_id = np.zeros(m, np.int32)
    if m:
        values = list(cc.name_ix)
        if _FAST:  # first row of each name id: one O(rows) pass instead of a sort
            first = np.full(len(values), m, np.int64)
            np.minimum.at(first, row_name, np.arange(m))
            u = np.flatnonzero(first < m)
            in_order = u[np.argsort(first[u], kind="stable")]
        else:
            u, first = np.unique(row_name, return_index=True)
            in_order = u[np.argsort(first)]
        lut = np.zeros(len(values), np.int32)
        for i in in_order.tolist():
            v = values[i]
            lut[i] = names.intern(v if isinstance(v, str) else "")
        name_id = lut[row_name]
    del row_name
    cc.drop("name")
    cat_of_pair = np.fromiter((names.intern(c) for c in cat_names), np.int32, count=len(cat_names))
    return names, name_id, cat_of_pair[pair_of[src]]


def _copy_columns(cc: _Columns, src: np.ndarray, kind: np.ndarray, name_id: np.ndarray, names: NameTable) -> dict[str, np.ndarray]:
    """Columns bytes, copy_kind, src_kind and dst_kind of the rows.

    bytes from args.bytes on MEMCPY/MEMSET rows (else -1); the kinds parsed from the memcpy
    name, once per distinct name (0: unknown, and on every other row).
    """
    m = len(src)
    is_copy = kind == Kind.MEMCPY
    nbytes = np.where(is_copy | (kind == Kind.MEMSET), _missing_to(cc.sparse("bytes", src, _ABSENT, np.int64)), -1)
    copy_kind = np.zeros(m, np.int8)
    src_kind = np.zeros(m, np.int8)
    dst_kind = np.zeros(m, np.int8)
    if is_copy.any():
        ids = sorted_unique(name_id[is_copy])
        ck = np.zeros(len(names.names), np.int8)
        sk = np.zeros(len(names.names), np.int8)
        dk = np.zeros(len(names.names), np.int8)
        for i in ids.tolist():
            ck[i], sk[i], dk[i] = _parse_memcpy_name(names.names[i])
        copy_kind[is_copy] = ck[name_id[is_copy]]
        src_kind[is_copy] = sk[name_id[is_copy]]
        dst_kind[is_copy] = dk[name_id[is_copy]]
    return {"bytes": nbytes, "copy_kind": copy_kind, "src_kind": src_kind, "dst_kind": dst_kind}


def _sync_columns(cc: _Columns, src: np.ndarray, is_sync: np.ndarray, name_id: np.ndarray, names: NameTable) -> dict[str, np.ndarray]:
    """Columns sync_kind, link_stream and link_correlation of the rows (SYNC rows only).

    sync_kind from args.cuda_sync_kind, else from the name; the links from
    args.wait_on_stream / args.wait_on_cuda_event_record_corr_id (-1 when absent or negative).
    """
    m = len(src)
    sync_kind = np.zeros(m, np.int8)
    link_stream = np.full(m, -1, np.int64)
    link_corr = np.full(m, -1, np.int64)
    if is_sync.any():
        srows = np.nonzero(is_sync)[0]
        s_src = src[srows]
        sk_arr = cc.sparse("cuda_sync_kind", s_src, 0, np.int8)
        by_name = np.zeros(len(names.names), np.int8)
        for i in sorted_unique(name_id[srows]).tolist():
            by_name[i] = _SYNC_BY_NAME.get(names.names[i].strip().lower(), 0)
        sk_arr = np.where(sk_arr > 0, sk_arr, by_name[name_id[srows]])
        sync_kind[srows] = sk_arr
        ws = cc.sparse("wait_on_stream", s_src, _ABSENT, np.int64)
        ws = np.where((ws <= _NONNUM) | (ws == _UINT32_MAX) | (ws < 0), -1, ws)
        wc = cc.sparse("wait_on_cuda_event_record_corr_id", s_src, _ABSENT, np.int64)
        wc = np.where((wc <= _NONNUM) | (wc < 0), -1, wc)
        link_stream[srows] = ws
        link_corr[srows] = wc
    return {"sync_kind": sync_kind, "link_stream": link_stream, "link_correlation": link_corr}


def _count_events(acct: Accounting, pairs: _PairInfo, pair_of: np.ndarray, reason: np.ndarray, why: _Reasons) -> None:
    """Count every event in ``acct.read`` (by category), then in ``kept`` or ``skipped`` (by reason)."""
    readkey = pairs.readkey[pair_of]
    nk = len(pairs.readkey_names)
    read_counts = np.bincount(readkey, minlength=nk)
    kept_counts = np.bincount(readkey[reason < 0], minlength=nk)
    skip_counts = np.bincount(reason[reason >= 0], minlength=len(why.names))
    for k, c in zip(pairs.readkey_names, read_counts.tolist()):
        acct.add("read", k, c)
    for k, c in zip(pairs.readkey_names, kept_counts.tolist()):
        acct.add("kept", k, c)
    for k, c in zip(why.names, skip_counts.tolist()):
        acct.add("skipped", k, c)


