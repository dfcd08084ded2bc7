"""``tp:degree=N``: what if each transformer block's GEMMs were split over ``N`` GPUs as Megatron-LM
splits them (Shoeybi et al., "Megatron-LM", arXiv 1909.08053, §3, Fig. 3)?

**The split** (Megatron §3): in each block, the first GEMMs of the attention (Q, K, V, or one fused
QKV) and of the MLP (the first linear) are **column-parallel**: each rank computes ``1/N`` of their
output features; the attention output projection and the MLP's second linear are
**row-parallel**: each rank reduces over ``1/N`` of their input features, and an **all-reduce** of
their output (``g`` in Megatron's Fig. 3) sums the partial results. The work between a column and
its row GEMM runs on the split activations: fused attention on ``heads / N`` (its batch·heads
``B / N``), elementwise, softmax and normalization kernels on ``1/N`` of their elements. Layer norms,
residual adds and dropouts outside the pairs are replicated on every rank (unchanged).

**Which GEMMs** (inferred from the op order in each block, counted in the note): a block is the
outermost module of the mapping's layer path whose class (the name without ``_k``) has several
instances (``BertLayer_0.._3``, ``TransformerBlock_0..``). Its ``linear`` kernels (the kernel-cost
library's class, :mod:`.kernel_cost`; shapes ``M`` output features, ``N`` tokens, ``K`` input
features) are read in launch order: a **column group** is a run of consecutive linears with the
same input (tokens and ``K``); the next linear is its **row** partner when its output returns to
the block's width (its ``M`` equals the group's ``K``) and its input is at most the group's outputs
(its ``K`` <= the sum of their ``M``). A group without such a partner is left unsplit (counted):
e.g. an MoE router, an LM head outside the repeated blocks.

**Times.** Split GEMMs and the work between: :func:`daydream.costmodel.kernel_time.predict_shape`
at the new shape (``M / N`` column, ``K / N`` row, ``B / N`` attention, ``elems / N``; ceiling
division, shapes not divisible counted), anchored on the kernel's measured time. Kernels between a
pair the library cannot describe (no shapes): time ``/ N`` (counted, inferred). The all-reduce
moves the row GEMM's output, ``M x N`` elements at the GEMM's element size; its time from
:func:`daydream.costmodel.comm_fit.collective_ns`: the trace's own all-reduce fit where the trace
has sized all-reduces (or ``fit=FILE``, a ``daydream-comm-fit --json`` document of a job), the
link of ``bandwidth=`` elsewhere (default: the traced GPU's board link,
:data:`daydream.costmodel.gpus.BOARD_LINKS`, inferred and said so). It runs in the compute stream's order (Megatron's all-reduce is
synchronous: the next kernel of the stream waits for it), launched by a zero-time call right
after the row GEMM's launch (:func:`insert_after_kernels`).

**Not built:** the backward pass (Megatron's ``f`` all-reduce after the column GEMMs' input
gradients, the split backward GEMMs): no trace here labels backward kernels with their block, so
backward kernels are left unchanged and counted. Sequence parallelism; the memory of the split
weights. ``degree=1`` runs the whole plan: every new shape equals its reference (``predict_shape``
is the identity there) and no all-reduce is issued (Megatron's ``_reduce`` returns its input
when the group has one rank): the baseline.
"""

from __future__ import annotations

import re

import numpy as np

from ..costmodel import comm as cm
from ..costmodel import comm_fit as cf
from ..costmodel import kernel_model as KM
from ..costmodel.gpus import BOARD_LINKS
from ..costmodel.kernel_time import predict_shape
from ..costmodel.specs import from_table
from ..errors import NotApplicable
from ..events.table import Kind
from ..graph import NODE_CPU, EdgeKind, TaskGraph
from ..transform import set_duration
from ..transform.insertion import insert_tasks
from . import Optimization, Param, register
from . import kernel_cost as KC
from .gpu_upgrade import source_gpu
from .comm_common import NETWORK_PARAMS, _link, network_of, trace_fit

PH_FWD = 1  # daydream.mapping.rules.PHASES
_ELEM_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
_CLASS = re.compile(r"_\d+$")


