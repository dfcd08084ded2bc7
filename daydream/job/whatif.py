"""Job-level what-ifs: single-trace optimizations applied to every rank (or chosen ranks) and
replayed coupled, and ``straggler:rank=R`` (that rank as fast as the median rank).

A single-trace optimization transforms a rank's graph as it would alone (``analysis.apply_all``),
given the graph with each collective lasting its **transfer** (its recorded wait for peers taken
out): what the optimization makes of a collective's duration (scaled, or re-costed by the
communication model) is its new transfer, and the wait follows from the coupled replay. The
collectives are found again in the new graph by their table row (a transformation keeps the rows
of the tasks it keeps). A rank where the optimization does not apply keeps its graph (reported).

``straggler:rank=R``: rank R starts its first step with the median rank (its graph's trace start
``t0`` moved earlier by how much later than the median its first step started in the recording,
so every replayed time moves with it) and its own work takes the median rank's time: CPU gaps, CPU
calls and compute kernels (not collectives) scaled by ``median work / its work`` when below 1,
where a rank's work is its coupled replayed window minus its replayed peer wait, on the job as the
``--opt`` before it left it (composed in order). A rank that is not behind the median is refused
(not applicable); a rank named twice is a usage error.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..analysis import apply_all
from ..simulate.critical_path import communication_mask
from ..errors import NotApplicable, UsageError
from ..report.job_model import JobPrediction
from ..optimizations import check_composition, parse_spec, split_params
from ..transform import scale, scale_gaps
from .couple import Coupled, couple
from .load import RankTrace
from .match import Matching
from .reporting import job_memory, job_windows

STRAGGLER = "straggler"  #: listed by --list-opts from daydream.optimizations.JOB_ONLY


def parse_job_specs(specs: list[str], world: int | None) -> list[tuple[Any, dict[str, Any]]]:
    """Each ``--opt`` of a job: ``straggler:rank=R`` as ("straggler", {"rank": R}), the others
    through :func:`~daydream.optimizations.parse_spec`. ``world``: the job's rank count, or None
    before the ranks are read (a rank is then checked to be 0 or more only).

    Raises:
        UsageError: unknown optimization, bad parameters, or a rank outside the job.
    """
    out: list[tuple[Any, dict[str, Any]]] = []
    for s in specs:
        name, _, rest = s.partition(":")
        if name.strip() != STRAGGLER:
            out.append(parse_spec(s))
            continue
        kv = split_params(s, rest)
        if set(kv) != {"rank"}:
            raise UsageError(f"--opt {s!r}: straggler takes one parameter, rank=R (the rank made as fast as the median)")
        try:
            r = int(kv["rank"])
        except ValueError:
            raise UsageError(f"--opt {s!r}: rank={kv['rank']!r} is not an integer") from None
        if r < 0:
            raise UsageError(f"--opt {s!r}: ranks are numbered from 0")
        if world is not None and r >= world:
            raise UsageError(f"--opt {s!r}: the job has ranks 0..{world - 1}")
        if (STRAGGLER, {"rank": r}) in out:
            raise UsageError(f"--opt {s!r}: straggler:rank={r} is given twice")
        out.append((STRAGGLER, {"rank": r}))
    real = [o for o in out if o[0] != STRAGGLER]
    if real:
        check_composition(real)
    if any(o[0].name == "world-size" and int(o[1]["n"]) == 1 for o in real):
        raise UsageError("--opt world-size:n=1 on a job: at world size 1 no rank has peers, so the ranks would be separate "
                         "runs, not one job; give it one rank's trace")
    return out


def _remap(base: RankTrace, g, nodes: np.ndarray) -> np.ndarray:
    """The collectives ``nodes`` of ``base.graph`` in the transformed graph ``g`` (by table row)."""
    pos = np.full(int(max(g.row.max(initial=-1), base.graph.row.max(initial=-1))) + 1, -1, np.int64)
    keep = g.row >= 0
    pos[g.row[keep]] = np.nonzero(keep)[0]
    out = np.where(nodes >= 0, pos[base.graph.row[np.maximum(nodes, 0)]], -1)
    if ((nodes >= 0) & (out < 0)).any():
        raise NotApplicable("the optimization removed a collective; a job needs every rank's collectives")
    return out


def _transfers(graph, nodes: np.ndarray, transfer_ns: np.ndarray):
    """``graph`` with the collectives ``nodes`` lasting their transfers."""
    dur = graph.dur_ns.copy()
    dur[nodes] = transfer_ns
    return dataclasses.replace(graph, dur_ns=dur)


def _straggler(graphs: list, m: Matching, now: Coupled, r: int) -> tuple[Any, str]:
    """Rank ``r``'s graph made as fast as the median rank: its first step started as late as the
    median rank's in the recording, its own work scaled to the median rank's in the coupled replay
    ``now`` of ``graphs`` as they stand (so that it composes with what was applied before).

    Raises:
        NotApplicable: the rank is not behind the median rank (its own work not above the
            median's, and its first step not starting later).
    """
    rows = job_windows(now.graphs, now.timelines)
    i = int(np.nonzero(m.ranks == r)[0][0])
    starts = np.array([w[0] for w in rows], np.int64) - m.offset_ns  # measured: what no optimization changes
    late = int(max(starts[i] - int(np.median(starts)), 0))
    work = np.array([(w[3] - w[2]) for w in rows], np.int64) - now.wait_ns.sum(axis=1)
    med = float(np.median(work))
    f = min(1.0, med / work[i]) if work[i] > 0 else 1.0
    if f >= 1.0 and late == 0:
        raise NotApplicable(f"rank {r} is not behind the median rank (own work {work[i] / 1e6:,.3f} ms, "
                            f"median {med / 1e6:,.3f} ms; its first step does not start later)")
    g = graphs[i]
    if f < 1.0:
        own = ~communication_mask(g)
        g = scale_gaps(scale(g, own, f), g.is_cpu, f)
    g = dataclasses.replace(g, t0_ns=int(g.t0_ns) - late)
    return g, f"step start {late / 1e6:,.3f} ms earlier, own work x{f:.3f}"


def _coupled(ranks: list[RankTrace], graphs: list, m: Matching) -> Coupled:
    """The coupled replay of the ranks' (transformed) ``graphs``: their collectives found again by
    table row, each lasting what the graph now gives it (its transfer)."""
    node = np.stack([_remap(r, g, m.node[i]) for i, (r, g) in enumerate(zip(ranks, graphs))]) if len(m) else m.node
    new = np.stack([g.dur_ns[np.maximum(node[i], 0)] for i, g in enumerate(graphs)]) if len(m) else m.transfer_ns
    return couple(graphs, dataclasses.replace(m, node=node), joint_transfers(m.transfer_ns, new, m.member))


def joint_transfers(old: np.ndarray, new: np.ndarray, member: np.ndarray) -> np.ndarray:
    """(R, K) transfers after a what-if that made them ``new`` on each rank (``old``: recorded;
    ``member``: bool, takes part): a collective's transfer ends on every participant together (the
    ranks of a ring or of an all-to-all exchange with each other until the last byte: in the
    recordings every rank ends each collective within microseconds of the others), so each
    participant's transfer changes by the largest change among them. A slower link on one rank
    (``--ranks``) slows the collective on all; a rank made faster alone still waits for the others."""
    if not old.size:
        return np.where(member, new, 0).astype(np.int64)
    delta = np.where(member, new.astype(np.int64) - old, np.iinfo(np.int64).min)
    d = delta.max(axis=0)
    return np.where(member, np.maximum(old + d[None, :], 0), 0).astype(np.int64)


def _apply(ranks: list[RankTrace], graphs: list, real: list, sel: set, notes: dict[str, list[str]]) -> None:
    """Compose the single-trace optimizations ``real`` on the graphs of the ranks ``sel`` (in place;
    each rank's note appended).

    Raises:
        NotApplicable: no selected rank takes them.
    """
    applied, why = 0, {}
    for i, r in enumerate(ranks):
        if r.rank not in sel:
            continue
        try:
            graphs[i], done = apply_all(graphs[i], real)
            notes.setdefault(str(r.rank), []).append("; ".join(f"{a.name}: {a.note}" for a in done))
            applied += 1
        except NotApplicable as e:
            why[str(r.rank)] = str(e)
    if not applied:
        raise NotApplicable(_by_reason(why) or "no rank selected")
    for k, v in why.items():
        notes.setdefault(k, []).append(f"not applicable: {v}")


def _by_reason(why: dict[str, str]) -> str:
    """``rank -> reason`` as one line, the ranks sharing a reason named together."""
    ranks: dict[str, list[str]] = {}
    for k, v in why.items():
        ranks.setdefault(v, []).append(k)
    return "; ".join(f"rank{'s' if len(ks) > 1 else ''} {','.join(ks)}: {v}" for v, ks in ranks.items())


def predict(ranks: list[RankTrace], m: Matching, base: Coupled, opts: list[tuple[Any, dict[str, Any]]],
            only: list[int] | None = None, keep: list[Coupled] | None = None) -> JobPrediction:
    """The job replayed coupled after ``opts`` (composed in order) on the ranks ``only``
    (rank numbers; default all; ``straggler`` names its own rank and is judged on the job as the
    optimizations before it left it).

    Raises:
        NotApplicable: no selected rank takes the optimizations, a straggler rank is not behind
            the median rank, or an optimization removes a collective.
        UsageError: ``world-size`` on some ranks only (it changes every collective's group).

    ``keep``: where given, the predicted coupled replay is appended to it (``--timeline``).
    """
    if only is not None and any(o[0] != STRAGGLER and o[0].name == "world-size" for o in opts):
        raise UsageError("--opt world-size changes the group size of every collective, so it applies to every rank: drop --ranks")
    graphs = [_transfers(r.graph, m.node[i][m.member[i]], m.transfer_ns[i][m.member[i]]) for i, r in enumerate(ranks)]
    rows = job_windows(base.graphs, base.timelines)
    notes: dict[str, list[str]] = {}
    sel = set(int(x) for x in m.ranks) if only is None else set(only)
    now: Coupled | None = base  # the coupled replay of ``graphs`` as they stand (None: stale)
    k = 0
    while k < len(opts):
        if opts[k][0] == STRAGGLER:
            r = opts[k][1]["rank"]
            now = now or _coupled(ranks, graphs, m)
            i = int(np.nonzero(m.ranks == r)[0][0])
            graphs[i], note = _straggler(graphs, m, now, r)
            notes.setdefault(str(r), []).append(note)
            k += 1
        else:
            j = k
            while j < len(opts) and opts[j][0] != STRAGGLER:
                j += 1
            _apply(ranks, graphs, opts[k:j], sel, notes)
            k = j
        now = None
    c = _coupled(ranks, graphs, m)
    if keep is not None:
        keep.append(c)
    pred = job_windows(c.graphs, c.timelines)
    base_ns = max(w[3] - w[2] for w in rows)
    pred_ns = [int(w[3] - w[2]) for w in pred]
    name = " + ".join(o[0] if o[0] == STRAGGLER else o[0].name for o in opts)
    real = any(o[0] != STRAGGLER for o in opts)
    return JobPrediction(name, sorted(sel) if real else [], int(base_ns), int(max(pred_ns)),
                         round(base_ns / max(max(pred_ns), 1), 4), pred_ns,
                         {k: "; ".join(v) for k, v in sorted(notes.items())},
                         memory=job_memory([r.rank for r in ranks], c.graphs, c.timelines))
