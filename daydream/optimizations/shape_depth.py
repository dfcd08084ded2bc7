"""Depth for the shape what-if (``layers=N``): the repeating block of the layer mapping and its
copies with their CPU launches; and the launches of the step's kernels (which op, which recorded
shapes) that both depth and width read."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..costmodel.kernel_model import match_launches, work_item_grid
from ..errors import NotApplicable
from ..events.table import Kind
from ..graph import NODE_CPU, EdgeKind
from ..transform import insert_tasks
from ..util.display import terminal_text


@dataclass(frozen=True)
class Block:
    """A repeating block of the step: ``pattern`` (its layer path with the index as ``#``),
    ``count`` occurrences, ``nodes`` (node ids of the last occurrence, in visiting order), its
    ``size``, and how many occurrences run the same tasks as the last."""

    pattern: str
    count: int
    nodes: np.ndarray
    size: int
    same: int  #: occurrences that run the same tasks as the last one (the last one included)


def repeating_block(graph) -> Block:
    """The repeating block (module docstring, step 5): of the layer mapping's paths
    (``Net_0/Encoder_0/Layer_3/...``), the component whose index varies (``Layer_#``) covering the
    most tasks (ties: the shallower), whose occurrences are sequences of tasks (kind and name, in
    visiting order) at least half of which are the last one's.

    Raises:
        NotApplicable: no layer mapping, no indexed component occurring twice, or one whose
            occurrences mostly differ from the last (the repeat unit is larger: not guessed).
    """
    m = graph.mapping
    if m is None or not (m.layer_id >= 0).any():
        raise NotApplicable("no layer mapping (nn.Module ranges, NVTX layers): the repeating block is not known")
    labels = m.labels
    cands: dict = {}  # (pattern) -> {label id: index}
    for lid, lab in enumerate(labels):  # distinct labels: a few thousand at most
        parts = str(lab).split("/")
        for d, part in enumerate(parts):
            x = _INDEXED.match(part)
            if x:
                key = "/".join(parts[:d] + [x.group(1) + "_#"])
                cands.setdefault(key, {})[lid] = int(x.group(2))
    pos = np.empty(graph.n, np.int64)
    pos[graph.order] = np.arange(graph.n)
    lid_of = m.layer_id
    best = None
    for key, idx in cands.items():
        if len(set(idx.values())) < 2:
            continue
        occ = np.full(len(labels), -1, np.int64)
        occ[list(idx)] = list(idx.values())
        o = np.where(lid_of >= 0, occ[np.maximum(lid_of, 0)], -1)
        nodes = np.nonzero(o >= 0)[0]
        nodes = nodes[np.lexsort((pos[nodes], o[nodes]))]
        _, starts = np.unique(o[nodes], return_index=True)
        seqs = np.split(nodes, starts[1:])
        sig = [np.stack([graph.node_kind[q].astype(np.int64), graph.name_id[q].astype(np.int64)]) for q in seqs]
        same = sum(x.shape == sig[-1].shape and np.array_equal(x, sig[-1]) for x in sig)  # the last one included
        score = (len(nodes), -key.count("/"))
        if best is None or score > best[0]:
            best = (score, key, len(seqs), seqs[-1], same)
    if best is None:
        raise NotApplicable("no repeating block: no indexed layer (Block_0, Block_1, ...) occurs twice or more")
    _, key, count, last, same = best
    if same * 2 < count:
        raise NotApplicable(f"no repeating block: the indexed layer that holds most tasks, {terminal_text(key, 80)}, runs other "
                            f"tasks in most of its {count} occurrences (only {same} run the last one's)")
    return Block(key, count, last, len(last), same)


def deepen(graph, block: Block, copies: int) -> tuple:
    """``graph`` with ``copies`` more occurrences of ``block`` after its last one: each of its runs
    (consecutive tasks of one thread or stream) repeated right after the run, CPU launches with
    their kernels (launch edges), cross-stream and blocking waits inside the block onto the copies
    (from outside: onto the same producer); the launch queue's edges are rebuilt. (new graph,
    hand-over edges of the block not copied.)"""
    nodes = block.nodes
    inb = np.full(graph.n, -1, np.int64)
    inb[nodes] = np.arange(len(nodes))
    lp = graph.lane_prev
    # runs: a node starts a new run unless its lane predecessor is the previous node of the block on its lane
    run_last = {}  # lane -> last node of the current run
    ends = np.zeros(len(nodes), bool)
    last_of_run = np.empty(len(nodes), np.int64)
    run_id = np.empty(len(nodes), np.int64)
    runs: list = []
    for j, v in enumerate(nodes.tolist()):  # one block: a few hundred tasks
        lane = int(graph.lane[v])
        r = run_last.get(lane)
        if r is not None and lp[v] == runs[r][-1]:
            runs[r].append(v)
        else:
            run_last[lane] = len(runs)
            runs.append([v])
        run_id[j] = run_last[lane]
    for r in runs:
        ends[inb[r[-1]]] = True
        last_of_run[inb[np.asarray(r)]] = r[-1]
    ra_src, ra_dst, kind = graph.edge_src, graph.edge_dst, graph.edge_kind
    waits = np.isin(kind, (EdgeKind.XSTREAM, EdgeKind.WAIT)) & (inb[ra_dst] >= 0)
    other = (kind == EdgeKind.HANDOVER) & ((inb[ra_dst] >= 0) | (inb[ra_src] >= 0))  # (queue edges: rebuilt by the insertion)
    k_n = len(nodes)
    n = graph.n
    after, launch, preds = [], [], []
    prev_copy_of_run: dict = {}
    for c in range(copies):
        base = n + c * k_n
        for j, v in enumerate(nodes.tolist()):
            r = int(run_id[j])
            if runs[r][0] == v:  # after the run's last node (the original, or the previous copy's)
                after.append(prev_copy_of_run.get(r, runs[r][-1]))
            else:
                after.append(base + inb[lp[v]])
            if ends[j]:
                prev_copy_of_run[r] = base + j
            lc = graph.launch[v] if graph.node_kind[v] != NODE_CPU else -1
            launch.append(base + inb[lc] if lc >= 0 and inb[lc] >= 0 else -1)
    for e in np.nonzero(waits)[0].tolist():
        s_, d_ = int(ra_src[e]), int(ra_dst[e])
        for c in range(copies):
            preds.append((c * k_n + int(inb[d_]), n + c * k_n + int(inb[s_]) if inb[s_] >= 0 else s_))
    kinds = np.where(graph.node_kind[nodes] == NODE_CPU, "cpu", np.where(graph.node_kind[nodes] == Kind.KERNEL, "kernel",
                     np.where(graph.node_kind[nodes] == Kind.MEMCPY, "memcpy", "memset")))
    g, _ = insert_tasks(graph, after=np.asarray(after, np.int64), dur_ns=np.tile(graph.dur_ns[nodes], copies),
                        names=[graph.names[i] for i in graph.name_id[nodes].tolist()] * copies, kind=list(kinds) * copies,
                        like=np.tile(nodes, copies), launch=np.asarray(launch, np.int64),
                        gap_ns=np.tile(graph.gap_ns[nodes], copies), preds=sorted(preds))
    return g, int(other.sum())


# ------------------------------------------------------------------------------- depth -------
_INDEXED = re.compile(r"^(.*?)_?(\d+)$")


@dataclass(frozen=True)
class _Launches:
    """The kernels of a graph with their launch data: ``node`` (kernel node ids), ``grid`` (in
    blocks: a HIP work-item grid divided by the block), ``block``, ``regs``, ``smem`` ((n, 3) /
    (n,), -1 unknown), ``shape`` (index into ``shapes``, -1 none), ``op`` (launching op name per
    kernel, "" unknown) and ``shapes`` (distinct (op name, Input Dims, Input type))."""

    node: np.ndarray
    grid: np.ndarray
    block: np.ndarray
    regs: np.ndarray
    smem: np.ndarray
    shape: np.ndarray
    op: list
    shapes: list


def launches(graph) -> _Launches:
    """:class:`_Launches` of ``graph`` (columnar: look-ups by the launch data's rows)."""
    data = graph.facts.launch if graph.facts is not None else None
    kern = np.nonzero(graph.node_kind == Kind.KERNEL)[0]
    n = len(kern)
    grid, block = np.full((n, 3), -1, np.int64), np.full((n, 3), -1, np.int64)
    regs, smem, shape = np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64)
    if data is None or len(data) == 0:
        return _Launches(kern, grid, block, regs, smem, shape, [""] * n, [])
    rows = match_launches(graph, data)[kern]
    has = rows >= 0
    r = rows[has]
    grid[has], block[has], regs[has], smem[has] = data.grid[r], data.block[r], data.regs[r], data.smem[r]
    wi = work_item_grid(graph)[kern] & (grid[:, 0] > 0) & (block[:, 0] > 0)
    grid[wi] = -(-grid[wi] // np.maximum(block[wi], 1))  # work-items -> blocks
    if len(data.shape_id) == len(data):
        shape[has] = data.shape_id[r]
    ops = np.asarray(data.op, dtype=object)
    op = np.full(n, "", dtype=object)
    op[has] = ops[r]
    return _Launches(kern, grid, block, regs, smem, shape, op.tolist(), list(data.shapes))