def insert_after_kernels(graph: TaskGraph, anchor: np.ndarray, dur_ns: np.ndarray, names: list[str]) -> tuple[TaskGraph, np.ndarray]:
    """Insert a GPU task right after each kernel ``anchor[k]`` on its own stream (the stream's next
    task now waits for it), launched by a new zero-time call right after ``anchor[k]``'s launching
    call. The emulator equivalent: a ``Launch`` on the anchor's stream, taking no CPU time, right
    after the anchor's ``Launch``. Whatever waited for the anchor (a blocking call, a cross-stream
    consumer) waits for the new task too. Each anchor (and its launching call) anchors one task.

    Args:
        anchor: (K,) kernel node ids, each launched by a call (``graph.launch >= 0``).
        dur_ns: (K,) durations, ns. names: (K,) kernel names.

    Returns:
        (new graph, the inserted GPU tasks' node ids).
    """
    anchor = np.asarray(anchor, np.int64)
    k_n = len(anchor)
    if not k_n:
        return graph, np.zeros(0, np.int64)
    n = graph.n
    lch = graph.launch[anchor]
    after = np.stack([lch, anchor], 1).ravel()
    calls = n + 2 * np.arange(k_n)
    # whatever waited for the anchor (blocking calls, cross-stream consumers) now waits for the
    # collective too: both were launched before it (as transform.add_kernel_after does)
    s, d = graph.edges_of(EdgeKind.WAIT, EdgeKind.XSTREAM)
    o = np.argsort(s, kind="stable")
    s, d = s[o], d[o]
    lo, hi = np.searchsorted(s, anchor, "left"), np.searchsorted(s, anchor, "right")
    succs = [(2 * k + 1, int(w)) for k in range(k_n)  # anchors: tens to hundreds
             for w in sorted(set(d[lo[k]:hi[k]].tolist()) - {int(lch[k])})]
    g, new = insert_tasks(graph, after=after, like=after, succs=succs,
                          launch=np.stack([np.full(k_n, -1), calls], 1).ravel(),
                          dur_ns=np.stack([np.zeros(k_n, np.int64), np.asarray(dur_ns, np.int64)], 1).ravel(),
                          names=[x for nm in names for x in ("ncclAllReduce (inserted)", nm)], kind=["cpu", "kernel"] * k_n,
                          gap_ns=0)
    return g, new[1::2]


def _blocks(labels: list[str], layer_id: np.ndarray) -> np.ndarray:
    """Per node (``layer_id`` into ``labels``), the id of its block: the layer path's prefix up to
    its outermost component whose class has several instances among ``layer_id``'s paths (not the
    leaf); -1 none."""
    used = np.unique(layer_id[layer_id >= 0]).tolist()
    parts = {u: labels[u].split("/") for u in used}
    inst: dict[tuple[int, str], set] = {}
    for p in parts.values():  # distinct layer paths: hundreds
        for d, c in enumerate(p):
            inst.setdefault((d, _CLASS.sub("", c)), set()).add(c)
    block_of: dict[int, int] = {}
    names: dict[str, int] = {}
    for u, p in parts.items():
        for d, c in enumerate(p[:-1]):
            if len(inst[(d, _CLASS.sub("", c))]) > 1:
                block_of[u] = names.setdefault("/".join(p[:d + 1]), len(names))
                break
    lut = np.full(len(labels) + 1, -1, np.int64)
    for u, b in block_of.items():
        lut[u] = b
    return lut[np.where(layer_id >= 0, layer_id, len(labels))]


