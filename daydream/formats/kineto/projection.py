"""Kineto events as decoded: the msgspec projections of the fields read, and those fields as int64.

The structs project only the fields the reader uses (everything else is skipped by msgspec):
``_Event``/``_Doc`` take any JSON value, ``_IntEvent``/``_IntDoc`` (the fast path) only ints and the
known categories, so that their columns need no type check per value. A field that is absent or
null reads as ``_ABSENT``, one that is not a number as ``_NONNUM`` (:func:`_int_column`).
"""

from __future__ import annotations

import operator
import re
from typing import Any, Literal, Optional, Union

import msgspec
import numpy as np

from . import times
from .times import _INT64_MAX

#: int sentinel of a field that is absent (or JSON null)
_ABSENT = -(2**63)
#: int sentinel of a field that is present but not a number ("Spans", "PyTorch Profiler")
_NONNUM = -(2**63) + 1
_NO_RAW = msgspec.Raw(b"")


_Num = Union[int, float, str, None]
#: the args fields read: (attribute, JSON key when it differs)
_ARG_FIELDS = (
    ("device", None), ("stream", None), ("correlation", None), ("external_id", "External id"),
    ("external_id_legacy", "external id"), ("bytes", None), ("cuda_sync_kind", None), ("wait_on_stream", None),
    ("wait_on_cuda_event_record_corr_id", None),
    ("daydream_pid", None),  # written by daydream's timeline on GPU tasks and sync records
    # the allocator's ``[memory]`` instants (``profile_memory=True``; :mod:`.memory_events`)
    ("mem_bytes", "Bytes"), ("mem_addr", "Addr"), ("mem_device_type", "Device Type"), ("mem_device_id", "Device Id"),
    ("mem_total_allocated", "Total Allocated"), ("mem_total_reserved", "Total Reserved"), ("mem_seq", "Ev Idx"),
)


def _args_struct(name: str, num, typed: bool) -> type:
    """The ``args`` projection with ``num`` as the type of its numeric fields (``cuda_sync_kind``
    may be a string in every projection); absent fields hold ``_ABSENT``. With them, the launch
    facts (:class:`~daydream.formats.launch_data.LaunchFacts`): ``grid``, ``block``, ``registers per
    thread``, ``shared memory`` (``typed``: ints, 3 for grid and block; else any JSON value, cleaned
    as :mod:`.launch_data` cleans them), and the op's ``Input Dims`` / ``Input type`` as raw text."""
    launch = [("grid", tuple[int, int, int] if typed else Any, (-1, -1, -1) if typed else None, None),
              ("block", tuple[int, int, int] if typed else Any, (-1, -1, -1) if typed else None, None),
              ("regs", _Int if typed else Any, _ABSENT if typed else None, "registers per thread"),
              ("smem", _Int if typed else Any, _ABSENT if typed else None, "shared memory"),
              ("dims", msgspec.Raw, _NO_RAW, "Input Dims"), ("types", msgspec.Raw, _NO_RAW, "Input type")]
    return msgspec.defstruct(name, [(f, _Num if f == "cuda_sync_kind" else num,
                                     msgspec.field(default=_ABSENT, name=key) if key else _ABSENT) for f, key in _ARG_FIELDS]
                             + [(f, t, msgspec.field(default=d, name=key) if key else d) for f, t, d, key in launch],
                             frozen=True, gc=False, module=__name__)


def _event_struct(name: str, args: type, cat, num, null_args: bool = False) -> type:
    """An event projection: ``cat`` and ``num`` (pid, tid) types, ``ts``/``dur`` as raw number text,
    ``id`` the flow id (flow events only), ``bp`` the flow binding point ("e": the enclosing slice).
    ``null_args``: ``"args": null`` is accepted (decoded as None, read as no args)."""
    return msgspec.defstruct(name, [
        ("ph", Optional[str], None), ("cat", cat, None), ("name", Optional[str], None), ("pid", num, _ABSENT),
        ("tid", num, _ABSENT), ("ts", msgspec.Raw, _NO_RAW), ("dur", msgspec.Raw, _NO_RAW), ("args", Optional[args] if null_args else args, args()),
        ("id", Any, None), ("bp", Optional[str], None)], gc=False, module=__name__)


