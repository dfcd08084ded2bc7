"""``fusion``: fuse chains of memory-bound kernels into one kernel each (what a fusing compiler
such as ``torch.compile``/Inductor or XLA does with elementwise, reduction and normalization ops).

Chains. Two kernels are linked when all of these hold:

* both are memory-bound kernels (:mod:`daydream.graph.kernels`: elementwise, reduction,
  normalization, softmax, copy or set kernels; not optimizer or communication kernels, not
  memcpy/memset tasks, not GEMMs), outside the mapped optimizer phase: the optimizer step's
  per-parameter updates read and write each parameter once (nothing of one stays on chip for the
  next, so the chain's bytes model does not hold), ``torch.compile`` of the model leaves
  ``optimizer.step()`` alone, and ``fused-adam`` models fusing them; and not launched by a
  convolution, matmul or attention op (:data:`EXTERN_OPS`: the compiler calls the library for
  those, and their memory-bound kernels, cuDNN's layout and Winograd transforms, are its own);
* the second is the next task on the first one's stream, and no blocking call or other stream
  waits for the first (nothing observes the intermediate result);
* both were launched from one CPU thread and, with a mapped graph, in the same layer (same
  ``layer_id``; the same ``op_id`` when the layer is unknown) and phase, with no synchronizing call
  launching the second (``TaskGraph.synchronizing``: a launch that waits for room in a full
  launch queue is not one); without a mapping (or for two kernels that neither a layer nor an op
  claims), the second launch call directly follows the first on the thread (no other API call
  between).

A chain is cut after ``max_chain`` kernels.

Duration (a bytes model, since traces carry no tensor shapes). Each member is taken to read
``reads`` tensors and write ``writes`` tensors of the same size (default 2 and 1: a binary
elementwise op). Unfused, a chain of ``n`` kernels moves ``n * (reads + writes)`` tensors; fused,
the intermediates stay on chip: it reads the first member's inputs and one new input per later
member, and writes the last output, ``reads + (n - 1) * (reads - 1) + writes`` tensors. The fused
kernel lasts the chain's summed duration times that ratio, but never less than its longest
member (a fused kernel still does all of that member's work):

    fused_ns = max(max(member_ns), round(sum(member_ns) * (r + (n-1)(r-1) + w) / (n (r + w))))

Transformation: the first kernel of each chain takes the fused duration; the other members are
removed with their launch calls and the CPU gaps before those calls (the per-op framework work a
compiled graph no longer does); a one-time start-up call (:mod:`daydream.graph.startup`: a first
launch that loads its module) stays, without its kernel; a kernel's first launch keeps its one-time
part (:func:`daydream.graph.startup.first_launch_one_time_ns`: its time beyond the process's
longest repeat launch, module loading), without the CPU gap before it: the fused kernel is a new
kernel, and its module loads at its first launch.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from ..util.arrays import sorted_unique
from ..graph import kernels as K
from ..errors import NotApplicable
from ..events.table import Kind
from ..graph import NODE_CPU
from ..graph.memory_part import block_pairs, without_events
from ..graph.startup import first_launch_one_time_ns, startup_calls
from ..transform import merge, set_duration, set_gap
from . import Optimization, Param, register
from .common import has_dependents, lane_order, mapped_phase

FUSABLE_CLASSES = ("elementwise", "reduction", "normalization", "softmax_attention", "copy", "set")
#: Framework ops a fusing compiler hands to a library as one extern call (Inductor's extern kernels:
#: convolutions to cuDNN, matmuls to cuBLAS, attention to its fused kernels): the memory-bound
#: kernels they launch (cuDNN's layout transforms, Winograd/FFT transforms, offset setup, split-K
#: reductions) are the library's own and are not fused with anything.
EXTERN_OPS = (r"(?i)convolution|(?<![a-z])conv(?:\d?d|_transpose\d?d|_tbc)(?![a-z])"
              r"|(?<![a-z_])(?:mm|addmm|bmm|baddbmm|addbmm|matmul|linear|_scaled_mm|_int_mm)(?![a-z0-9_])"
              r"|scaled_dot_product|flash_attention|efficient_attention|cudnn_attention")


def _extern_kernels(graph) -> np.ndarray:
    """Nodes (bool, (n,)) launched by an op of :data:`EXTERN_OPS` (the mapped op; none without a mapping)."""
    mp = graph.mapping
    out = np.zeros(graph.n, bool)
    if mp is None or not mp.labels:
        return out
    rx = re.compile(EXTERN_OPS)
    ids = np.unique(mp.op_id[mp.op_id >= 0])
    hit = np.array([rx.search(mp.labels[int(i)]) is not None for i in ids], bool)
    bad = np.zeros(len(mp.labels), bool)
    bad[ids[hit]] = True
    has = mp.op_id >= 0
    out[has] = bad[mp.op_id[has]]
    return out


def fused_fraction(n: np.ndarray, reads: float, writes: float) -> np.ndarray:
    """Bytes moved by a fused chain of ``n`` kernels over the unfused chain's (see module doc)."""
    n = np.asarray(n, dtype=np.float64)
    return (reads + (n - 1) * (reads - 1) + writes) / (n * (reads + writes))


