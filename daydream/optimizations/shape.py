"""``shape`` (and ``batch``, ``seq``, ``hidden``, ``layers``), ``problem-size``: what if the model
ran at another problem size? docs/scaling.md is the user's description; this is the mechanism.

``shape:batch=F,seq=F,hidden=F,layers=N``:

1. **Roles** (:func:`infer_roles`): the batch ``B`` (the leading dimension most of the step's
   ≥3-D activations share), sequence ``S`` (their second), hidden ``H`` (the most common last
   dimension of activations / inner dimension of the linear layers), heads ``nh`` (the second
   dimension of 4-D attention tensors ``[B, nh, S, hd]``), read from the ops' recorded ``Input
   Dims``; each overridable (``batch_size=`` …) and checked: the share of activations whose leading
   dimension is ``B`` is reported.
2. **New shapes** (:func:`dim_factors`): each dimension of each op input gets the factor of its
   role, by position: the leading dimension of a ≥3-D tensor is ``B`` (×batch) or ``B·nh``
   (×batch·hidden: heads grow with the width, the head dimension stays), its other dimensions
   ``S`` (×seq), ``nh`` (×hidden), ``hd`` (×1) or a multiple ``k·H`` (×hidden, k = 1, 2, 3, 4, 8:
   QKV, MLP); a 1-D/2-D tensor's dimensions are tokens ``B·S`` (×batch·seq), ``k·H``, ``B`` or
   ``S``. A value that matches two roles with different factors is ambiguous: the op is kept as
   recorded and counted in the note. Optimizer ops (``adam``, ``sgd``, ``_foreach_``, ``optimizer``
   in the name) stream the parameters: their element counts grow ×hidden²×layers (the weights are
   ``k·H × H`` matrices; biases and norms, ∝ H, are a minority: an assumption, said).
3. **Kernel times**: each kernel of an op with shapes is re-costed by the kernel-cost library at the
   new shapes, anchored on its measured time (:func:`daydream.costmodel.predict_shape`: work from
   the shapes, the recorded grid re-tiled, waves, roofline, floor). GEMMs (``addmm``/``mm``/
   ``bmm``…) and attention by their FLOPs and tiles (an unfused attention's ``bmm`` Q·Kᵀ and
   softmax grow with S² because their shapes do; flash kernels by their tiles), elementwise, norm
   and softmax kernels by their bytes. Kernels of ops of another kind (convolutions, gathers) are
   scaled by their largest input's elements, and kernels without shapes are kept as recorded:
   both counted and named in the note, never scaled silently.
4. **Host**: a CPU op's time stays (launch cost does not grow with the tensor); the data loader's
   time (its ``_SingleProcessDataLoaderIter`` ranges) grows ×batch (a constant time per sample:
   an assumption, said).
5. **Depth** (``layers=N``, an integer): the repeating block (:func:`repeating_block`: the
   ``nn.Module`` ranges of one name pattern, ``Block_0`` … ``Block_{L-1}``, whose tasks form
   identical sequences of names) is repeated: the tasks of each of its last occurrence's nodes,
   CPU launches included, are inserted ``(N - 1) · L`` more times after it
   (:func:`daydream.transform.insert_tasks`), so a launch-bound model stays launch-bound.

``problem-size:factor=S`` (for traces without shapes): each kernel's work grows ×S; its grid too
(blocks ⌈S·blocks⌉), so the new time is ``floor + (t − floor)·S·u(blocks)/u(S·blocks)`` with ``u``
the kernel library's wave fill (:func:`daydream.costmodel.kernel_time.wave_fill`): a kernel at the
floor stays there, a grid of a partial wave fills it before taking longer. Kernels without a
recorded grid: ``floor + (t − floor)·S`` (said).

Memory (``shape`` without ``layers``): the allocator's events at the new shapes
(:mod:`.shape_memory`: each block by its own op's tensor, model state × hidden²·layers, else the
step factor batch·seq·hidden, inferred and counted), so the prediction has its peak and verdict;
``fit=true`` sets the batch factor to the largest that fits (:func:`fit_batch`). A new depth and
``problem-size``: :mod:`.shape_depth_memory` (the block's events copied with its copies, model
state × 1 + (F−1)·share; the forward's and backward's blocks × S).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..costmodel import Kernels, default_constants, find_spec, predict_shape
from ..costmodel.gpu_memory import device_capacity
from ..costmodel.kernel_time import floor_ns, retile, source_geometry, wave_fill
from ..costmodel.work import op_class
from ..errors import NotApplicable
from ..events.table import Kind
from ..graph.host_clock import clock_of
from ..graph.kernels import kernel_info
from ..graph.memory_part import DEFAULT_FRAGMENTATION, recorded_margins
from ..graph.range_timeline import thread_key
from ..transform import set_duration, set_gap
from ..util.display import terminal_text
from . import Optimization, Param, register
from .dataloader import _aligned, _batches
from .gpu_upgrade import source_gpu
from .shape_depth import _Launches, deepen, launches, repeating_block
from .shape_depth_memory import depth_memory, problem_size_memory
from .shape_memory import paired_blocks, peak_needs, shape_memory, tensor_blocks

#: ``Input type`` -> the cost library's storage precision
_DTYPE = {"float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16", "double": "fp32",
          "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8"}
#: multiples ``k·H`` of the hidden size that are widths of the model (QKV 3H, MLP 4H; 2H, 8H: GLU variants)
HIDDEN_MULTIPLES = (1, 2, 3, 4, 8)
_LINEAR_OPS = frozenset({"aten::addmm", "aten::mm", "aten::_addmm_activation", "aten::matmul", "aten::linear"})
_BMM_OPS = frozenset({"aten::bmm", "aten::baddbmm"})
_ATTN_WORDS = ("scaled_dot_product", "flash_attention", "efficient_attention", "attention_forward")
_IMAGE_WORDS = ("conv", "batch_norm", "pool", "upsample", "interpolate")
_OPT_WORDS = ("adam", "sgd", "_foreach_", "optimizer", "lamb", "adagrad", "rmsprop")


# ------------------------------------------------------------------------------- shapes ------
def _tensors(dims, types) -> list:
    """[(dims list, type)] of an op's tensor inputs (a tensor list's members each); [] unknown."""
    if not isinstance(dims, list):
        return []
    types = types if isinstance(types, list) and len(types) == len(dims) else [None] * len(dims)
    out = []
    for d, t in zip(dims, types):
        if isinstance(d, list) and d and all(isinstance(x, int) and x >= 0 for x in d):
            out.append((d, t))
        elif isinstance(d, list) and d and all(isinstance(x, list) for x in d):  # TensorList
            out.extend((x, t) for x in d if x and all(isinstance(v, int) and v >= 0 for v in x))
    return out


@dataclass(frozen=True)
class Roles:
    """The problem's dimensions in the trace (values; -1 unknown) and how they were found."""

    B: int
    S: int
    H: int
    nh: int
    how: str
    #: the step's 4-D activations are mostly images [N, C, H, W] (convolution, batch-norm, pooling inputs)
    image: bool = False

    @property
    def hd(self) -> int:
        return self.H // self.nh if self.H > 0 and self.nh > 0 and self.H % self.nh == 0 else -1


