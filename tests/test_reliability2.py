"""Reliability, second round: bounded memory on hostile files, exact reads, atomic outputs.

Each hostile input is built here (small versions of the reported ones) and named in
``HOSTILE``; :func:`test_every_hostile_input_in_bounded_memory_and_time` runs them all in child
processes and checks each one's peak RSS and wall time against the documented bound
(docs/errors.md, "Resource bounds"): RSS under 10 x the input file's size + 300 MB, and an
answer within 20 s. The other tests check each answer's content.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

import daydream.formats
from daydream.cli import main
from daydream.formats import load_trace

ROOT = Path(__file__).resolve().parents[1]
MB = 1 << 20
#: the documented bound: peak RSS < RSS_PER_BYTE x the file's size + RSS_ALLOWANCE, answer within TIME_BOUND_S
RSS_PER_BYTE, RSS_ALLOWANCE, TIME_BOUND_S = 10, 300 * MB, 20.0
#: whitespace in the decompression bombs (the reported one had 3 GiB)
BOMB_BYTES = 320 * MB
BOM = b"\xef\xbb\xbf"


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main(["--details", *(str(a) for a in args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def refused(capsys, path, *args, where: str = "", says: str = "") -> str:
    code, _, err = cli(capsys, path, *args)
    line = err.strip()
    assert code == 2, err
    assert "Traceback" not in err and len(line.splitlines()) == 1, err
    assert line.startswith("daydream-analyze: error: ") and str(path) in line, line
    assert where in line and says in line, line
    return line


def report(capsys, path, *args, tmp_path: Path) -> tuple[dict, str]:
    j = tmp_path / "report.json"
    code, _, err = cli(capsys, path, "--json", j, *args)
    assert code == 0, err
    doc = json.loads(j.read_bytes())
    a = doc["accounting"]
    assert sum(a["read"].values()) == sum(a["kept"].values()) + sum(a["skipped"].values()), a
    return doc, err


def rt(corr=1, ts=5, dur=3, **kw) -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 100, "ts": ts, "dur": dur,
            "args": {"correlation": corr}, **kw}


def kern(corr=1, ts=10, dur=5, name="k", **kw) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "device": 0, "stream": 7}, **kw}


EVENTS = [rt(1, 5), kern(1, 10), rt(2, 20), kern(2, 30)]


def gzip_with_blanks(prefix: bytes, blank: bytes, n: int, suffix: bytes) -> bytes:
    """gzip of prefix + blank * (n // len(blank)) + suffix, built without holding the inflated text."""
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    out = [c.compress(prefix)]
    chunk = blank * (MB // len(blank))
    for _ in range(n // len(chunk)):
        out.append(c.compress(chunk))
    out += [c.compress(suffix), c.flush()]
    return b"".join(out)


# ---------------------------------------------------------------------------------------------
# hostile inputs: name -> builder(folder) -> path
# ---------------------------------------------------------------------------------------------
def bomb_json_gz(d: Path, bom: bytes = b"", name: str = "bomb.json.gz") -> Path:
    evs = json.dumps(EVENTS)[1:-1].encode()
    p = d / name
    p.write_bytes(gzip_with_blanks(bom + b'{"traceEvents": [' + evs, b" ", BOMB_BYTES, b"]}"))
    return p


def bomb_bom_json_gz(d: Path) -> Path:
    return bomb_json_gz(d, BOM, "bomb_bom.json.gz")


def bomb_jsonl_gz(d: Path) -> Path:
    head = json.dumps({"kind": "HEADER", "format": "cupti-jsonl", "version": 1, "pid": 100}).encode() + b"\n"
    p = d / "bomb.jsonl.gz"
    p.write_bytes(gzip_with_blanks(head, b"    \n", BOMB_BYTES, json.dumps(_api(1, 10, 20)).encode() + b"\n"))
    return p


def _saved(d: Path, name: str) -> Path:
    src = d / (name + ".src.json")
    src.write_text(json.dumps({"traceEvents": EVENTS}))
    p = d / name
    load_trace(str(src)).save(str(p))
    return p


def _rewrite_npz(p: Path, member: str, data: bytes, compress: bool) -> None:
    with zipfile.ZipFile(p) as z:
        items = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    with zipfile.ZipFile(p, "w") as z:
        for n, b in items:
            if n == member:
                z.writestr(n, data, zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED)
            else:
                z.writestr(n, b)


def npy_bytes(a: np.ndarray) -> bytes:
    f = io.BytesIO()
    np.lib.format.write_array(f, a)
    return f.getvalue()


def npz_inflating_member(d: Path, nbytes: int = BOMB_BYTES) -> Path:
    """A column member of 40 M zeros (320 MB) in a table of 4 rows, deflated to ~300 KB."""
    p = _saved(d, f"member{nbytes}.npz")
    _rewrite_npz(p, "start_ns.npy", npy_bytes(np.zeros(nbytes // 8, np.int64)), compress=True)
    return p


def npz_huge_npy_header(d: Path) -> Path:
    """A column whose .npy header claims 2^40 rows (8 TiB) with 32 bytes behind it."""
    p = _saved(d, "npy_header.npz")
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<i8", "fortran_order": False, "shape": (2**40,)})
    _rewrite_npz(p, "start_ns.npy", head.getvalue() + bytes(32), compress=False)
    return p


def npz_inflating_header(d: Path) -> Path:
    """The JSON header member inflates to 320 MB of blanks (read whole before any check)."""
    p = _saved(d, "json_header.npz")
    with zipfile.ZipFile(p) as z:
        body = np.load(io.BytesIO(z.read("__header__.npy"))).tobytes()
    big = np.frombuffer(body + b" " * BOMB_BYTES, np.uint8)
    _rewrite_npz(p, "__header__.npy", npy_bytes(big), compress=True)
    return p


def _api(corr, start, end):
    return {"kind": "RUNTIME", "cbid": 211, "start": start, "end": end, "processId": 100, "threadId": 7, "correlationId": corr}


def _kernel(corr, start, end):
    return {"kind": "CONCURRENT_KERNEL", "name": "vecAdd", "start": start, "end": end, "deviceId": 0, "contextId": 1,
            "streamId": 7, "correlationId": corr}


def _cupti(d: Path, name: str, *records, header=True) -> Path:
    head = [{"kind": "HEADER", "format": "cupti-jsonl", "version": 1, "pid": 100}] if header else []
    p = d / name
    p.write_bytes(b"\n".join(json.dumps(r).encode() for r in head + list(records)) + b"\n")
    return p


def cupti_uint64_max(d: Path) -> Path:
    k = _kernel(1, 25, 40)
    k["correlationId"] = 2**64 - 1
    return _cupti(d, "u64.jsonl", _api(1, 10, 20), k)


def cupti_uint64_start(d: Path) -> Path:
    return _cupti(d, "u64start.jsonl", _api(1, 2**64 - 1, 20), _kernel(1, 25, 40))


def device_props_bad_utf8(d: Path) -> Path:
    p = d / "props.json"
    doc = json.dumps({"deviceProperties": [{"id": 0, "name": "NVIDIA H100 XNAMEX"}], "traceEvents": EVENTS}).encode()
    p.write_bytes(doc.replace(b"XNAMEX", b"\xff\xfeGPU"))
    return p


def long_kernel_name(d: Path) -> Path:
    """One kernel name of 8 MB (the reported one had 100 MB and took 223 s)."""
    p = d / "longname.json"
    p.write_text(json.dumps({"traceEvents": [rt(1, 5), kern(1, 10, name="void at::native::" + "x" * (8 * MB))]}))
    return p


def fifo(d: Path) -> Path:
    p = d / "pipe.json"
    os.mkfifo(p)
    return p


def ns_timestamps(d: Path) -> Path:
    t0 = 1_700_000_000_000_000_000  # ns since the epoch, written where microseconds belong
    p = d / "ns.json"
    p.write_text(json.dumps({"traceEvents": [rt(1, t0 + 5000), kern(1, t0 + 10000), rt(2, t0 + 20000), kern(2, t0 + 30000)]}))
    return p


def string_times(d: Path) -> Path:
    evs = [dict(e, ts=str(e["ts"]) + ".5", dur=str(e["dur"])) for e in EVENTS]
    p = d / "strings.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    return p


def two_event_arrays(d: Path) -> Path:
    p = d / "twice.json"
    p.write_text('{"traceEvents": ' + json.dumps(EVENTS) + ', "traceEvents": []}')
    return p


def utf16(d: Path) -> Path:
    p = d / "u16.json"
    p.write_bytes(json.dumps({"traceEvents": EVENTS}).encode("utf-16"))
    return p


def python_repr(d: Path) -> Path:
    p = d / "repr.json"
    p.write_text(repr({"traceEvents": EVENTS}))
    return p


def cupti_no_header(d: Path) -> Path:
    return _cupti(d, "nohead.jsonl", _api(1, 10, 20), _kernel(1, 25, 40), header=False)


#: name -> (builder, expected exit status)
HOSTILE = {
    "bomb.json.gz": (bomb_json_gz, 2),
    "bomb_bom.json.gz": (bomb_bom_json_gz, 2),
    "bomb.jsonl.gz": (bomb_jsonl_gz, 2),
    "npz_inflating_member": (npz_inflating_member, 2),
    "npz_huge_npy_header": (npz_huge_npy_header, 2),
    "npz_inflating_header": (npz_inflating_header, 2),
    "cupti_uint64_max": (cupti_uint64_max, 2),
    "cupti_uint64_start": (cupti_uint64_start, 2),
    "device_props_bad_utf8": (device_props_bad_utf8, 0),
    "long_kernel_name": (long_kernel_name, 0),
    "fifo": (fifo, 2),
    "ns_timestamps": (ns_timestamps, 2),
    "string_times": (string_times, 0),
    "two_event_arrays": (two_event_arrays, 2),
    "utf16": (utf16, 2),
    "python_repr": (python_repr, 2),
    "cupti_no_header": (cupti_no_header, 2),
}


# ---------------------------------------------------------------------------------------------
# 1. decompression bombs
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> dict[str, Path]:
    """Every hostile input, built once for the module."""
    d = tmp_path_factory.mktemp("hostile")
    return {name: build(d) for name, (build, _) in HOSTILE.items()}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bomb.json.gz", "bomb_bom.json.gz", "bomb.jsonl.gz"])
def test_gzip_bomb_is_refused(hostile, capsys, name):
    p = hostile[name]
    assert p.stat().st_size * 100 < BOMB_BYTES and BOMB_BYTES > getattr(daydream.formats, "INFLATE_FLOOR", 0)
    refused(capsys, p, where="gzip stream", says="refused as a possible decompression bomb")


def test_gzip_within_the_limit_and_behind_a_bom_still_reads(tmp_path, capsys):
    p = tmp_path / "bom.json.gz"
    p.write_bytes(gzip.compress(BOM + json.dumps({"traceEvents": EVENTS}).encode() + b" " * (4 * MB)))
    doc, _ = report(capsys, p, tmp_path=tmp_path)
    assert doc["accounting"]["kept"] == {"cuda_runtime": 2, "kernel": 2}


# ---------------------------------------------------------------------------------------------
# 2. saved tables: sizes checked before anything is allocated
# ---------------------------------------------------------------------------------------------
def test_npz_member_longer_than_the_table_is_refused_unread(tmp_path, capsys, hostile):
    p = npz_inflating_member(tmp_path, 32 * MB)  # under the inflate limit: its length is what is wrong
    refused(capsys, p, where="column start_ns", says="4,194,304 rows, but the header says the table has 4")
    refused(capsys, hostile["npz_inflating_member"], says="refused as a possible decompression bomb")


def test_npy_header_claiming_2_to_the_40_rows_is_refused(tmp_path, capsys):
    refused(capsys, npz_huge_npy_header(tmp_path), where="column start_ns", says="declares 1,099,511,627,776 values")


def test_npz_header_member_bomb_is_refused(hostile, capsys):
    refused(capsys, hostile["npz_inflating_header"], says="refused as a possible decompression bomb")


# ---------------------------------------------------------------------------------------------
# 3. SQLite: the committed content a normal reader sees, nothing written beside the file
# ---------------------------------------------------------------------------------------------
SCHEMA = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
INSERT INTO StringIds VALUES (1, 'kern'), (2, 'cudaLaunchKernel_v7000');
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, returnValue);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, correlationId, globalPid, demangledName, shortName);
"""


def _add_kernels(con, first: int, n: int) -> None:
    for c in range(first, first + n):
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, 1677721701, ?, 2, 0)", (100 * c, 100 * c + 10, c))
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, 7, ?, 1677721600, 1, 1)", (100 * c + 20, 100 * c + 50, c))


def _snapshot(folder: Path) -> dict:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}


def test_sqlite_wal_commits_are_read(tmp_path, capsys):
    """9 kernels in the database file, 27 more committed in its -wal file: a reader sees 36."""
    work, d = tmp_path / "work", tmp_path / "copy"
    work.mkdir(), d.mkdir()
    con = sqlite3.connect(work / "t.sqlite")
    con.execute("PRAGMA journal_mode=WAL")
    con.executescript(SCHEMA)
    _add_kernels(con, 1, 9)
    con.commit()
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.execute("PRAGMA wal_autocheckpoint=0")
    _add_kernels(con, 10, 27)
    con.commit()
    for n in ("t.sqlite", "t.sqlite-wal"):  # the files as the writer left them (it never checkpointed)
        shutil.copyfile(work / n, d / n)
    con.close()
    p = d / "t.sqlite"
    seen = sqlite3.connect(f"file:{work / 't.sqlite'}?mode=ro", uri=True).execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    assert seen == 36
    before = _snapshot(d)
    doc, _ = report(capsys, p, tmp_path=tmp_path)
    assert doc["accounting"]["read"]["CUPTI_ACTIVITY_KIND_KERNEL"] == 36
    assert _snapshot(d) == before  # nothing written to the file or its folder (no -shm)


def test_sqlite_hot_journal_is_rolled_back_not_read(tmp_path, capsys):
    """A writer's uncommitted pages in the database file, the originals in a hot -journal."""
    work, d = tmp_path / "work", tmp_path / "copy"
    work.mkdir(), d.mkdir()
    con = sqlite3.connect(work / "t.sqlite", isolation_level=None)
    con.executescript(SCHEMA)
    _add_kernels(con, 1, 9)
    con.execute("PRAGMA cache_size=2")  # the writer's pages spill into the database file
    con.execute("BEGIN")
    _add_kernels(con, 10, 3000)
    assert (work / "t.sqlite-journal").stat().st_size > 0
    for n in ("t.sqlite", "t.sqlite-journal"):
        shutil.copyfile(work / n, d / n)
    con.execute("ROLLBACK")
    con.close()
    before = _snapshot(d)
    doc, _ = report(capsys, d / "t.sqlite", tmp_path=tmp_path)
    assert doc["accounting"]["read"]["CUPTI_ACTIVITY_KIND_KERNEL"] == 9
    assert _snapshot(d) == before


# ---------------------------------------------------------------------------------------------
# 4. integers out of range
# ---------------------------------------------------------------------------------------------
def test_cupti_uint64_max_is_an_error_naming_the_record(tmp_path, capsys):
    refused(capsys, cupti_uint64_max(tmp_path), where="line 3", says="correlationId = 18446744073709551615 is outside")
    refused(capsys, cupti_uint64_start(tmp_path), where="line 2", says="start = 18446744073709551615 is outside")


def test_kineto_correlation_beyond_int64_is_counted(tmp_path, capsys):
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [rt(1), kern(1)]}).replace('"correlation": 1', f'"correlation": {2**64 - 1}'))
    doc, _ = report(capsys, p, tmp_path=tmp_path)
    assert doc["accounting"]["notes"]["args.correlation not an integer within int64 (no launch link)"] == 2


# ---------------------------------------------------------------------------------------------
# 5. strict means strict: invalid UTF-8 in deviceProperties
# ---------------------------------------------------------------------------------------------
def test_invalid_utf8_in_device_properties(tmp_path, capsys):
    p = device_props_bad_utf8(tmp_path)
    refused(capsys, p, "--strict", where="deviceProperties", says="invalid UTF-8 bytes")
    doc, _ = report(capsys, p, tmp_path=tmp_path)
    assert doc["accounting"]["notes"]["invalid UTF-8 bytes replaced by U+FFFD"] == 2
    t = load_trace(str(p))
    assert t.meta.devices[0].name == "NVIDIA H100 \ufffd\ufffdGPU"


# ---------------------------------------------------------------------------------------------
# 6. atomic outputs
# ---------------------------------------------------------------------------------------------
def test_outputs_replace_the_file_whole(tmp_path, capsys):
    """The old file is replaced by a rename, never rewritten in place: a reader holding it (here
    a hard link) keeps the old content, and the new one is complete."""
    src = tmp_path / "t.json"
    src.write_text(json.dumps({"traceEvents": EVENTS}))
    outs = {"--json": tmp_path / "r.json", "--save-table": tmp_path / "t.npz", "--timeline": tmp_path / "tl.json"}
    for o in outs.values():
        o.write_bytes(b"OLD")
        os.link(o, str(o) + ".held")
    code, _, err = cli(capsys, src, *[x for kv in outs.items() for x in kv])
    assert code == 0, err
    for o in outs.values():
        assert Path(str(o) + ".held").read_bytes() == b"OLD"
    json.loads(outs["--json"].read_bytes())
    json.loads(outs["--timeline"].read_bytes())
    assert len(load_trace(str(outs["--save-table"]))) == 4
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".daydream-")]  # no temporary left


