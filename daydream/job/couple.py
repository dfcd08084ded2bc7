"""The coupled replay of a job: one graph per rank, a collective's transfer starting on every
rank when its last participant arrives.

Each rank's graph gets, per collective it takes part in, one zero-duration **peer-arrival pin**:
a CPU task alone on a new lane (``peers (job coupling)``), no in-edges, its gap set so it ends at
the collective's last arrival (on the rank's own clock), and an edge of the registered kind
:data:`PEER` (phase END, anchored at the pin's end, offset 0) into the collective's kernel, whose
duration becomes its transfer (:mod:`daydream.job.match`). The existing replay then gives, with no
change to it::

    end(collective on rank r) = max(start(collective on r), last arrival) + transfer_r

and the time it waited is the replay's ``blocked`` of the kernel (charged to the peers).

The last arrival depends on every rank's replay, and each replay on the arrivals, so the ranks
are replayed in rounds, the pins set from the previous round's arrivals, starting from "nobody
waits": every replayed time is a max-plus function of the pins, so the rounds rise monotonically
to the least fixed point, which is the simultaneous solution. A collective's arrival is final
once the arrivals it depends on are, so at most (collectives + 1) rounds change anything; one
more confirms. A job whose collectives wait on each other in a cycle (a deadlock) does not settle
and is refused.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..errors import DaydreamError
from ..graph import NODE_CPU, Offset, Origin, Phase, Rule, TaskGraph, register_kind
from ..simulate import Timeline, simulate
from .match import Matching

#: edge kind id of the peer-arrival edge (a registered kind; built-ins use 0-7, tests 40)
PEER_KIND = 24
PEER = register_kind(PEER_KIND, Rule(
    "peer arrival", Phase.END, True, Offset.ZERO, "communication", prefer=0,
    doc="a collective's transfer starts when its last participant (on any rank) has arrived"))

_PER_NODE = ("row", "node_kind", "lane", "name_id", "pid", "tid", "device", "stream", "correlation", "copy_kind", "dur_ns",
             "gap_ns", "rec_start_ns", "rec_end_ns", "position_ns")


@dataclass
class Coupled:
    """The coupled replay: per rank its graph with pins and its timeline; ``pin`` (R, K) node id
    of each collective's pin in its rank's graph (-1 not a participant); ``arrive_ns`` (K,) the
    replayed last arrival (lowest rank's clock); ``last`` (K,) its rank row; ``wait_ns`` (R, K)
    replayed waits; ``rounds``: replay rounds until settled."""

    graphs: list[TaskGraph]
    timelines: list[Timeline]
    pin: np.ndarray
    arrive_ns: np.ndarray
    last: np.ndarray
    wait_ns: np.ndarray
    rounds: int


def with_pins(graph: TaskGraph, nodes: np.ndarray, transfer_ns: np.ndarray, arrive_rec_ns: np.ndarray) -> tuple[TaskGraph, np.ndarray]:
    """``graph`` with each collective ``nodes[j]`` lasting ``transfer_ns[j]`` and waiting (PEER
    edge) for a new pin; pins recorded as instants at ``arrive_rec_ns[j]`` (this rank's clock).

    Returns:
        (new graph, pin node ids (len(nodes),)). Pins are visited first (no in-edges).
    """
    n, k = graph.n, len(nodes)
    idx = np.concatenate([np.arange(n), nodes]).astype(np.int64)
    kw = {f: getattr(graph, f)[idx] for f in _PER_NODE}
    pins = np.arange(n, n + k, dtype=np.int64)
    lane = len(graph.lanes)
    kw["node_kind"][pins] = NODE_CPU
    kw["lane"][pins] = lane
    kw["row"][pins] = -1
    kw["correlation"][pins] = -1
    kw["tid"][pins], kw["device"][pins], kw["stream"][pins], kw["copy_kind"][pins] = -1, -1, -1, 0
    kw["name_id"][pins] = len(graph.names)
    kw["dur_ns"][pins] = 0
    kw["gap_ns"][pins] = 0
    kw["rec_start_ns"][pins] = arrive_rec_ns
    kw["rec_end_ns"][pins] = arrive_rec_ns
    kw["dur_ns"][nodes] = transfer_ns
    kw["mapping"] = graph.mapping.take(idx) if graph.mapping is not None else None
    kw["priority"] = graph.priority[idx] if graph.priority is not None else None
    g = dataclasses.replace(
        graph, **kw, names=[*graph.names, "last peer arrives (job coupling)"],
        lanes=[*graph.lanes, "peers (job coupling)"], lane_is_gpu=np.append(graph.lane_is_gpu, False),
        lane_keys=np.vstack([graph.lane_keys.reshape(-1, 4), np.array([[0, -1, -1, 0]], np.int64)]),
        edge_src=np.concatenate([graph.edge_src, pins]), edge_dst=np.concatenate([graph.edge_dst, nodes]),
        edge_kind=np.concatenate([graph.edge_kind, np.full(k, PEER, np.uint8)]),
        edge_origin=np.concatenate([graph.edge_origin, np.full(k, Origin.INSERTED, np.uint8)]),
        order=np.concatenate([pins, graph.order]))
    return (g.known_valid() if graph.order_valid else g), pins


def couple(graphs: list[TaskGraph], m: Matching, transfer_ns: np.ndarray | None = None) -> Coupled:
    """Replay the ranks' ``graphs`` (rows of ``m``) coupled at their matched collectives.

    Args:
        graphs: one per rank row of ``m``, with the collectives at ``m.node`` (a what-if may have
            changed anything else; node ids of the collectives must be kept).
        transfer_ns: (R, K) transfer of each collective on each rank; default ``m.transfer_ns``.

    Raises:
        DaydreamError: the rounds do not settle (collectives waiting on each other in a cycle).
    """
    R, K = m.node.shape
    tr = m.transfer_ns if transfer_ns is None else transfer_ns
    member = m.member
    cg, pins = [], np.full((R, K), -1, np.int64)
    for i, g in enumerate(graphs):
        cols = np.nonzero(member[i])[0]
        g2, p = with_pins(g, m.node[i, cols], tr[i, cols], m.arrive_ns[cols] + m.offset_ns[i])
        cg.append(g2)
        pins[i, cols] = p
    neg = np.iinfo(np.int64).min // 4
    arrive = np.full(K, neg, np.int64)
    for rounds in range(1, K + 3):
        tls, starts = _round(cg, pins, m, arrive)
        new = np.where(member, starts, neg).max(axis=0) if K else arrive
        if np.array_equal(new, arrive):
            last = np.where(member, starts, neg).argmax(axis=0) if K else np.zeros(0, np.int64)
            wait = np.where(member, new[None, :] - starts, 0)
            return Coupled(cg, tls, pins, new, last, wait, rounds)
        arrive = new
    raise DaydreamError("the coupled replay did not settle: the ranks' collectives wait on each other in a cycle (a deadlock)")


def _round(cg: list[TaskGraph], pins: np.ndarray, m: Matching, arrive: np.ndarray) -> tuple[list[Timeline], np.ndarray]:
    """One round: pins set from ``arrive`` (lowest rank's clock), every rank replayed; returns the
    timelines and each rank's arrival (collective start, lowest rank's clock; (R, K))."""
    R, K = pins.shape
    starts = np.zeros((R, K), np.int64)
    tls = []
    for i, g in enumerate(cg):
        cols = np.nonzero(pins[i] >= 0)[0]
        g.gap_ns[pins[i, cols]] = np.maximum(arrive[cols] + m.offset_ns[i] - int(g.t0_ns), 0)
        tl = simulate(g)
        tls.append(tl)
        starts[i, cols] = tl.start_ns[m.node[i, cols]] - m.offset_ns[i]
    return tls, starts
