"""Array passes of the builder fused into one compiled pass each where numba is there: the node
columns gathered from the table (stages 1-3), and the edge list's order edges (lane and launch
edges) ahead of the queue and dependency edges."""

from __future__ import annotations

import numpy as np

from ...util import jit
from ..edges import EdgeKind, Origin
from .._arrays import count
from ..model import concat_edges
from .tasks import Nodes, node_arrays

#: :func:`node_columns` runs its compiled pass from this many nodes ("auto")
NODE_COLUMNS_MIN = 50_000


def node_columns(table, cpu, gpu_rows: np.ndarray, g_launch: np.ndarray, only: int, counts: dict[str, int],
                 method: str = "auto") -> tuple[Nodes, tuple]:
    """The node arrays (:func:`daydream.graph.build.tasks.node_arrays`: CPU nodes ``cpu.cpu_rows``, then
    GPU nodes ``gpu_rows``, launched by nodes ``g_launch`` (-1 none); ``only``: the only
    API-calling process, or -1) and the node columns the builder reads from the table:
    (rec_start, rec_end, position, correlation, name_id: int64 (n,); copy_kind: uint8 (n,)), the
    position of a launched task its launch's recorded start (else its own); counts the GPU
    tasks recorded starting before their launch. One compiled pass (:func:`_node_columns_kernel`)
    from :data:`NODE_COLUMNS_MIN` nodes when numba is there ("auto"; "compiled" whatever the
    size, "python" the kernel uncompiled, "numpy" never), else numpy gathers; the same answers.
    The compiled pass also makes the lane columns :func:`daydream.graph.build.tasks.lanes_and_order`
    reads (its ``columns``), the seventh column (None from the numpy gathers)."""
    cpu_rows = cpu.cpu_rows
    n_cpu, n = len(cpu_rows), len(cpu_rows) + len(gpu_rows)
    fn = jit.kernel_for(_node_columns_kernel, n, NODE_COLUMNS_MIN, method)
    if fn is None:
        nodes = node_arrays(table, cpu, gpu_rows, g_launch, only)
        row, launch = nodes.row, nodes.launch
        rec_start, rec_end = table.start_ns[row], table.end_ns[row]
        position = rec_start.copy()
        has_launch = launch >= 0
        position[has_launch] = rec_start[launch[has_launch]]
        early = ((rec_start < position) & has_launch).sum()
        cols = (rec_start, rec_end, position, table.correlation[row].astype(np.int64, copy=False),
                table.name_id[row].astype(np.int64, copy=False), table.copy_kind[row].astype(np.uint8), None)
    else:
        i64 = np.int64
        e = [np.empty(n, i64) for _ in range(15)]
        nk, ck = np.empty(n, np.uint8), np.empty(n, np.uint8)
        row, launch, pid, tid, device, stream, rec_start, rec_end, position, corr, name_id, ig, tod, st0, lc = e
        early = jit.call(fn, np.ascontiguousarray(cpu_rows, i64), np.ascontiguousarray(gpu_rows, i64),
                         np.ascontiguousarray(g_launch, i64), i64(only), table.pid, table.tid, table.kind, table.device,
                         table.stream, table.start_ns, table.end_ns, table.correlation, table.name_id, table.copy_kind,
                         row, nk, launch, pid, tid, device, stream, rec_start, rec_end, position, corr, name_id, ck,
                         ig, tod, st0, lc)
        nodes = Nodes(row, nk, launch, pid, tid, device, stream, n_cpu)
        cols = (rec_start, rec_end, position, corr, name_id, ck, (ig, tod, st0, lc))
    count(counts, "GPU task recorded starting before its launching call started", early)
    return nodes, cols


def _node_columns_kernel(cpu_rows, gpu_rows, g_launch, only, t_pid, t_tid, t_kind, t_device, t_stream, t_start, t_end, t_corr,
                         t_name, t_copy, row, nk, launch, pid, tid, device, stream, rec_start, rec_end, position, corr,
                         name_id, ck, ig, tod, st0, lc):
    """:func:`node_columns`' pass: fill the node columns in place (CPU nodes, then GPU nodes; the
    launched tasks' positions after every start is in), and the lane columns (``ig`` 1 for GPU
    nodes, ``tod`` tid or device, ``st0`` stream or 0 on CPU nodes, ``lc`` the launching node's
    correlation id or -1); returns how many GPU tasks start before their launch."""
    n_cpu = len(cpu_rows)
    n = n_cpu + len(gpu_rows)
    for v in range(n):
        if v < n_cpu:
            r = cpu_rows[v]
            row[v] = r
            nk[v] = 0  # NODE_CPU
            launch[v] = -1
            pid[v] = t_pid[r]
            tid[v] = t_tid[r]
            device[v] = -1
            stream[v] = -1
        else:
            r = gpu_rows[v - n_cpu]
            row[v] = r
            nk[v] = t_kind[r]
            launch[v] = g_launch[v - n_cpu]
            p = t_pid[r]
            if only >= 0 and p < 0:  # GPU rows without a process take the only API-calling one
                p = only
            pid[v] = p
            tid[v] = -1
            device[v] = t_device[r]
            stream[v] = t_stream[r]
        s = t_start[r]
        rec_start[v] = s
        rec_end[v] = t_end[r]
        position[v] = s
        corr[v] = t_corr[r]
        name_id[v] = t_name[r]
        ck[v] = t_copy[r]
        g = nk[v] != 0  # NODE_CPU is 0
        ig[v] = 1 if g else 0
        tod[v] = device[v] if g else tid[v]
        st0[v] = stream[v] if g else 0
    early = 0
    for v in range(n):
        a = launch[v]
        if a >= 0:
            lc[v] = corr[a]
            p = rec_start[a]
            position[v] = p
            if rec_start[v] < p:
                early += 1
        else:
            lc[v] = -1
    return early

