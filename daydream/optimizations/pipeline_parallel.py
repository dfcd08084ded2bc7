"""``pp:stages=S,microbatches=M,schedule=1f1b|gpipe|interleaved,chunks=V``: what if the model's
layers were cut into ``S`` pipeline stages, one GPU each, and each step ran ``M`` micro-batches
through them? (GPipe, Huang et al., NeurIPS 2019; PipeDream-Flush / 1F1B as Megatron-LM runs it,
Narayanan et al., SC 2021, §2.2; interleaved, §2.2.2: the units cut into ``S V`` model chunks at
balanced forward time, chunk ``c`` on rank ``c mod S``, each chunk's times as a stage's below, an
exchange per link costed at the largest activation among the cuts it carries, the wrap link from
the last rank to the first; ``M`` must be a multiple of ``S``: :class:`UsageError` otherwise,
exit 2; :mod:`.pipeline_schedule`.)

**Stages.** The forward kernels of each step in launch order, grouped into **units**: the
mapping's block (the outermost repeated module, as ``tp`` finds it) where the trace has repeated
blocks, else its layer; kernels without a layer join the unit before them. Stages are cut only
between units: stage ``k`` begins at the unit boundary nearest ``k/S`` of the forward time summed
over the steps (prefix sums), or at the units ``cuts=`` names (``cuts=4/8/12``: the first unit of
stages 1..S-1).

**Work per micro-batch** (:func:`microbatch_ns`): each forward kernel the kernel-cost library
describes from its shapes at its batch field ``/ M`` (a GEMM's tokens, attention's batch x heads,
a memory-bound kernel's rows and elements), anchored on its recorded time
(:func:`daydream.costmodel.kernel_time.predict_shape`: small micro-batches run GEMMs less
efficiently); the others (no shapes) their recorded time ``/ M`` (counted: a stated assumption).
A stage's backward of a micro-batch: the step's backward time times the stage's share of the
step's recorded forward time, at its forward's micro-batch efficiency (``bwd x fs_mb / fwd``:
**inferred**, no trace here labels backward kernels with their layer; a linear's input and weight
gradients are GEMMs over the same sizes as its forward).

**Send/recv.** Between stages ``s`` and ``s+1`` an exchange per micro-batch and direction
(activation forward, its gradient backward; the same bytes): ``act_bytes=`` per micro-batch, else
the output of the stage's last forward kernel the kernel-cost library describes (``M N B`` of a
GEMM, ``elems`` of a memory-bound kernel, at its element size) ``/ M``; none described: not
applicable (give ``act_bytes``). Its time from :func:`daydream.costmodel.comm_fit.collective_ns`
(send/recv of 2 ranks): the trace's own send/recv fit where it has sized ones (or ``fit=FILE``),
else the link of ``bandwidth=`` (default: the traced GPU's board link, inferred and said so).

**The schedule** (:mod:`.pipeline_schedule`): GPipe or 1F1B in Megatron's order, each stage one
GPU stream, each exchange one task on its link's stream that both stages' neighbouring items wait
for (the job emulator's NCCL semantics: it ends for both at the later arrival plus the transfer).
In the graph: each step's forward and backward kernels are removed except its first forward
kernel and its last backward kernel (kept as anchors, 0 ns); the pipeline's items are inserted
on ``S`` new stage streams and ``S-1`` link streams, the first item of each stage waiting for
the first anchor, the last anchor waiting for every stage's last item (the pipeline's flush: the
optimizer follows it). The stages' own host launches are not modelled (GPU-bound: each item is
ready when its predecessors end); other GPU work of the step (loss, copies) stays where it was.
Predicted (in the note): the step's pipeline time, each stage's bubble (waits at exchanges) and
idle fraction beside the ideal ``(S-1)/(M+S-1)``, and the activations each stage holds
(micro-batches: 1F1B ``min(S-s, M)``, GPipe ``M``; each 1/M of the step's).

``stages=1`` is the baseline (the graph unchanged: no pipeline, Megatron's
``forward_backward_no_pipelining``; micro-batches of the same total work).
"""

from __future__ import annotations

import numpy as np

