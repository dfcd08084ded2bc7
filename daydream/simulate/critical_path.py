"""The critical path of a simulated timeline, broken down by cause.

Walking back from the task that ends last (among GPU tasks and the calls of threads that launch or
wait for GPU work, as the report's traced window), each task's start (or, for a blocking call, its end)
was set by exactly one constraint of docs/model.md: its thread predecessor plus gap, its launch
plus the launch latency ``L``, its stream predecessor or cross-stream producer plus ``G``, or the
GPU task a blocking call waited for. Following the binding constraint gives a chain of segments
that tiles ``[t0, end]``; each segment is charged to one cause:

* ``cpu``: API calls and the CPU gaps between them (framework/Python work) — CPU-bound time;
* ``gpu_compute``: kernels and sets (not communication) and the GPU gaps ``G``;
* ``communication``: collective and peer-waiting kernels (NCCL/RCCL, DeepEP/NVSHMEM all-to-all:
  :data:`daydream.mapping.rules.COMM_KERNEL_PATTERN`);
* ``copy``: memory copies of every direction (host-to-device, device-to-host, device-to-device,
  peer-to-peer): a copy is moved by a copy engine over PCIe/NVLink, and what speeds it up
  (pinned memory, fewer or larger transfers, overlap) is not what speeds up a kernel;
* ``launch``: launch latency ``L`` between a launching call and its GPU task;
* ``sync``: the own cost of blocking calls after what they waited for had finished.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np

from ..util.arrays import sorted_unique, unique_inverse
from ..util import jit
from ..events.table import CopyKind, Kind
from ..graph.kernels import kernel_info
from ..mapping.rules import PHASES, RANGE_RULES, RangeRule, fold_by_op, nvtx_base_name
from ..graph.memo import cached, rules_key
from ..graph import NODE_CPU, RULES, TaskGraph, rule_arrays
from ..graph.edges import Origin
from ..graph.range_timeline import NO_RANGE, RangeTimeline, range_timeline, split_by_range, thread_key
from . import BOUND_BY_LANE, Timeline, critical_walk, with_bindings

#: ``copy`` last: the compiled walk's codes (daydream.simulate.critical_walk) index the first four
CAUSES = ("cpu", "gpu_compute", "communication", "launch", "sync", "copy")
COPY = CAUSES.index("copy")
OWN, GAP, EDGE = 0, 1, 2  #: what of a task a charged segment was (see _Charges)
#: rows kept in the per-range and per-kernel breakdowns (the rest summed under "other")
TOP_ROWS = 12


class Wait(msgspec.Struct, forbid_unknown_fields=True):
    """A stretch of the critical path during which one CPU thread waited for something else: the
    path left the thread and came back to it (summed over all such stretches of the same kind)."""

    waiter: str  #: the thread that waited ("thread 1234", with "pid/" when the trace has several processes)
    during: str  #: the CPU range the waiter was in while it waited (its gap or blocking call), or "(no range)"
    waited_for: str  #: "thread 5678" (another thread's work), "GPU" (kernels, copies), "peer ranks" (collectives)
    ns: int  #: critical-path time spent on what it waited for
    count: int  #: stretches summed
    top: dict[str, int] = {}  #: the CPU ranges (other thread) or kernels (GPU) that time went to, largest first (at most 3)
    engine: bool = False  #: what it waited for is an autograd engine thread: the waiter was in backward()
    edges: int = 0  #: edges from the waited-for thread to the waiter (0 for the GPU and peers)
    inferred_edges: int = 0  #: of those, edges derived by a rule (e.g. hand-overs), not read from the trace


class CriticalPath(msgspec.Struct, forbid_unknown_fields=True):
    """Critical path of a timeline: total length and ns per cause (and per phase when mapped)."""

    length_ns: int
    tasks: int  #: tasks on the path
    by_cause_ns: dict[str, int]
    by_phase_ns: dict[str, dict[str, int]] = {}
    #: host time on the path by the CPU range it ran in (daydream.mapping.rules.RANGE_RULES; "(no range)": none; emit_nvtx calls summed per op), top TOP_ROWS then "other"
    by_range_ns: dict[str, int] = {}
    #: GPU time on the path by kernel (copy, set) name, top TOP_ROWS then "other"
    by_kernel_ns: dict[str, int] = {}
    #: where a thread on the path waited for another thread, the GPU or peers, largest first
    waits: list[Wait] = []
    #: host time on the path per phase ("all" when unmapped) by the deepest meaningful frame it ran
    #: in (:data:`FRAME_RULES`: the innermost user Python frame of a recorded python_function stack,
    #: else the outermost framework op, else the innermost annotation), top :data:`FRAME_TOP` each
    host_top_ns: dict[str, dict[str, int]] = {}


def communication_mask(graph: TaskGraph) -> np.ndarray:
    """GPU tasks that are communication: NCCL/RCCL kernels (daydream.graph.kernels) and peer-to-peer copies.
    Kept in the graph's structure memo (shared: do not change it)."""
    return cached(graph, "communication_mask", lambda: _communication_mask(graph))


