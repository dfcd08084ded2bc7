"""Build small EventTables by hand for graph and simulator tests."""

from __future__ import annotations

from daydream.events.table import COLUMNS, MISSING, EventTable, Kind, NameTable


class TB:
    """Accumulates rows; ``table()`` returns the EventTable."""

    def __init__(self, pid: int = 100) -> None:
        self.rows: list[dict] = []
        self.names = NameTable()
        self.pid = pid
        self._corr = 0

    def _row(self, **kw) -> int:
        r = {c: MISSING[c] for c in COLUMNS}
        name = kw.pop("name")
        cat = kw.pop("cat", "")
        r["name_id"] = self.names.intern(name)
        r["cat_id"] = self.names.intern(cat)
        r.update(kw)
        self.rows.append(r)
        return len(self.rows) - 1

    def call(self, name: str, start: int, end: int, tid: int = 1, corr: int | None = None) -> int:
        if corr is None:
            self._corr += 1
            corr = self._corr
        self._row(kind=Kind.RUNTIME, name=name, cat="cuda_runtime", start_ns=start, end_ns=end, pid=self.pid, tid=tid, correlation=corr)
        return corr

    def gpu(self, corr: int, start: int, end: int, stream: int = 7, kind: Kind = Kind.KERNEL, name: str = "k", device: int = 0, **kw) -> None:
        self._row(kind=kind, name=name, cat="kernel", start_ns=start, end_ns=end, pid=self.pid, device=device, stream=stream, correlation=corr, **kw)

    def sync(self, corr: int, start: int, end: int, sync_kind: int, stream: int = -1, link_stream: int = -1, link_corr: int = -1) -> None:
        self._row(kind=Kind.SYNC, name="sync", cat="cuda_sync", start_ns=start, end_ns=end, pid=self.pid, device=0, stream=stream,
                  correlation=corr, sync_kind=sync_kind, link_stream=link_stream, link_correlation=link_corr)

    def range(self, name: str, start: int, end: int, tid: int = 1, cat: str = "user_annotation") -> None:
        self._row(kind=Kind.RANGE, name=name, cat=cat, start_ns=start, end_ns=end, pid=self.pid, tid=tid)

    def table(self) -> EventTable:
        cols = {c: [r[c] for r in self.rows] for c in COLUMNS}
        return EventTable.from_columns(cols, self.names.names)
