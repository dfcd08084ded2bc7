"""Memory replay: the allocator's events placed on a replayed timeline, and the allocated curve.

Each event of ``graph.memory`` (:mod:`daydream.graph.memory_part`) happens at its anchor CPU
task's replayed start plus its recorded offset; the events of one thread keep their recorded
order (a thread runs one op at a time: where a replay shortens a call, an event is held at the
replayed time of the one before it on its thread). The allocated bytes of a device after each
event are the level before the window plus the running sum of ``bytes`` in replayed order (ties:
recorded order). The level before the window is ``Total Allocated - Bytes`` of the device's first
event where the trace records totals (exact); without totals it is unknown, and the smallest level
that keeps the recorded curve and the replayed one at or above zero is used (what the process held
before the window does not depend on the order of the window's events): its peaks are then lower
bounds ("at least").
Reserved bytes (the caching allocator's pool) change only with the events that grew or released it:
each event carries its recorded ``Total Reserved``. ``docs/memory.md`` has the rules and limits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..graph.memory_part import anchor_events
from ..graph.memory_part import level_before as _before
from ..graph.host_clock import clock_of
from ..graph.model import NODE_CPU
from ..graph.range_timeline import thread_key
from ..graph.steps import profiler_steps
from .carry import boundaries


@dataclass(frozen=True)
class StepPeak:
    """Peak bytes of one ``ProfilerStep#N`` on one device (reserved: -1 where not recorded)."""

    step: str
    allocated_bytes: int
    reserved_bytes: int = -1


@dataclass(frozen=True)
class DeviceMemory:
    """One device's allocated curve and peaks (device -1: host memory).

    ``ts_ns``/``allocated_bytes``: per event in replayed order, its time and the bytes allocated
    after it; ``event``: index of each into ``graph.memory.events``. ``before_bytes``: allocated
    before the window (``exact_before``: recovered from the recorded totals; else a lower bound and
    every peak is "at least"). Peaks include ``before_bytes``.
    """

    device: int
    ts_ns: np.ndarray
    allocated_bytes: np.ndarray
    event: np.ndarray
    before_bytes: int
    exact_before: bool
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    steps: list[StepPeak] = field(default_factory=list)
    #: int32 per event (replayed order): index into ``graph.memory.step_names`` of the
    #: ``ProfilerStep`` whose (replayed) interval holds the event's (replayed) time, -1 none
    step_of: np.ndarray | None = None


@dataclass(frozen=True)
class StepGroups:
    """The positions of a sequence (e.g. a device's events in replayed order) grouped by step, for
    per-step reductions in one pass (no loop over steps doing whole-sequence work).

    ``step``: the steps that have positions (ascending; int64, shape (S,)); ``first``/``last``: each
    one's smallest and largest position; ``order``: all grouped positions, step by step, ascending
    within a step (shape (P,)); ``starts``: where each step's run begins in ``order`` (shape (S,))."""

    step: np.ndarray
    first: np.ndarray
    last: np.ndarray
    order: np.ndarray
    starts: np.ndarray

    def max(self, values: np.ndarray) -> np.ndarray:
        """Per step, the largest of ``values`` (indexed by position) over its positions (shape (S,))."""
        return np.maximum.reduceat(values[self.order], self.starts) if len(self.starts) else values[:0]

    def min(self, values: np.ndarray) -> np.ndarray:
        """Per step, the smallest of ``values`` over its positions (shape (S,))."""
        return np.minimum.reduceat(values[self.order], self.starts) if len(self.starts) else values[:0]

    def argmax(self, values: np.ndarray) -> np.ndarray:
        """Per step, the first position (smallest) where ``values`` reaches the step's largest, as
        ``np.argmax`` over the step's positions in ascending order picks it (int64, shape (S,))."""
        if not len(self.starts):
            return np.zeros(0, np.int64)
        v = values[self.order]
        top = np.repeat(self.max(values), np.diff(np.r_[self.starts, len(self.order)]))
        return np.minimum.reduceat(np.where(v == top, self.order, np.iinfo(np.int64).max), self.starts)


def step_groups(step_of: np.ndarray, n_steps: int) -> StepGroups:
    """:class:`StepGroups` of ``step_of`` (per position, the step index; -1 or >= ``n_steps``: none)."""
    pos = np.flatnonzero((step_of >= 0) & (step_of < n_steps))
    order = pos[np.argsort(step_of[pos], kind="stable")].astype(np.int64)
    st = step_of[order].astype(np.int64)
    starts = np.flatnonzero(np.r_[True, st[1:] != st[:-1]]) if len(st) else np.zeros(0, np.int64)
    ends = np.r_[starts[1:], len(order)] - 1
    return StepGroups(st[starts], order[starts], order[ends] if len(order) else np.zeros(0, np.int64), order, starts)


