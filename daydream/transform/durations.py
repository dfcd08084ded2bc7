"""Scale: task durations, CPU gaps and the launch latency changed in place; the graph's structure stays (memo shared)."""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from ..errors import DaydreamError
from ..graph.memo import same_structure
from ..graph import NODE_CPU, TaskGraph


#: longest task duration a transformation may produce (2^52 ns, about 52 days): keeps every replayed
#: time far inside int64 and exactly representable as a float
MAX_DURATION_NS = 2**52


# -------------------------------------------------------------------------------- scale ------
def scale(graph: TaskGraph, mask: np.ndarray, factor: float | Callable[[TaskGraph, np.ndarray], np.ndarray]) -> TaskGraph:
    """New graph with the durations of the selected tasks multiplied by ``factor``.

    ``factor`` is a number or a function ``(graph, node_ids) -> factors`` (one per selected node).
    Durations are rounded to whole ns.

    Raises:
        DaydreamError: a negative or non-finite factor.
    """
    mask = np.asarray(mask, dtype=bool)
    ids = np.nonzero(mask)[0]
    f = np.asarray(factor(graph, ids) if callable(factor) else np.full(len(ids), float(factor)), dtype=np.float64)
    if f.shape != ids.shape:
        raise DaydreamError("scale: the factor function must return one factor per selected task")
    if len(f) and (not np.all(np.isfinite(f)) or np.any(f < 0)):
        raise DaydreamError("scale: factors must be finite and >= 0")
    dur = graph.dur_ns.copy()
    scaled = np.rint(dur[ids] * f)
    if len(scaled) and np.any((scaled >= MAX_DURATION_NS) & (scaled > dur[ids])):  # a longer task the trace held is kept, not grown
        raise DaydreamError(f"scale: a scaled duration would exceed {MAX_DURATION_NS / 1e9 / 86400:.0f} days; use a smaller factor")
    dur[ids] = scaled.astype(np.int64)
    return same_structure(graph, dataclasses.replace(graph, dur_ns=dur))


def set_duration(graph: TaskGraph, mask: np.ndarray, dur_ns: np.ndarray | int) -> TaskGraph:
    """New graph with the selected tasks' durations set to ``dur_ns`` (ns, scalar or per task)."""
    dur = graph.dur_ns.copy()
    dur[np.asarray(mask, dtype=bool)] = np.asarray(dur_ns, dtype=np.int64)
    return same_structure(graph, dataclasses.replace(graph, dur_ns=dur))


# ------------------------------------------------------------------ new threads and gaps -----
def set_gap(graph: TaskGraph, mask: np.ndarray, gap_ns: np.ndarray | int) -> TaskGraph:
    """New graph with the CPU gap before the selected CPU tasks set to ``gap_ns`` (ns, scalar or
    one per selected task; GPU tasks keep gap 0).

    Raises:
        DaydreamError: a selected task is a GPU task, or a gap is negative or too long.
    """
    mask = np.asarray(mask, dtype=bool)
    if (mask & (graph.node_kind != NODE_CPU)).any():
        raise DaydreamError("set_gap: only CPU tasks have a gap")
    gap = graph.gap_ns.copy()
    new = np.broadcast_to(np.asarray(gap_ns, dtype=np.int64), (int(mask.sum()),))
    if len(new) and (new.min() < 0 or new.max() >= MAX_DURATION_NS):
        raise DaydreamError("set_gap: gaps must be >= 0 ns and shorter than MAX_DURATION_NS")
    gap[mask] = new
    return dataclasses.replace(graph, gap_ns=gap)


# ------------------------------------------------------------------------------- host path ---
def scale_gaps(graph: TaskGraph, mask: np.ndarray, factor: float) -> TaskGraph:
    """New graph with the CPU gaps before the selected CPU tasks multiplied by ``factor`` (a faster
    or slower host CPU runs the framework code between API calls faster or slower); rounded to ns.
    When every CPU task is selected, ``host_scales`` records it (range boundaries in gaps move
    with the gaps).

    Raises:
        DaydreamError: a negative or non-finite factor.
    """
    if not np.isfinite(factor) or factor < 0:
        raise DaydreamError("scale_gaps: the factor must be finite and >= 0")
    m = np.asarray(mask, dtype=bool) & (graph.node_kind == NODE_CPU)
    gap = graph.gap_ns.copy()
    gap[m] = np.rint(gap[m] * float(factor)).astype(np.int64)
    every = bool(m.sum() == np.count_nonzero(graph.node_kind == NODE_CPU))  # all host time: instants in gaps move with it
    return dataclasses.replace(graph, gap_ns=gap, host_scales=graph.host_scales + ((None, float(factor)),) if every else graph.host_scales)


def set_launch_latency(graph: TaskGraph, latency_ns: int) -> TaskGraph:
    """New graph whose launch latency ``L`` (ns from a launching call's start to the earliest start
    of its task, ``docs/model.md`` rule 5) is ``latency_ns``; the GPU gap ``G`` is kept, capped at
    the new ``L`` (G <= L holds on every trace).

    Raises:
        DaydreamError: a negative latency.
    """
    if latency_ns < 0:
        raise DaydreamError("set_launch_latency: the latency must be >= 0")
    return dataclasses.replace(graph, launch_latency_ns=int(latency_ns), gpu_gap_ns=min(int(graph.gpu_gap_ns), int(latency_ns)))