def _communication_mask(graph: TaskGraph) -> np.ndarray:
    p2p = (graph.node_kind == Kind.MEMCPY) & (graph.copy_kind == CopyKind.PTOP)
    return (graph.node_kind != NODE_CPU) & (kernel_info(graph).is_class("communication") | p2p)


def gpu_relevant(graph: TaskGraph) -> np.ndarray:
    """Nodes that bound the traced window: GPU tasks, and the API calls of threads that launch
    or wait for GPU work. Threads that only poll or allocate (e.g. an NCCL watchdog calling
    cudaEventQuery) cannot be changed by a GPU-side optimization and would pin the window's end.
    All nodes when the trace has no GPU work. Kept in the graph's structure memo (shared: do not
    change it)."""
    return cached(graph, "gpu_relevant", lambda: _gpu_relevant(graph))


def _gpu_relevant(graph: TaskGraph) -> np.ndarray:
    gpu = graph.node_kind != NODE_CPU
    if not gpu.any():
        return np.ones(graph.n, dtype=bool)
    active = np.zeros(len(graph.lanes), dtype=bool)
    active[graph.lane[gpu]] = True
    active[graph.lane[graph.launch[graph.launch >= 0]]] = True
    active[graph.lane[graph.blocking]] = True
    return active[graph.lane]


def critical_path(graph: TaskGraph, tl: Timeline, phase_names: list[str] | None = None, phase: np.ndarray | None = None,
                  gap_phase: np.ndarray | None = None, detail: dict | None = None) -> tuple[np.ndarray, CriticalPath]:
    """The critical path of ``tl`` (a simulation of ``graph``): a walk back over the binding
    records of the replay (:class:`~daydream.simulate.Timeline`), from the last task to end.

    Returns:
        (node ids on the path, from last to first; the summary). ``phase``/``phase_names``
        (per-node phase codes and their names) add a per-phase breakdown. The ``cpu`` segment of a
        CPU node is split there: the call itself goes to its ``phase``, the CPU gap before it
        (from the previous task of its thread) to ``gap_phase`` (per-node codes; default
        ``graph.mapping.gap_phase`` when mapped, else the node's own phase). ``detail``, when
        given, receives the full breakdowns behind the summary's top rows: ``"range_ns"`` and
        ``"kernel_ns"`` (dicts name -> ns over every CPU range label and GPU task name).
    """
    n = graph.n
    if n == 0:
        return np.zeros(0, np.int64), CriticalPath(0, 0, dict.fromkeys(CAUSES, 0))
    tl = with_bindings(graph, tl)
    bs, bb, be = tl.bound_start, tl.bound_base, tl.bound_end
    if phase is not None and gap_phase is None and graph.mapping is not None and graph.mapping.gap_phase is not None:
        gap_phase = graph.mapping.gap_phase
    acc = _Charges(phase_names, phase, gap_phase if gap_phase is not None else phase)
    last = int(np.argmax(np.where(gpu_relevant(graph), tl.end_ns, np.iinfo(np.int64).min)))
    path = _compiled_walk(graph, tl, last, acc)
    if path is None:
        path = _Walk(graph, tl, bs.tolist(), bb.tolist(), be.tolist(), acc).run(last)
    total = sum(acc.by_cause.values())
    path_a = np.asarray(path, dtype=np.int64)
    by_range, by_kernel, waits = attribute(graph, path_a, acc.parts, acc.end_waited, detail)
    host_top = host_by_frame(graph, acc.parts, phase_names, phase, gap_phase if gap_phase is not None else phase)
    return path_a, CriticalPath(int(total), len(path), acc.by_cause, dict(sorted(acc.by_phase.items())), by_range, by_kernel, waits,
                                host_top)


def _int_bincount(idx: np.ndarray, w: np.ndarray, size: int) -> np.ndarray:
    """int64 sums of the weights ``w`` (int64 >= 0) per index, as ``np.add.at`` gives them: through
    float64 ``bincount`` when every partial sum stays below 2^53 (exact there), else ``add.at``."""
    if len(w) and (int(w.min()) < 0 or float(w.sum(dtype=np.float64)) >= 2.0**53):
        out = np.zeros(size, np.int64)
        np.add.at(out, idx, w)
        return out
    return np.bincount(idx, weights=w, minlength=size).astype(np.int64)


