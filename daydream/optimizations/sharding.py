"""``fsdp`` / ``zero:stage=1|2|3``: what if this one-GPU iteration ran sharded data-parallel on
``world`` GPUs (PyTorch FSDP FULL_SHARD; DeepSpeed ZeRO, Rajbhandari et al., SC 2020)?

Parameters, gradients and optimizer state are split over the ``world`` ranks of the data-parallel
group; each rank runs the same per-GPU batch (compute unchanged), plus:

* **stage 3 / fsdp** (ZeRO §5.3, FSDP FULL_SHARD, Zhao et al., VLDB 2023 §3): per **unit** (FSDP's
  wrapped modules), an **all-gather** of its parameters before its forward and again before its
  backward, and a **reduce-scatter** of its gradients after its backward. Prefetch as FSDP does
  (``forward_prefetch``, ``backward_prefetch=BACKWARD_PRE``): unit u's all-gather is issued when
  the previous unit's compute is issued (right after the launch of its first kernel; the first
  unit's after the last kernel its thread launched before it), on an all-gather stream, so it
  runs under that unit's compute; unit u's first kernel waits for it (a cross-stream wait, +G).
  Reduce-scatters run on their own stream, each after its unit's last gradient (DDP's hook
  point, :func:`~daydream.optimizations.comm_common.insert_allreduces`); the optimizer's first
  GPU task waits for the last.
* **stage 1 and 2** (ZeRO P_os, P_os+g: §5.1-5.2; the same collectives, they differ in memory):
  gradients reduce-scattered in DDP's buckets during backward, and after the optimizer step the
  updated parameters all-gathered in as many buckets; the next step's first GPU task waits for
  the last.
* **the optimizer on the shard**: its GPU kernels (mapped phase "optimizer") take 1/world of their
  time (each rank updates 1/world of the parameters: element-wise kernels scale with their size).

**Units.** Gradients (``AccumulateGrad`` shapes, :func:`comm_common.gradients_from_trace`) in
production order grouped into units of at least ``unit_mb`` MiB (FSDP's size-based wrapping,
``size_based_auto_wrap_policy``); the backward of unit u spans the backward GPU tasks from the
previous unit's last gradient to its own. Its forward is placed at the same share of the forward
pass (units in reverse order; the forward's GPU time taken as proportional to the units' bytes:
an assumption, counted as inferred), because no trace here maps kernels to modules in both
passes (ResNet-50's tb_plugin trace has no layer labels). Collective times:
:func:`daydream.costmodel.comm_fit.collective_ns` (the trace's own fit where it has the
operation, the presets of ``bandwidth=`` elsewhere). The fit comes from ``fit=FILE`` (a
``daydream-comm-fit --json`` document, e.g. of a job's transfers; :func:`.comm_common.trace_fit`):
a trace this what-if accepts has no collective of its own to fit.

**Overlap slowdown**: the compute kernels expected to run under a prefetched all-gather (those
issued after its anchor, up to its duration of recorded compute) take ``overlap`` times longer;
``overlap=-1`` (default) takes the slowdown measured on the trace
(:func:`daydream.costmodel.comm_fit.overlap_slowdown`; 1 where the trace has no collective).

``world=1`` (or ``stage=0``) is the identity.

**Memory, per rank** (``docs/memory.md``; :mod:`daydream.optimizations.memory_rules`): the
model's state bytes (:func:`sharded_state_bytes` with ``world=1``: parameters = the gradients'
bytes of one iteration, a gradient having its parameter's shape and type; optimizer state
``opt_state`` x that) are sharded by :func:`.memory_rules.sharded_blocks` (gradient and
optimizer-state blocks of the events shrink to 1/world, the state held from before the window
loses its sharded part); stage 3 adds each unit's all-gathered parameters
(:func:`.memory_rules.gathered_units`): allocated when its all-gather is issued (the end of the
anchor kernel's launch call), freed when the next unit's first kernel is launched (FSDP frees a
unit's unsharded parameters after its computation; the prefetched next unit is gathered
meanwhile, so two units are held at once), the iteration's last unit at the end of the
iteration's last kernel launch. The peak and the fit verdict are then one rank's.
"""

from __future__ import annotations

import numpy as np