def plan(graph: TaskGraph, d: KC.Described) -> dict:
    """The split of the forward pass (module docstring).

    Returns:
        dict: ``col``, ``row``, ``attn``, ``mem``: indices into ``d.nodes`` of the column / row
        GEMMs and the attention / memory-bound kernels between a pair; ``other``: node ids of
        kernels between a pair the library does not describe; ``ar_after``: row GEMM node ids;
        ``ar_bytes``: their output bytes; ``counts``.
    """
    mp = graph.mapping
    k = d.kernels
    nodes = d.nodes
    block = _blocks(mp.labels, mp.layer_id)
    pos = graph.position_ns
    fwd = mp.phase == PH_FWD
    lin = np.nonzero((k.cls == "linear") & fwd[nodes] & (block[nodes] >= 0))[0]
    lin = lin[np.lexsort((pos[nodes[lin]], block[nodes[lin]]))]
    kern_all = np.nonzero(graph.node_kind == Kind.KERNEL)[0]
    rank = np.full(graph.n, -1, np.int64)
    rank[kern_all[np.argsort(pos[kern_all], kind="stable")]] = np.arange(len(kern_all))
    col, row, pairs = [], [], []
    unpaired = 0
    i = 0
    while i < len(lin):  # linears in blocks: tens to thousands
        b = block[nodes[lin[i]]]
        j = i + 1
        while (j < len(lin) and block[nodes[lin[j]]] == b and k.N[lin[j]] == k.N[lin[i]] and k.K[lin[j]] == k.K[lin[i]]
               and rank[nodes[lin[j]]] == rank[nodes[lin[j - 1]]] + 1):  # launched back to back: one input
            j += 1
        grp = lin[i:j]
        if j < len(lin) and block[nodes[lin[j]]] == b and k.M[lin[j]] == k.K[lin[i]] and k.K[lin[j]] <= k.M[grp].sum():
            col += grp.tolist()
            row.append(int(lin[j]))
            pairs.append((int(nodes[grp[0]]), int(nodes[lin[j]])))
            i = j + 1
        else:
            unpaired += len(grp)
            i = j
    # the work between each pair (launch order), in the pair's block
    in_d = np.full(graph.n, -1, np.int64)
    in_d[nodes] = np.arange(len(nodes))
    kern = np.nonzero((graph.node_kind == Kind.KERNEL) & fwd & (block >= 0))[0]
    key = block[kern] * (graph.n + 1) + rank[kern]  # kernels by (block, launch order)
    o = np.argsort(key, kind="stable")
    kern, key = kern[o], key[o]
    between = np.zeros(graph.n, bool)
    if pairs:
        pa = np.asarray(pairs, np.int64)
        lo = np.searchsorted(key, block[pa[:, 0]] * (graph.n + 1) + rank[pa[:, 0]], "right")
        hi = np.searchsorted(key, block[pa[:, 1]] * (graph.n + 1) + rank[pa[:, 1]], "left")
        cover = np.zeros(len(kern) + 1, np.int64)
        np.add.at(cover, lo, 1)
        np.add.at(cover, hi, -1)
        between[kern[np.cumsum(cover)[:-1] > 0]] = True
    between[nodes[np.asarray(col + row, np.int64)]] = False
    bi = in_d[between]
    attn = np.nonzero(between)[0][(bi >= 0)]
    attn_i = in_d[attn]
    is_attn = np.isin(k.cls[attn_i], ("attention", "bmm"))
    is_mem = np.isin(k.cls[attn_i], ("elementwise", "softmax", "ln"))
    other = np.concatenate([np.nonzero(between)[0][bi < 0], attn[~is_attn & ~is_mem]])
    row = np.asarray(row, np.int64)
    esz = np.array([_ELEM_BYTES.get(str(x), 4) for x in k.dtype[row]], np.int64)
    bwd = int(((mp.phase == 2) & (graph.node_kind == Kind.KERNEL) & (block >= 0)).sum())
    counts = {"blocks": int(len(np.unique(block[nodes[lin]]))) if len(lin) else 0, "column-parallel GEMMs": len(col),
              "row-parallel GEMMs": len(row), "GEMMs left unsplit (no row partner, inferred)": unpaired,
              "kernels between a pair split by the library": int(len(attn_i[is_attn | is_mem])),
              "kernels between a pair without a description, time / degree (inferred)": int(len(other)),
              "backward kernels in blocks left unchanged (backward split not built)": bwd}
    return {"col": np.asarray(col, np.int64), "row": row, "attn": attn_i[is_attn], "mem": attn_i[is_mem],
            "other": other.astype(np.int64), "ar_after": nodes[row], "ar_bytes": k.M[row] * k.N[row] * k.B[row] * esz,
            "counts": counts}


def _link_or_empty(text: str) -> str:
    return _link(text) if text else text


_link_or_empty.__name__ = "a link preset or a bandwidth with its unit, or empty"


