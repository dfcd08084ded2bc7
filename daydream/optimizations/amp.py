"""``amp``: automatic mixed precision (fp32 training -> fp16/bf16 compute with fp32 master weights).

Model (the Daydream paper's AMP model: Zhu, Phanishayee, Pekhimenko, USENIX ATC 2020, arXiv
2006.03318, the "Automatic Mixed Precision" case study of the section that models optimizations
with the primitives; docs/optimizations.md): AMP changes kernel durations only. Kernels that can use Tensor Cores (GEMMs,
convolutions, fused attention: compute-bound, :mod:`daydream.kernels`) become ``compute_factor``
(1/3) as long; every other kernel is memory-bound and moves half the bytes, so it becomes
``memory_factor`` (1/2) as long. CPU tasks are unchanged (the framework launches the same ops).

What is not scaled, and why:

* kernels already in half precision or fp8 (by name, :data:`daydream.kernels.PRECISION_RULES`):
  AMP does not change them. When most of the GEMM/convolution/attention time (of known
  precision) is already half/fp8 (:data:`HALF_SHARE`), the trace already runs in mixed
  precision, the fp32 kernels left are those autocast keeps in fp32, and the optimization does
  not apply ("the trace already runs in half precision");
* optimizer kernels (multi-tensor apply, fused optimizers): under ``torch.autocast`` the
  optimizer updates fp32 master weights and fp32 gradients;
* communication kernels: gradients stay fp32 under autocast, so all-reduce volume is unchanged;
* memcpy/memset tasks (copy engines: input batches stay fp32), fp64, integer and boolean
  kernels (autocast converts fp32 ops only) and kernels of class ``other`` (unknown work).

Kernels whose name gives no precision (``nvjet_*``, Triton) are taken as fp32, PyTorch's default
(a trace whose known-precision GEMMs are mostly half does not get this far, see above).

TF32 GEMMs (Ampere and later run fp32 GEMMs/convolutions on Tensor Cores as TF32) are already on
Tensor Cores at half the fp16 rate: they scale by ``tf32_factor`` (1/2: dense FP16 / dense TF32
Tensor-Core throughput is 312/156 TFLOPS on A100 and 989/495 on H100 SXM, NVIDIA A100 and H100
datasheets).
"""

from __future__ import annotations

import numpy as np

from .. import kernels as K
from ..errors import NotApplicable
from ..events import Kind
from ..transform import scale
from . import Optimization, Param, register


#: A trace whose compute-bound kernel time (of known precision) is more than this share fp16/bf16/
#: fp8 already runs in mixed precision: the fp32 kernels left in it are the ones autocast keeps
#: in fp32 (losses, normalization statistics), so AMP does not apply.
HALF_SHARE = 0.5


def _targets(graph, info: K.KernelInfo):
    """(fp32 compute-bound mask, TF32 compute-bound mask, memory-bound mask, half/fp8 kernels,
    half share of the known-precision compute-bound time)."""
    kern = graph.node_kind == Kind.KERNEL
    low = info.has_precision(*K.LOW_PRECISIONS)
    unknown = info.has_precision("unknown")
    comp = kern & info.is_bound("compute")
    known = comp & ~unknown
    t_low = int(graph.dur_ns[known & low].sum())
    t_all = int(graph.dur_ns[known].sum())
    share = t_low / t_all if t_all > 0 else 0.0
    floaty = info.has_precision("fp32", "tf32") | unknown  # no precision in the name: the fp32 default
    eligible = kern & ~info.is_class("optimizer", "communication", "other")
    c32 = eligible & comp & floaty & ~info.has_precision("tf32")
    ctf = eligible & comp & info.has_precision("tf32")
    mem = eligible & info.is_bound("memory") & floaty
    already = int(np.count_nonzero(eligible & info.is_bound("compute", "memory") & low))
    return c32, ctf, mem, already, share


def _apply(graph, p):
    info = K.kernel_info(graph)
    if not np.any(graph.node_kind == Kind.KERNEL):
        raise NotApplicable("the trace has no GPU kernels")
    c32, ctf, mem, already, share = _targets(graph, info)
    if share > HALF_SHARE:
        raise NotApplicable(f"the trace already runs in half precision ({share:.0%} of the GEMM/convolution/attention time "
                            f"of known precision is fp16/bf16/fp8)")
    n = int(np.count_nonzero(c32 | ctf | mem))
    if n == 0:
        if already:
            raise NotApplicable(f"the trace already runs in half precision ({already:,} half/fp8 kernels, none in fp32)")
        raise NotApplicable("no compute- or memory-bound fp32 kernel in the trace")
    g = scale(graph, c32, p["compute_factor"])
    g = scale(g, ctf, p["tf32_factor"])
    g = scale(g, mem, p["memory_factor"])
    before = int(graph.dur_ns[c32 | ctf | mem].sum())
    after = int(g.dur_ns[c32 | ctf | mem].sum())
    note = (f"{int(c32.sum()):,} fp32 compute-bound kernels x{p['compute_factor']:.3g}, {int(ctf.sum()):,} TF32 x{p['tf32_factor']:.3g}, "
            f"{int(mem.sum()):,} memory-bound x{p['memory_factor']:.3g} (GPU time {before / 1e6:.3f} -> {after / 1e6:.3f} ms)")
    if already:
        note += f"; {already:,} kernels already half/fp8 left as they are"
    return g, note


def _factor(v: float) -> bool:
    return 0 <= v <= 1


register(
    Optimization(
        name="amp",
        summary="automatic mixed precision: fp32 GEMM/conv kernels 3x faster, memory-bound kernels 2x (Daydream AMP model)",
        apply=_apply,
        params={
            "compute_factor": Param(1 / 3, "duration multiplier of fp32 compute-bound kernels (GEMM, conv, attention); "
                                    "1/3 = the Daydream paper's AMP model (Tensor-Core kernels 3x faster)", float, _factor, "0..1"),
            "memory_factor": Param(0.5, "duration multiplier of fp32 memory-bound kernels; 1/2 = half the bytes moved "
                                   "(Daydream paper's AMP model)", float, _factor, "0..1"),
            "tf32_factor": Param(0.5, "duration multiplier of TF32 Tensor-Core kernels; 1/2 = dense FP16/TF32 Tensor-Core "
                                 "throughput ratio (NVIDIA A100 datasheet 312/156 TFLOPS, H100 SXM 989/495)", float, _factor, "0..1"),
        },
    )
)
