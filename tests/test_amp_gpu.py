"""amp's per-GPU model (amp:model=gpu, the default): path factors per GPU with exact values, 16-bit
kernels left alone, autocast's fp32 classes kept, the paper model reproducible."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from daydream.events.table import DeviceInfo, TraceMeta
from daydream.costmodel.gpus import find_gpu
from daydream.graph import build_graph
from daydream.optimizations import amp as A
from daydream.optimizations import parse_spec
from daydream.simulate import simulate

from tablebuilder import TB

SGEMM = "ampere_sgemm_128x64_nn"
TF32 = "ampere_s16816gemm_tf32_128x128_nn"
HGEMM = "ampere_h16816gemm_128x128_ldg8_nn"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int)"
LN = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*)"


@pytest.mark.parametrize("gpu, fp32, tf32", [
    ("V100 SXM2", 15.7 / (125.0 * 0.5), 15.7 / (125.0 * 0.5)),  # no TF32 on Volta: the fp32 path
    ("A100 40GB SXM", 19.5 / (312.0 * 0.5), 156.0 / 312.0),
    ("H100 SXM", 67.0 / (989.4 * 0.5), 494.7 / 989.4),
    ("MI300X", 163.4 / 1307.4, 653.7 / 1307.4),  # FP32 GEMMs already on matrix cores: no efficiency term
])
def test_path_factors(gpu, fp32, tf32):
    g = find_gpu(gpu)
    assert A._path_factor(g, "fp32", 0.5) == fp32
    assert A._path_factor(g, "tf32", 0.5) == tf32


def test_exact_values():
    assert A._path_factor(find_gpu("A100 40GB SXM"), "fp32", 0.5) == 0.125
    # the datasheets' peaks, not the GPU table's: V100 SXM2 15.7 fp32 / 125 Tensor TFLOPS (NVIDIA V100
    # datasheet); H100 SXM 67 fp32 / 989.4 dense fp16 Tensor TFLOPS (NVIDIA H100 datasheet)
    assert A._path_factor(find_gpu("V100 SXM2"), "fp32", 0.5) == pytest.approx(15.7 / (125 * 0.5))
    assert A._path_factor(find_gpu("H100 SXM"), "fp32", 1.0) == pytest.approx(67 / 989.4)


def trace(device="NVIDIA A100-SXM4-40GB", names=(SGEMM, TF32, HGEMM, ADD, LN)):
    b = TB()
    calls = [b.call("cudaLaunchKernel", 20 * i, 20 * i + 10) for i in range(len(names))]
    s = 1000
    for c, n in zip(calls, names):
        b.gpu(c, s, s + 8000, name=n)
        s += 8000
    t = b.table()
    t.meta = TraceMeta(devices=[DeviceInfo(id=0, name=device, total_memory_bytes=40 << 30)])
    return build_graph(t)


def run(g, spec):
    """The per-GPU factor model's tests: ``amp`` without a model is ``amp:model=gpu`` here (the
    library model, the default, is tested in test_amp_library.py)."""
    if spec.startswith("amp") and "model=" not in spec:
        spec = "amp:model=gpu" + ("," + spec.split(":", 1)[1] if ":" in spec else "")
    opt, p = parse_spec(spec)
    g2, note = opt.apply(g, p)
    return g2, note


def test_a100_kernels():
    g = trace()
    g2, note = run(g, "amp:floor_ns=0")
    k = np.nonzero(g.node_kind != 0)[0]
    # whole kernels scaled (no floor): sgemm 8000 x 0.125 = 1000; TF32 x 0.5 = 4000; fp16 GEMM unchanged; add x 0.5; layer norm kept fp32
    assert g2.dur_ns[k].tolist() == [1000, 4000, 8000, 4000, 8000]
    assert "A100 40GB SXM model (bf16)" in note and "before: half 0.008, tf32 0.008, fp32 0.024" in note


def test_note_paths_and_paper_model():
    g = trace()
    _, note = run(g, "amp")
    assert "GPU ms per path before:" in note and "after:" in note and "bf16" in note
    g3, _ = run(g, "amp:model=paper")
    k = np.nonzero(g.node_kind != 0)[0]
    # the paper: fp32 compute x1/3, TF32 x1/2, half left, memory-bound (add and layer norm) x1/2
    assert g3.dur_ns[k].tolist() == [2667, 4000, 8000, 4000, 4000]


def test_tf32_on_and_unknown_gpu():
    g = trace(names=("nvjet_tst_128x64_64x4_1x2_h_bz_coopA_NTT", ADD))
    g2, _ = run(g, "amp:floor_ns=0")  # unnamed precision: fp32 CUDA-core
    g3, _ = run(g, "amp:tf32=on,floor_ns=0")
    k = np.nonzero(g.node_kind != 0)[0][0]
    assert g2.dur_ns[k] == 1000 and g3.dur_ns[k] == 4000
    gx = trace(device="Some Unknown GPU")
    _, note = run(gx, "amp")
    assert "paper model" in note
    _, note = run(gx, "amp:gpu=H100 SXM")
    assert "H100 SXM model" in note


def test_half_kernels_left_alone():
    g = trace(names=(HGEMM, HGEMM, SGEMM))
    with pytest.raises(Exception, match="already runs in half precision"):
        run(g, "amp")


def test_fp32_classes_kept():
    """Layer norm is on autocast's fp32 list: unchanged; the paper model halves it."""
    g = trace(names=(SGEMM, LN))
    g2, _ = run(g, "amp:floor_ns=0")
    k = np.nonzero(g.node_kind != 0)[0]
    assert g2.dur_ns[k].tolist() == [1000, 8000]