from ..costmodel import comm as cm
from ..costmodel import comm_fit as cf
from ..errors import NotApplicable
from ..events.table import Kind
from ..graph import NODE_CPU, EdgeKind, TaskGraph
from ..graph.collectives import find_collectives, kernel_is_collective
from ..transform import add_edges, add_stream, scale
from ..transform.insertion import insert_tasks
from ..util.arrays import sorted_unique
from . import Optimization, Param, register
from .memory_rules import gathered_units, sharded_blocks
from .comm_common import (DDP_BUCKET_MB, MIB, NETWORK_PARAMS, _device_syncs_wait, buckets, first_after,
                          gradients_from_trace, insert_allreduces, network_of, step_of_nodes, trace_fit)

PH_FWD, PH_BWD, PH_OPT = 1, 2, 3  # daydream.mapping.rules.PHASES


def coll_name(op: str, nbytes: int, world: int) -> str:
    """An inserted collective's kernel name; it carries size and group for find_collectives."""
    return f"ncclKernel_{op}_RING_LL_Sum_float (inserted, {int(nbytes)} B, n={int(world)})"


def sharded_state_bytes(param_bytes: int, world: int, stage: int, optimizer_bytes_per_param_byte: float = 2.0) -> dict:
    """Per-rank bytes of parameters, gradients and optimizer state
    under ZeRO ``stage`` (ZeRO §5: P_os shards the optimizer state, P_os+g also gradients, P_os+g+p
    also parameters). ``optimizer_bytes_per_param_byte``: Adam's two moments at the parameters'
    precision = 2 (a parameter of the caller, not fitted)."""
    n = max(int(world), 1)
    opt = param_bytes * optimizer_bytes_per_param_byte
    return {"parameters": param_bytes / n if stage >= 3 else param_bytes,
            "gradients": param_bytes / n if stage >= 2 else param_bytes,
            "optimizer_state": opt / n if stage >= 1 else opt}


def insert_prefetched(graph: TaskGraph, anchor: np.ndarray, consumer: np.ndarray, dur_ns: np.ndarray,
                      names: list[str]) -> tuple[TaskGraph, np.ndarray]:
    """Insert collectives on a new stream, each launched by a new zero-time call right after the
    launching call of GPU task ``anchor[k]`` (after calls inserted there before), with no input
    wait; ``consumer[k] >= 0`` waits for it (cross-stream, +G). The emulator equivalent
    (:func:`daydream.testing.ddp_programs.with_prefetched`): a ``Launch`` on the communication
    stream after the anchor's launch, and ``EventRecord`` / ``StreamWaitEvent`` right before the
    consumer's launch. Anchors must be in launch order, and each consumer launched after its
    anchor and before the next collective's anchor (so the wait holds that collective only).

    Returns:
        (new graph, inserted kernels).
    """
    anchor = np.asarray(anchor, np.int64)
    lch = graph.launch[anchor]
    g, lane = add_stream(graph, pid=int(graph.pid[lch[0]]), device=int(graph.device[anchor[0]]))
    n, k_n = g.n, len(anchor)
    nxt, row, dur = g.lane_next, g.row, g.dur_ns
    after = np.empty(2 * k_n, np.int64)
    last: dict = {}
    for k, a in enumerate(lch.tolist()):  # collectives: tens per iteration
        if a not in last:
            b = a
            while nxt[b] >= 0 and row[nxt[b]] < 0 and dur[nxt[b]] == 0:  # calls inserted there before
                b = int(nxt[b])
            last[a] = b
        after[2 * k], after[2 * k + 1] = last[a], -1
        last[a] = n + 2 * k
    calls = n + 2 * np.arange(k_n)
    cons = np.asarray(consumer, np.int64)
    g, new = insert_tasks(g, after=after, lane=np.repeat(g.lane[lch], 2) * np.tile([1, 0], k_n) + np.tile([0, lane], k_n),
                          like=np.stack([np.full(k_n, -1), anchor], 1).ravel(),
                          launch=np.stack([np.full(k_n, -1), calls], 1).ravel(),
                          dur_ns=np.stack([np.zeros(k_n, np.int64), np.asarray(dur_ns, np.int64)], 1).ravel(),
                          names=[x for nm in names for x in ("ncclAllGather (inserted)", nm)], kind=["cpu", "kernel"] * k_n,
                          gap_ns=0)
    nodes = new[1::2]
    w = cons >= 0
    if w.any():
        g = add_edges(g, nodes[w], cons[w], EdgeKind.XSTREAM)
    return _device_syncs_wait(g, nodes), nodes


