"""Tests of the Nsight Systems SQLite adapter (daydream/formats/nsys/).

Real exports are read from ``../shared/traces`` (never copied into the repo); every expected value
is computed by SQL over the export inside the test. Malformed inputs are built in ``tmp_path``.
"""

from __future__ import annotations

import functools
import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daydream import formats
from daydream.events.cuda_api import ApiRole, api_role
from daydream.errors import TraceFormatError
from daydream.events.table import GPU_TASK_KINDS, CopyKind, EventTable, Kind, MemKind, SyncKind
from daydream.formats import nsys
from daydream.formats.nsys import export_schema

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
EXPORTS = sorted(TRACES.glob("nsys_ai/*.sqlite")) + sorted(TRACES.glob("extrap/*.sqlite"))

KIND_OF_TABLE = {
    export_schema.KERNEL: Kind.KERNEL,
    export_schema.MEMCPY: Kind.MEMCPY,
    export_schema.MEMSET: Kind.MEMSET,
    export_schema.RUNTIME: Kind.RUNTIME,
    export_schema.SYNC: Kind.SYNC,
}


def _export(name: str) -> Path:
    p = TRACES / name
    if not p.exists():
        pytest.skip(f"{p} not available")
    return p


exports = pytest.mark.parametrize(
    "path", EXPORTS or [pytest.param(None, marks=pytest.mark.skip(reason="../shared/traces not available"))],
    ids=lambda p: p.name if p else "none",
)


@functools.lru_cache(maxsize=None)
def _load(path: Path) -> EventTable:
    return nsys.load(str(path))


def _sql(path: Path, query: str, params=()) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        return con.execute(query, params).fetchall()
    finally:
        con.close()


def _tables(path: Path) -> set[str]:
    return {r[0] for r in _sql(path, "SELECT name FROM sqlite_master WHERE type='table'")}


def _skipped(tb: EventTable, table: str) -> int:
    return sum(n for k, n in tb.accounting.skipped.items() if k.startswith(table + ":"))


def _names(tb: EventTable, rows: np.ndarray) -> np.ndarray:
    return np.asarray(tb.names, dtype=object)[tb.name_id[rows]]


# ---- real exports ------------------------------------------------------------------------------


@exports
def test_row_counts_match_sql(path):
    tb = _load(path)
    tables = _tables(path)
    for table, kind in KIND_OF_TABLE.items():
        n_sql = _sql(path, f"SELECT COUNT(*) FROM {table}")[0][0] if table in tables else 0
        assert tb.count(kind) == n_sql - _skipped(tb, table), table
    if "NVTX_EVENTS" in tables:
        n_ranges = _sql(path, "SELECT COUNT(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71) AND start IS NOT NULL")[0][0]
        n_marks = _sql(path, "SELECT COUNT(*) FROM NVTX_EVENTS WHERE eventType IN (34, 65) AND start IS NOT NULL")[0][0]
        n_all = _sql(path, "SELECT COUNT(*) FROM NVTX_EVENTS")[0][0]
        assert tb.count(Kind.RANGE) == n_ranges
        assert tb.count(Kind.MARKER) == n_marks
        assert tb.count(Kind.RANGE) + tb.count(Kind.MARKER) == n_all - _skipped(tb, "NVTX_EVENTS")
    else:
        assert tb.count(Kind.RANGE) == tb.count(Kind.MARKER) == 0
    assert tb.count(Kind.CPU_OP) == 0


@exports
def test_accounting_balanced_and_read_is_count(path):
    tb = _load(path)
    acc = tb.accounting
    assert acc.balanced
    for table, n in acc.read.items():
        assert n == _sql(path, f"SELECT COUNT(*) FROM {table}")[0][0]
    for table in KIND_OF_TABLE:
        if table in _tables(path) and _sql(path, f"SELECT COUNT(*) FROM {table}")[0][0]:
            assert table in acc.read
    for table, n in acc.kept.items():
        assert n + _skipped(tb, table) == acc.read[table]


