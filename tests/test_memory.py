"""Memory: the allocator's events in the table (events/memory.py, kineto/memory_events.py, saved
tables), anchored in the graph (graph/memory_part.py) and replayed (simulate/memory_replay.py).

Real traces are read from ``../shared/traces`` (skipped when absent); the recorded peaks there are
computed here from the JSON with the standard library, independently of the reader."""

from __future__ import annotations

import functools
import tempfile
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daydream.errors import TraceFormatError
from daydream.events.memory import MemoryEvents
from daydream.events.table import EventTable, Kind
from daydream.formats import kineto, saved
from daydream.graph import build_graph
from daydream.graph.memory_part import anchor_events
from daydream.mapping import map_events
from daydream.simulate import simulate
from daydream.simulate.memory_replay import event_times, recorded_peaks, replay_memory

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
MEMORY_TRACES = [TRACES / p for p in (
    "tracelens/h100_gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens/mi300_gaunernst_bert-small-uncased__1016001.json.gz",
    "tracelens/h100_google_owlv2-large-patch14-ensemble__1016001.json.gz",
    "hta/df_index_resolver.json.gz",
    "kineto_tbplugin/resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz",
)]
needs_traces = pytest.mark.skipif(not TRACES.is_dir(), reason="../shared/traces not present")


def _doc(events, path):
    path.write_text(json.dumps({"traceEvents": events}))
    return str(path)


def _mem(ts, b, tid=1, **args):
    a = {"Bytes": b, "Device Type": 1, "Device Id": 0, **args}
    return {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": tid, "ts": ts, "args": a}


def _call(ts, dur, tid=1, name="cudaLaunchKernel"):
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {"correlation": ts}}


# ---------------------------------------------------------------------------------------------
# the table part
# ---------------------------------------------------------------------------------------------
def test_memory_events_sorted_by_time_then_index():
    m = MemoryEvents.from_columns({"ts_ns": [5, 3, 5, 3], "bytes": [1, 2, 3, 4], "seq": [9, 2, 7, 1]})
    assert m.ts_ns.tolist() == [3, 3, 5, 5]
    assert m.bytes.tolist() == [4, 2, 3, 1]
    assert m.device.tolist() == [-1] * 4 and m.total_allocated.tolist() == [-1] * 4
    with pytest.raises(ValueError):
        MemoryEvents.from_columns({"ts_ns": [1], "bytes": [1, 2]})


def test_kineto_reads_memory_events_and_counts_what_it_leaves_out(tmp_path):
    ev = [
        _mem(1.0, 512, **{"Total Allocated": 1536, "Total Reserved": 2048, "Addr": 77, "Ev Idx": 5}),
        _mem(1.0, -256, **{"Total Allocated": 1280, "Total Reserved": 2048, "Ev Idx": 4}),  # same us: Ev Idx orders
        _mem(2.0, 8, **{"Device Type": 0, "Device Id": -1}),  # host
        _mem(2.5, 8, **{"Device Type": 6, "Device Id": 1}),  # HIP
        _mem(3.0, "x"),  # malformed
        _mem(3.5, None),  # NaN written as null
        _mem(4.0, 4, **{"Device Type": 13}),  # MPS: not modelled
        _mem(4.5, 4, **{"Device Id": -1}),  # a CUDA event without its device
        _call(0.5, 1.0),
    ]
    t = kineto.load(_doc(ev, tmp_path / "m.json"))
    m = t.memory
    assert m.ts_ns.tolist() == [1000, 1000, 2000, 2500]
    assert m.bytes.tolist() == [-256, 512, 8, 8]
    assert m.seq.tolist() == [4, 5, -1, -1]
    assert m.device.tolist() == [0, 0, -1, 1]
    assert m.total_allocated.tolist() == [1280, 1536, -1, -1] and m.total_reserved.tolist() == [2048, 2048, -1, -1]
    assert m.addr.tolist() == [-1, 77, -1, -1]
    n = t.accounting.notes
    assert n["allocator event ([memory]) read into the memory table"] == 4
    left = {k.split(": ", 1)[1]: v for k, v in n.items() if k.startswith("allocator event ([memory]) left out")}
    assert left == {"Bytes absent, null (a NaN or Infinity) or not an integer": 2, "Device Type not CPU, CUDA or HIP": 1,
                    "GPU event with a Device Id absent, negative or out of range": 1}
    assert t.accounting.balanced and t.count(Kind.MARKER) == 8  # the instants stay markers, as before


