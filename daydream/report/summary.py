"""The answer a reader needs first, and the tables every peer tool has: what bounds the step,
the top kernels and CPU ranges by time and by share of the critical path, GPU utilization per
device.

Built from the baseline graph, its replay and its critical path (:func:`build_summary`), and
completed with the ``--opt all`` ranking (:func:`answer_whatifs`). Renderers lay it out
(:mod:`daydream.render.text`: the opening lines and the tables).

What bounds the step (:data:`BOUNDS`), from the critical path of the replayed baseline: its time
is split into data loading (host time in the ``data_loading`` phase), host work (the other host
time, split by phase: forward, backward, optimizer, ...), launch overhead (launch latency ``L``),
GPU compute (kernels and sets), copies (memory copies of every direction, peer-to-peer included),
communication (collective and peer-waiting kernels: NCCL/RCCL, DeepEP/NVSHMEM) and
synchronization (blocking calls' own cost after their wait); the largest part bounds the step --
each is one thing to fix. The bound is named by its top contributor on the critical path
(:func:`_bound`): host work and data loading by the deepest meaningful frame the time ran in
(the innermost user Python frame of a recorded python_function stack, else the outermost
framework op, else the innermost annotation: :data:`daydream.simulate.critical_path.FRAME_RULES`),
GPU compute, copies and communication by the task name of that cause with the most path time.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np

from ..events.table import Kind
from ..util.arrays import sorted_unique, unique_inverse
from ..simulate.critical_path import (GAP, OWN, CriticalPath, Wait, communication_mask, host_intervals, node_thread_key,
                                      ranges_of)
from ..graph import NODE_CPU, TaskGraph
from ..graph.range_timeline import NO_RANGE, split_by_range
from ..util.display import CUT
from ..graph.kernels import CLASSES, kernel_info
from ..mapping.rules import fold_by_op, nvtx_base_name
from ..graph.memo import cached
from ..simulate import Timeline

BOUNDS = ("data loading", "host work", "launch overhead", "GPU compute", "copies", "communication", "synchronization")
#: rows of the top-kernel and top-CPU-range tables before "other"
TOP_N = 10
#: the least predicted speed-up the opening line suggests: one printed as 1.00x is no advice
WHATIF_MIN_SPEEDUP = 1.005
#: the detail of the bound when the critical path is empty
EMPTY_PATH = "no CUDA call or GPU task in the trace: the critical path is empty"
#: a wait is named in the opening lines when it is at least this share of the critical path (%)
WAIT_MIN_PCT = 10.0


class TopRow(msgspec.Struct, forbid_unknown_fields=True):
    """One row of a top table: time in the window, and time on the critical path."""

    name: str
    total_ns: int  #: GPU time (kernels) or host time summed over threads (CPU ranges), replayed
    total_pct: float  #: share of all GPU (host) time of the window, %
    path_ns: int  #: time on the critical path of the replayed baseline
    path_pct: float  #: share of the critical path, %


class DeviceUtil(msgspec.Struct, forbid_unknown_fields=True):
    """One GPU's utilization over the traced window (measured), not summed over devices."""

    device: int
    name: str
    busy_ns: int  #: union of the intervals of its tasks
    window_ns: int
    busy_pct: float


class Answer(msgspec.Struct, forbid_unknown_fields=True):
    """The opening lines of the report."""

    step_ns: int  #: median replayed ProfilerStep, over the steps with an API call inside when there are any (the window when the trace has no steps)
    steps: int  #: ProfilerSteps the median is over (0: the window)
    gpu_busy_pct: float  #: busy share of the busiest GPU over the window (measured), %
    bound_by: str  #: one of BOUNDS
    bound_pct: float  #: its share of the critical path, %
    bound_detail: str  #: e.g. the phase of the host work, the top CPU range or kernel in it
    shares_pct: dict[str, float] = {}  #: every bound's share of the critical path, %
    wait: Wait | None = None  #: the largest wait of the critical path, when >= WAIT_MIN_PCT of it
    whatifs: dict[str, float] = {}  #: the top two optimizations by predicted speed-up of the median step (the window's without steps; --opt all)
    #: their traced window's speed-ups with the cross-stream waits that name no event held (report.WaitBound), where lower
    whatif_bounds: dict[str, float] = {}
    #: the traced window's speed-up of each what-if with a bound (the range is the window's: whatif_bounds to this)
    whatif_windows: dict[str, float] = {}


