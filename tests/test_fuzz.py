"""Fuzzing the whole pipeline (load, graph, replay, report, timeline) with damaged real traces.

Every example takes a real trace from ../shared/traces (or a CUPTI dump / saved table made from
one), damages it, and runs ``daydream-analyze`` in-process. The promise checked: a report
(exit 0, accounting balanced) or a clean refusal (exit 2, one line on stderr naming the file, no
traceback), within a time bound (a wall-clock alarm interrupts a hang). A crash anywhere (exit 1)
is a bug.

Damage: JSON traces are decoded, their events mutated (fields deleted, retyped, shifted; events
removed and duplicated) and re-serialized, or the bytes are cut or flipped; SQLite exports are
copied and changed by random UPDATE / DROP COLUMN / DROP TABLE / DELETE statements, or cut or
flipped; CUPTI dumps lose, reorder and garble lines; saved tables get extreme column values.

The CI budget is fixed and derandomized (the module runs in well under a minute on 2 cores) and
uses the small real traces. ``DAYDREAM_FUZZ_EXAMPLES=N`` runs N examples per test with fresh
randomness; ``DAYDREAM_FUZZ_ALL_TRACES=1`` adds the big traces (seconds per example);
``DAYDREAM_FUZZ_OPT_ALL=1`` adds ``--opt all`` (every optimization) to the pipeline;
``DAYDREAM_FUZZ_TIME_BOUND=S`` sets the per-example bound (default 30 s). For example::

    DAYDREAM_FUZZ_EXAMPLES=2000 DAYDREAM_FUZZ_OPT_ALL=1 python -m pytest -q tests/test_fuzz.py
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import functools
import gzip
import io
import json
import os
import shutil
import signal
import sqlite3
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from daydream.cli import main
from daydream.events.table import COLUMNS, EventTable

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"

_LONG = os.environ.get("DAYDREAM_FUZZ_EXAMPLES")
EXAMPLES = int(_LONG) if _LONG else None
#: seconds one example may take (load + analysis of a small trace takes well under one)
TIME_BOUND_S = float(os.environ.get("DAYDREAM_FUZZ_TIME_BOUND", "30"))
#: source files: the small real traces, or all of them with DAYDREAM_FUZZ_ALL_TRACES=1
_ALL = bool(os.environ.get("DAYDREAM_FUZZ_ALL_TRACES"))
SMALL_JSON_BYTES = 1 << 40 if _ALL else 130_000
SMALL_SQLITE_BYTES = 1 << 40 if _ALL else 1_100_000


def _fuzz_settings(ci_examples: int):
    return settings(
        max_examples=EXAMPLES or ci_examples,
        deadline=None,
        derandomize=EXAMPLES is None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


def _sources(suffixes: tuple[str, ...], max_bytes: int) -> list[Path]:
    if not TRACES.exists():
        return []
    return sorted(p for p in TRACES.rglob("*") if p.name.endswith(suffixes) and p.stat().st_size <= max_bytes)


JSON_SOURCES = _sources((".json.gz", ".json"), SMALL_JSON_BYTES)
SQLITE_SOURCES = _sources((".sqlite",), SMALL_SQLITE_BYTES)
needs_traces = pytest.mark.skipif(not JSON_SOURCES or not SQLITE_SOURCES, reason="../shared/traces not present")


# ---------------------------------------------------------------------------------------------
# running the CLI with a time bound
# ---------------------------------------------------------------------------------------------
class _Hang(BaseException):
    """Raised by the alarm: not an Exception, so the CLI's bug handler does not swallow it."""


def _alarm(signum, frame):
    raise _Hang()


def _opt_args(choice: int) -> list[str]:
    if choice == 1:
        return ["--opt", "scale-kernels:factor=0.5"]
    if choice == 2 and os.environ.get("DAYDREAM_FUZZ_OPT_ALL"):
        return ["--opt", "all"]
    return []


