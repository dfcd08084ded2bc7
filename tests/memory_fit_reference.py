"""The memory report's per-step loops as they were before they were made linear: ``step_parts`` and
``_steps`` of daydream/report/memory_fit.py and ``_curves`` and ``recorded_peaks`` of
daydream/simulate/memory_replay.py at commit 4db9d68 (and the per-thread loop of its ``event_times``), unchanged but for the imports made absolute.
The reference that tests/test_memory_fit_linear.py compares the vectorized versions with, output for output."""
from __future__ import annotations

import numpy as np

from daydream.graph.memory_part import block_pairs
from daydream.graph.memory_part import level_before as _before
from daydream.mapping.rules import BACKWARD, FORWARD, OPTIMIZER, UNMAPPED
from daydream.report.memory_fit import _RULES, PARTS
from daydream.report.report_model import MemoryPart, MemoryStep
from daydream.simulate.memory_replay import DeviceMemory, StepPeak


def step_parts(dm: DeviceMemory, gm, s: int, peak_at: int) -> list[MemoryPart]:
    """What the memory of step ``s`` is at its peak (position ``peak_at`` in ``dm``'s replayed
    order; -1: before the step's first event), by the rules of ``_RULES``; [] without addresses."""
    ev = gm.events
    k = np.flatnonzero(ev.device == dm.device)
    if not len(k) or (ev.addr[k] < 0).all():
        return []
    pos = np.full(len(ev), -1, np.int64)
    pos[dm.event] = np.arange(len(dm.event))
    in_step = np.flatnonzero(gm.step[dm.event] == s)
    first, last = int(in_step[0]), int(in_step[-1])
    at = max(peak_at, first - 1)
    al, fr = block_pairs(ev, k)
    big = np.iinfo(np.int64).max
    # blocks: every allocation (freed or not), and every free without its allocation (made before the trace)
    free_of = np.full(len(ev), big, np.int64)
    free_of[al] = pos[fr]
    allocs = k[ev.bytes[k] > 0]
    paired_free = np.zeros(len(ev), bool)
    paired_free[fr] = True
    orphans = k[(ev.bytes[k] < 0) & ~paired_free[k]]
    a_pos = np.concatenate([pos[allocs], np.full(len(orphans), -1, np.int64)])
    f_pos = np.concatenate([free_of[allocs], pos[orphans]])
    size = np.concatenate([ev.bytes[allocs], -ev.bytes[orphans]])
    phase = gm.phase if gm.phase is not None else np.zeros(len(ev), np.uint8)
    free_ev = np.full(len(ev), -1, np.int64)
    free_ev[al] = fr
    fi = free_ev[allocs]
    a_ph = np.concatenate([phase[allocs], np.zeros(len(orphans), np.uint8)])
    f_ph = np.concatenate([np.where(fi >= 0, phase[np.maximum(fi, 0)], 0), phase[orphans]]).astype(np.uint8)
    alive = (a_pos <= at) & (f_pos > at)
    before, after = a_pos < first, f_pos > last
    within = ~before & ~after
    cls = np.full(len(size), 5)  # other
    cls[before & after] = 0
    cls[~before & (a_ph == FORWARD) & (f_ph == BACKWARD) & within] = 1
    cls[~before & (a_ph == BACKWARD) & after] = 2
    cls[~before & (a_ph == OPTIMIZER) & (f_pos == big)] = 3
    cls[~before & within & (a_ph == f_ph) & (a_ph != UNMAPPED) & (cls == 5)] = 4
    by = np.bincount(cls[alive], weights=size[alive], minlength=6).astype(np.int64)
    # what was allocated before the trace and never freed in it: persistent (recorded where the totals say it)
    by[0] += max(0, dm.before_bytes - int((-ev.bytes[orphans]).sum()))
    parts = [MemoryPart(PARTS[i], int(by[i]), _RULES[PARTS[i]]) for i in range(6) if by[i]]
    res = int(ev.total_reserved[dm.event[at]]) if at >= 0 else -1
    if res >= 0:
        level = int(dm.allocated_bytes[at]) if at >= 0 else dm.before_bytes
        parts.append(MemoryPart("allocator slack", max(0, res - level), "recorded: Total Reserved - Total Allocated at the peak"))
    return parts


def _steps(dm: DeviceMemory, gm) -> list[MemoryStep]:
    out = []
    for s, name in enumerate(gm.step_names):
        at = np.flatnonzero(gm.step[dm.event] == s)
        if not len(at):
            continue
        before = int(dm.allocated_bytes[at[0] - 1]) if at[0] > 0 else dm.before_bytes
        j = int(np.argmax(dm.allocated_bytes[at]))
        peak_at = int(at[j]) if int(dm.allocated_bytes[at[j]]) >= before else int(at[0]) - 1
        res = gm.events.total_reserved[dm.event[at]]
        out.append(MemoryStep(name, max(before, int(dm.allocated_bytes[at].max())), int(res.max()) if (res >= 0).all() else -1,
                              step_parts(dm, gm, s, peak_at)))
    return out


def _curves(gm, t: np.ndarray) -> list[DeviceMemory]:
    ev = gm.events
    out = []
    for d in ev.devices():
        k = np.flatnonzero(ev.device == d)  # recorded order
        before, exact = _before(ev, k)
        o = k[np.lexsort((np.arange(len(k)), t[k]))]  # replayed order, ties: recorded
        csum = np.cumsum(ev.bytes[o])
        if not exact:  # the lower bound keeps the replayed curve at or above zero too (issue 32's step fix, merged beside)
            before = max(before, -int(csum.min()))
        level = before + csum
        res = ev.total_reserved[o]
        steps = []
        for s, name in enumerate(gm.step_names):
            at = np.flatnonzero(gm.step[o] == s)
            if not len(at):
                continue
            start_level = int(level[at[0] - 1]) if at[0] > 0 else before
            r = res[at]
            steps.append(StepPeak(name, max(start_level, int(level[at].max())), int(r.max()) if (r >= 0).all() else -1))
        out.append(DeviceMemory(
            d, t[o], level, o, before, exact, max(before, int(level.max())),
            int(res.max()) if (res >= 0).all() else -1, steps, gm.step[o]))
    return out


def recorded_peaks(graph) -> dict[int, tuple[int, list[int]]]:
    """Per device with recorded totals: (peak ``Total Allocated`` of the window, per step the peak
    over the step's events and the level before its first one), from the totals alone."""
    gm = graph.memory
    out = {}
    if gm is None:
        return out
    ev = gm.events
    for d in ev.devices():
        k = np.flatnonzero(ev.device == d)
        tot = ev.total_allocated[k]
        if not len(k) or (tot < 0).any():
            continue
        first = int(tot[0] - ev.bytes[k[0]])
        steps = []
        for s in range(len(gm.step_names)):
            at = np.flatnonzero(gm.step[k] == s)
            if len(at):
                steps.append(max(int(tot[at[0]] - ev.bytes[k[at[0]]]), int(tot[at].max())))
        out[d] = (max(first, int(tot.max())), steps)
    return out


def hold_thread_order(t, pid, tid):
    """The end of ``event_times`` at commit 4db9d68 (the loop over threads), on bare arrays."""
    for p, q in np.unique(np.stack([pid, tid], 1), axis=0).tolist():
        k = np.flatnonzero((pid == p) & (tid == q))
        t[k] = np.maximum.accumulate(t[k])
    return t
