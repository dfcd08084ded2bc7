"""amp through the kernel-cost library (amp:model=library, the default): autocast's op lists by
launching op, the inputs'-type rule, GradScaler's kernels for fp16, bf16 refused without bf16
Tensor Cores, and re-times anchored on the measured time so gpu-upgrade and amp compose."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from daydream.errors import NotApplicable
from daydream.events.table import Kind
from daydream.graph import build_graph
from daydream.graph import kernels as K
from daydream.optimizations import parse_spec
from daydream.optimizations.autocast import FP32, LOW, NEITHER, op_list_of

R50 = sorted((Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "kineto_tbplugin").glob("resnet50*.json.gz"))


def run(g, spec):
    opt, p = parse_spec(spec)
    return opt.apply(g, p)


@pytest.mark.parametrize("op, want", [
    ("aten::mm", LOW), ("aten::cudnn_convolution", LOW), ("aten::convolution_backward", LOW), ("aten::addmm", LOW),
    ("aten::_softmax", FP32), ("aten::_log_softmax_backward_data", FP32), ("aten::native_layer_norm", FP32),
    ("aten::native_layer_norm_backward", FP32), ("aten::nll_loss_forward", FP32), ("aten::sum", FP32), ("aten::exp", FP32),
    ("aten::add_", NEITHER), ("aten::relu_", NEITHER), ("aten::cudnn_batch_norm", NEITHER), ("aten::max_pool2d_with_indices", NEITHER),
    ("aten::mean", NEITHER), ("", NEITHER),
])
def test_autocast_op_lists(op, want):
    """PyTorch's "Autocast Op Reference" lists, matched with aten::, backward/forward/in-place suffixes stripped."""
    assert op_list_of(op) == want


def test_pytorch20_triton_names_by_launching_op():
    """PyTorch 2.0 Inductor named kernels triton__0d1d2d... (no kind): memory-bound elementwise by
    name (they were 'other', left alone by every what-if), refined by the launching op."""
    assert K.classify_name("triton__0d1d2d3") == ("elementwise", "memory", "unknown")
    assert K.classify_name("triton_poi_fused_add_0")[0] == "elementwise"
    assert K.classify_name("triton_red_fused_sum_1")[0] == "reduction"
    assert K.classify_name("triton_per_fused__softmax_2")[0] == "softmax_attention"
    assert K.classify_name("triton_tem_fused_mm_3")[:2] == ("gemm", "compute")
    c, b = K.refine_by_op(["triton__0d1d2d", "triton__0d1d2d", "triton__0d1d", "triton__0d1d", "triton_poi_x_0"],
                          ["aten::mm", "aten::_softmax", "aten::native_layer_norm", "", "aten::mm"])
    assert [K.CLASSES[i] for i in c] == ["gemm", "softmax_attention", "normalization", "elementwise", "elementwise"]
    assert K.BOUNDS[b[0]] == "compute"


@pytest.fixture(scope="module")
def r50():
    if not R50:
        pytest.skip("needs ../shared/traces/kineto_tbplugin")
    from daydream.formats import load_trace
    from daydream.mapping import map_events

    t = load_trace(str(R50[0]))
    return build_graph(t, map_events(t))


@pytest.mark.slow
def test_fp16_differs_from_bf16_by_gradscaler(r50):
    """amp:dtype=fp16 gave exactly bf16's result. On an A100 (same 16-bit Tensor-Core peak for
    both) fp16 adds GradScaler's unscale and update kernels per ProfilerStep (6 in this trace),
    with their launches, their unscale pass sized by the fp32 weights (ResNet-50: 25.5 M
    parameters = 102 MB)."""
    g = r50
    b, nb = run(g, "amp:gpu=A100 40GB SXM,dtype=bf16")
    f, nf = run(g, "amp:gpu=A100 40GB SXM,dtype=fp16")
    assert b.n == g.n and f.n == g.n + 4 * 6  # per step: 2 kernels + 2 launch calls
    new = np.arange(g.n, f.n)
    names = [f.names[i] for i in f.name_id[new[f.node_kind[new] == Kind.KERNEL]]]
    assert sum("unscale" in s for s in names) == 6 and sum("update_scale" in s for s in names) == 6
    from derived import resnet50_weight_numel  # the fp32 weights of ResNet-50, from its architecture

    assert f"{resnet50_weight_numel() * 4 / 1e6:,.1f} MB of fp32 gradients" in nf and "around 6 optimizer step(s)" in nf
    assert np.array_equal(f.dur_ns[: g.n], b.dur_ns)  # the rest identical: same peak, same bytes
    with pytest.raises(NotApplicable, match="compute capability < 8.0"):
        run(g, "amp:dtype=bf16")  # the trace's V100


