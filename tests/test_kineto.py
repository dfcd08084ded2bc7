"""Tests of the Kineto (PyTorch profiler Chrome-trace JSON) adapter.

Real traces are read from ``../shared/traces`` (relative to the repository root) and never copied
into the repository; those tests skip when the folder is absent. Expected numbers are computed
here, independently, with the standard library (``json`` with exact decimals, ``gzip``).
"""

from __future__ import annotations

import functools
import gzip
import json
import warnings
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daydream.errors import TraceFormatError
from daydream.events.table import CopyKind, Kind, MemKind, SyncKind
from daydream.formats import detect, kineto, read_head
from daydream.formats.kineto import times as kineto_times

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
KINETO_FILES = sorted(
    p for sub in ("hta", "tracelens", "kineto_tbplugin") for p in (TRACES / sub).glob("*.json.gz")
) if TRACES.is_dir() else []
needs_traces = pytest.mark.skipif(not KINETO_FILES, reason="../shared/traces not present")

GPU_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)
CAT_GROUPS = {
    Kind.KERNEL: {"kernel"},
    Kind.RUNTIME: {"cuda_runtime", "runtime", "cuda_driver"},
    Kind.MEMCPY: {"gpu_memcpy", "memcpy"},
    Kind.MEMSET: {"gpu_memset", "memset"},
    Kind.SYNC: {"cuda_sync"},
    Kind.CPU_OP: {"cpu_op", "operator"},
}


def us_to_ns(v) -> int:
    """Independent exact conversion of a JSON ts/dur (int or Decimal microseconds) to ns."""
    return int((Decimal(v) * 1000).to_integral_value(rounding=ROUND_HALF_UP))


# ---------------------------------------------------------------------------------------------
# cached loads: each real trace is read once per test module
# ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def table(path: Path):
    return kineto.load(str(path))


@functools.lru_cache(maxsize=None)
def reference(path: Path) -> dict:
    """Facts about a trace computed with the standard library only."""
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    base = int(doc.get("baseTimeNanoseconds", 0)) if isinstance(doc, dict) else 0
    counts: Counter = Counter()
    kernel_dur_ns = 0
    kernel_starts = []
    runtime_pid_by_corr: dict[int, set] = {}
    kernel_corr = []
    for e in events:
        cat = str(e.get("cat") or "").lower()
        if e.get("ph") != "X":
            continue
        for k, cats in CAT_GROUPS.items():
            if cat in cats:
                counts[k] += 1
        if cat == "kernel":
            kernel_dur_ns += us_to_ns(e["dur"])
            kernel_starts.append(base + us_to_ns(e["ts"]))
            kernel_corr.append(e.get("args", {}).get("correlation", -1))
        if cat in CAT_GROUPS[Kind.RUNTIME] and "correlation" in e.get("args", {}):
            runtime_pid_by_corr.setdefault(e["args"]["correlation"], set()).add(e["pid"])
    return {
        "n_events": len(events),
        "counts": counts,
        "kernel_dur_ns": kernel_dur_ns,
        "kernel_starts": sorted(kernel_starts),
        "runtime_pid_by_corr": runtime_pid_by_corr,
        "kernel_corr": kernel_corr,
    }


def trace(rel: str) -> Path:
    p = TRACES / rel
    if not p.exists():
        pytest.skip(f"{rel} not present")
    return p


def rows(tb, kind):
    return np.nonzero(tb.kind == kind)[0]


# ---------------------------------------------------------------------------------------------
# every real trace
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
@needs_traces
@pytest.mark.parametrize("path", KINETO_FILES, ids=lambda p: p.name[:40])
def test_real_trace_counts_match_independent_reading(path):
    tb = table(path)
    ref = reference(path)
    acct = tb.accounting
    assert acct.balanced
    assert sum(acct.read.values()) == ref["n_events"]
    for k in (Kind.KERNEL, Kind.RUNTIME, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC, Kind.CPU_OP):
        assert tb.count(k) == ref["counts"][k], k.name
    kr = rows(tb, Kind.KERNEL)
    assert int((tb.end_ns[kr] - tb.start_ns[kr]).sum()) == ref["kernel_dur_ns"]
    assert tb.start_ns[kr].tolist() == ref["kernel_starts"]  # table rows are start-sorted
    # column conventions
    gpu = tb.mask(*GPU_KINDS)
    assert np.all(tb.tid[gpu] == -1)
    assert np.all(tb.device[gpu] >= 0) and np.all(tb.stream[gpu] >= 0)
    cpu = tb.mask(Kind.CPU_OP, Kind.RUNTIME)
    assert np.all(tb.device[cpu] == -1) and np.all(tb.stream[cpu] == -1)
    assert np.all(tb.pid[cpu] >= 0)
    assert np.all(tb.end_ns >= tb.start_ns)
    assert np.all(np.diff(tb.start_ns) >= 0)
    assert tb.meta.format == "kineto" and tb.meta.source == str(path)