from ..costmodel import comm as cm
from ..costmodel import comm_fit as cf
from ..costmodel import kernel_model as KM
from ..costmodel.gpus import BOARD_LINKS
from ..costmodel.kernel_time import predict_shape
from ..costmodel.specs import from_table
from ..errors import NotApplicable, UsageError
from ..events.table import Kind
from ..graph import TaskGraph
from ..transform import remove, set_duration
from ..transform.insertion import insert_tasks
from ..transform.lanes import add_lanes
from . import Optimization, Param, register
from . import kernel_cost as KC
from .comm_common import NETWORK_PARAMS, network_of, trace_fit
from .gpu_upgrade import source_gpu
from .pipeline_memory import stage_memory
from .pipeline_schedule import (
    FWD,
    P2P,
    SCHEDULES,
    PipelineRun,
    ideal_bubble_fraction,
    run_schedule,
)
from .tensor_parallel import _ELEM_BYTES, _blocks, _link_or_empty
from ..util.display import plural

PH_FWD, PH_BWD = 1, 2  # daydream.mapping.rules.PHASES


def units_of(graph: TaskGraph, fwd: np.ndarray) -> np.ndarray:
    """Per forward kernel (``fwd``: node ids in launch order), its unit id (module docstring):
    consecutive kernels of one block (else layer) share it; ids number the units in order."""
    mp = graph.mapping
    blk = _blocks(mp.labels, mp.layer_id)[fwd]
    key = blk if (blk >= 0).any() else mp.layer_id[fwd].astype(np.int64)
    # a kernel without a unit joins the one before it
    idx = np.where(key >= 0, np.arange(len(key)), -1)
    np.maximum.accumulate(idx, out=idx)
    key = np.where(idx >= 0, key[np.maximum(idx, 0)], -1)
    new = np.ones(len(key), bool)
    new[1:] = key[1:] != key[:-1]
    return np.cumsum(new) - 1


def cut_units(unit_ns: np.ndarray, S: int) -> np.ndarray:
    """(S+1,) unit boundaries: stage k has units ``[b[k], b[k+1])``; ``b[k]`` the boundary nearest
    ``k/S`` of the total time, kept strictly increasing (every stage at least one unit).

    Raises:
        NotApplicable: fewer units than stages.
    """
    n = len(unit_ns)
    if n < S:
        raise NotApplicable(f"{plural(n, 'forward unit')} (blocks or layers) cannot make {S} stages")
    pre = np.concatenate([[0], np.cumsum(unit_ns, dtype=np.float64)])
    want = pre[-1] * np.arange(1, S) / S
    i = np.clip(np.searchsorted(pre, want), 1, n)
    b = np.where(np.abs(pre[i - 1] - want) <= np.abs(pre[i] - want), i - 1, i)
    out = np.concatenate([[0], b, [n]]).astype(np.int64)
    for k in range(1, S):  # S - 1 cuts
        out[k] = min(max(out[k], out[k - 1] + 1), n - (S - k))
    return out


def _given_cuts(text: str, S: int, n: int) -> np.ndarray:
    try:
        c = [int(x) for x in text.split("/") if x.strip()]
    except ValueError:
        raise UsageError(f"--opt pp: cuts={text!r}: give the first unit of stages 1..S-1 as integers, e.g. cuts=4/8/12") from None
    if len(c) != S - 1 or c != sorted(set(c)) or (c and (c[0] < 1 or c[-1] >= n)):
        raise UsageError(f"--opt pp: cuts={text!r}: need {S - 1} increasing unit indices in 1..{n - 1}")
    return np.array([0, *c, n], np.int64)


def step_windows(graph: TaskGraph) -> list[tuple[int, int]]:
    """(start, end) ns of each ``ProfilerStep#N``, else the whole trace as one step."""
    st = graph.facts.steps if graph.facts is not None else ()
    return [(a, b) for _, a, b, *_ in st] if st else [(-(2**62), 2**62)]


def _described(graph: TaskGraph, given: str = ""):
    """(the kernel-cost library's description of the graph's kernels, the GPU spec), or (None,
    None) when the traced GPU (or ``given``) is not in the table or the graph has no launch facts."""
    gpu, _ = source_gpu(graph, given)
    if gpu is None or graph.facts is None:
        return None, None
    spec = from_table(gpu)
    return KC.describe(graph, spec, KM.match_launches(graph, graph.facts.launch), KM.work_item_grid(graph)), spec


