"""amp's memory rules (daydream/optimizations/amp_memory.py) against the emulator: the activations
of the ops autocast runs in 16-bit are halved, the others kept; the predicted peaks equal the
emulator's run of the program with those activations halved."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import pytest

from daydream.formats import load_trace
from daydream.graph import build_graph
from daydream.mapping import map_events
from daydream.optimizations.amp import AUTOCAST_LOW_OPS
from daydream.optimizations.amp_memory import amp_memory, weight_copies
from daydream.simulate import simulate
from daydream.simulate.memory_replay import replay_memory
from daydream.testing.emulator import emulate, memory_peaks, to_kineto
from daydream.testing.emulator.layered import LayeredStep, LayerOp


def _graph(run):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.json"
        to_kineto(run, str(p))
        t = load_trace(str(p))
        return build_graph(t, map_events(t))


def _op(act):
    return LayerOp(7, 1_000, 2_000, 10_000, 1_000, 2_000, 20_000, act, 512)


def test_activations_of_16_bit_ops_halve_the_others_stay():
    ops = ("mm", "relu", "bmm")
    step = LayeredStep(tuple((_op(4097), _op(8192), _op(12_288)) for _ in range(3)), (1024, 1024, 1024), 7, (), ops)
    g = _graph(emulate(step.program()))
    g2, note = amp_memory(g, g, "amp", AUTOCAST_LOW_OPS)
    # 6 op activations and the outputs of layers 0 and 1 (made by bmm, freed in the backward); layer 2's output is
    # freed after the step's final synchronize (phase other): not an activation
    assert "8 activations of 16-bit ops halved" in note and "weight copies not counted" in note
    halved = dataclasses.replace(step, layers=tuple(tuple(dataclasses.replace(op, act_bytes=-(-op.act_bytes // 2))
                                                          if ops[j] in ("mm", "bmm") else op for j, op in enumerate(layer))
                                                    for layer in step.layers), out_bytes=(512, 512, 1024))
    want = memory_peaks(emulate(halved.program()), ("ProfilerStep#1",))
    got = {dm.device: (dm.peak_allocated_bytes, [s.allocated_bytes for s in dm.steps]) for dm in replay_memory(g2, simulate(g2))}
    assert got == want
    base = {dm.device: dm.peak_allocated_bytes for dm in replay_memory(g, simulate(g))}
    assert got[0][0] < base[0]


def test_nothing_16_bit_nothing_changes():
    step = LayeredStep(tuple((_op(4096),) for _ in range(2)), (1024, 1024), 7, (), ("relu",))
    g = _graph(emulate(step.program()))
    g2, note = amp_memory(g, g, "amp", AUTOCAST_LOW_OPS)
    assert g2.memory is g.memory and "no 16-bit activation" in note


def _resnet50_weight_elements() -> int:
    """Weight elements of torchvision's ResNet-50 convolutions and fc layer (the ops autocast casts),
    from its architecture (He et al. 2016, table 1; torchvision's Bottleneck, expansion 4)."""
    tot, inp = 3 * 64 * 7 * 7, 64
    for w, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for i in range(blocks):
            tot += inp * w + w * w * 9 + w * w * 4 + (inp * w * 4 if i == 0 else 0)
            inp = w * 4
    return tot + 2048 * 1000


@pytest.mark.slow
def test_resnet50_weight_copies_are_half_the_fp32_weights_each_step():
    path = Path(__file__).parent.parent.parent / "shared" / "traces" / "kineto_tbplugin" / \
        "resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"
    if not path.exists():
        pytest.skip("shared trace not present")
    t = load_trace(str(path))
    g = build_graph(t, map_events(t))
    calls, nbytes = weight_copies(g, AUTOCAST_LOW_OPS)
    steps = len(g.facts.steps)
    assert steps == 6 and len(calls) == 54 * steps  # 53 convolutions and the fc layer per step
    assert int(nbytes.sum()) == steps * 2 * _resnet50_weight_elements()  # 2 B per element, 25,502,912 elements