class Summary(msgspec.Struct, forbid_unknown_fields=True):
    """The opening answer and the top tables."""

    answer: Answer
    top_kernels: list[TopRow] = []  #: the TOP_N GPU tasks (kernels, copies, sets) by GPU time, then "other" by kernel class
    top_cpu_ranges: list[TopRow] = []  #: the TOP_N CPU ranges by host time, then "other" by kind
    gpu_devices: list[DeviceUtil] = []


def _pct(x: float, total: float) -> float:
    return float(round(100.0 * float(x) / float(total), 2)) if total > 0 else 0.0


def bound_shares(cp: CriticalPath) -> tuple[dict[str, int], dict[str, int]]:
    """(ns per bound of :data:`BOUNDS`, host work ns per phase) of a critical path."""
    data = sum(d.get("cpu", 0) for p, d in cp.by_phase_ns.items() if p == "data_loading")
    host_by_phase = {p: d.get("cpu", 0) for p, d in cp.by_phase_ns.items() if p != "data_loading" and d.get("cpu", 0)}
    if not cp.by_phase_ns:
        host_by_phase = {"all": cp.by_cause_ns.get("cpu", 0)}
    c = cp.by_cause_ns
    ns = {"data loading": data, "host work": c.get("cpu", 0) - data, "launch overhead": c.get("launch", 0),
          "GPU compute": c.get("gpu_compute", 0), "copies": c.get("copy", 0), "communication": c.get("communication", 0),
          "synchronization": c.get("sync", 0)}
    return ns, host_by_phase


def _bound(cp: CriticalPath, gpu_cause: dict[str, str] | None = None) -> tuple[str, int, str]:
    """(bound, its ns, detail): the largest part, host work compared phase by phase (a phase's
    host work is one thing to fix; all host work together is not), named by its top contributor.

    ``gpu_cause``: the critical-path cause of each GPU task name (``gpu_compute``, ``copy``,
    ``communication``; :func:`gpu_causes`), so that GPU compute is named by a kernel, copies by a
    copy and communication by a collective or peer-waiting kernel (without it, the top GPU name)."""
    ns, host = bound_shares(cp)
    cands = [(v, b, "") for b, v in ns.items() if b != "host work"]
    cands += [(v, "host work", f"in {p}") for p, v in host.items()]
    v, b, detail = max(cands, key=lambda x: (x[0], x[1]))
    if v <= 0:  # an empty critical path: no CUDA call or GPU task, so only host work is traced
        return "host work", 0, EMPTY_PATH
    top = ""
    if b in ("data loading", "host work"):  # the deepest meaningful frame the host time ran in
        phase = "data_loading" if b == "data loading" else detail[3:]
        top = _top_name(cp.host_top_ns.get(phase, {}), frame=True)
        if not top and b == "data loading":
            top = _top_name(cp.by_range_ns)
        if not top and phase == "backward":  # the backward pass's host work: what the engine thread ran
            top = next((_top_name(w.top) for w in cp.waits if w.engine), "")
    elif b in ("GPU compute", "copies", "communication"):
        want = {"GPU compute": "gpu_compute", "copies": "copy", "communication": "communication"}[b]
        top = _top_name({k: x for k, x in cp.by_kernel_ns.items() if gpu_cause is None or gpu_cause.get(k) == want})
    if top:
        detail = (detail + "; " if detail else "") + f"top: {top}"
    return b, v, detail


