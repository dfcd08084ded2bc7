"""Reliability: every bad trace gets a clear answer, nothing is lost, inputs are never touched.

End to end through ``daydream-analyze`` (``daydream.cli.main`` in-process, or a subprocess where
the process boundary matters). The promises tested:

* exit status 0 with a report; 2 for bad input or usage, with ONE line on stderr that names the
  file and the place; 1 only for a bug in daydream (``--debug`` shows its traceback);
* accounting: every input record is in the table or in the report's skipped counts
  (``read == kept + skipped`` in the report JSON, on every real trace);
* inputs are only read (SQLite read-only and immutable; bytes and mtime unchanged; read-only
  files and directories work; no output may replace the input);
* saved tables load without pickle; nothing from the input is executed;
* the same input gives byte-identical ``--json`` output in separate processes.

Bad inputs are built here in ``tmp_path``; the adapters' own unit tests (test_kineto.py,
test_nsys.py, test_cupti_jsonl.py) cover their parsing details, this file the answer the user
gets. Real traces come from ../shared/traces (tests skip when it is absent).
"""

from __future__ import annotations

import builtins
import gzip
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import daydream.analysis
import daydream.formats.nsys.sqlite_file as nsys_file
from daydream.cli import main
from daydream.errors import DaydreamError, InternalError
from daydream.events.table import COLUMNS, EventTable
from daydream.formats import TIME_LIMIT_NS, load_trace

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
REAL = sorted(p for p in TRACES.rglob("*") if p.name.endswith((".json.gz", ".json", ".sqlite"))) if TRACES.exists() else []


def real(rel: str) -> Path:
    p = TRACES / rel
    if not p.exists():
        pytest.skip(f"{p} not available")
    return p


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------
def cli(capsys, *args) -> tuple[int, str, str]:
    code = main(["--details", *(str(a) for a in args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def refused(capsys, path, *args, where: str = "", says: str = "") -> str:
    """Run on ``path``; expect exit 2 and one stderr line naming the file, the place and the reason."""
    code, _, err = cli(capsys, path, *args)
    line = err.strip()
    assert code == 2, err
    assert "Traceback" not in err
    assert len(line.splitlines()) == 1, err
    assert line.startswith("daydream-analyze: error: ") and str(path) in line, line
    assert where in line, line
    assert says in line, line
    return line


def report(capsys, path, *args, tmp_path: Path) -> tuple[dict, str]:
    """Run on ``path`` with --json; expect exit 0 (3 when an optimization asked for by name does
    not apply, said on stderr) and a balanced account; returns (report, stderr)."""
    j = tmp_path / "report.json"
    code, out, err = cli(capsys, path, "--json", j, *args)
    assert code == 0 or (code == 3 and "daydream-analyze: not applicable: " in err), err
    assert "Traceback" not in err
    doc = json.loads(j.read_bytes())
    a = doc["accounting"]
    assert sum(a["read"].values()) == sum(a["kept"].values()) + sum(a["skipped"].values()), a
    return doc, err


def kineto(tmp_path: Path, events: list, name: str = "t.json", **top) -> Path:
    p = tmp_path / name
    data = json.dumps({"traceEvents": events, **top}).encode()
    p.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return p


def rt(corr=1, ts=5, dur=3, name="cudaLaunchKernel", pid=100, tid=100, **kw) -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": {"correlation": corr}, **kw}


def kern(corr=1, ts=10, dur=5, stream=7, name="k", **kw) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "device": 0, "stream": stream}, **kw}


def sync(corr, ts, dur, kind, stream=-1, **args) -> dict:
    return {"ph": "X", "cat": "cuda_sync", "name": kind, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "device": 0, "stream": stream, "cuda_sync_kind": kind, **args}}


