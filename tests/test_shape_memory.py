"""Memory under a new shape (daydream/optimizations/shape_memory.py; docs/memory.md, "shape";
docs/scaling.md, "Memory"): the judge is the emulator's run of the reshaped program with its
allocations (daydream/testing/emulator/shaped.py, ``ShapedSpec.memory``)."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_shape import _roles_distinct

from daydream.errors import NotApplicable
from daydream.formats import load_trace
from daydream.graph import build_graph
from daydream.mapping import map_events
from daydream.optimizations import parse_spec
from daydream.optimizations import shape_memory as SM
from daydream.simulate import simulate
from daydream.simulate.memory_replay import replay_memory
from daydream.testing.emulator import emulate, memory_peaks, to_kineto
from daydream.testing.emulator.ops import Allocate, Launch, OtherCall, RangeBegin
from daydream.testing.emulator.shaped import (
    GPU,
    ShapedSpec,
    block_bytes,
    shaped_program,
    shaped_specs,
)

CAPACITY = 85899345920  # the emulator's device (kineto_writer: totalGlobalMem)


def _graph(prog):
    run = emulate(prog)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.json"
        to_kineto(run, str(p))
        t = load_trace(str(p))
        return build_graph(t, map_events(t)), run


def _apply(g, spec):
    opt, p = parse_spec(spec + f",gpu={GPU}")
    return opt.apply(g, p)


def _peaks(g):
    return {dm.device: (dm.peak_allocated_bytes, [s.allocated_bytes for s in dm.steps]) for dm in replay_memory(g, simulate(g))}


def _want(spec, **f):
    return memory_peaks(emulate(shaped_program(spec, **f)), ("ProfilerStep#1",))


def test_allocator_blocks_are_512_byte_multiples():
    assert SM.block_bytes([1, 512, 513, 0]).tolist() == [512, 512, 1024, 512]
    assert block_bytes(1) == 512 and block_bytes(1025) == 1536


def test_each_block_takes_its_own_tensors_new_size():
    """seq x2: the layer norm's output [B, S, H] doubles, the unfused attention's scores
    [B, nh, S, S] (softmax, bmm Q·Kᵀ) quadruple, the parameters, gradients and Adam's moments stay:
    each block by its own tensor, none by the step factor."""
    spec = ShapedSpec(3, 100, 128, 2, ("ln", "softmax"), 1, memory=True)
    g, _ = _graph(shaped_program(spec))
    g2, note = _apply(g, "shape:seq=2")
    assert "2 blocks by their op's tensors" in note and "0 blocks by the step factor" in note, note
    old, new = g.memory.events.bytes, g2.memory.events.bytes
    allocs = old > 0
    ln, sm = block_bytes(4 * 3 * 100 * 128), block_bytes(4 * 3 * 2 * 100 * 100)
    assert sorted(old[allocs].tolist()) == sorted([4 * 12 * 128 * 128, ln, sm, 8 * 12 * 128 * 128])
    assert sorted(new[allocs].tolist()) == sorted([4 * 12 * 128 * 128, block_bytes(4 * 3 * 200 * 128),
                                                   block_bytes(4 * 3 * 2 * 200 * 200), 8 * 12 * 128 * 128])
    assert _peaks(g2) == _want(spec, seq=2)


def test_model_state_scales_with_hidden_squared_and_the_level_before_with_it():
    """hidden x2: parameters, gradients and Adam's moments x4, and so does a block allocated before
    the trace (its free here; the level before the window): an assumption, said in the note."""
    spec = ShapedSpec(3, 100, 128, 2, ("ln", "linear"), 1, memory=True)
    pre = 1 << 20

    def with_old_block(prog, b):
        th = prog.threads[0]
        return dataclasses.replace(prog, threads=[dataclasses.replace(th, ops=[Allocate(-b, addr=0x1000)] + list(th.ops))])

    g, _ = _graph(with_old_block(shaped_program(spec), pre))
    g2, note = _apply(g, "shape:hidden=2")
    assert "hidden^2 x layers" in note and "before the trace: an assumption" in note
    want = memory_peaks(emulate(with_old_block(shaped_program(spec, hidden=2), 4 * pre)), ("ProfilerStep#1",))
    assert _peaks(g2) == want


@pytest.mark.slow
@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(shaped_specs().map(lambda s: dataclasses.replace(s, memory=True)), st.sampled_from([0.5, 1, 2, 3, 4]),
       st.sampled_from([0.25, 0.5, 1, 2, 4]), st.sampled_from([0.5, 1, 2, 3]))
def test_predicted_peaks_equal_the_emulators_run_of_the_reshaped_program(spec, fb, fs, fh):
    """Every device's peak and the step's peak, predicted from the trace of the program with
    allocations, equal the emulator's run of the program at the new batch, sequence and width."""
    assume(spec.B * fb == int(spec.B * fb) and spec.B * fb >= 1)
    assume(spec.S * fs == int(spec.S * fs) and spec.S * fs >= 2)
    assume(spec.heads * fh == int(spec.heads * fh) and spec.heads * fh >= 1)
    f = {"batch": fb, "seq": fs, "hidden": fh}
    assume(_roles_distinct(spec, f))
    assume(any(k in spec.block for k in ("ln", "add", "gelu", "softmax", "sdpa")))  # an activation names the batch
    g, _ = _graph(shaped_program(spec))
    g2, note = _apply(g, f"shape:batch={fb},seq={fs},hidden={fh}")
    assume("two roles" not in note)  # the shapes cannot tell: kept and said (tests/test_shape.py)
    assert "0 blocks by the step factor" in note and "0 kept (workspaces" in note, note  # every activation by its own tensor
    assert _peaks(g2) == _want(spec, **f)