def gpu_causes(graph: TaskGraph) -> dict[str, str]:
    """The critical-path cause of the own time of each GPU task name of ``graph``: ``copy`` for
    memory copies, ``communication`` for collective and peer-waiting kernels
    (:func:`~daydream.simulate.critical_path.communication_mask`), else ``gpu_compute``; a name
    with tasks of several causes takes the last of that order (names are few)."""
    gpu = graph.node_kind != NODE_CPU
    comm = communication_mask(graph)
    code = np.where(graph.node_kind == Kind.MEMCPY, 2, np.where(comm, 1, 0))[gpu]
    uniq, inv = unique_inverse(graph.name_id[gpu])
    best = np.zeros(len(uniq), np.int64)
    np.maximum.at(best, inv.reshape(-1), code)
    words = ("gpu_compute", "communication", "copy")
    return {graph.names[int(u)]: words[int(c)] for u, c in zip(uniq.tolist(), best.tolist())}


#: a Python frame as Kineto names it: ``path/file.py(LINE): function``
_FRAME_RE = re.compile(r"^(?:.*/)?([^/]+\.py)\((\d+)\): (.+)$", re.S)


def frame_label(name: str) -> str:
    """A Python frame as a person names it: ``function (file.py:LINE)`` (other names unchanged)."""
    m = _FRAME_RE.match(name)
    return f"{m.group(3)} ({m.group(1)}:{m.group(2)})" if m else name


#: longest name the answer line quotes (the top tables give names whole up to their column; a
#: templated kernel name runs to 400 characters)
ANSWER_NAME_MAX = 80


def _top_name(d: dict[str, int], frame: bool = False) -> str:
    rows = [(v, k) for k, v in d.items() if k not in ("other", NO_RANGE)]
    if not rows:
        return ""
    name = max(rows)[1]
    if frame:
        name = frame_label(name)
    return name if len(name) <= ANSWER_NAME_MAX else name[: ANSWER_NAME_MAX - len(CUT)] + CUT


def answer_steps(steps: list) -> list:
    """The steps that say how long a step is: not a step with a note (no API call inside it, a
    profiler's trailing empty step; measured at 0 ns while replaying longer) and not one of no length
    at all (a duplicated step, a range that never ended: "step 0.000 ms (median of 6 ProfilerSteps)"
    when half the steps were such copies); all of them when none is left."""
    return [w for w in steps if not w.note and (w.measured_ns > 0 or w.replayed_ns > 0)] or steps


def build_summary(graph: TaskGraph, tl: Timeline, rec: Timeline, cp: CriticalPath, detail: dict, steps: list, window) -> Summary:
    """The :class:`Summary` of a baseline replay ``tl`` (recorded ``rec``), its critical path
    ``cp`` and that path's full breakdowns ``detail`` (:func:`~daydream.simulate.critical_path.critical_path`),
    the report's step and window rows."""
    worked = answer_steps(steps)
    replayed = [w.replayed_ns for w in worked]
    step_ns = int(round(median(replayed))) if replayed else window.replayed_ns
    devices = device_utilization(graph, rec, graph.t0_ns, graph.t0_ns + window.measured_ns)
    b, v, det = _bound(cp, gpu_causes(graph))
    ns, _ = bound_shares(cp)
    wait = cp.waits[0] if cp.waits and _pct(cp.waits[0].ns, cp.length_ns) >= WAIT_MIN_PCT else None
    ans = Answer(int(step_ns), len(replayed), max((d.busy_pct for d in devices), default=0.0), b, _pct(v, cp.length_ns), det,
                 {k: _pct(x, cp.length_ns) for k, x in ns.items()}, wait)
    return Summary(ans, top_kernels(graph, tl, cp, detail.get("kernel_ns", {})), top_cpu_ranges(graph, tl, cp, detail.get("range_ns", {})), devices)