def check_run(trace: Path, workdir: Path, *, strict: bool = False, opt: int = 0, what: str = "") -> int:
    """Run daydream-analyze on ``trace`` and check the promise; returns the exit status."""
    report, tl = workdir / "report.json", workdir / "timeline.json.gz"
    for p in (report, tl):
        p.unlink(missing_ok=True)
    argv = [str(trace), "--details", "--json", str(report), "--timeline", str(tl)] + (["--strict"] if strict else []) + _opt_args(opt)
    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_BOUND_S)
    t0 = time.monotonic()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            code = main(argv)
    except _Hang:
        pytest.fail(f"no answer within {TIME_BOUND_S} s ({what})")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    elapsed = time.monotonic() - t0
    event(f"exit {code}")
    e = err.getvalue()
    ctx = f"{what}\nexit {code} after {elapsed:.1f} s; stderr:\n{e[-3000:]}"
    assert elapsed < TIME_BOUND_S, ctx
    assert code in (0, 2, 3), ctx  # 3: the report, but an optimization asked for by name does not apply
    assert "Traceback" not in e, ctx
    if code == 3:
        assert all(ln.startswith(("daydream-analyze: not applicable: ", "daydream-analyze: warning: ")) for ln in e.splitlines()), ctx
    if code == 2:
        lines = [ln for ln in e.splitlines() if not ln.startswith("daydream-analyze: warning: ")]
        assert len(lines) == 1 and lines[0].startswith("daydream-analyze: error: "), ctx
        assert str(trace) in lines[0], ctx
    else:
        assert "traced window" in out.getvalue(), ctx
        doc = json.loads(report.read_bytes())
        a = doc["accounting"]
        assert sum(a["read"].values()) == sum(a["kept"].values()) + sum(a["skipped"].values()), ctx
        assert tl.exists(), ctx
    return code


# ---------------------------------------------------------------------------------------------
# Kineto JSON
# ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _json_doc(path: Path) -> tuple[bytes, dict]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return raw, json.loads(raw)


_FIELDS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "s", "bp")
_ARGS = ("device", "stream", "correlation", "External id", "external id", "bytes", "cuda_sync_kind",
         "wait_on_stream", "wait_on_cuda_event_record_corr_id", "Sequence number")
_TOP = ("traceEvents", "deviceProperties", "distributedInfo", "baseTimeNanoseconds", "schemaVersion")
_STRINGS = ("", "X", "B", "E", "i", "M", "s", "f", "kernel", "Kernel", "cuda_runtime", "cuda_driver", "cpu_op",
            "cuda_sync", "gpu_memcpy", "gpu_user_annotation", "user_annotation", "ac2g", "Stream Sync",
            "Event Sync", "Context Sync", "Stream Wait Event", "cudaLaunchKernel", "cudaStreamSynchronize",
            "cudaEventRecord", "cudaStreamWaitEvent", "cudaDeviceSynchronize", "cudaMemcpyAsync",
            "Memcpy DtoH (Device -> Pageable)", "ProfilerStep#1", "stream 7", "12", "-3", "1e3", "0x10", "ünï")
_EXTREMES = (0, -1, 1, 2, 3, 4, 7, 255, 2**31 - 1, 2**32 - 1, 2**53 + 1, 2**62, 2**63 - 1, -(2**63), 2**64, 10**30, -(10**30))

json_values = st.one_of(
    st.sampled_from(_EXTREMES),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(_STRINGS),
    st.text(max_size=6),
    st.none(),
    st.booleans(),
    st.sampled_from(([], {}, [1], {"a": 1})),
)
#: (where in the event list, operation, field, value)
event_ops = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=1, exclude_max=True),
        st.sampled_from(("del", "set", "shift", "arg", "delarg", "remove", "dup")),
        st.sampled_from(_FIELDS),
        st.sampled_from(_ARGS),
        json_values,
        st.integers(min_value=-(10**13), max_value=10**13),
    ),
    min_size=1,
    max_size=25,
)