@pytest.mark.slow
def test_casts_and_loss_scaling_on_resnet50():
    from pathlib import Path

    from daydream.formats import load_trace
    from daydream.mapping import map_events

    p = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "kineto_tbplugin" / \
        "resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"
    if not p.exists():
        pytest.skip("no real traces")
    t = load_trace(str(p))
    g = build_graph(t, map_events(t))
    g2, note = run(g, "amp:dtype=fp16")
    assert "V100 SXM2 model (fp16)" in note and "cast kernels (fp32 weights -> fp16" in note
    assert "fp16 loss scaling (6 step(s))" in note
    g3, note3 = run(g, "amp:casts=off")
    assert "cast" not in note3 and g3.dur_ns.sum() < g2.dur_ns.sum()


def test_casts_not_placed_without_launch_data():
    _, note = run(trace(), "amp")
    assert "cast kernels not placed" in note


def test_shared_datapath_gpus():
    """GA10x/Ada SGEMM reaches 23.25/38.7 of the FP32 peak (gpus.SHARED_DATAPATH_SGEMM); the A10G's
    Tensor Cores run at half the A10's rate, so bf16 gains less there."""
    from daydream.costmodel.gpus import SHARED_DATAPATH_SGEMM

    assert SHARED_DATAPATH_SGEMM == 23.25 / 38.7
    a10g, a10 = find_gpu("NVIDIA A10G"), find_gpu("NVIDIA A10")
    assert (a10g.name, a10.name) == ("A10G", "A10")
    assert find_gpu("NVIDIA A100-SXM4-40GB").name == "A100 40GB SXM"
    assert A._path_factor(a10g, "fp32", 0.5) == 35.0 * SHARED_DATAPATH_SGEMM / 35.0
    assert A._path_factor(a10, "fp32", 0.5) == 31.2 * SHARED_DATAPATH_SGEMM / 62.5
    assert A._path_factor(a10g, "tf32", 0.5) == 0.5 and A._path_factor(a10, "tf32", 0.5) == 0.5
    assert find_gpu("RTX A6000").peak_tflops("fp32") == 23.25  # the measured SGEMM itself
    assert find_gpu("A100 40GB SXM").peak_tflops("fp32") == 19.5  # dedicated FP32 lanes: the peak


def test_a10g_kernels():
    g = trace(device="NVIDIA A10G", names=(SGEMM, HGEMM, ADD))
    g2, note = run(g, "amp:floor_ns=0")
    k = np.nonzero(g.node_kind != 0)[0]
    assert g2.dur_ns[k[0]] == round(8000 * 35.0 * 23.25 / 38.7 / 35.0)
    assert g2.dur_ns[k[1]] == 8000 and g2.dur_ns[k[2]] == 4000
    assert "A10G" in note


