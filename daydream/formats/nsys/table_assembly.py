"""Assembly of an nsys export's event table from the emitted parts.

Every column written straight into its sorted place (the table's row order) from the parts, a
chunk at a time, the parts freed as they go and freed pages given back to the system.
"""

from __future__ import annotations

import functools

import numpy as np

from ...events.table import COLUMNS, DTYPES, MISSING
from .reader_state import ReaderState

#: rows per chunk of the final scatter (bounds its temporary index arrays: 8 MB)
_SCATTER_CHUNK = 1 << 20


def _inverse_permutation(order: np.ndarray) -> np.ndarray:
    """``dest`` with ``dest[order[j]] == j`` (shape ``(n,)``; int32 when ``n`` allows, to save memory)."""
    n = len(order)
    dest = np.empty(n, np.int32 if n < 2**31 else np.intp)
    for a in range(0, n, _SCATTER_CHUNK):
        b = min(a + _SCATTER_CHUNK, n)
        dest[order[a:b]] = np.arange(a, b, dtype=dest.dtype)
    return dest


def _scatter(out: np.ndarray, dest: np.ndarray, at: int, values, n: int | None = None) -> np.ndarray:
    """``out[dest[at + i]] = values[i]`` for the ``n`` rows from ``at`` (``values`` an array of
    ``n`` rows, or a scalar), a chunk at a time; returns ``out``."""
    n = len(values) if n is None else n
    scalar = np.ndim(values) == 0
    for a in range(0, n, _SCATTER_CHUNK):
        b = min(a + _SCATTER_CHUNK, n)
        out[dest[at + a: at + b]] = values if scalar else values[a:b]
    return out


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    """glibc's ``malloc_trim``, or None (another C library, or no ctypes)."""
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (ImportError, OSError, AttributeError):
        return None


def _release_freed_memory() -> None:
    """Give the pages of freed memory back to the system (glibc only; else nothing).

    The parts of the table are freed column by column while the sorted columns are allocated, but
    glibc keeps freed blocks in the middle of its heap mapped, so the process's peak memory grows
    by what the freed parts leave behind (measured: 70-90 MB at 4 M rows, 23 MB at 1 M).
    ``malloc_trim(0)`` unmaps those pages; it frees nothing in use.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def sorted_columns(r: ReaderState, nvtx_open: bool) -> dict[str, np.ndarray]:
    """Every column of the emitted parts in the table's row order, the parts freed as they go
    (unterminated NVTX ranges, when ``nvtx_open``, end at the trace's last timestamp)."""
    cols = {c: _column(r, c) for c in ("kind", "start_ns", "end_ns")}
    # trace end: the latest timestamp of any row; unterminated NVTX ranges end there
    if len(cols["kind"]):
        t_max = int(max(cols["start_ns"].max(), cols["end_ns"].max()))
    else:
        t_max = 0
    if nvtx_open:
        open_rows = cols["end_ns"] == np.iinfo(np.int64).min
        cols["end_ns"][open_rows] = np.maximum(t_max, cols["start_ns"][open_rows])
        if len(cols["kind"]):
            t_max = int(max(t_max, cols["end_ns"].max()))
    neg = np.count_nonzero(cols["start_ns"] < 0) if len(cols["kind"]) else 0
    if neg:
        r.acc.add("notes", "negative start timestamp (before the collection start)", neg)

    # the table's row order (EventTable.from_columns's sort: start, kind, end, ties in adapter
    # order). Each column is then written straight into its sorted places (a scatter through
    # the inverse of the order, a chunk at a time) from its parts, which are freed as it goes:
    # no unsorted copy of a whole column exists beside its sorted one
    dest = None
    if len(cols["kind"]):
        order = np.lexsort((cols["end_ns"], cols["kind"], cols["start_ns"]))
        if not np.all(order[:-1] < order[1:]):
            dest = _inverse_permutation(order)
        del order
    for c in COLUMNS:
        if c in cols:
            col = cols.pop(c)
            cols[c] = col if dest is None else _scatter(np.empty_like(col), dest, 0, col)
            del col
        else:
            cols[c] = _column(r, c, dest)
        _release_freed_memory()
    del dest
    r.parts = []
    _release_freed_memory()  # the inverse order and the emptied parts
    return cols


def _column(r: ReaderState, c: str, dest: np.ndarray | None = None) -> np.ndarray:
    """Column ``c`` of all emitted parts, in emission order (its missing value where a part
    lacks it), taken out of the parts; with ``dest``, emitted row ``i`` is put at ``dest[i]``."""
    out = np.empty(sum(n for n, _ in r.parts), DTYPES[c])
    at = 0
    for n, part in r.parts:
        values = part.pop(c) if c in part else MISSING[c]
        if dest is None:
            out[at: at + n] = values
        else:
            _scatter(out, dest, at, values, n)
        del values
        at += n
    return out