def chains(graph, max_chain: int) -> np.ndarray:
    """Chain id of every node (-1: not in a chain of 2 or more kernels)."""
    n = graph.n
    info = K.kernel_info(graph)
    kern = (graph.node_kind == Kind.KERNEL) & (graph.launch >= 0)
    memb = kern & info.is_bound("memory") & info.is_class(*FUSABLE_CLASSES) & ~_extern_kernels(graph)
    opt = mapped_phase(graph, "optimizer")
    if opt is not None:  # the optimizer step's per-parameter updates: fused-adam's, not a chain (module doc)
        memb &= ~opt
    prev = graph.lane_prev
    ok = memb & (prev >= 0)
    p0 = np.maximum(prev, 0)
    ok &= memb[p0]
    ok &= ~has_dependents(graph)[p0]  # nothing waits for the intermediate result
    # the second kernel has no cross-stream producer of its own
    ok &= np.bincount(graph.edge_dst[graph.dependency_edges], minlength=n) == 0
    la, lp = graph.launch, graph.launch[p0]
    ok &= (lp >= 0) & (graph.lane[np.maximum(la, 0)] == graph.lane[np.maximum(lp, 0)])
    adjacent = graph.lane_prev[np.maximum(la, 0)] == lp  # launch calls adjacent on the thread
    mp = graph.mapping
    if mp is not None:
        layer, op, phase = mp.layer_id.astype(np.int64), mp.op_id.astype(np.int64), mp.phase.astype(np.int64)
        key = np.where(layer >= 0, layer, np.where(op >= 0, (1 << 40) + op, -1))
        both = (key >= 0) & (key[p0] >= 0)
        neither = (key < 0) & (key[p0] < 0)
        same_scope = both & (key == key[p0]) & (phase == phase[p0]) & ~graph.synchronizing[np.maximum(la, 0)]
        ok &= same_scope | (neither & adjacent)  # unmapped kernels: the unmapped rule
    else:
        ok &= adjacent
    # link i <- prev[i]; chains are maximal runs along the stream
    order = lane_order(graph, memb)
    link = ok[order]
    start = ~link
    cid = np.cumsum(start) - 1
    # position within the chain, to cut at max_chain
    idx = np.arange(len(order))
    first = np.maximum.accumulate(np.where(start, idx, 0))
    pos = idx - first
    if max_chain > 0:
        cid = np.cumsum(start | (pos % max_chain == 0)) - 1
    out = np.full(n, -1, dtype=np.int64)
    out[order] = cid
    if np.any(out >= 0):
        size = np.bincount(out[out >= 0])
        out[(out >= 0) & (size[np.maximum(out, 0)] < 2)] = -1
    return out


def _why_no_chain(graph) -> str:
    """Why :func:`chains` found none: no memory-bound kernel follows another on a stream, or (with
    how many such pairs) the rules that keep those pairs apart."""
    info = K.kernel_info(graph)
    memb = (graph.node_kind == Kind.KERNEL) & (graph.launch >= 0) & info.is_bound("memory") & info.is_class(*FUSABLE_CLASSES)
    prev = graph.lane_prev
    pairs = int(np.count_nonzero(memb & (prev >= 0) & memb[np.maximum(prev, 0)]))
    if pairs == 0:
        return "no two memory-bound kernels are launched back to back on one stream and thread"
    return (f"{pairs:,} pairs of memory-bound kernels run back to back on a stream, but none may fuse: other work reads the "
            "first one's output, or the two were launched from different threads, layers/ops or phases")


