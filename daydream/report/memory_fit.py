"""Memory in the report: peaks per device and step, what a step's memory is, and whether it fits.

From the memory replay (:mod:`daydream.simulate.memory_replay`) of a timeline (the baseline's or a
prediction's): per device, the peak allocated bytes (an "at least" where the trace does not record
what was allocated before it), the peak reserved where recorded, per ``ProfilerStep`` the peak and
its parts (:func:`step_parts`), and the verdict against the device's capacity with a
fragmentation margin (:func:`fit`). ``docs/memory.md`` states every rule.
"""

from __future__ import annotations

import numpy as np

from ..costmodel.gpu_memory import GIB, device_capacity
from ..graph.memory_part import DEFAULT_FRAGMENTATION, block_pairs
from ..mapping.rules import BACKWARD, FORWARD, OPTIMIZER, UNMAPPED
from ..simulate.memory_replay import DeviceMemory, replay_memory
from .report_model import DeviceMemoryStats, MemoryCurve, MemoryPart, MemoryStep, MemorySummary

PARTS = ("parameters and persistent", "activations", "gradients", "optimizer state", "temporaries", "other")
_RULES = {
    "parameters and persistent": "inferred: allocated before the step (or before the trace) and alive after it",
    "activations": "inferred: allocated in the forward pass and freed in the backward pass of the step",
    "gradients": "inferred: allocated in the backward pass and alive at the step's end",
    "optimizer state": "inferred: allocated in the optimizer step and never freed in the trace",
    "temporaries": "inferred: allocated and freed within one (mapped) phase of the step",
    "other": "inferred: none of the rules above (e.g. allocated before the step and freed in it)",
}


def _gib(b: int) -> str:
    g = b / GIB
    return f"{g:.2f}" if g < 10 else f"{g:.1f}"


def fit(dm: DeviceMemory, gm, devices: list) -> tuple[float, str, int, int, str, bool | None, str]:
    """(fragmentation, its source, needs_bytes, capacity, its source, fits, verdict) of one device.

    The margin is the trace's own ratio peak ``Total Reserved`` / peak ``Total Allocated`` of the
    device where it records them (what the caching allocator held for what was in use), else
    :data:`DEFAULT_FRAGMENTATION`; what the step needs is its peak allocated times the margin."""
    ev = gm.events
    k = ev.device == dm.device
    ta, tr = ev.total_allocated[k], ev.total_reserved[k]
    kept = (gm.fragmentation or {}).get(dm.device)
    if kept is not None:
        frag, src = kept, "the trace (peak reserved / peak allocated of the recorded program)"
    elif len(ta) and (ta >= 0).all() and (tr >= 0).all() and ta.max() > 0 and tr.max() > 0:
        frag, src = max(1.0, float(tr.max()) / float(ta.max())), "the trace (peak reserved / peak allocated)"
    else:
        frag, src = DEFAULT_FRAGMENTATION, "default (median of the shared traces' recorded ratios)"
    needs = int(np.ceil(dm.peak_allocated_bytes * frag))
    least = "at least " if not dm.exact_before and not gm.not_lower_bound else ""
    if dm.device < 0:
        return frag, src, needs, -1, "", None, f"host memory: peak {least}{_gib(dm.peak_allocated_bytes)} GiB (not judged)"
    cap, cap_src = device_capacity(devices, dm.device)
    need = f"peak {least}{_gib(dm.peak_allocated_bytes)} GiB x {frag:.2f} margin = {_gib(needs)} GiB"
    if cap <= 0:
        return frag, src, needs, -1, "", None, f"{need} (capacity unknown)"
    if needs <= cap:
        return frag, src, needs, cap, cap_src, True, f"fits ({need} of {_gib(cap)} GiB)"
    return frag, src, needs, cap, cap_src, False, f"does not fit ({need} of {_gib(cap)} GiB)"


def step_parts(dm: DeviceMemory, gm, s: int, peak_at: int) -> list[MemoryPart]:
    """What the memory of step ``s`` is at its peak (position ``peak_at`` in ``dm``'s replayed
    order; -1: before the step's first event), by the rules of ``_RULES``; [] without addresses."""
    ev = gm.events
    k = np.flatnonzero(ev.device == dm.device)
    if not len(k) or (ev.addr[k] < 0).all():
        return []
    pos = np.full(len(ev), -1, np.int64)
    pos[dm.event] = np.arange(len(dm.event))
    in_step = np.flatnonzero(dm.step_of == s)
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
        at = np.flatnonzero(dm.step_of == s)
        if not len(at):
            continue
        before = int(dm.allocated_bytes[at[0] - 1]) if at[0] > 0 else dm.before_bytes
        j = int(np.argmax(dm.allocated_bytes[at]))
        peak_at = int(at[j]) if int(dm.allocated_bytes[at[j]]) >= before else int(at[0]) - 1
        res = gm.events.total_reserved[dm.event[at]]
        out.append(MemoryStep(name, max(before, int(dm.allocated_bytes[at].max())), int(res.max()) if (res >= 0).all() else -1,
                              step_parts(dm, gm, s, peak_at)))
    return out


#: buckets of consecutive events a device's curve is cut into for the report (each kept as its
#: lowest and highest level): a figure 438 px wide (``render.svg``) shows no more than ~400 columns
CURVE_BUCKETS = 400


def curve(dm: DeviceMemory, t0_ns: int) -> MemoryCurve:
    """``dm``'s allocated curve in at most ``2 x`` :data:`CURVE_BUCKETS` points (:class:`MemoryCurve`);
    times in ns from ``t0_ns``. Numpy over the events, no Python loop."""
    a, t = np.asarray(dm.allocated_bytes, np.int64), np.asarray(dm.ts_ns, np.int64) - int(t0_ns)
    n = len(a)
    if n <= 2 * CURVE_BUCKETS:
        return MemoryCurve(dm.device, t.tolist(), a.tolist())
    bucket = np.arange(n) * CURVE_BUCKETS // n  # consecutive events, equal counts
    o_lo, o_hi = np.lexsort((a, bucket)), np.lexsort((-a, bucket))
    first = np.searchsorted(bucket[o_lo], np.arange(CURVE_BUCKETS))  # bucket is sorted in both orders
    keep = np.unique(np.concatenate([o_lo[first], o_hi[first]]))  # indices, in event (time) order
    return MemoryCurve(dm.device, t[keep].tolist(), a[keep].tolist())


def memory_summary(graph, tl) -> MemorySummary | None:
    """The memory of ``graph`` replayed on ``tl`` (None when the trace has no allocator events)."""
    gm = graph.memory
    curves = replay_memory(graph, tl) if gm is not None else []
    if not curves:
        return None
    devs = []
    for dm in curves:
        frag, src, needs, cap, cap_src, fits, verdict = fit(dm, gm, list(graph.devices))
        if gm.not_modelled:  # a what-if whose memory change is not modelled: these are the baseline's events
            verdict = f"baseline's, not modelled by {', '.join(gm.not_modelled)}: {verdict}"
        devs.append(DeviceMemoryStats(
            dm.device, len(dm.event), dm.peak_allocated_bytes, not dm.exact_before and not gm.not_lower_bound,
            dm.peak_reserved_bytes, round(frag, 4), src, needs, cap, cap_src, fits, verdict, _steps(dm, gm)))
    gpu = [d for d in devs if d.device >= 0]
    line = "; ".join(f"GPU {d.device}: {d.verdict}" for d in gpu) if gpu else devs[0].verdict
    return MemorySummary(devs, line, gm.n_unanchored, [curve(dm, int(graph.t0_ns)) for dm in curves])
