"""``ddp``: what if this one-GPU iteration ran data-parallel on ``world`` GPUs (PyTorch DDP)?

The Daydream paper's distributed what-if (its distributed-training case study): per iteration, the gradients backward
produces are grouped into buckets in production order (DDP: the first bucket 1 MiB, then
``bucket_mb`` = 25 MiB, ``torch/nn/parallel/distributed.py``), and one all-reduce per bucket runs
on a new communication stream, launched from the thread that produced the bucket's last gradient
right after that kernel's launch (DDP's autograd hook) and waiting for it; the optimizer step's
first GPU task waits for the last all-reduce. Each all-reduce costs
:func:`daydream.costmodel.comm.collective_ns` (ring by default) on the given network. Compute is
unchanged (same per-GPU batch).

Gradient sizes: the ``AccumulateGrad`` ops' recorded input shapes (``record_shapes=True``), each
ready when the last kernel its thread launched before the op ended has run; or ``params=FILE``
(``schemas/ddp-params.schema.json``: the model's parameters with ``numel`` and ``dtype``), placed
over each iteration's backward kernels at an even byte rate (counted as inferred). Without
either, it does not apply and says so. ``world=1`` changes nothing (NCCL costs 0 for one rank).

Memory (``docs/memory.md``; :func:`daydream.optimizations.memory_rules.held_blocks`): DDP's
reducer allocates, at construction, one flat gradient buffer per bucket (``reducer.cpp``,
``initialize_buckets``: ``bucket.gradients = at::empty({offset}, options)``; with the default
``gradient_as_bucket_view=False`` the parameters' ``.grad`` tensors stay separate and are copied
into it): the model's gradient bytes (one iteration's, the largest), held on the gradients' GPU
from before the window through every step. Per rank: every rank holds the same buffers.
"""

from __future__ import annotations

import numpy as np

from ..util.arrays import sorted_unique
from ..costmodel import comm as cm
from ..graph.collectives import kernel_is_collective
from ..errors import NotApplicable
from . import Optimization, Param, register
from .comm_common import (
    DDP_BUCKET_MB,
    DDP_FIRST_BUCKET_MB,
    MIB,
    NETWORK_PARAMS,
    allreduce_name,
    buckets,
    first_after,
    gradients_from_trace,
    insert_allreduces,
    network_of,
    spread_over_backward,
    step_of_nodes,
)
from ..formats.param_sizes import read_param_sizes
from .memory_rules import held_blocks


def gradients(graph, p) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """(ready node, bytes, iteration) per gradient in production order, and a note.

    Raises:
        NotApplicable: sizes not found (the reason says what is missing).
    """
    steps = step_of_nodes(graph)
    if p["params"]:
        sizes = read_param_sizes(p["params"])
        r, b, s = spread_over_backward(graph, sizes, steps)
        return r, b, s, f"{len(sizes)} parameters from {p['params']} placed over each backward pass (inferred ready points)"
    r, b, note = gradients_from_trace(graph)
    if not len(r):
        raise NotApplicable(f"gradient sizes not found: {note}; record with record_shapes=True or pass ddp:params=FILE "
                            "(schemas/ddp-params.schema.json)")
    return r, b, steps[r], note


def plan(graph, p) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    """Buckets of every iteration: (ready node, bytes, all-reduce ns, waiter node or -1), note."""
    r, b, s, note = gradients(graph, p)
    net = network_of(p)
    rr, bb, ww = [], [], []
    coll = kernel_is_collective(graph)
    for it in sorted_unique(s).tolist():  # iterations: a handful
        m = s == it
        br, bbytes = buckets(r[m], b[m], p["bucket_mb"] * MIB, p["first_bucket_mb"] * MIB)
        w = np.full(len(br), -1, np.int64)
        w[-1] = first_after(graph, int(br[-1]), exclude=coll)
        rr.append(br)
        bb.append(bbytes)
        ww.append(w)
    r, b, w = np.concatenate(rr), np.concatenate(bb), np.concatenate(ww)
    d = cm.collective_ns(cm.ALL_REDUCE, b, p["world"], net)
    return r, b, d, w, note


def _apply(graph, p):
    have = int(kernel_is_collective(graph).sum())
    if have:
        raise NotApplicable(f"the trace already has {have:,} collective kernels; use network, world-size or buckets")
    if p["world"] == 1:
        gradients(graph, p)  # still says when sizes cannot be found
        return graph, "world=1: no communication (NCCL costs 0 for one rank); the baseline"
    r, b, d, w, note = plan(graph, p)
    g, nodes = insert_allreduces(graph, r, d, w, [allreduce_name(x, p["world"]) for x in b.tolist()])
    g, mem_note = bucket_memory(graph, g, p)
    return g, (f"{len(nodes)} all-reduces ({b.sum() / MIB:,.1f} MiB, {d.sum() / 1e6:,.3f} ms at {network_of(p).intra.name}) "
               f"on a new stream for {p['world']} workers; {note}{mem_note}")


def bucket_memory(graph, g, p) -> tuple:
    """(``g`` with DDP's bucket buffers held through the window, note words): the largest
    iteration's gradient bytes on the gradients' GPU (module docstring); unchanged without memory
    events."""
    if g.memory is None or not len(g.memory):
        return g, ""
    r, b, s, _ = gradients(graph, p)
    total = int(np.bincount(s - s.min(), weights=b).max()) if len(b) else 0
    dev = int(graph.device[r[0]]) if len(r) else 0
    return held_blocks(g, {dev: total}), f"; memory: bucket buffers ({total / MIB:,.1f} MiB) held on GPU {dev} through every step"


register(
    Optimization(
        name="ddp",
        summary="data-parallel training on `world` GPUs (PyTorch DDP buckets, all-reduce per bucket)",
        apply=_apply,
        what_if=True,
        params={
            "world": Param(8, "number of data-parallel workers (GPUs)", int, lambda v: 1 <= v <= 1 << 20, "1 to 2^20"),
            "bucket_mb": Param(DDP_BUCKET_MB, "bucket capacity, MiB (PyTorch DDP bucket_cap_mb default 25)", float, lambda v: v > 0, "> 0"),
            "first_bucket_mb": Param(DDP_FIRST_BUCKET_MB, "first bucket capacity, MiB (PyTorch _DEFAULT_FIRST_BUCKET_BYTES = 1 MiB)", float, lambda v: v > 0, "> 0"),
            "params": Param("", "JSON file of parameter sizes (schemas/ddp-params.schema.json); default: from the trace", str),
            **NETWORK_PARAMS,
        },
    )
)
