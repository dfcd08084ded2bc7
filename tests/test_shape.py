"""Shape what-ifs (daydream/optimizations/shape.py, docs/scaling.md): the rules per op kind, the
roles' inference, and the judge: each what-if's prediction from an emulated shaped program's trace
equals the emulator's run of the program at the new shapes (daydream/testing/emulator/shaped.py)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from daydream.costmodel import find_spec
from daydream.costmodel.kernel_time import floor_ns
from daydream.costmodel.work import parse_tile
from daydream.errors import NotApplicable, UsageError
from daydream.formats import load_trace
from daydream.graph import NODE_CPU, build_graph
from daydream.optimizations import parse_spec
from daydream.optimizations import shape as SH
from daydream.report.memory_fit import memory_summary
from daydream.simulate import simulate
from daydream.simulate.memory_replay import replay_memory
from daydream.testing.emulator import emulate, measure_latencies, to_kineto
from daydream.testing.emulator.shaped import (
    GPU,
    KINDS,
    ShapedSpec,
    kernel_ns,
    kernel_of,
    scaled,
    shaped_program,
    shaped_specs,
)

TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,  # the same examples each run (see below)
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])


def _graph(tmp, prog):
    run = emulate(prog)
    p = tmp / "shaped.json"
    to_kineto(run, str(p))
    return build_graph(load_trace(str(p))), run


def _apply(g, spec):
    opt, p = parse_spec(spec)
    return opt.apply(g, p)


# ----------------------------------------------------------------------------- rules ---------
def test_kernel_rows_follow_cublas_shapes():
    """addmm(b, x[m, k], W[k, n]) is cuBLAS M = n, N = m, K = k; bmm [b, m, k]·[b, k, n] likewise
    with B = b; SDPA's B is batch x heads; row-wise kernels count rows in B."""
    assert SH.kernel_row("aten::addmm", [[3072], [1024, 768], [768, 3072], [], []], ["float"] * 3 + ["Scalar"] * 2) == \
        dict(cls="linear", B=1, M=3072, N=1024, K=768, elems=-1, inputs=1, dtype="fp32")
    assert SH.kernel_row("aten::bmm", [[96, 128, 64], [96, 64, 128]], ["c10::BFloat16"] * 2) == \
        dict(cls="bmm", B=96, M=128, N=128, K=64, elems=-1, inputs=1, dtype="bf16")
    a = SH.kernel_row("aten::_scaled_dot_product_flash_attention", [[8, 12, 512, 64]] * 3, ["c10::Half"] * 3)
    assert (a["cls"], a["B"], a["M"], a["N"], a["K"], a["dtype"]) == ("attention", 96, 512, 512, 64, "fp16")
    s = SH.kernel_row("aten::_softmax", [[8, 12, 512, 512], [], []], ["float", "Scalar", "Scalar"])
    assert (s["cls"], s["B"], s["elems"]) == ("softmax", 8 * 12 * 512, 8 * 12 * 512 * 512)
    e = SH.kernel_row("aten::add", [[8, 512, 768], [8, 512, 768], []], ["float", "float", "Scalar"])
    assert (e["cls"], e["elems"], e["inputs"]) == ("elementwise", 8 * 512 * 768, 2)
    assert SH.kernel_row("aten::addmm", [[3], [4, 5], [6, 7]], ["float"] * 3) is None  # inner dims disagree
    assert SH.kernel_row("aten::relu", None, None) is None


def test_each_kernel_of_the_emulator_matches_the_rule_of_its_op():
    """The emulator's cost input (kernel_of) and the what-if's reading of the recorded shapes
    (kernel_row of dims_of) are the same kernel, for every op kind."""
    from daydream.testing.emulator.shaped import dims_of

    for kind, (op, _) in KINDS.items():
        k = kernel_of(kind, 4, 100, 256, 4, "fp32")
        r = SH.kernel_row(op, dims_of(kind, 4, 100, 256, 4), ["float" if d else "Scalar" for d in dims_of(kind, 4, 100, 256, 4)])
        assert r is not None, kind
        for c in ("cls", "B", "M", "N", "K", "elems", "dtype"):
            assert r[c] == getattr(k, c)[0], (kind, c)