def test_two_outputs_with_the_same_path_are_refused(tmp_path, capsys):
    src = tmp_path / "t.json"
    src.write_text(json.dumps({"traceEvents": EVENTS}))
    x = tmp_path / "x.out"
    code, _, err = cli(capsys, src, "--json", x, "--save-table", x)
    assert code == 2 and "--json and --save-table both name" in err, err
    code, _, err = cli(capsys, src, "--timeline", x, "--json", tmp_path / "." / "x.out")
    assert code == 2 and "--json and --timeline both name" in err, err
    assert not x.exists()


# ---------------------------------------------------------------------------------------------
# 7. cost bounded by input size: a huge kernel name
# ---------------------------------------------------------------------------------------------
def test_huge_names_are_classified_in_bounded_time():
    from daydream.graph.kernels import classify_names
    from daydream.mapping.rules import NAME_PREFIX

    huge = "void at::native::" + "ab_" * (2 * MB)
    t = time.perf_counter()
    c, _, _ = classify_names([huge, "volta_sgemm_128x64_nn" + "x" * (4 * MB)])
    assert time.perf_counter() - t < 1.0
    assert c[1] == 0 and NAME_PREFIX == 8192  # gemm, from the prefix


# ---------------------------------------------------------------------------------------------
# 8. special files
# ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_fifo_is_refused_without_blocking(tmp_path):
    p = fifo(tmp_path)
    r = subprocess.run([sys.executable, "-m", "daydream.cli", str(p)], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert r.returncode == 2 and "is a named pipe (FIFO), not a regular file" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "daydream.cli", "/dev/zero"], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert r.returncode == 2 and "is a character device, not a regular file" in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------