@needs_traces
@pytest.mark.parametrize("path", KINETO_FILES, ids=lambda p: p.name[:40])
def test_real_trace_gpu_rows_linked_by_correlation(path):
    """A kernel's pid is the pid of the runtime/driver call with its correlation id."""
    tb = table(path)
    ref = reference(path)
    for r in rows(tb, Kind.KERNEL):
        c = int(tb.correlation[r])
        pids = ref["runtime_pid_by_corr"].get(c)
        if pids and len(pids) == 1:
            assert int(tb.pid[r]) == next(iter(pids))
    if path.parent.name == "hta":
        gpu = tb.mask(*GPU_KINDS, Kind.SYNC)
        assert np.all(tb.pid[gpu] >= 0), "every GPU row in the HTA traces has its launching process"


@needs_traces
def test_sniff_accepts_every_real_trace():
    for p in KINETO_FILES:
        assert kineto.sniff(read_head(str(p)), str(p)), p.name


# ---------------------------------------------------------------------------------------------
# known values
# ---------------------------------------------------------------------------------------------
@needs_traces
def test_cuda_event_sync_rows():
    tb = table(trace("hta/cuda_event_sync.json.gz"))
    s = rows(tb, Kind.SYNC)
    assert len(s) == 4
    assert [tb.name_of(r) for r in s] == ["Stream Sync", "Event Sync", "Event Sync", "Context Sync"]
    assert tb.sync_kind[s].tolist() == [SyncKind.STREAM_SYNC, SyncKind.EVENT_SYNC, SyncKind.EVENT_SYNC, SyncKind.CONTEXT_SYNC]
    assert tb.stream[s].tolist() == [7, -1, -1, -1]
    assert tb.link_stream[s].tolist() == [-1, 7, 7, -1]
    assert tb.link_correlation[s].tolist() == [-1, 1533, 1533, -1]
    assert tb.correlation[s].tolist() == [1512, 1536, 1537, 1549]
    assert tb.pid[s].tolist() == [948300] * 4
    assert tb.device[s].tolist() == [0] * 4
    assert tb.tid[s].tolist() == [-1] * 4
    # the runtime call each sync row belongs to
    rt = rows(tb, Kind.RUNTIME)
    by_corr = {int(tb.correlation[r]): tb.name_of(r) for r in rt}
    assert by_corr[1512] == "cudaStreamSynchronize"
    assert tb.meta.rank == 0
    assert tb.meta.devices[0].name == "NVIDIA A100-PG509-200" and tb.meta.devices[0].num_sms == 108


@needs_traces
def test_stream_wait_event_and_uint32_stream():
    tb = table(trace("hta/cuda_event_sync_multi_stream.json.gz"))
    s = rows(tb, Kind.SYNC)
    w = [r for r in s if tb.sync_kind[r] == SyncKind.STREAM_WAIT_EVENT]
    assert len(w) == 1
    r = w[0]
    assert (tb.stream[r], tb.link_stream[r], tb.link_correlation[r], tb.correlation[r]) == (24, 20, 1385, 1389)
    # an Event Sync whose record was not seen: wait_on_stream = -1 stays -1
    ev = [r for r in s if tb.sync_kind[r] == SyncKind.EVENT_SYNC]
    assert tb.link_stream[ev].tolist() == [-1, 20, 28]
    assert tb.link_correlation[ev].tolist() == [-1, 32, 62]
    tb2 = table(trace("hta/simple_add.json.gz"))
    ctx = [r for r in rows(tb2, Kind.SYNC) if tb2.sync_kind[r] == SyncKind.CONTEXT_SYNC]
    assert len(ctx) == 5 and all(tb2.stream[r] == -1 for r in ctx)  # written as 4294967295
    m = rows(tb2, Kind.MEMCPY)
    assert set(tb2.copy_kind[m].tolist()) <= {CopyKind.HTOD, CopyKind.DTOH}
    assert all(tb2.bytes[m] > 0)