# ----------------------------------------------------------------------------- the plan ----
def _same_thread_before(graph: TaskGraph, node: int) -> int:
    """The GPU task launched last, before ``node``, by ``node``'s launching thread (-1 none)."""
    lch = graph.launch
    c = int(lch[node])
    m = np.nonzero((graph.node_kind != NODE_CPU) & (lch >= 0))[0]
    m = m[(graph.pid[lch[m]] == graph.pid[c]) & (graph.tid[lch[m]] == graph.tid[c]) & (graph.position_ns[lch[m]] < graph.position_ns[c])]
    return int(m[np.argmax(graph.position_ns[lch[m]])]) if len(m) else -1


def _chain(graph: TaskGraph, first: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Anchors of the all-gathers whose consumers are ``first`` (units in issue order): unit u's
    anchor is unit u-1's first kernel (prefetch) where it is on u's thread and launched before it,
    else the last kernel u's thread launched before it. Returns (anchor, consumer, kept: indices
    into ``first``): units with no anchor get none (counted by the caller)."""
    anc, con, kept = [], [], []
    for u, c in enumerate(first.tolist()):  # units: tens per iteration
        a = int(first[u - 1]) if u else -1
        lc, la = graph.launch[c], graph.launch[a] if a >= 0 else -1
        if a < 0 or graph.tid[la] != graph.tid[lc] or graph.pid[la] != graph.pid[lc] or graph.position_ns[la] >= graph.position_ns[lc]:
            a = _same_thread_before(graph, c)
        if a < 0 or (anc and graph.position_ns[graph.launch[a]] < graph.position_ns[graph.launch[anc[-1]]]):
            continue
        anc.append(a)
        con.append(c)
        kept.append(u)
    return np.asarray(anc, np.int64), np.asarray(con, np.int64), np.asarray(kept, np.int64)


def _in_phase(graph: TaskGraph, steps: np.ndarray, s: int, phase: int) -> np.ndarray:
    mp = graph.mapping
    v = np.nonzero((graph.node_kind == Kind.KERNEL) & (mp.phase == phase) & (steps == s) & (graph.launch >= 0)
                   & ~kernel_is_collective(graph))[0]
    return v[np.argsort(graph.position_ns[v], kind="stable")]


def _forward_firsts(fwd: np.ndarray, dur: np.ndarray, unit_bytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First forward kernel of each unit (forward order), placing the units at their byte share of
    the forward's recorded GPU time (module docstring: inferred); units sharing a first kernel are
    one. Returns (first kernels, their unit indices)."""
    cum = np.concatenate([[0.0], np.cumsum(dur[fwd])[:-1]]) / max(float(dur[fwd].sum()), 1.0)
    starts = np.concatenate([[0.0], np.cumsum(unit_bytes)[:-1]]) / max(float(unit_bytes.sum()), 1.0)
    j = np.minimum(np.searchsorted(cum, starts - 1e-12), len(fwd) - 1)
    _, u = np.unique(j, return_index=True)
    return fwd[j[u]], u