def device_utilization(graph: TaskGraph, rec: Timeline, lo: int, hi: int) -> list[DeviceUtil]:
    """Busy time of each GPU of the trace over ``[lo, hi]`` (recorded times), one row per device."""
    dev = graph.lane_keys[graph.lane, 2]
    gpu = graph.node_kind != NODE_CPU
    names = {d.id: d.name for d in graph.devices}
    out = []
    for d in sorted_unique(dev[gpu]).tolist():  # devices are few
        m = gpu & (dev == d)
        busy = _union(np.clip(rec.start_ns[m], lo, hi), np.clip(rec.end_ns[m], lo, hi))
        out.append(DeviceUtil(int(d), names.get(d, "") or "", int(busy), int(hi - lo), _pct(busy, hi - lo)))
    return out


def _union(s: np.ndarray, e: np.ndarray) -> int:
    """Length (ns) of the union of intervals ``[s, e]``."""
    keep = e > s
    s, e = s[keep], e[keep]
    if not len(s):
        return 0
    o = np.argsort(s, kind="stable")
    s, e = s[o], np.maximum.accumulate(e[o])
    new = np.concatenate([[True], s[1:] > e[:-1]])
    blk = np.cumsum(new) - 1
    hi = np.zeros(int(blk[-1]) + 1, np.int64)
    np.maximum.at(hi, blk, e)
    return int((hi - s[new]).sum())


def _rows(names: list[str], total: np.ndarray, path: dict[str, int], all_total: float, cp_len: int) -> list[TopRow]:
    return [TopRow(n, int(t), _pct(t, all_total), int(path.get(n, 0)), _pct(path.get(n, 0), cp_len)) for n, t in zip(names, total.tolist())]