@needs_traces
def test_triton_driver_launch():
    tb = table(trace("hta/triton_example.json.gz"))
    rt = [r for r in rows(tb, Kind.RUNTIME) if tb.name_of(r) == "cuLaunchKernel"]
    assert len(rt) == 1
    r = rt[0]
    assert tb.names[tb.cat_id[r]] == "cuda_driver"
    assert tb.correlation[r] == 35 and tb.pid[r] == 1670242 and tb.tid[r] == 1670242
    k = rows(tb, Kind.KERNEL)
    assert len(k) == 1
    k = k[0]
    assert tb.name_of(k) == "triton_poi_fused_add_cos_sin_0"
    assert (tb.correlation[k], tb.pid[k], tb.device[k], tb.stream[k], tb.tid[k]) == (35, 1670242, 0, 7, -1)
    # "ts": 2413669097444.592, "dur": 1.76, baseTimeNanoseconds 1727743122000000000
    assert tb.start_ns[k] == 1727743122000000000 + 2413669097444592
    assert tb.end_ns[k] - tb.start_ns[k] == 1760
    assert tb.meta.extra["cupti_version"] == "18" and tb.meta.extra["cuda_runtime_version"] == "12000"


@needs_traces
def test_resnet50_2021_legacy_spellings():
    tb = table(trace("kineto_tbplugin/resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"))
    assert tb.count(Kind.KERNEL) == 8772
    assert tb.count(Kind.RUNTIME) == 11923
    assert tb.count(Kind.CPU_OP) == 23646
    assert tb.count(Kind.MEMCPY) == 12 and tb.count(Kind.MEMSET) == 312
    assert tb.count(Kind.MARKER) == 12838  # [memory] instants without a category
    assert {tb.names[c] for c in np.unique(tb.cat_id)} >= {"Kernel", "Runtime", "Operator", "Memcpy", "Memset"}
    k = rows(tb, Kind.KERNEL)
    assert np.all(tb.stream[k] == 7) and np.all(tb.device[k] == 0)
    assert np.all(tb.external_id[k] > 0)  # legacy lowercase "external id"
    assert np.all(tb.pid[k] == 25738)
    rt = rows(tb, Kind.RUNTIME)
    assert set(tb.tid[rt].tolist()) <= {25738, 25772}  # tids written as strings
    assert tb.accounting.skipped["flow event (async): not a row; read as a launch link where args.correlation is missing"] == 18192
    m = rows(tb, Kind.MEMCPY)
    assert set(zip(tb.copy_kind[m].tolist(), tb.src_kind[m].tolist(), tb.dst_kind[m].tolist())) <= {
        (CopyKind.HTOD, MemKind.PAGEABLE, MemKind.DEVICE),
        (CopyKind.DTOH, MemKind.DEVICE, MemKind.PAGEABLE),
        (CopyKind.DTOD, MemKind.DEVICE, MemKind.DEVICE),
        (CopyKind.HTOD, MemKind.PINNED, MemKind.DEVICE),
    }


@needs_traces
def test_rocm_trace_links_by_correlation():
    tb = table(trace("hta/mi250_minitoy_train_ROCm6_2_kineto.json.gz"))
    k = rows(tb, Kind.KERNEL)
    assert len(k) == 14
    assert np.all(tb.pid[k] == 597913)
    assert np.all(tb.device[k] == 2) and np.all(tb.stream[k] == 0)
    rt = rows(tb, Kind.RUNTIME)
    rt_corr = set(tb.correlation[rt].tolist())
    assert set(tb.correlation[k].tolist()) <= rt_corr
    m = rows(tb, Kind.MEMCPY)
    assert tb.copy_kind[m].tolist() == [CopyKind.HTOD] * 2
    assert tb.dst_kind[m].tolist() == [MemKind.DEVICE] * 2 and tb.src_kind[m].tolist() == [MemKind.UNKNOWN] * 2
    g = [r for r in rows(tb, Kind.RANGE) if tb.device[r] >= 0]  # gpu_user_annotation
    assert len(g) == 2 and all(tb.stream[r] == 0 and tb.tid[r] == -1 for r in g)
    assert tb.meta.devices[0].name == "AMD Radeon Graphics"


@needs_traces
def test_distributed_info_and_extras():
    tb = table(trace("tracelens/b200_eager_trace.json.gz"))
    assert (tb.meta.rank, tb.meta.world_size) == (0, 8)
    assert len(tb.meta.devices) == 8 and tb.meta.devices[0].name == "NVIDIA B200"
    assert tb.meta.devices[0].compute_major == 10 and tb.meta.devices[0].num_sms == 148
    assert tb.meta.extra["cupti_version"] == "28" and tb.meta.extra["cuda_runtime_version"] == "12090"
    assert tb.accounting.skipped["profiler overhead event (cat 'overhead')"] == 9
    tb = table(trace("hta/nccl_data.json.gz"))
    assert (tb.meta.rank, tb.meta.world_size) == (0, 2)
    assert tb.meta.extra["distributed_backend"] == "nccl"
    g = [r for r in rows(tb, Kind.RANGE) if tb.names[tb.cat_id[r]] == "gpu_user_annotation"]
    assert len(g) == 30 and all(tb.device[r] >= 0 and tb.stream[r] >= 0 and tb.tid[r] == -1 for r in g)
    assert tb.accounting.skipped["fwdbwd flow (not used by this version)"] == 1086


