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

Memory: activations scale with batch × seq (:func:`activation_factor`), the hook the memory model
reads; this module does not predict memory.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..costmodel import Kernels, find_spec, predict_shape
from ..costmodel.kernel_model import match_launches
from ..costmodel.kernel_time import floor_ns, wave_fill
from ..costmodel.work import op_class
from ..errors import NotApplicable
from ..events.table import Kind
from ..graph import NODE_CPU
from ..transform import set_duration, set_gap
from . import Optimization, Param, register
from ..util.display import terminal_text
from .dataloader import _aligned, _batches
from .gpu_upgrade import source_gpu

#: ``Input type`` -> the cost library's storage precision
_DTYPE = {"float": "fp32", "c10::Half": "fp16", "c10::BFloat16": "bf16", "double": "fp32",
          "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8"}
#: multiples ``k·H`` of the hidden size that are widths of the model (QKV 3H, MLP 4H; 2H, 8H: GLU variants)
HIDDEN_MULTIPLES = (1, 2, 3, 4, 8)
_LINEAR_OPS = frozenset({"aten::addmm", "aten::mm", "aten::_addmm_activation", "aten::matmul", "aten::linear"})
_BMM_OPS = frozenset({"aten::bmm", "aten::baddbmm"})
_ATTN_WORDS = ("scaled_dot_product", "flash_attention", "efficient_attention", "attention_forward")
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

    @property
    def hd(self) -> int:
        return self.H // self.nh if self.H > 0 and self.nh > 0 and self.H % self.nh == 0 else -1


def _mode(values: list) -> tuple[int, int, int]:
    """(most common value, its count, total) of ``values`` (ties: the larger value); (-1, 0, 0) none."""
    if not values:
        return -1, 0, 0
    c = Counter(values)
    v, k = max(c.items(), key=lambda kv: (kv[1], kv[0]))
    return v, k, len(values)


def infer_roles(ops: list, p: dict) -> Roles:
    """Batch, sequence, hidden and heads from the distinct ops ``ops`` ([(op name, dims, types)]);
    parameters ``batch_size``/``seq_len``/``hidden_size``/``heads`` (> 0) override.

    Raises:
        NotApplicable: no op with shapes, or the batch is not the leading dimension of most
            ≥3-D activations (give batch_size=).
    """
    lead, second, last, heads, lin_k, lin_rows = [], [], [], [], [], []
    for name, dims, types in ops:
        ts = [d for d, _ in _tensors(dims, types)]
        if name in _LINEAR_OPS and len(ts) >= 2 and len(ts[-2]) == 2:
            lin_rows.append(ts[-2][0])
            lin_k.append(ts[-2][1])
            continue
        if name in _BMM_OPS or any(w in name for w in _OPT_WORDS):
            continue
        for d in ts[:1]:  # the activation: the op's first tensor
            if len(d) == 4:
                lead.append(d[0])
                heads.append(d[1])
                second.append(d[2])
            elif len(d) == 3:
                lead.append(d[0])
                second.append(d[1])
                last.append(d[2])
    if not (lead or lin_rows):
        raise NotApplicable("no op with recorded shapes of activations (≥3-D tensors or linear layers' inputs): record with "
                            "torch.profiler(record_shapes=True), or use problem-size:factor=S")
    B, kb, nb = _mode(lead)
    S, _, _ = _mode(second)
    H, _, _ = _mode(last) if last else _mode(lin_k)
    nh, _, _ = _mode(heads)
    how = []
    if p.get("batch_size", 0) > 0:
        B, how = int(p["batch_size"]), how + ["batch given"]
    elif B > 0:
        how.append(f"batch {B}: leading dimension of {kb:,} of {nb:,} activations")
        if kb * 2 < nb:
            raise NotApplicable(f"the batch is ambiguous: the most common leading dimension of the activations, {B}, leads only "
                                f"{kb:,} of {nb:,}; give batch_size=")
    for key, name in (("seq_len", "S"), ("hidden_size", "H"), ("heads", "nh")):
        if p.get(key, 0) > 0:
            v = int(p[key])
            S, H, nh = (v, H, nh) if name == "S" else (S, v, nh) if name == "H" else (S, H, v)
            how.append(f"{key} given")
    if nh <= 0 or H <= 0 or H % nh:
        nh = -1
    how.append(f"seq {S}, hidden {H}" + (f" ({nh} heads of {H // nh})" if nh > 0 else ""))
    if B < 0 or S < 0:
        how.append(f"tokens = the rows of the linear layers' inputs ({_mode(lin_rows)[0]})")
    return Roles(B, S, H, nh, "; ".join(how))


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


