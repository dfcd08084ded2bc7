"""Read-only helpers shared by the optimization modules: facts about a task graph (API roles,
annotation ranges, mapped phases, dependents). Nothing here changes a graph; the optimizations
change graphs only through :mod:`daydream.transform`.
"""

from __future__ import annotations


import numpy as np

from ..util.arrays import sorted_unique, unique_inverse
from ..util.patterns import search_mask
from ..events.cuda_api import ApiRole, api_role
from ..events.table import Kind
from ..graph import NODE_CPU, TaskGraph, lower_median
from ..graph.startup import first_launch_one_time_ns, startup_calls
from ..graph.edges import EdgeKind
from ..mapping.rules import PHASES
from ..graph.memo import cached
from ..transform import compile_pattern, name_mask  # noqa: F401 - name_mask re-exported for the optimizations
from ..transform.selection import name_hits

#: API roles that make a CPU call wait for the GPU (they split CUDA-graph regions and are never
#: removed by an optimization).
SYNC_ROLES = (ApiRole.MEMCPY_SYNC, ApiRole.DEVICE_SYNC, ApiRole.STREAM_SYNC, ApiRole.EVENT_SYNC)


def cpu_roles(graph: TaskGraph) -> np.ndarray:
    """``ApiRole`` (uint8) of every node; GPU nodes hold ApiRole.OTHER (a copy of the array kept
    in the structure memo)."""
    return cached(graph, "common.cpu_roles", lambda: _cpu_roles(graph)).copy()


def _cpu_roles(graph: TaskGraph) -> np.ndarray:
    out = np.zeros(graph.n, dtype=np.uint8)
    cpu = graph.node_kind == NODE_CPU
    if cpu.any():
        uniq, inv = np.unique(graph.name_id[cpu], return_inverse=True)
        roles = np.fromiter((api_role(graph.names[int(i)]) for i in uniq), dtype=np.uint8, count=len(uniq))
        out[cpu] = roles[inv.reshape(-1)]
    return out


def median_launch_ns(graph: TaskGraph) -> int:
    """Lower median of the recorded durations (ns) of the calls that launched a kernel, one-time
    start-up calls left out (:func:`daydream.graph.startup.startup_calls`: a first launch that loads
    its module is no launch's cost) and each kernel's first launch without its one-time part
    (:func:`daydream.graph.startup.first_launch_one_time_ns`); 0 when there are none."""
    k = (graph.node_kind == Kind.KERNEL) & (graph.launch >= 0)
    calls = sorted_unique(graph.launch[k])
    steady = calls[~startup_calls(graph)[calls]]
    use = steady if len(steady) else calls
    return lower_median(graph.dur_ns[use] - first_launch_one_time_ns(graph)[use])


def has_dependents(graph: TaskGraph) -> np.ndarray:
    """Nodes whose result something observes (bool, shape (n,)): an extra predecessor of some node (a
    blocking call waits for them, or a task of another stream waits for them). Launch-queue
    back-pressure (``QUEUE`` edges: the launch of task k waits for task k - 1,024 of its stream to
    end) does not observe a result, and the transforms make those edges again from the new stream
    order (``transform.requeue``), so it does not count."""
    m = np.zeros(graph.n, dtype=bool)
    m[graph.edge_src[graph.dependency_edges & (graph.edge_kind != EdgeKind.QUEUE)]] = True
    return m