@needs_traces
def test_edge_case_traces():
    tb = table(trace("hta/cupti_profiler_benchmark_result_924719_1679055439_trace.json.gz"))
    assert tb.count(Kind.KERNEL) == 0
    assert tb.accounting.skipped["unknown category 'cuda_profiler_range'"] == 77
    tb = table(trace("hta/cpu_only.json.gz"))
    assert not tb.mask(*GPU_KINDS, Kind.SYNC, Kind.RUNTIME).any() and len(tb) == 15
    tb = table(trace("tracelens/h100_gaunernst_bert-small-uncased__1016001.json.gz"))
    assert tb.count(Kind.MARKER) == 236
    py = [r for r in rows(tb, Kind.RANGE) if tb.names[tb.cat_id[r]] == "python_function"]
    assert len(py) == 1385


@needs_traces
def test_detect_picks_kineto():
    assert detect(str(trace("hta/simple_add.json.gz"))) is kineto


# ---------------------------------------------------------------------------------------------
# synthetic documents
# ---------------------------------------------------------------------------------------------
def write(tmp_path, text, name="t.json", gz=False) -> str:
    data = text.encode() if isinstance(text, str) else text
    p = tmp_path / name
    p.write_bytes(gzip.compress(data) if gz else data)
    return str(p)


def ev(**kw) -> dict:
    e = {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 10, "tid": 11, "ts": 1, "dur": 1}
    e.update(kw)
    return e


def doc(events, **top) -> str:
    return json.dumps({"schemaVersion": 1, **top, "traceEvents": events})


def test_ns_fraction_exact_with_base(tmp_path):
    text = (
        '{"baseTimeNanoseconds": 1700000000000000000, "traceEvents": ['
        '{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1234.567,"dur":0.001},'
        '{"ph":"X","cat":"cpu_op","name":"b","pid":1,"tid":1,"ts":4203669603438.301,"dur":60.204},'
        '{"ph":"X","cat":"cpu_op","name":"c","pid":1,"tid":1,"ts":1.2345,"dur":1e-3},'
        '{"ph":"X","cat":"cpu_op","name":"d","pid":1,"tid":1,"ts":-0.5,"dur":2}]}'
    )
    tb = kineto.load(write(tmp_path, text))
    got = {tb.name_of(r): (int(tb.start_ns[r]), int(tb.end_ns[r])) for r in range(len(tb))}
    base = 1700000000000000000
    assert got["a"] == (base + 1234567, base + 1234568)
    assert got["b"] == (base + 4203669603438301, base + 4203669603438301 + 60204)
    assert got["c"] == (base + 1235, base + 1236)  # 4th decimal rounds; 1e-3 exponent form
    assert got["d"] == (base - 500, base + 1500)
    assert tb.meta.extra["baseTimeNanoseconds"] == "1700000000000000000"


def test_ns_exact_for_absolute_microseconds(tmp_path):
    # old traces: absolute epoch microseconds; a float would lose the ns digits
    text = '{"traceEvents": [{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1712345678901234.567,"dur":1623142623460111}]}'
    tb = kineto.load(write(tmp_path, text))
    assert int(tb.start_ns[0]) == 1712345678901234567
    assert int(tb.end_ns[0]) - int(tb.start_ns[0]) == 1623142623460111000