def _mode(values: list, weights: list | None = None) -> tuple[int, float, float]:
    """(most common value by weight, its weight, total weight) of ``values`` (ties: the larger
    value); (-1, 0, 0) none."""
    if not values:
        return -1, 0.0, 0.0
    c: Counter = Counter()
    for v, w in zip(values, weights if weights is not None else [1.0] * len(values)):
        c[v] += w
    v, k = max(c.items(), key=lambda kv: (kv[1], kv[0]))
    return v, float(k), float(sum(c.values()))


def infer_roles(ops: list, p: dict, weight: list | None = None) -> Roles:
    """Batch, sequence, hidden and heads from the distinct ops ``ops`` ([(op name, dims, types)]),
    each counted with ``weight`` (its kernels' count; default 1; by count, not time: the long
    attention scores ``[B·nh, S, S]`` of an unfused attention would outvote the activations): the weighted most common value of
    each position; parameters ``batch_size``/``seq_len``/``hidden_size``/``heads`` (> 0) override.

    Raises:
        NotApplicable: no op with shapes, or the batch leads less than half of the ≥3-D
            activations' kernels (give batch_size=).
    """
    weight = weight if weight is not None else [1.0] * len(ops)
    cols: dict = {k: ([], []) for k in ("lead", "second", "last", "heads", "lin_k", "lin_rows", "bmm", "hd", "image")}

    def add(k, v, w):
        cols[k][0].append(v)
        cols[k][1].append(w)

    for (name, dims, types), w in zip(ops, weight):
        ts = [d for d, _ in _tensors(dims, types)]
        if name in _LINEAR_OPS and len(ts) >= 2 and len(ts[-2]) == 2:
            add("lin_rows", ts[-2][0], w)
            add("lin_k", ts[-2][1], w)
            continue
        if name in _BMM_OPS:
            if ts and len(ts[0]) == 3:
                add("bmm", ts[0][0], w)
            continue
        if any(x in name for x in _OPT_WORDS):
            continue
        for d in ts[:1]:  # the activation: the op's first tensor
            if len(d) == 4:
                add("image", int(any(x in name for x in _IMAGE_WORDS)), w)
                add("lead", d[0], w)
                add("heads", d[1], w)
                add("second", d[2], w)
                if any(x in name for x in _ATTN_WORDS):
                    add("hd", d[3], w)
            elif len(d) == 3:
                add("lead", d[0], w)
                add("second", d[1], w)
                add("last", d[2], w)
    if not (cols["lead"][0] or cols["lin_rows"][0]):
        raise NotApplicable("no op with recorded shapes of activations (≥3-D tensors or linear layers' inputs): record with "
                            "torch.profiler(record_shapes=True), or use problem-size:factor=S")
    B, kb, nb = _mode(*cols["lead"])
    S = _mode(*cols["second"])[0]
    H = _hidden(cols["last"][0] + cols["lin_k"][0], cols["last"][1] + cols["lin_k"][1])
    nh = _mode(*cols["heads"])[0]
    if nh <= 0 and B > 0 and cols["bmm"][0]:  # no 4-D attention tensor: the bmm batch B·nh
        lead = _mode(*cols["bmm"])[0]
        nh = lead // B if lead % B == 0 else -1
    if H <= 0 and nh > 0 and cols["hd"][0]:  # no activation of width H: heads x the attention's head dimension
        H = nh * _mode(*cols["hd"])[0]
    how = []
    if p.get("batch_size", 0) > 0:
        B, how = int(p["batch_size"]), how + ["batch given"]
    elif B > 0:
        how.append(f"batch {B}: leading dimension of {kb / max(nb, 1e-9):.0%} of the activations' kernels")
        if kb * 2 < nb:
            raise NotApplicable(f"the batch is ambiguous: the most common leading dimension of the activations, {B}, leads only "
                                f"{kb / nb:.0%} of their kernels; give batch_size=")
    for key, name in (("seq_len", "S"), ("hidden_size", "H"), ("heads", "nh")):
        if p.get(key, 0) > 0:
            v = int(p[key])
            S, H, nh = (v, H, nh) if name == "S" else (S, v, nh) if name == "H" else (S, H, v)
            how.append(f"{key} given")
    if nh <= 0 or (H > 0 and H % nh):  # heads that do not divide the hidden size: not heads
        nh = -1
    how.append(f"seq {S if S > 0 else 'unknown'}, hidden {H if H > 0 else 'unknown'}"
               + (f" ({nh} heads" + (f" of {H // nh}" if H > 0 else "") + ")" if nh > 0 else ""))
    if B < 0 or S < 0:
        how.append(f"tokens = the rows of the linear layers' inputs ({_mode(*cols['lin_rows'])[0]})")
    img = cols["image"]
    image = bool(img[0]) and sum(w for v, w in zip(*img) if v) * 2 >= sum(img[1])
    if image:  # sequence, width and heads mean nothing for [N, C, H, W]
        how = [h for h in how if not h.startswith("seq ")] + ["images: most 4-D activations are convolution/norm/pool "
                                                                "inputs [N, C, H, W]"]
    return Roles(B, S, H, nh, "; ".join(how), image)


