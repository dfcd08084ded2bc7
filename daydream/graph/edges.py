"""Edge kinds and the replay rule of each, written once (``docs/model.md``).

Every edge of a :class:`~daydream.graph.TaskGraph` carries a kind. A kind's :class:`Rule` says
how the edge bounds its destination in a replay, and what a removal does to it; the fast replay,
the priority replay, the binding-edge records the critical path walks, the order checks and the
``remove`` primitive all read these rules and nothing else. Adding a dependency kind is one call
to :func:`register_kind` plus the builder stage that emits the edges.

A replay computes, for each task ``v`` (all times int64 ns)::

    base(v)  = max(t0, bound(e) for e in BASE edges into v)
    start(v) = max(base(v) + gap(v), bound(e) for e in START edges into v)
    end(v)   = max(start(v), bound(e) for e in END edges into v) + dur(v)

where ``bound(e) = (end or start of e.src, per the rule's anchor) + offset`` and the offset is
0, the trace's launch latency ``L`` or its GPU gap ``G``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np


class Phase(enum.IntEnum):
    """Which part of the destination's time an edge bounds."""

    BASE = 0  #: the point the CPU gap is counted from (thread order; a hand-over)
    START = 1  #: the start itself (launch, stream order, cross-stream producer)
    END = 2  #: the end: the task waits, then spends its own cost (blocking calls)


class Offset(enum.IntEnum):
    ZERO = 0
    L = 1  #: the trace's launch latency (``TaskGraph.launch_latency_ns``)
    G = 2  #: the trace's minimum gap between dependent GPU tasks (``TaskGraph.gpu_gap_ns``)
    LS = 3  #: ``L`` plus the trace's pageable staging latency ``S`` (``TaskGraph.staging_latency_ns``)


class Origin(enum.IntEnum):
    """Where an edge came from (reported: inferred edges are counted and shown)."""

    RECORDED = 0  #: read from the trace (order, correlation ids, synchronization records)
    INFERRED = 1  #: derived by a documented rule from timing and program structure
    INSERTED = 2  #: added by a transformation


@dataclass(frozen=True)
class Rule:
    """The replay and transformation rule of one edge kind.

    Attributes:
        name: short name (reports, timeline flows).
        phase: what the edge bounds (:class:`Phase`).
        anchor_end: the bound is the source's end (True) or its start (False).
        offset: added to the anchor (:class:`Offset`).
        cause: critical-path cause charged for the edge's offset or, for END edges, for the
            destination's own cost after the wait (``cpu``, ``gpu_compute``, ``launch``, ``sync``,
            ...; see :mod:`daydream.simulate.critical_path`).
        lane: a lane-order edge (thread or stream order): at most one into each task; ``remove``
            splices around removed tasks; a lane scheduled by priority ignores it.
        inherit: when the destination is removed, the edge passes to the destination's next kept
            task on its lane (a cross-stream wait holds for the first task launched after it).
        prefer: tie-break when several edges give the same bound (smaller wins).
        launch: the edge is a launch (call -> the GPU task it enqueued): ``TaskGraph.launch``.
        doc: one line for the model documentation.
    """

    name: str
    phase: Phase
    anchor_end: bool
    offset: Offset
    cause: str
    lane: bool = False
    inherit: bool = False
    prefer: int = 50
    launch: bool = False
    doc: str = ""


class EdgeKind(enum.IntEnum):
    """The edge kinds the builder emits; more can be registered (:func:`register_kind`)."""

    THREAD = 0
    STREAM = 1
    LAUNCH = 2
    WAIT = 3
    XSTREAM = 4
    HANDOVER = 5
    QUEUE = 6
    STAGED = 7
    GRAPH = 8


#: the rules, indexed by kind id (a list so registered kinds extend it)
RULES: dict[int, Rule] = {
    EdgeKind.THREAD: Rule("thread order", Phase.BASE, True, Offset.ZERO, "cpu", lane=True, prefer=0,
                          doc="a call starts its gap after the previous call on its thread ends"),
    EdgeKind.STREAM: Rule("stream order", Phase.START, True, Offset.G, "gpu_compute", lane=True, prefer=0,
                          doc="a GPU task starts G after the previous task on its stream (FIFO)"),
    EdgeKind.LAUNCH: Rule("launch", Phase.START, False, Offset.L, "launch", prefer=20, launch=True,
                          doc="a GPU task starts L after its launching call starts"),
    EdgeKind.WAIT: Rule("blocking wait", Phase.END, True, Offset.ZERO, "sync", prefer=0,
                        doc="a blocking call ends its own cost after the GPU task it waits for ends"),
    EdgeKind.XSTREAM: Rule("cross-stream wait", Phase.START, True, Offset.G, "gpu_compute", inherit=True, prefer=10,
                           doc="cudaEventRecord -> cudaStreamWaitEvent: producer end + G"),
    EdgeKind.HANDOVER: Rule("thread hand-over", Phase.BASE, True, Offset.ZERO, "cpu", inherit=True, prefer=5,
                            doc="a call's gap starts after the call on another thread it waits for ends"),
    EdgeKind.QUEUE: Rule("launch queue", Phase.END, True, Offset.ZERO, "launch", prefer=15,
                         doc="a launch returns its own cost after the task D places before its task on the stream ends"),
    EdgeKind.STAGED: Rule("staged copy launch", Phase.START, False, Offset.LS, "launch", prefer=20, launch=True,
                          doc="a pageable HtoD copy above the staging size starts L + S after its call starts"),
}