def _cand(B=8, S=512, H=768, nh=12, **f):
    r = SH.Roles(B, S, H, nh, "")
    return SH._candidates(r, {"batch": f.get("batch", 2.0), "seq": f.get("seq", 3.0), "hidden": f.get("hidden", 5.0)}, -1)


def test_dimension_roles_by_position():
    c = _cand()
    assert SH.dim_factors([8, 512, 768], c) == ([2.0, 3.0, 5.0], False)           # [B, S, H]
    assert SH.dim_factors([8, 12, 512, 64], c) == ([2.0, 5.0, 3.0, 1.0], False)    # [B, nh, S, hd]: heads grow with the width
    assert SH.dim_factors([96, 512, 512], c) == ([10.0, 3.0, 3.0], False)         # [B*nh, S, S]
    assert SH.dim_factors([4096, 3072], c) == ([6.0, 5.0], False)                  # [B*S, 4H]
    assert SH.dim_factors([50257], c) == ([1.0], False)                            # a vocabulary keeps its size
    # a value of two roles with different factors: ambiguous (S = hd here)
    assert SH.dim_factors([96, 64, 64], _cand(S=64))[1] is True
    # an activation led by a dimension that is no batch: ambiguous, not silently x1
    assert SH.dim_factors([7, 512, 768], c)[1] is True
    assert SH.dim_factors([7, 512, 768], c, first=False) == ([1.0, 3.0, 5.0], False)


def test_batch_of_one_is_the_tokens_and_the_heads():
    """B = 1: B*S = S and B*nh = nh are the same values; the flattened tokens take batch x seq."""
    c = _cand(B=1)
    assert SH.dim_factors([512, 768], c) == ([6.0, 5.0], False)
    assert SH.dim_factors([1, 512, 768], c) == ([2.0, 3.0, 5.0], False)
    assert SH.dim_factors([12, 512, 64], c) == ([10.0, 3.0, 1.0], False)


def test_linear_layout_settles_a_token_count_equal_to_a_width():
    """addmm's x[rows, in]: rows are tokens even where B*S equals a multiple of H (1024 = 2 x 512)."""
    c = SH._candidates(SH.Roles(4, 256, 512, 8, ""), {"batch": 2.0, "seq": 1.0, "hidden": 1.0}, -1)
    dims = [[512], [1024, 512], [512, 512], [], []]
    new, amb = SH._scaled_dims(dims, ["float"] * 3 + ["Scalar"] * 2, c, None, "aten::addmm")
    assert not amb and new[1] == [2048, 512] and new[2] == [512, 512]
    _, amb = SH._scaled_dims([[1024, 512], [512, 512]], ["float"] * 2, c, None, "aten::mm")
    assert amb  # mm has no fixed layout: 1024 is tokens or 2H


def test_attention_layout_settles_a_head_dimension_equal_to_the_sequence():
    """SDPA's q[B, nh, S, hd] with S = hd = 128: the last dimension stays (found by the judge:
    seq x0.5 halved the head dimension)."""
    ops = [("aten::_scaled_dot_product_flash_attention", [[1, 2, 128, 128]] * 3 + [[], []], ["float"] * 3 + ["Scalar"] * 2)]
    r = SH.infer_roles(ops, {})
    assert (r.nh, r.S, r.H, r.hd) == (2, 128, 256, 128)
    c = SH._candidates(r, {"batch": 2.0, "seq": 0.5, "hidden": 0.5}, -1)
    new, amb = SH._scaled_dims(ops[0][1], ops[0][2], c, None, ops[0][0])
    assert not amb and new[0] == [2, 1, 64, 128]
    _, amb = SH._scaled_dims([[2, 128, 128], [2, 128, 128]], ["float"] * 2, c, None, "aten::bmm")
    assert amb  # a bmm's S x hd: which is which is not known


