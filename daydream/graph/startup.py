"""One-time start-up API calls: CUDA context creation on a process's first runtime call, module
loading on a kernel's first launch (``CUDA_MODULE_LOADING=LAZY``, the default since CUDA 11.7),
cuDNN/cuBLAS handle creation. Launches and queries otherwise return in microseconds.

The report warns about them (a window holding them is no steady-state step), and the what-ifs
that remove API calls (``cuda-graphs``, ``fusion``, ``fused-adam``) keep them: a program that
captures a CUDA graph or runs fused kernels still loads its modules and creates its context once,
and the median launch those what-ifs take as a launch's cost leaves them out. Before, a trace of
the first iteration (hta simple_add: a 4,219 ms first ``cudaLaunchKernel``) predicted the start-up
gone (1.126x for ``cuda-graphs``), and a trace with two launches (nsys_ai mock: one of them a
17 ms lazy load) took 17.4 ms as the cost of a graph launch.

A kernel's first launch in its process loads the kernel's module under lazy loading (CUDA C++
Programming Guide, "Lazy Loading"; ``CUDA_MODULE_LOADING=LAZY``): :func:`first_launch_one_time_ns`
gives each first launch call over STARTUP_MIN_NS the part of its time that no repeat launch
explains, derived per trace from the process's repeat launches (launches of a kernel launched
before, whose module is loaded). ``fusion`` and ``cuda-graphs`` keep that part: a fused kernel is
a new kernel whose module loads at its first launch, and a graph's capture loads its kernels'
modules.
Before, on nsys_ai ``mock.sqlite`` (two launches, each a kernel's first, 17.4 and 17.8 ms) both
predicted the second launch's 17.8 ms gone (1.083x).
"""

from __future__ import annotations

import numpy as np

from ..events.table import Kind
from .model import NODE_CPU, TaskGraph

KERNEL_KIND = int(Kind.KERNEL)

#: an API call that does not wait for the GPU yet takes this many times the trace's median call (and
#: at least STARTUP_MIN_NS) is one-time start-up work (module doc)
STARTUP_FACTOR = 1000
STARTUP_MIN_NS = 1_000_000


def startup_calls(graph: TaskGraph) -> np.ndarray:
    """API calls (bool, shape (n,)) that look like one-time start-up: not blocked on the GPU, and
    longer than STARTUP_FACTOR x the median API call and STARTUP_MIN_NS (ns)."""
    cpu = (graph.node_kind == NODE_CPU) & ~graph.blocking
    if not cpu.any():
        return cpu
    limit = max(STARTUP_MIN_NS, STARTUP_FACTOR * float(np.median(graph.dur_ns[cpu])))
    return cpu & (graph.dur_ns > limit)


def first_launch_one_time_ns(graph: TaskGraph) -> np.ndarray:
    """The one-time part (ns, int64, shape (n,); 0 for every other node) of each kernel's first
    launch call in its process that lasts over STARTUP_MIN_NS (a launch returns in microseconds;
    a module load takes milliseconds): the call's duration minus the longest repeat launch call
    of the process (a call launching a kernel whose name that process launched before; a wait for
    room in the launch queue inside it only makes it a looser bound on a launch's own cost), at
    least 0. A process without a repeat launch gives no steady launch cost to subtract: its long
    first launch calls are one-time as a whole.

    Sources: lazy loading (CUDA C++ Programming Guide, "Lazy Loading", CUDA 11.7+): a kernel's
    module is loaded at its first launch. A first launch within a steady launch's time has 0."""
    out = np.zeros(graph.n, np.int64)
    k = np.flatnonzero((graph.node_kind != NODE_CPU) & (graph.launch >= 0) & (graph.node_kind == KERNEL_KIND))
    if not len(k):
        return out
    call = graph.launch[k]
    o = np.lexsort((k, graph.rec_start_ns[call]))
    k, call = k[o], call[o]
    pid = graph.pid[call].astype(np.int64)
    key = pid * (1 << 32) + graph.name_id[k].astype(np.int64)
    _, first = np.unique(key, return_index=True)
    is_first = np.zeros(len(k), bool)
    is_first[first] = True
    first_call = np.zeros(graph.n, bool)
    first_call[call[is_first]] = True
    repeat = np.zeros(graph.n, bool)
    repeat[call[~is_first]] = True
    repeat &= ~first_call
    pids, inv = np.unique(graph.pid.astype(np.int64), return_inverse=True)
    inv = inv.reshape(-1)
    ref = np.zeros(len(pids), np.int64)
    r = np.flatnonzero(repeat)
    np.maximum.at(ref, inv[r], graph.dur_ns[r].astype(np.int64))
    f = np.flatnonzero(first_call & (graph.dur_ns > STARTUP_MIN_NS))
    out[f] = np.maximum(graph.dur_ns[f].astype(np.int64) - ref[inv[f]], 0)
    return out