# 9. plausibility
# ---------------------------------------------------------------------------------------------
def test_nanosecond_timestamps_are_refused_with_the_reason(tmp_path, capsys):
    refused(capsys, ns_timestamps(tmp_path), where="traceEvents", says="the times look like nanoseconds")


def test_times_written_as_strings_are_read(tmp_path, capsys):
    doc, err = report(capsys, string_times(tmp_path), tmp_path=tmp_path)
    assert doc["accounting"]["kept"] == {"cuda_runtime": 2, "kernel": 2} and not doc["accounting"]["skipped"]
    t = load_trace(str(string_times(tmp_path)))
    assert sorted(t.start_ns.tolist()) == [5500, 10500, 20500, 30500]


def test_a_second_traceEvents_key_is_refused(tmp_path, capsys):
    p = two_event_arrays(tmp_path)
    refused(capsys, p, where=f"byte offset {p.read_bytes().index(b'traceEvents', 5) - 1}", says="a second traceEvents key")


# ---------------------------------------------------------------------------------------------
# 11. smaller
# ---------------------------------------------------------------------------------------------
def test_utf16_and_python_repr_get_specific_messages(tmp_path, capsys):
    refused(capsys, utf16(tmp_path), says="the file is UTF-16 text")
    q = tmp_path / "u16le.json"
    q.write_bytes(json.dumps({"traceEvents": EVENTS}).encode("utf-16-le"))
    refused(capsys, q, says="the file is UTF-16 text")
    refused(capsys, python_repr(tmp_path), says="a Python repr() dump")