def test_truncated_real_trace_is_salvaged(tmp_path):
    src = trace("hta/simple_add.json.gz")
    data = gzip.decompress(src.read_bytes())
    cut = int(len(data) * 0.6) + 7  # somewhere inside an event
    p = write(tmp_path, data[:cut], "cut.json")
    with pytest.warns(UserWarning, match="truncated"):
        tb = kineto.load(p)
    acct = tb.accounting
    assert acct.balanced
    notes = [k for k in acct.notes if k.startswith("truncated file: events after byte")]
    assert len(notes) == 1
    lost_at = int(notes[0].split("byte ")[1].split()[0])
    assert 0 < lost_at <= cut
    # the salvaged events are a prefix of the original ones
    events = json.loads(data, parse_float=Decimal)["traceEvents"]
    k = sum(acct.read.values())
    assert 0 < k < len(events)
    expect = sum(1 for e in events[:k] if e.get("ph") == "X" and e.get("cat") == "kernel")
    assert tb.count(Kind.KERNEL) == expect
    with pytest.raises(TraceFormatError, match="truncated"):
        kineto.load(p, strict=True)
    # a gzip stream cut short is salvaged the same way
    gz = src.read_bytes()
    pg = write(tmp_path, gz[: len(gz) // 2], "cut.json.gz")
    with pytest.warns(UserWarning):
        tb2 = kineto.load(pg)
    assert tb2.accounting.balanced and 0 < len(tb2) < len(table(src))


def test_truncated_in_trailer_keeps_all_events(tmp_path):
    events = [ev(name=f"op{i}", ts=i) for i in range(5)]
    text = json.dumps({"traceEvents": events, "traceName": "/tmp/some/long/name.json"}, indent=2)
    p = write(tmp_path, text[: text.index("/tmp/some") + 5])
    with pytest.warns(UserWarning):
        tb = kineto.load(p)
    assert len(tb) == 5 and tb.accounting.balanced


def test_truncated_array_form_and_nothing_to_salvage(tmp_path):
    events = [ev(name=f"op{i}", ts=i) for i in range(4)]
    text = json.dumps(events)
    with pytest.warns(UserWarning):
        tb = kineto.load(write(tmp_path, text[:-20], "a.json"))
    assert len(tb) == 3
    with pytest.raises(TraceFormatError, match="truncated"):
        kineto.load(write(tmp_path, '{"traceEvents": [{"ph": "X", "cat', "b.json"))
    with pytest.raises(TraceFormatError):
        kineto.load(write(tmp_path, '{"schemaVersion": 1, "devicePro', "c.json"))


@pytest.mark.parametrize(
    "text, where",
    [
        ("hello world", "byte offset 0"),
        ("\x00\x01\x02garbage", "byte offset 0"),
        ('{"traceEvents": [} ', "byte offset"),
        ('{"schemaVersion": 1}', ""),
        ('{"traceEvents": {"a": 1}}', "traceEvents"),
        ('{"traceEvents": [{"ph": "X", "pid": [1]}]}', "traceEvents[0].pid"),
        ('{"traceEvents": [1, 2]}', "traceEvents[0]"),
        ("", ""),
    ],
)
def test_bad_documents_raise_trace_format_error(tmp_path, text, where):
    p = write(tmp_path, text)
    with pytest.raises(TraceFormatError) as ei:
        kineto.load(p)
    err = ei.value
    assert err.path == p and where in err.where
    assert "\n" not in str(err)


def test_missing_file_and_damaged_gzip(tmp_path):
    with pytest.raises(TraceFormatError):
        kineto.load(str(tmp_path / "nope.json"))
    good = gzip.compress(doc([ev() for _ in range(200)]).encode())
    bad = bytearray(good)
    for i in range(20, len(bad) - 20, 7):
        bad[i] ^= 0x5A
    with pytest.raises(TraceFormatError):
        kineto.load(write(tmp_path, bytes(bad), "bad.json.gz"))
    crc = bytearray(good)
    crc[-6] ^= 0xFF  # CRC32 trailer
    with pytest.raises(TraceFormatError):
        kineto.load(write(tmp_path, bytes(crc), "crc.json.gz"))


def test_empty_trace_events(tmp_path):
    tb = kineto.load(write(tmp_path, '{"traceEvents": []}'))
    assert len(tb) == 0 and tb.accounting.balanced and sum(tb.accounting.read.values()) == 0


def test_nan_and_infinity_in_args(tmp_path):
    text = (
        '{"traceEvents": [{"ph":"X","cat":"kernel","name":"NaN kernel","pid":0,"tid":7,"ts":5,"dur":2,'
        '"args":{"device":0,"stream":7,"correlation":3,"est. achieved occupancy %": NaN, "x": -Infinity, "y": Infinity}}]}'
    )
    p = write(tmp_path, text)
    tb = kineto.load(p)
    assert tb.count(Kind.KERNEL) == 1 and tb.name_of(0) == "NaN kernel"
    assert tb.accounting.notes["NaN/Infinity literal read as null"] == 3
    with pytest.raises(TraceFormatError, match="NaN"):
        kineto.load(p, strict=True)
    # many of them: one pass over the whole document, strings untouched
    events = ",".join(
        f'{{"ph":"X","cat":"cpu_op","name":"NaN, ]","pid":1,"tid":1,"ts":{i},"dur":1,"args":{{"v": NaN, "w": [1, 2,]}}}}'
        for i in range(30)
    )
    tb = kineto.load(write(tmp_path, '{"traceEvents": [' + events + ",]}", "many.json"))
    assert len(tb) == 30 and {tb.name_of(r) for r in range(30)} == {"NaN, ]"}
    assert tb.accounting.notes["NaN/Infinity literal read as null"] == 30
    assert tb.accounting.notes["trailing comma removed"] == 31


def test_trailing_commas(tmp_path):
    text = '{"traceEvents": [\n  {"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1,"args":{"x":1,}},\n]\n}'
    p = write(tmp_path, text)
    tb = kineto.load(p)
    assert len(tb) == 1 and tb.accounting.notes["trailing comma removed"] == 2
    with pytest.raises(TraceFormatError, match="trailing comma"):
        kineto.load(p, strict=True)


def test_unusable_events_are_skipped_with_reasons(tmp_path):
    events = [
        ev(name="ok"),
        {k: v for k, v in ev(name="no ts").items() if k != "ts"},
        {k: v for k, v in ev(name="no pid").items() if k != "pid"},
        {k: v for k, v in ev(name="no dur").items() if k != "dur"},
        ev(name="span", cat="Trace", pid="Spans", tid="PyTorch Profiler"),
        ev(name="weird", cat="mtia_whatever"),
        ev(name="ovh", cat="overhead", pid=-1),
        {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 9},
        {"ph": "i", "s": "t", "name": "[memory]", "pid": 10, "tid": 11, "ts": 3, "args": {"Bytes": 4}},
        {"ph": "M", "name": "process_name", "pid": 10, "tid": 0, "args": {"name": "python"}},
        {"ph": "C", "name": "ctr", "pid": 10, "ts": 1, "args": {"v": 1}},
        {"ph": "s", "id": 1, "pid": 10, "tid": 11, "ts": 1, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 2, "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"},
        {"name": "no phase"},
    ]
    tb = kineto.load(write(tmp_path, doc(events)))
    a = tb.accounting
    assert a.balanced and sum(a.read.values()) == len(events)
    assert [tb.name_of(r) for r in range(len(tb))] == ["ok", "[memory]"]
    assert tb.kind.tolist() == [Kind.CPU_OP, Kind.MARKER]
    assert tb.start_ns[1] == tb.end_ns[1] == 3000
    for reason in (
        "X event without a numeric ts",
        "X event without pid",
        "X event without a numeric dur",
        "trace span (cat 'Trace')",
        "unknown category 'mtia_whatever'",
        "profiler overhead event (cat 'overhead')",
        "trace structure instant (pid is not a process id)",
        "metadata event (ph M: process/thread names)",
        "counter event (ph C) not used",
        "flow event (ac2g): not a row; read as a launch link where args.correlation is missing",
        "fwdbwd flow (not used by this version)",
        "event without ph",
    ):
        assert a.skipped.get(reason) == 1, reason


def test_gpu_columns_and_pid_join(tmp_path):
    events = [
        ev(cat="cuda_runtime", name="cudaLaunchKernel", pid=10, tid="12", ts=1, dur=1, args={"correlation": 5, "External id": 9}),
        ev(cat="kernel", name="k1", pid=0, tid=7, ts=3, dur=2, args={"device": 0, "stream": 7, "correlation": 5, "External id": 9}),
        ev(cat="kernel", name="k2", pid=1, tid="stream 3", ts=4, dur=1, args={"correlation": 99}),
        ev(cat="cuda_sync", name="Stream Sync", pid=0, tid=1000007, ts=6, dur=1, args={"cuda_sync_kind": "Stream Sync", "correlation": 6}),
        ev(cat="cuda_sync", name="Event Sync", pid=0, tid=-1, ts=7, dur=1, args={"cuda_sync_kind": 1, "stream": -1,
           "wait_on_stream": 7, "wait_on_cuda_event_record_corr_id": 4, "correlation": 8}),
        ev(cat="gpu_memcpy", name="Memcpy DtoH (Device -> Pinned)", pid=0, tid=7, ts=8, dur=1, args={"device": 0, "stream": 7, "bytes": 64, "correlation": 10}),
        ev(cat="gpu_memset", name="Memset (Device)", pid=0, tid=7, ts=9, dur=1, args={"stream": "0x7", "bytes": 32}),
        ev(cat="Memcpy", name="Memcpy PtoP (Device -> Device)", pid=0, tid=7, ts=10, dur=1, args={"stream": 7}),
    ]
    tb = kineto.load(write(tmp_path, doc(events)))
    r = {tb.name_of(i): i for i in range(len(tb))}
    c = tb.cols
    assert c["tid"][r["cudaLaunchKernel"]] == 12 and c["pid"][r["cudaLaunchKernel"]] == 10
    k1 = r["k1"]
    assert (c["pid"][k1], c["tid"][k1], c["device"][k1], c["stream"][k1], c["external_id"][k1]) == (10, -1, 0, 7, 9)
    k2 = r["k2"]  # no runtime call with correlation 99: the trace's only process
    assert (c["pid"][k2], c["device"][k2], c["stream"][k2]) == (10, 1, 3)
    ss = r["Stream Sync"]
    assert (c["stream"][ss], c["sync_kind"][ss], c["device"][ss]) == (7, SyncKind.STREAM_SYNC, 0)
    es = r["Event Sync"]
    assert (c["stream"][es], c["sync_kind"][es], c["link_stream"][es], c["link_correlation"][es]) == (-1, 1, 7, 4)
    mc = r["Memcpy DtoH (Device -> Pinned)"]
    assert (c["copy_kind"][mc], c["src_kind"][mc], c["dst_kind"][mc], c["bytes"][mc]) == (CopyKind.DTOH, MemKind.DEVICE, MemKind.PINNED, 64)
    assert (c["stream"][r["Memset (Device)"]], c["bytes"][r["Memset (Device)"]]) == (7, 32)
    assert c["copy_kind"][r["Memcpy PtoP (Device -> Device)"]] == CopyKind.PTOP
    assert c["correlation"][r["cudaLaunchKernel"]] == 5
    # k2, both syncs, the memcpy, the memset and the PtoP copy have no matching runtime call
    assert sum(v for k, v in tb.accounting.notes.items() if "without a runtime/driver call" in k) == 6


def test_gpu_pid_unknown_with_two_processes(tmp_path):
    events = [
        ev(cat="cuda_runtime", name="cudaLaunchKernel", pid=10, args={"correlation": 1}),
        ev(cat="cuda_runtime", name="cudaLaunchKernel", pid=20, args={"correlation": 2}),
        ev(cat="kernel", name="a", pid=0, tid=7, args={"correlation": 1}),
        ev(cat="kernel", name="b", pid=0, tid=7, args={"correlation": 2}),
        ev(cat="kernel", name="c", pid=0, tid=7, args={"correlation": 3}),
    ]
    tb = kineto.load(write(tmp_path, doc(events)))
    pid = {tb.name_of(i): int(tb.pid[i]) for i in rows(tb, Kind.KERNEL)}
    assert pid == {"a": 10, "b": 20, "c": -1}


def test_begin_end_pairs(tmp_path):
    events = [
        {"ph": "B", "cat": "cpu_op", "name": "outer", "pid": 1, "tid": 1, "ts": 1},
        {"ph": "B", "cat": "user_annotation", "name": "inner", "pid": 1, "tid": 1, "ts": 2},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 3},
        {"ph": "B", "cat": "cpu_op", "name": "other thread", "pid": 1, "tid": 2, "ts": 2.5},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 4},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 5},
        {"ph": "E", "pid": 1, "tid": 2, "ts": 6},  # unmatched
        {"ph": "B", "cat": "weird_cat", "name": "skipped pair", "pid": 1, "tid": 3, "ts": 1},
        {"ph": "E", "pid": 1, "tid": 3, "ts": 2},
    ]
    tb = kineto.load(write(tmp_path, doc(events)))
    got = {tb.name_of(i): (int(tb.kind[i]), int(tb.start_ns[i]), int(tb.end_ns[i])) for i in range(len(tb))}
    assert got == {
        "outer": (Kind.CPU_OP, 1000, 4000),
        "inner": (Kind.RANGE, 2000, 3000),
        "other thread": (Kind.CPU_OP, 2500, 5000),
    }
    a = tb.accounting
    assert a.balanced and a.skipped["unmatched B/E event"] == 1
    assert a.skipped["unknown category 'weird_cat'"] == 2


