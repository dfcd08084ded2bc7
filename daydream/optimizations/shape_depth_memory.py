"""What a new depth (``layers:factor=F``, ``shape:layers=F``) does to memory: the allocator's events
of the deepened step (docs/memory.md, "layers"; docs/scaling.md, "Memory").

:func:`~.shape_depth.deepen` puts ``copies`` copies of the repeating block's last occurrence after
it. The allocator's events repeat with the block:

1. **The block's own events** (anchored to one of its CPU tasks: the op that allocates is the one
   whose call comes next, docs/memory.md) are copied once per copy, each anchored to the copy of
   its task (as the copied tasks are), in the block's recorded order, in the deeper program's
   order: the copies' forward events after the block's last forward event; where the backward is
   mapped to the layers (its tasks are the block's, copied with it), the copies' backward events
   before the block's first backward event (the backward runs the layers in reverse: the copies,
   deepest, first).
2. **Its kept activations' backward** (an allocation copied by 1 whose free is not: freed in a
   backward that is not mapped to the layers, as the autograd engine records it, so that
   :func:`~.shape_depth.deepen` did not copy it): the backward runs the layers in reverse, so the
   copies' backward comes first, before the recorded one. The **block's backward events** are
   inferred (counted in the note): the backward's events from its first up to the last one anchored
   to the call that frees the block's last-freed kept activation (the gradients, temporaries and
   frees of the last occurrence's backward, which runs first). Each copy runs them at the backward's
   start (anchored to the backward's first event's task, before it): the copies' activations are
   held until the backward's start, then freed, and their gradients made, in the recorded order.
   A kept allocation freed before the backward, or by a free outside it, is freed with the
   original (the same anchor); one never freed stays.
3. **Model state** (× ``1 + (F−1)·share``): the level before the window, blocks allocated before
   the first step and alive after the last one (parameters), and the optimizer step's blocks alive
   after it (its state). ``share``: the block's part of the model, the block's GEMM weights
   (``M·K`` elements of each linear op's recorded shapes in the forward, its occurrences × the
   last one's) over every forward GEMM's; 1 where no GEMM weight is recorded (the whole model taken
   to be the repeated block: an assumption, said). Gradients are made in the backward: rule 2
   copies them.

Where the backward is mapped to the layers, :func:`~.shape_depth.deepen` copies it with the block
and rule 1 copies its events: rule 2 has nothing left. Sizes in bytes, times in ns.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..graph import NODE_CPU
from ..graph.memory_part import block_pairs, changed_events, level_before
from ..mapping.rules import BACKWARD, FORWARD, OPTIMIZER
from .amp_memory import _anchor_nodes
from .shape_memory import _scale, _span


def weight_share(graph, block, L, kernel_row) -> tuple[float, bool]:
    """(the block's share of the model's GEMM weights, recorded?): the repeated block's linear ops'
    weight elements (``M·K`` of ``kernel_row(name, dims, types)``, :func:`~.shape.kernel_row`, ×
    its occurrences) over every forward linear op's; (1.0, False) where no forward GEMM records
    its shapes. ``L``: :func:`~.shape_depth.launches`."""
    m = graph.mapping
    if m is None or not len(L.shapes):
        return 1.0, False
    w = np.zeros(len(L.shapes), np.int64)
    for i, (name, dims, types) in enumerate(L.shapes):  # distinct ops: a few hundred
        r = kernel_row(name, dims, types)
        if r is not None and r["cls"] == "linear":
            w[i] = r["M"] * r["K"]
    fwd = (L.shape >= 0) & (m.phase[L.node] == FORWARD)
    per = np.where(fwd, w[np.maximum(L.shape, 0)], 0)
    total = int(per.sum())
    if total <= 0:
        return 1.0, False
    mine = int(per[np.isin(L.node, block.nodes)].sum()) * block.count
    return min(1.0, mine / total), True


@dataclass
class _Parts:
    """The events of the deepened step, gathered per part (lists of arrays, concatenated once)."""

    src: list
    anchor: list
    offset: list
    at_end: list
    ts: list
    group: list
    seq: list
    phase: list
    step: list

    def add(self, gm, phase, src, anchor=None, offset=None, at_end=None, ts=None, group=0, seq=None):
        """Events copied from ``src`` (original indices), at their own anchor unless given."""
        n = len(src)
        self.src.append(src)
        self.anchor.append(gm.anchor_row[src] if anchor is None else np.broadcast_to(anchor, n))
        self.offset.append(gm.offset_ns[src] if offset is None else np.broadcast_to(offset, n))
        self.at_end.append(gm.at_end[src] if at_end is None else np.broadcast_to(at_end, n))
        self.ts.append(gm.events.ts_ns[src].astype(np.int64) if ts is None else np.broadcast_to(ts, n))
        self.group.append(np.broadcast_to(group, n))
        self.seq.append(np.arange(n) if seq is None else seq)
        self.phase.append(phase[src])
        self.step.append(gm.step[src])


def _block_backward(gm, phase, in_block, dangling, free_of) -> tuple[np.ndarray, np.ndarray]:
    """(the block's backward events (inferred, rule 2), the frees of its kept blocks freed outside
    the backward): indices into ``gm``'s events."""
    ne = len(gm)
    bwd = np.flatnonzero(phase == BACKWARD)
    if not len(dangling):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    f = free_of[dangling]
    inb = np.isin(f, bwd) & (f >= (bwd[0] if len(bwd) else ne))
    late = f[~inb]  # freed before the backward or outside it: with the original
    if not inb.any():
        return np.zeros(0, np.int64), late
    last = int(f[inb].max())
    end = int(np.flatnonzero((np.arange(ne) >= last) & (gm.anchor_row == gm.anchor_row[last]) & (phase == BACKWARD)).max())
    rng = np.arange(int(bwd[0]), end + 1)
    return rng[~in_block[rng]], late