class _Charges:
    """Accumulates ns per cause, and per phase when phases are given."""

    def __init__(self, phase_names, phase, gap_phase):
        self.by_cause = dict.fromkeys(CAUSES, 0)
        self.by_phase: dict[str, dict[str, int]] = {}
        self.parts: list[tuple[int, int, int]] = []  #: (node, ns, OWN / GAP / EDGE) per charge
        self.end_waited: list[int] = []  #: nodes whose end the path found set by what they waited for
        self.names = phase_names
        on = phase is not None and phase_names is not None
        self._ph_a = np.asarray(phase, np.int64) if on else None  # the arrays; lists only for the Python walk
        self._gph_a = np.asarray(gap_phase, np.int64) if on else None
        self._lists = None

    @property
    def ph(self):
        return None if self._ph_a is None else self._as_lists()[0]

    @property
    def gph(self):
        return None if self._ph_a is None else self._as_lists()[1]

    def _as_lists(self):
        if self._lists is None:
            self._lists = (self._ph_a.tolist(), self._gph_a.tolist())
        return self._lists

    def add_all(self, parts: np.ndarray, cause: np.ndarray, gap: np.ndarray) -> None:
        """Take the charges of a whole walk at once: ``parts`` (k, 3) int64 (node, ns > 0, part),
        ``cause`` (k,) index into CAUSES, ``gap`` (k,) the gap-phase flag; the same sums as k calls."""
        self.parts = parts
        sums = _int_bincount(cause.astype(np.int64), parts[:, 1], len(CAUSES))
        for i, c in enumerate(CAUSES):
            self.by_cause[c] += int(sums[i])
        if self._ph_a is None or not len(parts):
            return
        v = parts[:, 0]
        code = np.where(gap, self._gph_a[v], self._ph_a[v])
        ucode, inv = unique_inverse(code)
        per = _int_bincount(inv * len(CAUSES) + cause.astype(np.int64), parts[:, 1],
                            len(ucode) * len(CAUSES)).reshape(len(ucode), len(CAUSES))
        for i, u in enumerate(ucode.tolist()):
            d = self.by_phase.get(self.names[u])
            if d is None:
                d = self.by_phase[self.names[u]] = dict.fromkeys(CAUSES, 0)
            for j, c in enumerate(CAUSES):
                d[c] += int(per[i, j])

    def __call__(self, cause: str, ns: int, v: int, gap: bool = False, part: int = -1) -> None:
        """Charge ``ns`` to ``cause`` (and ``v``'s phase, its gap phase with ``gap``); ``part``:
        what of ``v`` the time was (OWN its own execution, GAP the CPU gap before it, EDGE an
        edge's offset); default GAP with ``gap``, else OWN."""
        if ns <= 0:
            return
        self.parts.append((v, ns, (GAP if gap else OWN) if part < 0 else part))
        self.by_cause[cause] = self.by_cause.get(cause, 0) + ns
        if self.ph is not None:
            code = (self.gph if gap else self.ph)[v]
            d = self.by_phase.get(self.names[code])
            if d is None:
                d = self.by_phase[self.names[code]] = dict.fromkeys(CAUSES, 0)
            d[cause] = d.get(cause, 0) + ns


class _Walk:
    """The walk back from the last task: each step charges one segment to one cause."""

    def __init__(self, graph: TaskGraph, tl: Timeline, bs: list, bb: list, be: list, charge: _Charges):
        ra = rule_arrays()
        k = graph.edge_kind
        self.src = graph.edge_src.tolist()
        self.anchor_end = ra.anchor_end[k].tolist()
        self.cause = [RULES[int(x)].cause if int(x) in RULES else "cpu" for x in range(int(k.max()) + 1 if len(k) else 0)]
        self.kind = k.tolist()
        self.start, self.end = tl.start_ns.tolist(), tl.end_ns.tolist()
        self.gap = graph.gap_ns.tolist()
        self.is_cpu = graph.is_cpu.tolist()
        self.comm = communication_mask(graph).tolist()
        self.copy = (graph.node_kind == Kind.MEMCPY).tolist()
        self.t0 = int(graph.t0_ns)
        self.bs, self.bb, self.be = bs, bb, be
        self.lane_prev_run = _lane_predecessor_in_run(graph, tl) if (np.asarray(bs) == BOUND_BY_LANE).any() else None
        self.charge = charge

    def _own(self, v: int) -> str:
        return "cpu" if self.is_cpu[v] else "copy" if self.copy[v] else ("communication" if self.comm[v] else "gpu_compute")

    def _follow(self, e: int) -> tuple[int, int, bool]:
        """(source, its anchor time, entered at its start) of edge e."""
        u = self.src[e]
        return (u, self.end[u], False) if self.anchor_end[e] else (u, self.start[u], True)

    def run(self, v: int) -> list[int]:
        path: list[int] = []
        t = self.end[v]
        at_start = False
        charge = self.charge
        while v >= 0:
            path.append(v)
            if not at_start:
                e = self.be[v]
                if e >= 0:  # the end waited: own cost after the wait, then what it waited for
                    charge.end_waited.append(v)
                    u, tu, at_start = self._follow(e)
                    charge(self.cause[self.kind[e]], t - tu, v)
                    v, t = u, tu
                    continue
                charge(self._own(v), t - self.start[v], v)
            t = self.start[v]
            e = self.bs[v]
            if e >= 0:  # the start was set by an edge: its offset, then its source
                u, tu, at_start = self._follow(e)
                charge(self.cause[self.kind[e]], t - tu, v, part=EDGE)
                v, t = u, tu
                continue
            if e == BOUND_BY_LANE:  # waited for its (priority-scheduled) lane: the task before it
                u = self.lane_prev_run[v]
                charge("gpu_compute", t - self.end[u], v, part=EDGE)
                v, t, at_start = u, self.end[u], False
                continue
            lo = t - self.gap[v]  # base + gap: the gap, then what set the base
            charge("cpu" if self.is_cpu[v] else "launch", t - lo, v, gap=self.is_cpu[v], part=GAP if self.is_cpu[v] else EDGE)
            e = self.bb[v]
            if e >= 0:
                u, tu, at_start = self._follow(e)
                charge(self.cause[self.kind[e]], lo - tu, v, gap=True, part=EDGE)
                v, t = u, tu
                continue
            charge("cpu" if self.is_cpu[v] else "launch", lo - self.t0, v, gap=self.is_cpu[v], part=GAP if self.is_cpu[v] else EDGE)
            v = -1
        return path


