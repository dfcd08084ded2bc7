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

**Timing** (one GPU stream per stage, the CUDA semantics of :mod:`daydream.testing.emulator`):
each stage's host launches its items back to back from ``t0``, each call taking ``call_ns``; an
item is ready ``L`` after its call starts and starts at ``max(ready, end of the stage's previous
item + G)``. A compute item lasts its time; an exchange on link ``l`` ends on both stages at
``max(its two starts) + p2p_ns[l]`` (a full-duplex link moves the activation and the gradient of
an exchange at once; both are the same bytes). Each stage's **bubble** is its time waiting in
exchanges for the other stage (``max start - own start``); its **idle** is the step minus its
compute and transfers. With equal stages (``f + b`` a micro-batch), no transfer and no host cost,
every stage idles ``(S-1)(f+b)`` of a step of ``(M+S-1)(f+b)``: the bubble fraction
``(S-1)/(M+S-1)`` (GPipe §2.3; Narayanan et al. §2.2.1), for both schedules.

**Memory**: activations held on stage ``s`` = the most micro-batches forwarded and not yet
backwarded along its order: ``M`` for GPipe, ``min(S-s, M)`` for 1F1B.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SCHEDULES = ("1f1b", "gpipe")

#: item kinds of a stage's order
FWD, BWD, P2P = 0, 1, 2


def stage_order(S: int, M: int, schedule: str, s: int) -> list[tuple[int, int]]:
    """Stage ``s``'s items in issue order: ``(FWD, micro-batch)``, ``(BWD, micro-batch)`` or
    ``(P2P, link)`` (module docstring).

    Raises:
        ValueError: an unknown schedule, or ``s`` outside ``0..S-1``, or ``M < 1``.
    """
    if schedule not in SCHEDULES or not 0 <= s < S or M < 1:
        raise ValueError(f"bad pipeline: schedule={schedule!r}, stage {s} of {S}, {M} micro-batches")
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


def ideal_bubble_fraction(S: int, M: int) -> float:
    """``(S-1)/(M+S-1)``: the idle fraction of each stage's step for equal stages without
    transfers (GPipe §2.3)."""
    return (S - 1) / (M + S - 1)


def run_schedule(fwd_ns, bwd_ns, p2p_ns, M: int, schedule: str, *, call_ns: int = 0, launch_latency_ns: int = 0,
                 gpu_gap_ns: int = 0) -> PipelineRun:
    """Time one step of the pipeline (module docstring).

    Args:
        fwd_ns, bwd_ns: (S,) ns, one micro-batch's forward / backward on each stage.
        p2p_ns: (S-1,) ns, an exchange's transfer on each link.
        M: micro-batches. schedule: "1f1b" or "gpipe".
        call_ns: each launch call's host time; launch_latency_ns, gpu_gap_ns: ``L`` and ``G``.

    Returns:
        PipelineRun.

    Raises:
        ValueError: bad lengths or schedule (a correct order never deadlocks).
    """
    fwd = np.asarray(fwd_ns, np.int64)
    bwd = np.asarray(bwd_ns, np.int64)
    p2p = np.asarray(p2p_ns, np.int64)
    S = len(fwd)
    if len(bwd) != S or len(p2p) != max(S - 1, 0) or S < 1:
        raise ValueError(f"need S forward and backward times and S-1 link times, got {len(fwd)}, {len(bwd)}, {len(p2p)}")
    orders = [stage_order(S, M, schedule, s) for s in range(S)]
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
                    d = int(fwd[s] if kind == FWD else bwd[s])
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