def event_times(graph, timeline) -> np.ndarray:
    """int64 replayed time of each memory event of ``graph`` on ``timeline`` (see module docstring)."""
    gm = graph.memory
    ev = gm.events
    t = gm.offset_ns + gm.t0_ns  # unanchored: recorded time
    cpu = np.flatnonzero((graph.node_kind == NODE_CPU) & (graph.row != -1))  # rows < -1: inserted tasks given an identity
    rows = graph.row[cpu]
    by_row = np.argsort(rows, kind="stable")
    anchored = gm.anchor_row != -1
    j = np.searchsorted(rows[by_row], gm.anchor_row)
    j = np.minimum(j, max(len(rows) - 1, 0))
    found = anchored & (len(rows) > 0) & (rows[by_row][j] == gm.anchor_row) if len(rows) else np.zeros(len(ev), bool)
    node = cpu[by_row[j]] if len(rows) else np.zeros(len(ev), np.int64)
    off = _host_offsets(graph, ev, node, gm.offset_ns, gm.at_end, found)
    t = np.where(found, np.where(gm.at_end, timeline.end_ns[node], timeline.start_ns[node]) + off, t)
    lost = np.flatnonzero(anchored & ~found)  # anchor removed by a transformation: the same rule, survivors
    if len(lost):
        rec = cpu[graph.row[cpu] >= 0]
        a, off, end = anchor_events(ev.ts_ns[lost], ev.pid[lost], ev.tid[lost], graph.pid[rec], graph.tid[rec],
                                    graph.rec_start_ns[rec], graph.rec_end_ns[rec], rec)
        a0 = np.maximum(a, 0)
        off = _host_offsets(graph, ev, a0, off, end, a >= 0, ts=ev.ts_ns[lost], pid=ev.pid[lost], tid=ev.tid[lost])
        t[lost] = np.where(a >= 0, np.where(end, timeline.end_ns[a0], timeline.start_ns[a0]) + off, t[lost])
    # one thread, one op at a time: the recorded order of a thread's events is kept
    return hold_thread_order(t, ev.pid, ev.tid)


