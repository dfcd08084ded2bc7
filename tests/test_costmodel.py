"""Properties of the kernel-cost library (daydream.costmodel)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daydream.costmodel import Kernels, find_spec, predict_cross, predict_shape
from daydream.costmodel import kernel_time as M
from daydream.costmodel.specs import Spec
from daydream.kernel_tool.configs import from_config
from daydream.costmodel.work import parse_tile

GPUS = ["Tesla P100-PCIE-16GB", "Tesla T4", "Tesla V100-PCIE-32GB", "NVIDIA A100-PCIE-40GB", "NVIDIA H100 80GB HBM3",
        "NVIDIA L4", "Tesla P4", "AMD Instinct MI300X"]
SET = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

gemm = st.fixed_dictionaries({
    "cls": st.sampled_from(["linear", "bmm"]),
    "name": st.sampled_from(["ampere_sgemm_128x64_tn", "volta_sgemm_128x128_tn", "maxwell_sgemm_32x128_nn",
                             "sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x16_stage4", "some_gemm"]),
    "B": st.integers(1, 64), "M": st.integers(1, 8192), "N": st.integers(1, 8192), "K": st.integers(1, 8192)})
memop = st.fixed_dictionaries({"cls": st.sampled_from(["elementwise", "ln", "softmax"]), "elems": st.integers(1, 2**30),
                               "inputs": st.integers(1, 2)})


def _k(d: dict, dtype="fp32") -> Kernels:
    return Kernels.make(dtype=dtype, **d)


@pytest.mark.parametrize("name,expect", [("ampere_sgemm_128x64_tn", (128, 64)), ("volta_sgemm_32x128_nn", (32, 128)),
                                         ("volta_sgemm_128x32_sliced1x4_tn", (128, 32)),
                                         ("sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize256x128x32_stage3", (256, 128)),
                                         ("cutlass_80_tensorop_s1688gemm_128x256_16x3_nn_align4", (128, 256)),
                                         ("void gemm_kernel<float>()", (128, 128))])
def test_parse_tile(name, expect):
    assert parse_tile(name) == expect


def test_neusight_names_resolve():
    assert find_spec("Tesla P100-PCIE-16GB").name == "P100 PCIe"
    assert find_spec("Tesla T4").name == "T4"
    assert find_spec("Tesla P4").name == "P4"
    assert find_spec("NVIDIA A100-SXM4-40GB").name == "A100 40GB SXM"
    assert find_spec("NVIDIA A100 80GB PCIe").name == "A100 80GB PCIe"
    assert find_spec("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert find_spec("NVIDIA L4").name == "L4"
    assert find_spec("no such gpu") is None


@SET
@given(st.one_of(gemm, memop), st.sampled_from(GPUS), st.floats(1e3, 1e9))
def test_identity_same_gpu_shape_precision(d, gpu, t):
    g = find_spec(gpu)
    k = _k(d)
    p = predict_cross(k, [t], g, g)
    assert p.point[0] == t and p.low[0] == t and p.high[0] == t
    s = predict_shape(k, [t], k, g)
    assert s.point[0] == t and s.low[0] == t and s.high[0] == t


@SET
@given(st.one_of(gemm, memop), st.sampled_from(GPUS), st.sampled_from(GPUS), st.floats(1e3, 1e9),
       st.sampled_from([None, "fp32", "tf32", "fp16", "bf16", "fp8"]))
def test_range_brackets_point(d, a, b, t, prec):
    p = predict_cross(_k(d), [t], find_spec(a), find_spec(b), precision=prec)
    assert np.isfinite(p.point).all() and (p.point > 0).all()
    assert (p.low <= p.point).all() and (p.point <= p.high).all()


@SET
@given(gemm, gemm, st.sampled_from(GPUS), st.floats(1e4, 1e8))
def test_shape_range_brackets_point(a, b, gpu, t):
    b = dict(b, cls=a["cls"])
    p = predict_shape(_k(a), [t], _k(b), find_spec(gpu))
    assert (p.low <= p.point).all() and (p.point <= p.high).all() and (p.point > 0).all()


@SET
@given(st.one_of(gemm, memop), st.sampled_from(GPUS), st.sampled_from(["B", "M", "N", "K", "elems"]),
       st.integers(1, 4096))
def test_monotonic_in_work(d, gpu, dim, more):
    """More work (a larger dimension, the rest equal) never takes less model time."""
    g = find_spec(gpu)
    if dim not in d:
        return
    k1, k2 = _k(d), _k(dict(d, **{dim: d[dim] + more}))
    assert M.model_time_ns(k2, g)[0] >= M.model_time_ns(k1, g)[0] * (1 - 1e-12)
    # and as a shape prediction anchored on a measured row
    p1 = predict_shape(k1, [1e6], k1, g).point[0]
    p2 = predict_shape(k1, [1e6], k2, g).point[0]
    assert p2 >= p1 * (1 - 1e-12)


def _consistent_spec(name, sms, clock, bw, l2, tdp) -> Spec:
    peak = sms * 128 * 2 * clock / 1e6  # TFLOP/s: per-SM lanes x 2 x clock (a datasheet's own formula)
    return Spec(name, "nvidia", sms, peak, bw, l2, clock, tdp, 8, {"fp32": peak, "tf32": 4 * peak, "half": 8 * peak},
                2048, 32, 65536, 164, "test")


@SET
@given(gemm, st.integers(20, 140), st.floats(1000, 2000), st.floats(200, 3000), st.floats(2, 64), st.floats(60, 700),
       st.integers(0, 40), st.floats(1.0, 1.5), st.floats(1.0, 2.0), st.floats(1.0, 2.0), st.floats(1.0, 2.0),
       st.sampled_from([None, "fp16"]))
def test_faster_gpu_never_slower_for_compute_bound(d, sms, clock, bw, l2, tdp, dsm, fclk, fbw, fl2, ftdp, prec):
    """A target at least as fast on every spec (SMs, clock and so peak, bandwidth, L2, board power)
    never gets a longer prediction from the same measured kernel."""
    src = find_spec("Tesla V100-PCIE-32GB")
    slow = _consistent_spec("Test GPU", sms, clock, bw, l2, tdp)
    fast = _consistent_spec("Test GPU", sms + dsm, clock * fclk, bw * fbw, l2 * fl2, tdp * ftdp)
    k = _k(d)
    for pol in ("same", "best"):
        ps = predict_cross(k, [5e6], src, slow, precision=prec, tile_policy=pol).point[0]
        pf = predict_cross(k, [5e6], src, fast, precision=prec, tile_policy=pol).point[0]
        assert pf <= ps * (1 + 1e-9)


def test_cross_vendor_and_attention_are_wide():
    k = Kernels.make(cls=["linear", "attention"], name=["ampere_sgemm_128x64_tn", "flash_fwd_kernel"], B=[1, 16],
                     M=[4096, 1024], N=[4096, 1024], K=[4096, 64], dtype="bf16")
    p = predict_cross(k, [1e6, 2e5], find_spec("H100 SXM"), find_spec("MI300X"))
    assert (p.high / p.low >= 3.9).all()
    assert all("library" in r for r in p.reason)


def test_precision_change_speeds_up_big_gemm_on_tensor_cores():
    k = Kernels.make(cls="linear", name="ampere_sgemm_128x128_tn", M=8192, N=8192, K=8192)
    g = find_spec("NVIDIA A100-PCIE-40GB")
    p = predict_cross(k, [60e6], g, g, precision="bf16")
    assert p.point[0] < 60e6 / 3 and "precision" in p.reason[0]
    assert p.low[0] <= p.point[0] <= p.high[0]


def test_persistent_kernel_follows_target_sm_count():
    k = Kernels.make(cls="linear", name="sm90_xmma_gemm_persistent_128x128", M=8192, N=8192, K=8192, grid=(132, 1, 1),
                     block=(384, 1, 1), dtype="bf16")
    h100 = find_spec("H100 SXM")
    g = M.source_geometry(k, h100)
    assert g.persistent[0]
    a100 = find_spec("NVIDIA A100-PCIE-40GB")
    assert M.retile(k, g, g.tile, g.threads, a100).blocks[0] == a100.sms


def test_total_is_comonotone_sum():
    k = Kernels.make(cls=["linear", "elementwise"], name=["volta_sgemm_128x64_tn", "x"], M=[1024, -1], N=[1024, -1],
                     K=[1024, -1], elems=[-1, 10**7])
    p = predict_cross(k, [1e5, 1e5], find_spec("Tesla V100-PCIE-32GB"), find_spec("NVIDIA A100-PCIE-40GB"))
    lo, pt, hi = p.total()
    assert lo == pytest.approx(p.low.sum()) and pt == pytest.approx(p.point.sum()) and hi == pytest.approx(p.high.sum())
    assert lo <= pt <= hi


def test_gpu_config_file(tmp_path):
    f = tmp_path / "x.json"
    f.write_text('{"Device": "Mystery GPU", "Dev_Mem": 8, "Mem_Bw": 400, "Num_Sm": 30, "Core_Per_SM": 128, '
                 '"Freq": 1500, "SingleFLOPs": 11520, "L2Cache": 4}')
    s = from_config(f)
    assert s.sms == 30 and s.mem_gbps == 400 and s.peak("fp32") == pytest.approx(11.52) and s.peak("fp16") == s.peak("fp32")
    bad = tmp_path / "bad.json"
    bad.write_text('{"Device": "x"}')
    with pytest.raises(ValueError, match="bad.json: missing key"):
        from_config(bad)
    t = tmp_path / "t4.json"
    t.write_text('{"Device": "Tesla T4", "Mem_Bw": 320, "Num_Sm": 40, "Freq": 1590, "SingleFLOPs": 8141, "L2Cache": 4}')
    s4 = from_config(t)
    assert s4.name == "T4" and s4.peak("half") == 65.0 and dataclasses.replace(s4).tdp_w == 70
