"""Shared pieces of the communication what-ifs (``ddp``, ``p3``, ``compression``, ``network``,
``world-size``, ``buckets``): the network parameters, the iterations of a trace, gradient sizes,
and the insertion of all-reduces on a communication stream. Changes go through
:mod:`daydream.transform` only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..util.arrays import sorted_unique
from ..costmodel import comm as cm
from ..costmodel import comm_fit as cf
from ..formats.comm_fit_doc import read_comm_fit
from ..graph.collectives import Collectives, find_collectives, kernel_is_collective
from ..errors import NotApplicable, UsageError
from ..events.table import Kind
from ..graph import NODE_CPU, EdgeKind, TaskGraph
from ..transform import add_edges, add_stream, insert, insert_launches, insert_on_stream
from . import Param
from ..events.cuda_api import ApiRole
from .common import cpu_nodes_in_ranges, cpu_ranges, cpu_roles

#: PyTorch DDP's default bucket size: ``bucket_cap_mb=25`` (torch/nn/parallel/distributed.py),
#: in MiB (DDP multiplies by 1024 * 1024)
DDP_BUCKET_MB = 25.0
#: DDP's first bucket: ``dist._DEFAULT_FIRST_BUCKET_BYTES`` = 1 MiB (torch/distributed/__init__)
DDP_FIRST_BUCKET_MB = 1.0
MIB = 1024 * 1024
#: the name inserted all-reduce kernels get (an NCCL kernel name, so the classifier, the mapping
#: and collective detection see them as communication)
ALLREDUCE_NAME = "ncclKernel_AllReduce_RING_LL_Sum_float (inserted)"


def allreduce_name(nbytes: int, world: int) -> str:
    """Name of an inserted all-reduce; it carries its size and group size, which
    :func:`daydream.graph.collectives.find_collectives` reads back (inserted tasks have no trace args)."""
    return f"ncclKernel_AllReduce_RING_LL_Sum_float (inserted, {int(nbytes)} B, n={int(world)})"


def _link(text: str) -> str:
    if text.lower() not in cm.PRESETS:
        cm.parse_bandwidth(text)
    return text


def _latency(text: str) -> str:
    if text:
        cm.parse_latency(text)
    return text


_latency.__name__ = "latency: a time with its unit (5us, 800ns, 1ms) or ns; empty: the link's"


def link_text(text: str) -> str:
    """``text`` itself when it is empty or names a link (a preset or a bandwidth with its unit).

    Raises:
        ValueError: it names none.
    """
    return _link(text) if text else text


def _inter(text: str) -> str:
    return link_text(text)


_inter.__name__ = "inter: empty, or a link preset or a bandwidth with its unit"

_link.__name__ = (f"bandwidth: a link ({', '.join(cm.PRESETS)}) or a number with a unit ({cm.BANDWIDTH_UNITS_HELP}), "
                  "e.g. 25GB/s; case matters: B bytes, b bits")  # named in --opt errors


NETWORK_PARAMS: dict[str, Param] = {
    "bandwidth": Param("nvlink2", "intra-node link: a preset (" + ", ".join(cm.PRESETS) + ") or a bandwidth with its unit (25GB/s, 200Gb/s; a bare number is refused); "
                  "default NVLink 2 (the V100 machines of the paper); sources in docs/distributed.md", _link),
    "latency": Param("", "per-step latency (5us, 800ns); default: the link preset's (NCCL tuning.cc hwLat)", _latency),
    "inter": Param("", "inter-node link preset or bandwidth; empty: all ranks in one node", _inter),
    "gpus_per_node": Param(8, "GPUs per node for the hierarchical model (DGX-1/DGX A100: 8)", int, lambda v: v >= 1, ">= 1"),
    "contention": Param(1.0, "transfer-time multiplier for communication overlapped with compute; the Daydream paper "
                        f"measured {cm.PAPER_CONTENTION} (NCCL ~34 % slower than the exclusive-link estimate)", float,
                        lambda v: 1.0 <= v <= 100, "1 to 100"),
    "algorithm": Param("ring", "all-reduce algorithm: ring or tree", str, lambda v: v in ("ring", "tree"), "ring or tree"),
}


def network_of(p: dict[str, Any]) -> cm.Network:
    """The :class:`~daydream.costmodel.comm.Network` named by the parameters of :data:`NETWORK_PARAMS`.

    Raises:
        UsageError: a bandwidth or latency that does not parse.
    """
    try:
        intra = _as_link(p["bandwidth"])
        if p.get("latency"):
            intra = cm.Link(intra.name, intra.bandwidth, cm.parse_latency(p["latency"]), intra.source + "; latency given")
        inter = _as_link(p["inter"]) if p.get("inter") else None
    except ValueError as e:
        raise UsageError(f"--opt: {e}") from None  # the optimization is named by the caller's spec
    return cm.Network(intra, inter, int(p["gpus_per_node"]), float(p["contention"]),
                      algorithm=cm.TREE if p["algorithm"] == "tree" else cm.RING)


def _as_link(text: str) -> cm.Link:
    key = text.strip().lower()
    if key in cm.PRESETS:
        return cm.PRESETS[key]
    return cm.Link(text, cm.parse_bandwidth(text), cm.PRESETS["nvlink2"].latency_ns, "given bandwidth; latency of NVLink 2")


# ----------------------------------------------------------------------------- iterations ----
def step_of_nodes(graph: TaskGraph) -> np.ndarray:
    """Per node, the index of the ``ProfilerStep#N`` range holding it (-1 outside any; all 0 when
    the trace has no steps): CPU calls by their recorded interval, GPU tasks by their launch."""
    r = cpu_ranges(graph, r"^ProfilerStep#\d+")
    if len(r[0]) == 0:
        return np.zeros(graph.n, np.int64)
    o = np.argsort(r[2], kind="stable")
    r = tuple(a[o] for a in r)
    out = cpu_nodes_in_ranges(graph, r, same_thread=False)
    gpu = graph.node_kind != NODE_CPU
    lch = graph.launch
    out[gpu] = np.where(lch[gpu] >= 0, out[np.maximum(lch[gpu], 0)], -1)
    return out


def gradients_from_trace(graph: TaskGraph) -> tuple[np.ndarray, np.ndarray, str]:
    """Gradients recorded in the trace: (ready GPU node, bytes) per gradient in production order,
    and a note. A gradient is an ``AccumulateGrad`` op with ``Input Dims`` (``record_shapes``);
    it is ready when the last GPU task its thread launched before the op ended has run.
    Empty arrays and the reason when the trace has none."""
    a = graph.facts.comm_args if graph.facts is not None else None
    if a is None or not len(a):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), "the trace records no input shapes (record_shapes=False)"
    acc = np.array(["AccumulateGrad" in s for s in a.name], bool) & (a.dims_nelems >= 0) & (a.ext >= 0)
    if not acc.any():
        return np.zeros(0, np.int64), np.zeros(0, np.int64), "no AccumulateGrad op with recorded input shapes"
    c = graph.facts.ops  # (rows below: indices into these CPU ops and ranges, in table order)
    rows = np.nonzero((c.kind == Kind.CPU_OP) & np.isin(c.external_id, a.ext[acc]))[0]
    tn = np.asarray(graph.facts.names, object)[c.name_id[rows]]
    rows = rows[np.array(["AccumulateGrad" in s for s in tn], bool)]
    # join (External id) -> bytes; names of duplicates (the evaluate_function wrapper) drop out
    ext_a, nb = a.ext[acc], a.dims_nelems[acc] * np.where(a.elem_bytes[acc] > 0, a.elem_bytes[acc], 4)
    o = np.argsort(ext_a)
    j = np.clip(np.searchsorted(ext_a[o], c.external_id[rows]), 0, len(o) - 1)
    ok = ext_a[o][j] == c.external_id[rows]
    rows, nbytes = rows[ok], nb[o][j][ok]
    rows, keep = np.unique(rows, return_index=True)
    nbytes = nbytes[keep]
    ready = _last_launched_before(graph, c.pid[rows], c.tid[rows], c.end_ns[rows])
    good = ready >= 0
    o = np.argsort(c.end_ns[rows][good], kind="stable")
    note = f"{int(good.sum())} gradients from AccumulateGrad input shapes"
    if (~good).any():
        note += f" ({int((~good).sum())} with no kernel launched before them, left out)"
    return ready[good][o], nbytes[good][o], note


def _last_launched_before(graph: TaskGraph, pid, tid, t_ns) -> np.ndarray:
    """Per query: the GPU task launched last by a call of (pid, tid) starting at or before ``t_ns``
    (-1 none), by its recorded launch (``position_ns``), so that a graph whose calls a what-if
    replaced (``cuda-graphs``: one graph launch per step) keeps its gradients' ready points."""
    gpu = np.nonzero((graph.node_kind != NODE_CPU) & (graph.launch >= 0))[0]
    lch = graph.launch[gpu]
    out = np.full(len(t_ns), -1, np.int64)
    for p, t in set(zip(np.asarray(pid).tolist(), np.asarray(tid).tolist())):
        m = gpu[(graph.pid[lch] == p) & (graph.tid[lch] == t)]
        q = np.nonzero((np.asarray(pid) == p) & (np.asarray(tid) == t))[0]
        if not len(m):
            continue
        s = graph.position_ns[m]  # its launch as recorded (a cuda-graphs launch call now launches them all)
        o = np.argsort(s, kind="stable")
        j = np.searchsorted(s[o], np.asarray(t_ns)[q], side="right") - 1
        out[q[j >= 0]] = m[o][j[j >= 0]]
    return out