def dim_factors(dims: list, cand: dict, orders: list | None = None) -> tuple[list, bool]:
    """(factor per dimension of ``dims``, ambiguous): the roles of module docstring step 2, the
    first role of the position's order (``orders``: one per dimension, given by the op's layout,
    else from the rank) whose value matches; ambiguous when two matching roles have different
    factors. A dimension no role matches keeps its size (×1)."""
    out, amb = [], False
    n = len(dims)
    for i, v in enumerate(dims):
        order = orders[i] if orders else _LEAD if (n >= 3 and i == 0) else _INNER if n >= 3 else _FLAT
        hits = [cand[k][1] for k in order if cand[k][0] == v and v > 1]
        if len({round(h, 12) for h in hits}) > 1:
            amb = True
        out.append(hits[0] if hits else 1.0)
    return out, amb


_WIDTH = tuple(f"{k}H" for k in HIDDEN_MULTIPLES)
_TOKENS = ("B*S", "B", "S")


def _linear_layout(name: str, dims) -> list:
    """Per input of a linear op (``addmm``/``linear``: bias, x, weight), the role orders of its
    dimensions by position: ``x[rows, in]``: rows are tokens, ``in`` a width; the weight and bias
    are widths only. None for an op of another kind (positions from the tensor's rank)."""
    if name not in ("aten::addmm", "aten::linear", "aten::_addmm_activation") or not isinstance(dims, list):
        return [None] * (len(dims) if isinstance(dims, list) else 0)
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
    layout = _linear_layout(name, dims)
    for j, d in enumerate(dims if isinstance(dims, list) else []):
        if isinstance(d, list) and d and all(isinstance(x, int) for x in d):
            if opt_factor is not None:
                out.append([int(round(d[0] * opt_factor))] + d[1:])
                continue
            fs, a = dim_factors(d, cand, layout[j])
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


def activation_factor(p: dict) -> float:
    """The memory hook: the factor by which the step's activations grow (batch × seq; the hidden
    factor for the widths, depth for the layers: ``batch·seq·hidden·layers``; the attention
    scores of an unfused attention grow ×seq² more). The memory model (another module) reads it;
    this module predicts time only."""
    return float(p["batch"]) * float(p["seq"]) * float(p["hidden"]) * float(p["layers"])


# ------------------------------------------------------------------------------- the what-if --
def _gpu(graph, given: str):
    g, traced = source_gpu(graph, given)
    spec = find_spec(g.name) if g is not None else None
    if spec is None:
        what = f"the traced GPU {traced!r} is not in the GPU table" if traced else "the trace does not name its GPU"
        raise NotApplicable(f"{what}; give it as gpu=NAME (the kernel-cost library's GPUs)")
    return spec


def _kernels(graph):
    """(kernel nodes, launch data rows (-1 none), the launch data)."""
    data = graph.facts.launch if graph.facts is not None else None
    kern = np.nonzero(graph.node_kind == Kind.KERNEL)[0]
    if data is None or len(data) == 0:
        return kern, np.full(len(kern), -1, np.int64), data
    return kern, match_launches(graph, data)[kern], data


