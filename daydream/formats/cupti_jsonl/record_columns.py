"""Columns of decoded cupti-jsonl records.

Int64 and object columns of a field (ABSENT for a missing one, an error naming the line for a
value beyond int64), defaults, and the sorted-array key lookups every join uses.
"""

from __future__ import annotations

import itertools
import operator
import re
from operator import attrgetter

import numpy as np

from ...errors import TraceFormatError
from .cupti_codes import ABSENT, INVALID32


class _OutOfRange(Exception):
    """An integer field beyond int64 (``load`` names its line)."""

    def __init__(self, kind: str, attr: str, value: int) -> None:
        super().__init__(kind, attr, value)
        self.kind, self.attr, self.value = kind, attr, value


def _ints(objs: list, attr: str) -> np.ndarray:
    """int64 column of ``attr`` over ``objs`` (dotted names allowed).

    Raises _OutOfRange for a value outside int64 (2**64-1 would otherwise wrap to -1, "absent").
    """
    get = attrgetter(attr)
    try:
        return np.fromiter(map(get, objs), dtype=np.int64, count=len(objs))
    except OverflowError:
        for o in objs:
            v = get(o)
            if isinstance(v, int) and not -(1 << 63) <= v < (1 << 63):
                raise _OutOfRange(getattr(o, "kind", "?"), attr, v) from None
        raise


def _objs(objs: list, attr: str) -> np.ndarray:
    return np.fromiter(map(attrgetter(attr), objs), dtype=object, count=len(objs))


def _isnone(a: np.ndarray) -> np.ndarray:
    return np.fromiter(map(operator.is_, a, itertools.repeat(None)), dtype=bool, count=len(a))


def _or(a: np.ndarray, default: int) -> np.ndarray:
    return np.where(a == ABSENT, default, a)


def _stream(a: np.ndarray) -> np.ndarray:
    return np.where((a == ABSENT) | (a == INVALID32), -1, a)


def _last_per_key(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct keys, index of each key's last occurrence)."""
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    last = np.ones(len(sk), dtype=bool)
    last[:-1] = sk[1:] != sk[:-1]
    return sk[last], order[last]


def _lookup(ukeys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Position of each query in the sorted distinct ``ukeys``, -1 where absent."""
    if len(ukeys) == 0:
        return np.full(len(query), -1, dtype=np.int64)
    pos = np.minimum(np.searchsorted(ukeys, query), len(ukeys) - 1)
    return np.where(ukeys[pos] == query, pos, -1)


def _codes(*cols: np.ndarray) -> np.ndarray:
    """Dense int codes of the rows of several equal-length key columns."""
    if len(cols[0]) == 0:
        return np.zeros(0, dtype=np.int64)
    _, inv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
    return inv.reshape(-1).astype(np.int64)


def _occurrence(keys: np.ndarray) -> np.ndarray:
    """For each element: how many earlier elements have the same key (0 for the first)."""
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    first = np.ones(n, dtype=bool)
    first[1:] = sk[1:] != sk[:-1]
    start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    out = np.empty(n, dtype=np.int64)
    out[order] = np.arange(n) - start
    return out


def _names_by_key(fn, *keys: np.ndarray) -> np.ndarray:
    """Object array of ``fn(*key)`` per element of the key columns, calling fn once per distinct key."""
    if len(keys[0]) == 0:
        return np.zeros(0, dtype=object)
    u, inv = np.unique(np.stack(keys, axis=1), axis=0, return_inverse=True)
    out = np.empty(len(u), dtype=object)
    out[:] = [fn(*k) for k in u.tolist()]
    return out[inv.reshape(-1)]


def _fill_names(names: np.ndarray, missing: np.ndarray, defaults) -> np.ndarray:
    if missing.any():
        names = names.copy()
        names[missing] = defaults(missing)
    return names


def _out_of_range_error(path: str, data: bytes, e: _OutOfRange) -> TraceFormatError:
    """The error for an integer beyond int64, naming the first line that holds its text."""
    field = e.attr.rsplit(".", 1)[-1]
    at = re.search(rb'"%s"\s*:\s*%d(?![0-9])' % (re.escape(field.encode()), e.value), data)
    where = "line %d" % (data.count(b"\n", 0, at.start()) + 1) if at else ""
    return TraceFormatError(
        path, where, f"{e.kind} record: {e.attr} = {e.value} is outside the 64-bit signed integer range (the record is "
        "damaged, or a 64-bit unsigned value was written as-is); fix or drop the record")