def test_trace_without_memory_events_has_an_empty_part(tmp_path):
    t = kineto.load(_doc([_call(0.5, 1.0)], tmp_path / "n.json"))
    assert len(t.memory) == 0
    assert build_graph(t).memory is None


def test_saved_table_keeps_memory_events(tmp_path):
    ev = [_mem(1.0, 512, **{"Total Allocated": 512, "Total Reserved": 1024}), _mem(2.0, -512), _call(0.5, 1.0)]
    t = kineto.load(_doc(ev, tmp_path / "m.json"))
    p = str(tmp_path / "t.npz")
    t.save(p)
    back = saved.load(p)
    assert back.memory.equals(t.memory) and len(back.memory) == 2
    t2 = kineto.load(_doc([_call(0.5, 1.0)], tmp_path / "n.json"))
    t2.save(p)
    assert len(saved.load(p).memory) == 0


def test_saved_table_with_damaged_memory_columns_is_refused(tmp_path):
    ev = [_mem(1.0, 512), _mem(2.0, -512), _call(0.5, 1.0)]
    t = kineto.load(_doc(ev, tmp_path / "m.json"))
    p = str(tmp_path / "t.npz")
    cols = t.memory.columns()
    cols["bytes"] = cols["bytes"][:1]
    with open(p, "wb") as f:
        arrays = {c: t.cols[c] for c in t.cols}
        arrays.update({"memory." + c: a for c, a in cols.items()})
        arrays["__header__"] = np.frombuffer(__import__("msgspec").json.encode(__import__("daydream.events.table", fromlist=["x"]).SavedTableHeader(1, len(t), t.names, t.meta, t.accounting)), np.uint8)
        np.savez(f, **arrays)
    with pytest.raises(TraceFormatError, match="memory"):
        saved.load(p)


# ---------------------------------------------------------------------------------------------
# anchoring and replay
# ---------------------------------------------------------------------------------------------
@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 100), min_size=1, max_size=12), st.lists(st.integers(-5, 110), min_size=1, max_size=20))
def test_anchor_is_the_next_task_of_the_thread_else_the_end_of_its_last(starts, ts):
    starts = np.array(sorted(starts), np.int64)
    ends = starts + 3
    ts = np.array(ts, np.int64)
    one = np.ones(len(ts), np.int64)
    nd = np.ones(len(starts), np.int64)
    a, off, at_end = anchor_events(ts, one, one, nd, nd, starts, ends, np.arange(len(starts)) + 100)
    for i, x in enumerate(ts.tolist()):
        later = np.flatnonzero(starts >= x)
        if len(later):
            j = int(later[0])
            assert a[i] == j + 100 and off[i] == x - starts[j] and not at_end[i]
        else:
            assert a[i] == len(starts) - 1 + 100 and off[i] == x - ends[-1] and at_end[i]
    b, off2, _ = anchor_events(ts, one * 2, one, nd, nd, starts, ends, np.arange(len(starts)))
    assert (b == -1).all() and (off2 == ts).all()  # another thread: no anchor


def test_replay_moves_events_with_their_anchor_and_keeps_thread_order(tmp_path):
    ev = [_call(10, 5), _call(30, 5), _mem(12, 100, **{"Total Allocated": 100, "Total Reserved": 200}),
          _mem(25, 50, **{"Total Allocated": 150, "Total Reserved": 200}), _mem(40, -100, **{"Total Allocated": 50, "Total Reserved": 200})]
    t = kineto.load(_doc(ev, tmp_path / "r.json"))
    g = build_graph(t)
    tl = simulate(g)
    assert event_times(g, tl).tolist() == t.memory.ts_ns.tolist()  # the baseline replay is the recording
    (dm,) = replay_memory(g, tl)
    assert dm.allocated_bytes.tolist() == [100, 150, 50] and dm.peak_allocated_bytes == 150 and dm.exact_before
    assert recorded_peaks(g)[0][0] == 150 and dm.peak_reserved_bytes == 200
    # the events at 12 and 25 us are in the gap before the call at 30 us, the one at 40 us after its
    # end: they move with it
    at30 = int(np.flatnonzero(g.rec_start_ns == 30_000)[0])
    tl.start_ns[at30] -= 10_000
    tl.end_ns[at30] += 1_000
    assert event_times(g, tl).tolist() == [2_000, 15_000, 41_000]