@exports
def test_kernel_time_per_name_matches_cuda_gpu_kern_sum(path):
    tb = _load(path)
    if export_schema.KERNEL not in _tables(path):
        assert tb.count(Kind.KERNEL) == 0
        return
    expected = dict(_sql(path, "SELECT s.value, SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                               "JOIN StringIds s ON s.id = k.demangledName GROUP BY s.value"))
    rows = np.flatnonzero(tb.mask(Kind.KERNEL))
    got = Counter()
    for name, d in zip(_names(tb, rows), (tb.end_ns[rows] - tb.start_ns[rows]).tolist()):
        got[name] += d
    assert dict(got) == expected


@exports
def test_times_ids_and_gpu_columns(path):
    tb = _load(path)
    gpu = tb.mask(*GPU_TASK_KINDS)
    assert np.all(tb.tid[gpu] == -1) and np.all(tb.device[gpu] >= 0) and np.all(tb.stream[gpu] >= 0)
    assert np.all(tb.end_ns >= tb.start_ns)
    cpu = tb.mask(Kind.RUNTIME)
    if cpu.any():
        exp = set(_sql(path, "SELECT DISTINCT (globalTid >> 24) & 0xFFFFFF, globalTid & 0xFFFFFF FROM CUPTI_ACTIVITY_KIND_RUNTIME"))
        assert set(zip(tb.pid[cpu].tolist(), tb.tid[cpu].tolist())) == exp
        assert np.all(tb.device[cpu] == -1)
    if gpu.any():
        exp = {r[0] for t in (export_schema.KERNEL, export_schema.MEMCPY, export_schema.MEMSET) if t in _tables(path)
               for r in _sql(path, f"SELECT DISTINCT (globalPid >> 24) & 0xFFFFFF FROM {t}")}
        assert set(tb.pid[gpu].tolist()) == exp
    # the data span is the SQL span
    queries = [f"SELECT MIN(start) FROM {t}" for t in KIND_OF_TABLE if t in _tables(path)]
    if "NVTX_EVENTS" in _tables(path):  # NVTX metadata rows (domain creation, ...) are not events
        queries.append("SELECT MIN(start) FROM NVTX_EVENTS WHERE eventType IN (34, 59, 60, 65, 70, 71)")
    lo = min(r[0] for q in queries for r in _sql(path, q) if r[0] is not None)
    assert tb.start_ns.min() == lo


@pytest.mark.slow
@exports
def test_kernels_join_their_launch_on_pid_and_correlation(path):
    tb = _load(path)
    if not tb.count(Kind.KERNEL) or export_schema.RUNTIME not in _tables(path):
        pytest.skip("no kernels or no runtime table")
    expected = _sql(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE EXISTS (SELECT 1 FROM "
                          "CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId = k.correlationId AND "
                          "(r.globalTid >> 24) & 0xFFFFFF = (k.globalPid >> 24) & 0xFFFFFF)")[0][0]
    rt = tb.mask(Kind.RUNTIME)
    api = set(zip(tb.pid[rt].tolist(), tb.correlation[rt].tolist()))
    k = tb.mask(Kind.KERNEL)
    got = sum((p, c) in api for p, c in zip(tb.pid[k].tolist(), tb.correlation[k].tolist()))
    assert got == expected and got > 0


@exports
def test_memcpy_kinds_and_bytes(path):
    tb = _load(path)
    if export_schema.MEMCPY not in _tables(path):
        assert tb.count(Kind.MEMCPY) == 0
        return
    m = np.flatnonzero(tb.mask(Kind.MEMCPY))
    assert int(tb.bytes[m].sum()) == _sql(path, "SELECT SUM(bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY")[0][0]
    nsys_to_cupti = [MemKind.PAGEABLE, MemKind.PINNED, MemKind.DEVICE, MemKind.ARRAY, MemKind.MANAGED,
                     MemKind.DEVICE_STATIC, MemKind.MANAGED_STATIC, MemKind.UNKNOWN]
    exp = Counter((int(ck), int(nsys_to_cupti[s]), int(nsys_to_cupti[d])) for ck, s, d, n in
                  _sql(path, "SELECT copyKind, srcKind, dstKind, COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY GROUP BY 1, 2, 3")
                  for _ in range(n))
    got = Counter(zip(tb.copy_kind[m].tolist(), tb.src_kind[m].tolist(), tb.dst_kind[m].tolist()))
    assert got == exp
    labels = {CopyKind.HTOD: "Host-to-Device", CopyKind.DTOH: "Device-to-Host", CopyKind.DTOD: "Device-to-Device"}
    for row, ck in zip(m.tolist(), tb.copy_kind[m].tolist()):
        if ck in labels:
            assert tb.name_of(row) == f"[CUDA memcpy {labels[ck]}]"


@exports
def test_runtime_names_raw_and_categories(path):
    tb = _load(path)
    rt = np.flatnonzero(tb.mask(Kind.RUNTIME))
    exp = Counter(dict(_sql(path, "SELECT s.value, COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
                                  "ON s.id = r.nameId GROUP BY s.value")))
    assert Counter(_names(tb, rt).tolist()) == exp
    cats = np.asarray(tb.names, dtype=object)[tb.cat_id[rt]]
    for name, cat in zip(_names(tb, rt), cats):
        assert cat == ("cuda_runtime" if name.startswith("cuda") else "cuda_driver")


@exports
def test_unused_tables_are_listed(path):
    tb = _load(path)
    used = set(tb.accounting.read) | set(export_schema.LOOKUP_TABLES) | set(export_schema.EVENT_TABLES)
    for t in _tables(path):
        if t in used or t.startswith("ENUM_"):
            continue
        n = _sql(path, f'SELECT COUNT(*) FROM "{t}"')[0][0]
        if n:
            assert tb.meta.extra[f"not used: {t}"] == f"{n} rows"


def test_sync_rows_on_con_kernel():
    path = _export("extrap/con_kernel.sqlite")
    tb = _load(path)
    # the synchronizing call of each SYNC row, and the cudaEventRecord it binds to (latest record
    # of the same event, in the same process, with a smaller correlation id)
    rows = _sql(path, """
        SELECT s.correlationId, n.value, s.eventId,
               (SELECT MAX(e.correlationId) FROM CUPTI_ACTIVITY_KIND_CUDA_EVENT e
                 WHERE e.eventId = s.eventId AND e.globalPid = s.globalPid AND e.correlationId < s.correlationId)
        FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION s
        JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = s.correlationId
             AND (r.globalTid >> 24) & 0xFFFFFF = (s.globalPid >> 24) & 0xFFFFFF
        JOIN StringIds n ON n.id = r.nameId""")
    record_stream = dict(_sql(path, "SELECT correlationId, streamId FROM CUPTI_ACTIVITY_KIND_CUDA_EVENT"))
    role_kind = {ApiRole.EVENT_SYNC: SyncKind.EVENT_SYNC, ApiRole.DEVICE_SYNC: SyncKind.CONTEXT_SYNC,
                 ApiRole.STREAM_SYNC: SyncKind.STREAM_SYNC, ApiRole.STREAM_WAIT_EVENT: SyncKind.STREAM_WAIT_EVENT}
    sync = np.flatnonzero(tb.mask(Kind.SYNC))
    assert len(sync) == len(rows) == 6
    by_corr = {int(tb.correlation[i]): i for i in sync}
    kinds = Counter()
    for corr, api, event_id, rec_corr in rows:
        i = by_corr[corr]
        assert tb.sync_kind[i] == role_kind[api_role(api)], api
        kinds[SyncKind(int(tb.sync_kind[i]))] += 1
        if rec_corr is not None:
            assert tb.link_correlation[i] == rec_corr
            assert tb.link_stream[i] == record_stream[rec_corr]
        else:
            assert tb.link_correlation[i] == -1 and tb.link_stream[i] == -1
    assert kinds == {SyncKind.EVENT_SYNC: 5, SyncKind.CONTEXT_SYNC: 1}
    assert np.all(tb.tid[sync] == -1)


def test_sync_kind_from_call_name_on_mock_and_mfu():
    for name in ("nsys_ai/mock.sqlite", "nsys_ai/mfu_2gpu_before.sqlite"):
        path = _export(name)
        tb = _load(path)
        rows = _sql(path, """
            SELECT (s.globalPid >> 24) & 0xFFFFFF, s.correlationId, s.streamId, n.value
            FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION s
            JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = s.correlationId
                 AND (r.globalTid >> 24) & 0xFFFFFF = (s.globalPid >> 24) & 0xFFFFFF
            JOIN StringIds n ON n.id = r.nameId""")
        sync = np.flatnonzero(tb.mask(Kind.SYNC))
        at = {(int(tb.pid[i]), int(tb.correlation[i])): i for i in sync}
        for pid, corr, stream, api in rows:
            i = at[(pid, corr)]
            role = api_role(api)
            if role == ApiRole.STREAM_SYNC:
                assert tb.sync_kind[i] == SyncKind.STREAM_SYNC and tb.stream[i] == stream
            elif role == ApiRole.STREAM_WAIT_EVENT:
                assert tb.sync_kind[i] == SyncKind.STREAM_WAIT_EVENT and tb.stream[i] == stream


def test_mfu_two_devices_nccl_and_sync_devices():
    path = _export("nsys_ai/mfu_2gpu_before.sqlite")
    tb = _load(path)
    gpu = tb.mask(*GPU_TASK_KINDS)
    assert set(tb.device[gpu].tolist()) == {r[0] for r in _sql(path, "SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL")} == {0, 1}
    k = np.flatnonzero(tb.mask(Kind.KERNEL))
    n_nccl = _sql(path, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName "
                        "WHERE s.value LIKE 'ncclDevKernel%'")[0][0]
    assert n_nccl > 0
    assert sum(n.startswith("ncclDevKernel") for n in _names(tb, k)) == n_nccl
    assert [d.id for d in tb.meta.devices] == [0, 1]
    # SYNC rows sit on the device their process's context ran its kernels on
    dev_of_pid = dict(_sql(path, "SELECT DISTINCT (globalPid >> 24) & 0xFFFFFF, deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL"))
    s = np.flatnonzero(tb.mask(Kind.SYNC))
    assert all(tb.device[i] == dev_of_pid[int(tb.pid[i])] for i in s)


def test_mfu_nvtx_names_from_text_and_textid():
    path = _export("nsys_ai/mfu_2gpu_before.sqlite")
    tb = _load(path)
    r = np.flatnonzero(tb.mask(Kind.RANGE))
    got = Counter(_names(tb, r).tolist())
    from_text = Counter(dict(_sql(path, "SELECT text, COUNT(*) FROM NVTX_EVENTS WHERE text IS NOT NULL GROUP BY text")))
    from_id = Counter(dict(_sql(path, "SELECT s.value, COUNT(*) FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId "
                                      "WHERE n.text IS NULL GROUP BY s.value")))
    assert any(n.startswith("aten::") for n in from_text) and {"ncclSend", "ncclRecv"} <= set(from_id)
    assert got == from_text + from_id
    # NCCL's domain has no NvtxDomainCreate row in this cut window: default category, counted
    assert set(np.asarray(tb.names, dtype=object)[tb.cat_id[r]].tolist()) == {"nvtx"}
    assert any("domain name unknown" in k for k in tb.accounting.notes)
    assert tb.meta.extra["EXPORT_SCHEMA_VERSION"] == _sql(path, "SELECT value FROM META_DATA_EXPORT WHERE name = 'EXPORT_SCHEMA_VERSION'")[0][0]


def test_profile1_nested_push_pop_ranges():
    path = _export("extrap/profile1.sqlite")
    tb = _load(path)
    r = np.flatnonzero(tb.mask(Kind.RANGE))
    domain = _sql(path, "SELECT COALESCE(text, (SELECT value FROM StringIds WHERE id = textId)) FROM NVTX_EVENTS WHERE eventType = 75")[0][0]
    assert set(np.asarray(tb.names, dtype=object)[tb.cat_id[r]].tolist()) == {domain}
    spans = list(zip(_names(tb, r).tolist(), tb.pid[r].tolist(), tb.tid[r].tolist(), tb.start_ns[r].tolist(), tb.end_ns[r].tolist()))
    by_name = {}
    for s in spans:
        by_name.setdefault(s[0], []).append(s)
    nested = 0
    for name, pid, tid, a, b in spans:
        if "->" not in name:
            continue
        parent = name.rsplit("->", 1)[0]
        assert any(p[1:3] == (pid, tid) and p[3] <= a and b <= p[4] for p in by_name[parent]), name
        nested += 1
    assert nested > 0
    assert nested == _sql(path, "SELECT COUNT(*) FROM NVTX_EVENTS WHERE eventType = 59 AND text LIKE '%->%'")[0][0]
    assert tb.accounting.skipped == {"NVTX_EVENTS: metadata (NVTX domain/category/thread naming)": 1}
    assert tb.meta.extra["metadata_table"] == "EXPORT_META_DATA"


def test_devices_from_target_info():
    mock = _export("nsys_ai/mock.sqlite")
    (name, sms, major, minor, mem), = _sql(mock, "SELECT name, smCount, computeMajor, computeMinor, totalMemory FROM TARGET_INFO_GPU")
    (d,) = _load(mock).meta.devices
    assert (d.id, d.name, d.num_sms, d.compute_major, d.compute_minor, d.total_memory_bytes) == (0, name, sms, major, minor, mem)
    prof = _export("extrap/profile1.sqlite")
    cuda_gpus = _sql(prof, "SELECT name FROM TARGET_INFO_GPU WHERE computeMajor > 0")
    assert [x.name for x in _load(prof).meta.devices] == [n for (n,) in cuda_gpus]  # no Intel/Basic Render adapters
    old = _export("extrap/ex-gpu.s10.sqlite")
    exp = _sql(old, "SELECT deviceId, name, numMultiprocessors, computeCapabilityMajor FROM TARGET_INFO_CUDA_GPU ORDER BY deviceId")
    got = [(x.id, x.name, x.num_sms, x.compute_major) for x in _load(old).meta.devices]
    assert got == exp
    assert "metadata_table" not in _load(old).meta.extra  # the oldest export has no metadata table


def test_detect_picks_nsys_for_exports():
    if not EXPORTS:
        pytest.skip("../shared/traces not available")
    for p in EXPORTS:
        assert formats.detect(str(p)) is nsys


# ---- synthetic exports -------------------------------------------------------------------------

PID, TID = 100, 101
GTID = (PID << 24) | TID
GPID = PID << 24

KERNEL_COLS = ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "demangledName", "shortName"]
RUNTIME_COLS = ["start", "end", "eventClass", "globalTid", "correlationId", "nameId", "returnValue"]
NVTX_COLS = ["start", "end", "eventType", "rangeId", "category", "color", "text", "globalTid", "endGlobalTid", "textId", "domainId"]
SYNC_COLS = ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "syncType", "eventId"]
STRINGS = [(1, "kern_a"), (2, "kern_a_short"), (3, "cudaLaunchKernel_v7000"), (4, "cudaStreamSynchronize_v3020"),
           (5, "registered range"), (6, "cuLaunchKernel")]


def make_db(path: Path, tables: dict[str, tuple[list[str], list[tuple]]]) -> Path:
    con = sqlite3.connect(path)
    for name, (cols, rows) in tables.items():
        con.execute(f"CREATE TABLE {name} ({', '.join(cols)})")
        if rows:
            con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(cols))})", rows)
    con.commit()
    con.close()
    return path