# ---------------------------------------------------------------------------------------------
# JSON documents
# ---------------------------------------------------------------------------------------------
def test_truncated_json_is_salvaged_with_a_one_line_warning_and_refused_when_strict(tmp_path, capsys):
    events = [rt(corr=i, ts=10 * i) for i in range(1, 41)] + [kern(corr=i, ts=10 * i + 4, dur=2) for i in range(1, 41)]
    full = json.dumps({"traceEvents": events}).encode()
    p = tmp_path / "cut.json"
    cut = full.index(b'"cat": "kernel"', len(full) * 3 // 4) + 5  # in the middle of an event
    p.write_bytes(full[:cut])
    doc, err = report(capsys, p, tmp_path=tmp_path)
    kept = sum(doc["accounting"]["read"].values())
    assert 40 < kept < 80
    warn = [ln for ln in err.splitlines() if ln.startswith("daydream-analyze: warning: ")]
    assert len(warn) == 1 and len(err.strip().splitlines()) == 1, err
    assert str(p) in warn[0] and f"is truncated: its JSON document ends at byte {cut}" in warn[0] and f"kept the {kept} complete events" in warn[0]
    assert any(k.startswith("truncated file: events after byte") for k in doc["accounting"]["notes"])
    # the salvaged part replays to itself, but the verdict says what is missing (second try-out: 'good')
    assert doc["trust"]["verdict"] == "unreliable" and doc["trust"]["reason"].startswith("the trace file is truncated (events after byte")
    refused(capsys, p, "--strict", where=f"byte offset {cut}", says="strict mode does not salvage")


def test_json_syntax_error_names_the_byte(tmp_path, capsys):
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents": [{"ph": "X", "cat": "kernel",, "name": "k"}]}')
    refused(capsys, p, where="byte offset 45", says="not valid JSON")


def test_json_without_trace_events(tmp_path, capsys):
    p = tmp_path / "t.json"
    p.write_text('{"schemaVersion": 1, "deviceProperties": [], "displayTimeUnit": "ms"}')
    refused(capsys, p, says="no traceEvents array")


@pytest.mark.parametrize("content", [b"", b"  \n\t\n", gzip.compress(b""), gzip.compress(b"\n\n")], ids=["empty", "blank", "gzip-empty", "gzip-blank"])
def test_empty_files(tmp_path, capsys, content):
    p = tmp_path / "t.json.gz"
    p.write_bytes(content)
    refused(capsys, p, says="the file is empty")


def test_wrong_gzip_streams(tmp_path, capsys):
    head = tmp_path / "head.json.gz"
    head.write_bytes(b"\x1f\x8b\x08\x00" + bytes(range(7, 250)))  # damaged right after the magic
    refused(capsys, head, where="byte offset 0", says="damaged gzip stream")
    good = gzip.compress(json.dumps({"traceEvents": [rt(corr=i, ts=i) for i in range(3000)]}).encode())
    mid = bytearray(good)
    for i in range(len(mid) // 2, len(mid) - 16, 11):
        mid[i] ^= 0xA5
    p = tmp_path / "mid.json.gz"
    p.write_bytes(bytes(mid))
    refused(capsys, p, where="gzip stream", says="damaged gzip data")


def test_nan_and_infinity_literals(tmp_path, capsys):
    p = tmp_path / "t.json"
    p.write_text(
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": NaN, "dur": 1},'
        '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": Infinity, "args": {"correlation": -Infinity}},'
        '{"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}'
    )
    doc, _ = report(capsys, p, tmp_path=tmp_path)
    a = doc["accounting"]
    assert a["notes"]["NaN/Infinity literal read as null"] == 3
    assert a["skipped"] == {"X event without a numeric ts": 1, "X event without a numeric dur": 1}
    assert a["kept"] == {"cpu_op": 1}
    refused(capsys, p, "--strict", where=f"byte offset {p.read_bytes().index(b'NaN')}", says="NaN is not JSON")


def test_integers_beyond_int64_in_args_ts_pid_and_correlation(tmp_path, capsys):
    big = 2**64 + 1
    p = tmp_path / "t.json"
    p.write_text(
        '{"traceEvents": ['
        f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100, "ts": 5, "dur": 3, "args": {{"correlation": {big}}}}},'
        f'{{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5, "args": {{"correlation": {big}, "device": 0, "stream": 7, "bytes": {10**30}}}}},'
        f'{{"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": {10**23}, "dur": 5, "args": {{"device": 0, "stream": 7}}}},'
        f'{{"ph": "X", "cat": "cpu_op", "name": "op", "pid": {2**64}, "tid": 1, "ts": 1, "dur": 1}},'
        f'{{"ph": "X", "cat": "cpu_op", "name": "op2", "pid": 1, "tid": {2**64}, "ts": 1, "dur": 1, "args": {{"External id": {10**30}}}}}'
        "]}"
    )
    doc, _ = report(capsys, p, tmp_path=tmp_path)
    a = doc["accounting"]
    assert a["read"] == {"cuda_runtime": 1, "kernel": 2, "cpu_op": 2}
    assert a["skipped"] == {"ts out of range (more than 2^62 ns, about 146 years, from the clock's zero)": 1,
                            "X event with a non-numeric pid": 1}
    assert a["notes"]["args.correlation not an integer within int64 (no launch link)"] == 2
    # a correlation id beyond int64 is no id: the kernel is not linked to the call
    assert doc["graph"]["launch_edges"] == 0
    assert doc["graph"]["counts"] == {"GPU task without a launching call in the trace (ready at trace start)": 1}


@pytest.mark.parametrize("trailer", ["", ","], ids=["streamed", "repaired"])
def test_number_with_a_huge_exponent_is_no_time(tmp_path, capsys, trailer):
    """Bug: a ts like 1e999999999 (one flipped byte in a real trace) raised decimal.Overflow
    (exit 1) in the exact microsecond parser."""
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [' + json.dumps(rt()) + "," + json.dumps(kern()).replace('"ts": 10', '"ts": 1e999999999')
                 + "," + json.dumps(kern(corr=2, ts=20)).replace('"dur": 5', '"dur": -1E+999999999') + trailer + "]}")
    doc, _ = report(capsys, p, tmp_path=tmp_path)
    assert doc["accounting"]["skipped"] == {"X event without a numeric ts": 1, "X event without a numeric dur": 1}


def test_invalid_utf8_is_replaced_and_noted_or_refused_when_strict(tmp_path, capsys):
    """Bug: bytes that are not UTF-8 (a name copied from a file system in another encoding) made
    the whole trace unreadable, with no place named."""
    p = tmp_path / "t.json"
    body = json.dumps({"traceEvents": [rt(name="cudaLaunchKernel"), kern(name="NAME")]}).encode()
    p.write_bytes(body.replace(b"NAME", b"gemm_\xff\xfe_kernel"))
    doc, _ = report(capsys, p, tmp_path=tmp_path)
    assert doc["accounting"]["notes"]["invalid UTF-8 bytes replaced by U+FFFD"] == 2
    assert doc["accounting"]["kept"] == {"cuda_runtime": 1, "kernel": 1}
    t = load_trace(str(p))
    assert "gemm_\ufffd\ufffd_kernel" in t.names
    refused(capsys, p, "--strict", where=f"byte offset {body.index(b'NAME') + 5}", says="invalid UTF-8")


def test_base_time_out_of_range(tmp_path, capsys):
    """Bug: baseTimeNanoseconds near 2^63 overflowed the event times (exit 1 in the timeline writer)."""
    p = kineto(tmp_path, [rt(), kern()], baseTimeNanoseconds=2**63 - 1000)
    refused(capsys, p, where="baseTimeNanoseconds", says="out of range")


