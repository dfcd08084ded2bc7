"""Optional Arrow-based reader of SQLite query results (the ``fast`` extra: ``adbc-driver-sqlite``, ``pyarrow``).

Python's ``sqlite3`` builds one Python object per fetched value; the nsys adapter spends most of
its time there (issue 18 profiled 57-65 % of the load). The ADBC SQLite driver
(https://arrow.apache.org/adbc/) writes query results into Arrow columns in C, so integer
columns become numpy arrays without a Python object per value, and a text column is
dictionary-encoded by Arrow (one Python string per distinct value).

The reader is a fast path only: it answers ``None`` whenever it cannot prove that its result
equals what the ``sqlite3`` reader would give, and the caller then runs the query through
``sqlite3`` (which also words every error). It answers ``None`` when

- the packages are missing, or ``DAYDREAM_NSYS_ARROW=off``;
- the driver fails (damaged file, or a value whose type differs from the type the driver
  inferred from the first rows: it raises "Type mismatch");
- an integer column is not int64 without NULLs (every integer expression of the nsys adapter is
  a ``COALESCE`` or an ``IS NULL``);
- a text column holds text that reads as a floating-point number: it may be a REAL value, which
  SQLite prints as e.g. ``1.0e+20`` where ``sqlite3`` gives the float ``1e+20`` (a TEXT that
  merely looks like one is rare in names and only costs the fast path), or the driver typed the
  column as a number (it saw only numbers in the first batch).

Text is decoded from its bytes as ``sqlite3`` decodes it (UTF-8, invalid bytes replaced), BLOBs
the same way; an INTEGER in a text column reads as its decimal digits in both readers.

Environment: ``DAYDREAM_NSYS_ARROW=off`` always uses ``sqlite3``; ``on`` uses Arrow whenever the
packages import; ``auto`` (default) only from :data:`MIN_ROWS` event rows, as importing pyarrow
costs more than it saves on small exports.
"""

from __future__ import annotations

import os
import sys

import numpy as np

#: rows per Arrow batch; the driver infers each column's type from the first batch
BATCH_ROWS = 1 << 16


#: event rows from which ``auto`` uses Arrow: importing pyarrow costs about 0.3 s CPU (and 40 MB),
#: which the faster fetch (about 2 s per M rows, measured on nsys_1m.sqlite) pays back from here
MIN_ROWS = 200_000


def mode() -> str:
    """"off", "on" or "auto", from ``DAYDREAM_NSYS_ARROW``."""
    m = os.environ.get("DAYDREAM_NSYS_ARROW", "auto").strip().lower()
    if m in ("off", "0", "no", "false", "sqlite3"):
        return "off"
    return "on" if m in ("on", "1", "yes", "true", "arrow") else "auto"


def _modules():
    try:
        import adbc_driver_sqlite.dbapi as dbapi
        import pyarrow as pa
    except ImportError:
        return None
    return dbapi, pa


def available() -> bool:
    """True when the fast path is not turned off and its packages import."""
    return mode() != "off" and _modules() is not None


def wanted(n_rows: int) -> bool:
    """Whether to read an export of ``n_rows`` event rows through Arrow: ``on`` always, ``auto``
    from :data:`MIN_ROWS` rows (or when pyarrow is imported already), ``off`` never; and only
    when the packages import."""
    m = mode()
    if m == "off" or (m == "auto" and n_rows < MIN_ROWS and "pyarrow" not in sys.modules):
        return False
    return _modules() is not None


class ArrowReader:
    """One read-only ADBC connection to a SQLite database (``uri``: a SQLite URI filename)."""

    def __init__(self, uri: str) -> None:
        mods = _modules()
        if mods is None:
            raise ImportError("adbc-driver-sqlite and pyarrow are not installed")
        self._dbapi, self._pa = mods
        self.con = self._dbapi.connect(uri)
        try:
            cur = self.con.cursor()
            try:
                cur.execute("PRAGMA trusted_schema = OFF")
            finally:
                cur.close()
        except Exception:
            self.con.close()
            raise

    def close(self) -> None:
        """Close the connection and give Arrow's freed memory back to the system (its allocator
        keeps freed pages for reuse: about 18 MB after the 4 M-row benchmark export)."""
        self.con.close()
        try:
            self._pa.default_memory_pool().release_unused()
        except Exception:  # noqa: BLE001 - an older pyarrow without it: the pages stay cached
            pass

    def fetch(self, sql: str, n_int: int, n_text: int, n_rows: int = 0, flags: tuple[int, ...] = ()):
        """Run ``sql`` (``n_int`` integer then ``n_text`` text expressions) into numpy.

        Returns ``(ints, texts)``: ``ints`` a list of ``n_int`` int64 arrays (shape ``(n,)``),
        ``texts`` a list of ``n_text`` pairs ``(codes, values)``: ``codes`` int32 indices into
        the list of distinct strings ``values`` (in order of first appearance), -1 for NULL.
        ``n_rows`` (expected rows, 0 when unknown) sizes the integer arrays up front; the integer
        columns listed in ``flags`` are 0/1 (SQL ``IS NULL`` tests) and come back as int8. Returns
        None when the result may differ from ``sqlite3``'s (see the module docstring).
        """
        pa = self._pa
        try:
            cur = self.con.cursor()
            try:
                cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
                cur.execute(sql)
                reader = cur.fetch_record_batch()
                ints, texts = _IntColumns(n_int, n_rows, flags), [_TextColumn() for _ in range(n_text)]
                for batch in reader:
                    cols = batch.columns
                    if not ints.add(cols[:n_int], pa):
                        return None
                    # a column keeps its whole batch alive: encode the text, keep no column
                    if not all(t.add(cols[n_int + j], pa) for j, t in enumerate(texts)):
                        return None
                    del cols, batch
            finally:
                cur.close()
        except Exception:  # noqa: BLE001 - any driver error: the sqlite3 reader decides (and words it)
            return None
        return ints.result(), [t.result() for t in texts]