def top_kernels(graph: TaskGraph, tl: Timeline, cp: CriticalPath, path_ns: dict[str, int]) -> list[TopRow]:
    """The TOP_N GPU task names by replayed GPU time, then the rest by kernel class."""
    gpu = np.nonzero(graph.node_kind != NODE_CPU)[0]
    if not len(gpu):
        return []
    dur = (tl.end_ns - tl.start_ns)[gpu]
    uniq, first, inv = np.unique(graph.name_id[gpu], return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    tot = np.bincount(inv, weights=dur, minlength=len(uniq))
    o = np.lexsort((uniq, -tot))
    top, rest = o[:TOP_N], o[TOP_N:]
    names = [graph.names[int(uniq[i])] for i in top]
    rows = _rows(names, tot[top], path_ns, float(dur.sum()), cp.length_ns)
    if len(rest):
        cls = kernel_info(graph).cls[gpu]
        in_rest = np.isin(inv, rest)
        top_set = set(names)
        # a name's class as its tasks have it (a memcpy's by its kind: its name is no kernel name)
        cls_of = {graph.names[int(u)]: int(cls[f]) for u, f in zip(uniq.tolist(), first.tolist())}
        for c in sorted_unique(cls[in_rest]).tolist():  # classes are few
            m = in_rest & (cls == c)
            cname = CLASSES[c] if c < len(CLASSES) else "other"
            k = len(sorted_unique(inv[m]))
            p = sum(v for nm, v in path_ns.items() if nm not in top_set and cls_of.get(nm, -1) == c)
            rows.append(TopRow(f"other: {cname} ({k} names)", int(dur[m].sum()), _pct(dur[m].sum(), dur.sum()), int(p), _pct(p, cp.length_ns)))
    return rows


def _by_op(names: list[str], tot: np.ndarray, path_ns: dict[str, int]) -> tuple[list[str], np.ndarray, dict[str, int]]:
    """Range names, their totals and path times with emit_nvtx per-call names summed per op
    (``aten::mm, seq = 12, op_id = 7`` -> ``aten::mm``, :func:`daydream.mapping.rules.nvtx_base_name`)."""
    uniq, out = fold_by_op(names, tot)
    if uniq is names:
        return names, tot, path_ns
    keys, vals = fold_by_op(list(path_ns), np.array(list(path_ns.values()), np.float64))
    return uniq, out, {k: int(round(v)) for k, v in zip(keys, vals.tolist())}


def top_cpu_ranges(graph: TaskGraph, tl: Timeline, cp: CriticalPath, path_ns: dict[str, int]) -> list[TopRow]:
    """The TOP_N CPU ranges by host time (calls' own time and gaps, summed over threads), then
    the rest by kind (``ns::`` framework ops by namespace, annotations)."""
    cpu = np.nonzero(graph.is_cpu)[0]
    if not len(cpu):
        return []
    rt = ranges_of(graph)
    own = np.maximum(tl.end_ns - tl.start_ns - tl.blocked_ns, 0)[cpu]
    v = np.concatenate([cpu, cpu])
    part = np.concatenate([np.full(len(cpu), OWN), np.full(len(cpu), GAP)])
    w = np.concatenate([own, graph.gap_ns[cpu]])
    a, b = host_intervals(graph, v, part)
    _, lab, share = split_by_range(rt, node_thread_key(graph)[v], a, b, w)
    names, tot, path_ns = _by_op([NO_RANGE, *rt.labels], np.bincount(lab + 1, weights=share, minlength=len(rt.labels) + 1), path_ns)
    o = [i for i in np.lexsort((np.arange(len(names)), -tot)).tolist() if tot[i] > 0]
    top, rest = o[:TOP_N], o[TOP_N:]
    rows = _rows([names[i] for i in top], tot[top], path_ns, float(w.sum()), cp.length_ns)
    groups: dict[str, list[int]] = {}
    for i in rest:  # distinct range names
        nm = names[i]
        groups.setdefault(nm.split("::")[0] + "::" if "::" in nm else "annotations", []).append(i)
    for g, ids in sorted(groups.items(), key=lambda kv: -sum(tot[i] for i in kv[1])):
        t = float(sum(tot[i] for i in ids))
        p = sum(path_ns.get(names[i], 0) for i in ids)
        rows.append(TopRow(f"other: {g} ({len(ids)} names)", int(round(t)), _pct(t, w.sum()), int(p), _pct(p, cp.length_ns)))
    return rows


def median(xs) -> float:
    """The true median of ``xs`` (the mean of the two middle values of an even count; 0.0 when empty)."""
    v = sorted(xs)
    if not v:
        return 0.0
    h = len(v) // 2
    return float(v[h]) if len(v) % 2 else (float(v[h - 1]) + float(v[h])) / 2.0


def median_step_speedup(base_steps: list, pred_steps: list) -> float:
    """The speed-up of the answer's median step: the true median of the replayed steps over the
    true median of the same steps predicted (:func:`answer_steps`, paired by position); 0.0 when
    the trace has no steps or the prediction's steps do not pair with them."""
    if not base_steps or len(pred_steps) != len(base_steps):
        return 0.0
    kept = {id(w) for w in answer_steps(base_steps)}
    pos = [i for i, w in enumerate(base_steps) if id(w) in kept]
    before, after = median(base_steps[i].replayed_ns for i in pos), median(pred_steps[i].predicted_ns for i in pos)
    return round(before / after, 4) if after > 0 else 0.0


def answer_speedup(r) -> float:
    """The speed-up a :class:`~daydream.report.report_model.Ranked` row is ranked and suggested by:
    its median step's when the trace has steps, else its traced window's."""
    return r.step_speedup if getattr(r, "step_speedup", 0.0) > 0 else r.speedup


def answer_whatifs(summary: Summary, ranking: list) -> None:
    """Complete the answer with the top two optimizations of an ``--opt all`` ranking (in place),
    those predicted at least :data:`WHATIF_MIN_SPEEDUP` times faster (:func:`answer_speedup`: the
    median step's speed-up where the trace has steps)."""
    rows = sorted((r for r in ranking if r.predicted_ns >= 0 and answer_speedup(r) >= WHATIF_MIN_SPEEDUP),
                  key=lambda r: (-answer_speedup(r), r.name))
    summary.answer.whatifs = {r.name: answer_speedup(r) for r in rows[:2]}
    summary.answer.whatif_bounds = {r.name: r.speedup_bound for r in ranking if r.name in summary.answer.whatifs
                                    and 0 < r.speedup_bound < r.speedup - 0.005}
    summary.answer.whatif_windows = {r.name: r.speedup for r in rows[:2] if r.name in summary.answer.whatif_bounds}


def change_summary(before: TaskGraph, after: TaskGraph) -> str:
    """What a transformation changed, in words: GPU time and host time (calls and gaps) before and
    after, and how many of the recorded GPU tasks and CPU calls it changed, removed or left alone
    (tasks matched by their table row; tasks a transformation added have none)."""
    def totals(g: TaskGraph):
        gpu = g.node_kind != NODE_CPU
        return int(g.dur_ns[gpu].sum()), int(g.dur_ns[~gpu].sum() + g.gap_ns[~gpu].sum())

    parts = []
    same = _same_tasks(before, after)
    tb, ta = totals(before), totals(after)
    if same:  # the same tasks (a change of durations only): each row is its own match
        has_row = before.row >= 0
        differs = (before.dur_ns + before.gap_ns) != (after.dur_ns + after.gap_ns)
    for label, is_gpu in (("GPU", True), ("host", False)):
        mb = (before.node_kind != NODE_CPU) == is_gpu
        if same:
            m = mb & has_row
            changed = int(np.count_nonzero(differs & m))
            rb, removed, added = before.row[m], 0, int(np.count_nonzero(mb & ~has_row))
        else:
            changed, removed, added, rb = _matched_changes(before, after, mb, is_gpu)
        t0, t1 = (tb[0], ta[0]) if is_gpu else (tb[1], ta[1])
        what = "tasks" if is_gpu else "calls"
        parts.append(f"{label} time {t0 / 1e6:,.3f} -> {t1 / 1e6:,.3f} ms ({changed:,} {what} changed, {removed:,} removed, "
                     f"{added:,} added, {len(rb) - changed - removed:,} left alone)")
    return "; ".join(parts)


def _same_tasks(before: TaskGraph, after: TaskGraph) -> bool:
    """``after`` has ``before``'s tasks in the same places (the same row and kind arrays, rows
    distinct): matching by row is the identity."""
    if after.row is not before.row or after.node_kind is not before.node_kind:
        return False
    return bool(cached(before, "summary.rows_distinct", lambda: _distinct(before.row[before.row >= 0])))


def _distinct(rows: np.ndarray) -> bool:
    """No row twice (``rows``: int64 >= 0); a bool per row id (a bincount's int64 counts: 3x the time)."""
    if not len(rows):
        return True
    seen = np.zeros(int(rows.max()) + 1, bool)
    seen[rows] = True
    return int(np.count_nonzero(seen)) == len(rows)


def _matched_changes(before: TaskGraph, after: TaskGraph, mb: np.ndarray, is_gpu: bool) -> tuple[int, int, int, np.ndarray]:
    """(changed, removed, added, recorded rows of ``before``) of one side (GPU or host), tasks
    matched by table row."""
    ma = (after.node_kind != NODE_CPU) == is_gpu
    rb, ra = before.row[mb & (before.row >= 0)], after.row[ma & (after.row >= 0)]
    cost_b = (before.dur_ns + before.gap_ns)[mb & (before.row >= 0)]
    pos = np.full(int(max(rb.max(initial=-1), ra.max(initial=-1))) + 1, -1, np.int64)
    pos[ra] = np.nonzero(ma & (after.row >= 0))[0]
    kept = pos[rb] >= 0  # np.isin(rb, ra) by the row table
    cost_a = (after.dur_ns + after.gap_ns)[np.maximum(pos[rb], 0)]
    changed = int(np.count_nonzero(kept & (cost_a != cost_b)))
    removed = int(np.count_nonzero(~kept))
    added = int(np.count_nonzero(ma & (after.row < 0)))
    return changed, removed, added, rb
