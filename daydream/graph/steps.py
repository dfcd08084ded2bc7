"""The ``ProfilerStep#N`` ranges of a trace (the per-step windows of the report)."""

from __future__ import annotations

import re

import numpy as np

from ..events.table import EventTable, Kind

_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def profiler_steps(table: EventTable) -> list[tuple[str, int, int, int, int]]:
    """The ``ProfilerStep#N`` CPU ranges: (name, start_ns, end_ns, pid, tid), by start time.
    Found once per table (kept on it: a table is not changed once made; the graphs a
    transformation makes share their baseline's table, and each asks again)."""
    hit = table.__dict__.get("_profiler_steps")
    if hit is None:
        hit = table.__dict__["_profiler_steps"] = _profiler_steps(table)
    return list(hit)


def _profiler_steps(table: EventTable) -> tuple[tuple[str, int, int, int, int], ...]:
    step_names = table.name_ids(lambda s: _STEP.match(s) is not None)
    if not step_names.any():
        return ()
    # 2021 Kineto wrote ProfilerStep as an 'Operator' (cpu_op); newer versions as user_annotation
    m = ((table.kind == Kind.RANGE) | (table.kind == Kind.CPU_OP)) & step_names[table.name_id] & (table.tid >= 0) & (table.device < 0)
    rows = np.nonzero(m)[0]
    return tuple((table.name_of(r), int(table.start_ns[r]), int(table.end_ns[r]), int(table.pid[r]), int(table.tid[r])) for r in rows)
