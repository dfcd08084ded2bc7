"""The nsys adapter's two readers give the same EventTable: Arrow (the ``fast`` extra,
daydream/formats/sqlite_arrow.py) and the ``sqlite3`` fallback (``DAYDREAM_NSYS_ARROW=off``).

Every real export of ``../shared/traces`` is read both ways; synthetic exports hold the values on
which the Arrow reader must step aside (a REAL where a name is expected, a type change after the
driver's first batch) and values it may keep (integers, blobs and bytes that are not UTF-8 in a
text column). The interning of dictionary-encoded names is checked against row-by-row
interning by a property.
"""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daydream.errors import TraceFormatError
from daydream.events.table import NameTable
from daydream.formats import nsys, sqlite_arrow
from daydream.formats.nsys.name_interning import intern_codes, intern_texts
from test_nsys import EXPORTS, GTID, NVTX_COLS, RUNTIME_COLS, basic_tables, make_db

pa = pytest.importorskip("pyarrow")
pytest.importorskip("adbc_driver_sqlite")

BIG = sqlite_arrow.BATCH_ROWS + 10  # rows past the driver's first batch (its type inference)


class _Spy:
    """Counts the Arrow reader's answers: fetched (a result) or declined (None: sqlite3 reads)."""

    def __init__(self, monkeypatch) -> None:
        self.fetched = self.declined = 0
        orig = sqlite_arrow.ArrowReader.fetch

        def fetch(reader, *a, **k):
            r = orig(reader, *a, **k)
            if r is None:
                self.declined += 1
            else:
                self.fetched += 1
            return r

        monkeypatch.setattr(sqlite_arrow.ArrowReader, "fetch", fetch)


def _load(path, monkeypatch, mode):
    monkeypatch.setenv("DAYDREAM_NSYS_ARROW", mode)
    try:
        return nsys.load(str(path))
    except TraceFormatError as e:
        return e


def _both(path, monkeypatch):
    """(Arrow spy, table or error read with Arrow, table or error read by sqlite3 alone)."""
    spy = _Spy(monkeypatch)
    fast = _load(path, monkeypatch, "on")
    n = spy.fetched + spy.declined
    slow = _load(path, monkeypatch, "off")
    assert spy.fetched + spy.declined == n  # "off" never asks Arrow
    return spy, fast, slow


def _assert_same(a, b):
    if isinstance(a, Exception) or isinstance(b, Exception):
        assert type(a) is type(b) and str(a) == str(b)
        return
    assert a.names == b.names
    assert list(a.cols) == list(b.cols)
    for c in a.cols:
        assert a.cols[c].dtype == b.cols[c].dtype, c
        assert np.array_equal(a.cols[c], b.cols[c]), c
    assert a.meta == b.meta
    assert a.accounting == b.accounting


@pytest.mark.slow
@pytest.mark.parametrize("path", EXPORTS, ids=lambda p: p.name)
def test_real_exports_identical_and_read_by_arrow(path, monkeypatch):
    spy, fast, slow = _both(path, monkeypatch)
    _assert_same(fast, slow)
    assert spy.fetched > 0 and spy.declined == 0  # the real exports never need the fallback


def test_mode_from_environment(monkeypatch):
    for v, m in (("off", "off"), ("0", "off"), ("sqlite3", "off"), ("on", "on"), ("1", "on"), ("", "auto"), ("x", "auto")):
        monkeypatch.setenv("DAYDREAM_NSYS_ARROW", v)
        assert sqlite_arrow.mode() == m
    monkeypatch.setenv("DAYDREAM_NSYS_ARROW", "off")
    assert not sqlite_arrow.available() and not sqlite_arrow.wanted(10**9)
    monkeypatch.setenv("DAYDREAM_NSYS_ARROW", "on")
    assert sqlite_arrow.wanted(0)
    monkeypatch.setenv("DAYDREAM_NSYS_ARROW", "auto")
    assert sqlite_arrow.wanted(sqlite_arrow.MIN_ROWS)  # pyarrow is imported here anyway, so small inputs too
    assert sqlite_arrow.wanted(1)


def _with_sql(tmp_path, tables, *statements):
    p = make_db(tmp_path / "t.sqlite", tables)
    con = sqlite3.connect(p)
    for s in statements:
        con.execute(s)
    con.commit()
    con.close()
    return p


def _runtime_rows(n):
    return [(10 + 3 * i, 11 + 3 * i, 0, GTID, i + 1, 3 + (i % 2), 0) for i in range(n)]


def _nvtx_rows(texts):
    return [(10 + 2 * i, 11 + 2 * i, 59, None, None, None, t, GTID, None, None, 0) for i, t in enumerate(texts)]


