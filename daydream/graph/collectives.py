"""Collectives in a task graph: which GPU tasks are NCCL/RCCL collectives, what they moved, and
the bandwidth they achieved.

A collective is found by its kernel name (``ncclKernel_AllReduce_RING_LL_Sum_float``,
``ncclDevKernel_AllGather_RING_LL(...)``, ``ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t``; RCCL keeps
NCCL's names): the operation, the algorithm (RING, TREE, COLLNET_*, NVLS*, PAT) and the protocol
(LL, LL128, SIMPLE). Its message comes from the trace's args (:mod:`daydream.formats.comm_args`),
in this order:

1. the kernel's own args (PyTorch >= 2.1 copies ``Collective name``, ``In msg nelems``,
   ``Out msg nelems``, ``Group size``, ``dtype`` onto the kernel), joined by correlation id;
2. the innermost CPU op or annotation enclosing the kernel's launching call on its thread that
   carries a message: ``record_param_comms`` (same args) or a ``nccl:*`` annotation with
   ``Input Dims``/``Input type`` (PyTorch 1.x with ``record_shapes``), joined by External id;
3. none: the size is unknown and counted ("collective without a message size in the trace").

The operation named by the args wins over the kernel's (an all-to-all runs as ``SendRecv``
kernels). The group size is the args' ``Group size``, else the trace's ``distributedInfo``
``world_size`` (counted as taken from there), else unknown.

Size and bandwidth follow nccl-tests (``doc/PERFORMANCE.md``, github.com/NVIDIA/nccl-tests): the
size ``S`` of a collective is the larger of its input and output message in bytes (all-reduce,
broadcast, send/recv: the buffer; all-gather: the gathered output; reduce-scatter: the input;
all-to-all: the whole send buffer), ``algbw = S / t`` and ``busbw = algbw * factor(n)`` with
``factor`` = ``2(n-1)/n`` for all-reduce, ``(n-1)/n`` for all-gather, reduce-scatter and
all-to-all, ``1`` for broadcast, reduce and send/recv. ``t`` is the kernel's recorded duration,
which includes waiting for the peers: the achieved bandwidth is a lower bound of what the links
did.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

import numpy as np

from ..util.arrays import sorted_unique, unique_inverse
from ..events.table import Kind
from ..formats.comm_args import CommArgs
from .facts import CpuOps
from .model import NODE_CPU, TaskGraph
from ..mapping.rules import COMM_KERNEL_PATTERN


class Op(enum.IntEnum):
    """Collective operation (column ``op``)."""

    UNKNOWN = 0
    ALL_REDUCE = 1
    ALL_GATHER = 2
    REDUCE_SCATTER = 3
    ALL_TO_ALL = 4
    BROADCAST = 5
    REDUCE = 6
    SEND_RECV = 7


class Algo(enum.IntEnum):
    """NCCL algorithm in the kernel name (column ``algo``)."""

    UNKNOWN = 0
    RING = 1
    TREE = 2
    COLLNET = 3
    NVLS = 4
    PAT = 5


class SizeSource(enum.IntEnum):
    """Where a collective's message size came from (column ``size_source``)."""

    NONE = 0
    KERNEL_ARGS = 1
    CPU_OP_ARGS = 2  #: record_param_comms
    ANNOTATION_SHAPES = 3  #: nccl:* annotation with Input Dims
    INSERTED = 4  #: inserted by a what-if (size in its name)


OP_LABELS = {Op.UNKNOWN: "unknown", Op.ALL_REDUCE: "all-reduce", Op.ALL_GATHER: "all-gather",
             Op.REDUCE_SCATTER: "reduce-scatter", Op.ALL_TO_ALL: "all-to-all", Op.BROADCAST: "broadcast",
             Op.REDUCE: "reduce", Op.SEND_RECV: "send/recv"}

_KERNEL_RX = re.compile(
    r"(?:nccl|rccl)(?:Dev)?Kernel_(AllReduce|AllGather|ReduceScatter|AllToAll|Broadcast|Reduce|SendRecv|Send|Recv)"
    r"(?:_(RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|COLLNET|NVLS_TREE|NVLS|PAT))?(?:_(LL128|LL|SIMPLE))?")
_KERNEL_OP = {"AllReduce": Op.ALL_REDUCE, "AllGather": Op.ALL_GATHER, "ReduceScatter": Op.REDUCE_SCATTER,
              "AllToAll": Op.ALL_TO_ALL, "Broadcast": Op.BROADCAST, "Reduce": Op.REDUCE, "SendRecv": Op.SEND_RECV,
              "Send": Op.SEND_RECV, "Recv": Op.SEND_RECV}
