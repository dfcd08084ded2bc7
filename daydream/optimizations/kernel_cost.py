"""The graph's kernels described for the kernel-cost library (:mod:`daydream.costmodel`), and
their times on another GPU or at another precision through it.

:func:`describe` makes a :class:`~daydream.costmodel.work.Kernels` row for each GPU kernel the
library can model, from what the trace recorded about its launch (``graph.facts.launch``: grid,
block, registers, shared memory, the launching op's name, shape and data type,
:mod:`daydream.formats.launch_data`) and the name classifier (:mod:`daydream.graph.kernels`):

=====================  ======================================================================
library class          kernels
=====================  ======================================================================
linear / bmm           class ``gemm`` launched alone by ``aten::mm``/``addmm``/``bmm``/... with
                       recorded shapes (``bmm`` when the batch is > 1 or the op is a bmm)
attention              fused attention (compute-bound ``softmax_attention``) launched alone by an
                       attention op with recorded shapes
softmax / ln           memory-bound ``softmax_attention`` / ``normalization`` with the op's shape
                       (rows, row length)
elementwise            every other memory-bound kernel (elementwise, reduction, copy, set,
                       optimizer): the op's element count and tensor inputs where its shapes
                       give its bytes; else (no shapes, a gather, an op of several kernels)
                       the bytes its measured time moves at the source's modelled bandwidth
                       (**inferred**, counted: for a memory-bound kernel only the ratio of the
                       two GPUs' bandwidths matters, and the bytes set the L2 term)
=====================  ======================================================================

Not described (the caller keeps its own rules, counted): GEMMs, convolutions and attention
without the op's shapes (nsys and cupti dumps record none; an op that launched several kernels),
kernels of class ``other`` and communication kernels, memcpy and memset tasks.

Data type per row: the op's recorded input type, else the kernel name's precision hint (``half``
is bf16 where the name says ``bf16``/``BFloat16``, else fp16), else fp32 (PyTorch's default).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..costmodel.kernel_model import path_overrides
from ..costmodel.kernel_time import Prediction, floor_ns, predict_cross, predict_model
from ..costmodel.specs import Spec
from ..costmodel.work import Kernels
from ..events.table import Kind
from ..formats.launch_data import DTYPES
from ..graph import kernels as K
from ..transform import set_duration

_GEMM_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_addmm_activation", "aten::matmul", "aten::linear")
_BMM_OPS = ("aten::bmm", "aten::baddbmm")
_ATTN_WORDS = ("scaled_dot_product", "_flash_attention", "_efficient_attention", "attention_forward")
#: :class:`Described` count of compute kernels not described
NO_SHAPES = "not described: compute kernels without the op's shapes"
_INFER_ELEMS = 1 << 34  #: elements of the probe kernel whose model time gives a GPU's ns per byte (beyond any L2)


@dataclass
class Described:
    """``kernels`` (the library's rows) for the graph nodes ``nodes`` (int64, ascending);
    ``inferred``: rows whose bytes come from the measured time (bool); ``counts``: described and
    not, by reason."""

    nodes: np.ndarray
    kernels: Kernels
    inferred: np.ndarray
    counts: dict


def _dtype_of(code: np.ndarray, prec: np.ndarray, names: np.ndarray) -> np.ndarray:
    out = np.full(len(code), "fp32", dtype=object)
    rec = np.asarray(DTYPES, dtype=object)[np.clip(code, 0, len(DTYPES) - 1)]
    bf = np.char.find(np.char.lower(names.astype(str)), "bf16") >= 0
    bf |= np.char.find(np.char.lower(names.astype(str)), "bfloat16") >= 0
    out[prec == K.PRECISION_CODE["half"]] = np.where(bf, "bf16", "fp16")[prec == K.PRECISION_CODE["half"]]
    out[prec == K.PRECISION_CODE["tf32"]] = "tf32"
    out[prec == K.PRECISION_CODE["fp8"]] = "fp8"
    use = np.isin(rec, ("fp32", "fp16", "bf16", "fp8"))
    # a recorded fp32 op on a TF32 kernel is TF32 (the op's type is its storage, the kernel's its math)
    use &= ~((rec == "fp32") & (out == "tf32"))
    out[use] = rec[use]
    return out


def describe(graph, src: Spec, row: np.ndarray, work_items: np.ndarray) -> Described:
    """The library's description of ``graph``'s kernels (module docstring). ``row``: each node's
    row of ``graph.facts.launch`` (-1 none, :func:`daydream.costmodel.kernel_model.match_launches`);
    ``work_items``: nodes whose recorded grid counts work-items (HIP), converted to blocks."""
    data = graph.facts.launch if graph.facts is not None else None
    n = graph.n
    info = K.kernel_info(graph)
    kern = graph.node_kind == Kind.KERNEL
    has = (row >= 0) & kern
    r = np.maximum(row, 0)
    nd = len(data) if data is not None else 0
    shp_ok = nd > 0 and data.shape.shape == (nd, 4) and len(data.dtype) == nd

    def col(a, fill, width=0):
        if nd == 0 or len(a) != nd:
            return np.full((n, width) if width else n, fill, dtype=np.int64 if width else None)
        return np.where(has[:, None] if width else has, a[r], fill)

    shape = col(data.shape, -1, 4) if shp_ok else np.full((n, 4), -1, np.int64)
    dcode = col(data.dtype, 0) if shp_ok else np.zeros(n, np.int64)
    grid, block = (col(getattr(data, c), -1, 3) if nd else np.full((n, 3), -1, np.int64) for c in ("grid", "block"))
    grid = np.where(work_items[:, None] & (block > 0), -(-grid // np.maximum(block, 1)), grid)
    regs, smem = (col(getattr(data, c), -1) if nd else np.full(n, -1) for c in ("regs", "smem"))
    ops = np.asarray(data.op, dtype=object)[r] if nd else np.full(n, "", dtype=object)
    ops = np.where(has, ops, "")
    ops_s = ops.astype(str)

    cls = info.cls
    code = K.CLASS_CODE
    is_gemm_op = np.isin(ops_s, _GEMM_OPS)
    is_attn_op = np.zeros(n, bool)
    for w in _ATTN_WORDS:
        is_attn_op |= np.char.find(ops_s, w) >= 0
    shape_ok = (shape[:, 0] > 0) & (shape[:, 1] > 0) & (shape[:, 2] > 0)
    gemm = kern & (cls == code["gemm"]) & is_gemm_op & shape_ok & (shape[:, 3] > 0)
    attn = kern & (cls == code["softmax_attention"]) & info.is_bound("compute") & is_attn_op & shape_ok & (shape[:, 3] > 0)
    mem_k = kern & info.is_bound("memory")
    soft = mem_k & (cls == code["softmax_attention"]) & shape_ok & (shape[:, 3] < 0)
    norm = mem_k & (cls == code["normalization"]) & shape_ok & (shape[:, 3] < 0)
    fl_by = data.bytes[r] if nd else np.full(n, -1.0)
    op_bytes = np.where(has, fl_by, -1.0)
    elem_sh = mem_k & ~soft & ~norm & shape_ok & (shape[:, 3] < 0) & (op_bytes > 0)
    infer = mem_k & ~soft & ~norm & ~elem_sh
    sel = gemm | attn | soft | norm | elem_sh | infer
    nodes = np.nonzero(sel)[0]
    names = np.asarray(graph.names, dtype=object)[graph.name_id[nodes].astype(np.int64)] if len(nodes) else np.zeros(0, object)

    lib = np.full(n, "elementwise", dtype=object)
    lib[gemm] = np.where(np.isin(ops_s[gemm], _BMM_OPS) | (shape[gemm, 0] > 1), "bmm", "linear")
    lib[attn], lib[soft], lib[norm] = "attention", "softmax", "ln"
    s = nodes
    B = np.where(gemm[s] | attn[s], shape[s, 0], np.where(soft[s] | norm[s], shape[s, 0], 1))
    M = np.where(gemm[s] | attn[s], shape[s, 1], -1)
    N = np.where(gemm[s] | attn[s], shape[s, 2], -1)
    Kd = np.where(gemm[s] | attn[s], shape[s, 3], -1)
    elems = np.where(soft[s] | norm[s] | elem_sh[s], shape[s, 0] * shape[s, 1], -1)
    inputs = np.where(elem_sh[s], np.clip(shape[s, 2], 1, 8), 1)
    dtype = _dtype_of(dcode[s], info.precision[s], names.astype(str) if len(s) else np.zeros(0, str))
    k = Kernels(cls=lib[s].astype(object), name=names, B=B.astype(np.int64), M=M.astype(np.int64), N=N.astype(np.int64),
                K=Kd.astype(np.int64), elems=elems.astype(np.int64), inputs=inputs.astype(np.int64), grid=grid[s].astype(np.int64),
                block=block[s].astype(np.int64), dtype=dtype, regs=regs[s].astype(np.int64), smem=smem[s].astype(np.int64))
    inf = infer[s]
    if inf.any():  # elements whose bytes (read once, written once) the measured time moves on the source
        k.elems[inf] = _inferred_elems(graph.dur_ns[s[inf]].astype(np.float64), k.take(inf), src)
    gpu_kern = int(kern.sum())
    counts = {"kernels": gpu_kern, "described": int(sel.sum()), "bytes inferred from time": int(infer.sum()),
              NO_SHAPES: int((kern & info.is_bound("compute") & ~gemm & ~attn).sum()),
              "not described: other/communication": int((kern & ~sel & ~info.is_bound("compute")).sum())}
    return Described(nodes, k, inf, counts)


def anchors(graph, nodes: np.ndarray, t_now: np.ndarray, gpu_now: Spec) -> tuple:
    """(anchored (bool), measured ns t0, GPU of t0 (object of Spec), precision now (object, ""
    as recorded), library point now (ns)) of ``nodes`` from ``graph.cost_anchor``
    (:class:`~daydream.graph.TaskGraph`); a node not anchored yet is anchored on ``t_now`` on
    ``gpu_now`` at the precision an earlier what-if's per-kernel rule gave it
    (``TaskGraph.path_rows``: "half" is 16-bit, "tf32" TF32), else as recorded."""
    k = len(nodes)
    t0 = np.asarray(t_now, np.float64).copy()
    gpu0 = np.full(k, gpu_now, dtype=object)
    path = path_overrides(graph)[nodes] if k else np.zeros(0, object)
    prec = np.where(path == "half", "bf16", np.where(path == "tf32", "tf32", "")).astype(object)
    pt = t0.copy()
    hit = np.zeros(k, bool)
    if graph.cost_anchor and len(graph.cost_anchor[0]) and k:
        rows, a_t0, a_gpu, a_prec, a_pt = graph.cost_anchor
        r = graph.row[nodes]
        pos = np.searchsorted(rows, r).clip(0, len(rows) - 1)
        hit = (r >= 0) & (rows[pos] == r)
        t0[hit], gpu0[hit], prec[hit], pt[hit] = a_t0[pos[hit]], a_gpu[pos[hit]], a_prec[pos[hit]], a_pt[pos[hit]]
    return hit, t0, gpu0, prec, pt


def retime(graph, g, d: Described, gpu_now: Spec, tgt: Spec, prec_new: np.ndarray | None = None):
    """``g`` with the described kernels ``d`` re-timed by the library for ``tgt`` at ``prec_new``
    (object, one per ``d.nodes``: "" as recorded, else fp32/tf32/fp16/bf16; None: the precision each
    runs at now), as (new graph, the :class:`Prediction` (ns), the new durations (int64 ns)).

    Each kernel is predicted from its anchor (:func:`anchors`: the time measured before the first
    library what-if, on the GPU it was measured on), never from a time an earlier library what-if
    predicted: ``predict_cross(k, t0, gpu0, tgt, precision)``. So gpu-upgrade then amp and amp then
    gpu-upgrade give one prediction, and its range (``TaskGraph.dur_range``, replaced for these
    rows) is the library's range once, not a product of two. A kernel another what-if changed
    since (its time is no longer the library's point) keeps that change as a ratio:
    ``now x new point / old point``. ``graph``: the graph before this what-if (anchors and the
    current times); ``g``: the graph to set the times in (same nodes). Elements inferred from time
    are inferred from the anchor (``d.inferred``), so a re-time does not move them."""
    nodes = d.nodes
    t_now = graph.dur_ns[nodes].astype(np.float64)
    hit, t0, gpu0, prec_old, pt = anchors(graph, nodes, t_now, gpu_now)
    if prec_new is None:  # the precision each kernel runs at now (gpu-upgrade)
        prec_new = prec_old
    k = d.kernels.take(slice(None))
    point, low, high = np.zeros(len(nodes)), np.zeros(len(nodes)), np.zeros(len(nodes))
    reason = np.full(len(nodes), "", dtype=object)
    names = np.array([s.name for s in gpu0], dtype=object) if len(nodes) else np.zeros(0, object)
    prec_new = np.asarray(prec_new, dtype=object)
    for name in sorted(set(names.tolist())):
        src = next(s for s in gpu0 if s.name == name)
        for pr in sorted(set(prec_new[names == name].tolist())):
            m = (names == name) & (prec_new == pr)
            sub = Described(nodes[m], k.take(m), d.inferred[m], d.counts)
            if sub.inferred.any():  # elements from the anchor's time on the anchor's GPU
                sub.kernels.elems[sub.inferred] = _inferred_elems(t0[m][sub.inferred], sub.kernels.take(sub.inferred), src)
            p = predict(sub, t0[m], src, tgt, precision=pr or None)
            point[m], low[m], high[m], reason[m] = p.point, p.low, p.high, p.reason
    same = np.rint(pt) == t_now
    new = np.where(same, point, t_now * point / np.maximum(pt, 1e-9))
    dur = np.maximum(np.rint(new), 0).astype(np.int64)
    g = set_duration(g, np.isin(np.arange(g.n), nodes), dur)
    g = with_range(g, nodes, point, low, high, reason, replace=True)
    g = _with_anchor(g, nodes, t0, gpu0, prec_new, point)
    return g, Prediction(low, point, high, reason), dur


def _with_anchor(g, nodes, t0, gpu0, prec, point):
    import dataclasses

    rec = g.row[nodes] >= 0
    rows = g.row[nodes][rec].astype(np.int64)
    cols = [t0[rec], np.asarray(gpu0, dtype=object)[rec], np.asarray(prec, dtype=object)[rec], point[rec]]
    if g.cost_anchor and len(g.cost_anchor[0]):
        keep = ~np.isin(g.cost_anchor[0], rows)
        rows = np.concatenate([g.cost_anchor[0][keep], rows])
        cols = [np.concatenate([old[keep], c]) for old, c in zip(g.cost_anchor[1:], cols)]
    o = np.argsort(rows, kind="stable")
    return dataclasses.replace(g, cost_anchor=(rows[o], *(c[o] for c in cols)))


def _inferred_elems(t: np.ndarray, k: Kernels, src: Spec) -> np.ndarray:
    """Element counts whose model time on ``src`` (streaming 2 · elements, no L2) is ``t`` (ns)."""
    probe = k.take(slice(None))
    probe.elems = np.full(len(k), _INFER_ELEMS, np.int64)
    probe.inputs = np.ones(len(k), np.int64)
    probe.cls = np.full(len(k), "elementwise", dtype=object)
    f = floor_ns(src)
    per_elem = (predict_model(probe, src) - f) / _INFER_ELEMS
    return np.maximum(np.rint((t - f) / np.maximum(per_elem, 1e-12)), 1).astype(np.int64)


def predict(d: Described, t_ns: np.ndarray, src: Spec, tgt: Spec, precision: str | None = None) -> Prediction:
    """:func:`~daydream.costmodel.kernel_time.predict_cross` of the described kernels (one row per
    ``d.nodes``), computed once per distinct description and measured time (a trace repeats its
    iteration's kernels)."""
    k = d.kernels
    if not len(k):
        z = np.zeros(0)
        return Prediction(z, z, z, np.zeros(0, object))
    cols = [np.asarray(t_ns, np.int64), k.B, k.M, k.N, k.K, k.elems, k.inputs, k.regs, k.smem,
            *k.grid.T, *k.block.T]
    strs = [np.unique(np.asarray(a, dtype=object).astype(str), return_inverse=True)[1].reshape(-1) for a in (k.cls, k.name, k.dtype)]
    key = np.stack(cols + strs, axis=1)
    uniq, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    p = predict_cross(k.take(first), np.asarray(t_ns, np.float64)[first], src, tgt, precision=precision)
    return Prediction(p.low[inv], p.point[inv], p.high[inv], p.reason[inv])


#: words for the library's reason codes (:class:`~daydream.costmodel.kernel_time.Prediction`):
#: code -> (fast end, slow end)
END_WORDS: dict[str, tuple[str, str]] = {
    "tiles": ("the target's library picks the best tile", "it picks a tile up to 1.25x slower than the best"),
    "unfitted": ("the target reaches the development GPUs' highest share of its peak, no power cap",
                 "it reaches their lowest share, power-capped"),
    "library": ("another library (other vendor, attention) runs 2x faster", "2x slower"),
    "precision": ("Tensor Cores at 0.8 of the FP32 path's share of peak", "at 0.35"),
    "fp8-unsupported": ("", ""),
    "spread": ("the development data's 10th percentile of measured/predicted", "its 90th percentile"),
}


def with_range(g, nodes: np.ndarray, point: np.ndarray, low: np.ndarray, high: np.ndarray, reason: np.ndarray,
               replace: bool = False):
    """``g`` with the duration range of ``nodes`` noted (``TaskGraph.dur_range``: ratios to the
    point, by table row); a row an earlier what-if gave a range keeps the product of both ratios
    (the ends are comonotone), unless ``replace`` (a re-time from the anchor: its range is whole)."""
    import dataclasses
    rec = g.row[nodes] >= 0
    rows = g.row[nodes][rec].astype(np.int64)
    pt = np.maximum(point[rec], 1.0)
    lo, hi, why = low[rec] / pt, high[rec] / pt, np.asarray(reason, dtype=object)[rec]
    if g.dur_range:
        o_rows, o_lo, o_hi, o_why = g.dur_range
        pos = np.searchsorted(o_rows, rows).clip(0, max(len(o_rows) - 1, 0))
        both = (len(o_rows) > 0) & (o_rows[pos] == rows) if len(o_rows) else np.zeros(len(rows), bool)
        both &= not replace
        lo = np.where(both, lo * o_lo[pos] if len(o_rows) else lo, lo)
        hi = np.where(both, hi * o_hi[pos] if len(o_rows) else hi, hi)
        keep = ~np.isin(o_rows, rows)
        rows = np.concatenate([o_rows[keep], rows])
        lo, hi = np.concatenate([o_lo[keep], lo]), np.concatenate([o_hi[keep], hi])
        why = np.concatenate([o_why[keep], why])
    o = np.argsort(rows, kind="stable")
    return dataclasses.replace(g, dur_range=(rows[o], lo[o], hi[o], why[o]))


def range_ends(g):
    """(graph at the fast end, graph at the slow end, {code: (fast words, slow words, share of the
    ranged kernels' time)})
    of ``g``'s duration range (``TaskGraph.dur_range``), or None where it has none or every ratio
    is 1. Each end is the whole graph with every ranged kernel at that end."""
    if not g.dur_range or not len(g.dur_range[0]):
        return None
    rows, lo, hi, why = g.dur_range
    if np.all(lo == 1.0) and np.all(hi == 1.0):
        return None
    pos = np.searchsorted(rows, g.row).clip(0, len(rows) - 1)
    hit = (g.row >= 0) & (rows[pos] == g.row) & (g.node_kind != 0)
    d = g.dur_ns.astype(np.float64)
    ends = [set_duration(g, hit, np.rint(d[hit] * r[pos[hit]]).astype(np.int64)) for r in (lo, hi)]
    codes: dict[str, list] = {}
    w = np.asarray(why[pos[hit]], dtype=object).astype(str)
    dd = d[hit]
    total = max(float(dd.sum()), 1.0)
    for c in np.unique(w).tolist():
        for code in filter(None, c.split(",")):
            codes.setdefault(code, [0.0])[0] += float(dd[w == c].sum())
    return ends[0], ends[1], {c: (*END_WORDS.get(c, (c, c)), v[0] / total) for c, v in codes.items()}


def range_words(codes: dict) -> tuple[str, str]:
    """(fast end, slow end) sentences from :func:`range_ends`'s codes, largest kernel time first."""
    order = sorted(codes.items(), key=lambda kv: -kv[1][2])
    fast = "; ".join(f"{v[0]} ({v[2]:.0%} of the ranged kernels' time)" for _, v in order if v[0])
    slow = "; ".join(f"{v[1]}" for _, v in order if v[1])
    return fast, slow
