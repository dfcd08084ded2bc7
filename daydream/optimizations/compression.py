"""``compression:ratio=R``: what if gradients were compressed R times before communication?

Each sized collective (the trace's own, or the all-reduces ``ddp`` inserted) moves ``S / R``
bytes: its duration changes by ``model(S/R) - model(S)``
(:func:`daydream.costmodel.comm.collective_ns` on the trace's calibrated network, see
:mod:`daydream.optimizations.recost`). Compression and decompression are memory-bound passes: a
compression kernel reads ``S`` and writes ``S/R`` bytes, decompression reads ``S/R`` and writes
``S``, each at the GPU's DRAM bandwidth (``daydream/costmodel/gpus.py`` spec sheets; ``mem_gbps`` parameter
when the GPU is unknown) times ``efficiency`` (default 0.8: what a streaming kernel reaches,
e.g. STREAM-like copies on V100 reach ~790 of 900 GB/s). Compression runs on the
communication stream right before the transfer and is added to the collective's task;
decompression is a kernel inserted right after it on the same stream.
"""

from __future__ import annotations

import numpy as np

from ..costmodel import comm as cm
from ..costmodel.gpus import gpu_of_device
from ..transform import insert, set_duration
from . import Optimization, Param, register
from .comm_common import NETWORK_PARAMS, comm_collectives, network_of
from .recost import _sized, calibrated


def _mem_bw(graph, p) -> float:
    for d in graph.devices:
        g = gpu_of_device(d)
        if g is not None:
            return g.mem_gbps * 1e9
    return p["mem_gbps"] * 1e9


def _apply(graph, p):
    c = comm_collectives(graph)
    m = _sized(c) & (c.group_size > 1)
    net = calibrated(c, network_of(p))
    s = c.size_bytes[m]
    small = np.rint(s / p["ratio"]).astype(np.int64)
    delta = cm.collective_ns(c.op[m], small, c.group_size[m], net) - cm.collective_ns(c.op[m], s, c.group_size[m], net)
    bw = _mem_bw(graph, p) * p["efficiency"]
    pass_ns = np.rint((s + small) / bw * 1e9).astype(np.int64)
    new = np.maximum(c.dur_ns[m] + delta, 0) + pass_ns
    mask = np.zeros(graph.n, bool)
    mask[c.node[m]] = True
    dur = graph.dur_ns.copy()
    dur[c.node[m]] = new
    g = set_duration(graph, mask, dur[mask])
    for v, d in zip(c.node[m].tolist(), pass_ns.tolist()):  # collectives: tens
        g, _ = insert(g, after=int(v), dur_ns=int(d), name="gradient decompression (inserted)")
    return g, (f"{int(m.sum()):,} collectives compressed {p['ratio']:g}x: transfer {int(delta.sum()) / 1e6:+,.3f} ms, "
               f"compression + decompression {2 * int(pass_ns.sum()) / 1e6:,.3f} ms at {bw / 1e9:,.0f} GB/s")


register(
    Optimization(
        name="compression",
        summary="gradient compression: collectives move 1/ratio of their bytes, plus (de)compression kernels",
        apply=_apply,
        what_if=True,
        params={
            "ratio": Param(4.0, "compression ratio (e.g. 4: fp32 -> 8-bit quantization; user's what-if)", float, lambda v: v >= 1, ">= 1"),
            "efficiency": Param(0.8, "fraction of peak DRAM bandwidth a (de)compression pass reaches (streaming kernels: ~0.8; an assumption, not measured: override it)", float,
                                lambda v: 0 < v <= 1, "0 to 1"),
            "mem_gbps": Param(900.0, "DRAM bandwidth, GB/s, when the trace's GPU is unknown (V100: 900, spec sheet)", float, lambda v: v > 0, "> 0"),
            **NETWORK_PARAMS,
        },
    )
)
