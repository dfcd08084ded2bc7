"""The report's computation: :func:`build_report` assembles the :class:`~daydream.report.report_model.Report`
of a replay against the recorded timeline (graph summary, the traced window, each ProfilerStep and
each process, the critical path, time by phase and top layers of mapped traces, warnings, the trust
verdict, the summary and the collectives), and :func:`build_prediction` the
:class:`~daydream.report.report_model.Prediction` of a transformed graph's replay.

The structs, the ``--json`` document and its schema are in :mod:`daydream.report.report_model`; the
windows in :mod:`daydream.report.windows`; the trust verdict and warnings in
:mod:`daydream.report.trust`. Renderers only lay the report out: the terminal text
(:mod:`daydream.render.text`), the ``--json`` document and, from the same graphs and timelines, the
Chrome trace (:mod:`daydream.render.chrome_trace`).
"""

from __future__ import annotations

import numpy as np

from ..util.arrays import small_pages, sorted_unique
from ..graph.collectives import find_collectives
from ..simulate.critical_path import communication_mask, critical_path, gpu_relevant
from ..graph import NODE_CPU, EdgeKind, TaskGraph
from ..mapping.rules import PHASES
from ..graph.memo import cached
from ..simulate import Timeline
from .summary import build_summary
from .memory_fit import memory_summary
from .tables import build_tables
from .report_model import (
    REPORT_VERSION,
    AppliedOpt,
    CollectiveStats,
    CommSummary,
    GraphSummary,
    GroupStats,
    PredictedWindow,
    Prediction,
    Report,
    WindowStats,
)
from .windows import _breakdown, _gpu_busy, _process_ids, _step_groups, _window, _window_end, _zero_length_steps, step_windows
from .trust import _warnings, build_trust
from ..graph.contention import measure_contention


def _graph_summary(graph: TaskGraph) -> GraphSummary:
    n_cpu = int(np.count_nonzero(graph.node_kind == NODE_CPU))
    dep = graph.dependency_edges
    n_gpu_edges_x = int(np.count_nonzero(graph.node_kind[graph.edge_dst[dep]] != NODE_CPU))
    n_waits = int(np.count_nonzero(graph.edge_kind == EdgeKind.WAIT))  # blocking waits (not launch-queue slots)
    return GraphSummary(
        cpu_tasks=n_cpu,
        gpu_tasks=graph.n - n_cpu,
        cpu_lanes=int(np.count_nonzero(~graph.lane_is_gpu)),
        gpu_lanes=int(np.count_nonzero(graph.lane_is_gpu)),
        launch_edges=int(np.count_nonzero(graph.launch >= 0)),
        sync_edges=n_waits,
        cross_stream_edges=n_gpu_edges_x,
        launch_latency_ns=int(graph.launch_latency_ns),
        gpu_gap_ns=int(graph.gpu_gap_ns),
        staging_latency_ns=int(graph.staging_latency_ns),
        **_staging(graph.staging_fit),
        **_contention(graph),
        counts=dict(sorted(graph.counts.items())),
        gpus=sorted(set(graph.lane_keys[graph.lane_is_gpu, 2].tolist())),
    )


def _staging(fit) -> dict:
    """The :class:`GraphSummary` fields of a graph's staging fit (``graph/build/staging.py``)."""
    if fit is None:
        return {}
    return {"staging_threshold_bytes": int(fit.threshold_bytes), "staging_threshold_source": fit.threshold_source,
            "staging_ns_per_byte": float(fit.ns_per_byte), "staging_fit": fit.describe()}


def _contention(graph: TaskGraph) -> dict:
    """The :class:`GraphSummary` fields of the trace's measured contention and of the contention
    model the replay used (``graph.contention_factor``, 0: off)."""
    c = measure_contention(graph)
    on = graph.contention_factor > 0
    out = {"contention_factor": round(c.factor, 6),
           "contention": c.describe() + ("" if c.reason or on else "; measured, not used (--contention off)")}
    if on:
        out.update(contention_applied=float(graph.contention_factor), contention_applied_from=graph.contention_source,
                   contention_unstretched=int(graph.counts.get("contention_unstretched", 0)))
    return out


def _window_note(graph: TaskGraph, rel: np.ndarray) -> str:
    """The traced window's note when threads without GPU work are left out of it."""
    n_out = int(np.count_nonzero(~graph.lane_is_gpu)) - len(sorted_unique(graph.lane[rel & (graph.node_kind == NODE_CPU)]))
    return f"ends with the GPU work; {n_out} thread(s) that never launch or wait for GPU work not counted" if n_out > 0 and rel.any() else ""