_ALGO = {"RING": Algo.RING, "TREE": Algo.TREE, "COLLNET_DIRECT": Algo.COLLNET, "COLLNET_CHAIN": Algo.COLLNET,
         "COLLNET": Algo.COLLNET, "NVLS": Algo.NVLS, "NVLS_TREE": Algo.NVLS, "PAT": Algo.PAT}
#: prefixes of a collective's name with non-letters removed and lower-cased (``Collective name``
#: values of ``saveNcclMeta`` and ``nccl:*`` annotation names)
_NAME_OP = (("allreduce", Op.ALL_REDUCE), ("allgather", Op.ALL_GATHER), ("reducescatter", Op.REDUCE_SCATTER),
            ("alltoall", Op.ALL_TO_ALL), ("broadcast", Op.BROADCAST), ("reduce", Op.REDUCE),
            ("send", Op.SEND_RECV), ("recv", Op.SEND_RECV), ("barrier", Op.ALL_REDUCE))


def bus_factor(op: np.ndarray | int, n: np.ndarray | int) -> np.ndarray:
    """nccl-tests' bus-bandwidth factor per (op, group size n): 2(n-1)/n all-reduce, (n-1)/n
    all-gather / reduce-scatter / all-to-all, 1 broadcast / reduce / send-recv; NaN for an
    unknown op or n < 1. Shapes broadcast; float64."""
    op = np.asarray(op)
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(n >= 1, (n - 1) / n, np.nan)
    out = np.full(np.broadcast(op, n).shape, np.nan)
    out = np.where(op == Op.ALL_REDUCE, 2 * frac, out)
    out = np.where(np.isin(op, (Op.ALL_GATHER, Op.REDUCE_SCATTER, Op.ALL_TO_ALL)), frac, out)
    out = np.where(np.isin(op, (Op.BROADCAST, Op.REDUCE, Op.SEND_RECV)) & (n >= 1), 1.0, out)
    return out


def op_of_name(name: str) -> Op:
    """The operation a ``Collective name`` / ``nccl:*`` annotation names (``Op.UNKNOWN`` none)."""
    key = re.sub(r"[^a-z]", "", name.lower().removeprefix("nccl:").removeprefix("c10d::"))
    for p, op in _NAME_OP:
        if key.startswith(p):
            return op
    return Op.UNKNOWN


def parse_kernel_name(name: str) -> tuple[Op, Algo, str]:
    """(op, algorithm, protocol) from an NCCL/RCCL kernel name; UNKNOWN / "" where it says none."""
    m = _KERNEL_RX.search(name)
    if m is None:
        return Op.UNKNOWN, Algo.UNKNOWN, ""
    return _KERNEL_OP[m.group(1)], _ALGO.get(m.group(2) or "", Algo.UNKNOWN), m.group(3) or ""


@dataclass
class Collectives:
    """The collectives of a graph, one row each, ordered by node id (all arrays one length):

    node (int64 graph node), op (uint8 :class:`Op`), algo (uint8 :class:`Algo`), proto (object
    str), size_bytes (int64, nccl-tests' ``S``; -1 unknown), group_size (int64, -1 unknown),
    size_source (uint8 :class:`SizeSource`), dur_ns (int64, recorded), algbw / busbw (float64
    bytes per second; NaN where the size or group size is unknown or the duration is 0).
    ``counts``: what was found and what could not be read, by reason.
    """

    node: np.ndarray
    op: np.ndarray
    algo: np.ndarray
    proto: np.ndarray
    size_bytes: np.ndarray
    group_size: np.ndarray
    size_source: np.ndarray
    dur_ns: np.ndarray
    algbw: np.ndarray
    busbw: np.ndarray
    counts: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.node)

    def summary(self) -> dict:
        """Per operation: count, count with a known size, bytes, and the median / best bus
        bandwidth (GB/s) over those with one; plus the counts."""
        out = {}
        for o in sorted_unique(self.op).tolist():
            m = self.op == o
            ok = m & np.isfinite(self.busbw)
            bw = self.busbw[ok] / 1e9
            out[OP_LABELS[Op(o)]] = {
                "count": int(m.sum()), "sized": int(np.count_nonzero(m & (self.size_bytes >= 0))),
                "bytes": int(self.size_bytes[m & (self.size_bytes >= 0)].sum()),
                "time_ns": int(self.dur_ns[m].sum()),
                "busbw_median_GBps": float(np.median(bw)) if len(bw) else None,
                "busbw_max_GBps": float(bw.max()) if len(bw) else None}
        return out