def basic_tables(**override):
    t = {
        "StringIds": (["id INTEGER PRIMARY KEY", "value TEXT"], STRINGS),
        "CUPTI_ACTIVITY_KIND_RUNTIME": (RUNTIME_COLS, [(10, 20, 0, GTID, 7, 3, 0), (30, 60, 0, GTID, 8, 4, 0)]),
        "CUPTI_ACTIVITY_KIND_KERNEL": (KERNEL_COLS, [(25, 40, 0, 1, 7, 7, GPID, 1, 2)]),
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": (SYNC_COLS, [(35, 40, 0, 1, 7, 8, GPID, 2, 0xFFFFFFFF)]),
    }
    t.update(override)
    return t


def test_sniff():
    assert nsys.sniff(formats.SQLITE_MAGIC + b"\x10\x00", "x.sqlite")
    assert not nsys.sniff(b'{"traceEvents": []}', "x.json")
    assert nsys.NAME == "nsys" and "nsys export" in nsys.DESCRIPTION


def test_synthetic_basic(tmp_path):
    tb = nsys.load(str(make_db(tmp_path / "t.sqlite", basic_tables())))
    assert tb.accounting.balanced
    k = np.flatnonzero(tb.mask(Kind.KERNEL))[0]
    assert (tb.name_of(k), tb.pid[k], tb.tid[k], tb.device[k], tb.stream[k], tb.correlation[k]) == ("kern_a", PID, -1, 0, 7, 7)
    s = np.flatnonzero(tb.mask(Kind.SYNC))[0]
    # syncType 2 (stream wait event in CUPTI numbering) on a cudaStreamSynchronize: the call name wins, counted
    assert tb.sync_kind[s] == SyncKind.STREAM_SYNC and tb.stream[s] == 7 and tb.correlation[s] == 8
    assert any("syncType disagrees" in k for k in tb.accounting.notes)
    r = np.flatnonzero(tb.mask(Kind.RUNTIME))
    assert set(zip(tb.pid[r].tolist(), tb.tid[r].tolist())) == {(PID, TID)}
    assert tb.meta.format == "nsys" and [d.id for d in tb.meta.devices] == [0]