def test_cupti_missing_header_message_is_reachable(tmp_path, capsys):
    refused(capsys, cupti_no_header(tmp_path), where="line 1", says="missing cupti-jsonl header")


def test_flow_event_skip_reason_says_what_is_read(tmp_path, capsys):
    evs = [rt(1), kern(1), {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 100, "tid": 100, "ts": 5},
           {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 0, "tid": 7, "ts": 10, "bp": "e"}]
    p = tmp_path / "flows.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    doc, _ = report(capsys, p, tmp_path=tmp_path)
    assert "flow event (ac2g): not a row; read as a launch link where args.correlation is missing" in doc["accounting"]["skipped"]


# ---------------------------------------------------------------------------------------------
# the resource bound, on every hostile input above
# ---------------------------------------------------------------------------------------------
DRIVER = r"""
import json, os, resource, signal, sys, time
from daydream.cli import main
out = []
for path, limit in json.loads(sys.argv[1]):
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        signal.alarm(int(limit) + 1)
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1), os.dup2(fd, 2)
        os._exit(main(["--details", path]))
    _, status, ru = os.wait4(pid, 0)
    out.append({"path": path, "rss": ru.ru_maxrss * 1024, "s": time.perf_counter() - t,
                "code": os.waitstatus_to_exitcode(status)})
print(json.dumps(out))
"""