@small_pages  # its many big temporaries (daydream.util.arrays.small_pages)
def build_report(graph: TaskGraph, tl: Timeline, rec: Timeline) -> Report:
    """Assemble the report of a replay ``tl`` against the recorded timeline ``rec``."""
    t = graph.table
    summary = _graph_summary(graph)
    t0 = graph.t0_ns
    rel = gpu_relevant(graph)
    sw = step_windows(graph, tl)
    hi_m = _window_end(graph, rec.end_ns, rel, [w.end_ns for w in sw])
    hi_r = _window_end(graph, tl.end_ns, rel, [w.replayed_end_ns for w in sw])
    window = _window("traced window", graph, tl, rec, t0, hi_m, t0, hi_r, cached(graph, "report.all_nodes", lambda: np.ones(graph.n, dtype=bool)),
                     _window_note(graph, rel))
    steps = _zero_length_steps([_window(w.name, graph, tl, rec, w.start_ns, w.end_ns, w.replayed_start_ns, w.replayed_end_ns, w.members,
                                        w.note, w.members, grp) for w, grp in zip(sw, _step_groups(graph, sw))], window)
    phases, layers = _groups(graph, tl)
    detail: dict = {}
    _, cp = critical_path(graph, tl, *_phase_args(graph), detail=detail)
    return Report(REPORT_VERSION, t.meta, t.accounting, summary, window, steps, cp, processes=_process_windows(graph, tl, rec),
                  phases=phases, layers=layers, warnings=_warnings(graph), trust=build_trust(graph, tl, rec, window, steps),
                  summary=build_summary(graph, tl, rec, cp, detail, steps, window), communication=comm_summary(graph),
                  memory=memory_summary(graph, tl), tables=build_tables(graph, rec))


def comm_summary(graph: TaskGraph) -> CommSummary | None:
    """The :class:`CommSummary` of ``graph``'s collectives and other communication tasks, None
    when it has neither."""
    c = find_collectives(graph)
    comm = communication_mask(graph).copy()  # the memo's mask is shared: changed on a copy
    comm[c.node] = False
    other = int(comm.sum())
    if not len(c) and not other:
        return None
    by = [CollectiveStats(op, v["count"], v["sized"], v["bytes"], v["time_ns"], v["busbw_median_GBps"], v["busbw_max_GBps"])
          for op, v in c.summary().items()]
    return CommSummary(len(c), int((c.size_bytes < 0).sum()), by, dict(c.counts), other)


def _process_windows(graph: TaskGraph, tl: Timeline, rec: Timeline) -> list[WindowStats]:
    """One window per process when the trace has several (e.g. one rank per GPU): from the
    trace start to the end of that process's last task (its API calls and the GPU work it launched)."""
    pids, uniq = _process_ids(graph)
    if len(uniq) < 2:
        return []
    out = []
    t0 = graph.t0_ns
    rel = gpu_relevant(graph)
    for p in uniq.tolist():
        m = pids == p
        e = _process_end_members(m, rel)
        devs = sorted(set(graph.lane_keys[graph.lane[m & (graph.node_kind != NODE_CPU)], 2].tolist()))
        name = f"process {p}" + (f" (GPU {', '.join(map(str, devs))})" if devs else "")
        out.append(_window(name, graph, tl, rec, t0, int(rec.end_ns[e].max()), t0, int(tl.end_ns[e].max()), m, busy_members=m))
    return out


def _process_end_members(m: np.ndarray, rel: np.ndarray) -> np.ndarray:
    """The tasks whose last end closes a process's window: like the traced window's, those that bound
    it (``gpu_relevant``: not a thread that never launches or waits for GPU work), all of the process's
    when none does."""
    e = m & rel
    return e if e.any() else m


TOP_LAYERS = 10


def _phase_args(graph: TaskGraph):
    if graph.mapping is None:
        return None, None
    return list(PHASES), graph.mapping.phase


def _groups(graph: TaskGraph, tl: Timeline) -> tuple[list[GroupStats], list[GroupStats]]:
    """Per-phase and top-layer time of a mapped graph (empty lists when unmapped)."""
    mp = graph.mapping
    if mp is None or graph.n == 0:
        return [], []
    cpu = graph.node_kind == NODE_CPU
    dur = tl.end_ns - tl.start_ns - tl.blocked_ns
    gpu_ns = np.where(cpu, 0, dur)
    own_ns = np.where(cpu, dur, 0)  # a CPU node's own call time: its phase / layer
    gap_ns = np.where(cpu, graph.gap_ns, 0)  # the CPU gap before it: its gap phase / layer when mapped
    launched = (~cpu) & (graph.launch >= 0)

    def table(codes: np.ndarray, gap_codes: np.ndarray | None, names: list[str]) -> list[GroupStats]:
        k = len(names)
        c = np.where(codes >= 0, codes, k).astype(np.int64)
        gc = c if gap_codes is None else np.where(gap_codes >= 0, gap_codes, k).astype(np.int64)
        g = np.bincount(c, weights=gpu_ns, minlength=k + 1)
        u = np.bincount(c, weights=own_ns, minlength=k + 1) + np.bincount(gc, weights=gap_ns, minlength=k + 1)
        lc = np.bincount(c[launched], minlength=k + 1)
        return [GroupStats(names[i] if i < k else "(no layer)", int(g[i]), int(u[i]), int(lc[i])) for i in range(k + 1) if g[i] or u[i]]

    def codes(a: np.ndarray | None) -> np.ndarray | None:
        return a.astype(np.int64) if a is not None else None

    phases = [p for p in table(codes(mp.phase), codes(mp.gap_phase), list(PHASES)) if p.name != "(no layer)"]
    layers = sorted(table(codes(mp.layer_id), codes(mp.gap_layer_id), list(mp.labels)), key=lambda x: (-x.gpu_ns, -x.cpu_ns, x.name))
    return phases, layers[:TOP_LAYERS]