#: the field holding the batch in each described class (the tokens of a GEMM, batch x heads of
#: attention and bmm, rows or elements of memory-bound kernels)
_BATCH_FIELDS = {"linear": ("N",), "bmm": ("B",), "attention": ("B",), "elementwise": ("elems",),
                 "softmax": ("B", "elems"), "ln": ("B", "elems")}


def microbatch_ns(graph: TaskGraph, f: np.ndarray, M: int, described=None) -> tuple[np.ndarray, int]:
    """Each forward kernel of ``f`` (node ids) at batch/M: the kernel-cost library's time at the
    batch field divided by ``M`` (ceiling), anchored on the recorded time
    (:func:`daydream.costmodel.kernel_time.predict_shape`, the identity at ``M = 1``), where it
    describes the kernel from its shapes; the recorded time ``/ M`` elsewhere.

    Returns:
        ((len(f),) float64 ns, how many the library re-costed).
    """
    t = graph.dur_ns[f].astype(np.float64) / M
    d, spec = described if described is not None else _described(graph)
    if d is None or not len(d.nodes):
        return t, 0
    at = np.minimum(np.searchsorted(d.nodes, f), len(d.nodes) - 1)
    cls = d.kernels.cls[at]
    ok = (d.nodes[at] == f) & ~d.inferred[at] & np.isin(cls, list(_BATCH_FIELDS))
    if not ok.any():
        return t, 0
    idx = at[ok]
    ref, new = d.kernels.take(idx), d.kernels.take(idx)
    for c, fields in _BATCH_FIELDS.items():
        sel = new.cls == c
        for fl in fields:
            v = getattr(new, fl)
            v[sel] = np.maximum(-(-v[sel] // M), 1)
    t[ok] = np.maximum(predict_shape(ref, graph.dur_ns[f][ok], new, spec).point, 0.0)
    return t, int(ok.sum())


def _act_bytes(graph: TaskGraph, last_fwd: np.ndarray, described=None) -> np.ndarray:
    """Output bytes of each node of ``last_fwd`` as the kernel-cost library describes it, -1 where
    it does not (not a GEMM or memory-bound kernel, or no shapes)."""
    out = np.full(len(last_fwd), -1, np.int64)
    d, _ = described if described is not None else _described(graph)
    if d is None:
        return out
    k = d.kernels
    if not len(d.nodes):  # nothing described (no shapes): before, d.nodes[-1] raised IndexError
        return out
    at = np.searchsorted(d.nodes, last_fwd)
    ok = (at < len(d.nodes)) & (d.nodes[np.minimum(at, len(d.nodes) - 1)] == last_fwd) & ~d.inferred[np.minimum(at, len(d.nodes) - 1)]
    for j in np.nonzero(ok)[0]:  # one per stage boundary
        r = at[j]
        esz = _ELEM_BYTES.get(str(k.dtype[r]), 4)
        if k.cls[r] in ("linear", "bmm"):
            out[j] = int(k.M[r]) * int(k.N[r]) * max(int(k.B[r]), 1) * esz
        elif k.cls[r] in ("elementwise", "ln", "softmax"):
            out[j] = int(k.elems[r]) * esz
    return out


def _items(orders: list) -> list[tuple]:
    """The pipeline's tasks in an order where each comes after what it waits for: ("c", stage,
    item index) for compute, ("x", link, k, (stage, item), (stage, item)) for an exchange."""
    S = len(orders)
    nxt, out, seen, pending = [0] * S, [], [{} for _ in range(S)], {}
    blocked = [False] * S
    progress = True
    while progress:  # the stages' items: hundreds
        progress = False
        for s in range(S):
            while not blocked[s] and nxt[s] < len(orders[s]):
                j = nxt[s]
                kind, x = orders[s][j]
                nxt[s] += 1
                progress = True
                if kind != P2P:
                    out.append(("c", s, j))
                    continue
                k = seen[s].get(x, 0)
                seen[s][x] = k + 1
                if (x, k) not in pending:
                    pending[(x, k)] = (s, j)
                    blocked[s] = True
                    break
                q, jq = pending.pop((x, k))
                out.append(("x", x, k, (q, jq), (s, j)))
                blocked[q] = False
    return out


def insert_pipeline(graph: TaskGraph, first: int, last: int, stage_lanes: list[int], link_lanes: list[int],
                    run: PipelineRun, fwd_ns, bwd_ns, p2p_ns, p2p_bytes, M: int = 1) -> tuple[TaskGraph, np.ndarray]:
    """Insert one step's pipeline (module docstring) between the anchors ``first`` and ``last``
    (GPU task node ids): every stage's first item waits for ``first``, ``last`` for every stage's
    last item. ``fwd_ns``/``bwd_ns`` per stage, or per model chunk ``v S + s`` when
    ``len(fwd_ns) > S`` (interleaved; ``M`` decodes its items). Returns (new graph, the inserted
    tasks' ids)."""
    n = graph.n
    S = len(run.orders)
    V = len(fwd_ns) // S
    items = _items(run.orders)
    node_of: dict[tuple[int, int], int] = {}  # (stage, item) -> inserted index
    lane, dur, names, preds, succs = [], [], [], [], []
    prev = [None] * len(run.orders)  # per stage: index of its last inserted item (an exchange counts)
    for t, it in enumerate(items):  # the step's items: hundreds
        if it[0] == "c":
            _, s, j = it
            kind, x = run.orders[s][j]
            lane.append(stage_lanes[s])
            v, mb = (x // M, x % M) if V > 1 else (0, x)
            d = fwd_ns[v * S + s] if kind == FWD else bwd_ns[v * S + s]
            ch = f" chunk {v}" if V > 1 else ""
            names.append(f"pp stage {s}{ch} {'forward' if kind == FWD else 'backward'} micro-batch {mb} (inserted)")
            if prev[s] is None:
                preds.append((t, first))
            elif items[prev[s]][0] == "x":
                preds.append((t, n + prev[s]))
            node_of[(s, j)] = t
            prev[s] = t
        else:
            _, link, k, a, b = it
            lane.append(link_lanes[link])
            d = p2p_ns[link]
            names.append(f"ncclDevKernel_SendRecv pp link {link}-{(link + 1) % S} exchange {k} ({int(p2p_bytes[link])} B, inserted)")
            for s, _ in (a, b):
                preds.append((t, first if prev[s] is None else n + prev[s]))
                prev[s] = t
        dur.append(int(d))
    for s, p in enumerate(prev):
        if p is not None:
            succs.append((p, last))
    K = len(items)
    return insert_tasks(graph, after=np.full(K, -1), dur_ns=np.array(dur, np.int64), names=names, kind="kernel",
                        lane=np.array(lane, np.int64), like=np.full(K, first), launch=np.full(K, -1), preds=preds, succs=succs)


def p2p_ns(graph: TaskGraph, p: dict, act: np.ndarray) -> tuple[np.ndarray, str]:
    """(ns of an exchange of ``act`` bytes on each link, the link in words): send/recv of 2 ranks
    through :func:`daydream.costmodel.comm_fit.collective_ns`, the trace's fit (or ``fit=``) where
    it has one, else the link of ``bandwidth=`` (default the GPU's board link, inferred).

    Raises:
        NotApplicable: no ``bandwidth`` given and the GPU's board link not known.
    """
    gpu, name = source_gpu(graph, p.get("gpu", ""))
    link_how = "given"
    if not p["bandwidth"]:
        if gpu is None or gpu.name not in BOARD_LINKS:
            raise NotApplicable(f"the board link of the traced GPU ({name or 'not named'}) is not known; give pp:bandwidth=PRESET")
        p = {**p, "bandwidth": BOARD_LINKS[gpu.name][0]}
        link_how = f"the {gpu.name}'s board link, inferred"
    net = network_of(p)
    fit, fit_how = trace_fit(graph, net, p.get("fit", ""))
    t, by_fit = cf.collective_ns(fit, cm.SEND_RECV, act, 2, net)
    return np.asarray(t, np.int64), f"{net.intra.name} ({link_how}" + (f"; {by_fit} costed by {fit_how}" if fit is not None else "") + ")"


def chunks_of(p: dict) -> int:
    """``V``: the model chunks per rank (``chunks=``; 1 unless ``schedule=interleaved``).

    Raises:
        UsageError: ``chunks >= 2`` with another schedule, or interleaved with ``chunks >= 2`` and
            ``microbatches`` not a multiple of ``stages`` (Megatron's requirement).
    """
    S, M, V = int(p["stages"]), int(p["microbatches"]), int(p.get("chunks", 1))
    if V > 1 and p["schedule"] != "interleaved":
        raise UsageError(f"--opt pp: chunks={V} needs schedule=interleaved (got schedule={p['schedule']})")
    if p["schedule"] != "interleaved" or S == 1:
        return 1
    if V > 1 and M % S:
        raise UsageError(f"--opt pp: schedule=interleaved needs microbatches a multiple of stages (Megatron's "
                         f"requirement); got microbatches={M}, stages={S}")
    return V


def plan(graph: TaskGraph, p: dict) -> dict:
    """The pipeline of each step (module docstring), for ``stages >= 2``.

    Returns:
        dict: ``steps`` [(forward kernel ids, backward kernel ids)] in launch order; ``units`` (per
        step, each forward kernel's unit); ``bounds`` (S+1,) unit boundaries; ``stage_ns`` per step
        (forward, backward) (S,) ns per micro-batch; ``act`` (S-1,) bytes and ``p2p`` (S-1,) ns
        per exchange; ``note_parts`` (how each was found).

    Raises:
        NotApplicable: no layer mapping, no step with forward and backward kernels, fewer units than
            stages, no activation size, no link known. UsageError: bad ``cuts``.
    """
    S, M = int(p["stages"]), int(p["microbatches"])
    V = chunks_of(p)
    C = S * V  # model chunks (stages when V = 1); chunk c on rank c % S
    mp = graph.mapping
    if mp is None or not (mp.layer_id >= 0).any():
        raise NotApplicable("the trace has no layer mapping (module annotations): the stages cannot be cut at layers")
    kern = graph.node_kind == Kind.KERNEL
    pos = graph.position_ns
    fwd_all = np.nonzero(kern & (mp.phase == PH_FWD))[0]
    bwd_all = np.nonzero(kern & (mp.phase == PH_BWD))[0]
    fwd_all = fwd_all[np.argsort(pos[fwd_all], kind="stable")]
    bwd_all = bwd_all[np.argsort(pos[bwd_all], kind="stable")]
    wins = step_windows(graph)
    steps = []
    for a, b in wins:  # steps: a few
        f = fwd_all[(pos[fwd_all] >= a) & (pos[fwd_all] < b)]
        bw = bwd_all[(pos[bwd_all] >= a) & (pos[bwd_all] < b)]
        if len(f) and len(bw):
            steps.append((f, bw))
    if not steps:
        raise NotApplicable("no step has both forward and backward kernels (mapping phases): nothing to pipeline")
    # units over the first step (the layers are the same each step); time per unit summed over steps
    units = [units_of(graph, f) for f, _ in steps]
    n_units = int(units[0][-1]) + 1
    if any(int(u[-1]) + 1 != n_units for u in units):
        raise NotApplicable("the steps' forward passes have different numbers of units (blocks or layers)")
    unit_ns = np.zeros(n_units, np.float64)
    for (f, _), u in zip(steps, units):
        np.add.at(unit_ns, u, graph.dur_ns[f])
    if V > 1 and n_units < C:
        raise NotApplicable(f"{n_units} forward units (blocks or layers) cannot make {S} stages x {V} chunks")
    bounds = _given_cuts(p["cuts"], C, n_units) if p["cuts"] else cut_units(unit_ns, C)
    stage_of_unit = np.searchsorted(bounds, np.arange(n_units), "right") - 1  # the model chunk
    described = _described(graph, p.get("gpu", ""))
    # send/recv bytes per micro-batch at each cut
    if p["act_bytes"] > 0:
        act = np.full(C - 1, int(p["act_bytes"]), np.int64)
        act_how = "given"
    else:
        f0, u0 = steps[0][0], units[0]
        last = np.array([f0[np.nonzero(u0 < bounds[k])[0][-1]] for k in range(1, C)], np.int64)
        ob = _act_bytes(graph, last, described)
        if (ob < 0).any():
            raise NotApplicable("the activation size at a stage cut is not known (the last forward kernel before it has no "
                                "shapes the kernel-cost library describes): give pp:act_bytes=BYTES per micro-batch")
        act = np.maximum(ob // M, 1)
        act_how = "from the shapes of the last forward kernel before each cut, / M"
    if V > 1:  # link l carries cuts l, l + S, ...; the last link (the wrap) cuts S-1, 2S-1, ...
        act = np.array([act[np.arange(link, C - 1, S)].max() for link in range(S)], np.int64)
        act_how += "; per link the largest of its cuts"
    p2p, link_how = p2p_ns(graph, p, act)
    stage_ns, by_lib = [], 0
    for (f, bw), u in zip(steps, units):
        rec = np.bincount(stage_of_unit[u], weights=graph.dur_ns[f], minlength=C)
        t_mb, nl = microbatch_ns(graph, f, M, described)
        by_lib += nl
        fs = np.bincount(stage_of_unit[u], weights=t_mb, minlength=C)
        # backward: the step's, by the stages' forward share, at the forward's micro-batch efficiency
        bs = float(graph.dur_ns[bw].sum()) * fs / max(rec.sum(), 1.0)
        stage_ns.append((np.rint(fs).astype(np.int64), np.rint(bs).astype(np.int64)))
    how = (f"{by_lib} forward kernels re-costed at batch/{M} by the kernel-cost library, the rest / {M}; "
           f"send/recv {'/'.join(f'{x:,}' for x in act.tolist())} B ({act_how}), "
           f"{'/'.join(f'{x / 1e3:,.1f}' for x in p2p)} us on {link_how}")
    return {"steps": steps, "units": units, "bounds": bounds, "n_units": n_units, "stage_ns": stage_ns, "act": act,
            "p2p": np.asarray(p2p, np.int64), "how": how}


def _apply(graph: TaskGraph, p) -> tuple[TaskGraph, str]:
    S, M, sched = int(p["stages"]), int(p["microbatches"]), p["schedule"]
    V = chunks_of(p)
    if S == 1:
        return graph, f"one stage: no pipeline (the baseline; {plural(M, 'micro-batch', 'micro-batches')} of the same total work)"
    pl = plan(graph, p)
    steps, bounds, n_units, p2p, act = pl["steps"], pl["bounds"], pl["n_units"], pl["p2p"], pl["act"]
    # the graph: per step, anchors kept at 0 ns, the rest of its forward/backward removed
    g = graph
    dev = int(graph.device[steps[0][0][0]])
    pid = int(graph.lane_keys[graph.lane[steps[0][0][0]]][1])
    base = int(graph.stream[graph.node_kind != 0].max()) + 1
    n_links = S if V > 1 else S - 1
    g, _, lanes = add_lanes(g, streams=[{"pid": pid, "device": dev, "stream": base + i} for i in range(S + n_links)])
    stage_lanes, link_lanes = lanes[:S], lanes[S:]
    drop = np.zeros(graph.n, bool)
    anchors, runs = [], pl["stage_ns"]
    for f, bw in steps:
        drop[f[1:]] = True
        drop[bw[:-1]] = True
        anchors.append((int(f[0]), int(bw[-1])))
    keep_first = np.array([a for a, _ in anchors] + [b for _, b in anchors], np.int64)
    g = set_duration(g, np.isin(np.arange(g.n), keep_first), 0)
    new_id = np.cumsum(~drop) - 1
    g = remove(g, drop)
    G = int(graph.gpu_gap_ns)
    out_runs = []
    for (a, b), (fs, bs) in zip(anchors, runs):
        r = run_schedule(fs, bs, p2p, M, sched, gpu_gap_ns=G, chunks=V)
        out_runs.append(r)
        g, _ = insert_pipeline(g, int(new_id[a]), int(new_id[b]), stage_lanes, link_lanes, r, fs, bs, p2p, act, M)
    g, mem_note = stage_memory(graph, g, steps, pl["units"], bounds, out_runs, M, V)
    r0 = out_runs[0]
    fs0, bs0 = runs[0]
    what = f"{sched}, {V} chunks per rank (model chunk v*{S}+s on rank s)" if V > 1 else sched
    note = (f"{S}-stage pipeline, {plural(M, 'micro-batch', 'micro-batches')}, {what} ({len(steps)} step(s)): {'chunks' if V > 1 else 'stages'} cut at units "
            f"{'/'.join(str(int(x)) for x in bounds[1:-1])} of {n_units} ({'given' if p['cuts'] else 'balanced forward time'}); "
            f"per micro-batch{' and model chunk' if V > 1 else ''} forward {'/'.join(f'{x / 1e3:,.1f}' for x in fs0)} us, backward "
            f"{'/'.join(f'{x / 1e3:,.1f}' for x in bs0)} us (backward by the stages' forward share, inferred); "
            f"{pl['how']}; the first step's pipeline {r0.step_ns / 1e6:,.3f} ms of GPU time, bubble (waits at send/recv) per stage "
            f"{'/'.join(f'{x / 1e6:,.3f}' for x in r0.bubble_ns)} ms, idle {r0.bubble_fraction:.1%} of the step "
            f"(ideal for equal stages (S-1)/({'V*' if V > 1 else ''}M+S-1) = {ideal_bubble_fraction(S, M, V):.1%}); "
            f"activations held per stage {'/'.join(str(int(x)) for x in r0.held)} "
            f"{'chunk-micro-batches (each 1/' + str(M) + ' of its chunk' + chr(39) + 's step activations)' if V > 1 else 'micro-batches (1/' + str(M) + ' of the step' + chr(39) + 's each)'}; "
            f"{sum(sum(k == P2P for k, _ in o) for o in r0.orders) // 2} exchanges a step; "
            f"{int(drop.sum()) + 2 * len(steps)} forward/backward kernels folded into the pipeline (2 a step kept as 0-ns anchors); "
            f"{mem_note}")
    return g, note


register(Optimization(
    name="pp", summary="pipeline parallel over `stages` GPUs: layers cut into stages, `microbatches` per step run "
    "in the GPipe or 1F1B order with send/recv between stages", apply=_apply, what_if=True,
    params={"stages": Param(4, "pipeline stages, one GPU each (Megatron's pipeline_model_parallel_size; user's what-if)", int,
                            lambda v: 1 <= v <= 256, "1 to 256"),
            "microbatches": Param(8, "micro-batches per step (GPipe's M; Megatron's num_microbatches; user's what-if)", int,
                                  lambda v: 1 <= v <= 4096, "1 to 4096"),
            "schedule": Param("1f1b", "1f1b (PipeDream-Flush, Megatron's default), gpipe, or interleaved (1F1B over "
                              "`chunks` model chunks per rank; Narayanan et al. SC 2021 §2.2.2)", str,
                              lambda v: v in SCHEDULES, "1f1b, gpipe or interleaved"),
            "chunks": Param(1, "model chunks per rank for schedule=interleaved (Megatron's "
                            "virtual_pipeline_model_parallel_size; user's what-if); 1: 1f1b", int,
                            lambda v: 1 <= v <= 64, "1 to 64"),
            "cuts": Param("", "first unit (block or layer, 0-based) of stages 1..S-1 (interleaved: of chunks 1..S*V-1), separated by '/'; empty: "
                          "balanced forward time", str),
            "act_bytes": Param(0, "bytes sent between stages per micro-batch and direction (user's what-if); 0: from the shapes", int,
                               lambda v: v >= 0, ">= 0"),
            "gpu": Param("", "the GPU the trace ran on; empty: the trace's device name", str),
            "fit": Param("", "a collective-cost fit (daydream-comm-fit --json FILE) for the send/recvs; empty: the "
                         "trace's own where it has sized send/recvs, else the link preset", str),
            **NETWORK_PARAMS,
            "bandwidth": Param("", "link between stages: a preset (" + ", ".join(cm.PRESETS) + ") or a bandwidth with its "
                               "unit; empty: the traced GPU's board link (daydream/costmodel/gpus.py BOARD_LINKS)",
                               _link_or_empty)}))