MAX_KINDS = 64


def register_kind(kind_id: int, rule: Rule) -> int:
    """Add an edge kind with its rule; returns ``kind_id``.

    Raises:
        ValueError: the id is taken by another rule or out of range.
    """
    if not 0 <= kind_id < MAX_KINDS:
        raise ValueError(f"edge kind id {kind_id} out of range [0, {MAX_KINDS})")
    if kind_id in RULES and RULES[kind_id] != rule:
        raise ValueError(f"edge kind id {kind_id} is taken by {RULES[kind_id].name!r}")
    RULES[kind_id] = rule
    return kind_id


register_kind(EdgeKind.GRAPH, Rule(
    "graph launch order", Phase.START, True, Offset.G, "gpu_compute", inherit=True, prefer=10,
    doc="a CUDA graph whose kernels run on streams of their own starts G after what its launch stream ran before "
        "it, and what the launch stream runs next starts G after the graph (graph/build/graph_launch.py)"))


def unregister_kind(kind_id: int) -> None:
    """Remove a registered kind (the built-in kinds cannot be removed)."""
    if kind_id in EdgeKind.__members__.values():
        raise ValueError("built-in edge kinds cannot be removed")
    RULES.pop(kind_id, None)


@dataclass(frozen=True)
class RuleArrays:
    """The rules as lookup arrays indexed by kind id (length ``MAX_KINDS``)."""

    phase: np.ndarray  #: uint8 Phase
    anchor_end: np.ndarray  #: bool
    offset: np.ndarray  #: uint8 Offset
    lane: np.ndarray  #: bool
    inherit: np.ndarray  #: bool
    prefer: np.ndarray  #: int16
    known: np.ndarray  #: bool: a rule exists
    launch: np.ndarray  #: bool: a launch edge

    def offset_ns(self, L: int, G: int, S: int = 0) -> np.ndarray:
        """Offset in ns of each kind for a graph with launch latency L, GPU gap G and pageable
        staging latency S."""
        return np.array([0, L, G, L + S], dtype=np.int64)[self.offset]

    def graph_offsets_ns(self, graph) -> np.ndarray:
        """:meth:`offset_ns` with ``graph``'s constants."""
        return self.offset_ns(int(graph.launch_latency_ns), int(graph.gpu_gap_ns), int(graph.staging_latency_ns))

    def edge_offsets_ns(self, graph) -> np.ndarray:
        """Offset in ns of each edge of ``graph`` (shape ``(m,)``): its kind's, and on an ``L + S``
        edge (a staged copy's launch) the copy's size-dependent staging time beyond ``S``
        (``TaskGraph.staging_extra_ns``: bytes / staging bandwidth, ``docs/model.md``)."""
        k = graph.edge_kind
        off = self.graph_offsets_ns(graph)[k]
        extra = graph.staging_extra_ns()
        if extra is None:
            return off
        ls = np.flatnonzero(self.offset[k] == Offset.LS)
        off = off.copy()
        off[ls] += extra[graph.edge_dst[ls]]
        return off


def rule_arrays() -> RuleArrays:
    """The current rules as arrays (cheap; rebuilt on every call so registered kinds count)."""
    ph = np.zeros(MAX_KINDS, np.uint8)
    an = np.zeros(MAX_KINDS, bool)
    of = np.zeros(MAX_KINDS, np.uint8)
    la = np.zeros(MAX_KINDS, bool)
    inh = np.zeros(MAX_KINDS, bool)
    pr = np.zeros(MAX_KINDS, np.int16)
    known = np.zeros(MAX_KINDS, bool)
    launch = np.zeros(MAX_KINDS, bool)
    for k, r in RULES.items():
        ph[k], an[k], of[k], la[k], inh[k], pr[k], known[k] = r.phase, r.anchor_end, r.offset, r.lane, r.inherit, r.prefer, True
        launch[k] = r.launch
    return RuleArrays(ph, an, of, la, inh, pr, known, launch)


def kind_name(kind_id: int) -> str:
    r = RULES.get(int(kind_id))
    return r.name if r is not None else f"kind {int(kind_id)}"