def _recost(graph, p: dict, gpu) -> tuple[np.ndarray, dict]:
    """New durations of the kernels (whole graph, ns) and the counts/op names for the note."""
    kern, rows, data = _kernels(graph)
    has_dims = data is not None and len(getattr(data, "dims", [])) == len(data)
    f = {k: float(p[k]) for k in ("batch", "seq", "hidden")}
    opt_f = f["hidden"] ** 2 * float(p["layers"])
    ops: dict = {}  # (name, dims json) -> index
    op_of = np.full(len(kern), -1, np.int64)
    if has_dims:
        import msgspec

        for i, r in enumerate(rows.tolist()):
            if r < 0 or data.dims[r] is None:
                continue
            key = (data.op[r], msgspec.json.encode(data.dims[r]), msgspec.json.encode(data.types[r]))
            op_of[i] = ops.setdefault(key, len(ops))
    info = {"no shapes": Counter(), "other kind": Counter(), "ambiguous": Counter(), "modelled": 0, "roles": ""}
    new = graph.dur_ns.copy()
    if not ops:
        for i in range(len(kern)):
            info["no shapes"][data.op[rows[i]] if has_dims and rows[i] >= 0 and data.op[rows[i]] else "(no launching op)"] += int(graph.dur_ns[kern[i]])
        return new, info
    keys = list(ops)
    import msgspec

    decoded = [(k[0], msgspec.json.decode(k[1]), msgspec.json.decode(k[2])) for k in keys]
    roles = infer_roles(decoded, p)
    info["roles"] = roles.how
    tokens = _linear_rows(decoded) if roles.B < 0 or roles.S < 0 else -1
    cand = _candidates(roles, f, tokens)
    ref_rows, new_rows, how = [], [], []  # per distinct op: rows or a factor
    for name, dims, types in decoded:
        is_opt = any(w in name for w in _OPT_WORDS)
        nd, amb = _scaled_dims(dims, types, cand, opt_f if is_opt else None, name)
        a, b = kernel_row(name, dims, types), kernel_row(name, nd, types)
        if amb:
            how.append(("ambiguous", None))
        elif any(w in name.lower() for w in _OTHER_WORDS) or a is None or b is None:
            ta, tb = [_numel(d) for d, _ in _tensors(dims, types)], [_numel(d) for d, _ in _tensors(nd, types)]
            how.append(("other kind", max(tb) / max(max(ta), 1)) if ta and tb else ("no shapes", None))
        else:
            how.append(("model", (a, b)))
    sel = [i for i in range(len(kern)) if op_of[i] >= 0 and how[op_of[i]][0] == "model"]
    if sel:
        idx = np.asarray(sel)
        r = rows[idx]
        def make(which):
            cols = {k: [how[op_of[i]][1][which][k] for i in sel] for k in ("cls", "B", "M", "N", "K", "elems", "inputs", "dtype")}
            return Kernels.make(name=[graph.names[graph.name_id[kern[i]]] for i in sel], grid=data.grid[r], block=data.block[r],
                                regs=data.regs[r], smem=data.smem[r], **cols)
        pred = predict_shape(make(0), graph.dur_ns[kern[idx]], make(1), gpu)
        new[kern[idx]] = np.rint(pred.point).astype(np.int64)
        info["modelled"] = len(sel)
    fl = floor_ns(gpu)
    for i in range(len(kern)):
        o = op_of[i]
        if o >= 0 and how[o][0] == "model":
            continue
        kind, fac = how[o] if o >= 0 else ("no shapes", None)
        name = keys[o][0] if o >= 0 else (data.op[rows[i]] if has_dims and rows[i] >= 0 and data.op[rows[i]] else "(no launching op)")
        info[kind][name] += int(graph.dur_ns[kern[i]])
        if kind == "other kind":  # streamed: the work above the floor by the elements
            t = float(graph.dur_ns[kern[i]])
            new[kern[i]] = int(round(min(t, fl) + max(t - fl, 0.0) * fac))
    return new, info


def _top(c: Counter, k: int = 4) -> str:
    items = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))
    s = ", ".join(terminal_text(n, 40) for n, _ in items[:k])
    return s + (f" and {len(items) - k} more" if len(items) > k else "")


def _loader(graph, fb: float):
    """The graph with the data loader's time ×``fb`` (its batches' host time), and the note's words."""
    from ..graph.host_clock import clock_of
    from ..graph.range_timeline import thread_key
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
    if p["layers"] != 1:
        raise NotApplicable("layers= is not built yet (docs/scaling.md, limits): give batch=, seq=, hidden=")
    if not (graph.node_kind == Kind.KERNEL).any():
        raise NotApplicable("the trace has no GPU kernels")
    gpu = _gpu(graph, p["gpu"])
    new, info = _recost(graph, p, gpu)
    kern = graph.node_kind == Kind.KERNEL
    g = set_duration(graph, kern, new[kern])
    g, loader = _loader(g, float(p["batch"]))
    before, after = int(graph.dur_ns[kern].sum()), int(new[kern].sum())
    words = [f"batch x{p['batch']:g}, seq x{p['seq']:g}, hidden x{p['hidden']:g} on the {gpu.name}" + (f" ({info['roles']})" if info["roles"] else ""),
             f"kernel time {before / 1e6:,.3f} -> {after / 1e6:,.3f} ms; {info['modelled']:,} kernels re-costed at their new shapes "
             "(kernel-cost library, anchored on the measured time)"]
    for kind, said in (("other kind", "scaled by their largest input's elements (no model for their kind)"),
                       ("ambiguous", "kept as recorded (a dimension matches two roles: give batch_size=/seq_len=/hidden_size=)"),
                       ("no shapes", "kept as recorded: no recorded shapes")):
        c = info[kind]
        if c:
            words.append(f"{sum(c.values()) / 1e6:,.3f} ms of kernels {said}: {_top(c)}")
    if p["hidden"] != 1:
        words.append(f"optimizer ops' elements x{float(p['hidden']) ** 2 * p['layers']:g} (parameters ~ hidden^2 x layers)")
    words.append("CPU time per op as recorded (launch cost does not grow with the tensor)")
    if loader:
        words.append(loader)
    words.append(f"memory not predicted here (activations x{activation_factor(p):g})")
    return g, "; ".join(words)


