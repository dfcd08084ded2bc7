"""``remove-syncs``: what if the host synchronizations that only read a value were deferred?

``loss.item()``, ``tensor.cpu()``, ``tensor.tolist()`` copy a value to the host and block the
CPU thread until the copy -- and all the GPU work queued before it -- is done
(``aten::item`` -> ``aten::_local_scalar_dense`` -> ``cudaMemcpyAsync`` DtoH +
``cudaStreamSynchronize``; PyTorch docs, "CUDA semantics: asynchronous execution"). A logging
path that reads the loss every step makes the host wait for the GPU, so the host cannot run ahead
and queue the next step's work. Deferring the read (keeping the tensor and reading it later, or
every N steps: the usual fix) removes the wait but keeps the copy.

Model: a blocking call (``docs/model.md``: an END edge into it) is a value read when it waits for
a device-to-host copy (its wait edges' sources) and lies inside a framework op whose name matches
``ops``. Its wait edges are removed (:func:`daydream.transform.remove_edges`): it returns after
its own cost; the copy stays on its stream. Other syncs (``cudaDeviceSynchronize`` between
steps, HtoD input copies, event waits for other streams) are left alone.
"""

from __future__ import annotations

import numpy as np

from ..util.arrays import sorted_unique
from ..errors import NotApplicable
from ..events.table import CopyKind, Kind
from ..graph import EdgeKind, Phase, rule_arrays
from ..transform import remove_edges
from . import Optimization, Param, register
from .common import mapped_labels_match

#: the ops through which PyTorch reads a tensor's value on the host
VALUE_READ_OPS = r"^aten::(item|_local_scalar_dense|cpu|tolist|to|_to_copy|copy_)$"


def _value_reads(graph, ops: str) -> tuple[np.ndarray, np.ndarray]:
    """(mask of the END edges to remove, mask of the sync calls they go into)."""
    ra = rule_arrays()
    end = (ra.phase[graph.edge_kind] == Phase.END) & (graph.edge_kind == EdgeKind.WAIT)
    src, dst = graph.edge_src, graph.edge_dst
    dtoh = (graph.node_kind[src] == Kind.MEMCPY) & (graph.copy_kind[src] == CopyKind.DTOH)
    in_op = mapped_labels_match(graph, "op_id", ops) if graph.mapping is not None else np.zeros(graph.n, bool)
    calls = np.zeros(graph.n, bool)
    calls[dst[end & dtoh]] = True
    calls &= in_op & graph.is_cpu
    return end & calls[dst], calls


def _apply(graph, p):
    edges, calls = _value_reads(graph, p["ops"])
    if not calls.any():
        raise NotApplicable("no blocking call waits for a device-to-host copy inside a value-reading op "
                            f"({p['ops']!r}): no .item() / .cpu() sync to defer")
    g = remove_edges(graph, edges)
    c = np.nonzero(calls)[0]
    waited = np.maximum(graph.rec_end_ns[c] - graph.rec_start_ns[c] - graph.dur_ns[c], 0)
    ops = graph.mapping.labels
    groups: dict[tuple[str, str], list[int]] = {}
    for v, w in zip(c.tolist(), waited.tolist()):  # one per removed sync (a few per step)
        groups.setdefault((graph.name(v), ops[int(graph.mapping.op_id[v])]), [0, 0])
        groups[(graph.name(v), ops[int(graph.mapping.op_id[v])])][0] += 1
        groups[(graph.name(v), ops[int(graph.mapping.op_id[v])])][1] += w
    src = graph.edge_src[edges]
    what = sorted_unique(graph.name_id[src])
    parts = "; ".join(f"{k} x {name} in {op} (waited {w / 1e6:,.3f} ms in the trace)" for (name, op), (k, w) in sorted(groups.items()))
    note = (f"{len(c):,} value-read syncs deferred: {parts}; they had waited for {len(src):,} device-to-host copies "
            f"({', '.join(graph.names[int(i)] for i in what[:3])}) and the GPU work queued before them; the copies stay; "
            "other syncs left alone")
    return g, note


register(
    Optimization(
        name="remove-syncs",
        summary="host syncs that only read a value (.item(), .cpu()) deferred: the thread no longer waits for the GPU there",
        apply=_apply,
        params={
            "ops": Param(VALUE_READ_OPS, "regular expression: the framework ops (innermost op of the sync call) that read a value on the host; "
                                         "default: PyTorch's value reads (Tensor.item / cpu / tolist / to(cpu) -> aten::_local_scalar_dense, aten::copy_)", str),
        },
    )
)
