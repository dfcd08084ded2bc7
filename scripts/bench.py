"""Speed and memory of daydream on big traces, side by side with lower bounds and a peer; writes docs/performance.md.

    python scripts/bench.py [--sizes 1m,4m] [--load-only 16m] [--pipeline-big] [--out docs/performance.md]
                            [--dir /tmp/daydream-bench] [--repeat 3] [--budget-s 570]
                            [--no-hta] [--compare-src DIR] [--keep-big]

Inputs come from ``scripts/gen_big_traces.py`` (made if missing, in ``--dir``, never in the repo):
the real traces of ``../shared/traces`` repeated to about 1 M, 4 M, 16 M events, as Kineto JSON
(plain and gzip) and as an nsys SQLite export.

Every measurement runs in a fresh subprocess, so each has its own peak RSS (``ru_maxrss`` of that
child, from ``os.wait4``) and nothing is cached between them; timings are the best of ``--repeat``
runs (wall clock; the CPU time of that run is shown too, as the machine is shared and wall time is
noisy). Measured per input:

* load: ``load_trace`` (parse into the EventTable), events/s, peak RSS;
* the bare lower bound of the format, same file, same machine: Kineto JSON read (+ gunzip) and
  decoded by msgspec into minimal typed structs with the fields the adapter projects; nsys: a
  bare ``SELECT`` of the needed columns of each event table (and StringIds), rows fetched;
* a peer's loader: Holistic Trace Analysis' ``parse_trace_dataframe`` (installed by this script
  into its own virtualenv ``DIR/hta-venv``; sizes up to ``--hta-max``);
* graph build, replay (simulate), report, and a second ``--opt scale-kernels`` on the built graph
  (apply + replay + prediction), measured on the table reloaded from the saved-table cache;
* the whole ``daydream-analyze FILE`` command;
* the saved-table cache: ``--save-table`` (EventTable.save) and reading the ``.npz`` back as a
  trace, vs parsing.

``--load-only`` sizes (default 16m) are generated as .json.gz and .sqlite only, loaded once
(time and peak RSS), and deleted afterwards unless ``--keep-big``. A time budget (``--budget-s``)
skips what would not fit and says so in the report. ``--compare-src DIR`` (a checkout of an older
daydream) adds a before/after table on the smallest size.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT / "scripts" / "gen_big_traces.py"
TRACES = ROOT.parent / "shared" / "traces"
DEFAULT_DIR = Path("/tmp/daydream-bench")
OPT_SPEC = "scale-kernels:factor=0.5"
#: the first --load-only size, shown as a column of the growth tables
LOAD_ONLY_LABEL: list[str] = []

# ---------------------------------------------------------------------------------------------
# child side: one measurement, one JSON line on stdout
# ---------------------------------------------------------------------------------------------
_T0 = time.perf_counter()


def _hwm_mb() -> float:
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return -1.0


def _timed(fn):
    t, c = time.perf_counter(), time.process_time()
    r = fn()
    return r, time.perf_counter() - t, time.process_time() - c


def child_load(path: str) -> dict:
    import gc

    from daydream.formats import _adapters, load_trace

    _adapters()  # import every adapter first: the time below is reading the file only
    gc.collect()
    base = _hwm_mb()
    tb, wall, cpu = _timed(lambda: load_trace(path))
    return {"wall": wall, "cpu": cpu, "rows": len(tb), "base_mb": base, "hwm_mb": _hwm_mb()}


import msgspec  # noqa: E402  (the bare bound's structs must be module-level for msgspec to resolve them)
from typing import Optional, Union  # noqa: E402

_Num = Union[int, float, str, None]


class _BareArgs(msgspec.Struct, frozen=True, gc=False):
    device: _Num = None
    stream: _Num = None
    correlation: _Num = None
    external_id: _Num = msgspec.field(default=None, name="External id")
    external_id_legacy: _Num = msgspec.field(default=None, name="external id")
    bytes: _Num = None
    cuda_sync_kind: _Num = None
    wait_on_stream: _Num = None
    wait_on_cuda_event_record_corr_id: _Num = None


class _BareEvent(msgspec.Struct, gc=False):
    ph: Optional[str] = None
    cat: Optional[str] = None
    name: Optional[str] = None
    pid: _Num = None
    tid: _Num = None
    ts: msgspec.Raw = msgspec.Raw(b"")
    dur: msgspec.Raw = msgspec.Raw(b"")
    args: Optional[_BareArgs] = None


class _BareDoc(msgspec.Struct, gc=False):
    traceEvents: list[_BareEvent] = []
    baseTimeNanoseconds: msgspec.Raw = msgspec.Raw(b"")
    deviceProperties: msgspec.Raw = msgspec.Raw(b"")


def child_bare_json(path: str) -> dict:
    """Read (+ gunzip) and decode into minimal structs with the fields the Kineto adapter projects.
    gzip is inflated by the library the loader uses: ISA-L (``isal.igzip``) when installed, as
    ``daydream.formats.kineto.stream`` does, else the stdlib's zlib (``gunzip`` says which)."""
    import gc
    import gzip

    try:
        from isal import igzip as gz
        lib = "ISA-L"
    except ImportError:
        gz, lib = gzip, "zlib"
    gc.disable()  # the best case for the bound (daydream's loader runs with the GC paused too)

    def run():
        with open(path, "rb") as f:
            data = f.read()
        if data[:2] == b"\x1f\x8b":
            data = gz.decompress(data)
        return msgspec.json.decode(data, type=_BareDoc)

    doc, wall, cpu = _timed(run)
    return {"wall": wall, "cpu": cpu, "rows": len(doc.traceEvents), "hwm_mb": _hwm_mb(), "gunzip": lib}


#: the columns the nsys adapter reads, per table (a bare scan: no COALESCE, no NULL flags, no joins)
_SQL_NEEDED = {
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "globalTid", "correlationId", "nameId"),
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "globalPid", "deviceId", "streamId", "correlationId", "contextId",
                                   "demangledName", "shortName"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "globalPid", "deviceId", "streamId", "correlationId", "contextId",
                                   "bytes", "copyKind", "srcKind", "dstKind"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end", "globalPid", "deviceId", "streamId", "correlationId", "contextId", "bytes"),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ("start", "end", "globalPid", "deviceId", "streamId", "correlationId", "contextId",
                                            "syncType", "eventId", "eventSyncId"),
    "CUPTI_ACTIVITY_KIND_CUDA_EVENT": ("globalPid", "contextId", "streamId", "correlationId", "eventId", "eventSyncId"),
    "NVTX_EVENTS": ("start", "end", "globalTid", "eventType", "domainId", "text", "textId", "endGlobalTid"),
    "StringIds": ("id", "value"),
}


def child_bare_sql(path: str) -> dict:
    import sqlite3
    import urllib.parse

    def run():
        con = sqlite3.connect("file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro&immutable=1", uri=True)
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        n = 0
        for t, cols in _SQL_NEEDED.items():
            if t not in tables:
                continue
            have = {r[1] for r in con.execute(f'PRAGMA table_info("{t}")')}
            sel = [c for c in cols if c in have]
            rows = con.execute(f"SELECT {', '.join(chr(34) + c + chr(34) for c in sel)} FROM \"{t}\"").fetchall()
            if t != "StringIds":
                n += len(rows)
            del rows
        con.close()
        return n

    n, wall, cpu = _timed(run)
    return {"wall": wall, "cpu": cpu, "rows": n, "hwm_mb": _hwm_mb()}


def child_pipeline(path: str) -> dict:
    """Mapping, graph build, replay, report, a second --opt on the built graph, and --opt all
    (every registered optimization ranked on the built graph, as ``daydream-analyze --opt all``
    does after its baseline). numba is imported and its cached kernels loaded first, timed on
    their own (``jit``): a CLI run pays that once per process. The garbage collector runs once
    after that, untimed: otherwise a full collection (~20-30 ms with the ~110 k objects the
    imports leave) lands in whichever stage crosses its threshold, which moves with the number
    of kernels loaded."""
    from daydream.analysis import apply_all
    from daydream.errors import NotApplicable
    from daydream.formats import load_trace
    from daydream.graph import build_graph
    from daydream.mapping import map_events
    from daydream.optimizations import load_all, parse_spec
    from daydream.report.make import build_prediction, build_report
    from daydream.simulate import recorded, simulate

    import gc

    table = load_trace(path)
    _, t_jit, c_jit = _timed(_warm_jit)
    gc.collect()  # a full collection owed by the imports and the kernels' loading must not land in a timed stage
    mp, t_map, c_map = _timed(lambda: map_events(table))
    g, t_graph, c_graph = _timed(lambda: build_graph(table, mp))
    tl, t_sim, c_sim = _timed(lambda: simulate(g))
    rep, t_rep, c_rep = _timed(lambda: build_report(g, tl, recorded(g)))
    opt = parse_spec(OPT_SPEC)

    def second_opt():
        g2, applied = apply_all(g, [opt])
        tl2 = simulate(g2)
        return build_prediction(rep, g2, tl2, applied)

    def opt_all():
        n = 0
        for _, o in load_all().items():
            if o.what_if:
                continue
            try:
                g2, applied = apply_all(g, [(o, {k: p.default for k, p in o.params.items()})])
            except NotApplicable:
                continue
            build_prediction(rep, g2, simulate(g2), applied)
            n += 1
        return n

    _, t_opt, c_opt = _timed(second_opt)
    n_all, t_all, c_all = _timed(opt_all)
    return {"tasks": int(g.n), "rows": len(table), "jit": t_jit, "jit_cpu": c_jit, "map": t_map, "map_cpu": c_map,
            "graph": t_graph, "graph_cpu": c_graph, "sim": t_sim, "sim_cpu": c_sim,
            "report": t_rep, "report_cpu": c_rep, "opt": t_opt, "opt_cpu": c_opt, "optall": t_all, "optall_cpu": c_all,
            "all_applied": n_all, "hwm_mb": _hwm_mb()}


