"""Job-level what-ifs: single-trace optimizations applied to every rank (or chosen ranks) and
replayed coupled, and ``straggler:rank=R`` (that rank as fast as the median rank).

A single-trace optimization transforms a rank's graph as it would alone (``analysis.apply_all``),
given the graph with each collective lasting its **transfer** (its recorded wait for peers taken
out): what the optimization makes of a collective's duration (scaled, or re-costed by the
communication model) is its new transfer, and the wait follows from the coupled replay. The
collectives are found again in the new graph by their table row (a transformation keeps the rows
of the tasks it keeps). A rank where the optimization does not apply keeps its graph (reported).

``straggler:rank=R``: rank R starts its first step with the median rank (its graph's trace start
``t0`` moved earlier by its late start, so every replayed time moves with it) and its own work
takes the median rank's time: CPU gaps, CPU calls and compute kernels (not collectives) scaled by
``median work / its work`` when below 1, where a rank's work is its coupled replayed window minus
its replayed peer wait.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..analysis import apply_all
from ..critical_path import communication_mask
from ..errors import NotApplicable, UsageError
from ..job_report import JobPrediction
from ..optimizations import check_composition, parse_spec
from ..transform import scale
from .couple import Coupled, couple
from .load import RankTrace
from .match import Matching
from .report import job_windows

STRAGGLER = "straggler"


def parse_job_specs(specs: list[str], world: int) -> list[tuple[Any, dict[str, Any]]]:
    """Each ``--opt`` of a job: ``straggler:rank=R`` as ("straggler", {"rank": R}), the others
    through :func:`~daydream.optimizations.parse_spec`.

    Raises:
        UsageError: unknown optimization, bad parameters, or a rank outside the job.
    """
    out: list[tuple[Any, dict[str, Any]]] = []
    for s in specs:
        name, _, rest = s.partition(":")
        if name.strip() != STRAGGLER:
            out.append(parse_spec(s))
            continue
        kv = dict(item.partition("=")[::2] for item in rest.split(",") if item.strip())
        if set(kv) != {"rank"}:
            raise UsageError(f"--opt {s!r}: straggler takes one parameter, rank=R (the rank made as fast as the median)")
        try:
            r = int(kv["rank"])
        except ValueError:
            raise UsageError(f"--opt {s!r}: rank={kv['rank']!r} is not an integer") from None
        if not 0 <= r < world:
            raise UsageError(f"--opt {s!r}: the job has ranks 0..{world - 1}")
        out.append((STRAGGLER, {"rank": r}))
    real = [o for o in out if o[0] != STRAGGLER]
    if real:
        check_composition(real)
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


def _straggler(graphs: list, m: Matching, base: Coupled, rows, r: int) -> tuple[Any, str]:
    i = int(np.nonzero(m.ranks == r)[0][0])
    starts = np.array([w[0] for w in rows], np.int64) - m.offset_ns
    late = int(max(starts[i] - int(np.median(starts)), 0))
    work = np.array([(w[3] - w[2]) for w in rows], np.int64) - base.wait_ns.sum(axis=1)
    f = min(1.0, float(np.median(work)) / work[i]) if work[i] > 0 else 1.0
    g = graphs[i]
    if f < 1.0:
        own = ~communication_mask(g)
        g = scale(g, own, f)
        g = dataclasses.replace(g, gap_ns=np.round(g.gap_ns * f).astype(np.int64))
    g = dataclasses.replace(g, t0_ns=int(g.t0_ns) - late)
    return g, f"step start {late / 1e6:,.3f} ms earlier, own work x{f:.3f}"


def predict(ranks: list[RankTrace], m: Matching, base: Coupled, opts: list[tuple[Any, dict[str, Any]]],
            only: list[int] | None = None) -> JobPrediction:
    """The job replayed coupled after ``opts`` (composed in order) on the ranks ``only``
    (rank numbers; default all; ``straggler`` names its own rank).

    Raises:
        NotApplicable: no selected rank takes the optimizations, or one removes a collective.
    """
    graphs = [_transfers(r.graph, m.node[i][m.member[i]], m.transfer_ns[i][m.member[i]]) for i, r in enumerate(ranks)]
    rows = job_windows(base.graphs, base.timelines)
    notes: dict[str, str] = {}
    real = [o for o in opts if o[0] != STRAGGLER]
    sel = set(int(x) for x in m.ranks) if only is None else set(only)
    applied = 0
    if real:
        for i, r in enumerate(ranks):
            if r.rank not in sel:
                continue
            try:
                graphs[i], done = apply_all(graphs[i], real)
                notes[str(r.rank)] = "; ".join(f"{a.name}: {a.note}" for a in done)
                applied += 1
            except NotApplicable as e:
                notes[str(r.rank)] = f"not applicable: {e}"
        if not applied:
            raise NotApplicable("; ".join(f"rank {k}: {v}" for k, v in notes.items() if v.startswith("not applicable"))
                                or "no rank selected")
    for o in opts:
        if o[0] == STRAGGLER:
            i = int(np.nonzero(m.ranks == o[1]["rank"])[0][0])
            graphs[i], notes[str(o[1]["rank"])] = _straggler(graphs, m, base, rows, o[1]["rank"])
    node = np.stack([_remap(r, g, m.node[i]) for i, (r, g) in enumerate(zip(ranks, graphs))]) if len(m) else m.node
    new = np.stack([g.dur_ns[np.maximum(node[i], 0)] for i, g in enumerate(graphs)]) if len(m) else m.transfer_ns
    tr = np.where(m.member, new, 0).astype(np.int64)
    c = couple(graphs, dataclasses.replace(m, node=node), tr)
    pred = job_windows(c.graphs, c.timelines)
    base_ns = max(w[3] - w[2] for w in rows)
    pred_ns = [int(w[3] - w[2]) for w in pred]
    name = " + ".join(o[0] if o[0] == STRAGGLER else o[0].name for o in opts)
    return JobPrediction(name, sorted(sel) if real else [], int(base_ns), int(max(pred_ns)),
                         round(base_ns / max(max(pred_ns), 1), 4), pred_ns, dict(sorted(notes.items())))
