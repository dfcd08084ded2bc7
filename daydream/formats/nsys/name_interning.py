"""Text columns of an nsys export -> name ids.

Fetched text columns (row by row from sqlite3, or dictionary-encoded from Arrow) interned into the
table's :class:`NameTable`, in order of first appearance either way, so both paths give the same
ids; NULLs become the column's default string and are returned as a mask.
"""

from __future__ import annotations

import itertools
import operator

import numpy as np

from ...events.table import NameTable


def _texts(col, default: str) -> list[str]:
    """Strings of a fetched text column: NULL -> ``default``; blobs decoded; numbers as text."""
    return [default if v is None else v if type(v) is str
            else v.decode("utf-8", "replace") if isinstance(v, (bytes, bytearray)) else str(v) for v in col]


def intern_texts(names: NameTable, col: list, default: str) -> tuple[np.ndarray, np.ndarray]:
    """(interned ids of ``_texts(col, default)``, mask of the NULLs) of one fetched text column."""
    null = np.fromiter(map(operator.is_, col, itertools.repeat(None)), dtype=bool, count=len(col))
    strings = col if set(map(type, col)) == {str} else _texts(col, default)
    return names.intern_many(strings), null


def intern_codes(names: NameTable, codes: np.ndarray, values: list[str], default: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`intern_texts` of a dictionary-encoded column (``codes`` into ``values``, -1 NULL).

    Interns in order of first appearance in the rows, as the row-by-row path does, so the
    name ids are the same.
    """
    null = codes < 0
    if not len(codes):
        return np.zeros(0, np.int32), null
    key = np.where(null, np.int32(len(values)), codes).astype(np.int32, copy=False)
    strings = values + [default]
    run_max = np.maximum.accumulate(codes)
    if codes[0] <= 0 and np.all(codes[1:] <= run_max[:-1] + 1):
        # values already in order of first appearance (Arrow's hash encoding): only the
        # default's place is to find, after the values seen before the first NULL
        first_null = int(np.argmax(null)) if null.any() else len(codes)
        m = int(run_max[first_null - 1]) + 1 if first_null > 0 else 0
        seq = list(range(m)) + ([len(values)] if first_null < len(codes) else []) + list(range(m, len(values)))
    else:
        uniq, first = np.unique(key, return_index=True)
        seq = uniq[np.argsort(first)].tolist()
    lut = np.zeros(len(strings), np.int32)
    lut[seq] = names.intern_many([strings[i] for i in seq])
    return lut[key], null