def test_times_beyond_the_limit_are_skipped_and_counted(tmp_path, capsys):
    """Bug: timestamps near the int64 limit (valid JSON numbers) overflowed int64 in the replay
    and the timeline writer (exit 1)."""
    far = TIME_LIMIT_NS // 1000 + 1  # us
    p = kineto(tmp_path, [rt(), kern(), rt(corr=2, ts=far), kern(corr=3, ts=-far), kern(corr=4, ts=20, dur=far)])
    doc, _ = report(capsys, p, "--timeline", tmp_path / "tl.json", tmp_path=tmp_path)
    sk = doc["accounting"]["skipped"]
    assert sk == {
        "ts out of range (more than 2^62 ns, about 146 years, from the clock's zero)": 2,
        "ts + dur out of range (more than 2^62 ns, about 146 years, from the clock's zero)": 1,
    }
    assert doc["accounting"]["kept"] == {"cuda_runtime": 1, "kernel": 1}


def test_replay_past_int64_is_refused_cleanly(tmp_path, capsys):
    """Bug: times within range whose replay serializes past 2^63 ns (two ~2^63 ns kernels on one
    stream) raised OverflowError (exit 1)."""
    lo = -(TIME_LIMIT_NS // 1000) + 1
    d = 2 * (TIME_LIMIT_NS // 1000) - 2
    p = kineto(tmp_path, [rt(ts=lo, dur=1), kern(ts=lo, dur=d), rt(corr=2, ts=lo + 1, dur=1), kern(corr=2, ts=lo, dur=d)])
    refused(capsys, p, says="the replayed timeline runs past the int64 nanosecond range")


# ---------------------------------------------------------------------------------------------
# events: odd but readable traces get a report, with the oddities counted
# ---------------------------------------------------------------------------------------------
def test_zero_and_negative_durations(tmp_path, capsys):
    p = kineto(tmp_path, [rt(dur=0), kern(dur=0), rt(corr=2, ts=20, dur=-4), kern(corr=2, ts=30, dur=-5)])
    doc, _ = report(capsys, p, tmp_path=tmp_path)
    assert doc["accounting"]["notes"] == {"negative dur clamped to 0": 2}
    assert doc["graph"]["gpu_tasks"] == 2 and doc["window"]["measured_ns"] == 25_000


def test_kernel_starting_before_its_launch(tmp_path, capsys):
    p = kineto(tmp_path, [rt(ts=20, dur=10), kern(ts=15, dur=5), rt(corr=2, ts=40, dur=10), kern(corr=2, ts=45, dur=5)])
    doc, _ = report(capsys, p, tmp_path=tmp_path)
    # the kernel is also the earliest event: the trace starts with the launch instead (graph.build._trace_start)
    assert doc["graph"]["counts"] == {"GPU task recorded starting before its launching call started": 1,
                                      "GPU task recorded starting before its launching call and before the rest of the trace (left out of the trace start)": 1}
    assert doc["graph"]["launch_edges"] == 2


def test_kernels_without_a_launching_call(tmp_path, capsys):
    p = kineto(tmp_path, [kern(), kern(corr=9, ts=20)])
    doc, _ = report(capsys, p, tmp_path=tmp_path)
    assert doc["graph"]["counts"] == {"GPU task without a launching call in the trace (ready at trace start)": 2}
    assert doc["accounting"]["notes"] == {"GPU rows without a runtime/driver call of the same correlation id (pid unknown)": 2}


def test_duplicate_correlation_ids(tmp_path, capsys):
    p = kineto(tmp_path, [rt(), rt(ts=8), kern(), kern(ts=30)])
    doc, _ = report(capsys, p, tmp_path=tmp_path)
    assert doc["graph"]["counts"] == {"runtime calls sharing a correlation id with an earlier call of their process": 1,
                                      "GPU tasks sharing their launching call with another GPU task (a graph launch, or one "
                                      "correlation id given to several tasks)": 2}


def test_launches_whose_kernels_are_missing(tmp_path, capsys):
    p = kineto(tmp_path, [rt(), rt(corr=2, ts=20)])
    doc, _ = report(capsys, p, tmp_path=tmp_path)
    g = doc["graph"]
    assert (g["cpu_tasks"], g["gpu_tasks"], g["launch_edges"]) == (2, 0, 0)
    assert doc["window"]["measured_ns"] == doc["window"]["replayed_ns"] == 18_000


def test_events_with_missing_pid_tid_ts(tmp_path, capsys):
    events = [
        {"ph": "X", "cat": "kernel", "name": "k", "tid": 7, "ts": 1, "dur": 1},  # no pid
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "ts": 1, "dur": 1, "args": {"correlation": 1}},  # no tid
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "dur": 1},  # no ts
        {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1},  # no dur
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "ts": 3, "dur": 1, "args": {"correlation": 1, "device": 0}},  # no tid, no stream
    ]
    doc, _ = report(capsys, kineto(tmp_path, events), tmp_path=tmp_path)
    a = doc["accounting"]
    assert a["skipped"] == {"X event without a numeric ts": 1, "X event without pid": 1, "X event without a numeric dur": 1}
    assert a["kept"] == {"kernel": 1, "cuda_runtime": 1}
    assert doc["graph"]["launch_edges"] == 1


def test_event_sync_without_the_record_link(tmp_path, capsys):
    """CUDA 12.9+ style: a cuda_sync 'Event Sync' without wait_on_cuda_event_record_corr_id."""
    events = [rt(corr=3, ts=0, dur=1, name="cudaEventRecord"), rt(ts=5, dur=3), kern(ts=10, dur=50),
              rt(corr=4, ts=20, dur=45, name="cudaEventSynchronize"), sync(4, 20, 45, "Event Sync"),
              rt(corr=6, ts=70, dur=1, name="cudaStreamWaitEvent"), sync(6, 70, 1, "Stream Wait Event", stream=9, wait_on_stream=7),
              rt(corr=7, ts=72, dur=2), kern(corr=7, ts=80, dur=5, stream=9)]
    doc, _ = report(capsys, kineto(tmp_path, events), tmp_path=tmp_path)
    assert doc["graph"]["counts"] == {
        "cudaStreamWaitEvent without a sync record naming its event (no cross-stream edge)": 1,
        "event synchronize whose event could not be found (not a dependency)": 1,
        "event synchronize without a record link (binds to the thread's last cudaEventRecord)": 1,
    }
    assert doc["accounting"]["kept"]["cuda_sync"] == 2