def test_a_thread_keeps_the_order_of_its_events(tmp_path):
    ev = [_call(10, 5), _call(30, 5), _mem(8, 1), _mem(12, 1), _mem(25, 1)]
    g = build_graph(kineto.load(_doc(ev, tmp_path / "k.json")))
    tl = simulate(g)
    tl.start_ns[int(np.flatnonzero(g.rec_start_ns == 10_000)[0])] += 15_000  # the event at 8 us moves to 23 us
    assert event_times(g, tl).tolist() == [23_000, 23_000, 25_000]  # the one at 12 us (anchored at 30 us) is held after it


def test_without_totals_peaks_are_lower_bounds(tmp_path):
    ev = [_call(10, 5), _mem(12, -100), _mem(13, 300), _mem(14, -50)]  # a free of a block allocated before the window
    g = build_graph(kineto.load(_doc(ev, tmp_path / "o.json")))
    (dm,) = replay_memory(g, simulate(g))
    assert not dm.exact_before and dm.before_bytes == 100 and dm.peak_allocated_bytes == 300


@functools.lru_cache(maxsize=None)
def _recorded_from_json(path: Path) -> dict[int, int]:
    """Per GPU device, the peak of Total Allocated (and the level before the first event), read
    with the standard library."""
    d = json.load(gzip.open(path))
    ev = d["traceEvents"] if isinstance(d, dict) else d
    out: dict[int, int] = {}
    for e in ev:
        a = e.get("args") or {}
        if e.get("name") != "[memory]" or "Total Allocated" not in a or a.get("Device Type") not in (1, 6):
            continue
        dev = a["Device Id"]
        out[dev] = max(out.get(dev, 0), a["Total Allocated"], a["Total Allocated"] - a["Bytes"] if dev not in out else 0)
    return out


@needs_traces
@pytest.mark.slow
@pytest.mark.parametrize("path", MEMORY_TRACES, ids=lambda p: p.name[:30])
def test_baseline_replay_peaks_equal_the_recorded_ones(path):
    t = kineto.load(str(path))
    g = build_graph(t, map_events(t))
    assert g.memory is not None and g.memory.n_unanchored == 0
    tl = simulate(g)
    rep = {dm.device: dm for dm in replay_memory(g, tl)}
    rec = recorded_peaks(g)
    want = _recorded_from_json(path)
    for dev, (peak, steps) in rec.items():
        assert rep[dev].exact_before
        assert rep[dev].peak_allocated_bytes == peak
        assert [s.allocated_bytes for s in rep[dev].steps] == steps
    for dev, peak in want.items():
        assert rep[dev].peak_allocated_bytes == peak
    if not rec:  # PyTorch 1.8: no totals; the curve of the replay is the recorded one
        assert all(not dm.exact_before for dm in rep.values())
        rec_curve = {dm.device: dm.peak_allocated_bytes for dm in replay_memory(g, __import__("daydream.simulate", fromlist=["x"]).recorded(g))}
        assert rec_curve == {d: dm.peak_allocated_bytes for d, dm in rep.items()}


# ---------------------------------------------------------------------------------------------
# the report: parts, fit, text, timeline
# ---------------------------------------------------------------------------------------------
from daydream.costmodel.gpu_memory import CAPACITY, GIB, device_capacity  # noqa: E402
from daydream.costmodel.gpus import GPUS  # noqa: E402
from daydream.events.table import DeviceInfo  # noqa: E402
from daydream.render.memory_text import memory_section  # noqa: E402
from daydream.report.memory_fit import DEFAULT_FRAGMENTATION, memory_summary  # noqa: E402


