"""The allocator's events captured into the graph: each one anchored to a CPU task of its thread.

The caching allocator runs on the CPU, inside the framework op that allocates or frees, between
the runtime calls that are the graph's CPU tasks. An event is anchored to the **next CPU task of
its (pid, tid) lane starting at or after its timestamp**, with its recorded offset from that task's
start (negative: it happened in the CPU gap before the task); an event after the start of the last
task of its lane is anchored to that task's end (it happened in the host work after it), and one on a thread without CPU tasks is
not anchored (it keeps its recorded time). A replay then places each event at its anchor's
replayed start plus its offset (:mod:`daydream.simulate.memory_replay`). Anchors are table rows
(stable through every transformation, as ``TaskGraph.path_rows``). Captured once, at the build:
nothing after the build reads the table (``docs/memory.md``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..events.memory import MemoryEvents
from ._arrays import count
from .steps import profiler_steps

NODE_CPU = 0  # (model.NODE_CPU: the graph's CPU tasks; model imports this module)

#: Reserved / allocated margin where the trace records no reserve: the median of the recorded
#: ratios (peak Total Reserved / peak Total Allocated of the GPU) over the four shared traces that
#: record them: 1.20 (H100 BERT), 1.33 (H100 OWLv2), 1.53 (MI300 BERT), 1.93 (df_index_resolver).
DEFAULT_FRAGMENTATION = 1.43


@dataclass(frozen=True)
class GraphMemory:
    """The memory events of a graph, in recorded order (the table's: by time, then the allocator's
    index). ``events``: the recorded columns; ``anchor_row``: int64 table row of each event's
    anchor CPU task (-1: none, its thread has no CPU task; below -1: a task inserted by a what-if
    that gave it that row, e.g. a recomputed call of ``activation-checkpointing``); ``offset_ns``: int64 event time minus
    the anchor's recorded start, or its end where ``at_end`` (the event follows the thread's last
    task; for an unanchored event: minus ``t0_ns``); ``step``: int32 index
    into ``step_names`` of the ``ProfilerStep#N`` whose recorded interval holds the event (-1 none);
    ``phase``: see below."""

    events: MemoryEvents
    anchor_row: np.ndarray
    offset_ns: np.ndarray
    at_end: np.ndarray
    step: np.ndarray
    step_names: tuple[str, ...]
    t0_ns: int
    #: uint8 mapped phase (``mapping.rules.PHASES`` code) of each event: its anchor's (the framework
    #: op that allocates is the one whose call comes next; not the CPU gap's, whose phase is that of
    #: where the gap began); 0 unmapped or unanchored
    phase: np.ndarray | None = None
    #: per device, the reserve / allocated margin of the recorded program, kept by a what-if that
    #: changes what is allocated (its own reserve is not known: its events carry no ``Total
    #: Reserved``); None: read the margin from the events (``report/memory_fit.fit``)
    fragmentation: dict | None = None
    #: what-ifs whose memory change is not modelled on these events (cuda-graphs' pool without
    #: addresses): the memory is the baseline's, and a prediction's verdict says so
    not_modelled: tuple[str, ...] = ()
    #: the peak is an estimate, not a lower bound, though the level before the window is not
    #: recorded (sharding without totals or addresses: unsharded state kept plus gathered units)
    not_lower_bound: bool = False

    def __len__(self) -> int:
        return len(self.events)

    @property
    def n_unanchored(self) -> int:
        return int(np.count_nonzero(self.anchor_row == -1))


def anchor_events(ts, pid, tid, node_pid, node_tid, node_start, node_end, node_id) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(anchor, offset_ns, at_end) of events (``ts``, ``pid``, ``tid``) among CPU tasks (``node_*``:
    their thread, recorded interval, and the id returned for each): the first task of the event's
    thread starting at or after ``ts``, offset from its start; after the thread's last task's start,
    that last task, offset from its end (``at_end``: the event is in the host work after it); -1 and
    ``ts`` where the thread has no task. Python work per distinct thread, numpy per event."""
    anchor = np.full(len(ts), -1, np.int64)
    offset = np.asarray(ts, np.int64).copy()
    at_end = np.zeros(len(ts), bool)
    if not len(ts) or not len(node_start):
        return anchor, offset, at_end
    keys = np.unique(np.stack([pid, tid], 1), axis=0)
    for p, t in keys.tolist():
        ev = np.flatnonzero((pid == p) & (tid == t))
        nd = np.flatnonzero((node_pid == p) & (node_tid == t))
        if not len(nd):
            continue
        nd = nd[np.argsort(node_start[nd], kind="stable")]
        j = np.searchsorted(node_start[nd], ts[ev], side="left")
        last = j >= len(nd)
        j = np.minimum(j, len(nd) - 1)
        anchor[ev] = node_id[nd[j]]
        offset[ev] = ts[ev] - np.where(last, node_end[nd[j]], node_start[nd[j]])
        at_end[ev] = last
    return anchor, offset, at_end