def test_a_new_depth_keeps_the_memory_verdict():
    """(It used to drop it; the depth's rules and their emulator property: tests/test_shape_depth_memory.py.)"""
    spec = ShapedSpec(2, 64, 128, 2, ("ln", "linear"), 2, memory=True)
    g, _ = _graph(shaped_program(spec))
    g2, note = _apply(g, "shape:layers=2")
    assert g2.memory is not None and "memory at the new depth" in note and _peaks(g2) == _want(spec, layers=2)


def test_batch_fit_answers_the_largest_batch_that_fits():
    """batch:fit=true: the largest batch whose predicted peak x the margin (1.00: the emulator's
    reserve is its high-water mark) fits the 80 GiB device; the emulator's run of the program at
    that batch fits, one more sample does not."""
    spec = ShapedSpec(8, 512, 1024, 8, ("softmax", "bmm_qk", "gelu", "linear4"), 3, memory=True)
    g, _ = _graph(shaped_program(spec))
    g2, note = _apply(g, "batch:fit=true")
    b = int(note.split("the largest batch that fits is ")[1].split(" ")[0])
    assert f"x{b / 8:g} of the traced 8" in note and "to spare" in note and f"{b + 1} would need" in note
    assert _want(spec, batch=b / 8)[0][0] <= CAPACITY < _want(spec, batch=(b + 1) / 8)[0][0]
    assert _peaks(g2)[0][0] == _want(spec, batch=b / 8)[0][0]


def test_batch_fit_needs_the_allocators_events():
    spec = ShapedSpec(2, 64, 128, 2, ("ln", "linear"), 1)
    g, _ = _graph(shaped_program(spec))
    with pytest.raises(NotApplicable, match="profile_memory"):
        _apply(g, "batch:fit=true")


def _with_workspace(prog, ws: int):
    """Each layer norm's op: a device query between its output's allocation and its launch, and a
    workspace of ``ws`` bytes allocated before its launch and freed after it (cuBLASLt's, say)."""
    th = prog.threads[0]
    ops, in_ln = [], False
    for op in th.ops:
        if isinstance(op, RangeBegin) and op.name == "aten::native_layer_norm":
            in_ln = True
        if in_ln and isinstance(op, Launch):
            ops += [OtherCall("cudaDeviceGetAttribute", 500), Allocate(ws, addr=0x2000), op, Allocate(-ws, addr=0x2000)]
            in_ln = False
            continue
        ops.append(op)
    return dataclasses.replace(prog, threads=[dataclasses.replace(th, ops=ops)])


def test_a_block_is_its_next_launchs_op_and_a_workspace_is_kept():
    """The output allocated before a call that launches nothing (a device query) is the next
    launch's op's (found on the H100 BERT trace: 64 of 109 blocks were anchored to such calls); a
    block of no tensor's size freed within its op (a 1 MiB workspace) keeps its size."""
    spec = ShapedSpec(3, 100, 128, 2, ("ln", "softmax"), 1, memory=True)
    g, _ = _graph(_with_workspace(shaped_program(spec), 1 << 20))
    g2, note = _apply(g, "shape:batch=2")
    assert "2 blocks by their op's tensors" in note and "0 blocks by the step factor" in note, note
    assert "1 kept (workspaces" in note
    want = memory_peaks(emulate(_with_workspace(shaped_program(spec, batch=2), 1 << 20)), ("ProfilerStep#1",))
    assert _peaks(g2) == want


def test_batch_fit_refuses_a_new_depth_and_takes_true_or_false():
    from daydream.errors import UsageError

    spec = ShapedSpec(2, 64, 128, 2, ("ln", "linear"), 2, memory=True)
    g, _ = _graph(shaped_program(spec))
    with pytest.raises(NotApplicable, match="new depth"):
        _apply(g, "shape:fit=true,layers=2")
    with pytest.raises(UsageError, match="true/false"):
        parse_spec("batch:fit=maybe")
    assert parse_spec("batch:fit=no")[1]["fit"] is False and parse_spec("shape:fit=1")[1]["fit"] is True
