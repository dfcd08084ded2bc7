"""Every what-if's memory against the reference emulator (issue 32): over random programs that
allocate, the predicted per-step peaks (and, where the what-if's times are emulated too, every
allocator event's time and level) equal the emulator's run of the changed program.

The changed programs are written here from the documented semantics of each optimization (the
PyTorch caching allocator, ``docs/memory.md``), never from the tool's rule: the emulator is the
independent route. Phases: explicit, reuse and generate, derandomized (CI runs the same examples);
no shrinking (a failure prints its whole example).
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, assume, event, given, settings
from hypothesis import strategies as st

from emulated_checks import emulated_curves
from daydream.analysis import apply_all, resolve_opt
from daydream.errors import NotApplicable
from daydream.formats import load_trace
from daydream.graph import build_graph
from daydream.mapping import map_events
from daydream.simulate import simulate
from daydream.simulate.memory_replay import replay_memory
from daydream.testing.emulator import (
    Allocate, HostWork, Launch, MemcpyAsync, OtherCall, Program, RangeBegin, RangeEnd, StreamSync, Thread, emulate, level_before, measure_latencies,
    memory_peaks, programs, same_level_before, to_kineto,
)
from daydream.testing.emulator.layered import layered_steps

STEP = "ProfilerStep#1"
PROPS = settings(max_examples=60, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.reuse, Phase.generate],
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


def _graph(run, mapped: bool = False, totals: bool = True):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.json"
        to_kineto(run, str(p), memory_totals=totals)
        t = load_trace(str(p))
        return build_graph(t, map_events(t)) if mapped else build_graph(t)


def _peaks(g, tl) -> dict[int, tuple[int, list[int]]]:
    return {dm.device: (dm.peak_allocated_bytes, [s.allocated_bytes for s in dm.steps]) for dm in replay_memory(g, tl)}


def _curves(g, tl) -> dict[int, tuple[list[int], list[int]]]:
    return {dm.device: (dm.ts_ns.tolist(), dm.allocated_bytes.tolist()) for dm in replay_memory(g, tl)}


def _one_level_before(run, changed, totals: bool):
    """(the run whose trace is read, the changed run): both at one level before the program
    (:func:`same_level_before`), which a trace with totals records; without totals the reader knows
    only the recorded run's own lower bound, so its trace is the recorded run's."""
    shared, changed = same_level_before(run, changed)
    return (shared if totals else run), changed


def _note_change(g, g2, tl2) -> None:
    """Tell hypothesis's statistics whether the prediction moved the curve or changed a peak (a
    property that only ever sees unchanged memory would test nothing)."""
    base, pred = _curves(g, simulate(g)), _curves(g2, tl2)
    event("predicted peaks differ from the baseline's" if _peaks(g, simulate(g)) != _peaks(g2, tl2) else "peaks unchanged")
    event("allocator events moved or changed" if base != pred else "curve unchanged")


# ---------------------------------------------------------------------------------------------
# amp: the activations of the ops autocast runs in 16-bit are halved; fp32 master weights,
# gradients and optimizer state kept
# ---------------------------------------------------------------------------------------------
#: PyTorch's autocast op lists (torch.amp docs, "CUDA Ops that can autocast to float16"): mm and
#: bmm run in 16-bit; relu and add are on no list (they run in their inputs' type: fp32 here)
_LOW, _KEPT = ("mm", "bmm"), ("relu", "add")


def _with_weight_copies(prog: Program) -> Program:
    """The autocast program's weight cast copies: each forward op on the 16-bit list with a recorded
    fp32 weight (its last input) casts it once (a 2-byte copy, allocated before the op's output, in
    the op) and keeps it while the backward may use it (autocast's cache and the op's saved tensor):
    freed after the step's last backward function."""
    ops, out, copies = list(prog.threads[0].ops), [], []
    last_bwd = max(k for k, op in enumerate(ops) if isinstance(op, Launch) and op.kernel_name.startswith("bwd_"))
    pending = None
    for k, op in enumerate(ops):
        if isinstance(op, RangeBegin) and op.dims and op.name.removeprefix("aten::") in _LOW:
            rows, cols = op.dims[-1]
            pending = rows * cols * 4 // 2
        out.append(op)
        if pending is not None and isinstance(op, HostWork):
            copies.append(Allocate(pending, addr=_COPY + 4096 * len(copies)))
            out.append(copies[-1])
            pending = None
        if k == last_bwd + 1:  # after the last backward function's free of its activation
            out += [Allocate(-c.delta_bytes, addr=c.addr) for c in copies]
    t0 = dataclasses.replace(prog.threads[0], ops=tuple(out))
    return dataclasses.replace(prog, threads=(t0,))


_COPY = 0x7C0000000000