# (tables, extra SQL, whether Arrow must decline at least once)
CASES = {
    "real value as a kernel name": (basic_tables(), ["INSERT INTO StringIds VALUES (9, 1e20)",
                                                     "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 9"], True),
    "text that reads as a float": (basic_tables(NVTX_EVENTS=(NVTX_COLS, _nvtx_rows(["1.5", "inf", "x"]))), [], True),
    "invalid UTF-8 kernel name": (basic_tables(), ["INSERT INTO StringIds VALUES (9, CAST(X'4765698A' AS TEXT))",
                                                   "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 9"], False),
    "real timestamp after the first batch": (
        basic_tables(CUPTI_ACTIVITY_KIND_RUNTIME=(RUNTIME_COLS, _runtime_rows(BIG))),
        [f"UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = 1.5 WHERE rowid = {BIG}"], True),
    "text after a first batch of NULLs": (
        basic_tables(NVTX_EVENTS=(NVTX_COLS, _nvtx_rows([None] * BIG + ["late", "later"]))), [], True),
    "integers and UTF-8 blobs as names": (
        basic_tables(NVTX_EVENTS=(NVTX_COLS, _nvtx_rows(["a", None, "b", "a", None]))),
        ["UPDATE NVTX_EVENTS SET text = 12 WHERE rowid = 2", "UPDATE NVTX_EVENTS SET text = X'C3A9' WHERE rowid = 4",
         "INSERT INTO StringIds VALUES (9, X'6B6C')", "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 9"], False),
    "no rows": (basic_tables(CUPTI_ACTIVITY_KIND_RUNTIME=(RUNTIME_COLS, []), CUPTI_ACTIVITY_KIND_KERNEL=(
        ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName"], [])), [], False),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_synthetic_exports_identical(case, tmp_path, monkeypatch):
    tables, sql, declines = CASES[case]
    spy, fast, slow = _both(_with_sql(tmp_path, tables, *sql), monkeypatch)
    _assert_same(fast, slow)
    assert (spy.declined > 0) == declines
    if not declines:
        assert spy.fetched > 0


def test_wal_database_read_by_sqlite3(tmp_path, monkeypatch):
    """A database with committed content in its -wal file is read from a private copy by sqlite3 alone."""
    p = make_db(tmp_path / "t.sqlite", basic_tables())
    con = sqlite3.connect(p)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("INSERT INTO StringIds VALUES (9, 'from the wal')")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 9")
    con.commit()
    spy, fast, slow = _both(p, monkeypatch)
    con.close()
    _assert_same(fast, slow)
    assert spy.fetched + spy.declined == 0
    assert "from the wal" in fast.names


_names = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=4)


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(st.one_of(st.none(), _names), max_size=30), data=st.data(), default=_names,
       known=st.lists(_names, max_size=3))
def test_intern_codes_equals_row_by_row_interning(rows, data, default, known):
    # the distinct values in any order (Arrow gives first-appearance order; the code must not rely on it)
    values = data.draw(st.permutations(list(dict.fromkeys(r for r in rows if r is not None))))
    codes = np.array([-1 if r is None else values.index(r) for r in rows], np.int32)
    fast, slow = NameTable(), NameTable()
    for k in known:  # names interned by earlier tables
        fast.intern(k), slow.intern(k)
    ids, null = intern_codes(fast, codes, list(values), default)
    exp_ids, exp_null = intern_texts(slow, list(rows), default)
    assert fast.names == slow.names
    assert np.array_equal(ids, exp_ids) and np.array_equal(null, exp_null)


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.one_of(st.none(), _names), max_size=40), cuts=st.lists(st.integers(0, 40), max_size=4))
def test_text_column_over_batches(rows, cuts):
    """Codes built batch by batch decode to the rows; distinct values in order of first appearance."""
    col = sqlite_arrow._TextColumn()
    bounds = sorted({0, len(rows), *[min(c, len(rows)) for c in cuts]})
    ok = [col.add(pa.array(rows[a:b], pa.string()), pa) for a, b in zip(bounds[:-1], bounds[1:])]
    codes, values = col.result()
    if not all(ok):  # only text that reads as a float makes it step aside
        assert any(sqlite_arrow._real_like(r) for r in rows if r is not None)
        return
    assert [None if c < 0 else values[c] for c in codes.tolist()] == rows
    assert values == list(dict.fromkeys(r for r in rows if r is not None))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.one_of(st.none(), _names, st.integers(-5, 5)), max_size=12),
       starts=st.lists(st.one_of(st.none(), st.integers(-100, 100)), max_size=12))
def test_random_nvtx_and_runtime_identical(tmp_path_factory, monkeypatch, texts, starts):
    rt = [(s, None if s is None else s + 5, 0, GTID, i + 1, 3, 0) for i, s in enumerate(starts)]
    p = make_db(tmp_path_factory.mktemp("h") / "t.sqlite",
                basic_tables(NVTX_EVENTS=(NVTX_COLS, _nvtx_rows(texts)), CUPTI_ACTIVITY_KIND_RUNTIME=(RUNTIME_COLS, rt)))
    _, fast, slow = _both(p, monkeypatch)
    _assert_same(fast, slow)


def test_names_unchanged_by_text_values():
    """The check that keeps REAL values off the fast path: integers pass, anything float() reads does not."""
    assert not sqlite_arrow._real_like("12") and not sqlite_arrow._real_like("-3") and not sqlite_arrow._real_like("kern")
    assert all(sqlite_arrow._real_like(s) for s in ("1.0", "1.0e+20", "Inf", "-Inf", "nan", " 2.5 "))
    assert isinstance(NameTable().intern_many([]), np.ndarray)