def _compiled_walk(graph: TaskGraph, tl: Timeline, v: int, acc: _Charges) -> np.ndarray | None:
    """The walk of :class:`_Walk` from ``v`` by the compiled kernel
    (:mod:`daydream.simulate.critical_walk`), its charges summed into ``acc`` as ``_Charges``
    would; the path (node ids, last to first), or None where the Python walk must run (small
    graph, no numba, ``DAYDREAM_JIT=off``, times near the int64 edge, a cycle in the records)."""
    fn = critical_walk.kernel() if jit.wanted(graph.n, critical_walk.MIN_TASKS, jit.loaded(critical_walk._kernel)) else None
    if fn is None or not critical_walk.fits(graph.t0_ns, tl.start_ns, tl.end_ns, graph.gap_ns):
        return None
    anchor_end, edge_cause = _walk_edges(graph)
    lane_prev = np.asarray(_lane_predecessor_in_run(graph, tl), np.int64) if (tl.bound_start == BOUND_BY_LANE).any() else np.zeros(0, np.int64)
    i64 = lambda a: np.ascontiguousarray(a, np.int64)  # noqa: E731
    out = critical_walk.walk(fn, v, i64(tl.start_ns), i64(tl.end_ns), i64(graph.gap_ns), np.ascontiguousarray(graph.is_cpu, bool),
                             np.ascontiguousarray(communication_mask(graph), bool), i64(tl.bound_start), i64(tl.bound_base),
                             i64(tl.bound_end), i64(graph.edge_src), anchor_end, edge_cause, lane_prev, int(graph.t0_ns), BOUND_BY_LANE)
    if out is None:
        return None
    path, parts, cause, gap, ew = out
    cause = own_copy_cause(graph, parts, cause)
    acc.add_all(parts, cause, gap)
    acc.end_waited = ew
    return path


def own_copy_cause(graph: TaskGraph, parts: np.ndarray, cause: np.ndarray) -> np.ndarray:
    """``cause`` (k,) int8 codes into CAUSES of the charges ``parts`` (k, 3) with a copy's own time
    (part OWN of a MEMCPY node, which the compiled walk charges as GPU compute or communication)
    recoded ``copy``, as the Python walk charges it."""
    if not len(parts):
        return cause
    own_copy = (parts[:, 2] == OWN) & (graph.node_kind[parts[:, 0]] == Kind.MEMCPY)
    if not own_copy.any():
        return cause
    out = np.array(cause, np.int8, copy=True)
    out[own_copy] = COPY
    return out


def _walk_edges(graph: TaskGraph) -> tuple[np.ndarray, np.ndarray]:
    """Per edge: its rule's ``anchor_end`` (bool) and the index into CAUSES of its rule's cause
    (int8; "cpu" for a kind without a rule), kept in the structure memo under the rules' key."""
    def make():
        k = graph.edge_kind
        code_of_kind = np.array([CAUSES.index(RULES[x].cause if x in RULES else "cpu") for x in range(int(k.max()) + 1 if len(k) else 0)], np.int8)
        return np.ascontiguousarray(rule_arrays().anchor_end[k], bool), code_of_kind[k]
    return cached(graph, ("critical_path.walk_edges", rules_key(rule_arrays(), graph)), make)


