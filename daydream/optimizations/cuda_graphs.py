"""``cuda-graphs``: capture each training step once and replay it as one CUDA graph
(``torch.cuda.graphs``/``make_graphed_callables``; CUDA Programming Guide, "CUDA Graphs").

Replaying a graph issues the whole captured region with one ``cudaGraphLaunch``: the framework's
per-op CPU work and the per-kernel launch calls are gone, and the GPU tasks are released by the
driver as their dependencies finish. Model:

* Regions: each ``ProfilerStep#N`` range of the trace (``region=step``, the default; the whole
  window when the trace has none, with a note), or the whole window (``region=window``). Calls
  outside every step are left alone.
* Within a region, on each CPU thread, the API calls are cut into *runs* at calls that wait for
  the GPU (device/stream/event synchronize, blocking copies), at gaps during which another thread
  of the process launched GPU work (a hand-over, e.g. the main thread waiting in
  ``loss.backward()`` while the autograd thread launches: that gap is a wait, not framework
  overhead, and stays), and at calls that a graph cannot hold
  (allocation, freeing, creating streams/events, loading modules: :data:`NONCAPTURABLE`), and at
  one-time start-up calls (:func:`daydream.graph.startup.startup_calls`: a first launch that loads
  its module, which a graphed program pays as well): the program would have to split its graph
  there too, and those calls stay. Every run with two or more kernel
  launches becomes one graph launch: its first call stays, with duration ``graph_launch_ns``
  (it now stands for ``cudaGraphLaunch``) plus the one-time part of the run's kernels' first
  launches (:func:`daydream.graph.startup.first_launch_one_time_ns`: module loading, which the
  capture pays too), and every other call of the run is removed with the
  CPU gap before it (event records, stream waits and host-side queries are captured or vanish
  too: the cross-stream dependencies they made stay in the graph as GPU-to-GPU edges).
* GPU tasks keep their durations. The removed calls' GPU tasks become launched by the graph
  launch (:func:`daydream.transform.remove` moves a removed call's launches to the previous kept
  call of its thread), so they are all ready one launch latency after the graph launch and run
  in stream order: the per-kernel launch latency disappears inside the region.

Blocking calls, their gaps, and the gap before the first call of each run (work done before the
region, e.g. data loading) stay.

Memory (``docs/memory.md``; :func:`daydream.optimizations.memory_rules.graph_pool`): an
allocator event anchored to a call of a graph run (the op that allocates is the one whose call
comes next: captured) is the graph's; the runs of one region share one private pool
(``torch.cuda.graphs``: the pool's blocks stay reserved while the graph lives), allocated at the
first capture and held for the whole run; the graph's own allocations and frees are gone.
"""

from __future__ import annotations

import numpy as np

from ..util.arrays import sorted_unique
from ..errors import NotApplicable
from ..graph import NODE_CPU
from ..graph.startup import first_launch_one_time_ns, startup_calls
from ..events.table import Kind
from ..transform import merge
from . import Optimization, Param, integer_ns, register
from .memory_rules import anchor_nodes, graph_pool
from .common import (
    SYNC_ROLES,
    cpu_nodes_in_ranges,
    cpu_ranges,
    cpu_roles,
    lane_order,
    median_launch_ns,
    name_mask,
)


#: API calls a CUDA graph cannot capture (besides synchronizing ones): they split runs and stay.
NONCAPTURABLE = r"(?i)malloc|alloc|free|create|destroy|register|moduleload|setdevice|instantiate"


def regions(graph, region: str) -> tuple[np.ndarray, str]:
    """Region id of every CPU node (-1 outside every region) and a description."""
    cpu = graph.node_kind == NODE_CPU
    if region == "step":
        ranges = cpu_ranges(graph, r"^ProfilerStep#\d+$")
        if len(ranges[0]):
            return cpu_nodes_in_ranges(graph, ranges, same_thread=False), f"{len(ranges[0])} ProfilerStep region{'s' * (len(ranges[0]) != 1)}"
        return np.where(cpu, 0, -1), "the whole window (the trace has no ProfilerStep ranges)"
    return np.where(cpu, 0, -1), "the whole window"


