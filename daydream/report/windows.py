"""The report's windows, measured and replayed: the traced window, each ProfilerStep
(:func:`step_windows`: its members, and where its boundaries lie in a replay) and each process,
with the GPU busy and idle time of each (the union of its GPU tasks' intervals per device) and its
time by task kind (:class:`~daydream.report.report_model.Breakdown`). The structure (members by
kind and device, a thread's calls) is kept in the graph's memo: a step's windows are asked again
for every prediction.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec
import numpy as np

from ..util.arrays import sorted_unique
from ..simulate.critical_path import gpu_relevant
from ..events.table import Kind
from ..graph import NODE_CPU, TaskGraph, profiler_steps
from ..graph.memo import cached, memo
from ..simulate.carry import boundaries
from ..simulate import Timeline
from .report_model import Breakdown, WindowStats


def _union_length(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> int:
    """Length (ns) of the union of intervals clipped to [lo, hi]."""
    s = np.clip(starts, lo, hi)
    e = np.clip(ends, lo, hi)
    keep = e > s
    s, e = s[keep], e[keep]
    if len(s) == 0:
        return 0
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    run_end = np.maximum.accumulate(e)
    # a new merged block starts where s > the running end of everything before it
    new_block = np.ones(len(s), dtype=bool)
    new_block[1:] = s[1:] > run_end[:-1]
    b_start = s[new_block]
    # a block's end: the running end at its last interval (earlier blocks all ended before its start)
    last = np.ones(len(s), dtype=bool)
    last[:-1] = new_block[1:]
    b_end = run_end[last]
    return int((b_end - b_start).sum())


def _gpu_busy(graph: TaskGraph, start: np.ndarray, end: np.ndarray, lo: int, hi: int, members: np.ndarray | None = None,
              per_device: list[np.ndarray] | None = None) -> tuple[int, int]:
    """(busy, idle) ns of the GPUs in [lo, hi]; busy is the union of GPU task intervals per device
    (``per_device``: the members' GPU tasks by device, as :func:`_device_tasks`, when known)."""
    if per_device is None:
        per_device = _device_tasks(graph, members)
    busy = 0
    for idx in per_device:
        busy += _union_length(start[idx], end[idx], lo, hi)
    return busy, max(len(per_device), 1) * max(hi - lo, 0) - busy


def _device_tasks(graph: TaskGraph, members: np.ndarray | None) -> list[np.ndarray]:
    """The GPU tasks (among ``members``) of each device, by device id: structure only, kept in the
    graph's memo per ``members`` array (the whole graph, each step's members; the memo holds the
    array, so its id names it while it is kept)."""
    seen = memo(graph).setdefault("report.device_tasks", {})
    hit = seen.get(id(members))
    if hit is not None and hit[0] is members:
        return hit[1]
    # the members' GPU tasks first (one pass over the graph), then grouped by device among them:
    # a step's members are few, and a trace has many steps (O(steps x tasks) passes grew faster
    # than the trace: the second prediction at 16 M Kineto events, 122 steps)
    idx = np.flatnonzero(members if members is not None else graph.node_kind != NODE_CPU)
    if members is not None:
        idx = idx[graph.node_kind[idx] != NODE_CPU]
    out = _by_device(graph, idx)
    if len(seen) >= 64:
        seen.clear()
    seen[id(members)] = (members, out)
    return out


def _by_device(graph: TaskGraph, idx: np.ndarray) -> list[np.ndarray]:
    """GPU task ids ``idx`` (ascending) grouped by device: one array per device, by device id, node
    order kept within one."""
    dev = graph.lane_keys[graph.lane[idx], 2]
    order = np.argsort(dev, kind="stable")  # ascending device, node order kept within one
    idx, dev = idx[order], dev[order]
    cut = np.flatnonzero(np.diff(dev)) + 1
    return np.split(idx, cut) if len(idx) else []


def _breakdown(graph: TaskGraph, tl: Timeline, members: np.ndarray, kinds: tuple[np.ndarray, ...] | None = None) -> Breakdown:
    """Time by task kind of ``members`` (``kinds``: their ids by kind, as :func:`_member_kinds`, when known)."""
    cpu, kern, cp, st = _member_kinds(graph, members) if kinds is None else kinds
    return Breakdown(
        cpu_runtime_ns=int((tl.end_ns[cpu] - tl.start_ns[cpu] - tl.blocked_ns[cpu]).sum()),
        cpu_gap_ns=int(graph.gap_ns[cpu].sum()),
        sync_wait_ns=int(tl.blocked_ns[cpu].sum()),
        kernel_ns=int((tl.end_ns[kern] - tl.start_ns[kern]).sum()),
        memcpy_ns=int((tl.end_ns[cp] - tl.start_ns[cp]).sum()),
        memset_ns=int((tl.end_ns[st] - tl.start_ns[st]).sum()),
    )


def _member_kinds(graph: TaskGraph, members: np.ndarray) -> tuple[np.ndarray, ...]:
    """(CPU tasks, kernels, memcpys, memsets) among ``members``, as node ids: structure only, kept
    in the graph's memo per ``members`` array (as :func:`_device_tasks`)."""
    seen = memo(graph).setdefault("report.member_kinds", {})
    hit = seen.get(id(members))
    if hit is not None and hit[0] is members:
        return hit[1]
    out = _kinds_of(graph, np.flatnonzero(members))  # one pass over the graph, then among the members (see _device_tasks)
    if len(seen) >= 64:
        seen.clear()
    seen[id(members)] = (members, out)
    return out


def _kinds_of(graph: TaskGraph, idx: np.ndarray) -> tuple[np.ndarray, ...]:
    """(CPU tasks, kernels, memcpys, memsets) among the node ids ``idx``, order kept."""
    k = graph.node_kind[idx]
    return tuple(idx[k == c] for c in (NODE_CPU, Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET))


def _error_pct(measured: int, replayed: int) -> float:
    return round((replayed - measured) / measured * 100.0, 4) + 0.0 if measured > 0 else 0.0  # + 0.0: no -0.0


def _window(name, graph, tl, rec, lo_m, hi_m, lo_r, hi_r, members, note="", busy_members=None, group=None) -> WindowStats:
    """One :class:`WindowStats`; ``group``: the :class:`_StepGroup` of a step (its members and
    busy members), whose node ids by kind and device are known."""
    per_device, kinds = (group.devices, group.kinds) if group is not None else (None, None)
    bm, im = _gpu_busy(graph, rec.start_ns, rec.end_ns, lo_m, hi_m, busy_members, per_device)
    br, ir = _gpu_busy(graph, tl.start_ns, tl.end_ns, lo_r, hi_r, busy_members, per_device)
    measured, replayed = hi_m - lo_m, hi_r - lo_r
    kernels = len(kinds[1]) if kinds is not None else int(np.count_nonzero((graph.node_kind == Kind.KERNEL) & members))
    return WindowStats(
        name=name,
        measured_ns=int(measured),
        replayed_ns=int(replayed),
        error_pct=_error_pct(measured, replayed),
        gpu_busy_measured_ns=bm,
        gpu_idle_measured_ns=im,
        gpu_busy_replayed_ns=br,
        gpu_idle_replayed_ns=ir,
        kernels=kernels,
        breakdown=_breakdown(graph, tl, members, kinds),
        note=note,
    )


class StepWindow(NamedTuple):
    """One ProfilerStep: where it lies measured and replayed (ns), and the nodes that belong to it."""

    name: str
    start_ns: int  #: measured: the step's CPU start, or the previous step's end when that is later
    end_ns: int  #: measured: the step's CPU end, or its members' last end when that is later
    replayed_start_ns: int
    replayed_end_ns: int
    members: np.ndarray  #: the members' node ids, ascending (a mask per step made memory grow as steps x nodes)
    note: str  #: why replayed = measured, when it is
    cpu_start_ns: int = 0  #: the ProfilerStep range itself (measured), without the GPU work it launched
    cpu_end_ns: int = 0
    replayed_cpu_start_ns: int = 0  #: where those boundaries lie replayed
    replayed_cpu_end_ns: int = 0


class _StepGroup(NamedTuple):
    """One ProfilerStep's members (:func:`_step_members`)."""

    name: str
    start_ns: int  #: the ProfilerStep range (measured)
    end_ns: int
    pid: int
    tid: int
    idx: np.ndarray  #: the members' node ids, ascending
    kinds: tuple[np.ndarray, ...]  #: the members' (CPU tasks, kernels, memcpys, memsets), as :func:`_member_kinds`
    devices: list[np.ndarray]  #: the members' GPU tasks by device, as :func:`_device_tasks`


#: up to this many ProfilerSteps, :func:`_step_members` finds each step's members by a pass over
#: the graph (cheaper than its sort; both find the same members)
FEW_STEPS = 8


def _step_members(graph: TaskGraph) -> list[_StepGroup]:
    """Each ProfilerStep's members (:func:`step_windows`): the nodes whose position lies in its range,
    on its process, among ``gpu_relevant``. Structure only, kept in the graph's memo (the arrays are
    shared: do not change them).

    One sort of the candidate nodes by (process, position), then each step's members are one
    slice of it (two binary searches): the cost is the graph once plus the steps' members, not
    the graph once per step (a trace's step count grows with its length)."""
    def make():
        steps = profiler_steps(graph.table)
        if len(steps) <= FEW_STEPS:  # a pass over the graph per step costs less than the sort
            rel, proc = gpu_relevant(graph), graph.lane_keys[graph.lane, 1]
            out = []
            for name, s, e, pid, tid in steps:
                idx = np.flatnonzero((graph.position_ns >= s) & (graph.position_ns < e) & (proc == pid) & rel)
                gpu = idx[graph.node_kind[idx] != NODE_CPU]
                out.append(_StepGroup(name, s, e, pid, tid, idx, _kinds_of(graph, idx), _by_device(graph, gpu)))
            return out
        cand = np.flatnonzero(gpu_relevant(graph))
        proc, pos = graph.lane_keys[graph.lane[cand], 1], graph.position_ns[cand]
        o = np.lexsort((pos, proc))
        cand, proc, pos = cand[o], proc[o], pos[o]
        out = []
        for name, s, e, pid, tid in steps:  # ProfilerSteps: a few per process and trace minute
            p_lo, p_hi = np.searchsorted(proc, pid, "left"), np.searchsorted(proc, pid, "right")
            lo, hi = p_lo + np.searchsorted(pos[p_lo:p_hi], [s, e], "left")
            idx = np.sort(cand[lo:hi])
            gpu = idx[graph.node_kind[idx] != NODE_CPU]
            out.append(_StepGroup(name, s, e, pid, tid, idx, _kinds_of(graph, idx), _by_device(graph, gpu)))
        return out
    return cached(graph, "report.step_members", make)


def _step_groups(graph: TaskGraph, sw: list) -> list:
    """The :class:`_StepGroup` of each of ``step_windows(graph, ...)``, in order."""
    return _step_members(graph)[: len(sw)]


def step_windows(graph: TaskGraph, tl: Timeline) -> list[StepWindow]:
    """Each ProfilerStep as a :class:`StepWindow` (a tuple: name, measured start and end, replayed
    start and end, member mask, note, and the step's own CPU range measured and replayed).

    Members are the nodes whose position (CPU start, or launching call's start) lies in the
    measured ProfilerStep range, on the step's process: its API calls (with the waits they made)
    and the GPU work they launched; calls of threads that never launch or wait for GPU work (an
    NCCL watchdog polling events) are no step's (see ``gpu_relevant``).

    A step runs from its CPU start until its last member has ended (or its CPU end, if later), so
    its time includes the GPU work it launched and the waits it made; when the previous step of
    its thread ends later than this step's CPU start (its GPU work still running), this step
    starts there instead. Steps so never overlap and their times add up to at most the traced
    window, and every per-step column (:func:`_window`) is computed over the step's members.
    Measured windows come from the recorded times, replayed ones from the replayed times.
    """
    out = []
    prev: dict[tuple[int, int], tuple[int, int]] = {}  # (pid, tid) -> previous step's (measured, replayed) end
    for name, s, e, pid, tid, idx, _, _ in _step_members(graph):
        cpu = _replayed_boundaries(graph, tl, s, e, pid, tid)
        rs, re_ = (s, e) if cpu is None else cpu
        end_m, end_r = _covering(e, graph.rec_end_ns, idx), _covering(re_, tl.end_ns, idx)
        pm, pr = prev.get((pid, tid), (s, rs))
        note = "no API call inside the step on its thread; replayed = measured" if cpu is None else ""
        out.append(StepWindow(name, min(max(s, pm), end_m), end_m, min(max(rs, pr), end_r), end_r, idx, note, s, e, rs, re_))
        prev[(pid, tid)] = (max(pm, end_m), max(pr, end_r))
    return out


def _replayed_boundaries(graph: TaskGraph, tl: Timeline, s: int, e: int, pid: int, tid: int) -> tuple[int, int] | None:
    """Where the ProfilerStep range [s, e] of thread (pid, tid) lies in the replay ``tl``; None
    when no API call of the thread lies inside it.

    A boundary ``b`` lies in the CPU gap before some API call ``x`` (the first call starting at
    or after ``b``) and keeps its share of that gap, the rule every CPU range moves by
    (:mod:`daydream.simulate.carry`): so when a transformation removes calls (and their gaps) a boundary
    moves with the work that is left, host time added after a step's start (its DataLoader
    fetch) stays in the step, and consecutive boundaries never cross. After the thread's last
    call, a boundary keeps its recorded distance to that call's end.
    """
    nodes = _thread_calls(graph, pid, tid)
    # structure only, kept in the memo (a step's windows are asked again for every prediction)
    rs_sorted, later_end = cached(graph, f"report.thread_call_starts_ends {pid} {tid}", lambda: _starts_and_later_ends(graph, nodes))
    k = int(np.searchsorted(rs_sorted, s, side="left"))  # the calls starting at or after s: k, k + 1, ...
    if k == len(nodes) or later_end[k] > e:  # none of them ends by e
        return None

    got = boundaries(graph, tl, nodes, np.array([s, e], np.int64), rs_sorted, ends=np.array([False, True]))
    return int(got[0]), int(got[1])


def _starts_and_later_ends(graph: TaskGraph, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(recorded starts of ``nodes``, ascending; per position, the earliest recorded end from there on)."""
    return graph.rec_start_ns[nodes], np.minimum.accumulate(graph.rec_end_ns[nodes][::-1])[::-1]


def _thread_calls(graph: TaskGraph, pid: int, tid: int) -> np.ndarray:
    """The API calls of thread (pid, tid) by recorded start (stable): structure only, kept in the
    graph's memo."""
    def make():
        lanes = np.nonzero((graph.lane_keys == np.array([0, pid, tid, 0])).all(axis=1))[0]
        nodes = np.nonzero((graph.lane == (lanes[0] if len(lanes) else -1)) & (graph.node_kind == NODE_CPU))[0]
        return nodes[np.argsort(graph.rec_start_ns[nodes], kind="stable")]
    return cached(graph, f"report.thread_calls {pid} {tid}", make)


def _covering(end: int, ends: np.ndarray, idx: np.ndarray) -> int:
    """``end``, or the last end of the members (node ids ``idx``) when that is later."""
    return max(end, int(ends[idx].max())) if len(idx) else end


def _window_end(graph: TaskGraph, end_ns: np.ndarray, rel: np.ndarray, step_ends: list[int]) -> int:
    """End of the traced window: the last GPU-relevant task's end (see ``gpu_relevant``) or step end."""
    return max([int(end_ns[rel].max()) if rel.any() else graph.t0_ns] + step_ends)


def window_end_ns(graph: TaskGraph, tl: Timeline) -> int:
    """The end (ns) of the traced window of the replay ``tl`` of ``graph``, as reports place it."""
    return _window_end(graph, tl.end_ns, gpu_relevant(graph), [w.replayed_end_ns for w in step_windows(graph, tl)])


#: The note of a step measured at 0 ns that replays longer (:func:`_zero_length_steps`).
ZERO_STEP_NOTE = "measured 0 ms (earlier GPU work ran past its whole range): error relative to the median measured step"


def _zero_length_steps(steps: list[WindowStats], window: WindowStats) -> list[WindowStats]:
    """``steps`` with the error of each step measured at 0 ns (an earlier step's GPU work ran past
    its whole CPU range) that replays longer taken relative to the median step measured longer than
    0 (the window when none is), and :data:`ZERO_STEP_NOTE`: a ratio to 0 ns has no value, and
    showed as 0.00 % (a kernel of 10^15 us recorded in the first step made the others 0 ms
    measured, 1 ms replayed, and the verdict "good")."""
    if not any(w.measured_ns == 0 and w.replayed_ns > 0 for w in steps):
        return steps
    lens = [w.measured_ns for w in steps if w.measured_ns > 0]
    ref = float(np.median(lens)) if lens else float(window.measured_ns)
    return [msgspec.structs.replace(w, error_pct=round(w.replayed_ns / ref * 100.0, 4) if ref > 0 else 0.0,
                                    note="; ".join(x for x in (w.note, ZERO_STEP_NOTE) if x))
            if w.measured_ns == 0 and w.replayed_ns > 0 else w for w in steps]


def _process_ids(graph: TaskGraph) -> tuple[np.ndarray, np.ndarray]:
    """(process id per node, the distinct process ids): GPU tasks whose process the trace does not
    give (-1: no launching call, no ``daydream_pid``) make no process row of their own; the traced
    window holds them."""
    pids = graph.lane_keys[graph.lane, 1] if graph.n else np.zeros(0, np.int64)
    uniq = sorted_unique(pids)
    return pids, uniq[uniq >= 0]
