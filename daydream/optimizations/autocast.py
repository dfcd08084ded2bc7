"""Which kernels ``torch.autocast`` runs in 16-bit: autocast's op lists, applied by the launching op.

Source: PyTorch documentation, "Automatic Mixed Precision package - torch.amp", section "Autocast
Op Reference" (CUDA): ops that autocast to ``float16``/``bfloat16`` (:data:`AUTOCAST_LOW_OPS`:
matmul, linear, conv, bmm, baddbmm, addmm, ...) and ops that autocast to ``float32``
(:data:`AUTOCAST_FP32_OPS`: softmax, log_softmax, layer_norm, group_norm, norms, losses,
sum/prod/cumsum, exp/log/pow, ...). Ops on neither list "run in the type of their inputs" (same
page, "Ops that can autocast to float32" / "CUDA Ops that can autocast to float16" preamble).

The rule (:func:`autocast_precision`), per GPU kernel, by the op that launched it
(``graph.facts.launch``'s op name; the kernel name where the trace records no op, as Nsight
Systems traces):

1. an op on the lower-precision list (or, without an op, a compute-bound GEMM/convolution/attention
   kernel): 16-bit;
2. an op on the fp32 list (or, without an op, a kernel whose name is one of theirs,
   :data:`AUTOCAST_FP32_KERNELS`): fp32;
3. an op on neither list (elementwise, batch norm, pooling, mean/max reductions, copies): the type
   of its inputs, taken as the output type of the latest kernel of rule 1 or 2 launched before it
   by the same CPU thread (launch order is data order within a thread's forward and backward
   passes); fp32 before any (the step's inputs are fp32) and after an optimizer kernel (the
   optimizer updates fp32 master weights: a new iteration starts from fp32 parameters).

A limit of rule 3: an op whose inputs come from two producers of different types (a residual
add of a 16-bit convolution output and an fp32 skip) runs in the wider type in PyTorch (type
promotion); the rule takes the latest producer's. Counted nowhere: there is no dataflow in a trace.
"""

from __future__ import annotations

import numpy as np

from ..events.table import Kind
from ..graph import kernels as K
from ..transform import name_mask

AUTOCAST_PYTORCH_VERSION = "2.4"
#: Ops autocast runs in float32 (CUDA), "Autocast Op Reference".
AUTOCAST_FP32_OPS: tuple[str, ...] = (
    "softmax", "log_softmax", "layer_norm", "group_norm", "norm", "frobenius_norm", "nuclear_norm", "cosine_similarity",
    "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss",
    "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp", "exp", "log",
    "log10", "log2", "log1p", "pow", "reciprocal", "rsqrt", "sinh", "tan", "acos", "asin", "cosh", "erfinv", "prod",
    "cumprod", "cumsum", "sum",
    # the ATen ops these end in (aten::cross_entropy_loss -> log_softmax + nll_loss; nll_loss2d; the
    # backward ops of the list, which autograd runs in the forward's type)
    "cross_entropy_loss", "nll_loss2d", "nll_loss_nd", "binary_cross_entropy", "native_layer_norm", "native_group_norm",
)
#: Ops autocast runs in float16/bfloat16 (CUDA), "Autocast Op Reference", and the backend ops a
#: convolution ends in (autocast casts at conv2d/_convolution; the innermost recorded op is the backend's).
AUTOCAST_LOW_OPS: tuple[str, ...] = (
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv", "linear", "addbmm", "baddbmm", "bmm",
    "chain_matmul", "linalg_multi_dot", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell",
    "rnn_relu_cell", "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
    "cudnn_convolution", "miopen_convolution", "cudnn_convolution_transpose", "_addmm_activation",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention", "_flash_attention_forward",
    "_efficient_attention_forward",
)
#: Kernels of the ops on the fp32 list, by the names ATen, cuDNN and Triton give them (rule 2 for
#: kernels without a recorded op): layer/group norm (incl. their statistics and backward kernels),
#: softmax/log_softmax, losses, sum/prod/cumsum/norm/logsumexp reductions, and the fp32-list
#: elementwise functions (exp, log, pow, reciprocal, rsqrt, ...).
AUTOCAST_FP32_KERNELS = (
    r"(?i)layer_?norm|group_?norm|RowwiseMoments|GammaBetaBackward|ComputeInternalGradients|ComputeFusedParams"
    r"|softmax|_nll|nll_|NLLCriterion|cross_entropy|mse_(?:loss|kernel|backward)|l1_loss|smooth_l1|huber"
    r"|binary_cross_entropy|kl_div|sum_functor|prod_functor|cumsum|cumprod|logsumexp|Norm(?:Two|One|Zero|Inf)?Ops"
    r"|(?<![a-z])(?:exp|log|log10|log2|log1p|pow|reciprocal|rsqrt|sinh|cosh|tan|acos|asin|erfinv)_(?:kernel|tensor|scalar)"
)
_SUFFIXES = ("_backward_data", "_backward_input", "_backward_weight", "_backward", "_forward", "_out", "_")
#: codes of :func:`op_lists`
NEITHER, FP32, LOW = 0, 1, 2


