"""The Kineto reader's fast paths give the reference paths' table, exactly.

``kineto.times._FAST = False`` selects the reference path wherever a faster one exists (zlib inflate,
the numpy byte-matrix ts/dur parse, the searchsorted join of sparse columns, the (ph, cat) pair
dict); every Kineto trace of ``../shared/traces`` and ``fixtures/`` is loaded both ways and the
tables compared column by column (values and dtypes), with names, accounting and metadata.
"""

from __future__ import annotations

import gzip
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daydream.formats import kineto
from daydream.formats.kineto import projection as kineto_projection
from daydream.formats.kineto import rows as kineto_rows
from daydream.formats.kineto import stream as kineto_stream
from daydream.formats.kineto import times as kineto_times

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
FILES = sorted(
    [*TRACES.rglob("*.json.gz"), *TRACES.rglob("*.json"), *(ROOT / "fixtures").rglob("*.json.gz"), *(ROOT / "fixtures").rglob("*.json")]
)


def _is_kineto(p: Path) -> bool:
    data = p.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return kineto.sniff(data[:4096], str(p))


KINETO = [p for p in FILES if p.is_file() and _is_kineto(p)]


def _load(path: str, fast: bool, monkeypatch) -> kineto.EventTable:
    monkeypatch.setattr(kineto_times, "_FAST", fast)
    return kineto.load(path)


def _assert_same(a, b) -> None:
    assert list(a.cols) == list(b.cols)
    for c in a.cols:
        assert a.cols[c].dtype == b.cols[c].dtype, c
        assert np.array_equal(a.cols[c], b.cols[c]), c
    assert a.names == b.names
    assert msgspec.structs.asdict(a.accounting) == msgspec.structs.asdict(b.accounting)
    assert msgspec.json.encode(a.meta) == msgspec.json.encode(b.meta)


@pytest.mark.slow
@pytest.mark.skipif(not KINETO, reason="no Kineto traces (../shared/traces absent)")
@pytest.mark.parametrize("path", KINETO, ids=lambda p: p.name)
def test_fast_path_equals_reference_on_real_traces(path, monkeypatch):
    ref = _load(str(path), False, monkeypatch)
    fast = _load(str(path), True, monkeypatch)
    _assert_same(ref, fast)


def test_real_trace_list_is_not_empty_when_traces_present():
    if TRACES.is_dir():
        assert len(KINETO) >= 10


_plain = st.from_regex(r"\A-?(0|[1-9][0-9]{0,19})(\.[0-9]{1,8})?\Z", fullmatch=True)


_json_time = st.one_of(_plain, _plain, _plain, st.sampled_from(['"12.5"', "null", "1e3", "1.5E-2", '" 7 "', "-0.0", "{}"]))


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(_json_time, _json_time), min_size=1, max_size=40), st.booleans())
def test_fast_path_equals_reference_on_generated_times(tmp_path_factory, times, gz):
    """ts/dur texts, mostly plain decimals (up to 20 integer digits, 8 decimals), some strings,
    nulls, exponents and objects: same table both ways."""
    body = ",".join(
        '{"ph":"X","cat":"kernel","name":"k%d","pid":0,"tid":7,"ts":%s,"dur":%s,"args":{"correlation":%d}}' % (i, t, d, i)
        for i, (t, d) in enumerate(times)
    )
    text = ('{"traceEvents":[' + body + "]}").encode()
    p = tmp_path_factory.mktemp("t") / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(text) if gz else text)
    with pytest.MonkeyPatch.context() as mp:
        ref, fast = (_load_or_error(str(p), f, mp) for f in (False, True))
    if isinstance(ref, str) or isinstance(fast, str):  # a refused file (e.g. ts read as ns): same error
        assert ref == fast
    else:
        _assert_same(ref, fast)


def _load_or_error(path: str, fast: bool, monkeypatch):
    from daydream.errors import TraceFormatError

    try:
        return _load(path, fast, monkeypatch)
    except TraceFormatError as e:
        return str(e)


def _exact_ns(text: str) -> int:
    v = (Decimal(text) * 1000).to_integral_value(rounding=ROUND_HALF_UP)
    return int(min(max(v, -(2**63) + 1), 2**63 - 2))


_num_text = st.one_of(
    _plain,
    st.from_regex(r"\A-?[0-9]{0,22}(\.[0-9]{0,8})?\Z", fullmatch=True),
    st.sampled_from(["", "-", ".", "-.5", "1.", "1.2.3", "+1", "null", '"12.5"', "1e3", "9223372036854775.807",
                     "9223372036854775807", "-9223372036854775809", "1" * 25, "0.0004999", "-1.0005", "12a"]),
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_plain, _plain, st.just(""), _num_text), min_size=1, max_size=50))
def test_join_parse_equals_numpy_parse(texts):
    """The joined-buffer parse gives the reference parse's values and flags, or declines (None)."""
    raws = [msgspec.Raw(t.encode()) for t in texts]
    want_ns, want_ok = kineto_times._us_text_to_ns(raws, method="numpy")
    got = kineto_times._us_join_parse(raws)
    if got is None:
        assert not all(_is_plain(t) or t == "" for t in texts)
        return
    assert all(_is_plain(t) or t == "" for t in texts)
    assert np.array_equal(got[1], want_ok)
    assert np.array_equal(got[0], want_ns)
    assert got[0].tolist() == [_exact_ns(t) if t else 0 for t in texts]


