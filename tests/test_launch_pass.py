"""Launch data read in the loader's own pass equals the file re-read's (issue 18).

The Kineto loader collects every kernel's launch configuration and every op's recorded shapes
while it reads the events (``EventTable.launch``, a :class:`~daydream.formats.launch_data.LaunchFacts`);
the Nsight Systems launch columns are read on request through Arrow (``_nsys_fast``). The file
re-read of :mod:`daydream.formats.launch_data` (``_kineto``, ``_nsys``) is the reference: both give
the same :class:`~daydream.formats.launch_data.LaunchData` on every real trace of
``../shared/traces`` (both Kineto reader paths; Arrow on and off) and on generated documents with
odd values (hypothesis).
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from daydream.errors import TraceFormatError
from daydream.formats import kineto, launch_data as LD, load_trace, sqlite_arrow
from daydream.formats.kineto import times as kineto_times

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
KINETO = sorted(p for p in TRACES.rglob("*.json*") if p.is_file()) if TRACES.exists() else []
NSYS = sorted(TRACES.rglob("*.sqlite")) if TRACES.exists() else []


def assert_same(a: LD.LaunchData, b: LD.LaunchData) -> None:
    for f in ("key", "grid", "block", "regs", "smem", "flops", "bytes", "last_bytes", "last_elem", "shape_id"):
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), f
    assert a.op == b.op
    assert a.shapes == b.shapes
    assert a.reason == b.reason
    assert a.counts == b.counts


def _kineto_file(p: Path) -> bool:
    data = p.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return kineto.sniff(data[:4096], str(p))


@pytest.mark.slow
@pytest.mark.skipif(not KINETO, reason="no real traces (../shared/traces absent)")
@pytest.mark.parametrize("path", [p for p in KINETO if _kineto_file(p)], ids=lambda p: p.name)
@pytest.mark.parametrize("fast", [True, False])
def test_kineto_pass_equals_reread_on_real_traces(path, fast, monkeypatch):
    monkeypatch.setattr(kineto_times, "_FAST", fast)
    table = load_trace(str(path))
    assert table.launch is not None
    assert_same(LD.launch_data_of(table), LD._kineto(str(path)))
    assert LD.launch_data_of(table) is LD.launch_data_of(table.take(np.arange(min(3, len(table)))))  # made once, kept by take


@pytest.mark.skipif(not NSYS, reason="no real traces (../shared/traces absent)")
@pytest.mark.parametrize("path", NSYS, ids=lambda p: p.name)
@pytest.mark.parametrize("arrow", ["on", "off"])
def test_nsys_fast_read_equals_reread_on_real_traces(path, arrow, monkeypatch):
    monkeypatch.setenv("DAYDREAM_NSYS_ARROW", arrow)
    table = load_trace(str(path))
    assert_same(LD.launch_data_of(table), LD._nsys(str(path)))


def _nsys_db(path: Path, rows: list[tuple]) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (deviceId, correlationId, gridX, gridY, gridZ, blockX, blockY, blockZ, "
                "registersPerThread, staticSharedMemory, dynamicSharedMemory)")
    con.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    con.commit()
    con.close()


_SQL_VALUE = st.one_of(st.integers(-3, 70_000), st.sampled_from([2**31 - 1, 2**31, -(2**62), 2**62 - 1, 2**62, 2**63 - 1, -(2**63)]),
                       st.none(), st.floats(-1e20, 1e20, allow_nan=False), st.sampled_from(["7", "x", b"\x01"]))


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(*[st.one_of(st.integers(0, 2000), _SQL_VALUE)] * 11), min_size=1, max_size=12),
       arrow=st.sampled_from(["on", "off"]))
def test_nsys_fast_read_equals_reread_on_odd_values(tmp_path_factory, monkeypatch, rows, arrow):
    """NULL, REAL, text and out-of-range values: the stored values cleaned in numpy, or the SQL
    cleaning where a value is not an integer, as the re-read cleans them."""
    monkeypatch.setenv("DAYDREAM_NSYS_ARROW", arrow)
    p = tmp_path_factory.mktemp("nsys") / "k.sqlite"
    _nsys_db(p, rows)
    assert_same(LD._nsys_fast(str(p)), LD._nsys(str(p)))


# ------------------------------------------------------------------ generated Kineto documents ---
#: integers where the typed projection reads them (any size int64 holds, and the range edges)
_INT = st.one_of(st.sampled_from([0, 1, 5, 255, 2**31 - 1, 2**31, 2**62 - 1, 2**62, -(2**62) + 1, -(2**62), 2**63 - 1, -1]),
                 st.integers(-3, 300))
#: grid and block values: mostly valid, the edges of [0, 2^31) often
_DIM3 = st.sampled_from([1, 2, 1024, 65535, 2**31 - 1, 2**31, 0, -1])
_NUM = st.one_of(_INT, st.none(), st.floats(-1e19, 1e19, allow_nan=False), st.sampled_from(["3", "x"]))
_ANY = st.one_of(_NUM, st.booleans(), st.lists(st.integers(-2, 2**31), max_size=4), st.just({"a": 1}))


@st.composite
def _shapes(draw, junk: bool):
    """(Input Dims, Input type): k tensors of known dtypes, sometimes odd."""
    k = draw(st.integers(0, 3))
    dims = [draw(st.lists(st.integers(0, 64), min_size=0, max_size=3)) for _ in range(k)]
    types = [draw(st.sampled_from(["float", "c10::Half", "long int", "Scalar", ""])) for _ in range(k)]
    if junk and draw(st.booleans()):
        return draw(st.one_of(st.just(dims), _ANY)), draw(st.one_of(st.just(types), _ANY))
    return dims, types


@st.composite
def _kernel(draw, ext, junk: bool):
    num, anyv = (_NUM, _ANY) if junk else (_INT, _INT)
    trip = st.one_of(st.lists(_DIM3, min_size=3, max_size=3), st.lists(_INT, min_size=3, max_size=3))
    args = {"device": draw(st.one_of(st.integers(0, 3), num)), "correlation": draw(st.one_of(st.integers(0, 50), num)),
            "grid": draw(st.one_of(trip, anyv) if junk else trip), "block": draw(st.one_of(trip, anyv) if junk else trip),
            "registers per thread": draw(st.one_of(st.integers(0, 255), anyv)), "shared memory": draw(st.one_of(st.integers(0, 2**17), anyv))}
    key = draw(st.sampled_from(["External id", "external id", None]))
    if key:
        args[key] = ext
    for k in draw(st.sets(st.sampled_from(sorted(args)), max_size=2)):  # some keys absent
        args.pop(k)
    ev = {"ph": draw(st.sampled_from(["X", "X", "i"])), "cat": draw(st.sampled_from(["kernel", "Kernel"] + ["KERNEL"] * junk)), "name": "k",
          "pid": 0, "tid": 7, "ts": draw(st.integers(0, 10**6)), "dur": 3}
    if draw(st.integers(0, 9)):
        ev["args"] = args
    return ev


@st.composite
def _op(draw, ext, junk: bool):
    dims, types = draw(_shapes(junk))
    args = {draw(st.sampled_from(["External id", "External id", "external id"])): ext, "Input Dims": dims, "Input type": types}
    for k in draw(st.sets(st.sampled_from(sorted(args)), max_size=1)):
        args.pop(k)
    ev = {"ph": "X", "cat": draw(st.sampled_from(["cpu_op", "Operator"] + ["CPU_OP"] * junk)),
          "name": draw(st.sampled_from(["aten::mm", "aten::add", "aten::addmm", "aten::index_select"])),
          "pid": 0, "tid": 1, "ts": draw(st.integers(0, 10**6)), "dur": 5}
    if draw(st.integers(0, 9)):
        ev["args"] = args
    return ev


@st.composite
def _document(draw):
    """Events of ops and the kernels that name them; ``junk``: with values (and category spellings)
    the typed projection does not take (the reader's generic path then reads the document)."""
    junk = draw(st.booleans())
    exts = draw(st.lists(st.one_of(st.integers(0, 6), _NUM if junk else _INT), min_size=1, max_size=6))
    evs = [draw(_op(x, junk)) for x in exts] + [draw(_kernel(draw(st.sampled_from(exts)), junk)) for _ in range(draw(st.integers(0, 8)))]
    return draw(st.permutations(evs))


@pytest.mark.slow
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(events=_document(), fast=st.booleans())
def test_kineto_pass_equals_reread_on_generated_documents(tmp_path_factory, monkeypatch, events, fast):
    """Absent, null, legacy-keyed and out-of-range ids; floats, strings, bools, lists and objects
    where numbers or triples are expected; ops that several kernels name; kernel and op events
    of any ph; events without args: both readers give the same launch data."""
    monkeypatch.setattr(kineto_times, "_FAST", fast)
    p = tmp_path_factory.mktemp("kineto") / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    try:
        table = kineto.load(str(p))
    except TraceFormatError:  # a value the event projection refuses (a bool or list as device, ...)
        assume(False)
    assert_same(table.launch.data(), LD._kineto(str(p)))


def test_texts_with_a_nul_byte_are_kept_one_by_one():
    assert LD._as_bytes([b"[1]", b"a\x00b", b""]) == [b"[1]", b"a\x00b", b""]
    assert LD._as_bytes([memoryview(b"[2, 3]"), b"[]"]) == [b"[2, 3]", b"[]"]


def test_saved_table_carries_its_launch_data_and_reads_no_file(tmp_path):
    """A table saved with its side data (--save-table: formats.trace_side.save_table) gives the
    trace's launch data back; one saved bare (EventTable.save) has none, and is not completed from
    the file its header names (issue 37: nothing in an input chooses a path to read)."""
    from daydream.formats.trace_side import save_table

    p = TRACES / "tracelens" / "h100_gaunernst_bert-small-uncased__1016001.json.gz"
    if not p.exists():
        pytest.skip("no real traces")
    table = load_trace(str(p))
    with_side = tmp_path / "t.npz"
    save_table(table, str(with_side))
    assert_same(LD.launch_data_of(load_trace(str(with_side))), LD.launch_data_of(table))
    bare = tmp_path / "bare.npz"
    table.save(str(bare))
    again = load_trace(str(bare))
    assert again.launch is None and not len(LD.launch_data_of(again).key)