def _warm_jit() -> None:
    """Import numba and load the compiled kernels (from numba's cache) when this daydream has them."""
    try:
        from daydream.util import jit
        from daydream.mapping.enclose import _sweep_innermost
        from daydream.events.threads import prev_max_end
        from daydream.simulate import compiled
    except ImportError:  # an older daydream (--compare-src): nothing compiled
        return
    if jit.mode() == "off":
        return
    import numpy as np

    i64, e = np.int64, np.zeros(0, np.int64)
    if compiled.kernel() is not None:  # first calls: numba loads the machine code from its cache
        jit.call(compiled.kernel(), e, e, np.zeros(0, np.int8), e, e, np.zeros(0, bool), np.zeros(1, i64), e, np.zeros(0, bool), e,
                 np.zeros(0, np.int8), np.zeros(1, i64), e, np.zeros(0, bool), e, e, e, 0, 0, 0, -(1 << 62))
    if jit.compiled(_sweep_innermost) is not None:
        jit.call(jit.compiled(_sweep_innermost), e, e, e)
    try:
        prev_max_end(e, np.zeros(0, bool), 0, method="compiled")
    except TypeError:  # a daydream before the compiled scan
        pass
    try:
        from daydream.mapping.contexts import _context_keys
    except ImportError:  # a daydream before the compiled context keys
        pass
    else:
        i32 = np.zeros(0, np.int32)
        _context_keys(np.zeros(0, np.uint8), i32, i32, i32, [], 0, method="compiled")
        try:
            _context_keys(np.zeros(0, np.uint8), i32, i32, i32, [], 0, method="compiled", columns=(e, e, e, e))
        except TypeError:  # a daydream before the context columns
            pass
    try:
        from daydream.mapping.enclose import _fused_kernel
        from daydream.mapping.grouping import _group_kernel
    except ImportError:  # a daydream before the grouped fused sweep
        pass
    else:
        grp, sweep = _group_kernel("fused", 0), _fused_kernel("fused", 0)
        if grp is not None and sweep is not None:
            jit.call(grp, e, e, e, e, e, e)
            jit.call(sweep, e, e, np.zeros(0, np.int32), np.zeros(0, np.int32), e, e, e, 4, 4, e, e, e, 0)
        try:
            from daydream.graph.build.waits import _wait_index_kernel
        except ImportError:  # a daydream before the compiled wait index
            pass
        else:
            if jit.compiled(_wait_index_kernel) is not None:
                jit.call(jit.compiled(_wait_index_kernel), e, e, e, e, e, e, 0)
        try:
            from daydream.graph.queue import _queue_kernel
        except ImportError:  # a daydream before the compiled queue pairs
            pass
        else:
            if jit.compiled(_queue_kernel) is not None:
                jit.call(jit.compiled(_queue_kernel), e, e, np.zeros(0, bool), e, np.int64(1))
        try:
            from daydream.simulate.replay import _prepare_kernel, _prepare_lists_kernel
        except ImportError:  # a daydream before the compiled replay preparation
            pass
        else:
            if jit.compiled(_prepare_kernel) is not None:
                u8, b = np.zeros(0, np.uint8), np.zeros(0, bool)
                jit.call(jit.compiled(_prepare_kernel), 0, u8, e, e, e, u8, b, e, b, e, e, np.uint8(0), np.uint8(1), np.uint8(2),
                         np.uint8(2))
                jit.call(jit.compiled(_prepare_lists_kernel), 0, u8, e, e, u8, b, e, np.zeros(0, np.int8), np.uint8(2))
        try:
            from daydream.mapping import _inherit_kernel
            from daydream.mapping.maps import _pick_kernel
        except ImportError:  # a daydream before the compiled inheriting and node picking
            pass
        else:
            if jit.compiled(_inherit_kernel) is not None:
                i32, u8 = np.zeros(0, np.int32), np.zeros(0, np.uint8)
                jit.call(jit.compiled(_inherit_kernel), e, e, e, u8, i32, i32)
                jit.call(jit.compiled(_pick_kernel), e, u8, i32, i32, u8, i32, u8, i32, i32, u8, i32)
        try:
            from daydream.events.threads import _call_threads_kernel
        except ImportError:  # a daydream before the compiled call threads
            pass
        else:
            try:  # the kernel calls a compiled helper by a module name, bound when it compiles
                from daydream.events.threads import _with_first_pair
                k = _with_first_pair(_call_threads_kernel)
            except ImportError:  # a daydream before the helper's binding
                k = jit.compiled(_call_threads_kernel)
            if k is not None:  # (jit.compiled alone fails typing on an empty numba cache)
                jit.call(k, e, e, e, e, 1)
        try:
            from daydream.events.threads import task_rows
        except ImportError:  # a daydream before the compiled task rows
            pass
        else:
            task_rows(np.zeros(0, np.uint8), method="compiled")
        try:
            from daydream.mapping.grouping import _midpoints_kernel
        except ImportError:  # a daydream before the compiled gap midpoints
            pass
        else:
            if jit.compiled(_midpoints_kernel) is not None:
                jit.call(jit.compiled(_midpoints_kernel), e, e, np.zeros(0, bool), e, e, np.int64(0))
        try:
            from daydream.mapping.thread_search import _finish_kernel
        except ImportError:  # a daydream before the compiled finishing pass
            pass
        else:
            fin = _finish_kernel("fused")
            if fin is not None:
                i32, u8 = np.zeros(0, np.int32), np.zeros(0, np.uint8)
                jit.call(fin, e, 0, e, e, e, e, e, False, e, e, np.zeros(0, bool), False, -2, 0, 0, 0, i32, i32, i32, u8, u8)
                try:
                    from daydream.mapping.thread_search import _thread_queries
                except ImportError:
                    pass
                else:
                    jit.call(_finish_kernel("fused", _thread_queries), e, e, e, e)
    try:
        from daydream.graph._arrays import ffill_by
        from daydream.events.links import _hash_join
    except ImportError:  # a daydream before the compiled thread fill and launch join
        pass
    else:
        ffill_by(e, e, np.zeros(0, bool), method="compiled")
        try:
            from daydream.graph._arrays import lane_chains
        except ImportError:  # a daydream before the compiled lane chains
            pass
        else:
            lane_chains(e, e, 0, method="compiled")
        try:
            from daydream.graph.order import _keeps_constraints
        except ImportError:  # a daydream before the compiled order check
            pass
        else:
            _keeps_constraints(0, e, e, e, np.zeros(0, np.uint8), 0, method="compiled")
        try:
            from daydream.graph.build.assemble import order_edges
        except ImportError:  # a daydream before the compiled order-edge pass
            pass
        else:
            order_edges(e, e, np.zeros(0, bool), np.zeros(0, bool), e, e, (e, e, np.zeros(0, np.uint8), np.zeros(0, np.uint8)),
                        method="compiled")
            from types import SimpleNamespace

            from daydream.events.table import DTYPES
            from daydream.graph.build.assemble import node_columns
            node_columns(SimpleNamespace(**{c: np.zeros(0, d) for c, d in DTYPES.items()}), SimpleNamespace(cpu_rows=e), e, e, -1,
                         {}, method="compiled")
        try:
            from daydream.graph.build.tasks import later_min
        except ImportError:  # a daydream before the compiled suffix minimum
            pass
        else:
            later_min(e, e, 0, method="compiled")
        try:
            from daydream.graph.order import kahn
        except ImportError:  # a daydream before the compiled topological sort of transformed graphs
            pass
        else:
            kahn(0, e, e, e, method="compiled")
        if jit.compiled(_hash_join) is not None:
            jit.call(jit.compiled(_hash_join), e, np.zeros(0, bool), e, e, np.zeros(0, bool))
        try:
            from daydream.graph._arrays import _few_rows_kernel
            from daydream.graph.build.latency import _classify_kernel, _gaps_kernel
            from daydream.graph.build.tasks import (
                _cpu_tasks_kernel,
                _durations_kernel,
                _link_kernel,
                _unlaunched_kernel,
            )
        except ImportError:  # a daydream before the compiled lane numbering and latency passes
            pass
        else:
            if jit.compiled(_few_rows_kernel) is not None:
                jit.call(jit.compiled(_few_rows_kernel), e, e, e, e, 1, e, np.zeros((1, 4), i64))
                jit.call(jit.compiled(_classify_kernel), e, e, e, np.zeros(0, bool), e, e, e, np.zeros(0, np.uint8), e)
                jit.call(jit.compiled(_gaps_kernel), e, e, e, np.zeros(0, bool), e, e, e, i64(0), i64(0), e)
                jit.call(jit.compiled(_durations_kernel), np.zeros(0, np.uint8), e, e, e, i64(0), e, e)
                jit.call(jit.compiled(_unlaunched_kernel), e, e, e, i64(0), e)
                jit.call(jit.compiled(_cpu_tasks_kernel), e, e, e, e, np.zeros(0, bool), e)
                jit.call(jit.compiled(_link_kernel), e, e, e, 0, 0, e)
    try:
        from daydream.simulate import critical_walk
    except ImportError:  # a daydream before the compiled critical-path walk
        return
    if critical_walk.kernel() is not None:
        b = np.zeros(1, bool)
        z = np.zeros(1, i64)
        critical_walk.walk(critical_walk.kernel(), 0, z, z, z, b, b, np.full(1, -1, i64), np.full(1, -1, i64), np.full(1, -1, i64),
                           e, np.zeros(0, bool), np.zeros(0, np.int8), e, 0, -2)
    try:  # a daydream before the compiled binding records and range split
        from daydream.graph.range_timeline import _split_fn
        from daydream.simulate.binding import _bind_kernel
    except ImportError:
        return
    if _split_fn() is not None:
        jit.call(_split_fn(), e, e, e, e, e, e, e, np.zeros(0))
    if jit.compiled(_bind_kernel) is not None:
        one = np.zeros(1, i64)
        jit.call(jit.compiled(_bind_kernel), 0, e, e, e, e, e, np.zeros(0, bool), e, e, one, e, one, e, one, -2)