@pytest.mark.slow
@PROPS
@given(layered_steps(max_layers=4, max_ops=3), st.data())
def test_amp_memory_equals_the_emulator(step, data):
    """amp (its memory rule; the kernel times are amp's time rule, checked elsewhere): 16-bit ops'
    activations halved, a 16-bit copy of each recorded fp32 weight of theirs, the rest kept."""
    from daydream.optimizations.amp import AUTOCAST_LOW_OPS
    from daydream.optimizations.amp_memory import amp_memory
    names = tuple(data.draw(st.sampled_from(_LOW + _KEPT)) for _ in step.layers[0])
    dims = tuple(data.draw(st.one_of(st.none(), st.tuples(st.integers(1, 64), st.integers(1, 256), st.integers(1, 256))
                                     .map(lambda t: ((t[0], t[1]), (t[1], t[2]))))) for _ in names)
    step = dataclasses.replace(step, op_names=names, op_dims=dims)
    run = emulate(step.program())
    assume(measure_latencies(run) == (5_000, 1_000))  # the replay's L and G are the program's
    g = _graph(run, mapped=True)
    g2, note = amp_memory(g, g, "amp", AUTOCAST_LOW_OPS)
    last = len(step.layers) - 1
    low = [n in _LOW for n in names]
    # the changed program: a 16-bit op's activation is half as big (rounded up); a layer's output is
    # the activation of its last op (saved for the next layer's backward) except the last layer's,
    # which lives past the backward (freed after the step's synchronize)
    halved = dataclasses.replace(
        step, layers=tuple(tuple(dataclasses.replace(op, act_bytes=-(-op.act_bytes // 2)) if low[j] else op for j, op in enumerate(layer))
                           for layer in step.layers),
        out_bytes=tuple(-(-b // 2) if low[-1] and i < last else b for i, b in enumerate(step.out_bytes)))
    changed = emulate(_with_weight_copies(halved.program()))
    event("weight copies" if any(d and lo for d, lo in zip(dims, low)) else "no weight copy")
    tl2 = simulate(g2)
    _note_change(g, g2, tl2)
    assert _peaks(g2, tl2) == memory_peaks(changed, (STEP,))
    assert _curves(g2, tl2) == emulated_curves(changed)  # amp's memory rule moves nothing: every event's time too


# ---------------------------------------------------------------------------------------------
# fused-adam: the per-parameter temporaries of the unfused step are gone; the fused kernel lasts
# the summed time of the kernels it replaces, its launch launch_ns; the other launch calls and the
# host work before them are gone
# ---------------------------------------------------------------------------------------------
_EW = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float> >"
_GEMM = "ampere_sgemm_128x64_tn"
_TMP = 0x7E0000000000
_LAUNCH_NS = 1_500


@st.composite
def _adam_programs(draw):
    """Thread 0: a step (forward GEMMs allocating activations; an ``Optimizer.step#Adam.step`` range of
    2..6 parameters, each a temporary allocated, an elementwise kernel launched, the temporary freed;
    optionally a trailing call in the range); thread 1: a random allocating thread."""
    ns = st.integers(1, 20).map(lambda v: v * 500)
    size = st.integers(1, 64).map(lambda v: v * 512)
    ops = [RangeBegin(STEP)]
    for _ in range(draw(st.integers(0, 3))):
        ops += [HostWork(draw(ns)), Allocate(draw(size)), Launch(7, _GEMM, draw(ns), draw(ns))]
    ops.append(RangeBegin("Optimizer.step#Adam.step"))
    for k in range(draw(st.integers(2, 6))):
        b = draw(size)
        state = [Allocate(draw(size)), HostWork(draw(ns))] if draw(st.integers(0, 3)) == 0 else []  # lazily made state: kept
        ops += [HostWork(draw(ns)), *state, Allocate(b, addr=_TMP + 4096 * k), HostWork(draw(ns)), Launch(7, _EW, draw(ns), draw(ns)),
                HostWork(draw(ns)), Allocate(-b, addr=_TMP + 4096 * k)]
    if draw(st.booleans()):
        ops += [HostWork(draw(ns)), OtherCall("cudaGetDevice", draw(ns), cbid=17)]
    ops += [RangeEnd(), HostWork(draw(ns)), StreamSync(7, 1_000), RangeEnd()]
    other = draw(programs(max_threads=1, max_ops=12, max_streams=1, memory=True)).threads[0]
    other = dataclasses.replace(other, ops=tuple(dataclasses.replace(op, stream=9) if isinstance(op, Launch) else op
                                                 for op in other.ops if isinstance(op, (HostWork, Allocate, Launch))),
                                tid=5001, name="worker_1")
    return Program([Thread(ops), other], launch_latency_ns=5_000, gpu_gap_ns=1_000)


def _fused_adam_program(prog: Program) -> Program:
    """The fused step as the emulator runs it: the temporaries not allocated; the first elementwise
    launch of the step launches one kernel of the summed time in ``_LAUNCH_NS``; the other launches
    and the host work since the call before each are gone (the per-parameter Python loop); state
    that work allocated is allocated right before the fused launch."""
    ops = list(prog.threads[0].ops)
    a = ops.index(RangeBegin("Optimizer.step#Adam.step"))
    calls = [k for k, op in enumerate(ops) if isinstance(op, (Launch, OtherCall, StreamSync))]
    launches = [k for k in calls if k > a and getattr(ops[k], "kernel_name", "") == _EW]
    drop = set()
    for k in launches[1:]:
        prev = max(c for c in calls if c < k)
        drop.update(range(prev + 1, k + 1))  # the call and the host work since the call before it
    total = sum(ops[k].kernel_dur_ns for k in launches)
    keep = []
    for k, op in enumerate(ops):
        if k == launches[0]:  # what the removed per-parameter work allocated besides (state) is made before the one launch
            keep += [ops[i] for i in sorted(drop) if isinstance(ops[i], Allocate) and ops[i].addr is None]
        if k in drop or (isinstance(op, Allocate) and op.addr is not None and op.addr >= _TMP):
            continue  # gone, or a temporary of the unfused step
        keep.append(dataclasses.replace(op, kernel_dur_ns=total, call_dur_ns=_LAUNCH_NS) if k == launches[0] else op)
    t0 = dataclasses.replace(prog.threads[0], ops=tuple(keep))
    return dataclasses.replace(prog, threads=(t0, *prog.threads[1:]))


@pytest.mark.slow
@PROPS
@given(_adam_programs())
def test_fused_adam_memory_equals_the_emulator(prog):
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graph(run)
    g2, applied = apply_all(g, [resolve_opt(f"fused-adam:launch_ns={_LAUNCH_NS}")])
    changed = emulate(_fused_adam_program(prog))
    tl2 = simulate(g2)
    _note_change(g, g2, tl2)
    assert _peaks(g2, tl2) == memory_peaks(changed, (STEP,))
    assert _curves(g2, tl2) == emulated_curves(changed)


def test_fused_adam_drops_the_last_parameters_temporary():
    """Bug found by the property above: the last parameter's temporary is freed after the step's
    last launch, inside its ``Optimizer.step#`` range; its free is anchored to the call after the
    range, so a rule by anchors alone kept that block (predicted peak 512 B, the emulator's none)."""
    ops = [RangeBegin(STEP), RangeBegin("Optimizer.step#Adam.step")]
    for k in range(2):
        ops += [HostWork(500), Allocate(512, addr=_TMP + 4096 * k), HostWork(500), Launch(7, _EW, 500, 500), HostWork(500),
                Allocate(-512, addr=_TMP + 4096 * k)]
    ops += [RangeEnd(), HostWork(500), StreamSync(7, 1_000), RangeEnd()]
    prog = Program([Thread(ops)], launch_latency_ns=5_000, gpu_gap_ns=1_000)
    g = _graph(emulate(prog))
    g2, applied = apply_all(g, [resolve_opt(f"fused-adam:launch_ns={_LAUNCH_NS}")])
    assert "2 per-parameter temporaries" in applied[0].note
    assert replay_memory(g2, simulate(g2)) == [] == list(emulate(_fused_adam_program(prog)).allocs)


# ---------------------------------------------------------------------------------------------
# what-ifs that change times only: the same allocations, moved with the calls they happen in
# ---------------------------------------------------------------------------------------------
def _stepped(prog: Program) -> Program:
    """``prog`` with thread 0's ops inside one ``ProfilerStep#1`` range."""
    th = prog.threads[0]
    t0 = dataclasses.replace(th, ops=(RangeBegin(STEP), *th.ops, RangeEnd()))
    return dataclasses.replace(prog, threads=(t0, *prog.threads[1:]))


_DUR_FIELD = {"kernel": "kernel_dur_ns", "memcpy": "copy_dur_ns", "memset": "set_dur_ns"}


def _with_task_durations(prog: Program, run, dur_by_corr: dict[int, int]) -> Program:
    """``prog`` with each GPU task's duration replaced by ``dur_by_corr[its correlation id]``: the
    program the target GPU runs (its CPU side, and so every allocation, unchanged)."""
    new = {}
    for t in run.tasks:
        c = run.calls[t.call]
        new[(c.thread, c.op_index)] = (_DUR_FIELD[t.kind], dur_by_corr[t.correlation])
    threads = []
    for i, th in enumerate(prog.threads):
        ops = [dataclasses.replace(op, **{new[(i, k)][0]: new[(i, k)][1]}) if (i, k) in new else op for k, op in enumerate(th.ops)]
        threads.append(dataclasses.replace(th, ops=tuple(ops)))
    return dataclasses.replace(prog, threads=tuple(threads))


@pytest.mark.slow
@PROPS
@given(programs(max_threads=3, max_ops=30, memory=True), st.booleans(), st.sampled_from(["L4", "H100 SXM", "B200"]))
def test_gpu_upgrade_same_allocations_target_capacity(prog, totals, target):
    """gpu-upgrade: the allocations are the traced ones, on the target's times; the emulator runs
    the program with every GPU task at the predicted duration (the time rule is checked elsewhere:
    here, that memory follows it), and the verdict is judged against the target's capacity."""
    from daydream.costmodel.gpu_memory import CAPACITY
    from daydream.report.memory_fit import memory_summary
    prog = _stepped(prog)
    run = emulate(prog)
    assume(run.allocs and run.tasks)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graph(run, totals=totals)
    g2, _ = apply_all(g, [resolve_opt(f"gpu-upgrade:source=V100,target={target}")])
    gpu = g2.node_kind != 0
    dur = dict(zip(g2.correlation[gpu].tolist(), g2.dur_ns[gpu].tolist()))
    changed = emulate(_with_task_durations(prog, run, dur))
    shared, changed = _one_level_before(run, changed, totals)
    if level_before(shared) != level_before(run):  # the trace records the level both runs share
        g = _graph(shared, totals=totals)
        g2, _ = apply_all(g, [resolve_opt(f"gpu-upgrade:source=V100,target={target}")])
    # the graph's waits are those of the recorded interleaving of the threads' calls: exact where
    # the target keeps it (the allocations between the calls may still change their order)
    assume([(c.thread, c.op_index) for c in run.calls] == [(c.thread, c.op_index) for c in changed.calls])
    tl2 = simulate(g2)
    _note_change(g, g2, tl2)
    assert _peaks(g2, tl2) == memory_peaks(changed, (STEP,))
    assert _curves(g2, tl2) == emulated_curves(changed)
    summ = memory_summary(g2, tl2)
    for d in summ.devices:
        if d.device >= 0:
            assert d.capacity_bytes == CAPACITY[target][0]
            assert d.fits == (d.needs_bytes <= d.capacity_bytes)


@st.composite
def _programs_with_value_reads(draw):
    """Random allocating programs whose thread 0 reads a value 1..3 times (``loss.item()``: a
    pinned device-to-host copy and a synchronize of its stream, inside ``aten::item``)."""
    prog = draw(programs(max_threads=2, max_ops=24, memory=True))
    ops = list(prog.threads[0].ops)
    for _ in range(draw(st.integers(1, 3))):  # a balanced block between any two ops keeps the ranges balanced
        s = draw(st.sampled_from([7, 20]))
        at = draw(st.integers(0, len(ops)))
        read = [RangeBegin("aten::item", "cpu_op"), RangeBegin("aten::_local_scalar_dense", "cpu_op"),
                MemcpyAsync(s, "DtoH", 4, draw(st.integers(1, 20)) * 500, draw(st.integers(1, 8)) * 500),
                StreamSync(s, draw(st.integers(1, 8)) * 500), RangeEnd(), RangeEnd()]
        ops[at:at] = read
    t0 = dataclasses.replace(prog.threads[0], ops=tuple(ops))
    return _stepped(dataclasses.replace(prog, threads=(t0, *prog.threads[1:])))


def _deferred_reads(prog: Program) -> Program:
    """The program with each value read's synchronize deferred: the call returns after its own cost
    (an API call that waits for nothing), the copy stays on its stream."""
    ops = list(prog.threads[0].ops)
    for k in range(len(ops)):
        if isinstance(ops[k], StreamSync) and k >= 1 and isinstance(ops[k - 1], MemcpyAsync) and ops[k - 1].kind == "DtoH":
            ops[k] = OtherCall("cudaGetDevice", ops[k].call_own_ns, cbid=17)
    t0 = dataclasses.replace(prog.threads[0], ops=tuple(ops))
    return dataclasses.replace(prog, threads=(t0, *prog.threads[1:]))


@pytest.mark.slow
@PROPS
@given(_programs_with_value_reads(), st.booleans())
def test_remove_syncs_allocations_move_with_their_calls(prog, totals):
    run = emulate(prog)
    assume(run.allocs)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graph(run, mapped=True, totals=totals)
    try:
        g2, _ = apply_all(g, [resolve_opt("remove-syncs")])
    except NotApplicable:
        assume(False)
    changed = emulate(_deferred_reads(prog))
    # the graph's waits are those of the recorded interleaving of the threads' calls (a blocking call
    # waits for what was launched before it): exact where the deferral keeps that interleaving
    assume([(c.thread, c.op_index) for c in run.calls] == [(c.thread, c.op_index) for c in changed.calls])
    tl2 = simulate(g2)
    _note_change(g, g2, tl2)
    assert _peaks(g2, tl2) == memory_peaks(changed, (STEP,))
    assert _curves(g2, tl2) == emulated_curves(changed)


@st.composite
def _programs_with_hot_region(draw):
    """Random allocating programs whose thread 0 has a ``hot_region`` range around a run of its ops
    that begins after its first call (host time before a thread's first call is not modelled)."""
    prog = draw(programs(max_threads=2, max_ops=24, memory=True))
    ops = list(prog.threads[0].ops)
    calls = [k for k, op in enumerate(ops) if not isinstance(op, (HostWork, Allocate, RangeBegin, RangeEnd))]
    assume(calls)
    a = draw(st.integers(calls[0] + 1, len(ops)))
    b = draw(st.integers(a, len(ops)))
    depth = [0]
    for op in ops:  # the region must not cut a range in two
        depth.append(depth[-1] + (1 if isinstance(op, RangeBegin) else -1 if isinstance(op, RangeEnd) else 0))
    assume(depth[a] == depth[b] and min(depth[a:b + 1]) >= depth[a])
    ops = ops[:a] + [RangeBegin("hot_region")] + ops[a:b] + [RangeEnd()] + ops[b:]
    t0 = dataclasses.replace(prog.threads[0], ops=tuple(ops))
    return _stepped(dataclasses.replace(prog, threads=(t0, *prog.threads[1:])))


def _scaled_region(prog: Program, f: int) -> Program:
    """Thread 0 with the host time inside ``hot_region`` ``f`` times as long: its host work, the
    durations of its non-blocking calls and the own cost of its blocking ones."""
    out, depth = [], 0  # depth: ranges open inside hot_region, itself included (0: outside)
    for op in prog.threads[0].ops:
        if op == RangeBegin("hot_region") and not depth:
            depth = 1
        elif depth and isinstance(op, (RangeBegin, RangeEnd)):
            depth += 1 if isinstance(op, RangeBegin) else -1
        elif depth:
            for name in ("dur_ns", "call_dur_ns", "call_own_ns"):
                if hasattr(op, name):
                    op = dataclasses.replace(op, **{name: getattr(op, name) * f})
        out.append(op)
    t0 = dataclasses.replace(prog.threads[0], ops=tuple(out))
    return dataclasses.replace(prog, threads=(t0, *prog.threads[1:]))


def test_the_level_before_the_window_does_not_depend_on_the_order_of_its_events():
    """Found by the scale-cpu property (--hypothesis-seed=14 and 19, 400 examples): where a what-if
    moves an allocation across another thread's free of a block from before the program, the
    smallest level before the window that keeps the curve at or above 0 changes with the order;
    the judge's changed run took its own (lower or higher) and the prediction the recorded run's.
    What the process held before is one level: the largest of the two lower bounds."""
    for free_at, f in ((6_000, 2), (3_000, 0)):  # x2: the allocation moves after the free; x0: before it
        ops = [Launch(7, _GEMM, 3_000, 1_000), RangeBegin("hot_region"), HostWork(4_000), Allocate(1_000),
               OtherCall("cudaGetDevice", 500, cbid=17), RangeEnd()]
        prog = _stepped(Program([Thread(ops), Thread([HostWork(free_at), Allocate(-3_000)], tid=5001)],
                                launch_latency_ns=5_000, gpu_gap_ns=1_000))
        run, changed = emulate(prog), emulate(_scaled_region(prog, f))
        assert {level_before(run)[0], level_before(changed)[0]} == {2_000, 3_000}
        for totals in (True, False):
            traced, judged = _one_level_before(run, changed, totals)
            assert level_before(judged) == {0: 3_000}
            g = _graph(traced, totals=totals)
            g2, _ = apply_all(g, [resolve_opt(f"scale-cpu:range=^hot_region$,factor={f}")])
            tl2 = simulate(g2)
            assert _curves(g2, tl2) == emulated_curves(judged)
            assert _peaks(g2, tl2) == memory_peaks(judged, (STEP,))


def test_scaled_region_ends_with_hot_region_when_ranges_nest_in_it():
    """Bug in the judge's program (found at --hypothesis-seed=14, 400 examples): with a range nested
    in ``hot_region``, the host time after ``hot_region`` was scaled as well."""
    call = OtherCall("cudaGetDevice", 500, cbid=17)
    prog = Program([Thread([RangeBegin("hot_region"), RangeBegin("inner"), call, RangeEnd(), HostWork(100), RangeEnd(),
                            HostWork(100), call])])
    got = _scaled_region(prog, 2).threads[0].ops
    assert got == (RangeBegin("hot_region"), RangeBegin("inner"), dataclasses.replace(call, call_dur_ns=1_000), RangeEnd(),
                   HostWork(200), RangeEnd(), HostWork(100), call)


@pytest.mark.slow
@PROPS
@given(_programs_with_hot_region(), st.sampled_from([0, 2, 3]), st.booleans())
def test_scale_cpu_allocations_move_with_the_host_time(prog, f, totals):
    """scale-cpu: the allocations move with the host time around them, an event inside a scaled gap
    at its scaled distance from its call. At x0 an event recorded inside a step can land on the
    step's last instant: both sides count a step's events by time, [start, end) (issue 32)."""
    run = emulate(prog)
    assume(run.allocs)
    assume(measure_latencies(run) == (prog.L, prog.G))
    changed = emulate(_scaled_region(prog, f))
    run, changed = _one_level_before(run, changed, totals)
    g = _graph(run, totals=totals)
    try:
        g2, _ = apply_all(g, [resolve_opt(f"scale-cpu:range=^hot_region$,factor={f}")])
    except NotApplicable:
        assume(False)
    assume([(c.thread, c.op_index) for c in run.calls] == [(c.thread, c.op_index) for c in changed.calls])
    tl2 = simulate(g2)
    _note_change(g, g2, tl2)
    assert _peaks(g2, tl2) == memory_peaks(changed, (STEP,))
    assert _curves(g2, tl2) == emulated_curves(changed)


def test_scale_cpu_scales_the_host_work_between_an_allocation_and_its_call():
    """Bug found by the property above: an allocation 2 us of host work before its call stayed 2 us
    before it where scale-cpu doubled that work (the recorded offset kept): 2 us early."""
    ops = [Launch(7, _GEMM, 3_000, 1_000), RangeBegin("hot_region"), HostWork(1_000), Allocate(512), HostWork(2_000),
           OtherCall("cudaGetDevice", 500, cbid=17), RangeEnd(), HostWork(700), Allocate(-512), OtherCall("cudaGetDevice", 500, cbid=17)]
    prog = _stepped(Program([Thread(ops)], launch_latency_ns=5_000, gpu_gap_ns=1_000))
    g = _graph(emulate(prog))
    g2, _ = apply_all(g, [resolve_opt("scale-cpu:range=^hot_region$,factor=2")])
    changed = emulate(_scaled_region(prog, 2))
    got = _curves(g2, simulate(g2))
    assert got == emulated_curves(changed)
    assert [t - prog.t0_ns for t in got[0][0]] == [1_000 + 2 * 1_000, 1_000 + 2 * (1_000 + 2_000 + 500) + 700]


def test_scale_cpu_moves_a_step_end_after_the_last_call_with_the_scaled_host_time():
    """Bug found by the property above at x0 (issue 32): a step boundary after its thread's last call
    kept its recorded distance to that call while scale-cpu scaled the host work in it, so the step
    ended late (x2: early) and held an allocation the emulator's step does not (x2: lost one it
    holds). At x0 the allocation lands on the step's last instant: out of the step, [start, end)."""
    ops = [Launch(7, _GEMM, 3_000, 1_000), RangeBegin("hot_region"), OtherCall("cudaGetDevice", 500, cbid=17),
           HostWork(1_000), Allocate(512), HostWork(1_000), RangeEnd()]
    prog = _stepped(Program([Thread(ops)], launch_latency_ns=5_000, gpu_gap_ns=1_000))
    g = _graph(emulate(prog))
    for f, want in ((0, []), (2, [512])):
        g2, _ = apply_all(g, [resolve_opt(f"scale-cpu:range=^hot_region$,factor={f}")])
        changed = emulate(_scaled_region(prog, f))
        assert memory_peaks(changed, (STEP,)) == {0: (512, want)}
        assert _peaks(g2, simulate(g2)) == memory_peaks(changed, (STEP,))


# ---------------------------------------------------------------------------------------------
# fusion: the tensors made by one fused op and freed after a later one of the chain never exist
# ---------------------------------------------------------------------------------------------
_MID = 0x7D0000000000


@st.composite
def _chain_programs(draw):
    """Thread 0: chains of 2..5 elementwise ops, each allocating its output (the next op's input) and
    freeing its input after its launch if an earlier op of the chain made it; a plain API call
    between chains; the chains' outputs freed after the step's synchronize. Thread 1: random, its
    kernels GEMMs (not fused)."""
    ns = st.integers(1, 20).map(lambda v: v * 500)
    size = st.integers(1, 64).map(lambda v: v * 512)
    ops, outs, n_addr = [RangeBegin(STEP)], [], 0
    for _ in range(draw(st.integers(1, 3))):
        prev = None
        for k in range(draw(st.integers(2, 5))):
            b, a = draw(size), _MID + 4096 * n_addr
            n_addr += 1
            ops += [HostWork(draw(ns)), Allocate(b, addr=a), HostWork(draw(ns)), Launch(7, _EW, draw(ns), draw(ns))]
            if prev is not None:
                ops += [HostWork(draw(ns)), Allocate(-prev[0], addr=prev[1])]
            prev = (b, a)
        outs.append(prev)
        ops += [HostWork(draw(ns)), OtherCall("cudaGetDevice", draw(ns), cbid=17)]
    ops += [HostWork(draw(ns)), StreamSync(7, 1_000), *[Allocate(-b, addr=a) for b, a in outs], RangeEnd()]
    other = draw(programs(max_threads=1, max_ops=12, max_streams=1, memory=True)).threads[0]
    # its kernels GEMMs: the chains are thread 0's
    other = dataclasses.replace(other, ops=tuple(dataclasses.replace(op, stream=9, kernel_name=_GEMM) if isinstance(op, Launch) else op
                                                 for op in other.ops if isinstance(op, (HostWork, Allocate, Launch))),
                                tid=5001, name="worker_1")
    return Program([Thread(ops), other], launch_latency_ns=5_000, gpu_gap_ns=1_000)


def _fused_program(prog: Program) -> Program:
    """The compiled program: per chain one kernel, launched by the chain's first launch call, lasting
    max(longest member, rint(sum x (n + 2) / 3n)) (fusion's bytes model with its defaults, 2 reads
    and 1 write per member: docs/optimizations.md); the other launch calls and the host work since
    the call before each gone; the intermediate tensors never allocated; what the removed host work
    allocated or freed besides (the last op's output) happens right before the fused launch."""
    ops = list(prog.threads[0].ops)
    calls = [k for k, op in enumerate(ops) if isinstance(op, (Launch, OtherCall, StreamSync))]
    chains, cur = [], []
    for k in calls:
        if isinstance(ops[k], Launch):
            cur.append(k)
        elif cur:
            chains.append(cur)
            cur = []
    last_out = set()
    for ch in chains:  # the output of a chain's last op (allocated in the host work before its launch)
        a = max(i for i in range(ch[-2] + 1, ch[-1]) if isinstance(ops[i], Allocate) and ops[i].delta_bytes > 0)
        last_out.add(ops[a].addr)
    drop, new = set(), {}
    for ch in chains:
        durs = [ops[k].kernel_dur_ns for k in ch]
        n = len(ch)
        new[ch[0]] = dataclasses.replace(ops[ch[0]], kernel_dur_ns=max(max(durs), round(sum(durs) * (n + 2) / (3 * n))))
        for k in ch[1:]:
            prev = max(c for c in calls if c < k)
            drop.update(range(prev + 1, k + 1))
    mid = {op.addr for op in ops if isinstance(op, Allocate) and op.addr is not None and op.addr >= _MID} - last_out
    keep = []
    for ch in chains:  # the removed host work's other allocator events, in order, right before the fused launch
        new[ch[0]] = [*(ops[i] for i in sorted(drop) if ch[0] < i < ch[-1] and isinstance(ops[i], Allocate) and ops[i].addr not in mid),
                      new[ch[0]]]
    for k, op in enumerate(ops):
        if k in drop or (isinstance(op, Allocate) and op.addr in mid):
            continue
        keep += new[k] if k in new else [op]
    t0 = dataclasses.replace(prog.threads[0], ops=tuple(keep))
    return dataclasses.replace(prog, threads=(t0, *prog.threads[1:]))


@pytest.mark.slow
@PROPS
@given(_chain_programs())
def test_fusion_intermediates_vanish_equal_the_emulator(prog):
    """(With totals and addresses: blocks without an address, PyTorch 1.8's, cannot be paired.)"""
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graph(run)
    g2, applied = apply_all(g, [resolve_opt("fusion")])
    changed = emulate(_fused_program(prog))
    tl2 = simulate(g2)
    _note_change(g, g2, tl2)
    assert _peaks(g2, tl2) == memory_peaks(changed, (STEP,))
    assert _curves(g2, tl2) == emulated_curves(changed)


def test_fusion_drops_the_intermediate_and_moves_the_output_to_the_fused_launch():
    """Two elementwise ops: the first one's output is freed after the second's launch (an
    intermediate: never allocated when fused); the second one's output, allocated in host work the
    fusion removes, is allocated right before the fused launch. Before: the intermediate stayed,
    and the output was re-anchored to the next call at its recorded distance, which counted the
    removed host work (5.5 us early here, before the step's first call)."""
    ops = [RangeBegin(STEP), HostWork(1_000), Allocate(4096, addr=_MID), Launch(7, _EW, 2_000, 1_000), HostWork(2_000),
           Allocate(8192, addr=_MID + 4096), HostWork(1_000), Launch(7, _EW, 2_000, 1_000), HostWork(500),
           Allocate(-4096, addr=_MID), HostWork(500), OtherCall("cudaGetDevice", 500, cbid=17), StreamSync(7, 1_000),
           Allocate(-8192, addr=_MID + 4096), RangeEnd()]
    prog = Program([Thread(ops)], launch_latency_ns=5_000, gpu_gap_ns=1_000)
    g = _graph(emulate(prog))
    g2, applied = apply_all(g, [resolve_opt("fusion")])
    assert "1 intermediate tensors between fused kernels" in applied[0].note
    got = _curves(g2, simulate(g2))
    assert got == emulated_curves(emulate(_fused_program(prog)))
    assert [t - prog.t0_ns for t in got[0][0]][0] == 1_000 and got[0][1] == [8192, 0]


# ---------------------------------------------------------------------------------------------
# reconbn: BN and its ReLU fused (forward: the BN's kernel writes the ReLU's output; backward: the
# BN backward reads the ReLU backward's input): the tensor between them never exists
# ---------------------------------------------------------------------------------------------
_BN_FW = "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>(cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float const*, float, float, float*, float*, float*, float*, float, float)"
_BN_BW = "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(float, float, float, float, cudnnTensorStruct, float const*, cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float*, float*, float const*, float const*, float)"


@st.composite
def _bn_programs(draw):
    """One step of 1..3 conv-BN-ReLU layers and their backward in reverse; a ReLU is in-place (no
    allocation) or not (its output allocated, the BN's output freed after it); the ReLU backward
    allocates its output, the BN backward its own and frees the ReLU backward's after its launch;
    a ReLU backward may also allocate a block kept to the end (it moves with the fused call)."""
    from daydream.testing.emulator.generators import _RELU, _RELU_BWD as _RELU_BW
    ns = st.integers(1, 10).map(lambda v: v * 1_000)  # even: the BN kernels halve exactly
    size = st.integers(1, 64).map(lambda v: v * 512)
    addr = iter(range(_MID, _MID + (1 << 30), 4096))
    ops, keep = [RangeBegin(STEP)], []
    n = draw(st.integers(1, 3))
    for _ in range(n):
        y = (draw(size), next(addr))
        ops += [HostWork(draw(ns)), Launch(7, _GEMM, draw(ns), draw(ns)),
                HostWork(draw(ns)), Allocate(y[0], addr=y[1]), HostWork(draw(ns)), Launch(7, _BN_FW, draw(ns), draw(ns)), HostWork(draw(ns))]
        if draw(st.booleans()):  # a non-inplace ReLU
            z = (draw(size), next(addr))
            ops += [Allocate(z[0], addr=z[1]), HostWork(draw(ns)), Launch(7, _RELU, draw(ns), draw(ns)), HostWork(draw(ns)),
                    Allocate(-y[0], addr=y[1])]
            keep.append(z)
        else:
            ops += [Launch(7, _RELU, draw(ns), draw(ns))]
            keep.append(y)
    for _ in range(n):
        dy, dx = (draw(size), next(addr)), (draw(size), next(addr))
        ops += [HostWork(draw(ns)), Allocate(dy[0], addr=dy[1])]
        if draw(st.booleans()):
            extra = (draw(size), next(addr))
            ops += [Allocate(extra[0], addr=extra[1])]
            keep.append(extra)
        ops += [HostWork(draw(ns)), Launch(7, _RELU_BW, draw(ns), draw(ns)), HostWork(draw(ns)), Allocate(dx[0], addr=dx[1]),
                HostWork(draw(ns)), Launch(7, _BN_BW, draw(ns), draw(ns)), HostWork(draw(ns)), Allocate(-dy[0], addr=dy[1]),
                HostWork(draw(ns)), Launch(7, _GEMM, draw(ns), draw(ns))]
        keep.append(dx)
    ops += [HostWork(draw(ns)), StreamSync(7, 1_000), *[Allocate(-b, addr=a) for b, a in keep], RangeEnd()]
    return Program([Thread(ops)], launch_latency_ns=5_000, gpu_gap_ns=1_000)


def _reconbn_program(prog: Program) -> Program:
    """The restructured program (reconbn with both factors 1/2): BN kernels half as long; each ReLU
    kernel, its launch call and the host work since the call before it gone; the tensor between a
    BN and its ReLU (the BN's output under a non-inplace ReLU, the ReLU backward's output) never
    allocated; other allocations of a removed ReLU's host work made where it was: before the BN
    forward's call (the fused kernel writes the ReLU's output), or right after the surviving call
    before the removed ReLU backward."""
    from daydream.testing.emulator.generators import _RELU, _RELU_BWD as _RELU_BW
    ops = list(prog.threads[0].ops)
    calls = [k for k, op in enumerate(ops) if isinstance(op, (Launch, StreamSync))]
    relus = {k for k in calls if getattr(ops[k], "kernel_name", "") in (_RELU, _RELU_BW)}
    alloc_at, freed_at = {}, {}
    for k, op in enumerate(ops):
        if isinstance(op, Allocate):
            (alloc_at if op.delta_bytes > 0 else freed_at)[op.addr] = k
    nxt = {c: min((d for d in calls if d > c), default=len(ops)) for c in calls}
    prv = {c: max((d for d in calls if d < c), default=-1) for c in calls}
    mid, moved_fw, moved_bw, drop = set(), {}, {}, set()
    for c in calls:
        name = getattr(ops[c], "kernel_name", "")
        if name == _RELU:
            bn = prv[c]
            drop.update(range(bn + 1, c + 1))  # the ReLU's call and its host work since the BN call
            mid |= {a for a, k in alloc_at.items() if prv[bn] < k < bn and freed_at.get(a, 0) < nxt[c]}  # the BN's output, freed by the pair
            moved_fw[bn] = [ops[k] for k in range(bn + 1, c) if isinstance(ops[k], Allocate)]
        elif name == _RELU_BW:
            bn = nxt[c]
            drop.update(range(prv[c] + 1, c + 1))
            mid |= {a for a, k in alloc_at.items() if prv[c] < k < c and freed_at.get(a, 0) < nxt[bn]}  # the ReLU backward's output
            kept = max((d for d in calls if d < c and d not in relus), default=-1)  # the surviving call before
            moved_bw.setdefault(kept, []).extend(ops[k] for k in range(prv[c] + 1, c) if isinstance(ops[k], Allocate))
    out = []
    for k, op in enumerate(ops):
        if k in moved_fw:
            out += [o for o in moved_fw[k] if o.addr not in mid]
        if isinstance(op, (RangeBegin, RangeEnd)):
            drop.discard(k)  # ranges stay where they were
        if k not in drop and not (isinstance(op, Allocate) and op.addr in mid):
            if getattr(op, "kernel_name", "") in (_BN_FW, _BN_BW):
                op = dataclasses.replace(op, kernel_dur_ns=op.kernel_dur_ns // 2)
            out.append(op)
        if k in moved_bw:
            out += [o for o in moved_bw[k] if o.addr not in mid]
    t0 = dataclasses.replace(prog.threads[0], ops=tuple(out))
    return dataclasses.replace(prog, threads=(t0,))


@pytest.mark.slow
@PROPS
@given(_bn_programs())
def test_reconbn_memory_equals_the_emulator(prog):
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g = _graph(run, mapped=True)
    g2, applied = apply_all(g, [resolve_opt("reconbn:fw_factor=0.5,bw_factor=0.5")])
    changed = emulate(_reconbn_program(prog))
    tl2 = simulate(g2)
    _note_change(g, g2, tl2)
    assert _peaks(g2, tl2) == memory_peaks(changed, (STEP,))
    assert _curves(g2, tl2) == emulated_curves(changed)


def test_fused_adam_moves_lazily_made_state_to_the_fused_launch():
    """Bug found by the property: state allocated in the second parameter's host work (removed with
    its launch call) was re-anchored to the call after the step at its recorded distance, counting
    the removed work (here: before the program began). Now it is made right before the fused launch."""
    ops = [RangeBegin(STEP), RangeBegin("Optimizer.step#Adam.step")]
    for k in range(2):
        ops += [HostWork(500), *([Allocate(2048), HostWork(4_000)] if k else []), Allocate(512, addr=_TMP + 4096 * k), HostWork(500),
                Launch(7, _EW, 500, 500), HostWork(500), Allocate(-512, addr=_TMP + 4096 * k)]
    ops += [RangeEnd(), HostWork(3_000), StreamSync(7, 1_000), RangeEnd()]
    prog = Program([Thread(ops)], launch_latency_ns=5_000, gpu_gap_ns=1_000)
    g = _graph(emulate(prog))
    g2, _ = apply_all(g, [resolve_opt(f"fused-adam:launch_ns={_LAUNCH_NS}")])
    got = _curves(g2, simulate(g2))
    assert got == emulated_curves(emulate(_fused_adam_program(prog)))
    assert [t - prog.t0_ns for t in got[0][0]] == [1_000] and got[0][1] == [2048]


def test_remove_syncs_reorders_allocations_across_threads_and_raises_the_peak():
    """The peak may change by reordering alone: thread 0 allocates A after a value read that waits
    for a long kernel; thread 1 holds B during that wait. Deferred, A is allocated while B is alive:
    the predicted peak is A + B, as the emulator's run of the deferred program says."""
    a, b = 3 << 20, 2 << 20
    t0 = [RangeBegin(STEP), Launch(7, _GEMM, 200_000, 2_000), RangeBegin("aten::item", "cpu_op"),
          RangeBegin("aten::_local_scalar_dense", "cpu_op"), MemcpyAsync(7, "DtoH", 4, 1_000, 1_000), StreamSync(7, 1_000),
          RangeEnd(), RangeEnd(), HostWork(1_000), Allocate(a), OtherCall("cudaGetDevice", 1_000, cbid=17), HostWork(1_000),
          Allocate(-a), OtherCall("cudaGetDevice", 1_000, cbid=17), RangeEnd()]
    t1 = [HostWork(1_000), Allocate(b), OtherCall("cudaGetDevice", 1_000, cbid=17), HostWork(100_000), Allocate(-b),
          OtherCall("cudaGetDevice", 1_000, cbid=17)]
    prog = Program([Thread(t0), Thread(t1, tid=5001, name="worker_1")], launch_latency_ns=5_000, gpu_gap_ns=1_000)
    run = emulate(prog)
    g = _graph(run, mapped=True)
    g2, _ = apply_all(g, [resolve_opt("remove-syncs")])
    changed = emulate(_deferred_reads(prog))
    assert _peaks(g, simulate(g))[0][0] == max(a, b)
    assert _peaks(g2, simulate(g2)) == memory_peaks(changed, (STEP,)) and memory_peaks(changed)[0][0] == a + b


def test_an_event_a_what_if_placed_keeps_its_place_under_scaled_host_time():
    """reconbn moves what a removed ReLU backward's host work allocated to the start of the host
    work before the BN backward's call; a later scale-cpu must scale that placement, not recompute
    a distance from the event's recorded time (which counted the removed ReLU call)."""
    from daydream.testing.emulator.generators import _RELU, _RELU_BWD
    ops = [RangeBegin(STEP), HostWork(1_000), Launch(7, _GEMM, 4_000, 2_000), HostWork(1_000), Allocate(4096, addr=_MID),
           HostWork(1_000), Launch(7, _BN_FW, 4_000, 2_000), Launch(7, _RELU, 2_000, 2_000), RangeBegin("hot_region"),
           HostWork(2_000), Allocate(8192, addr=_MID + 4096), Allocate(1024, addr=_MID + 8192), HostWork(2_000),
           Launch(7, _RELU_BWD, 2_000, 2_000), HostWork(1_000), Allocate(2048, addr=_MID + 12288), HostWork(1_000),
           Launch(7, _BN_BW, 4_000, 2_000), HostWork(1_000), Allocate(-8192, addr=_MID + 4096), HostWork(1_000),
           Launch(7, _GEMM, 4_000, 2_000), RangeEnd(), HostWork(1_000), StreamSync(7, 1_000),
           *[Allocate(-b, addr=a) for b, a in ((4096, _MID), (1024, _MID + 8192), (2048, _MID + 12288))], RangeEnd()]
    prog = Program([Thread(ops)], launch_latency_ns=5_000, gpu_gap_ns=1_000)
    g = _graph(emulate(prog), mapped=True)
    g2, _ = apply_all(g, [resolve_opt("reconbn:fw_factor=0.5,bw_factor=0.5"), resolve_opt("scale-cpu:range=^hot_region$,factor=2")])
    changed = emulate(_scaled_region(_reconbn_program(prog), 2))
    assert _curves(g2, simulate(g2)) == emulated_curves(changed)