def test_roles_inferred_and_overridden():
    ops = [("aten::native_layer_norm", [[8, 128, 768], [768], [768], [768], []], None),
           ("aten::add", [[8, 128, 768], [8, 128, 768], []], None),
           ("aten::_softmax", [[8, 12, 128, 128], [], []], None)]
    r = SH.infer_roles(ops, {})
    assert (r.B, r.S, r.H, r.nh, r.hd) == (8, 128, 768, 12, 64)
    r = SH.infer_roles(ops, {"batch_size": 4, "seq_len": 64})
    assert (r.B, r.S) == (4, 64)
    mixed = [("aten::add", [[b, 128, 768]], None) for b in (1, 2, 3)]
    with pytest.raises(NotApplicable, match="batch_size="):
        SH.infer_roles(mixed, {})
    with pytest.raises(NotApplicable, match="record_shapes"):
        SH.infer_roles([("aten::fill_", [[10]], None)], {})


def test_image_models_refuse_seq_and_hidden():
    """ResNet-50's [N, C, H, W]: the spatial 14 was taken for a sequence and seq=2 predicted
    996.6 -> 1,141.6 ms (found on kineto_tbplugin/resnet50): refused, batch still applies."""
    ops = [("aten::cudnn_convolution", [[32, 256, 14, 14], [256, 256, 3, 3]], ["float"] * 2),
           ("aten::cudnn_batch_norm", [[32, 256, 14, 14], [256]], ["float"] * 2),
           ("aten::add_", [[32, 256, 14, 14], [32, 256, 14, 14]], ["float"] * 2)]
    r = SH.infer_roles(ops, {})
    assert r.image and r.B == 32
    with pytest.raises(NotApplicable, match="images"):
        SH._plan_ops(ops, {"batch": 1.0, "seq": 2.0, "hidden": 1.0, "layers": 1})
    how, *_ = SH._plan_ops(ops, {"batch": 2.0, "seq": 1.0, "hidden": 1.0, "layers": 1})
    assert len(how) == 3


def test_tensile_macro_tile_is_parsed():
    """AMD Tensile names carry the tile as MT<TM>x<TN>x<DU>: without it the library's default tile
    did not tile the recorded 288 blocks, and a batch x2 of the MI300X BERT predicted its kernel
    time 0.388 -> 3.1 ms (found on tracelens/mi300_gaunernst_bert)."""
    assert parse_tile("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x256_MI16x16x1_SN") == (16, 16)


def test_parameters_checked():
    with pytest.raises(UsageError):
        parse_spec("shape:batch=0")
    with pytest.raises(UsageError):
        parse_spec("shape:layers=1.5")
    with pytest.raises(UsageError):
        parse_spec("problem-size:factor=-1")
    _, p = parse_spec("batch:factor=4")
    assert p["factor"] == 4.0 and "batch" not in p
    with pytest.raises(UsageError):
        parse_spec("layers:factor=2.5")


def test_note_names_are_display_safe():
    from collections import Counter

    assert "\x1b" not in SH._top(Counter({"aten::evil\x1b[31m": 5}))


# ----------------------------------------------------------------------- the judge ------------
def _roles_distinct(spec: ShapedSpec, f: dict) -> bool:
    """No value of the traced step stands for two roles of different factors under ``f``
    (docs/scaling.md: such an op is kept as recorded and said in the note)."""
    B, S, H, nh = scaled(spec)
    c = SH._candidates(SH.Roles(B, S, H, nh, ""), {k: float(f.get(k, 1)) for k in ("batch", "seq", "hidden")}, -1)
    if B == 1:  # B·S = S, B·nh = nh: one role each (the product wins)
        c = {k: v for k, v in c.items() if k not in ("B*S", "B*nh", "B")}
    by_value: dict = {}
    for v, fac in c.values():
        if v > 1:
            by_value.setdefault(v, set()).add(round(fac, 12))
    return all(len(x) == 1 for x in by_value.values())


def _holds(cond: bool) -> None:
    """A plain test's precondition (``assume`` is a property's)."""
    assert cond


