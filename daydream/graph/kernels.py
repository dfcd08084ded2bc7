"""What a GPU task does, from its name alone: kernel class, numeric precision, and whether it is
compute-bound or memory-bound.

Optimizations need to know which tasks a change touches (AMP speeds up GEMMs more than
elementwise kernels; a kernel-fusion compiler fuses memory-bound chains; a faster GPU scales
compute and bandwidth differently). Traces carry only kernel *names*, so this module classifies
names with ordered rule tables, written as data and read top to bottom (the first rule that
matches decides):

* :data:`KERNEL_RULES`: regular expression -> class and boundness. Classes (:data:`CLASSES`):

  ============== =====================================================================
  gemm           GEMM and convolution (cuBLAS/cuBLASLt ``*gemm*``, ``nvjet``, cuDNN
                 ``scudnn``/``implicit_convolve``/``wgrad``/``dgrad``/``fprop``, xmma,
                 CUTLASS, Triton templates ``triton_tem_*``, ROCm Tensile ``Cijk_*``):
                 Tensor-Core eligible, compute-bound
  elementwise    pointwise kernels (ATen ``vectorized_elementwise_kernel``, Triton
                 ``triton_poi_*``, activation, dropout, casts, cuBLASLt epilogues)
  reduction      reductions, scans, sorts, pooling, BLAS level 1/2 (``reduce_kernel``,
                 ``triton_red_*``/``triton_per_*``, cub, ``gemv``, ``dot``)
  normalization  batch/layer/group/RMS norm (cuDNN ``bn_fw``/``bn_bw``, ATen
                 ``batch_norm``/``layer_norm``)
  softmax_attention  softmax (memory-bound) and fused attention (flash/fmha/SDPA:
                 compute-bound)
  optimizer      multi-tensor apply, fused Adam/SGD, fused embedding optimizers
  communication  NCCL/RCCL and other collective kernels
  copy           memcpy tasks, copy/transpose/concat/gather kernels
  set            memset tasks, fill kernels
  other          anything no rule recognizes
  ============== =====================================================================

* :data:`PRECISION_RULES`: regular expression -> precision (:data:`PRECISIONS`), from the hints
  libraries put in kernel names (see the table's comments).

Boundness (:data:`BOUNDS`): ``compute`` for GEMM/convolution and fused attention, ``memory`` for
elementwise, reduction, normalization, softmax, optimizer, copy and set, ``communication`` for
collectives, ``unknown`` for ``other``.

Everything works on distinct names (a trace has thousands of tasks but a few hundred kernel
names); results per name are cached.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from ..events.table import EventTable, Kind
from ..formats.launch_data import make_key
from . import NODE_CPU
from ..mapping.rules import NAME_PREFIX, PEER_KERNEL_PATTERN  # names are classified on this bounded prefix
from .memo import cached

#: Kernel classes; ``*_code`` arrays hold indices into this tuple.
CLASSES: tuple[str, ...] = (
    "gemm", "elementwise", "reduction", "normalization", "softmax_attention",
    "optimizer", "communication", "copy", "set", "other",
)
CLASS_CODE: dict[str, int] = {c: i for i, c in enumerate(CLASSES)}
#: Boundness values.
BOUNDS: tuple[str, ...] = ("compute", "memory", "communication", "unknown")
BOUND_CODE: dict[str, int] = {b: i for i, b in enumerate(BOUNDS)}
#: Precision values. ``half`` is fp16 or bf16 (16-bit floating point, Tensor-Core rate);
#: ``fp8`` covers 8-bit and narrower floats (fp8 e4m3/e5m2, fp4 e2m1 and MX formats); ``int`` is
#: integer or boolean data (index arithmetic, masks, int8 GEMMs).
PRECISIONS: tuple[str, ...] = ("fp8", "half", "tf32", "fp32", "fp64", "int", "unknown")
PRECISION_CODE: dict[str, int] = {p: i for i, p in enumerate(PRECISIONS)}
#: Precisions that already run at the reduced-precision rate (AMP leaves them alone).
LOW_PRECISIONS: frozenset[str] = frozenset({"fp8", "half"})


@dataclass(frozen=True)
class KernelRule:
    """One classification rule: names matching ``pattern`` (``re.search``) are ``cls``/``bound``."""

    pattern: str
    cls: str
    bound: str
    note: str = ""


_C, _M, _X, _U = "compute", "memory", "communication", "unknown"

#: The kernel-class rules, in order (first match wins). Library facts behind them: cuBLAS names
#: its kernels ``<arch>_<type>gemm_<tile>`` (``volta_sgemm_128x64_nn``, ``ampere_h16816gemm``),
#: cuBLASLt on Hopper/Blackwell ``nvjet_*``; cuDNN convolutions are ``*scudnn*``/``*hcudnn*``,
#: ``implicit_convolve_sgemm``, ``wgrad``/``dgrad`` engines, xmma ``*_fprop_*``/``*_dgrad_*``/
#: ``*_wgrad_*`` and CUTLASS ``ImplicitGemmConvolution``; cuDNN batch norm is ``bn_fw_*``/
#: ``bn_bw_*``; PyTorch Inductor names Triton kernels ``triton_<kind>_fused_<ops>_<n>`` with kind
#: ``poi`` (pointwise), ``red`` (reduction), ``per`` (persistent reduction), ``tem`` (template:
#: GEMM/conv); ROCm Tensile GEMMs are ``Cijk_<layout>_...``; NCCL device kernels
#: ``ncclKernel_*``/``ncclDevKernel_*``.
KERNEL_RULES: tuple[KernelRule, ...] = (
    # --- collectives first: "reduce" and "gather" in their names are not compute reductions
    KernelRule(r"(?i)nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|all2all|sendrecv"
               r"|cross_device_reduce|multimem_|one_shot_|two_shot_", "communication", _X),
    # --- all-to-all / expert-parallel libraries whose kernels spin-wait on peers (DeepEP, NVSHMEM, ...)
    KernelRule(PEER_KERNEL_PATTERN, "communication", _X, "all-to-all/EP library kernels (they wait on peers)"),
    # --- PyTorch Inductor / Triton kernels (the kind is in the prefix)
    KernelRule(r"^triton_tem_", "gemm", _C, "Inductor template kernel (mm/conv)"),
    KernelRule(r"^triton_(?:per|red)_fused\w*_softmax", "softmax_attention", _M),
    KernelRule(r"^triton_(?:per|red)_fused\w*(?:layer_norm|batch_norm|group_norm|rms_?norm)", "normalization", _M),
    KernelRule(r"^triton_(?:per|red)_", "reduction", _M),
    KernelRule(r"^triton_poi_", "elementwise", _M),
    # PyTorch 2.0's Inductor named every kernel ``triton__`` + its argument specialization
    # (``triton__0d1d2d3``): no kind in the name. Inductor generates Triton for pointwise and
    # reduction code only (GEMMs and convolutions go to cuBLAS/cuDNN unless autotuned templates,
    # named ``triton_tem_``/``triton_mm`` from 2.1), so such a kernel is memory-bound; its class is
    # refined from its launching op where the trace records one (:func:`refine_by_op`).
    KernelRule(r"^triton__?\d", "elementwise", _M, "PyTorch 2.0 Inductor kernel (kind from the launching op)"),
    # PyTorch 2.0/2.1 Inductor's autotuned GEMM templates before the ``triton_tem_`` prefix:
    # ``triton_mm``, ``triton_bmm``, ``triton_addmm`` (torch/_inductor/kernel/mm.py, bmm.py template names)
    KernelRule(r"^triton_(?:mm|bmm|addmm|conv)(?:_|\d|$)", "gemm", _C, "Inductor GEMM template, older name"),
    # --- specific helpers whose names mention other classes' words ("flash", "conv", "norm")
    KernelRule(r"(?i)reshape_and_cache|page_indices|nchwToNhwc|nhwcToNchw|im2col|col2im", "copy", _M,
               "KV-cache writes and layout transforms"),
    KernelRule(r"(?i)quantiz|quant_|dequant|_to_float|float_to_|_to_half|_to_bf16|rotary|(?<![a-z])rope(?![a-z])", "elementwise", _M,
               "(de)quantization and type conversion, rotary embedding"),
    KernelRule(r"moe::dev::(?:finalize|routing)", "reduction", _M, "mixture-of-experts routing and combine"),
    # --- optimizers (multi-tensor apply kernels, fused optimizers, fused embedding optimizers)
    KernelRule(r"multi_tensor_apply|(?i:fused_?(?:adam|sgd|lamb|optim))|AdamW?Functor|LAMBStage|rowwise_adagrad"
               r"|(?i:adam_kernel|adagrad_kernel|sgd_kernel)", "optimizer", _M),
    # --- fused attention (compute-bound) and softmax (memory-bound)
    KernelRule(r"(?i)flash|fmha|attention|_attn|attn_|sdpa|mem_eff|cutlass[FB]\w*Kernel|xformers", "softmax_attention", _C,
               "fused attention"),
    KernelRule(r"(?i)softmax", "softmax_attention", _M),
    # --- normalization
    KernelRule(r"(?i)\bbn_(?:fw|bw)|batch_?norm|layer_?norm|group_?norm|instance_?norm|rms_?norm"
               r"|GammaBetaBackward|RowwiseMoments|ComputeInternalGradients|ComputeFusedParams", "normalization", _M),
    # --- helpers of GEMM/conv libraries that are not the GEMM itself
    KernelRule(r"(?i)splitKreduce|ReduceSplitK|reduce_wgrad|gemv|dot_kernel|reduce_1Block|nrm2|asum", "reduction", _M,
               "split-K reduction or BLAS level 1/2 (memory-bound)"),
    KernelRule(r"(?i)epilogue::|scal_kernel|axpy|computeOffsets|compute\w*Offsets|scalePackedTensor", "elementwise", _M,
               "GEMM epilogue or conv setup"),
    KernelRule(r"winograd_nonfused::winograd\w*(?:Data|Filter|Output|Delta)|generateWinogradTiles|fft2d_(?:r2c|c2r|c2c)", "elementwise",
               _M, "the data, filter and output transforms of non-fused Winograd and FFT convolutions (the GEMM between is its own kernel)"),
    # --- GEMM and convolution
    KernelRule(r"(?i)(?<!fb)gemm|nvjet|(?<![a-z])bmm|matmul|(?<![a-z])mm_|xmma|cutlass|cublas(?:Lt)?::|Cijk_|tensile"
               r"|conv|scudnn|hcudnn|wgrad|dgrad|fprop|winograd|fft2d|fft_|gridwise_|ck::kernel", "gemm", _C),
    # --- copies and layout (before elementwise: ATen copy kernels are elementwise_kernel<... copy ...>)
    KernelRule(r"(?i)copy|transpose|permute|\bcat_|CatArray|gather|scatter|index_?select|indexSelect|index_elementwise|\bindex_kernel"
               r"|reshape_and_cache|_to_nhwc|_to_nchw|page_indices|flip_kernel|roll_kernel|repeat_interleave", "copy", _M),
    # --- fills (set)
    KernelRule(r"(?i)FillFunctor|fill_kernel|\bfill_|memset|zero_?kernel|^init_\w*\(", "set", _M),
    # --- reductions, scans, sorts, pooling, losses (before the generic elementwise words)
    KernelRule(r"(?i)reduce|reduction|ReduceOp|welford|moments|cub::|scan|radix_?sort|sort_|topk|argmax|argmin|cumsum"
               r"|cumprod|histogram|unique|pool|_nll|nll_|NLLCriterion|cross_entropy|(?<![a-z])dot(?![a-z])|qparam"
               r"|split_embedding_codegen|embedding_bag|EmbeddingBag|pooled|finalize|routing", "reduction", _M),
    # --- elementwise: ATen and generic pointwise names
    KernelRule(r"(?i)elementwise|pointwise|unrolled_|vectorized_|Functor|_kernel_cuda|_kernel_impl|dropout|distribution"
               r"|relu|gelu|silu|swiglu|sigmoid|tanh|threshold|clamp|where|masked|compare|quant|convert|cast"
               r"|rotary|rope|bias|arange|linearize_index|bounds_check|offsets_range|compute_cuda_kernel"
               r"|(?<![a-z])(?:add|sub|mul|div|exp|log|sqrt|rsqrt|pow|neg|abs|sin|cos|fma|axpby)(?![a-z])", "elementwise", _M),
)

#: Precision rules, in order (first match wins). Hints: cuBLAS/cuDNN put the type in the
#: kernel name (``sgemm``/``scudnn`` fp32, ``hgemm``/``h884``/``h1688``/``h16816`` fp16 Tensor
#: Cores on Volta/Turing/Ampere, ``s1688``/``s16816`` on Ampere+ with no 16-bit hint = TF32
#: Tensor Cores with fp32 I/O, ``dgemm`` fp64); xmma/CUTLASS spell the operand types
#: (``f16f16_f16f32``, ``bf16``, ``tf32f32``; mangled CUTLASS templates ``cutlass::tfloat32_t``,
#: ``cutlass::half_t``, ``cutlass::bfloat16_t``); ATen kernels carry C++ template types
#: (``c10::Half``, ``c10::BFloat16``, ``__nv_bfloat16``, ``float``, ``double``); fp8 kernels
#: say ``e4m3``/``e5m2``/``fp8``; Tensile GEMMs have a type code after the layout
#: (``_HHS_``/``_HB_`` fp16, ``_BBS_`` bf16, ``_SB_``/``_S_`` fp32, ``_DB_`` fp64).
#: Each rule has a tier: a lower tier wins (a kernel that names any 8- or 16-bit type runs at
#: that rate; TF32 next); within the last tier (fp64, fp32, int8) the leftmost hint wins, because
#: C++ kernel names list the data type first and accumulator or index types after it
#: (``reduce_kernel<512, 1, ReduceOp<float, ... long ...>``); an integer type counts only as the
#: first template argument (``ReduceOp<long, ...>``, ``FillFunctor<int>``), never as an index
#: parameter (``splitKreduce_kernel<32, 16, int, float ...>``).
PRECISION_RULES: tuple[tuple[str, str, int], ...] = (
    (r"(?i)e4m3|e5m2|e2m1|e3m2|fp8|float8|hfp8|fp4|mxf[p]?[468]|nvfp4", "fp8", 0),
    (r"^Cijk_[A-Za-z]+_[A-Za-z]+_(?:H|HH|HHS|HSS|BBS|BSS|BS|B)(?:B|H)?_", "half", 1),
    (r"(?i)(?<![a-z0-9])b?f16|(?<![a-z])fp16|bfloat16|__half|(?<![a-z])half(?![a-z])|c10::Half|(?<![a-z])bf16", "half", 1),
    (r"h884|h1688|h16816|h1616|hmma|hgemm|hcudnn|(?<![a-z])h\d{3,}(?:gemm|cudnn)", "half", 1),
    (r"(?i)tf32|tfloat32|s1688|s16816|tensor16x8x8", "tf32", 2),
    (r"^Cijk_[A-Za-z]+_[A-Za-z]+_D(?:B)?_|(?i:(?<![a-z])double(?![a-z])|fp64|(?<![a-z0-9])f64|dgemm|zgemm)", "fp64", 3),
    (r"^Cijk_[A-Za-z]+_[A-Za-z]+_S(?:B)?_|(?i:(?<![a-z])float(?![a-z])|float[24]|fp32|(?<![a-z0-9])f32|sgemm|scudnn"
     r"|cgemm|gcgemm|(?<![a-z])s\d{3,}(?:gemm|cudnn))", "fp32", 3),
    (r"(?i)int8|uint8|imma|(?<![a-z])i8(?![a-z0-9])|(?<=<)(?:long|int|bool|short|unsigned char|signed char)\b", "int", 3),
)

_KERNEL_RX = tuple((re.compile(r.pattern), CLASS_CODE[r.cls], BOUND_CODE[r.bound]) for r in KERNEL_RULES)
_PREC_RX = tuple((re.compile(p), PRECISION_CODE[v], tier) for p, v, tier in PRECISION_RULES)
_OTHER = CLASS_CODE["other"]
_UNKNOWN_BOUND = BOUND_CODE["unknown"]
_UNKNOWN_PREC = PRECISION_CODE["unknown"]


@functools.lru_cache(maxsize=65536)
def _classify(name: str) -> tuple[int, int, int]:
    cls, bound = _OTHER, _UNKNOWN_BOUND
    for rx, c, b in _KERNEL_RX:
        if rx.search(name):
            cls, bound = c, b
            break
    prec, best_tier, best_pos = _UNKNOWN_PREC, 99, 1 << 30
    for rx, p, tier in _PREC_RX:
        if tier > best_tier:
            break
        m = rx.search(name)
        if m is not None and (tier < best_tier or m.start() < best_pos):
            prec, best_tier, best_pos = p, tier, m.start()
    return cls, bound, prec


def classify_name(name: str, kind: int = int(Kind.KERNEL)) -> tuple[str, str, str]:
    """(class, boundness, precision) of one GPU task name. Memcpy tasks are ``copy`` and memset
    tasks ``set`` (memory-bound) whatever their name."""
    c, b, p = classify_names([name], np.asarray([kind]))
    return CLASSES[int(c[0])], BOUNDS[int(b[0])], PRECISIONS[int(p[0])]


def classify_names(names: Sequence[str], kinds: Iterable[int] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Class, boundness and precision codes (uint8 arrays) of ``names``.

    ``kinds`` (events.Kind values, one per name) makes MEMCPY names ``copy`` and MEMSET names
    ``set``. Pass distinct names: each is matched once (and cached).
    """
    n = len(names)
    cls = np.empty(n, dtype=np.uint8)
    bound = np.empty(n, dtype=np.uint8)
    prec = np.empty(n, dtype=np.uint8)
    for i, s in enumerate(names):
        cls[i], bound[i], prec[i] = _classify(str(s)[:NAME_PREFIX])
    if kinds is not None:
        k = np.asarray(list(kinds) if not isinstance(kinds, np.ndarray) else kinds)
        cls[k == Kind.MEMCPY] = CLASS_CODE["copy"]
        cls[k == Kind.MEMSET] = CLASS_CODE["set"]
        bound[(k == Kind.MEMCPY) | (k == Kind.MEMSET)] = BOUND_CODE["memory"]
    return cls, bound, prec