def _hidden(values: list, weights: list) -> int:
    """The hidden size: of the activations' last dimensions and the linear layers' in-features
    (``values``, voted by ``weights``), the value ``h`` that the most votes are multiples ``k·h``
    of (k in :data:`HIDDEN_MULTIPLES`: an MLP's 4H votes for H); ties: the smaller; -1 none."""
    c: Counter = Counter()
    for v, w in zip(values, weights):
        c[v] += w
    if not c:
        return -1
    score = {h: sum(w for v, w in c.items() if v % h == 0 and v // h in HIDDEN_MULTIPLES) for h in c if h > 0}
    return min(score, key=lambda h: (-score[h], h)) if score else -1


def _linear_rows(ops: list) -> int:
    """The most common row count (tokens) of the linear layers' inputs ``x[rows, in]``; -1 none."""
    rows = []
    for name, dims, types in ops:
        ts = [d for d, _ in _tensors(dims, types)]
        if name in _LINEAR_OPS and len(ts) >= 2 and len(ts[-2]) == 2:
            rows.append(ts[-2][0])
    return _mode(rows)[0]


def _candidates(r: Roles, f: dict, tokens: int) -> dict:
    """Role name -> (value, factor) of the problem's dimensions (module docstring, step 2)."""
    fb, fs, fh = f["batch"], f["seq"], f["hidden"]
    c = {"B": (r.B, fb), "S": (r.S, fs), "nh": (r.nh, fh), "hd": (r.hd, 1.0),
         "B*S": (r.B * r.S if r.B > 0 and r.S > 0 else tokens, fb * fs), "B*nh": (r.B * r.nh if r.B > 0 and r.nh > 0 else -1, fb * fh)}
    for k in HIDDEN_MULTIPLES:
        c[f"{k}H"] = (k * r.H if r.H > 0 else -1, fh)
    return c


_LEAD = ("B", "B*nh", "B*S")
_INNER = ("S", "nh", "hd") + tuple(f"{k}H" for k in HIDDEN_MULTIPLES)
_FLAT = ("B*S",) + tuple(f"{k}H" for k in HIDDEN_MULTIPLES) + ("B", "S")


def dim_factors(dims: list, cand: dict, orders: list | None = None, first: bool = True) -> tuple[list, bool]:
    """(factor per dimension of ``dims``, ambiguous): the roles of module docstring step 2, the
    first role of the position's order (``orders``: one per dimension, given by the op's layout,
    else from the rank) whose value matches; ambiguous when two matching roles have different
    factors, or where the leading dimension of an op's ≥3-D ``first`` input matches no role (an
    activation: it must be a batch, ``B`` or ``B·nh``). Any other dimension no role matches keeps
    its size (×1: a convolution's weight, a vocabulary)."""
    out, amb = [], False
    n = len(dims)
    for i, v in enumerate(dims):
        order = orders[i] if orders else _LEAD if (n >= 3 and i == 0) else _INNER if n >= 3 else _FLAT
        one = v == 1 and i == 0 and n >= 3 and cand["B"][0] == 1  # a batch of 1 leads its activations
        roles = [k for k in order if cand[k][0] == v and (v > 1 or (one and k == "B"))]
        if cand["B"][0] == 1:  # B·S = S and B·nh = nh: a batch of 1 flattened into the tokens / heads
            roles = [k for k in roles if not (k == "S" and "B*S" in roles) and not (k == "nh" and "B*nh" in roles)]
        hits = [cand[k][1] for k in roles]
        lead_moves = any(cand[k][1] != 1.0 for k in _LEAD)  # a batch that does not change needs no name
        if len({round(h, 12) for h in hits}) > 1 or (first and lead_moves and not hits and n >= 3 and i == 0 and v > 1):
            amb = True  # two roles, or an op's ≥3-D first input led by a dimension that is no batch of the step
        out.append(hits[0] if hits else 1.0)
    return out, amb


_WIDTH = tuple(f"{k}H" for k in HIDDEN_MULTIPLES)
_TOKENS = ("B*S", "B", "S")


_ATTN_LAYOUT = [_LEAD, ("nh",), ("S",), ("hd",)]


def _layout(name: str, dims) -> list:
    """Per input of an op whose layout is known, the role orders of its dimensions by position
    (None: from the tensor's rank). A linear op (``addmm``/``linear``: bias, x, weight):
    ``x[rows, in]``: rows are tokens, ``in`` a width; the weight and bias are widths only. An
    attention op's 4-D ``[B, nh, S, hd]`` tensors: the last dimension is the head dimension, even
    where it equals the sequence."""
    if not isinstance(dims, list):
        return []
    if any(w in name for w in _ATTN_WORDS):
        return [_ATTN_LAYOUT if isinstance(d, list) and len(d) == 4 and all(isinstance(x, int) for x in d) else None for d in dims]
    if name not in ("aten::addmm", "aten::linear", "aten::_addmm_activation"):
        return [None] * len(dims)
    idx = [i for i, d in enumerate(dims) if isinstance(d, list) and d and all(isinstance(x, int) for x in d)]
    out: list = [None] * len(dims)
    x = idx[1] if name == "aten::linear" or len(idx) < 3 else idx[-2]  # linear(x, W, b); addmm(b, x, W)
    x = idx[0] if name == "aten::linear" else x
    for i in idx:
        n = len(dims[i])
        if i == x:
            out[i] = [_TOKENS] * (n - 1) + [_WIDTH] if n == 2 else None
        else:
            out[i] = [_WIDTH] * n
    return out


def _scaled_dims(dims, types, cand: dict, opt_factor: float, name: str = "") -> tuple:
    """(new Input Dims, ambiguous) of an op; optimizer ops (``opt_factor`` not None) scale the
    leading dimension of each tensor so that its elements grow ×``opt_factor``."""
    amb = False
    out = []
    layout = _layout(name, dims)
    first = True
    for j, d in enumerate(dims if isinstance(dims, list) else []):
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            if opt_factor is not None:
                out.append([int(round(d[0] * opt_factor))] + d[1:])
                continue
            fs, a = dim_factors(d, cand, layout[j], first or name in _BMM_OPS)
            first = False
            amb |= a
            out.append([int(round(x * f)) for x, f in zip(d, fs)])
        elif isinstance(d, list) and d and all(isinstance(x, list) for x in d):
            inner, a = _scaled_dims(d, [None] * len(d), cand, opt_factor)
            amb |= a
            out.append(inner)
        else:
            out.append(d)
    return out, amb


def _numel(d) -> int:
    n = 1
    for x in d:
        n *= x
    return n


def kernel_row(name: str, dims, types) -> dict | None:
    """The cost library's view of an op's kernel (``Kernels.make`` arguments: cls, B, M, N, K,
    elems, inputs, dtype) from the op's recorded shapes; None when they give none. cuBLAS shapes:
    ``x[m, k] · w[k, n]`` is M = n, N = m, K = k (docs/kernels.md)."""
    ts = _tensors(dims, types)
    if not ts:
        return None
    dt = next((_DTYPE.get(t, "fp32") for _, t in ts if isinstance(t, str) and t in _DTYPE), "fp32")
    mats = [d for d, _ in ts]
    if name in _LINEAR_OPS:
        two = [d for d in mats if len(d) == 2]
        if len(two) >= 2 and two[-2][1] == two[-1][0]:
            a, b = two[-2], two[-1]
            return dict(cls="linear", B=1, M=b[1], N=a[0], K=a[1], elems=-1, inputs=1, dtype=dt)
        return None
    if name in _BMM_OPS:
        three = [d for d in mats if len(d) == 3]
        if len(three) >= 2 and three[-2][2] == three[-1][1]:
            a, b = three[-2], three[-1]
            return dict(cls="bmm", B=a[0], M=b[2], N=a[1], K=a[2], elems=-1, inputs=1, dtype=dt)
        return None
    if any(w in name for w in _ATTN_WORDS):
        if len(mats) >= 2 and len(mats[0]) == 4 and len(mats[1]) == 4:
            q, k = mats[0], mats[1]
            return dict(cls="attention", B=q[0] * q[1], M=q[2], N=k[2], K=q[3], elems=-1, inputs=1, dtype=dt)
        return None
    cls = op_class(name.split("::")[-1].lstrip("_").replace("native_", ""))
    if cls not in ("ln", "softmax"):
        cls = "elementwise"
    if any(w in name for w in _OPT_WORDS):  # multi-tensor: every tensor streamed (elements of all)
        return dict(cls="elementwise", B=1, M=-1, N=-1, K=-1, elems=sum(_numel(d) for d in mats), inputs=1, dtype=dt)
    big = max(mats, key=_numel)
    e = _numel(big)
    rows = e // max(big[-1], 1) if cls in ("ln", "softmax") else 1  # row-wise kernels: B = rows (the last dimension's)
    return dict(cls=cls, B=max(rows, 1), M=-1, N=-1, K=-1, elems=e, inputs=len(mats) if cls == "elementwise" else 1, dtype=dt)


_OTHER_WORDS = ("conv", "index", "embedding", "gather", "scatter", "take", "nonzero", "masked_select", "cudnn")


# ------------------------------------------------------------------------------- the what-if --
def _gpu(graph, given: str):
    g, traced = source_gpu(graph, given)
    spec = find_spec(g.name) if g is not None else None
    if spec is None:
        what = f"the traced GPU {traced!r} is not in the GPU table" if traced else "the trace does not name its GPU"
        raise NotApplicable(f"{what}; give it as gpu=NAME (the kernel-cost library's GPUs)")
    return spec


#: how an op's kernels are re-costed: by the library (0), by elements (1), kept: ambiguous (2), no shapes (3)
_MODEL, _ELEMS, _AMBIG, _NONE = 0, 1, 2, 3
_KIND_WORDS = {_ELEMS: "other kind", _AMBIG: "ambiguous", _NONE: "no shapes"}


def _plan_ops(shapes: list, p: dict, weight: list | None = None) -> tuple:
    """Per distinct op (``shapes``, with its kernels' count ``weight``): (how, element factor,
    reference row, new row), the roles, and each op's new ``Input Dims``.

    Raises:
        NotApplicable: the batch factor makes no whole batch of the inferred one (x0.5 of a
            traced batch of 1: its ``[1, S, H]`` tensors rounded to ``[0, S, H]``, 512-byte blocks,
            while the merged ``[B·S, H]`` rows halved), or seq/hidden on images."""
    f = {k: float(p[k]) for k in ("batch", "seq", "hidden")}
    opt_f = f["hidden"] ** 2 * float(p["layers"])
    roles = infer_roles(shapes, p, weight)
    nb = roles.B * f["batch"]
    if roles.B > 0 and (round(nb) < 1 or abs(nb - round(nb)) > 1e-6):  # a dimension of B would round to another batch, or 0
        raise NotApplicable(f"batch x{f['batch']:g} of the traced batch {roles.B} is {nb:g} samples, not a whole batch: "
                            "give a factor that makes one (or batch_size= where the inferred batch is wrong)")
    if roles.image and (f["seq"] != 1 or f["hidden"] != 1) and p.get("seq_len", 0) <= 0:
        raise NotApplicable("the step's 4-D activations are images [N, C, H, W] (convolutions, norms, pooling): seq= and "
                            "hidden= have no role there (batch= and layers= do; docs/scaling.md, limits)")
    tokens = _linear_rows(shapes) if roles.B < 0 or roles.S < 0 else -1
    cand = _candidates(roles, f, tokens)
    how, fac, ref, new, nds = [], [], [], [], []
    for name, dims, types in shapes:  # distinct ops: a few hundred
        is_opt = any(w in name for w in _OPT_WORDS)
        nd, amb = _scaled_dims(dims, types, cand, opt_f if is_opt else None, name)
        a, b = kernel_row(name, dims, types), kernel_row(name, nd, types)
        ta, tb = [_numel(d) for d, _ in _tensors(dims, types)], [_numel(d) for d, _ in _tensors(nd, types)]
        h, x = _MODEL, 1.0
        if amb:
            h = _AMBIG
        elif any(w in name.lower() for w in _OTHER_WORDS) or a is None or b is None:
            h, x = (_ELEMS, max(tb) / max(max(ta), 1)) if ta and tb else (_NONE, 1.0)
        how.append(h)
        fac.append(x)
        ref.append(a)
        new.append(b)
        nds.append(nd)
    return np.asarray(how, np.int64), np.asarray(fac, np.float64), ref, new, roles, nds


_COLS = ("cls", "B", "M", "N", "K", "elems", "inputs", "dtype")


def _rows_of(rows: list, sel: np.ndarray, L: _Launches, idx: np.ndarray, names: list) -> Kernels:
    """:class:`Kernels` of the kernels ``idx`` from the per-op rows ``rows`` (``sel``: each kernel's op)."""
    cols = {}
    for k in _COLS:
        per_op = np.asarray([r[k] if r is not None else (-1 if k not in ("cls", "dtype") else "other") for r in rows],
                            dtype=object if k in ("cls", "dtype") else np.int64)
        cols[k] = per_op[sel]
    return Kernels.make(name=names, grid=L.grid[idx], block=L.block[idx], regs=L.regs[idx], smem=L.smem[idx], **cols)


#: the measured time the library's ratio is taken at (any time above the floor: the anchor is linear in it)
_PROBE_NS = 1e6


def _model_times(graph, L: _Launches, m: np.ndarray, t: np.ndarray, ref: list, nrow: list, gpu) -> np.ndarray:
    """New times (ns, int64) of the kernels ``m`` (indices into ``L``) measured at ``t``: the
    library's anchored prediction (:func:`~daydream.costmodel.predict_shape`), ``f + (t − f)·ρ``
    with ``ρ = (T_new − f)/(T_ref − f)``, computed once per distinct launch (op shapes, kernel
    name, grid, block, registers, shared memory) and applied to each kernel; a kernel measured
    below the library's floor ``f`` keeps the part below it. The same shapes give ``t`` back."""
    key = np.column_stack([L.shape[m], graph.name_id[L.node[m]], L.grid[m], L.block[m], L.regs[m], L.smem[m]])
    _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    u = m[first]
    names = [graph.names[i] for i in graph.name_id[L.node[u]].tolist()]
    a, b = _rows_of(ref, L.shape[u], L, u, names), _rows_of(nrow, L.shape[u], L, u, names)
    a, b = _consistent_grids(a, b, gpu)
    fl = floor_ns(gpu)
    probe = predict_shape(a, np.full(len(u), fl + _PROBE_NS), b, gpu).point
    rho = (probe - fl) / _PROBE_NS
    same = np.all([(getattr(a, k) == getattr(b, k)) for k in _COLS], axis=0)
    tf = t.astype(np.float64)
    out = np.minimum(tf, fl) + np.maximum(tf - fl, 0.0) * rho[inv]
    return np.where(same[inv], t, np.rint(out).astype(np.int64))


def _consistent_grids(a: Kernels, b: Kernels, gpu) -> tuple[Kernels, Kernels]:
    """``a``, ``b`` with the recorded grid dropped where it is not the library's tiling of the
    recorded shape (``B·⌈M/TM⌉·⌈N/TN⌉·split`` blocks with the tile parsed from the name): the new
    shape is tiled that way, so both sides are (a library whose kernel names give no tile; a
    recorded grid of split-K or stream-K). Memory-bound classes: grids do not enter the model."""
    g = source_geometry(a, gpu)
    derived = retile(a, g, g.tile, g.threads, gpu).blocks
    off = np.isin(a.cls, ("linear", "bmm", "attention")) & (a.grid[:, 0] > 0) & (derived != g.blocks) & ~g.persistent
    if off.any():
        a.grid = np.where(off[:, None], -1, a.grid)
    return a, b


def _recost(graph, p: dict, gpu) -> tuple[np.ndarray, dict]:
    """New durations (whole graph, ns) with the kernels re-costed, and the note's facts."""
    L = launches(graph)
    new = graph.dur_ns.copy()
    t = graph.dur_ns[L.node]
    info = {"kept": {}, "modelled": 0, "roles": "", "plan": None}
    has = L.shape >= 0
    how_k = np.full(len(L.node), _NONE, np.int64)
    if L.shapes and has.any():
        w = np.bincount(L.shape[has], minlength=len(L.shapes))  # each op by its kernels' count
        how, fac, ref, nrow, roles, nds = _plan_ops(L.shapes, p, w.tolist())
        info["roles"], info["plan"] = roles.how, (L, how, ref, nrow, nds)
        how_k[has] = how[L.shape[has]]
        m = np.nonzero(how_k == _MODEL)[0]
        if len(m):
            new[L.node[m]] = _model_times(graph, L, m, t[m], ref, nrow, gpu)
            info["modelled"] = len(m)
        e = np.nonzero(how_k == _ELEMS)[0]
        if len(e):  # streamed: the work above the floor by the elements
            fl = floor_ns(gpu)
            te = t[e].astype(np.float64)
            new[L.node[e]] = np.rint(np.minimum(te, fl) + np.maximum(te - fl, 0.0) * fac[L.shape[e]]).astype(np.int64)
    for code, word in _KIND_WORDS.items():
        k = np.nonzero(how_k == code)[0]
        if len(k):
            ops = np.asarray([o or "(no launching op)" for o in L.op], dtype=object)[k]
            uniq, inv = np.unique(ops.astype(str), return_inverse=True)
            info["kept"][word] = Counter(dict(zip(uniq.tolist(), np.bincount(inv.reshape(-1), weights=t[k]).astype(np.int64).tolist())))
    return new, info


def _top(c: Counter, k: int = 4) -> str:
    items = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))
    s = ", ".join(terminal_text(n, 40) for n, _ in items[:k])
    return s + (f" and {len(items) - k} more" if len(items) > k else "")