@pytest.mark.slow
def test_every_hostile_input_in_bounded_memory_and_time(hostile):
    paths = hostile
    r = subprocess.run([sys.executable, "-c", DRIVER, json.dumps([[str(p), TIME_BOUND_S] for p in paths.values()])],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    got = {x["path"]: x for x in json.loads(r.stdout)}
    assert len(got) == len(paths)
    bad = []
    for name, p in paths.items():
        x = got[str(p)]
        size = p.stat().st_size if p.is_file() else 0
        bound = RSS_PER_BYTE * size + RSS_ALLOWANCE
        print(f"{name}: {x['rss'] / MB:.0f} MB (bound {bound / MB:.0f}), {x['s']:.2f} s, exit {x['code']}")
        if x["rss"] > bound or x["s"] > TIME_BOUND_S or x["code"] != HOSTILE[name][1]:
            bad.append((name, x["rss"] // MB, round(x["s"], 2), x["code"]))
    assert not bad, bad


def test_an_all_zero_wal_beside_the_export_is_ignored(tmp_path, monkeypatch):
    """A -wal without the WAL magic (SQLite ignores it) was copied in full to a temporary folder: 50 GB
    of a sparse all-zero file filled the disk. It is ignored now, and nothing is copied."""
    from daydream.formats import load_trace
    from daydream.formats.nsys import sqlite_file as N

    con = sqlite3.connect(tmp_path / "t.sqlite")
    con.executescript(SCHEMA)
    _add_kernels(con, 1, 9)
    con.commit()
    con.close()
    with open(tmp_path / "t.sqlite-wal", "wb") as f:
        f.truncate(1 << 20)
    copies = []
    monkeypatch.setattr(N.shutil, "copyfile", lambda *a, **k: copies.append(a))
    assert N._side_files(str(tmp_path / "t.sqlite")) == []
    t = load_trace(str(tmp_path / "t.sqlite"))
    assert t.accounting.read["CUPTI_ACTIVITY_KIND_KERNEL"] == 9 and not copies


def test_sigterm_runs_the_cleanups_and_exits_143(monkeypatch, capsys):
    """SIGTERM (a kill, a scheduler's time limit) left an nsys export's 4.3 GB private copy in the
    temporary folder: it now unwinds like Ctrl-C, running every finally block."""
    import os
    import signal
    import time

    from daydream import cli

    cleaned = []

    def run(argv):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:
            cleaned.append(True)
        return 0

    monkeypatch.setattr(cli, "run", run)
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main(["--details", "x"]) == 143 and cleaned == [True]
    assert "terminated" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before  # the caller's handler is back


def test_sighup_runs_the_cleanups_and_exits_129(monkeypatch, capsys):
    """SIGHUP (the terminal closed under a long run) killed the process outright (exit 129, no
    cleanups: an output's temporary or an nsys export's private copy left behind). It now unwinds
    like SIGTERM; a SIGHUP that nohup ignores stays ignored."""
    import os
    import signal
    import time

    from daydream import cli

    cleaned = []

    def run(argv):
        try:
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(5)
        finally:
            cleaned.append(True)
        return 0

    monkeypatch.setattr(cli, "run", run)
    before = signal.getsignal(signal.SIGHUP)
    assert cli.main(["--details", "x"]) == 129 and cleaned == [True]
    assert "hung up" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGHUP) is before
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # under nohup: left ignored, the run goes on
    try:
        monkeypatch.setattr(cli, "run", lambda argv: (os.kill(os.getpid(), signal.SIGHUP), 0)[1])
        assert cli.main(["--details", "x"]) == 0
    finally:
        signal.signal(signal.SIGHUP, before)


def test_every_error_survives_a_process_boundary():
    """--workers N read ranks in a process pool; a rank's TraceFormatError could not be unpickled in
    the parent (its __init__ takes three parts), so any unreadable rank became 'internal error
    (BrokenProcessPool)', exit 1, instead of the one-line error and exit 2."""
    import pickle

    from daydream.errors import DaydreamError, NotApplicable, TraceFormatError, UnreliableReplay, UsageError

    for e in (TraceFormatError("a.json", "traceEvents[3]", "bad"), TraceFormatError("b", "", "empty"), UsageError("u"),
              NotApplicable("n"), UnreliableReplay("r"), DaydreamError("d")):
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is type(e) and str(back) == str(e)


def test_skip_reasons_are_bounded(tmp_path, capsys):
    """50,000 events of made-up categories gave a 50,100-line report (one line per category): a
    bucket keeps MAX_REASONS keys and counts the rest together (the balance holds), and the text
    shows the MAX_COUNTED_LINES most frequent reasons and one line for the others."""
    import gzip
    import json

    from daydream.cli import main
    from daydream.events.table import MAX_REASONS, OTHER_REASONS, Accounting
    from daydream.render.text import MAX_COUNTED_LINES

    a = Accounting()
    for i in range(MAX_REASONS + 50):
        a.add("read", f"cat{i}")
        a.add("skipped", f"unknown category cat{i}")
    assert len(a.skipped) == MAX_REASONS + 1 and a.skipped[OTHER_REASONS] == 50 and a.balanced
    d = json.loads(gzip.open(Path(__file__).resolve().parents[1] / "fixtures" / "train_step.json.gz").read())
    d["traceEvents"] += [{"ph": "X", "cat": f"made_up_{i}", "name": "x", "pid": 1, "tid": 1, "ts": 1, "dur": 1} for i in range(1000)]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(d))
    assert main(["--details", str(p)]) == 0
    out = capsys.readouterr().out
    skipped = [ln for ln in out.splitlines() if ln.startswith("    skipped")]
    assert len(skipped) == MAX_COUNTED_LINES + 1 and "other reasons (all in the --json report)" in skipped[-1]


def test_nsys_names_that_are_not_utf8_are_counted(tmp_path):
    """A kernel name with bytes that are not UTF-8 is read as sqlite3 reads it (U+FFFD) and counted
    (it was replaced silently; try-out finding)."""
    from daydream.formats import load_trace

    con = sqlite3.connect(tmp_path / "t.sqlite")
    con.executescript(SCHEMA)
    con.execute("UPDATE StringIds SET value = CAST(X'6b65ff726e' AS TEXT) WHERE id = 1")
    _add_kernels(con, 1, 3)
    con.commit()
    con.close()
    t = load_trace(str(tmp_path / "t.sqlite"))
    assert t.accounting.notes["names with bytes that are not UTF-8 (replaced by U+FFFD)"] == 1
    assert "ke\ufffdrn" in t.names