def _check(tmp, spec: ShapedSpec, f: dict, what: str, plain: bool = False):
    given_ = _holds if plain else assume
    given_(_roles_distinct(spec, f))
    given_(any(k in spec.block for k in ("ln", "add", "gelu", "softmax", "sdpa")))  # an activation names the batch
    prog = shaped_program(spec)
    g, run = _graph(tmp, prog)
    given_(measure_latencies(run) == (prog.L, prog.G))  # the trace shows L and G (docs/model.md rule 5)
    g2, note = _apply(g, what + f",gpu={GPU}")
    assert "no recorded shapes" not in note, note
    given_("two roles" not in note)  # the shapes alone cannot tell: kept and said (test_ambiguous_ops_are_kept_and_said)
    want = emulate(shaped_program(spec, **f))
    tl = simulate(g2)
    corr = g.table.correlation[g.row]
    kern = g.node_kind != NODE_CPU
    e_dur = {t.correlation: t.end_ns - t.start_ns for t in want.tasks}
    base = {int(c): int(d) for c, d in zip(corr[kern], g.dur_ns[kern])}
    fl = floor_ns(find_spec(GPU))
    # a kernel recorded at round(T) predicts T' + e·rho (|e| <= 1/2, rho = (T' - f)/(T - f)), rounded
    tol = {c: math.floor(0.5 * max(e_dur[c] - fl, 1) / max(base[c] - fl - 0.5, 0.5) + 1) for c in e_dur}
    got = {int(c): int(d) for c, d in zip(corr[kern], g2.dur_ns[kern])}
    for c, d in e_dur.items():
        assert abs(got[c] - d) <= tol[c], (c, got[c], d, tol[c])
    slack = sum(tol.values())
    exp = {("c", c.correlation): (c.start_ns, c.end_ns) for c in want.calls}
    exp.update({("t", t.correlation): (t.start_ns, t.end_ns) for t in want.tasks})
    cpu = g.node_kind == NODE_CPU
    pred = {("c" if k else "t", int(c)): (int(s), int(e)) for k, c, s, e in zip(cpu, corr, tl.start_ns, tl.end_ns)}
    assert pred.keys() == exp.keys()
    worst = max(max(abs(a - b), abs(x - y)) for k, ((a, x), (b, y)) in ((k, (pred[k], exp[k])) for k in exp))
    assert worst <= slack, (worst, slack)
    return note


@pytest.mark.slow
@SETTINGS
@given(shaped_specs(), st.sampled_from([0.5, 2, 3, 4]))
def test_batch_equals_the_emulator(tmp_path_factory, spec, fb):
    assume(spec.B * fb == int(spec.B * fb) and spec.B * fb >= 1)
    note = _check(tmp_path_factory.mktemp("b"), spec, {"batch": fb}, f"shape:batch={fb}")
    assert "data loader" in note


@pytest.mark.slow
@SETTINGS
@given(shaped_specs(), st.sampled_from([0.25, 0.5, 2, 4]))
def test_seq_equals_the_emulator(tmp_path_factory, spec, fs):
    """Quadratic attention (bmm Q·Kᵀ, softmax over S x S, flash by its tiles) by its shapes."""
    assume(spec.S * fs == int(spec.S * fs) and spec.S * fs >= 2)
    _check(tmp_path_factory.mktemp("s"), spec, {"seq": fs}, f"seq:factor={fs}")


@pytest.mark.slow
@SETTINGS
@given(shaped_specs(), st.sampled_from([0.5, 2, 3]))
def test_hidden_equals_the_emulator(tmp_path_factory, spec, fh):
    """Heads grow with the width (head dimension kept); the optimizer streams hidden² more."""
    assume(spec.heads * fh == int(spec.heads * fh) and spec.heads * fh >= 1)
    _check(tmp_path_factory.mktemp("h"), spec, {"hidden": fh}, f"shape:hidden={fh}")


