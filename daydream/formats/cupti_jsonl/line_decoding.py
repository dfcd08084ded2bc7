"""Decoding a cupti-jsonl dump's lines.

The header line (format and version checked), and every record line into one flat msgspec struct
whose absent integers read as ABSENT, malformed lines found, counted or refused.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import msgspec

from ...errors import TraceFormatError
from ...events.table import Accounting
from .cupti_codes import ABSENT, FORMAT_VERSION, USED_KINDS
from .line_schema import Header

_Int = Annotated[int, msgspec.Meta(ge=-(1 << 63) + 1)]  # msgspec itself rejects values above uint64


class _ObjectId(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    processId: _Int = ABSENT
    threadId: _Int = ABSENT
    deviceId: _Int = ABSENT
    contextId: _Int = ABSENT
    streamId: _Int = ABSENT


class _Over(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    start_ns: _Int = ABSENT
    end_ns: _Int = ABSENT
    pid: _Int = ABSENT
    tid: _Int = ABSENT
    device: _Int = ABSENT
    stream: _Int = ABSENT
    correlation: _Int = ABSENT
    bytes: _Int = ABSENT
    copy_kind: _Int = ABSENT
    src_kind: _Int = ABSENT
    dst_kind: _Int = ABSENT
    sync_kind: _Int = ABSENT
    link_stream: _Int = ABSENT
    link_correlation: _Int = ABSENT


_NO_OBJECT = _ObjectId()


_NO_OVER = _Over()


#: override fields, in the order the reader applies them (all of them EventTable columns)
OVERRIDE_COLUMNS = tuple(f.name for f in msgspec.structs.fields(_Over))


class _Line(msgspec.Struct, omit_defaults=True, gc=False):
    """Every field the reader uses, of every record kind; unknown fields are ignored."""

    kind: str
    name: Optional[str] = None
    cat: Optional[str] = None
    cbid: _Int = ABSENT
    domain: Optional[str] = None
    start: _Int = ABSENT
    end: _Int = ABSENT
    timestamp: _Int = ABSENT
    processId: _Int = ABSENT
    threadId: _Int = ABSENT
    deviceId: _Int = ABSENT
    contextId: _Int = ABSENT
    streamId: _Int = ABSENT
    correlationId: _Int = ABSENT
    bytes: _Int = ABSENT
    copyKind: _Int = ABSENT
    srcKind: _Int = ABSENT
    dstKind: _Int = ABSENT
    memoryKind: _Int = ABSENT
    flags: _Int = ABSENT
    type: _Int = ABSENT
    cudaEventId: _Int = ABSENT
    cudaEventSyncId: _Int = ABSENT
    eventId: _Int = ABSENT
    id: _Int = ABSENT
    objectKind: _Int = ABSENT
    objectId: _ObjectId = _NO_OBJECT
    externalKind: _Int = ABSENT
    externalId: _Int = ABSENT
    computeCapabilityMajor: _Int = ABSENT
    computeCapabilityMinor: _Int = ABSENT
    numMultiprocessors: _Int = ABSENT
    globalMemorySize: _Int = ABSENT
    # kernel launch configuration: read only by launch_data (per-kernel models), cleaned there;
    # untyped so that an odd value never makes a kernel record malformed
    gridX: Any = None
    gridY: Any = None
    gridZ: Any = None
    blockX: Any = None
    blockY: Any = None
    blockZ: Any = None
    registersPerThread: Any = None
    staticSharedMemory: Any = None
    dynamicSharedMemory: Any = None
    daydream: _Over = _NO_OVER


class _KindOnly(msgspec.Struct):
    kind: str


_LINE_DECODER = msgspec.json.Decoder(_Line)


_KIND_DECODER = msgspec.json.Decoder(_KindOnly)


def _read_header(path: str, data: bytes) -> tuple[Header, int, int]:
    """(header, byte offset of the line after it, its line number)."""
    pos = 0
    if data.startswith(b"\xef\xbb\xbf"):
        pos = 3
    lineno = 1
    while True:  # skip leading blank lines
        nl = data.find(b"\n", pos)
        line = data[pos:] if nl < 0 else data[pos:nl]
        if line.strip() or nl < 0:
            break
        pos, lineno = nl + 1, lineno + 1
    if not line.strip():
        raise TraceFormatError(path, "", "the file is empty")
    where = f"line {lineno}"
    try:
        obj = msgspec.json.decode(line)
    except msgspec.DecodeError as e:
        raise TraceFormatError(path, where, f"not a cupti-jsonl header (not JSON: {e})") from None
    if not isinstance(obj, dict) or obj.get("kind") != "HEADER":
        raise TraceFormatError(path, where, 'missing cupti-jsonl header: the first line must be {"kind":"HEADER","format":"cupti-jsonl","version":1,...}')
    if obj.get("format") != "cupti-jsonl":
        raise TraceFormatError(path, where, f"header names format {obj.get('format')!r}, not 'cupti-jsonl'")
    v = obj.get("version")
    if not isinstance(v, int) or isinstance(v, bool):
        raise TraceFormatError(path, where, f"header version {v!r} is not an integer (this daydream reads \"version\": {FORMAT_VERSION})")
    if v != FORMAT_VERSION:
        raise TraceFormatError(path, where, f"cupti-jsonl version {v!r}; this daydream reads version {FORMAT_VERSION}")
    try:
        header = msgspec.json.decode(line, type=Header)
    except msgspec.ValidationError as e:
        raise TraceFormatError(path, where, f"bad header field: {e}") from None
    return header, (len(data) if nl < 0 else nl + 1), lineno


def decode_records(path: str, data: bytes, start: int, first_lineno: int, strict: bool, acc: Accounting) -> tuple[list[_Line], list[int]]:
    """Decode every line from byte ``start`` on; returns (records, line numbers of bad lines).

    Fast path: one ``decode_lines`` call. If any line fails, every line is decoded on its own to
    find the bad ones: a line that is not JSON, or whose field types do not fit a record kind
    daydream reads, is malformed (TraceFormatError when ``strict``, else skipped and counted). A
    record of a kind daydream does not read is only counted, whatever its fields.
    """
    body = memoryview(data)[start:]
    try:
        return _LINE_DECODER.decode_lines(body), []
    except msgspec.DecodeError:
        pass
    recs: list[_Line] = []
    bad: list[int] = []
    for i, line in enumerate(bytes(body).split(b"\n")):
        if not line.strip():
            continue
        try:
            recs.append(_LINE_DECODER.decode(line))
            continue
        except msgspec.DecodeError as e:
            err = e
        try:
            k = _KIND_DECODER.decode(line).kind
        except msgspec.DecodeError:
            k = None
        if k is not None and k not in USED_KINDS:
            recs.append(_Line(kind=k))  # counted and skipped as its kind
            continue
        lineno = first_lineno + i
        if strict:
            raise TraceFormatError(path, f"line {lineno}", f"malformed record ({err})")
        bad.append(lineno)
        acc.add("read", "malformed line", 1)
        acc.add("skipped", "malformed line", 1)
    return recs, bad
