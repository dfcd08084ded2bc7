"""The kernel-level task graph of a trace (Daydream paper, section 4).

Nodes are CPU tasks (the runtime/driver API calls of each thread, each with the CPU gap before
it) and GPU tasks (kernels, memcpys, memsets). Edges:

(a) thread order — implicit in ``lane``/``lane_prev``;
(b) stream order, FIFO in launch order — implicit in ``lane``/``lane_prev``;
(c) launch → GPU task, by (process, correlation id) — ``launch``;
(d) GPU task → the blocking CPU call that waited for it — ``pred_ptr``/``pred_idx`` of CPU nodes;
(e) cross-stream ``cudaEventRecord`` → ``cudaStreamWaitEvent`` — ``pred_ptr``/``pred_idx`` of GPU
    nodes.

The exact rules are in ``docs/model.md``. Every edge goes from a smaller to a larger *position*
(a CPU call's recorded start; a GPU task's launching call's recorded start, or its own start when
it has no launch), CPU before GPU at equal positions, on consistent timestamps; ``order`` is the
nodes sorted by that key. Tied or contradictory timestamps (odd input) can break that: the builder
then repairs ``order`` by a topological sort that keeps the sorted order wherever it can, and if
waits and cross-stream edges close a cycle, drops those that point backwards (both counted in
``counts``; see ``_repair_order``). ``order`` is always a valid visiting order for the simulator.

All arrays are numpy, one entry per node (``n`` nodes) unless stated; times are int64 ns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from .cuda_api import ApiRole, roles_of_names
from .events import CopyKind, EventTable, Kind, MemKind

NODE_CPU = 0  #: ``node_kind`` value for CPU tasks; GPU tasks keep their events.Kind value (2, 3, 4)

_STEP = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass
class TaskGraph:
    """Dependency graph in array form (see module docstring).

    Attributes (length ``n`` unless stated):
        row: row of the EventTable each node came from.
        node_kind: NODE_CPU, or Kind.KERNEL / MEMCPY / MEMSET.
        lane: lane index; ``lanes[lane]`` names it ("cpu pid/tid" or "gpu dev/stream").
        lane_prev: previous node on the same lane, or -1.
        dur_ns: recorded duration; for blocking CPU calls their own cost (``docs/model.md`` rule 3).
        gap_ns: CPU gap before a CPU node (time since the previous task on the thread ended, or
            since ``t0_ns``); 0 for GPU nodes.
        blocking: the CPU node waits for the GPU nodes among its predecessors.
        launch: the CPU node that launched a GPU node, or -1 (CPU nodes: -1).
        pred_ptr, pred_idx: CSR of extra predecessors (length n+1 and m): GPU tasks a blocking
            call waits for, and cross-stream producers of a GPU task.
        rec_start_ns, rec_end_ns: the recorded interval (for reports and measurement only; the
            simulator never reads a GPU node's recorded start).
        position_ns: the ordering key described in the module docstring.
        order: a visiting order of all nodes for the simulator (``simulation_edges`` all point
            forward in it).
        t0_ns: trace start (the earliest timestamp of the table).
        launch_latency_ns, gpu_gap_ns: L and G of ``docs/model.md`` rule 5, measured.
        counts: what the builder kept as artefacts or could not link, by reason.
    """

    table: EventTable
    row: np.ndarray
    node_kind: np.ndarray
    lane: np.ndarray
    lanes: list[str]
    lane_is_gpu: np.ndarray
    #: (n_lanes, 4) int64: (is_gpu, pid, tid or device, 0 or stream) of each lane
    lane_keys: np.ndarray
    lane_prev: np.ndarray
    dur_ns: np.ndarray
    gap_ns: np.ndarray
    blocking: np.ndarray
    launch: np.ndarray
    pred_ptr: np.ndarray
    pred_idx: np.ndarray
    rec_start_ns: np.ndarray
    rec_end_ns: np.ndarray
    position_ns: np.ndarray
    order: np.ndarray
    t0_ns: int
    launch_latency_ns: int
    gpu_gap_ns: int
    counts: dict[str, int] = field(default_factory=dict)
    #: names of nodes that have no table row (row == -1: tasks inserted by a transformation)
    inserted_names: dict[int, str] = field(default_factory=dict)
    #: per-node annotation arrays attached by the mapper (phase, layer_id, op_id), if any
    annotations: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.row)

    @property
    def is_cpu(self) -> np.ndarray:
        return self.node_kind == NODE_CPU

    def preds(self, v: int) -> np.ndarray:
        return self.pred_idx[self.pred_ptr[v] : self.pred_ptr[v + 1]]

    def name(self, v: int) -> str:
        r = int(self.row[v])
        return self.table.name_of(r) if r >= 0 else self.inserted_names.get(int(v), "inserted task")

    def node_names(self) -> np.ndarray:
        """Name of every node, as an object array (inserted nodes by their given name)."""
        names = np.asarray(self.table.names, dtype=object)
        out = np.empty(self.n, dtype=object)
        has = self.row >= 0
        out[has] = names[self.table.name_id[self.row[has]]] if len(names) else ""
        for v, s in self.inserted_names.items():
            out[v] = s
        return out

    def edges(self) -> tuple[np.ndarray, np.ndarray]:
        """All edges as (src, dst) arrays: lane order, launch, and the extra predecessors."""
        v = np.arange(self.n)
        lp = self.lane_prev >= 0
        la = self.launch >= 0
        dst_x = np.repeat(v, np.diff(self.pred_ptr))
        src = np.concatenate([self.lane_prev[lp], self.launch[la], self.pred_idx])
        dst = np.concatenate([v[lp], v[la], dst_x])
        return src, dst


def _count(counts: dict[str, int], key: str, n) -> None:
    n = int(n)
    if n:
        counts[key] = counts.get(key, 0) + n


def _search_pairs(keys: np.ndarray, pos: np.ndarray, tie: np.ndarray, q_keys: np.ndarray, q_pos: np.ndarray, q_tie: np.ndarray, side: str) -> np.ndarray:
    """``np.searchsorted`` on (key, pos, tie) triples: items must be sorted by (key, pos, tie)."""
    dt = [("k", np.int64), ("p", np.int64), ("t", np.int64)]
    rec = np.empty(len(keys), dtype=dt)
    rec["k"], rec["p"], rec["t"] = keys, pos, tie
    q = np.empty(len(q_keys), dtype=dt)
    q["k"], q["p"], q["t"] = q_keys, q_pos, q_tie
    return np.searchsorted(rec, q, side=side)


#: fraction of the queued-pair gaps cut from each end before averaging them into G. A mean, not a
#: median, because gaps add up along a queue: with the median (about 1.0 us on the V100 ResNet-50
#: trace) the replayed kernels drifted 237 us early by the middle of a step, with the 5 %-trimmed
#: mean (1.3 us) 44 us (measured on ../shared/traces, scripts/accuracy.py). Trimming keeps the
#: rare long gaps caused by work the trace does not show from dominating.
GAP_TRIM = 0.05
#: below this many queued pairs a mean is dominated by one odd gap: use the median (the GTX 1060
#: export extrap/con_kernel.sqlite has 4 pairs and a trimmed mean of 23 ms)
GAP_MIN_PAIRS = 20


def _trimmed_mean(x: np.ndarray, trim: float) -> int:
    if len(x) == 0:
        return 0
    x = np.sort(x)
    k = int(len(x) * trim)
    if len(x) - 2 * k > 0:
        x = x[k : len(x) - k]
    return int(round(float(x.mean())))


def lower_median(x: np.ndarray) -> int:
    """The lower median of ``x`` (an element of ``x``; 0 when empty): with few samples a slow first
    call (context or module initialization) does not set it."""
    if len(x) == 0:
        return 0
    k = (len(x) - 1) // 2
    return int(np.partition(np.asarray(x), k)[k])


def build_graph(table: EventTable, mapping=None) -> TaskGraph:
    """Build the task graph of ``table`` following ``docs/model.md``.

    ``mapping`` (a :class:`daydream.mapping.Mapping` of the same table) attaches each node's
    phase, layer and op as ``TaskGraph.annotations``.

    Never raises for odd but readable input: artefacts (GPU tasks that start before their launch,
    GPU tasks with no launching call, nested or overlapping API calls on a thread, blocking calls
    whose waited work ends after they return, waits that cannot be linked) are kept and counted
    in ``TaskGraph.counts``.
    """
    counts: dict[str, int] = {}
    kind = table.kind
    start = table.start_ns
    end = table.end_ns
    n_rows = len(table)
    t0 = int(start.min()) if n_rows else 0

    # ---------------- CPU tasks: runtime/driver calls, nested calls folded into their parent ---
    rt_rows = np.nonzero(kind == Kind.RUNTIME)[0]
    rt_pid = table.pid[rt_rows]
    rt_tid = table.tid[rt_rows]
    o = np.lexsort((rt_rows, rt_tid, rt_pid))  # rows are already start-sorted within a thread
    rt_rows = rt_rows[o]
    rt_pid, rt_tid = rt_pid[o], rt_tid[o]
    rs, re_ = start[rt_rows], end[rt_rows]
    new_thread = np.ones(len(rt_rows), dtype=bool)
    new_thread[1:] = (rt_pid[1:] != rt_pid[:-1]) | (rt_tid[1:] != rt_tid[:-1])
    # running max of the previous calls' ends within each thread
    prev_end = np.full(len(rt_rows), np.iinfo(np.int64).min, dtype=np.int64)
    if len(rt_rows):
        shifted = np.empty_like(re_)
        shifted[0] = np.iinfo(np.int64).min
        shifted[1:] = re_[:-1]
        shifted[new_thread] = np.iinfo(np.int64).min
        prev_end = _segmented_cummax(shifted, new_thread)
    nested = (rs < prev_end) & (re_ <= prev_end)
    overlapping = (rs < prev_end) & (re_ > prev_end)
    _count(counts, "API call nested inside another call on its thread (folded into the outer call)", nested.sum())
    _count(counts, "API call overlapping the previous call on its thread (kept, start unchanged)", overlapping.sum())
    kept = ~nested
    cpu_rows = rt_rows[kept]
    n_cpu = len(cpu_rows)
    # each runtime row -> the CPU node that represents it (itself, or the kept call enclosing it)
    kept_idx = np.cumsum(kept) - 1  # last kept at or before each runtime row (same thread: a nested
    # call always follows its enclosing kept call in start order)
    rt_node = kept_idx.astype(np.int64)

    # ---------------- GPU tasks ----------------------------------------------------------------
    gpu_rows = np.nonzero((kind == Kind.KERNEL) | (kind == Kind.MEMCPY) | (kind == Kind.MEMSET))[0]
    n_gpu = len(gpu_rows)
    g_pid = table.pid[gpu_rows].copy()
    cpu_pids = np.unique(rt_pid)
    if len(cpu_pids) == 1:
        g_pid[g_pid < 0] = cpu_pids[0]

    # launch linking by (pid, correlation): sort runtime rows by key, search
    def corr_key(pid, corr):
        return (pid.astype(np.int64) << np.int64(40)) ^ (corr.astype(np.int64) & np.int64((1 << 40) - 1))

    rt_corr = table.correlation[rt_rows]
    rt_valid = rt_corr >= 0
    rk = corr_key(rt_pid, rt_corr)
    ro = np.lexsort((rs, rk))
    ro = ro[rt_valid[ro]]
    rk_sorted = rk[ro]
    g_corr = table.correlation[gpu_rows]
    gk = corr_key(g_pid, g_corr)
    j = np.searchsorted(rk_sorted, gk)
    j_ok = (j < len(rk_sorted)) & (g_corr >= 0) & (g_pid >= 0)
    j_ok[j_ok] &= rk_sorted[j[j_ok]] == gk[j_ok]
    g_launch_cpu = np.full(n_gpu, -1, dtype=np.int64)
    g_launch_cpu[j_ok] = rt_node[ro[j[j_ok]]]
    if len(rk_sorted) > 1:
        _count(counts, "runtime calls sharing a correlation id with an earlier call of their process",
               np.count_nonzero((rk_sorted[1:] == rk_sorted[:-1]) & ~nested[ro[1:]]))
    _count(counts, "GPU task without a launching call in the trace (ready at trace start)", n_gpu - j_ok.sum())

    # ---------------- node arrays ----------------------------------------------------------
    n = n_cpu + n_gpu
    row = np.concatenate([cpu_rows, gpu_rows]).astype(np.int64)
    node_kind = np.concatenate([np.zeros(n_cpu, np.uint8), kind[gpu_rows].astype(np.uint8)])
    rec_start = start[row]
    rec_end = end[row]
    launch = np.concatenate([np.full(n_cpu, -1, np.int64), g_launch_cpu])
    position = rec_start.copy()
    has_launch = launch >= 0
    position[has_launch] = rec_start[launch[has_launch]]
    before_launch = (rec_start < position) & has_launch
    _count(counts, "GPU task recorded starting before its launching call started", before_launch.sum())

    # lanes: CPU (pid, tid), GPU (pid, device, stream)
    c_pid, c_tid = table.pid[cpu_rows], table.tid[cpu_rows]
    g_dev, g_str = table.device[gpu_rows].astype(np.int64), table.stream[gpu_rows]
    cpu_lane_keys = np.stack([np.zeros(n_cpu, np.int64), c_pid, c_tid, np.zeros(n_cpu, np.int64)], axis=1)
    gpu_lane_keys = np.stack([np.ones(n_gpu, np.int64), g_pid, g_dev, g_str], axis=1)
    all_keys = np.concatenate([cpu_lane_keys, gpu_lane_keys]) if n else np.zeros((0, 4), np.int64)
    uniq, lane = _unique_rows(all_keys)
    lane_is_gpu = uniq[:, 0] == 1 if len(uniq) else np.zeros(0, bool)
    lanes = [
        (f"gpu {k[2]} stream {k[3]} (pid {k[1]})" if k[0] else f"cpu pid {k[1]} tid {k[2]}") for k in uniq.tolist()
    ]

    # order within lanes and globally: (position, is_gpu, launch correlation id, rec_start, row)
    is_gpu_node = node_kind != NODE_CPU
    # ties in position (calls of several threads at the same ns) go in correlation-id order,
    # which is the order the process issued its calls in
    launch_corr = np.where(has_launch, table.correlation[row[np.maximum(launch, 0)]], -1)
    order = np.lexsort((row, rec_start, launch_corr, is_gpu_node, position))
    # the same order grouped by lane (a stable sort of ``order`` by lane: the keys above are unique)
    lo = order[np.argsort(_small_ints(lane[order], len(uniq)), kind="stable")]
    lane_prev = np.full(n, -1, dtype=np.int64)
    if n:
        same = lane[lo[1:]] == lane[lo[:-1]]
        lane_prev[lo[1:][same]] = lo[:-1][same]

    # gaps and durations
    dur = (rec_end - rec_start).astype(np.int64)
    neg_dur = dur < 0
    _count(counts, "task with negative duration (set to 0)", neg_dur.sum())
    dur[neg_dur] = 0
    gap = np.zeros(n, dtype=np.int64)
    cpu_nodes = np.nonzero(~is_gpu_node)[0]
    prev = lane_prev[cpu_nodes]
    prev_end_t = np.where(prev >= 0, rec_end[np.maximum(prev, 0)], t0)
    g = rec_start[cpu_nodes] - prev_end_t
    gap[cpu_nodes] = np.maximum(g, 0)

    # ---------------- synchronization: who waits for what ---------------------------------
    # roles of the names CPU calls use (the only ones looked up)
    c_name = table.name_id[cpu_rows]
    roles_by_name = np.zeros(len(table.names), np.uint8)
    used = np.unique(c_name).tolist()
    roles_by_name[used] = roles_of_names([table.names[i] for i in used])
    cpu_role = roles_by_name[c_name] if n_cpu else np.zeros(0, np.uint8)
    # SYNC rows by (pid, correlation) -> stream, sync kind, links, device
    sy_rows = np.nonzero(kind == Kind.SYNC)[0]
    sy_pid = table.pid[sy_rows].copy()
    if len(cpu_pids) == 1:
        sy_pid[sy_pid < 0] = cpu_pids[0]
    sk = corr_key(sy_pid, table.correlation[sy_rows])
    so = np.argsort(sk, kind="stable")
    sk_sorted = sk[so]
    ck = corr_key(c_pid, table.correlation[cpu_rows])
    js = np.searchsorted(sk_sorted, ck)
    js_ok = (js < len(sk_sorted)) & (table.correlation[cpu_rows] >= 0)
    js_ok[js_ok] &= sk_sorted[js[js_ok]] == ck[js_ok]
    c_sync_row = np.full(n_cpu, -1, dtype=np.int64)
    c_sync_row[js_ok] = sy_rows[so[js[js_ok]]]

    # GPU nodes sorted by (lane, position...) for "last task on a lane launched before t"
    g_nodes_by_lane = lo[is_gpu_node[lo]]
    gl_lane = lane[g_nodes_by_lane]
    gl_pos = position[g_nodes_by_lane]
    gl_corr = launch_corr[g_nodes_by_lane]

    # lane lookup by (pid, device, stream) and (pid, stream) when the device is unknown
    lane_pid = uniq[:, 1] if len(uniq) else np.zeros(0, np.int64)
    lane_dev = uniq[:, 2] if len(uniq) else np.zeros(0, np.int64)
    lane_str = uniq[:, 3] if len(uniq) else np.zeros(0, np.int64)

    def find_lane(pid: np.ndarray, dev: np.ndarray, stream: np.ndarray) -> np.ndarray:
        """GPU lane of (pid, device, stream); device -1 matches any device of that pid."""
        out = np.full(len(pid), -1, dtype=np.int64)
        gl = np.nonzero(lane_is_gpu)[0]
        if len(gl) == 0 or len(pid) == 0:
            return out
        for L in gl.tolist():  # lanes are few (streams), queries are vectorized
            m = (pid == lane_pid[L]) & (stream == lane_str[L]) & ((dev == lane_dev[L]) | (dev < 0)) & (out < 0)
            out[m] = L
        return out

    def last_on_lane_before(lanes_q: np.ndarray, t_q: np.ndarray, c_q: np.ndarray) -> np.ndarray:
        """Node id of the last GPU task on lane lanes_q launched before the call that started at
        t_q with correlation id c_q (launch (start, correlation) smaller); -1 none."""
        res = np.full(len(lanes_q), -1, dtype=np.int64)
        ok = lanes_q >= 0
        if ok.any() and len(gl_lane):
            k = _search_pairs(gl_lane, gl_pos, gl_corr, lanes_q[ok], t_q[ok], c_q[ok], "left") - 1
            found = k >= 0
            found[found] &= gl_lane[k[found]] == lanes_q[ok][found]
            res[np.nonzero(ok)[0][found]] = g_nodes_by_lane[k[found]]
        return res

    def first_on_lane_after(lanes_q: np.ndarray, t_q: np.ndarray, c_q: np.ndarray) -> np.ndarray:
        """Node id of the first GPU task on lane lanes_q launched after the call (t_q, c_q); -1 none."""
        res = np.full(len(lanes_q), -1, dtype=np.int64)
        ok = lanes_q >= 0
        if ok.any() and len(gl_lane):
            k = _search_pairs(gl_lane, gl_pos, gl_corr, lanes_q[ok], t_q[ok], c_q[ok], "right")
            found = k < len(gl_lane)
            found[found] &= gl_lane[k[found]] == lanes_q[ok][found]
            res[np.nonzero(ok)[0][found]] = g_nodes_by_lane[k[found]]
        return res

    # the stream each thread launched to last, before each CPU call (fallback for missing sync info)
    c_start = rec_start[:n_cpu]
    c_corr = table.correlation[cpu_rows]
    launched_lane = np.full(n_cpu, -1, dtype=np.int64)
    if n_gpu:
        # last GPU node launched by each CPU node (by lane order of the GPU nodes it launched)
        gl_nodes = np.nonzero(has_launch)[0]
        launched_lane[launch[gl_nodes]] = lane[gl_nodes]
    # forward fill per thread (CPU nodes are contiguous per lane in lo order)
    cpu_lo = lo[~is_gpu_node[lo]]
    ff = launched_lane[cpu_lo]
    thread_start = np.ones(len(cpu_lo), dtype=bool)
    thread_start[1:] = lane[cpu_lo[1:]] != lane[cpu_lo[:-1]]
    ff_prev = _segmented_ffill_exclusive(ff, thread_start)
    last_launch_lane_before = np.full(n_cpu, -1, dtype=np.int64)
    last_launch_lane_before[cpu_lo] = ff_prev

    wait_src: list[np.ndarray] = []  # GPU node waited for
    wait_dst: list[np.ndarray] = []  # CPU node waiting
    sync_row_c = c_sync_row
    s_stream = np.where(sync_row_c >= 0, table.stream[np.maximum(sync_row_c, 0)], -1)
    s_dev = np.where(sync_row_c >= 0, table.device[np.maximum(sync_row_c, 0)].astype(np.int64), -1)
    s_lstream = np.where(sync_row_c >= 0, table.link_stream[np.maximum(sync_row_c, 0)], -1)
    s_lcorr = np.where(sync_row_c >= 0, table.link_correlation[np.maximum(sync_row_c, 0)], -1)
    cpu_ids = np.arange(n_cpu, dtype=np.int64)

    # stream synchronize
    m = cpu_role == ApiRole.STREAM_SYNC
    if m.any():
        st = np.where(s_stream[m] >= 0, s_stream[m], -1)
        ln = find_lane(c_pid[m], s_dev[m], st)
        fallback = st < 0
        ln[fallback] = last_launch_lane_before[m][fallback]
        _count(counts, "stream synchronize without a sync record (waits on the thread's last launch stream)", fallback.sum())
        w = last_on_lane_before(ln, c_start[m], c_corr[m])
        wait_src.append(w)
        wait_dst.append(cpu_ids[m])

    # device synchronize: every stream of the process (and device when known)
    m = cpu_role == ApiRole.DEVICE_SYNC
    if m.any():
        for L in np.nonzero(lane_is_gpu)[0].tolist():
            mm = m & (c_pid == lane_pid[L]) & ((s_dev < 0) | (s_dev == lane_dev[L]))
            if mm.any():
                w = last_on_lane_before(np.full(mm.sum(), L, np.int64), c_start[mm], c_corr[mm])
                wait_src.append(w)
                wait_dst.append(cpu_ids[mm])

    # record calls by (pid, correlation), for event syncs and stream waits
    rec_calls = np.nonzero(cpu_role == ApiRole.EVENT_RECORD)[0]
    rc_key = corr_key(c_pid[rec_calls], table.correlation[cpu_rows[rec_calls]])
    rco = np.argsort(rc_key, kind="stable")
    rc_sorted = rc_key[rco]

    def record_call(pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
        out = np.full(len(pid), -1, dtype=np.int64)
        if len(rc_sorted) == 0:
            return out
        k = corr_key(pid, corr)
        jj = np.searchsorted(rc_sorted, k)
        ok = (jj < len(rc_sorted)) & (corr >= 0)
        ok[ok] &= rc_sorted[jj[ok]] == k[ok]
        out[ok] = rec_calls[rco[jj[ok]]]
        return out

    # the thread's last record call before each CPU call (fallback for event syncs)
    is_rec = np.zeros(n_cpu, dtype=bool)
    is_rec[rec_calls] = True
    rec_marker = np.where(is_rec[cpu_lo], cpu_lo, -1)
    last_rec_before = np.full(n_cpu, -1, dtype=np.int64)
    last_rec_before[cpu_lo] = _segmented_ffill_exclusive(rec_marker, thread_start)

    # event synchronize
    m = cpu_role == ApiRole.EVENT_SYNC
    if m.any():
        rc = record_call(c_pid[m], s_lcorr[m])
        stream_q = s_lstream[m].copy()
        no_link = rc < 0
        rc[no_link] = last_rec_before[m][no_link]
        _count(counts, "event synchronize without a record link (binds to the thread's last cudaEventRecord)", no_link.sum())
        ln = find_lane(c_pid[m], s_dev[m], stream_q)
        need = (stream_q < 0) & (rc >= 0)  # stream unknown: the one the recording thread launched to last
        ln[need] = last_launch_lane_before[rc[need]]
        tq = np.where(rc >= 0, c_start[np.maximum(rc, 0)], np.iinfo(np.int64).min)
        cq = np.where(rc >= 0, c_corr[np.maximum(rc, 0)], -1)
        w = np.where(rc >= 0, last_on_lane_before(ln, tq, cq), -1)
        _count(counts, "event synchronize whose event could not be found (not a dependency)", (w < 0).sum())
        wait_src.append(w)
        wait_dst.append(cpu_ids[m])

    # blocking copies: their own copy task
    g_nodes = np.arange(n_cpu, n, dtype=np.int64)
    g_l = launch[g_nodes]
    g_ok = g_l >= 0
    role_of_launch = np.zeros(n_gpu, dtype=np.uint8)
    role_of_launch[g_ok] = cpu_role[g_l[g_ok]]
    own_copy = g_ok & (role_of_launch == ApiRole.MEMCPY_SYNC)
    pageable_d2h = (
        g_ok
        & (role_of_launch == ApiRole.LAUNCH)
        & (table.kind[gpu_rows] == Kind.MEMCPY)
        & (table.copy_kind[gpu_rows] == CopyKind.DTOH)
        & (table.dst_kind[gpu_rows] == MemKind.PAGEABLE)
    )
    bc = own_copy | pageable_d2h
    if bc.any():
        wait_src.append(g_nodes[bc])
        wait_dst.append(g_l[bc])

    # cross-stream waits: producer before the record -> first task on the waiting stream after the wait
    x_src: list[np.ndarray] = []
    x_dst: list[np.ndarray] = []
    m = cpu_role == ApiRole.STREAM_WAIT_EVENT
    if m.any():
        have = (sync_row_c[m] >= 0) & (s_lcorr[m] >= 0) & (s_stream[m] >= 0)
        _count(counts, "cudaStreamWaitEvent without a sync record naming its event (no cross-stream edge)", (~have).sum())
        idx = np.nonzero(m)[0][have]
        rc = record_call(c_pid[idx], s_lcorr[idx])
        prod_lane = find_lane(c_pid[idx], s_dev[idx], s_lstream[idx])
        cons_lane = find_lane(c_pid[idx], s_dev[idx], s_stream[idx])
        rc0 = np.maximum(rc, 0)
        prod = np.where(rc >= 0, last_on_lane_before(prod_lane, c_start[rc0], c_corr[rc0]), -1)
        cons = first_on_lane_after(cons_lane, c_start[idx], c_corr[idx])
        ok = (prod >= 0) & (cons >= 0) & (prod_lane != cons_lane)
        _count(counts, "cross-stream wait with no producer or no consumer task in the trace", (~ok).sum())
        x_src.append(prod[ok])
        x_dst.append(cons[ok])

    ws = np.concatenate(wait_src) if wait_src else np.zeros(0, np.int64)
    wd = np.concatenate(wait_dst) if wait_dst else np.zeros(0, np.int64)
    keep = ws >= 0
    ws, wd = ws[keep], wd[keep]
    xs = np.concatenate(x_src) if x_src else np.zeros(0, np.int64)
    xd = np.concatenate(x_dst) if x_dst else np.zeros(0, np.int64)
    src = np.concatenate([ws, xs])
    dst = np.concatenate([wd, xd])
    # dedupe
    if len(src):
        if n < (1 << 31):  # pack (dst, src) into one int64: same lexicographic order
            pk = np.unique(dst.astype(np.int64) * np.int64(n) + src.astype(np.int64))
            dst, src = pk // n, pk % n
        else:
            pair = np.unique(np.stack([dst, src], axis=1), axis=0)
            dst, src = pair[:, 0], pair[:, 1]
    pred_ptr = np.zeros(n + 1, dtype=np.int64)
    np.add.at(pred_ptr, dst + 1, 1)
    pred_ptr = np.cumsum(pred_ptr)
    pred_idx = src[np.argsort(dst, kind="stable")].astype(np.int64)

    blocking = np.zeros(n, dtype=bool)
    blocking[np.unique(wd)] = True
    # own cost of blocking calls: end - max(start, latest recorded end of what it waited for)
    if len(wd):
        w_end = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(w_end, wd, rec_end[ws])
        b = np.nonzero(blocking)[0]
        own = rec_end[b] - np.maximum(rec_start[b], w_end[b])
        _count(counts, "blocking call returned before what it waited for ended (own cost set to 0)", (own < 0).sum())
        dur[b] = np.maximum(own, 0)

    # ---------------- L and G (docs/model.md rule 5) ---------------------------------------
    gpu_n = np.nonzero(is_gpu_node)[0]
    pe = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)  # latest recorded end of GPU preds
    lp = lane_prev[gpu_n]
    pe[gpu_n[lp >= 0]] = rec_end[lp[lp >= 0]]
    xpe = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    if len(xs):
        np.maximum.at(xpe, xd, rec_end[xs])
    gl_start = np.where(launch >= 0, rec_start[np.maximum(launch, 0)], 0)
    idle = is_gpu_node & (launch >= 0) & (np.maximum(pe, xpe) <= gl_start)
    L = max(lower_median(rec_start[idle] - gl_start[idle]), 0)
    queued = is_gpu_node & (launch >= 0) & (lane_prev >= 0)
    queued &= (gl_start + L <= pe) & (xpe <= pe)
    gaps = rec_start[queued] - pe[queued]
    # few pairs (tiny traces): the median; and never above L (the model's G <= L)
    G = _trimmed_mean(gaps, GAP_TRIM) if len(gaps) >= GAP_MIN_PAIRS else lower_median(gaps)
    G = min(max(G, 0), L)
    # tied or inconsistent timestamps (odd input) can put a task before what it waits for
    order, pred_ptr, pred_idx = _repair_order(order, lane_prev, launch, ~is_gpu_node, pred_ptr, pred_idx, counts)

    return TaskGraph(
        table=table,
        row=row,
        node_kind=node_kind,
        lane=lane,
        lanes=lanes,
        lane_is_gpu=lane_is_gpu,
        lane_keys=uniq.astype(np.int64) if len(uniq) else np.zeros((0, 4), np.int64),
        lane_prev=lane_prev,
        dur_ns=dur,
        gap_ns=gap,
        blocking=blocking,
        launch=launch,
        pred_ptr=pred_ptr,
        pred_idx=pred_idx,
        rec_start_ns=rec_start,
        rec_end_ns=rec_end,
        position_ns=position,
        order=order.astype(np.int64),
        t0_ns=t0,
        launch_latency_ns=L,
        gpu_gap_ns=G,
        counts=counts,
        annotations=mapping.annotations_for_rows(row) if mapping is not None else {},
    )


def simulation_edges(lane_prev: np.ndarray, launch: np.ndarray, is_cpu: np.ndarray, pred_ptr: np.ndarray, pred_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(src, dst) of every ordering constraint the simulator needs: lane predecessor, launch,
    cross-stream producer; a blocking call's awaited task must only precede the call's *next*
    task on its thread (the call's start is fixed when it is visited, its end when its thread
    moves on, so a blocking copy can wait for the copy it launched itself)."""
    v = np.arange(len(lane_prev))
    lp, la = lane_prev >= 0, launch >= 0
    _, before = _pred_targets(lane_prev, is_cpu, pred_ptr)
    has = before >= 0
    return np.concatenate([lane_prev[lp], launch[la], pred_idx[has]]), np.concatenate([v[lp], v[la], before[has]])


def _pred_targets(lane_prev: np.ndarray, is_cpu: np.ndarray, pred_ptr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each extra predecessor (entry of ``pred_idx``): the node it belongs to, and the node it
    must precede in a visiting order (the node itself for a GPU task; the next task on the thread
    for a blocking call, -1 when it is the last)."""
    n = len(lane_prev)
    v = np.arange(n)
    lp = lane_prev >= 0
    lane_next = np.full(n, -1, np.int64)
    lane_next[lane_prev[lp]] = v[lp]
    xdst = np.repeat(v, np.diff(pred_ptr))
    return xdst, np.where(is_cpu[xdst], lane_next[xdst], xdst)


def kahn_order(n: int, src: np.ndarray, dst: np.ndarray, key: list) -> np.ndarray | None:
    """A topological order of ``n`` nodes under edges src -> dst, taking ready nodes by smallest
    ``key`` (deterministic); None when the edges contain a cycle."""
    import heapq

    indeg = np.bincount(dst, minlength=n).tolist()
    o = np.argsort(src, kind="stable")
    adj_ptr = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=n))]).tolist()
    adj = dst[o].tolist()
    heap = [(key[u], u) for u in range(n) if indeg[u] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, u = heapq.heappop(heap)
        out.append(u)
        for i in range(adj_ptr[u], adj_ptr[u + 1]):
            w = adj[i]
            indeg[w] -= 1
            if indeg[w] == 0:
                heapq.heappush(heap, (key[w], w))
    return np.asarray(out, dtype=np.int64) if len(out) == n else None


def _repair_order(order, lane_prev, launch, is_cpu, pred_ptr, pred_idx, counts):
    """``order`` made valid for the simulator (every edge forward; a blocking call's awaited
    tasks before the next task on its thread), or returned as it is when it already is.

    The order sorted by position breaks only on odd input: tasks whose times tie (all at the same
    ns) or contradict their correlation ids. Then a topological sort that keeps the sorted order
    wherever it can replaces it; if the waits and cross-stream edges close a cycle, those that
    point backwards in the sorted order are dropped (counted) and the sorted order is kept.
    """
    n = len(order)
    if n == 0:
        return order, pred_ptr, pred_idx
    v = np.arange(n)
    rank = np.empty(n, np.int64)
    rank[order] = v
    src, dst = simulation_edges(lane_prev, launch, is_cpu, pred_ptr, pred_idx)
    back = rank[src] >= rank[dst]
    if not back.any():
        return order, pred_ptr, pred_idx
    out = kahn_order(n, src, dst, rank.tolist())
    if out is not None:
        _count(counts, "dependencies against the order of the recorded times (tied or inconsistent timestamps): order repaired", back.sum())
        return out, pred_ptr, pred_idx
    # a cycle: lane and launch edges always point forward in the sorted order, so dropping the
    # waits and cross-stream edges that point backwards leaves it valid
    xdst, before = _pred_targets(lane_prev, is_cpu, pred_ptr)
    has = before >= 0
    keep = ~has | (rank[pred_idx] < rank[np.maximum(before, 0)])
    _count(counts, "wait or cross-stream dependency dropped: it closes a cycle (inconsistent timestamps)", (~keep).sum())
    pred_ptr = np.concatenate([[0], np.cumsum(np.bincount(xdst[keep], minlength=n))]).astype(np.int64)
    return order, pred_ptr, pred_idx[keep]


def _small_ints(x: np.ndarray, bound: int) -> np.ndarray:
    """``x`` (values in [0, bound)) in the narrowest integer type: numpy's stable sort is a radix
    sort for 16-bit and smaller types."""
    return x.astype(np.int16) if bound < (1 << 15) else x


def _unique_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, axis=0, return_inverse=True)`` for an (n, k) int64 array (rows sorted
    lexicographically), without sorting rows as opaque records: each column is ranked on its own
    and the ranks are packed into one int64 key when they fit."""
    n, k = keys.shape
    if n == 0:
        return np.zeros((0, k), np.int64), np.zeros(0, np.int64)
    lows = keys.min(axis=0)
    bits = [max(int(hi) - int(lo), 0).bit_length() for lo, hi in zip(lows.tolist(), keys.max(axis=0).tolist())]
    if sum(bits) <= 62:  # the columns, shifted to start at 0, fit side by side in one int64
        packed = np.zeros(n, np.int64)
        for c in range(k):
            packed = (packed << np.int64(bits[c])) | (keys[:, c] - lows[c])
        _, first, inv = np.unique(packed, return_index=True, return_inverse=True)
        return keys[first], inv.reshape(-1).astype(np.int64)
    packed = np.zeros(n, np.int64)
    span = 1
    for c in range(k):
        u, inv = np.unique(keys[:, c], return_inverse=True)
        span *= len(u)
        if span >= (1 << 62):
            uniq, lane = np.unique(keys, axis=0, return_inverse=True)
            return uniq, lane.reshape(-1).astype(np.int64)
        packed = packed * np.int64(len(u)) + inv.reshape(-1)
    _, first, inv = np.unique(packed, return_index=True, return_inverse=True)
    return keys[first], inv.reshape(-1).astype(np.int64)


def _segmented_cummax(x: np.ndarray, seg_start: np.ndarray) -> np.ndarray:
    """Running maximum of ``x`` restarting where ``seg_start`` is true (works on ranks, so int64
    values of any size are safe)."""
    if len(x) == 0:
        return x.copy()
    seg = np.cumsum(seg_start) - 1
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=np.int64)
    ranks[order] = np.arange(len(x))
    span = len(x) + 1
    acc = np.maximum.accumulate(ranks + seg * span) - seg * span
    return x[order[acc]]


def _segmented_ffill_exclusive(x: np.ndarray, seg_start: np.ndarray) -> np.ndarray:
    """For each i: the last value x[j] >= 0 with j < i in the same segment; -1 when none."""
    n = len(x)
    if n == 0:
        return x.copy()
    idx = np.where(x >= 0, np.arange(n), -1)
    # exclusive: shift by one within segments
    prev = np.empty(n, dtype=np.int64)
    prev[0] = -1
    prev[1:] = idx[:-1]
    prev[seg_start] = -1
    # segment barrier: indices before the segment start are invalid
    seg_first = np.maximum.accumulate(np.where(seg_start, np.arange(n), 0))
    last = np.maximum.accumulate(prev)
    valid = last >= seg_first
    out = np.full(n, -1, dtype=np.int64)
    out[valid] = x[last[valid]]
    return out


def profiler_steps(table: EventTable) -> list[tuple[str, int, int, int, int]]:
    """The ``ProfilerStep#N`` CPU ranges: (name, start_ns, end_ns, pid, tid), by start time."""
    step_names = table.name_ids(lambda s: _STEP.match(s) is not None)
    if not step_names.any():
        return []
    # 2021 Kineto wrote ProfilerStep as an 'Operator' (cpu_op); newer versions as user_annotation
    m = ((table.kind == Kind.RANGE) | (table.kind == Kind.CPU_OP)) & step_names[table.name_id] & (table.tid >= 0) & (table.device < 0)
    rows = np.nonzero(m)[0]
    return [(table.name_of(r), int(table.start_ns[r]), int(table.end_ns[r]), int(table.pid[r]), int(table.tid[r])) for r in rows]