def child_save(path: str, out: str) -> dict:
    from daydream.formats import load_trace

    table = load_trace(path)
    _, wall, cpu = _timed(lambda: table.save(out))
    return {"wall": wall, "cpu": cpu, "bytes": os.path.getsize(out), "hwm_mb": _hwm_mb()}


def child_profile(path: str, what: str) -> dict:
    import cProfile
    import io
    import pstats

    from daydream.formats import load_trace
    from daydream.graph import build_graph
    from daydream.simulate import simulate

    pr = cProfile.Profile()
    if what == "load":
        pr.enable()
        load_trace(path)
        pr.disable()
    else:
        from daydream.mapping import map_events

        table = load_trace(path)
        _warm_jit()
        pr.enable()
        simulate(build_graph(table, map_events(table)))
        pr.disable()
    s = io.StringIO()
    st = pstats.Stats(pr, stream=s)
    total = st.total_tt
    rows = []
    for (fn, line, func), (cc, nc, tt, ct, callers) in sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:10]:
        where = f"{Path(fn).name}:{line}({func})" if fn != "~" else func
        rows.append((where, nc, tt, ct))
    return {"total": total, "top": rows}


HTA_CHILD = r"""
import json, sys, time, logging
logging.disable(logging.WARNING)
t = time.perf_counter(); c = time.process_time()
from hta.common.trace_parser import parse_trace_dataframe
from hta.configs.parser_config import ParserConfig
t_imp = time.perf_counter() - t
t = time.perf_counter(); c = time.process_time()
meta, df, sym = parse_trace_dataframe(sys.argv[1], ParserConfig())
wall = time.perf_counter() - t; cpu = time.process_time() - c
hwm = -1
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        hwm = int(line.split()[1]) / 1024
print(json.dumps({"wall": wall, "cpu": cpu, "rows": len(df), "hwm_mb": hwm, "import_s": t_imp}))
"""


def child_main(argv: list[str]) -> int:
    mode, path = argv[0], argv[1]
    root = os.environ.get("DAYDREAM_SRC", str(ROOT))
    sys.path.insert(0, root)
    if mode == "load":
        r = child_load(path)
    elif mode == "bare-json":
        r = child_bare_json(path)
    elif mode == "bare-sql":
        r = child_bare_sql(path)
    elif mode == "pipeline":
        r = child_pipeline(path)
    elif mode == "save":
        r = child_save(path, argv[2])
    elif mode == "profile":
        r = child_profile(path, argv[2])
    elif mode == "cli":
        import contextlib
        import io

        from daydream.cli import main

        with contextlib.redirect_stdout(io.StringIO()):
            code = main([path] + argv[2:])
        r = {"wall": time.perf_counter() - _T0, "code": code, "hwm_mb": _hwm_mb()}
    else:
        raise SystemExit(f"unknown child mode {mode}")
    print(json.dumps(r))
    return 0


# ---------------------------------------------------------------------------------------------
# parent side
# ---------------------------------------------------------------------------------------------
class Budget:
    def __init__(self, seconds: float) -> None:
        self.t0 = time.perf_counter()
        self.seconds = seconds

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.t0)


def run_child(cmd: list[str], env: dict | None = None, timeout: float = 600) -> dict:
    """Run one measurement; returns its JSON plus the child's wall, CPU and peak RSS (wait4)."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return {"error": f"timed out after {timeout:.0f} s"}
    # communicate() reaped the child; its rusage is read through wait4 on a wrapper below
    wall = time.perf_counter() - t
    res: dict = {"proc_wall": wall}
    if p.returncode != 0:
        res["error"] = (err.decode(errors="replace").strip().splitlines() or ["failed"])[-1][:300]
        return res
    lines = [ln for ln in out.decode().splitlines() if ln.startswith("{")]
    if lines:
        res.update(json.loads(lines[-1]))
    return res


def run_child_rusage(cmd: list[str], env: dict | None = None, timeout: float = 600, cwd: str | None = None) -> dict:
    """Like run_child, for commands whose output is not JSON: wall, CPU and peak RSS via wait4."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    deadline = t + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            p.kill()
            os.wait4(p.pid, 0)
            return {"error": f"timed out after {timeout:.0f} s"}
        time.sleep(0.02)
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    res = {"wall": time.perf_counter() - t, "cpu": ru.ru_utime + ru.ru_stime, "hwm_mb": ru.ru_maxrss / 1024}
    if p.returncode != 0:
        res["error"] = (err.strip().splitlines() or ["failed"])[-1][:300]
    return res


def best_of(n: int, fn, budget: Budget, key: str = "wall") -> dict:
    """The run with the smallest ``key`` of ``n`` runs (fewer when the budget runs out)."""
    runs = []
    for i in range(n):
        r = fn()
        runs.append(r)
        if "error" in r or budget.left() < 0:
            break
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return runs[-1]
    best = dict(min(ok, key=lambda r: r.get(key, 1e99)))
    for k in {k for r in ok for k, v in r.items() if k.endswith("_cpu") and isinstance(v, float)}:
        best["min_" + k] = min(r.get(k, 1e99) for r in ok)  # each stage's own best (the growth check's)
    best["runs"] = len(runs)
    best["all"] = [round(r.get(key, -1), 3) for r in ok]
    return best


def _best(runs: list[dict], key: str) -> dict:
    ok = [r for r in runs if "error" not in r]
    return dict(min(ok, key=lambda r: r.get(key, 1e99))) if ok else (runs[-1] if runs else {"error": "not run"})


def _with_core(r: dict) -> dict:
    """``r`` with ``core``: mapping + graph build + replay, CPU s (the best-of key of a pipeline run)."""
    if "graph" in r:
        r["core"] = r.get("map_cpu", 0.0) + r["graph_cpu"] + r["sim_cpu"]
    return r


def me(mode: str, *args: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--child", mode, *args]


def parse_size(s: str) -> int:
    s = s.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000}
    return int(float(s[:-1]) * mult[s[-1]]) if s and s[-1] in mult else int(s)


def label(n: int) -> str:
    return f"{n // 1_000_000}m" if n % 1_000_000 == 0 else f"{n // 1000}k"


def ensure_inputs(d: Path, sizes: list[str], formats: str) -> None:
    cmd = [sys.executable, str(GEN), "--out", str(d), "--sizes", ",".join(sizes), "--formats", formats]
    subprocess.run(cmd, check=True)


