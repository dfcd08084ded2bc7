"""Merge: groups of tasks become one task each (a fused kernel, a fused optimizer step, a CUDA graph
launch), the other members removed with their dependencies kept through the one that stays."""

from __future__ import annotations

import numpy as np

from ..graph import TaskGraph
from .durations import set_duration
from .dependencies import remove


def merge(graph: TaskGraph, group: np.ndarray, dur_ns: np.ndarray | int, *, drop: np.ndarray | None = None) -> TaskGraph:
    """New graph in which each group of tasks becomes one task: the group's first member in the
    visiting order (its head) stays, with duration ``dur_ns``; the other members are removed as
    :func:`~daydream.transform.dependencies.remove` removes tasks (dependencies through them kept
    transitively, so what waited for a member now waits for the task before it on its lane).

    Args:
        group: int per node (length ``graph.n``): the group of each task, -1 for tasks not merged.
        dur_ns: the merged tasks' durations, ns: one per group, groups in increasing id order, or
            one for all.
        drop: mask of further tasks removed with the groups (e.g. launch calls left with nothing
            to launch); default none.

    Returns:
        The new graph (``set_duration`` of the heads, then one ``remove`` of the rest).
    """
    group = np.asarray(group, np.int64)
    rank = np.empty(graph.n, dtype=np.int64)
    rank[graph.order] = np.arange(graph.n)
    members = np.flatnonzero(group >= 0)
    members = members[np.lexsort((rank[members], group[members]))]
    g_of = group[members]
    first = np.ones(len(members), dtype=bool)
    first[1:] = g_of[1:] != g_of[:-1]
    heads = members[first]
    head_mask = np.zeros(graph.n, dtype=bool)
    head_mask[heads] = True
    gone = (group >= 0) & ~head_mask
    if drop is not None:
        gone |= np.asarray(drop, dtype=bool)
    dur = np.asarray(dur_ns, np.int64)[np.argsort(heads)] if np.ndim(dur_ns) else dur_ns
    return remove(set_duration(graph, head_mask, dur), gone)
