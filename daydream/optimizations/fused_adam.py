"""``fused-adam``: run the optimizer step as one fused multi-tensor kernel (apex ``FusedAdam``,
``torch.optim.Adam(fused=True)``) instead of a few small kernels per parameter.

Model (after the Daydream paper's FusedAdam case study, whose premise is that the gain of a fused
optimizer is the per-parameter launch overhead while the arithmetic stays the same):

1. Find the optimizer step: with a mapped graph, the CPU calls of phase ``optimizer`` (excluding
   ``zero_grad`` scopes); otherwise the calls enclosed by ``Optimizer.step#...`` annotation
   ranges (PyTorch's profiler records one per ``optimizer.step()``), on the range's thread.
   One *group* is one step on one thread (mapped: a maximal run of consecutive optimizer calls).
2. In each group, the kernels launched by its calls that are elementwise, copy, set or
   optimizer kernels (:mod:`daydream.graph.kernels`) on the stream of the group's first such kernel are
   fused; other GPU work launched in the step (GEMMs of e.g. Shampoo, memcpys) stays.
3. The first of those kernels becomes the fused kernel: it lasts ``kernel_factor`` x the summed
   duration of the kernels it replaces, and its launch call (which keeps the CPU gap before it:
   the work before the step) lasts ``launch_ns``. The other kernels, and the launch calls that
   launched only them, are removed together with the CPU gaps before those calls (the
   per-parameter Python work of the step).
4. Memory (``docs/memory.md``): the allocation/free pairs of one step (by address, both events
   anchored to the step's calls or recorded on its thread within its ``Optimizer.step#`` range,
   else between its first and last call), the per-parameter temporaries of an unfused step, are no
   longer allocated; the other events of the removed host work (lazily made state) move to the
   fused launch call.

When the step already runs fused optimizer kernels (``FusedAdamMathFunctor``,
``FusedOptimizerTensorListMetadata``, apex ``AdamFunctor``) the optimization does not apply.
Foreach (``multi_tensor_apply``) steps are fused further and the note says so.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from ..util.arrays import sorted_unique
from ..graph import kernels as K
from ..errors import NotApplicable
from ..events.table import Kind
from ..graph import NODE_CPU
from ..graph.memory_part import block_pairs, without_events
from ..graph.startup import startup_calls
from ..transform import merge
from . import Optimization, Param, integer_ns, register
from .common import (
    cpu_nodes_in_ranges,
    cpu_ranges,
    lane_order,
    lower_median,
    mapped_labels_match,
    mapped_phase,
    name_mask,
    runs,
)

#: Kernel classes a fused optimizer kernel absorbs.
FUSABLE_CLASSES = ("optimizer", "elementwise", "copy", "set")
#: Names of kernels that are already a fused optimizer step.
FUSED_PATTERN = r"Fused\w*(?:Adam|SGD|LAMB|Adagrad|Optimizer)|FusedOptimizerTensorListMetadata|AdamW?Functor|LAMBStage|(?i:fused_?(?:adam|sgd|lamb))"


_STEP_NAME = re.compile(r"^Optimizer\.step#(\w+)\.step$")


def optimizer_names(graph) -> list[str]:
    """The optimizer classes the trace's ``Optimizer.step#NAME.step`` ranges name (``SGD``,
    ``Adam``, ``Adagrad``), sorted; [] when none does. The model is the same for every optimizer
    (the fused kernel does the same arithmetic); the note names them so that a reader knows which
    fused implementation the prediction stands for."""
    return sorted({m.group(1) for m in map(_STEP_NAME.match, (n for n in graph.names if n.startswith("Optimizer.step#"))) if m})


def optimizer_groups(graph) -> tuple[np.ndarray | None, str]:
    """Group id of every CPU node in an optimizer step (-1 elsewhere) and how they were found."""
    cpu = graph.node_kind == NODE_CPU
    ph = mapped_phase(graph, "optimizer")
    if ph is not None and np.any(ph & cpu):
        member = cpu & ph & ~mapped_labels_match(graph, "layer_id", r"zero_grad")
        return runs(lane_order(graph, cpu), graph.lane, member), "the mapped optimizer phase"
    ranges = cpu_ranges(graph, r"^Optimizer\.step#")
    if len(ranges[0]):
        return cpu_nodes_in_ranges(graph, ranges, same_thread=True), "Optimizer.step ranges"
    return None, ""


def _apply(graph, p):
    gid, how = optimizer_groups(graph)
    if gid is None or not np.any(gid >= 0):
        raise NotApplicable("no optimizer step in the trace (no Optimizer.step# ranges and no mapped optimizer phase)")
    info = K.kernel_info(graph)
    kern = graph.node_kind == Kind.KERNEL
    launched_by = np.where(graph.launch >= 0, gid[np.maximum(graph.launch, 0)], -1)
    launched_by[graph.launch < 0] = -1
    step_kernels = kern & (launched_by >= 0)
    already = np.nonzero(name_mask(graph, FUSED_PATTERN, step_kernels))[0]
    if len(already):
        raise NotApplicable(f"the optimizer step already runs fused kernels ({len(already):,}, e.g. {graph.name(int(already[0]))[:80]})")
    fusable = step_kernels & info.is_class(*FUSABLE_CLASSES)
    foreach = int(np.count_nonzero(fusable & info.is_class("optimizer")))

    rank = np.empty(graph.n, dtype=np.int64)
    rank[graph.order] = np.arange(graph.n)
    # tasks launched per call, and fusable ones per call
    n_launched = np.bincount(graph.launch[graph.launch >= 0], minlength=graph.n)
    startup = startup_calls(graph)
    plans = []
    for g_id in sorted_unique(launched_by[fusable]).tolist():
        ks = np.nonzero(fusable & (launched_by == g_id))[0]
        ks = ks[np.argsort(rank[ks], kind="stable")]
        ks = ks[graph.lane[ks] == graph.lane[ks[0]]]
        if len(ks) < 2:
            continue
        calls = sorted_unique(graph.launch[ks])
        per_call = np.bincount(graph.launch[ks], minlength=graph.n)[calls]
        calls = calls[(per_call == n_launched[calls]) & ~startup[calls]]  # one-time start-up calls stay
        if len(calls) == 0:
            continue
        calls = calls[np.argsort(rank[calls], kind="stable")]
        plans.append((ks, calls))
    if not plans:
        raise NotApplicable(f"no optimizer step launches 2 or more elementwise/optimizer kernels on one stream (found by {how})")

    group = np.full(graph.n, -1, dtype=np.int64)  # plan i: its kernels are group 2i, its launch calls 2i + 1
    k_ns, c_ns = [], []
    n_k = n_c = 0
    before_ns = after_ns = 0
    for ks, calls in plans:
        launch_ns = p["launch_ns"] if p["launch_ns"] >= 0 else lower_median(graph.dur_ns[calls])
        total = int(graph.dur_ns[ks].sum())
        fused_ns = int(round(total * p["kernel_factor"]))
        # the first kernel becomes the fused kernel, the first launch call its launch
        group[ks], group[calls] = 2 * len(k_ns), 2 * len(k_ns) + 1
        k_ns.append(fused_ns)
        c_ns.append(launch_ns)
        n_k += len(ks)
        n_c += len(calls)
        before_ns += total
        after_ns += fused_ns
    g = merge(graph, group, np.asarray([x for kc in zip(k_ns, c_ns) for x in kc], dtype=np.int64))
    g, n_tmp = _without_step_temporaries(graph, g, gid)
    g = _moved_to_fused_launch(graph, g, plans)
    which = optimizer_names(graph)
    note = (f"{len(plans)} optimizer step(s) ({how}{'; ' + ', '.join(which) if which else ''}): {n_k:,} kernels and {n_c:,} "
            f"launch calls -> {len(plans)} fused kernel(s) (GPU {before_ns / 1e6:,.3f} -> {after_ns / 1e6:,.3f} ms)")
    if foreach:
        note += f"; the step already used foreach multi_tensor_apply kernels ({foreach:,}), fused further"
    if n_tmp:
        note += f"; {n_tmp:,} per-parameter temporaries of the step no longer allocated"
    return g, note


def _without_step_temporaries(graph, g, gid):
    """``g`` without the allocator events of per-parameter temporaries (``docs/memory.md``): the
    allocation/free pairs (by address) whose events both happen in one optimizer step, which the
    fused kernel, updating in place, does not make; and their number.

    An event is in step ``k`` when its anchor is one of the step's calls, or when it happened on
    the step's thread within the step's span: its ``Optimizer.step#`` range where the steps were
    found by ranges (the last parameter's temporary is freed after the step's last call, in the
    range: anchored to the call after it), else from its first call's start to its last call's end.
    """
    gm = graph.memory
    if gm is None or not len(gm):
        return g, 0
    cpu = np.flatnonzero((graph.node_kind == NODE_CPU) & (graph.row >= 0))
    rows = graph.row[cpu]
    o = np.argsort(rows, kind="stable")
    j = np.minimum(np.searchsorted(rows[o], gm.anchor_row), len(rows) - 1) if len(rows) else np.zeros(len(gm), np.int64)
    hit = (gm.anchor_row >= 0) & (rows[o][j] == gm.anchor_row) if len(rows) else np.zeros(len(gm), bool)
    group = np.where(hit, gid[cpu[o][j]] if len(rows) else -1, -1)
    group = np.where(group >= 0, group, _in_step_span(graph, gid, gm.events))
    al, fr = block_pairs(gm.events, np.arange(len(gm)))
    tmp = (group[al] >= 0) & (group[al] == group[fr])
    drop = np.zeros(len(gm), bool)
    drop[al[tmp]] = drop[fr[tmp]] = True
    return dataclasses.replace(g, memory=without_events(g.memory, drop)), int(tmp.sum())


def _moved_to_fused_launch(graph, g, plans):
    """``g`` with the allocator events that stay but happened in the host work of a removed launch
    call (optimizer state allocated lazily in the first step, a block freed there) moved to the
    fused kernel's launch call, at its start, in their recorded order: the fused step makes them
    before its one launch. Otherwise they were re-anchored to the next surviving call at their
    recorded distance from it, which counts the removed host work (emulator property,
    ``tests/test_memory_properties.py``)."""
    gm = g.memory
    if gm is None or not len(gm):
        return g
    head = np.full(graph.n, -1, np.int64)
    for _, calls in plans:  # a plan per optimizer step
        head[calls[1:]] = calls[0]
    cpu = np.flatnonzero((graph.node_kind == NODE_CPU) & (graph.row >= 0))
    rows = graph.row[cpu]
    o = np.argsort(rows, kind="stable")
    if not len(rows):
        return g
    j = np.minimum(np.searchsorted(rows[o], gm.anchor_row), len(rows) - 1)
    hit = (gm.anchor_row >= 0) & (rows[o][j] == gm.anchor_row)
    node = np.where(hit, cpu[o][j], 0)
    moved = hit & (head[node] >= 0) & ~gm.at_end
    if not moved.any():
        return g
    anchor, offset = gm.anchor_row.copy(), gm.offset_ns.copy()
    anchor[moved], offset[moved] = graph.row[head[node[moved]]], 0
    return dataclasses.replace(g, memory=dataclasses.replace(gm, anchor_row=anchor, offset_ns=offset))


def _in_step_span(graph, gid, ev) -> np.ndarray:
    """int64 (len(ev),): the optimizer step (group id of ``gid``) whose span on the event's thread
    holds the event's recorded time, -1 none (:func:`_without_step_temporaries`)."""
    out = np.full(len(ev), -1, np.int64)
    ids = sorted_unique(gid[gid >= 0])
    if not len(ids):
        return out
    ranges = cpu_ranges(graph, r"^Optimizer\.step#")
    member = np.flatnonzero(gid >= 0)
    for k in ids.tolist():  # a Python step per optimizer step (one per training step), array work per event
        calls = member[gid[member] == k]
        pid, tid = int(graph.pid[calls[0]]), int(graph.tid[calls[0]])
        lo, hi = int(graph.rec_start_ns[calls].min()), int(graph.rec_end_ns[calls].max())
        rp, rt, rs, re_ = ranges
        enclosing = np.flatnonzero((rp == pid) & (rt == tid) & (rs <= lo) & (re_ >= hi))
        if len(enclosing):  # the innermost Optimizer.step range holding the step's calls
            i = enclosing[np.argmin(re_[enclosing] - rs[enclosing])]
            lo, hi = int(rs[i]), int(re_[i])
        out[(out < 0) & (ev.pid == pid) & (ev.tid == tid) & (ev.ts_ns >= lo) & (ev.ts_ns <= hi)] = k
    return out


register(
    Optimization(
        name="fused-adam",
        summary="the optimizer step as one fused kernel per step (FusedAdam / Adam(fused=True)): per-parameter launches removed",
        apply=_apply,
        params={
            "kernel_factor": Param(1.0, "fused kernel duration / summed duration of the kernels it replaces; 1.0 = the same "
                                   "arithmetic on the same bytes, only the launches are saved (the premise of the Daydream "
                                   "paper's FusedAdam case study; check with scripts/ground_truth)", float,
                                   lambda v: 0 <= v <= 1, "0..1"),
            "launch_ns": Param(-1, "CPU duration of the fused kernel's launch call, ns; -1 = lower median of the launch calls "
                               "it replaces (measured in the trace)", integer_ns, lambda v: v >= -1, ">= -1"),
        },
    )
)