def test_wait_on_a_stream_without_an_earlier_kernel(tmp_path, capsys):
    events = [rt(corr=3, ts=0, dur=1, name="cudaEventRecord"), rt(corr=4, ts=2, dur=1, name="cudaStreamWaitEvent"),
              sync(4, 2, 1, "Stream Wait Event", stream=9, wait_on_stream=8, wait_on_cuda_event_record_corr_id=3),
              rt(corr=5, ts=5, dur=3), kern(corr=5, ts=10, dur=5, stream=9)]
    doc, _ = report(capsys, kineto(tmp_path, events), tmp_path=tmp_path)
    assert doc["graph"]["counts"] == {"cross-stream wait with no producer or no consumer task in the trace": 1}
    assert doc["graph"]["cross_stream_edges"] == 0


def test_overlapping_events_on_one_stream_are_serialized(tmp_path, capsys):
    p = kineto(tmp_path, [rt(ts=0, dur=2), kern(ts=10, dur=20), rt(corr=2, ts=3, dur=2), kern(corr=2, ts=15, dur=20)])
    doc, _ = report(capsys, p, tmp_path=tmp_path)
    w = doc["window"]
    assert (w["measured_ns"], w["replayed_ns"]) == (35_000, 50_000)  # the replay runs them one after the other


def test_no_distributed_info(tmp_path, capsys):
    doc, _ = report(capsys, kineto(tmp_path, [rt(), kern()]), tmp_path=tmp_path)
    assert (doc["trace"]["rank"], doc["trace"]["world_size"]) == (-1, -1)
    code, out, _ = cli(capsys, kineto(tmp_path, [rt(), kern()]))
    assert code == 0 and " rank " not in out


@pytest.mark.parametrize(
    "events",
    [[], [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 3},
          {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 10}],
     [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]],
    ids=["no-events", "cpu-only", "metadata-only"],
)
def test_no_gpu_events_at_all(tmp_path, capsys, events):
    path = kineto(tmp_path, events)
    if not any(e["ph"] == "X" for e in events):  # nothing to analyse: refused in one line (a report of zeros read as an answer)
        refused(capsys, path, "--opt", "scale-kernels", says="no CPU call, range or GPU task to analyse")
        return
    doc, _ = report(capsys, path, "--timeline", tmp_path / "tl.json", "--opt", "scale-kernels", tmp_path=tmp_path)
    assert doc["graph"]["gpu_tasks"] == 0 and doc["window"]["kernels"] == 0


def test_every_optimization_on_a_one_kernel_trace(tmp_path, capsys):
    """Bug (daydream/optimizations/fusion.py, fixed by its owner): --opt all crashed with an
    IndexError (exit 1) on any trace without a chain of memory-bound kernels."""
    doc, _ = report(capsys, kineto(tmp_path, [rt(), kern()]), "--opt", "all", tmp_path=tmp_path)
    assert doc["ranking"]


def test_tied_timestamps_replay_instead_of_failing(tmp_path, capsys):
    """Bug: calls and copies at the same ns (1-us clocks, fuzzed times) put a blocking copy's
    next call before the copy in the node order; the replay stopped with 'internal: a blocking
    call's awaited task was not simulated' (exit 2, no file named)."""
    events = [rt(corr=1, ts=10, dur=0, name="cudaMemcpyAsync"),
              {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": 7, "ts": 10, "dur": 0,
               "args": {"correlation": 1, "device": 0, "stream": 7, "bytes": 4}},
              rt(corr=2, ts=10, dur=0), kern(corr=2, ts=10, dur=0)]
    doc, _ = report(capsys, kineto(tmp_path, events), tmp_path=tmp_path)
    assert doc["graph"]["counts"] == {"dependencies against the order of the recorded times (tied or inconsistent timestamps): order repaired": 1}
    assert doc["graph"]["sync_edges"] == 1


def test_cyclic_waits_are_dropped_not_fatal():
    """Bug: a stream sync whose correlation id is larger than that of the launch after it (same
    ns) took the later kernel as the one it waits for: a cycle (the launch comes after the sync
    on the thread), and the replay stopped with an internal error. The wait is dropped, counted."""
    from tablebuilder import TB

    from daydream.events.table import SyncKind
    from daydream.graph import build_graph
    from daydream.simulate import check_topological, simulate

    tb = TB()
    tb.call("cudaStreamSynchronize", 10, 10, corr=5)
    tb.sync(5, 10, 10, SyncKind.STREAM_SYNC, stream=7)
    tb.call("cudaLaunchKernel", 10, 10, corr=3)
    tb.gpu(3, 10, 12, stream=7)
    g = build_graph(tb.table())
    assert g.counts["wait or cross-stream dependency dropped: it closes a cycle (inconsistent timestamps)"] == 1
    assert not any(k.endswith("order repaired") for k in g.counts)
    check_topological(g, g.order)
    tl = simulate(g)
    assert tl.end_ns.tolist() == [10, 10, 12]


# ---------------------------------------------------------------------------------------------
# SQLite
# ---------------------------------------------------------------------------------------------
def _tiny_export(path: Path) -> Path:
    con = sqlite3.connect(path)
    con.executescript(
        """
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
        INSERT INTO StringIds VALUES (1, 'kern'), (2, 'cudaLaunchKernel_v7000');
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, returnValue);
        INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (10, 20, 0, 1677721701, 7, 2, 0);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, correlationId, globalPid, demangledName, shortName);
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (25, 40, 0, 1, 7, 7, 1677721600, 1, 1);
        """
    )
    con.commit()
    con.close()
    return path


def test_sqlite_not_an_nsys_export(tmp_path, capsys):
    p = tmp_path / "app.sqlite"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE people (name TEXT)")
    con.commit()
    con.close()
    refused(capsys, p, says="SQLite database is not an Nsight Systems export")


