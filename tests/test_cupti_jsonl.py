"""Tests of the cupti-jsonl reader, its schema, the exporter and the CUPTI collector's serializer.

Dumps are hand-written line by line in ``tmp_path``; real traces from ``../shared/traces`` (nsys
exports, small Kineto traces) are read with their adapters, exported and read back.
"""

from __future__ import annotations

import enum
import gzip
import importlib.util
import json
import random
import subprocess
import sys
import types
from pathlib import Path

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daydream import formats
from daydream.errors import TraceFormatError
from daydream.events.table import (
    COLUMNS,
    DTYPES,
    MISSING,
    CopyKind,
    DeviceInfo,
    EventTable,
    Kind,
    MemKind,
    SyncKind,
    TraceMeta,
)
from daydream.formats import cupti_jsonl as cj
from daydream.formats.cupti_jsonl import cupti_codes, line_decoding, line_schema
from daydream.formats import launch_data as LD
from daydream.formats.cupti_export import cupti_records, write_cupti_jsonl
from daydream.report.schemas import schema_text

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
NSYS_EXPORTS = sorted(TRACES.glob("**/*.sqlite"))
SMALL_KINETO = sorted(p for p in TRACES.glob("**/*.json.gz") if p.stat().st_size < 1_000_000)

HEADER = {"kind": "HEADER", "format": "cupti-jsonl", "version": 1, "pid": 100, "hostname": "gpu-box", "clock": "cupti_ns"}


def dump(tmp_path: Path, *lines, header=HEADER, name: str = "t.cupti.jsonl") -> Path:
    """Write a dump: the header, then each line (dict -> JSON; str/bytes written as they are)."""
    out = []
    if header is not None:
        out.append(json.dumps(header).encode())
    for ln in lines:
        out.append(ln.encode() if isinstance(ln, str) else ln if isinstance(ln, bytes) else json.dumps(ln).encode())
    data = b"\n".join(out) + b"\n"
    p = tmp_path / name
    p.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return p


def read(path: Path, **kw) -> EventTable:
    t = cj.load(str(path), **kw)
    assert t.accounting.balanced, t.accounting
    return t


def rows(t: EventTable) -> list[dict]:
    out = []
    for i in range(len(t)):
        r = {c: int(t.cols[c][i]) for c in COLUMNS if c not in ("name_id", "cat_id")}
        r["name"] = t.names[t.cols["name_id"][i]]
        r["cat"] = t.names[t.cols["cat_id"][i]]
        out.append(r)
    return out


def only(t: EventTable, kind: Kind) -> list[dict]:
    return [r for r in rows(t) if r["kind"] == kind]


def api(corr, start, end, cbid=211, pid=100, tid=7, kind="RUNTIME", **kw):
    return {"kind": kind, "cbid": cbid, "start": start, "end": end, "processId": pid, "threadId": tid, "correlationId": corr, **kw}


def kernel(corr, start, end, stream=7, name="_Z6vecAddPKfS0_Pfi", **kw):
    return {"kind": "CONCURRENT_KERNEL", "name": name, "start": start, "end": end, "deviceId": 0, "contextId": 1,
            "streamId": stream, "correlationId": corr, "gridX": 8, **kw}


# ---------------------------------------------------------------------------------------------
# sniffing and errors
# ---------------------------------------------------------------------------------------------


def test_sniff_accepts_only_a_cupti_jsonl_header(tmp_path):
    assert cj.sniff(json.dumps(HEADER).encode() + b"\n{}", "x")
    assert cj.sniff(b"\xef\xbb\xbf" + json.dumps(HEADER).encode(), "x")
    assert not cj.sniff(b'{"traceEvents": []}', "x")
    assert not cj.sniff(b'{"kind":"HEADER","format":"other-jsonl","version":1}\n', "x")
    assert not cj.sniff(b'{"format":"cupti-jsonl"}\n', "x")  # no HEADER kind
    assert not cj.sniff(b"SQLite format 3\x00", "x")
    assert not cj.sniff(b'{"kind":"HEADER","format":"cupti-jsonl"', "x")  # cut JSON
    for name in ("a.cupti.jsonl", "b.jsonl.gz", "c.json"):  # by content, never by extension
        p = dump(tmp_path, api(1, 10, 20), name=name)
        assert formats.detect(str(p)) is cj
        assert len(formats.load_trace(str(p))) == 1


@pytest.mark.parametrize(
    "first, message",
    [
        (None, "missing cupti-jsonl header"),
        ({"kind": "HEADER", "format": "kineto-jsonl", "version": 1}, "not 'cupti-jsonl'"),
        ({"kind": "HEADER", "format": "cupti-jsonl", "version": 2}, "version 2"),
        ({"kind": "HEADER", "format": "cupti-jsonl", "version": 1, "pid": "x"}, "bad header field"),
        ("not json at all", "not JSON"),
    ],
)
def test_header_errors_name_line_1(tmp_path, first, message):
    p = tmp_path / "bad.jsonl"
    head = "" if first is None else (first if isinstance(first, str) else json.dumps(first)) + "\n"
    p.write_text(head + json.dumps(api(1, 10, 20)) + "\n")
    for strict in (False, True):
        with pytest.raises(TraceFormatError) as e:
            cj.load(str(p), strict=strict)
        assert e.value.where == "line 1" and message in str(e.value), str(e.value)


def test_empty_file_and_blank_lines(tmp_path):
    p = tmp_path / "empty.jsonl"
    p.write_bytes(b"\n\n")
    with pytest.raises(TraceFormatError, match="empty"):
        cj.load(str(p))
    q = tmp_path / "blank.jsonl"
    q.write_text("\n" + json.dumps(HEADER) + "\n\n" + json.dumps(api(1, 10, 20)) + "\n   \n")
    assert len(read(q)) == 1


def test_bad_line_is_skipped_and_named_or_raised_when_strict(tmp_path):
    p = dump(tmp_path, api(1, 10, 20), "{not json", api(2, 30, 40), {"kind": "RUNTIME", "start": "late"}, api(3, 50, 60))
    t = read(p)
    assert [r["correlation"] for r in rows(t)] == [1, 2, 3]
    assert t.accounting.skipped["malformed line"] == 2
    assert t.meta.extra["malformed_lines"] == "3,5"
    with pytest.raises(TraceFormatError) as e:
        cj.load(str(p), strict=True)
    assert e.value.where == "line 3"


