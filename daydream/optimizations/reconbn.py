"""``reconbn``: restructured batch normalization (BN fission-and-fusion, Jung et al., "Restructuring
Batch Normalization to Accelerate CNN Training", SysML 2019, arXiv 1807.01702), the Daydream
paper's "Reconstructing Batchnorm" case study.

The restructuring splits each BN layer in two: the statistics (mean/variance) are computed while
the preceding convolution writes its output, and the normalization is fused with the following
ReLU (and the next convolution's input). The saving is memory traffic: BN and ReLU are
memory-bound, so their time follows the activation-sized passes they make over DRAM.

Pass counting (one pass = reading or writing one activation-sized tensor):

* forward, training: BN reads ``x`` for the statistics, then reads ``x`` and writes ``y``
  (3 passes); ReLU reads ``y`` and writes ``z`` (2). Restructured: the statistics come from the
  convolution's epilogue, and one kernel reads ``x`` and writes ``z`` (2 passes). So the BN
  forward kernels take ``fw_factor`` = 2/3 of their time and the ReLU kernel that follows
  disappears.
* backward: ReLU backward reads ``dz`` and ``z``, writes ``dy`` (3 passes); BN backward reads
  ``dy`` and ``x`` for the dgamma/dbeta reduction, then reads ``dy`` and ``x`` and writes ``dx``
  (5). Restructured: the reduction moves into the epilogue of the convolution backward that
  produces ``dz``, and one kernel reads ``dz`` and ``x`` (the ReLU mask is recomputed from the
  normalized ``x``) and writes ``dx`` (3 passes). So BN backward kernels take ``bw_factor`` = 3/5
  and the ReLU backward kernel before them disappears.

Which tasks: BN kernels by name (cuDNN ``bn_fw_tr_*``/``bn_bw_*``, ATen
``batch_norm_collect_statistics``/``batch_norm_transform_input``/``batch_norm_backward_*``,
MIOpen ``BatchNorm*``; inference-mode BN kernels are not touched); a ReLU kernel (``relu``,
``clamp_min``, ``clamp_scalar``, ``threshold``) is fused when it is the next task on a BN forward
kernel's stream, or the previous task on the stream of a BN backward kernel whose forward BN had
its ReLU fused (:func:`mirrored`: a ReLU after a residual add is not fused, in either pass).
Fused ReLU kernels are removed with their launch calls and the CPU gaps before them. The extra epilogue work in the convolutions is not
modelled (it is small next to a GEMM; see docs/optimizations.md).
"""

from __future__ import annotations

import numpy as np

from ..util.arrays import sorted_unique
from ..graph import kernels as K
from ..errors import NotApplicable
from ..events.table import Kind
from ..transform import remove, scale
from . import Optimization, Param, register
from .comm_common import step_of_nodes
from .common import name_mask
from .fusion import without_intermediates

BN_BW = r"(?i)bn_bw|batch_?norm_?backward|batchnorm_?bwd|BatchNormBwd|batch_norm_backward"
BN_FW = r"(?i)bn_fw_tr|bn_fw(?!_inf)|batch_norm_collect_statistics|batch_norm_transform_input|batch_norm_elemt|batch_norm_stats|batchnorm_?fwd_?train|BatchNormFwdTrain|batch_norm_update_stats"
BN_INFER = r"(?i)_inf_|inference|BatchNormFwdInfer"
#: ReLU kernels: ``relu``, ``clamp_min``, ``clamp_scalar`` (PyTorch 2.x ``relu`` as ``clamp(min=0)``:
#: ``launch_clamp_scalar``), ``threshold`` (``threshold_backward``)
RELU = r"(?i)relu|clamp_min|clamp_scalar|threshold"