def _ceil_div(a: np.ndarray, n: int) -> np.ndarray:
    return -(-a // n)


def split_times(d: KC.Described, pl: dict, degree: int, t_ns: np.ndarray, spec) -> tuple[np.ndarray, np.ndarray, int]:
    """(indices into ``d.nodes``, their new times (point, ns), shapes not divisible by the degree)."""
    k = d.kernels
    idx = np.concatenate([pl["col"], pl["row"], pl["attn"], pl["mem"]])
    if not len(idx):
        return idx, np.zeros(0, np.int64), 0
    ref = k.take(idx)
    new = k.take(idx)
    nc, nr, na = len(pl["col"]), len(pl["row"]), len(pl["attn"])
    c, r, a, m = slice(0, nc), slice(nc, nc + nr), slice(nc + nr, nc + nr + na), slice(nc + nr + na, None)
    rest = 0
    for sl, f in ((c, "M"), (r, "K"), (a, "B"), (m, "elems")):
        v = getattr(new, f)
        rest += int(np.count_nonzero(v[sl] % degree))
        v[sl] = np.maximum(_ceil_div(v[sl], degree), 1)
    p = predict_shape(ref, t_ns[idx], new, spec)
    return idx, np.maximum(np.rint(p.point), 0).astype(np.int64), rest


def _apply(graph: TaskGraph, p) -> tuple[TaskGraph, str]:
    N = int(p["degree"])
    if graph.mapping is None or not (graph.mapping.layer_id >= 0).any():
        raise NotApplicable("the trace has no layer mapping (module annotations): the blocks' GEMMs cannot be found")
    gpu, name = source_gpu(graph, p["gpu"])
    if gpu is None:
        raise NotApplicable(f"the traced GPU {name!r} is not in the GPU table; give tp:gpu=NAME")
    spec = from_table(gpu)
    row = KM.match_launches(graph, graph.facts.launch) if graph.facts is not None else np.full(graph.n, -1, np.int64)
    d = KC.describe(graph, spec, row, KM.work_item_grid(graph))
    pl = plan(graph, d)
    if not len(pl["row"]):
        raise NotApplicable("no column/row GEMM pair found in the blocks (needs module annotations and record_shapes=True): "
                            + "; ".join(f"{a}: {b}" for a, b in pl["counts"].items()))
    t = graph.dur_ns[d.nodes]
    idx, new_t, rest = split_times(d, pl, N, t, spec)
    mask = np.zeros(graph.n, bool)
    mask[d.nodes[idx]] = True
    dur = graph.dur_ns.copy()
    dur[d.nodes[idx]] = new_t
    g = set_duration(graph, mask, dur[mask])
    oth = pl["other"]
    if len(oth):
        g = set_duration(g, np.isin(np.arange(graph.n), oth), np.rint(graph.dur_ns[np.sort(oth)] / N).astype(np.int64))
    link_how = "given"
    if not p["bandwidth"]:
        if gpu.name not in BOARD_LINKS:
            raise NotApplicable(f"the {gpu.name}'s board link is not known; give tp:bandwidth=PRESET")
        p = {**p, "bandwidth": BOARD_LINKS[gpu.name][0]}
        link_how = f"the {gpu.name}'s board link, inferred"
    net = network_of(p)
    fit, how = trace_fit(graph, net, p.get("fit", ""))
    nb = pl["ar_bytes"]
    ar_d, by_fit = cf.collective_ns(fit, cm.ALL_REDUCE, nb, N, net)
    if N > 1:
        names = [f"ncclKernel_AllReduce_RING_LL_Sum_float (inserted, {int(x)} B, n={N})" for x in nb.tolist()]
        o = np.argsort(graph.position_ns[pl["ar_after"]], kind="stable")
        g, _ = insert_after_kernels(g, pl["ar_after"][o], ar_d[o], [names[i] for i in o])
    before, after = int(t[idx].sum()), int(new_t.sum())
    c = pl["counts"]
    note = (f"Megatron tensor parallel over {N} GPUs on {net.intra.name} ({link_how}): {c['row-parallel GEMMs']} column/row pairs in "
            f"{c['blocks']} blocks (inferred from the op order); split kernels {before / 1e6:,.3f} -> {after / 1e6:,.3f} ms "
            f"(kernel-cost library, {gpu.name}; {rest} shapes not divisible by {N}, rounded up); "
            + (f"{len(nb)} all-reduces ({nb.sum() / 2**20:,.2f} MiB, {ar_d.sum() / 1e6:,.3f} ms; "
               + (f"{by_fit} costed by {how}, " if fit is not None else "")
               + f"{len(nb) - by_fit} by the link preset); " if N > 1 else "no all-reduce (one rank); ")
            + "; ".join(f"{a}: {b}" for a, b in c.items()))
    return g, note


register(Optimization(
    name="tp", summary="Megatron tensor parallel over `degree` GPUs: each block's column/row GEMM pairs split, an "
    "all-reduce after each row-parallel GEMM (forward pass)", apply=_apply, what_if=True,
    params={"degree": Param(2, "tensor-parallel GPUs (Megatron's tensor_model_parallel_size)", int, lambda v: 1 <= v <= 1024, "1 to 1024"),
            "gpu": Param("", "the GPU the trace ran on; empty: the trace's device name", str),
            "fit": Param("", "a collective-cost fit (daydream-comm-fit --json FILE, e.g. of a job) for the all-reduces; "
                         "empty: the trace's own all-reduces where it has sized ones, else the link preset", str),
            **NETWORK_PARAMS,
            "bandwidth": Param("", "link of the tensor-parallel group: a preset (" + ", ".join(cm.PRESETS) + ") or a bandwidth "
                               "with its unit; empty: the traced GPU's board link (daydream/costmodel/gpus.py BOARD_LINKS, "
                               "from the datasheets)", _link_or_empty)}))
