"""``p3``: priority-based parameter propagation (Jayarajan et al., "Priority-based Parameter
Propagation for Distributed DNN Training", SysML 2019), from a one-GPU trace, as the Daydream
paper models it (its P3 case study): gradients are cut into slices of ``slice_mb`` (small gradients share one), one all-reduce per
slice on a communication stream scheduled by priority (the ``set_priority`` primitive: the slices
the next forward pass needs first, i.e. the gradients backward produces last, go first), and the
next iteration's forward work waits only for its own layer's slices instead of the optimizer
waiting for all of them.

Gradient sizes and ready points are those of :mod:`daydream.optimizations.ddp`. Which forward
task uses gradient j is not in a trace: gradient j (backward order) is taken as used by the next
iteration's forward GPU task at the same fraction of its forward pass counted from its end
(layers run backward in reverse order; an assumption, counted in the note). The last iteration
of the trace has no next forward: its first GPU task after backward waits, as in ``ddp``.
"""

from __future__ import annotations

import numpy as np

from ..util.arrays import sorted_unique
from ..costmodel import comm as cm
from ..graph.collectives import kernel_is_collective
from ..errors import NotApplicable, UsageError
from ..transform import set_priority
from . import Optimization, Param, register
from .comm_common import (
    MIB,
    NETWORK_PARAMS,
    allreduce_name,
    check_pieces,
    first_after,
    insert_allreduces,
    network_of,
    step_of_nodes,
)
from .ddp import gradients


#: most slice all-reduces inserted: a guard on the input (slice_mb), not a model constant (the
#: insertion is batched since issue 18: 1,170 slices of the ResNet-50 trace take 0.45 s, 20 s one by one)
MAX_SLICES = 4096


def _slices(r, b, s, slice_bytes):
    """Each iteration's gradient bytes (production order) cut into slices of ``slice_bytes``
    (small gradients share a slice, a large one spans several); a slice is ready with the
    gradient holding its last byte. Returns per slice (ready, bytes, step, index of that gradient)."""
    out = [], [], [], []
    for it in sorted_unique(s).tolist():  # iterations: a handful
        idx = np.nonzero(s == it)[0]
        cum = np.cumsum(b[idx])
        total = int(cum[-1])
        ends = np.minimum(np.arange(1, check_pieces(total, slice_bytes, "p3: slice_mb") + 1) * slice_bytes, total).astype(np.int64)
        own = np.minimum(np.searchsorted(cum, ends), len(idx) - 1)
        for acc, v in zip(out, (r[idx[own]], np.diff(np.concatenate([[0], ends])), np.full(len(ends), it), idx[own])):
            acc.append(v)
    return tuple(np.concatenate(a).astype(np.int64) for a in out)


def _consumers(graph, s, gi, b, steps):
    """Per slice: the next iteration's forward GPU task using its gradient, or -1 (module docstring)."""
    mp = graph.mapping
    out = np.full(len(gi), -1, np.int64)
    if mp is None:
        return out
    fwd = (mp.phase == 1) & (graph.node_kind != 0)
    for it in sorted_unique(s).tolist():  # iterations: a handful
        v = np.nonzero(fwd & (steps == it + 1))[0]
        if not len(v):
            continue
        v = v[np.argsort(graph.position_ns[v], kind="stable")]
        m = s == it
        grads = sorted_unique(gi[m])
        frac = np.cumsum(b[grads]) / max(int(b[grads].sum()), 1)  # backward order: last gradient ~ first layer
        pos = np.minimum(((1 - frac) * len(v)).astype(np.int64), len(v) - 1)
        where = np.searchsorted(grads, gi[m])
        out[np.nonzero(m)[0]] = v[pos[where]]
    return out


def _apply(graph, p):
    if kernel_is_collective(graph).any():
        raise NotApplicable("the trace already has collective kernels; p3 predicts from a one-GPU trace")
    r, b, s, note = gradients(graph, p)
    if p["world"] == 1:
        return graph, "world=1: no communication; the baseline"
    steps = step_of_nodes(graph)
    rs, bs, ss, gi = _slices(r, b, s, p["slice_mb"] * MIB)
    if len(rs) > MAX_SLICES:
        raise UsageError(f"--opt p3: slice_mb={p['slice_mb']:g} cuts the trace's gradients into {len(rs):,} slices (at most "
                         f"{MAX_SLICES:,}: each is one graph insertion); give a larger slice_mb")
    o = np.lexsort((np.arange(len(rs)), graph.position_ns[rs]))  # launch order on the stream
    rs, bs, ss, gi = rs[o], bs[o], ss[o], gi[o]
    waiter = _consumers(graph, ss, gi, b, steps)
    coll = kernel_is_collective(graph)
    for it in sorted_unique(ss).tolist():
        m = np.nonzero(ss == it)[0]
        if (waiter[m] < 0).all():
            waiter[m[-1]] = first_after(graph, int(rs[m[-1]]), exclude=coll)
    d = cm.collective_ns(cm.ALL_REDUCE, bs, p["world"], network_of(p))
    g, nodes = insert_allreduces(graph, rs, d, waiter, [allreduce_name(x, p["world"]) for x in bs.tolist()])
    pr = np.zeros(g.n, np.int64)
    pr[nodes] = gi + 1  # later gradients (first layers) first
    g = set_priority(g, pr, lanes=[int(g.lane[nodes[0]])])
    return g, f"{len(nodes)} slice all-reduces by priority for {p['world']} workers; {note}; forward consumers by position (inferred)"


register(
    Optimization(
        name="p3",
        summary="priority-based parameter propagation: sliced gradients, all-reduced first-needed first",
        apply=_apply,
        what_if=True,
        params={
            "world": Param(8, "number of data-parallel workers", int, lambda v: 1 <= v <= 1 << 20, "1 to 2^20"),
            "slice_mb": Param(4.0, "slice size, MiB (P3 slices parameters; a parameter here, larger slices keep the graph small)", float,
                              lambda v: v > 0, "> 0"),
            "params": Param("", "JSON file of parameter sizes (schemas/ddp-params.schema.json); default: from the trace", str),
            **NETWORK_PARAMS,
        },
    )
)