def plan_stage3(graph: TaskGraph, p, steps, r, b, s_of) -> dict:
    """The all-gathers (anchor, consumer, bytes) and reduce-scatters (ready, bytes, waiter) of
    every iteration; a dict of arrays and counts."""
    ag_a, ag_c, ag_b, rs_r, rs_b, rs_w = [], [], [], [], [], []
    counts = {"units": 0, "all-gathers without an anchor (not inserted)": 0, "units placed in the forward pass (inferred)": 0}
    for it in sorted_unique(s_of).tolist():  # iterations: a handful
        m = s_of == it
        ur, ub = buckets(r[m], b[m], p["unit_mb"] * MIB, p["unit_mb"] * MIB)
        bwd, fwd = _in_phase(graph, steps, it, PH_BWD), _in_phase(graph, steps, it, PH_FWD)
        counts["units"] += len(ur)
        rs_r.append(ur)
        rs_b.append(ub)
        w = np.full(len(ur), -1, np.int64)
        w[-1] = first_after(graph, int(ur[-1]))
        rs_w.append(w)
        if len(bwd):  # backward: unit u's first kernel is the first backward kernel after unit u-1's last gradient
            pos = graph.position_ns[bwd]
            j = np.searchsorted(pos, np.concatenate([[pos[0] - 1], graph.position_ns[ur[:-1]]]), side="right")
            keep = np.nonzero(j < len(bwd))[0]
            _, first = np.unique(bwd[j[keep]], return_index=True)  # units with no backward kernel of their own share
            keep = keep[np.sort(first)]
            a, c, k = _chain(graph, bwd[j[keep]])
            ag_a.append(a), ag_c.append(c), ag_b.append(ub[keep][k])
            counts["all-gathers without an anchor (not inserted)"] += len(ur) - len(k)
        if len(fwd):
            fb = ub[::-1]
            firsts, fu = _forward_firsts(fwd, graph.dur_ns, fb)
            a, c, k = _chain(graph, firsts)
            ag_a.append(a), ag_c.append(c), ag_b.append(fb[fu][k])
            counts["units placed in the forward pass (inferred)"] += len(c)
            counts["all-gathers without an anchor (not inserted)"] += len(fb) - len(k)
    cat = (lambda x: np.concatenate(x) if x else np.zeros(0, np.int64))
    a, c, bb = cat(ag_a), cat(ag_c), cat(ag_b)
    o = np.argsort(graph.position_ns[graph.launch[a]], kind="stable") if len(a) else np.zeros(0, np.int64)
    return {"ag": (a[o], c[o], bb[o]), "rs": (cat(rs_r), cat(rs_b), cat(rs_w)), "counts": counts}


def _slow_overlapped(graph: TaskGraph, anchor, consumer, dur_ns, factor: float) -> tuple[TaskGraph, int]:
    """Compute kernels issued after each prefetch's anchor (its stream, before its consumer) up to
    the collective's duration of recorded time, scaled by ``factor``."""
    if factor == 1.0 or not len(anchor):
        return graph, 0
    mask = np.zeros(graph.n, bool)
    k = np.nonzero((graph.node_kind == Kind.KERNEL) & ~kernel_is_collective(graph))[0]
    k = k[np.argsort(graph.position_ns[k], kind="stable")]
    pos = graph.position_ns[k]
    for a, c, d in zip(anchor.tolist(), consumer.tolist(), np.asarray(dur_ns).tolist()):  # collectives: tens
        v = k[(pos >= graph.position_ns[a]) & (pos < graph.position_ns[c]) & (graph.lane[k] == graph.lane[a])]
        cum = np.cumsum(graph.dur_ns[v]) - graph.dur_ns[v]
        mask[v[cum < d]] = True
    return scale(graph, mask, factor), int(mask.sum())


def _overlap(graph: TaskGraph, p) -> tuple[float, str]:
    if p["overlap"] >= 0:
        return float(p["overlap"]), "given"
    c = kernel_is_collective(graph) & (graph.row >= 0)
    if not c.any():
        return 1.0, "1: the trace has no collective to measure it on"
    comp = (graph.node_kind == Kind.KERNEL) & ~c & (graph.row >= 0)
    f, d = cf.overlap_slowdown(graph.rec_start_ns, graph.rec_end_ns, graph.device, graph.name_id, c, comp)
    return f, f"measured on the trace ({d['names compared']} kernel names)"


def _fit_words(fit, how: str, by_fit: int, total: int) -> str:
    if fit is None:
        return "collective times by the link preset"
    return f"{by_fit} of {total} collective times by {how} (its operations, sizes within x{cf.SIZE_MARGIN:g}), the rest by the link preset"


def _stage3(graph: TaskGraph, p, net, r, b, s_of, steps):
    pl = plan_stage3(graph, p, steps, r, b, s_of)
    a, c, ab = pl["ag"]
    N = p["world"]
    fit, fit_how = trace_fit(graph, net, p["fit"])
    ag_d, f_ag = cf.collective_ns(fit, cm.ALL_GATHER, ab, N, net)
    rr, rb, rw = pl["rs"]
    rs_d, f_rs = cf.collective_ns(fit, cm.REDUCE_SCATTER, rb, N, net)
    ov, how = _overlap(graph, p)
    g, slowed = _slow_overlapped(graph, a, c, ag_d, ov)
    if len(a):
        g, _ = insert_prefetched(g, a, c, ag_d, [coll_name("AllGather", x, N) for x in ab.tolist()])
    g, _ = insert_allreduces(g, rr, rs_d, rw, [coll_name("ReduceScatter", x, N) for x in rb.tolist()])
    g, units_note = _gathered_memory(graph, g, a, c, ab, steps)
    if units_note:
        pl["counts"]["memory"] = units_note
    note = (f"{len(a)} all-gathers ({ab.sum() / MIB:,.1f} MiB, {ag_d.sum() / 1e6:,.3f} ms), {len(rr)} reduce-scatters "
            f"({rb.sum() / MIB:,.1f} MiB, {rs_d.sum() / 1e6:,.3f} ms); {_fit_words(fit, fit_how, f_ag + f_rs, len(a) + len(rr))}; overlap slowdown {ov:.3f} ({how}) on {slowed} kernels; "
            + "; ".join(f"{k}: {v}" for k, v in pl["counts"].items()))
    return g, note


