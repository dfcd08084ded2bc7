"""Tests of the reference emulator itself (daydream/testing/emulator/): hand-computed schedules, model
invariants over random programs, and the exactness of its Kineto output."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings

from daydream.testing.emulator import (
    DeviceSync,
    EventRecord,
    EventSync,
    HostWork,
    Launch,
    Memcpy,
    MemcpyAsync,
    MemsetAsync,
    OtherCall,
    Program,
    RangeBegin,
    RangeEnd,
    StreamSync,
    StreamWaitEvent,
    Thread,
    emulate,
    measure_latencies,
    programs,
    to_kineto,
    training_step_program,
)

T0 = 1_000_000_000_000  # a round t0 makes hand-computed times readable
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def prog(*threads, L=4_000, G=1_000) -> Program:
    ths = [t if isinstance(t, Thread) else Thread(t, pid=1, tid=10 + i) for i, t in enumerate(threads)]
    return Program(ths, launch_latency_ns=L, gpu_gap_ns=G, t0_ns=T0)


def rel(run, xs):
    return [(a - T0, b - T0) for a, b in xs]


def call_times(run, thread=0):
    return rel(run, [(c.start_ns, c.end_ns) for c in run.thread_calls(thread)])


def task_times(run):
    return rel(run, [(t.start_ns, t.end_ns) for t in run.tasks])


# ---- hand-computed examples ----------------------------------------------------------------------


def test_one_launch_then_stream_sync():
    run = emulate(prog([HostWork(2_000), Launch(7, "k", 10_000, 3_000), HostWork(1_000), StreamSync(7, 500)], L=5_000))
    # launch 2000..5000; kernel ready 7000, runs 7000..17000; sync starts 6000, ends 17000 + 500
    assert call_times(run) == [(2_000, 5_000), (6_000, 17_500)]
    assert task_times(run) == [(7_000, 17_000)]
    assert run.calls[1].waits_for == (0,) and run.calls[1].blocking


def test_sync_that_finds_work_done_lasts_its_own_cost():
    run = emulate(prog([Launch(7, "k", 1_000, 1_000), HostWork(50_000), StreamSync(7, 700)]))
    # kernel 4000..5000; sync starts 51000 > 5000: lasts 700
    assert call_times(run) == [(0, 1_000), (51_000, 51_700)]


def test_two_streams_record_wait_and_device_sync():
    run = emulate(prog([
        Launch(7, "a", 20_000, 2_000),        # 0..2000; a: 4000..24000
        EventRecord("e", 7, 1_000),           # 2000..3000, binds producer a
        StreamWaitEvent(20, "e", 1_000),      # 3000..4000
        Launch(20, "b", 5_000, 2_000),        # 4000..6000; ready 8000, after a: 25000..30000
        Launch(20, "c", 1_000, 2_000),        # 6000..8000; ready 10000, after b: 31000..32000
        DeviceSync(100),                      # 8000; waits a (24000) and c (32000) -> 32100
    ]))
    assert call_times(run) == [(0, 2_000), (2_000, 3_000), (3_000, 4_000), (4_000, 6_000), (6_000, 8_000), (8_000, 32_100)]
    assert task_times(run) == [(4_000, 24_000), (25_000, 30_000), (31_000, 32_000)]
    assert run.tasks[1].preds == (0,)           # only the cross-stream producer (first task on 20)
    assert run.tasks[2].preds == (1,)           # the wait applies to the first task after it only
    assert set(run.calls[5].waits_for) == {0, 2}


def test_device_sync_waits_for_two_streams():
    run = emulate(prog([Launch(7, "long", 30_000, 1_000), Launch(20, "longer", 50_000, 1_000), DeviceSync(200)], L=3_000))
    # long: 3000..33000; longer: 4000..54000; sync starts 2000 -> 54200
    assert task_times(run) == [(3_000, 33_000), (4_000, 54_000)]
    assert call_times(run)[-1] == (2_000, 54_200)


def test_device_sync_ignores_other_devices_and_unused_streams():
    run = emulate(prog([Launch(7, "k", 30_000, 1_000, device=1), DeviceSync(200, device=0)], L=3_000))
    assert call_times(run)[-1] == (1_000, 1_200)
    assert run.calls[-1].waits_for == ()


def test_cudamemcpy_blocks_for_its_own_copy():
    run = emulate(prog([
        Launch(7, "k", 10_000, 2_000),                     # 0..2000; k 4000..14000
        Memcpy(7, "DtoH", 1024, 3_000, 500),               # starts 2000; copy after k: 15000..18000; ends 18500
        Launch(7, "k2", 1_000, 1_000),                     # 18500..19500; k2 ready 22500
    ]))
    assert task_times(run) == [(4_000, 14_000), (15_000, 18_000), (22_500, 23_500)]
    assert call_times(run) == [(0, 2_000), (2_000, 18_500), (18_500, 19_500)]
    assert run.tasks[1].name == "Memcpy DtoH (Device -> Pageable)"


def test_memcpy_async_blocks_only_into_pageable_memory():
    run = emulate(prog([
        MemcpyAsync(7, "DtoH", 4, 2_000, 1_000, host_memory="pinned"),    # 0..1000 non-blocking; copy 4000..6000
        MemcpyAsync(7, "DtoH", 4, 2_000, 1_000, host_memory="pageable"),  # 1000..; copy 7000..9000; ends 10000
        MemcpyAsync(7, "HtoD", 4, 2_000, 1_000, host_memory="pageable"),  # 10000..11000 non-blocking
        MemsetAsync(7, 4, 1_000, 1_000),                                  # 11000..12000; set after copy
    ]))
    assert call_times(run) == [(0, 1_000), (1_000, 10_000), (10_000, 11_000), (11_000, 12_000)]
    assert task_times(run) == [(4_000, 6_000), (7_000, 9_000), (14_000, 16_000), (17_000, 18_000)]
    assert [c.blocking for c in run.calls] == [False, True, False, False]
    assert [t.name for t in run.tasks] == ["Memcpy DtoH (Device -> Pinned)", "Memcpy DtoH (Device -> Pageable)",
                                           "Memcpy HtoD (Pageable -> Device)", "Memset (Device)"]


def test_multithread_event_sync_binds_by_time():
    t0 = [Launch(7, "k", 50_000, 2_000), EventRecord("e", 7, 1_000)]     # k 4000..54000; record 2000..3000
    t1 = [HostWork(1_000), EventSync("e", 300),                          # 1000: not recorded yet -> 1300
          HostWork(8_700), EventSync("e", 300)]                          # 10000: waits for k -> 54300
    run = emulate(prog(t0, t1))
    assert call_times(run, 1) == [(1_000, 1_300), (10_000, 54_300)]
    first, second = run.thread_calls(1)
    assert first.bound_record is None and first.waits_for == ()
    assert run.calls[second.bound_record].name == "cudaEventRecord" and second.waits_for == (0,)


def test_event_sync_binds_to_latest_record():
    run = emulate(prog([
        Launch(7, "a", 5_000, 1_000),       # a 4000..9000
        EventRecord("e", 7, 1_000),         # 1000..2000 (after a)
        Launch(7, "b", 100_000, 1_000),     # 2000..3000; b 10000..110000
        EventRecord("e", 7, 1_000),         # 3000..4000 (after b)
        EventSync("e", 0),                  # 4000 -> 110000
    ]))
    assert call_times(run)[-1] == (4_000, 110_000)
    assert run.calls[run.thread_calls(0)[-1].bound_record].op_index == 3


def test_stream_wait_on_unrecorded_event_is_a_no_op():
    run = emulate(prog([Launch(7, "a", 50_000, 1_000), StreamWaitEvent(20, "never", 1_000), Launch(20, "b", 1_000, 1_000)]))
    assert run.tasks[1].preds == () and run.tasks[1].start_ns - T0 == 2_000 + 4_000


def test_launch_ties_across_threads_ordered_by_thread_index():
    # both threads launch on stream 7 at t0: thread 0 goes first in the stream, and gets the lower correlation
    run = emulate(prog([Launch(7, "x", 10_000, 2_000)], [Launch(7, "y", 10_000, 1_000)]))
    assert [t.name for t in run.tasks] == ["x", "y"]
    assert task_times(run) == [(4_000, 14_000), (15_000, 25_000)]
    assert [c.correlation for c in run.calls] == [1, 2] and run.calls[0].thread == 0


def test_other_call_and_ranges_do_not_affect_timing():
    base = emulate(prog([HostWork(1_000), Launch(7, "k", 1_000, 1_000), StreamSync(7, 10)]))
    decorated = emulate(prog([RangeBegin("ProfilerStep#1"), HostWork(500), RangeBegin("aten::add", "cpu_op"),
                              HostWork(500), Launch(7, "k", 1_000, 1_000), RangeEnd(), StreamSync(7, 10), RangeEnd()]))
    assert call_times(base) == call_times(decorated)
    assert [(r.name, r.start_ns - T0, r.end_ns - T0) for r in decorated.ranges] == [("ProfilerStep#1", 0, 6_010),
                                                                                   ("aten::add", 500, 2_000)]
    assert decorated.calls[0].external_id == 2 and decorated.calls[1].external_id == 1
    with_other = emulate(prog([OtherCall("cudaGetDevice", 700, 4), Launch(7, "k", 1_000, 1_000)]))
    assert call_times(with_other) == [(0, 700), (700, 1_700)]


def test_invalid_programs_are_rejected():
    with pytest.raises(ValueError):
        prog([], L=1_000, G=2_000)
    with pytest.raises(ValueError):
        prog([RangeBegin("x")])
    with pytest.raises(ValueError):
        prog([RangeEnd()])
    with pytest.raises(ValueError):
        prog([Launch(7, "k", -1, 1_000)])
    with pytest.raises(ValueError):
        prog([MemcpyAsync(7, "HtoH", 1, 1, 1)])
    with pytest.raises(ValueError):
        prog([OtherCall("cudaStreamSynchronize", 10)])


def test_map_ops_changes_a_program():
    p = prog([Launch(7, "k", 10_000, 1_000), StreamSync(7, 0)])
    q = p.map_ops(lambda op: dataclasses.replace(op, kernel_dur_ns=4_000) if isinstance(op, Launch) else op)
    assert call_times(emulate(q)) == [(0, 1_000), (1_000, 8_000)]


# ---- invariants over random programs -------------------------------------------------------------


def _launch_key(run, c):
    return (c.start_ns, c.thread, c.op_index)


def check_invariants(run) -> None:
    p = run.program
    L, G = p.launch_latency_ns, p.gpu_gap_ns
    calls, tasks = run.calls, run.tasks

    # calls are listed in launch order; correlation ids increase in it
    keys = [_launch_key(run, c) for c in calls]
    assert keys == sorted(keys)
    assert [c.correlation for c in calls] == list(range(1, len(calls) + 1))

    # CPU rule 1/2/3: each thread's calls follow program order with gaps = host work in between
    for ti, th in enumerate(p.threads):
        cur = p.t0_ns
        by_op = {c.op_index: c for c in run.thread_calls(ti)}
        for k, op in enumerate(th.ops):
            if isinstance(op, HostWork):
                cur += op.dur_ns
            elif k in by_op:
                c = by_op[k]
                assert c.start_ns == cur
                w = max((tasks[t].end_ns for t in c.waits_for), default=c.start_ns)
                own = getattr(op, "call_own_ns", getattr(op, "call_dur_ns", None))
                if c.blocking:
                    assert c.end_ns == max(c.start_ns, w) + own
                    assert all(c.end_ns >= tasks[t].end_ns for t in c.waits_for)
                else:
                    assert c.end_ns == c.start_ns + own
                cur = c.end_ns

    # independent recomputation of stream order, cross-stream producers and sync targets
    lane_of = lambda t: (t.device, t.stream)  # noqa: E731
    launched_before = lambda c: [i for i, t in enumerate(tasks) if keys[t.call] < _launch_key(run, c)]  # noqa: E731

    def last_on(lane, c):
        xs = [i for i in launched_before(c) if lane_of(tasks[i]) == lane]
        return xs[-1] if xs else None

    def bound_record(c):
        recs = [r for r in calls if r.name == "cudaEventRecord" and r.pid == c.pid and r.op.event == c.op.event
                and keys[calls.index(r)] < _launch_key(run, c)]
        return recs[-1] if recs else None

    expected_preds = {i: [] for i in range(len(tasks))}
    for i, t in enumerate(tasks):
        prev = last_on(lane_of(t), calls[t.call])
        if prev is not None:
            expected_preds[i].append(prev)
    for c in calls:
        if isinstance(c.op, StreamWaitEvent):
            rec = bound_record(c)
            if rec is None:
                continue
            producer = last_on((rec.op.device, rec.op.stream), rec)
            after = [i for i, t in enumerate(tasks) if lane_of(t) == (c.op.device, c.op.stream)
                     and keys[t.call] > _launch_key(run, c)]
            if producer is not None and after and producer not in expected_preds[after[0]]:
                expected_preds[after[0]].append(producer)

    for i, t in enumerate(tasks):
        c = calls[t.call]
        assert c.task == i and t.correlation == c.correlation
        assert sorted(t.preds) == sorted(expected_preds[i])
        # rule 4, and the basic physical facts
        assert t.ready_ns == c.start_ns + L
        assert t.start_ns == max([t.ready_ns] + [tasks[q].end_ns + G for q in t.preds])
        assert t.start_ns >= c.start_ns + L
        assert all(t.start_ns >= tasks[q].end_ns + G for q in t.preds)

    # streams: FIFO in launch order, never overlapping, consecutive tasks at least G apart
    for lane, idx in run.lane_tasks().items():
        for a, b in zip(idx, idx[1:]):
            assert keys[tasks[a].call] < keys[tasks[b].call]
            assert tasks[b].start_ns >= tasks[a].end_ns + G

    for c in calls:
        op = c.op
        if isinstance(op, StreamSync):
            lt = last_on((op.device, op.stream), c)
            assert list(c.waits_for) == ([] if lt is None else [lt])
        elif isinstance(op, DeviceSync):
            lanes = {lane_of(tasks[i]) for i in launched_before(c)
                     if calls[tasks[i].call].pid == c.pid and tasks[i].device == op.device}
            assert sorted(c.waits_for) == sorted(last_on(ln, c) for ln in lanes)
        elif isinstance(op, EventSync):
            rec = bound_record(c)
            assert (c.bound_record is None) == (rec is None)
            producer = None if rec is None else last_on((rec.op.device, rec.op.stream), rec)
            assert list(c.waits_for) == ([] if producer is None else [producer])
        elif isinstance(op, (Memcpy, MemcpyAsync)) and op.kind == "HtoD" and op.host_memory == "pageable":
            # CUDA "API synchronization behavior": cudaMemcpy, and an async copy above the staging
            # size, synchronize the stream, then stage; neither waits for its own copy
            assert op.staging_bytes == p.staging_bytes  # every copy stages by the program's threshold
            blocks = isinstance(op, Memcpy) or op.bytes > p.staging_bytes
            prev = last_on(lane_of(tasks[c.task]), c)
            assert list(c.waits_for) == ([prev] if blocks and prev is not None else [])
            assert c.blocking == blocks
        elif isinstance(op, Memcpy) and op.kind == "DtoD":  # no host synchronization
            assert not c.blocking and c.waits_for == () and c.end_ns == c.start_ns + op.call_own_ns
        elif c.blocking:
            assert c.waits_for == (c.task,)


@pytest.mark.slow
@SETTINGS
@given(programs())
def test_random_programs_follow_the_model(program):
    check_invariants(emulate(program))


@settings(max_examples=40, deadline=None)
@given(programs(max_devices=2, sync_events=False))
def test_random_programs_without_sync_records_follow_the_model(program):
    run = emulate(program)
    check_invariants(run)
    # in this mode a stream sync targets the stream the thread launched to last
    for c in run.calls:
        if isinstance(c.op, StreamSync):
            prior = [d for d in run.thread_calls(c.thread) if d.op_index < c.op_index and d.task is not None]
            assert prior and (run.tasks[prior[-1].task].device, run.tasks[prior[-1].task].stream) == (c.op.device, c.op.stream)


@settings(max_examples=30, deadline=None)
@given(programs())
def test_emulation_and_trace_are_deterministic(program):
    a, b = emulate(program), emulate(program)
    assert a == b
    assert json.dumps(to_kineto(a)) == json.dumps(to_kineto(b))


# ---- the Kineto trace ----------------------------------------------------------------------------


def _ns(x) -> int:
    v = Decimal(x) * 1000
    assert v == v.to_integral_value()
    return int(v)


def check_trace(run, path, emit_sync_events=True) -> dict:
    doc = to_kineto(run, path, emit_sync_events=emit_sync_events)
    raw = (gzip.open(path) if str(path).endswith(".gz") else open(path, "rb")).read().decode()
    # every ts/dur written as <us>.<3 digits>
    for m in re.finditer(r'"(ts|dur)": ([^,}]+)', raw):
        assert re.fullmatch(r"\d+\.\d{3}", m.group(2)), m.group(0)
    exact = json.loads(raw, parse_float=Decimal)
    assert exact["schemaVersion"] == 1 and exact["deviceProperties"][0]["name"] == "Emulated GPU"
    assert doc == json.loads(raw)
    base = exact["baseTimeNanoseconds"]
    evs = exact["traceEvents"]

    rt = {e["args"]["correlation"]: e for e in evs if e.get("cat") == "cuda_runtime"}
    assert len(rt) == len(run.calls)
    for c in run.calls:
        e = rt[c.correlation]
        assert (e["name"], e["pid"], e["tid"]) == (c.name, c.pid, c.tid)
        assert base + _ns(e["ts"]) == c.start_ns and base + _ns(e["ts"]) + _ns(e["dur"]) == c.end_ns
        assert e["args"]["cbid"] == c.cbid
    gpu = {e["args"]["correlation"]: e for e in evs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
    assert len(gpu) == len(run.tasks)
    for t in run.tasks:
        e = gpu[t.correlation]
        assert (e["name"], e["pid"], e["tid"], e["args"]["stream"], e["args"]["device"]) == (t.name, t.device, t.stream, t.stream, t.device)
        assert base + _ns(e["ts"]) == t.start_ns and base + _ns(e["ts"]) + _ns(e["dur"]) == t.end_ns
    flows_s = {e["id"] for e in evs if e.get("ph") == "s"}
    flows_f = {e["id"] for e in evs if e.get("ph") == "f"}
    assert flows_s == flows_f == {t.correlation for t in run.tasks}
    ranges = [e for e in evs if e.get("cat") in ("user_annotation", "cpu_op", "python_function")]
    assert sorted((base + _ns(e["ts"]), e["name"]) for e in ranges) == sorted((r.start_ns, r.name) for r in run.ranges)

    syncs = [e for e in evs if e.get("cat") == "cuda_sync"]
    if not emit_sync_events:
        assert not syncs
    else:
        by_corr = {e["args"]["correlation"]: e for e in syncs}
        for c in run.calls:
            op = c.op
            if not isinstance(op, (StreamSync, DeviceSync, EventSync, StreamWaitEvent)):
                assert c.correlation not in by_corr
                continue
            a = by_corr[c.correlation]["args"]
            if isinstance(op, StreamSync):
                assert (a["cuda_sync_kind"], a["stream"]) == ("Stream Sync", op.stream)
            elif isinstance(op, DeviceSync):
                assert (a["cuda_sync_kind"], a["stream"]) == ("Context Sync", -1)
            else:
                rec = run.calls[c.bound_record] if c.bound_record is not None else None
                want = (rec.op.stream, rec.correlation) if rec else (-1, -1)
                assert (a["wait_on_stream"], a["wait_on_cuda_event_record_corr_id"]) == want
                if isinstance(op, StreamWaitEvent):
                    assert (a["cuda_sync_kind"], a["stream"], by_corr[c.correlation]["tid"]) == ("Stream Wait Event", op.stream, op.stream)
                else:
                    assert a["cuda_sync_kind"] == "Event Sync"
    # the trace's earliest timestamp is the emulator's trace t0
    xs = [base + _ns(e["ts"]) for e in evs if e.get("ph") in ("X", "s", "f")]
    if xs:
        assert min(xs) == run.trace_t0_ns
    return exact


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(programs(max_devices=2))
def test_kineto_times_round_trip_exactly(tmp_path, program):
    check_trace(emulate(program), tmp_path / "t.json.gz")


def test_kineto_without_sync_events_and_plain_json(tmp_path):
    run = emulate(training_step_program(n_layers=2, steps=1))
    check_trace(run, tmp_path / "t.json", emit_sync_events=False)


def test_kineto_gzip_bytes_are_deterministic(tmp_path):
    run = emulate(training_step_program(n_layers=2, steps=2))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    to_kineto(run, tmp_path / "a" / "t.json.gz")
    to_kineto(run, tmp_path / "b" / "t.json.gz")
    assert (tmp_path / "a" / "t.json.gz").read_bytes() == (tmp_path / "b" / "t.json.gz").read_bytes()


def test_kineto_rejects_a_base_after_the_trace_start():
    run = emulate(prog([Launch(7, "k", 1_000, 1_000)]))
    with pytest.raises(ValueError):
        to_kineto(run, None, base_time_ns=T0 + 1)
    doc = to_kineto(run, None, base_time_ns=T0 - 5)
    assert doc["baseTimeNanoseconds"] == T0 - 5


def test_hand_example_kineto_events():
    run = emulate(prog([Launch(7, "a", 20_000, 2_000), EventRecord("e", 7, 1_000), StreamWaitEvent(20, "e", 1_000),
                        Launch(20, "b", 5_000, 2_000), EventSync("e", 0), DeviceSync(100)]))
    doc = to_kineto(run, None, base_time_ns=T0)
    evs = doc["traceEvents"]
    swe = next(e for e in evs if e.get("name") == "Stream Wait Event")
    assert (swe["pid"], swe["tid"], swe["args"]["wait_on_stream"], swe["args"]["wait_on_cuda_event_record_corr_id"]) == (0, 20, 7, 2)
    es = next(e for e in evs if e.get("name") == "Event Sync")
    assert es["args"]["correlation"] == 5 and es["args"]["wait_on_cuda_event_record_corr_id"] == 2
    assert es["ts"] == 6.0 and es["dur"] == 18.0    # 6000 .. 24000 (a ends at 24000)
    k = next(e for e in evs if e.get("name") == "b")
    assert (k["ts"], k["dur"], k["args"]["correlation"]) == (25.0, 5.0, 4)


# ---- the training program ------------------------------------------------------------------------


def test_training_program_is_realistic_and_measurable(tmp_path):
    p = training_step_program()
    run = emulate(p)
    check_invariants(run)
    names = {c.name for c in run.calls}
    assert {"cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync", "cudaStreamSynchronize", "cudaEventRecord",
            "cudaStreamWaitEvent", "cudaEventSynchronize", "cudaDeviceSynchronize"} <= names
    assert {t.stream for t in run.tasks} == {7, 20, 24}
    assert [r.name for r in run.ranges if r.name.startswith("ProfilerStep#")] == ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"]
    assert any(len(t.preds) > 1 or (t.preds and run.tasks[t.preds[0]].stream != t.stream) for t in run.tasks)
    assert measure_latencies(run) == (p.launch_latency_ns, p.gpu_gap_ns)
    assert emulate(training_step_program()) == run  # deterministic
    check_trace(run, tmp_path / "train.json.gz")
