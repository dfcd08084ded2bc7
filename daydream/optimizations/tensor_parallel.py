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
features) are read in launch order: a **column group** is a run of linears with the same input
(tokens and ``K``) launched back to back, or in one module with the attention core (``bmm``,
``softmax``, fused attention) after them and none between (Q, K, V with a scale or copies between,
:func:`pair_linears`); the next linear is its **row** partner when its output returns to
the block's width (its ``M`` equals the group's ``K``), its input is at most the group's outputs
(its ``K`` <= the sum of their ``M``) and it is in the group's attention or layer module. A group
without such a partner is left unsplit (counted): e.g. an MoE router, an LM head outside the
repeated blocks.

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

**Backward** (Megatron §3: the backward of ``f`` is an all-reduce, of ``g`` the identity): the
backward GEMMs are matched to the forward ones by reverse launch order and sizes
(:func:`match_backward`, inferred and counted: no trace labels backward kernels with their
block); each forward GEMM's input gradient (``(K, N, M)``, :func:`input_gradient_of`) and weight
gradient are split as it is (:func:`backward_split_field`: the field holding the column GEMM's
``M`` or the row GEMM's ``K`` divided by ``N``), and an all-reduce of the input gradient
(``N x K`` elements) runs after each column group's last input gradient. Backward kernels that are
not GEMMs are left unchanged (counted).

**Not built:** sequence parallelism; the memory of the split weights; non-GEMM backward kernels.
``degree=1`` runs the whole plan: every new shape equals its reference (``predict_shape``
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
from .tp_memory import split_memory
from .comm_common import NETWORK_PARAMS, _link, network_of, trace_fit
from ..util.display import plural

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
    leaf, unless that path is itself a block of other paths: work the block's own ``forward``
    launches, e.g. a ``F.gelu`` between its linears); -1 none."""
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
    for u, p in parts.items():  # a kernel launched by the block's own forward (not a child module's)
        if u not in block_of and "/".join(p) in names:
            block_of[u] = names["/".join(p)]
    lut = np.full(len(labels) + 1, -1, np.int64)
    for u, b in block_of.items():
        lut[u] = b
    return lut[np.where(layer_id >= 0, layer_id, len(labels))]


def match_backward(fwd_dims: np.ndarray, bwd_dims: np.ndarray) -> np.ndarray:
    """Which forward GEMM each backward GEMM belongs to (inferred from the order and the shapes).

    Autograd runs the backward of the forward ops in reverse order, and a linear's backward is its
    input gradient (``dgrad``) and its weight gradient (``wgrad``), two GEMMs over the same three
    sizes as the forward one (``{M, N, K}`` as a multiset). Walking the backward GEMMs in launch
    order against the forward ones in reverse: a backward GEMM goes to the current forward GEMM
    when its sizes match (at most two each), else to the next one back when they match that (the
    current one had fewer: a frozen weight, an input without gradient), else to none.

    Args:
        fwd_dims: (F, 3) int64 (M, N, K) of the forward GEMMs in launch order.
        bwd_dims: (Bk, 3) int64 (M, N, K) of the backward GEMMs in launch order.

    Returns:
        (Bk,) int64 index into the forward GEMMs, -1 none.
    """
    fs = np.sort(np.asarray(fwd_dims, np.int64).reshape(-1, 3), axis=1)
    bs = np.sort(np.asarray(bwd_dims, np.int64).reshape(-1, 3), axis=1)
    out = np.full(len(bs), -1, np.int64)
    f, taken = len(fs) - 1, 0
    for j in range(len(bs)):  # backward GEMMs of a step: tens to thousands
        if f >= 0 and taken < 2 and (bs[j] == fs[f]).all():
            out[j], taken = f, taken + 1
        elif f >= 1 and (bs[j] == fs[f - 1]).all():
            f, taken = f - 1, 1
            out[j] = f
    return out


def input_gradient_of(fwd: tuple[int, int, int], bwd: list[tuple[int, int, int]]) -> int:
    """Which of the backward GEMMs matched to one forward GEMM ``(M, N, K)`` (launch order) is its
    input gradient: the one of shape ``(K, N, M)`` (``grad_out`` by the weight) when exactly one is,
    else the first (autograd's ``AddmmBackward0``/``MmBackward0`` computes ``mat1``'s gradient
    first); -1 for none."""
    if not bwd:
        return -1
    M, N, K = fwd
    hit = [i for i, b in enumerate(bwd) if tuple(b) == (K, N, M)]
    return hit[0] if len(hit) == 1 else 0


def backward_split_field(fwd: tuple[int, int, int], bwd: tuple[int, int, int], split: str, dgrad: bool) -> str:
    """The field of a backward GEMM that the degree divides.

    The forward GEMM is ``(M, N, K)`` (``M`` output features, ``N`` tokens, ``K`` input features);
    its input gradient (``dgrad``) is ``(K, N, M)`` and its weight gradient ``{M, K}`` by ``N``
    (reduced over the tokens, ``K' = N``). A column-parallel GEMM (``split="M"``) divides the field
    holding the forward ``M``, a row-parallel one (``split="K"``) the field holding ``K``, the
    token field (``N'`` of a dgrad, ``K'`` of a wgrad) last.
    """
    M, _, K = fwd
    bm, bn, bk = bwd
    v = M if split == "M" else K
    order = ("M", "K", "N") if dgrad else ("M", "N", "K")
    for f in order:
        if {"M": bm, "N": bn, "K": bk}[f] == v:
            return f
    return order[0]


def _backward_plan(graph: TaskGraph, d: KC.Described, col: list, row: np.ndarray, fwd: np.ndarray) -> dict:
    """The backward's split (module docstring): the backward GEMMs of the column (``col``) and row
    (``row``) GEMMs (indices into ``d.nodes``) and the field each divides, and the input-gradient
    all-reduces after each column group's last input gradient (node ids, bytes)."""
    k, nodes, pos, mp = d.kernels, d.nodes, graph.position_ns, graph.mapping
    # the backward: GEMMs matched to the forward ones by order and shapes (inferred)
    flin = np.nonzero((k.cls == "linear") & fwd[nodes])[0]
    flin = flin[np.argsort(pos[nodes[flin]], kind="stable")]
    blin = np.nonzero((k.cls == "linear") & (mp.phase[nodes] == 2))[0]
    blin = blin[np.argsort(pos[nodes[blin]], kind="stable")]
    dims = (lambda ix: np.stack([k.M[ix], k.N[ix], k.K[ix]], 1) if len(ix) else np.zeros((0, 3), np.int64))
    owner = match_backward(dims(flin), dims(blin))
    role = {int(c): "M" for c in col} | {int(r): "K" for r in row.tolist()}  # column: M split; row: K
    # a column GEMM's group: the row partner after it (column GEMMs of one group share the input)
    row_pos = np.sort(pos[nodes[row]]) if len(row) else np.zeros(0, np.int64)
    grp = {int(c): int(np.searchsorted(row_pos, pos[nodes[c]])) for c in col}
    bcol, bcol_f, brow, brow_f, last_dgrad = [], [], [], [], {}
    matched: dict[int, list[int]] = {}
    for j, o in zip(blin.tolist(), owner.tolist()):  # backward GEMMs: tens to thousands
        if o >= 0 and int(flin[o]) in role:
            matched.setdefault(int(flin[o]), []).append(j)
    shape = (lambda i: (int(k.M[i]), int(k.N[i]), int(k.K[i])))
    for f, js in matched.items():
        split = role[f]
        di = input_gradient_of(shape(f), [shape(j) for j in js])
        for x, j in enumerate(js):
            (bcol if split == "M" else brow).append(j)
            (bcol_f if split == "M" else brow_f).append(backward_split_field(shape(f), shape(j), split, x == di))
            if split == "M" and x == di:
                key = grp[f]
                if key not in last_dgrad or pos[nodes[j]] > pos[nodes[last_dgrad[key][0]]]:
                    last_dgrad[key] = (j, f)
    ag = sorted(last_dgrad.values(), key=lambda x: pos[nodes[x[0]]])
    ag_after = nodes[np.array([j for j, _ in ag], np.int64)] if ag else np.zeros(0, np.int64)
    ag_bytes = np.array([int(k.N[f]) * int(k.K[f]) * max(int(k.B[f]), 1) * _ELEM_BYTES.get(str(k.dtype[f]), 4)
                         for _, f in ag], np.int64)
    return {"col": bcol, "row": brow, "col_f": bcol_f, "row_f": brow_f, "ag_after": ag_after, "ag_bytes": ag_bytes,
            "unmatched": int((owner < 0).sum())}


#: Op classes of the attention core (:mod:`.kernel_cost`'s): the kernels that read Q, K and V
#: together (QK^T and PV as ``bmm``, their ``softmax``, or one fused ``attention`` kernel). A column
#: group (Megatron §3's column-parallel QKV) is the linears of one input before the core.
CORE_CLASSES = ("attention", "bmm", "softmax")


def _parents(labels: list[str], layer_id: np.ndarray, up: int = 1) -> np.ndarray:
    """Per node, an id of its layer path ``up`` modules up (1: the path without its last module,
    a linear's attention or MLP module; 2: the module holding that); -1 for a node without a layer."""
    ids: dict[str, int] = {}
    lut = np.full(len(labels) + 1, -1, np.int64)
    for u in np.unique(layer_id[layer_id >= 0]).tolist():  # distinct layer paths: hundreds
        lut[u] = ids.setdefault("/".join(labels[u].split("/")[:-up]), len(ids))
    return lut[np.where(layer_id >= 0, layer_id, len(labels))]


def pair_linears(block: np.ndarray, rank: np.ndarray, N: np.ndarray, K: np.ndarray, M: np.ndarray, parent: np.ndarray,
                 grand: np.ndarray, core_before: np.ndarray,
                 core_end: np.ndarray) -> tuple[list[list[int]], list[int], int]:
    """Megatron's column groups and their row partners among a block's forward linears.

    Args: one entry per linear, sorted by (block, launch order): ``block`` id; ``rank``: launch
        order among all kernels (consecutive: launched back to back); ``N`` tokens, ``K`` input and
        ``M`` output features (:mod:`.kernel_cost`'s shapes); ``parent``: id of the module that
        holds the linear (:func:`_parents`), ``grand`` of the module holding that (``up=2``);
        ``core_before``: attention-core kernels
        (:data:`CORE_CLASSES`) launched in the block before it; ``core_end``: those in its block.

    A **column group** is a run of linears of one input (same ``N`` and ``K``): launched back to
    back, or, within one module and with no core kernel between them, closed by a core kernel
    before the block's next linear: Q, K and V read the same activation and the core reads their
    outputs (OWLv2's ``q_proj(x) * scale``, then ``k_proj``, ``v_proj`` with copies between; the
    scale kernel broke the back-to-back run, so a square ``k_proj`` became ``q_proj``'s row
    partner). The next linear is the group's **row partner** when its output returns to the block's
    width (its ``M`` equals the group's ``K``) and its input is at most the group's outputs (``K``
    <= the sum of their ``M``) and it is in the same module two levels up (the attention or the
    layer: a row partner is never the next layer's ``q_proj``, which OWLv2's text MLP, whose second
    linear runs as a split-K kernel the library does not describe, left next in line) (Megatron §3:
    ColumnParallel QKV then RowParallel out-projection; the MLP's first and second linear).

    Returns:
        (groups, rows, unpaired): groups as lists of indices, each group's row partner's index,
        and the number of linears in groups without a partner (left unsplit).
    """
    n = len(block)
    groups: list[list[int]] = []
    rows: list[int] = []
    unpaired = 0
    i = 0
    while i < n:  # linears in blocks: tens to thousands
        b = block[i]

        def one_input(x: int) -> bool:
            return block[x] == b and N[x] == N[i] and K[x] == K[i]

        j = i + 1
        while j < n and one_input(j) and rank[j] == rank[j - 1] + 1:
            j += 1
        e = i + 1
        while e < n and one_input(e) and parent[e] == parent[i] and parent[i] >= 0 and core_before[e] == core_before[e - 1]:
            e += 1
        if e > j and (core_before[e] if e < n and block[e] == b else core_end[i]) > core_before[e - 1]:
            j = e  # one input across the kernels between (a scale, copies), the core after it
        grp = list(range(i, j))
        if j < n and block[j] == b and M[j] == K[i] and K[j] <= M[i:j].sum() and grand[j] == grand[i]:
            groups.append(grp)
            rows.append(j)
            i = j + 1
        else:
            unpaired += len(grp)
            i = j
    return groups, rows, unpaired


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
    # forward kernels in blocks by (block, launch order); the attention core among them
    in_d = np.full(graph.n, -1, np.int64)
    in_d[nodes] = np.arange(len(nodes))
    kern = np.nonzero((graph.node_kind == Kind.KERNEL) & fwd & (block >= 0))[0]
    key = block[kern] * (graph.n + 1) + rank[kern]
    o = np.argsort(key, kind="stable")
    kern, key = kern[o], key[o]
    core = np.cumsum((in_d[kern] >= 0) & np.isin(k.cls[np.maximum(in_d[kern], 0)], CORE_CLASSES))
    ln = nodes[lin]
    at = np.searchsorted(key, block[ln] * (graph.n + 1) + rank[ln])
    core_before = np.where(at > 0, core[np.maximum(at - 1, 0)], 0) if len(kern) else np.zeros(len(lin), np.int64)
    last = np.searchsorted(key, (block[ln] + 1) * (graph.n + 1)) - 1  # the block's last kernel
    core_end = core[np.maximum(last, 0)] if len(kern) else np.zeros(len(lin), np.int64)
    parent, grand = _parents(mp.labels, mp.layer_id), _parents(mp.labels, mp.layer_id, 2)
    groups, row_l, unpaired = pair_linears(block[ln], rank[ln], k.N[lin], k.K[lin], k.M[lin], parent[ln], grand[ln],
                                           core_before, core_end)
    col = [int(lin[x]) for g in groups for x in g]
    row = [int(lin[x]) for x in row_l]
    pairs = [(int(nodes[lin[g[0]]]), int(nodes[lin[r]])) for g, r in zip(groups, row_l)]
    # the work between each pair (launch order), in the pair's block
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
    bw = _backward_plan(graph, d, col, row, fwd)
    bcol, brow = bw["col"], bw["row"]
    bwd = int(((mp.phase == 2) & (graph.node_kind == Kind.KERNEL)).sum()) - len(bcol) - len(brow)
    counts = {"blocks": int(len(np.unique(block[nodes[lin]]))) if len(lin) else 0, "column-parallel GEMMs": len(col),
              "row-parallel GEMMs": len(row), "GEMMs left unsplit (no row partner, inferred)": unpaired,
              "kernels between a pair split by the library": int(len(attn_i[is_attn | is_mem])),
              "kernels between a pair without a description, time / degree (inferred)": int(len(other)),
              "backward GEMMs of column-parallel GEMMs split (matched by order and shapes, inferred)": len(bcol),
              "backward GEMMs of row-parallel GEMMs split (inferred)": len(brow),
              "backward GEMMs matched to no forward GEMM": bw["unmatched"],
              "input-gradient all-reduces (Megatron's f, after the column group's backward)": len(bw["ag_bytes"]),
              "other backward kernels left unchanged (not split: their blocks are not labelled)": max(bwd, 0)}
    return {"col": np.asarray(col, np.int64), "row": row, "attn": attn_i[is_attn], "mem": attn_i[is_mem],
            "other": other.astype(np.int64), "ar_after": nodes[row], "ar_bytes": k.M[row] * k.N[row] * k.B[row] * esz,
            "bwd": np.asarray(bcol + brow, np.int64), "bwd_field": np.array(bw["col_f"] + bw["row_f"], dtype=object),
            "ag_after": bw["ag_after"], "ag_bytes": bw["ag_bytes"], "counts": counts}


def _link_or_empty(text: str) -> str:
    return _link(text) if text else text


_link_or_empty.__name__ = "a link preset or a bandwidth with its unit, or empty"


def _ceil_div(a: np.ndarray, n: int) -> np.ndarray:
    return -(-a // n)


def split_times(d: KC.Described, pl: dict, degree: int, t_ns: np.ndarray, spec) -> tuple[np.ndarray, np.ndarray, int]:
    """(indices into ``d.nodes``, their new times (point, ns), shapes not divisible by the degree):
    the forward's column (``M``), row (``K``), attention (``B``) and memory-bound (``elems``)
    kernels, and the backward GEMMs at the field :func:`backward_split_field` chose for each."""
    idx, new_t, rest, _, _ = split_shapes(d, pl, degree, t_ns, spec)
    return idx, new_t, rest


def split_shapes(d: KC.Described, pl: dict, degree: int, t_ns: np.ndarray, spec):
    """:func:`split_times` plus the field each kernel's split divides and the kernels at the
    split shape (``Kernels``, one per index)."""
    k = d.kernels
    bwd = pl.get("bwd", np.zeros(0, np.int64))
    idx = np.concatenate([pl["col"], pl["row"], pl["attn"], pl["mem"], bwd]).astype(np.int64)
    if not len(idx):
        return idx, np.zeros(0, np.int64), 0, np.zeros(0, object), k.take(idx)
    ref = k.take(idx)
    new = k.take(idx)
    fields = np.array(["M"] * len(pl["col"]) + ["K"] * len(pl["row"]) + ["B"] * len(pl["attn"]) + ["elems"] * len(pl["mem"])
                      + list(pl.get("bwd_field", [])), dtype=object)
    rest = 0
    for f in ("M", "K", "N", "B", "elems"):
        sl = fields == f
        if not sl.any():
            continue
        v = getattr(new, f)
        rest += int(np.count_nonzero(v[sl] % degree))
        v[sl] = np.maximum(_ceil_div(v[sl], degree), 1)
    p = predict_shape(ref, t_ns[idx], new, spec)
    return idx, np.maximum(np.rint(p.point), 0).astype(np.int64), rest, fields, new


def _apply(graph: TaskGraph, p) -> tuple[TaskGraph, str]:
    N = int(p["degree"])
    if graph.mapping is None or not (graph.mapping.layer_id >= 0).any():
        raise NotApplicable("the trace has no layer mapping (module annotations): the blocks' GEMMs cannot be found")
    gpu, name = source_gpu(graph, p["gpu"])
    if gpu is None:
        what = f"the traced GPU {name!r} is not in the GPU table" if name else "the trace does not name its GPU"
        raise NotApplicable(f"{what}; give tp:gpu=NAME")
    spec = from_table(gpu)
    row = KM.match_launches(graph, graph.facts.launch) if graph.facts is not None else np.full(graph.n, -1, np.int64)
    d = KC.describe(graph, spec, row, KM.work_item_grid(graph))
    pl = plan(graph, d)
    if not len(pl["row"]):
        raise NotApplicable("no column/row GEMM pair found in the blocks (needs module annotations and record_shapes=True): "
                            + "; ".join(f"{a}: {b}" for a, b in pl["counts"].items()))
    t = graph.dur_ns[d.nodes]
    idx, new_t, rest, fields, new = split_shapes(d, pl, N, t, spec)
    mask = np.zeros(graph.n, bool)
    mask[d.nodes[idx]] = True
    dur = graph.dur_ns.copy()
    dur[d.nodes[idx]] = new_t
    g = set_duration(graph, mask, dur[mask])
    oth = pl["other"]
    if len(oth):
        g = set_duration(g, np.isin(np.arange(graph.n), oth), np.rint(graph.dur_ns[np.sort(oth)] / N).astype(np.int64))
    link_how = "given"
    nb = np.concatenate([pl["ar_bytes"], pl["ag_bytes"]]).astype(np.int64)
    n_f = len(pl["ag_bytes"])
    net, fit, how, by_fit, ar_d = None, None, "", 0, np.zeros(len(nb), np.int64)
    if N > 1:  # one rank has no all-reduce (Megatron's _reduce returns its input), so it needs no link
        if not p["bandwidth"]:
            if gpu.name not in BOARD_LINKS:
                raise NotApplicable(f"the {gpu.name}'s board link is not known; give tp:bandwidth=PRESET")
            p = {**p, "bandwidth": BOARD_LINKS[gpu.name][0]}
            link_how = f"the {gpu.name}'s board link, inferred"
        net = network_of(p)
        fit, how = trace_fit(graph, net, p.get("fit", ""))
        # the row GEMMs' output all-reduces (g) and the column groups' input-gradient all-reduces (f)
        ar_at = np.concatenate([pl["ar_after"], pl["ag_after"]]).astype(np.int64)
        ar_d, by_fit = cf.collective_ns(fit, cm.ALL_REDUCE, nb, N, net)
        names = [f"ncclKernel_AllReduce_RING_LL_Sum_float (inserted, {int(x)} B, n={N})" for x in nb.tolist()]
        o = np.argsort(graph.position_ns[ar_at], kind="stable")
        g, _ = insert_after_kernels(g, ar_at[o], ar_d[o], [names[i] for i in o])
    g, mem_note = split_memory(graph, g, d, idx, fields, new, N, _weight_bytes(graph, d, pl), p["opt_state"])
    before, after = int(t[idx].sum()), int(new_t.sum())
    c = pl["counts"]
    on = f"on {net.intra.name} ({link_how})" if net is not None else "(no link: one rank)"
    note = (f"Megatron tensor parallel over {plural(N, 'GPU')} {on}: {plural(c['row-parallel GEMMs'], 'column/row pair')} in "
            f"{plural(c['blocks'], 'block')} (inferred from the op order); split kernels {before / 1e6:,.3f} -> {after / 1e6:,.3f} ms "
            f"(kernel-cost library, {gpu.name}; {rest} shapes not divisible by {N}, rounded up); "
            + (f"{len(nb)} all-reduces ({len(nb) - n_f} forward, {n_f} of input gradients; {nb.sum() / 2**20:,.2f} MiB, "
               f"{ar_d.sum() / 1e6:,.3f} ms; "
               + (f"{by_fit} costed by {how}, " if fit is not None else "")
               + f"{len(nb) - by_fit} by the link preset); " if N > 1 else "no all-reduce (one rank); ")
            + "; ".join(f"{a}: {b}" for a, b in c.items()) + (f"; {mem_note}" if mem_note else ""))
    return g, note


def _weight_bytes(graph: TaskGraph, d: KC.Described, pl: dict) -> int:
    """The split GEMMs' weights (``K x M`` at the element size), each counted once: per distinct
    (layer, ``K``, ``M``, dtype) of the column and row GEMMs (a layer's weight is the same tensor
    in every step and iteration; before, every launch was counted, 3.9x OWLv2's weights)."""
    k = d.kernels
    i = np.concatenate([pl["col"], pl["row"]]).astype(np.int64)
    if not len(i):
        return 0
    esz = np.array([_ELEM_BYTES.get(str(x), 4) for x in k.dtype[i].tolist()], np.int64)
    lay = graph.mapping.layer_id[d.nodes[i]].astype(np.int64)
    keys = np.stack([lay, k.K[i].astype(np.int64), k.M[i].astype(np.int64), esz])
    _, first = np.unique(keys, axis=1, return_index=True)
    return int((k.K[i][first].astype(np.int64) * k.M[i][first] * esz[first]).sum())


def _warn(graph: TaskGraph, p) -> list[str]:
    """A degree over one node (``gpus_per_node``) with no ``inter=`` link: costed as one node of the
    intra-node link, as :func:`daydream.costmodel.comm.collective_ns` does without one (optimistic:
    the group's all-reduces would cross nodes); said, not guessed (no inter-node link is inferred)."""
    N, g = int(p["degree"]), int(p["gpus_per_node"])
    if N > g and not p.get("inter"):
        return [f"degree={N} spans {-(-N // g)} nodes of gpus_per_node={g}, but no inter= link was given: its all-reduces "
                f"are costed as one node of the intra-node link (optimistic); give inter=PRESET (e.g. ib200) or a "
                f"bandwidth for the links between nodes"]
    return []


register(Optimization(
    name="tp", warn=_warn, summary="Megatron tensor parallel over `degree` GPUs: each block's column/row GEMM pairs split, an "
    "all-reduce after each row-parallel GEMM and each column group's input gradient (forward and backward)",
    apply=_apply, what_if=True,
    params={"degree": Param(2, "tensor-parallel GPUs (Megatron's tensor_model_parallel_size; user's what-if)", int, lambda v: 1 <= v <= 1024, "1 to 1024"),
            "gpu": Param("", "the GPU the trace ran on; empty: the trace's device name", str),
            "fit": Param("", "a collective-cost fit (daydream-comm-fit --json FILE, e.g. of a job) for the all-reduces; "
                         "empty: the trace's own all-reduces where it has sized ones, else the link preset", str),
            "opt_state": Param(2.0, "memory: optimizer-state bytes per weight byte held from before the window, where the "
                               "trace has an optimizer step (Adam/AdamW: exp_avg and exp_avg_sq, torch.optim.Adam docs = 2; SGD with momentum 1)",
                               float, lambda v: 0 <= v <= 16, "0 to 16"),
            **NETWORK_PARAMS,
            "bandwidth": Param("", "link of the tensor-parallel group: a preset (" + ", ".join(cm.PRESETS) + ") or a bandwidth "
                               "with its unit; empty: the traced GPU's board link (daydream/costmodel/gpus.py BOARD_LINKS, "
                               "from the datasheets)", _link_or_empty)}))