def cpu_ranges(graph: TaskGraph, pattern: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """CPU-side annotation ranges and framework ops whose name matches ``pattern``.

    Returns (pid, tid, start_ns, end_ns) arrays, duplicates (same pid, tid, start, end) removed:
    Kineto often records a ``ProfilerStep#N`` both as a ``user_annotation`` and as a ``cpu_op``.
    """
    cr = graph.cpu_ranges
    if cr is None or len(cr.pid) == 0:
        z = np.zeros(0, np.int64)
        return z, z, z, z
    uniq, inv = cached(graph, "common.cpu_range_names", lambda: unique_inverse(cr.name_id))  # structure: shared by the patterns
    hit = name_hits(graph, pattern, uniq)  # each distinct name searched once per pattern and graph structure
    r = np.nonzero(hit[inv])[0]
    key = np.stack([cr.pid[r], cr.tid[r], cr.start_ns[r], cr.end_ns[r]], axis=1).astype(np.int64)
    key = np.unique(key, axis=0) if len(key) else key.reshape(0, 4)
    return key[:, 0], key[:, 1], key[:, 2], key[:, 3]


def cpu_nodes_in_ranges(graph: TaskGraph, ranges, *, same_thread: bool) -> np.ndarray:
    """For each node, the index of the range (from :func:`cpu_ranges`) that encloses it, -1 none.

    Only CPU nodes with a table row are placed; a call is inside a range when its recorded
    interval lies within the range's, on the same process (and thread, with ``same_thread``).
    Ranges are expected not to overlap on a thread; the last enclosing one wins.
    """
    pid, tid, s, e = ranges
    out = np.full(graph.n, -1, dtype=np.int64)
    cpu = (graph.node_kind == NODE_CPU) & (graph.row >= 0)
    if not cpu.any() or len(s) == 0:
        return out
    # calls sorted by (process, [thread,] recorded start): a range's candidates are one slice of them
    # (found for all ranges at once by binary searches on one integer key: the thread's group, then
    # the start), so the cost is the calls once plus each range's own
    # calls, not the calls once per range (ranges grow with the trace: a step or a batch each)
    idx = np.flatnonzero(cpu & (graph.rec_end_ns >= graph.rec_start_ns))
    thr = graph.tid[idx] if same_thread else np.zeros(len(idx), graph.tid.dtype)
    o = np.lexsort((graph.rec_start_ns[idx], thr, graph.pid[idx]))
    idx, thr = idx[o], thr[o]
    npid, ns, ne = graph.pid[idx], graph.rec_start_ns[idx], graph.rec_end_ns[idx]
    pid, tid, s, e = (np.asarray(x, np.int64) for x in (pid, tid, s, e))
    if len(idx):
        rthr = tid if same_thread else np.zeros(len(s), np.int64)
        head = np.flatnonzero(np.r_[True, (npid[1:] != npid[:-1]) | (thr[1:] != thr[:-1])])
        gid = np.cumsum(np.r_[True, (npid[1:] != npid[:-1]) | (thr[1:] != thr[:-1])]) - 1
        up = np.unique(np.r_[npid[head].astype(np.int64), pid])
        ut = np.unique(np.r_[thr[head].astype(np.int64), rthr])
        gkey = np.searchsorted(up, npid[head]) * len(ut) + np.searchsorted(ut, thr[head])  # ascending: groups in (pid, thread) order
        rkey = np.searchsorted(up, pid) * len(ut) + np.searchsorted(ut, rthr)
        j = np.minimum(np.searchsorted(gkey, rkey), len(gkey) - 1)
        found = gkey[j] == rkey
        # one ascending key: each group's starts shifted past the group before it (a range's bounds
        # clamped to its group's span first: the same calls fall inside), no sort of the times
        gmin, gmax = ns[head].astype(np.int64), np.maximum.reduceat(ns, head).astype(np.int64)
        if float((gmax.astype(np.float64) - gmin.astype(np.float64) + 3).sum()) < 2.0 ** 62:  # in floats: no int64 overflow
            width = gmax - gmin + 3
            goff = np.cumsum(width) - width
            ckey = ns - gmin[gid] + goff[gid]

            def key(t):
                return np.clip(t, gmin[j] - 1, gmax[j] + 1) - gmin[j] + goff[j]
        else:  # spans too wide for one int64 key: the starts' ranks among all the times instead
            times = np.unique(np.r_[ns.astype(np.int64), s, e])
            span = len(times) + 1
            ckey = gid * span + np.searchsorted(times, ns)

            def key(t):
                return j * span + np.searchsorted(times, t)
        lo, hi = np.searchsorted(ckey, key(s), "left"), np.searchsorted(ckey, key(e), "right")
        cnt = np.where(found, np.maximum(hi - lo, 0), 0)
        ri = np.repeat(np.arange(len(s)), cnt)
        at = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt) + np.repeat(lo, cnt)
        ok = ne[at] <= e[ri]  # start >= s, end <= e (so start <= e)
        np.maximum.at(out, idx[at[ok]], ri[ok])  # ranges overlapping on a thread: the last one wins
    odd = np.flatnonzero(cpu & (graph.rec_end_ns < graph.rec_start_ns))  # ending before they start: checked one by one as before
    if len(odd):
        for i in range(len(s)):  # a Python step per range, only where such calls exist
            m = (graph.pid[odd] == pid[i]) & (graph.rec_start_ns[odd] >= s[i]) & (graph.rec_end_ns[odd] <= e[i])
            if same_thread:
                m &= graph.tid[odd] == tid[i]
            out[odd[m]] = i
    return out


def mapped_phase(graph: TaskGraph, phase: str) -> np.ndarray | None:
    """Mask of nodes mapped to ``phase``, or None when the graph carries no mapping."""
    if graph.mapping is None:
        return None
    return graph.mapping.phase == PHASES.index(phase)


def mapped_labels_match(graph: TaskGraph, key: str, pattern: str) -> np.ndarray:
    """Mask of nodes whose mapped label ``key`` ("layer_id" or "op_id") matches ``pattern``."""
    out = np.zeros(graph.n, dtype=bool)
    mp = graph.mapping
    if mp is None or not mp.labels:
        return out
    rx = compile_pattern(pattern)
    hit = search_mask(rx, mp.labels)
    ids = np.asarray(getattr(mp, key))
    ok = ids >= 0
    out[ok] = hit[ids[ok]]
    return out


def runs(lane_sorted_nodes: np.ndarray, lane: np.ndarray, member: np.ndarray, key: np.ndarray | None = None) -> np.ndarray:
    """Run ids over nodes listed in lane order: consecutive ``member`` nodes of one lane (and one
    ``key``) share an id; non-members get -1. ``lane_sorted_nodes`` lists one lane's nodes after
    another, each lane in its own order."""
    v = lane_sorted_nodes
    mem = member[v]
    brk = np.ones(len(v), dtype=bool)
    if len(v) > 1:
        same = (lane[v[1:]] == lane[v[:-1]]) & mem[1:] & mem[:-1]
        if key is not None:
            same &= key[v[1:]] == key[v[:-1]]
        brk[1:] = ~same
    rid = np.cumsum(brk) - 1
    out = np.full(len(lane), -1, dtype=np.int64)
    out[v[mem]] = rid[mem]
    return out


def lane_order(graph: TaskGraph, mask: np.ndarray | None = None) -> np.ndarray:
    """Nodes (optionally only ``mask``) sorted by lane, then by their order along the lane."""
    rank = np.empty(graph.n, dtype=np.int64)
    rank[graph.order] = np.arange(graph.n)
    v = np.arange(graph.n) if mask is None else np.nonzero(mask)[0]
    return v[np.lexsort((rank[v], graph.lane[v]))]


