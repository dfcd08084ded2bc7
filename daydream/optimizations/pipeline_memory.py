"""Per-stage (per-rank) memory of ``pp`` (:mod:`.pipeline_parallel`; ``docs/memory.md``, "pp").

Each pipeline stage is one GPU. What stage ``s`` allocates, in its program order
(:func:`.pipeline_schedule.stage_order`), from the traced step's allocator events on the GPU the
stages replace (sizes in bytes):

* **Its forward of a micro-batch** allocates what the traced forward of its units allocated, at
  ``1/M`` of each size (``ceil``): the events of the step in the forward phase (the breakdown's
  phase: the op that allocates is the one whose call comes next), each given to the stage of the
  next forward kernel launched at or after it (the last stage after the last launch), in recorded
  order. Blocks it frees within the stage's forward (temporaries) are freed there too.
* **Its backward of a micro-batch** frees that micro-batch's blocks still alive (the activations:
  freed in the traced backward or later, docs/memory.md's breakdown). So the stage holds, at its
  peak, ``activations held x`` its per-micro-batch activations: 1F1B ``min(S-s, M)`` micro-batches,
  GPipe ``M`` (:func:`.pipeline_schedule.activations_held`). Interleaved (``V`` chunks per rank):
  the forward of chunk ``v`` replays the events of that chunk's units, its backward frees them.
* **Model state** (the level before the window, blocks allocated outside every step and not freed
  in the trace, and the largest step's gradient and optimizer-state blocks,
  :func:`.memory_rules.block_classes`): held from before the window, the stage's share being its
  share of the traced forward time (**inferred**: a dense layer's parameters are proportional to
  its work per token, Narayanan et al. SC 2021 §3.3; counted in the note), ``floor``.
* The step's other events on that GPU (backward temporaries, the optimizer's, unmapped phases) are
  not the stages' (counted in the note); events on other devices (host, other GPUs) are kept.

Stage 0 keeps the traced GPU's id; stage ``s >= 1`` gets the id ``max(device ids) + s``, with a
copy of the traced GPU's :class:`~daydream.events.table.DeviceInfo` (its capacity). The events of a
stage in a step are placed, in program order, at the step's first forward launch call (the
replay's per-step peak reads program order; their times are not the pipeline's). Checked by
``tests/test_pipeline_parallel.py`` (the emulator's run of the stages' programs with these
allocations: every stage's peak and step peak).
"""

from __future__ import annotations

import dataclasses

import msgspec
import numpy as np

from ..events.memory import MemoryEvents
from ..graph.memory_part import block_pairs, level_before
from ..mapping.rules import FORWARD
from .memory_rules import _size, block_classes, edit_events
from .pipeline_schedule import BWD, FWD