def test_sqlite_table_without_an_expected_column(tmp_path, capsys):
    p = _tiny_export(tmp_path / "t.sqlite")
    con = sqlite3.connect(p)
    con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN streamId")
    con.commit()
    con.close()
    refused(capsys, p, where="table CUPTI_ACTIVITY_KIND_KERNEL", says="has no column 'streamId'")


def test_sqlite_non_integer_value(tmp_path, capsys):
    p = _tiny_export(tmp_path / "t.sqlite")
    con = sqlite3.connect(p)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon'")
    con.commit()
    con.close()
    refused(capsys, p, where="table CUPTI_ACTIVITY_KIND_KERNEL", says="column start holds a value that is not an integer")


def test_sqlite_damaged_schema_text(tmp_path, capsys):
    """Bug: a damaged schema whose error message quotes bytes that are not UTF-8 raised
    UnicodeDecodeError out of sqlite3 (exit 1)."""
    p = _tiny_export(tmp_path / "t.sqlite")
    b = bytearray(p.read_bytes())
    i = b.index(b"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    b[i + 7] = 0xCC
    p.write_bytes(bytes(b))
    refused(capsys, p, where="sqlite_master", says="damaged: its schema is not valid text")


def test_sqlite_error_quoting_a_control_character_stays_one_line(tmp_path, capsys):
    """Bug: SQLite quoted a damaged schema's control character (\\x1c, a line separator for
    Python) in its message, which then printed as two lines."""
    p = _tiny_export(tmp_path / "t.sqlite")
    b = bytearray(p.read_bytes())
    i = b.index(b"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start,") + len(b"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start")
    b[i] = 0x1C
    p.write_bytes(bytes(b))
    line = refused(capsys, p, where="sqlite_master", says="malformed database schema")
    assert 'unrecognized token: "\\x1c"' in line


def test_sqlite_times_beyond_the_limit_are_skipped(tmp_path, capsys):
    """Bug: a start of -2^63 (a damaged row) overflowed int64 in the timeline writer (exit 1)."""
    p = _tiny_export(tmp_path / "t.sqlite")
    con = sqlite3.connect(p)
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, 40, 0, 1, 7, 8, 1677721600, 1, 1)", (-(2**63),))
    con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (30, ?, 0, 1677721701, 9, 2, 0)", (2**63 - 1,))
    con.commit()
    con.close()
    doc, _ = report(capsys, p, "--timeline", tmp_path / "tl.json", tmp_path=tmp_path)
    far = "start or end more than 2^62 ns (about 146 years) from the clock's zero"
    assert doc["accounting"]["skipped"] == {f"CUPTI_ACTIVITY_KIND_KERNEL: {far}": 1, f"CUPTI_ACTIVITY_KIND_RUNTIME: {far}": 1}
    refused(capsys, p, "--strict", where="table CUPTI_ACTIVITY_KIND_RUNTIME", says=far)