def _apply(graph, p):
    if p["max_chain"] == 1:
        return graph, "max_chain=1: nothing fused (identity)"
    cid = chains(graph, p["max_chain"])
    members = np.nonzero(cid >= 0)[0]
    if len(members) == 0:
        raise NotApplicable(_why_no_chain(graph))
    rank = np.empty(graph.n, dtype=np.int64)
    rank[graph.order] = np.arange(graph.n)
    members = members[np.lexsort((rank[members], cid[members]))]
    c = cid[members]
    uniq, first_idx, counts = np.unique(c, return_index=True, return_counts=True)
    durs = graph.dur_ns[members]
    total = np.add.reduceat(durs, first_idx)
    longest = np.maximum.reduceat(durs, first_idx)
    frac = fused_fraction(counts, p["reads"], p["writes"])
    fused = np.maximum(longest, np.rint(total * frac).astype(np.int64))
    rest = np.ones(len(members), dtype=bool)
    rest[first_idx] = False
    drop_k = members[rest]
    drop = np.zeros(graph.n, dtype=bool)
    drop[drop_k] = True
    # a launch call goes when every GPU task it launched goes
    la = graph.launch[graph.launch >= 0]
    n_launched = np.bincount(la, minlength=graph.n)
    n_dropped = np.bincount(graph.launch[drop_k], minlength=graph.n)
    calls = sorted_unique(graph.launch[drop_k])
    # one-time start-up calls stay (a compiled program loads its kernels' modules too)
    emptied = calls[(n_dropped[calls] == n_launched[calls]) & ~startup_calls(graph)[calls]]
    # a kernel's first launch keeps its one-time part (module load: the fused kernel is a new kernel,
    # loaded at its first launch), without the launch's own cost and the CPU gap before it
    once = first_launch_one_time_ns(graph)
    keep = np.zeros(graph.n, dtype=bool)
    keep[emptied[once[emptied] > 0]] = True
    drop[emptied[once[emptied] == 0]] = True
    group = np.full(graph.n, -1, dtype=np.int64)
    group[members] = c
    base = set_duration(set_gap(graph, keep, 0), keep, once[keep]) if keep.any() else graph
    g = merge(base, group, fused, drop=drop)  # each chain's first kernel becomes the fused kernel
    g, n_mid = without_intermediates(graph, g, members, c, drop)
    gone = drop & (graph.node_kind == NODE_CPU)
    host_ns = int(graph.gap_ns[gone].sum() + graph.dur_ns[gone].sum())
    kept_ns = int(once[keep].sum())
    host_ns += int(graph.gap_ns[keep].sum() + graph.dur_ns[keep].sum()) - kept_ns
    once_note = (f"; {int(keep.sum()):,} of them a kernel's first launch: its one-time part ({kept_ns / 1e6:,.3f} ms, module "
                 "loading; the fused kernel loads its own) stays" if keep.any() else "")
    # the host time goes with the calls: on a CPU-bound trace it is all of the gain (a new user took
    # the GPU-time figure alone for the prediction's cause)
    return g, (f"{len(uniq):,} chains of {len(members):,} memory-bound kernels fused (mean {len(members) / len(uniq):.1f} per chain); "
               f"{len(drop_k):,} kernels removed; chain GPU time {int(total.sum()) / 1e6:,.3f} -> {int(fused.sum()) / 1e6:,.3f} ms; "
               f"host: {int(gone.sum() + keep.sum()):,} launch calls and the CPU gaps before them removed, {host_ns / 1e6:,.3f} ms "
               "(the per-op framework work a compiled graph no longer does)" + once_note
               + (f"; {n_mid:,} intermediate tensors between fused kernels no longer allocated" if n_mid else ""))