def _state_bytes(graph, gm, phase, free_of, in_block, f_state: float) -> np.ndarray:
    """New ``Bytes`` of every event: model state (rule 3) × ``f_state``, with its frees."""
    ev = gm.events
    s0, e1 = _span(graph)
    t_free = np.where(free_of >= 0, ev.ts_ns[np.maximum(free_of, 0)], np.iinfo(np.int64).max)
    state = (ev.device >= 0) & (ev.bytes > 0) & (t_free >= e1) & ((ev.ts_ns < s0) | (phase == OPTIMIZER)) & ~in_block
    nbytes = ev.bytes.copy()
    nbytes[state] = _scale(ev.bytes[state], f_state)
    has_free = state & (free_of >= 0)
    nbytes[free_of[has_free]] = -nbytes[has_free]
    return nbytes


def _copy_rows(graph, g, copies: int, k: int):
    """``g`` with rows of their own for the copies' CPU tasks (nodes ``graph.n ..``, below every row)."""
    row = g.row.copy()
    new_nodes = graph.n + np.arange(copies * k)
    cpu_new = new_nodes[g.node_kind[new_nodes] == NODE_CPU]
    row[cpu_new] = min(int(row.min()), -1) - 1 - np.arange(len(cpu_new))
    return dataclasses.replace(g, row=row)