def test_batch_up_seq_and_hidden_down_on_a_grid_of_one_wave(tmp_path):
    """Counterexample of the property below (issue 34): batch x2, seq x0.5, hidden x0.5 on a block
    [add, linear(H -> 4H)] at B 7, S 100, H 384: the 4H GEMM (M 1536, N 700: 12 x 11 = 132 tiles of
    128x64, one per SM of the H100) was read as a persistent kernel (grid = the SM count) and kept
    132 blocks at the new shape: predicted 7,920 ns where the emulator's program runs it in
    14,719 ns (66 tiles). A grid that is the shape's own tiling is tiles, not persistence."""
    spec = ShapedSpec(7, 100, 6 * 64, 6, ("add", "linear4"), 1, "fp32", 0, 1000)
    _check(tmp_path, spec, {"batch": 2, "seq": 0.5, "hidden": 0.5}, "shape:batch=2,seq=0.5,hidden=0.5", plain=True)


def test_a_grid_of_the_sm_count_that_is_the_tiling_is_not_persistent():
    """The library's persistence rule (grid = the SM count) yields to the shape's tiling
    (B·⌈M/TM⌉·⌈N/TN⌉ = the recorded grid: tiles); a grid of the SM count that is no tiling of the
    shape, or a name saying ``persistent``, stays persistent."""
    from daydream.costmodel import Kernels
    from daydream.costmodel.kernel_time import source_geometry

    gpu = find_spec(GPU)
    assert gpu.sms == 132
    tiled = Kernels.make("linear", "ampere_sgemm_128x64_tn", B=1, M=1536, N=700, K=384, grid=(132, 1, 1), dtype="fp32")
    assert not source_geometry(tiled, gpu).persistent[0]
    other = Kernels.make("linear", "ampere_sgemm_128x64_tn", B=1, M=8192, N=8192, K=384, grid=(132, 1, 1), dtype="fp32")
    assert source_geometry(other, gpu).persistent[0]
    named = Kernels.make("linear", "sm90_xmma_gemm_persistent_128x64", B=1, M=1536, N=700, K=384, grid=(132, 1, 1), dtype="fp32")
    assert source_geometry(named, gpu).persistent[0]


