"""activation-checkpointing against the emulator: the trace of a layered training step (layers as
``nn.Module`` ranges, the backward unlabelled as autograd records it) is checkpointed by the
what-if, and its predicted step time and memory peaks must equal the emulator's run of the
checkpointed program (``daydream.testing.emulator.layered``)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from daydream.errors import NotApplicable
from daydream.formats import load_trace
from daydream.graph import build_graph
from daydream.mapping import map_events
from daydream.optimizations import parse_spec
from daydream.optimizations.activation_checkpointing import unit_paths
from daydream.report.memory_fit import memory_summary
from daydream.simulate import simulate
from daydream.simulate.memory_replay import replay_memory
from daydream.testing.emulator import (
    emulate,
    measure_latencies,
    memory_peaks,
    to_kineto,
)
from daydream.testing.emulator.layered import LayeredStep, LayerOp, layered_steps

STEP = "ProfilerStep#1"


def _graph(run, totals=True):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.json"
        to_kineto(run, str(p), memory_totals=totals)
        t = load_trace(str(p))
        return build_graph(t, map_events(t))


def _apply(g, spec="activation-checkpointing"):
    opt, params = parse_spec(spec)
    return opt.apply(g, params)


def _end(run) -> int:
    return max([c.end_ns for c in run.calls] + [t.end_ns for t in run.tasks])


def _check(step: LayeredStep, chosen: frozenset, spec: str) -> None:
    run = emulate(step.program())
    g = _graph(run)
    g2, note = _apply(g, spec)
    changed = emulate(step.program(chosen))
    tl = simulate(g2)
    assert int(tl.end_ns.max()) == _end(changed), note
    gpu = g2.node_kind != 0  # every GPU task (the recomputed ones included) at the emulator's times
    assert sorted(zip(g2.node_names()[gpu].tolist(), tl.start_ns[gpu].tolist(), tl.end_ns[gpu].tolist())) == sorted(
        (t.name, t.start_ns, t.end_ns) for t in changed.tasks), note
    # every allocator event at the emulator's time, the curve in the allocator's order
    for dm in replay_memory(g2, tl):
        assert sorted(dm.ts_ns.tolist()) == [a.ts_ns for a in changed.allocs if a.device == dm.device], note
    pred = {dm.device: (dm.peak_allocated_bytes, [s.allocated_bytes for s in dm.steps]) for dm in replay_memory(g2, tl)}
    assert pred == memory_peaks(changed, (STEP,)), note


def _op(stream=7, k=10_000, act=4096, tmp=512):
    return LayerOp(stream, 1_000, 2_000, k, 1_500, 2_000, 2 * k, act, tmp)


HAND = LayeredStep(((_op(), _op(8, 20_000, 8192, 0)), (_op(), _op(8, 20_000, 8192, 0)), (_op(), _op(8, 20_000, 8192, 0))),
                   (1024, 1024, 1024), 7, (3_000, 0, 5_000))


def test_hand_example_every_block_lowers_the_peak_and_costs_the_forward_again():
    run = emulate(HAND.program())
    g = _graph(run)
    base = replay_memory(g, simulate(g))[0].peak_allocated_bytes
    _check(HAND, frozenset({0, 1, 2}), "activation-checkpointing")
    changed = emulate(HAND.program(frozenset({0, 1, 2})))
    assert memory_peaks(changed)[0][0] < base  # the what-if's point
    # the changed program's reserve is not recorded: its verdict keeps the recorded margin
    g2, _ = _apply(g)
    before, after = memory_summary(g, simulate(g)).devices[0], memory_summary(g2, simulate(g2)).devices[0]
    assert after.fragmentation == before.fragmentation and after.fragmentation_source.endswith("of the recorded program)")
    assert after.peak_reserved_bytes == -1 and before.peak_reserved_bytes > 0
    assert _end(changed) > _end(run)


def test_layers_regex_picks_the_blocks():
    _check(HAND, frozenset({1}), "activation-checkpointing:layers=Block_1")


def test_unit_paths_outermost_repeated_blocks_or_regex():
    labels = ["Net_0/Enc_0/Layer_0/Linear_0", "Net_0/Enc_0/Layer_0/Linear_1", "Net_0/Enc_0/Layer_1/Linear_0", "Net_0/Head_0"]
    assert unit_paths(labels, {0, 1, 2, 3}, None) == ["Net_0/Enc_0/Layer_0", "Net_0/Enc_0/Layer_1"]
    assert unit_paths(labels, {0, 1, 2, 3}, r"Linear_1$") == ["Net_0/Enc_0/Layer_0/Linear_1"]
    assert unit_paths(labels, {3}, None) == []


def test_not_applicable_without_repeated_blocks_or_a_match():
    one = LayeredStep(((_op(),),), (1024,))
    g = _graph(emulate(one.program()))
    with pytest.raises(NotApplicable, match="no repeated block"):
        _apply(g)
    with pytest.raises(NotApplicable, match="no layer path matches"):
        _apply(_graph(emulate(HAND.program())), "activation-checkpointing:layers=Nothing")


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
          phases=[Phase.explicit, Phase.reuse, Phase.generate])
@given(layered_steps(), st.data())
def test_predicted_time_and_peaks_equal_the_emulated_checkpointed_program(step, data):
    run = emulate(step.program())
    assume(measure_latencies(run) == (5_000, 1_000))
    n = len(step.layers)
    some = data.draw(st.sets(st.integers(0, n - 1), min_size=1))
    if data.draw(st.booleans()):
        _check(step, frozenset(range(n)), "activation-checkpointing")
    else:
        _check(step, frozenset(some), "activation-checkpointing:layers=Block_(" + "|".join(map(str, sorted(some))) + ")$")


def test_fixture_backward_matched_by_op_order_in_reverse():
    """fixtures/train_step.json.gz: 3 steps of Linear_k / ReLU_k (k = 0..3) whose backward is
    unlabelled; op order matches each instance to its own backward, the last layer's first."""
    from daydream.optimizations.activation_checkpointing import find_instances

    t = load_trace(str(Path(__file__).parent.parent / "fixtures" / "train_step.json.gz"))
    g = build_graph(t, map_events(t))
    insts, units, skipped = find_instances(g, None)
    assert units == [f"Net_0/{c}_{k}" for c in ("Linear", "ReLU") for k in range(4)]
    assert len(insts) == 24 and not skipped
    by_step: dict = {}
    for i in insts:
        assert i.fwd_span[3] < i.bwd_span[2]  # its backward after its forward
        by_step.setdefault(i.path, []).append(i)
    first = [min(v, key=lambda i: i.fwd_span[2]) for v in by_step.values()]  # step 1
    fwd_order = [i.path for i in sorted(first, key=lambda i: i.fwd_span[2])]
    bwd_order = [i.path for i in sorted(first, key=lambda i: i.bwd_span[2])]
    assert bwd_order == fwd_order[::-1]
    _, note = _apply(g)
    assert "24 layer instance(s)" in note