@pytest.mark.slow
def test_autocast_keeps_fp32_ops(r50):
    """Kernels of fp32-list ops (the loss: log_softmax, nll_loss) keep their time; batch norm and
    ReLU after a 16-bit convolution run at 16-bit (rule 3)."""
    g = r50
    g2, note = run(g, "amp:casts=off")
    name = np.asarray(g.names, dtype=object)[g.name_id]
    kern = g.node_kind == Kind.KERNEL
    loss = kern & np.array(["softmax" in s or "NLL" in s for s in name.tolist()])
    assert loss.sum() >= 6 and np.array_equal(g2.dur_ns[loss], g.dur_ns[loss])
    bn = kern & np.array(["bn_fw" in s for s in name.tolist()])
    assert bn.sum() > 100 and g2.dur_ns[bn].sum() < 0.7 * g.dur_ns[bn].sum()
    assert "memory-bound kernels kept fp32" in note and "by their launching op" in note


@pytest.mark.slow
def test_gpu_upgrade_and_amp_compose_in_either_order(r50):
    """gpu-upgrade (V100 -> A100) then amp equals amp then gpu-upgrade: the library's kernels to the
    ns (each re-time predicts from the measured time, TaskGraph.cost_anchor), their range too; the
    convolutions (no shapes: the per-kernel rules and factors) within 1 ns of rounding. Was
    (before the anchor): 71.9 vs 101.6 ms of GPU time (amp read gpu-upgrade's TF32 convolutions as
    fp32)."""
    g = r50
    up = "gpu-upgrade:target=A100 40GB SXM"
    a, _ = run(run(g, up)[0], "amp:casts=off,dtype=fp16")
    b, _ = run(run(g, "amp:casts=off,dtype=fp16")[0], up)
    kern = g.node_kind == Kind.KERNEL
    d = np.abs(a.dur_ns.astype(np.int64) - b.dur_ns.astype(np.int64))
    assert d[kern].max() <= 1 and a.dur_ns[kern].sum() > 0
    rows_a, lo_a, hi_a, _ = a.dur_range
    rows_b, lo_b, hi_b, _ = b.dur_range
    assert np.array_equal(rows_a, rows_b) and np.allclose(lo_a, lo_b) and np.allclose(hi_a, hi_b)
    lib = np.isin(g.row, a.cost_anchor[0]) & kern
    assert lib.sum() > 3000 and np.array_equal(a.dur_ns[lib], b.dur_ns[lib])
    # two upgrades in a row are one: V100 -> H100 -> A100 = V100 -> A100 for the library's kernels
    c, _ = run(run(g, "gpu-upgrade:target=H100 SXM")[0], up)
    e, _ = run(g, up)
    assert np.array_equal(c.dur_ns[lib], e.dur_ns[lib])


@pytest.mark.slow
def test_library_model_range_and_identity(r50):
    """The library's range reaches the prediction (TaskGraph.dur_range); dtype=fp32 (autocast off)
    is the identity."""
    g = r50
    g2, _ = run(g, "amp")
    rows, lo, hi, why = g2.dur_range
    assert len(rows) > 3000 and (lo <= 1).all() and (hi >= 1).all() and (lo < 1).any()
    g3, _ = run(g, "amp:dtype=fp32")
    assert np.array_equal(g3.dur_ns, g.dur_ns)


def test_older_triton_names_are_not_other():
    """Inductor's older kernel names (issue 31: they were counted as "other"): ``triton_0d1d2d``
    (argument specialization only, as ``triton__0d1d``) and the GEMM templates named
    ``triton_mm``/``triton_bmm`` before ``triton_tem_``."""
    assert K.classify_name("triton_0d1d2d3")[0] == "elementwise"
    assert K.classify_name("triton_mm")[:2] == ("gemm", "compute")
    assert K.classify_name("triton_bmm_0")[:2] == ("gemm", "compute")
    assert K.classify_name("triton_mmx")[0] != "gemm"  # a word that starts with mm is not the template
    c, _ = K.refine_by_op(["triton_0d1d2d"], ["aten::bmm"])
    assert K.CLASSES[int(c[0])] == "gemm"
