"""``activation-checkpointing``: keep only the inputs of chosen layers in the forward pass and
recompute their forward in the backward pass (``torch.utils.checkpoint``), trading time for memory.

Model (``docs/memory.md``, "activation-checkpointing"):

1. **Layers.** A *unit* is a layer path of the mapping (``docs/mapping.md``): those matching
   ``layers`` (a regex searched in the path; the outermost matching path wins), by default every
   *repeated block*: a path ``parent/Class_k`` whose parent holds two or more ``Class_j``
   children (``BertLayer_0 .. BertLayer_11``), the outermost such level. One *instance* of a
   unit is one ``nn.Module: Class_k`` range of its thread holding forward calls of that path.
2. **Its backward.** Where backward calls carry the unit's layer path (module ranges on the
   autograd thread), those after the instance and before the unit's next instance. Otherwise by
   op order: autograd runs the backward in the reverse order of the forward, so within one
   ``ProfilerStep`` the backward functions (``autograd::engine::evaluate_function: XBackward0``
   ranges holding runtime calls), in order, are matched to the forward's top-level framework ops
   (``aten::x`` ranges holding runtime calls) taken in reverse: each to the latest still unmatched
   forward op at or before the previous match whose name, or the name of an op it encloses, is
   the function's (``AddmmBackward0`` -> ``addmm``; case and ``_`` ignored); functions with no
   forward op (``AccumulateGrad``) are skipped. An instance's backward is the span of the
   functions matched to its ops; an instance with none is left as it is (counted).
3. **Time.** The instance's forward CPU calls (their recorded durations and the CPU gaps before
   them) and the GPU tasks they launch (their durations, on their streams) are inserted right
   before the first call of its backward (before the CPU gap leading to it), with
   :func:`daydream.transform.insert_tasks`: the calls on the backward's thread, each task on its
   stream after the last task launched before that point (mid-stream).
4. **Memory.** The instance's *activations* (blocks, paired by address, allocated in its forward
   range and freed in its backward span) are freed right after its forward (at the end of its
   last call, or of its last event); the recompute allocates them again, and allocates and frees
   again its forward temporaries (blocks allocated and freed in its forward range), each event at
   its recorded offset from the copy of the call it was anchored to. Blocks allocated in the
   forward and freed elsewhere (the layer's output, the next layer's input) are kept. The
   reserve of the changed program is not known: the prediction keeps the baseline's reserve /
   allocated margin.

Without a mapping, without units, or where no instance has a backward the optimization raises
:class:`NotApplicable` with the reason.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from typing import NamedTuple

import numpy as np

from ..errors import NotApplicable
from ..graph import NODE_CPU
from ..graph.memo import cached
from ..graph.memory_part import block_pairs, changed_events
from ..mapping.rules import BACKWARD, FORWARD
from ..transform import insert_tasks, set_gap
from ..transform.selection import KIND_NAMES
from ..util.arrays import unique_inverse
from . import Optimization, Param, register
from .common import cpu_nodes_in_ranges, mapped_phase
from ..util.patterns import compile_user_pattern

_KIND_OF_CODE = {v: k for k, v in KIND_NAMES.items()}
_BWD_PREFIX = "autograd::engine::evaluate_function: "
_OP_NAME = re.compile(r"^[A-Za-z_][\w.]*::\w+")
_INDEXED = re.compile(r"^(.*)_(\d+)$")


def _norm(name: str) -> str:
    """An op or backward-function name reduced for matching: namespace, ``Backward<N>``, ``_`` and case dropped."""
    name = name.rsplit("::", 1)[-1]
    name = re.sub(r"Backward\d*$", "", name)
    return name.replace("_", "").lower()


def unit_paths(labels: list[str], paths: set[int], regex: str | None) -> list[str]:
    """The unit layer paths among the layer ``paths`` (label ids) of forward calls and their
    prefixes: those matching ``regex`` (searched), else the repeated blocks; outermost only, sorted."""
    prefixes = set()
    for i in paths:
        parts = labels[i].split("/")
        prefixes.update("/".join(parts[:k]) for k in range(1, len(parts) + 1))
    if regex:
        rx = compile_user_pattern(regex)
        chosen = {p for p in prefixes if rx.search(p)}
    else:
        siblings: dict[tuple[str, str], set[str]] = {}
        for p in prefixes:
            parent, _, leaf = p.rpartition("/")
            m = _INDEXED.match(leaf)
            if m:
                siblings.setdefault((parent, m.group(1)), set()).add(p)
        chosen = {p for s in siblings.values() if len(s) >= 2 for p in s}
    return sorted(p for p in chosen if not any(p.startswith(q + "/") for q in chosen))


class _Ranges(NamedTuple):
    pid: np.ndarray
    tid: np.ndarray
    start: np.ndarray
    end: np.ndarray
    name_id: np.ndarray

    def take(self, m) -> _Ranges:
        return _Ranges(*(a[m] for a in self))

    def as4(self):
        return self.pid, self.tid, self.start, self.end


def _named_ranges(graph, keep) -> _Ranges:
    """The graph's CPU ranges whose name passes ``keep`` (a predicate on the name), duplicates
    (same thread, start, end and name) removed, sorted by (pid, tid, start, -end)."""
    cr = graph.cpu_ranges
    if cr is None or not len(cr.pid):
        z = np.zeros(0, np.int64)
        return _Ranges(z, z, z, z, z)
    # the distinct names once per graph structure (shared with common.cpu_ranges): this runs once per unit
    uniq, inv = cached(graph, "common.cpu_range_names", lambda: unique_inverse(cr.name_id))
    ok = np.fromiter((bool(keep(graph.names[i])) for i in uniq.tolist()), bool, len(uniq))[inv]
    r = _Ranges(cr.pid[ok].astype(np.int64), cr.tid[ok].astype(np.int64), cr.start_ns[ok].astype(np.int64),
                cr.end_ns[ok].astype(np.int64), cr.name_id[ok].astype(np.int64))
    key = np.stack(list(r), 1)
    key = np.unique(key, axis=0) if len(key) else key.reshape(0, 5)
    r = _Ranges(*(key[:, i] for i in range(5)))
    return r.take(np.lexsort((-r.end, r.start, r.tid, r.pid)))


def _top_level(r: _Ranges) -> np.ndarray:
    """Mask of the ranges of ``r`` (sorted as :func:`_named_ranges`) enclosed by no other of their thread."""
    top = np.ones(len(r.pid), bool)
    if len(top) < 2:
        return top
    for p, t in np.unique(np.stack([r.pid, r.tid], 1), axis=0).tolist():  # a loop over threads
        k = np.flatnonzero((r.pid == p) & (r.tid == t))
        prev_max = np.concatenate([[np.iinfo(np.int64).min], np.maximum.accumulate(r.end[k])[:-1]])
        top[k] = r.end[k] > prev_max
    return top


def _holding(graph, r: _Ranges, nodes: np.ndarray) -> np.ndarray:
    """Per range of ``r`` (not overlapping on a thread), how many of ``nodes`` (bool mask) it encloses."""
    idx = cpu_nodes_in_ranges(graph, r.as4(), same_thread=True)
    return np.bincount(idx[(idx >= 0) & nodes], minlength=len(r.pid))


def match_backward(graph, steps: list[tuple[int, int]]) -> tuple[_Ranges, _Ranges, np.ndarray]:
    """(forward top-level op ranges, backward function ranges, per forward op the index of its
    backward function or -1), by op order within each step interval of ``steps`` (module docstring, 2)."""
    calls = (graph.node_kind == NODE_CPU) & (graph.row >= 0)
    ops = _named_ranges(graph, lambda s: _OP_NAME.match(s) and not s.startswith("autograd::") and "::" in s)
    top = _top_level(ops)
    fwd = ops.take(top)
    fwd = fwd.take(_holding(graph, fwd, calls) > 0)
    bwd = _named_ranges(graph, lambda s: s.startswith(_BWD_PREFIX))
    bwd = bwd.take(_top_level(bwd))
    bwd = bwd.take(_holding(graph, bwd, calls) > 0)
    # names of each forward op: its own and those of the ops it encloses (per thread, by position)
    norm: dict[int, str] = {}

    def nm(i: int) -> str:
        if i not in norm:
            s = graph.names[i]
            norm[i] = _norm(s.removeprefix(_BWD_PREFIX))
        return norm[i]

    owner = np.full(len(ops.pid), -1, np.int64)
    for p, t in np.unique(np.stack([fwd.pid, fwd.tid], 1), axis=0).tolist() if len(fwd.pid) else []:
        f = np.flatnonzero((fwd.pid == p) & (fwd.tid == t))
        o = np.flatnonzero((ops.pid == p) & (ops.tid == t))
        j = np.searchsorted(fwd.start[f], ops.start[o], side="right") - 1
        ok = (j >= 0) & (ops.end[o] <= fwd.end[f[np.maximum(j, 0)]])
        owner[o[ok]] = f[j[ok]]
    names_of: dict[int, set[str]] = {}
    for f, i in zip(owner.tolist(), ops.name_id.tolist()):  # a loop over the framework ops (the matching core)
        if f >= 0:
            names_of.setdefault(f, set()).add(nm(i))
    match = np.full(len(fwd.pid), -1, np.int64)
    for s, e in steps:
        fs = np.flatnonzero((fwd.start >= s) & (fwd.end <= e))
        fs = fs[np.argsort(fwd.start[fs], kind="stable")]
        bs = np.flatnonzero((bwd.start >= s) & (bwd.end <= e))
        bs = bs[np.argsort(bwd.start[bs], kind="stable")]
        pos: dict[str, list[int]] = {}
        for k, f in enumerate(fs.tolist()):
            for name in names_of.get(f, ()):
                pos.setdefault(name, []).append(k)
        limit = len(fs) - 1
        for b in bs.tolist():
            lst = pos.get(nm(int(bwd.name_id[b])))
            if not lst:
                continue
            j = bisect.bisect_right(lst, limit) - 1
            if j < 0:
                continue
            match[fs[lst[j]]] = b
            limit = lst[j] - 1
    return fwd, bwd, match


class _Instance(NamedTuple):
    path: str
    fwd_calls: np.ndarray  #: CPU nodes, lane order
    fwd_span: tuple  #: (pid, tid, start, end) of the module range
    bwd_span: tuple  #: (pid, tid, start, end): the backward's recorded span
    bwd_first: int  #: first CPU node of the backward


def _steps(graph) -> list[tuple[int, int]]:
    st = _named_ranges(graph, lambda s: re.match(r"^ProfilerStep#\d+$", s) is not None)
    if len(st.pid):
        return sorted(set(zip(st.start.tolist(), st.end.tolist())))
    return [(np.iinfo(np.int64).min, np.iinfo(np.int64).max)]


def find_instances(graph, regex: str | None) -> tuple[list[_Instance], list[str], dict[str, int]]:
    """(the unit instances with a backward, the unit paths, counts of instances left as they are by reason)."""
    mp = graph.mapping
    if mp is None or not mp.labels:
        raise NotApplicable("the trace has no layer mapping (no nn.Module ranges): the layers to checkpoint are unknown")
    cpu = (graph.node_kind == NODE_CPU) & (graph.row >= 0)
    fwd_m = cpu & mapped_phase(graph, "forward") & (mp.layer_id >= 0)
    bwd_m = cpu & mapped_phase(graph, "backward")
    if not fwd_m.any():
        raise NotApplicable("no forward call has a layer path (no nn.Module ranges: the profiler records them with "
                            "with_stack=True): the layers to checkpoint are unknown")
    units = unit_paths(mp.labels, set(np.unique(mp.layer_id[fwd_m]).tolist()), regex)
    if not units:
        raise NotApplicable(f"no layer path matches layers={regex!r}" if regex else
                            "no repeated block among the layer paths (give layers=REGEX)")
    rank = np.empty(graph.n, np.int64)
    rank[graph.order] = np.arange(graph.n)
    steps = _steps(graph)
    matched = None
    skipped: dict[str, int] = {}
    out: list[_Instance] = []
    for u in units:  # a loop over units (layers), array work per node inside
        ids = [i for i, s in enumerate(mp.labels) if s == u or s.startswith(u + "/")]
        under = np.isin(mp.layer_id, ids)
        leaf = "nn.Module: " + u.rsplit("/", 1)[-1]
        mods = _named_ranges(graph, lambda s, leaf=leaf: s == leaf)
        mods = mods.take(_top_level(mods))
        inside = cpu_nodes_in_ranges(graph, mods.as4(), same_thread=True)
        labelled_bwd = np.flatnonzero(bwd_m & under)
        inst_idx = sorted(set(inside[fwd_m & under].tolist()) - {-1}, key=lambda i: int(mods.start[i]))
        # each instance's forward calls (index order) by one stable sort, not a whole-graph mask per instance
        own = np.flatnonzero(fwd_m & under & (inside >= 0))
        own = own[np.argsort(inside[own], kind="stable")]
        own_at = np.searchsorted(inside[own], np.arange(len(mods.pid) + 1))
        for q, i in enumerate(inst_idx):
            calls = own[own_at[i]:own_at[i + 1]]
            calls = calls[np.argsort(rank[calls], kind="stable")]
            span = (int(mods.pid[i]), int(mods.tid[i]), int(mods.start[i]), int(mods.end[i]))
            step = next(((s, e) for s, e in steps if s <= span[2] and span[3] <= e), (span[2], np.iinfo(np.int64).max))
            if len(labelled_bwd):
                nxt = int(mods.start[inst_idx[q + 1]]) if q + 1 < len(inst_idx) else step[1]
                b = labelled_bwd[(graph.rec_start_ns[labelled_bwd] > span[3]) & (graph.rec_start_ns[labelled_bwd] < min(nxt, step[1]))]
                if not len(b) or len(np.unique(graph.lane[b])) != 1:
                    skipped["no backward calls of its layer on one thread"] = skipped.get("no backward calls of its layer on one thread", 0) + 1
                    continue
                b = b[np.argsort(rank[b], kind="stable")]
                bspan = (int(graph.pid[b[0]]), int(graph.tid[b[0]]), int(graph.rec_start_ns[b].min()), int(graph.rec_end_ns[b].max()))
                first = int(b[0])
            else:
                if matched is None:
                    matched = match_backward(graph, steps)
                fwd, bwd, m = matched
                mine = np.flatnonzero((fwd.pid == span[0]) & (fwd.tid == span[1]) & (fwd.start >= span[2]) & (fwd.end <= span[3]))
                bi = m[mine]
                bi = bi[bi >= 0]
                if not len(bi) or len(np.unique(np.stack([bwd.pid[bi], bwd.tid[bi]], 1), axis=0)) != 1:
                    skipped["no backward matched by op order"] = skipped.get("no backward matched by op order", 0) + 1
                    continue
                bspan = (int(bwd.pid[bi[0]]), int(bwd.tid[bi[0]]), int(bwd.start[bi].min()), int(bwd.end[bi].max()))
                b = np.flatnonzero(cpu & (graph.pid == bspan[0]) & (graph.tid == bspan[1]) & (graph.rec_start_ns >= bspan[2])
                                   & (graph.rec_end_ns <= bspan[3]))
                if not len(b):
                    skipped["no backward matched by op order"] = skipped.get("no backward matched by op order", 0) + 1
                    continue
                first = int(b[np.argmin(rank[b])])
            if graph.lane_prev[first] < 0:
                skipped["nothing before its backward on its thread"] = skipped.get("nothing before its backward on its thread", 0) + 1
                continue
            out.append(_Instance(u, calls, span, bspan, first))
    out.sort(key=lambda x: (int(graph.rec_start_ns[x.bwd_first]), x.path))
    return out, units, skipped


def _stream_anchor(graph, lane: int, t_ns: int, rank) -> int:
    """The last task of GPU ``lane`` launched before ``t_ns`` (its launching call's recorded start), -1 none."""
    k = np.flatnonzero(graph.lane == lane)
    k = k[np.argsort(rank[k], kind="stable")]
    la = graph.launch[k]
    t = np.where(la >= 0, graph.rec_start_ns[np.maximum(la, 0)], graph.rec_start_ns[k])
    before = np.flatnonzero(t < t_ns)
    return int(k[before[-1]]) if len(before) else -1


def _apply(graph, p):
    regex = p["layers"] or None
    if regex:  # a bad pattern is bad input (DaydreamError: exit 2), like scale-kernels' pattern, not "not applicable"
        compile_user_pattern(regex)
    insts, units, skipped = find_instances(graph, regex)
    if not insts:
        why = ", ".join(f"{v} {k}" for k, v in sorted(skipped.items())) or "none found"
        raise NotApplicable(f"no instance of the layers to checkpoint ({len(units)}: {', '.join(units[:4])}) has a backward: {why}")
    rank = np.empty(graph.n, np.int64)
    rank[graph.order] = np.arange(graph.n)
    n = graph.n
    after, lanes, launch, dur, gap, names, kinds, at = [], [], [], [], [], [], [], []
    holder: dict[int, int] = {}
    copy_of: list[dict[int, int]] = []  # per instance: forward call -> its copy (node id)
    used, splits = [], []
    for inst in insts:
        t_ns = int(graph.rec_start_ns[inst.bwd_first])
        cpu_anchor = int(graph.lane_prev[inst.bwd_first])
        at_ns = int(graph.rec_end_ns[cpu_anchor])
        # the host work of the gap before the backward's first call that precedes the backward's start runs before the recompute
        split = int(np.clip(inst.bwd_span[2] - at_ns, 0, graph.gap_ns[inst.bwd_first]))
        tasks = []  # (is_cpu, source node, launching call)
        anchors = {}
        ok = True
        for c in inst.fwd_calls.tolist():
            tasks.append((True, c, -1))
            for k in np.flatnonzero(graph.launch == c).tolist():
                ln = int(graph.lane[k])
                if ln not in anchors:
                    anchors[ln] = _stream_anchor(graph, ln, t_ns, rank)
                    ok &= anchors[ln] >= 0
                tasks.append((False, k, c))
        if not ok:
            skipped["a stream of its forward has no task before its backward"] = skipped.get(
                "a stream of its forward has no task before its backward", 0) + 1
            continue
        mine: dict[int, int] = {}
        for is_cpu, v, c in sorted(tasks, key=lambda x: (rank[x[1]] if x[0] else rank[x[2]], not x[0], rank[x[1]])):
            a = cpu_anchor if is_cpu else anchors[int(graph.lane[v])]
            k = n + len(after)
            after.append(holder.get(a, a))
            holder[a] = k
            lanes.append(int(graph.lane[cpu_anchor] if is_cpu else graph.lane[v]))
            launch.append(-1 if is_cpu else mine[c])
            dur.append(int(graph.dur_ns[v]))
            gap.append(int(graph.gap_ns[v]) + (split if is_cpu and not mine else 0) if is_cpu else 0)
            names.append(graph.name(v))
            kinds.append("cpu" if is_cpu else _KIND_OF_CODE[int(graph.node_kind[v])])
            at.append(at_ns)
            if is_cpu:
                mine[v] = k
        copy_of.append(mine)
        used.append(inst)
        splits.append((inst.bwd_first, split))
    if not used:
        why = ", ".join(f"{v} {k}" for k, v in sorted(skipped.items()))
        raise NotApplicable(f"no instance of the layers to checkpoint could be recomputed: {why}")
    g, new = insert_tasks(graph, after=after, dur_ns=np.asarray(dur, np.int64), names=names, kind=kinds, lane=lanes,
                          launch=np.asarray(launch, np.int64), gap_ns=np.asarray(gap, np.int64), at_ns=np.asarray(at, np.int64))
    # the recompute calls get rows of their own (< -1: inserted, yet addressable by memory anchors)
    row = g.row.copy()
    copies = np.asarray([v for m in copy_of for v in m.values()], np.int64)
    row[copies] = -2 - np.arange(len(copies))
    g = dataclasses.replace(g, row=row)
    splits.sort()
    first = np.asarray([b for b, _ in splits], np.int64)
    g = set_gap(g, np.isin(np.arange(g.n), first), g.gap_ns[first] - np.asarray([x for _, x in splits], np.int64))
    g, moved, replayed = _memory(graph, g, used, copy_of)
    n_calls = sum(len(i.fwd_calls) for i in used)
    note = (f"{len(used)} layer instance(s) of {len(units)} layer(s) ({', '.join(units[:3])}{', ...' if len(units) > 3 else ''}) "
            f"recomputed in the backward: {n_calls:,} calls and {len(new) - n_calls:,} GPU tasks inserted")
    if graph.memory is not None:
        note += f"; {moved:,} activation blocks freed after the forward, {replayed:,} allocator events replayed in the recompute"
    if skipped:
        note += "; left as they are: " + ", ".join(f"{v} {k}" for k, v in sorted(skipped.items()))
    return g, note


def _memory(graph, g, insts: list[_Instance], copy_of: list[dict[int, int]]):
    """``g`` with the allocator's events of the checkpointed program (module docstring, 4); the
    number of activation blocks moved and of events replayed."""
    gm = graph.memory
    if gm is None or not len(gm):
        return g, 0, 0
    ev = gm.events
    cols = ev.columns()
    ne = len(ev)
    vts = ev.ts_ns.astype(np.int64).copy()
    group = np.ones(ne, np.int64)
    seq = np.arange(ne, dtype=np.int64)
    anchor, offset, at_end = gm.anchor_row.copy(), gm.offset_ns.copy(), gm.at_end.copy()
    phase = gm.phase.copy() if gm.phase is not None else np.zeros(ne, np.uint8)
    al, fr = block_pairs(ev, np.arange(ne))
    extra: list[tuple] = []  # (source event, anchor row, offset, at_end, vts, group, phase, seq)
    moved = 0
    for q, (inst, copies) in enumerate(zip(insts, copy_of)):
        fp, ft, fs, fe = inst.fwd_span
        bp, bt, bs, be = inst.bwd_span
        last = int(inst.fwd_calls[np.argmax(graph.rec_end_ns[inst.fwd_calls])])
        last_end = int(graph.rec_end_ns[last])
        # in the forward: within its range; an allocation also anchored to one of its calls (or after
        # the last one): one at the range's edge anchored to the next layer's call is that layer's
        in_f = (ev.pid == fp) & (ev.tid == ft) & (ev.ts_ns >= fs) & (ev.ts_ns <= fe)
        alloc_f = in_f & (np.isin(gm.anchor_row, graph.row[inst.fwd_calls]) | (ev.ts_ns > last_end))
        # in the backward: after its start (an event at its first nanosecond happened before it)
        in_b = (ev.pid == bp) & (ev.tid == bt) & (ev.ts_ns > bs) & (ev.ts_ns <= be)
        act = alloc_f[al] & in_b[fr]
        tmp = alloc_f[al] & in_f[fr]
        end_t = max(last_end, int(ev.ts_ns[in_f & (ev.ts_ns < fe)].max()) if (in_f & (ev.ts_ns < fe)).any() else last_end)
        # each activation freed at the end of the forward (a free of its own: the backward frees the recomputed block)
        for e in fr[act].tolist():
            extra.append((e, int(graph.row[last]), end_t - last_end, True, end_t, -1, FORWARD, q * ne + e))
        moved += int(act.sum())
        row_copy = {int(graph.row[c]): int(g.row[v]) for c, v in copies.items()}
        ins_t = bs
        # events in the gap before the backward's first call, before the backward's start: before the recompute
        c0 = int(inst.fwd_calls[0])
        pre = np.flatnonzero((gm.anchor_row == graph.row[inst.bwd_first]) & ~gm.at_end & (ev.ts_ns <= bs))
        anchor[pre], offset[pre], group[pre] = row_copy[int(graph.row[c0])], ev.ts_ns[pre] - bs - int(graph.gap_ns[c0]), -2
        for e in np.sort(np.concatenate([al[act], al[tmp], fr[tmp]])).tolist():
            r = int(gm.anchor_row[e])
            if r in row_copy:
                extra.append((e, row_copy[r], int(gm.offset_ns[e]), bool(gm.at_end[e]), ins_t, 0, BACKWARD, q * ne + e))
            else:  # anchored after the forward (its host work after the last call): after the copy of the last call
                extra.append((e, row_copy[int(graph.row[last])], int(ev.ts_ns[e]) - last_end, True, ins_t, 0, BACKWARD, q * ne + e))
    src = np.asarray([x[0] for x in extra], np.int64)
    k = len(src)
    cols = {c: np.concatenate([a, a[src]]) for c, a in cols.items()}
    vts = np.concatenate([vts, np.asarray([x[4] for x in extra], np.int64)])
    cols["ts_ns"] = vts.copy()
    anchor = np.concatenate([anchor, np.asarray([x[1] for x in extra], np.int64)])
    offset = np.concatenate([offset, np.asarray([x[2] for x in extra], np.int64)])
    at_end = np.concatenate([at_end, np.asarray([x[3] for x in extra], bool)])
    # at one instant: the frees after a forward (-1), then a recompute (0), then the recorded events (1)
    group = np.concatenate([group, np.asarray([x[5] for x in extra], np.int64)])
    seq = np.concatenate([seq, np.asarray([x[7] for x in extra], np.int64)])
    step = np.concatenate([gm.step, gm.step[src]])
    phase = np.concatenate([phase, np.asarray([x[6] for x in extra], np.uint8)])
    new = changed_events(gm, cols, anchor, offset, at_end, step, phase, group, seq)  # program order (module docstring, 4)
    return dataclasses.replace(g, memory=new), moved, k - moved


register(
    Optimization(
        name="activation-checkpointing",
        summary="recompute chosen layers' forward in the backward (torch.utils.checkpoint): their activations freed after "
                "the forward, their forward kernels run again before their backward",
        apply=_apply,
        params={
            "layers": Param("", "regex searched in the mapping's layer paths (outermost matching path = one layer); "
                            "empty = every repeated block (parent/Class_k with 2+ Class_j siblings, outermost level)",
                            str),
        },
    )
)