def depth_memory(graph, g, block, copies: int, factor: int, L, gm, kernel_row):
    """(``g`` with the allocator's events of the deepened step, the note's words) by the module's
    rules. ``graph``: the recorded graph; ``g``: :func:`~.shape_depth.deepen`'s result (``copies``
    copies of ``block``, its tasks ``graph.n ..`` in copy order); ``factor``: the depth factor F;
    ``L``: :func:`~.shape_depth.launches` of ``graph``; ``gm``: the events to deepen
    (``graph.memory``, or a shape what-if's resized events); ``kernel_row``: :func:`~.shape.kernel_row`.
    The copies' CPU tasks get rows of their own (below every row of ``g``: inserted, yet
    addressable by memory anchors)."""
    if gm is None or not len(gm):
        return g, ""
    ev = gm.events
    ne, k = len(ev), len(block.nodes)
    g = _copy_rows(graph, g, copies, k)
    pos = np.full(graph.n, -1, np.int64)
    pos[block.nodes] = np.arange(k)
    node = _anchor_nodes(graph, gm)
    in_block = (node >= 0) & (pos[np.maximum(node, 0)] >= 0) & (graph.node_kind[np.maximum(node, 0)] == NODE_CPU)
    own = np.flatnonzero(in_block)
    phase = gm.phase if gm.phase is not None else np.zeros(ne, np.uint8)
    al, fr = block_pairs(ev, np.arange(ne))
    free_of = np.full(ne, -1, np.int64)
    free_of[al] = fr
    dangling = own[(ev.bytes[own] > 0) & (free_of[own] >= 0) & ~in_block[np.maximum(free_of[own], 0)]]
    n_unpaired = int(((ev.bytes[own] > 0) & (free_of[own] < 0) & (ev.device[own] >= 0)).sum())
    bwd_rng, late = _block_backward(gm, phase, in_block, dangling, free_of)
    share, recorded = weight_share(graph, block, L, kernel_row)
    f_state = 1.0 + (factor - 1) * share
    cols = ev.columns()
    cols["bytes"] = _state_bytes(graph, gm, phase, free_of, in_block, f_state)
    parts = _Parts(*([] for _ in range(9)))
    parts.add(gm, phase, np.arange(ne))  # the recorded events (group 0)
    own_b = phase[own] == BACKWARD  # a backward mapped to the layers: the copies' backward runs before the block's
    t_own = np.where(own_b, int(ev.ts_ns[own[own_b]].min()) if own_b.any() else 0,
                     int(ev.ts_ns[own[~own_b]].max()) if (~own_b).any() else 0)
    b0 = int(np.flatnonzero(phase == BACKWARD)[0]) if len(bwd_rng) else 0
    for c in range(copies):
        if len(own):  # rule 1: anchored to the copy of its task
            parts.add(gm, phase, own, anchor=g.row[graph.n + c * k + pos[node[own]]], ts=t_own, group=np.where(own_b, -1, 1),
                      seq=c * ne + np.arange(len(own)))
        if len(late):  # freed with the original
            parts.add(gm, phase, late, group=1, seq=c * ne + late)
        if len(bwd_rng):  # rule 2: at the backward's start, before it
            parts.add(gm, phase, bwd_rng, anchor=gm.anchor_row[b0], offset=gm.offset_ns[b0], at_end=gm.at_end[b0],
                      ts=int(ev.ts_ns[b0]), group=-1, seq=c * ne + np.arange(len(bwd_rng)))
    cols = {c_: np.asarray(a)[np.concatenate(parts.src)] for c_, a in cols.items()}
    cols["ts_ns"] = np.concatenate(parts.ts)
    before = {}
    for d in ev.devices():
        if d >= 0:
            lvl, exact = level_before(ev, np.flatnonzero(ev.device == d))
            if exact:
                before[int(d)] = int(np.ceil(lvl * f_state))
    cat = (lambda a: np.concatenate(a))
    mem = changed_events(gm, cols, cat(parts.anchor), cat(parts.offset), cat(parts.at_end), cat(parts.step),
                         cat(parts.phase), cat(parts.group), cat(parts.seq), before=before)
    nb = int(own_b.sum()) if len(own) else 0
    words = _depth_words(len(own), copies, nb, len(dangling) - len(late), len(bwd_rng), f_state, share, recorded, n_unpaired)
    return dataclasses.replace(g, memory=mem), words