def _loader(graph, fb: float):
    """The graph with the data loader's time ×``fb`` (its batches' host time), and the note's words."""
    if fb == 1.0:
        return graph, ""
    try:
        pid, tid, s, e, y = _batches(graph)
    except NotApplicable:
        return graph, "no single-process DataLoader range: data loading not scaled"
    clk = clock_of(graph)
    fetch = clk.now(thread_key(np.full(len(s), pid), np.full(len(s), tid)), s, e)
    m = np.zeros(graph.n, bool)
    m[y] = True
    gap = graph.gap_ns[y] + np.rint(fetch * (fb - 1.0)).astype(np.int64)
    g = set_gap(graph, m, _aligned(y, np.maximum(gap, 0), graph.n, m))
    return g, (f"data loader {int(fetch.sum()) / 1e6:,.3f} -> {int(np.rint(fetch * fb).sum()) / 1e6:,.3f} ms "
               f"({len(y)} batches; an assumption: the same time per sample)")


def _apply(graph, p):
    if not (graph.node_kind == Kind.KERNEL).any():
        raise NotApplicable("the trace has no GPU kernels")
    if not (launches(graph).shape >= 0).any():
        raise NotApplicable("no kernel's launching op has recorded shapes: record with torch.profiler(record_shapes=True) "
                            "(Kineto), or use problem-size:factor=S")
    gpu = _gpu(graph, p["gpu"])
    fit_words = ""
    if p.get("fit"):
        p, fit_words = fit_batch(graph, p)
    new, info = _recost(graph, p, gpu)
    kern = graph.node_kind == Kind.KERNEL
    g = set_duration(graph, kern, new[kern])
    g, loader = _loader(g, float(p["batch"]))
    depth = ""
    if p["layers"] > 1:
        block = repeating_block(graph)
        g, left = deepen(g, block, (p["layers"] - 1) * block.count)
        depth = (f"depth x{p['layers']}: {block.count} occurrences of {terminal_text(block.pattern, 80)} ({block.size} tasks, "
                 f"CPU launches included) -> {block.count * p['layers']}, copies of the last one after it"
                 + (f" ({block.count - block.same} of the {block.count} run other tasks)" if block.same < block.count else "")
                 + (f"; {left} thread hand-over edges of the block not copied" if left else ""))
    before, after = int(graph.dur_ns[kern].sum()), int(new[kern].sum())
    words = [f"batch x{p['batch']:g}, seq x{p['seq']:g}, hidden x{p['hidden']:g}, layers x{p['layers']} on the {gpu.name}" + (f" ({info['roles']})" if info["roles"] else ""),
             f"kernel time {before / 1e6:,.3f} -> {after / 1e6:,.3f} ms; {info['modelled']:,} kernels re-costed at their new shapes "
             "(kernel-cost library, anchored on the measured time)"]
    for kind, said in (("other kind", "scaled by their largest input's elements (no model for their kind)"),
                       ("ambiguous", "kept as recorded (a dimension matches two roles: give batch_size=/seq_len=/hidden_size=)"),
                       ("no shapes", "kept as recorded: no recorded shapes")):
        c = info["kept"].get(kind)
        if c:
            words.append(f"{sum(c.values()) / 1e6:,.3f} ms of kernels {said}: {_top(c)}")
    if p["hidden"] != 1 or p["layers"] != 1:
        words.append(f"optimizer ops' elements x{float(p['hidden']) ** 2 * p['layers']:g} (parameters ~ hidden^2 x layers)")
    words.append("CPU time per op as recorded (launch cost does not grow with the tensor)")
    if depth:
        words.append(depth)
    if loader:
        words.append(loader)
    if fit_words:
        words.insert(1, fit_words)
    mem = graph.memory
    other = any(p[k] != 1 for k in ("batch", "seq", "hidden"))
    if mem is not None and len(mem) and not paired_blocks(mem) and other:
        words.append(_UNPAIRED + ": no memory verdict for this prediction")
        g = dataclasses.replace(g, memory=None)
        mem = None
    elif mem is not None and len(mem) and not paired_blocks(mem) and p["layers"] == 1:  # nothing to resize: the recorded events
        words.append("memory as recorded (every factor 1; the allocator's GPU events have no block addresses: "
                     "another factor gets no memory verdict)")
    elif mem is not None and len(mem) and info["plan"] is not None and (p["layers"] == 1 or other):
        mem, said = _memory(graph, mem, dict(p, layers=1), info["plan"])  # the depth's state: depth_memory's
        g = dataclasses.replace(g, memory=mem)
        words.append(said)
    if mem is not None and len(mem) and p["layers"] > 1:  # the copies' allocations (shape_depth_memory)
        g, said = depth_memory(graph, g, block, (p["layers"] - 1) * block.count, p["layers"], launches(graph), mem, kernel_row)
        words.append(said)
    return g, "; ".join(words)


