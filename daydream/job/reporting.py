"""The job report: per rank its step (measured, replayed coupled), the time it waited for its
peers and for whom, its transfer time and how much of it overlapped compute; the job's step (the
slowest rank's) and the straggler with its cause; its JSON (deterministic bytes: the local and
the Dask paths give the same file). Its text is :mod:`daydream.render.job_text`.
"""

from __future__ import annotations

import os

import msgspec
import numpy as np

from ..graph.collectives import OP_LABELS, Op
from ..simulate.critical_path import communication_mask
from ..graph import NODE_CPU
from ..report.windows import _union_length, step_windows
from ..report.trust import TRUST_FAIR_PCT, trust_verdict
from ..simulate import Timeline, recorded, simulate
from ..report.job_model import JOB_REPORT_VERSION, CollectiveRow, JobReport, RankIdle, RankMemory, RankRow, Straggler
from ..report.memory_fit import memory_summary
from .couple import Coupled
from .critical import job_critical_path, rank_critical_path
from .load import RankTrace
from .match import Matching

def job_windows(graphs, timelines) -> list[tuple[int, int, int, int]]:
    """Per rank: (measured start, measured end, replayed start, replayed end) of its window."""
    return [_window(g, tl, recorded(g)) for g, tl in zip(graphs, timelines)]


def _pct(a: int, b: int) -> float:
    return round((a - b) / b * 100, 4) if b else 0.0


def _window(graph, tl: Timeline, rec: Timeline) -> tuple[int, int, int, int]:
    """(measured start, measured end, replayed start, replayed end) of the rank's window: from
    the first ProfilerStep (else the trace start) to the last GPU task's end."""
    gpu = ~graph.is_cpu
    sw = step_windows(graph, tl)
    lo_m = sw[0].start_ns if sw else int(graph.t0_ns)
    lo_r = sw[0].replayed_start_ns if sw else int(graph.t0_ns)
    return lo_m, int(rec.end_ns[gpu].max()), lo_r, int(tl.end_ns[gpu].max())


def _overlap_pct(graph, tl: Timeline) -> float:
    comm = communication_mask(graph)
    comp = ~graph.is_cpu & ~comm
    if not comm.any():
        return 0.0
    lo, hi = int(tl.start_ns.min()), int(tl.end_ns.max())
    c = _union_length(tl.start_ns[comm], tl.end_ns[comm], lo, hi)
    k = _union_length(tl.start_ns[comp], tl.end_ns[comp], lo, hi)
    both = _union_length(np.concatenate([tl.start_ns[comm], tl.start_ns[comp]]), np.concatenate([tl.end_ns[comm], tl.end_ns[comp]]), lo, hi)
    return round((c + k - both) / c * 100, 2) if c else 0.0


def idle_split(window: tuple[int, int], compute, p2p_wait, wait, transfer) -> dict[str, int]:
    """A window ``(lo, hi)`` split by interval sets (each (starts, ends), ns) into compute, bubble
    (waits at point-to-point transfers), peer wait, transfer and idle, and communication exposed /
    hidden (:class:`RankIdle`: an earlier set of the list takes the instants it shares with a
    later one)."""
    lo, hi = window

    def u(*sets):
        return _union_length(np.concatenate([x[0] for x in sets]), np.concatenate([x[1] for x in sets]), lo, hi)

    c = u(compute)
    pc = u(p2p_wait, compute)
    wpc = u(wait, p2p_wait, compute)
    all_ = u(transfer, wait, p2p_wait, compute)
    comm = u(transfer, wait, p2p_wait)
    return {"window_ns": hi - lo, "compute_ns": c, "bubble_ns": pc - c, "peer_wait_ns": wpc - pc, "transfer_ns": all_ - wpc,
            "idle_ns": (hi - lo) - all_, "exposed_comm_ns": all_ - c, "hidden_comm_ns": comm - (all_ - c)}


def _rank_idle(i: int, r: RankTrace, m: Matching, c: Coupled) -> RankIdle:
    """The split of rank row ``i``'s coupled-replay window (:func:`idle_split`): each matched
    collective's task runs from this rank's arrival; its first ``c.wait_ns`` is the wait for the
    last peer (:mod:`.couple`: the PEER edge ends it), a bubble at a send/recv, a peer wait at any
    other collective; the rest is its transfer. Collectives not matched count whole as transfer."""
    g, tl = c.graphs[i], c.timelines[i]
    _, _, lo, hi = _window(g, tl, recorded(g))
    comm = communication_mask(g)
    comp = ~g.is_cpu & ~comm
    mem = m.member[i]
    nodes = m.node[i][mem]
    w = c.wait_ns[i][mem]
    p2p = m.op[mem] == int(Op.SEND_RECV)
    st = tl.start_ns[nodes]
    others = np.nonzero(comm)[0]
    others = others[~np.isin(others, nodes)]
    d = idle_split((lo, hi), (tl.start_ns[comp], tl.end_ns[comp]), (st[p2p], st[p2p] + w[p2p]), (st[~p2p], st[~p2p] + w[~p2p]),
                   (np.concatenate([st + w, tl.start_ns[others]]), np.concatenate([tl.end_ns[nodes], tl.end_ns[others]])))
    return RankIdle(int(r.rank), **d)