def test_sqlite_nulls_everywhere_a_schema_allows_them(tmp_path, capsys):
    """Every nullable column of every table NULL in every other row of a real export."""
    src = real("extrap/con_kernel.sqlite")
    p = tmp_path / "nulls.sqlite"
    shutil.copyfile(src, p)
    con = sqlite3.connect(p)
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    nulled = 0
    for t in tables:
        for cid, col, typ, notnull, default, pk in con.execute(f'PRAGMA table_info("{t}")').fetchall():
            if not notnull and not pk:
                con.execute(f'UPDATE "{t}" SET "{col}" = NULL WHERE rowid % 2 = 0')
                nulled += 1
    con.commit()
    con.close()
    assert nulled > 50
    con = sqlite3.connect(p)
    null_corr = {t: con.execute(f"SELECT COUNT(*) FROM {t} WHERE correlationId IS NULL").fetchone()[0]
                 for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY")}
    null_tid = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE globalTid IS NULL").fetchone()[0]
    con.close()
    for strict in ((), ("--strict",)):  # a NULL where the schema allows one is not a defect
        doc, _ = report(capsys, p, "--timeline", tmp_path / "tl.json", *strict, tmp_path=tmp_path)
        notes = doc["accounting"]["notes"]
        for t, n in null_corr.items():
            assert n > 0 and notes[f"{t}: no correlationId (NULL or 0)"] == n
        assert notes["CUPTI_ACTIVITY_KIND_RUNTIME: no globalTid (pid/tid -1)"] == null_tid > 0


def test_sqlite_locked_by_a_writer_still_reads(tmp_path, capsys):
    p = _tiny_export(tmp_path / "t.sqlite")
    holder = sqlite3.connect(p, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("INSERT INTO StringIds VALUES (3, 'uncommitted')")
    try:
        doc, _ = report(capsys, p, tmp_path=tmp_path)
        assert doc["graph"]["launch_edges"] == 1
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_nsys_rep_passed_by_mistake(tmp_path, capsys):
    p = tmp_path / "profile.nsys-rep"
    p.write_bytes(b"\x00\x01QDSTRM" + os.urandom(200))
    refused(capsys, p, says="nsys export --type sqlite")
    renamed = tmp_path / "profile.sqlite"  # renamed to .sqlite: judged by its content
    renamed.write_bytes(p.read_bytes())
    refused(capsys, renamed, says="not a trace daydream can read")


# ---------------------------------------------------------------------------------------------
# CUPTI JSON Lines dumps
# ---------------------------------------------------------------------------------------------
def _cupti_lines(*records, header=True) -> bytes:
    head = [{"kind": "HEADER", "format": "cupti-jsonl", "version": 1, "pid": 100}] if header else []
    return b"\n".join(r if isinstance(r, bytes) else json.dumps(r).encode() for r in head + list(records)) + b"\n"


def _api(corr, start, end):
    return {"kind": "RUNTIME", "cbid": 211, "start": start, "end": end, "processId": 100, "threadId": 7, "correlationId": corr}


def _kernel(corr, start, end):
    return {"kind": "CONCURRENT_KERNEL", "name": "vecAdd", "start": start, "end": end, "deviceId": 0, "contextId": 1, "streamId": 7, "correlationId": corr}


@pytest.fixture()
def cupti_adapter():
    from daydream.formats import cupti_jsonl

    return cupti_jsonl


def test_cupti_bad_line_unknown_kind_and_strict(tmp_path, capsys, cupti_adapter):
    p = tmp_path / "t.cupti.jsonl"
    p.write_bytes(_cupti_lines(_api(1, 10, 20), b'{"kind": "RUNTIME", "start": ', {"kind": "FROBNICATE", "x": 1}, _kernel(1, 25, 40)))
    doc, _ = report(capsys, p, tmp_path=tmp_path)
    sk = doc["accounting"]["skipped"]
    assert sk == {"malformed line": 1, "unknown record kind 'FROBNICATE'": 1}
    assert doc["trace"]["extra"]["malformed_lines"] == "3"
    assert doc["graph"]["launch_edges"] == 1
    refused(capsys, p, "--strict", where="line 3", says="malformed record")


def test_cupti_missing_header(tmp_path, capsys, cupti_adapter):
    p = tmp_path / "t.jsonl"
    p.write_bytes(_cupti_lines({"kind": "HEADER", "format": "cupti-jsonl", "version": 1}, _api(1, 10, 20), header=False).replace(b"HEADER", b"RUNTIME", 1))
    refused(capsys, p, where="line 1", says="missing cupti-jsonl header")  # a record first: a dump without its header
    q = tmp_path / "v2.jsonl"
    q.write_bytes(_cupti_lines({"kind": "HEADER", "format": "cupti-jsonl", "version": 2}, _api(1, 10, 20), header=False))
    refused(capsys, q, where="line 1", says="this daydream reads version 1")


def test_cupti_records_out_of_order_give_the_same_report(tmp_path, capsys, cupti_adapter):
    recs = [_api(1, 10, 20), _kernel(1, 25, 40), _api(2, 30, 35), _kernel(2, 41, 50), _api(3, 36, 38), _kernel(3, 51, 52)]
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_bytes(_cupti_lines(*recs))
    b.write_bytes(_cupti_lines(*reversed(recs)))
    ra, _ = report(capsys, a, tmp_path=tmp_path)
    rb, _ = report(capsys, b, tmp_path=tmp_path)
    for r in (ra, rb):
        r["trace"].pop("source")
    assert ra == rb and ra["graph"]["launch_edges"] == 3


# ---------------------------------------------------------------------------------------------
# saved tables (caches): data only, and checked
# ---------------------------------------------------------------------------------------------
def _table(tmp_path: Path) -> EventTable:
    return load_trace(str(kineto(tmp_path, [rt(), kern(), rt(corr=2, ts=20), kern(corr=2, ts=30)], name="src.json")))


def test_malicious_npz_with_an_object_array_is_refused_and_never_unpickled(tmp_path, capsys):
    sentinel = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(sentinel), "w"))

    arr = np.empty(1, dtype=object)
    arr[0] = Payload()
    t = _table(tmp_path)
    p = tmp_path / "evil.npz"
    with open(p, "wb") as f:
        np.savez(f, __header__=arr, **{c: t.cols[c] for c in COLUMNS})
    assert b"pwned" in p.read_bytes()  # the pickle is really in there
    refused(capsys, p, where="column __header__", says="object array")
    assert not sentinel.exists()
    # the same payload as a column
    with open(p, "wb") as f:
        np.savez(f, **{c: t.cols[c] for c in COLUMNS if c != "kind"}, kind=arr,
                 __header__=np.frombuffer(b"{}", np.uint8))
    refused(capsys, p, where="column kind", says="object array")
    assert not sentinel.exists()
    with pytest.raises(ValueError):  # the library call the adapter relies on refuses pickles itself
        np.load(p, allow_pickle=False)["kind"]


@pytest.mark.parametrize(
    "column, value, says",
    [
        ("kind", 200, "unknown kind"),
        ("name_id", 10**6, "index past the"),
        ("name_id", -5, "index past the"),
        ("cat_id", 10**6, "index past the"),
        ("end_ns", -(2**62), "end before they start"),
    ],
)
def test_saved_table_breaking_the_invariants_is_refused(tmp_path, capsys, column, value, says):
    """Bug: a saved table with an unknown kind or a name id past the names crashed the graph
    builder (IndexError, exit 1)."""
    t = _table(tmp_path)
    cols = {c: t.cols[c].copy() for c in COLUMNS}
    cols[column][::2] = value
    p = tmp_path / "bad.npz"
    EventTable(cols, t.names, t.meta, t.accounting).save(str(p))
    refused(capsys, p, where=f"column {column}", says=says)


def test_saved_table_times_beyond_the_limit(tmp_path, capsys):
    t = _table(tmp_path)
    cols = {c: t.cols[c].copy() for c in COLUMNS}
    cols["start_ns"][0] = cols["end_ns"][0] = TIME_LIMIT_NS
    names = list(t.names)
    names[cols["name_id"][0]] = "two\nlines"  # quoted in the message: escaped, one line
    p = tmp_path / "far.npz"
    EventTable(cols, names, t.meta, t.accounting).save(str(p))
    refused(capsys, p, where="event 'two\\nlines' (start 4611686018427387904 ns", says="more than 2^62 ns")


