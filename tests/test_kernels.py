"""Kernel classification (daydream/graph/kernels.py): spot checks on real kernel names, the share of
GPU time left unclassified on every real trace, precision and boundness."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from daydream.graph import kernels as K
from daydream.events.table import Kind
from daydream.formats import load_trace
from daydream.graph import build_graph

TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"
REAL = sorted(p for p in TRACES.glob("*/*") if p.suffix in (".gz", ".json", ".sqlite"))

#: Traces that are not DNN workloads: their kernels are hand-written test programs whose names
#: say nothing about the work (Extra-P's ``test0``..``test4`` loops) or a busy-wait
#: (``torch.cuda._sleep``'s ``spin_kernel``). For them the test pins exactly which names stay
#: ``other`` instead of a share.
NON_DNN_OTHER = {
    "extrap/con_kernel.sqlite": {f"test{i}(double *, unsigned long long, unsigned long long)" for i in range(5)},
    "extrap/profile1.sqlite": {f"test{s}(double *, unsigned long long, unsigned long long)" for s in ("", "0", "1", "2", "3", "4")},
    "hta/cuda_event_sync.json.gz": {"at::cuda::(anonymous namespace)::spin_kernel(long)"},
}
OTHER_MAX_SHARE = 0.05


@pytest.fixture(scope="module")
def tables():
    if not REAL:
        pytest.skip("no real traces in ../shared/traces")
    return {str(p.relative_to(TRACES)): load_trace(str(p)) for p in REAL}


@pytest.mark.slow
def test_other_share_on_real_traces(tables):
    shares = {}
    for name, t in tables.items():
        sh = K.class_shares(t)
        if not sh:
            continue  # no GPU time (cpu_only, the counter-mode CUPTI trace)
        shares[name] = sh.get("other", 0.0)
        others = set(K.names_of_class(t, "other"))
        if name in NON_DNN_OTHER:
            assert others == NON_DNN_OTHER[name], name
        else:
            assert shares[name] <= OTHER_MAX_SHARE, (name, shares[name], list(others)[:5])
    assert len(shares) >= 15


@pytest.mark.parametrize(
    "name, cls, bound",
    [
        ("ampere_sgemm_128x64_tn", "gemm", "compute"),
        ("volta_sgemm_128x64_nn", "gemm", "compute"),
        ("void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(int, int, int, float const*, int, float*)", "gemm", "compute"),
        ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_execute_kernel_cudnn", "gemm", "compute"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm", "compute"),
        ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>(cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4::Params)", "gemm", "compute"),
        ("_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22ImplicitGemmMultistageE", "gemm", "compute"),
        ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", "gemm", "compute"),
        ("volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", "gemm", "compute"),
        # non-fused Winograd / FFT convolution: the transforms are memory-bound passes (try-out finding: amp gave them the GEMM factor)
        ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::WinogradDataParams<float, float>)", "elementwise", "memory"),
        ("void cudnn::winograd_nonfused::winogradWgradDelta4x4<float, float>(cudnn::winograd_nonfused::WinogradDeltaParams<float, float>)", "elementwise", "memory"),
        ("void cudnn::winograd::generateWinogradTilesKernel<0, float, float>(cudnn::winograd::GenerateWinogradTilesParams<float, float>)", "elementwise", "memory"),
        ("void fft2d_r2c_32x32<float, false, 0u, false>(float2*, float const*, int, int, int, int, int, int, int, int, int)", "elementwise", "memory"),
        ("void fft2d_c2r_32x32<float, false, false, 0u, false, false>(float*, float2 const*, int, int, int, int, int, int)", "elementwise", "memory"),
        ("void cudnn::cnn::wgrad_alg0_engine<float, 128, 6, 7, 3, 3, 5, false, 512>(int, int, int, float const*, int, float*)", "gemm", "compute"),
        ("Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN_LDSB0_AFC1_AFEM1_ISA90a", "gemm", "compute"),
        ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_ISA942", "gemm", "compute"),
        ("triton_tem_fused_addmm_relu_0", "gemm", "compute"),
        ("triton_poi_fused_add_cos_sin_0", "elementwise", "memory"),
        ("triton_red_fused_native_layer_norm_0", "normalization", "memory"),
        ("triton_red_fused_sum_1", "reduction", "memory"),
        ("triton_per_fused__softmax_2", "softmax_attention", "memory"),
        ("triton_per_fused_mean_3", "reduction", "memory"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)", "elementwise", "memory"),
        ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}>(at::TensorIteratorBase&)", "copy", "memory"),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()>, unsigned int, float, 4> >(at::native::ReduceOp)", "reduction", "memory"),
        ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(at::native::TensorListMetadata<2>)", "optimizer", "memory"),
        ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "communication", "communication"),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)", "communication", "communication"),
        ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(cudnnTensorStruct, float const*)", "normalization", "memory"),
        ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(float, float, float, float)", "normalization", "memory"),
        ("void at::native::batch_norm_collect_statistics_kernel<at::native::InvStd, float, float, float, int>(at::GenericPackedTensorAccessor)", "normalization", "memory"),
        ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*)", "normalization", "memory"),
        ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true>(float*, float const*, int, int, int)", "softmax_attention", "memory"),
        ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>>(Flash_fwd_params)", "softmax_attention", "compute"),
        ("fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext", "softmax_attention", "compute"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>)", "set", "memory"),
        ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 1, 128, 1>(float*)", "copy", "memory"),
        ("void fbgemm_gpu::permute_2D_data_kernel<false, int, int, decltype(nullptr)>(int, int, int)", "copy", "memory"),
        ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char, (vllm::Fp8KVCacheDataType)1>(__nv_bfloat16 const*)", "copy", "memory"),
        ("at::cuda::(anonymous namespace)::spin_kernel(long)", "other", "unknown"),
    ],
)
def test_spot_checks(name, cls, bound):
    c, b, _ = K.classify_name(name)
    assert (c, b) == (cls, bound)


def test_memcpy_and_memset_tasks_by_kind():
    assert K.classify_name("Memcpy HtoD (Pageable -> Device)", int(Kind.MEMCPY))[:2] == ("copy", "memory")
    assert K.classify_name("[CUDA memset]", int(Kind.MEMSET))[:2] == ("set", "memory")
    # a memcpy named like a kernel is still a copy
    assert K.classify_name("volta_sgemm_128x64_nn", int(Kind.MEMCPY))[0] == "copy"


@pytest.mark.parametrize(
    "name, prec",
    [
        ("volta_h884gemm_64x64_ldg8_nn", "half"),
        ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_nn", "half"),
        ("ampere_h16816gemm_128x128_ldg8_stages_64x3_nn", "half"),
        ("volta_fp16_s884cudnn_fp16_128x128_ldg8_relu_f2f_exp_small_nhwc_tn_v1", "half"),
        ("sm80_xmma_gemm_f16f16_f16f32_f32_nn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel", "half"),
        ("void cutlass::Kernel<cutlass_80_tensorop_f16_s16816gemm_relu_f16_128x128_32x3_nn_align8>(Params)", "half"),
        ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_tn_align1>(Params)", "half"),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::Half, at::native::func_wrapper_t<c10::Half, float>>>", "half"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul> >", "half"),
        ("void at::native::vectorized_elementwise_kernel<8, at::native::FillFunctor<__half>>", "half"),
        ("void hmma_kernel_fp16()", "half"),
        ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_ISA942", "half"),
        ("Cijk_Ailk_Bljk_BBS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0_ISA942", "half"),
        ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x64", "fp8"),
        ("void vllm::scaled_fp8_quant_kernel_strided<c10::BFloat16, c10::Float8_e4m3fn>(c10::Float8_e4m3fn*)", "fp8"),
        ("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16", "tf32"),
        ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>(Params)", "tf32"),
        # cuDNN's CUTLASS engines, mangled (hta/nccl_data, A100): cutlass::tfloat32_t operands on MmaTensorOp
        ("_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionINS1_11threadblock22ImplicitGemmMultistage"
         "INS_4gemm9GemmShapeILi128ELi128ELi16EEENS4_45Conv2dFpropActivationTileAccessIteratorOptimizedINS_11MatrixShapeILi128E"
         "Li16EEENS_10tfloat32_tENS_6layout11TensorNHWCENS_9transform", "tf32"),
        ("_ZN7cutlass6KernelINS_4gemm6kernel4GemmINS1_11threadblock12MmaPipelinedINS1_9GemmShapeILi128ELi128ELi32EEENS_9"
         "transform11threadblock22PredicatedTileIteratorINS_11MatrixShapeILi128ELi32EEENS_6half_tENS_6layout8RowMajorE", "half"),
        ("ampere_sgemm_128x64_tn", "fp32"),
        ("volta_scudnn_128x64_relu_interior_nn_v1", "fp32"),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>, unsigned int, float, 4> >", "fp32"),
        ("Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN_LDSB0_ISA90a", "fp32"),
        ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>(float const*)", "fp32"),
        ("void at::native::unrolled_elementwise_kernel<at::native::CUDAFunctor_add<double>, at::detail::Array<char*, 3>>", "fp64"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<long>, at::detail::Array<char*, 1> >", "int"),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<long, at::native::func_wrapper_t<long>>>", "int"),
        ("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN", "unknown"),
        ("triton_poi_fused_add_cos_sin_0", "unknown"),
    ],
)
def test_precision(name, prec):
    assert K.classify_name(name)[2] == prec


def test_rules_are_data_and_well_formed():
    for r in K.KERNEL_RULES:
        assert r.cls in K.CLASSES and r.bound in K.BOUNDS
    for _, p, tier in K.PRECISION_RULES:
        assert p in K.PRECISIONS and tier >= 0
    # every class the table can give is compute-, memory- or communication-bound
    bounds = {(r.cls, r.bound) for r in K.KERNEL_RULES}
    assert ("gemm", "compute") in bounds and ("elementwise", "memory") in bounds


def test_graph_classification_matches_names(tables):
    t = tables["kineto_tbplugin/resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"]
    g = build_graph(t)
    info = K.kernel_info(g)
    gpu = g.node_kind != 0
    assert np.all(info.cls[~gpu] == K.NONE) and np.all(info.cls[gpu] != K.NONE)
    names = g.node_names()
    for v in np.nonzero(gpu)[0][:: max(1, int(gpu.sum()) // 300)]:
        c, b, p = K.classify_name(str(names[v]), int(g.node_kind[v]))
        assert (K.CLASSES[info.cls[v]], K.BOUNDS[info.bound[v]], K.PRECISIONS[info.precision[v]]) == (c, b, p)
    # the ResNet-50 step is mostly convolutions and batch norm
    sh = K.class_shares(t)
    assert sh["gemm"] > 0.5 and sh["normalization"] > 0.1