def test_truncated_gzip_keeps_what_was_written(tmp_path):
    p = dump(tmp_path, *[api(i, 10 * i, 10 * i + 5) for i in range(1, 200)], name="cut.jsonl.gz")
    raw = p.read_bytes()
    p.write_bytes(raw[: len(raw) * 2 // 3])
    with pytest.warns(UserWarning, match="is truncated"):  # the cut falls inside a line
        t = read(p)
    assert 0 < len(t) < 199
    assert list(np.diff(t.correlation)) == [1] * (len(t) - 1)
    with pytest.raises(TraceFormatError):
        cj.load(str(p), strict=True)


def test_unknown_and_unrepresented_kinds_are_counted(tmp_path):
    p = dump(
        tmp_path, api(1, 10, 20),
        {"kind": "FROBNICATE", "x": 1},
        {"kind": "OVERHEAD", "overheadKind": 1, "start": 1, "end": 2},
        {"kind": "MARKER_DATA", "id": 3, "payload": {"metricValueUint64": 5}},
        {"kind": "EVENT", "domain": 5, "name": 7},  # field types that clash with used kinds
        {"kind": "HEADER", "format": "cupti-jsonl", "version": 1},
    )
    for strict in (False, True):
        t = read(p, strict=strict)
        sk = t.accounting.skipped
        assert sk["unknown record kind 'FROBNICATE'"] == 1
        assert sk["OVERHEAD records (not represented in the event table)"] == 1
        assert sk["MARKER_DATA records (not represented in the event table)"] == 1
        assert sk["EVENT records (not represented in the event table)"] == 1
        assert sk["HEADER line after line 1"] == 1
        assert "malformed line" not in sk
        assert len(t) == 1


# ---------------------------------------------------------------------------------------------
# linking
# ---------------------------------------------------------------------------------------------


def test_launch_linking_out_of_order_and_late_external_correlation(tmp_path):
    p = dump(
        tmp_path,
        {"kind": "EXTERNAL_CORRELATION", "externalKind": 3, "externalId": 900, "correlationId": 5},
        kernel(5, 300, 400),
        kernel(6, 410, 500, stream=8),
        api(5, 100, 150, pid=4242, tid=4250),
        api(6, 160, 170, cbid=307, kind="DRIVER", pid=4242, tid=4250),  # driver domain by cbid
        api(8, 180, 190, cbid=99999),
        api(9, 200, 210, name="cudaMalloc_v3020"),
        {"kind": "EXTERNAL_CORRELATION", "externalKind": 3, "externalId": 901, "correlationId": 6},
        {"kind": "EXTERNAL_CORRELATION", "externalKind": 3, "externalId": 999, "correlationId": 77},  # nothing has it
    )
    t = read(p)
    by_corr = {(r["kind"], r["correlation"]): r for r in rows(t)}
    launch, k = by_corr[(Kind.RUNTIME, 5)], by_corr[(Kind.KERNEL, 5)]
    assert (launch["name"], launch["cat"], launch["pid"], launch["tid"]) == ("cudaLaunchKernel_v7000", "RUNTIME", 4242, 4250)
    assert (k["pid"], k["tid"], k["device"], k["stream"], k["cat"]) == (4242, -1, 0, 7, "CONCURRENT_KERNEL")
    assert launch["external_id"] == k["external_id"] == 900
    assert by_corr[(Kind.RUNTIME, 6)]["name"] == "cuLaunchKernel" and by_corr[(Kind.RUNTIME, 6)]["cat"] == "DRIVER"
    assert by_corr[(Kind.KERNEL, 6)]["external_id"] == 901 and by_corr[(Kind.KERNEL, 6)]["pid"] == 4242
    assert by_corr[(Kind.RUNTIME, 8)]["name"] == "<runtime cbid 99999>"
    assert by_corr[(Kind.RUNTIME, 9)]["name"] == "cudaMalloc_v3020"  # the record's name wins
    assert by_corr[(Kind.RUNTIME, 8)]["external_id"] == -1
    acc = t.accounting
    assert acc.kept["EXTERNAL_CORRELATION"] == 2
    assert acc.skipped["EXTERNAL_CORRELATION without a record of its correlationId"] == 1
    assert [r["start_ns"] for r in rows(t)] == sorted(r["start_ns"] for r in rows(t))


def test_gpu_pid_falls_back_to_header_and_is_noted(tmp_path):
    p = dump(tmp_path, kernel(42, 10, 20), {"kind": "MEMSET", "bytes": 64, "start": 30, "end": 31, "deviceId": 0,
                                           "streamId": 7, "correlationId": 43, "memoryKind": 3, "processId": 555})
    k, m = only(read(p), Kind.KERNEL)[0], only(read(p), Kind.MEMSET)[0]
    assert k["pid"] == 100  # header pid
    assert m["pid"] == 555  # an explicit processId wins
    assert (m["bytes"], m["name"]) == (64, "Memset (Device)")
    assert read(p).accounting.notes["kernel without an API record of the same correlationId"] == 1
    q = dump(tmp_path, kernel(42, 10, 20), header={k_: v for k_, v in HEADER.items() if k_ != "pid"}, name="nopid.jsonl")
    assert only(read(q), Kind.KERNEL)[0]["pid"] == -1


def test_external_correlation_custom0_wins(tmp_path):
    p = dump(
        tmp_path, api(5, 10, 20),
        {"kind": "EXTERNAL_CORRELATION", "externalKind": 3, "externalId": 11, "correlationId": 5},
        {"kind": "EXTERNAL_CORRELATION", "externalKind": 4, "externalId": 22, "correlationId": 5},
        api(6, 30, 40),
        {"kind": "EXTERNAL_CORRELATION", "externalKind": 4, "externalId": 33, "correlationId": 6},
        {"kind": "EXTERNAL_CORRELATION", "externalKind": 4, "externalId": 34, "correlationId": 6},
    )
    t = read(p)
    assert [r["external_id"] for r in rows(t)] == [11, 34]  # CUSTOM0, else the last one
    assert t.accounting.skipped["EXTERNAL_CORRELATION superseded by another for the same correlationId"] == 2


def test_memcpy_kinds_and_default_names(tmp_path):
    p = dump(
        tmp_path,
        {"kind": "MEMCPY", "copyKind": 1, "srcKind": 1, "dstKind": 3, "bytes": 4096, "start": 10, "end": 20,
         "deviceId": 0, "streamId": 7, "correlationId": 3, "flags": 1},
        {"kind": "MEMCPY2", "copyKind": 10, "srcKind": 3, "dstKind": 3, "bytes": 8, "start": 30, "end": 40,
         "deviceId": 1, "streamId": 9, "correlationId": 4, "srcDeviceId": 1, "dstDeviceId": 0},
        {"kind": "MEMCPY", "copyKind": 2, "srcKind": 3, "dstKind": 2, "bytes": 1, "start": 50, "end": 60, "deviceId": 0,
         "streamId": 7, "correlationId": 5, "name": "my copy"},
    )
    a, b, c = only(read(p), Kind.MEMCPY)
    assert (a["copy_kind"], a["src_kind"], a["dst_kind"], a["bytes"]) == (CopyKind.HTOD, MemKind.PAGEABLE, MemKind.DEVICE, 4096)
    assert a["name"] == "Memcpy HtoD (Pageable -> Device)" and a["cat"] == "MEMCPY"
    assert (b["copy_kind"], b["device"], b["cat"], b["name"]) == (CopyKind.PTOP, 1, "MEMCPY2", "Memcpy PtoP (Device -> Device)")
    assert c["name"] == "my copy"


def test_marker_pairing(tmp_path):
    th = {"objectKind": 2, "objectId": {"processId": 100, "threadId": 7}}
    p = dump(
        tmp_path,
        {"kind": "MARKER", "flags": 4, "timestamp": 50, "id": 1, **th, "name": None},  # END before START
        {"kind": "MARKER", "flags": 2, "timestamp": 10, "id": 1, "name": "forward", "domain": "PyTorch", **th},
        {"kind": "MARKER", "flags": 2, "timestamp": 60, "id": 1, "name": "backward", **th},  # id reused later
        {"kind": "MARKER", "flags": 4, "timestamp": 90, "id": 1, **th},
        {"kind": "MARKER", "flags": 1, "timestamp": 70, "id": 2, "name": "tick", **th},
        {"kind": "MARKER", "flags": 2, "timestamp": 80, "id": 3, "name": "open", **th},  # never ends
        {"kind": "MARKER", "flags": 4, "timestamp": 85, "id": 4, **th},  # never started
        {"kind": "MARKER", "flags": 2, "timestamp": 20, "id": 5, "name": "gpu range", "objectKind": 5,
         "objectId": {"deviceId": 0, "contextId": 1, "streamId": 7}},
        {"kind": "MARKER", "flags": 4, "timestamp": 30, "id": 5, "objectKind": 5, "objectId": {"deviceId": 0, "contextId": 1, "streamId": 7}},
        {"kind": "MARKER", "flags": 8, "timestamp": 33, "id": 6},  # a sync-acquire marker: not represented
        kernel(1, 100, 120),
    )
    t = read(p)
    ranges = {r["name"]: r for r in only(t, Kind.RANGE)}
    assert set(ranges) == {"forward", "backward", "open", "gpu range"}
    f = ranges["forward"]
    assert (f["start_ns"], f["end_ns"], f["pid"], f["tid"], f["cat"], f["device"]) == (10, 50, 100, 7, "PyTorch", -1)
    assert (ranges["backward"]["start_ns"], ranges["backward"]["end_ns"], ranges["backward"]["cat"]) == (60, 90, "MARKER")
    assert ranges["open"]["end_ns"] == 120  # to the end of the trace
    g = ranges["gpu range"]
    assert (g["device"], g["stream"], g["pid"], g["tid"], g["end_ns"]) == (0, 7, -1, -1, 30)
    (tick,) = only(t, Kind.MARKER)
    assert (tick["name"], tick["start_ns"], tick["end_ns"], tick["tid"]) == ("tick", 70, 70, 7)
    acc = t.accounting
    assert acc.read["MARKER"] == 10
    assert acc.kept["MARKER"] == 8  # 4 starts, 3 matched ends, 1 instant
    assert acc.skipped["MARKER END without a matching START"] == 1
    assert acc.skipped["MARKER with flags neither START, END nor INSTANTANEOUS"] == 1
    assert acc.notes["MARKER START without END (range runs to the trace end)"] == 1


def test_sync_links_by_event_sync_id(tmp_path):
    p = dump(
        tmp_path,
        {"kind": "SYNCHRONIZATION", "type": 2, "start": 500, "end": 501, "correlationId": 40, "contextId": 1,
         "streamId": 9, "cudaEventId": 3, "cudaEventSyncId": 1001},
        {"kind": "CUDA_EVENT", "correlationId": 10, "contextId": 1, "streamId": 7, "eventId": 3, "cudaEventSyncId": 1001},
        {"kind": "CUDA_EVENT", "correlationId": 30, "contextId": 1, "streamId": 8, "eventId": 3, "cudaEventSyncId": 1002},
        api(40, 495, 502, cbid=147, pid=4242),
    )
    t = read(p)
    (s,) = only(t, Kind.SYNC)
    # the sync id picks the first record although a later one of the same event exists
    assert (s["sync_kind"], s["stream"], s["link_stream"], s["link_correlation"]) == (SyncKind.STREAM_WAIT_EVENT, 9, 7, 10)
    assert (s["name"], s["cat"], s["pid"]) == ("Stream Wait Event", "SYNCHRONIZATION", 4242)
    assert t.accounting.kept["CUDA_EVENT"] == 1
    assert t.accounting.skipped["CUDA_EVENT not awaited by any SYNCHRONIZATION"] == 1


def test_sync_links_by_context_and_event_id_to_latest_earlier_record(tmp_path):
    inv = 0xFFFFFFFF
    ev = [{"kind": "CUDA_EVENT", "correlationId": c, "contextId": ctx, "streamId": s, "eventId": 3}
          for c, ctx, s in ((30, 1, 13), (10, 1, 11), (20, 1, 12), (22, 2, 99))]
    p = dump(
        tmp_path,
        {"kind": "SYNCHRONIZATION", "type": 1, "start": 100, "end": 200, "correlationId": 25, "contextId": 1,
         "streamId": inv, "cudaEventId": 3},
        {"kind": "SYNCHRONIZATION", "type": 1, "start": 300, "end": 400, "correlationId": 5, "contextId": 1,
         "streamId": inv, "cudaEventId": 3},  # before any record of the event: unlinked
        {"kind": "SYNCHRONIZATION", "type": 3, "start": 500, "end": 600, "correlationId": 50, "contextId": 1,
         "streamId": 7, "cudaEventId": inv},
        {"kind": "SYNCHRONIZATION", "type": 4, "start": 700, "end": 800, "correlationId": 60, "contextId": 1,
         "streamId": inv, "cudaEventId": inv},
        *ev,
    )
    t = read(p)
    a, b, c, d = only(t, Kind.SYNC)
    assert (a["stream"], a["link_stream"], a["link_correlation"], a["name"]) == (-1, 12, 20, "Event Sync")
    assert (b["link_stream"], b["link_correlation"]) == (-1, -1)
    assert (c["sync_kind"], c["stream"], c["link_stream"], c["name"]) == (SyncKind.STREAM_SYNC, 7, -1, "Stream Sync")
    assert (d["sync_kind"], d["stream"], d["name"]) == (SyncKind.CONTEXT_SYNC, -1, "Context Sync")
    assert t.accounting.notes["SYNCHRONIZATION on an event without its CUDA_EVENT record"] == 1
    assert t.accounting.kept["CUDA_EVENT"] == 1


def test_devices_header_and_cpu_op_extension(tmp_path):
    p = dump(
        tmp_path,
        {"kind": "DEVICE", "id": 0, "name": "NVIDIA H100", "computeCapabilityMajor": 9, "computeCapabilityMinor": 0,
         "numMultiprocessors": 132, "globalMemorySize": 85899345920},
        {"kind": cupti_codes.CPU_OP_KIND, "name": "aten::mm", "start": 5, "end": 50, "processId": 100, "threadId": 7, "externalId": 17},
        header={**HEADER, "rank": 1, "worldSize": 8, "cuptiVersion": 26, "extra": {"job": "bert"}},
    )
    t = read(p)
    (op,) = rows(t)
    assert (op["kind"], op["name"], op["cat"], op["external_id"], op["tid"]) == (Kind.CPU_OP, "aten::mm", cupti_codes.CPU_OP_KIND, 17, 7)
    assert t.meta.devices == [DeviceInfo(id=0, name="NVIDIA H100", compute_major=9, compute_minor=0, num_sms=132, total_memory_bytes=85899345920)]
    assert (t.meta.rank, t.meta.world_size, t.meta.format) == (1, 8, "cupti-jsonl")
    assert t.meta.extra["job"] == "bert" and t.meta.extra["hostname"] == "gpu-box" and t.meta.extra["cuptiVersion"] == "26"


def test_documented_example_reads_as_documented(tmp_path):
    doc = (ROOT / "docs" / "cupti-jsonl.md").read_text()
    example = doc.split("## Example")[1].split("```json")[1].split("```")[0].strip()
    p = tmp_path / "doc.jsonl"
    p.write_text(example + "\n")
    got = [(r["kind"], r["name"], r["pid"], r["tid"], r["stream"], r["external_id"]) for r in rows(read(p))]
    assert got == [
        (Kind.RANGE, "forward", 4242, 4250, -1, -1),
        (Kind.RUNTIME, "cudaLaunchKernel_v7000", 4242, 4250, -1, 17),
        (Kind.RUNTIME, "cudaStreamSynchronize_v3020", 4242, 4250, -1, -1),
        (Kind.SYNC, "Stream Sync", 4242, -1, 7, -1),
        (Kind.KERNEL, "_Z6vecAddPKfS0_Pfi", 4242, -1, 7, 17),
    ]
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(line_schema.cupti_jsonl_schema())
    for line in example.splitlines():
        assert not list(validator.iter_errors(json.loads(line))), line


# ---------------------------------------------------------------------------------------------
# schema
# ---------------------------------------------------------------------------------------------


def test_schema_file_is_current():
    path = ROOT / "schemas" / "cupti-jsonl.schema.json"
    assert path.exists(), "run python scripts/write_schemas.py"
    assert path.read_text() == schema_text("cupti-jsonl.schema.json"), "schemas/cupti-jsonl.schema.json is stale: run python scripts/write_schemas.py"
    assert json.loads(path.read_text()) == line_schema.cupti_jsonl_schema()


def test_every_field_the_reader_uses_is_in_the_schema():
    documented = {f.name for t in (*line_schema.RECORD_TYPES, line_schema.ObjectId) for f in msgspec.structs.fields(t)}
    used = {f.name for f in msgspec.structs.fields(line_decoding._Line)} - {"kind"}
    assert used <= documented, used - documented
    assert {f.name for f in msgspec.structs.fields(line_decoding._ObjectId)} <= {f.name for f in msgspec.structs.fields(line_schema.ObjectId)}
    assert set(line_decoding.OVERRIDE_COLUMNS) == {f.name for f in msgspec.structs.fields(line_schema.Overrides)}
    assert set(line_decoding.OVERRIDE_COLUMNS) <= set(COLUMNS)


# ---------------------------------------------------------------------------------------------
# exporter
# ---------------------------------------------------------------------------------------------


class Rows:
    """Collects rows for EventTable.from_columns; every column defaults to its missing value."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, kind: Kind, name: str, cat: str, start: int, end: int, **kw) -> None:
        r = {c: MISSING[c] for c in COLUMNS if c not in ("name_id", "cat_id")}
        r.update(kind=int(kind), start_ns=start, end_ns=end, name=name, cat=cat, **kw)
        self.rows.append(r)

    def table(self, meta: TraceMeta | None = None) -> EventTable:
        names: dict[str, int] = {}
        cols = {c: [r[c] for r in self.rows] for c in COLUMNS if c not in ("name_id", "cat_id")}
        cols["name_id"] = [names.setdefault(r["name"], len(names)) for r in self.rows]
        cols["cat_id"] = [names.setdefault(r["cat"], len(names)) for r in self.rows]
        return EventTable.from_columns(cols, list(names), meta)


def every_kind_table() -> EventTable:
    b = Rows()
    P, T = 4242, 4250
    b.add(Kind.CPU_OP, "aten::linear", "cpu_op", 0, 900, pid=P, tid=T, external_id=1)
    b.add(Kind.CPU_OP, "aten::relu", "cpu_op", 950, 990, pid=P, tid=T)  # no external id
    b.add(Kind.RUNTIME, "cudaLaunchKernel", "cuda_runtime", 100, 150, pid=P, tid=T, correlation=10, external_id=1)
    b.add(Kind.KERNEL, "volta_sgemm_128x64_nn", "kernel", 200, 400, pid=P, device=0, stream=7, correlation=10, external_id=1)
    b.add(Kind.RUNTIME, "cuLaunchKernel", "cuda_driver", 160, 170, pid=P, tid=T, correlation=11, external_id=2)
    b.add(Kind.KERNEL, "triton_poi_fused_0", "kernel", 410, 420, pid=P, device=0, stream=7, correlation=11, external_id=3)  # differs from its launch
    b.add(Kind.RUNTIME, "cudaMemcpyAsync", "cuda_runtime", 180, 190, pid=P, tid=T, correlation=12)
    b.add(Kind.MEMCPY, "Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 430, 440, pid=P, device=0, stream=7, correlation=12,
          bytes=1 << 20, copy_kind=CopyKind.HTOD, src_kind=MemKind.PINNED, dst_kind=MemKind.DEVICE)
    b.add(Kind.MEMCPY, "Memcpy PtoP (Device -> Device)", "MEMCPY2", 441, 442, pid=P, device=1, stream=9, correlation=13,
          bytes=64, copy_kind=CopyKind.PTOP, src_kind=MemKind.DEVICE, dst_kind=MemKind.DEVICE)
    b.add(Kind.MEMSET, "Memset (Device)", "gpu_memset", 450, 451, pid=P, device=0, stream=7, correlation=14, bytes=256)
    b.add(Kind.RUNTIME, "cudaEventRecord", "cuda_runtime", 191, 192, pid=P, tid=T, correlation=15)
    b.add(Kind.RUNTIME, "cudaStreamWaitEvent", "cuda_runtime", 193, 194, pid=P, tid=T, correlation=16)
    b.add(Kind.SYNC, "Stream Wait Event", "cuda_sync", 193, 194, pid=P, device=0, stream=9, correlation=16,
          sync_kind=SyncKind.STREAM_WAIT_EVENT, link_stream=7, link_correlation=15)
    b.add(Kind.SYNC, "Event Sync", "cuda_sync", 195, 460, pid=P, device=0, correlation=17, sync_kind=SyncKind.EVENT_SYNC, link_correlation=15)
    b.add(Kind.SYNC, "Context Sync", "cuda_sync", 470, 480, pid=P, tid=T, correlation=18, sync_kind=SyncKind.CONTEXT_SYNC)
    b.add(Kind.RANGE, "ProfilerStep#3", "user_annotation", 0, 1000, pid=P, tid=T, external_id=5)
    b.add(Kind.RANGE, "forward", "", 1, 999, pid=P, tid=T)
    b.add(Kind.RANGE, "gpu annotation", "gpu_user_annotation", 200, 420, device=0, stream=7)
    b.add(Kind.RANGE, "MARKER", "MARKER", 2, 3, pid=P, tid=T)
    b.add(Kind.MARKER, "checkpoint ✓", "cpu_instant_event", 500, 500, pid=P, tid=T)
    b.add(Kind.MARKER, "odd instant", "nvtx", 510, 520)  # end != start, no thread
    b.add(Kind.KERNEL, "kernel of another process", "kernel", 600, 700, pid=-1, device=0, stream=7, correlation=10)
    b.add(Kind.RUNTIME, "cudaFree", "cuda_runtime", -50, -10, pid=-1, tid=1 << 40, correlation=-1)  # negative times, big tid
    meta = TraceMeta(source="x.json", format="kineto", rank=3, world_size=4, extra={"note": "hand-made"},
                     devices=[DeviceInfo(id=0, name="A100", compute_major=8, compute_minor=0, num_sms=108, total_memory_bytes=1 << 35),
                              DeviceInfo(id=1)])
    return b.table(meta)


@pytest.mark.parametrize("name", ["t.cupti.jsonl", "t.cupti.jsonl.gz"])
def test_export_round_trip_every_kind(tmp_path, name):
    t = every_kind_table()
    p = tmp_path / name
    write_cupti_jsonl(t, p)
    r = read(p)
    assert t.equals(r)
    assert r.meta.devices == t.meta.devices
    assert (r.meta.rank, r.meta.world_size) == (3, 4)
    assert r.meta.extra["note"] == "hand-made" and r.meta.extra["exported_from_format"] == "kineto"
    assert formats.detect(str(p)) is cj
    # a second trip writes the same bytes
    q = tmp_path / ("again." + name)
    write_cupti_jsonl(r, q)
    assert gzip.decompress(q.read_bytes()) == gzip.decompress(p.read_bytes()) if name.endswith(".gz") else q.read_bytes() == p.read_bytes()


def test_export_writes_natural_cupti_records(tmp_path):
    header, recs = cupti_records(every_kind_table())
    lines = [msgspec.to_builtins(r) for r in recs]
    by_kind: dict[str, list[dict]] = {}
    for ln in lines:
        by_kind.setdefault(ln["kind"], []).append(ln)
    assert header.pid == 4242
    launch = next(x for x in by_kind["RUNTIME"] if x.get("correlationId") == 10)
    assert launch == {"kind": "RUNTIME", "name": "cudaLaunchKernel", "cat": "cuda_runtime", "domain": "runtime",
                      "start": 100, "end": 150, "processId": 4242, "threadId": 4250, "correlationId": 10}
    assert by_kind["DRIVER"][0]["name"] == "cuLaunchKernel" and by_kind["DRIVER"][0]["cbid"] == 307
    k = next(x for x in by_kind["CONCURRENT_KERNEL"] if x["correlationId"] == 10)
    assert "processId" not in k and "externalId" not in k  # pid from the launch, id from EXTERNAL_CORRELATION
    assert {(x["correlationId"], x["externalId"]) for x in by_kind["EXTERNAL_CORRELATION"]} == {(10, 1), (11, 2)}
    assert next(x for x in by_kind["CONCURRENT_KERNEL"] if x["correlationId"] == 11)["externalId"] == 3
    other = next(x for x in by_kind["CONCURRENT_KERNEL"] if x["name"] == "kernel of another process")
    assert other["daydream"] == {"pid": -1}
    assert [x["cudaEventSyncId"] for x in by_kind["CUDA_EVENT"]] == [x["cudaEventSyncId"] for x in by_kind["SYNCHRONIZATION"] if "cudaEventSyncId" in x]
    ctx = next(x for x in by_kind["SYNCHRONIZATION"] if x["type"] == SyncKind.CONTEXT_SYNC)
    assert ctx["streamId"] == 0xFFFFFFFF
    flags = [x["flags"] for x in by_kind["MARKER"]]
    assert flags.count(cupti_codes.MARKER_START) == flags.count(cupti_codes.MARKER_END) == 4 and flags.count(cupti_codes.MARKER_INSTANTANEOUS) == 2
    assert len(by_kind[cupti_codes.CPU_OP_KIND]) == 2 and len(by_kind["DEVICE"]) == 2


def test_exported_lines_match_the_schema(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    validator = jsonschema.Draft202012Validator(json.loads((ROOT / "schemas" / "cupti-jsonl.schema.json").read_text()))
    p = tmp_path / "t.jsonl"
    write_cupti_jsonl(every_kind_table(), p)
    lines = [json.loads(x) for x in p.read_text().splitlines()]
    lines += [kernel(1, 2, 3), api(1, 1, 2), {"kind": "STREAM", "streamId": 7, "flag": 1}]
    for ln in lines:
        errors = list(validator.iter_errors(ln))
        assert not errors, (ln, errors[0].message)
    for bad in ({"kind": "RUNTIME", "start": 1}, {"kind": "MARKER", "flags": -1, "timestamp": 1, "id": 1}):
        assert list(validator.iter_errors(bad)), bad


def test_export_rejects_bad_kinds_and_reserved_values(tmp_path):
    b = Rows()
    b.add(Kind.KERNEL, "k", "kernel", 1, 2)
    t = b.table()
    t.cols["kind"][0] = 42
    with pytest.raises(ValueError, match="kind 42"):
        write_cupti_jsonl(t, tmp_path / "x.jsonl")
    t = b.table()
    t.cols["bytes"][0] = cupti_codes.ABSENT
    with pytest.raises(ValueError, match="-2\\*\\*63"):
        write_cupti_jsonl(t, tmp_path / "x.jsonl")


# ---------------------------------------------------------------------------------------------
# property: random tables survive write -> read
# ---------------------------------------------------------------------------------------------

I64_MIN = -(1 << 63) + 16
NAMES = ["", "k", "cudaLaunchKernel_v7000", "Stream Sync", "Memset (Device)", "Memcpy HtoD (Pageable -> Device)",
         "MARKER", "<unnamed kernel>", "é∂ƒ\n\"quote\"", "cbid", "RUNTIME"]
CATS = ["", "cuda_runtime", "cuda_driver", "kernel", "KERNEL", "MEMCPY2", "MARKER", "SYNCHRONIZATION", "RUNTIME", "DRIVER",
        "nvtx", cupti_codes.CPU_OP_KIND, "CONCURRENT_KERNEL"]


def value(dtype: str, small: list[int]):
    info = np.iinfo(np.dtype(dtype))
    return st.one_of(st.sampled_from(small), st.integers(max(int(info.min), I64_MIN), int(info.max)))


@st.composite
def event_tables(draw):
    n = draw(st.integers(0, 30))
    small = [-1, 0, 1, 2, 7, 4242, 0xFFFFFFFF, 1 << 32]
    cols = {
        "kind": draw(st.lists(st.sampled_from([int(k) for k in Kind]), min_size=n, max_size=n)),
        "start_ns": draw(st.lists(value("int64", [-5, 0, 1, 10, 100]), min_size=n, max_size=n)),
        "name_id": draw(st.lists(st.integers(0, len(NAMES) - 1), min_size=n, max_size=n)),
        "cat_id": draw(st.lists(st.integers(len(NAMES), len(NAMES) + len(CATS) - 1), min_size=n, max_size=n)),
    }
    cols["end_ns"] = [s + d if s + d < (1 << 63) else s for s, d in zip(cols["start_ns"], draw(st.lists(st.sampled_from([0, 1, 50, -3]), min_size=n, max_size=n)))]
    for c in COLUMNS:
        if c in cols:
            continue
        dt = str(DTYPES[c])
        pool = [MISSING[c]] * 4 + ([0, 1, 2, 3, 8, 10] if dt == "int8" else small) + ([-3, 127] if dt == "int8" else [])
        pool = [v for v in pool if np.iinfo(np.dtype(dt)).min <= v <= np.iinfo(np.dtype(dt)).max]
        cols[c] = draw(st.lists(value(dt, pool), min_size=n, max_size=n))
    return EventTable.from_columns(cols, NAMES + CATS)


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(t=event_tables())
def test_random_tables_survive_write_read(tmp_path, t):
    p = tmp_path / "h.jsonl"
    write_cupti_jsonl(t, p)
    r = read(p)
    assert t.equals(r)


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(t=event_tables(), seed=st.integers(0, 2**32))
def test_record_order_does_not_matter(tmp_path, t, seed):
    """Shuffled record lines give the same rows (ties of equal start/kind/end may reorder)."""
    p = tmp_path / "h.jsonl"
    write_cupti_jsonl(t, p)
    lines = p.read_bytes().splitlines()
    body = lines[1:]
    random.Random(seed).shuffle(body)
    p.write_bytes(b"\n".join([lines[0], *body]) + b"\n")
    r = read(p)
    key = lambda x: sorted(tuple(sorted(d.items())) for d in rows(x))  # noqa: E731
    assert key(t) == key(r)


# ---------------------------------------------------------------------------------------------
# real traces: adapter -> cupti-jsonl -> reader
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("path", NSYS_EXPORTS or [pytest.param(None, marks=pytest.mark.skip(reason="../shared/traces not available"))],
                         ids=lambda p: p.name if p else "none")
def test_nsys_exports_round_trip(tmp_path, path):
    from daydream.formats import nsys
    t = nsys.load(str(path))
    out = tmp_path / "x.cupti.jsonl.gz"
    write_cupti_jsonl(t, out)
    r = read(out)
    assert t.equals(r)
    assert r.meta.devices == t.meta.devices
    assert_same_launch(t, r)


@pytest.mark.slow
@pytest.mark.parametrize("path", SMALL_KINETO or [pytest.param(None, marks=pytest.mark.skip(reason="../shared/traces not available"))],
                         ids=lambda p: p.name if p else "none")
def test_kineto_traces_round_trip(tmp_path, path):
    from daydream.formats import kineto
    t = kineto.load(str(path))
    out = tmp_path / "x.cupti.jsonl"
    write_cupti_jsonl(t, out)
    r = read(out)
    assert t.equals(r)
    assert_same_launch(t, r)


def assert_same_launch(t: EventTable, r: EventTable) -> None:
    """The launch configuration written with the kernel records reads back as the source's."""
    a, b = LD.launch_data_of(t), LD.launch_data_of(r)
    assert b.reason == a.reason
    if len(a):
        for f in ("key", "grid", "block", "regs", "smem"):
            assert np.array_equal(getattr(a, f), getattr(b, f)), f
        assert b.counts["with launch configuration"] == a.counts["with launch configuration"]


def test_launch_configuration_is_read_and_cleaned(tmp_path):
    big = 1 << 40
    p = dump(
        tmp_path,
        kernel(1, 10, 20, gridX=8, gridY=2, gridZ=1, blockX=128, blockY=1, blockZ=1, registersPerThread=32,
               staticSharedMemory=1024, dynamicSharedMemory=4096),
        # odd values: cleaned to unknown (-1), never a malformed record
        kernel(2, 30, 40, gridX=-1, gridY=1, gridZ=1, blockX="128", blockY=1, blockZ=1, registersPerThread=True,
               staticSharedMemory=12.0, dynamicSharedMemory=None),
        kernel(3, 50, 60, gridX=big * big, gridY=1, gridZ=1, blockX=1 << 31, blockY=1, blockZ=1, registersPerThread=40.7,
               staticSharedMemory=1 << 62, dynamicSharedMemory=0),
        # the row's device and correlation are the daydream overrides, as the table has them
        kernel(4, 70, 80, gridX=3, gridY=3, gridZ=3, blockX=64, blockY=2, blockZ=1, daydream={"device": 5, "correlation": 9}),
    )
    t = read(p)
    assert len(only(t, Kind.KERNEL)) == 4
    d = LD.launch_data_of(t)
    assert d.reason == ""
    got = {(int(k) >> 40, int(k) & ((1 << 40) - 1)): (g, b, r, m) for k, g, b, r, m in
           zip(d.key, d.grid.tolist(), d.block.tolist(), d.regs.tolist(), d.smem.tolist())}
    assert got == {
        (0, 1): ([8, 2, 1], [128, 1, 1], 32, 5120),
        (0, 2): ([-1, -1, -1], [-1, -1, -1], -1, -1),
        (0, 3): ([-1, -1, -1], [-1, -1, -1], 40, -1),
        (5, 9): ([3, 3, 3], [64, 2, 1], -1, -1),
    }
    assert d.counts["with launch configuration"] == 2


def test_launch_configuration_of_an_unreadable_dump_says_why(tmp_path):
    p = dump(tmp_path, kernel(1, 10, 20), header={"kind": "HEADER", "format": "cupti-jsonl", "version": 99})
    LD._LAST.clear()
    d = LD.read_launch_data(str(p), cj.NAME)
    assert len(d) == 0 and d.reason == "launch data unreadable (TraceFormatError)"


# ---------------------------------------------------------------------------------------------
# collector (scripts/collect_cupti.py): runs only on a GPU machine; its serializer runs here
# ---------------------------------------------------------------------------------------------


def load_collector():
    spec = importlib.util.spec_from_file_location("collect_cupti", ROOT / "scripts" / "collect_cupti.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_collector_imports_without_cupti():
    code = ("import importlib.util, sys; sys.modules['cupti'] = None; "  # None: any import of cupti fails
            f"s = importlib.util.spec_from_file_location('c', {str(ROOT / 'scripts' / 'collect_cupti.py')!r}); "
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); print(m.camel('correlation_id'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "correlationId"


class Color(enum.IntEnum):
    RED = 3


def test_record_to_line_serializes_binding_objects():
    cc = load_collector()
    ns = types.SimpleNamespace
    k = ns(kind=10, name="_Z3foov", start=1, end=5, device_id=0, context_id=1, stream_id=7, correlation_id=3, grid_x=4,
           cache_config=ns(config=ns(requested=1, executed=2)), uuid=b"\x01\xff", size_=9, launch_type=Color.RED,
           ratios=(1.5, 2), shape=np.array([2, 3]), method=lambda: 1, _private=1)
    line = cc.record_to_line(k, "CONCURRENT_KERNEL")
    assert line == {"kind": "CONCURRENT_KERNEL", "name": "_Z3foov", "start": 1, "end": 5, "deviceId": 0, "contextId": 1,
                    "streamId": 7, "correlationId": 3, "gridX": 4, "cacheConfig": {"config": {"requested": 1, "executed": 2}},
                    "uuid": "01ff", "size": 9, "launchType": 3, "ratios": [1.5, 2], "shape": [2, 3]}
    obj = ns(pt=ns(process_id=5, thread_id=6), dcs=ns(device=1, context_id=2, stream_id=3))
    m = cc.record_to_line(ns(kind=12, flags=2, timestamp=9, id=1, object_kind=2, object_id=obj, name="fwd", domain=None), "MARKER")
    assert m["objectId"] == {"processId": 5, "threadId": 6} and m["domain"] is None
    m = cc.record_to_line(ns(kind=12, flags=2, timestamp=9, id=1, object_kind=5, object_id=obj, name="g", domain=None), "MARKER")
    assert m["objectId"] == {"deviceId": 1, "contextId": 2, "streamId": 3}
    a = ns(kind=5, cbid=211, start=1, end=2, process_id=1, thread_id=2, correlation_id=3, return_value=0)
    assert cc.record_to_line(a, "RUNTIME", callback_name=lambda d, c: f"{d}:{c}")["name"] == "runtime:211"
    assert cc.record_to_line(a, "DRIVER", callback_name=lambda d, c: f"{d}:{c}")["domain"] == "driver"
    assert "name" not in cc.record_to_line(a, "RUNTIME", callback_name=lambda d, c: 1 / 0)
    assert "name" not in cc.record_to_line(a, "RUNTIME")
    assert cc.camel("function_ind_ex") == "functionIndEx" and cc.camel("start") == "start"


def fake_cupti(records):
    """A stand-in for ``from cupti import cupti``: flush_all hands ``records`` to the callback."""
    kinds = {"RUNTIME": 5, "DRIVER": 4, "CONCURRENT_KERNEL": 10, "MEMCPY": 1, "MEMSET": 2, "SYNCHRONIZATION": 38,
             "CUDA_EVENT": 36, "MARKER": 12, "EXTERNAL_CORRELATION": 39, "DEVICE": 8}
    state = {"enabled": [], "cb": None}

    def enable(kind):
        state["enabled"].append(kind)

    def register(req, done):
        assert req() == (8 << 20, 0)
        state["cb"] = done

    def flush_all(force):
        state["cb"](records)

    c = types.SimpleNamespace(
        ActivityKind=enum.IntEnum("ActivityKind", kinds),
        CallbackDomain=types.SimpleNamespace(RUNTIME_API=3, DRIVER_API=1),
        activity_enable=enable, activity_disable=lambda k: None, activity_register_callbacks=register,
        activity_flush_all=flush_all, get_timestamp=lambda: 123, get_version=lambda: 26,
        get_callback_name=lambda dom, cbid: {(3, 211): "cudaLaunchKernel_v7000"}.get((dom, cbid), "unknown"),
    )
    mod = types.ModuleType("cupti")
    mod.cupti = c
    return mod, state


def test_collector_end_to_end_with_stand_in_bindings(tmp_path, monkeypatch):
    cc = load_collector()
    ns = types.SimpleNamespace
    recs = [
        ns(kind=10, name="_Z3foov", start=300, end=400, device_id=0, context_id=1, stream_id=7, correlation_id=5),
        ns(kind=5, cbid=211, start=100, end=150, process_id=77, thread_id=78, correlation_id=5, return_value=0),
        ns(kind=39, external_kind=3, external_id=17, correlation_id=5),
        ns(kind=12, flags=2, timestamp=90, id=1, object_kind=2, object_id=ns(pt=ns(process_id=77, thread_id=78), dcs=ns(device=0, context_id=0, stream_id=0)), name="step", domain=None),
        ns(kind=12, flags=4, timestamp=500, id=1, object_kind=2, object_id=ns(pt=ns(process_id=77, thread_id=78), dcs=ns(device=0, context_id=0, stream_id=0)), name=None, domain=None),
    ]
    mod, state = fake_cupti(recs)
    monkeypatch.setitem(sys.modules, "cupti", mod)
    monkeypatch.setenv("RANK", "2")
    out = tmp_path / "trace.{rank}.cupti.jsonl.gz"
    with cc.collect(str(out), kinds=("RUNTIME", "CONCURRENT_KERNEL", "EXTERNAL_CORRELATION", "MARKER", "NOT_A_KIND")) as col:
        pass
    assert col.records == 5 and col.errors == 0 and len(state["enabled"]) == 4
    written = tmp_path / "trace.2.cupti.jsonl.gz"
    t = read(written)
    k = only(t, Kind.KERNEL)[0]
    assert (k["pid"], k["external_id"], k["stream"]) == (77, 17, 7)
    launch = only(t, Kind.RUNTIME)[0]
    assert launch["name"] == "cudaLaunchKernel_v7000" and launch["external_id"] == 17
    assert [(r["name"], r["start_ns"], r["end_ns"], r["tid"]) for r in only(t, Kind.RANGE)] == [("step", 90, 500, 78)]
    assert t.meta.rank == 2 and t.meta.extra["cuptiVersion"] == "26" and t.meta.extra["cuptiTsAtStartNs"] == "123"

    # the command line runs a script under the collector
    script = tmp_path / "train.py"
    script.write_text("import sys\nopen(sys.argv[1], 'w').write('ran')\nsys.exit(0)\n")
    mod, state = fake_cupti(recs[:2])
    monkeypatch.setitem(sys.modules, "cupti", mod)
    assert cc.main(["--out", str(tmp_path / "cli.jsonl"), "--exclude", "DRIVER", "--", str(script), str(tmp_path / "flag")]) == 0
    assert (tmp_path / "flag").read_text() == "ran"
    assert len(read(tmp_path / "cli.jsonl")) == 2


def test_a_cut_last_line_is_a_truncated_file(tmp_path):
    """A dump whose last line is cut (no newline, not a record) warns like a truncated Kineto file and
    notes it; a malformed line elsewhere does not (second try-out: a cut .jsonl only counted 'skipped 1
    malformed line', silently)."""
    p = dump(tmp_path, api(1, 10, 20), api(2, 30, 40))
    cut = tmp_path / "cut.jsonl"
    data = p.read_bytes()
    cut.write_bytes(data[: len(data) - 12])
    with pytest.warns(UserWarning, match=r"is truncated: its last line \(3\) is cut short"):
        t = read(cut)
    assert [r["correlation"] for r in rows(t)] == [1]
    assert "truncated file: line 3 cut short" in t.accounting.notes
    q = dump(tmp_path, api(1, 10, 20), "{not json", api(2, 30, 40), name="bad.jsonl")
    import warnings as w
    with w.catch_warnings():
        w.simplefilter("error")
        t = read(q)
    assert not any(k.startswith("truncated") for k in t.accounting.notes)


def test_a_gzip_stream_without_its_end_is_a_truncated_file(tmp_path):
    """A gzip stream that stops at a flush point (no final block, no trailer) inflates to whole lines:
    the cut was silent, 'good' with half the steps (third try-out). Now warned, noted, refused when strict."""
    import zlib

    p = dump(tmp_path, *[api(i, 10 * i, 10 * i + 5) for i in range(1, 200)])
    lines = p.read_bytes().splitlines(keepends=True)
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    cut = tmp_path / "flushed.jsonl.gz"
    cut.write_bytes(c.compress(b"".join(lines[:100])) + c.flush(zlib.Z_SYNC_FLUSH))
    with pytest.warns(UserWarning, match="gzip stream ends without its end marker"):
        t = read(cut)
    assert len(t) == 99 and "truncated file: gzip stream cut short" in t.accounting.notes
    with pytest.raises(TraceFormatError, match="cut short"):
        cj.load(str(cut), strict=True)


@pytest.mark.parametrize("change, note", [
    (dict(end=-(10**9)), "CONCURRENT_KERNEL with a negative timestamp (times -1)"),
    (dict(start=-5), "CONCURRENT_KERNEL with a negative timestamp (times -1)"),
    ("end_before", "CONCURRENT_KERNEL end before start (end set to start)"),
    (dict(deviceId=-3), "CONCURRENT_KERNEL with a negative deviceId (-1: unknown)"),
    (dict(name=None), "CONCURRENT_KERNEL without a name"),
])
def test_damaged_kernel_records_are_counted(tmp_path, change, note):
    """A kernel record with its end before its start, a negative time, a negative device or no name
    was read silently (a start of -5 ns made a 54-year kernel); each is repaired and counted, as
    the Kineto and nsys readers count theirs (try-out finding)."""
    from daydream.formats import load_trace

    src = load_trace(str(Path(__file__).resolve().parents[1] / "fixtures" / "train_step.json.gz"))
    base = tmp_path / "base.jsonl"
    write_cupti_jsonl(src, str(base))
    lines = base.read_text().splitlines()
    i = next(i for i, ln in enumerate(lines) if json.loads(ln).get("kind") == "CONCURRENT_KERNEL")
    d = json.loads(lines[i])
    d.update(dict(end=d["start"] - 10**9) if change == "end_before" else change)
    lines[i] = json.dumps(d)
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(lines) + "\n")
    t = load_trace(str(p))
    assert t.accounting.notes.get(note) == 1
    k = (t.kind == Kind.KERNEL)
    assert (t.end_ns[k] >= t.start_ns[k]).all() and (t.device[k] >= -1).all()


def test_header_rank_and_world_size_out_of_range_are_ignored_and_counted(tmp_path):
    from daydream.formats import load_trace

    src = load_trace(str(Path(__file__).resolve().parents[1] / "fixtures" / "train_step.json.gz"))
    base = tmp_path / "base.jsonl"
    write_cupti_jsonl(src, str(base))
    lines = base.read_text().splitlines()
    h = json.loads(lines[0])
    h.update(rank=-1, worldSize=0)
    lines[0] = json.dumps(h)
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(lines) + "\n")
    t = load_trace(str(p))
    assert t.meta.rank == -1 and t.meta.world_size == -1
    assert t.accounting.notes.get("header worldSize not a count of ranks from 1 to 2^20 (ignored)") == 1
    assert t.accounting.notes.get("header rank not a rank from 0 to worldSize - 1 (ignored)") == 1


def test_header_version_that_is_not_an_integer_says_so(tmp_path):
    """A header with "version": "1" read 'cupti-jsonl version '1'; this daydream reads version 1'."""
    p = tmp_path / "t.jsonl"
    p.write_text('{"kind":"HEADER","format":"cupti-jsonl","version":"1"}\n')
    with pytest.raises(TraceFormatError, match="header version '1' is not an integer"):
        cj.load(str(p))
