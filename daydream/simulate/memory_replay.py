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
    for p, q in np.unique(np.stack([ev.pid, ev.tid], 1), axis=0).tolist():
        k = np.flatnonzero((ev.pid == p) & (ev.tid == q))
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
        steps = []
        so = step_of[o]
        for s, name in enumerate(gm.step_names):
            at = np.flatnonzero(so == s)
            if not len(at):
                continue
            start_level = int(level[at[0] - 1]) if at[0] > 0 else before
            r = res[at]
            steps.append(StepPeak(name, max(start_level, int(level[at].max())), int(r.max()) if (r >= 0).all() else -1))
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
        steps = []
        for s in range(len(gm.step_names)):
            at = np.flatnonzero(gm.step[k] == s)
            if len(at):
                steps.append(max(int(tot[at[0]] - ev.bytes[k[at[0]]]), int(tot[at].max())))
        out[d] = (max(first, int(tot.max())), steps)
    return out
