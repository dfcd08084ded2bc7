"""Kineto event categories: what each distinct (ph, cat) pair of a trace is.

The vocabulary of the package docstring's "How events become rows": the row kind of each category,
the categories that live on a GPU stream or are skipped (with the reason counted in the accounting),
the launch and fwdbwd flow categories, the event classes (row, instant, B, E, skipped), and the
sync kinds and memcpy kinds read from event names and ``args``. Python work per distinct pair or
name, never per event.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from ...events.table import CopyKind, Kind, MemKind, SyncKind
from ..launch_data import LAUNCH_CATEGORIES as _LAUNCH_CATS

#: lower-cased category -> row kind
_CAT_KIND: dict[str, Kind] = {
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "cuda_runtime": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "cuda_driver": Kind.RUNTIME,
    "kernel": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
    "cuda_sync": Kind.SYNC,
    "user_annotation": Kind.RANGE,
    "gpu_user_annotation": Kind.RANGE,
    "python_function": Kind.RANGE,
    "cpu_instant_event": Kind.MARKER,
}
#: lower-cased categories whose rows live on a GPU stream
_GPU_CATS = frozenset({"kernel", "gpu_memcpy", "memcpy", "gpu_memset", "memset", "cuda_sync", "gpu_user_annotation"})
#: lower-cased categories skipped on purpose, with their reason
_CAT_SKIP: dict[str, str] = {
    "trace": "trace span (cat 'Trace')",
    "overhead": "profiler overhead event (cat 'overhead')",
    "cuda_event": "cuda_event record (event links come from cuda_sync args)",
}
_LAUNCH_FLOW_CATS = frozenset({"ac2g", "async", "async_gpu", "async_cpu_to_gpu"})
_FLOW_ID_TYPES = frozenset({int, float, str, bool, type(None)})
_FWDBWD_FLOW_CATS = frozenset({"fwdbwd", "fwd_bwd", "forward_backward"})
_SYNC_BY_NAME: dict[str, int] = {
    "stream sync": SyncKind.STREAM_SYNC,
    "event sync": SyncKind.EVENT_SYNC,
    "context sync": SyncKind.CONTEXT_SYNC,
    "stream wait event": SyncKind.STREAM_WAIT_EVENT,
}
_COPY_BY_NAME: dict[str, int] = {k.name.lower(): int(k) for k in CopyKind if k != CopyKind.UNKNOWN}  # "htod": 1, ...
_MEM_BY_NAME: dict[str, int] = {
    "pageable": MemKind.PAGEABLE,
    "pinned": MemKind.PINNED,
    "device": MemKind.DEVICE,
    "array": MemKind.ARRAY,
    "managed": MemKind.MANAGED,
    "device static": MemKind.DEVICE_STATIC,
    "managed static": MemKind.MANAGED_STATIC,
}
_MEMCPY_NAME = re.compile(r"memcpy\s+([a-z]+)(?:\s*\(\s*([a-z ]+?)\s*->\s*([a-z ]+?)\s*\))?", re.I)
# classes of events
_C_ROW, _C_INSTANT, _C_B, _C_E, _C_SKIP = 0, 1, 2, 3, 4


# ---------------------------------------------------------------------------------------------
# classification of a (ph, cat) pair, and of sync and memcpy names
# ---------------------------------------------------------------------------------------------
class _Reasons:
    """Interned skip reasons -> small int codes."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._ids: dict[str, int] = {}

    def __call__(self, s: str) -> int:
        i = self._ids.get(s)
        if i is None:
            i = self._ids[s] = len(self.names)
            self.names.append(s)
        return i


def _classify(ph: Optional[str], cat: Optional[str], why: _Reasons) -> tuple[int, int, bool, int]:
    """(class, kind or -1, on a GPU stream, skip reason or -1) of a distinct (ph, cat) pair."""
    lc = cat.lower() if isinstance(cat, str) else None
    if ph in ("X", "B"):
        if lc is None:  # a B without cat still takes part in the pairing, then is skipped
            return (_C_SKIP if ph == "X" else _C_B), -1, False, why(f"ph {ph} event without cat")
        if lc in _CAT_KIND:
            return (_C_ROW if ph == "X" else _C_B), int(_CAT_KIND[lc]), lc in _GPU_CATS, -1
        if lc in _CAT_SKIP:
            r = why(_CAT_SKIP[lc])
        else:
            r = why(f"unknown category '{cat}'")
        return (_C_SKIP if ph == "X" else _C_B), -1, False, r
    if ph == "E":
        return _C_E, -1, False, -1
    if ph in ("i", "I"):
        return _C_INSTANT, int(Kind.MARKER), False, -1
    if ph in ("s", "t", "f"):
        if lc in _LAUNCH_FLOW_CATS:
            return _C_SKIP, -1, False, why(f"flow event ({cat}): not a row; read as a launch link where args.correlation is missing")
        if lc in _FWDBWD_FLOW_CATS:
            return _C_SKIP, -1, False, why(f"{cat} flow (not used by this version)")
        return _C_SKIP, -1, False, why(f"flow event (cat '{cat}') not used")
    if ph == "M":
        return _C_SKIP, -1, False, why("metadata event (ph M: process/thread names)")
    if ph == "C":
        return _C_SKIP, -1, False, why("counter event (ph C) not used")
    if ph is None:
        return _C_SKIP, -1, False, why("event without ph")
    return _C_SKIP, -1, False, why(f"event phase '{ph}' not used")


def _launch_class(cat: Optional[str]) -> int:
    """1 for a kernel event, 0 for an op event, -1 otherwise, by category as
    :mod:`.launch_data` tells them (``kernel``, ``cpu_op``, ``operator``, any case)."""
    return _LAUNCH_CATS.get(cat.lower(), -1) if isinstance(cat, str) else -1


def _is_launch_flow_end(ph: Optional[str], cat: Optional[str]) -> bool:
    """True for the start (``s``) or finish (``f``) of a launch flow (``ac2g``, legacy ``async``)."""
    return ph in ("s", "f") and isinstance(cat, str) and cat.lower() in _LAUNCH_FLOW_CATS


def _sync_kind_value(v: Any) -> int:
    if isinstance(v, str):
        return _SYNC_BY_NAME.get(v.strip().lower(), 0)
    if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= int(SyncKind.CONTEXT_SYNC):
        return v
    return 0


def _parse_memcpy_name(name: str) -> tuple[int, int, int]:
    """(CopyKind, src MemKind, dst MemKind) from a name like 'Memcpy DtoH (Device -> Pageable)'."""
    m = _MEMCPY_NAME.search(name)
    if not m:
        return 0, 0, 0
    ck = _COPY_BY_NAME.get(m.group(1).lower(), 0)
    sk = _MEM_BY_NAME.get((m.group(2) or "").strip().lower(), 0)
    dk = _MEM_BY_NAME.get((m.group(3) or "").strip().lower(), 0)
    return ck, sk, dk
