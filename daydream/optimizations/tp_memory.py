"""Per-rank memory of ``tp:degree=N`` (:mod:`.tensor_parallel`; ``docs/memory.md``, "tp").

Megatron-LM (Shoeybi et al. 2019, §3): each rank holds ``1/N`` of every split GEMM's weight
(column-parallel: ``M/N`` output features; row-parallel: ``K/N`` input features), so ``1/N`` of
its gradient and optimizer state; the tensors between a column GEMM and its row partner are
split (``heads/N``, ``4h/N``); the row GEMM's output (after the all-reduce), layer norms,
residuals and everything outside the pairs are replicated. Korthikanti et al. 2022 ("Reducing
Activation Recomputation", §4.1-4.2) count a transformer layer's activations as
``sbh(10 + 24/t + 5as/(ht))`` without sequence parallelism: the ``24/t`` and ``5as/(ht)`` terms are
the split ones, the ``10`` the replicated ones (layer-norm inputs, dropout masks, residuals);
sequence parallelism (``sbh/t * (34 + 5as/h)``) is **not built**.

The rule on the allocator's events (sizes in bytes):

* **The split ops' outputs**: a block allocated by the op of a split kernel (its allocation
  anchored to the kernel's launch call) whose size is the kernel's output as the kernel-cost
  library describes it (``M N B`` of a GEMM, ``elems`` of a memory-bound kernel, at its element
  size; the size as recorded or rounded up to 512 B, PyTorch's ``kMinBlockSize``) shrinks to the
  output at the split shape (same rounding): the column GEMMs' outputs, the kernels between a
  pair, and in the backward the weight gradients (gradients) and the row GEMMs' input gradients.
  An output the split does not divide (a row GEMM's, whose reduction ``K`` is split; a column
  GEMM's input gradient, reduced by ``f``) is kept. Other blocks of these ops (workspaces), and
  attention kernels' outputs (not described as a tensor here), are kept and counted.
* **Weights and optimizer state from before the window**: ``(1 - 1/N)`` of the split GEMMs'
  weight bytes (``K M`` at the element size, one step's forward GEMMs), and where the trace has an
  optimizer phase ``opt_state`` times that (Adam's two moments: 2), are taken from the level before
  the window (inferred, said in the note; only where it is recorded, at most down to zero).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..graph.memory_part import block_pairs, level_before
from ..mapping.rules import OPTIMIZER
from .memory_rules import _size, anchor_nodes, edit_events

#: bytes per element of each dtype (as tensor_parallel._ELEM_BYTES; a definition)
_ELEM_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


def _round512(b: np.ndarray) -> np.ndarray:
    return -(-b // 512) * 512


def output_bytes(k, i: np.ndarray) -> np.ndarray:
    """int64 output bytes of described kernels ``i`` (``-1`` where not a GEMM or memory-bound
    kernel): ``M N max(B, 1)`` of ``linear``/``bmm``, ``elems`` of elementwise/ln/softmax, at the
    element size."""
    esz = np.array([_ELEM_BYTES.get(str(x), 4) for x in k.dtype[i].tolist()], np.int64)
    cls = k.cls[i]
    gemm = np.isin(cls, ["linear", "bmm"])
    mem = np.isin(cls, ["elementwise", "ln", "softmax"])
    out = np.full(len(i), -1, np.int64)
    out[gemm] = (k.M[i][gemm].astype(np.int64) * k.N[i][gemm] * np.maximum(k.B[i][gemm], 1) * esz[gemm])
    out[mem] = k.elems[i][mem].astype(np.int64) * esz[mem]
    return out


def split_memory(graph, g, d, idx: np.ndarray, fields: np.ndarray, new, N: int, weight_bytes: int,
                 opt_state: float) -> tuple[object, str]:
    """``g`` with one tensor-parallel rank's allocator events (module docstring). ``d``: the
    kernel-cost description; ``idx``: indices into ``d.nodes`` of the split kernels, ``fields`` the
    field each divides, ``new`` their :class:`Kernels` at the split shape; ``weight_bytes``: the
    split GEMMs' weights of one step (full)."""
    gm = graph.memory
    if gm is None or not len(gm) or N <= 1:
        return g, ""
    ev = gm.events
    ne = len(ev)
    if not (ev.addr >= 0).any():
        return g, "memory per rank: not modelled (the allocator's events have no addresses: blocks cannot be paired)"
    old_out = output_bytes(d.kernels, idx)
    new_out = output_bytes(new, np.arange(len(idx)))
    splits = (old_out > 0) & (fields != "K")  # a split reduction leaves the output whole
    call_of = graph.launch[d.nodes[idx]]
    anchors = anchor_nodes(graph, gm)
    al, fr = block_pairs(ev, np.arange(ne))
    free_of = np.full(ne, -1, np.int64)
    free_of[al] = fr
    b = ev.bytes.copy()
    # allocations of a split op: its launch is the next launch call of the thread at or after the
    # allocation's anchor (an op may make other calls, cudaDeviceGetAttribute, between allocating and launching)
    a = np.flatnonzero((ev.bytes > 0) & (anchors >= 0))
    op_call = _next_launch(graph, anchors[a])
    order = np.argsort(call_of, kind="stable")
    cs = call_of[order]
    j = np.minimum(np.searchsorted(cs, op_call), max(len(cs) - 1, 0))
    hit = (op_call >= 0) & (cs[j] == op_call) if len(cs) else np.zeros(len(a), bool)
    a, j = a[hit], order[j[hit]]
    ob = old_out[j]
    same = (ev.bytes[a] == ob) | (ev.bytes[a] == _round512(ob))
    shrink = same & splits[j]
    rounded = ev.bytes[a] != ob
    nb = np.where(rounded, _round512(new_out[j]), new_out[j])
    sa = a[shrink]
    b[sa] = nb[shrink]
    f = free_of[sa]
    b[f[f >= 0]] = -nb[shrink][f >= 0]
    kept = int(np.count_nonzero(same & ~splits[j]))
    # weights (and their optimizer state) from before the window
    has_opt = graph.mapping is not None and bool((graph.mapping.phase == OPTIMIZER).any())
    take = int(weight_bytes * (1 + (opt_state if has_opt else 0.0)) * (1 - 1 / N))
    delta = {}
    for dev in np.unique(ev.device[ev.device >= 0]).tolist():
        k = np.flatnonzero(ev.device == dev)
        before, exact = level_before(ev, k)
        if exact and take:
            delta[int(dev)] = -min(before, take)
    mem = edit_events(gm, nbytes=b, before_delta=delta)
    note = (f"memory per rank: {len(sa):,} split ops' output blocks shrunk to 1/{N} "
            f"(-{_size(int((ev.bytes[sa] - b[sa]).sum()))} over the trace), {kept:,} whole outputs kept (row GEMMs', "
            f"column input gradients)")
    if delta:
        note += (f"; {_size(-min(delta.values()))} of split weights{' and their optimizer state' if has_opt else ''} taken "
                 f"from the level before the window (inferred: (1-1/{N}) x {_size(weight_bytes)} of weights from the shapes)")
    else:
        note += "; the level before the window is not recorded (no totals): weights kept (the peak is a lower bound)"
    return dataclasses.replace(g, memory=mem), note


def _next_launch(graph, nodes: np.ndarray) -> np.ndarray:
    """Per CPU node of ``nodes``, the first kernel-launch call of its thread starting at or after
    it (itself where it is one); -1 none."""
    calls = np.unique(graph.launch[graph.launch >= 0])
    out = np.full(len(nodes), -1, np.int64)
    if not len(calls) or not len(nodes):
        return out
    key_c = graph.pid[calls].astype(np.int64) * (1 << 32) + graph.tid[calls].astype(np.int64)
    key_n = graph.pid[nodes].astype(np.int64) * (1 << 32) + graph.tid[nodes].astype(np.int64)
    for k in np.unique(key_n).tolist():  # threads: a handful
        c = calls[key_c == k]
        if not len(c):
            continue
        c = c[np.argsort(graph.rec_start_ns[c], kind="stable")]
        m = key_n == k
        i = np.searchsorted(graph.rec_start_ns[c], graph.rec_start_ns[nodes[m]], "left")
        out[m] = np.where(i < len(c), c[np.minimum(i, len(c) - 1)], -1)
    return out