def _gathered_memory(graph: TaskGraph, g: TaskGraph, a, c, ab, steps) -> tuple[TaskGraph, str]:
    """Each unit's all-gathered parameters (module docstring, "Memory") in ``g``: allocated at the
    end of the launch call of all-gather k's anchor, freed at the start of the launch call of
    consumer k+1 where it is in the same iteration, else at the end of the launch call of the
    iteration's last kernel."""
    if g.memory is None or not len(g.memory) or not len(a):
        return g, ""
    kern = np.nonzero((graph.node_kind == Kind.KERNEL) & (graph.launch >= 0) & ~kernel_is_collective(graph))[0]
    it_c = steps[c]
    free_call = np.empty(len(a), np.int64)
    at_end = np.zeros(len(a), bool)
    for k in range(len(a)):  # all-gathers: tens per iteration
        if k + 1 < len(a) and it_c[k + 1] == it_c[k]:
            free_call[k] = graph.launch[c[k + 1]]
        else:
            mine = kern[steps[kern] == it_c[k]]
            free_call[k] = graph.launch[mine[np.argmax(graph.position_ns[mine])]]
            at_end[k] = True
    return gathered_units(graph, g, graph.launch[a], free_call, at_end, ab, graph.device[a])


def _stage12(graph: TaskGraph, p, net, r, b, s_of, steps):
    N = p["world"]
    rr, rb, rw, ar, ab, aw = [], [], [], [], [], []
    its = sorted_unique(s_of).tolist()
    for i, it in enumerate(its):  # iterations: a handful
        m = s_of == it
        br, bb = buckets(r[m], b[m], p["bucket_mb"] * MIB, p["bucket_mb"] * MIB)
        opt = _in_phase(graph, steps, it, PH_OPT)
        opt = opt[graph.position_ns[opt] > graph.position_ns[br[-1]]]  # the step (zero_grad's kernels run before backward)
        rr.append(br), rb.append(bb)
        w = np.full(len(br), -1, np.int64)
        w[-1] = first_after(graph, int(br[-1]))
        rw.append(w)
        last = int(opt[-1]) if len(opt) else int(br[-1])
        nxt = _in_phase(graph, steps, its[i + 1], PH_FWD) if i + 1 < len(its) else np.zeros(0, np.int64)
        ar.append(np.full(len(bb), last)), ab.append(bb)
        w2 = np.full(len(bb), -1, np.int64)
        w2[-1] = int(nxt[0]) if len(nxt) else -1
        aw.append(w2)
    rr, rb, rw, ar, ab, aw = (np.concatenate(x) for x in (rr, rb, rw, ar, ab, aw))
    fit, how = trace_fit(graph, net, p["fit"])
    rs_d, f_rs = cf.collective_ns(fit, cm.REDUCE_SCATTER, rb, N, net)
    ag_d, f_ag = cf.collective_ns(fit, cm.ALL_GATHER, ab, N, net)
    g, _ = insert_allreduces(graph, rr, rs_d, rw, [coll_name("ReduceScatter", x, N) for x in rb.tolist()])
    g, _ = insert_allreduces(g, ar, ag_d, aw, [coll_name("AllGather", x, N) for x in ab.tolist()])
    return g, (f"{len(rr)} reduce-scatters ({rb.sum() / MIB:,.1f} MiB, {rs_d.sum() / 1e6:,.3f} ms) in backward, "
               f"{len(ar)} all-gathers of the updated parameters ({ag_d.sum() / 1e6:,.3f} ms) after the optimizer; "
               + _fit_words(fit, how, f_rs + f_ag, len(rr) + len(ar)))