def _other_thread_launched_between(graph, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For consecutive calls a -> b of one thread: did another thread of the process launch GPU
    work in the gap between them (recorded times)? Then the thread was handing work over (e.g.
    the main thread waiting in loss.backward() while the autograd thread launches), the gap is
    that wait, and a captured region cannot span it."""
    out = np.zeros(len(a), dtype=bool)
    launchers = sorted_unique(graph.launch[graph.launch >= 0])
    if len(launchers) == 0 or len(a) == 0:
        return out
    pid_of = graph.lane_keys[graph.lane, 1]
    for pid in sorted_unique(pid_of[launchers]).tolist():
        starts = np.sort(graph.rec_start_ns[launchers[pid_of[launchers] == pid]])
        m = pid_of[a] == pid
        lo = np.searchsorted(starts, graph.rec_end_ns[a[m]], side="right")
        hi = np.searchsorted(starts, graph.rec_start_ns[b[m]], side="left")
        out[np.nonzero(m)[0]] = hi > lo
    return out


def _apply(graph, p):
    cpu = graph.node_kind == NODE_CPU
    if not np.any(cpu) or not np.any(graph.launch >= 0):
        raise NotApplicable("the trace has no launched GPU tasks")
    rid, how = regions(graph, p["region"])
    roles = cpu_roles(graph)
    # one-time start-up calls (module loading on a first launch) stay: a graphed program loads its modules too
    splitter = cpu & (graph.synchronizing | np.isin(roles, [int(r) for r in SYNC_ROLES]) | name_mask(graph, NONCAPTURABLE, cpu)
                      | startup_calls(graph))
    member = cpu & (rid >= 0) & ~splitter
    order = lane_order(graph, cpu)
    # runs: consecutive members on one thread in one region
    mem = member[order]
    brk = np.ones(len(order), dtype=bool)
    if len(order) > 1:
        brk[1:] = ~((graph.lane[order[1:]] == graph.lane[order[:-1]]) & mem[1:] & mem[:-1] & (rid[order[1:]] == rid[order[:-1]]))
    if len(order) > 1:
        brk[1:] |= _other_thread_launched_between(graph, order[:-1], order[1:])
    run = np.cumsum(brk) - 1
    run_of = np.full(graph.n, -1, dtype=np.int64)
    run_of[order[mem]] = run[mem]
    # kernel launches per run
    is_kernel_launch = np.zeros(graph.n, dtype=bool)
    kl = graph.launch[(graph.node_kind == Kind.KERNEL) & (graph.launch >= 0)]
    is_kernel_launch[kl] = True
    ids = run_of[member]
    n_runs = int(run.max()) + 1 if len(run) else 0
    launches = np.bincount(ids, weights=is_kernel_launch[member], minlength=n_runs)
    good = launches >= 2
    in_good = member & (run_of >= 0) & good[np.maximum(run_of, 0)]
    if not in_good.any():
        raise NotApplicable(f"no region ({how}) has two kernel launches between synchronizations")
    # the first call of each good run stays, as the graph launch
    pos = np.nonzero(in_good[order])[0]
    seq = order[pos]
    first = np.ones(len(seq), dtype=bool)
    first[1:] = run_of[seq[1:]] != run_of[seq[:-1]]
    heads = seq[first]
    drop = np.zeros(graph.n, dtype=bool)
    drop[seq[~first]] = True
    glaunch = p["graph_launch_ns"] if p["graph_launch_ns"] >= 0 else median_launch_ns(graph)
    # a kernel's first launch keeps its one-time part (module loading): the capture loads the modules
    once = first_launch_one_time_ns(graph)
    runs = sorted_unique(run_of[in_good])
    extra = np.bincount(np.searchsorted(runs, run_of[in_good]), weights=once[in_good], minlength=len(runs)).astype(np.int64)
    kept_ns = int(extra.sum())
    removed_cpu_ns = int(graph.dur_ns[drop].sum() + graph.gap_ns[drop].sum()) - int(once[drop].sum())
    # each run becomes its first call, the graph launch (plus the one-time part of its first launches)
    g = merge(graph, np.where(in_good, run_of, -1), int(glaunch) + extra)
    mem_note = ""
    if graph.memory is not None and len(graph.memory):
        node = anchor_nodes(graph, graph.memory)
        n0 = np.maximum(node, 0)
        ev_region = np.where((node >= 0) & ~graph.memory.at_end & in_good[n0], rid[n0], -1)
        g, _, mem_note = graph_pool(g, ev_region, "cuda-graphs")
    return g, (f"{len(heads):,} graph launch{'es' * (len(heads) != 1)} ({how}; {glaunch:,} ns{' each' * (len(heads) != 1)}) replace {int(in_good.sum()):,} API calls; "
               f"{removed_cpu_ns / 1e6:,.3f} ms of CPU calls and gaps removed"
               + (f"; {int((once[in_good] > 0).sum()):,} kernels' first launches keep their one-time part ({kept_ns / 1e6:,.3f} ms, "
                  "module loading: a graph's capture loads its kernels' modules too) in the graph launch" if kept_ns else "")
               + (f"; {mem_note}" if mem_note else ""))


register(
    Optimization(
        name="cuda-graphs",
        summary="replay each step as a CUDA graph: per-kernel launch calls and the CPU gaps between them collapse into one launch",
        apply=_apply,
        params={
            "region": Param("step", "captured region: 'step' (each ProfilerStep#N range; the whole window when there is "
                            "none) or 'window'", str, lambda v: v in ("step", "window"), "step or window"),
            "graph_launch_ns": Param(-1, "CPU duration of one cudaGraphLaunch, ns; -1 = the lower median duration of the trace's "
                                     "kernel-launch calls (measured: a graph launch is one API call; "
                                     "scripts/ground_truth/run.py records real cudaGraphLaunch durations)", integer_ns,
                                     lambda v: v >= -1, ">= -1"),
        },
    )
)
