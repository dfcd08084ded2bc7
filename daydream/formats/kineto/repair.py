"""Kineto whole-document decode, with the document repairs (package docstring, "Document repairs").

The document is decoded into the msgspec projection at once; each error msgspec reports is
repaired where it can be (a truncated file salvaged after its last complete event, ``NaN``/
``Infinity`` read as null, trailing commas dropped, bytes that are not UTF-8 replaced by U+FFFD),
each repair counted in ``Accounting.notes``; with ``strict=True`` each raises
:class:`TraceFormatError` instead, as does anything that cannot be repaired.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Any, Optional

import msgspec

from ...errors import TraceFormatError
from ...events.table import Accounting
from .projection import _Doc, _Event

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
