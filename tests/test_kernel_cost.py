"""gpu-upgrade through the kernel-cost library (daydream/optimizations/kernel_cost.py): how the
graph's kernels are described, the prediction's range, and the op shapes launch data records."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from daydream.costmodel.work import parse_tile
from daydream.formats.launch_data import DTYPES, op_shape

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
H100 = TRACES / "tracelens" / "h100_gaunernst_bert-small-uncased__1016001.json.gz"


def test_op_shape_gemm_in_cublas_terms():
    # mm a[m, k] · b[k, n]: cuBLAS computes the transposed product, M = n, N = m, K = k
    assert op_shape("aten::mm", [[141, 512], [512, 2048]], ["c10::BFloat16"] * 2) == (1, 2048, 141, 512, DTYPES.index("bf16"))
    assert op_shape("aten::bmm", [[8, 16, 32], [8, 32, 64]], ["float"] * 2) == (8, 64, 16, 32, DTYPES.index("fp32"))
    assert op_shape("aten::mm", [[2, 3], [4, 5]], ["float"] * 2)[:4] == (-1, -1, -1, -1)  # inner dims differ


def test_op_shape_attention_layouts():
    """ATen's _flash_attention_forward takes [B, S, H, D]; scaled_dot_product_* takes [B, H, S, D]
    (bug found on the bert-small traces: heads were read as the query length)."""
    q = [[1, 141, 8, 64], [1, 141, 8, 64], [1, 141, 8, 64]]
    assert op_shape("aten::_flash_attention_forward", q, ["c10::Half"] * 3)[:4] == (8, 141, 141, 64)
    q2 = [[1, 8, 141, 64], [1, 8, 141, 64], [1, 8, 141, 64]]
    assert op_shape("aten::_scaled_dot_product_flash_attention", q2, ["c10::Half"] * 3)[:4] == (8, 141, 141, 64)


def test_op_shape_memory_op_rows():
    # layer norm of x[4, 6, 10]: 24 rows of 10 elements, 3 tensor inputs (x, weight, bias)
    assert op_shape("aten::native_layer_norm", [[4, 6, 10], [10], [10]], ["float"] * 3)[:4] == (24, 10, 3, -1)


def test_tensile_macro_tile_parsed():
    assert parse_tile("Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT128x144x64_MI16x16x1_SN") == (128, 144)


@pytest.fixture(scope="module")
def bert():
    if not H100.exists():
        pytest.skip("no real traces")
    from daydream.formats import load_trace
    from daydream.graph import build_graph
    from daydream.mapping import map_events

    t = load_trace(str(H100))
    return t, build_graph(t, map_events(t))


@pytest.mark.slow
def test_describe_bert_small(bert):
    from daydream.costmodel import kernel_model as KM
    from daydream.costmodel.specs import find_spec
    from daydream.optimizations.kernel_cost import describe

    _, g = bert
    d = describe(g, find_spec("H100 SXM"), KM.match_launches(g, g.facts.launch), KM.work_item_grid(g))
    assert d.counts["described"] == d.counts["kernels"] == 60
    k = d.kernels
    # the FFN's first addmm: x[141, 512] · W^T[512, 2048] -> M = 2048 outputs, N = 141 rows, K = 512
    m = (k.cls == "linear") & (k.M == 2048)
    assert m.any() and set(k.N[m].tolist()) == {141} and set(k.K[m].tolist()) == {512}
    assert set(k.dtype[m].tolist()) == {"bf16"}
    # the gathers (index_select: no op bytes) have their bytes inferred from their time
    assert d.inferred.sum() == d.counts["bytes inferred from time"] == 3


@pytest.mark.slow
def test_range_is_replayed_and_said(bert):
    """Cross-vendor: the library's per-kernel range becomes the prediction's, each end a replay."""
    from daydream import analyze

    t, _ = bert
    r = analyze(t, ["gpu-upgrade:target=MI300X"])
    p = r.report.predictions[0]
    assert p.range is not None and p.range.kernels == 60
    assert p.range.fast_ns <= p.window.predicted_ns <= p.range.slow_ns
    assert p.range.speedup_low <= p.window.speedup <= p.range.speedup_high
    assert "range " in p.optimizations[0].note and "fast end:" in p.optimizations[0].note
    assert "library" in p.range.fast_end  # cross-vendor: the library reason


@pytest.mark.slow
def test_same_gpu_has_no_range(bert):
    from daydream import analyze

    t, g = bert
    r = analyze(t, [f"gpu-upgrade:target=H100 SXM,launch_latency_ns={g.launch_latency_ns}"])
    p = r.report.predictions[0]
    assert p.range is None and p.window.predicted_ns == p.window.replayed_ns


def test_mi300x_floor_not_from_the_judging_pair():
    """The MI300X floor is the MI250's (an independent trace), not the bert-small MI300X trace's
    own smallest kernel (1,964 ns), which the cross-GPU accuracy is judged on."""
    from daydream.costmodel.kernel_model import KERNEL_FLOOR_NS
    from daydream.costmodel.kernel_time import FLOOR_NS

    assert KERNEL_FLOOR_NS["MI300X"] == KERNEL_FLOOR_NS["MI250 GCD"] != 1964
    assert FLOOR_NS["MI300X"] == FLOOR_NS["MI250 GCD"]
