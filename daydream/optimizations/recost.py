"""``network``, ``world-size``, ``buckets``: re-cost the collectives a trace already has.

Each sized collective (:mod:`daydream.collectives`) gets ``new = max(recorded + model_new -
model_old, 0)``: the model's change is added to what was recorded, so the part of a recorded
collective that is waiting for peers (or anything the model does not see) is kept, and the same
network gives the recorded time back. ``model_old`` is :func:`daydream.comm_model.collective_ns`
on the trace's own network, calibrated from it (bandwidth: the highest bus bandwidth any of its
collectives achieved; latency: the ``link`` preset's), at the recorded group size. Compute is
unchanged; collectives without a size in the trace are left as recorded (counted in the note).

* ``network:link=...,latency=...,inter=...``: the given network instead of the calibrated one.
* ``world-size:n=N``: N ranks instead of the recorded group size (all-reduce, broadcast,
  all-to-all keep their message; all-gather and reduce-scatter keep each rank's shard, so their
  ``S`` scales by N/n). ``n=1``: no peers, so every collective costs 0 (recorded waits included).
* ``buckets:size=MB``: the all-reduces of each iteration re-bucketed: their bytes, in stream
  order, cut into buckets of ``size`` MiB; a bucket is charged to the recorded all-reduce during
  which its last byte was recorded (its gradients were ready by then), each bucket paying the
  model's latency.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..arrays import sorted_unique
from .. import comm_model as cm
from ..collectives import Op
from ..transform import set_duration
from . import Optimization, Param, register
from ._comm import DDP_BUCKET_MB, MIB, NETWORK_PARAMS, check_pieces, comm_collectives, network_of, step_of_nodes


def calibrated(c, like: cm.Network) -> cm.Network:
    """``like`` with its intra-node link replaced by the one fitted to the collectives ``c``
    (bandwidth: :func:`daydream.comm_model.calibrate`), and the base and per-step latencies lowered
    where a recorded collective was faster than they allow (so no recorded collective is shorter
    than the calibrated model says)."""
    link = cm.calibrate(c.op, c.size_bytes, c.group_size, c.dur_ns, like.intra)
    if link is None:
        return like
    net = dataclasses.replace(like, intra=link, inter=None, contention=1.0)
    m = _sized(c) & (c.group_size > 1)
    if m.any():
        base = min(net.base_latency_ns, float(c.dur_ns[m].min()))
        net = dataclasses.replace(net, base_latency_ns=base)
        zero = dataclasses.replace(net, intra=dataclasses.replace(link, latency_ns=0.0))
        xfer = cm.collective_ns(c.op[m], c.size_bytes[m], c.group_size[m], zero)
        steps = np.maximum((cm.collective_ns(c.op[m], c.size_bytes[m], c.group_size[m], net) - xfer) / max(link.latency_ns, 1e-9), 1e-9)
        a = float(np.clip((c.dur_ns[m] - xfer) / steps, 0, link.latency_ns).min())
        net = dataclasses.replace(net, intra=dataclasses.replace(link, latency_ns=a))
    return net


def _sized(c):
    return (c.size_bytes >= 0) & (c.group_size >= 1) & (c.op != Op.UNKNOWN)


def recost(graph, c, m, new_size, new_n, new_net, old_net):
    """Graph with collectives ``c.node[m]`` re-costed (module docstring); (graph, old ns, new ns)."""
    old_model = cm.collective_ns(c.op[m], c.size_bytes[m], c.group_size[m], old_net)
    new_model = cm.collective_ns(c.op[m], new_size[m], new_n[m], new_net)
    new = np.maximum(c.dur_ns[m] + new_model - old_model, 0)
    mask = np.zeros(graph.n, bool)
    mask[c.node[m]] = True
    dur = graph.dur_ns.copy()
    dur[c.node[m]] = new
    return set_duration(graph, mask, dur[mask]), int(c.dur_ns[m].sum()), int(new.sum())


def _note(c, m, old, new, what):
    left = int((~m).sum())
    s = f"{int(m.sum()):,} collectives re-costed for {what}: {old / 1e6:,.3f} -> {new / 1e6:,.3f} ms"
    return s + (f"; {left:,} others (no size in the trace, or not concerned) left as recorded" if left else "")


def _network(graph, p):
    c = comm_collectives(graph)
    m = _sized(c)
    new_net = network_of(p)
    old_net = calibrated(c, network_of({**p, "bandwidth": TRACED_LINK, "latency": ""}))
    what = new_net.intra.name + (f" + {new_net.inter.name}" if new_net.inter else "")
    if not p.get("latency") and old_net.intra is not cm.PRESETS[TRACED_LINK]:  # calibrated: the trace's latency
        new_net = keep_latency(new_net, old_net)
        extra = new_net.intra.latency_ns - old_net.intra.latency_ns
        what += (f" (calibrated from the trace: bus bandwidth {old_net.intra.bandwidth / 1e9:.3g} GB/s, per-step latency "
                 f"{old_net.intra.latency_ns / 1e3:.3g} us" + (f", + {extra / 1e3:.3g} us NCCL hwLat of this link over NVLink"
                                                              if extra > 0 else "") + "; latency= sets it)")
    g, old, new = recost(graph, c, m, c.size_bytes, c.group_size, new_net, old_net)
    return g, _note(c, m, old, new, what)


#: The link a trace is taken to have run on (``network``'s default bandwidth: NVLink 2, the V100
#: machines of the paper); its latencies are calibrated from the trace (:func:`calibrated`).
TRACED_LINK = "nvlink2"


def keep_latency(net: cm.Network, traced: cm.Network) -> cm.Network:
    """``net`` with the latencies of ``traced`` (the trace's own network, calibrated), plus the
    difference between ``net``'s link preset and the traced link's (NCCL's hwLat per link type:
    NVLink 3.4 us, PCI 5.7 us, NET 14 us per step, :data:`daydream.comm_model.PRESETS`).

    A recorded collective faster than a preset's latency allows shows that the traced system's
    latency is lower than the preset's (:func:`calibrated`); another bandwidth on the same kind of
    link keeps it, another kind of link adds its hwLat difference. Without this, re-costing on the
    traced link (or a faster one) made collectives slower (found by a new user: DLRM rank 7,
    1.746 ms recorded -> 1.911 ms on NVLink 2, 1.891 ms on NVLink 4)."""
    ref = cm.PRESETS[TRACED_LINK]
    lat = max(traced.intra.latency_ns + net.intra.latency_ns - ref.latency_ns, 0.0)
    base = max(traced.base_latency_ns + net.base_latency_ns - cm.BASE_LATENCY_NS, 0.0)
    return dataclasses.replace(net, intra=dataclasses.replace(net.intra, latency_ns=lat), base_latency_ns=base)


def _world(graph, p):
    if p["n"] == 1:  # costs nothing whatever the sizes: none are needed
        return _one_rank(graph, comm_collectives(graph, sized=False))
    c = comm_collectives(graph)
    m = _sized(c) & (c.group_size > 1)
    net = calibrated(c, network_of(p))  # the trace's own network: only the group size changes
    n = np.full(len(c), p["n"], np.int64)
    shard = np.isin(c.op, (Op.ALL_GATHER, Op.REDUCE_SCATTER))
    size = np.where(shard, np.rint(c.size_bytes * (p["n"] / np.maximum(c.group_size, 1))).astype(np.int64), c.size_bytes)
    g, old, new = recost(graph, c, m, size, n, net, calibrated(c, net))
    return g, _note(c, m, old, new, f"{p['n']} ranks")


def _one_rank(graph, c):
    """``world-size:n=1``: every collective of a group of more than one rank (or of unknown size), sized
    or not, costs 0. A group of one rank has no peers: NCCL moves no bytes between ranks and no rank waits for another
    (what is left is at most a local copy of an out-of-place buffer); the rule ``recorded +
    model_new - model_old`` would keep the recorded waits for peers, about half of the time here."""
    m = c.group_size != 1  # more than one rank, or unknown: a collective of one rank is left as it is
    mask = np.zeros(graph.n, bool)
    mask[c.node[m]] = True
    old = int(c.dur_ns[m].sum())
    left = int((~m).sum())
    note = f"{int(m.sum()):,} collectives cost 0 for 1 rank (no peers: nothing crosses a link, no rank waits): {old / 1e6:,.3f} -> 0.000 ms"
    if left:
        note += f"; {left:,} others (a group of one rank already) left as recorded"
    return set_duration(graph, mask, np.zeros(int(mask.sum()), np.int64)), note


def rebucket(c, m_ar, steps, bucket_bytes, net) -> np.ndarray:
    """New model time (ns) per collective of ``m_ar`` (all-reduces, in node order) when each
    iteration's all-reduce bytes are re-bucketed (module docstring)."""
    out = np.zeros(len(c), np.int64)
    for s in sorted_unique(steps[m_ar]).tolist():  # iterations: a handful
        idx = np.nonzero(m_ar & (steps == s))[0]
        idx = idx[np.argsort(c.node[idx], kind="stable")]
        cum = np.cumsum(c.size_bytes[idx])
        total = int(cum[-1])
        ends = np.minimum(np.arange(1, check_pieces(total, bucket_bytes, "buckets: size") + 1) * bucket_bytes, total)
        sizes = np.diff(np.concatenate([[0], ends]))
        owner = np.minimum(np.searchsorted(cum, ends - 1e-9), len(idx) - 1)
        t = cm.collective_ns(cm.ALL_REDUCE, sizes, c.group_size[idx[owner]], net)
        np.add.at(out, idx[owner], t)
    return out


def _buckets(graph, p):
    c = comm_collectives(graph)
    m = _sized(c) & (c.op == Op.ALL_REDUCE) & (c.group_size > 1)
    if not m.any():
        return graph, "no sized all-reduce to re-bucket; nothing changed"
    net = calibrated(c, network_of(p))
    steps = step_of_nodes(graph)[c.node]
    new_model = rebucket(c, m, steps, p["size"] * MIB, net)
    old_model = cm.collective_ns(c.op[m], c.size_bytes[m], c.group_size[m], net)
    new = np.maximum(c.dur_ns[m] + new_model[m] - old_model, 0)
    mask = np.zeros(graph.n, bool)
    mask[c.node[m]] = True
    dur = graph.dur_ns.copy()
    dur[c.node[m]] = new
    return set_duration(graph, mask, dur[mask]), _note(c, m, int(c.dur_ns[m].sum()), int(new.sum()), f"{p['size']:g} MiB buckets")


for _name, _summary, _fn, _own in (
    ("network", "re-cost the trace's collectives on another network (bandwidth, latency, inter-node link)", _network, {}),
    ("world-size", "re-cost the trace's collectives for N ranks", _world,
     {"n": Param(16, "number of ranks", int, lambda v: 1 <= v <= 1 << 20, "1 to 2^20")}),
    ("buckets", "re-bucket the trace's all-reduces (DDP bucket size)", _buckets,
     {"size": Param(DDP_BUCKET_MB, "bucket size, MiB (PyTorch DDP bucket_cap_mb default 25)", float, lambda v: v > 0, "> 0")}),
):
    register(Optimization(name=_name, summary=_summary, apply=_fn, what_if=True, params={**_own, **NETWORK_PARAMS}))