def capture_memory(table, graph) -> GraphMemory | None:
    """The memory part of ``graph`` built from ``table`` (None when the table has no memory events)."""
    mem = getattr(table, "memory", None)
    if mem is None or not len(mem):
        return None
    cpu = np.flatnonzero((graph.node_kind == NODE_CPU) & (graph.row >= 0))
    node, offset, at_end = anchor_events(mem.ts_ns, mem.pid, mem.tid, graph.pid[cpu], graph.tid[cpu], graph.rec_start_ns[cpu],
                                         graph.rec_end_ns[cpu], cpu)
    free = node < 0
    anchor = np.where(free, -1, graph.row[np.maximum(node, 0)])
    phase = np.zeros(len(mem), np.uint8)  # UNMAPPED
    nm = graph.mapping
    if nm is not None and len(cpu):  # the anchor's phase: the op that allocates is the one that launches next
        phase = np.where(free, 0, nm.phase[np.maximum(node, 0)]).astype(np.uint8)
    offset[free] = mem.ts_ns[free] - graph.t0_ns
    steps = profiler_steps(table)
    step = np.full(len(mem), -1, np.int32)
    for i, (_, s, e, _, _) in enumerate(steps):  # a loop over steps (a handful), numpy per event
        step[(mem.ts_ns >= s) & (mem.ts_ns < e)] = i
    count(graph.counts, "memory event on a thread without CPU tasks (not anchored: kept at its recorded time)", free.sum())
    return GraphMemory(mem, anchor, offset, at_end, step, tuple(s[0] for s in steps), int(graph.t0_ns), phase)


def level_before(ev: MemoryEvents, k: np.ndarray) -> tuple[int, bool]:
    """(bytes allocated before the window, exact?) of the device events ``k`` (recorded order):
    ``Total Allocated - Bytes`` of the first event with totals (exact); without totals the
    smallest level that keeps the running sum at or above zero (a lower bound)."""
    if not len(k):  # a device the recorded program never allocated on (a what-if's new host buffers)
        return 0, True
    tot = ev.total_allocated[k]
    has = np.flatnonzero(tot >= 0)
    csum = np.cumsum(ev.bytes[k])
    if len(has):
        i = int(has[0])
        return int(tot[i] - csum[i]), True
    return max(0, -int(csum.min())), False