def _lane_predecessor_in_run(graph: TaskGraph, tl: Timeline) -> list[int]:
    """Per task: the task that ran before it on its lane in the replay (by start time), or -1."""
    o = np.lexsort((tl.start_ns, graph.lane))
    prev = np.full(graph.n, -1, np.int64)
    same = graph.lane[o[1:]] == graph.lane[o[:-1]]
    prev[o[1:][same]] = o[:-1][same]
    return prev.tolist()


# ------------------------------------------------------------- what the path time went to ----
_RT_CACHE: dict[int, tuple[object, RangeTimeline]] = {}


def ranges_of(graph: TaskGraph) -> RangeTimeline:
    """:func:`~daydream.graph.range_timeline.range_timeline` of ``graph``, computed once per set of CPU
    ranges (transformed graphs share their baseline's)."""
    cr = graph.cpu_ranges
    hit = _RT_CACHE.get(id(cr))
    if hit is not None and hit[0] is cr:
        return hit[1]
    rt = range_timeline(graph)
    if len(_RT_CACHE) >= 8:
        _RT_CACHE.clear()
    _RT_CACHE[id(cr)] = (cr, rt)
    return rt


_FOLD_CACHE: dict[int, tuple[RangeTimeline, tuple]] = {}


def _range_names(rt: RangeTimeline) -> tuple[list[str], list[str], np.ndarray | None]:
    """(the label names of ``rt`` with NO_RANGE first; their :func:`~daydream.mapping.rules.fold_by_op`
    names; each name's index into those, None when none folds), once per range timeline."""
    hit = _FOLD_CACHE.get(id(rt))
    if hit is not None and hit[0] is rt:
        return hit[1]
    names = [NO_RANGE, *rt.labels]
    folded, _ = fold_by_op(names, np.zeros(len(names)))
    at = None
    if folded is not names:
        where = {b: i for i, b in enumerate(folded)}
        at = np.array([where[nvtx_base_name(x)] for x in names], np.int64)
    if len(_FOLD_CACHE) >= 8:
        _FOLD_CACHE.clear()
    _FOLD_CACHE[id(rt)] = (rt, (names, folded, at))
    return names, folded, at


def node_thread_key(graph: TaskGraph) -> np.ndarray:
    """:func:`~daydream.graph.range_timeline.thread_key` of every node (int64, length n), kept in the
    structure memo."""
    return cached(graph, "critical_path.thread_key", lambda: thread_key(graph.pid, graph.tid))


