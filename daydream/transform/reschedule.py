"""Reschedule: GPU streams run by task priority instead of recorded order (the paper's reschedule)."""

from __future__ import annotations

import dataclasses
from typing import Iterable

import numpy as np

from ..util.arrays import sorted_unique
from ..errors import DaydreamError
from ..graph import NODE_CPU, TaskGraph


def set_priority(graph: TaskGraph, priority: np.ndarray, lanes: Iterable[int] | None = None) -> TaskGraph:
    """New graph whose GPU ``lanes`` are scheduled by priority instead of in recorded order.

    On such a lane, a task starts as soon as its own dependencies allow and the lane is free, and
    among the tasks ready at that moment the one with the largest ``priority`` goes first (ties:
    recorded order); see :mod:`daydream.simulate.priority`.

    Args:
        priority: int per node (length ``graph.n``); only tasks on ``lanes`` use it.
        lanes: lane ids (``graph.lane`` values) to schedule by priority; default: the GPU lanes
            of the tasks with a non-zero priority.

    Raises:
        DaydreamError: a wrong-sized priority array, or a lane that is not a GPU stream.
    """
    pr = np.asarray(priority, dtype=np.int64)
    if pr.shape != (graph.n,):
        raise DaydreamError("set_priority: one priority per task is needed")
    if lanes is None:
        lanes = sorted_unique(graph.lane[(pr != 0) & (graph.node_kind != NODE_CPU)]).tolist()
    lanes = sorted({int(x) for x in lanes})
    for ln in lanes:
        if not 0 <= ln < len(graph.lanes) or not graph.lane_is_gpu[ln]:
            raise DaydreamError(f"set_priority: lane {ln} is not a GPU stream (only streams can be rescheduled)")
    return dataclasses.replace(graph, priority=pr, priority_lanes=tuple(lanes))
