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

Fast paths (``times._FAST``; each keeps its reference beside it and ``tests/test_kineto_fast.py`` loads
every Kineto trace both ways and compares the tables): slices are decoded as ``_IntEvent`` where they
fit (known categories as literals, no floats in the integer fields, so columns need no type pass),
else as ``_Event``; ts/dur texts are parsed from one joined buffer by numpy's C integer parser
(:func:`.times._us_join_parse`); (ph, cat) pairs are interned through one id per ph and per cat; sparse
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
a vectorized decimal parser (:func:`.times._us_join_parse`, else :func:`.times._us_text_to_ns`'s byte
matrix or compiled kernel), so they are exact whatever their magnitude (no float rounding; more
than 3 decimals round half away from zero). ``baseTimeNanoseconds`` (newer traces) is added.

Document repairs
----------------
With ``strict=False`` (default) the adapter salvages what a crashed or hand-edited file holds:
a truncated file (no closing ``]}``) keeps the complete events before the cut and warns; ``NaN``/
``Infinity`` literals are read as null; trailing commas before ``]``/``}`` are dropped; bytes that
are not UTF-8 (a name copied from a file system in another encoding) become U+FFFD. Each repair
is counted in ``Accounting.notes``. With ``strict=True`` each of them raises
:class:`TraceFormatError` instead.

Parts
-----
This package keeps the reader's face (:func:`sniff`, :func:`load`); its parts, each below the next:
:mod:`.times` (ts/dur texts to ns, and the ``_FAST`` switch), :mod:`.projection` (the msgspec
structs and their fields as int64), :mod:`.categories` (what each (ph, cat) pair is),
:mod:`.columns` (per-event columns, a slice of events at a time), :mod:`.flows` (launch flows),
:mod:`.rows` (the rows and the table), :mod:`.repair` (the whole-document decode and its repairs),
:mod:`.metadata` (the keys other than ``traceEvents``) and :mod:`.stream` (the streaming reader,
tried first).
"""

from __future__ import annotations

import re
import warnings

from ...errors import TraceFormatError
from ...events.table import Accounting, EventTable
from .. import read_maybe_gzip
from .metadata import NAME, _base_time_ns, _meta  # noqa: F401 (NAME: the adapter's, and TraceMeta.format)
from .repair import _decode
from .rows import _OUT_OF_RANGE, _build
from .stream import _gc_paused, _load_streaming, _small_pages

DESCRIPTION = "PyTorch profiler / Kineto Chrome-trace JSON (.json, .json.gz)"


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