def host_intervals(graph: TaskGraph, v: np.ndarray, part: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Recorded interval ``[a, b]`` of host time of CPU nodes ``v``: the call itself (OWN) or
    the last ``gap_ns`` before its recorded start (GAP)."""
    rs = graph.rec_start_ns[v]
    gap = part == GAP
    a = np.where(gap, rs - graph.gap_ns[v], rs)
    b = np.where(gap, rs, np.maximum(graph.rec_end_ns[v], rs))
    return a, b


def _top(names: list[str], ns: np.ndarray, n: int = TOP_ROWS) -> dict[str, int]:
    """The ``n`` largest entries by ns (ties by name), then the rest summed under "other"."""
    ns = np.rint(ns).astype(np.int64)
    o = sorted((i for i in range(len(ns)) if ns[i] > 0), key=lambda i: (-ns[i], names[i]))  # distinct names: few
    out = {names[i]: int(ns[i]) for i in o[:n]}
    rest = int(ns[o[n:]].sum()) if len(o) > n else 0
    if rest:
        out["other"] = out.get("other", 0) + rest
    return out


#: A Python frame of a python_function stack (Kineto ``with_stack``: ``path/file.py(LINE): func``).
PY_FRAME_PATTERN = r"^[^<\s][^\s]*\.py\(\d+\): "
#: Frames and ranges that are never what a person would name: the profiler's own ranges, built-in
#: methods, code without a file (``<string>(1): <module>``: an ``exec``, ``<frozen ...>``), and
#: frames of installed libraries and the standard library (site-/dist-packages, ``torch/``, ``lib/pythonX``),
#: and PyTorch's protocol hooks (``__torch_function__``, ``__torch_dispatch__``: the frame is the
#: dispatcher's way into the op, not what the code does).
NOT_A_FRAME_PATTERN = (r"^ProfilerStep#|^<built-in |^built-in method |^PyTorch Profiler|^<string>\(|^<frozen |^<\w+>"
                       r"|(?:site|dist)-packages/|(?:^|/)torch/|(?:^|/)lib/python\d|^\S*threading\.py\("
                       r"|\): __torch_(?:function|dispatch)__$")
#: The rules naming the frame host time is charged to in :attr:`CriticalPath.host_top_ns` (the bound's
#: top contributor): a user Python frame when the trace recorded python_function stacks (the
#: innermost: the deepest code the user wrote), else :data:`~daydream.mapping.rules.RANGE_RULES`
#: (data loading, optimizer scope, the outermost framework op, the innermost annotation).
FRAME_RULES = (RangeRule(NOT_A_FRAME_PATTERN, None), RangeRule(PY_FRAME_PATTERN, 60, False), *RANGE_RULES[1:])
#: frames kept per phase in :attr:`CriticalPath.host_top_ns`
FRAME_TOP = 3
_FRAMES_CACHE: dict[int, tuple[object, RangeTimeline]] = {}


def frames_of(graph: TaskGraph) -> RangeTimeline:
    """:func:`~daydream.graph.range_timeline.range_timeline` of ``graph`` under :data:`FRAME_RULES`,
    once per set of CPU ranges (:func:`ranges_of` when no range is a user Python frame)."""
    cr = graph.cpu_ranges
    hit = _FRAMES_CACHE.get(id(cr))
    if hit is not None and hit[0] is cr:
        return hit[1]
    rx = re.compile(PY_FRAME_PATTERN)
    skip = re.compile(NOT_A_FRAME_PATTERN)
    ids = sorted_unique(cr.name_id).tolist() if cr is not None and len(cr.pid) else []
    frames = any(rx.search(graph.names[i]) and not skip.search(graph.names[i]) for i in ids)  # distinct names
    rt = range_timeline(graph, FRAME_RULES) if frames else ranges_of(graph)
    if len(_FRAMES_CACHE) >= 8:
        _FRAMES_CACHE.clear()
    _FRAMES_CACHE[id(cr)] = (cr, rt)
    return rt


def host_by_frame(graph: TaskGraph, parts, phase_names, phase, gap_phase) -> dict[str, dict[str, int]]:
    """Host time of the charges ``parts`` ((node, ns, OWN / GAP / EDGE) each) per phase (its gap
    phase for a GAP charge; "all" without phases), split over the frames of :func:`frames_of`
    (emit_nvtx calls summed per op), top :data:`FRAME_TOP` per phase (no "(no range)" and no "other")."""
    p = np.asarray(parts, np.int64).reshape(-1, 3)
    host = graph.is_cpu[p[:, 0]] & (p[:, 2] != EDGE) if len(p) else np.zeros(0, bool)
    if not host.any():
        return {}
    v, ns, part = p[host, 0], p[host, 1], p[host, 2]
    rt = frames_of(graph)
    a, b = host_intervals(graph, v, part)
    qi, lab, share = split_by_range(rt, node_thread_key(graph)[v], a, b, ns)
    if phase_names is not None and phase is not None:
        code = np.where(part == GAP, np.asarray(gap_phase, np.int64)[v], np.asarray(phase, np.int64)[v])[qi]
    else:
        code, phase_names = np.zeros(len(qi), np.int64), ["all"]
    names = [NO_RANGE, *rt.labels]
    out: dict[str, dict[str, int]] = {}
    for c in sorted_unique(code).tolist():  # phases are few
        m = (code == c) & (lab >= 0)
        if not m.any():
            continue
        folded, tot = fold_by_op(names, np.bincount(lab[m] + 1, weights=share[m], minlength=len(names)))
        top = _top(folded, tot, FRAME_TOP)
        top.pop("other", None)
        top.pop(NO_RANGE, None)
        if top:
            out[phase_names[c]] = top
    return dict(sorted(out.items()))


def thread_label(graph: TaskGraph, lane: int) -> str:
    """``thread TID`` (``thread PID/TID`` when the graph holds several processes)."""
    _, pid, tid, _ = graph.lane_keys[lane].tolist()
    multi = len(sorted_unique(graph.lane_keys[:, 1])) > 1
    return f"thread {pid}/{tid}" if multi else f"thread {tid}"


def attribute(graph: TaskGraph, path: np.ndarray, parts: list[tuple[int, int, int]], end_waited=(), detail: dict | None = None):
    """(ns by CPU range, ns by kernel name, waits) of a critical path from its charges ``parts``
    ((node, ns, OWN / GAP / EDGE) each); ``end_waited``: the path's nodes whose end was set by
    what they waited for (blocking calls).

    Host charges (a CPU node's own time and its gap) are split over the CPU ranges their
    recorded interval lies in (:func:`daydream.graph.range_timeline.split_by_range`); GPU tasks' own
    time goes to their name; edge offsets (L, G) to neither.
    """
    p = np.asarray(parts, np.int64).reshape(-1, 3)
    v, ns, part = (np.ascontiguousarray(p[:, i]) for i in range(3))
    cpu_v = graph.is_cpu[v]
    host = cpu_v & (part != EDGE)
    gpu = ~cpu_v & (part == OWN)
    rt = ranges_of(graph)
    hv = v[host]
    a, b = host_intervals(graph, hv, part[host])
    qi, lab, share = split_by_range(rt, node_thread_key(graph)[hv], a, b, ns[host])
    names, folded, fold_at = _range_names(rt)
    range_ns = np.bincount(lab + 1, weights=share, minlength=len(names))
    # emit_nvtx calls summed per op, as in the summary's table (daydream.mapping.rules.fold_by_op)
    by_range = _top(names, range_ns) if fold_at is None else _top(folded, np.bincount(fold_at, weights=range_ns, minlength=len(folded)))
    uniq, inv = unique_inverse(graph.name_id[v[gpu]])
    k_names = [graph.names[int(i)] for i in uniq]
    kernel_ns = np.bincount(inv.reshape(-1), weights=ns[gpu], minlength=len(uniq))
    by_kernel = _top(k_names, kernel_ns)
    if detail is not None:
        detail["range_ns"] = _top(names, range_ns, len(names))
        detail["kernel_ns"] = _top(k_names, kernel_ns, len(k_names))
    charges = _PathCharges(graph, path, v, ns, hv, gpu, qi, lab, share, names)
    charges.end_waited = np.zeros(graph.n, bool)
    charges.end_waited[np.asarray(end_waited, np.int64)] = True
    return by_range, by_kernel, waits_on_path(graph, charges, rt)


class _PathCharges:
    """The charges of a path by path position (time order), for the waits."""

    def __init__(self, graph, path, v, ns, hv, gpu, qi, lab, share, names):
        n_pos = len(path)
        self.order = path[::-1]  # time order
        pos = np.full(graph.n, -1, np.int64)
        pos[self.order] = np.arange(n_pos)
        self.pos = pos
        self.lane = graph.lane[self.order]
        self.total = np.bincount(pos[v], weights=ns, minlength=n_pos)
        self.host_pos, self.host_lab, self.host_ns = pos[hv][qi], lab, share  # hv: the host charges' nodes, qi: a row's charge
        gv = v[gpu]
        self.gpu_pos, self.gpu_name, self.gpu_ns = pos[gv], graph.name_id[gv], ns[gpu]
        self.comm = communication_mask(graph)[gv]
        self.names = names


def _excursions(graph: TaskGraph, c: _PathCharges) -> tuple[np.ndarray, np.ndarray]:
    """(i, j) path positions, i < j - 1, of consecutive visits of one CPU thread with other tasks
    between them: the thread waited for those."""
    n = len(c.order)
    o = np.lexsort((np.arange(n), c.lane))
    same = c.lane[o[1:]] == c.lane[o[:-1]]
    i, j = o[:-1][same], o[1:][same]
    keep = (j - i > 1) & graph.is_cpu[c.order[j]]
    return i[keep], j[keep]


def _cum(pos: np.ndarray, w: np.ndarray, n: int) -> np.ndarray:
    """Prefix sums over path positions of weights ``w`` placed at ``pos`` (length n + 1)."""
    return np.concatenate([[0.0], np.cumsum(np.bincount(pos, weights=w, minlength=n))])


def waits_on_path(graph: TaskGraph, c: _PathCharges, rt: RangeTimeline, top_n: int = 8) -> list[Wait]:
    """The waits of the path (:class:`Wait`): each excursion from a CPU thread, named by its
    waiter, what the waiter was in, and what it waited for; summed by those three, largest first."""
    i, j = _excursions(graph, c)
    if not len(i):
        return []
    n = len(c.order)
    tot = _cum(np.arange(n), c.total, n)
    ns = tot[j] - tot[i + 1]
    # what was waited for: the other thread with most host time in the stretch, else the GPU
    lanes = sorted_unique(c.lane[graph.is_cpu[c.order]])
    hl = c.lane[c.host_pos]
    per_lane = np.stack([(lambda cs: cs[j] - cs[i + 1])(_cum(c.host_pos, np.where(hl == ln, c.host_ns, 0.0), n)) for ln in lanes])
    per_lane[lanes[:, None] == c.lane[j][None, :]] = 0.0
    best = np.argmax(per_lane, axis=0)
    other = per_lane[best, np.arange(len(i))] > 0
    cg = _cum(c.gpu_pos, np.where(c.comm, c.gpu_ns, 0).astype(np.float64), n)
    ca = _cum(c.gpu_pos, c.gpu_ns.astype(np.float64), n)
    comm_share = (cg[j] - cg[i + 1]) * 2 > (ca[j] - ca[i + 1])
    what = np.where(other, lanes[best], np.where(comm_share, -2, -1))
    idle = _idle_workers(graph)
    real = ~(idle[c.lane[j]] & (what >= 0))  # an engine thread between backward passes waits for work, not for a result
    i, j, ns, what = i[real], j[real], ns[real], what[real]
    during = _during(graph, c, rt, i, j)
    keys: dict[tuple[int, int, str], list] = {}
    for k in range(len(i)):  # one iteration per excursion (a few per step)
        e = keys.setdefault((int(c.lane[j[k]]), int(what[k]), during[k]), [0.0, 0, []])
        e[0] += ns[k]
        e[1] += 1
        e[2].append(k)
    rows = sorted(keys.items(), key=lambda kv: -kv[1][0])[:top_n]
    return [_wait(graph, c, key, val, i, j, idle) for key, val in rows if val[0] >= 0.5]


def _idle_workers(graph: TaskGraph) -> np.ndarray:
    """Per lane: a worker thread (mostly backward calls: the autograd engine's device thread,
    ``daydream.mapping``), whose time between hand-overs is idle, not waiting. Kept in the
    structure memo (shared: do not change it)."""
    return cached(graph, "critical_path.idle_workers", lambda: _find_idle_workers(graph))


def _find_idle_workers(graph: TaskGraph) -> np.ndarray:
    out = np.zeros(len(graph.lanes), bool)
    if graph.mapping is None:
        return out
    cpu = graph.is_cpu
    n = np.bincount(graph.lane[cpu], minlength=len(graph.lanes))
    bw = np.bincount(graph.lane[cpu & (graph.mapping.phase == PHASES.index("backward"))], minlength=len(graph.lanes))
    return bw * 2 > np.maximum(n, 1)


def _during(graph, c: _PathCharges, rt: RangeTimeline, i, j) -> list[str]:
    """The CPU range the waiter was in during each excursion: the range at the middle of the time
    it waited (its blocking call), or where it was when it began to wait (the start of the gap
    before the call it went on with); when that is in no
    range, the range of its last call before the wait."""
    x, y = c.order[i], c.order[j]
    blocking = c.end_waited[y]
    lo = np.where(blocking, graph.rec_start_ns[y], graph.rec_end_ns[x])
    hi = np.where(blocking, graph.rec_end_ns[y], graph.rec_start_ns[y])
    mid = np.where(blocking, lo + (np.maximum(hi, lo) - lo) // 2, np.minimum(lo + 1, np.maximum(hi, lo)))
    key = node_thread_key(graph)[y]
    names = _range_names(rt)[0]
    at_mid = _label_at(rt, key, mid)
    after = _label_at(rt, key, graph.rec_start_ns[x] + (graph.rec_end_ns[x] - graph.rec_start_ns[x]) // 2)
    return [names[(m if m >= 0 else a) + 1] for m, a in zip(at_mid.tolist(), after.tolist())]


def _label_at(rt: RangeTimeline, key: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The range label holding instant ``t`` of each thread ``key`` (-1 none)."""
    qi, lab, share = split_by_range(rt, key, t, t, np.ones(len(t)))
    out = np.full(len(t), -1, np.int64)
    hit = (lab >= 0) & (share > 0)
    out[qi[hit]] = lab[hit]
    return out


def _wait(graph: TaskGraph, c: _PathCharges, key, val, i, j, idle: np.ndarray) -> Wait:
    """One :class:`Wait` row: the top ranges (another thread) or kernels (GPU) of its stretches."""
    lane, what, during = key
    ns, count, ks = val
    n = len(c.order)
    cover = np.zeros(n + 1, np.int64)
    np.add.at(cover, i[ks] + 1, 1)
    np.add.at(cover, j[ks], -1)
    inside = np.cumsum(cover)[:n] > 0
    if what >= 0:
        m = inside[c.host_pos] & (c.lane[c.host_pos] == what)
        top = _top(c.names, np.bincount(c.host_lab[m] + 1, weights=c.host_ns[m], minlength=len(c.names)), 3)
        target = thread_label(graph, what)
    else:
        m = inside[c.gpu_pos]
        uniq, inv = unique_inverse(c.gpu_name[m])
        top = _top([graph.names[int(u)] for u in uniq], np.bincount(inv.reshape(-1), weights=c.gpu_ns[m], minlength=len(uniq)), 3)
        target = "peer ranks (collectives)" if what == -2 else "GPU"
    top.pop("other", None)
    edges = inferred = 0
    if what >= 0:  # the edges that bring the path back from the other thread: read from the trace, or inferred
        e = (graph.lane[graph.edge_src] == what) & (graph.lane[graph.edge_dst] == lane)
        edges, inferred = int(e.sum()), int((e & (graph.edge_origin == Origin.INFERRED)).sum())
    return Wait(thread_label(graph, lane), during, target, int(round(ns)), count, top, bool(what >= 0 and idle[what]), edges, inferred)