_Args = _args_struct("_Args", _Num, False)
# the fast path's projection (``_FAST``): the same fields, with types that let the columns be read
# without a type check per value: no floats in the integer fields (``np.fromiter`` would truncate
# them), the known categories as literals (msgspec returns one cached string per category, so
# interning them hashes nothing). A slice it does not fit is decoded with ``_Event`` instead.
_Int = Union[int, None]
_IntStr = Union[int, str, None]
#: categories seen in real traces (../shared/traces), spelled as written
_KNOWN_CATS = (
    "cpu_op", "ac2g", "python_function", "cuda_runtime", "cpu_instant_event", "kernel", "Operator", "async",
    "Runtime", "Kernel", "gpu_memcpy", "user_annotation", "gpu_memset", "fwdbwd", "cuda_driver", "Memset",
    "cuda_sync", "cuda_profiler_range", "gpu_user_annotation", "Trace", "Memcpy", "overhead", "cuda_event",
)
_IntArgs = _args_struct("_IntArgs", _Int, True)
_IntEvent = _event_struct("_IntEvent", _IntArgs, Optional[Literal[_KNOWN_CATS]], _IntStr)


class _SliceDecoder:
    """Decodes a slice of events as ``_IntEvent`` (fast path) where it fits, else as ``_Event``.

    After ``_MAX_MISSES`` slices that did not fit, only ``_Event`` is tried (bounds the cost of
    decoding a slice twice on traces that use other categories or float ids).
    """

    _MAX_MISSES = 2

    def __init__(self) -> None:
        self.generic = msgspec.json.Decoder(list[_Event])
        self.typed = msgspec.json.Decoder(list[_IntEvent]) if times._FAST else None
        self.misses = 0

    def decode(self, text) -> tuple[list, bool]:
        """(events, typed?); raises msgspec.DecodeError where ``_Event`` cannot decode ``text``."""
        if self.typed is not None and self.misses < self._MAX_MISSES:
            try:
                return self.typed.decode(text), True
            except msgspec.ValidationError:
                self.misses += 1
        return self.generic.decode(text), False


# ``"args": null`` does not fit ``_IntEvent`` (its slice is decoded as ``_Event``, which takes it)
_Event = _event_struct("_Event", _Args, Optional[str], _Num, null_args=True)
#: the ``args`` an event without them holds (typed projection? -> that projection's default)
_NO_EVENT_ARGS = {t: next(f.default for f in msgspec.structs.fields(e) if f.name == "args") for t, e in ((True, _IntEvent), (False, _Event))}


def _generic_args(events) -> list:
    """The ``args`` of ``_Event``s, ``"args": null`` read as none (the projection's default)."""
    args = list(map(operator.attrgetter("args"), events))
    return args if None not in args else [_NO_EVENT_ARGS[False] if a is None else a for a in args]


class _Doc(msgspec.Struct, gc=False):
    traceEvents: Optional[list[_Event]] = None
    deviceProperties: msgspec.Raw = _NO_RAW
    distributedInfo: msgspec.Raw = _NO_RAW
    baseTimeNanoseconds: msgspec.Raw = _NO_RAW
    schemaVersion: msgspec.Raw = _NO_RAW
    cupti_version: msgspec.Raw = _NO_RAW
    cuda_runtime_version: msgspec.Raw = _NO_RAW
    cuda_driver_version: msgspec.Raw = _NO_RAW
    trace_id: msgspec.Raw = _NO_RAW
    displayTimeUnit: msgspec.Raw = _NO_RAW
    record_shapes: msgspec.Raw = _NO_RAW
    with_stack: msgspec.Raw = _NO_RAW
    with_modules: msgspec.Raw = _NO_RAW
    profile_memory: msgspec.Raw = _NO_RAW
    traceName: msgspec.Raw = _NO_RAW


