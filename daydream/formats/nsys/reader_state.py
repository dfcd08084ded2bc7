"""The state shared by the readers of an export's record kinds.

Skipped rows (refused under ``strict`` unless benign) and notes counted in the accounting, the
emission of kept rows, and the start/end and correlation-id checks every event table shares.
"""

from __future__ import annotations

import numpy as np

from ...errors import TraceFormatError
from ...events.table import DTYPES
from .id_columns import _FAR, _out_of_range
from .sqlite_query import Query

#: skip reasons that are not defects of the input (``strict`` does not refuse them)
_BENIGN_SKIPS = ("metadata", "not waited on", "unsupported eventType")


class ReaderState:
    """What the readers of the record kinds share: the export's queries, the accounting, the
    names, the rows emitted so far, and the common checks of start/end and correlation ids."""

    def __init__(self, path: str, strict: bool, q: Query) -> None:
        self.path = path
        self.strict = strict
        self.q = q
        self.acc = q.acc
        self.names = q.names
        #: emitted rows: (row count, columns: arrays in the table's dtypes, or scalars)
        self.parts: list[tuple[int, dict[str, np.ndarray]]] = []
        #: (process, context, device) of each GPU table's kept rows, to place SYNC rows (sync_events)
        self.ctx_dev: list[np.ndarray] = []

    def skip(self, table: str, reason: str, n: int) -> None:
        if not n:
            return
        if self.strict and not any(reason.startswith(b) for b in _BENIGN_SKIPS):
            raise TraceFormatError(self.path, f"table {table}", f"{n} row(s) with {reason}")
        self.acc.add("skipped", f"{table}: {reason}", n)

    def note(self, table: str, what: str, n) -> None:
        self.acc.add("notes", f"{table}: {what}", int(n))

    def emit(self, table: str, keep: np.ndarray, cols: dict[str, np.ndarray]) -> None:
        n = int(np.count_nonzero(keep))
        self.acc.add("kept", table, n)
        if n:
            # arrays in their table dtype (as the concatenation would cast them), scalars as they
            # are; each column is taken out of ``cols`` (emptied) as its kept rows are copied, so
            # a caller that kept no other reference frees one full-length column at a time
            part = {}
            for c in list(cols):
                a = cols.pop(c)
                part[c] = np.asarray(a)[keep].astype(DTYPES[c], copy=False) if np.ndim(a) else a
                del a
            self.parts.append((n, part))
        cols.clear()

    def intern(self, strings) -> np.ndarray:
        return self.names.intern_many(strings)

    def times(self, table: str, start, start_null, end, end_null):
        """Keep mask after skipping (and counting) rows with a NULL start or end; end < start is clamped and noted."""
        keep = start_null == 0
        self.skip(table, "NULL start", int(np.count_nonzero(~keep)))
        bad_end = keep & (end_null != 0)
        self.skip(table, "NULL end", int(np.count_nonzero(bad_end)))
        keep &= ~bad_end
        far = keep & (_out_of_range(start) | _out_of_range(end))
        self.skip(table, _FAR, int(np.count_nonzero(far)))
        keep &= ~far
        back = keep & (end < start)
        if back.any():
            self.note(table, "end before start (end set to start)", np.count_nonzero(back))
            end = np.where(back, start, end)
        return keep, end

    def corr(self, table: str, corr: np.ndarray, keep: np.ndarray) -> np.ndarray:
        missing = corr <= 0
        n = np.count_nonzero(missing & keep)
        if n:
            self.note(table, "no correlationId (NULL or 0)", n)
        return np.where(missing, -1, corr)