def test_amp_after_gpu_upgrade_uses_the_target_gpu():
    """gpu-upgrade then amp: amp models the GPU after the upgrade (H100 SXM), not the traced A100."""
    g = trace()
    g1, _ = run(g, "gpu-upgrade:target=H100 SXM,kernel_model=peak")
    assert [d.name for d in g1.devices] == ["H100 SXM"] and [d.name for d in g.devices] == ["NVIDIA A100-SXM4-40GB"]
    k = np.nonzero(g.node_kind != 0)[0]
    # peak model: compute-bound 8000 x 312/989.4 = 2522.7 -> 2523; memory-bound 8000 x 1555/3350 = 3713.4 -> 3713
    assert g1.dur_ns[k].tolist() == [2523, 2523, 2523, 3713, 3713]
    g2, note = run(g1, "amp:floor_ns=0")
    # H100 SXM factors: sgemm 67 / (989.4 x 0.5) -> 2523 x 0.13544 = 341.7 -> 342 (the A100's 0.125 would give 315);
    # TF32 494.7/989.4 = 0.5 -> 1261.5 -> 1262; the fp16 GEMM unchanged; add x 0.5 -> 1856.5 -> 1856; layer norm kept fp32
    assert g2.dur_ns[k].tolist() == [342, 1262, 2523, 1856, 3713]
    assert note.startswith("H100 SXM model (bf16)")
    g3, _ = run(g, "amp:floor_ns=0")  # amp alone still models the traced A100
    assert g3.dur_ns[k].tolist() == [1000, 4000, 8000, 4000, 8000]


def test_gpu_upgrade_names_a_device_for_an_unnamed_trace():
    g = trace(device="")
    g1, _ = run(g, "gpu-upgrade:source=A100 40GB SXM,target=H100 SXM,kernel_model=peak")
    assert [(d.id, d.name) for d in g1.devices] == [(0, "H100 SXM")]
    _, note = run(g1, "amp")
    assert note.startswith("H100 SXM model (bf16)")


def test_kernel_floor_does_not_scale():
    """floor + (t - floor) x factor: the A100 has no measured floor, so the trace's smallest kernel
    (8 us) capped at the table's largest floor (MI250 GCD, 2,240 ns) is the floor; the H100's is measured."""
    from daydream.costmodel.kernel_model import KERNEL_FLOOR_NS

    assert max(KERNEL_FLOOR_NS.values()) == 2240 and KERNEL_FLOOR_NS["H100 SXM"] == 1120
    g = trace()
    g2, note = run(g, "amp")
    k = np.nonzero(g.node_kind != 0)[0]
    # sgemm 2240 + 5760 x 0.125 = 2960; TF32 2240 + 5760 x 0.5 = 5120; add likewise; fp16 GEMM, layer norm kept
    assert g2.dur_ns[k].tolist() == [2960, 5120, 8000, 5120, 8000]
    assert "above a kernel floor of 2.240 us (0 kernels at or below the floor left as they are)" in note
    g3, note3 = run(g, "amp:floor_ns=8000")  # every kernel at the floor: none changes
    assert g3.dur_ns[k].tolist() == [8000] * 5 and "(3 kernels at or below the floor left as they are)" in note3
    h = trace(device="NVIDIA H100 80GB HBM3")
    h2, _ = run(h, "amp")
    # H100 SXM: sgemm 1120 + 6880 x 67 / (989.4 x 0.5) = 2051.7 -> 2052; TF32 1120 + 6880 x 0.5 = 4560
    assert h2.dur_ns[k].tolist()[:2] == [2052, 4560]


def test_floored_durations_never_exceed_the_recorded_time():
    from hypothesis import given, strategies as st

    @given(st.lists(st.integers(0, 10**9), min_size=1, max_size=50), st.floats(0, 1), st.integers(0, 5000))
    def check(durs, f, floor):
        d = np.array(durs, np.int64)
        fac = np.full(len(d), f)
        new = A.floored_durations(d, fac, fac, floor)
        assert (new <= d).all() and (new >= np.minimum(d, floor)).all()
        assert np.array_equal(new[d <= floor], d[d <= floor])

    check()


def test_bf16_needs_bf16_tensor_cores():
    """Volta's Tensor Cores take fp16 only: amp's default (auto) is fp16 with loss scaling there,
    and an explicit bf16 does not apply (new-user finding: 'V100 SXM2 model (bf16)')."""
    assert not find_gpu("V100 SXM2").bf16 and not find_gpu("V100 PCIe").bf16
    assert find_gpu("A100 40GB SXM").bf16 and find_gpu("MI250 GCD").bf16 and find_gpu("H100 SXM").bf16
    g = trace(device="Tesla V100-SXM2-32GB", names=(SGEMM, ADD))
    g2, note = run(g, "amp")
    assert note.startswith("V100 SXM2 model (fp16, auto: no bf16 Tensor Cores)")
    g3, note3 = run(g, "amp:dtype=fp16")
    assert np.array_equal(g2.dur_ns, g3.dur_ns) and note3.startswith("V100 SXM2 model (fp16)")
    with pytest.raises(Exception, match="no bf16 Tensor Cores"):
        run(g, "amp:dtype=bf16")
    _, note4 = run(trace(), "amp")  # A100: bf16
    assert note4.startswith("A100 40GB SXM model (bf16)")