def op_list_of(op: str) -> int:
    """:data:`LOW`, :data:`FP32` or :data:`NEITHER` for an op name (``aten::`` and one of the
    forward/backward/out/in-place suffixes stripped; the backward op of a listed op runs in its
    forward's type)."""
    o = op.removeprefix("aten::")
    for cand in (o, o.lstrip("_"), *(o.removesuffix(s) for s in _SUFFIXES), *(o.lstrip("_").removesuffix(s) for s in _SUFFIXES)):
        if cand in _LOW:
            return LOW
        if cand in _FP32:
            return FP32
    return NEITHER


_LOW = frozenset(AUTOCAST_LOW_OPS)
_FP32 = frozenset(AUTOCAST_FP32_OPS)


def op_lists(ops: np.ndarray) -> np.ndarray:
    """:func:`op_list_of` of each name (int8, shape of ``ops``), once per distinct name."""
    uniq, inv = np.unique(np.asarray(ops, dtype=object).astype(str), return_inverse=True)
    return np.array([op_list_of(u) for u in uniq.tolist()], np.int8)[inv.reshape(-1)] if len(uniq) else np.zeros(0, np.int8)


def autocast_precision(graph, info: K.KernelInfo, row: np.ndarray, optimizer: np.ndarray) -> tuple[np.ndarray, dict]:
    """Per node (bool, shape (n,)): the kernel runs in 16-bit under autocast (module docstring's
    rule); and counts {"by op": kernels decided by their launching op, "by kernel name": without
    one, "by input (rule 3)": ops on neither list}. ``row``: each node's launch record
    (:func:`daydream.costmodel.kernel_model.match_launches`, -1 none); ``optimizer``: the
    optimizer's kernels (bool)."""
    n = graph.n
    kern = graph.node_kind == Kind.KERNEL
    data = graph.facts.launch if graph.facts is not None else None
    has = kern & (row >= 0) & (data is not None and len(data) > 0 and len(getattr(data, "op", ())) == len(data))
    ops = np.full(n, "", dtype=object)
    if has.any():
        ops[has] = np.asarray(data.op, dtype=object)[row[has]]
    has &= ops != ""
    lst = np.zeros(n, np.int8)
    lst[has] = op_lists(ops[has])
    by_name = kern & ~has
    comp = info.is_bound("compute")
    lst[by_name & comp] = LOW
    fp32_name = name_mask(graph, AUTOCAST_FP32_KERNELS, by_name & ~comp)
    lst[fp32_name] = FP32
    lst[kern & optimizer] = FP32
    # rule 3: forward-fill the latest listed kernel's type along each launching thread, in launch order
    low = lst == LOW
    k = np.nonzero(kern)[0]
    call = graph.launch[k]
    thread = np.where(call >= 0, graph.lane[np.maximum(call, 0)], -1 - graph.lane[k])  # unlaunched: their stream
    o = np.lexsort((k, graph.position_ns[k], thread))
    ks, ts, ls = k[o], thread[o], lst[k][o]
    idx = np.where(ls != NEITHER, np.arange(len(ks)), -1)
    start = np.r_[True, ts[1:] != ts[:-1]]
    # a new thread starts without a producer: the fill must not cross threads
    seg = np.cumsum(start) - 1
    base = np.nonzero(start)[0][seg]
    last = np.maximum.accumulate(np.where(idx >= 0, idx, -1))
    last = np.where(last >= base, last, -1)
    filled = np.where(last >= 0, ls[np.maximum(last, 0)], FP32)
    low[ks] = np.where(ls == NEITHER, filled == LOW, ls == LOW)
    counts = {"by op": int((kern & has).sum()), "by kernel name": int(by_name.sum()),
              "by input (rule 3)": int((kern & (lst == NEITHER)).sum())}
    return low & kern, counts
