"""Builder stage: cross-stream waits whose event the trace does not name (``docs/model.md``,
"Inferred cross-stream waits").

Kineto before its ``cuda_sync`` support, and Kineto on CUDA >= 12.9 (kineto#1552), records
``cudaStreamWaitEvent`` without saying which ``cudaEventRecord`` it binds to, and may leave the
record calls out. Such a wait gives no recorded edge (:func:`.waits.cross_stream_waits` counts
it). This stage infers the producer from the recorded timeline, and only where the timeline shows
a dependency that is tied to an unlinked wait call:

1. The *consumer* of an unlinked wait is the first GPU task launched after the wait on the
   waiting stream: the stream of the wait's sync record when it names one, else the stream the
   thread launches to next.
2. The consumer must start more than :func:`tolerance_ns` later than everything else known allows:
   its launch (+``L``), its stream predecessor (+``G``) and its recorded cross-stream producers
   (+``G``).
3. A *candidate* producer is a GPU task of the same process and device on another stream,
   launched before the (latest) wait tied to the consumer, that ended ``d`` before the
   consumer's start with ``G - tol <= d <= G + max(tol, L)`` (``tol`` = :func:`tolerance_ns`).
   A wait's own latency can exceed ``G`` (an NCCL kernel into the device-to-pageable copy that
   waits for it: 3-9 us on the DLRM traces, where G is 1.0-1.9 us and L 7-8 us); it is taken to
   be at most one launch latency beyond ``G`` (the GPU front end taking up a queued command).
4. Candidates on one stream are one: the one that ended last is the producer (the stream is FIFO;
   an earlier one would have held the consumer a whole task longer). A consumer with candidates
   on exactly one stream gets an ``XSTREAM`` edge of origin ``INFERRED`` from it; with
   candidates on several streams, none (counted as ambiguous): any of them could be the one
   whose wait latency held it. An edge whose ``d`` exceeds ``G + tol`` is counted apart (:data:`LATE`): the replay,
   with the edge's offset ``G``, starts that consumer ``d - G`` early.

Soundness (``tests/test_inferred_edges.py``, emulated programs whose waits take ``G + W``,
``0 <= W <= L``): the task that held a consumer ended ``G + W`` before its start, so it is a
candidate, and an edge is only made when it is the only one; no inferred edge is false, and
replay and predictions never run later than the emulator.

``L`` and ``G`` are measured before this stage and kept: the inference needs them, and tasks it
links were measured as idle (ready at launch) at worst, which the lower median of ``L`` and the
mean of ``G`` absorb.
"""

from __future__ import annotations

import numpy as np

from ...events.cuda_api import ApiRole
from .._arrays import count
from .tasks import Lanes, Nodes
from .waits import SyncInfo, WaitIndex, linked_waits

_NONE = np.zeros(0, np.int64)
_MIN = np.iinfo(np.int64).min

#: the tolerance is ``G`` divided by this (see :func:`tolerance_ns`)
TOLERANCE_DIV = 2

UNLINKED = "cudaStreamWaitEvent without a sync record naming its event (no cross-stream edge)"
INFERRED = "cross-stream wait inferred from timing (no event id in the trace)"
LATE = ("cross-stream wait inferred from timing whose producer ended more than G + G/2 before the "
        "waiting task started (the only task ending within G + L before it; replayed up to L early)")
AMBIGUOUS = ("cross-stream wait not inferred: tasks on several other streams end equally close to "
             "the waiting task's start (ambiguous)")
SAME_STREAM = ("cross-stream wait candidate left out for a later-ending candidate on its stream (the later one "
               "is the producer)")


#: the tolerance on a trace whose timestamps are whole microseconds (Kineto before 2.x, the DLRM
#: traces): a start and an end each rounded to the microsecond put a gap up to 1 us off
WHOLE_US_TOLERANCE_NS = 1_000