def test_every_gpu_of_the_table_has_a_sourced_capacity():
    assert {g.name for g in GPUS} == set(CAPACITY)
    assert all(b > 0 and src for b, src in CAPACITY.values())
    assert device_capacity([DeviceInfo(0, "NVIDIA H100 80GB HBM3", total_memory_bytes=85_520_809_984)], 0)[0] == 85_520_809_984
    assert device_capacity([DeviceInfo(0, "H200")], 0) == (141 * GIB, "H200: " + CAPACITY["H200"][1])
    assert device_capacity([DeviceInfo(0, "a made-up GPU")], 0) == (-1, "")
    assert device_capacity([], 0) == (-1, "")


def _step_doc(ev, cap_bytes):
    return {"traceEvents": ev, "deviceProperties": [{"id": 0, "name": "Emulated GPU", "totalGlobalMem": cap_bytes}]}


def _prog_events():
    """One ProfilerStep: forward allocates an activation and a temporary, backward frees the
    activation and allocates a gradient, the optimizer allocates its state; a parameter block
    allocated before the trace stays (Total Allocated says so)."""
    def call(ts):
        return _call(ts, 1)

    def rng(name, ts, dur, cat="user_annotation"):
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}

    t = {"v": 1000}

    def mem(ts, b, addr):
        t["v"] += b
        return _mem(ts, b, **{"Addr": addr, "Total Allocated": t["v"], "Total Reserved": 8000})

    return [
        rng("ProfilerStep#1", 0, 100),
        rng("## forward ##", 1, 30), call(5), mem(6, 300, 1), call(8), mem(9, 50, 2), call(10), mem(11, -50, 2), call(12),
        rng("## backward ##", 40, 30), mem(41, 200, 3), call(42), mem(43, -300, 1), call(44),
        rng("## optimizer ##", 75, 20), mem(76, 400, 4), call(77),
    ]


def test_step_parts_follow_the_rules(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps(_step_doc(_prog_events(), 10_000)))
    t = kineto.load(str(p))
    g = build_graph(t, map_events(t))
    ms = memory_summary(g, simulate(g))
    (d,) = [d for d in ms.devices if d.device == 0]
    assert d.peak_allocated_bytes == 1600 and not d.at_least and d.fits
    assert d.fragmentation == round(8000 / 1600, 4) and d.needs_bytes == 8000
    (s,) = d.steps
    assert s.peak_allocated_bytes == 1600
    parts = {p.name: p.bytes for p in s.parts}
    # at the peak (after the optimizer's allocation): the parameter block, the gradient, the state
    assert parts["parameters and persistent"] == 1000
    assert parts["optimizer state"] == 400 and parts["gradients"] == 200
    # earlier, after the backward pass allocated the gradient: the activation is still alive
    from daydream.report.memory_fit import step_parts
    (dm,) = [x for x in replay_memory(g, simulate(g)) if x.device == 0]
    at = int(np.flatnonzero(dm.ts_ns == 41_000)[0])
    early = {p.name: p.bytes for p in step_parts(dm, g.memory, 0, at)}
    assert early == {"parameters and persistent": 1000, "activations": 300, "gradients": 200, "allocator slack": 8000 - 1500}
    assert parts["allocator slack"] == 8000 - 1600
    assert sum(v for k, v in parts.items() if k != "allocator slack") == s.peak_allocated_bytes
    assert "fits" in d.verdict


def test_does_not_fit_and_unknown_capacity(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps(_step_doc(_prog_events(), 4000)))
    t = kineto.load(str(p))
    g = build_graph(t, map_events(t))
    d = next(d for d in memory_summary(g, simulate(g)).devices if d.device == 0)
    assert d.fits is False and d.verdict.startswith("does not fit") and "of 0.00 GiB" in d.verdict
    ev = [_call(10, 5), _mem(12, 300)]
    p2 = tmp_path / "n.json"
    p2.write_text(json.dumps({"traceEvents": ev}))
    g2 = build_graph(kineto.load(str(p2)))
    d2 = memory_summary(g2, simulate(g2)).devices[0]
    assert d2.fits is None and "capacity unknown" in d2.verdict and d2.at_least
    assert d2.fragmentation == DEFAULT_FRAGMENTATION
    lines = memory_section(type("R", (), {"memory": memory_summary(g2, simulate(g2))})())
    assert any("lower bounds" in line for line in lines)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 1000)), min_size=1, max_size=30))
