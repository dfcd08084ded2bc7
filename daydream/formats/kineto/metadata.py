"""Kineto document keys other than ``traceEvents``: the :class:`TraceMeta` and the base time.

``deviceProperties`` -> devices, ``distributedInfo`` -> rank and world size, the other known keys
copied into ``TraceMeta.extra`` as text (invalid UTF-8 in them repaired or, strict, refused), and
``baseTimeNanoseconds`` (int ns, within ``formats.TIME_LIMIT_NS``), added to every time.
"""

from __future__ import annotations

from typing import Any, Optional

import msgspec

from ...errors import TraceFormatError
from ...events.table import Accounting, DeviceInfo, TraceMeta
from .. import TIME_LIMIT_NS, checked_rank
from .projection import _Doc
from .repair import _first_bad_utf8

#: the adapter's name (``TraceMeta.format``); the package re-exports it
NAME = "kineto"

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
