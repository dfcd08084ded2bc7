"""Map launches and GPU tasks to the layer, framework op and training phase that issued them.

Works on the :class:`~daydream.events.table.EventTable` alone (formats -> events -> mapping -> graph).
For every RUNTIME row and every GPU task row (KERNEL, MEMCPY, MEMSET) :func:`map_events` finds
the *context* of the CPU call that launched it:

* **Context rows** are the CPU-side annotation ranges (``Kind.RANGE`` rows with ``device < 0``:
  Kineto ``user_annotation`` and ``python_function``, NVTX ranges) and the framework ops
  (``Kind.CPU_OP``). A context *encloses* a runtime call when it is on the same (pid, tid) and
  ``ctx.start <= call.start and call.end <= ctx.end`` (the ``nsys`` ``nvtx_kern_sum`` rule; the
  kernel's own execution time does not enter the test). A GPU row takes the context of its
  launching runtime row, found by (pid, correlation id) (:func:`daydream.events.links.launch_rows`, as
  the graph builder does).
* **Layer path**: the chain of enclosing ``nn.Module: <Class>_<k>`` ranges (Kineto
  ``with_modules``/``with_stack``), outermost to innermost, prefix dropped, joined by ``/``
  (``BertLMHeadModel_0/BertModel_0/BertEncoder_0/...``). When no module range encloses the call,
  the chain of enclosing *scope annotations* is used instead: CPU-side ranges that are neither
  ``python_function`` frames nor op-like NVTX ranges, plus ``#``-named record_function scopes
  that old traces store as ops (``Optimizer.step#SGD.step``), except those whose phase rule says
  "structural" (``ProfilerStep#N``).
* **Op**: the innermost enclosing framework op: a CPU_OP row (except ``#``-named
  record_function scopes), or an NVTX range that looks like an op (``torch.autograd.profiler.
  emit_nvtx`` names such as ``aten::mm, seq = 12, op_id = 7`` -> ``aten::mm``; namespaced
  identifiers ``ns::name``; NCCL API ranges ``ncclSend``).
* **Phase**: from :data:`PHASE_RULES`, see :func:`map_events` and ``docs/mapping.md``.
* **Gap phase / gap layer** of a runtime call: the phase and layer in effect during the CPU gap
  before it on its thread, from the contexts enclosing the gap's midpoint (``Mapping.gap_phase``,
  ``Mapping.gap_layer_id``; the report charges ``TaskGraph.gap_ns`` to them).

"Innermost" among several enclosing contexts is the one that starts last (ties: the shorter),
which is the innermost for properly nested ranges and stays well defined when ranges overlap.

Everything is vectorized: per thread, contexts are sorted by (start asc, end desc) and a sparse
table of the running maximum of ends answers "the latest-starting context with start <= s and
end >= e" for all queries at once by binary lifting (``O((n + q) log n)`` numpy work). Python
loops run only over threads, priority levels, nesting depths and distinct names.

Big inputs (numba there, :data:`~.enclose.SWEEP_MIN` items) take compiled passes instead, each
O(n) over the contexts with no per-thread copies: :func:`~.contexts._context_keys` selects the
contexts and writes their columns, :func:`~.grouping._group_contexts` lists each thread's, and
:func:`~.enclose._sweep_fused` answers every search of a thread in one stack sweep. The numpy
path is their reference (the tests compare them); the answers are the same.

Parts: :mod:`.rules` (the phase and range rules, as data), :mod:`.maps` (:class:`~.maps.Mapping`,
:class:`~.maps.NodeMapping`), :mod:`.contexts` (the context rows and what each says),
:mod:`.grouping` (each thread's calls, contexts and gap midpoints), :mod:`.enclose` (the
enclosure search), :mod:`.thread_search` (one thread's answers); this module drives them
(:func:`map_events`) and gives GPU tasks their launching call's answers. The runtime calls by
thread come from :mod:`daydream.events.threads`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..events.links import launch_rows
from ..events.table import EventTable
from ..events.threads import CallThreads, call_threads, task_rows
from ..util import jit
from ..util.arrays import small_pages, sorted_unique
from .contexts import _classify_contexts, _Contexts, _Interner, _phase_levels
from .enclose import _fused_kernel
from .grouping import _by_thread, _gap_midpoints, _group_kernel, _grouped_threads
from .maps import GPU_ROWS_MIN, Mapping
from .rules import (
    COMM_KERNEL_PATTERN,
    COMMUNICATION,
    PHASE_RULES,
    UNMAPPED,
    PhaseRule,
    is_comm_kernel_name,
    is_peer_kernel_name,
    PEER_KERNEL_PATTERN,
)
from .thread_search import (
    _finish_kernel,
    _layer_ids,
    _op_ids,
    _thread_fused,
    _thread_phases,
    _thread_queries,
    _ThreadContexts,
)

# ---------------------------------------------------------------------------------------------
# interval machinery


# ---------------------------------------------------------------------------------------------
# name classification


# ---------------------------------------------------------------------------------------------
# main entry


@small_pages
def map_events(table: EventTable, rules: Sequence[PhaseRule] = PHASE_RULES, method: str = "auto") -> Mapping:
    """Layer path, framework op and phase of every RUNTIME and GPU task row of ``table``.

    Phase of a runtime call (GPU rows take their launching call's phase):

    1. Each context name takes the first rule of ``rules`` whose pattern it matches (``ops_only``
       rules only for framework ops). Among the contexts enclosing the call whose rule gives a
       phase, the highest priority wins; on equal priority the innermost.
    2. A thread where backward contexts enclose more than :data:`AUTOGRAD_THREAD_SHARE` of the
       enclosed runtime calls is an autograd engine thread: every call on it counts as enclosed
       by a backward context of priority ``AUTOGRAD_THREAD_RULE.priority`` (2: above the "any op
       is forward" default, below every named rule).
    3. No phase from 1-2: ``other`` when some context (or rule 2) encloses the call, else
       ``unmapped``.
    4. GPU tasks whose name matches :data:`COMM_KERNEL_PATTERN` (NCCL/RCCL kernels) or
       :data:`PEER_KERNEL_PATTERN` (all-to-all/EP libraries that spin-wait on peers) are
       ``communication`` whatever launched them; GPU tasks without a launching call are otherwise
       ``unmapped``.

    Gap phase and gap layer of a runtime call r: the gap is ``[prev_end, r.start]``, ``prev_end``
    the largest end of the earlier runtime calls of its thread (the table's earliest timestamp for
    its first call; clamped to ``r.start``). The contexts enclosing the gap's midpoint (a point
    query, same thread) decide, by rules 1-3 above (rule 2 on the threads the calls made autograd
    threads).

    Other rows (CPU_OP, RANGE, SYNC, MARKER) stay ``unmapped`` with no layer or op. Never raises
    for a readable table; a table without annotations maps every row ``unmapped``.

    ``method`` (same results whichever): "auto" answers a thread's interval searches in one
    compiled sweep (:func:`_sweep_fused`) from :data:`SWEEP_MIN` contexts + queries when numba
    is there, else one numpy search per context class, and writes the sweep's answers into the
    row maps by one more compiled pass (:func:`_finish_thread`); "numpy" always the numpy
    searches; "fused" the compiled passes whatever the size; "fused-np" the compiled sweep
    whatever the size with numpy steps after it; "fused-py" the sweep and the pass after it
    uncompiled (tests).
    """
    kind = table.kind
    out = _RowMaps.empty(len(table))
    counts: dict[str, int] = {}
    intern = _Interner()
    autograd_threads: list[tuple[int, int]] = []

    rt_rows, gpu_rows = task_rows(kind)
    ctx = _classify_contexts(table, rules) if len(rt_rows) else None
    threads = call_threads(table, rt_rows)
    if ctx is not None and ctx.n:
        autograd_threads = _map_runtime_calls(table, rules, ctx, rt_rows, out, intern, method, threads)
    cpu_range_columns = None
    if ctx is not None and ctx.n and ctx.all_cpu_side:
        cpu_range_columns = (*ctx.columns, ctx.name_id)
    launch_unique = False
    if len(gpu_rows):
        launch_unique = _map_gpu_rows(table, rt_rows, gpu_rows, out, counts)
    phase, gap_phase = out.phase, out.gap_phase
    counts["runtime calls"] = len(rt_rows)
    counts["runtime calls unmapped"] = int(np.count_nonzero(phase[rt_rows] == UNMAPPED))
    counts["GPU tasks"] = len(gpu_rows)
    counts["GPU tasks unmapped"] = int(np.count_nonzero(phase[gpu_rows] == UNMAPPED))
    counts["CPU gaps before runtime calls unmapped"] = int(np.count_nonzero(gap_phase[rt_rows] == UNMAPPED))
    return Mapping(
        phase, out.layer_id, out.op_id, out.launch_row, intern.labels, autograd_threads, counts, gap_phase, out.gap_layer_id,
        launch_unique, threads, cpu_range_columns,
    )


@dataclass
class _RowMaps:
    """The per-row results of :func:`map_events` (arrays over table rows), filled in place."""

    phase: np.ndarray  #: uint8 phase code
    layer_id: np.ndarray  #: int32 label id of the layer path, -1 none
    op_id: np.ndarray  #: int32 label id of the innermost framework op, -1 none
    launch_row: np.ndarray  #: int64 launching RUNTIME row of GPU task rows, -1 none
    gap_phase: np.ndarray  #: uint8 phase code of the CPU gap before each RUNTIME row
    gap_layer_id: np.ndarray  #: int32 label id of that gap's layer path, -1 none

    @classmethod
    def empty(cls, n_rows: int) -> "_RowMaps":
        """Every row unmapped, without layer, op or launch."""
        return cls(
            phase=np.zeros(n_rows, dtype=np.uint8),
            layer_id=np.full(n_rows, -1, dtype=np.int32),
            op_id=np.full(n_rows, -1, dtype=np.int32),
            launch_row=np.full(n_rows, -1, dtype=np.int64),
            gap_phase=np.zeros(n_rows, dtype=np.uint8),
            gap_layer_id=np.full(n_rows, -1, dtype=np.int32),
        )


def _map_runtime_calls(
    table: EventTable, rules: Sequence[PhaseRule], ctx: _Contexts, rt_rows: np.ndarray, out: _RowMaps, intern: _Interner,
    method: str = "auto", threads: "CallThreads | None" = None,
) -> list[tuple[int, int]]:
    """Fill layer, op and phase of the RUNTIME rows and of the gaps before them, thread by thread.

    Each thread's queries are its calls ``[start, end]``, then the midpoints of the gaps before
    them. Returns the (pid, tid) of the threads found to be autograd engine threads. ``method``:
    see :func:`map_events`.
    """
    autograd_threads: list[tuple[int, int]] = []
    op_label = np.array([intern(s) for s in ctx.op_names] + [-1], dtype=np.int64)
    levels = _phase_levels(rules)
    start, end = table.start_ns, table.end_ns
    c_pid, c_tid, c_start, c_end = ctx.columns
    group = _group_kernel(method, ctx.n + 2 * len(rt_rows)) if threads is not None and len(rt_rows) else None
    if group is not None:  # contexts grouped by thread in one compiled pass, gap midpoints in thread order
        per_thread = _grouped_threads(group, table, rt_rows, threads, ctx.columns)
    else:
        gap_mid = _gap_midpoints(table, rt_rows, threads, by_row=True)  # read at rt_rows only
        per_thread = ((key, q, c, None, gap_mid[q]) for key, q, c in _by_thread(table, rt_rows, ctx.rows, (c_pid, c_tid)))
    for (pid, tid), q, c, in_order, mid in per_thread:  # one iteration per thread
        nq = len(q)
        fn = _fused_kernel(method, len(c) + 2 * nq)
        fin = _finish_kernel(method) if fn is not None else None
        if fin is not None:  # queries made, and the sweep's answers written into ``out``, by compiled passes
            qs, qe, qo, ok = jit.call(_finish_kernel(method, _thread_queries), np.ascontiguousarray(q, np.int64), start, end,
                                      np.ascontiguousarray(mid, np.int64))
            if _thread_fused(fn, ctx, c, in_order, qs, qe, nq, levels, intern, op_label, finish=(fin, q, out),
                             qo=qo if ok else np.argsort(qs, kind="stable")):
                autograd_threads.append((pid, tid))
            continue
        qs = np.concatenate([start[q], mid])
        qe = np.concatenate([end[q], mid])
        if fn is not None:  # every interval search of the thread in one compiled sweep
            lay, op_ids, ph, is_autograd = _thread_fused(fn, ctx, c, in_order, qs, qe, nq, levels, intern, op_label)
        else:
            whole = len(c) == ctx.n  # the thread has every context (c ascending, distinct: c is arange)
            th = _ThreadContexts(ctx, c, c_start if whole else c_start[c], c_end if whole else c_end[c])
            lay = _layer_ids(th, qs, qe, intern)
            op_ids = _op_ids(th, qs[:nq], qe[:nq], op_label) if ctx.op[c].any() else None
            ph, is_autograd = _thread_phases(th, qs, qe, nq, levels)
        out.layer_id[q] = lay[:nq]
        out.gap_layer_id[q] = lay[nq:]
        if op_ids is not None:
            out.op_id[q] = op_ids
        if is_autograd:
            autograd_threads.append((pid, tid))
        out.phase[q] = ph[:nq]
        out.gap_phase[q] = ph[nq:]
    return autograd_threads


def _map_gpu_rows(table: EventTable, rt_rows: np.ndarray, gpu_rows: np.ndarray, out: _RowMaps, counts: dict[str, int],
                  method: str = "auto") -> bool:
    """GPU task rows inherit phase, layer and op from their launching call; NCCL/RCCL kernels are
    communication. Returns whether no two runtime calls share a (process, correlation id).
    ``method``: the inheriting as one compiled pass (:func:`_inherit_kernel`) from
    :data:`GPU_ROWS_MIN` GPU rows when numba is there ("auto"; "compiled" whatever the size,
    "python" the kernel uncompiled, "numpy" never), else numpy scatters; the same answers."""
    lr, dup = launch_rows(table, rt_rows, gpu_rows)
    missing = _inherit(gpu_rows, lr, out, method)
    g_names = table.name_id[gpu_rows]
    rx, prx = re.compile(COMM_KERNEL_PATTERN), re.compile(PEER_KERNEL_PATTERN)
    comm_names = np.zeros(len(table.names), dtype=bool)
    peer_names = np.zeros(len(table.names), dtype=bool)
    for i in sorted_unique(g_names).tolist():  # one iteration per distinct GPU task name
        comm_names[i] = is_comm_kernel_name(table.names[i], rx)
        peer_names[i] = not comm_names[i] and is_peer_kernel_name(table.names[i], prx)
    comm = comm_names[g_names]
    peer = peer_names[g_names]
    out.phase[gpu_rows[comm | peer]] = COMMUNICATION
    counts["GPU tasks without a launching call"] = missing
    counts["GPU tasks named as NCCL/RCCL kernels (communication)"] = int(np.count_nonzero(comm))
    if peer.any():
        counts["GPU tasks named as all-to-all/EP library kernels (communication)"] = int(np.count_nonzero(peer))
    return not bool(dup.any())


def _inherit(gpu_rows: np.ndarray, lr: np.ndarray, out: _RowMaps, method: str = "auto") -> int:
    """Write each GPU row's launch row ``lr`` (int64 runtime rows aligned with ``gpu_rows``, -1
    none) into ``out``, and the launching row's phase, layer and op at the rows that have one;
    returns how many have none. See :func:`_map_gpu_rows` for ``method``."""
    fn = jit.kernel_for(_inherit_kernel, len(gpu_rows), GPU_ROWS_MIN, method)
    if fn is not None:
        return int(jit.call(fn, np.ascontiguousarray(gpu_rows, np.int64), np.ascontiguousarray(lr, np.int64), out.launch_row,
                            out.phase, out.layer_id, out.op_id))
    out.launch_row[gpu_rows] = lr
    has = lr >= 0
    out.phase[gpu_rows[has]] = out.phase[lr[has]]
    out.layer_id[gpu_rows[has]] = out.layer_id[lr[has]]
    out.op_id[gpu_rows[has]] = out.op_id[lr[has]]
    return int(np.count_nonzero(~has))


def _inherit_kernel(gpu_rows, lr, launch_row, phase, layer_id, op_id):
    """:func:`_map_gpu_rows`' pass: each GPU row's launch row ``lr`` (runtime rows, -1 none) and,
    when it has one, that row's phase, layer and op, written in place; returns how many have none."""
    missing = 0
    for i in range(len(gpu_rows)):
        r = gpu_rows[i]
        a = lr[i]
        launch_row[r] = a
        if a >= 0:
            phase[r] = phase[a]
            layer_id[r] = layer_id[a]
            op_id[r] = op_id[a]
        else:
            missing += 1
    return missing


