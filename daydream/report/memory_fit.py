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
from ..simulate.memory_replay import DeviceMemory, replay_memory, step_groups
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
    order, from the step's first position - 1 to its last; -1: before the window), by the rules of
    ``_RULES``; [] without addresses. One step of :func:`steps_parts`; IndexError where ``s`` has
    no events on the device."""
    g = step_groups(dm.step_of, len(gm.step_names))
    i = int(np.flatnonzero(g.step == s)[0])
    return steps_parts(dm, gm, g.first[i:i + 1], g.last[i:i + 1], np.array([peak_at], np.int64))[0]


def _blocks(dm: DeviceMemory, gm):
    """The device's blocks (every allocation, freed or not, and every free without its allocation,
    made before the trace): positions in ``dm``'s replayed order of the allocation (-1: before the
    trace) and of the free (int64 max: never freed), bytes, phases of both, and the bytes of the
    orphan frees; None without addresses."""
    ev = gm.events
    k = np.flatnonzero(ev.device == dm.device)
    if not len(k) or (ev.addr[k] < 0).all():
        return None
    pos = np.full(len(ev), -1, np.int64)
    pos[dm.event] = np.arange(len(dm.event))
    al, fr = block_pairs(ev, k)
    big = np.iinfo(np.int64).max
    free_of = np.full(len(ev), big, np.int64)
    free_of[al] = pos[fr]
    allocs = k[ev.bytes[k] > 0]
    paired_free = np.zeros(len(ev), bool)
    paired_free[fr] = True
    orphans = k[(ev.bytes[k] < 0) & ~paired_free[k]]
    a_pos = np.concatenate([pos[allocs], np.full(len(orphans), -1, np.int64)])
    f_pos = np.concatenate([free_of[allocs], pos[orphans]])
    size = np.concatenate([ev.bytes[allocs], -ev.bytes[orphans]]).astype(np.int64)
    phase = gm.phase if gm.phase is not None else np.zeros(len(ev), np.uint8)
    free_ev = np.full(len(ev), -1, np.int64)
    free_ev[al] = fr
    fi = free_ev[allocs]
    a_ph = np.concatenate([phase[allocs], np.zeros(len(orphans), np.uint8)])
    f_ph = np.concatenate([np.where(fi >= 0, phase[np.maximum(fi, 0)], 0), phase[orphans]]).astype(np.uint8)
    return a_pos, f_pos, size, a_ph, f_ph, int((-ev.bytes[orphans]).sum())


def steps_parts(dm: DeviceMemory, gm, first: np.ndarray, last: np.ndarray, peak_at: np.ndarray) -> list[list[MemoryPart]]:
    """Per step (its first and last position in ``dm``'s replayed order and the position of its
    peak, from ``first - 1`` to ``last``, -1: before the window; int64 arrays of shape (S,)), what
    its memory is at the peak by the rules of ``_RULES`` (the parts of nonzero bytes, then the
    allocator slack where recorded); [] per step without addresses.

    Linear in blocks + steps: a block alive at the peak ``at`` (allocated at or before it, freed
    after it) was allocated in the step (``first <= a <= at``: classified one by one, among the
    blocks allocated within ``[first, last]``, found by ``searchsorted`` on the allocation
    positions) or before it (``a < first``: "persistent" if freed after ``last``, else "other"),
    whose bytes come from prefix sums: the blocks with ``a < first`` and ``f > y`` (``y >= first
    - 1``) are those with ``a < f`` and ``a < first``, less those with ``f <= y``, plus those with
    ``a >= first`` and ``f <= y`` (allocated within the step's range: counted among its blocks); a
    block freed before its allocation (a what-if's reordering) is never alive before ``first``."""
    ev = gm.events
    S = len(first)
    blocks = _blocks(dm, gm)
    if blocks is None:
        return [[] for _ in range(S)]
    a_pos, f_pos, size, a_ph, f_ph, orphan_bytes = blocks
    big = np.iinfo(np.int64).max
    at = np.maximum(peak_at, first - 1)
    ob = np.argsort(a_pos, kind="stable")
    A, F, Z, AP, FP = a_pos[ob], f_pos[ob], size[ob], a_ph[ob], f_ph[ob]
    normal = A < F
    zn = np.where(normal, Z, 0)
    a_sum = np.r_[0, np.cumsum(zn)][np.searchsorted(A, first, "left")]  # normal blocks with a < first
    of = np.argsort(F[normal], kind="stable")
    f_sorted, f_cum = F[normal][of], np.r_[0, np.cumsum(Z[normal][of])]

    def freed_by(y):  # bytes of the normal blocks with f <= y
        return f_cum[np.searchsorted(f_sorted, y, "right")]

    # the blocks allocated within each step's range, all steps at once
    lo, hi = np.searchsorted(A, first, "left"), np.searchsorted(A, last, "right")
    cnt = np.maximum(hi - lo, 0)
    si = np.repeat(np.arange(S), cnt)
    idx = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt) + np.repeat(lo, cnt)
    a, f, z, ap, fp = A[idx], F[idx], Z[idx], AP[idx], FP[idx]
    at_e, last_e = at[si], last[si]
    alive = (a <= at_e) & (f > at_e)
    within = f <= last_e
    cls = np.full(len(idx), 5)  # other
    cls[(ap == FORWARD) & (fp == BACKWARD) & within] = 1
    cls[(ap == BACKWARD) & ~within] = 2
    cls[(ap == OPTIMIZER) & (f == big)] = 3
    cls[within & (ap == fp) & (ap != UNMAPPED) & (cls == 5)] = 4
    by = np.bincount(si[alive] * 6 + cls[alive], weights=z[alive], minlength=6 * S).astype(np.int64).reshape(S, 6)
    nz = np.where(normal[idx], z, 0)
    inner_at = np.bincount(si, weights=np.where(f <= at_e, nz, 0), minlength=S).astype(np.int64)
    inner_last = np.bincount(si, weights=np.where(within, nz, 0), minlength=S).astype(np.int64)
    held_last = a_sum - freed_by(last) + inner_last  # allocated before the step, freed after it
    held_at = a_sum - freed_by(at) + inner_at  # allocated before the step, alive at its peak
    by[:, 0] += held_last
    by[:, 5] += held_at - held_last
    # what was allocated before the trace and never freed in it: persistent (recorded where the totals say it)
    by[:, 0] += max(0, dm.before_bytes - orphan_bytes)
    out = []
    for i, t in enumerate(at.tolist()):
        parts = [MemoryPart(PARTS[c], int(by[i, c]), _RULES[PARTS[c]]) for c in range(6) if by[i, c]]
        res = int(ev.total_reserved[dm.event[t]]) if t >= 0 else -1
        if res >= 0:
            level = int(dm.allocated_bytes[t]) if t >= 0 else dm.before_bytes
            parts.append(MemoryPart("allocator slack", max(0, res - level), "recorded: Total Reserved - Total Allocated at the peak"))
        out.append(parts)
    return out


def _steps(dm: DeviceMemory, gm) -> list[MemoryStep]:
    g = step_groups(dm.step_of, len(gm.step_names))
    alloc = dm.allocated_bytes
    before = np.where(g.first > 0, alloc[np.maximum(g.first - 1, 0)], dm.before_bytes)
    top = g.max(alloc)
    peak_at = np.where(top >= before, g.argmax(alloc), g.first - 1)
    res = gm.events.total_reserved[dm.event]
    r_max, r_min = g.max(res), g.min(res)
    parts = steps_parts(dm, gm, g.first, g.last, peak_at)
    return [MemoryStep(gm.step_names[s], max(int(b), int(p)), int(rm) if rn >= 0 else -1, ps)
            for s, b, p, rm, rn, ps in zip(g.step.tolist(), before.tolist(), top.tolist(), r_max.tolist(), r_min.tolist(), parts)]


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