def _is_plain(t: str) -> bool:
    import re

    return re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", t) is not None


def test_join_parse_examples():
    texts = ["1419117003011.565", "-0.0005", "0", "12", "1.23456", "1752829956515358.123", "9223372036854775.807",
             "1" * 25, "0.0004999", "-1.0005", "12345678901234567.89"]
    ns, ok = kineto_times._us_join_parse([msgspec.Raw(t.encode()) for t in texts])
    assert ok.all()
    assert ns.tolist() == [_exact_ns(t) for t in texts]
    assert ns[0] == 1419117003011565 and ns[5] == 1752829956515358123


@pytest.mark.skipif(not KINETO, reason="no Kineto traces (../shared/traces absent)")
@pytest.mark.parametrize("path", KINETO[:6], ids=lambda p: p.name)
def test_fast_path_equals_reference_in_small_slices(path, monkeypatch):
    """Slices of ~8 KiB (new (ph, cat) pairs, names and sparse columns in later slices): same table."""
    monkeypatch.setattr(kineto_stream, "_STREAM_CHUNK", 8 << 10)
    monkeypatch.setattr(kineto_stream, "_READ_BLOCK", 4 << 10)
    ref = _load(str(path), False, monkeypatch)
    fast = _load(str(path), True, monkeypatch)
    _assert_same(ref, fast)
    monkeypatch.setattr(kineto_stream, "_STREAM_CHUNK", 16 << 20)
    _assert_same(ref, _load(str(path), True, monkeypatch))


_int_like = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from([None, -(2**63), -(2**63) + 1, 2**63 - 1]),
    st.from_regex(r"\A\s?[-+]?[0-9_]{1,21}\s?\Z", fullmatch=True),
    st.sampled_from(["Spans", "stream 7", "0x1f", "0o7", "1.5", "", " ", "\u0661\u0662", "-9223372036854775808", "00", "0_1"]),
    st.text(max_size=6),
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(_int_like, min_size=1, max_size=30), st.booleans())
def test_int_column_typed_equals_reference(values, may_be_str):
    """The typed column read (fromiter alone where it takes the values) gives the reference's
    int64 values, for ints, None and (the pid/tid case) strings."""
    if not may_be_str:
        values = [v for v in values if not isinstance(v, str)] or [1]
    want = kineto_projection._int_column(list(values), len(values))
    got = kineto_projection._int_column_typed(list(values), len(values), may_be_str)
    assert got.dtype == want.dtype
    assert got.tolist() == want.tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 3), st.integers(0, 8)), max_size=60))
def test_row_order_equals_lexsort(rows):
    """The fast row order (stable sort by start, ties re-sorted in place) is lexsort's."""
    a = np.array(rows, np.int64).reshape(-1, 3)
    start, kind, end = a[:, 0].copy(), a[:, 1].copy(), a[:, 2].copy()
    if len(a) == 0:
        return
    assert np.array_equal(kineto_rows._row_order(start, kind, end), np.lexsort((end, kind, start)))


@pytest.mark.skipif(not KINETO, reason="no Kineto traces (../shared/traces absent)")
@pytest.mark.parametrize("path", KINETO[:6], ids=lambda p: p.name)
def test_plain_file_read_into_small_windows(path, tmp_path, monkeypatch):
    """A plain copy of a trace streamed straight into a small window (readinto, 4 KiB reads,
    8 KiB slices, the head searched every 4 KiB): the table of the file as loaded by default."""
    want = kineto.load(str(path))
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    p = tmp_path / "t.json"
    p.write_bytes(data)
    monkeypatch.setattr(kineto_stream, "_STREAM_CHUNK", 8 << 10)
    monkeypatch.setattr(kineto_stream, "_READ_BLOCK", 4 << 10)
    monkeypatch.setattr(kineto_stream, "_HEAD_STEP", 4 << 10)
    got = kineto_stream._load_streaming(str(p))
    if got is None:  # a document the streaming reader does not take: the default load did not stream it either
        monkeypatch.undo()
        assert kineto_stream._load_streaming(str(p)) is None
        return
    got.meta = msgspec.structs.replace(got.meta, source=want.meta.source)  # the copy's path
    _assert_same(want, got)


@pytest.mark.parametrize("gz", [False, True])
def test_events_larger_than_the_window(tmp_path, monkeypatch, gz):
    """Events of 30 and 50 KiB read with 8 KiB slices and 1 KiB reads: the window grows (the
    rest moved with it) and the table is the one of a default load."""
    events = [{"ph": "X", "cat": "kernel", "name": "k" * n, "pid": 0, "tid": 7, "ts": 10 * i, "dur": 1,
               "args": {"correlation": i}} for i, n in enumerate([10, 30000, 5, 50000, 3, 20, 40000])]
    text = msgspec.json.encode({"traceEvents": events, "baseTimeNanoseconds": 5})
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(text) if gz else text)
    want = kineto.load(str(p))
    monkeypatch.setattr(kineto_stream, "_STREAM_CHUNK", 8 << 10)
    monkeypatch.setattr(kineto_stream, "_READ_BLOCK", 1 << 10)
    got = kineto_stream._load_streaming(str(p))
    assert got is not None
    _assert_same(want, got)
    assert len(got) == len(events)