def test_array_form_and_sniff(tmp_path):
    text = json.dumps([ev(cat="kernel", pid=0, tid=7, args={"stream": 7, "device": 0})])
    p = write(tmp_path, text)
    assert kineto.sniff(text.encode(), p)
    tb = kineto.load(p)
    assert tb.count(Kind.KERNEL) == 1 and tb.meta.extra["layout"] == "chrome json array"
    assert kineto.sniff(b'  \n{"schemaVersion": 1, "traceEvents": [', "x")
    assert kineto.sniff(b'\xef\xbb\xbf{"traceEvents": []}', "x")
    assert not kineto.sniff(b"SQLite format 3\x00", "x")
    assert not kineto.sniff(b'{"format": "cupti-jsonl", "version": 1}\n{"kind": "KERNEL"}\n', "x")
    assert not kineto.sniff(b"[1, 2, 3]", "x")
    assert not kineto.sniff(b"", "x")
    pg = write(tmp_path, doc([ev()]), "g.json.gz", gz=True)
    assert kineto.sniff(read_head(pg), pg)
    assert len(kineto.load(pg)) == 1


# ---------------------------------------------------------------------------------------------
# property: accounting balances and kernels are all found, for any event list
# ---------------------------------------------------------------------------------------------
_cats = st.sampled_from(
    ["kernel", "Kernel", "cpu_op", "Operator", "cuda_runtime", "cuda_driver", "gpu_memcpy", "gpu_memset",
     "cuda_sync", "user_annotation", "gpu_user_annotation", "python_function", "ac2g", "fwdbwd", "async",
     "Trace", "overhead", "cpu_instant_event", "something_new"]
)
_us = st.one_of(
    st.integers(0, 10**15),
    st.decimals(min_value=0, max_value=10**9, places=3, allow_nan=False, allow_infinity=False).map(float),
)
_maybe = lambda s: st.one_of(st.just(None), s)  # noqa: E731
_args = st.fixed_dictionaries(
    {},
    optional={
        "device": st.integers(0, 7),
        "stream": st.one_of(st.integers(-1, 40), st.just("0x7")),
        "correlation": st.integers(0, 50),
        "External id": st.integers(0, 50),
        "bytes": st.integers(0, 10**9),
        "cuda_sync_kind": st.sampled_from(["Stream Sync", "Event Sync", 3]),
        "wait_on_stream": st.integers(-1, 40),
    },
)
_event = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "X", "i", "M", "s", "f", "B", "E", "C", "Q"])},
    optional={
        "cat": _maybe(_cats),
        "name": st.text(max_size=8),
        "pid": st.one_of(st.integers(-1, 5), st.integers(10**5, 10**6), st.just("Spans"), st.just("")),
        "tid": st.one_of(st.integers(-1, 10**6 + 50), st.just("stream 7"), st.just("123")),
        "ts": _us,
        "dur": _us,
        "args": _args,
    },
)


