"""The allocator's events of a trace: a columnar side table of the :class:`EventTable`.

One entry per allocation or free the caching allocator reported (Kineto ``[memory]`` instants,
``profile_memory=True``; nsys ``CUDA_GPU_MEMORY_USAGE_EVENTS``). Columns are numpy arrays of one
length, sorted by (``ts_ns``, ``seq``) with ties kept in the reader's order, which is the order the
allocator made them (``docs/memory.md``):

* ``ts_ns`` (int64 ns on the trace clock), ``bytes`` (int64: + allocation, - free), ``addr`` (int64
  block address, -1 unknown), ``total_allocated`` / ``total_reserved`` (int64 bytes the allocator held
  on that device *after* the event, -1 where the trace does not record them: PyTorch before 1.10
  wrote no totals), ``seq`` (int64: the allocator's event index, Kineto ``Ev Idx``, -1 unknown: it
  orders events with the same microsecond timestamp), ``pid``/``tid`` (int64 of the thread that
  called the allocator; tid -1 unknown), ``device`` (int32 GPU index, -1 for host memory).

Quirks the readers keep (never guessed away): a window that starts after the program did sees
frees of blocks allocated before it (bytes < 0 with no allocation of that address), so the running
sum of ``bytes`` alone can go below zero: the level before the window is ``total_allocated -
bytes`` of the first event where totals are recorded, else unknown (``docs/memory.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the columns and their dtypes, in the order they are saved
MEMORY_COLUMNS: dict[str, np.dtype] = {
    "ts_ns": np.dtype(np.int64),
    "bytes": np.dtype(np.int64),
    "addr": np.dtype(np.int64),
    "total_allocated": np.dtype(np.int64),
    "total_reserved": np.dtype(np.int64),
    "seq": np.dtype(np.int64),
    "pid": np.dtype(np.int64),
    "tid": np.dtype(np.int64),
    "device": np.dtype(np.int32),
}
#: prefix of the memory columns' members in a saved table (``EventTable.save``)
SAVED_PREFIX = "memory."


@dataclass(frozen=True)
class MemoryEvents:
    """Columns of the allocator's events (see the module docstring); empty when the trace has none."""

    ts_ns: np.ndarray
    bytes: np.ndarray
    addr: np.ndarray
    total_allocated: np.ndarray
    total_reserved: np.ndarray
    seq: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    device: np.ndarray

    @classmethod
    def empty(cls) -> "MemoryEvents":
        return cls(**{c: np.zeros(0, d) for c, d in MEMORY_COLUMNS.items()})

    @classmethod
    def from_columns(cls, cols: dict[str, np.ndarray], sort: bool = True) -> "MemoryEvents":
        """From arrays of one length (absent columns -1), sorted by (ts_ns, seq), ties stable.

        Raises:
            ValueError: columns of different lengths, an unknown column, or no ``ts_ns``/``bytes``.
        """
        unknown = set(cols) - set(MEMORY_COLUMNS)
        if unknown:
            raise ValueError(f"unknown memory columns: {sorted(unknown)}")
        if "ts_ns" not in cols or "bytes" not in cols:
            raise ValueError("memory events need ts_ns and bytes")
        n = len(cols["ts_ns"])
        out = {}
        for c, d in MEMORY_COLUMNS.items():
            a = np.asarray(cols[c]).astype(d, copy=False) if c in cols else np.full(n, -1, d)
            if a.ndim != 1 or len(a) != n:
                raise ValueError("memory columns differ in length")
            out[c] = a
        if sort and n:
            order = np.lexsort((out["seq"], out["ts_ns"]))
            if not np.all(order[:-1] < order[1:]):
                out = {c: a[order] for c, a in out.items()}
        return cls(**out)

    def __len__(self) -> int:
        return len(self.ts_ns)

    def columns(self) -> dict[str, np.ndarray]:
        return {c: getattr(self, c) for c in MEMORY_COLUMNS}

    def take(self, rows: np.ndarray) -> "MemoryEvents":
        return MemoryEvents(**{c: a[rows] for c, a in self.columns().items()})

    def equals(self, other: "MemoryEvents") -> bool:
        return all(np.array_equal(a, getattr(other, c)) for c, a in self.columns().items())

    @property
    def has_totals(self) -> np.ndarray:
        """bool per event: the trace recorded the allocator's total after it."""
        return self.total_allocated >= 0

    def devices(self) -> list[int]:
        """The distinct devices (-1: host), ascending."""
        return np.unique(self.device).tolist()
