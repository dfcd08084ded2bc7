"""The critical path of a simulated timeline, broken down by cause.

Walking back from the task that ends last (among GPU tasks and the calls of threads that launch or
wait for GPU work, as the report's traced window), each task's start (or, for a blocking call, its end)
was set by exactly one constraint of docs/model.md: its thread predecessor plus gap, its launch
plus the launch latency ``L``, its stream predecessor or cross-stream producer plus ``G``, or the
GPU task a blocking call waited for. Following the binding constraint gives a chain of segments
that tiles ``[t0, end]``; each segment is charged to one cause:

* ``cpu``: API calls and the CPU gaps between them (framework/Python work) — CPU-bound time;
* ``gpu_compute``: kernels, copies, sets (not communication) and the GPU gaps ``G``;
* ``communication``: NCCL/RCCL kernels and peer-to-peer copies;
* ``launch``: launch latency ``L`` between a launching call and its GPU task;
* ``sync``: the own cost of blocking calls after what they waited for had finished.
"""

from __future__ import annotations

import msgspec
import numpy as np

from .events import CopyKind, Kind
from .kernels import kernel_info
from .graph import NODE_CPU, RULES, TaskGraph, rule_arrays
from .simulate import BOUND_BY_LANE, Timeline, with_bindings

CAUSES = ("cpu", "gpu_compute", "communication", "launch", "sync")


class CriticalPath(msgspec.Struct, forbid_unknown_fields=True):
    """Critical path of a timeline: total length and ns per cause (and per phase when mapped)."""

    length_ns: int
    tasks: int  #: tasks on the path
    by_cause_ns: dict[str, int]
    by_phase_ns: dict[str, dict[str, int]] = {}


def communication_mask(graph: TaskGraph) -> np.ndarray:
    """GPU tasks that are communication: NCCL/RCCL kernels (daydream.kernels) and peer-to-peer copies."""
    p2p = (graph.node_kind == Kind.MEMCPY) & (graph.copy_kind == CopyKind.PTOP)
    return (graph.node_kind != NODE_CPU) & (kernel_info(graph).is_class("communication") | p2p)


def gpu_relevant(graph: TaskGraph) -> np.ndarray:
    """Nodes that bound the traced window: GPU tasks, and the API calls of threads that launch
    or wait for GPU work. Threads that only poll or allocate (e.g. an NCCL watchdog calling
    cudaEventQuery) cannot be changed by a GPU-side optimization and would pin the window's end.
    All nodes when the trace has no GPU work."""
    gpu = graph.node_kind != NODE_CPU
    if not gpu.any():
        return np.ones(graph.n, dtype=bool)
    active = np.zeros(len(graph.lanes), dtype=bool)
    active[graph.lane[gpu]] = True
    active[graph.lane[graph.launch[graph.launch >= 0]]] = True
    active[graph.lane[graph.blocking]] = True
    return active[graph.lane]


def critical_path(graph: TaskGraph, tl: Timeline, phase_names: list[str] | None = None, phase: np.ndarray | None = None,
                  gap_phase: np.ndarray | None = None) -> tuple[np.ndarray, CriticalPath]:
    """The critical path of ``tl`` (a simulation of ``graph``): a walk back over the binding
    records of the replay (:class:`~daydream.simulate.Timeline`), from the last task to end.

    Returns:
        (node ids on the path, from last to first; the summary). ``phase``/``phase_names``
        (per-node phase codes and their names) add a per-phase breakdown. The ``cpu`` segment of a
        CPU node is split there: the call itself goes to its ``phase``, the CPU gap before it
        (from the previous task of its thread) to ``gap_phase`` (per-node codes; default
        ``graph.mapping.gap_phase`` when mapped, else the node's own phase).
    """
    n = graph.n
    if n == 0:
        return np.zeros(0, np.int64), CriticalPath(0, 0, dict.fromkeys(CAUSES, 0))
    tl = with_bindings(graph, tl)
    bs, bb, be = tl.bound_start, tl.bound_base, tl.bound_end
    if phase is not None and gap_phase is None and graph.mapping is not None and graph.mapping.gap_phase is not None:
        gap_phase = graph.mapping.gap_phase
    acc = _Charges(phase_names, phase, gap_phase if gap_phase is not None else phase)
    walk = _Walk(graph, tl, bs.tolist(), bb.tolist(), be.tolist(), acc)
    path = walk.run(int(np.argmax(np.where(gpu_relevant(graph), tl.end_ns, np.iinfo(np.int64).min))))
    total = sum(acc.by_cause.values())
    return np.asarray(path, dtype=np.int64), CriticalPath(int(total), len(path), acc.by_cause, dict(sorted(acc.by_phase.items())))


class _Charges:
    """Accumulates ns per cause, and per phase when phases are given."""

    def __init__(self, phase_names, phase, gap_phase):
        self.by_cause = dict.fromkeys(CAUSES, 0)
        self.by_phase: dict[str, dict[str, int]] = {}
        self.names = phase_names
        self.ph = phase.tolist() if phase is not None and phase_names is not None else None
        self.gph = gap_phase.tolist() if self.ph is not None else None

    def __call__(self, cause: str, ns: int, v: int, gap: bool = False) -> None:
        if ns <= 0:
            return
        self.by_cause[cause] = self.by_cause.get(cause, 0) + ns
        if self.ph is not None:
            code = (self.gph if gap else self.ph)[v]
            d = self.by_phase.setdefault(self.names[code], dict.fromkeys(CAUSES, 0))
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
        self.t0 = int(graph.t0_ns)
        self.bs, self.bb, self.be = bs, bb, be
        self.lane_prev_run = _lane_predecessor_in_run(graph, tl) if (np.asarray(bs) == BOUND_BY_LANE).any() else None
        self.charge = charge

    def _own(self, v: int) -> str:
        return "cpu" if self.is_cpu[v] else ("communication" if self.comm[v] else "gpu_compute")

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
                    u, tu, at_start = self._follow(e)
                    charge(self.cause[self.kind[e]], t - tu, v)
                    v, t = u, tu
                    continue
                charge(self._own(v), t - self.start[v], v)
            t = self.start[v]
            e = self.bs[v]
            if e >= 0:  # the start was set by an edge: its offset, then its source
                u, tu, at_start = self._follow(e)
                charge(self.cause[self.kind[e]], t - tu, v)
                v, t = u, tu
                continue
            if e == BOUND_BY_LANE:  # waited for its (priority-scheduled) lane: the task before it
                u = self.lane_prev_run[v]
                charge("gpu_compute", t - self.end[u], v)
                v, t, at_start = u, self.end[u], False
                continue
            lo = t - self.gap[v]  # base + gap: the gap, then what set the base
            charge("cpu" if self.is_cpu[v] else "launch", t - lo, v, gap=self.is_cpu[v])
            e = self.bb[v]
            if e >= 0:
                u, tu, at_start = self._follow(e)
                charge(self.cause[self.kind[e]], lo - tu, v, gap=True)
                v, t = u, tu
                continue
            charge("cpu" if self.is_cpu[v] else "launch", lo - self.t0, v, gap=self.is_cpu[v])
            v = -1
        return path


def _lane_predecessor_in_run(graph: TaskGraph, tl: Timeline) -> list[int]:
    """Per task: the task that ran before it on its lane in the replay (by start time), or -1."""
    o = np.lexsort((tl.start_ns, graph.lane))
    prev = np.full(graph.n, -1, np.int64)
    same = graph.lane[o[1:]] == graph.lane[o[:-1]]
    prev[o[1:][same]] = o[:-1][same]
    return prev.tolist()