def bn_masks(graph) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(BN forward kernels, BN backward kernels, fusable ReLU after BN fw, ReLU bw before BN bw)."""
    kern = graph.node_kind == Kind.KERNEL
    info = K.kernel_info(graph)
    norm = kern & info.is_class("normalization")
    bw = name_mask(graph, BN_BW, norm)
    fw = name_mask(graph, BN_FW, norm & ~bw) & ~name_mask(graph, BN_INFER, norm)
    relu = name_mask(graph, RELU, kern & info.is_class("elementwise") & (graph.launch >= 0))
    prev = graph.lane_prev
    has_prev = prev >= 0
    relu_fw = relu & has_prev & fw[np.maximum(prev, 0)]
    # ReLU backward: the task right before a BN backward kernel on its stream, of a BN whose forward ReLU is fused
    relu_bw = np.zeros(graph.n, dtype=bool)
    relu_bw[prev[mirrored(graph, fw, bw, relu_fw) & has_prev]] = True
    relu_bw &= relu & ~relu_fw
    return fw, bw, relu_fw, relu_bw


def mirrored(graph, fw: np.ndarray, bw: np.ndarray, relu_fw: np.ndarray) -> np.ndarray:
    """Mask of the BN backward kernels whose BN forward had its ReLU fused. Backward runs a step's
    layers in the reverse order of forward, so within a ProfilerStep (the whole trace without
    steps) the k-th BN backward kernel from the end mirrors the k-th BN forward kernel from the
    start (by recorded start; a layer of two kernels mirrors as a pair). A BN whose output goes
    through a residual add before its ReLU keeps that ReLU in forward (it follows the add, not the
    BN), and its ReLU backward too: its mask needs the add's output, which the restructured BN
    backward cannot recompute. A step whose BN forward and backward kernel counts differ (cut by
    the window) fuses no backward ReLU."""
    out = np.zeros(graph.n, dtype=bool)
    fused = np.zeros(graph.n, dtype=bool)
    fused[graph.lane_prev[relu_fw]] = True  # the BN forward kernels followed by a fused ReLU
    steps = step_of_nodes(graph)
    for st in sorted_unique(steps[fw | bw]).tolist():  # ProfilerSteps: a handful
        f = np.nonzero(fw & (steps == st))[0]
        b = np.nonzero(bw & (steps == st))[0]
        if len(f) != len(b):
            continue
        f = f[np.argsort(graph.rec_start_ns[f], kind="stable")]
        b = b[np.argsort(graph.rec_start_ns[b], kind="stable")]
        out[b[fused[f][::-1]]] = True
    return out


def _apply(graph, p):
    fw, bw, relu_fw, relu_bw = bn_masks(graph)
    if not (fw.any() or bw.any()):
        raise NotApplicable("no batch-normalization kernels in the trace (cuDNN bn_fw/bn_bw, ATen batch_norm)")
    g = scale(graph, fw, p["fw_factor"])
    g = scale(g, bw, p["bw_factor"])
    n_relu = n_mid = 0
    if p["fuse_relu"]:
        relu = relu_fw | relu_bw
        drop = relu.copy()
        la = graph.launch[relu]
        n_launched = np.bincount(graph.launch[graph.launch >= 0], minlength=graph.n)
        n_drop = np.bincount(la, minlength=graph.n)
        calls = sorted_unique(la)
        drop[calls[n_drop[calls] == n_launched[calls]]] = True
        n_relu = int(relu.sum())
        g = remove(g, drop)
        g, n_mid = _memory(graph, g, relu_fw, relu_bw, drop)
    bn_ns = int(graph.dur_ns[fw | bw].sum())
    relu_ns = int(graph.dur_ns[relu_fw | relu_bw].sum()) if p["fuse_relu"] else 0
    return g, (f"{int(fw.sum()):,} BN forward kernels x{p['fw_factor']:.3g}, {int(bw.sum()):,} BN backward x{p['bw_factor']:.3g}, "
               f"{n_relu:,} ReLU kernels fused away (BN {bn_ns / 1e6:,.3f} ms, ReLU {relu_ns / 1e6:,.3f} ms before)"
               + (f"; {n_mid:,} tensors between BN and its ReLU no longer allocated" if n_mid else ""))


def _memory(graph, g, relu_fw: np.ndarray, relu_bw: np.ndarray, drop: np.ndarray):
    """Memory (``docs/memory.md``, "reconbn"): each fused pair (BN forward and the ReLU after it;
    the ReLU backward and the BN backward after it) is a chain of ``fusion``'s rule
    (:func:`daydream.optimizations.fusion.without_intermediates`) whose fused kernel is the BN's:
    the tensor one makes and the other consumes, freed after the pair (a non-inplace ReLU's input,
    the ReLU backward's output), is no longer allocated; an in-place ReLU allocates nothing, and
    nothing changes. What the removed ReLU calls' host work allocated moves to the BN's call."""
    rf, rb = np.flatnonzero(relu_fw), np.flatnonzero(relu_bw)
    fw_pairs = np.stack([graph.lane_prev[rf], rf], 1)
    bw_pairs = np.stack([rb, graph.lane_next[rb]], 1)
    pairs = np.concatenate([fw_pairs, bw_pairs]).astype(np.int64)
    pairs = pairs[(pairs >= 0).all(axis=1) & (graph.launch[np.maximum(pairs, 0)] >= 0).all(axis=1)]
    if not len(pairs):
        return g, 0
    bn = np.where(np.isin(pairs[:, 1], rf), pairs[:, 0], pairs[:, 1])  # forward: BN first; backward: BN second
    members = pairs.reshape(-1)
    chain = np.repeat(np.arange(len(pairs)), 2)
    return without_intermediates(graph, g, members, chain, drop, heads=graph.launch[bn])


register(
    Optimization(
        name="reconbn",
        summary="restructured batch norm (BN fission-n-fusion, Jung et al.): fewer memory passes, ReLU fused into BN",
        apply=_apply,
        params={
            "fw_factor": Param(2 / 3, "BN forward duration multiplier: 3 activation passes -> 2 (statistics moved into the "
                               "conv epilogue; Jung et al. 2019 restructuring, pass count in docs/optimizations.md)", float,
                               lambda v: 0 <= v <= 1, "0..1"),
            "bw_factor": Param(3 / 5, "BN backward duration multiplier: 5 activation passes -> 3 (reduction moved into the "
                               "conv-backward epilogue; same source)", float, lambda v: 0 <= v <= 1, "0..1"),
            "fuse_relu": Param(1, "1: the ReLU (forward and backward) next to each BN kernel is fused away; 0: kept", int,
                               lambda v: v in (0, 1), "0 or 1"),
        },
    )
)