def _rank_row(i: int, r: RankTrace, m: Matching, c: Coupled) -> tuple[RankRow, dict]:
    g, tl = c.graphs[i], c.timelines[i]
    rec = recorded(g)
    lo_m, hi_m, lo_r, hi_r = _window(g, tl, rec)
    alone = simulate(r.graph)
    a_lo_m, a_hi_m, a_lo_r, a_hi_r = _window(r.graph, alone, recorded(r.graph))
    mem = m.member[i]
    waited: dict[str, int] = {}
    for k in np.nonzero(mem & (m.wait_ns[i] > 0))[0].tolist():
        key = str(int(m.ranks[m.last[k]]))
        waited[key] = waited.get(key, 0) + int(m.wait_ns[i, k])
    err = _pct(hi_r - lo_r, hi_m - lo_m)
    verdict, p99, p99_pct = _rank_trust(g, tl, rec, err, hi_m - lo_m)
    row = RankRow(int(r.rank), os.path.basename(r.path), r.rank_source, int(m.offset_ns[i]), hi_m - lo_m, hi_r - lo_r,
                  err, _pct(a_hi_r - a_lo_r, a_hi_m - a_lo_m), int(m.wait_ns[i, mem].sum()),
                  int(c.wait_ns[i, mem].sum()), dict(sorted(waited.items(), key=lambda kv: int(kv[0]))),
                  int(m.transfer_ns[i, mem].sum()), _overlap_pct(g, tl), int(np.count_nonzero(m.last == i)),
                  rank_critical_path(c, i), verdict, p99, p99_pct)
    return row, {"start": lo_m - int(m.offset_ns[i])}


def _rank_trust(g, tl, rec, err_pct: float, window_ns: int) -> tuple[str, float, float]:
    """(verdict, p99 GPU start error us, as % of the median measured step) of a rank's coupled
    replay: the single-trace rule (:func:`~daydream.report.trust.trust_verdict`) on its window error and
    the start error of its recorded GPU tasks (the pins the coupling adds are not tasks)."""
    gpu = (g.node_kind != NODE_CPU) & (g.row >= 0) & (g.rec_end_ns >= g.rec_start_ns)
    d_us = np.abs(tl.start_ns[gpu] - rec.start_ns[gpu]) / 1e3
    p99 = round(float(np.percentile(d_us, 99)), 3) if len(d_us) else 0.0
    sw = step_windows(g, rec)
    ref = float(np.median([w.end_ns - w.start_ns for w in sw])) if sw else float(window_ns)
    p99_pct = round(p99 * 1e5 / ref, 3) if ref > 0 else 0.0
    return trust_verdict(abs(err_pct), abs(err_pct), len(sw), p99_pct, p99)[0], p99, p99_pct


def _job_trust(step_error_pct: float, rows: list[RankRow]) -> tuple[str, str]:
    """The job's verdict: its own step error decides (the single-trace thresholds); each rank's
    verdict of its coupled replay is listed, not deciding (one rank's GPU start error made a job
    of good steps unreliable: a cliff at the worst rank)."""
    verdict, reason = trust_verdict(abs(step_error_pct), abs(step_error_pct))
    reason = "job step " + reason.replace("max step error", "error")
    if rows:
        bad = [x for x in rows if x.trust != "good"]
        reason += "; ranks: " + ", ".join(f"{x.rank} {x.trust}" for x in rows)
        if bad:
            reason += " (" + ", ".join(
                f"rank {x.rank}: window error {abs(x.error_pct):.2f} %, GPU start error p99 {x.gpu_start_error_p99_us:,.0f} us = "
                f"{x.gpu_start_error_p99_pct:.2f} % of its step" for x in bad[:3]) + (", ..." if len(bad) > 3 else "") + ")"
        late = [x for x in rows if x.gpu_start_error_p99_pct > TRUST_FAIR_PCT]
        if late:  # the second line of each rank (report/trust.py start_error_line), in one
            reason += ("; GPU start error p99 over " f"{TRUST_FAIR_PCT:g} % of the step on rank" + "s" * (len(late) > 1) + " "
                       + ", ".join(f"{x.rank} ({x.gpu_start_error_p99_pct:.2f} %)" for x in late)
                       + ": predictions that move GPU work there can be off by as much")
    return verdict, reason


