"""What ``amp`` (``torch.autocast`` to fp16/bf16) does to memory (``docs/memory.md``, "amp").

Rules, applied to the allocator's events of the graph (:mod:`daydream.graph.memory_part`):

1. **16-bit activations.** An activation (a block, paired by address, allocated in the forward
   pass, its event anchored to a forward call, and freed in the backward pass: at a recorded time
   within the recorded span of its step's backward calls; by time, not by the free's anchor,
   because a block freed after a backward function's last call is anchored to the call after it)
   allocated by an op that autocast runs in 16-bit (the anchor's mapped op on autocast's
   lower-precision list, ``amp.AUTOCAST_LOW_OPS``, from the PyTorch "Automatic Mixed Precision
   package" op reference) holds 2-byte instead of 4-byte elements: its allocation and its free
   are halved (rounded up to a byte).
2. **fp32 master weights kept.** Parameters, gradients and optimizer state stay fp32 under
   autocast (the parameters are not converted; PyTorch AMP recipe): their events do not change.
3. **A weight cast copy per GEMM weight.** Autocast casts each fp32 weight of a forward op on the
   lower-precision list to 16-bit once and keeps the copy while the backward may use it (the
   autocast weight cache; the op saves it for its backward): one block of half the weight's
   recorded bytes (the op's last operand, ``LaunchData.last_bytes``, where the trace records
   shapes) allocated at the op's launch call and freed at the end of the last backward call of
   its step (of the trace, without steps).

Limits: ops that autocast runs in the type of their inputs (``relu`` after a 16-bit GEMM) are
counted fp32, so the saving is a lower bound; blocks without an address cannot be paired and are
left alone; weight copies need recorded shapes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..costmodel import kernel_model as KM
from ..graph import NODE_CPU
from ..graph.memory_part import block_pairs, changed_events
from ..mapping.rules import BACKWARD, FORWARD


def _size(b: int) -> str:
    return f"{b / 2**20:,.1f} MiB" if b >= 2**20 else f"{b:,} B"


def _anchor_nodes(graph, gm) -> np.ndarray:
    """Node of each event's anchor in ``graph`` (-1: none)."""
    cpu = np.flatnonzero((graph.node_kind == NODE_CPU) & (graph.row >= 0))
    rows = graph.row[cpu]
    o = np.argsort(rows, kind="stable")
    if not len(rows):
        return np.full(len(gm), -1, np.int64)
    j = np.minimum(np.searchsorted(rows[o], gm.anchor_row), len(rows) - 1)
    hit = (gm.anchor_row >= 0) & (rows[o][j] == gm.anchor_row)
    return np.where(hit, cpu[o][j], -1)


def _op_names(graph, nodes: np.ndarray, low_ops) -> np.ndarray:
    """Bool: the mapped op of each node (-1: none) is on autocast's lower-precision list ``low_ops``."""
    mp = graph.mapping
    out = np.zeros(len(nodes), bool)
    if mp is None or not mp.labels:
        return out
    low = np.fromiter((s.removeprefix("aten::") in low_ops for s in mp.labels), bool, len(mp.labels))
    ids = np.where(nodes >= 0, mp.op_id[np.maximum(nodes, 0)], -1)
    out[ids >= 0] = low[ids[ids >= 0]]
    return out


def weight_copies(graph, low_ops) -> tuple[np.ndarray, np.ndarray]:
    """(launch call nodes, 16-bit copy bytes) of the forward ops on autocast's lower-precision list
    ``low_ops`` with a recorded fp32 weight (rule 3), one per op (its first launch call)."""
    z = np.zeros(0, np.int64)
    if graph.mapping is None or graph.facts is None or not len(graph.facts.launch):
        return z, z
    data = graph.facts.launch
    row = KM.match_launches(graph, data)
    m = (graph.mapping.phase == FORWARD) & (row >= 0) & (graph.launch >= 0)
    r = row[m]
    low = np.fromiter((data.op[i].removeprefix("aten::") in low_ops for i in r.tolist()), bool, len(r))
    ok = low & (data.last_elem[r] == 4) & (data.last_bytes[r] > 0)
    calls, nbytes = graph.launch[np.flatnonzero(m)[ok]], data.last_bytes[r[ok]]
    ext = np.where(graph.row[calls] >= 0, graph.facts.external_id[np.maximum(graph.row[calls], 0)], -1)
    key = np.where(ext >= 0, ext, -2 - calls)  # one copy per op (external id), else per call
    _, first = np.unique(key, return_index=True)
    return calls[first].astype(np.int64), np.ceil(nbytes[first] / 2).astype(np.int64)