def _predicted(name, base: WindowStats, graph, tl, lo, hi, members, busy_members=None, group=None) -> PredictedWindow:
    """One :class:`PredictedWindow` (``group`` as :func:`_window`)."""
    per_device, kinds = (group.devices, group.kinds) if group is not None else (None, None)
    busy, _ = _gpu_busy(graph, tl.start_ns, tl.end_ns, lo, hi, busy_members, per_device)
    pred = hi - lo
    return PredictedWindow(
        name=name,
        measured_ns=base.measured_ns,
        replayed_ns=base.replayed_ns,
        predicted_ns=int(pred),
        speedup=round(base.replayed_ns / pred, 4) if pred > 0 else 0.0,
        gpu_busy_predicted_ns=busy,
        breakdown=_breakdown(graph, tl, members, kinds),
    )


@small_pages
def build_prediction(base: Report, graph: TaskGraph, tl: Timeline, applied: list[AppliedOpt]) -> Prediction:
    """The prediction made by simulating the transformed ``graph`` (timeline ``tl``)."""
    rel = gpu_relevant(graph)
    sw = step_windows(graph, tl)
    hi = _window_end(graph, tl.end_ns, rel, [w.replayed_end_ns for w in sw])
    everything = cached(graph, "report.all_nodes", lambda: np.ones(graph.n, dtype=bool))  # one array: its member kinds stay memoized
    window = _predicted("traced window", base.window, graph, tl, graph.t0_ns, hi, everything)
    groups = {id(w): grp for w, grp in zip(sw, _step_groups(graph, sw))}
    steps = [_predicted(w.name, b, graph, tl, w.replayed_start_ns, w.replayed_end_ns, w.members, w.members, groups[id(w)])
             for w, b in _step_pairs(sw, base.steps)]
    _, cp = critical_path(graph, tl, *_phase_args(graph))
    return Prediction(applied, window, steps, cp, _predicted_processes(base, graph, tl), memory=memory_summary(graph, tl),
                      contention_stretched=tl.contention_stretched)


def contention_note(base: Report, graph: TaskGraph, tl: Timeline) -> str:
    """What the contention model did in the prediction ``tl`` of ``graph`` beside the baseline
    ``base``, for its note ("" when the model is off)."""
    if tl.contention_stretched < 0:
        return ""
    return (f"; contention x{graph.contention_factor:.3f}: {tl.contention_stretched:,} kernels start beside another stream's "
            f"and are stretched (baseline {base.graph.contention_stretched:,})")


def _step_pairs(sw: list, base_steps: list[WindowStats]) -> list[tuple]:
    """Each predicted step window with its baseline row: by position (both come from the same
    ProfilerStep ranges of the same table, in the same order), so that steps sharing a name (two
    processes' ProfilerStep#5, a renamed step) keep their own baseline; by name, for names that occur
    once, if the lists differ."""
    if len(sw) == len(base_steps) and all(w.name == b.name for w, b in zip(sw, base_steps)):
        return list(zip(sw, base_steps))
    count: dict[str, int] = {}
    for b in base_steps:
        count[b.name] = count.get(b.name, 0) + 1
    by_name = {b.name: b for b in base_steps if count[b.name] == 1}
    return [(w, by_name[w.name]) for w in sw if w.name in by_name]


def _predicted_processes(base: Report, graph: TaskGraph, tl: Timeline) -> list[PredictedWindow]:
    """Each process row of the baseline (:func:`_process_windows`), predicted: from the trace start
    to the end of that process's last task in ``tl``."""
    if not base.processes:
        return []
    pids, uniq = _process_ids(graph)
    rel = gpu_relevant(graph)
    out = []
    for w, p in zip(base.processes, uniq.tolist()):
        m = pids == p
        if not m.any() or w.name.partition(" (")[0] != f"process {p}":
            return []  # the processes changed (not expected of a transform): no rows rather than wrong ones
        out.append(_predicted(w.name, w, graph, tl, graph.t0_ns, int(tl.end_ns[_process_end_members(m, rel)].max()), m, m))
    return out if len(out) == len(base.processes) else []