# ------------------------------------------------------------------------------- memory ------
#: why a trace's allocator events are not resized (docs/memory.md, "shape")
_UNPAIRED = ("memory not predicted at the new shapes: the allocator's GPU events have no block addresses (PyTorch < 1.10), "
             "so an allocation cannot be paired with its free (resizing one without the other would leak)")


def _op_blocks(plan) -> tuple[np.ndarray, list]:
    """(per node, the op index its launch call launched, -1 none (:func:`~.shape_memory.resized_bytes`
    takes each event's next launch call's); per op, its
    :func:`~.shape_memory.tensor_blocks`; an ambiguous op's none)."""
    L, how, ref, nrow, nds, graph = plan
    call_op = np.full(graph.n, -1, np.int64)
    m = L.shape >= 0
    calls = graph.launch[L.node[m]]
    call_op[calls[calls >= 0]] = L.shape[m][calls >= 0]
    z = np.zeros(0, np.int64)
    blocks = [(z, z) if how[i] == _AMBIG else
              tensor_blocks(_tensors(dims, types), _tensors(nds[i], types), ref[i], nrow[i])
              for i, (_, dims, types) in enumerate(L.shapes)]  # distinct ops: a few hundred
    return call_op, blocks


def _memory(graph, gm, p: dict, plan):
    """(the allocator's events at the new shapes, the note's words): :mod:`.shape_memory`'s rules."""
    call_op, blocks = _op_blocks((*plan, graph))
    f_act = float(p["batch"]) * float(p["seq"]) * float(p["hidden"])
    return shape_memory(graph, gm, call_op, blocks, f_act, float(p["hidden"]) ** 2 * float(p["layers"]))