def _problem_size(graph, p):
    S = float(p["factor"])
    kern = np.nonzero(graph.node_kind == Kind.KERNEL)[0]
    if not len(kern):
        raise NotApplicable("the trace has no GPU kernels")
    gpu = _gpu(graph, p["gpu"])
    _, rows, data = _kernels(graph)
    has = rows >= 0
    grid = np.full((len(kern), 3), -1, np.int64)
    block = np.full((len(kern), 3), -1, np.int64)
    if has.any():
        grid[has], block[has] = data.grid[rows[has]], data.block[rows[has]]
    rec = grid[:, 0] > 0
    blocks = np.where(rec, np.prod(np.maximum(grid, 1), axis=1), -1)
    threads = np.where(block[:, 0] > 0, np.prod(np.maximum(block, 1), axis=1), 256)
    neg = np.full(len(kern), -1, np.int64)
    u0 = wave_fill(gpu, blocks, threads, neg, neg)
    u1 = wave_fill(gpu, np.where(rec, np.ceil(blocks * S).astype(np.int64), -1), threads, neg, neg)
    t = graph.dur_ns[kern].astype(np.float64)
    fl = floor_ns(gpu)
    new = np.minimum(t, fl) + np.maximum(t - fl, 0.0) * S * u0 / u1
    g = set_duration(graph, graph.node_kind == Kind.KERNEL, np.rint(new).astype(np.int64))
    shapes = data is not None and len(getattr(data, "dims", [])) and any(d is not None for d in data.dims)
    note = (f"every kernel's work x{S:g} on the {gpu.name}: kernel time {t.sum() / 1e6:,.3f} -> {new.sum() / 1e6:,.3f} ms; "
            f"{int(rec.sum()):,} kernels with a recorded grid by waves (blocks x{S:g}, wave fill), "
            f"{int((~rec).sum()):,} without one by their time above the {fl / 1e3:g} us floor; no shapes used"
            + (" (the trace has shapes: shape:batch=,seq=,hidden= models each op's kind)" if shapes else "")
            + "; CPU time as recorded")
    return g, note


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
}

register(Optimization(name="shape", summary="another batch / sequence / hidden size / depth: each op's shapes by the rule "
                      "of its kind, each kernel re-costed at them (docs/scaling.md)", apply=_apply, what_if=True, params=_SHAPE_PARAMS))


def _alias(name: str, key: str, typ=float):
    def apply(graph, p):
        q = {k: v.default for k, v in _SHAPE_PARAMS.items()}
        q.update({k: v for k, v in p.items() if k != "factor"})
        q[key] = p["factor"]
        return _apply(graph, q)

    params = {k: v for k, v in _SHAPE_PARAMS.items() if k not in ("batch", "seq", "hidden", "layers")}
    params["factor"] = Param(2 if typ is int else 2.0, f"{name} factor", typ, lambda v: 0 < v <= 1024, "0 < x <= 1024")
    register(Optimization(name=name, summary=f"shape:{key}=F (docs/scaling.md)", apply=apply, what_if=True, params=params))


for _n in ("batch", "seq", "hidden"):
    _alias(_n, _n)

register(Optimization(name="problem-size", summary="every kernel's work xS without shapes: waves of its grid and the floor "
                      "(docs/scaling.md)", apply=_problem_size, what_if=True,
                      params={"factor": Param(2.0, "problem-size factor", float, lambda v: 0 < v <= 1024, "0 < x <= 1024"), "gpu": _GPU}))
