"""The transformation primitives of the Daydream paper (section 5) over a :class:`TaskGraph`.

Optimizations (``daydream/optimizations/``) and users' own scripts are written only in terms of
these: :func:`select` tasks by a predicate, :func:`scale` their durations, :func:`remove` tasks
(keeping their dependencies transitively), :func:`insert` a task with given dependencies,
:func:`set_priority` to schedule a stream by priority (the paper's reschedule). Every
primitive returns a new graph; the graph it was given is never changed.

One module per primitive: :mod:`.selection` (masks), :mod:`.durations` (durations, gaps, launch
latency), :mod:`.dependencies` (remove tasks; edges added or removed), :mod:`.insertion` (one
batched :func:`insert_tasks`; :func:`insert` and the other insertions are its cases),
:mod:`.merging` (:func:`merge`: groups of tasks become one), :mod:`.lanes` (:func:`add_lanes`: new
threads and streams), :mod:`.reschedule` (:func:`set_priority`); :mod:`.graph_copy` holds what
they share. This package re-exports every primitive: import them from ``daydream.transform``.

Semantics (they keep ``docs/model.md`` meaningful for the changed program):

* Scaling a CPU task scales its duration (for a blocking call: its own cost), not its gap.
* Removing a CPU task removes the gap before it too (the framework work that issued the call);
  the next task on its thread follows the previous one with its own gap. GPU tasks it launched,
  if kept, become launched by the previous kept call on the thread (or ready at trace start).
* Removing a GPU task: the next kept task on its stream follows the kept task before it and
  inherits its cross-stream producers; cross-stream consumers and calls that waited for it now
  depend on the kept task before it on its stream (none when it was the first).
* Inserting: a task is placed on a lane right after an anchor task (``after``), with extra
  predecessors (GPU tasks it waits for) and successors; an inserted GPU task may name the CPU
  task that launches it.
* Removing or inserting tasks makes the launch-queue edges again from the new stream order (the
  call launching a stream's task ``k`` waits for its task ``k - D``; ``docs/model.md``).
"""

from __future__ import annotations

from ..graph import topological_order  # noqa: F401 - importable from here since before the split
from .dependencies import add_edges, remove, remove_edges, with_latent_waits
from .durations import MAX_DURATION_NS, scale, scale_gaps, set_duration, set_gap, set_launch_latency
from .insertion import add_kernel_after, insert, insert_cpu_tasks, insert_launches, insert_on_stream, insert_tasks
from .lanes import add_lanes, add_stream, add_thread, add_threads
from .merging import merge
from .reschedule import set_priority
from .selection import KIND_NAMES, MAX_PATTERN_CHARS, compile_pattern, name_mask, select

__all__ = [
    "KIND_NAMES", "MAX_DURATION_NS", "MAX_PATTERN_CHARS", "add_edges", "add_kernel_after", "add_lanes", "add_stream", "add_thread",
    "add_threads", "compile_pattern", "insert", "insert_cpu_tasks", "insert_launches", "insert_on_stream", "insert_tasks", "merge",
    "name_mask", "remove", "remove_edges", "scale", "scale_gaps", "select", "set_duration", "set_gap", "set_launch_latency",
    "set_priority", "with_latent_waits",
]