def test_kernel_name_falls_back_to_short_name(tmp_path):
    t = basic_tables(CUPTI_ACTIVITY_KIND_KERNEL=(["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "shortName"],
                                                 [(25, 40, 0, 7, 7, GPID, 2)]))
    tb = nsys.load(str(make_db(tmp_path / "t.sqlite", t)))
    assert tb.name_of(np.flatnonzero(tb.mask(Kind.KERNEL))[0]) == "kern_a_short"


def test_not_an_nsys_export(tmp_path):
    p = make_db(tmp_path / "other.sqlite", {"people": (["name TEXT"], [("a",)])})
    with pytest.raises(TraceFormatError) as ei:
        nsys.load(str(p))
    msg = str(ei.value)
    assert str(p) in msg and "CUPTI_ACTIVITY_KIND_" in msg and "NVTX_EVENTS" in msg and "StringIds" in msg
    with pytest.raises(TraceFormatError):
        formats.load_trace(str(p))
    empty_db = tmp_path / "empty.sqlite"
    sqlite3.connect(empty_db).execute("CREATE TABLE x (a)").connection.close()
    with pytest.raises(TraceFormatError, match="not an Nsight Systems export"):
        nsys.load(str(empty_db))


def test_kernel_table_missing_start(tmp_path):
    cols = [c for c in KERNEL_COLS if c != "start"]
    t = basic_tables(CUPTI_ACTIVITY_KIND_KERNEL=(cols, [(40, 0, 1, 7, 7, GPID, 1, 2)]))
    with pytest.raises(TraceFormatError) as ei:
        nsys.load(str(make_db(tmp_path / "t.sqlite", t)))
    assert "CUPTI_ACTIVITY_KIND_KERNEL" in str(ei.value) and "'start'" in str(ei.value)


def test_missing_string_table(tmp_path):
    t = basic_tables()
    del t["StringIds"]
    with pytest.raises(TraceFormatError, match="StringIds"):
        nsys.load(str(make_db(tmp_path / "t.sqlite", t)))


def test_null_and_zero_correlation_ids(tmp_path):
    t = basic_tables(
        CUPTI_ACTIVITY_KIND_KERNEL=(KERNEL_COLS, [(25, 40, 0, 1, 7, None, GPID, 1, 2), (41, 50, 0, 1, 7, 0, None, 1, 2)]),
        CUPTI_ACTIVITY_KIND_RUNTIME=(RUNTIME_COLS, [(10, 20, 0, GTID, None, 3, 0), (30, 60, 0, None, 0, 6, 0)]),
    )
    tb = nsys.load(str(make_db(tmp_path / "t.sqlite", t)))
    assert tb.accounting.balanced
    assert tb.count(Kind.KERNEL) == 2 and tb.count(Kind.RUNTIME) == 2
    for kind in (Kind.KERNEL, Kind.RUNTIME):
        assert np.all(tb.correlation[tb.mask(kind)] == -1)
    notes = tb.accounting.notes
    assert notes["CUPTI_ACTIVITY_KIND_KERNEL: no correlationId (NULL or 0)"] == 2
    assert notes["CUPTI_ACTIVITY_KIND_RUNTIME: no correlationId (NULL or 0)"] == 2
    assert notes["CUPTI_ACTIVITY_KIND_KERNEL: no globalPid (pid -1)"] == 1
    r = np.flatnonzero(tb.mask(Kind.RUNTIME))
    assert sorted(tb.pid[r].tolist()) == [-1, PID]
    cats = {tb.name_of(i): tb.names[tb.cat_id[i]] for i in r}
    assert cats == {"cudaLaunchKernel_v7000": "cuda_runtime", "cuLaunchKernel": "cuda_driver"}


def test_null_start_skipped_and_strict(tmp_path):
    t = basic_tables(CUPTI_ACTIVITY_KIND_KERNEL=(KERNEL_COLS, [(None, 40, 0, 1, 7, 7, GPID, 1, 2), (25, 40, 0, 1, 7, 7, GPID, 1, 2)]))
    p = make_db(tmp_path / "t.sqlite", t)
    tb = nsys.load(str(p))
    assert tb.count(Kind.KERNEL) == 1
    assert tb.accounting.skipped == {"CUPTI_ACTIVITY_KIND_KERNEL: NULL start": 1}
    assert tb.accounting.balanced
    with pytest.raises(TraceFormatError, match="NULL start"):
        nsys.load(str(p), strict=True)


def test_nvtx_ranges_marks_domains_and_open_ranges(tmp_path):
    other_pid_gtid = (200 << 24) | 201
    nvtx = [
        (5, None, 75, None, None, None, "my.domain", GTID, None, None, 3),  # domain create, pid 100
        (6, None, 75, None, None, None, "other.domain", other_pid_gtid, None, None, 3),  # same id, other process
        (7, None, 33, None, 1, None, "category one", GTID, None, None, 0),  # category naming
        (10, 50, 59, None, None, None, "outer", GTID, None, None, 3),
        (12, 30, 59, None, None, None, None, GTID, None, 5, 0),  # registered string
        (15, None, 59, None, None, None, "never popped", GTID, None, None, 0),
        (20, 22, 60, 1, None, None, "start-end", GTID, (PID << 24) | 999, None, 0),
        (25, None, 34, None, None, None, "a mark", GTID, None, None, 0),
        (26, 27, 99999, None, None, None, "odd", GTID, None, None, 0),
    ]
    t = basic_tables(NVTX_EVENTS=(NVTX_COLS, nvtx))
    tb = nsys.load(str(make_db(tmp_path / "t.sqlite", t)))
    acc = tb.accounting
    assert acc.balanced
    assert acc.read["NVTX_EVENTS"] == len(nvtx)
    assert acc.skipped["NVTX_EVENTS: metadata (NVTX domain/category/thread naming)"] == 3
    assert acc.skipped["NVTX_EVENTS: unsupported eventType 99999"] == 1
    rows = {tb.name_of(i): i for i in np.flatnonzero(tb.mask(Kind.RANGE, Kind.MARKER))}
    assert set(rows) == {"outer", "registered range", "never popped", "start-end", "a mark"}
    assert tb.names[tb.cat_id[rows["outer"]]] == "my.domain"
    assert tb.names[tb.cat_id[rows["registered range"]]] == "nvtx"
    m = rows["a mark"]
    assert tb.kind[m] == Kind.MARKER and tb.end_ns[m] == tb.start_ns[m] == 25
    o = rows["never popped"]
    assert tb.end_ns[o] == max(tb.end_ns.max(), tb.start_ns.max()) == 60  # the trace's last timestamp
    assert acc.notes["NVTX_EVENTS: unterminated range (end set to the trace end)"] == 1
    assert acc.notes["NVTX_EVENTS: start/end range ended on another thread (kept on the starting thread)"] == 1
    assert (tb.pid[o], tb.tid[o], tb.device[o]) == (PID, TID, -1)


def test_cuda_event_links_by_event_sync_id(tmp_path):
    sync_cols = SYNC_COLS + ["eventSyncId"]
    ev_cols = ["timestamp", "deviceId", "contextId", "streamId", "correlationId", "globalPid", "eventId", "eventSyncId"]
    t = basic_tables(
        CUPTI_ACTIVITY_KIND_SYNCHRONIZATION=(sync_cols, [(35, 40, 0, 1, 9, 8, GPID, 2, 4, 77),
                                                         (36, 41, 0, 1, 9, 9, GPID, 2, 4, 78)]),
        CUPTI_ACTIVITY_KIND_CUDA_EVENT=(ev_cols, [(0, 0, 1, 7, 5, GPID, 4, 77), (0, 0, 1, 3, 6, GPID, 4, 79)]),
        ENUM_CUPTI_SYNC_TYPE=(["id", "name", "label"], [(2, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT", "x")]),
    )
    tb = nsys.load(str(make_db(tmp_path / "t.sqlite", t)))
    s = np.flatnonzero(tb.mask(Kind.SYNC))
    by_corr = {int(tb.correlation[i]): i for i in s}
    assert (tb.link_stream[by_corr[8]], tb.link_correlation[by_corr[8]]) == (7, 5)
    assert (tb.link_stream[by_corr[9]], tb.link_correlation[by_corr[9]]) == (-1, -1)  # eventSyncId 78 recorded nowhere
    assert tb.sync_kind[by_corr[9]] == SyncKind.STREAM_WAIT_EVENT  # no call with corr 9: from syncType via the enum
    acc = tb.accounting
    assert acc.kept["CUPTI_ACTIVITY_KIND_CUDA_EVENT"] == 1
    assert acc.skipped["CUPTI_ACTIVITY_KIND_CUDA_EVENT: not waited on by any synchronization record"] == 1
    assert acc.balanced


def test_non_utf8_strings_and_memcpy_enum_labels(tmp_path):
    p = make_db(tmp_path / "t.sqlite", basic_tables(
        CUPTI_ACTIVITY_KIND_MEMCPY=(["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes",
                                     "copyKind", "srcKind", "dstKind"],
                                    [(41, 45, 0, 7, 9, GPID, 64, 2, 2, 0), (46, 47, 0, 7, 10, GPID, 8, 12, 4, 4)]),
        ENUM_CUDA_MEMCPY_OPER=(["id", "name", "label"], [(2, "CUDA_MEMCPY_KIND_DTOH", "DtoH label")]),
    ))
    con = sqlite3.connect(p)
    con.execute("INSERT INTO StringIds VALUES (9, CAST(X'4765698A' AS TEXT))")  # invalid UTF-8
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 9")
    con.commit()
    con.close()
    tb = nsys.load(str(p))
    assert tb.name_of(np.flatnonzero(tb.mask(Kind.KERNEL))[0]).startswith("Gei")
    m = np.flatnonzero(tb.mask(Kind.MEMCPY))
    got = sorted((tb.name_of(i), int(tb.copy_kind[i]), int(tb.src_kind[i]), int(tb.dst_kind[i])) for i in m)
    assert got == [("[CUDA memcpy DtoH label]", CopyKind.DTOH, MemKind.DEVICE, MemKind.PAGEABLE),
                   ("[CUDA memcpy Unified Device-to-Host]", CopyKind.DTOH, MemKind.MANAGED, MemKind.MANAGED)]


def test_nsys_rep_by_mistake(tmp_path):
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"\x00\x01NSYS-REPORT" + bytes(200))
    with pytest.raises(TraceFormatError) as ei:
        formats.detect(str(rep))
    msg = str(ei.value)
    assert "nsys export" in msg and "\n" not in msg
    # the adapter itself, given a non-SQLite file, says the same
    with pytest.raises(TraceFormatError, match="nsys export"):
        nsys.load(str(rep))


def test_damaged_and_missing_files(tmp_path):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(formats.SQLITE_MAGIC + b"\xff" * 300)
    with pytest.raises(TraceFormatError):
        nsys.load(str(bad))
    with pytest.raises(TraceFormatError, match="no such file"):
        nsys.load(str(tmp_path / "absent.sqlite"))
    with pytest.raises(TraceFormatError):
        nsys.load(str(tmp_path))


def test_export_with_only_nvtx_metadata_gives_empty_table(tmp_path):
    p = make_db(tmp_path / "t.sqlite", {
        "StringIds": (["id INTEGER PRIMARY KEY", "value TEXT"], []),
        "NVTX_EVENTS": (NVTX_COLS, [(5, None, 75, None, None, None, "dom", GTID, None, None, 1)]),
    })
    tb = nsys.load(str(p))
    assert len(tb) == 0 and tb.accounting.balanced
    assert tb.accounting.skipped == {"NVTX_EVENTS: metadata (NVTX domain/category/thread naming)": 1}


def test_non_integer_timestamp(tmp_path):
    t = basic_tables(CUPTI_ACTIVITY_KIND_KERNEL=(KERNEL_COLS, [("soon", 40, 0, 1, 7, 7, GPID, 1, 2)]))
    with pytest.raises(TraceFormatError, match="CUPTI_ACTIVITY_KIND_KERNEL"):
        nsys.load(str(make_db(tmp_path / "t.sqlite", t)))


def test_path_with_special_characters(tmp_path):
    d = tmp_path / "dir with #?% chars"
    d.mkdir()
    tb = nsys.load(str(make_db(d / "t e#st.sqlite", basic_tables())))
    assert tb.count(Kind.KERNEL) == 1


_maybe = lambda s: st.one_of(st.none(), s)  # noqa: E731
_ts = _maybe(st.integers(-1000, 1000))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    kernels=st.lists(st.tuples(_ts, _ts, _maybe(st.integers(0, 3)), st.integers(0, 3), st.integers(0, 3), _maybe(st.integers(0, 10)),
                               _maybe(st.just(GPID)), _maybe(st.integers(0, 12)), st.integers(0, 12)), max_size=8),
    runtime=st.lists(st.tuples(_ts, _ts, st.just(0), _maybe(st.just(GTID)), _maybe(st.integers(0, 10)),
                               st.integers(0, 8), st.just(0)), max_size=8),
    nvtx=st.lists(st.tuples(_ts, _ts, st.sampled_from([33, 34, 39, 59, 60, 70, 71, 75, 1234]), st.none(), st.none(),
                            st.none(), _maybe(st.text(max_size=5)), _maybe(st.just(GTID)), st.none(),
                            _maybe(st.integers(0, 8)), st.integers(0, 2)), max_size=8),
    drop=st.sets(st.sampled_from(["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS",
                                  "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "StringIds"])),
)
def test_random_tables_never_break(tmp_path_factory, kernels, runtime, nvtx, drop):
    p = tmp_path_factory.mktemp("h") / "t.sqlite"
    tables = basic_tables(CUPTI_ACTIVITY_KIND_KERNEL=(KERNEL_COLS, kernels),
                          CUPTI_ACTIVITY_KIND_RUNTIME=(RUNTIME_COLS, runtime),
                          NVTX_EVENTS=(NVTX_COLS, nvtx))
    make_db(p, {k: v for k, v in tables.items() if k not in drop})
    try:
        tb = nsys.load(str(p))
    except TraceFormatError:
        return
    acc = tb.accounting
    assert acc.balanced
    n_kernels = 0 if "CUPTI_ACTIVITY_KIND_KERNEL" in drop else len(kernels)
    assert tb.count(Kind.KERNEL) == n_kernels - _skipped(tb, "CUPTI_ACTIVITY_KIND_KERNEL")
    assert np.all(tb.end_ns >= tb.start_ns)
    assert all(isinstance(n, str) for n in tb.names)