class _IntDoc(_Doc, gc=False):
    """``_Doc`` with the fast path's events (see ``_IntEvent``)."""

    traceEvents: Optional[list[_IntEvent]] = None


_INT_DOC = msgspec.json.Decoder(_IntDoc)


# ---------------------------------------------------------------------------------------------
# vectorized column helpers
# ---------------------------------------------------------------------------------------------
_STREAM_TID = re.compile(r"stream\s+(-?\d+)(?:\s*\(.*\))?\s*$", re.I)


def _scalar_to_int(v: Any) -> int:
    """One JSON scalar as int64: _ABSENT for absent/null, _NONNUM for non-numbers."""
    if v is None:
        return _ABSENT
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v if (_NONNUM < v <= _INT64_MAX or v == _ABSENT) else _NONNUM
    if isinstance(v, float):
        if v.is_integer() and -(2.0**63) < v < 2.0**63:
            return int(v)
        return _NONNUM
    if isinstance(v, str):
        s = v.strip()
        for base in (0, 10):
            try:
                x = int(s, base)
                return x if _NONNUM < x <= _INT64_MAX else _NONNUM
            except ValueError:
                pass
        m = _STREAM_TID.match(s)
        if m:
            return int(m.group(1))
    return _NONNUM


def _int_column(values: list, n: int, may_be_str: bool = False) -> np.ndarray:
    """int64 column from a list of JSON scalars (absent -> _ABSENT, non-number -> _NONNUM).

    Plain ints take the C fast path; anything else is converted once per distinct value.
    (``may_be_str``: unused, the signature of :func:`_int_column_typed`.)
    """
    if n == 0:
        return np.zeros(0, np.int64)
    types = set(map(type, values))
    if types <= {int, bool}:
        try:
            return np.fromiter(values, dtype=np.int64, count=n)
        except OverflowError:
            pass
    conv = {v: _scalar_to_int(v) for v in set(values)}
    return np.fromiter(map(conv.__getitem__, values), dtype=np.int64, count=n)


def _int_column_typed(values: list, n: int, may_be_str: bool = False) -> np.ndarray:
    """:func:`_int_column` of values that are ints, None or (``may_be_str``) strings, never
    floats or bools (an ``_IntEvent`` field): ``np.fromiter`` alone where it takes them all.

    numpy converts a string as ``int(s)`` does, which is :func:`_scalar_to_int`'s value wherever
    it succeeds, except for the sentinels' range: a column of strings with a value at or below
    ``_NONNUM`` is converted the reference way. None (and any string numpy refuses) raises, and
    the column is converted the reference way.
    """
    try:
        a = np.fromiter(values, np.int64, count=n)
    except (TypeError, ValueError, OverflowError):
        return _int_column(values, n)
    if may_be_str and n and int(a.min()) <= _NONNUM:
        return _int_column(values, n)
    return a


def _int_attr(objs, attr: str, n: int, typed: bool, may_be_str: bool = False) -> np.ndarray:
    """:func:`_int_column_typed` (``typed``) or :func:`_int_column` of attribute ``attr`` of the
    ``n`` objects ``objs`` (the same values): typed, ``np.fromiter`` reads the attribute straight
    from the objects (no list of the values; measured ~8 ns an event less), and only where it
    refuses them, or (``may_be_str``) a value is at or below ``_NONNUM``, the values are listed and
    converted the reference way."""
    get = operator.attrgetter(attr)
    if typed and n:
        try:
            a = np.fromiter(map(get, objs), np.int64, count=n)
        except (TypeError, ValueError, OverflowError):
            pass
        else:
            if not (may_be_str and int(a.min()) <= _NONNUM):
                return a
    return _int_column(list(map(get, objs)), n)


def _missing_to(a: np.ndarray, fill: int = -1) -> np.ndarray:
    return np.where(a <= _NONNUM, fill, a)
