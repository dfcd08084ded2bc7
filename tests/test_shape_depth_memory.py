"""Memory at a new depth (``layers``) and a new problem size (``problem-size``):
daydream/optimizations/shape_depth_memory.py; docs/memory.md, "layers" and "problem-size". The
judge is the emulator's run of the deepened program with its allocations
(daydream/testing/emulator/shaped.py, ``ShapedSpec.memory``: the backward is unlabelled, as the
autograd engine records it, so the block's backward is inferred)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_shape import _roles_distinct
from test_shape_memory import _apply, _graph, _peaks, _want

from daydream.testing.emulator import emulate, memory_peaks
from daydream.testing.emulator.ops import RangeBegin, RangeEnd
from daydream.testing.emulator.shaped import ShapedSpec, shaped_program, shaped_specs


def _mapped_backward(prog, spec: ShapedSpec, layers: int = 1):
    """``prog`` (a shaped program with memory) with each layer's backward ops inside its module's
    range (``nn.Module: Block_i``, as an NVTX- or record_function-annotated backward is): the
    backward mapped to the layers."""
    th = prog.threads[0]
    ops = list(th.ops)
    k, n = len(spec.block), spec.layers * layers
    starts = [i - 1 for i, o in enumerate(ops) if isinstance(o, RangeBegin) and o.name.startswith("autograd::")]
    ends = []
    for s in starts:  # each backward op: its host work, then its range
        depth = 0
        for j in range(s + 1, len(ops)):
            depth += isinstance(ops[j], RangeBegin) - isinstance(ops[j], RangeEnd)
            if depth == 0:
                ends.append(j)
                break
    out, prev = [], 0
    for q in range(n):  # the backward runs the layers in reverse
        a, b = starts[q * k], ends[q * k + k - 1]
        out += ops[prev:a] + [RangeBegin(f"nn.Module: Block_{n - 1 - q}", "python_function"), *ops[a:b + 1], RangeEnd()]
        prev = b + 1
    return dataclasses.replace(prog, threads=[dataclasses.replace(th, ops=out + ops[prev:])])


def test_a_new_depth_predicts_the_peak_of_the_deepened_program():
    """layers x2 on a 2-layer step (layer norm, linear): the peak is the emulator's run of the
    4-layer program; the note says what was copied, inferred and scaled."""
    spec = ShapedSpec(2, 64, 128, 2, ("ln", "linear"), 2, memory=True)
    g, _ = _graph(shaped_program(spec))
    g2, note = _apply(g, "layers:factor=2")
    assert g2.memory is not None and "2 allocator events of the block copied with each of its 2 copies" in note, note
    assert "inferred" in note and "x2 (the block's share of the GEMM weights 1)" in note, note
    assert _peaks(g2) == _want(spec, layers=2)
    assert _peaks(g2) != _peaks(g)  # (the property below cannot pass by leaving the events alone)
    # the copies' events are anchored to the copied calls: tasks of their own (rows below -1), each
    # launching the kernel its original's call launched
    import numpy as np

    m = g2.memory
    copied = np.flatnonzero(m.anchor_row < -1)
    assert len(copied) == 2 * 2  # 2 copies x the block's 2 activations
    node_of = {int(r): v for v, r in enumerate(g2.row.tolist()) if r < -1}
    launched = {int(c): v for v, c in enumerate(g2.launch.tolist()) if c >= 0}
    got = sorted(g2.names[g2.name_id[launched[node_of[int(r)]]]] for r in m.anchor_row[copied])
    ln = "void at::native::vectorized_layer_norm_kernel<float, float>"
    assert got == ["ampere_sgemm_128x64_tn", "ampere_sgemm_128x64_tn", ln, ln], got
    assert all(node_of[int(r)] >= g.n for r in m.anchor_row[copied])


def test_the_copies_activations_are_freed_in_the_backward_before_the_optimizers_peak():
    """A wide, short step (H 1024, 16 tokens): the peak is Adam's moments on top of the parameters;
    the copies' activations are freed at the backward's start, so they are not part of it (held to
    the step's end they would add 2 x 2 x 64 KiB)."""
    spec = ShapedSpec(1, 16, 1024, 8, ("ln",), 2, memory=True)
    g, _ = _graph(shaped_program(spec))
    g2, note = _apply(g, "layers:factor=3")
    assert "1 of its blocks kept for a backward not mapped to the layers" in note, note
    want = _want(spec, layers=3)
    assert _peaks(g2) == want and want[0][0] == 3 * _peaks(g)[0][0]


def test_without_gemm_weights_the_whole_model_is_the_block_and_said():
    spec = ShapedSpec(2, 64, 128, 2, ("ln", "softmax"), 2, memory=True)
    g, _ = _graph(shaped_program(spec))
    g2, note = _apply(g, "layers:factor=3")
    assert "no GEMM weight recorded: the whole model taken to be the repeated block, an assumption" in note, note
    assert _peaks(g2) == _want(spec, layers=3)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(shaped_specs(min_layers=2).map(lambda s: dataclasses.replace(s, memory=True)), st.sampled_from([2, 3, 4]))
def test_predicted_peaks_equal_the_emulators_run_of_the_deepened_program(spec, n):
    """Every device's peak and the step's peak, predicted from the trace of the layered program
    with allocations at depth xn, equal the emulator's run of the program with n times the layers."""
    assume(any(k in spec.block for k in ("ln", "add", "gelu", "softmax", "sdpa")))  # an activation names the roles
    g, _ = _graph(shaped_program(spec))
    g2, note = _apply(g, f"shape:layers={n}")
    assert "memory at the new depth" in note, note
    assert _peaks(g2) == _want(spec, layers=n)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(shaped_specs(min_layers=2).map(lambda s: dataclasses.replace(s, memory=True)), st.sampled_from([2, 3, 4]))
def test_a_backward_mapped_to_the_layers_is_copied_with_the_block(spec, n):
    """The backward inside the layers' ranges: the block's backward events are copied with it (none
    inferred), the copies' backward before the block's; the peaks equal the emulator's run of the
    deepened program (its backward mapped the same way)."""
    assume(any(k in spec.block for k in ("ln", "add", "gelu", "softmax", "sdpa")))
    g, _ = _graph(_mapped_backward(shaped_program(spec), spec))
    g2, note = _apply(g, f"shape:layers={n}")
    assert "in a backward mapped to the layers" in note and "inferred: the backward's first events" not in note, note
    want = memory_peaks(emulate(_mapped_backward(shaped_program(spec, layers=n), spec, n)), ("ProfilerStep#1",))
    assert _peaks(g2) == want


@pytest.mark.slow
@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(shaped_specs(min_layers=2).map(lambda s: dataclasses.replace(s, memory=True)), st.sampled_from([2, 3]),
       st.sampled_from([0.5, 2]))
def test_depth_and_batch_together_equal_the_emulator(spec, n, fb):
    """layers and batch at once: the blocks resized by their tensors (shape_memory), then copied."""
    assume(spec.B * fb == int(spec.B * fb) and spec.B * fb >= 1)
    assume(_roles_distinct(spec, {"batch": fb, "seq": 1, "hidden": 1}))
    assume(any(k in spec.block for k in ("ln", "add", "gelu", "softmax", "sdpa")))
    g, _ = _graph(shaped_program(spec))
    g2, note = _apply(g, f"shape:layers={n},batch={fb}")
    assume("two roles" not in note)
    assert _peaks(g2) == _want(spec, layers=n, batch=fb)


def test_problem_size_scales_activations_and_keeps_the_model_state():
    """problem-size x2 (no shapes used): the activations (forward to backward) double, the
    parameters, gradients and Adam's moments stay (the data, not the model). The emulator's run at
    batch x2 allocates exactly that: its peak is the prediction's."""
    spec = ShapedSpec(4, 128, 128, 2, ("ln", "linear", "gelu"), 2, memory=True)
    g, _ = _graph(shaped_program(spec))
    g2, note = _apply(g, "problem-size:factor=2")
    assert g2.memory is not None and "6 activation blocks (forward to backward)" in note, note
    assert "model-state blocks and the level before the window kept (a problem size is the data, not the model)" in note
    old, new = g.memory.events.bytes, g2.memory.events.bytes
    assert sorted(new[new > 0].tolist()) != sorted(old[old > 0].tolist())
    assert _peaks(g2) == _want(spec, batch=2)
    assert int(new.sum()) == int(old.sum())  # every scaled block is freed with its new size


def test_problem_size_keeps_blocks_whose_free_cannot_be_paired():
    """Without addresses (PyTorch 1.8: the ResNet-50 trace) a block's free cannot be told: scaling
    the allocation alone would leak its growth (the ResNet-50 step's peak went x8.6 before this
    rule). Such blocks are kept and counted."""
    from daydream.testing.emulator.ops import Allocate

    spec = ShapedSpec(4, 128, 128, 2, ("ln", "linear", "gelu"), 2, memory=True)
    prog = shaped_program(spec)
    th = prog.threads[0]
    ops = [dataclasses.replace(o, addr=None) if isinstance(o, Allocate) else o for o in th.ops]
    g, _ = _graph(dataclasses.replace(prog, threads=[dataclasses.replace(th, ops=ops)]))
    g2, note = _apply(g, "problem-size:factor=2")
    assert "6 blocks of the forward and backward without a free paired by address kept" in note, note
    assert g2.memory.events.bytes.tolist() == g.memory.events.bytes.tolist()


BERT = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "tracelens" / "h100_gaunernst_bert-small-uncased__1016001.json.gz"


@pytest.mark.slow
@pytest.mark.skipif(not BERT.exists(), reason="shared trace not present")
def test_on_the_h100_bert_trace_factor_one_is_the_identity_and_depth_adds_the_copies():
    """problem-size:factor=1 keeps every block and total; layers:factor=2 keeps a memory verdict
    whose peak grows (an inference-only trace: no
    backward, so nothing inferred there), its model state by the block's GEMM share (said)."""
    import numpy as np

    from daydream.formats import load_trace
    from daydream.graph import build_graph
    from daydream.mapping import map_events

    t = load_trace(str(BERT))
    g = build_graph(t, map_events(t))
    g1, note = _apply(g, "problem-size:factor=1")
    assert np.array_equal(g1.memory.events.bytes, g.memory.events.bytes) and "memory at problem size x1" in note
    g2, note = _apply(g, "layers:factor=2")
    assert g2.memory is not None and "the block's share of the GEMM weights" in note, note
    assert "inferred: the backward's first events" not in note
    assert _peaks(g2)[0][0] > _peaks(g)[0][0]
