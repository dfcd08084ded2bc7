"""Shaped programs: ops that record their input shapes, and kernels whose times follow a documented
cost function of those shapes. The judge of the shape what-ifs (``shape``, ``problem-size``;
docs/scaling.md).

A :class:`ShapedSpec` is a small Transformer-like step on one thread: ``layers`` repetitions of a
block of ops (each a ``cpu_op`` range with ``Input Dims`` / ``Input type``, host work and one
kernel launch) between a data-loader range and an optimizer step. :func:`shaped_program` builds
the :class:`~daydream.testing.emulator.program.Program` of a spec at problem-size factors
(batch, sequence, hidden, layers): the same program with every op's shapes changed by the rule of
its kind (docs/scaling.md), the data loader's host time per sample kept, the optimizer's kernels
over the parameters' elements.

Cost function (:func:`kernel_ns`): a kernel's time is the kernel-cost library's model time on
:data:`GPU` (:func:`daydream.costmodel.predict_model`: floor + max(compute, memory), waves of the
grid the model tiles) at the op's shapes, rounded to whole ns; the recorded grid is the one the
model tiles (``B·⌈M/TM⌉·⌈N/TN⌉`` blocks for GEMMs and attention). So a what-if that re-costs each
kernel with the library at the new shapes, anchored on the recorded time, is exact up to the
rounding of the recorded times (a kernel recorded at ``round(T)`` predicts ``T' ± ½·T'/T``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...costmodel import Kernels, find_spec, predict_model
from ...costmodel.kernel_time import source_geometry
from .ops import Allocate, DeviceSync, HostWork, Launch, RangeBegin, RangeEnd
from .program import Program, Thread

#: the GPU whose model times the shaped kernels take (the emulator's trace writes an H100-like
#: device: 132 SMs, 80 GB)
GPU = "H100 SXM"
_MAIN = 7
_GEMM = "ampere_sgemm_128x64_tn"
_FLASH = "flash_fwd_kernel"
_ELEM = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float> >"
_GELU = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>"
_LN = "void at::native::vectorized_layer_norm_kernel<float, float>"
_SOFTMAX = "void at::native::cunn_SoftMaxForward<4, float, float, float, at::native::SoftMaxForwardEpilogue>"
_ADAM = "void at::native::multi_tensor_apply_kernel<at::native::FusedAdamMathFunctor<float, 4> >"
#: op kinds of a block: (ATen op name, kernel name)
KINDS = {
    "linear": ("aten::addmm", _GEMM), "linear4": ("aten::addmm", _GEMM), "bmm_qk": ("aten::bmm", _GEMM),
    "bmm_pv": ("aten::bmm", _GEMM), "softmax": ("aten::_softmax", _SOFTMAX), "ln": ("aten::native_layer_norm", _LN),
    "add": ("aten::add", _ELEM), "gelu": ("aten::gelu", _GELU), "sdpa": ("aten::_scaled_dot_product_flash_attention", _FLASH),
}
_TYPE = {"fp32": "float", "bf16": "c10::BFloat16"}


@dataclass(frozen=True)
class ShapedSpec:
    """A shaped step: batch ``B``, sequence ``S``, hidden ``H`` with ``heads`` heads (head dim
    ``H / heads``), ``block``: op kinds (:data:`KINDS`) of one layer, repeated ``layers`` times;
    ``dtype`` fp32 or bf16; ``host_ns``: host work before each op; ``call_ns``: each launch call's
    CPU time; ``loader_ns``: the data loader's host time for the batch (per sample: ``/ B``);
    ``optimizer``: whether the step ends with the optimizer's kernel; ``memory``: whether the
    program allocates (parameters, activations, gradients, optimizer state) and runs a backward
    pass (:func:`shaped_program`)."""

    B: int
    S: int
    H: int
    heads: int
    block: tuple
    layers: int = 2
    dtype: str = "fp32"
    host_ns: int = 3_000
    call_ns: int = 4_000
    loader_ns: int = 40_000
    optimizer: bool = True
    #: with the caching allocator's events and a backward pass (:func:`shaped_program`, memory)
    memory: bool = False


def dims_of(kind: str, B: int, S: int, H: int, nh: int) -> list:
    """``Input Dims`` of an op of ``kind`` at batch ``B``, sequence ``S``, hidden ``H``, ``nh`` heads
    (PyTorch's argument order; ``[]`` a scalar)."""
    hd = H // nh
    out = {"linear": H, "linear4": 4 * H}.get(kind)
    if out is not None:  # addmm(bias, x[B*S, H], W^T[H, out])
        return [[out], [B * S, H], [H, out], [], []]
    if kind == "bmm_qk":
        return [[B * nh, S, hd], [B * nh, hd, S]]
    if kind == "bmm_pv":
        return [[B * nh, S, S], [B * nh, S, hd]]
    if kind == "softmax":
        return [[B, nh, S, S], [], []]
    if kind == "ln":
        return [[B, S, H], [H], [H], [H], []]
    if kind == "add":
        return [[B, S, H], [B, S, H], []]
    if kind == "gelu":
        return [[B, S, 4 * H], []]
    if kind == "sdpa":
        return [[B, nh, S, hd], [B, nh, S, hd], [B, nh, S, hd], [], []]
    raise ValueError(f"unknown op kind {kind!r}")


def kernel_of(kind: str, B: int, S: int, H: int, nh: int, dtype: str) -> Kernels:
    """The one kernel an op of ``kind`` launches, as the cost library sees it (cuBLAS shapes:
    a PyTorch ``x[m, k] · w[k, n]`` is M = n, N = m, K = k)."""
    hd = H // nh
    name = KINDS[kind][1]
    if kind in ("linear", "linear4"):
        out = H if kind == "linear" else 4 * H
        return Kernels.make("linear", name, B=1, M=out, N=B * S, K=H, dtype=dtype)
    if kind == "bmm_qk":
        return Kernels.make("bmm", name, B=B * nh, M=S, N=S, K=hd, dtype=dtype)
    if kind == "bmm_pv":
        return Kernels.make("bmm", name, B=B * nh, M=hd, N=S, K=S, dtype=dtype)
    if kind == "sdpa":
        return Kernels.make("attention", name, B=B * nh, M=S, N=S, K=hd, dtype=dtype)
    if kind == "softmax":  # row-wise kernels: B = rows
        return Kernels.make("softmax", name, B=B * nh * S, elems=B * nh * S * S, dtype=dtype)
    if kind == "ln":
        return Kernels.make("ln", name, B=B * S, elems=B * S * H, dtype=dtype)
    if kind == "add":
        return Kernels.make("elementwise", name, elems=B * S * H, inputs=2, dtype=dtype)
    if kind == "gelu":
        return Kernels.make("elementwise", name, elems=B * S * 4 * H, inputs=1, dtype=dtype)
    raise ValueError(f"unknown op kind {kind!r}")


#: the caching allocator's block granularity: PyTorch's CUDACachingAllocator rounds every request up
#: to a multiple of 512 bytes (``kMinBlockSize``, c10/cuda/CUDACachingAllocator.cpp)
BLOCK_BYTES = 512
_ESIZE = {"fp32": 4, "bf16": 2}


def block_bytes(n: int) -> int:
    """The allocator's block for a request of ``n`` bytes (:data:`BLOCK_BYTES` multiples, at least one)."""
    return max(1, -(-n // BLOCK_BYTES)) * BLOCK_BYTES


def output_elems(kind: str, B: int, S: int, H: int, nh: int) -> int:
    """Elements of the output tensor of an op of ``kind`` (its activation, kept for the backward)."""
    hd = H // nh
    return {"linear": B * S * H, "linear4": B * S * 4 * H, "bmm_qk": B * nh * S * S, "bmm_pv": B * nh * S * hd,
            "softmax": B * nh * S * S, "ln": B * S * H, "add": B * S * H, "gelu": B * S * 4 * H,
            "sdpa": B * nh * S * hd}[kind]


#: the backward kernel of every shaped op when the program has memory (ns: its time plays no part in the peaks)
_BWD_NS = 5_000
_BWD = "void at::native::elementwise_kernel<128, 2, backward>"

#: every shaped kernel's block (the trace records it; the cost function uses it)
BLOCK = (256, 1, 1)


def kernel_ns(k: Kernels) -> tuple[int, tuple]:
    """(time in ns, grid) of one kernel ``k`` (module docstring: the cost function), launched
    with :data:`BLOCK`."""
    gpu = find_spec(GPU)
    k.block = np.array([BLOCK], np.int64)
    t = int(np.rint(predict_model(k, gpu)[0]))
    blocks = int(source_geometry(k, gpu).blocks[0]) if k.cls[0] in ("linear", "bmm", "attention") else \
        max(1, -(-int(k.elems[0]) // 1024))
    return t, (blocks, 1, 1)


def _op(name: str, dims: list, dtype: str, kname: str, k: Kernels, spec: ShapedSpec) -> list:
    t, grid = kernel_ns(k)
    types = [_TYPE[dtype] if d else "Scalar" for d in dims]
    return [HostWork(spec.host_ns), RangeBegin(name, "cpu_op", tuple(tuple(d) for d in dims), tuple(types)),
            HostWork(1_000), Launch(_MAIN, kname, t, spec.call_ns, grid=grid), RangeEnd()]


def scaled(spec: ShapedSpec, batch: float = 1, seq: float = 1, hidden: float = 1) -> tuple[int, int, int, int]:
    """(B, S, H, heads) at the factors: ``round(B·batch)`` etc.; the hidden size grows by heads
    (the head dimension stays: ``heads·hidden``)."""
    nh = int(round(spec.heads * hidden))
    return int(round(spec.B * batch)), int(round(spec.S * seq)), nh * (spec.H // spec.heads), nh


def shaped_program(spec: ShapedSpec, batch: float = 1, seq: float = 1, hidden: float = 1, layers: int = 1,
                   launch_latency_ns: int = 5_000, gpu_gap_ns: int = 1_000) -> Program:
    """The program of ``spec`` at the factors (module docstring): a ``ProfilerStep#1`` with the data
    loader's range (host time ``loader_ns · batch``), ``spec.layers · layers`` blocks, the optimizer's
    fused Adam kernel over the weights (``12·H²`` elements per layer: fp32 master weights, two
    moments, the gradient: 4 tensors read and written), and a device synchronize.

    With ``spec.memory``, the caching allocator's events (each request rounded up to
    :data:`BLOCK_BYTES`): the fp32 parameters (``4·12·H²`` bytes per layer) allocated before the
    step; each forward op's output (:func:`output_elems`, the spec's dtype) allocated before its
    launch; then a backward (per op in reverse, an ``autograd::engine::evaluate_function`` range
    that frees the op's output, allocates a linear op's fp32 weight gradient ``[H, out]`` (kept)
    and launches a kernel of :data:`_BWD_NS`); Adam's two moments (``8·12·H²·layers`` bytes,
    kept) allocated in the optimizer step. Each block at a distinct address."""
    B, S, H, nh = scaled(spec, batch, seq, hidden)
    L = spec.layers * layers
    n_par = 12 * H * H * L  # two H x H (..4H) weights per layer: 12 H^2 parameters
    mem = spec.memory
    addr = iter(range(0x7F0000000000, 0x7FFFFFFFFFFF, 1 << 32))  # a distinct address per block
    ops: list = []
    if mem:  # the model's fp32 parameters, one block per layer, before the step (alive after it)
        ops += [Allocate(block_bytes(4 * 12 * H * H), addr=next(addr)) for _ in range(L)] + [HostWork(1_000)]
    ops += [RangeBegin("ProfilerStep#1"),
            RangeBegin("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation"),
            HostWork(int(round(spec.loader_ns * B / spec.B))), RangeEnd()]
    acts = []
    for layer in range(L):
        ops.append(RangeBegin(f"nn.Module: Block_{layer}", "python_function"))
        for kind in spec.block:
            name, kname = KINDS[kind]
            op = _op(name, dims_of(kind, B, S, H, nh), spec.dtype, kname, kernel_of(kind, B, S, H, nh, spec.dtype), spec)
            if mem:  # the op's output, allocated before its kernel's launch and kept for the backward
                a = (block_bytes(_ESIZE[spec.dtype] * output_elems(kind, B, S, H, nh)), next(addr))
                acts.append((kind, a))
                op.insert(3, Allocate(a[0], addr=a[1]))
            ops += op
        ops.append(RangeEnd())
    if mem:  # the backward: per op in reverse, the engine's function frees its activation (and makes the weight's gradient)
        for kind, (b, ad) in reversed(acts):
            ops += [HostWork(spec.host_ns), RangeBegin(f"autograd::engine::evaluate_function: {kind.capitalize()}Backward0"),
                    Allocate(-b, addr=ad)]
            if kind in ("linear", "linear4"):  # the fp32 gradient of its weight [H, out], alive after the step
                ops.append(Allocate(block_bytes(4 * H * (H if kind == "linear" else 4 * H)), addr=next(addr)))
            ops += [HostWork(1_000), Launch(_MAIN, _BWD, _BWD_NS, spec.call_ns, grid=(1, 1, 1)), RangeEnd()]
    if spec.optimizer:
        k = Kernels.make("elementwise", _ADAM, elems=4 * n_par, inputs=1, dtype="fp32")  # 4 tensors streamed
        ops.append(RangeBegin("Optimizer.step#Adam.step"))
        op = _op("aten::_fused_adam_", [[n_par], [n_par], [n_par], [n_par]], "fp32", _ADAM, k, spec)
        if mem:  # Adam's two fp32 moments, made at the first step and never freed
            op.insert(3, Allocate(block_bytes(8 * n_par), addr=next(addr)))
        ops += op
        ops.append(RangeEnd())
    ops.append(RangeEnd())
    ops += [HostWork(2_000), DeviceSync(3_000)]
    return Program([Thread(ops, pid=4242, tid=4242, name="pt_main_thread")],
                   launch_latency_ns=launch_latency_ns, gpu_gap_ns=gpu_gap_ns)


def shaped_specs(max_layers: int = 3, min_layers: int = 1):
    """Hypothesis strategy of :class:`ShapedSpec` (batch 1-8, sequence 16-512, 1-8 heads of
    16-128, blocks of 1-6 op kinds, ``min_layers``-``max_layers`` layers)."""
    from hypothesis import strategies as st

    return st.builds(
        lambda B, S, nh, hd, block, layers, dtype, host, call: ShapedSpec(B, S, nh * hd, nh, tuple(block), layers, dtype, host, call),
        st.integers(1, 8), st.sampled_from([16, 64, 100, 128, 256, 512]), st.integers(1, 8), st.sampled_from([16, 32, 64, 128]),
        st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=6), st.integers(min_layers, max_layers),
        st.sampled_from(["fp32", "bf16"]), st.integers(0, 20_000), st.integers(1_000, 10_000))