def test_saved_table_malformed_members(tmp_path, capsys):
    """Bug: a member that is not a .npy file (np.load returns its raw bytes) or a 2-D column
    crashed the loader or the graph builder (exit 1)."""
    t = _table(tmp_path)
    p = tmp_path / "bad.npz"
    t.save(str(p))
    raw = dict(np.load(p, allow_pickle=False))
    with zipfile.ZipFile(p, "w") as z:
        for k, a in raw.items():
            if k == "__header__":
                z.writestr("__header__.npy", b"not an npy member")
            else:
                with z.open(k + ".npy", "w") as f:
                    np.lib.format.write_array(f, a)
    refused(capsys, p, where="column __header__", says="not a numpy array")
    raw["kind"] = raw["kind"].reshape(-1, 1)
    np.savez(p, **raw)
    refused(capsys, p, where="column kind", says="has 2 dimensions")
    p.write_bytes(p.read_bytes()[:300])
    refused(capsys, p, says="not a saved daydream event table")
    # a zip needing a newer unzip (zipfile raises NotImplementedError, which np.load lets through)
    t.save(str(p))
    b = bytearray(p.read_bytes())
    cd = b.index(b"PK\x01\x02")  # first central directory entry: "version needed to extract" at +6
    b[cd + 6] = 99
    p.write_bytes(bytes(b))
    refused(capsys, p, says="not a saved daydream event table (zip file version 9.9)")


def test_saved_table_with_unbalanced_accounting(tmp_path, capsys):
    t = _table(tmp_path)
    t.accounting.read["kernel"] += 5
    p = tmp_path / "t.npz"
    t.save(str(p))
    refused(capsys, p, where="header", says="accounting does not balance")


# ---------------------------------------------------------------------------------------------
# usage
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("flag", ["--json", "--timeline", "--save-table"])
def test_unwritable_outputs_are_refused_before_the_load(tmp_path, capsys, monkeypatch, flag):
    trace = kineto(tmp_path, [rt(), kern()])
    import daydream.formats

    def no_load(*a, **k):
        raise AssertionError("the trace was loaded before the usage error")

    monkeypatch.setattr(daydream.formats, "load_trace", no_load)
    for target, says in ((tmp_path / "no-such-dir" / "x.out", "no such directory"), (tmp_path, "it is a directory"),
                         (trace, "is an input trace")):
        code, _, err = cli(capsys, trace, flag, target)
        assert code == 2 and len(err.strip().splitlines()) == 1 and says in err and str(target) in err, err
    assert json.loads(trace.read_bytes())["traceEvents"]  # the input is intact


def test_output_write_failure_after_analysis_is_a_usage_error(tmp_path, capsys, monkeypatch):
    trace = kineto(tmp_path, [rt(), kern()])
    import daydream.analysis

    def fail(path, *a, **k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(daydream.analysis, "write_timeline", fail)
    code, _, err = cli(capsys, trace, "--timeline", tmp_path / "tl.json")
    assert code == 2 and "cannot write" in err and "Permission denied" in err and len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------------------------------------
# exit status 1 only for a bug
# ---------------------------------------------------------------------------------------------
def test_a_bug_exits_1_with_a_one_line_message_and_debug_shows_the_traceback(tmp_path, capsys, monkeypatch):
    trace = kineto(tmp_path, [rt(), kern()])

    def broken(*a, **k):
        raise KeyError("boom in the graph builder")

    monkeypatch.setattr(daydream.analysis, "build_graph", broken)
    code, out, err = cli(capsys, trace)
    assert code == 1 and out == ""
    assert err.strip().splitlines() == [
        "daydream-analyze: internal error (KeyError: 'boom in the graph builder'); please report it with the trace, and rerun with --debug for details"
    ]
    code, _, err = cli(capsys, trace, "--debug")
    assert code == 1 and "Traceback (most recent call last)" in err and "broken" in err and "boom in the graph builder" in err


def test_a_broken_internal_invariant_is_a_bug_not_bad_input(tmp_path, capsys, monkeypatch):
    trace = kineto(tmp_path, [rt(), kern()])

    def broken(*a, **k):
        raise InternalError("node order is not topological (lane predecessor not yet simulated)")

    monkeypatch.setattr(daydream.analysis, "settle", broken)  # every replay of analyze goes through it
    code, _, err = cli(capsys, trace)
    assert code == 1 and "internal error" in err and "node order is not topological" in err


def test_bad_input_with_debug_shows_the_traceback_too(tmp_path, capsys):
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [1]}')
    code, _, err = cli(capsys, p, "--debug")
    assert code == 2 and "Traceback" in err and err.strip().splitlines()[-1].startswith("daydream-analyze: error: ")


# ---------------------------------------------------------------------------------------------
# accounting on every real trace
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("path", REAL or [pytest.param(None, marks=pytest.mark.skip(reason="../shared/traces not available"))],
                         ids=lambda p: p.name[:40] if p else "none")
def test_every_record_of_every_real_trace_is_accounted_for(path, tmp_path, capsys):
    doc, _ = report(capsys, path, tmp_path=tmp_path)
    a = doc["accounting"]
    assert sum(a["read"].values()) > 0
    # kept by the same keys that were read: nothing is kept that was not read
    assert set(a["kept"]) <= set(a["read"])
    for k, n in a["kept"].items():
        assert 0 <= n <= a["read"][k]


# ---------------------------------------------------------------------------------------------
# inputs are only read
# ---------------------------------------------------------------------------------------------
def _inputs(tmp_path: Path) -> list[Path]:
    """One small input of each format, in a directory of its own."""
    d = tmp_path / "in"
    d.mkdir()
    out = [kineto(d, [rt(), kern()], name="t.json.gz"), _tiny_export(d / "t.sqlite")]
    t = load_trace(str(out[0]))
    t.save(str(d / "t.npz"))
    out.append(d / "t.npz")
    from daydream.formats.cupti_export import write_cupti_jsonl

    write_cupti_jsonl(t, d / "t.cupti.jsonl")
    out.append(d / "t.cupti.jsonl")
    return out


def test_nsys_adapter_opens_read_only_and_immutable(tmp_path, monkeypatch, capsys):
    seen = []
    real_connect = sqlite3.connect

    class Recording(sqlite3.Connection):
        def close(self):
            seen.append(("trusted_schema", self.execute("PRAGMA trusted_schema").fetchone()[0]))
            super().close()

    def connect(database, *a, **k):
        seen.append(("uri", database, k.get("uri")))
        return real_connect(database, *a, factory=Recording, **k)

    p = _tiny_export(tmp_path / "t.sqlite")
    monkeypatch.setattr(nsys_file.sqlite3, "connect", connect)
    report(capsys, p, tmp_path=tmp_path)
    assert seen and len(seen) % 2 == 0  # the adapter's connection, and the launch data's at load (formats/trace_side.py)
    for (_, uri, is_uri), trusted in zip(seen[::2], seen[1::2]):
        assert is_uri and uri.startswith("file:") and uri.endswith("?mode=ro&immutable=1")
        assert trusted == ("trusted_schema", 0)