def _mutate_events(doc: dict, ops, top) -> dict:
    doc = dict(doc)
    evs = list(doc.get("traceEvents") or [])
    for frac, op, field, arg, value, delta in ops:
        if not evs:
            break
        i = int(frac * len(evs))
        e = evs[i]
        if not isinstance(e, dict):
            continue
        e = copy.deepcopy(e)
        if op == "del":
            e.pop(field, None)
        elif op == "set":
            e[field] = value
        elif op == "shift":  # a plausible-looking wrong number: keeps the type, moves the value
            v = e.get(field)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf"):
                e[field] = v + (delta if isinstance(v, int) else delta / 7.0)
            elif isinstance(v, str):
                e[field] = value if isinstance(value, str) else v[::-1]
        elif op in ("arg", "delarg"):
            a = e.get("args")
            a = dict(a) if isinstance(a, dict) else {}
            if op == "arg":
                a[arg] = value
            else:
                a.pop(arg, None)
            e["args"] = a
        elif op == "remove":
            del evs[i]
            continue
        elif op == "dup":
            evs.insert(i, copy.deepcopy(e))
        evs[i] = e
    doc["traceEvents"] = evs
    if top is not None:
        key, value = top
        doc[key] = value
    return doc


@pytest.mark.slow
@needs_traces
@_fuzz_settings(150)
@given(
    src=st.sampled_from(JSON_SOURCES or [Path("/nonexistent")]),
    ops=event_ops,
    top=st.none() | st.tuples(st.sampled_from(_TOP), json_values),
    gz=st.booleans(),
    strict=st.booleans(),
    opt=st.integers(0, 2),
)
def test_fuzz_kineto_events(src, ops, top, gz, strict, opt):
    _, doc = _json_doc(src)
    data = json.dumps(_mutate_events(doc, ops, top), allow_nan=True).encode()
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / ("t.json.gz" if gz else "t.json")
        p.write_bytes(gzip.compress(data, compresslevel=1) if gz else data)
        check_run(p, Path(d), strict=strict, opt=opt, what=f"{src.name}: {ops!r} top={top!r}")


@pytest.mark.slow
@needs_traces
@_fuzz_settings(60)
@given(
    src=st.sampled_from(JSON_SOURCES or [Path("/nonexistent")]),
    cut=st.none() | st.floats(min_value=0, max_value=1, exclude_max=True),
    flips=st.lists(st.tuples(st.floats(min_value=0, max_value=1, exclude_max=True), st.integers(0, 255)), max_size=12),
    gz=st.sampled_from(("plain", "gzip", "gzip-cut")),
    strict=st.booleans(),
)
def test_fuzz_kineto_bytes(src, cut, flips, gz, strict):
    raw, _ = _json_doc(src)
    b = bytearray(raw)
    for frac, byte in flips:
        b[int(frac * len(b))] = byte
    if cut is not None and gz != "gzip-cut":
        b = b[: int(cut * len(b))]
    data = bytes(b)
    if gz != "plain":
        data = gzip.compress(data, compresslevel=1)
        if gz == "gzip-cut" and cut is not None:
            data = data[: int(cut * len(data))]
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.json"
        p.write_bytes(data)
        check_run(p, Path(d), strict=strict, what=f"{src.name}: cut={cut} flips={flips} {gz}")


# ---------------------------------------------------------------------------------------------
# Nsight Systems SQLite
# ---------------------------------------------------------------------------------------------
_SQL_VALUES = (None, "x", "", -1, 0, 1, 2, 7, 34, 59, 2**32 - 1, 2**62, 2**63 - 1, -(2**63), 1.5, -0.5, b"\xff\xfe")
_WHERE = ("1", "rowid % 2 = 0", "rowid % 5 = 1", "rowid = 1", "rowid > (SELECT MAX(rowid) FROM {t}) / 2")


@functools.lru_cache(maxsize=None)
def _schema(path: Path) -> tuple[tuple[str, tuple[str, ...]], ...]:
    uri = "file:" + str(path) + "?mode=ro&immutable=1"
    con = sqlite3.connect(uri, uri=True)
    try:
        tables = sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
        tables = [t for t in tables if t.startswith(("CUPTI_", "NVTX", "StringIds", "TARGET_INFO", "ENUM_CUDA_MEMCPY", "ENUM_CUPTI", "ENUM_NSYS", "META_DATA", "EXPORT_META"))]
        return tuple((t, tuple(r[1] for r in con.execute(f'PRAGMA table_info("{t}")'))) for t in tables)
    finally:
        con.close()