def _apply_stage(graph: TaskGraph, p, stage: int):
    if p["world"] == 1 or stage == 0:  # before any check: one rank (or no sharding) is the baseline on every trace
        return graph, f"world={p['world']}, stage={stage}: nothing sharded; the baseline"
    have = int(kernel_is_collective(graph).sum())
    if have:
        raise NotApplicable(f"the trace already has {have:,} collective kernels (it is distributed already); sharding is "
                            "predicted from a one-GPU trace")
    r, b, note = gradients_from_trace(graph)
    if not len(r):
        raise NotApplicable(f"gradient sizes not found: {note}; record with record_shapes=True")
    if graph.mapping is None:
        raise NotApplicable("the trace has no phase mapping (forward/backward/optimizer)")
    steps = step_of_nodes(graph)
    net = network_of(p)
    opt = (graph.mapping.phase == PH_OPT) & (graph.node_kind != NODE_CPU) & ~kernel_is_collective(graph)
    g = scale(graph, opt, 1.0 / p["world"])
    g, more = (_stage3 if stage == 3 else _stage12)(g, p, net, r, b, steps[r], steps)
    g, mem = _sharded_memory(graph, g, p, stage, r, b, steps[r])
    return g, (f"ZeRO stage {stage} over {p['world']} ranks on {net.intra.name}: optimizer on the shard "
               f"({int(opt.sum())} kernels x 1/{p['world']}); {more}; {note}" + (f"; {mem}" if mem else ""))


def _sharded_memory(graph: TaskGraph, g: TaskGraph, p, stage: int, r, b, s_of) -> tuple[TaskGraph, str]:
    """Per-rank memory (module docstring): the state of one model (the largest iteration's
    gradient bytes as the parameters') sharded over the ranks on the gradients' GPU."""
    if g.memory is None or not len(g.memory):
        return g, ""
    P = int(np.bincount(s_of - s_of.min(), weights=b).max())
    state = sharded_state_bytes(P, 1, 3, p["opt_state"])
    return sharded_blocks(g, p["world"], stage, state, sorted({int(graph.device[x]) for x in r.tolist()}))


_COMMON = {
    "world": Param(8, "data-parallel ranks the state is sharded over", int, lambda v: 1 <= v <= 1 << 20, "1 to 2^20"),
    "unit_mb": Param(DDP_BUCKET_MB, "stage 3: the smallest FSDP unit, MiB of parameters (size-based wrapping)", float, lambda v: v > 0, "> 0"),
    "bucket_mb": Param(DDP_BUCKET_MB, "stages 1-2: gradient bucket, MiB (DDP's bucket_cap_mb default 25)", float, lambda v: v > 0, "> 0"),
    "fit": Param("", "a collective-cost fit (daydream-comm-fit --json FILE, e.g. of the job this model would run in): its "
                 "all-gather / reduce-scatter where it has them; empty: the link preset", str),
    "opt_state": Param(2.0, "memory: optimizer-state bytes per parameter byte held from before the window (Adam/AdamW: "
                       "exp_avg and exp_avg_sq, torch.optim.Adam docs = 2; SGD with momentum 1; plain SGD 0)", float,
                       lambda v: 0 <= v <= 16, "0 to 16"),
    "overlap": Param(-1.0, "slowdown of compute under a prefetched all-gather; -1: measured on the trace (1 without collectives)",
                     float, lambda v: v == -1 or 1 <= v <= 100, "-1, or 1 to 100"),
    **NETWORK_PARAMS,
}

register(Optimization(
    name="fsdp", summary="sharded data parallel on `world` GPUs (PyTorch FSDP FULL_SHARD = ZeRO stage 3: all-gather per "
    "unit in forward and backward, reduce-scatter per unit)", apply=lambda g, p: _apply_stage(g, p, 3), what_if=True,
    params=dict(_COMMON)))

register(Optimization(
    name="zero", summary="DeepSpeed ZeRO on `world` GPUs: stage 1/2 reduce-scatter gradients and all-gather parameters "
    "after the step; 3 = fsdp", apply=lambda g, p: _apply_stage(g, p, p["stage"]), what_if=True,
    params={"stage": Param(3, "ZeRO stage: 1 (optimizer state), 2 (+gradients), 3 (+parameters); 0 none", int,
                           lambda v: v in (0, 1, 2, 3), "0, 1, 2 or 3"), **_COMMON}))
