"""A saved event table (``daydream-analyze TRACE --save-table FILE.npz``), reloaded without parsing."""

from __future__ import annotations

from ..events import EventTable

NAME = "saved-table"
DESCRIPTION = "daydream saved event table (.npz, written by --save-table)"
ZIP_MAGIC = b"PK\x03\x04"


def sniff(head: bytes, path: str) -> bool:
    return head[:4] == ZIP_MAGIC


def load(path: str, *, strict: bool = False) -> EventTable:
    """Load a table written by :meth:`EventTable.save`.

    Raises:
        TraceFormatError: not a saved table, or one of another schema version.
    """
    return EventTable.load(path)