def _needs_at(graph, L, w, p: dict, b: int, B: int) -> dict:
    """Per GPU: (peak, needs, capacity) of the step at batch ``b`` (of the traced ``B``)."""
    q = dict(p, batch=b / B)
    how, _, ref, nrow, _, nds = _plan_ops(L.shapes, q, w)
    mem, _ = _memory(graph, graph.memory, q, (L, how, ref, nrow, nds))
    return peak_needs(graph, mem, lambda d: device_capacity(list(graph.devices), d)[0], recorded_margins(graph.memory),
                      DEFAULT_FRAGMENTATION)


def _fits(needs: dict) -> bool:
    return all(n <= c for _, n, c in needs.values())


def _gib(b: int) -> str:
    return f"{b / 2**30:,.2f} GiB"


def fit_batch(graph, p: dict) -> tuple[dict, str]:
    """``p`` with ``batch`` the largest factor ``b / B`` (``b`` an integer batch, ``B`` the traced
    one) whose predicted memory (the shape memory model: peak allocated in recorded order × the
    reserve margin) fits every GPU's capacity, and the note's words (the needs, the margin left,
    what ``b + 1`` would need). Binary search: the peak grows with the batch.

    Raises:
        NotApplicable: no allocator events, events without block addresses (PyTorch < 1.10:
            :func:`~.shape_memory.paired_blocks`), no shapes, an unknown batch or capacity, a new
            depth, or batch 1 does not fit.
    """
    if graph.memory is None or not len(graph.memory):
        raise NotApplicable("batch fit needs the allocator's events: record with torch.profiler(profile_memory=True)")
    if p["layers"] != 1:
        raise NotApplicable("batch fit: not with a new depth (the search runs the shape memory model at depth 1: "
                            "layers=1 with fit=true)")
    if not paired_blocks(graph.memory):
        raise NotApplicable("batch fit: " + _UNPAIRED)
    L = launches(graph)
    has = L.shape >= 0
    w = np.bincount(L.shape[has], minlength=len(L.shapes)).tolist()
    B = infer_roles(L.shapes, p, w).B
    if B <= 0:
        raise NotApplicable("batch fit: the traced batch size is not known: give batch_size=")
    first = _needs_at(graph, L, w, p, 1, B)
    if not first or any(c <= 0 for _, _, c in first.values()):
        raise NotApplicable("batch fit: a GPU's memory capacity is not known (neither the trace nor the GPU table says it)")
    if not _fits(first):
        raise NotApplicable(f"batch fit: even a batch of 1 does not fit ({_words(first)})")
    lo, hi = 1, int(B * 1024)  # the factor's range
    if _fits(_needs_at(graph, L, w, p, hi, B)):
        lo = hi
    while lo < hi:  # largest b that fits: fits(lo), not fits(hi + 1)
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if _fits(_needs_at(graph, L, w, p, mid, B)) else (lo, mid - 1)
    at, nxt = _needs_at(graph, L, w, p, lo, B), _needs_at(graph, L, w, p, lo + 1, B)
    said = (f"batch fit: the largest batch that fits is {lo} (x{lo / B:g} of the traced {B}; the memory model, peak "
            f"in recorded order x the reserve margin): {_words(at)}; "
            + (f"{lo + 1} would need " + ", ".join(f"{_gib(n)} on GPU {d}" for d, (_, n, _) in nxt.items())
               if not _fits(nxt) else "the factor's limit (x1024)"))
    return dict(p, batch=lo / B), said