def block_pairs(ev: MemoryEvents, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(allocation, its free) event index pairs among events ``k`` (one device, recorded order):
    the next event at the same address is a free of the same size. Vectorized; events without an
    address pair with nothing."""
    k = k[ev.addr[k] >= 0]
    if len(k) < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    o = k[np.lexsort((k, ev.device[k], ev.addr[k]))]
    a, b = o[:-1], o[1:]
    ok = (ev.addr[a] == ev.addr[b]) & (ev.device[a] == ev.device[b]) & (ev.bytes[a] > 0) & (ev.bytes[b] == -ev.bytes[a])
    return a[ok], b[ok]


def without_events(gm: GraphMemory | None, drop: np.ndarray) -> GraphMemory | None:
    """``gm`` without the events ``drop`` (bool mask): a what-if that no longer allocates them.
    The level before the window is kept: each remaining event's recorded totals are lowered by
    the bytes of the dropped events before it on its device, so the replay's level before the
    window (``Total Allocated - Bytes`` of the first event) stays what it was."""
    if gm is None or not drop.any():
        return gm
    ev = gm.events
    cols = ev.columns()
    for d in np.unique(ev.device[drop]).tolist():
        on = ev.device == d
        before = np.cumsum(np.where(drop & on, ev.bytes, 0))
        ta = cols["total_allocated"]
        cols["total_allocated"] = np.where(on & (ta >= 0), ta - before, ta)
    keep = ~drop
    events = MemoryEvents.from_columns({c: a[keep] for c, a in cols.items()}, sort=False)
    return dataclasses.replace(gm, events=events, anchor_row=gm.anchor_row[keep], offset_ns=gm.offset_ns[keep],
                               at_end=gm.at_end[keep], step=gm.step[keep], phase=None if gm.phase is None else gm.phase[keep])


def recorded_margins(gm: GraphMemory) -> dict[int, float]:
    """Per device, the recorded program's reserve margin (peak ``Total Reserved`` / peak ``Total
    Allocated``, at least 1) where its events record both (kept by :func:`changed_events`)."""
    if gm.fragmentation:
        return dict(gm.fragmentation)
    ev = gm.events
    out = {}
    for d in ev.devices():
        k = ev.device == d
        ta, tr = ev.total_allocated[k], ev.total_reserved[k]
        if len(ta) and (ta >= 0).all() and (tr >= 0).all() and ta.max() > 0 and tr.max() > 0:
            out[int(d)] = max(1.0, float(tr.max()) / float(ta.max()))
    return out


def changed_events(gm: GraphMemory, cols: dict, anchor_row, offset_ns, at_end, step, phase, group, seq, *,
                   before_delta: dict | None = None, before: dict | None = None) -> GraphMemory:
    """``gm`` with the events of a changed program (a what-if that changes what is allocated):
    ``cols`` the :class:`MemoryEvents` columns of every event, ``ts_ns`` the recorded instant each
    stands for; the other arrays as :class:`GraphMemory`'s, one per event. The events are put in
    program order, (``ts_ns``, ``group``, ``seq``) ascending: at one instant a lower group first
    (what a what-if places before the recorded events of that instant), then ``seq``. Each
    device's level before the window stays the recorded one: ``Total Allocated`` is that level
    plus the running sum of ``Bytes`` (-1 where it is not known); ``Total Reserved`` is -1 (the
    changed program's reserve is not known), and the recorded margin is kept in ``fragmentation``.
    ``before_delta``: per device, bytes added to (negative: taken from) the level before the window
    (state a what-if holds from before the window, or shards: ``fsdp``/``zero``); applied where the
    level is recorded (exact), at most down to zero. ``before``: per device, the changed program's
    level before the window (bytes) where the what-if changes it (a shape what-if's parameters),
    replacing the recorded one before ``before_delta`` is added; used only where the recorded level
    is exact. Both keyword-only: one passed by position once landed on the other (a shape what-if's
    new level was added to the recorded one: model state doubled at factor 1)."""
    ev = gm.events
    o = np.lexsort((np.asarray(seq), np.asarray(group), cols["ts_ns"]))
    cols = {c: np.asarray(a)[o] for c, a in cols.items()}
    for d in np.unique(cols["device"]).tolist():
        on = cols["device"] == d
        lvl, exact = level_before(ev, np.flatnonzero(ev.device == d))
        lvl = int((before or {}).get(d, lvl))
        lvl = max(0, lvl + int((before_delta or {}).get(d, 0)))
        run = lvl + np.cumsum(np.where(on, cols["bytes"], 0))
        cols["total_allocated"] = np.where(on, run if exact else -1, cols["total_allocated"])
        cols["total_reserved"] = np.where(on, -1, cols["total_reserved"])
    return dataclasses.replace(gm, events=MemoryEvents.from_columns(cols, sort=False), anchor_row=np.asarray(anchor_row)[o],
                               offset_ns=np.asarray(offset_ns)[o], at_end=np.asarray(at_end, bool)[o], step=np.asarray(step)[o],
                               phase=np.asarray(phase, np.uint8)[o], fragmentation=recorded_margins(gm))