def without_intermediates(graph, g, members: np.ndarray, chain: np.ndarray, dropped: np.ndarray,
                          heads: np.ndarray | None = None):
    """``g`` without the allocator events of the tensors that live only inside a fused chain
    (``docs/memory.md``, "fusion"), and their number. ``members``: the chains' kernels in launch
    order, grouped by chain; ``chain``: the chain id of each; ``dropped``: bool (graph.n,), the
    tasks the what-if removed; ``heads``: per chain (in the order of ``members``) the launch call
    of its fused kernel, default the chain's first (``reconbn``: the BN call, last in backward).

    The op that allocates is the one whose launch call comes next (``graph/memory_part.py``), and
    a tensor a chain member makes and a later member consumes is freed in eager PyTorch once its
    consumer has run: a block (allocation and free paired by address) whose allocation is anchored
    to the launch call of a member other than the chain's last, and whose free is anchored to the
    launch call of a later member of the same chain, or lies in the host work right after the
    chain's last launch (anchored to the next call on the thread, or after the thread's last call),
    never exists in the fused kernel. The last member's output, inputs from outside the chain and
    blocks freed later are kept.

    The events that stay but happened in the host work of a removed launch call (the chain's other
    launch calls and the gaps before them: the last member's output, a free of an input from
    outside) move to the fused kernel's launch call: at its start (where the removed call came
    before the fused one: right after the surviving call before the removed one, where the removed
    work was), in their recorded order (after the thread's last call: its end plus their recorded
    offset).
    Otherwise they would be re-anchored to the next surviving call at their recorded distance from
    it, which counts the removed host work (emulator property, ``tests/test_memory_properties.py``)."""
    gm = graph.memory
    if gm is None or not len(gm) or not len(members):
        return g, 0
    calls = graph.launch[members]
    call_chain = np.full(graph.n, -1, np.int64)
    call_pos = np.full(graph.n, -1, np.int64)
    first = np.r_[True, chain[1:] != chain[:-1]]
    pos = np.arange(len(members)) - np.maximum.accumulate(np.where(first, np.arange(len(members)), 0))
    call_chain[calls], call_pos[calls] = chain, pos
    last = np.r_[chain[1:] != chain[:-1], True]
    last_call = np.full(graph.n, -1, np.int64)  # the chain whose last launch call this is
    last_call[calls[last]] = chain[last]
    after = np.full(graph.n, -1, np.int64)  # the chain whose last launch call comes right before this call
    nxt = graph.lane_next[calls[last]]
    after[nxt[nxt >= 0]] = chain[last][nxt >= 0]
    cpu = np.flatnonzero((graph.node_kind == NODE_CPU) & (graph.row >= 0))
    rows = graph.row[cpu]
    o = np.argsort(rows, kind="stable")
    j = np.minimum(np.searchsorted(rows[o], gm.anchor_row), max(len(rows) - 1, 0))
    hit = (gm.anchor_row >= 0) & (len(rows) > 0) & (rows[o][j] == gm.anchor_row) if len(rows) else np.zeros(len(gm), bool)
    node = np.where(hit, cpu[o][j] if len(rows) else 0, 0)
    ev_chain = np.where(hit & ~gm.at_end, call_chain[node], -1)
    ev_pos = np.where(ev_chain >= 0, call_pos[node], -1)
    ev_after = np.where(hit, np.where(gm.at_end, last_call[node], after[node]), -1)
    al, fr = block_pairs(gm.events, np.arange(len(gm)))
    is_last = last_call[np.maximum(node[al], 0)] == ev_chain[al]
    inside = (ev_chain[al] >= 0) & ~is_last & (
        ((ev_chain[fr] == ev_chain[al]) & (ev_pos[fr] > ev_pos[al])) | (ev_after[fr] == ev_chain[al]))
    drop = np.zeros(len(gm), bool)
    drop[al[inside]] = drop[fr[inside]] = True
    head = np.full(graph.n, -1, np.int64)  # the fused launch call of the chain each removed call belonged to
    head[calls] = (calls[first] if heads is None else np.asarray(heads, np.int64))[np.cumsum(first) - 1]
    moved = hit & dropped[node] & (head[node] >= 0) & ~drop
    new = g.memory
    if moved.any():
        anchor, offset, at_end = gm.anchor_row.copy(), gm.offset_ns.copy(), gm.at_end.copy()
        h = head[node[moved]]
        # at the fused call's start; where the removed call came before it (a backward ReLU before its
        # BN), right after the surviving call before the removed one: where the removed work was
        before = (graph.rec_start_ns[node[moved]] < graph.rec_start_ns[h]) & ~gm.at_end[moved]
        prev = graph.lane_prev[node[moved]]
        for _ in range(graph.n):  # past removed calls (a few in a row at most)
            still = (prev >= 0) & dropped[np.maximum(prev, 0)]
            if not still.any():
                break
            prev = np.where(still, graph.lane_prev[np.maximum(prev, 0)], prev)
        after_prev = before & (prev >= 0)
        anchor[moved] = np.where(after_prev, graph.row[np.maximum(prev, 0)], graph.row[h])
        offset[moved] = np.where(gm.at_end[moved], offset[moved], 0)
        at_end[moved] = gm.at_end[moved] | after_prev
        new = dataclasses.replace(new, anchor_row=anchor, offset_ns=offset, at_end=at_end)
    return dataclasses.replace(g, memory=without_events(new, drop)), int(inside.sum())


register(
    Optimization(
        name="fusion",
        summary="fuse chains of memory-bound kernels launched back to back (torch.compile-style), bytes model",
        apply=_apply,
        params={
            "reads": Param(2.0, "tensors each chain member reads, default 2 (binary elementwise op; shapes are not in "
                           "traces); sets the fused kernel's bytes, see docs/optimizations.md", float, lambda v: 1 <= v <= 1e6, "1 to 1e6"),
            "writes": Param(1.0, "tensors each chain member writes, default 1", float, lambda v: 0 <= v <= 1e6, "0 to 1e6"),
            "max_chain": Param(64, "most kernels fused into one (default 64 = torch._inductor.config.max_fusion_size); "
                               "1 fuses nothing", int, lambda v: 1 <= v <= 1 << 30, "1 to 2^30"),
        },
    )
)
