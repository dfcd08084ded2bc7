"""What the what-ifs need from the trace beyond the tasks, taken from the event table at build.

The graph is self-contained: nothing after the build reads the event table or the trace file
(``docs/model.md``). Some what-ifs need facts of the trace that are not tasks: per-kernel launch
data and the launching op's shapes (``gpu-upgrade``, ``amp``), the collective args (message
sizes, process groups, ``AccumulateGrad`` input shapes: the collective and gradient finders), the
CPU ops those args join to by External id, the ``ProfilerStep#N`` windows, and the trace's own
facts (its file, format, world size). :func:`trace_facts` takes them from the table the builder
holds into a :class:`TraceFacts` (``TaskGraph.facts``); launch data and collective args are what
the table carries (:mod:`daydream.formats.trace_side`: taken at load, or read from a saved table),
made into columns on first use.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Optional

import numpy as np

from ..events.table import EventTable, Kind
from ..formats.comm_args import CommArgs
from ..formats.launch_data import LaunchData, launch_data_of
from ..formats.trace_side import comm_args_of_table
from .steps import profiler_steps


@dataclass(frozen=True)
class CpuOps:
    """The table's CPU ops and annotation ranges (``Kind.CPU_OP`` / ``RANGE`` rows, in row order):
    what the collective args and gradient shapes join to by External id. Arrays of one length:
    row (table row), kind (uint8 ``Kind``), pid, tid, start_ns, end_ns (int64 ns), name_id (into
    ``TraceFacts.names``), external_id (-1 none)."""

    row: np.ndarray
    kind: np.ndarray
    pid: np.ndarray
    tid: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    name_id: np.ndarray
    external_id: np.ndarray

    def __len__(self) -> int:
        return len(self.row)


@dataclass(frozen=True, eq=False)
class TraceFacts:
    """The trace's facts a graph keeps (module docstring); shared by every graph a transformation
    makes of it (rows are stable identities).

    source: the trace file the table was read from ("" none: a table made in memory, or a saved
    table whose trace is not at hand); format: the adapter's name; world_size: the trace's
    (-1 unknown); names: the table's interned names; ops: :class:`CpuOps`; external_id: the table's
    ``external_id`` column (indexed by ``TaskGraph.row``); steps: the ``ProfilerStep#N`` ranges
    (:func:`daydream.graph.steps.profiler_steps`)."""

    source: str
    format: str
    world_size: int
    names: list
    ops: CpuOps
    external_id: np.ndarray
    steps: tuple
    #: what the table carried: a ``LaunchFacts`` (or a stand-in whose launch data is read from ``meta``)
    _launch: Any
    #: the table's collective args (``EventTable.comm``: a ``CommSource``), or a stand-in naming its file
    _comm: Any
    #: the table's ``bytes`` column (int64 bytes a memcpy/memset moved, -1 otherwise; indexed by
    #: ``TaskGraph.row``): the batch copies ``dataloader`` sizes its host buffers by; None: not kept
    copy_bytes: Optional[np.ndarray] = None

    @cached_property
    def launch(self) -> LaunchData:
        """Per-kernel launch data (:class:`~daydream.formats.launch_data.LaunchData`; made once:
        callers must not modify it)."""
        return launch_data_of(self._launch)

    @cached_property
    def comm_args(self) -> Optional[CommArgs]:
        """The collective args (:class:`~daydream.formats.comm_args.CommArgs`, with ``reason`` where
        they could not be read), or None where the table names no trace file."""
        return comm_args_of_table(self._comm)


def trace_facts(table: EventTable) -> TraceFacts:
    """The :class:`TraceFacts` of ``table`` (at build; nothing of the trace file is read here)."""
    k = table.kind
    r = np.nonzero((k == Kind.CPU_OP) | (k == Kind.RANGE))[0]
    c = table.cols
    ops = CpuOps(r, k[r], c["pid"][r], c["tid"][r], c["start_ns"][r], c["end_ns"][r], c["name_id"][r], c["external_id"][r])
    meta = table.meta
    stand_in = types.SimpleNamespace(launch=table.launch, comm=table.comm, meta=meta)
    return TraceFacts(source=meta.source or "", format=meta.format, world_size=int(meta.world_size or -1),
                      names=table.names, ops=ops, external_id=c["external_id"], steps=tuple(profiler_steps(table)),
                      _launch=stand_in, _comm=stand_in, copy_bytes=np.asarray(c["bytes"], np.int64))