def _words(needs: dict) -> str:
    return ", ".join(f"GPU {d}: peak {_gib(pk)}, needs {_gib(n)} of {_gib(c)} ({_gib(c - n)} to spare)"
                     for d, (pk, n, c) in needs.items())


def _problem_size(graph, p):
    S = float(p["factor"])
    kern = np.nonzero(graph.node_kind == Kind.KERNEL)[0]
    if not len(kern):
        raise NotApplicable("the trace has no GPU kernels")
    gpu = _gpu(graph, p["gpu"])
    L = launches(graph)
    grid, block = L.grid, L.block
    rec = grid[:, 0] > 0
    blocks = np.where(rec, np.prod(np.maximum(grid, 1), axis=1), -1)
    threads = np.where(block[:, 0] > 0, np.prod(np.maximum(block, 1), axis=1), 256)
    neg = np.full(len(kern), -1, np.int64)
    comp = kernel_info(graph).is_bound("compute")[L.node]  # GEMMs, convolutions, attention: waves of tiles
    rec &= comp
    h = default_constants().h_occ  # the library's fitted latency-hiding constant (docs/kernels.md, waves)
    u0 = wave_fill(gpu, np.where(rec, blocks, -1), threads, neg, neg, h)
    u1 = wave_fill(gpu, np.where(rec, np.ceil(blocks * S).astype(np.int64), -1), threads, neg, neg, h)
    t = graph.dur_ns[kern].astype(np.float64)
    fl = floor_ns(gpu)
    new = np.minimum(t, fl) + np.maximum(t - fl, 0.0) * S * u0 / u1
    g = set_duration(graph, graph.node_kind == Kind.KERNEL, np.rint(new).astype(np.int64))
    shapes = bool((L.shape >= 0).any())
    note = (f"every kernel's work x{S:g} on the {gpu.name}: kernel time {t.sum() / 1e6:,.3f} -> {new.sum() / 1e6:,.3f} ms; "
            f"{int(rec.sum()):,} compute-bound kernels with a recorded grid by waves (blocks x{S:g}, wave fill), "
            f"{int((~rec).sum()):,} others (memory-bound, or no grid recorded) by their time above the {fl / 1e3:g} us floor; "
            "no shapes used"
            + (" (the trace has shapes: shape:batch=,seq=,hidden= models each op's kind)" if shapes else "")
            + "; CPU time as recorded")
    g, said = problem_size_memory(graph, g, S)
    return g, note + (f"; {said}" if said else "")