def test_inputs_are_opened_for_reading_only(tmp_path, monkeypatch, capsys):
    inputs = _inputs(tmp_path)
    modes: list[tuple[str, str]] = []
    real_open = builtins.open

    def spy(file, mode="r", *a, **k):
        if isinstance(file, (str, os.PathLike)) and Path(file).resolve().parent == inputs[0].parent.resolve():
            modes.append((Path(file).name, mode))
        return real_open(file, mode, *a, **k)

    monkeypatch.setattr(builtins, "open", spy)
    for p in inputs:
        report(capsys, p, tmp_path=tmp_path)
    assert {name for name, _ in modes} >= {p.name for p in inputs if p.suffix != ".sqlite"}
    assert all(set(mode) <= set("rb") for _, mode in modes), modes


def test_input_bytes_and_mtime_unchanged(tmp_path, capsys):
    inputs = _inputs(tmp_path)
    before = {}
    for p in inputs:
        os.utime(p, ns=(1_500_000_000_000_000_000, 1_500_000_000_000_000_000))
        before[p] = (p.read_bytes(), p.stat().st_mtime_ns)
    listing = sorted(os.listdir(inputs[0].parent))
    for p in inputs:
        report(capsys, p, "--timeline", tmp_path / "tl.json", "--save-table", tmp_path / "s.npz", "--opt", "scale-kernels", tmp_path=tmp_path)
    for p in inputs:
        assert (p.read_bytes(), p.stat().st_mtime_ns) == before[p], p
    assert sorted(os.listdir(inputs[0].parent)) == listing  # no journal, WAL or lock file left behind


def test_read_only_files_in_a_read_only_directory(tmp_path, capsys):
    inputs = _inputs(tmp_path)
    d = inputs[0].parent
    for p in inputs:
        p.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    d.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)
    try:
        listing = sorted(os.listdir(d))
        for p in inputs:
            report(capsys, p, "--timeline", tmp_path / "tl.json", tmp_path=tmp_path)
        assert sorted(os.listdir(d)) == listing
    finally:
        d.chmod(stat.S_IRWXU)


# ---------------------------------------------------------------------------------------------
# nothing from the input is executed
# ---------------------------------------------------------------------------------------------
def test_names_that_look_like_code_stay_names(tmp_path, capsys):
    sentinel = tmp_path / "executed"
    names = [f"$(touch {sentinel})", f"`touch {sentinel}`", f"__import__('os').system('touch {sentinel}')",
             "{{7*7}} %s %n \x00\u202e", "'; DROP TABLE StringIds; --"]
    events = []
    for i, name in enumerate(names, 1):
        events += [rt(corr=i, ts=10 * i), kern(corr=i, ts=10 * i + 4, dur=2, name=name)]
    trace = kineto(tmp_path, events, name=f"$(touch {sentinel.name}).json")
    tl = tmp_path / "tl.json"
    doc, _ = report(capsys, trace, "--timeline", tl, tmp_path=tmp_path)
    assert not sentinel.exists()
    written = {e.get("name") for e in json.loads(tl.read_bytes())["traceEvents"]}
    assert set(names) <= written
    # the same names in an nsys export's string table
    p = _tiny_export(tmp_path / "t.sqlite")
    con = sqlite3.connect(p)
    con.execute("UPDATE StringIds SET value = ? WHERE id = 1", (names[4],))
    con.commit()
    con.close()
    report(capsys, p, tmp_path=tmp_path)
    con = sqlite3.connect(p)
    assert con.execute("SELECT COUNT(*) FROM StringIds").fetchone()[0] == 2
    con.close()


# ---------------------------------------------------------------------------------------------
# determinism across processes
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("rel", ["hta/cuda_event_sync_multi_stream.json.gz", "hta/sampled_rank-0.json.gz", "extrap/con_kernel.sqlite"])
def test_json_report_is_byte_identical_across_processes(rel, tmp_path):
    src = real(rel)
    outs = []
    for seed in ("1", "2"):
        j = tmp_path / f"r{seed}.json"
        env = dict(os.environ, PYTHONHASHSEED=seed)
        r = subprocess.run([sys.executable, "-m", "daydream.cli", str(src), "--json", str(j)], capture_output=True, env=env, cwd=ROOT, timeout=120)
        assert r.returncode == 0, r.stderr.decode()
        outs.append(j.read_bytes())
    assert outs[0] == outs[1]


def test_a_cut_after_the_events_loses_no_event_and_keeps_the_verdict(tmp_path, capsys):
    """A file cut in its top-level data after the traceEvents array (trailing logs) keeps every
    event: the warning says so and the replay is not marked unreliable (third try-out: 'kept the
    40,573 complete events', all of them, yet 'unreliable')."""
    events = [rt(corr=i, ts=10 * i) for i in range(1, 41)] + [kern(corr=i, ts=10 * i + 4, dur=2) for i in range(1, 41)]
    full = json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "GPU"}], "logs": "x" * 200}).encode()
    p = tmp_path / "cut_after.json"
    p.write_bytes(full[: len(full) - 50])  # inside the trailing "logs" string
    doc, err = report(capsys, p, tmp_path=tmp_path)
    assert "all its events are there, the top-level data after them is lost" in err
    assert doc["accounting"]["kept"] and sum(doc["accounting"]["read"].values()) == 80
    assert any(k.startswith("file cut after its events") for k in doc["accounting"]["notes"])
    assert doc["trust"]["verdict"] != "unreliable"