def stage_events(fwd_bytes, fwd_block, order: list, M: int) -> tuple[np.ndarray, np.ndarray]:
    """One stage's events of a step in program order: per ``(FWD, i)`` item the forward's events
    (``fwd_bytes``: signed bytes in recorded order; ``fwd_block``: the block id of each, paired
    allocation and free share it) at ``ceil(|b| / M)``, per ``(BWD, i)`` the frees of micro-batch
    ``i``'s blocks still alive. Interleaved (``fwd_bytes``, ``fwd_block``: lists, one array per
    local chunk ``v``): item ``x = v M + i`` replays chunk ``v``'s events. Returns (signed bytes,
    item ``x``) per event."""
    if isinstance(fwd_bytes, np.ndarray) or not len(fwd_bytes) or np.isscalar(fwd_bytes[0]):
        fwd_bytes, fwd_block = [fwd_bytes], [fwd_block]
    per_chunk = []
    for fb, fk in zip(fwd_bytes, fwd_block):  # chunks: a few
        b = np.asarray(fb, np.int64)
        blk = np.asarray(fk, np.int64)
        mb_bytes = np.sign(b) * (-(-np.abs(b) // M))
        # blocks alive after the forward: allocated in it and not freed in it
        live = {}
        for x, k in zip(mb_bytes.tolist(), blk.tolist()):  # one stage's forward events: tens to thousands
            if x > 0:
                live[k] = live.get(k, 0) + x
            elif k in live:
                live[k] += x
        per_chunk.append((mb_bytes, np.array([v for v in live.values() if v > 0], np.int64)))
    out, mbs = [], []
    for kind, i in order:  # the stage's items: hundreds
        mb_bytes, alive = per_chunk[i // M if len(per_chunk) > 1 else 0]
        if kind == FWD:
            out.append(mb_bytes)
            mbs.append(np.full(len(mb_bytes), i))
        elif kind == BWD:
            out.append(-alive)
            mbs.append(np.full(len(alive), i))
    if not out:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(out), np.concatenate(mbs)


def stage_memory(graph, g, steps, units, bounds, runs, M: int, V: int = 1) -> tuple[object, str]:
    """``g`` (the ``pp`` graph) with one GPU per stage and its allocator events (module docstring).
    ``steps``/``units``/``bounds`` from :func:`.pipeline_parallel.plan` (``bounds``: ``S V + 1``
    chunk boundaries when interleaved with ``V`` chunks per rank, chunk ``c`` on rank ``c mod S``);
    ``runs``: per step its :class:`.pipeline_schedule.PipelineRun`. Unchanged where the graph has
    no memory events on the stages' GPU."""
    gm = graph.memory
    if gm is None or not len(gm):
        return g, "memory: no allocator events (no per-stage peak)"
    ev = gm.events
    S = (len(bounds) - 1) // V
    dev = int(graph.device[steps[0][0][0]])
    on = np.flatnonzero(ev.device == dev)
    if not len(on):
        return g, f"memory: no allocator events on GPU {dev} (no per-stage peak)"
    if (ev.addr[on] < 0).all():
        return g, "memory per stage: not modelled (the allocator's events have no addresses: blocks cannot be paired)"
    ne = len(ev)
    # block ids: an allocation and its free share one; unpaired events their own
    al, fr = block_pairs(ev, on)
    block = np.arange(ne, dtype=np.int64)
    block[fr] = al
    chunk_of_unit = np.searchsorted(bounds, np.arange(int(bounds[-1])), "right") - 1
    state, exact, state_s, share, state_blocks = _model_state(graph, gm, on, dev, steps, units, chunk_of_unit % S, S)
    ids = sorted({int(d) for d in ev.devices()} | {int(x) for x in np.unique(graph.device[graph.device >= 0])})
    stage_dev = [dev] + [max(ids) + s for s in range(1, S)]
    # the events replaced: every event of the stages' GPU
    drop = ev.device == dev
    adds, n_fwd = [], 0
    win = [(int(graph.rec_start_ns[graph.launch[fk[0]]]) if graph.launch[fk[0]] >= 0 else int(graph.rec_start_ns[fk[0]]),
            int(graph.rec_end_ns[bk[-1]])) for fk, bk in steps]
    for (fk, bk), u, r, (w0, w1) in zip(steps, units, runs, win):  # steps: a few
        calls = graph.launch[fk]
        call_ts = np.where(calls >= 0, graph.rec_start_ns[np.maximum(calls, 0)], graph.rec_start_ns[fk])
        sid, fwd_ev, ev_chunk = _forward_events(graph, gm, on, block, al, fr, fk, bk, u, chunk_of_unit, call_ts, (w0, w1))
        n_fwd += len(fwd_ev)
        anchor = int(graph.row[calls[0]]) if calls[0] >= 0 else -1
        for s in range(S):  # stages: a few
            sel = [fwd_ev[ev_chunk == v * S + s] for v in range(V)]
            b, _ = stage_events([ev.bytes[x] for x in sel], [block[x] for x in sel], r.orders[s], M)
            kk = len(b)
            if not kk:
                continue
            adds.append({"bytes": b, "device": np.full(kk, stage_dev[s]), "pid": np.full(kk, int(graph.pid[calls[0]])),
                         "tid": np.full(kk, int(graph.tid[calls[0]])), "ts_ns": np.full(kk, int(call_ts[0])),
                         "anchor_row": np.full(kk, anchor), "offset_ns": np.zeros(kk, np.int64), "at_end": np.zeros(kk, bool),
                         "step": np.full(kk, sid, np.int32), "phase": np.full(kk, FORWARD, np.uint8),
                         "group": np.full(kk, -1, np.int64)})
    n_other = int(drop.sum()) - n_fwd - int(np.isin(block[on], state_blocks).sum())
    add = {c: np.concatenate([x[c] for x in adds]) for c in adds[0]} if adds else None
    # the stage devices' level before the window: its state share (the recorded level is replaced)
    mem = edit_events(gm, drop=drop, add=add, before_delta=None)
    mem = _with_levels(mem, {stage_dev[s]: int(state_s[s]) for s in range(S)}, exact)
    base = next((d for d in graph.devices if getattr(d, "id", None) == dev), None)
    devices = list(g.devices) + ([_copy_device(base, stage_dev[s]) for s in range(1, S)] if base is not None else [])
    margin = (mem.fragmentation or {}).get(dev)
    if margin is not None:
        mem = dataclasses.replace(mem, fragmentation={**mem.fragmentation, **{d: margin for d in stage_dev}})
    note = (f"memory per stage (GPU {'/'.join(str(d) for d in stage_dev)}): {n_fwd:,} forward allocator events replayed per "
            f"micro-batch at 1/{M} size, freed by its backward; model state {_size(state)} "
            f"({'exact' if exact else 'at least: no totals'}) split by forward-time share "
            f"{'/'.join(f'{x:.0%}' for x in share)} (inferred); {n_other:,} other events of the step on GPU {dev} "
            "(backward temporaries, optimizer, unmapped) not modelled per stage")
    return dataclasses.replace(g, memory=mem, devices=devices), note


def _model_state(graph, gm, on, dev: int, steps, units, stage_of_unit, S: int):
    """(model state bytes, level before exact?, (S,) each stage's share (floor), (S,) the shares,
    allocation events of the state's blocks): the level before the window, the blocks allocated
    outside every step and not freed in the trace, the largest step's gradient and optimizer-state
    blocks; shared by the stages' recorded forward time (their units' share where none)."""
    ev = gm.events
    before, exact = level_before(ev, on)
    a, f, grad, opt = block_classes(gm)
    a_on = ev.device[a] == dev
    persistent = a_on & (f < 0) & (gm.step[a] < 0)
    per_step = np.bincount(np.maximum(gm.step[a[a_on & (grad | opt)]], 0), weights=ev.bytes[a[a_on & (grad | opt)]])
    state = before + int(ev.bytes[a[persistent]].sum()) + (int(per_step.max()) if len(per_step) else 0)
    rec = np.zeros(S, np.float64)
    for (fk, _), u in zip(steps, units):
        rec += np.bincount(stage_of_unit[u], weights=graph.dur_ns[fk], minlength=S)
    if not rec.sum():  # no forward time recorded: the stages' share of units
        rec = np.bincount(stage_of_unit, minlength=S).astype(np.float64)
    tot = int(rec.sum())
    state_s = np.array([state * int(x) // tot for x in rec.astype(np.int64).tolist()], np.int64)
    return state, exact, state_s, rec / rec.sum(), a[(grad | opt | persistent) & a_on]


def _forward_events(graph, gm, on, block, al, fr, fk, bk, u, stage_of_unit, call_ts, win):
    """(the step's index in ``gm.step_names`` or -1, its forward events on the GPU in recorded
    order, each one's stage): allocations in the forward phase, and the frees of those freed
    before the launch call after their op's (temporaries), each given to the stage of the next
    forward kernel launched at or after it (a free to its allocation's stage)."""
    ev = gm.events
    ne = len(ev)
    phase = gm.phase if gm.phase is not None else np.zeros(ne, np.uint8)
    w0, w1 = win
    st_idx = gm.step[on]
    inside = (ev.ts_ns[on] >= w0) & (ev.ts_ns[on] <= w1)
    # this step's events: those of the recorded step holding most of its window's events
    sid = int(np.bincount(st_idx[inside & (st_idx >= 0)]).argmax()) if (inside & (st_idx >= 0)).any() else -1
    mine = on[st_idx == sid] if sid >= 0 else on[inside]
    fwd_ev = mine[(phase[mine] == FORWARD) & (ev.bytes[mine] > 0)]
    calls = np.concatenate([graph.launch[fk], graph.launch[bk]])
    allc = np.sort(graph.rec_start_ns[calls[calls >= 0]])
    free_of = np.full(ne, -1, np.int64)
    free_of[al] = fr
    fe = free_of[fwd_ev]
    nxt = np.searchsorted(allc, ev.ts_ns[fwd_ev], "left") + 1
    limit = np.where(nxt < len(allc), allc[np.minimum(nxt, len(allc) - 1)], np.iinfo(np.int64).max)
    tmp = (fe >= 0) & (ev.ts_ns[np.maximum(fe, 0)] <= limit)
    fwd_ev = np.sort(np.concatenate([fwd_ev, fe[tmp]]))
    k = np.minimum(np.searchsorted(call_ts, ev.ts_ns[fwd_ev], "left"), len(fk) - 1)
    ev_stage = stage_of_unit[u[k]]
    first = {}
    for i, (e, s_) in enumerate(zip(fwd_ev.tolist(), ev_stage.tolist())):  # one step's forward events
        first.setdefault(int(block[e]), s_)
        ev_stage[i] = first[int(block[e])]
    return sid, fwd_ev, ev_stage


def _copy_device(d, new_id: int):
    return msgspec.structs.replace(d, id=new_id)


def _with_levels(gm, levels: dict, exact: bool):
    """``gm`` with each device of ``levels`` starting from that many bytes before the window
    (``Total Allocated`` = level + running sum; -1 where ``exact`` is False: a lower bound)."""
    ev = gm.events
    cols = ev.columns()
    for d, lvl in levels.items():
        m = cols["device"] == d
        run = lvl + np.cumsum(np.where(m, cols["bytes"], 0))
        cols["total_allocated"] = np.where(m, run if exact else -1, cols["total_allocated"])
    return dataclasses.replace(gm, events=MemoryEvents.from_columns(cols, sort=False))