sql_ops = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=1, exclude_max=True),
        st.floats(min_value=0, max_value=1, exclude_max=True),
        st.sampled_from(("update", "update", "update", "drop_column", "drop_table", "delete", "shift")),
        st.sampled_from(_SQL_VALUES),
        st.sampled_from(_WHERE),
        st.integers(min_value=-(10**12), max_value=10**12),
    ),
    min_size=1,
    max_size=6,
)


def _mutate_sqlite(path: Path, schema, ops) -> list[str]:
    done = []
    con = sqlite3.connect(str(path))
    try:
        tables = {t: list(cols) for t, cols in schema}
        for tfrac, cfrac, op, value, where, delta in ops:
            if not tables:
                break
            names = sorted(tables)
            t = names[int(tfrac * len(names))]
            cols = tables[t]
            c = cols[int(cfrac * len(cols))] if cols else None
            w = where.format(t=f'"{t}"')
            try:
                if op == "update" and c:
                    sql, args = f'UPDATE "{t}" SET "{c}" = ? WHERE {w}', (value,)
                elif op == "shift" and c:
                    sql, args = f'UPDATE "{t}" SET "{c}" = "{c}" + ? WHERE {w}', (delta,)
                elif op == "drop_column" and c:
                    sql, args = f'ALTER TABLE "{t}" DROP COLUMN "{c}"', ()
                elif op == "drop_table":
                    sql, args = f'DROP TABLE "{t}"', ()
                else:
                    sql, args = f'DELETE FROM "{t}" WHERE {w}', ()
                con.execute(sql, args)
                done.append(sql + (f" -- {args!r}" if args else ""))
                if op == "drop_column":
                    cols.remove(c)
                elif op == "drop_table":
                    del tables[t]
            except sqlite3.Error:  # NOT NULL, a column an index uses, integer overflow: try the next
                pass
        con.commit()
    finally:
        con.close()
    return done


@pytest.mark.slow
@needs_traces
@_fuzz_settings(120)
@given(
    src=st.sampled_from(SQLITE_SOURCES or [Path("/nonexistent")]),
    ops=sql_ops,
    strict=st.booleans(),
    opt=st.integers(0, 2),
)
def test_fuzz_nsys_sql(src, ops, strict, opt):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.sqlite"
        shutil.copyfile(src, p)
        done = _mutate_sqlite(p, _schema(src), ops)
        check_run(p, Path(d), strict=strict, opt=opt, what=f"{src.name}: {done!r}")


@needs_traces
@_fuzz_settings(40)
@given(
    src=st.sampled_from(SQLITE_SOURCES or [Path("/nonexistent")]),
    cut=st.none() | st.floats(min_value=0, max_value=1, exclude_max=True),
    flips=st.lists(st.tuples(st.floats(min_value=0, max_value=1, exclude_max=True), st.integers(0, 255)), max_size=40),
)
def test_fuzz_nsys_bytes(src, cut, flips):
    b = bytearray(src.read_bytes())
    for frac, byte in flips:
        b[int(frac * len(b))] = byte
    if cut is not None:
        b = b[: int(cut * len(b))]
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.sqlite"
        p.write_bytes(bytes(b))
        check_run(p, Path(d), what=f"{src.name}: cut={cut} flips={flips}")


# ---------------------------------------------------------------------------------------------
# CUPTI JSON Lines dumps and saved tables (made from the small real traces)
# ---------------------------------------------------------------------------------------------
_DERIVED_FROM = ("hta/cuda_event_sync_multi_stream.json.gz", "hta/simple_add.json.gz", "extrap/con_kernel.sqlite", "nsys_ai/mock.sqlite")


@functools.lru_cache(maxsize=None)
def _derived_dir() -> Path:
    d = tempfile.mkdtemp(prefix="daydream-fuzz-")
    atexit.register(shutil.rmtree, d, ignore_errors=True)
    return Path(d)