@dataclass
class KernelInfo:
    """Per-node classification of a task graph (length ``graph.n``; CPU nodes hold 255)."""

    cls: np.ndarray
    bound: np.ndarray
    precision: np.ndarray

    def is_class(self, *classes: str) -> np.ndarray:
        return np.isin(self.cls, [CLASS_CODE[c] for c in classes])

    def is_bound(self, *bounds: str) -> np.ndarray:
        return np.isin(self.bound, [BOUND_CODE[b] for b in bounds])

    def has_precision(self, *precs: str) -> np.ndarray:
        return np.isin(self.precision, [PRECISION_CODE[p] for p in precs])


NONE = 255  #: code of CPU nodes in KernelInfo arrays


def kernel_info(graph) -> KernelInfo:
    """Classify every GPU task of a :class:`~daydream.graph.TaskGraph` (vectorized over the
    distinct names; inserted tasks by their given names). Kept in the graph's structure memo
    (:mod:`daydream.graph.memo`): the result is shared, do not change its arrays."""
    return cached(graph, "kernel_info", lambda: _kernel_info(graph))


#: Kernel names that carry no kind (PyTorch 2.0 Inductor, ``triton__0d1d2d``): classified by their
#: launching op's name (:data:`OP_CLASS_RULES`).
NAMELESS_KIND = re.compile(r"^triton__?\d")
#: Launching-op name -> class for :data:`NAMELESS_KIND` kernels, first match wins (ATen op names;
#: Inductor's CPU-side op for a fused kernel is the graph region, which gives no class: elementwise).
OP_CLASS_RULES: tuple[tuple[str, str, str], ...] = (
    (r"(?i)(?<![a-z])(?:mm|addmm|bmm|baddbmm|matmul|linear|conv\w*|_convolution\w*)(?![a-z])", "gemm", _C),
    (r"(?i)softmax", "softmax_attention", _M),
    (r"(?i)norm", "normalization", _M),
    (r"(?i)(?<![a-z])(?:sum|mean|amax|amin|max|min|prod|var|std|cumsum|argmax|argmin|logsumexp|nll_loss\w*|cross_entropy\w*)"
     r"(?![a-z])", "reduction", _M),
)
_OP_RX = tuple((re.compile(p), CLASS_CODE[c], BOUND_CODE[b]) for p, c, b in OP_CLASS_RULES)