def hold_thread_order(t: np.ndarray, pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """``t`` (int64 ns, per event in recorded order) with each event of a thread (``pid``, ``tid``)
    held at or after the one before it on that thread (a running maximum per thread; in place, and
    returned). The threads are grouped by one stable sort (a 2-column ``np.unique(axis=0)`` and a
    mask per thread cost more than the rest of the replay on big traces)."""
    o = np.lexsort((tid, pid))  # stable: a thread's events stay in recorded order
    p, q = pid[o], tid[o]
    cut = np.flatnonzero(np.r_[True, (p[1:] != p[:-1]) | (q[1:] != q[:-1]), True]) if len(o) else np.zeros(1, np.int64)
    for lo, hi in zip(cut[:-1].tolist(), cut[1:].tolist()):  # one step per thread, array work inside
        k = o[lo:hi]
        t[k] = np.maximum.accumulate(t[k])
    return t


def _host_offsets(graph, ev, node, offset, at_end, ok, *, ts=None, pid=None, tid=None) -> np.ndarray:
    """The offsets (int64 ns) of events from their anchors' replayed start (or end, ``at_end``) as
    the what-ifs scaled the host time between them (``TaskGraph.host_scales``, through
    :func:`daydream.graph.host_clock.clock_of`): an allocation made 2 us of host work before its call
    is made 1 us before it where ``scale-cpu`` halved that work (emulator property,
    ``tests/test_memory_properties.py``). The recorded offsets where no what-if scaled host time."""
    if not graph.host_scales or not ok.any():
        return offset
    ts = ev.ts_ns if ts is None else ts
    pid = ev.pid if pid is None else pid
    tid = ev.tid if tid is None else tid
    out = offset.copy()
    k = np.flatnonzero(ok)
    n = node[k]
    key = thread_key(pid[k], tid[k])
    end = at_end[k]
    a = np.where(end, graph.rec_end_ns[n], np.minimum(ts[k], graph.rec_start_ns[n]))
    b = np.where(end, np.maximum(ts[k], graph.rec_end_ns[n]), graph.rec_start_ns[n])
    now = clock_of(graph).now(key, a, b)
    # only offsets that are still the recorded distance (a what-if that placed an event itself, e.g.
    # fusion at its fused call, or activation-checkpointing in a recompute, keeps its placement)
    recorded = np.where(end, offset[k] == ts[k] - graph.rec_end_ns[n], offset[k] == ts[k] - graph.rec_start_ns[n])
    out[k] = np.where(recorded, np.where(end, now, -now), offset[k])
    return out


def replay_memory(graph, timeline) -> list[DeviceMemory]:
    """Per device (ascending, -1 the host first), the allocated curve and peaks of ``graph``'s
    memory events on ``timeline``; [] when the graph has none. Per-step peaks per ``ProfilerStep``."""
    gm = graph.memory
    if gm is None or not len(gm):
        return []
    t = event_times(graph, timeline)
    return _curves(gm, t, _step_of(gm, t, step_intervals(graph, timeline)))


def step_intervals(graph, timeline) -> tuple[np.ndarray, np.ndarray]:
    """(start_ns, end_ns), int64 shape (len(graph.memory.step_names),): each ``ProfilerStep#N``
    CPU range as replayed on ``timeline`` (:func:`daydream.simulate.carry.boundaries`, the rule
    every CPU range and the report's step windows move by: a boundary keeps its share of the CPU
    gap before the next call of its thread, or its distance to the thread's last call's end); the
    recorded interval on a thread without API calls in the graph."""
    steps = profiler_steps(graph.table)
    s = np.array([x[1] for x in steps], np.int64)
    e = np.array([x[2] for x in steps], np.int64)
    if not len(steps):
        return s, e
    key = thread_key(np.array([x[3] for x in steps], np.int64), np.array([x[4] for x in steps], np.int64))
    cpu = np.flatnonzero(graph.node_kind == NODE_CPU)
    cpu_key = thread_key(graph.pid[cpu], graph.tid[cpu])
    for k in np.unique(key).tolist():  # the steps' threads: one or a few
        nodes = cpu[cpu_key == k]
        if not len(nodes):
            continue
        nodes = nodes[np.argsort(graph.rec_start_ns[nodes], kind="stable")]
        i = np.flatnonzero(key == k)
        b = boundaries(graph, timeline, nodes, np.concatenate([s[i], e[i]]),
                       ends=np.concatenate([np.zeros(len(i), bool), np.ones(len(i), bool)]))
        s[i], e[i] = b[:len(i)], np.maximum(b[len(i):], b[:len(i)])
    return s, e


def _step_of(gm, t: np.ndarray, windows: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """int32 per event: the step whose interval ``[start, end)`` holds time ``t`` (-1 none; where
    intervals overlap, the later step), as the build assigns recorded times
    (:func:`daydream.graph.memory_part.capture_memory`)."""
    step = np.full(len(t), -1, np.int32)
    for i, (s, e) in enumerate(zip(*windows)):
        if i < len(gm.step_names):
            step[(t >= s) & (t < e)] = i
    return step


def recorded_memory(graph) -> list[DeviceMemory]:
    """:func:`replay_memory` on the recorded times (the trace's own curve; with totals, its levels
    are the recorded ``Total Allocated``)."""
    gm = graph.memory
    if gm is None or not len(gm):
        return []
    return _curves(gm, gm.events.ts_ns, gm.step)


def _curves(gm, t: np.ndarray, step_of: np.ndarray) -> list[DeviceMemory]:
    ev = gm.events
    out = []
    for d in ev.devices():
        k = np.flatnonzero(ev.device == d)  # recorded order
        before, exact = _before(ev, k)
        o = k[np.lexsort((np.arange(len(k)), t[k]))]  # replayed order, ties: recorded
        csum = np.cumsum(ev.bytes[o])
        if not exact:  # a lower bound: what keeps the recorded curve and this one at or above zero
            before = max(before, -int(csum.min()))
        level = before + csum
        res = ev.total_reserved[o]
        so = step_of[o]
        g = step_groups(so, len(gm.step_names))
        start_level = np.where(g.first > 0, level[np.maximum(g.first - 1, 0)], before)
        peak = g.max(level)
        r_max, r_min = g.max(res), g.min(res)
        steps = [StepPeak(gm.step_names[s], max(int(b), int(p)), int(rm) if rn >= 0 else -1)
                 for s, b, p, rm, rn in zip(g.step.tolist(), start_level.tolist(), peak.tolist(), r_max.tolist(), r_min.tolist())]
        out.append(DeviceMemory(
            d, t[o], level, o, before, exact, max(before, int(level.max())),
            int(res.max()) if (res >= 0).all() else -1, steps, so))
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
        g = step_groups(gm.step[k], len(gm.step_names))
        steps = np.maximum(tot[g.first] - ev.bytes[k[g.first]], g.max(tot)).tolist()
        out[d] = (max(first, int(tot.max())), steps)
    return out
