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
from .graph import NODE_CPU, TaskGraph
from .simulate import Timeline

CAUSES = ("cpu", "gpu_compute", "communication", "launch", "sync")


class CriticalPath(msgspec.Struct, forbid_unknown_fields=True):
    """Critical path of a timeline: total length and ns per cause (and per phase when mapped)."""

    length_ns: int
    tasks: int  #: tasks on the path
    by_cause_ns: dict[str, int]
    by_phase_ns: dict[str, dict[str, int]] = {}


def communication_mask(graph: TaskGraph) -> np.ndarray:
    """GPU tasks that are communication: NCCL/RCCL kernels (daydream.kernels) and peer-to-peer copies."""
    from .kernels import kernel_info

    t = graph.table
    rows = np.maximum(graph.row, 0)
    p2p = (graph.node_kind == Kind.MEMCPY) & (graph.row >= 0) & (t.copy_kind[rows] == CopyKind.PTOP)
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
    """The critical path of ``tl`` (a simulation of ``graph``).

    Returns:
        (node ids on the path, from last to first; the summary). ``phase``/``phase_names``
        (per-node phase codes and their names) add a per-phase breakdown. The ``cpu`` segment of a
        CPU node is split there: the call itself goes to its ``phase``, the CPU gap before it
        (from the previous task of its thread) to ``gap_phase`` (per-node codes; default
        ``graph.annotations["gap_phase"]`` when present, else the node's own phase).
    """
    n = graph.n
    by_cause = dict.fromkeys(CAUSES, 0)
    by_phase: dict[str, dict[str, int]] = {}
    if n == 0:
        return np.zeros(0, np.int64), CriticalPath(0, 0, by_cause)
    t0, L, G = int(graph.t0_ns), int(graph.launch_latency_ns), int(graph.gpu_gap_ns)
    start, end = tl.start_ns.tolist(), tl.end_ns.tolist()
    lane_prev, launch = graph.lane_prev.tolist(), graph.launch.tolist()
    ptr, idx = graph.pred_ptr.tolist(), graph.pred_idx.tolist()
    is_cpu = (graph.node_kind == NODE_CPU).tolist()
    blocking, blocked = graph.blocking.tolist(), tl.blocked_ns.tolist()
    comm = communication_mask(graph).tolist()
    ph = phase.tolist() if phase is not None else None
    if ph is not None and gap_phase is None:
        a = graph.annotations.get("gap_phase") if graph.annotations else None
        gap_phase = a if isinstance(a, np.ndarray) and len(a) == n else None
    gph = gap_phase.tolist() if ph is not None and gap_phase is not None else ph

    def charge(cause: str, ns: int, v: int, codes=None) -> None:
        if ns <= 0:
            return
        by_cause[cause] += ns
        if ph is not None and phase_names is not None:
            d = by_phase.setdefault(phase_names[(ph if codes is None else codes)[v]], dict.fromkeys(CAUSES, 0))
            d[cause] += ns

    def charge_cpu(t: int, lo: int, v: int) -> None:
        """The ``cpu`` segment [lo, t] of CPU node v: the call from its start, then the gap before it."""
        s = min(max(start[v], lo), t)
        charge("cpu", t - s, v)
        charge("cpu", s - lo, v, gph)

    path = []
    rel = gpu_relevant(graph)
    v = int(np.argmax(np.where(rel, tl.end_ns, np.iinfo(np.int64).min)))
    t = end[v]  # the path is charged from t back to t0
    while v >= 0:
        path.append(v)
        if is_cpu[v]:
            if blocking[v] and blocked[v] > 0:
                # the end waited for a GPU task: own cost is sync time, then follow that task
                w = max(range(ptr[v], ptr[v + 1]), key=lambda i: end[idx[i]])
                u = idx[w]
                charge("sync", t - end[u], v)
                t = end[u]
                v = u
                continue
            p = lane_prev[v]
            lo = end[p] if p >= 0 else t0
            charge_cpu(t, lo, v)  # the call (from t back to its start) and its gap
            t = lo
            v = p
        else:
            s = start[v]
            charge("communication" if comm[v] else "gpu_compute", t - s, v)
            t = s
            nxt = -1
            p = lane_prev[v]
            if p >= 0 and end[p] + G == s:
                nxt = p
            else:
                for i in range(ptr[v], ptr[v + 1]):
                    if end[idx[i]] + G == s:
                        nxt = idx[i]
                        break
            if nxt >= 0:
                charge("gpu_compute", G, v)
                t = end[nxt]
                v = nxt
                continue
            lch = launch[v]
            if lch >= 0 and start[lch] + L == s:
                charge("launch", L, v)
                t = start[lch]
                # the launching call's own duration is not on the path: continue at its start
                p = lane_prev[lch]
                lo = end[p] if p >= 0 else t0
                path.append(lch)
                charge_cpu(t, lo, lch)
                t = lo
                v = p
                continue
            charge("launch", s - t0, v)  # ready at trace start (no launching call)
            t = t0
            v = -1
    total = sum(by_cause.values())
    return np.asarray(path, dtype=np.int64), CriticalPath(int(total), len(path), by_cause, dict(sorted(by_phase.items())))