def tolerance_ns(G: int, whole_us: bool = False) -> int:
    """How far a recorded time may be from the model's: ``G // 2``, and at least
    :data:`WHOLE_US_TOLERANCE_NS` where the trace's timestamps are whole microseconds.

    ``G`` is the typical gap between dependent GPU tasks of the trace; half of it separates a
    producer that ended one gap before the consumer's start from tasks ending a gap earlier or
    later. An emulated trace (gaps exactly ``G``) needs no tolerance, and with ``G = 0`` none is
    given: only exact coincidences count. On whole-microsecond timestamps a wait recorded 0-1 us
    after its producer (``G`` about 1 us) was rejected by the lower bound ``G - G // 2``.
    """
    tol = max(int(G), 0) // TOLERANCE_DIV
    return max(tol, WHOLE_US_TOLERANCE_NS) if whole_us else tol


def whole_microseconds(rec_start: np.ndarray, rec_end: np.ndarray) -> bool:
    """Every recorded start and end (ns) is a whole microsecond (and there is at least one)."""
    return bool(len(rec_start)) and not (rec_start % 1000).any() and not (rec_end % 1000).any()


def unlinked_waits(role: np.ndarray, si: SyncInfo) -> np.ndarray:
    """CPU nodes of the ``cudaStreamWaitEvent`` calls :func:`.waits.cross_stream_waits` could not link."""
    return np.nonzero((role == ApiRole.STREAM_WAIT_EVENT) & ~linked_waits(si))[0]


def _consumers(ix: WaitIndex, si: SyncInfo, w: np.ndarray, launch: np.ndarray) -> np.ndarray:
    """Rule 1: the consumer GPU task of each wait call ``w`` (-1 none): the first task launched
    after it on the waiting stream. A task without a launching call in the trace is never one
    (launched before the window, it was launched before every call of the trace; it stands in its
    stream at the place of the launched task after it, which put it after the wait: on an
    emulated backlogged trace every wait took such a task and none was inferred): the first
    launched task after it on its stream is. ``launch``: per node, its launching call (-1 none)."""
    lane = ix.find_lane(ix.c_pid[w], si.device[w], si.stream[w])
    unknown = si.stream[w] < 0
    if unknown.any():
        lane[unknown] = ix.ffill_thread(ix.launched_lane, backwards=True)[w[unknown]]
    c = ix.first_after(lane, ix.c_start[w], ix.c_corr[w])
    bad = np.flatnonzero((c >= 0) & (launch[np.maximum(c, 0)] < 0))
    if not len(bad):
        return c
    at = np.full(len(launch), -1, np.int64)
    at[ix.g_nodes] = np.arange(len(ix.g_nodes))
    k = at[c[bad]]
    while len(bad):  # step along the stream (g_nodes is in stream order) to the next launched task
        k = k + 1
        gone = (k >= len(ix.g_nodes)) | (ix.g_lane[np.minimum(k, len(ix.g_nodes) - 1)] != ix.g_lane[k - 1])
        c[bad[gone]] = -1
        bad, k = bad[~gone], k[~gone]
        nxt = ix.g_nodes[k]
        done = launch[nxt] >= 0
        c[bad[done]] = nxt[done]
        bad, k = bad[~done], k[~done]
    return c


def unlinked_consumers(ix: WaitIndex, role, si: SyncInfo, launch: np.ndarray) -> np.ndarray:
    """The GPU tasks (nodes, sorted, unique) tied to an unlinked wait by rule 1: held by a
    producer the trace does not name, so no sample of ``L`` or ``G`` (``latency.py``)."""
    w = unlinked_waits(role, si)
    cons = _consumers(ix, si, w, launch) if len(w) else _NONE
    return np.unique(cons[cons >= 0]).astype(np.int64)


