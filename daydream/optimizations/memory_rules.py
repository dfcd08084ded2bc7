"""Memory rules of the what-ifs that hold, pool or shard state (``docs/memory.md``, "What the
what-ifs do to memory"): ``cuda-graphs`` (a private pool), ``dataloader`` (pinned host buffers),
``ddp`` (gradient buckets), ``fsdp``/``zero`` (sharded state, all-gathered units).

Each rule rewrites the graph's allocator events (:class:`~daydream.graph.memory_part.GraphMemory`)
through :func:`~daydream.graph.memory_part.changed_events`: the changed program's events in
program order, each device's level before the window kept as recorded (plus a what-if's
``before_delta``). Sizes in bytes, times in ns. Every function returns the graph unchanged where
it has no memory events.

* :func:`edit_events`: the common step (sizes changed, events dropped, events added).
* :func:`held_blocks`: blocks allocated before the window and held through it (a DDP bucket
  buffer, a DataLoader's pinned batches): one allocation per device at the instant of the
  device's first allocator event, before it, never freed.
* :func:`graph_pool`: the private memory pool of captured CUDA graphs.
* :func:`sharded_blocks`: gradient and optimizer-state blocks shrunk to their shard, the level
  before the window lowered by the persistent state's shard saving.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..graph import NODE_CPU
from ..graph.memory_part import block_pairs, changed_events, level_before
from ..mapping.rules import BACKWARD, OPTIMIZER


def _size(b: float) -> str:
    return f"{b / 2**20:,.1f} MiB" if abs(b) >= 2**20 else f"{int(b):,} B"


def edit_events(gm, *, nbytes=None, drop=None, add: dict | None = None, before_delta: dict | None = None):
    """``gm`` with the sizes ``nbytes`` (int64, one per event; None: kept), without the events of
    the bool mask ``drop``, and with the events ``add`` (a dict of arrays of one length: ``bytes``,
    ``device``, ``pid``, ``tid``, ``ts_ns`` (the recorded instant it stands for), ``anchor_row``,
    ``offset_ns``, ``at_end``, ``step``, ``phase``, ``group``: at one instant -1 before the recorded
    events, +1 after). ``before_delta``: per device, bytes added to the level before the window."""
    ev = gm.events
    ne = len(ev)
    cols = ev.columns()
    if nbytes is not None:
        cols["bytes"] = np.asarray(nbytes, np.int64)
    keep = np.ones(ne, bool) if drop is None else ~np.asarray(drop, bool)
    cols = {c: a[keep] for c, a in cols.items()}
    phase = gm.phase if gm.phase is not None else np.zeros(ne, np.uint8)
    anchor, offset, at_end, step, ph = gm.anchor_row[keep], gm.offset_ns[keep], gm.at_end[keep], gm.step[keep], phase[keep]
    group = np.zeros(len(anchor), np.int64)
    if add is not None and len(add["bytes"]):
        k = len(add["bytes"])
        new = {c: np.full(k, -1, a.dtype) for c, a in cols.items()}
        for c in ("bytes", "device", "pid", "tid", "ts_ns"):
            new[c] = np.asarray(add[c], cols[c].dtype)
        cols = {c: np.concatenate([cols[c], new[c]]) for c in cols}
        anchor = np.concatenate([anchor, np.asarray(add["anchor_row"], np.int64)])
        offset = np.concatenate([offset, np.asarray(add["offset_ns"], np.int64)])
        at_end = np.concatenate([at_end, np.asarray(add["at_end"], bool)])
        step = np.concatenate([step, np.asarray(add["step"], step.dtype)])
        ph = np.concatenate([ph, np.asarray(add["phase"], np.uint8)])
        group = np.concatenate([group, np.asarray(add["group"], np.int64)])
    return changed_events(gm, cols, anchor, offset, at_end, step, ph, group, np.arange(len(anchor), dtype=np.int64),
                          before_delta=before_delta)


def anchor_nodes(graph, gm) -> np.ndarray:
    """int64 node of each event's anchor CPU task in ``graph`` (-1: none, or removed)."""
    cpu = np.flatnonzero((graph.node_kind == NODE_CPU) & (graph.row >= 0))
    if not len(cpu):
        return np.full(len(gm), -1, np.int64)
    rows = graph.row[cpu]
    o = np.argsort(rows, kind="stable")
    j = np.minimum(np.searchsorted(rows[o], gm.anchor_row), len(rows) - 1)
    hit = (gm.anchor_row >= 0) & (rows[o][j] == gm.anchor_row)
    return np.where(hit, cpu[o][j], -1)