def _flag(v: str) -> bool:
    """``true``/``false`` (also 1/0, yes/no)."""
    t = str(v).strip().lower()
    if t not in ("true", "false", "1", "0", "yes", "no"):
        raise ValueError(v)
    return t in ("true", "1", "yes")


_flag.__name__ = "true/false"


def _factor(name):
    return Param(1.0, f"{name} factor (user's what-if; 1 = as traced)", float, lambda v: 0 < v <= 1024, "0 < x <= 1024")


def _size(what):
    return Param(0, f"the trace's {what}; 0 = inferred from the ops' shapes", int, lambda v: 0 <= v < 1 << 40, "0 or a size")


_GPU = Param("", "GPU the trace ran on (the kernel-cost library's name); empty = the trace's device", str)
_SHAPE_PARAMS = {
    "batch": _factor("batch size"), "seq": _factor("sequence length"), "hidden": _factor("hidden size (width)"),
    "layers": Param(1, "depth factor: the repeating block N times as often (integer)", int, lambda v: 1 <= v <= 64, "1 to 64"),
    "batch_size": _size("batch size"), "seq_len": _size("sequence length"), "hidden_size": _size("hidden size"),
    "heads": _size("number of attention heads"), "gpu": _GPU,
    "fit": Param(False, "true: batch = the largest batch factor whose predicted memory fits every GPU (the memory model, "
                 "docs/scaling.md); other factors as given", _flag),
}

register(Optimization(name="shape", summary="another batch / sequence / hidden size / depth: each op's shapes by the rule "
                      "of its kind, each kernel re-costed at them (docs/scaling.md)", apply=_apply, what_if=True, params=_SHAPE_PARAMS))


def _alias(name: str, key: str, typ=float):
    def apply(graph, p):
        q = {k: v.default for k, v in _SHAPE_PARAMS.items()}
        q.update({k: v for k, v in p.items() if k != "factor"})
        # fit=true searches the batch at the other factors as given (--list-opts): only batch's own factor is the fit's
        q[key] = 1.0 if q.get("fit") and key == "batch" else p["factor"]
        return _apply(graph, q)

    params = {k: v for k, v in _SHAPE_PARAMS.items() if k not in ("batch", "seq", "hidden", "layers")}
    params["factor"] = (Param(2, f"{name} factor (integer)", int, lambda v: 1 <= v <= 64, "1 to 64") if typ is int else
                        Param(2.0, f"{name} factor", float, lambda v: 0 < v <= 1024, "0 < x <= 1024"))
    register(Optimization(name=name, summary=f"shape:{key}=F (docs/scaling.md)", apply=apply, what_if=True, params=params))


for _n in ("batch", "seq", "hidden"):
    _alias(_n, _n)
_alias("layers", "layers", int)

register(Optimization(name="problem-size", summary="every kernel's work xS without shapes: waves of its grid and the floor "
                      "(docs/scaling.md)", apply=_problem_size, what_if=True,
                      params={"factor": Param(2.0, "problem-size factor", float, lambda v: 0 < v <= 1024, "0 < x <= 1024"), "gpu": _GPU}))