def _latest_wait(cons: np.ndarray, w: np.ndarray, ix: WaitIndex) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unique consumers, each with the latest wait call tied to it (its start and correlation id)."""
    o = np.lexsort((ix.c_corr[w], ix.c_start[w], cons))
    cons, w = cons[o], w[o]
    last = np.ones(len(cons), dtype=bool)
    last[:-1] = cons[1:] != cons[:-1]
    return cons[last], ix.c_start[w[last]], ix.c_corr[w[last]]


def _known_bound(c, nodes: Nodes, lanes: Lanes, rec_start, rec_end, xs, xd, L: int, G: int) -> np.ndarray:
    """Rule 2: the latest start the consumers' launch, stream predecessor and recorded producers allow."""
    ln = nodes.launch[c]
    b = np.where(ln >= 0, rec_start[np.maximum(ln, 0)] + L, _MIN)
    lp = lanes.lane_prev[c]
    b = np.maximum(b, np.where(lp >= 0, rec_end[np.maximum(lp, 0)] + G, _MIN))
    if len(xs):
        xpe = np.full(len(rec_end), _MIN, np.int64)
        np.maximum.at(xpe, xd, rec_end[xs] + G)
        b = np.maximum(b, xpe[c])
    return b


def _other_streams(ix: WaitIndex, lanes: Lanes, c: np.ndarray):
    """For each GPU lane (the few streams) with tasks: (the indices into the consumers ``c`` on
    another stream of its process and device, the lane's slice ``[a, b)`` of ``ix.g_nodes``, its
    GPU nodes in stream order)."""
    c_key = lanes.keys[lanes.lane[c]]
    for Lx in np.nonzero(lanes.is_gpu)[0].tolist():
        _, pid, dev, _ = lanes.keys[Lx].tolist()
        q = np.nonzero((c_key[:, 1] == pid) & (c_key[:, 2] == dev) & (lanes.lane[c] != Lx))[0]
        a, b = np.searchsorted(ix.g_lane, Lx, "left"), np.searchsorted(ix.g_lane, Lx, "right")  # grouped by lane
        if len(q) and a < b:
            yield q, a, b


def _candidates(ix: WaitIndex, lanes: Lanes, position, c, w_pos, w_corr, c_start, d_max, rec_end, G: int, tol: int):
    """Rule 3: (consumer index, producer node) pairs, over the few GPU lanes, with
    ``G - tol <= start - end <= d_max`` (per consumer)."""
    ci, pr = [_NONE], [_NONE]
    for q, a, b in _other_streams(ix, lanes, c):
        tl = ix.g_nodes[a:b]
        o = np.argsort(rec_end[tl], kind="stable")
        ends = rec_end[tl][o]
        lo = np.searchsorted(ends, c_start[q] - d_max[q], "left")
        hi = np.searchsorted(ends, c_start[q] - max(G - tol, 0), "right")
        cnt = np.maximum(hi - lo, 0)
        rep = np.repeat(q, cnt)
        k = np.repeat(lo, cnt) + (np.arange(cnt.sum()) - np.repeat(np.cumsum(cnt) - cnt, cnt))
        p = tl[o[k]]
        pos, pc = position[p], lanes.launch_corr[p]
        before = (pos < w_pos[rep]) | ((pos == w_pos[rep]) & (pc < w_corr[rep]))
        ci.append(rep[before])
        pr.append(p[before])
    return np.concatenate(ci), np.concatenate(pr)


def _choose(ci, pr, c_start, rec_end, G: int, tol: int, counts, lane=None) -> tuple[np.ndarray, np.ndarray]:
    """Rule 4: each consumer with candidates on exactly one stream gets the one of them that ended
    last; the others none (ambiguous). ``lane``: per node, its lane (None: every candidate on a
    stream of its own)."""
    if not len(ci):
        return _NONE, _NONE
    if lane is not None:  # one candidate per (consumer, stream): the latest-ending
        o = np.lexsort((rec_end[pr], lane[pr], ci))
        ci, pr = ci[o], pr[o]
        last = np.ones(len(ci), dtype=bool)
        last[:-1] = (ci[1:] != ci[:-1]) | (lane[pr[1:]] != lane[pr[:-1]])
        count(counts, SAME_STREAM, int((~last).sum()))
        ci, pr = ci[last], pr[last]
    o = np.lexsort((pr, ci))
    ci, pr = ci[o], pr[o]
    alone = np.ones(len(ci), dtype=bool)
    alone[1:] &= ci[1:] != ci[:-1]
    alone[:-1] &= ci[:-1] != ci[1:]
    first = np.ones(len(ci), dtype=bool)
    first[1:] = ci[1:] != ci[:-1]
    count(counts, AMBIGUOUS, (first & ~alone).sum())
    ci, pr = ci[alone], pr[alone]
    count(counts, LATE, (c_start[ci] - rec_end[pr] - G > tol).sum())
    return ci, pr