def ensure_hta(d: Path) -> tuple[str | None, str]:
    """Python of a virtualenv with HolisticTraceAnalysis (made on first use); (None, why) if impossible."""
    venv = d / "hta-venv"
    py = venv / "bin" / "python"
    probe = [str(py), "-c", "import hta.common.trace_parser, importlib.metadata as m; print(m.version('HolisticTraceAnalysis'))"]
    if py.exists():
        r = subprocess.run(probe, capture_output=True, text=True)
        if r.returncode == 0:
            return str(py), r.stdout.strip()
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
        r = subprocess.run([str(py), "-m", "pip", "install", "--quiet", "HolisticTraceAnalysis"], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            return None, "pip install HolisticTraceAnalysis failed: " + (r.stderr.strip().splitlines() or ["?"])[-1][:200]
        r = subprocess.run(probe, capture_output=True, text=True)
        if r.returncode != 0:
            return None, "HolisticTraceAnalysis installed but does not import: " + (r.stderr.strip().splitlines() or ["?"])[-1][:200]
        return str(py), r.stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"could not make the HTA virtualenv ({e})"


def fmt_s(x) -> str:
    if x is None:
        return "–"
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def fmt_mb(x) -> str:
    return "–" if x is None or x < 0 else f"{x:,.0f}"


def rate(n, s) -> str:
    if not s or s <= 0 or not n:
        return "–"
    r = n / s
    return f"{r / 1e6:.2f} M/s" if r >= 1e6 else f"{r / 1e3:.0f} k/s"


# ---------------------------------------------------------------------------------------------
#: real traces measured by --jit-tiers beside the generated sizes (paths under ../shared/traces)
JIT_REAL = ("tracelens/h100_google_owlv2-large-patch14-ensemble__1016001.json.gz", "nsys_ai/mfu_2gpu_before.sqlite",
            "hta/df_index_resolver.json.gz")


def _tier_run(tree: Path, path: Path, env: dict, cache: Path, fresh: bool = False, **extra: str) -> dict:
    """One whole ``python -m daydream.cli PATH`` of source tree ``tree`` in a fresh process: CPU
    (user + sys), wall, whether numba was imported and the event rows the run stated to the
    workload gate (a small wrapper around the CLI's ``main`` writes both to a file at exit).
    ``cache``: numba's cache directory (``fresh``: emptied first)."""

    if fresh and cache.exists():
        shutil.rmtree(cache)
    cache.mkdir(parents=True, exist_ok=True)
    flag = cache.parent / (cache.name + ".imported")
    flag.unlink(missing_ok=True)
    e = dict(env, PYTHONPATH=str(tree), DAYDREAM_SRC=str(tree), NUMBA_CACHE_DIR=str(cache), **extra)
    if "DAYDREAM_JIT" not in extra:
        e.pop("DAYDREAM_JIT", None)
    code = ("import sys, atexit, json\nfrom daydream.util import jit\nrows = [0]\nadd = getattr(jit, 'add_workload', None)\n"
            "def counted(n):\n    rows[0] += int(n)\n    add(n)\n"
            "if add:\n    jit.add_workload = counted\n"
            f"atexit.register(lambda: open({str(flag)!r}, 'w').write(json.dumps(['numba' in sys.modules, rows[0]])))\n"
            "from daydream.cli import main\nsys.exit(main(sys.argv[1:]))")
    r = run_child_rusage([sys.executable, "-c", code, str(path)], e, cwd=str(tree))
    if flag.exists():
        r["numba"], r["rows"] = json.loads(flag.read_text())
    flag.unlink(missing_ok=True)
    return r


def measure_jit_tiers(d: Path, sizes: list[str], env: dict, before: Path | None, log, budget: Budget) -> dict:
    """Whole-command CPU time of each input under the JIT tiers, each run a fresh process:
    ``off`` (``DAYDREAM_JIT=off``), ``compiled`` (warm cache, the workload gate disabled by
    ``DAYDREAM_JIT_BREAK_EVEN=0``: the per-kernel thresholds alone, as before the gate),
    ``auto`` (warm cache, gate on: what a user gets) and, on the first real trace and the
    largest generated one, ``first`` (an empty numba cache: a new machine's first run, gate off
    then on); with ``before``, that tree's ``first`` and ``warm`` (auto) there. Rows from the manifest (generated) or the run's table; the measured break-even is
    the rows where ``compiled`` stops costing more than ``off`` (linear between sizes)."""
    real = [TRACES / p for p in JIT_REAL if (TRACES / p).exists()]
    gen = [d / f"{f}_{s}.{x}" for s in sizes for f, x in (("kineto", "json.gz"), ("nsys", "sqlite"))]
    out: dict = {"inputs": [], "break_even_const": None}
    cache_new, cache_old = d / "numba-cache-tiers-new", d / "numba-cache-tiers-old"
    # warm both caches on the largest input of each format (every kernel compiled), untimed
    for i, warm_on in enumerate(gen[-2:] or real[:1]):
        _tier_run(ROOT, warm_on, env, cache_new, fresh=i == 0, DAYDREAM_JIT_BREAK_EVEN="0")
        if before is not None:
            _tier_run(before, warm_on, env, cache_old, fresh=i == 0)
    for path in real + gen:
        if not path.exists() or budget.left() < 60:
            continue
        log(f"JIT tiers: {path.name}")
        r: dict = {"file": path.name, "real": path in real, "mb": path.stat().st_size / 1e6}
        r["off"] = _tier_run(ROOT, path, env, cache_new, DAYDREAM_JIT="off")
        r["compiled"] = _tier_run(ROOT, path, env, cache_new, DAYDREAM_JIT_BREAK_EVEN="0")
        r["auto"] = _tier_run(ROOT, path, env, cache_new)
        if path == (real or gen)[0] or (gen and path == gen[-1]):  # a first compile costs minutes here: two inputs
            tmp = d / "numba-cache-tiers-first"
            r["first"] = _tier_run(ROOT, path, env, tmp, fresh=True, DAYDREAM_JIT_BREAK_EVEN="0")  # as before the gate
            r["first_auto"] = _tier_run(ROOT, path, env, tmp, fresh=True)
            if before is not None:
                r["before_first"] = _tier_run(before, path, env, tmp, fresh=True)
                r["before_warm"] = _tier_run(before, path, env, cache_old)
        out["inputs"].append(r)
    sys.path.insert(0, str(ROOT))
    from daydream.util import jit as _jit

    out["break_even_const"] = _jit.BREAK_EVEN_ROWS
    return out


def _rows_of(name: str, manifest: dict) -> int | None:
    m = manifest.get(name) or {}
    return m.get("events") or m.get("event_rows")


def measure_input(path: Path, fmt: str, repeat: int, budget: Budget, hta_py: str | None, hta_ok: bool,
                  cache_dir: Path, env: dict, pipeline: bool = True) -> dict:
    """All measurements of one input file (``pipeline``: also graph, replay, report, --opt)."""
    r: dict = {"file": path.name}
    r["load"] = best_of(repeat, lambda: run_child(me("load", str(path)), env), budget, key="cpu")
    if fmt == "kineto":
        r["bare"] = best_of(repeat, lambda: run_child(me("bare-json", str(path)), env), budget, key="cpu")
        if hta_py and hta_ok:
            r["hta"] = best_of(1, lambda: run_child([hta_py, "-c", HTA_CHILD, str(path)], timeout=max(budget.left(), 60)), budget)
    else:
        r["bare"] = best_of(repeat, lambda: run_child(me("bare-sql", str(path)), env), budget, key="cpu")
    npz = cache_dir / (path.name + ".npz")
    r["save"] = run_child(me("save", str(path), str(npz)), env)
    if "error" not in r["save"]:
        r["reload"] = best_of(repeat, lambda: run_child(me("load", str(npz)), env), budget, key="cpu")
        if pipeline:  # cheap (the table comes from the cache): best of 3 at every size
            r["pipeline"] = best_of(max(repeat, 3), lambda: _with_core(run_child(me("pipeline", str(npz)), env)), budget, key="core")
    r["cli"] = best_of(1, lambda: run_child_rusage([sys.executable, "-m", "daydream.cli", str(path)], env), budget)
    if npz.exists():
        npz.unlink()
    return r


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["--child"]:
        return child_main(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1m,4m", help="sizes measured fully (default 1m,4m)")
    ap.add_argument("--load-only", default="", help="sizes only loaded, once (e.g. 16m, with --pipeline-big also every stage "
                    "and the growth check to it; default none: it takes long on a 2-core machine)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "performance.md"))
    ap.add_argument("--dir", default=str(DEFAULT_DIR), help="where inputs are made (default /tmp/daydream-bench)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per timing on the smallest size (best taken); 1 above it")
    ap.add_argument("--budget-s", type=float, default=570, help="stop measuring when this much time has passed")
    ap.add_argument("--no-hta", action="store_true", help="skip Holistic Trace Analysis")
    ap.add_argument("--hta-max", default="1m", help="largest size HTA is run on (it needs about 15x the file size in RAM)")
    ap.add_argument("--compare-src", help="an older daydream source tree (its root): before/after on the smallest size")
    ap.add_argument("--keep-big", action="store_true", help="keep the --load-only inputs")
    ap.add_argument("--pipeline-big", action="store_true",
                    help="also run mapping, graph build, replay, report and --opt once on the --load-only sizes")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--jit-tiers", default="250k,500k,1m,2m",
                    help="generated sizes (Kineto .json.gz and nsys) whose whole command runs under each JIT tier, beside "
                         "the real traces ('' for none; the break-even of the workload gate)")
    ap.add_argument("--jit-only", action="store_true",
                    help="measure the JIT tiers only and rewrite --out with them and DIR/bench-results.json's other numbers")
    ap.add_argument("--compare-only", action="store_true",
                    help="measure the before/after (--compare-src) only and rewrite --out with it and the saved numbers")
    ap.add_argument("--no-growth-check", action="store_true", help="exit 0 even when a stage grows faster than its input")
    ap.add_argument("--render-only", action="store_true", help="rewrite --out from DIR/bench-results.json (no measuring)")
    args = ap.parse_args(argv)
    if args.render_only:
        return _render_saved(args)
    if args.jit_only:
        return _jit_only(args)
    if args.compare_only:
        if not args.compare_src:
            raise SystemExit("--compare-only needs --compare-src")
        return _compare_only(args)

    budget = Budget(args.budget_s)
    d = Path(args.dir).resolve()
    if d == ROOT or ROOT in d.parents:
        raise SystemExit(f"--dir must be outside the repository ({ROOT})")
    d.mkdir(parents=True, exist_ok=True)
    sizes = sorted({parse_size(s) for s in args.sizes.split(",") if s.strip()})
    load_only = sorted({parse_size(s) for s in args.load_only.split(",") if s.strip()} - set(sizes))
    env = dict(os.environ, DAYDREAM_SRC=str(ROOT), PYTHONPATH=str(ROOT))
    log = lambda m: print(f"[{time.perf_counter() - budget.t0:6.1f} s] {m}", file=sys.stderr, flush=True)  # noqa: E731

    log(f"making inputs {', '.join(label(s) for s in sizes)} in {d}")
    ensure_inputs(d, [label(s) for s in sizes], "json,json.gz,sqlite")
    manifest = json.loads((d / "manifest.json").read_text())
    hta_py, hta_version = (None, "skipped (--no-hta)") if args.no_hta else ensure_hta(d)
    if hta_py:
        log(f"HTA {hta_version} in {d / 'hta-venv'}")
    else:
        log(f"HTA: {hta_version}")
    hta_max = parse_size(args.hta_max)

    results: dict = {"sizes": {}, "load_only": {}, "skipped": []}
    for i, n in enumerate(sizes):
        lab = label(n)
        rep = args.repeat if i == 0 else 1
        for fname, fmt in ((f"kineto_{lab}.json", "kineto"), (f"kineto_{lab}.json.gz", "kineto"), (f"nsys_{lab}.sqlite", "nsys")):
            if budget.left() < 30:
                results["skipped"].append(f"{fname}: time budget spent")
                continue
            log(f"measuring {fname} (best of {rep})")
            # the .json and .json.gz of a size make the same table: graph and replay are measured once
            r = measure_input(d / fname, fmt, rep, budget, hta_py, n <= hta_max, d, env, pipeline=not fname.endswith(".json"))
            r["manifest"] = manifest.get(fname, {})
            r["repeat"] = rep
            results["sizes"].setdefault(lab, {})[fname] = r

    # profiles of the hot spots (smallest size)
    profiles = {}
    if not args.no_profile and sizes and budget.left() > 60:
        lab = label(sizes[0])
        for fname, what in ((f"kineto_{lab}.json.gz", "load"), (f"nsys_{lab}.sqlite", "load"), (f"nsys_{lab}.sqlite", "graph")):
            log(f"profiling {what} of {fname}")
            profiles[(fname, what)] = run_child(me("profile", str(d / fname), what), env)

    # load-only sizes (16 M): .json.gz and .sqlite, loaded once, then deleted
    for n in load_only:
        lab = label(n)
        est = None
        if sizes:
            big = results["sizes"].get(label(sizes[-1]), {})
            lk = big.get(f"kineto_{label(sizes[-1])}.json.gz", {}).get("load", {}).get("wall")
            ls = big.get(f"nsys_{label(sizes[-1])}.sqlite", {}).get("load", {}).get("wall")
            if lk and ls:
                est = (lk + ls) * n / sizes[-1] * 1.6 + 60  # loads plus making the files
        if est is not None and budget.left() < est:
            results["skipped"].append(f"{lab} (load only): needs about {est:.0f} s, {budget.left():.0f} s left in the budget")
            log(results["skipped"][-1])
            continue
        log(f"making {lab} inputs (json.gz, sqlite)")
        t = time.perf_counter()
        ensure_inputs(d, [lab], "json.gz,sqlite")
        gen_s = time.perf_counter() - t
        manifest = json.loads((d / "manifest.json").read_text())
        for fname in (f"kineto_{lab}.json.gz", f"nsys_{lab}.sqlite"):
            log(f"loading {fname} once")
            r = {"load": run_child(me("load", str(d / fname)), env, timeout=max(budget.left(), 120)), "manifest": manifest.get(fname, {}),
                 "gen_s": gen_s}
            results["load_only"][fname] = r
            if args.pipeline_big and "error" not in r["load"]:
                # every stage at this size too, once, on the saved table (the growth goals reach it)
                npz = d / (fname + ".npz")
                log(f"mapping, graph build, replay, report and --opt of {fname} once")
                r["save"] = run_child(me("save", str(d / fname), str(npz)), env, timeout=max(budget.left(), 120))
                if "error" not in r["save"]:
                    r["pipeline"] = _with_core(run_child(me("pipeline", str(npz)), env, timeout=max(budget.left(), 300)))
                npz.unlink(missing_ok=True)
            if not args.keep_big:
                (d / fname).unlink(missing_ok=True)
                manifest.pop(fname, None)
                (d / "manifest.json").write_text(json.dumps(manifest, indent=1))

    # before/after
    compare = {}
    if args.compare_src and sizes and budget.left() < 90:
        results["skipped"].append("before/after (--compare-src): time budget spent")
    elif args.compare_src and sizes:
        compare = measure_compare(d, label(sizes[0]), env, args, log)

    tier_sizes = [label(parse_size(x)) for x in args.jit_tiers.split(",") if x.strip()]
    if tier_sizes:
        ensure_inputs(d, tier_sizes, "json.gz,sqlite")
        manifest = json.loads((d / "manifest.json").read_text())
        log(f"JIT tiers on the real traces and {', '.join(tier_sizes)}")
        results["jit_tiers"] = measure_jit_tiers(d, tier_sizes, env, Path(args.compare_src).resolve() if args.compare_src else None,
                                                 log, budget)

    results["elapsed"] = time.perf_counter() - budget.t0
    LOAD_ONLY_LABEL[:] = [label(n) for n in load_only][:1]
    out = Path(args.out)
    out.write_text(render(results, profiles, compare, hta_py is not None, hta_version, args, sizes))
    saved = {"results": results, "compare": compare, "have_hta": hta_py is not None, "hta_version": hta_version,
             "profiles": [[k[0], k[1], v] for k, v in profiles.items()], "load_only_label": LOAD_ONLY_LABEL,
             "args": {k: getattr(args, k) for k in ("sizes", "load_only", "repeat", "hta_max", "compare_src")}, "size_list": sizes}
    (d / "bench-results.json").write_text(json.dumps(saved, indent=1, default=str))
    log(f"wrote {out} ({results['elapsed']:.0f} s)")
    bad = [g for g in _growth_goals(results, sizes) if g[2] is False]
    for g, m, _ in bad:
        log(f"GROWTH CHECK FAILED: {g}: {m}")
    return 1 if bad and not args.no_growth_check else 0


def measure_compare(d: Path, lab: str, env: dict, args, log) -> dict:
    """Before/after on size ``lab``: the --compare-src tree's and this tree's load and pipeline,
    in turn (so both see the same load on the machine), best of max(--repeat, 3)."""
    compare = {}
    old_env = dict(os.environ, DAYDREAM_SRC=str(Path(args.compare_src).resolve()), PYTHONPATH=str(Path(args.compare_src).resolve()))
    for fname in (f"kineto_{lab}.json.gz", f"nsys_{lab}.sqlite"):
        log(f"before/after on {fname} ({args.compare_src})")
        npz = d / (fname + ".cmp.npz")
        run_child(me("save", str(d / fname), str(npz)), env)
        # old and new measured in turn, so that both see the same load on the machine
        runs: dict[str, list] = {"old_load": [], "new_load": [], "old_pipe": [], "new_pipe": []}
        for _ in range(max(args.repeat, 3)):
            runs["old_load"].append(run_child(me("load", str(d / fname)), old_env))
            runs["new_load"].append(run_child(me("load", str(d / fname)), env))
            runs["old_pipe"].append(run_child(me("pipeline", str(npz)), old_env))
            runs["new_pipe"].append(run_child(me("pipeline", str(npz)), env))
        compare[fname] = {k: _best([_with_core(x) for x in v], "core" if "pipe" in k else "cpu") for k, v in runs.items()}
        npz.unlink(missing_ok=True)

    return compare


def _compare_only(args) -> int:
    """``--compare-only``: the before/after table measured again into the saved results, the
    report rewritten (the other numbers kept from the saved run)."""
    d = Path(args.dir).resolve()
    path = d / "bench-results.json"
    saved = json.loads(path.read_text())
    t0 = time.perf_counter()
    log = lambda m: print(f"[{time.perf_counter() - t0:6.1f} s] {m}", file=sys.stderr, flush=True)  # noqa: E731
    env = dict(os.environ, DAYDREAM_SRC=str(ROOT), PYTHONPATH=str(ROOT))
    saved["compare"] = measure_compare(d, label(saved["size_list"][0]), env, args, log)
    path.write_text(json.dumps(saved, indent=1, default=str))
    return _render_saved(args)


def _jit_only(args) -> int:
    """``--jit-only``: the JIT tiers measured again (e.g. after moving the gate's constant), the
    other numbers kept from the saved run; the report notes both runs' dates."""
    d = Path(args.dir).resolve()
    path = d / "bench-results.json"
    saved = json.loads(path.read_text())
    budget = Budget(args.budget_s)
    log = lambda m: print(f"[{time.perf_counter() - budget.t0:6.1f} s] {m}", file=sys.stderr, flush=True)  # noqa: E731
    tier_sizes = [label(parse_size(x)) for x in args.jit_tiers.split(",") if x.strip()]
    ensure_inputs(d, tier_sizes, "json.gz,sqlite")
    env = dict(os.environ, DAYDREAM_SRC=str(ROOT), PYTHONPATH=str(ROOT))
    before = Path(args.compare_src or saved["args"].get("compare_src") or "").resolve() if (args.compare_src or saved["args"].get("compare_src")) else None
    saved["results"]["jit_tiers"] = measure_jit_tiers(d, tier_sizes, env, before, log, budget)
    saved["results"]["jit_tiers"]["measured_on"] = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    path.write_text(json.dumps(saved, indent=1, default=str))
    return _render_saved(args)


def _render_saved(args) -> int:
    """``--render-only``: the report again from the saved raw numbers (e.g. after editing its notes)."""
    saved = json.loads((Path(args.dir) / "bench-results.json").read_text())
    a = argparse.Namespace(**saved["args"])
    LOAD_ONLY_LABEL[:] = saved.get("load_only_label", [])
    profiles = {(f, w): v for f, w, v in saved.get("profiles", [])}
    Path(args.out).write_text(render(saved["results"], profiles, saved["compare"], saved["have_hta"], saved["hta_version"], a,
                                     saved["size_list"]))
    return 0


# ---------------------------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------------------------
def _v(r: dict, *keys, default=None):
    for k in keys:
        if not isinstance(r, dict) or k not in r:
            return default
        r = r[k]
    return r


def _ratio(a, b) -> str:
    return f"{a / b:.2f}" if a and b else "–"


def _load_goals(lab: str, kin, nsy, S: dict) -> list:
    """Goals of the loaders at one size: (goal, measured, met); wall ratios, CPU ratios beside."""
    goals = []
    for suf, pct_goal in ((".json.gz", 80), (".json", 70)):
        lw, bw, lc, bc = kin(lab, suf, "load", "wall"), kin(lab, suf, "bare", "wall"), kin(lab, suf, "load", "cpu"), kin(lab, suf, "bare", "cpu")
        if lc and bc:
            pct, pctc = bw / lw * 100, bc / lc * 100
            goals.append((f"Kineto load >= {pct_goal} % of the bare msgspec decode's speed ({lab}{suf})",
                          f"CPU {pctc:.0f} % (wall {pct:.0f} %)", pctc >= pct_goal))
        hw, hc = kin(lab, suf, "hta", "wall"), kin(lab, suf, "hta", "cpu")
        if lc and hc:
            goals.append((f"Kineto load >= 5x faster than HTA's loader ({lab}{suf})", f"CPU {hc / lc:.1f}x (wall {_ratio(hw, lw)}x)", hc / lc >= 5))
        size, hwm = kin(lab, suf, "manifest", "uncompressed_bytes") or kin(lab, suf, "manifest", "bytes"), kin(lab, suf, "load", "hwm_mb")
        if size and hwm:
            goals.append((f"Kineto peak RSS of the load <= uncompressed file size ({lab}{suf})", f"{hwm:,.0f} MB vs {size / 2**20:,.0f} MB",
                          hwm * 2**20 <= size))
    lw, bw, lc, bc = nsy(lab, "load", "wall"), nsy(lab, "bare", "wall"), nsy(lab, "load", "cpu"), nsy(lab, "bare", "cpu")
    if lc and bc:
        goals.append((f"nsys load <= 1.5x the bare SQL scan's time ({lab})", f"CPU {lc / bc:.2f}x (wall {_ratio(lw, bw)}x)", lc / bc <= 1.5))
    size, hwm, rows = nsy(lab, "manifest", "bytes"), nsy(lab, "load", "hwm_mb"), nsy(lab, "load", "rows") or 0
    if size and hwm:
        ok = hwm <= size / 2**20 + 100
        goals.append((f"nsys peak RSS <= file size + 100 MB, at 4 M rows and above ({lab}, {rows:,} rows)",
                      f"{hwm:,.0f} MB vs {size / 2**20:,.0f} MB" + ("" if rows >= 4e6 else " (below 4 M rows: shown only)"),
                      ok if rows >= 3.9e6 else None))
    return goals


def _pipeline_goals(lab: str, S: dict) -> list:
    """Goals of mapping, graph build, replay and --opt for the inputs ``S[lab]`` (file name -> results)."""
    goals = []
    for fname, r in S.get(lab, {}).items():
        p = r.get("pipeline", {})
        if not p.get("tasks") or p.get("graph") is None or "error" in p:
            continue
        t, n = p["tasks"], p["tasks"]
        w = p.get("map", 0) + p["graph"] + p["sim"]
        c = p.get("map_cpu", 0) + p["graph_cpu"] + p["sim_cpu"]
        jw = p.get("jit", 0)
        jc = p.get("jit_cpu", 0)
        goals.append((f"mapping + graph build + replay >= 2 M tasks/s ({fname}, {t:,} tasks)",
                      f"CPU {rate(n, c)} (wall {rate(n, w)}; counting the one-off numba import and kernel load: CPU {rate(n, c + jc)}, "
                      f"wall {rate(n, w + jw)})", n / c >= 2e6))
        per_m, per_mc = p["opt"] / n * 1e6, p["opt_cpu"] / n * 1e6
        goals.append((f"a second prediction (`--opt {OPT_SPEC}`) <= 0.5 s per M tasks ({fname})",
                      f"CPU {per_mc:.2f} s/M tasks (wall {per_m:.2f})", per_mc <= 0.5))
        if p.get("optall") is not None:
            goal = "nsys" in fname and lab == "1m"
            goals.append((f"`--opt all` on the built graph{' <= 1.5 s' if goal else ''} ({fname}, {p.get('all_applied', 0)} optimizations apply)",
                          f"CPU {p['optall_cpu']:.2f} s (wall {p['optall']:.2f})", p['optall_cpu'] <= 1.5 if goal else None))
        lw, rw = _v(r, "load", "wall"), _v(r, "reload", "wall")
        if lw and rw:
            goals.append((f"saved-table reload >= 20x faster than parsing ({fname})", f"{lw / rw:.0f}x", lw / rw >= 20))
    return goals


#: a stage's CPU time may grow at most this much faster than its input between two sizes
GROWTH_TOLERANCE = 1.2
GROWTH_STEPS = (("load", ("load", "cpu")), ("mapping", ("pipeline", "map_cpu")), ("graph build", ("pipeline", "graph_cpu")),
                ("replay", ("pipeline", "sim_cpu")), ("report", ("pipeline", "report_cpu")),
                ("second prediction", ("pipeline", "opt_cpu")), ("--opt all", ("pipeline", "optall_cpu")),
                ("whole command", ("cli", "cpu")))


def _growth_goals(res: dict, sizes: list[int]) -> list:
    """Linear growth: per stage, CPU time (its best of the runs) of the largest fully measured size / the smallest's <=
    :data:`GROWTH_TOLERANCE` x the ratio of events (the run fails otherwise); with ``--pipeline-big``
    also up to the load-only size."""
    if len(sizes) < 2:
        return []
    S, lo, hi = res["sizes"], label(sizes[0]), label(sizes[-1])
    goals = []
    big = LOAD_ONLY_LABEL[0] if LOAD_ONLY_LABEL else None
    for fname_of in (lambda l: f"kineto_{l}.json.gz", lambda l: f"kineto_{l}.json", lambda l: f"nsys_{l}.sqlite"):
        a = S.get(lo, {}).get(fname_of(lo), {})
        ends = [(hi, S.get(hi, {}).get(fname_of(hi), {}))]
        if big and _v(res, "load_only", fname_of(big), "pipeline", "graph_cpu"):
            ends.append((big, res["load_only"][fname_of(big)]))  # every stage measured at the load-only size
        for hi_, b in ends:
            ea, eb = _v(a, "manifest", "events"), _v(b, "manifest", "events")
            for step, keys in GROWTH_STEPS:
                best = (keys[0], "min_" + keys[1])  # a stage's best of the runs, where there were several
                va, vb = _v(a, *best) or _v(a, *keys), _v(b, *best) or _v(b, *keys)
                if va and vb and ea and eb:
                    g = (vb / va) / (eb / ea)
                    goals.append((f"linear growth {lo} -> {hi_}: {step} ({fname_of(hi_)})",
                                  f"CPU time x{vb / va:.2f} for events x{eb / ea:.2f} (x{g:.2f} faster)", g <= GROWTH_TOLERANCE))
    return goals


def _jit_section(t: dict) -> list[str]:
    """The "JIT tiers" table and the break-even it measures (see measure_jit_tiers)."""
    rows = [r for r in t.get("inputs", []) if "error" not in r.get("off", {"error": 1})]
    if not rows:
        return []
    L = ["## JIT tiers: when numba pays", "",
         *([f"Measured on {t['measured_on']} (`--jit-only`), apart from the run above (its date is at the top), on the code before that run's changes.", ""] if t.get("measured_on") else []),
         "Whole `daydream-analyze FILE` (no `--opt`), one fresh process per cell, CPU seconds (user + sys; wall in the raw "
         "numbers). `off`: `DAYDREAM_JIT=off`. `compiled`: warm numba cache, workload gate disabled "
         "(`DAYDREAM_JIT_BREAK_EVEN=0`: the per-kernel size thresholds alone, what every run did before the gate). "
         "`auto`: warm cache, gate on (what a user gets). `first`: an empty numba cache (a new machine or a new numba), "
         "gate disabled, then gate on (`first auto`). `before`: the --compare-src tree, auto, first run and warm. "
         "`numba`: whether the `auto` run imported numba. Rows: the event-table rows the run stated to the gate.", "",
         "| input | rows | MB | off | compiled | auto | numba | first | first auto | before first | before warm |",
         "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    c = lambda r, k: fmt_s(r[k]["cpu"]) if k in r and "error" not in r[k] else "–"  # noqa: E731
    pts = []
    for r in rows:
        n = r["auto"].get("rows") or r["off"].get("rows")
        L.append(f"| {r['file']}{' (real)' if r['real'] else ''} | {n:,} | {r['mb']:.0f} | {c(r, 'off')} | {c(r, 'compiled')} | "
                 f"{c(r, 'auto')} | {'yes' if r['auto'].get('numba') else 'no'} | {c(r, 'first')} | {c(r, 'first_auto')} | "
                 f"{c(r, 'before_first')} | {c(r, 'before_warm')} |")
        if not r["real"] and n and "error" not in r["compiled"]:
            pts.append((n, r["compiled"]["cpu"] - r["off"]["cpu"]))
    pts.sort()
    be = None
    for (n0, d0), (n1, d1) in zip(pts, pts[1:]):
        if d0 > 0 >= d1:  # compiled costs more at n0, no more at n1: linear between them
            be = int(n0 + (n1 - n0) * d0 / (d0 - d1))
            break
    if pts and be is None:
        be = pts[0][0] if pts[0][1] <= 0 else None
    diffs = ", ".join(f"{n / 1e6:.2f} M rows {d:+.2f} s" for n, d in pts)
    L += ["", f"compiled - off, generated inputs: {diffs}. Measured break-even (compiled no dearer than off, linear between "
          f"sizes): {'not reached at the sizes measured' if be is None else f'{be:,} rows'}; the gate's constant "
          f"(`daydream.util.jit.BREAK_EVEN_ROWS`): {t.get('break_even_const'):,} rows. The generated inputs fit it; "
          "the real traces (all far smaller) are the inputs it is judged on: their `auto` must match `off` without numba.", ""]
    return L


def render(res: dict, profiles: dict, compare: dict, have_hta: bool, hta_version: str, args, sizes: list[int]) -> str:
    import msgspec
    import numpy

    L: list[str] = []
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    L += [
        "# Performance on big traces",
        "",
        f"Written by `python scripts/bench.py --sizes {args.sizes} --load-only {args.load_only}"
        f"{' --pipeline-big' if any(_v(r, 'pipeline', 'graph_cpu') for r in res['load_only'].values()) else ''}` on {now}, in "
        f"{res['elapsed']:.0f} s: {os.cpu_count()} CPUs, {mem_gb:.0f} GiB RAM, Python {platform.python_version()}, "
        f"numpy {numpy.__version__}, msgspec {msgspec.__version__}.",
        "The machine is shared with other work (2 cores, several processes), so wall times are noisy and every goal "
        "below is judged on CPU time, wall time beside; each load timing is the best (least CPU) of "
        f"{args.repeat} runs on the smallest size and 1 run above it, graph/replay/--opt the best of 3 at every "
        "size, the whole command 1 run (the CPU time of that run is shown beside each; on this shared VM it "
        "moves with the wall time, so contention slows the work itself). Read ratios within one run, not across runs. "
        "Every measurement runs in a fresh process; peak RSS is that process's `ru_maxrss` "
        "(it includes the interpreter with numpy and daydream imported).",
        "",
        "Inputs (`scripts/gen_big_traces.py`, in `/tmp/daydream-bench`): the real traces "
        "`tracelens/h100_google_owlv2-large-patch14-ensemble` (Kineto, indented like the "
        "original) and `nsys_ai/mfu_2gpu_before.sqlite` repeated back to back with "
        "shifted times and offset ids (copies per size in the manifest).",
        "",
    ]

    if res.get("note"):
        L += [f"Note: {res['note']}", ""]

    # ---- goals
    first = label(sizes[0]) if sizes else None
    S = res["sizes"]
    goals = []

    def kin(lab, suf, *k):
        return _v(S, lab, f"kineto_{lab}{suf}", *k)

    def nsy(lab, *k):
        return _v(S, lab, f"nsys_{lab}.sqlite", *k)

    for lab in [label(x) for x in sizes]:
        goals += _load_goals(lab, kin, nsy, S)
        goals += _pipeline_goals(lab, S)
    if LOAD_ONLY_LABEL:
        goals += _pipeline_goals(LOAD_ONLY_LABEL[0], {LOAD_ONLY_LABEL[0]: res["load_only"]})
    for fname, r in res["load_only"].items():
        size = _v(r, "manifest", "uncompressed_bytes") or _v(r, "manifest", "bytes")
        hwm = _v(r, "load", "hwm_mb")
        if size and hwm:
            if "nsys" in fname:
                goals.append((f"nsys peak RSS <= file size + 100 MB ({fname}, load only)", f"{hwm:,.0f} MB vs {size / 2**20:,.0f} MB",
                              hwm <= size / 2**20 + 100))
            else:
                goals.append((f"bounded memory: peak RSS <= uncompressed size ({fname}, load only)", f"{hwm:,.0f} MB vs {size / 2**20:,.0f} MB",
                              hwm * 2**20 <= size))
    goals += _growth_goals(res, sizes)
    L += ["## Goals", "", "| goal | measured | met |", "|---|---:|---|"]
    L += [f"| {g} | {m} | {'–' if ok is None else 'yes' if ok else '**no**'} |" for g, m, ok in goals]
    L += ["", GOAL_NOTES, ""]

    # ---- per input
    L += ["## Per input", ""]
    for lab in [label(s) for s in sizes]:
        for fname, r in S.get(lab, {}).items():
            man = r.get("manifest", {})
            ev = man.get("events")
            size = man.get("bytes")
            unc = man.get("uncompressed_bytes")
            rows = _v(r, "load", "rows")
            L += [f"### {fname}", "",
                  (f"{ev:,} events ({rows:,} table rows), file {size / 2**20:,.0f} MB" if ev and rows and size else "")
                  + (f" ({unc / 2**20:,.0f} MB uncompressed)" if unc else "") + f"; timings best of {r.get('repeat')}.", "",
                  "| step | wall s | CPU s | rate | peak RSS MB |", "|---|---:|---:|---:|---:|"]
            ld = r.get("load", {})
            L.append(f"| load (`load_trace`) | {fmt_s(ld.get('wall'))} | {fmt_s(ld.get('cpu'))} | {rate(ev, ld.get('wall'))} events | {fmt_mb(ld.get('hwm_mb'))} |"
                     if "error" not in ld else f"| load | error: {ld['error']} | | | |")
            b = r.get("bare", {})
            what = (f"bare msgspec decode (read + gunzip by {b.get('gunzip', 'zlib')} + decode)" if "kineto" in fname
                    else "bare SQL scan of the needed columns")
            if b and "error" not in b:
                L.append(f"| {what} | {fmt_s(b.get('wall'))} | {fmt_s(b.get('cpu'))} | {rate(ev, b.get('wall'))} events | {fmt_mb(b.get('hwm_mb'))} |")
            h = r.get("hta")
            if h:
                L.append(f"| HTA `parse_trace_dataframe` (1 run) | {fmt_s(h.get('wall'))} | {fmt_s(h.get('cpu'))} | {rate(ev, h.get('wall'))} events | {fmt_mb(h.get('hwm_mb'))} |"
                         if "error" not in h else f"| HTA | error: {h['error']} | | | |")
            p = r.get("pipeline", {})
            if not p and fname.endswith(".json"):
                L.append(f"| graph build, replay, report, --opt | see {fname}.gz (same table) | | | |")
            if p and "error" not in p:
                t = p["tasks"]
                if p.get("jit") is not None:
                    L.append(f"| import numba + load the cached kernels (once per process) | {fmt_s(p['jit'])} | {fmt_s(p['jit_cpu'])} | | |")
                if p.get("map") is not None:
                    L.append(f"| mapping (`map_events`) | {fmt_s(p['map'])} | {fmt_s(p['map_cpu'])} | {rate(t, p['map'])} tasks | |")
                L.append(f"| graph build ({t:,} tasks) | {fmt_s(p['graph'])} | {fmt_s(p['graph_cpu'])} | {rate(t, p['graph'])} tasks | |")
                L.append(f"| replay (simulate) | {fmt_s(p['sim'])} | {fmt_s(p['sim_cpu'])} | {rate(t, p['sim'])} tasks | |")
                m_, mc_ = p.get("map", 0), p.get("map_cpu", 0)
                L.append(f"| mapping + graph build + replay | {fmt_s(m_ + p['graph'] + p['sim'])} | {fmt_s(mc_ + p['graph_cpu'] + p['sim_cpu'])} | "
                         f"{rate(t, m_ + p['graph'] + p['sim'])} tasks | |")
                L.append(f"| report (measured vs replayed, per step) | {fmt_s(p['report'])} | {fmt_s(p['report_cpu'])} | | |")
                L.append(f"| second `--opt {OPT_SPEC}` on the built graph | {fmt_s(p['opt'])} | {fmt_s(p['opt_cpu'])} | {rate(t, p['opt'])} tasks | {fmt_mb(p.get('hwm_mb'))} (whole process) |")
                if p.get("optall") is not None:
                    L.append(f"| `--opt all` on the built graph ({p.get('all_applied', 0)} apply) | {fmt_s(p['optall'])} | {fmt_s(p['optall_cpu'])} | | |")
            c = r.get("cli", {})
            if c:
                L.append(f"| whole `daydream-analyze {fname}` (1 run) | {fmt_s(c.get('wall'))} | {fmt_s(c.get('cpu'))} | {rate(ev, c.get('wall'))} events | {fmt_mb(c.get('hwm_mb'))} |"
                         if "error" not in c else f"| daydream-analyze | error: {c['error']} | | | |")
            s_ = r.get("save", {})
            if s_ and "error" not in s_:
                L.append(f"| `--save-table` (EventTable.save, {s_['bytes'] / 2**20:,.0f} MB .npz) | {fmt_s(s_['wall'])} | {fmt_s(s_['cpu'])} | | |")
            rl = r.get("reload", {})
            if rl and "error" not in rl:
                sp = ld.get("wall", 0) / rl["wall"] if rl.get("wall") else 0
                L.append(f"| reload the .npz as a trace | {fmt_s(rl['wall'])} | {fmt_s(rl['cpu'])} | {rate(ev, rl['wall'])} events ({sp:.0f}x parsing) | {fmt_mb(rl.get('hwm_mb'))} |")
            L.append("")

    # ---- growth
    L += ["## Growth with size", "", "Wall seconds per step; the last columns divide the largest size's time by the smallest's, "
          "next to the ratio of events (linear growth: the two are equal).", ""]
    labs = [label(s) for s in sizes]
    for kind, files in (("Kineto .json.gz", lambda l: f"kineto_{l}.json.gz"), ("Kineto .json", lambda l: f"kineto_{l}.json"),
                        ("nsys .sqlite", lambda l: f"nsys_{l}.sqlite")):
        rows = []
        for step, get in (("load", lambda r: _v(r, "load", "wall")), ("peak RSS MB (load)", lambda r: _v(r, "load", "hwm_mb")),
                          ("mapping", lambda r: _v(r, "pipeline", "map")),
                          ("graph build", lambda r: _v(r, "pipeline", "graph")), ("replay", lambda r: _v(r, "pipeline", "sim")),
                          ("second --opt", lambda r: _v(r, "pipeline", "opt")), ("daydream-analyze", lambda r: _v(r, "cli", "wall")),
                          ("reload .npz", lambda r: _v(r, "reload", "wall"))):
            vals = [get(S.get(l, {}).get(files(l), {})) for l in labs]
            lo = res["load_only"].get(files(LOAD_ONLY_LABEL[0]), {}) if LOAD_ONLY_LABEL else {}
            v16 = get(lo) if lo else None
            cells = [fmt_mb(v) if "MB" in step else fmt_s(v) for v in vals]
            cells.append(fmt_mb(v16) if "MB" in step else fmt_s(v16))
            ev = [_v(S.get(l, {}).get(files(l), {}), "manifest", "events") for l in labs]
            ev16 = _v(lo, "manifest", "events") if lo else None
            ratio = "–"
            last_v, last_e = (v16, ev16) if v16 else (vals[-1] if vals else None, ev[-1] if ev else None)
            if vals and vals[0] and last_v and ev and ev[0] and last_e and last_e != ev[0]:
                ratio = f"{last_v / vals[0]:.1f}x (events {last_e / ev[0]:.1f}x)"
            rows.append(f"| {step} | " + " | ".join(cells) + f" | {ratio} |")
        L += [f"### {kind}", "", "| step | " + " | ".join(labs) + f" | {LOAD_ONLY_LABEL[0] if LOAD_ONLY_LABEL else '–'} (one run) | growth |",
              "|---|" + "---:|" * (len(labs) + 2), *rows, ""]

    # ---- load-only and skips
    if res["load_only"]:
        L += [f"## {LOAD_ONLY_LABEL[0] if LOAD_ONLY_LABEL else ''} events (load only)", "", "| file | events | file MB | uncompressed MB | load wall s | CPU s | events/s | peak RSS MB |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for fname, r in res["load_only"].items():
            m, ld = r.get("manifest", {}), r.get("load", {})
            if "error" in ld:
                L.append(f"| {fname} | error: {ld['error']} | | | | | | |")
                continue
            L.append(f"| {fname} | {m.get('events', 0):,} | {m.get('bytes', 0) / 2**20:,.0f} | "
                     f"{(m.get('uncompressed_bytes') or m.get('bytes', 0)) / 2**20:,.0f} | {fmt_s(ld.get('wall'))} | {fmt_s(ld.get('cpu'))} | "
                     f"{rate(m.get('events'), ld.get('wall'))} | {fmt_mb(ld.get('hwm_mb'))} |")
        piped = any(_v(r, "pipeline", "graph_cpu") for r in res["load_only"].values())
        L += ["", "These inputs are made (json.gz and sqlite only), loaded once and deleted, to stay within the "
              "time budget and the disk; " + ("mapping, graph build, replay, report and --opt run once on each (`--pipeline-big`, "
              "on its saved table: the goals and growth rows above include them); the reload and the whole command are "
              "measured up to the largest full size." if piped else
              "graph, replay and the cache are measured up to the largest full size."), ""]
    if res["skipped"]:
        L += ["Skipped: " + "; ".join(res["skipped"]) + ".", ""]

    # ---- side by side
    L += ["## Side by side", ""]
    L += ["| input | daydream load s | bare bound s | daydream speed vs bound | HTA s | daydream vs HTA | HTA peak RSS MB |",
          "|---|---:|---:|---:|---:|---:|---:|"]
    for lab in labs:
        for fname, r in S.get(lab, {}).items():
            lw, bw, hw = _v(r, "load", "wall"), _v(r, "bare", "wall"), _v(r, "hta", "wall")
            sp = f"{bw / lw * 100:.0f} %" if lw and bw else "–"
            if "nsys" in fname and lw and bw:
                sp = f"{lw / bw:.2f}x the scan's time"
            L.append(f"| {fname} | {fmt_s(lw)} | {fmt_s(bw)} | {sp} | {fmt_s(hw)} | {f'{hw / lw:.1f}x faster' if hw and lw else '–'} | "
                     f"{fmt_mb(_v(r, 'hta', 'hwm_mb'))} |")
    hta_note = (f"HTA is HolisticTraceAnalysis {hta_version}, installed by the script into `/tmp/daydream-bench/hta-venv`; its "
                "`parse_trace_dataframe` with the default parser config (json backend: `json.loads` + a pandas DataFrame) "
                f"is run once per Kineto input up to {args.hta_max} events (its peak RSS in the table)."
                if have_hta else f"HTA was not measured: {hta_version}.")
    L += ["", hta_note, "The bare bounds do no work beyond the format: the msgspec bound decodes into structs of the same "
          "fields as the adapter (ts/dur as raw number text) and keeps nothing else; the SQL bound fetches the needed "
          "columns of each event table as Python rows (no NULL flags, no joins, no conversion).", ""]

    # ---- profiles
    if profiles:
        L += ["## Hot spots", "", "cProfile of one run on the smallest size (tottime: time in the function itself).", ""]
        for (fname, what), p in profiles.items():
            if "error" in p or "top" not in p:
                continue
            L += [f"**{what} of {fname}** (total {p['total']:.2f} s under the profiler)", "", "| function | calls | tottime s | cumtime s |", "|---|---:|---:|---:|"]
            L += [f"| `{w}` | {nc} | {tt:.3f} | {ct:.3f} |" for w, nc, tt, ct in p["top"][:8]]
            L.append("")
        L += [HOTSPOT_NOTES, ""]

    # ---- before / after
    if compare:
        L += ["## Before and after this round of speed work", "",
              f"Same inputs, same machine, same run, old and new run in turn (best of {max(args.repeat, 3)} each); \"before\" "
              f"is the source tree `{args.compare_src}`: today's daydream with the changes listed below reverted.", "",
              "| input | step | before s wall (CPU) | after s wall (CPU) | speed-up wall (CPU) | before peak RSS MB | after peak RSS MB |", "|---|---|---:|---:|---:|---:|---:|"]
        for fname, c in compare.items():
            ol, nl = c["old_load"], c["new_load"]
            if "error" not in ol and nl.get("wall"):
                L.append(f"| {fname} | load | {fmt_s(ol['wall'])} ({fmt_s(ol['cpu'])}) | {fmt_s(nl['wall'])} ({fmt_s(nl['cpu'])}) | "
                         f"{ol['wall'] / nl['wall']:.1f}x ({ol['cpu'] / nl['cpu']:.1f}x) | {fmt_mb(ol.get('hwm_mb'))} | {fmt_mb(nl.get('hwm_mb'))} |")
            op, np_ = c["old_pipe"], c["new_pipe"]
            if "error" not in op and np_.get("graph") is not None:
                for k, nm in (("map", "mapping"), ("graph", "graph build"), ("sim", "replay"), ("report", "report"), ("opt", "second --opt"),
                              ("optall", "--opt all")):
                    kc = k + "_cpu"
                    if k not in op or k not in np_:
                        continue
                    L.append(f"| {fname} | {nm} | {fmt_s(op[k])} ({fmt_s(op[kc])}) | {fmt_s(np_[k])} ({fmt_s(np_[kc])}) | "
                             f"{op[k] / np_[k]:.1f}x ({op[kc] / np_[kc]:.1f}x) | | |")
        L += ["", CHANGES, ""]

    L += _jit_section(res.get("jit_tiers", {}))

    L += ["## Rerun", "", "    python scripts/bench.py [--sizes 1m,4m] [--load-only 16m] [--pipeline-big] [--jit-tiers 250k,500k,1m,2m] [--out docs/performance.md] [--compare-src OLD_TREE] [--no-growth-check] [--jit-only | --compare-only | --render-only]", "",
          "Inputs are made on first use (the 16 M ones are made, loaded and deleted each "
          "run); the HTA virtualenv is made once (needs network for pip). Raw numbers: `/tmp/daydream-bench/bench-results.json`.", ""]
    return "\n".join(L)


GOAL_NOTES = """Each goal's measured value and verdict above are this run's; the hot spots below are this run's
profiles of the smallest size (where the time of a missed goal goes). The growth rows compare the smallest and the
largest fully measured size (CPU time), and fail the run (exit status 1) when a stage grows more than 1.2x faster
than its input; read ratios within one run, not across runs."""

HOTSPOT_NOTES = """The rows are cProfile's, of this run; a compiled kernel shows as one row (numba's own modules, when
listed, are its one-off loading of the cached kernels)."""

CHANGES = """What changed in the round measured here (issue 38, its second round): the report's and the what-ifs' stages
run without numpy's huge-page advice (`util.arrays.small_pages`, as the mapping and graph build already did: with THP
`defrag=madvise` the first touch of each big temporary compacted memory in kernel time, which grew faster than the
input); the trust line's "ended before" of the 50 worst-placed GPU tasks by one sort instead of 50 passes over the
graph; the report's op timeline by the compiled sweep and once per baseline (it was the numpy passes, once per
prediction and picture); user patterns over many names with one interval timer per batch; `insert_tasks` without
per-task loops. Results are identical before and after (CLI text, JSON and timeline outputs diffed on the fixture and
every real trace of ../shared/traces: /work/relayout/snapshot.sh)."""


if __name__ == "__main__":
    sys.exit(main())