BN = "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(cudnnTensorStruct, float const*)"
POOL = "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float const*, int)"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true>(float*, float const*, int)"
SUM = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, "
       "at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, "
       "unsigned int, float, 4> >(at::native::ReduceOp<float>)")
MEAN = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>, unsigned int, float, 4> >(int)"
NLL = "void cunn_ClassNLLCriterion_updateOutput_kernel<float, float>(float*, float*, float*, long*, float*, int)"


def test_autocast_fp32_list_by_kernel_name():
    """Ops on autocast's fp32 list (layer norm, softmax, sum, NLL loss) keep fp32 bytes; ops on neither
    list run in their inputs' 16-bit type and halve: batch norm, pooling, mean (new-user finding:
    cuDNN batch norm and max-pool were kept fp32 as 'normalization'/'reduction' classes)."""
    names = (SGEMM, BN, POOL, SOFTMAX, SUM, MEAN, NLL, LN)
    g = trace(names=names)
    g2, _ = run(g, "amp:floor_ns=0")
    k = np.nonzero(g.node_kind != 0)[0]
    assert g2.dur_ns[k].tolist() == [1000, 4000, 4000, 8000, 8000, 4000, 8000, 8000]
    g3, _ = run(g, "amp:model=paper")  # the paper halves every memory-bound kernel
    assert g3.dur_ns[k].tolist()[1:] == [4000] * 7


def test_parameters_of_the_other_model_are_refused():
    """A parameter the model in use does not read is refused, not ignored (was: amp and
    amp:compute_factor=0.01 gave the same prediction); TF32 on a GPU without it does not apply."""
    from daydream.errors import NotApplicable, UsageError

    g = trace()
    for spec, word in (("amp:compute_factor=0.01", "compute_factor is not read by amp:model=gpu"),
                       ("amp:tf32_factor=0.1,compute_factor=0.2", "compute_factor, tf32_factor are not read"),
                       ("amp:model=paper,casts=off", "casts is not read by amp:model=paper"),
                       ("amp:model=paper,tc_efficiency=0.9", "tc_efficiency is not read")):
        with pytest.raises(UsageError, match=word):
            run(g, spec)
    run(g, "amp:model=paper,compute_factor=0.5")  # its own parameters are read
    run(g, "amp:memory_factor=0.4")  # read by both
    with pytest.raises(NotApplicable, match="V100 SXM2 has no TF32 Tensor Cores"):
        run(trace(device="Tesla V100-SXM2-16GB"), "amp:tf32=on")


R50 = sorted((Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "kineto_tbplugin").glob("resnet50*.json.gz"))


@pytest.mark.skipif(not R50, reason="needs ../shared/traces/kineto_tbplugin")
@pytest.mark.parametrize("spec", ["amp", "amp:model=paper"])
def test_optimizer_step_left_alone(spec):
    """Loop-style SGD's per-parameter kernels and zero_grad's fills (the mapped optimizer phase)
    keep their time under amp (fourth try-out: they were halved like any elementwise kernel)."""
    from daydream.formats import load_trace
    from daydream.mapping.rules import PHASES
    from daydream.mapping import map_events

    t = load_trace(str(R50[0]))
    g = build_graph(t, map_events(t))
    opt = (g.mapping.phase == PHASES.index("optimizer")) & (g.node_kind != 0)
    assert opt.sum() > 3000
    g2, note = run(g, spec)
    if spec == "amp":  # V100: fp16, whose GradScaler unscale/inf-check work is spread over the optimizer kernels
        assert "fp16 loss scaling (6 step(s)): +" in note and (g2.dur_ns[opt] >= g.dur_ns[opt]).all()
    else:
        assert np.array_equal(g2.dur_ns[opt], g.dur_ns[opt])


def test_note_on_amd_names_matrix_cores_and_no_efficiency():
    """On an MI300X the fp32 GEMM path is the matrix cores and no Tensor-Core efficiency applies; the
    note said 'CUDA-core ... efficiency 0.5' (try-out finding)."""
    _, note = run(trace(device="AMD Instinct MI300X", names=(SGEMM, ADD)), "amp")
    assert "1 fp32 matrix-core compute kernels" in note and "efficiency" not in note and "CUDA-core" not in note
    _, note = run(trace(), "amp")
    assert "fp32 CUDA-core compute kernels" in note and "efficiency 0.5" in note
