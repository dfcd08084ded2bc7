"""What the mapping gives: the per-row :class:`Mapping` of an event table and the per-node
:class:`NodeMapping` of a task graph (:meth:`Mapping.for_nodes`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..events.threads import CallThreads
from ..util import jit
from .rules import PHASES, UNMAPPED


@dataclass
class Mapping:
    """Per-row context of a table (length ``len(table)`` arrays).

    Attributes:
        phase: uint8 index into :data:`PHASES` for RUNTIME and GPU task rows (``unmapped`` for all
            other rows).
        layer_id: int32 index into ``labels`` of the layer path, -1 none.
        op_id: int32 index into ``labels`` of the innermost framework op, -1 none.
        launch_row: for GPU task rows, the RUNTIME row that launched them; -1 otherwise.
        labels: the interned layer paths and op names.
        gap_phase: uint8 phase code of the CPU gap *before* each RUNTIME row on its thread (the
            framework/Python time since the thread's previous call; see :func:`map_events`),
            ``unmapped`` for all other rows.
        gap_layer_id: int32 index into ``labels`` of the layer path of that gap, -1 none.
        autograd_threads: (pid, tid) of the threads treated as autograd engine threads.
        counts: diagnostics (rows mapped, GPU rows without launch, ...).
        launch_unique: True when ``launch_row`` was found with no two runtime calls sharing a
            (process, correlation id): the link is then the same whatever order the calls are
            taken in, and the graph builder reuses it instead of linking again.
        call_threads: the table's RUNTIME rows by thread
            (:func:`~daydream.events.threads.call_threads`), which the graph builder's first
            stage reuses; None: it computes them.
        cpu_range_columns: int64 (pid, tid, start_ns, end_ns, name_id) of the CPU-side RANGE
            and CPU_OP rows in row order, which the mapping reads for its contexts and the graph
            builder keeps as ``TaskGraph.cpu_ranges``; None: the builder gathers them.
    """

    phase: np.ndarray
    layer_id: np.ndarray
    op_id: np.ndarray
    launch_row: np.ndarray
    labels: list[str]
    autograd_threads: list[tuple[int, int]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    gap_phase: np.ndarray | None = None
    gap_layer_id: np.ndarray | None = None
    launch_unique: bool = False
    call_threads: "CallThreads | None" = None
    cpu_range_columns: tuple[np.ndarray, ...] | None = None

    def __post_init__(self) -> None:
        n = len(self.phase)
        if self.gap_phase is None:
            self.gap_phase = np.zeros(n, dtype=np.uint8)
        if self.gap_layer_id is None:
            self.gap_layer_id = np.full(n, -1, dtype=np.int32)

    def phase_of_rows(self, rows) -> np.ndarray:
        """Phase names (object array of str) of the given rows (indices or bool mask)."""
        return np.asarray(PHASES, dtype=object)[self.phase[rows]]

    def _label_of(self, ids: np.ndarray, none: str) -> np.ndarray:
        lab = np.asarray(self.labels + [none], dtype=object)
        return lab[np.where(ids >= 0, ids, len(self.labels))]

    def layer_of_rows(self, rows, none: str = "") -> np.ndarray:
        """Layer paths (object array of str, ``none`` where absent) of the given rows."""
        return self._label_of(self.layer_id[rows], none)

    def op_of_rows(self, rows, none: str = "") -> np.ndarray:
        """Op names (object array of str, ``none`` where absent) of the given rows."""
        return self._label_of(self.op_id[rows], none)

    def for_nodes(self, rows, method: str = "auto") -> "NodeMapping":
        """The mapping of graph nodes: ``rows`` are their table rows (``TaskGraph.row``), -1 for
        nodes without one (unmapped, no layer, no op). ``method``: when every node has a row, one
        compiled pass (:func:`_pick_kernel`) from :data:`GPU_ROWS_MIN` nodes when numba is there
        ("auto"; "compiled" whatever the size, "python" the kernel uncompiled, "numpy" never),
        else numpy gathers; the same answers."""
        rows = np.asarray(rows, dtype=np.int64)
        ok = rows >= 0
        every = bool(ok.all())  # a built graph: every node has a row
        fn = jit.kernel_for(_pick_kernel, len(rows), GPU_ROWS_MIN, method) if every else None
        if fn is not None and all(a.dtype == d for a, d in ((self.phase, np.uint8), (self.layer_id, np.int32), (self.op_id, np.int32),
                                                             (self.gap_phase, np.uint8), (self.gap_layer_id, np.int32))):
            n = len(rows)
            o = (np.empty(n, np.uint8), np.empty(n, np.int32), np.empty(n, np.int32), np.empty(n, np.uint8), np.empty(n, np.int32))
            jit.call(fn, rows, self.phase, self.layer_id, self.op_id, self.gap_phase, self.gap_layer_id, *o)
            return NodeMapping(*o, list(self.labels))
        r = rows if every else rows[ok]

        def pick(a: np.ndarray, missing: int, dtype) -> np.ndarray:
            if every:
                return a[r].astype(dtype, copy=False)
            out = np.full(len(rows), missing, dtype=dtype)
            out[ok] = a[r]
            return out

        return NodeMapping(pick(self.phase, UNMAPPED, np.uint8), pick(self.layer_id, -1, np.int32),
                           pick(self.op_id, -1, np.int32), pick(self.gap_phase, UNMAPPED, np.uint8),
                           pick(self.gap_layer_id, -1, np.int32), list(self.labels))


@dataclass(frozen=True)
class NodeMapping:
    """Per-node layer/phase facts of a task graph (codes index ``PHASES`` / ``labels``).

    Attributes (length ``n``): phase (uint8), layer_id, op_id (int32, -1 none), gap_phase
    (uint8: the phase in effect during the CPU gap before a CPU node; None: charge the gap to the
    node's own phase), gap_layer_id (int32 or None). labels: the layer/op strings the ids index.
    """

    phase: np.ndarray
    layer_id: np.ndarray
    op_id: np.ndarray
    gap_phase: np.ndarray | None
    gap_layer_id: np.ndarray | None
    labels: list[str]

    def take(self, idx: np.ndarray) -> "NodeMapping":
        """The mapping of nodes ``idx`` (fancy index; repeats allowed)."""
        def t(a):
            return a[idx] if a is not None else None

        return NodeMapping(self.phase[idx], self.layer_id[idx], self.op_id[idx], t(self.gap_phase),
                           t(self.gap_layer_id), self.labels)


#: :func:`_map_gpu_rows` and :meth:`Mapping.for_nodes` run their compiled passes from this many rows ("auto")
GPU_ROWS_MIN = 50_000


def _pick_kernel(rows, phase, layer_id, op_id, gap_phase, gap_layer_id, o_phase, o_layer, o_op, o_gap_phase, o_gap_layer):
    """:meth:`Mapping.for_nodes`' pass (every node with a row): the five row maps gathered at ``rows``."""
    for i in range(len(rows)):
        r = rows[i]
        o_phase[i] = phase[r]
        o_layer[i] = layer_id[r]
        o_op[i] = op_id[r]
        o_gap_phase[i] = gap_phase[r]
        o_gap_layer[i] = gap_layer_id[r]