def test_parts_sum_to_the_peak(ops):
    """Random allocations and frees (by address) in a step: the parts at the peak add up to it."""
    ev, live, ts, total = [], {}, 1, 500
    ev.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 10_000, "args": {}})
    for addr, b in ops:
        ts += 3
        ev.append(_call(ts, 1))
        if addr in live:
            b = -live.pop(addr)
        else:
            live[addr] = b
        total += b
        ev.append(_mem(ts + 1, b, **{"Addr": addr, "Total Allocated": total, "Total Reserved": 10 ** 6}))
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "r.json"
        p.write_text(json.dumps({"traceEvents": ev}))
        t = kineto.load(str(p))
    g = build_graph(t, map_events(t))
    dev = next(x for x in memory_summary(g, simulate(g)).devices if x.device == 0)
    (s,) = dev.steps
    assert sum(p.bytes for p in s.parts if p.name != "allocator slack") == s.peak_allocated_bytes == dev.peak_allocated_bytes


@needs_traces
@pytest.mark.parametrize("name,n", [("extrap/profile1.sqlite", 60), ("extrap/con_kernel.sqlite", 20), ("nsys_ai/mock.sqlite", 0)])
def test_nsys_memory_usage_events(name, n):
    from daydream.formats import nsys
    t = nsys.load(str(TRACES / name))
    m = t.memory
    assert len(m) == n and t.accounting.balanced
    if not n:
        return
    assert t.accounting.read["CUDA_GPU_MEMORY_USAGE_EVENTS"] == t.accounting.kept["CUDA_GPU_MEMORY_USAGE_EVENTS"] == n
    assert set(m.devices()) == {-1, 0} and int(m.bytes.sum()) == 0  # every block allocated is freed
    assert (m.total_allocated == -1).all() and np.all(np.diff(m.ts_ns) >= 0)
    g = build_graph(t)
    (host, dev) = replay_memory(g, simulate(g))
    assert dev.peak_allocated_bytes > 0 and not dev.exact_before


def test_fused_adam_drops_the_steps_temporaries(tmp_path):
    """An unfused optimizer step: per parameter a temporary allocated and freed around an
    elementwise kernel; fused-adam's prediction no longer allocates them, the rest stays."""
    ek = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float> >"
    ev = [{"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#Adam.step", "pid": 1, "tid": 1, "ts": 0, "dur": 200, "args": {}},
          _mem(1, 1000, Addr=99, **{"Total Allocated": 1000, "Total Reserved": 4096})]  # state: kept
    total = 1000
    for i in range(4):
        ts = 10 + 40 * i
        total += 256
        ev.append(_mem(ts, 256, Addr=i + 1, **{"Total Allocated": total, "Total Reserved": 4096}))
        ev.append(_call(ts + 2, 3))
        ev.append({"ph": "X", "cat": "kernel", "name": ek, "pid": 0, "tid": 7, "ts": ts + 10, "dur": 5,
                   "args": {"device": 0, "stream": 7, "correlation": ts + 2}})
        total -= 256
        ev.append(_mem(ts + 6, -256, Addr=i + 1, **{"Total Allocated": total, "Total Reserved": 4096}))
        ev.append(_call(ts + 7, 1, name="cudaGetDevice"))
    p = tmp_path / "o.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    t = kineto.load(str(p))
    from daydream.analysis import apply_all, resolve_opt
    g = build_graph(t, map_events(t))
    g2, applied = apply_all(g, [resolve_opt("fused-adam")])
    assert "4 per-parameter temporaries" in applied[0].note
    (base,) = [d for d in replay_memory(g, simulate(g)) if d.device == 0]
    (pred,) = [d for d in replay_memory(g2, simulate(g2)) if d.device == 0]
    assert base.peak_allocated_bytes == 1256 and len(base.event) == 9
    assert pred.peak_allocated_bytes == 1000 and len(pred.event) == 1 and pred.exact_before and pred.before_bytes == 0
