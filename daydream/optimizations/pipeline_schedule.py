"""Pipeline-parallel schedules and their timing: the model behind ``pp`` (:mod:`.pipeline_parallel`).

**Order** (per stage ``s`` of ``S``, ``M`` micro-batches), as Megatron-LM's
``forward_backward_pipelining_without_interleaving`` issues it (Narayanan et al., SC 2021, §2.2,
Fig. 4; its ``megatron/core/pipeline_parallel/schedules.py``), with ``P(l)`` a point-to-point
exchange on link ``l`` (between stages ``l`` and ``l + 1``) that both stages take part in:

- **GPipe** (Huang et al., NeurIPS 2019): every forward ``P(s-1) F(i) P(s)``, then every backward
  ``P(s) B(i) P(s-1)``.
- **1F1B** (PipeDream-Flush): ``w = min(S-1-s, M)`` warm-up forwards ``P(s-1) F(i) P(s)``; if
  ``r = M - w > 0`` one ``P(s-1)`` (``recv_forward``), then ``r`` times ``F(w+i) P(s) B(i) P(s-1)``
  (``send_forward_recv_backward`` and ``send_backward_recv_forward``: one exchange each, both
  directions at once); then ``w`` cool-down ``P(s) B(r+i) P(s-1)``. ``P(-1)`` and ``P(S-1)`` do not
  exist (first and last stage). The k-th exchange on a link is the same one on both of its stages
  (the orders agree, as Megatron's must: NCCL would deadlock otherwise).

- **Interleaved** (Narayanan et al., SC 2021, §2.2.2, Fig. 4 bottom; Megatron's
  ``forward_backward_pipelining_with_interleaving``): the model is cut into ``S V`` chunks, rank
  ``s`` holding chunks ``s, s + S, ..., s + (V-1) S`` (``V`` = ``chunks``, Megatron's
  ``virtual_pipeline_model_parallel_size``); ``M`` must be a multiple of ``S``. The forward and
  backward items are Megatron's order (:func:`megatron_compute_order`: ``(S-s-1) 2 + (V-1) S``
  warm-up forwards, 1F1B pairs, cool-down backwards; micro-batches in groups of ``S`` depth-first
  through the chunks). The exchanges (:func:`interleaved_orders`) join consecutive chunks: link
  ``l`` between ranks ``l`` and ``l+1``, and the **wrap** link ``S-1`` from the last rank's chunk
  ``v`` to the first rank's chunk ``v+1``; each message sits at Megatron's communication points
  (after each warm-up forward, each steady-state pair, each cool-down backward), the messages of a
  link between the same two points fused into one exchange. What differs from Megatron: its
  ``_communicate`` posts the sends and receives to both neighbours of a point as one NCCL group
  (concurrently); here a rank takes part in a point's exchanges one after the other, in link order.
  ``chunks=1`` is 1F1B.

**Timing** (one GPU stream per stage, the CUDA semantics of :mod:`daydream.testing.emulator`):
each stage's host launches its items back to back from ``t0``, each call taking ``call_ns``; an
item is ready ``L`` after its call starts and starts at ``max(ready, end of the stage's previous
item + G)``. A compute item lasts its time; an exchange on link ``l`` ends on both stages at
``max(its two starts) + p2p_ns[l]`` (a full-duplex link moves the activation and the gradient of
an exchange at once; both are the same bytes). Each stage's **bubble** is its time waiting in
exchanges for the other stage (``max start - own start``); its **idle** is the step minus its
compute and transfers. With equal stages (``f + b`` a micro-batch), no transfer and no host cost,
every stage idles ``(S-1)(f+b)`` of a step of ``(M+S-1)(f+b)``: the bubble fraction
``(S-1)/(M+S-1)`` (GPipe §2.3; Narayanan et al. §2.2.1), for both schedules; interleaved with
``V`` equal chunks of ``(f+b)/V``: ``(S-1)(f+b)/V`` of ``(M + (S-1)/V)(f+b)``, the fraction
``(S-1)/(V M + S - 1)`` (§2.2.2).

**Memory**: activations held on stage ``s`` = the most micro-batches forwarded and not yet
backwarded along its order: ``M`` for GPipe, ``min(S-s, M)`` for 1F1B; interleaved: chunk-micro-
batches (each ``1/V`` of a stage's micro-batch when the chunks are equal).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

SCHEDULES = ("1f1b", "gpipe", "interleaved")

#: item kinds of a stage's order
FWD, BWD, P2P = 0, 1, 2


def stage_order(S: int, M: int, schedule: str, s: int, chunks: int = 1) -> list[tuple[int, int]]:
    """Stage ``s``'s items in issue order: ``(FWD, x)``, ``(BWD, x)`` or ``(P2P, link)`` (module
    docstring); ``x`` the micro-batch, for ``interleaved`` ``v M + i``: micro-batch ``i`` of the
    rank's local chunk ``v`` (model chunk ``v S + s``; :func:`item_chunk`). ``interleaved`` with
    ``chunks=1`` is ``1f1b`` (Megatron's non-interleaved path).

    Raises:
        ValueError: an unknown schedule, ``s`` outside ``0..S-1``, ``M < 1``, ``chunks < 1``, or
            interleaved (``chunks >= 2``) with ``S < 2`` or ``M`` not a multiple of ``S``.
    """
    if schedule not in SCHEDULES or not 0 <= s < S or M < 1 or chunks < 1:
        raise ValueError(f"bad pipeline: schedule={schedule!r}, stage {s} of {S}, {M} micro-batches, {chunks} chunks")
    if schedule == "interleaved" and chunks > 1:
        return list(interleaved_orders(S, M, chunks)[s])
    if schedule == "interleaved":
        schedule = "1f1b"
    up = [(P2P, s - 1)] if s > 0 else []
    down = [(P2P, s)] if s < S - 1 else []
    out: list[tuple[int, int]] = []
    if schedule == "gpipe":
        for i in range(M):
            out += up + [(FWD, i)] + down
        for i in range(M):
            out += down + [(BWD, i)] + up
        return out
    w = min(S - 1 - s, M)
    r = M - w
    for i in range(w):
        out += up + [(FWD, i)] + down
    if r:
        out += up
    for i in range(r):
        out += [(FWD, w + i)] + down + [(BWD, i)] + up
    for i in range(w):
        out += down + [(BWD, r + i)] + up
    return out


def item_chunk(x: int, M: int) -> tuple[int, int]:
    """A compute item's ``x`` (:func:`stage_order`) as (local chunk, micro-batch)."""
    return x // M, x % M


def megatron_compute_order(S: int, M: int, V: int, s: int) -> tuple[list[tuple[int, int]], list[int]]:
    """Rank ``s``'s forward/backward items of the interleaved schedule as Megatron-LM's
    ``forward_backward_pipelining_with_interleaving`` issues them, and its communication points.

    Of ``T = M V`` chunk-micro-batches, ``w = min((S-s-1) 2 + (V-1) S, T)`` warm-up forwards, then
    ``T - w`` pairs (forward ``w + k``, backward ``k``), then the cool-down backwards; the ``k``-th
    forward runs local chunk ``(k mod S V) // S`` (the ``k``-th backward ``V - 1 -`` that) on
    micro-batch ``(k // S V) S + k mod S`` (``get_model_chunk_id``: groups of ``S`` micro-batches
    depth-first through the chunks). Points (indices into the items, 0 the start): where Megatron
    calls ``_communicate``: before the first item, after each warm-up forward, after each
    (forward, backward) pair, after each cool-down backward.

    Returns:
        (items ``(FWD|BWD, v M + i)``, sorted point indices).
    """
    T = M * V
    w = min((S - s - 1) * 2 + (V - 1) * S, T)

    def item(kind: int, k: int) -> tuple[int, int]:
        c = (k % (S * V)) // S
        return kind, (c if kind == FWD else V - 1 - c) * M + (k // (S * V)) * S + k % S

    items: list[tuple[int, int]] = []
    points = [0]
    for k in range(w):
        items.append(item(FWD, k))
        points.append(len(items))
    for k in range(T - w):
        items += [item(FWD, w + k), item(BWD, k)]
        points.append(len(items))
    for k in range(T - w, T):
        items.append(item(BWD, k))
        points.append(len(items))
    return items, sorted(set(points))


@functools.lru_cache(maxsize=64)
def interleaved_orders(S: int, M: int, V: int) -> tuple[list[tuple[int, int]], ...]:
    """Every rank's items of the interleaved schedule (module docstring, "Interleaved"): Megatron's
    compute order (:func:`megatron_compute_order`) with the exchanges between consecutive model
    chunks at its communication points.

    Model chunk ``c = v S + s`` is rank ``s``'s local chunk ``v``; cut ``c`` (chunk ``c`` to
    ``c + 1``) is on link ``c mod S`` (link ``l`` joins ranks ``l`` and ``l + 1``, link ``S - 1``
    the last rank and the first: the wrap). Each activation (and gradient) is sent at the
    producer's first point after its item and received at the consumer's last point before its
    item; the messages of a link between the same two points are one exchange (fused, both
    directions at once, as Megatron's ``send_forward_backward_recv_forward_backward``); a link's
    exchanges run in the order of their points, which is the same on both ranks (checked: raises
    otherwise); at a point a rank takes part in its exchanges in link order.

    Raises:
        ValueError: ``S < 2``, ``V < 2``, ``M`` not a multiple of ``S`` (Megatron's requirement), or
            the two ranks of a link disagree on its exchanges' order.
    """
    if S < 2 or V < 2 or M < 1 or M % S:
        raise ValueError(f"interleaved needs S >= 2 stages, V >= 2 chunks and micro-batches a multiple of S; "
                         f"got S={S}, V={V}, M={M}")
    comp = [megatron_compute_order(S, M, V, s) for s in range(S)]
    pos = [{it: j for j, it in enumerate(items)} for items, _ in comp]
    pts = [np.asarray(p, np.int64) for _, p in comp]
    xch: dict[tuple[int, int, int], int] = {}  # (link, point on rank l, point on rank l+1) -> messages
    for c in range(S * V - 1):  # cuts x micro-batches: thousands at most
        a, b, va, vb = c % S, (c + 1) % S, c // S, (c + 1) // S
        for i in range(M):
            for pr, pit, cr, cit in ((a, (FWD, va * M + i), b, (FWD, vb * M + i)),
                                     (b, (BWD, vb * M + i), a, (BWD, va * M + i))):
                p_send = int(pts[pr][np.searchsorted(pts[pr], pos[pr][pit] + 1)])
                p_recv = int(pts[cr][np.searchsorted(pts[cr], pos[cr][cit], "right") - 1])
                key = (a, p_send, p_recv) if pr == a else (a, p_recv, p_send)
                xch[key] = xch.get(key, 0) + 1
    at: list[dict[int, list[int]]] = [{} for _ in range(S)]  # per rank: point -> links, one per exchange
    for link in range(S):
        ks = sorted((lo, hi) for (l_, lo, hi) in xch if l_ == link)
        if [h for _, h in ks] != sorted(h for _, h in ks):
            raise ValueError(f"the ranks of link {link} disagree on its exchanges' order (S={S}, M={M}, V={V})")
        for lo, hi in ks:
            at[link].setdefault(lo, []).append(link)
            at[(link + 1) % S].setdefault(hi, []).append(link)
    out = []
    for s, (items, _) in enumerate(comp):
        o: list[tuple[int, int]] = []
        for j in range(len(items) + 1):
            o += [(P2P, link) for link in sorted(at[s].get(j, []))]
            if j < len(items):
                o.append(items[j])
        out.append(o)
    return tuple(out)


def activations_held(order: list[tuple[int, int]]) -> int:
    """The most micro-batches forwarded and not yet backwarded along ``order``."""
    held = best = 0
    for kind, _ in order:
        held += kind == FWD
        held -= kind == BWD
        best = max(best, held)
    return best


@dataclass(frozen=True)
class PipelineRun:
    """A step of the pipeline (ns, from the hosts' common start ``t0``).

    Attributes:
        orders: per stage, its items (:func:`stage_order`).
        start_ns, end_ns: per stage, (len(order),) int64 arrays, each item's start and end.
        step_ns: the last end over the stages.
        busy_ns: (S,) each stage's compute (forward + backward items).
        transfer_ns: (S,) each stage's time in exchanges after both stages arrived.
        bubble_ns: (S,) each stage's time in exchanges waiting for the other stage.
        idle_ns: (S,) ``step_ns - busy_ns - transfer_ns`` (bubble, host waits and the tail).
        held: (S,) activations held (micro-batches).
    """

    orders: list
    start_ns: list
    end_ns: list
    step_ns: int
    busy_ns: np.ndarray
    transfer_ns: np.ndarray
    bubble_ns: np.ndarray
    idle_ns: np.ndarray
    held: np.ndarray

    @property
    def bubble_fraction(self) -> float:
        """Mean over the stages of ``idle / step``."""
        return float(self.idle_ns.mean() / self.step_ns) if self.step_ns else 0.0


def ideal_bubble_fraction(S: int, M: int, V: int = 1) -> float:
    """``(S-1)/(V M+S-1)``: the idle fraction of each stage's step for equal stages (equal chunks)
    without transfers (GPipe §2.3; interleaved with ``V`` chunks: Narayanan et al. SC 2021 §2.2.2,
    whose ``(S-1)/(V M)`` is the bubble over the ideal time instead of over the step)."""
    return (S - 1) / (V * M + S - 1)


def run_schedule(fwd_ns, bwd_ns, p2p_ns, M: int, schedule: str, *, call_ns: int = 0, launch_latency_ns: int = 0,
                 gpu_gap_ns: int = 0, chunks: int = 1) -> PipelineRun:
    """Time one step of the pipeline (module docstring).

    Args:
        fwd_ns, bwd_ns: (S,) ns, one micro-batch's forward / backward on each stage; interleaved
            with ``chunks = V >= 2``: (S V,) per model chunk ``v S + s`` (rank ``s``'s chunk ``v``).
        p2p_ns: (S-1,) ns, an exchange's transfer on each link; interleaved: (S,), the last the
            wrap link (last rank to first).
        M: micro-batches. schedule: "1f1b", "gpipe" or "interleaved"; chunks: ``V``.
        call_ns: each launch call's host time; launch_latency_ns, gpu_gap_ns: ``L`` and ``G``.

    Returns:
        PipelineRun.

    Raises:
        ValueError: bad lengths or schedule (a correct order never deadlocks).
    """
    fwd = np.asarray(fwd_ns, np.int64)
    bwd = np.asarray(bwd_ns, np.int64)
    p2p = np.asarray(p2p_ns, np.int64)
    V = int(chunks) if schedule == "interleaved" else 1
    S = len(fwd) // V
    n_links = S if V > 1 else max(S - 1, 0)
    if len(fwd) != S * V or len(bwd) != S * V or len(p2p) != n_links or S < 1:
        raise ValueError(f"need {V} x S forward and backward times and {'S' if V > 1 else 'S-1'} link times, "
                         f"got {len(fwd)}, {len(bwd)}, {len(p2p)}")
    orders = [stage_order(S, M, schedule, s, V) for s in range(S)]
    start = [np.zeros(len(o), np.int64) for o in orders]
    end = [np.zeros(len(o), np.int64) for o in orders]
    nxt = [0] * S
    last_end: list[int | None] = [None] * S
    blocked = [False] * S  # in an exchange whose partner has not arrived
    seen = [{} for _ in range(S)]  # per stage: link -> exchanges reached on it
    pending: dict[tuple[int, int], tuple[int, int]] = {}  # (link, k) -> (stage, item) of the first side
    bubble = np.zeros(S, np.int64)
    transfer = np.zeros(S, np.int64)
    busy = np.zeros(S, np.int64)
    progress = True
    # stages x items: a few hundred to a few thousand (the measured core of the model)
    while progress:
        progress = False
        for s in range(S):
            while not blocked[s] and nxt[s] < len(orders[s]):
                j = nxt[s]
                kind, x = orders[s][j]
                ready = j * call_ns + launch_latency_ns
                st = ready if last_end[s] is None else max(ready, last_end[s] + gpu_gap_ns)
                nxt[s] += 1
                progress = True
                if kind != P2P:
                    c = (x // M) * S + s
                    d = int(fwd[c] if kind == FWD else bwd[c])
                    start[s][j], end[s][j] = st, st + d
                    busy[s] += d
                    last_end[s] = st + d
                    continue
                k = seen[s].get(x, 0)
                seen[s][x] = k + 1
                start[s][j] = st
                if (x, k) not in pending:
                    pending[(x, k)] = (s, j)
                    blocked[s] = True
                    break
                q, jq = pending.pop((x, k))
                arrive = max(st, int(start[q][jq]))
                e = arrive + int(p2p[x])
                end[s][j], end[q][jq] = e, e
                for r, sr in ((s, st), (q, int(start[q][jq]))):
                    bubble[r] += arrive - sr
                    transfer[r] += int(p2p[x])
                last_end[s] = last_end[q] = e
                blocked[q] = False
    if pending or any(nxt[s] < len(orders[s]) for s in range(S)):
        raise ValueError("the pipeline deadlocked (the stages' exchange orders disagree)")
    step = int(max(int(e.max()) if len(e) else 0 for e in end))
    held = np.array([activations_held(o) for o in orders], np.int64)
    return PipelineRun(orders, start, end, step, busy, transfer, bubble, step - busy - transfer, held)