def _at_event(gm, i: int, nbytes, device) -> dict:
    """New events at the recorded instant of event ``i`` (its anchor and offset), before it."""
    ev = gm.events
    k = len(nbytes)
    rep = (lambda v: np.full(k, v))
    return {"bytes": np.asarray(nbytes, np.int64), "device": np.asarray(device, np.int64), "pid": rep(int(ev.pid[i])),
            "tid": rep(int(ev.tid[i])), "ts_ns": rep(int(ev.ts_ns[i])), "anchor_row": rep(int(gm.anchor_row[i])),
            "offset_ns": rep(int(gm.offset_ns[i])), "at_end": rep(bool(gm.at_end[i])), "step": rep(-1),
            "phase": np.zeros(k, np.uint8), "group": rep(-1)}


def held_blocks(g, held: dict[int, int]):
    """``g`` with, per device of ``held`` (GPU index, -1 the host), a block of that many bytes
    allocated before the window and held through it: an allocation at the recorded instant of the
    device's first allocator event, before it, in no step (every step of the device starts with
    it; the block is persistent in the breakdown), never freed; on a device without events, at the
    window's first event, in its step. The level before the window stays the recorded one, so every later level is
    ``held`` bytes higher. Unchanged where the graph has no memory events or nothing is held."""
    gm = g.memory
    held = {int(d): int(b) for d, b in held.items() if int(b) > 0}
    if gm is None or not len(gm) or not held:
        return g
    devs = sorted(held)
    ev = gm.events
    adds = []
    for d in devs:  # at the device's first event (the window's first where the device has none)
        on = np.flatnonzero(ev.device == d)
        adds.append(_at_event(gm, int(on[0]) if len(on) else 0, [held[d]], [d]))
        if not len(on):  # its only event: in the step of the event it stands at, so that the step shows it
            adds[-1]["step"][:] = gm.step[0]
    add = {c: np.concatenate([a[c] for a in adds]) for c in adds[0]}
    return dataclasses.replace(g, memory=edit_events(gm, add=add))


def graph_pool(g, region: np.ndarray, whose: str = "") -> tuple[object, dict[int, int], str]:
    """``g`` with the private memory pool of captured CUDA graphs (``torch.cuda.graphs``: "a
    graph's private pool ... its blocks stay reserved for the graph while it lives"; the graphs of
    one program share one pool, as ``make_graphed_callables`` and ``graph(pool=...)`` do).

    ``region``: int per event of ``g.memory``, the captured region (a replayed graph) it happens
    in, -1 outside every graph. A **graph block** is a block (allocation paired with its free by
    address) whose allocation happens in a region. The pool holds, for each region, the most graph
    bytes alive at once during it (a block freed after its region counts until the region ends;
    inside one capture the pool reuses the blocks freed before, as the caching allocator's private
    pool does); the pool of the program is the largest region's. Model: the graph blocks'
    allocations and frees are gone (a replay allocates nothing: the graph's tensors live in the
    pool); one allocation of the pool's size takes the place of the first graph block's allocation
    (the graph's first launch: capture allocates it) and is never freed (the graph lives for the whole
    step, and the steps after). Per GPU; host allocations are not the graph's (the pool is device
    memory): they keep their recorded events.

    Returns:
        (new graph, pool bytes per device, note words). Regions with an event without an address
        (PyTorch before 1.10: blocks cannot be paired) leave the memory unchanged, and say so; with
        ``whose`` (the calling what-if's name) the events are marked not modelled by it
        (``GraphMemory.not_modelled``: the prediction's verdict says it is the baseline's).
    """
    gm = g.memory
    if gm is None or not len(gm):
        return g, {}, ""
    ev = gm.events
    region = np.where(ev.device >= 0, np.asarray(region, np.int64), -1)  # host allocations are not the graph's
    inr = region >= 0
    if not inr.any():
        return g, {}, "memory: no allocation inside a captured region (the allocations are the recorded ones)"
    if (ev.addr[inr] < 0).any():
        if whose:  # the what-if calling, named in the prediction's verdict
            g = dataclasses.replace(g, memory=dataclasses.replace(gm, not_modelled=gm.not_modelled + (whose,)))
        return g, {}, ("memory: not modelled (the trace's allocator events have no addresses: blocks cannot be paired); "
                       "the memory verdict is the baseline's")
    ne = len(ev)
    al, fr = block_pairs(ev, np.arange(ne))
    free_of = np.full(ne, -1, np.int64)
    free_of[al] = fr
    blocks = np.flatnonzero(inr & (ev.bytes > 0))  # graph blocks, by their allocation
    if not len(blocks):
        return g, {}, "memory: no allocation inside a captured region (the allocations are the recorded ones)"
    drop = np.zeros(ne, bool)
    drop[blocks] = True
    drop[free_of[blocks][free_of[blocks] >= 0]] = True
    pool: dict[int, int] = {}
    for d in np.unique(ev.device[blocks]).tolist():  # devices and regions: a handful
        for r in np.unique(region[blocks][ev.device[blocks] == d]).tolist():
            mine = blocks[(ev.device[blocks] == d) & (region[blocks] == r)]
            last = int(np.flatnonzero((region == r) & (ev.device == d)).max())
            contrib = np.zeros(ne, np.int64)
            contrib[mine] = ev.bytes[mine]
            f = free_of[mine]
            ok = (f >= 0) & (f <= last)
            contrib[f[ok]] = ev.bytes[f[ok]]
            lo = int(mine.min())
            pool[d] = max(pool.get(d, 0), int(np.cumsum(contrib[lo:last + 1]).max()))
    devs = sorted(pool)
    nbytes = ev.bytes.copy()
    for d in devs:  # the device's first graph allocation becomes the pool's, in its own place in program order
        i = int(blocks[ev.device[blocks] == d].min())
        nbytes[i] = pool[d]
        drop[i] = False
    mem = edit_events(gm, nbytes=nbytes, drop=drop)
    words = ", ".join(f"GPU {d}: {_size(pool[d])}" if d >= 0 else f"host: {_size(pool[d])}" for d in devs)
    note = (f"memory: {len(blocks):,} allocations of captured regions served by the graphs' private pool ({words}), "
            "allocated at the first capture and held for the whole run")
    return dataclasses.replace(g, memory=mem), pool, note