def refine_by_op(names: Sequence[str], ops: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(class codes, bound codes) (uint8, one per name) of kernels named without their kind
    (:data:`NAMELESS_KIND`) from their launching op's name ``ops`` ("" none: elementwise, the
    name rule's default); other names by :data:`KERNEL_RULES`."""
    cls = np.empty(len(names), np.uint8)
    bound = np.empty(len(names), np.uint8)
    for i, (s, op) in enumerate(zip(names, ops)):
        c, b, _ = _classify(str(s)[:NAME_PREFIX])
        if NAMELESS_KIND.search(str(s)) and op:
            c, b = next(((c2, b2) for rx, c2, b2 in _OP_RX if rx.search(str(op).removeprefix("aten::"))), (c, b))
        cls[i], bound[i] = c, b
    return cls, bound


def _launch_ops(graph, nodes: np.ndarray) -> list[str]:
    """The launching op's name of each of ``nodes`` (GPU tasks), "" where the trace records none
    (``graph.facts.launch``: its op by (device, correlation))."""
    data = graph.facts.launch if getattr(graph, "facts", None) is not None else None
    if data is None or not len(data) or len(getattr(data, "op", ())) != len(data):
        return [""] * len(nodes)
    key = make_key(graph.device[nodes], graph.correlation[nodes])
    pos = np.searchsorted(data.key, key).clip(0, len(data) - 1)
    hit = (data.key[pos] == key) & (graph.correlation[nodes] >= 0)
    return [str(data.op[p]) if h else "" for p, h in zip(pos.tolist(), hit.tolist())]


def _kernel_info(graph) -> KernelInfo:
    n = graph.n
    cls = np.full(n, NONE, dtype=np.uint8)
    bound = np.full(n, NONE, dtype=np.uint8)
    prec = np.full(n, NONE, dtype=np.uint8)
    gpu = graph.node_kind != NODE_CPU
    if gpu.any():
        nid = graph.name_id[gpu].astype(np.int64)
        kind = graph.node_kind[gpu].astype(np.int64)
        key = nid * 8 + kind  # (name, kind) pairs
        uniq, inv = np.unique(key, return_inverse=True)
        c, b, p = classify_names([graph.names[int(k) // 8] for k in uniq], uniq % 8)
        inv = inv.reshape(-1)
        cls[gpu], bound[gpu], prec[gpu] = c[inv], b[inv], p[inv]
        nameless = np.array([bool(NAMELESS_KIND.search(graph.names[int(k) // 8])) for k in uniq], bool)
        if nameless.any():  # PyTorch 2.0 Triton kernels: the class from the launching op (few kernels: a loop over them)
            idx = np.nonzero(gpu)[0][nameless[inv]]
            c2, b2 = refine_by_op([graph.names[int(i)] for i in graph.name_id[idx]], _launch_ops(graph, idx))
            cls[idx], bound[idx] = c2, b2
    return KernelInfo(cls, bound, prec)


def class_shares(table: EventTable) -> dict[str, float]:
    """Share of GPU time (sum of kernel, memcpy and memset durations) per class, 0..1.

    Empty when the table has no GPU time.
    """
    m = np.isin(table.kind, [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET])
    if not m.any():
        return {}
    dur = (table.end_ns[m] - table.start_ns[m]).clip(min=0).astype(np.float64)
    key = table.name_id[m].astype(np.int64) * 8 + table.kind[m].astype(np.int64)
    uniq, inv = np.unique(key, return_inverse=True)
    c, _, _ = classify_names([table.names[int(k) // 8] for k in uniq], uniq % 8)
    per = np.bincount(c[inv.reshape(-1)], weights=dur, minlength=len(CLASSES))
    total = float(per.sum())
    if total <= 0:
        return {}
    return {CLASSES[i]: float(per[i] / total) for i in range(len(CLASSES)) if per[i] > 0}


def names_of_class(table: EventTable, cls: str = "other") -> dict[str, int]:
    """GPU task names of ``cls`` with their summed duration (ns), largest first (for reports)."""
    m = np.isin(table.kind, [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET])
    out: dict[str, int] = {}
    for nid, k, d in zip(table.name_id[m].tolist(), table.kind[m].tolist(), (table.end_ns[m] - table.start_ns[m]).tolist()):
        s = table.names[nid]
        if CLASSES[int(classify_names([s], [k])[0][0])] == cls:
            out[s] = out.get(s, 0) + int(d)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))