def amp_memory(graph, g, note: str, low_ops) -> tuple:
    """(``g`` with the memory of the autocast program, ``note`` with what changed): the rules of
    the module docstring on the events of ``graph`` (the recorded graph ``g`` was made from);
    ``low_ops``: the op names (without ``aten::``) autocast runs in 16-bit."""
    gm = g.memory
    if gm is None or not len(gm):
        return g, note
    ev = gm.events
    ne = len(ev)
    nodes = _anchor_nodes(graph, gm)
    phase = gm.phase if gm.phase is not None else np.zeros(ne, np.uint8)
    al, fr = block_pairs(ev, np.arange(ne))
    bwd = np.flatnonzero((graph.node_kind == NODE_CPU) & (graph.row >= 0) & (graph.mapping.phase == BACKWARD)) \
        if graph.mapping is not None else np.zeros(0, np.int64)
    steps = [(s, e) for _, s, e, *_ in (graph.facts.steps if graph.facts is not None else ())] or [(-(1 << 62), 1 << 62)]
    in_bwd = np.zeros(ne, bool)  # freed in the backward: within its step's backward calls' recorded span
    for s, e in steps:  # a loop over steps
        b_in = bwd[(graph.rec_start_ns[bwd] >= s) & (graph.rec_start_ns[bwd] < e)]
        if len(b_in):
            in_bwd |= (ev.ts_ns >= graph.rec_start_ns[b_in].min()) & (ev.ts_ns <= graph.rec_end_ns[b_in].max()) & (ev.ts_ns < e)
    act = (phase[al] == FORWARD) & in_bwd[fr] & (ev.ts_ns[fr] > ev.ts_ns[al]) & _op_names(graph, nodes[al], low_ops)
    cols = ev.columns()
    b = cols["bytes"].copy()
    half = -(-b[al[act]] // 2)
    saved = int((b[al[act]] - half).sum())
    b[al[act]], b[fr[act]] = half, -half
    cols["bytes"] = b
    calls, cbytes = weight_copies(graph, low_ops)
    # each copy: allocated at its op's launch call (before the recorded events at that instant), freed at the end of the
    # last backward call of its step
    calls = calls[graph.row[calls] >= 0]
    step_of = np.full(len(calls), -1, np.int64)
    free_at = np.full(len(calls), -1, np.int64)
    for i, (s, e) in enumerate(steps):  # a loop over steps
        inside = (graph.rec_start_ns[calls] >= s) & (graph.rec_start_ns[calls] < e)
        b_in = bwd[(graph.rec_start_ns[bwd] >= s) & (graph.rec_start_ns[bwd] < e)]
        if len(b_in):
            free_at[inside] = b_in[np.argmax(graph.rec_end_ns[b_in])]
        step_of[inside] = i if len(steps) == len(gm.step_names) else -1
    keep = (free_at >= 0) & (graph.rec_end_ns[np.maximum(free_at, 0)] > graph.rec_start_ns[calls])
    calls, cbytes, free_at, step_of = calls[keep], cbytes[keep], free_at[keep], step_of[keep]
    k = len(calls)
    if k:
        launched = np.flatnonzero(graph.launch >= 0)  # the GPU of the op's kernels
        gpu_of = np.full(graph.n, 0, np.int64)
        gpu_of[graph.launch[launched]] = graph.device[launched]
        dev = gpu_of[calls]
        new = {c: np.concatenate([a, np.full(2 * k, -1, a.dtype)]) for c, a in cols.items()}
        new["bytes"][ne:] = np.concatenate([cbytes, -cbytes])
        new["addr"][ne:] = -1
        new["device"][ne:] = np.concatenate([dev, dev])
        new["pid"][ne:] = np.concatenate([graph.pid[calls], graph.pid[free_at]])
        new["tid"][ne:] = np.concatenate([graph.tid[calls], graph.tid[free_at]])
        new["ts_ns"][ne:] = np.concatenate([graph.rec_start_ns[calls], graph.rec_end_ns[free_at]])
        new["seq"][ne:] = -1
        cols = new
    anchor = np.concatenate([gm.anchor_row, graph.row[calls], graph.row[free_at]])
    offset = np.concatenate([gm.offset_ns, np.zeros(2 * k, np.int64)])
    at_end = np.concatenate([gm.at_end, np.zeros(k, bool), np.ones(k, bool)])
    step = np.concatenate([gm.step, step_of, step_of]).astype(gm.step.dtype)
    ph = np.concatenate([phase, np.full(k, FORWARD, np.uint8), np.full(k, BACKWARD, np.uint8)])
    group = np.concatenate([np.zeros(ne, np.int64), np.full(k, -1, np.int64), np.ones(k, np.int64)])
    seq = np.arange(ne + 2 * k, dtype=np.int64)
    if not act.any() and not k:
        return g, note + "; memory: no 16-bit activation or weight copy found (the allocations are the recorded ones)"
    mem = changed_events(gm, cols, anchor, offset, at_end, step, ph, group, seq)
    words = [f"{int(act.sum()):,} activations of 16-bit ops halved (-{_size(saved)})"]
    words.append(f"{k:,} 16-bit weight copies (+{_size(int(cbytes.sum()))} over the trace)" if k else
                 "weight copies not counted (no recorded weight shapes)")
    return dataclasses.replace(g, memory=mem), note + "; memory: " + ", ".join(words)