@functools.lru_cache(maxsize=None)
def _cupti_dump(rel: str) -> list[bytes]:
    from daydream.formats import load_trace
    from daydream.formats.cupti_export import write_cupti_jsonl

    p = _derived_dir() / (Path(rel).name + ".cupti.jsonl")
    write_cupti_jsonl(load_trace(str(TRACES / rel)), p)
    raw = p.read_bytes()
    return gzip.decompress(raw).split(b"\n") if raw[:2] == b"\x1f\x8b" else raw.split(b"\n")


line_ops = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=1, exclude_max=True),
        st.floats(min_value=0, max_value=1, exclude_max=True),
        st.sampled_from(("cut", "delete", "swap", "set", "delfield", "unknown", "garbage", "set", "set")),
        json_values,
    ),
    min_size=1,
    max_size=12,
)


def _mutate_lines(lines: list[bytes], ops) -> list[bytes]:
    lines = list(lines)
    for frac, frac2, op, value in ops:
        if not lines:
            break
        i, j = int(frac * len(lines)), int(frac2 * len(lines))
        if op == "cut":
            lines[i] = lines[i][: int(frac2 * len(lines[i]))]
        elif op == "delete":
            del lines[i]
        elif op == "swap":  # records out of order (and the header moved when i or j is 0)
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "unknown":
            lines.insert(i, json.dumps({"kind": "FROBNICATE", "start": value}, allow_nan=True).encode())
        elif op == "garbage":
            lines.insert(i, b"{not json" + bytes(str(value), "utf-8", "replace"))
        else:
            try:
                obj = json.loads(lines[i])
            except ValueError:
                continue
            if not isinstance(obj, dict) or not obj:
                continue
            keys = sorted(obj)
            k = keys[int(frac2 * len(keys))]
            if op == "delfield":
                del obj[k]
            else:
                obj[k] = value
            lines[i] = json.dumps(obj, allow_nan=True).encode()
    return lines


@needs_traces
@_fuzz_settings(80)
@given(src=st.sampled_from(_DERIVED_FROM), ops=line_ops, strict=st.booleans(), opt=st.integers(0, 2))
def test_fuzz_cupti_lines(src, ops, strict, opt):
    lines = _mutate_lines(_cupti_dump(src), ops)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.cupti.jsonl"
        p.write_bytes(b"\n".join(lines))
        check_run(p, Path(d), strict=strict, opt=opt, what=f"{src}: {ops!r}")


@functools.lru_cache(maxsize=None)
def _saved(rel: str) -> EventTable:
    from daydream.formats import load_trace

    return load_trace(str(TRACES / rel))


column_ops = st.lists(
    st.tuples(
        st.sampled_from(COLUMNS),
        st.sampled_from(("min", "max", "-1", "0", "1", "2", "7", "2^20", "shift")),
        st.sampled_from(("all", "even", "first", "every5")),
        st.integers(min_value=-(10**12), max_value=10**12),
    ),
    min_size=1,
    max_size=4,
)
_SEL = {"all": slice(None), "even": slice(None, None, 2), "first": slice(0, 1), "every5": slice(None, None, 5)}


@pytest.mark.slow
@needs_traces
@_fuzz_settings(60)
@given(src=st.sampled_from(_DERIVED_FROM), ops=column_ops, opt=st.integers(0, 2))
def test_fuzz_saved_table_columns(src, ops, opt):
    t = _saved(src)
    cols = {c: t.cols[c].copy() for c in COLUMNS}
    for col, how, sel, delta in ops:
        a = cols[col]
        info = np.iinfo(a.dtype)
        if how == "shift":
            v = a[_SEL[sel]].astype(object) + delta
            a[_SEL[sel]] = np.clip(v, info.min, info.max).astype(a.dtype) if len(v) else a[_SEL[sel]]
        else:
            v = {"min": info.min, "max": info.max, "2^20": 1 << 20}.get(how, None)
            v = int(how) if v is None else v
            a[_SEL[sel]] = min(max(v, info.min), info.max)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.npz"
        EventTable(cols, t.names, t.meta, t.accounting).save(str(p))
        check_run(p, Path(d), opt=opt, what=f"{src}: {ops!r}")