def find_collectives(graph: TaskGraph, args: CommArgs | None = None) -> Collectives:
    """Detect the collectives of ``graph`` (module docstring).

    Args:
        graph: a built graph; its ``facts`` (:class:`~daydream.graph.facts.TraceFacts`) supply the
            collective args, unless ``args`` is given, and the world size.
        args: the trace's collective args (:func:`~daydream.formats.comm_args.read_comm_args`).

    Returns:
        :class:`Collectives` (empty when the graph has no NCCL/RCCL kernel; the args are then not
        read).
    """
    gpu = np.nonzero((graph.node_kind == Kind.KERNEL))[0]
    counts: dict[str, int] = {}
    if len(gpu):  # each distinct kernel name matched and parsed once
        uid, inv = unique_inverse(graph.name_id[gpu])
        uniq = [graph.names[i] for i in uid.tolist()]
        rx = re.compile(COMM_KERNEL_PATTERN)
        hit = np.fromiter((rx.search(s) is not None for s in uniq), bool, len(uniq))
        parsed = [parse_kernel_name(s) if h else (Op.UNKNOWN, Algo.UNKNOWN, "") for s, h in zip(uniq, hit.tolist())]
        sel = hit[inv]
        node, inv = gpu[sel], inv[sel]
    else:
        node, parsed, inv = gpu, [], gpu
    k = len(node)
    op = np.array([int(p[0]) for p in parsed], np.uint8)[inv] if k else np.zeros(0, np.uint8)
    algo = np.array([int(p[1]) for p in parsed], np.uint8)[inv] if k else np.zeros(0, np.uint8)
    proto = np.array([p[2] for p in parsed], dtype=object)[inv] if k else np.zeros(0, object)
    size = np.full(k, -1, np.int64)
    group = np.full(k, -1, np.int64)
    src = np.zeros(k, np.uint8)
    if k:
        counts["collectives (NCCL/RCCL kernels)"] = k
        facts = graph.facts
        if args is None and facts is not None:
            args = facts.comm_args
        if args is not None and args.reason:
            counts["collective args not readable (sizes unknown)"] = 1
        if args is not None and len(args):
            _sizes_from_args(graph, node, args, op, size, group, src)
        _sizes_of_inserted(graph, node, size, group, src)
        ws = facts.world_size if facts is not None else -1
        fill = (group < 0) & (ws > 0)
        group[fill] = ws
        if fill.any():
            counts["collective group size from distributedInfo world_size"] = int(fill.sum())
        if (size < 0).any():
            counts["collective without a message size in the trace"] = int(np.count_nonzero(size < 0))
        if (group < 0).any():
            counts["collective without a group size in the trace"] = int(np.count_nonzero(group < 0))
    dur = graph.dur_ns[node].astype(np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        algbw = np.where((size >= 0) & (dur > 0), size / np.maximum(dur, 1) * 1e9, np.nan)
    busbw = algbw * bus_factor(op, np.where(group > 0, group, 0))
    return Collectives(node, op, algo, proto, size, group, src, dur, algbw, busbw, counts)


def _sizes_from_args(graph: TaskGraph, node: np.ndarray, a: CommArgs, op: np.ndarray, size: np.ndarray,
                     group: np.ndarray, src: np.ndarray) -> None:
    """Fill ``size``/``group``/``src`` (and ``op`` where the args name it) in place: from the
    kernels' own args by correlation, then from the enclosing sized CPU op / annotation."""
    msg = np.where(np.maximum(a.in_nelems, a.out_nelems) >= 0, np.maximum(a.in_nelems, a.out_nelems), a.dims_nelems)
    nbytes = np.where((msg >= 0) & (a.elem_bytes > 0), msg * a.elem_bytes, -1)
    a_op = np.fromiter((op_of_name(c or n) for c, n in zip(a.collective, a.name)), np.uint8, len(a))
    sized = (nbytes >= 0) & (a_op != Op.UNKNOWN)
    # 1. the kernel's own args (GPU events carry args.correlation)
    kern = sized & (a.corr >= 0) & (a.collective != "")
    corr = graph.correlation[node]
    if kern.any():
        o = np.argsort(a.corr[kern], kind="stable")
        kc, kr = a.corr[kern][o], np.nonzero(kern)[0][o]
        j = np.clip(np.searchsorted(kc, corr), 0, len(kc) - 1)
        hit = (corr >= 0) & (kc[j] == corr)
        _take(hit, kr[j], nbytes, a_op, a.group_size, SizeSource.KERNEL_ARGS, op, size, group, src)
    # 2. the innermost sized CPU op / annotation around the launching call (joined by External id)
    cpu = sized & (a.ext >= 0) & (a.corr < 0)
    todo = (size < 0) & (graph.launch[node] >= 0)
    if cpu.any() and todo.any() and graph.facts is not None:
        ops = graph.facts.ops
        rows, arow = _rows_of_args(ops, graph.facts.names, a, np.nonzero(cpu)[0])
        if len(rows):
            enc = _enclosing(graph, ops, node[todo], rows)
            ok = enc >= 0
            idx = np.nonzero(todo)[0][ok]
            ar = arow[enc[ok]]
            is_ann = a.in_nelems[ar] < 0
            for flag, source in ((~is_ann, SizeSource.CPU_OP_ARGS), (is_ann, SizeSource.ANNOTATION_SHAPES)):
                h = np.zeros(len(node), bool)
                h[idx[flag]] = True
                rr = np.zeros(len(node), np.int64)
                rr[idx[flag]] = ar[flag]
                _take(h, rr, nbytes, a_op, a.group_size, source, op, size, group, src)


_INSERTED_RX = re.compile(r"\(inserted, (\d+) B, n=(\d+)\)$")


def _sizes_of_inserted(graph: TaskGraph, node: np.ndarray, size, group, src) -> None:
    """Collectives inserted by a what-if carry their size and group in their name
    (``... (inserted, 26214400 B, n=8)``, :func:`daydream.optimizations.comm_common.allreduce_name`)."""
    ins = np.nonzero(graph.row[node] < 0)[0]
    for i in ins.tolist():  # inserted collectives: tens
        m = _INSERTED_RX.search(graph.names[int(graph.name_id[node[i]])])
        if m:
            size[i], group[i], src[i] = int(m.group(1)), int(m.group(2)), SizeSource.INSERTED


def _take(hit, arow, nbytes, a_op, a_group, source, op, size, group, src) -> None:
    size[hit] = nbytes[arow[hit]]
    op[hit] = a_op[arow[hit]]
    group[hit] = a_group[arow[hit]]
    src[hit] = source


def _rows_of_args(ops: CpuOps, names: list, a: CommArgs, sel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CPU ops and ranges (indices into ``ops``) whose External id and name (``names``) match args
    rows ``sel``: (op indices, args row of each)."""
    cand = np.nonzero(np.isin(ops.external_id, a.ext[sel]))[0]
    if not len(cand):
        return cand, cand
    tnames = np.asarray(names, dtype=object)[ops.name_id[cand]]
    key_t = np.array([f"{e}\x00{n}" for e, n in zip(ops.external_id[cand].tolist(), tnames)], dtype=object)
    key_a = np.array([f"{e}\x00{n}" for e, n in zip(a.ext[sel].tolist(), a.name[sel])], dtype=object)
    o = np.argsort(key_a)
    j = np.clip(np.searchsorted(key_a[o], key_t), 0, len(o) - 1)
    ok = key_a[o][j] == key_t
    return cand[ok], sel[o][j][ok]


def _enclosing(graph: TaskGraph, ops: CpuOps, kernels: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Per kernel: the index into ``rows`` (indices into ``ops``) of the innermost (latest-starting)
    op or range enclosing its launching call on the call's thread, -1 none."""
    call = graph.launch[kernels]
    out = np.full(len(kernels), -1, np.int64)
    qp, qt = graph.pid[call], graph.tid[call]
    qs, qe = graph.rec_start_ns[call], graph.rec_end_ns[call]
    rp, rt, rs, re_ = ops.pid[rows], ops.tid[rows], ops.start_ns[rows], ops.end_ns[rows]
    for p, t in set(zip(qp.tolist(), qt.tolist())):  # threads launching collectives: a handful
        rm = np.nonzero((rp == p) & (rt == t))[0]
        qm = np.nonzero((qp == p) & (qt == t))[0]
        if not len(rm):
            continue
        o = rm[np.argsort(rs[rm], kind="stable")]
        # ranges on one thread nest; walk back from the latest start <= the call's start
        j = np.searchsorted(rs[o], qs[qm], side="right") - 1
        for _ in range(4):  # at most a few nested levels (record_param_comms > nccl:* > ...)
            ok = (j >= 0) & (out[qm] < 0)
            jj = np.maximum(j, 0)
            enc = ok & (re_[o[jj]] >= qe[qm])
            out[qm[enc]] = o[jj[enc]]
            j = np.where(enc, -1, j - 1)
    return out


def kernel_is_collective(graph: TaskGraph) -> np.ndarray:
    """Mask (length ``graph.n``) of the GPU tasks named as NCCL/RCCL kernels."""
    out = np.zeros(graph.n, bool)
    m = graph.node_kind != NODE_CPU
    if m.any():
        uid, inv = unique_inverse(graph.name_id[m])  # each distinct name matched once
        rx = re.compile(COMM_KERNEL_PATTERN)
        hit = np.fromiter((rx.search(graph.names[i]) is not None for i in uid.tolist()), bool, len(uid))
        out[m] = hit[inv]
    return out