#: :func:`order_edges` runs its compiled pass from this many nodes ("auto")
ORDER_EDGES_MIN = 50_000


def order_edges(lane_prev: np.ndarray, launch: np.ndarray, is_gpu: np.ndarray, staged: np.ndarray, qs: np.ndarray,
                qd: np.ndarray, tail, method: str = "auto") -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """The builder's edge list: per node v (arrays of n nodes: ``lane_prev`` and ``launch``
    int64, -1 none; ``is_gpu``, ``staged`` bool) the groups THREAD edges ``lane_prev[v] -> v``
    of the CPU nodes, STREAM edges of the GPU nodes, LAUNCH edges ``launch[v] -> v`` of the
    launched nodes not ``staged``, STAGED edges of the staged ones (each group in node order,
    origin RECORDED), then the QUEUE edges ``qs -> qd`` (RECORDED), then ``tail`` (four edge
    arrays: src, dst, kind, origin) as it is.

    Returns (src, dst int64; kind, origin uint8; all of length n_forward + len(qs) + len(tail[0])),
    and n_forward, the number of lane and launch edges (the first four groups). One compiled
    pass (:func:`_order_edges_kernel`) from :data:`ORDER_EDGES_MIN` nodes when numba is there
    ("auto"; "compiled" whatever the size, "python" the kernel uncompiled, "numpy" never), else
    :func:`daydream.graph.model.concat_edges` of masked groups; the same answers."""
    fn = jit.kernel_for(_order_edges_kernel, len(lane_prev), ORDER_EDGES_MIN, method)
    if fn is not None:
        i64 = np.int64
        out = jit.call(fn, np.ascontiguousarray(lane_prev, i64), np.ascontiguousarray(launch, i64),
                       np.ascontiguousarray(is_gpu, np.bool_), np.ascontiguousarray(staged, np.bool_),
                       np.ascontiguousarray(qs, i64), np.ascontiguousarray(qd, i64), np.ascontiguousarray(tail[0], i64),
                       np.ascontiguousarray(tail[1], i64), np.ascontiguousarray(tail[2], np.uint8),
                       np.ascontiguousarray(tail[3], np.uint8), np.uint8(EdgeKind.THREAD), np.uint8(EdgeKind.STREAM),
                       np.uint8(EdgeKind.LAUNCH), np.uint8(EdgeKind.STAGED), np.uint8(EdgeKind.QUEUE), np.uint8(Origin.RECORDED))
        src, dst, ek, eo, n_forward = out
        return src, dst, ek, eo, int(n_forward)
    v = np.arange(len(lane_prev), dtype=np.int64)
    lp = lane_prev >= 0
    has_launch = launch >= 0
    R = Origin.RECORDED
    src, dst, ek, eo = concat_edges([  # order edges first: one per task at most, unique by construction
        (lane_prev[lp & ~is_gpu], v[lp & ~is_gpu], EdgeKind.THREAD, R),
        (lane_prev[lp & is_gpu], v[lp & is_gpu], EdgeKind.STREAM, R),
        (launch[has_launch & ~staged], v[has_launch & ~staged], EdgeKind.LAUNCH, R),
        (launch[has_launch & staged], v[has_launch & staged], EdgeKind.STAGED, R),
        (qs, qd, EdgeKind.QUEUE, R),  # unique: one per launched task
    ], tail=tail)
    return src, dst, ek, eo, int(np.count_nonzero(lp)) + int(np.count_nonzero(has_launch))


def _order_edges_kernel(lane_prev, launch, is_gpu, staged, qs, qd, ts, td, tk, to, k_thread, k_stream, k_launch, k_staged,
                        k_queue, o_rec):
    """:func:`order_edges`' passes: count the four order groups, then place every edge."""
    n = len(lane_prev)
    n_thr = 0
    n_str = 0
    n_lau = 0
    n_stg = 0
    for v in range(n):
        if lane_prev[v] >= 0:
            if is_gpu[v]:
                n_str += 1
            else:
                n_thr += 1
        if launch[v] >= 0:
            if staged[v]:
                n_stg += 1
            else:
                n_lau += 1
    n_fwd = n_thr + n_str + n_lau + n_stg
    m = n_fwd + len(qs) + len(ts)
    src = np.empty(m, np.int64)
    dst = np.empty(m, np.int64)
    ek = np.empty(m, np.uint8)
    eo = np.empty(m, np.uint8)
    a = 0  # next slot of each group
    b = n_thr
    c = n_thr + n_str
    d = c + n_lau
    for v in range(n):
        p = lane_prev[v]
        if p >= 0:
            if is_gpu[v]:
                src[b] = p
                dst[b] = v
                ek[b] = k_stream
                b += 1
            else:
                src[a] = p
                dst[a] = v
                ek[a] = k_thread
                a += 1
        p = launch[v]
        if p >= 0:
            if staged[v]:
                src[d] = p
                dst[d] = v
                ek[d] = k_staged
                d += 1
            else:
                src[c] = p
                dst[c] = v
                ek[c] = k_launch
                c += 1
    for j in range(n_fwd):
        eo[j] = o_rec
    j = n_fwd
    for i in range(len(qs)):
        src[j] = qs[i]
        dst[j] = qd[i]
        ek[j] = k_queue
        eo[j] = o_rec
        j += 1
    for i in range(len(ts)):
        src[j] = ts[i]
        dst[j] = td[i]
        ek[j] = tk[i]
        eo[j] = to[i]
        j += 1
    return src, dst, ek, eo, n_fwd