def latent_waits(ix: WaitIndex, lanes: Lanes, c: np.ndarray, w_pos: np.ndarray, c_start: np.ndarray,
                 rec_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(producer, consumer)`` pairs that hold every dependency the unlinked waits tied to the
    consumers ``c`` (``w_pos``: the latest such wait's position, ``c_start``: the consumers'
    recorded starts, each shape (k,)) can have (a superset): on each other stream of the consumer's process and
    device, the last task launched before the wait (``w_pos``) and ended before the consumer's
    recorded start. The event a wait waits for was recorded after the work it captures was
    launched and before the wait, and that work ended before the consumer started; on a stream
    (FIFO) the pair's producer is that work's last task or a later one. Replaying with these edges
    is therefore never earlier than the program (``tests/test_inferred_edges.py``); they are kept
    apart (``TaskGraph.latent_waits``) for the bound a prediction reports, not replayed by default:
    most of them order tasks that do not depend on each other."""
    ci, pr = [_NONE], [_NONE]
    for q, a, b in _other_streams(ix, lanes, c):
        tl = ix.g_nodes[a:b]  # stream order
        k = np.minimum(np.searchsorted(np.maximum.accumulate(ix.g_pos[a:b]), w_pos[q], "left"),
                       np.searchsorted(np.maximum.accumulate(rec_end[tl]), c_start[q], "right"))
        ok = k > 0
        ci.append(q[ok])
        pr.append(tl[k[ok] - 1])
    ci = np.concatenate(ci)
    return np.concatenate(pr).astype(np.int64), c[ci].astype(np.int64, copy=False)


def infer_unlinked_waits(ix: WaitIndex, role, si: SyncInfo, nodes: Nodes, lanes: Lanes, position, rec_start, rec_end,
                         xs, xd, L: int, G: int, counts: dict[str, int]) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """Inferred cross-stream edges ``(producer, consumer)`` for the unlinked waits (module doc),
    and the :func:`latent_waits` pairs of the consumers that got no inferred edge.

    Counts the inferred edges, the ambiguous cases, and the waits left without an edge.
    """
    w = unlinked_waits(role, si)
    cons = _consumers(ix, si, w, nodes.launch) if len(w) else _NONE
    tied = cons >= 0
    if not tied.any():
        count(counts, UNLINKED, len(w), missing=True)
        return _NONE, _NONE, (_NONE, _NONE)
    c, w_pos, w_corr = _latest_wait(cons[tied], w[tied], ix)
    latent = latent_waits(ix, lanes, c, w_pos, rec_start[c], rec_end)
    tol = tolerance_ns(G, whole_microseconds(rec_start, rec_end))
    late = rec_start[c] - _known_bound(c, nodes, lanes, rec_start, rec_end, xs, xd, L, G)
    delayed = late > tol
    c, w_pos, w_corr = c[delayed], w_pos[delayed], w_corr[delayed]
    c_start = rec_start[c]
    d_max = np.full(len(c), G + max(tol, L), np.int64)  # a wait latency beyond G is at most L
    ci, pr = _candidates(ix, lanes, position, c, w_pos, w_corr, c_start, d_max, rec_end, G, tol)
    ci, pr = _choose(ci, pr, c_start, rec_end, G, tol, counts, lanes.lane)
    n = len(ci)
    count(counts, UNLINKED, len(w) - n, missing=True)  # one wait per inferred edge is no longer without an edge
    count(counts, INFERRED, n)
    inferred_c = c[ci].astype(np.int64, copy=False)
    keep = ~np.isin(latent[1], inferred_c)  # a consumer with an inferred edge has its producer
    return pr.astype(np.int64), inferred_c, (latent[0][keep], latent[1][keep])