def _straggler(m: Matching, rows: list[RankRow], starts: np.ndarray) -> Straggler | None:
    """The rank whose late arrivals made its peers wait longest (recorded), with its cause."""
    if not len(m) or not m.wait_ns.any():
        return None
    caused = np.zeros(len(rows), np.int64)
    np.add.at(caused, m.last, m.wait_ns.sum(axis=0))
    s = int(np.argmax(caused))
    late = int(max(starts[s] - int(np.median(starts)), 0))
    ks = np.nonzero(m.last == s)[0]
    lateness = int((m.arrive_ns[ks] - np.median(np.where(m.member[:, ks], m.start_ns[:, ks], m.arrive_ns[ks]), axis=0)).max())
    cp = rows[s].critical_path
    inside = max(((v, k) for k, v in cp.items() if k not in ("communication", "peers")), default=(0, "cpu"))[1]
    if late and late * 2 >= lateness:
        cause = (f"started its step {late / 1e6:,.3f} ms after the median rank (before the traced window: data loading "
                 f"or the previous step); it reached collectives up to {lateness / 1e6:,.3f} ms after the median")
    else:
        cause = f"reached collectives up to {lateness / 1e6:,.3f} ms after the median rank; its critical path is mostly {inside}"
    return Straggler(int(m.ranks[s]), int(caused[s]), late, cause, cp)


def rank_memory(rank: int, graph, tl: Timeline) -> RankMemory | None:
    """The GPU memory of one rank (:class:`RankMemory`) replayed on ``tl`` (None: its trace has no
    allocator events on a GPU): its GPU with the highest peak; the parts of the step whose peak is
    the highest, and their shares of it."""
    ms = memory_summary(graph, tl)
    gpus = [d for d in (ms.devices if ms is not None else []) if d.device >= 0]
    if not gpus:
        return None
    d = max(gpus, key=lambda x: x.peak_allocated_bytes)
    st = max(d.steps, key=lambda x: x.peak_allocated_bytes) if d.steps else None
    parts = {p.name: int(p.bytes) for p in st.parts} if st is not None else {}
    peak = st.peak_allocated_bytes if st is not None else 0
    shares = {k: round(v / peak * 100, 2) for k, v in parts.items()} if peak > 0 else {}
    return RankMemory(int(rank), int(d.device), int(d.peak_allocated_bytes), bool(d.at_least), st.name if st is not None else "",
                      parts, shares, int(d.needs_bytes), int(d.capacity_bytes), d.fits, d.verdict)


def job_memory(rank_numbers, graphs, timelines) -> list[RankMemory]:
    """:func:`rank_memory` of every rank that has GPU allocator events."""
    out = [rank_memory(int(r), g, tl) for r, g, tl in zip(rank_numbers, graphs, timelines)]
    return [x for x in out if x is not None]


def build_job_report(ranks: list[RankTrace], m: Matching, c: Coupled, world: int, counts: dict[str, int]) -> JobReport:
    """Assemble the :class:`JobReport` of a coupled replay ``c`` of ``ranks`` matched by ``m``."""
    rows, starts = [], []
    for i, r in enumerate(ranks):
        row, extra = _rank_row(i, r, m, c)
        rows.append(row)
        starts.append(extra["start"])
    starts = np.asarray(starts, np.int64)
    colls = [CollectiveRow(k, OP_LABELS[Op(int(m.op[k]))], str(m.group[k]), int(m.size_bytes[k]), int(m.ranks[m.last[k]]),
                           int(m.ranks[c.last[k]]), int(m.wait_ns[:, k].max()), int(m.transfer_ns[m.last[k], k]))
             for k in range(len(m))]
    slow_m = max(rows, key=lambda x: x.measured_ns) if rows else None
    slow_r = max(rows, key=lambda x: x.replayed_ns) if rows else None
    sm, sr = (slow_m.measured_ns if slow_m else 0), (slow_r.replayed_ns if slow_r else 0)
    cp = job_critical_path(m, c, rows.index(slow_r)) if rows else None
    verdict, reason = _job_trust(_pct(sr, sm), rows)
    return JobReport(JOB_REPORT_VERSION, len(ranks), world, m.clock, len(m), c.rounds, sm, sr, _pct(sr, sm), rows, colls,
                     _straggler(m, rows, starts), dict(sorted({**counts, **m.counts}.items())), critical_path=cp,
                     trust=verdict, trust_reason=reason, idle=[_rank_idle(i, r, m, c) for i, r in enumerate(ranks)],
                     memory=job_memory([r.rank for r in ranks], c.graphs, c.timelines))


def job_report_json(r: JobReport) -> bytes:
    """The ``--json`` document of a job: deterministic bytes for the same input."""
    return msgspec.json.format(msgspec.json.encode(r), indent=2) + b"\n"


