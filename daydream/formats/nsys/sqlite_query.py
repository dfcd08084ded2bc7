"""Queries of an open nsys export.

Each event table is one query: through Arrow when :mod:`..sqlite_arrow` can (same result), else by
``sqlite3`` a batch at a time, so rows never all exist as Python objects; a value that is not an
integer is named by its column. SQLite errors (a damaged file) become :class:`TraceFormatError`.
"""

from __future__ import annotations

import itertools
import operator
import re
import sqlite3
from typing import Iterable

import numpy as np

from ...errors import TraceFormatError
from ...events.table import Accounting, NameTable
from .name_interning import intern_codes, intern_texts
from .sqlite_file import _TEXT_REPLACE

#: rows fetched and converted at a time
_FETCH_BATCH = 1 << 16


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class Query:
    """The queries of one open export: SQL run with a damaged file's errors worded, the columns
    of a table, and event tables fetched into int64 columns and interned names."""

    def __init__(self, path: str, con: sqlite3.Connection, acc: Accounting, names: NameTable) -> None:
        self.path = path
        self.con = con
        self.acc = acc
        self.names = names
        #: the export's tables, and the row count of each event table present (export_schema.discover_tables)
        self.tables: set[str] = set()
        self.counts: dict[str, int] = {}
        #: Arrow's reader of the event queries (:mod:`..sqlite_arrow`), or None: sqlite3 reads them
        self.arrow = None
        self._cols_cache: dict[str, list[str]] = {}

    def exec(self, sql: str, where: str, params: Iterable = ()) -> list[tuple]:
        try:
            return self.con.execute(sql, tuple(params)).fetchall()
        except sqlite3.Error as e:
            raise TraceFormatError(self.path, where, f"cannot read the SQLite database ({e})") from None
        except UnicodeDecodeError:  # sqlite's message quotes a damaged schema's bytes
            raise TraceFormatError(self.path, where, "cannot read the SQLite database (damaged: its schema is not valid text)") from None

    def columns(self, table: str) -> list[str]:
        """Column names of ``table`` ([] when absent)."""
        if table not in self.tables:
            return []
        if table not in self._cols_cache:
            rows = self.exec(f"PRAGMA table_info({_q(table)})", f"table {table}")
            self._cols_cache[table] = [r[1] for r in rows]
        return self._cols_cache[table]

    def count(self, table: str) -> int:
        return int(self.exec(f"SELECT COUNT(*) FROM {_q(table)}", f"table {table}")[0][0])

    def require(self, table: str, *cols: str) -> None:
        have = self.columns(table)
        for c in cols:
            if c not in have:
                raise TraceFormatError(self.path, f"table {table}", f"has no column '{c}' (columns: {', '.join(have)})")

    def fetch(self, table: str, int_exprs: list[str], text_exprs: list[str], tail: str,
               intern: list[str] | None = None) -> tuple[list[np.ndarray], list]:
        """``SELECT int_exprs, text_exprs tail``: int64 arrays for the first, object arrays for the rest.

        With ``intern`` (a default string per text expression), each text column comes back as
        ``(ids, null)`` instead: the ids of its values interned in row order (NULL as the default,
        as :func:`.name_interning._texts`) and the mask of its NULLs. The NULL tests among ``int_exprs`` (``... IS
        NULL)``, or ``1`` for an absent column) are read as one packed integer per row and come back
        as int8 0/1. Rows are read through Arrow when :mod:`.sqlite_arrow` can (same result), else
        by ``sqlite3`` a batch at a time, so they never all exist as Python objects at once. A
        value that is not an integer sends the query to :meth:`_fetch_all`, which reports it as it
        always did.
        """
        k, nt = len(int_exprs), len(text_exprs)
        flags = [i for i, e in enumerate(int_exprs) if e.endswith(" IS NULL)") or e == "1"][:7]  # 7 bits: int8
        sel = [e for i, e in enumerate(int_exprs) if i not in flags]
        if flags:  # fewer values per row: each costs a Python object in sqlite3
            sel.append("(" + " | ".join(f"({int_exprs[i]} << {j})" for j, i in enumerate(flags)) + ")")
        sql = f"SELECT {', '.join(sel + text_exprs)} {tail}"
        got = None
        if self.arrow is not None and (intern is not None or not nt):
            got = self.arrow.fetch(sql, len(sel), nt, self.counts.get(table, 0), (len(sel) - 1,) if flags else ())
            if got is not None:
                got = got[0], [intern_codes(self.names, c, v, d) for (c, v), d in zip(got[1], intern or [])]
        if got is None:
            got = self._fetch_rows(table, sql, len(sel), nt, intern)
            if got is None:
                return self._fetch_all(table, int_exprs, text_exprs, tail, intern)
        fetched, texts = got
        if not flags:
            return fetched, texts
        packed = fetched.pop()
        values = iter(fetched)
        ints = [((packed >> flags.index(i)) & 1).astype(np.int8) if i in flags else next(values) for i in range(k)]
        return ints, texts

    def _fetch_rows(self, table: str, sql: str, k: int, nt: int, intern: list[str] | None):
        """:meth:`fetch` by ``sqlite3``, a batch at a time; None on a value that is not an integer.

        Text is decoded by ``str`` (C), and only a query that meets text that is not UTF-8 is run
        again with the connection's replacing decoder: the same strings, without a Python call per value.
        """
        try:
            self.con.text_factory = str
            try:
                return self._fetch_batches(table, sql, k, nt, intern)
            except sqlite3.OperationalError as e:
                if "decode" not in str(e):
                    raise
            self.con.text_factory = _TEXT_REPLACE
            return self._fetch_batches(table, sql, k, nt, intern)
        except sqlite3.Error as e:
            raise TraceFormatError(self.path, f"table {table}", f"cannot read the SQLite database ({e})") from None
        except UnicodeDecodeError:  # sqlite's message quotes a damaged schema's bytes
            raise TraceFormatError(self.path, f"table {table}", "cannot read the SQLite database (damaged: its schema is not valid text)") from None
        finally:
            self.con.text_factory = _TEXT_REPLACE

    def _fetch_batches(self, table: str, sql: str, k: int, nt: int, intern: list[str] | None):
        int_parts: list[np.ndarray] = []
        text_parts: list[list] = [[] for _ in range(nt)]
        ints_of = operator.itemgetter(slice(0, k))
        cur = self.con.execute(sql)
        while True:
            rows = cur.fetchmany(_FETCH_BATCH)
            if not rows:
                break
            n = len(rows)
            try:
                flat = itertools.chain.from_iterable(map(ints_of, rows) if nt else rows)
                # column-major per batch, so each column is later one contiguous copy per batch
                int_parts.append(np.ascontiguousarray(np.fromiter(flat, np.int64, count=n * k).reshape(n, k).T))
            except (TypeError, ValueError, OverflowError):
                cur.close()
                return None
            for j in range(nt):
                col = list(map(operator.itemgetter(k + j), rows))
                if intern is None:
                    arr = np.empty(len(col), dtype=object)
                    arr[:] = col
                    text_parts[j].append(arr)
                else:
                    text_parts[j].append(intern_texts(self.names, col, intern[j]))
            del rows
        ints = [np.concatenate([p[i] for p in int_parts]) if int_parts else np.zeros(0, np.int64) for i in range(k)]
        del int_parts
        texts: list = []
        for j in range(nt):
            parts = text_parts[j]
            if intern is None:
                texts.append(np.concatenate(parts) if parts else np.zeros(0, object))
            else:
                texts.append((np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int32),
                              np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, bool)))
        return ints, texts

    def _fetch_all(self, table: str, int_exprs: list[str], text_exprs: list[str], tail: str,
                   intern: list[str] | None = None) -> tuple[list[np.ndarray], list]:
        """:meth:`fetch` with all rows fetched at once (names the column of a non-integer value)."""
        sql = f"SELECT {', '.join(int_exprs + text_exprs)} {tail}"
        rows = self.exec(sql, f"table {table}")
        k = len(int_exprs)
        if not rows:
            return [np.zeros(0, np.int64) for _ in int_exprs], [np.zeros(0, object) for _ in text_exprs]
        try:
            if text_exprs:
                obj = np.array(rows, dtype=object)
                ints = obj[:, :k].astype(np.int64)
                texts = [obj[:, k + j] for j in range(len(text_exprs))]
            else:
                ints, texts = np.array(rows, dtype=np.int64), []
        except (TypeError, ValueError, OverflowError):
            obj = np.array(rows, dtype=object)
            for i, expr in enumerate(int_exprs):
                try:
                    obj[:, i].astype(np.int64)
                except (TypeError, ValueError, OverflowError):
                    m = re.search(r'"([^"]+)"', expr)
                    col = f"column {m.group(1)}" if m else "a column"
                    raise TraceFormatError(self.path, f"table {table}", f"{col} holds a value that is not an integer") from None
            raise TraceFormatError(self.path, f"table {table}", "unreadable values") from None
        if intern is not None:
            texts = [intern_texts(self.names, list(col), d) for col, d in zip(texts, intern)]
        return [np.ascontiguousarray(ints[:, i]) for i in range(k)], texts

    def int_expr(self, table: str, alias: str, col: str, missing: int = -1) -> tuple[str, str]:
        """SQL for (COALESCE(col, missing), col IS NULL); a literal when the column is absent."""
        if col in self.columns(table):
            c = f"{alias}.{_q(col)}"
            return f"COALESCE({c}, {missing})", f"({c} IS NULL)"
        self.acc.add("notes", f"{table}: column {col} absent", self.counts.get(table, 0))
        return str(missing), "1"