def _expected_row(e) -> bool:
    return (
        e["ph"] == "X"
        and str(e.get("cat") or "").lower() == "kernel"
        and "ts" in e
        and "dur" in e
        and isinstance(e.get("pid"), int)
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_event, max_size=40), st.booleans())
def test_property_accounting_and_kernels(tmp_path, events, as_array):
    for e in events:  # B/E pairs may only make CPU rows here, so that kernels are X events
        if e["ph"] == "B" and str(e.get("cat") or "").lower() == "kernel":
            e["cat"] = "cpu_op"
    text = json.dumps(events if as_array else {"traceEvents": events})
    p = write(tmp_path, text, "prop.json")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tb = kineto.load(p)
    a = tb.accounting
    assert a.balanced
    assert sum(a.read.values()) == len(events)
    kernels = [e for e in events if _expected_row(e)]
    assert tb.count(Kind.KERNEL) == len(kernels)
    k = rows(tb, Kind.KERNEL)
    assert sorted(tb.start_ns[k].tolist()) == sorted(us_to_ns(Decimal(repr(e["ts"]))) for e in kernels)
    assert sorted((tb.end_ns[k] - tb.start_ns[k]).tolist()) == sorted(us_to_ns(Decimal(repr(e["dur"]))) for e in kernels)
    assert np.all(tb.tid[k] == -1)