def spread_over_backward(graph: TaskGraph, sizes: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of a parameter-size file placed in every iteration's backward pass: gradient j
    (backward order) is ready at the backward GPU task where the cumulative recorded backward
    GPU time first reaches the gradients' cumulative byte fraction (an assumption: backward
    produces bytes at an even rate). Returns (ready node, bytes, step) over all iterations.

    Raises:
        NotApplicable: no GPU task is mapped to the backward phase.
    """
    mp = graph.mapping
    bwd = np.zeros(graph.n, bool) if mp is None else (mp.phase == 2) & (graph.node_kind != NODE_CPU)  # PHASES[2] = backward
    if not bwd.any():
        raise NotApplicable("no GPU task is mapped to the backward phase: gradients cannot be placed")
    ready, nbytes, st = [], [], []
    frac = np.cumsum(sizes) / max(int(sizes.sum()), 1)
    for s in sorted_unique(steps[bwd]).tolist():  # iterations: a handful
        v = np.nonzero(bwd & (steps == s))[0]
        v = v[np.argsort(graph.position_ns[v], kind="stable")]
        cum = np.cumsum(graph.dur_ns[v]) / max(int(graph.dur_ns[v].sum()), 1)
        j = np.minimum(np.searchsorted(cum, frac - 1e-12), len(v) - 1)
        ready.append(v[j])
        nbytes.append(sizes)
        st.append(np.full(len(sizes), s))
    return np.concatenate(ready), np.concatenate(nbytes), np.concatenate(st)


#: most pieces (slices, buckets) one iteration's gradient bytes may be cut into: each piece is an
#: array row or an inserted graph task, so a tiny size (``slice_mb=1e-9``) would allocate
#: gigabytes or run for hours; a guard on the input, not a model constant
MAX_PIECES = 1 << 20


def check_pieces(total_bytes: int, piece_bytes: float, what: str) -> int:
    """The number of pieces of ``piece_bytes`` that ``total_bytes`` is cut into; raises
    :class:`~daydream.errors.UsageError` (exit 2) when it exceeds :data:`MAX_PIECES` (``what``:
    the option and parameter, e.g. ``"p3: slice_mb"``)."""
    n = int(np.ceil(total_bytes / piece_bytes)) if total_bytes > 0 else 0
    if n > MAX_PIECES:
        raise UsageError(f"--opt {what}={piece_bytes / MIB:g} cuts {total_bytes:,} bytes of one iteration into {n:,} pieces "
                         f"(at most {MAX_PIECES:,}); give a larger size")
    return n


def buckets(ready: np.ndarray, nbytes: np.ndarray, bucket_bytes: float, first_bytes: float) -> tuple[np.ndarray, np.ndarray]:
    """Gradients (production order) grouped as DDP does: a bucket closes once it holds at least
    its capacity (the first ``first_bytes``, then ``bucket_bytes``). Returns per bucket (the ready
    node of its last gradient, its bytes)."""
    out_r, out_b = [], []
    cap, acc = first_bytes, 0
    for r, b in zip(ready.tolist(), nbytes.tolist()):  # gradients of one iteration: hundreds
        acc += b
        if acc >= cap:
            out_r.append(r)
            out_b.append(acc)
            acc, cap = 0, bucket_bytes
    if acc:
        out_r.append(int(ready[-1]))
        out_b.append(acc)
    return np.asarray(out_r, np.int64), np.asarray(out_b, np.int64)


def first_after(graph: TaskGraph, after: int, phases=(3,), exclude: np.ndarray | None = None) -> int:
    """The first GPU task launched after ``after`` (by position) on its device whose mapped phase
    is in ``phases`` (default: optimizer), else the first GPU task launched after it that is not
    backward; collectives (or ``exclude``, a node mask) never count; -1 none."""
    gpu = (graph.node_kind != NODE_CPU) & (graph.position_ns > graph.position_ns[after]) & (graph.device == graph.device[after])
    gpu &= ~(kernel_is_collective(graph) if exclude is None else exclude)
    mp = graph.mapping
    for cand in ((gpu & np.isin(mp.phase, phases)) if mp is not None else gpu, gpu & ((mp.phase != 2) if mp is not None else gpu)):
        v = np.nonzero(cand)[0]
        if len(v):
            return int(v[np.argmin(graph.position_ns[v])])
    return -1


def insert_allreduces(graph: TaskGraph, ready: np.ndarray, dur_ns: np.ndarray, waiter: np.ndarray,
                      names: list[str] | None = None) -> tuple[TaskGraph, np.ndarray]:
    """Insert one all-reduce kernel per bucket on a new communication stream.

    Bucket k (in the order given) is launched by a new call of duration 0 right after the call
    that launched ``ready[k]`` (same thread, no CPU time: DDP's hook; after calls inserted there
    before, by this or an earlier what-if), waits for ``ready[k]`` (a cross-stream wait, +G) and
    the stream's previous all-reduce, and lasts ``dur_ns[k]``. ``waiter[k] >= 0``: that GPU task
    waits for bucket k (the optimizer step). The emulator equivalent: ``EventRecord``,
    ``StreamWaitEvent``, ``Launch`` after the launch of ``ready[k]`` (daydream/testing/ddp_programs.py).
    All buckets are inserted at once (:func:`daydream.transform.insert_launches`); the graph is
    the one :func:`insert_allreduces_one_by_one` makes.

    Returns:
        (new graph, the inserted all-reduce nodes).
    """
    ready = np.asarray(ready, np.int64)
    lch = graph.launch[ready]
    if (lch < 0).any():  # a ready task without its launching call: the one-by-one path says what it does
        return insert_allreduces_one_by_one(graph, ready, dur_ns, waiter, names)
    first = int(ready[0])
    g, lane = add_stream(graph, pid=int(graph.pid[lch[0]]), device=int(graph.device[first]))
    nxt, row, dur = g.lane_next, g.row, g.dur_ns
    anchor = np.empty(len(ready), np.int64)
    for k, a in enumerate(lch.tolist()):  # buckets: tens per iteration; skip calls inserted there before
        while nxt[a] >= 0 and row[nxt[a]] < 0 and dur[nxt[a]] == 0:
            a = int(nxt[a])
        anchor[k] = a
    g, nodes = insert_launches(g, lane=lane, anchor=anchor, like=ready, dur_ns=np.asarray(dur_ns),
                               names=list(names) if names else [ALLREDUCE_NAME] * len(ready), call_name="ncclAllReduce (inserted)")
    w = np.asarray(waiter) >= 0
    if w.any():
        g = add_edges(g, nodes[w], np.asarray(waiter)[w], EdgeKind.XSTREAM)
    return _device_syncs_wait(g, nodes), nodes


def insert_allreduces_one_by_one(graph: TaskGraph, ready: np.ndarray, dur_ns: np.ndarray, waiter: np.ndarray,
                      names: list[str] | None = None) -> tuple[TaskGraph, np.ndarray]:
    """:func:`insert_allreduces` made one insertion at a time (the reference the tests compare the
    batched insertion with).

    Bucket k (in the order given) is launched by a new call of duration 0 right after the call
    that launched ``ready[k]`` (same thread, no CPU time: DDP's hook), waits for ``ready[k]`` (a
    cross-stream wait, +G) and the stream's previous all-reduce, and lasts ``dur_ns[k]``.
    ``waiter[k] >= 0``: that GPU task waits for bucket k (the optimizer step). The emulator
    equivalent: ``EventRecord``, ``StreamWaitEvent``, ``Launch`` after the launch of ``ready[k]``
    (daydream/testing/ddp_programs.py).

    Returns:
        (new graph, the inserted all-reduce nodes).
    """
    first = int(ready[0])
    g, lane = add_stream(graph, pid=int(graph.pid[graph.launch[first]]), device=int(graph.device[first]))
    nodes = []
    for k in range(len(ready)):  # buckets: tens per iteration
        r = int(ready[k])
        lch = int(g.launch[r])
        # after the launching call and after calls inserted there before (buckets ready at one kernel)
        after = lch
        while g.lane_next[after] >= 0 and g.row[g.lane_next[after]] < 0 and g.dur_ns[g.lane_next[after]] == 0:
            after = int(g.lane_next[after])
        g, call = insert(g, after=after, dur_ns=0, name="ncclAllReduce (inserted)", kind="cpu", gap_ns=0)
        g, v = insert_on_stream(g, lane=lane, like=r, dur_ns=int(dur_ns[k]), name=names[k] if names else ALLREDUCE_NAME, launch=call, preds=[r])
        nodes.append(v)
    nodes = np.asarray(nodes, np.int64)
    w = np.asarray(waiter) >= 0
    if w.any():
        g = add_edges(g, nodes[w], np.asarray(waiter)[w], EdgeKind.XSTREAM)
    return _device_syncs_wait(g, nodes), nodes


def _device_syncs_wait(g: TaskGraph, nodes: np.ndarray) -> TaskGraph:
    """A device synchronize of the process waits for the last all-reduce launched before it (it
    waits for every stream of the device, the communication stream too; docs/model.md)."""
    pid = int(g.pid[g.launch[nodes[0]]])
    ds = np.nonzero((cpu_roles(g) == ApiRole.DEVICE_SYNC) & (g.pid == pid))[0]
    if not len(ds):
        return g
    pos = g.position_ns[g.launch[nodes]]
    j = np.searchsorted(pos, g.position_ns[ds], side="left") - 1
    ok = j >= 0
    return add_edges(g, nodes[j[ok]], ds[ok], EdgeKind.WAIT) if ok.any() else g


def comm_collectives(graph: TaskGraph, sized: bool = True) -> Collectives:
    """The collectives of ``graph`` (:func:`daydream.graph.collectives.find_collectives`).

    Raises:
        NotApplicable: the trace has none, or (``sized``) none with a message size.
    """
    c = find_collectives(graph)
    if not len(c):
        raise NotApplicable("the trace has no NCCL/RCCL collective to re-cost (use ddp to add data parallelism)")
    if sized and not (c.size_bytes >= 0).any():
        raise NotApplicable(f"{len(c):,} collectives, none with a message size in the trace "
                            "(needs Kineto collective args or record_shapes)")
    return c


def trace_fit(graph: TaskGraph, net: cm.Network, path: str = "") -> tuple[cf.CommFit | None, str]:
    """The collective-cost fit the what-ifs cost their collectives with
    (:func:`daydream.costmodel.comm_fit.collective_ns`): the ``daydream-comm-fit --json`` document
    at ``path`` where one is given (e.g. a job's transfers), else a fit of ``graph``'s own sized
    collectives (their durations: one rank's trace, so waiting for peers is included, an upper
    bound), else None (the presets of ``net``). Returns (fit, in words).

    Raises:
        UsageError: ``path`` cannot be read or is not such a document (one line naming it).
    """
    if path:
        doc = read_comm_fit(path)
        try:
            return cf.from_json(doc, net, f"fit={path}"), f"the fit in {path}"
        except ValueError as e:
            raise UsageError(str(e)) from None
    c = find_collectives(graph)
    ok = (c.size_bytes > 0) & (c.group_size > 1) & (c.dur_ns > 0) if len(c) else np.zeros(0, bool)
    if not ok.any():
        return None, "no fit (the trace has no sized collective)"
    op = c.op[ok].astype(np.int64)  # graph.collectives.Op codes are costmodel.comm's
    f = cf.fit(op, c.size_bytes[ok], c.group_size[ok], c.dur_ns[ok], net, "kernel duration (one rank: includes waiting for peers)")
    return f, "the trace's own collectives (durations, with waits: an upper bound)"
