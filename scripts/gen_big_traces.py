"""Build large benchmark traces from the real ones in ``../shared/traces``.

    python scripts/gen_big_traces.py [--out /tmp/daydream-bench] [--sizes 1m,4m,16m]
                                     [--formats json,json.gz,sqlite] [--kineto SRC] [--nsys SRC]

A source trace is repeated back to back until it holds about the requested number of events:
copy ``r`` has every timestamp shifted by ``r`` windows (the source's span, rounded up to a whole
microsecond, plus 1 ms), and every id that must stay unique offset by ``r`` times the id range of
the source:

* Kineto JSON (default ``tracelens/h100_google_owlv2-...json.gz``, 132 k events): ``ts``;
  ``args.correlation``, the ``id`` of flow events and ``args.wait_on_cuda_event_record_corr_id``
  (one offset, since ``ac2g`` flows carry the correlation id); ``External id`` / ``external id``;
  ``Python id`` / ``Python parent id``; ``Ev Idx``; ``ProfilerStep#N`` is renumbered. Metadata
  events (``ph: M``) are written once. Written as plain JSON and as gzip (level ``--gzip-level``)
  in the same pass. Events are indented like the source (``--compact`` writes one line each).
* nsys SQLite (default ``nsys_ai/mfu_2gpu_before.sqlite``): every table with a ``start`` column
  is repeated with ``start``/``end``/``timestamp`` shifted and ``correlationId``/``eventSyncId``
  offset (0 and NULL stay missing), by ``INSERT ... SELECT`` from the attached source, so SQLite
  does the copying; the other tables (StringIds, TARGET_INFO_*, ENUM_*, metadata) are copied once.

``--job-ranks N`` also writes a multi-rank job: ``DIR/job_N/rank{i}.pt.trace.json.gz`` for
i < N, rank i a copy of the source job's rank ``i mod n`` (``--job`` folder, default the 8 DLRM
ranks) with ``distributedInfo`` rank i and world size N; the copies keep their times (one shared
clock) and their collectives, so the set is one job to ``daydream-analyze DIR/job_N``.

"Events" are Kineto ``traceEvents`` entries, or rows of the nsys event tables (RUNTIME, KERNEL,
MEMCPY, MEMSET, SYNCHRONIZATION, CUDA_EVENT, NVTX_EVENTS). The number of copies is the requested
size divided by the source's events, rounded (at least 1), so sizes are approximate; the manifest
``DIR/manifest.json`` records the exact counts.

Output is streamed: one copy of the source is formatted at a time (one ``%``-format of a template
built from the source, a single C call per copy), so memory stays at a few times the source size
whatever the output size. Files are written to ``--out`` (never inside this repository); an
existing file of the same size and source is kept unless ``--force``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sqlite3
import sys
import time
import urllib.parse
import zlib
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
DEFAULT_KINETO = TRACES / "tracelens" / "h100_google_owlv2-large-patch14-ensemble__1016001.json.gz"
DEFAULT_NSYS = TRACES / "nsys_ai" / "mfu_2gpu_before.sqlite"
DEFAULT_OUT = Path("/tmp/daydream-bench")
NSYS_EVENT_TABLES = (
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
    "NVTX_EVENTS",
)
GAP_NS = 1_000_000  # between two copies
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def parse_size(s: str) -> int:
    s = s.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def size_label(n: int) -> str:
    return f"{n // 1_000_000}m" if n % 1_000_000 == 0 else (f"{n // 1000}k" if n % 1000 == 0 else str(n))


# ---------------------------------------------------------------------------------------------
# Kineto JSON
# ---------------------------------------------------------------------------------------------
# slot families: (name, how the offset of a copy is computed)
_TS, _CORR, _EXT, _PY, _EVIDX, _STEPNO = range(6)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class KinetoTemplate:
    """One copy of the source as a %-format string plus the integer slots it takes."""

    def __init__(self, src: Path, indent: bool = True) -> None:
        raw = gzip.open(src).read() if src.read_bytes()[:2] == b"\x1f\x8b" else src.read_bytes()
        doc = orjson.loads(raw)
        if isinstance(doc, list):
            doc = {"traceEvents": doc}
        events = doc["traceEvents"]
        keys = list(doc)
        k = keys.index("traceEvents")
        self.head = {kk: doc[kk] for kk in keys[:k]}
        self.tail = {kk: doc[kk] for kk in keys[k + 1 :]}
        self.source = str(src)

        # time span of the source and whether its ts are integers (old traces) or decimals
        ts_ns = []
        end_ns = []
        int_ts = all(_is_int(e.get("ts")) for e in events if "ts" in e)
        for e in events:
            ts = e.get("ts")
            if not isinstance(ts, (int, float)) or isinstance(ts, bool):
                continue
            t = int(ts) * 1000 if _is_int(ts) else int(round(ts * 1000))
            d = e.get("dur")
            dd = (int(d) * 1000 if _is_int(d) else int(round(d * 1000))) if isinstance(d, (int, float)) and not isinstance(d, bool) else 0
            ts_ns.append(t)
            end_ns.append(t + max(dd, 0))
        t_min, t_max = min(ts_ns), max(end_ns)
        if t_min < 0:
            raise SystemExit(f"{src}: negative timestamps are not supported by this generator")
        self.period_us = -(-(t_max - t_min + GAP_NS) // 1000)  # whole microseconds

        def mx(vals) -> int:
            vals = [v for v in vals if _is_int(v) and v >= 0]
            return max(vals) if vals else 0

        args = [e.get("args") if isinstance(e.get("args"), dict) else {} for e in events]
        self.off = [0] * 6
        self.off[_CORR] = max(
            mx(a.get("correlation") for a in args),
            mx(e.get("id") for e in events if e.get("ph") in ("s", "t", "f")),
            mx(a.get("wait_on_cuda_event_record_corr_id") for a in args),
        ) + 1
        self.off[_EXT] = max(mx(a.get("External id") for a in args), mx(a.get("external id") for a in args)) + 1
        self.off[_PY] = max(mx(a.get("Python id") for a in args), mx(a.get("Python parent id") for a in args)) + 1
        self.off[_EVIDX] = mx(a.get("Ev Idx") for a in args) + 1
        steps = [int(m.group(1)) for e in events if isinstance(e.get("name"), str) and (m := _STEP.match(e["name"]))]
        self.off[_STEPNO] = (max(steps) - min(steps) + 1) if steps else 0

        # build the template: variable fields become sentinels, replaced by %d after dumping
        parts: list[bytes] = []
        slot_kind: list[int] = []
        slot_base: list[int] = []
        self.meta_events: list[bytes] = []
        self.n_events = 0
        # a slot is a whole JSON value ("@@Sk@@", quotes included) or sits inside a string (the step number)
        sentinel = re.compile(rb'"@@S(\d+)@@"|@@S(\d+)@@')
        for e, a in zip(events, args):
            if e.get("ph") == "M":
                self.meta_events.append(orjson.dumps(e))
                continue
            e = dict(e)
            a = dict(a)
            slots: list[tuple[int, int, str]] = []  # (kind, base, suffix text after %d)

            def sub(obj: dict, key: str, kind: int, base: int, suffix: str = "") -> None:
                slots.append((kind, base, suffix))
                obj[key] = f"@@S{len(slots) - 1}@@"

            ts = e.get("ts")
            if _is_int(ts):
                sub(e, "ts", _TS, ts)
            elif isinstance(ts, float):
                t = int(round(ts * 1000))
                sub(e, "ts", _TS, t // 1000, f".{t % 1000:03d}")
            if e.get("ph") in ("s", "t", "f") and _is_int(e.get("id")):
                sub(e, "id", _CORR, e["id"])
            for key, kind in (("correlation", _CORR), ("wait_on_cuda_event_record_corr_id", _CORR),
                              ("External id", _EXT), ("external id", _EXT), ("Python id", _PY),
                              ("Python parent id", _PY), ("Ev Idx", _EVIDX)):
                v = a.get(key)
                if _is_int(v) and v >= 0:
                    sub(a, key, kind, v)
            if a:
                e["args"] = a
            name = e.get("name")
            m = _STEP.match(name) if isinstance(name, str) else None
            if m:
                slots.append((_STEPNO, int(m.group(1)), ""))
                e["name"] = f"ProfilerStep#@@S{len(slots) - 1}@@"
            text = orjson.dumps(e, option=orjson.OPT_INDENT_2 if indent else 0).replace(b"%", b"%%")
            order: list[int] = []

            def rep(mm: re.Match) -> bytes:
                i = int(mm.group(1) or mm.group(2))
                order.append(i)
                return b"%d" + slots[i][2].encode()

            text = sentinel.sub(rep, text)
            for i in order:
                slot_kind.append(slots[i][0])
                slot_base.append(slots[i][1])
            parts.append(text)
            self.n_events += 1
        self.fmt = b",\n".join(parts).decode()
        self.kind = np.asarray(slot_kind, np.int64)
        self.base = np.asarray(slot_base, np.int64)
        self.int_ts = int_ts

    def offsets(self, r: int) -> np.ndarray:
        per = np.array([self.period_us, *self.off[1:]], np.int64) * r
        return per[self.kind]

    def copy_text(self, r: int) -> str:
        return self.fmt % tuple((self.base + self.offsets(r)).tolist())


def _check_template(t: KinetoTemplate) -> None:
    """Sanity check: formatting copy 0 must reproduce valid JSON events."""
    doc = orjson.loads("[" + t.copy_text(0) + "]")
    assert len(doc) == t.n_events


def write_kineto(t: KinetoTemplate, copies: int, plain: Path | None, gz: Path | None, level: int) -> dict:
    head = orjson.dumps(t.head)[:-1] if t.head else b"{"
    tail = orjson.dumps(t.tail)[1:] if t.tail else b"}"
    pre = head + (b", " if t.head else b"") + b'"traceEvents": [\n'
    post = b"\n]" + (b", " + tail if t.tail else b"}")
    fp = open(plain, "wb") if plain else None
    zc = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS) if gz else None
    fz = open(gz, "wb") if gz else None

    written = 0

    def out(b: bytes) -> None:
        nonlocal written
        written += len(b)
        if fp:
            fp.write(b)
        if fz:
            fz.write(zc.compress(b))

    out(pre)
    first = True
    for ev in t.meta_events:
        out((b"" if first else b",\n") + ev)
        first = False
    n = len(t.meta_events)
    for r in range(copies):
        out((b"" if first else b",\n") + t.copy_text(r).encode())
        first = False
        n += t.n_events
    out(post)
    if fp:
        fp.close()
    if fz:
        fz.write(zc.flush())
        fz.close()
    return {"events": n, "copies": copies, "source": t.source, "period_us": t.period_us, "uncompressed_bytes": written}


# ---------------------------------------------------------------------------------------------
# nsys SQLite
# ---------------------------------------------------------------------------------------------
def _q(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def nsys_source_facts(src: Path) -> dict:
    con = sqlite3.connect("file:" + urllib.parse.quote(str(src.resolve())) + "?mode=ro", uri=True)
    tables = {n: s for n, s in con.execute("SELECT name, sql FROM sqlite_master WHERE type='table'")}
    cols = {t: [r[1] for r in con.execute(f"PRAGMA table_info({_q(t)})")] for t in tables}
    n_events = sum(con.execute(f"SELECT COUNT(*) FROM {_q(t)}").fetchone()[0] for t in NSYS_EVENT_TABLES if t in tables)
    lo, hi, corr = None, None, 0
    for t, cs in cols.items():
        if "start" in cs:
            a, b = con.execute(f"SELECT MIN(start), MAX(MAX(start, COALESCE(\"end\", start))) FROM {_q(t)}").fetchone()
            if a is not None:
                lo = a if lo is None else min(lo, a)
                hi = b if hi is None else max(hi, b)
        for c in ("correlationId", "eventSyncId"):
            if c in cs:
                v = con.execute(f"SELECT MAX({_q(c)}) FROM {_q(t)} WHERE {_q(c)} != 4294967295").fetchone()[0]
                corr = max(corr, v or 0)
    con.close()
    return {"tables": tables, "cols": cols, "n_events": n_events, "period": (hi - lo) + GAP_NS, "corr_off": corr + 1}


def write_nsys(src: Path, facts: dict, copies: int, out: Path) -> dict:
    if out.exists():
        out.unlink()
    con = sqlite3.connect(str(out))
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    con.execute("ATTACH DATABASE ? AS src", ("file:" + urllib.parse.quote(str(src.resolve())) + "?mode=ro",))
    period, coff = facts["period"], facts["corr_off"]
    for t, sql in facts["tables"].items():
        if t.startswith("sqlite_"):
            continue
        con.execute(sql)
        cs = facts["cols"][t]
        if "start" not in cs:
            con.execute(f"INSERT INTO main.{_q(t)} SELECT * FROM src.{_q(t)}")
            continue
        for r in range(copies):
            exprs = []
            for c in cs:
                qc = _q(c)
                if c in ("start", "end", "timestamp"):
                    exprs.append(f"{qc} + {r * period}")
                elif c in ("correlationId", "eventSyncId"):
                    exprs.append(f"CASE WHEN {qc} > 0 AND {qc} != 4294967295 THEN {qc} + {r * coff} ELSE {qc} END")
                else:
                    exprs.append(qc)
            con.execute(f"INSERT INTO main.{_q(t)} ({', '.join(_q(c) for c in cs)}) SELECT {', '.join(exprs)} FROM src.{_q(t)}")
        con.commit()
    con.commit()
    con.execute("DETACH DATABASE src")
    con.close()
    return {"events": facts["n_events"] * copies, "copies": copies, "source": str(src), "period_ns": period}


# ---------------------------------------------------------------------------------------------
def write_job_set(src_dir: Path, ranks: int, out: Path, level: int) -> dict:
    """``ranks`` rank files copied round-robin from the job in ``src_dir`` (module docstring)."""
    srcs = sorted(p for p in src_dir.iterdir() if p.name.endswith((".json", ".json.gz")))
    if not srcs:
        raise SystemExit(f"{src_dir}: no Kineto rank traces")
    docs = [orjson.loads(gzip.decompress(p.read_bytes()) if p.name.endswith(".gz") else p.read_bytes()) for p in srcs]
    out.mkdir(parents=True, exist_ok=True)
    total = 0
    for i in range(ranks):
        doc = docs[i % len(docs)]
        doc["distributedInfo"] = dict(doc.get("distributedInfo") or {}, rank=i, world_size=ranks)
        data = gzip.compress(orjson.dumps(doc), compresslevel=level, mtime=0)
        (out / f"rank{i}.pt.trace.json.gz").write_bytes(data)
        total += len(data)
    return {"ranks": ranks, "source": str(src_dir), "bytes": total}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="output directory (default /tmp/daydream-bench)")
    ap.add_argument("--sizes", default="1m,4m,16m", help="event counts, e.g. 1m,4m,16m")
    ap.add_argument("--formats", default="json,json.gz,sqlite", help="any of json, json.gz, sqlite")
    ap.add_argument("--kineto", default=str(DEFAULT_KINETO), help="source Kineto trace")
    ap.add_argument("--nsys", default=str(DEFAULT_NSYS), help="source nsys SQLite export")
    ap.add_argument("--gzip-level", type=int, default=1, help="gzip level of the .json.gz files (default 1: fast)")
    ap.add_argument("--compact", action="store_true", help="write events without indentation (default: indented, like the source)")
    ap.add_argument("--force", action="store_true", help="rewrite files that already exist")
    ap.add_argument("--job-ranks", type=int, default=0, help="also write a job of this many ranks (DIR/job_N), copied from --job")
    ap.add_argument("--job", default=str(ROOT.parent / "shared" / "traces" / "param_dlrm"), help="source job folder (one Kineto trace per rank)")
    args = ap.parse_args(argv)

    out = Path(args.out).resolve()
    if out == ROOT or ROOT in out.parents:
        raise SystemExit(f"refusing to write into the repository ({out}); pick a directory outside {ROOT}")
    out.mkdir(parents=True, exist_ok=True)
    formats = {f.strip() for f in args.formats.split(",") if f.strip()}
    sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    man_path = out / "manifest.json"
    manifest = json.loads(man_path.read_text()) if man_path.exists() else {}

    def fresh(p: Path, src: str, copies: int, **same) -> bool:
        m = manifest.get(p.name)
        return (not args.force and p.exists() and m is not None and m.get("source") == src
                and m.get("copies") == copies and m.get("bytes") == p.stat().st_size
                and all(m.get(k) == v for k, v in same.items())
                and (not p.name.endswith(".gz") or "uncompressed_bytes" in m))

    if args.job_ranks > 0:
        t0 = time.perf_counter()
        info = write_job_set(Path(args.job), args.job_ranks, out / f"job_{args.job_ranks}", args.gzip_level)
        print(f"job of {args.job_ranks} ranks -> {out / f'job_{args.job_ranks}'}: {info['bytes']:,} B ({time.perf_counter() - t0:.1f} s)",
              file=sys.stderr)
    if formats & {"json", "json.gz"}:
        t0 = time.perf_counter()
        tpl = KinetoTemplate(Path(args.kineto), indent=not args.compact)
        _check_template(tpl)
        print(f"kineto source {args.kineto}: {tpl.n_events + len(tpl.meta_events)} events, window {tpl.period_us} us "
              f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
        for n in sizes:
            copies = max(1, round(n / (tpl.n_events + len(tpl.meta_events))))
            lab = size_label(n)
            plain = out / f"kineto_{lab}.json" if "json" in formats else None
            gz = out / f"kineto_{lab}.json.gz" if "json.gz" in formats else None
            todo = [p for p in (plain, gz) if p is not None and not fresh(p, tpl.source, copies, indent=not args.compact)]
            if not todo:
                print(f"  {lab}: up to date", file=sys.stderr)
                continue
            t0 = time.perf_counter()
            info = write_kineto(tpl, copies, plain if plain in todo else None, gz if gz in todo else None, args.gzip_level)
            for p in todo:
                manifest[p.name] = dict(info, format="kineto", indent=not args.compact, bytes=p.stat().st_size)
            man_path.write_text(json.dumps(manifest, indent=1))
            print(f"  {lab}: {info['events']:,} events, {copies} copies -> {', '.join(p.name for p in todo)} "
                  f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    if "sqlite" in formats:
        src = Path(args.nsys)
        facts = nsys_source_facts(src)
        print(f"nsys source {src}: {facts['n_events']} event rows, window {facts['period']} ns", file=sys.stderr)
        for n in sizes:
            copies = max(1, round(n / facts["n_events"]))
            p = out / f"nsys_{size_label(n)}.sqlite"
            if fresh(p, str(src), copies):
                print(f"  {size_label(n)}: up to date", file=sys.stderr)
                continue
            t0 = time.perf_counter()
            info = write_nsys(src, facts, copies, p)
            manifest[p.name] = dict(info, format="nsys", bytes=p.stat().st_size)
            man_path.write_text(json.dumps(manifest, indent=1))
            print(f"  {size_label(n)}: {info['events']:,} event rows, {copies} copies -> {p.name} ({time.perf_counter() - t0:.1f} s)",
                  file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