_num_text = st.one_of(
    st.from_regex(r"\A-?[0-9]{0,22}(\.[0-9]{0,8})?\Z", fullmatch=True),
    st.from_regex(r"\A-?[0-9]{1,3}\.[0-9]{1,3}[eE][+-]?[0-9]{1,2}\Z", fullmatch=True),
    st.sampled_from(["", "-", ".", "-.5", "1.", "1.2.3", "+1", "null", '"12.5"', '" 7 "', "1.0005", "-1.0005", "0.0004999",
                     "9223372036854775.807", "9223372036854775807", "1" * 41, "1." + "0" * 39 + "6", "1e400", "12a", "1 "]),
    st.text(alphabet="0123456789.-+eE\" x", max_size=12),
)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["kernel-py", "kernel"])
@settings(max_examples=150, deadline=None)
@given(st.lists(_num_text, min_size=1, max_size=60))
def test_us_text_parse_kernel_equals_numpy(method, texts):
    """The compiled ts/dur parse (texts joined in one buffer) gives the numpy matrix parse's
    values and flags exactly, for plain decimals and everything that falls back to Decimal."""
    import msgspec

    raws = [msgspec.Raw(t.encode()) for t in texts]
    want_ns, want_ok = kineto_times._us_text_to_ns(raws, method="numpy")
    got_ns, got_ok = kineto_times._us_text_to_ns(raws, method=method)
    assert np.array_equal(got_ok, want_ok)
    assert np.array_equal(got_ns, want_ns)