@pytest.mark.slow
# derandomized: the examples are the same on every run (a drawn counterexample is a bug to record
# above, not a flaky CI run); factors up and down mixed (the counterexample above was one)
@settings(max_examples=100, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
@given(shaped_specs(), st.sampled_from([0.5, 2, 3, 4]), st.sampled_from([0.25, 0.5, 2, 4]), st.sampled_from([0.5, 2, 3]))
def test_batch_seq_and_hidden_together_equal_the_emulator(tmp_path_factory, spec, fb, fs, fh):
    assume(spec.B * fb == int(spec.B * fb) and spec.B * fb >= 1)
    assume(spec.S * fs == int(spec.S * fs) and spec.S * fs >= 2)
    assume(spec.heads * fh == int(spec.heads * fh) and spec.heads * fh >= 1)
    _check(tmp_path_factory.mktemp("a"), spec, {"batch": fb, "seq": fs, "hidden": fh}, f"shape:batch={fb},seq={fs},hidden={fh}")


@pytest.mark.slow
@SETTINGS
@given(st.integers(4, 8), st.sampled_from([512, 1024]), st.sampled_from([1024, 2048]),
       st.lists(st.sampled_from(["ln", "add", "gelu", "softmax"]), min_size=1, max_size=4), st.sampled_from([2, 3]))
def test_problem_size_equals_the_emulator_on_streaming_kernels(tmp_path_factory, B, S, H, block, k):
    """Without shapes, problem-size:factor=k predicts kernels whose work grows x k with the batch
    (memory-bound: time above the floor x k; docs/scaling.md). Its model has no bytes, so the kernels
    here stream more than the L2 cache on both sides (L2 residency: the library's, not this model's)."""
    spec = ShapedSpec(B, S, H, 8, tuple(block), 1, loader_ns=0, optimizer=False)
    gpu = find_spec(GPU)
    kinds = set(block)
    for b in (B, B * k):
        for kind in kinds:
            kk = kernel_of(kind, b, S, H, 8, "fp32")
            from daydream.costmodel.work import flops_bytes

            assume(flops_bytes(kk)[1][0] > gpu.l2_mib * 2**20)
    prog = shaped_program(spec)
    g, run = _graph(tmp_path_factory.mktemp("p"), prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g2, note = _apply(g, f"problem-size:factor={k},gpu={GPU}")
    assert "no shapes used" in note
    want = emulate(shaped_program(spec, batch=k))
    corr = g.table.correlation[g.row]
    kern = g.node_kind != NODE_CPU
    e = {t.correlation: t.end_ns - t.start_ns for t in want.tasks}
    for c, d in zip(corr[kern], g2.dur_ns[kern]):
        assert abs(int(d) - e[int(c)]) <= k  # the recorded time's rounding, x k
    assert abs(int(simulate(g2).end_ns.max()) - want.end_ns) <= k * len(e)


def test_ambiguous_ops_are_kept_and_said(tmp_path):
    """Only a GELU's [B, S, 4H] names the width: 4H = 256 is taken for H, its head dimension 128
    equals S, and the bmm's 128s are sequence or head dimension: kept as recorded, named in the
    note (found by the judge: seq x0.5 had halved a head dimension)."""
    spec = ShapedSpec(1, 128, 64, 2, ("bmm_pv", "gelu"), 1)
    g, _ = _graph(tmp_path, shaped_program(spec))
    g2, note = _apply(g, f"shape:batch=2,seq=0.5,hidden=0.5,gpu={GPU}")
    assert "two roles" in note and "aten::bmm" in note
    bmm = np.array([g.names[i] == KINDS["bmm_pv"][1] for i in g.name_id])
    assert bmm.sum() == 1 and np.array_equal(g2.dur_ns[bmm], g.dur_ns[bmm])


def test_shaped_program_kernel_times_are_the_cost_function():
    spec = ShapedSpec(2, 64, 128, 2, ("linear", "softmax"), 1)
    run = emulate(shaped_program(spec))
    t = {r.name: r.end_ns - r.start_ns for r in run.tasks}
    assert t[KINDS["linear"][1]] == kernel_ns(kernel_of("linear", 2, 64, 128, 2, "fp32"))[0]
    assert t[KINDS["softmax"][1]] == kernel_ns(kernel_of("softmax", 2, 64, 128, 2, "fp32"))[0]


def _mapped_graph(tmp, prog):
    from daydream.mapping import map_events

    run = emulate(prog)
    p = tmp / "shaped.json"
    to_kineto(run, str(p))
    t = load_trace(str(p))
    return build_graph(t, map_events(t)), run


def _depth_check(tmp, spec, f: dict, what: str):
    assume(_roles_distinct(spec, f))
    assume(any(k in spec.block for k in ("ln", "add", "gelu", "softmax", "sdpa")))
    prog = shaped_program(spec)
    g, run = _mapped_graph(tmp, prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    g2, note = _apply(g, what + f",gpu={GPU}")
    assume("two roles" not in note)  # the shapes alone cannot tell: kept and said (test_ambiguous_ops_are_kept_and_said)
    assert f"{spec.layers} occurrences of Block_#" in note, note
    want = emulate(shaped_program(spec, **f))
    assert g2.n == len(want.calls) + len(want.tasks)
    kern = g2.node_kind != NODE_CPU
    got = sorted(g2.dur_ns[kern].tolist())
    exp = sorted(t.end_ns - t.start_ns for t in want.tasks)
    # each kernel as the batch/seq/hidden properties bound it (a copy has its model's time)
    fl = floor_ns(find_spec(GPU))
    base = sorted(g.dur_ns[g.node_kind != NODE_CPU].tolist())
    tol = math.floor(0.5 * max(max(exp) - fl, 1) / max(min(base) - fl - 0.5, 0.5) + 1)
    assert len(got) == len(exp) and max(abs(a - b) for a, b in zip(got, exp)) <= tol
    assert abs(int(simulate(g2).end_ns.max()) - want.end_ns) <= tol * len(exp)


@pytest.mark.slow
@SETTINGS
@given(shaped_specs(min_layers=2), st.sampled_from([2, 3]))
def test_layers_equal_the_emulator(tmp_path_factory, spec, n):
    """The repeating block (Block_0 .. Block_{L-1}) L·n times: its tasks with their CPU launches;
    the optimizer streams n x the parameters."""
    _depth_check(tmp_path_factory.mktemp("l"), spec, {"layers": n}, f"shape:layers={n}")


@pytest.mark.slow
@SETTINGS
@given(shaped_specs(min_layers=2), st.sampled_from([2, 3]), st.sampled_from([0.5, 2]))
def test_layers_and_batch_equal_the_emulator(tmp_path_factory, spec, n, fb):
    assume(spec.B * fb == int(spec.B * fb) and spec.B * fb >= 1)
    _depth_check(tmp_path_factory.mktemp("lb"), spec, {"layers": n, "batch": fb}, f"shape:layers={n},batch={fb}")


def test_launch_bound_model_stays_launch_bound(tmp_path):
    """Launch calls longer than the kernels: the deeper model's step grows by the calls' time,
    as the emulator's run does (the copies carry their CPU launches)."""
    spec = ShapedSpec(2, 64, 128, 2, ("ln", "linear"), 2, host_ns=0, call_ns=20_000, optimizer=False)
    g, _ = _mapped_graph(tmp_path, shaped_program(spec))
    g2, _ = _apply(g, f"layers:factor=4,gpu={GPU}")
    want = emulate(shaped_program(spec, layers=4))
    assert int(simulate(g2).end_ns.max()) == want.end_ns
    base = emulate(shaped_program(spec))
    assert want.end_ns - base.end_ns >= 6 * 2 * 20_000  # six more blocks of two launches


def test_no_repeating_block_is_said(tmp_path):
    g, _ = _mapped_graph(tmp_path, shaped_program(ShapedSpec(2, 64, 128, 2, ("ln",), 1)))
    with pytest.raises(NotApplicable, match="repeating block"):
        _apply(g, f"shape:layers=2,gpu={GPU}")


def test_trace_without_shapes_is_said(tmp_path):
    """A shaped program's trace with its shapes stripped: shape refuses (no shapes), problem-size
    applies and says it used none."""
    spec = ShapedSpec(2, 64, 128, 2, ("ln", "add"), 1)
    prog = shaped_program(spec)
    bare = prog.map_ops(lambda o: dataclasses.replace(o, dims=None, types=None) if hasattr(o, "dims") else o)
    g, _ = _graph(tmp_path, bare)
    with pytest.raises(NotApplicable, match="record_shapes"):
        _apply(g, f"shape:batch=2,gpu={GPU}")
    _, note = _apply(g, f"problem-size:factor=2,gpu={GPU}")
    assert "no shapes used" in note


def test_launch_data_keeps_each_kernels_op_shapes(tmp_path):
    """Every kernel of an op with recorded shapes points to its (name, dims, types), also where
    the op launched several kernels (its work, flops/bytes, is not split then: -1)."""
    from daydream.formats.launch_data import _columns

    dev = np.zeros(3, np.int64)
    cols = (dev, np.array([1, 2, 3]), np.array([10, 10, 11]), np.full((3, 3), 1), np.full((3, 3), 32),
            np.full(3, 32), np.zeros(3, np.int64))
    ops = {10: ("aten::addmm", [[4], [8, 16], [16, 4]], ["float"] * 3), 11: ("aten::relu", [[8, 4]], ["float"])}
    d = _columns(cols, ops)
    assert d.shape_id.tolist() == [0, 0, 1]
    assert d.shapes == [("aten::addmm", [[4], [8, 16], [16, 4]], ["float"] * 3), ("aten::relu", [[8, 4]], ["float"])]
    assert d.flops.tolist()[:2] == [-1.0, -1.0]


def test_shape_series_on_a_linear_kernel_with_a_floor():
    """Rows of an elementwise op whose time is the floor plus bytes / bandwidth (the library's own
    model at its fitted efficiency): the shape mode predicts each exactly, the linear guess t·f
    is off by the floor's (f − 1)·floor / t' (derivation: t' = F + c·f·E, t·f = f·F + c·f·E)."""
    from daydream.costmodel import predict_model
    from daydream.kernel_tool.accuracy import shape_series
    from daydream.costmodel.work import Kernels

    gpu = find_spec("A100 40GB PCIe")
    B = np.array([64, 128, 256, 512, 1024])
    k = Kernels.make("elementwise", "vectorized_elementwise_kernel", B=B, elems=B * 1024, inputs=2, dtype="fp32")
    t = predict_model(k, gpu)
    keys = np.array([f"add|{b}|-1|-1|-1|{b * 1024}" for b in B], dtype=object)
    rows = shape_series({gpu.name: (gpu, k, t, keys)})
    f2 = [r for r in rows if r[1] == "elementwise" and r[2] == 2][0]
    assert f2[3] == 4 and f2[4] < 1e-9
    fl = floor_ns(gpu)
    lin = np.median((t[:-1] * 2) / t[1:] - 1)
    assert f2[7] == pytest.approx(lin) and lin == pytest.approx(np.median(fl / t[1:]), rel=1e-6)


# ---------------------------------------------------------------- identity on real traces ------
def _same_memory_verdict(g, base, g2, tl, name):
    """What a user reads is the baseline's: each device's peak (with the level before the window:
    a shape what-if's new level was once added to the recorded one, model state x2 at factor 1),
    the timeline's "allocated bytes" counter (the replay's level after each event) and each step's
    peak and parts (the prediction's reserve is not known: no "allocator slack" part)."""
    r0 = {dm.device: dm for dm in replay_memory(g, base)}
    r1 = {dm.device: dm for dm in replay_memory(g2, tl)}
    assert r0.keys() == r1.keys(), name
    for d, a in r0.items():
        b = r1[d]
        assert (b.before_bytes, b.peak_allocated_bytes) == (a.before_bytes, a.peak_allocated_bytes), (name, d)
        assert np.array_equal(b.allocated_bytes, a.allocated_bytes), (name, d)  # the --timeline counter
    s0, s1 = memory_summary(g, base), memory_summary(g2, tl)
    for d0, d1 in zip(s0.devices, s1.devices):
        assert d1.peak_allocated_bytes == d0.peak_allocated_bytes, (name, d0.device)
        for t0, t1 in zip(d0.steps, d1.steps):
            assert t1.peak_allocated_bytes == t0.peak_allocated_bytes, (name, t0.name)
            assert [(q.name, q.bytes) for q in t1.parts] == [(q.name, q.bytes) for q in t0.parts
                                                              if q.name != "allocator slack"], (name, t0.name)


@pytest.mark.slow
def test_factor_one_is_the_identity_on_every_real_trace(real_graphs):
    """Every factor 1: each kernel re-costed at its own shapes (the library returns the measured
    time), the data loader and CPU as recorded: the same graph times, the same replay; the same
    allocator's blocks and totals."""
    done = mem = 0
    for name, g in real_graphs.items():
        if not (g.node_kind != NODE_CPU).any():
            continue
        base = simulate(g)
        for spec in ("shape:batch=1,seq=1,hidden=1", "problem-size:factor=1"):
            try:
                SH._gpu(g, "")
                gpu = ""
            except NotApplicable:
                gpu = ",gpu=H100 SXM"
            try:
                g2, _ = _apply(g, spec + gpu)
            except NotApplicable as e:
                assert "record_shapes" in str(e) or "no GPU kernels" in str(e), (name, str(e))
                continue
            assert np.array_equal(g2.dur_ns, g.dur_ns) and np.array_equal(g2.gap_ns, g.gap_ns), (name, spec)
            if spec.startswith("shape") and g.memory is not None and len(g.memory):  # the same blocks, the same level before
                assert np.array_equal(g2.memory.events.bytes, g.memory.events.bytes), name
                assert np.array_equal(g2.memory.events.total_allocated[g.memory.events.total_allocated >= 0],
                                      g.memory.events.total_allocated[g.memory.events.total_allocated >= 0]), name
                mem += 1
            tl = simulate(g2)
            assert np.array_equal(tl.start_ns, base.start_ns) and np.array_equal(tl.end_ns, base.end_ns), (name, spec)
            if spec.startswith("shape") and g.memory is not None and len(g.memory):
                _same_memory_verdict(g, base, g2, tl, name)
            done += 1
    assert done >= 20 and mem >= 3