def _depth_words(n_own, copies, nb, n_kept, n_bwd, f_state, share, recorded, n_unpaired) -> str:
    return (f"memory at the new depth: {n_own:,} allocator events of the block copied with each of its {copies} copies "
            f"(anchored to the copied calls" + (f"; {nb:,} in a backward mapped to the layers, the copies' before the block's"
                                                  if nb else "") + ")"
            + (f"; {n_kept:,} of its blocks kept for a backward not mapped to the layers: each copy runs "
               f"the last occurrence's backward events ({n_bwd:,}, inferred: the backward's first events up to the "
               "call that frees the block's last kept activation) at the backward's start" if n_bwd else "")
            + f"; model state (parameters before the step, optimizer state, the level before the window) x{f_state:g} "
            + (f"(the block's share of the GEMM weights {share:.3g})" if recorded else
               "(no GEMM weight recorded: the whole model taken to be the repeated block, an assumption)")
            + ("; gradients with the copied backward" if nb or n_bwd else "")
            + (f"; {n_unpaired:,} of the block's allocations have no free paired by address (the trace records no "
               "addresses): their copies are never freed" if n_unpaired else ""))


def problem_size_memory(graph, g, factor: float):
    """(``g`` with the allocator's events at problem size ×``factor``, the note's words), for
    ``problem-size:factor=S`` (traces without shapes: no block can be sized by its tensor). Rules,
    first that applies (every size inferred, counted in the note):

    1. **Model state** kept: a block alive after the last step's end (or never freed) that was
       allocated before the first step, in the backward (gradients) or the optimizer step (its
       state); a free of a block allocated before the trace; the level before the window. A
       problem size is the data, not the model: parameters, gradients and optimizer state do not
       change with it.
    2. **Activations and temporaries** × ``S``: the other blocks allocated in the forward or the
       backward (activations kept from the forward for the backward, temporaries freed within an
       op), rounded up to the allocator's blocks (:data:`~.shape_memory.BLOCK_BYTES`), with their
       frees; a block whose free cannot be paired by address (PyTorch 1.8 records none) is kept
       (counted: scaling it without its free would leak its growth).
    3. **Otherwise** kept: blocks of other phases (data loading, the optimizer's temporaries,
       unmapped), host memory.
    """
    gm = graph.memory
    if gm is None or not len(gm):
        return g, ""
    ev = gm.events
    ne = len(ev)
    phase = gm.phase if gm.phase is not None else np.zeros(ne, np.uint8)
    al, fr = block_pairs(ev, np.arange(ne))
    free_of = np.full(ne, -1, np.int64)
    free_of[al] = fr
    s0, e1 = _span(graph)
    t_free = np.where(free_of >= 0, ev.ts_ns[np.maximum(free_of, 0)], np.iinfo(np.int64).max)
    alloc = (ev.device >= 0) & (ev.bytes > 0)
    state = alloc & (t_free >= e1) & ((ev.ts_ns < s0) | (phase == BACKWARD) | (phase == OPTIMIZER))
    fb = alloc & ~state & ((phase == FORWARD) | (phase == BACKWARD))
    act = fb & (free_of >= 0)  # paired with its free (by address: PyTorch 1.8's events have none)
    unpaired = int((fb & (free_of < 0)).sum())
    kept_fb = act & (phase == FORWARD) & (free_of >= 0) & (phase[np.maximum(free_of, 0)] == BACKWARD)
    new = ev.bytes.copy()
    new[act] = _scale(ev.bytes[act], factor)
    paired = act & (free_of >= 0)
    new[free_of[paired]] = -new[paired]
    cols = ev.columns()
    cols["bytes"] = new
    mem = changed_events(gm, cols, gm.anchor_row, gm.offset_ns, gm.at_end, gm.step, phase, np.zeros(ne, np.int64),
                         np.arange(ne, dtype=np.int64))
    n_state = int(state.sum())
    words = (f"memory at problem size x{factor:g} (inferred, no shapes): {int(kept_fb.sum()):,} activation blocks (forward to "
             f"backward) and {int(act.sum()) - int(kept_fb.sum()):,} other blocks of the forward and backward x{factor:g}; "
             f"{n_state:,} model-state blocks and the level before the window kept (a problem size is the data, not the model); "
             + (f"{unpaired:,} blocks of the forward and backward without a free paired by address kept (the trace records "
                "no addresses: their frees cannot be told); " if unpaired else "")
             + f"{int(alloc.sum()) - int(fb.sum()) - n_state:,} blocks of other phases kept")
    return dataclasses.replace(g, memory=mem), words
