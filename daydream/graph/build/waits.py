"""Builder stages: who waits for what (``docs/model.md``, "What a blocking call waits for").

Each stage returns edges ``(src, dst)``: GPU task -> the blocking CPU call that waits for it
(:attr:`EdgeKind.WAIT`), or producer GPU task -> consumer GPU task of a cross-stream event wait
(:attr:`EdgeKind.XSTREAM`). Lookups shared by the stages live in :class:`WaitIndex`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...util import jit
from ...util.arrays import sorted_unique
from ...events.cuda_api import ApiRole, is_hip, roles_of_names
from .staging import staging_threshold
from ...events.table import CopyKind, EventTable, Kind, MemKind
from ...events.links import pids_of
from .._arrays import corr_key, count, ffill_by, lookup_first, lookup_sorted, search_pairs, triples
from .tasks import Lanes, Nodes

_NONE = np.zeros(0, np.int64)


@dataclass
class SyncInfo:
    """What the trace's synchronization records say about each CPU node (-1 unknown).

    stream: the stream a sync/wait call refers to; device; link_stream / link_corr: the stream
    and correlation id of the ``cudaEventRecord`` an event sync or stream wait binds to;
    has_record: a sync record exists for the call.
    """

    stream: np.ndarray
    device: np.ndarray
    link_stream: np.ndarray
    link_corr: np.ndarray
    has_record: np.ndarray


def api_roles(table: EventTable, cpu_rows: np.ndarray, c_name: np.ndarray | None = None) -> np.ndarray:
    """:class:`ApiRole` of each CPU node, decided once per distinct name (``c_name``: the nodes'
    ``table.name_id[cpu_rows]`` when the caller has them)."""
    c_name = table.name_id[cpu_rows] if c_name is None else c_name
    roles_by_name = np.zeros(len(table.names), np.uint8)
    used = sorted_unique(c_name).tolist()
    roles_by_name[used] = roles_of_names([table.names[i] for i in used])
    return roles_by_name[c_name] if len(cpu_rows) else np.zeros(0, np.uint8)


def sync_info(table: EventTable, cpu_rows: np.ndarray, cpu_pid: np.ndarray, only: int, c_corr: np.ndarray | None = None) -> SyncInfo:
    """The SYNC row of each CPU call by (pid, correlation id), and what it names (``only``: the
    only API-calling process, or -1, for sync rows without a process)."""
    sy_rows = np.nonzero(table.kind == Kind.SYNC)[0]
    sy_pid = pids_of(table, sy_rows, only)
    sk = corr_key(sy_pid, table.correlation[sy_rows])
    c_corr = table.correlation[cpu_rows] if c_corr is None else c_corr  # (the caller's gather, when it has one)
    sr = lookup_first(sk, sy_rows, corr_key(cpu_pid, c_corr), c_corr >= 0)
    has = sr >= 0
    at = np.flatnonzero(has)
    r = sr[at]

    def col(a):  # gathered at the calls with a record only (they are few)
        out = np.full(len(sr), -1, dtype=np.int64)
        out[at] = a[r]
        return out

    return SyncInfo(col(table.stream), col(table.device), col(table.link_stream), col(table.link_correlation), has)


#: :class:`WaitIndex` gathers its columns in one compiled pass from this many nodes ("auto")
WAIT_INDEX_MIN = 50_000


def _wait_index_kernel(g_nodes, cpu_lo, lane, position, launch_corr, launch, n_cpu):
    """:class:`WaitIndex`' columns: per GPU node of ``g_nodes`` its lane, position and launch
    correlation id; per CPU node of ``cpu_lo`` whether it starts its thread (lane); per CPU node
    the lane of the last node it launched (-1 none)."""
    ng = len(g_nodes)
    g_lane = np.empty(ng, np.int64)
    g_pos = np.empty(ng, np.int64)
    g_corr = np.empty(ng, np.int64)
    for i in range(ng):
        v = g_nodes[i]
        g_lane[i] = lane[v]
        g_pos[i] = position[v]
        g_corr[i] = launch_corr[v]
    nc = len(cpu_lo)
    ts = np.empty(nc, np.bool_)
    prev = np.int64(0)
    for i in range(nc):
        ln = lane[cpu_lo[i]]
        ts[i] = i == 0 or ln != prev
        prev = ln
    launched = np.full(n_cpu, -1, np.int64)
    for v in range(len(launch)):
        a = launch[v]
        if a >= 0:
            if a >= n_cpu:
                raise IndexError("a launch beyond the CPU nodes")
            launched[a] = lane[v]
    return g_lane, g_pos, g_corr, ts, launched


class WaitIndex:
    """Lookups over GPU tasks by lane and launch position, and over the calls of each thread."""

    def __init__(self, nodes: Nodes, lanes: Lanes, position: np.ndarray, rec_start: np.ndarray, corr: np.ndarray,
                 method: str = "auto"):
        """``method``: "auto" gathers the lookups' columns in one compiled pass
        (:func:`_wait_index_kernel`) from :data:`WAIT_INDEX_MIN` nodes when numba is there
        ("compiled" whatever the size, "python" the kernel uncompiled, "numpy" never), else by
        numpy gathers; the same answers."""
        self.cpu_lo, self.g_nodes = lanes.split(nodes.n_cpu)  # CPU nodes in thread order; GPU nodes in stream order
        self._triples: np.ndarray | None = None
        self.lane_keys = lanes.keys
        self.lane_is_gpu = lanes.is_gpu
        n_cpu = nodes.n_cpu
        self.c_start = rec_start[:n_cpu]
        self.c_corr = corr[:n_cpu]
        self.c_pid = nodes.pid[:n_cpu]
        fn = jit.kernel_for(_wait_index_kernel, len(lanes.lane), WAIT_INDEX_MIN, method)
        if fn is not None:
            i64 = np.int64
            (self.g_lane, self.g_pos, self.g_corr, self.thread_start, self.launched_lane) = jit.call(
                fn, np.ascontiguousarray(self.g_nodes, i64), np.ascontiguousarray(self.cpu_lo, i64),
                np.ascontiguousarray(lanes.lane, i64), np.ascontiguousarray(position, i64),
                np.ascontiguousarray(lanes.launch_corr, i64), np.ascontiguousarray(nodes.launch, i64), n_cpu)
            self.last_launch_lane_before = self.ffill_thread(self.launched_lane)
            return
        self.g_lane = lanes.lane[self.g_nodes]
        self.g_pos = position[self.g_nodes]
        self.g_corr = lanes.launch_corr[self.g_nodes]
        # where each thread starts
        ts = np.ones(len(self.cpu_lo), dtype=bool)
        lo_lane = lanes.lane[self.cpu_lo]
        ts[1:] = lo_lane[1:] != lo_lane[:-1]
        self.thread_start = ts
        #: per CPU node: the GPU lane it launched to (-1 none)
        self.launched_lane = np.full(n_cpu, -1, dtype=np.int64)
        gl = np.nonzero(nodes.launch >= 0)[0]
        self.launched_lane[nodes.launch[gl]] = lanes.lane[gl]
        self.last_launch_lane_before = self.ffill_thread(self.launched_lane)

    def ffill_thread(self, per_cpu: np.ndarray, backwards: bool = False) -> np.ndarray:
        """For each CPU node: the last value >= 0 of ``per_cpu`` at an earlier call of its thread
        (``backwards``: the first one at a later call)."""
        if not len(self.cpu_lo):
            return np.full(len(per_cpu), -1, dtype=np.int64)
        if not backwards:
            return ffill_by(per_cpu, self.cpu_lo, self.thread_start)
        thread_end = np.ones(len(self.cpu_lo), dtype=bool)
        thread_end[:-1] = self.thread_start[1:]
        return ffill_by(per_cpu, self.cpu_lo[::-1], thread_end[::-1])

    def find_lane(self, pid: np.ndarray, dev: np.ndarray, stream: np.ndarray) -> np.ndarray:
        """GPU lane of (pid, device, stream); device -1 matches any device of that pid."""
        out = np.full(len(pid), -1, dtype=np.int64)
        for L in np.nonzero(self.lane_is_gpu)[0].tolist():  # lanes are few (streams), queries vectorized
            _, lp, ld, ls = self.lane_keys[L].tolist()
            m = (pid == lp) & (stream == ls) & ((dev == ld) | (dev < 0)) & (out < 0)
            out[m] = L
        return out

    def event_lane(self, pid: np.ndarray, dev: np.ndarray, stream: np.ndarray, hint: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """GPU lane of the stream an event was recorded on (shape (k,) each; -1 none), and where
        its device is inferred (bool, (k,)). A sync record names that stream by id only
        (Kineto ``wait_on_stream``), and ``dev`` (the record's ``device``) may be another
        device's: ``cudaStreamWaitEvent`` works across devices (docs/model.md, rule 6). The
        stream id held by one device's lane of the process names that lane (CUPTI stream ids
        are unique, ``CUpti_ActivityStream.streamId``); an id several devices hold (a trace
        that reuses ids per device) is taken on the device ``hint`` (the recording thread's
        current device: the device of its last launch before the record; -1 none), else on
        ``dev`` (inferred, counted by the caller)."""
        k = len(pid)
        n = np.zeros(k, np.int64)
        first, at_dev, at_hint = (np.full(k, -1, np.int64) for _ in range(3))
        for L in np.nonzero(self.lane_is_gpu)[0].tolist():  # lanes are few (streams), queries vectorized
            _, lp, ld, ls = self.lane_keys[L].tolist()
            m = (pid == lp) & (stream == ls)
            n += m
            first[m & (first < 0)] = L
            at_dev[m & (dev == ld)] = L
            at_hint[m & (hint == ld)] = L
        several = n > 1
        out = np.where(several, np.where(at_hint >= 0, at_hint, at_dev), first)
        return out, several

    #: graph launches standing in their launch stream (:meth:`set_graph_entries`), or None
    _graphs: tuple | None = None

    def set_graph_entries(self, lane, pos, corr, head, tail) -> None:
        """Graph launches whose kernels run on other streams stand in their launch stream ``lane``
        at their call's position ``pos`` / correlation id ``corr``: :meth:`last_before` finds
        their last task ``tail``, :meth:`first_after` their first task ``head``
        (``graph/build/graph_launch.py``, rule 4). Shape (k,) each."""
        o = np.lexsort((corr, pos, lane))
        cols = [np.asarray(a, np.int64)[o] for a in (lane, pos, corr, head, tail)]
        self._graphs = (*cols, triples(*cols[:3]))

    @staticmethod
    def _find(keys, pos, tie, rec, lanes_q, t_q, c_q, side: str) -> np.ndarray:
        """Index into ``keys`` of the last item before (``side`` "left") or first after ("right")
        each query on its lane; -1 none."""
        res = np.full(len(lanes_q), -1, dtype=np.int64)
        ok = lanes_q >= 0
        if not ok.any() or not len(keys):
            return res
        k = search_pairs(keys, pos, tie, lanes_q[ok], t_q[ok], c_q[ok], side, rec)
        if side == "left":
            k = k - 1
            found = k >= 0
        else:
            found = k < len(keys)
        found[found] &= keys[k[found]] == lanes_q[ok][found]
        res[np.nonzero(ok)[0][found]] = k[found]
        return res

    def _search(self, lanes_q, t_q, c_q, side: str) -> np.ndarray:
        if len(self.g_lane) and self._triples is None:  # built once, searched by every wait stage
            self._triples = triples(self.g_lane, self.g_pos, self.g_corr)
        k = self._find(self.g_lane, self.g_pos, self.g_corr, self._triples, lanes_q, t_q, c_q, side)
        res = np.where(k >= 0, self.g_nodes[np.maximum(k, 0)] if len(self.g_nodes) else -1, -1)
        if self._graphs is None:
            return res
        g_lane, g_pos, g_corr, head, tail, rec = self._graphs
        v = self._find(g_lane, g_pos, g_corr, rec, lanes_q, t_q, c_q, side)
        kr, kv = np.maximum(k, 0), np.maximum(v, 0)
        if len(self.g_lane):
            later = (g_pos[kv] > self.g_pos[kr]) | ((g_pos[kv] == self.g_pos[kr]) & (g_corr[kv] > self.g_corr[kr]))
        else:
            later = np.ones(len(k), bool)
        use = (v >= 0) & ((k < 0) | (later if side == "left" else ~later))
        res[use] = (tail if side == "left" else head)[v[use]]
        return res

    def last_before(self, lanes_q, t_q, c_q) -> np.ndarray:
        """The last GPU task on lane ``lanes_q`` launched before the call (``t_q``, ``c_q``:
        recorded start and correlation id); -1 none. A graph launch standing in the lane
        (:meth:`set_graph_entries`) counts by its last task."""
        return self._search(lanes_q, t_q, c_q, "left")

    def first_after(self, lanes_q, t_q, c_q) -> np.ndarray:
        """The first GPU task on lane ``lanes_q`` launched after the call; -1 none. A graph
        launch standing in the lane counts by its first task."""
        return self._search(lanes_q, t_q, c_q, "right")


def stream_sync_waits(ix: WaitIndex, role, si: SyncInfo, counts) -> tuple[np.ndarray, np.ndarray]:
    """Stream synchronize: the last task on its stream launched before the call (the stream
    from the sync record, else the one the thread launched to last)."""
    m = np.nonzero(role == ApiRole.STREAM_SYNC)[0]
    if not len(m):
        return _NONE, _NONE
    st = si.stream[m]
    ln = ix.find_lane(ix.c_pid[m], si.device[m], st)
    fb = st < 0
    ln[fb] = ix.last_launch_lane_before[m][fb]
    count(counts, "stream synchronize without a sync record (waits on the thread's last launch stream)", fb.sum(), missing=True)
    return ix.last_before(ln, ix.c_start[m], ix.c_corr[m]), m


def device_sync_waits(ix: WaitIndex, role, si: SyncInfo) -> tuple[np.ndarray, np.ndarray]:
    """Device synchronize: on every stream of its process (and device, when known), the last
    task launched before the call."""
    m = role == ApiRole.DEVICE_SYNC
    src, dst = [_NONE], [_NONE]
    if m.any():
        for L in np.nonzero(ix.lane_is_gpu)[0].tolist():
            _, lp, ld, _ = ix.lane_keys[L].tolist()
            mm = np.nonzero(m & (ix.c_pid == lp) & ((si.device < 0) | (si.device == ld)))[0]
            if len(mm):
                src.append(ix.last_before(np.full(len(mm), L, np.int64), ix.c_start[mm], ix.c_corr[mm]))
                dst.append(mm)
    return np.concatenate(src), np.concatenate(dst)


class RecordCalls:
    """``cudaEventRecord`` calls by (pid, correlation id), and each thread's last one."""

    def __init__(self, ix: WaitIndex, role: np.ndarray):
        self.calls = np.nonzero(role == ApiRole.EVENT_RECORD)[0]
        key = corr_key(ix.c_pid[self.calls], ix.c_corr[self.calls])
        self.o = np.argsort(key, kind="stable")
        self.sorted = key[self.o]
        is_rec = np.zeros(len(role), dtype=bool)
        is_rec[self.calls] = True
        self.last_before = ix.ffill_thread(np.where(is_rec, np.arange(len(role)), -1))

    def find(self, pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
        """The record call of (pid, correlation id), -1 none."""
        return lookup_sorted(self.sorted, self.o, self.calls, corr_key(pid, corr), corr >= 0)


def event_sync_waits(ix: WaitIndex, role, si: SyncInfo, rec: RecordCalls, counts) -> tuple[np.ndarray, np.ndarray]:
    """Event synchronize: the last task on the event's stream launched before the record it
    binds to (from the sync record's link, else the thread's last ``cudaEventRecord``; none when
    the link names a record the trace lacks)."""
    m = np.nonzero(role == ApiRole.EVENT_SYNC)[0]
    if not len(m):
        return _NONE, _NONE
    rc = rec.find(ix.c_pid[m], si.link_corr[m])
    # a link naming a record the trace does not hold (made before a window cut from a longer
    # run): like a cross-stream wait on such a record, no edge; never another record's task
    gone = (rc < 0) & (si.link_corr[m] >= 0)
    no_link = (rc < 0) & ~gone
    rc[no_link] = rec.last_before[m][no_link]
    count(counts, "event synchronize without a record link (binds to the thread's last cudaEventRecord)", no_link.sum(), missing=True)
    count(counts, "event synchronize on a record not in the trace (not a dependency)", gone.sum(), missing=True)
    stream_q = si.link_stream[m]
    ln = ix.find_lane(ix.c_pid[m], si.device[m], stream_q)
    need = (stream_q < 0) & (rc >= 0)  # stream unknown: the one the recording thread launched to last
    ln[need] = ix.last_launch_lane_before[rc[need]]
    r0 = np.maximum(rc, 0)
    tq = np.where(rc >= 0, ix.c_start[r0], np.iinfo(np.int64).min)
    cq = np.where(rc >= 0, ix.c_corr[r0], -1)
    w = np.where(rc >= 0, ix.last_before(ln, tq, cq), -1)
    count(counts, "event synchronize whose event could not be found (not a dependency)", ((w < 0) & ~gone).sum(), missing=True)
    return w, m


@dataclass
class Copies:
    """The GPU tasks' copies by host-side behaviour (``docs/model.md``, "Copies from and to
    pageable memory"); masks over the GPU nodes (in node order after the CPU nodes)."""

    launch: np.ndarray  #: launching call of each GPU node, -1 none
    sync: np.ndarray  #: launched by a synchronous copy call (``cudaMemcpy``)
    pageable_h2d: np.ndarray  #: CUDA copy from pageable host memory to the device
    d2d: np.ndarray  #: CUDA device-to-device copy
    pageable_d2h: np.ndarray  #: async copy (a LAUNCH call) to pageable host memory
    staged: np.ndarray  #: pageable_h2d above the trace's staging threshold
    #: (bytes, source, smallest size consistent with a sync): :func:`.staging.staging_threshold`
    threshold: tuple = (0, "", -1)
    nbytes: np.ndarray | None = None  #: bytes of each GPU node's copy (0: not a launched copy)


def copy_classes(table: EventTable, nodes: Nodes, gpu_rows: np.ndarray, role, lane_prev=None, rec_start=None,
                 rec_end=None) -> Copies:
    """:class:`Copies` of the GPU nodes (HIP copies keep the plain "waits for its own copy" rule).
    Only the launched copies are looked at (their call's name, copy kind, memory kinds and size:
    gathered at those few rows, not at every GPU task's). The staging threshold is the trace's
    own (:func:`.staging.staging_threshold`, from ``lane_prev`` and the recorded ``rec_start`` /
    ``rec_end`` of every node; without them: threshold 0, the documented behaviour)."""
    n_gpu = len(gpu_rows)
    g_l = nodes.launch[nodes.n_cpu:]
    ok = g_l >= 0
    rl = np.zeros(n_gpu, dtype=np.uint8)
    rl[ok] = role[g_l[ok]]
    c = np.flatnonzero(ok & (nodes.node_kind[nodes.n_cpu:] == Kind.MEMCPY))  # the launched copies
    rows = gpu_rows[c]
    call_name = table.name_id[nodes.row[g_l[c]]]
    used = sorted_unique(call_name).tolist()  # the launching calls' distinct names, each tested once
    names_hip = np.zeros(max(len(table.names), 1), dtype=bool)
    names_hip[used] = [is_hip(table.names[i]) for i in used]
    cuda = ~names_hip[call_name]
    ck = table.copy_kind[rows]
    pageable_h2d = cuda & (ck == CopyKind.HTOD) & (table.src_kind[rows] == MemKind.PAGEABLE)

    def mask(m):  # per GPU node, from a mask over the copies
        out = np.zeros(n_gpu, dtype=bool)
        out[c[m]] = True
        return out

    nb = table.bytes[rows].astype(np.int64)
    ph = np.flatnonzero(pageable_h2d)
    if lane_prev is not None and len(ph):
        v = nodes.n_cpu + c[ph]  # node ids of the pageable host-to-device copies
        lp = lane_prev[v]
        pe = np.where(lp >= 0, rec_end[np.maximum(lp, 0)], np.iinfo(np.int64).min)
        call = g_l[c[ph]]
        th = staging_threshold(rl[c[ph]] == ApiRole.LAUNCH, nb[ph], rec_start[call], rec_end[call], pe)
    else:
        th = staging_threshold(np.zeros(0, bool), nb[:0], nb[:0], nb[:0], nb[:0])
    nbytes = np.zeros(n_gpu, np.int64)
    nbytes[c] = nb
    return Copies(g_l, ok & (rl == ApiRole.MEMCPY_SYNC), mask(pageable_h2d), mask(cuda & (ck == CopyKind.DTOD)),
                  mask((rl[c] == ApiRole.LAUNCH) & (ck == CopyKind.DTOH) & (table.dst_kind[rows] == MemKind.PAGEABLE)),
                  mask(pageable_h2d & (nb > th[0])), th, nbytes)


def blocking_copy_waits(c: Copies, n_cpu: int) -> tuple[np.ndarray, np.ndarray]:
    """Copies whose call waits for the copy to end: a ``cudaMemcpy`` except device-to-device and
    from pageable memory (``hipMemcpy*`` always), and an async device-to-pageable copy."""
    b = (c.sync & ~c.pageable_h2d & ~c.d2d) | c.pageable_d2h
    return n_cpu + np.nonzero(b)[0].astype(np.int64, copy=False), c.launch[b]


def stream_pred_at_launch(ix: WaitIndex, nodes: Nodes, lanes: Lanes) -> np.ndarray:
    """Per node (shape (n,), node ids, -1 none): ``lanes.lane_prev``, except at the launched
    copies, where it is the last task launched into the copy's stream before its call
    (:meth:`WaitIndex.last_before`): a graph launch whose kernels run on streams of their own
    stands in its launch stream by its last task (docs/model.md, "CUDA-graph launches"), which
    the lane order does not hold. Before, a pageable copy after such a graph synchronized with
    the stream's task before the graph, and a prediction that shortened the graph's kernels
    ended the copy's call 1 ns off the emulator (issue 36)."""
    prev = lanes.lane_prev
    n_cpu = nodes.n_cpu
    v = n_cpu + np.flatnonzero((nodes.launch[n_cpu:] >= 0) & (nodes.node_kind[n_cpu:] == Kind.MEMCPY))
    if not len(v) or ix._graphs is None:
        return prev
    call = nodes.launch[v]
    found = ix.last_before(lanes.lane[v], ix.c_start[call], ix.c_corr[call])
    graph = (found >= 0) & (lanes.lane[np.maximum(found, 0)] != lanes.lane[v])  # a graph's tail stands there
    out = prev.copy()
    out[v[graph]] = found[graph]  # elsewhere the lane order is kept as it was
    return out


def pageable_copy_edges(c: Copies, lane_prev: np.ndarray, n_cpu: int, rec_end, counts) -> tuple[np.ndarray, np.ndarray]:
    """Copies from pageable host memory to the device (CUDA, not HIP) that synchronize their
    stream before staging: every ``cudaMemcpy``, and a ``cudaMemcpyAsync`` above the trace's
    staging threshold (``Copies.threshold``). Edges ``(src, dst)`` of kind WAIT: the last task
    launched into the copy's stream before its call (``lane_prev``, per node:
    :func:`stream_pred_at_launch`) -> the call; not where the recorded call of an async copy
    ended before that task did (the trace shows no sync there; counted)."""
    prev = lane_prev[n_cpu:]
    p0 = np.maximum(prev, 0)
    synced = c.pageable_h2d & (prev >= 0) & (c.sync | c.staged)
    early = synced & ~c.sync & (rec_end[np.maximum(c.launch, 0)] < rec_end[p0])
    count(counts, "pageable copy above the staging size whose call returned before its stream was idle (no wait)",
          early.sum())
    w = synced & ~early
    return prev[w], c.launch[w]


def linked_waits(si: SyncInfo) -> np.ndarray:
    """Per CPU node: its sync record names the stream and the ``cudaEventRecord`` it waits for."""
    return si.has_record & (si.link_corr >= 0) & (si.stream >= 0)


def cross_stream_waits(ix: WaitIndex, role, si: SyncInfo, rec: RecordCalls, counts) -> tuple[np.ndarray, np.ndarray]:
    """``cudaEventRecord(e, s1)`` then ``cudaStreamWaitEvent(s2, e)``: the last task on ``s1``
    launched before the record precedes the first task on ``s2`` launched after the wait."""
    m = role == ApiRole.STREAM_WAIT_EVENT
    if not m.any():
        return _NONE, _NONE
    # the waits without an event link are left to the inference stage (graph/inferred.py)
    idx = np.nonzero(m & linked_waits(si))[0]
    rc = rec.find(ix.c_pid[idx], si.link_corr[idx])
    r0 = np.maximum(rc, 0)
    # the event's stream may be another device's (a cross-device wait): found by its id, not on
    # the wait's device only (before, such a wait found the waiting device's lane of that id,
    # and lost its edge: issue 36)
    hint_lane = np.where(rc >= 0, ix.last_launch_lane_before[r0], -1)
    hint = np.where(hint_lane >= 0, ix.lane_keys[np.maximum(hint_lane, 0), 2], -1)
    prod_lane, several = ix.event_lane(ix.c_pid[idx], si.device[idx], si.link_stream[idx], hint)
    count(counts, "cross-stream wait on a stream id several devices hold (event's device: the recording thread's last launch's)",
          int((several & (rc >= 0)).sum()))
    cons_lane = ix.find_lane(ix.c_pid[idx], si.device[idx], si.stream[idx])
    prod = np.where(rc >= 0, ix.last_before(prod_lane, ix.c_start[r0], ix.c_corr[r0]), -1)
    cons = ix.first_after(cons_lane, ix.c_start[idx], ix.c_corr[idx])
    ok = (prod >= 0) & (cons >= 0) & (prod_lane != cons_lane)
    count(counts, "cross-stream wait with no producer or no consumer task in the trace", (~ok).sum())
    return prod[ok], cons[ok]