def block_classes(gm) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(allocation, free or -1, is gradient, is optimizer state) per block of ``gm`` (allocation
    events with an address), by the breakdown's rules (``report/memory_fit.py``): a **gradient**
    is allocated in the backward pass (its event's mapped phase) and not freed within its step (or
    never); **optimizer state** is allocated in the optimizer step and never freed in the trace."""
    ev = gm.events
    ne = len(ev)
    al, fr = block_pairs(ev, np.arange(ne))
    free_of = np.full(ne, -1, np.int64)
    free_of[al] = fr
    a = np.flatnonzero((ev.bytes > 0) & (ev.addr >= 0))
    f = free_of[a]
    phase = gm.phase if gm.phase is not None else np.zeros(ne, np.uint8)
    same_step = (f >= 0) & (gm.step[np.maximum(f, 0)] == gm.step[a]) & (gm.step[a] >= 0)
    grad = (phase[a] == BACKWARD) & ~same_step
    opt = (phase[a] == OPTIMIZER) & (f < 0)
    return a, f, grad, opt


def sharded_blocks(g, world: int, stage: int, state: dict, devices: list[int]) -> tuple[object, str]:
    """``g`` with the per-rank memory of ZeRO ``stage`` over ``world`` ranks (ZeRO, Rajbhandari et
    al. SC 2020, §5: P_os shards the optimizer state, P_os+g also the gradients, P_os+g+p also the
    parameters; FSDP FULL_SHARD = stage 3):

    * the gradient blocks (stage >= 2) and optimizer-state blocks (stage >= 1) of the events
      (:func:`block_classes`) shrink to their shard, ``ceil(bytes / world)`` (allocation and free);
    * the state the events do not show was allocated before the window (the parameters; the
      optimizer state after the first step; gradients kept between steps): per category, the
      saving of ``state`` (``{"parameters", "gradients", "optimizer_state"}``: the full-model
      bytes of each, from :func:`.sharding.sharded_state_bytes` with ``world=1``) minus what the
      events showed of it, ``(1 - 1/world)`` of it, is taken from the level before the window of
      each GPU of ``devices`` (inferred: counted in the note), at most down to zero, and only
      where the level is recorded (a trace without totals keeps its lower bound).
    """
    gm = g.memory
    if gm is None or not len(gm) or world <= 1 or stage <= 0:
        return g, ""
    ev = gm.events
    a, f, grad, opt = block_classes(gm)
    shrink = (grad & (stage >= 2)) | (opt & (stage >= 1))
    b = ev.bytes.copy()
    half = -(-b[a[shrink]] // world)
    b[a[shrink]] = half
    fs = f[shrink]
    b[fs[fs >= 0]] = -half[fs >= 0]
    # what the events show of each category, per step (the largest step: state is one model's)
    seen = {}
    for name, m in (("gradients", grad), ("optimizer_state", opt)):
        by_step = np.bincount(np.maximum(gm.step[a[m]], 0), weights=ev.bytes[a[m]]) if m.any() else np.zeros(1)
        seen[name] = float(by_step.max())
    keep = {"parameters": stage >= 3, "gradients": stage >= 2, "optimizer_state": stage >= 1}
    unseen = sum(max(0.0, float(state.get(c, 0)) - seen.get(c, 0.0)) * (1 - 1 / world) for c in keep if keep[c])
    delta = {}
    for d in devices:
        k = np.flatnonzero(ev.device == d)
        before, exact = level_before(ev, k)
        if exact and len(k):
            delta[int(d)] = -min(before, int(unseen))
    mem = edit_events(gm, nbytes=b, before_delta=delta)
    saved = int((ev.bytes[a[shrink]] - half).sum())
    if not (ev.addr >= 0).any():
        note = "memory per rank: the allocator's events have no addresses (gradient and optimizer-state blocks cannot be told apart)"
    else:
        note = (f"memory per rank: {int(shrink.sum()):,} gradient/optimizer-state blocks shrunk to 1/{world} (-{_size(saved)} "
                f"over the trace)")
    cats = ", ".join(c.replace("_", " ") for c in keep if keep[c])
    if any(delta.values()):
        note += (f"; state held from before the window lowered by {_size(-min(delta.values()))} "
                 f"(inferred: the sharded part of the {cats} the events do not show, from the gradient shapes)")
    elif delta:
        note += "; nothing allocated before the window to shard"
    elif (ev.addr >= 0).any():
        note += "; the level before the window is not recorded (no totals): kept (the peak is a lower bound)"
    else:  # no totals, no addresses: the unsharded state kept, the gathered units added (docs/memory.md)
        note += ("; the level before the window is not recorded (no totals) and kept unsharded: the per-rank peak is an "
                 "estimate, not a lower bound")
        mem = dataclasses.replace(mem, not_lower_bound=True)
    return dataclasses.replace(g, memory=mem), note


def step_of_times(gm, steps, ts: np.ndarray) -> np.ndarray:
    """int32 index into ``gm.step_names`` of the ``ProfilerStep`` (``steps``: the trace's
    ``(name, start, end, ...)``) whose recorded interval holds each time (-1 none)."""
    out = np.full(len(ts), -1, np.int32)
    names = list(gm.step_names)
    for name, s, e, *_ in steps:  # steps: a handful
        if name in names:
            out[(ts >= s) & (ts < e)] = names.index(name)
    return out


def gathered_units(graph, g, alloc_call: np.ndarray, free_call: np.ndarray, free_at_end: np.ndarray, nbytes: np.ndarray,
                   device: np.ndarray) -> tuple[object, str]:
    """``g`` with FSDP's all-gathered unit parameters (FSDP docs, FULL_SHARD: "before forward and
    backward computation, parameters are all-gathered ... and the unsharded parameters are freed
    after the computation"): per unit gather ``k``, a block of ``nbytes[k]`` on ``device[k]``
    allocated at the end of CPU call ``alloc_call[k]`` (the call that issues the all-gather) and
    freed at the start (``free_at_end``: the end) of call ``free_call[k]``; calls are recorded
    nodes of ``graph`` (their rows anchor the events in ``g``). In program order an allocation
    (and a free at a call's end) comes right after its call, before the host work after it; a
    free at a call's start right before the call, after the host work before it; at one place,
    frees before allocations."""
    gm = g.memory
    if gm is None or not len(gm) or not len(alloc_call):
        return g, ""
    ok = (graph.row[alloc_call] >= 0) & (graph.row[free_call] >= 0)
    ac, fc, fe, nb, dv = alloc_call[ok], free_call[ok], np.asarray(free_at_end, bool)[ok], np.asarray(nbytes, np.int64)[ok], device[ok]
    k = len(ac)
    if not k:
        return g, ""
    ts_a = graph.rec_end_ns[ac]
    ts_f = np.where(fe, graph.rec_end_ns[fc], graph.rec_start_ns[fc])
    steps = graph.facts.steps if graph.facts is not None else ()
    # frees first: at one instant (and side of a call) a unit is released before the next is gathered
    both = np.concatenate([fc, ac])
    ts = np.concatenate([ts_f, ts_a])
    add = {"bytes": np.concatenate([-nb, nb]), "device": np.concatenate([dv, dv]), "pid": graph.pid[both], "tid": graph.tid[both],
           "ts_ns": ts, "anchor_row": graph.row[both], "offset_ns": np.zeros(2 * k, np.int64),
           "at_end": np.concatenate([fe, np.ones(k, bool)]), "step": step_of_times(gm, steps, ts),
           "phase": np.zeros(2 * k, np.uint8), "group": np.concatenate([np.where(fe, -1, 1), -np.ones(k, np.int64)])}
    return dataclasses.replace(g, memory=edit_events(gm, add=add)), f"{k:,} all-gathered units allocated before their compute and freed after"
