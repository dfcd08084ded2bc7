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
"""

from __future__ import annotations

import numpy as np

from .model import NODE_CPU, TaskGraph

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