class _IntColumns:
    """int64 columns (int8 for 0/1 flags) filled one Arrow batch at a time (preallocated to
    the expected rows)."""

    def __init__(self, k: int, n_rows: int, flags: tuple[int, ...] = ()) -> None:
        self.cols = [np.empty(n_rows, np.int8 if i in flags else np.int64) for i in range(k)]
        self.n = 0

    def add(self, arrays, pa) -> bool:
        if not arrays:
            return True
        m = len(arrays[0])
        if self.n + m > len(self.cols[0]):  # more rows than expected: grow
            grow = max(self.n + m, 2 * len(self.cols[0]))
            self.cols = [np.concatenate([c[: self.n], np.empty(grow - self.n, c.dtype)]) for c in self.cols]
        for c, a in zip(self.cols, arrays):
            if a.type != pa.int64() or a.null_count:
                return False
            c[self.n: self.n + m] = a.to_numpy(zero_copy_only=True)
        self.n += m
        return True

    def result(self) -> list[np.ndarray]:
        return [c if len(c) == self.n else c[: self.n].copy() for c in self.cols]


class _TextColumn:
    """A text column as codes into its distinct values (in order of first appearance), built one
    Arrow batch at a time: Arrow dictionary-encodes each batch and finds which of its values
    earlier batches had, so Python decodes each distinct value once."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}  #: decoded text -> code
        self.known = None  #: Arrow large_binary array: the distinct byte strings seen so far
        self.known_code = np.zeros(0, np.int32)  #: code of each of them
        self.codes: list[np.ndarray] = []

    def add(self, arr, pa) -> bool:
        """Add one batch's column; False when sqlite3 could read it differently (see the module)."""
        import pyarrow.compute as pc

        if arr.null_count == len(arr):  # all NULL (the driver then types the column int64)
            self.codes.append(np.full(len(arr), -1, np.int32))
            return True
        if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
            arr = arr.view(pa.large_binary() if pa.types.is_large_string(arr.type) else pa.binary())
        elif not (pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type)):
            return False  # a number type: the driver saw numbers only in the first batch
        enc = arr.dictionary_encode()
        dictionary = enc.dictionary.cast(pa.large_binary())
        lut = np.empty(len(dictionary), np.int32)
        new = np.ones(len(dictionary), bool)
        if self.known is not None and len(dictionary):
            pos = pc.index_in(dictionary, value_set=self.known)
            new = pos.is_null().to_numpy(zero_copy_only=False)
            lut[~new] = self.known_code[pos.drop_null().to_numpy()]
        fresh = dictionary.filter(pa.array(new)) if not new.all() else dictionary
        # decoded as sqlite3 does (its text_factory, and bytes.decode for BLOBs): invalid UTF-8
        # replaced; distinct byte strings may then give the same text, hence the index
        values = [b.decode("utf-8", "replace") for b in fresh.to_pylist()]
        if any(_real_like(v) for v in values):
            return False
        index = self.index
        lut[new] = np.fromiter((index.setdefault(v, len(index)) for v in values), np.int32, count=len(values))
        self.known = fresh if self.known is None else pa.concat_arrays([self.known, fresh])
        self.known_code = np.concatenate([self.known_code, lut[new]])
        local = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False)
        self.codes.append(np.where(local >= 0, lut[np.clip(local, 0, None)] if len(lut) else -1, -1).astype(np.int32))
        return True

    def result(self) -> tuple[np.ndarray, list[str]]:
        codes = np.concatenate(self.codes) if self.codes else np.zeros(0, np.int32)
        return codes, list(self.index)


def _real_like(s: str) -> bool:
    """True for text that may be a REAL value as SQLite prints it (``1.0``, ``1.0e+20``, ``Inf``)."""
    try:
        float(s)
    except ValueError:
        return False
    return not s.strip().lstrip("+-").isdigit()
