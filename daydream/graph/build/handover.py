"""Builder stage: CPU hand-over between threads (``docs/model.md``, "CPU hand-over between threads").

A training step with a CUDA model runs its backward pass on the autograd engine's device thread:
the main thread launches the last forward kernels, calls ``loss.backward()`` and blocks; the
autograd thread launches the backward kernels inside ``autograd::engine::evaluate_function: ...``
ops (PyTorch >= 1.10; older versions record the bare ``XxxBackward`` / ``torch::autograd::...``
ops); when it is done the main thread wakes up and goes on (optimizer step). Neither direction is
recorded: the main thread shows nothing at all while it waits (no op encloses ``backward()`` in
Kineto traces), the autograd thread shows a long gap since its previous backward pass.

Rule (all times recorded, per pair of threads M, U of one process, U having engine calls):
for two consecutive calls ``p -> v`` of M (its gap ``[end p, start v]``), let ``a .. b`` be the
calls of U inside the gap. It is a **hand-over window** when

1. U's calls overlapping the gap all lie inside it (U was idle at ``end p`` and stays idle until
   ``start v``), and at least one of ``a .. b`` lies inside an autograd engine op of U;
2. M was idle while U worked: no row of M (op, range, call, marker) starts in ``(end p, end b)``,
   except rows inside M's own engine ops: the thread that called ``backward()`` runs the engine's
   CPU-device work (e.g. ``AccumulateGrad`` of CPU tensors) while it waits for the device thread
   (PyTorch's autograd engine: the calling thread drives the CPU ready queue until the graph task
   completes). Seen on the DLRM ranks (``param_dlrm``): one ``AccumulateGrad`` on the main thread
   3.5 ms into a 4.2 ms backward pass;
3. M resumes promptly: its first row starting at or after ``end b`` starts within
   :data:`RESUME_TOLERANCE_NS` of it.

When several windows share U's calls (a pipeline thread idle across all or part of a burst), the
widest is kept, then the one of the thread idle longest around it (a thread idle across a whole
backward pass that resumes within the tolerance of its end is indistinguishable from a waiter by
timing; the documented limit of the rule).

Then two HANDOVER edges (:class:`~daydream.graph.edges.Origin` INFERRED): ``p -> a`` (the release:
U's work starts after M's last call) and ``b -> v`` (the join: M goes on after U's last call).
A destination's gap becomes its own part only: ``start - max(end of its thread predecessor,
end of its hand-over sources)`` (clamped at 0), so a replay puts it at
``max(prev end, source end) + own gap`` and a change of either thread's work moves it.
"""

from __future__ import annotations

import re

import numpy as np

from ...util.arrays import sorted_unique
from ...events.table import EventTable, Kind
from .._arrays import count

#: names of the autograd engine's ops (the ops the device thread runs a backward pass in)
ENGINE_OP = re.compile(r"^autograd::engine::evaluate_function|^torch::autograd::|Backward\d*$")

#: how soon after the other thread's last call the waiting thread must show activity again. On
#: the two real traces we checked the main thread's first op after the backward pass starts
#: 0.11 ms (ResNet-50, PyTorch 1.8) and 0.25 ms (df_index_resolver, PyTorch 2) after the
#: autograd thread's last call; 1 ms leaves room for a slower host without admitting threads that
#: merely happened to be idle.
RESUME_TOLERANCE_NS = 1_000_000



def _inside(starts, ends, lo, hi) -> np.ndarray:
    """Per interval ``[starts, ends]`` (sorted by start): inside some interval of ``[lo, hi]``."""
    if not len(lo) or not len(starts):
        return np.zeros(len(starts), bool)
    o = np.argsort(lo, kind="stable")
    lo, hi = lo[o], np.maximum.accumulate(hi[o])
    k = np.searchsorted(lo, starts, "right") - 1
    return (k >= 0) & (ends <= hi[np.maximum(k, 0)])


def _by_thread(rows: np.ndarray, table: EventTable) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` sorted by (pid, tid, start), and their packed (pid, tid) keys in that order."""
    key = _key(table.pid[rows], table.tid[rows])
    st = table.start_ns[rows]
    if len(st) < 2 or bool(np.all(st[1:] >= st[:-1])):  # rows in start order: a stable sort by key suffices
        o = np.argsort(key, kind="stable")
    else:
        o = np.lexsort((st, key))
    return rows[o], key[o]


def _key(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """One int64 per (pid, tid) (a lookup key, not an order)."""
    return (pid.astype(np.int64, copy=False) << np.int64(32)) ^ (tid.astype(np.int64, copy=False) & np.int64(0xFFFFFFFF))


def _threads(table: EventTable, pid, tid, rec_start, rec_end, n_cpu: int) -> dict:
    """Per CPU thread (pid, tid): its calls by start, whether each is in an engine op, its row starts."""
    names = table.names
    op_rows = np.nonzero(table.kind == Kind.CPU_OP)[0]
    used = sorted_unique(table.name_id[op_rows]).tolist()  # each op name matched once
    is_eng_name = np.zeros(len(names), bool)
    is_eng_name[used] = [ENGINE_OP.search(names[i]) is not None for i in used]
    eng_rows = op_rows[is_eng_name[table.name_id[op_rows]]]
    if not len(eng_rows):  # no autograd engine ops: no hand-over window can qualify
        return {}
    k = table.kind
    act_rows = np.nonzero((k == Kind.CPU_OP) | (k == Kind.RANGE) | (k == Kind.RUNTIME) | (k == Kind.MARKER))[0]
    eng_rows, eng_key = _by_thread(eng_rows, table)
    act_rows, act_key = _by_thread(act_rows, table)
    cpu = np.arange(n_cpu, dtype=np.int64)
    nk = _key(pid[:n_cpu], tid[:n_cpu])
    o = np.lexsort((cpu, rec_start[:n_cpu], nk))
    node_key = nk[o]
    out = {}
    for p_, t_ in sorted(set(zip(pid[:n_cpu].tolist(), tid[:n_cpu].tolist()))):  # threads are few
        key = int(_key(np.array([p_]), np.array([t_]))[0])
        nodes = o[np.searchsorted(node_key, key, "left") : np.searchsorted(node_key, key, "right")]
        er = eng_rows[np.searchsorted(eng_key, key, "left") : np.searchsorted(eng_key, key, "right")]
        ar = act_rows[np.searchsorted(act_key, key, "left") : np.searchsorted(act_key, key, "right")]
        eng = _inside(rec_start[nodes], rec_end[nodes], table.start_ns[er], table.end_ns[er])
        # rows inside the thread's own engine ops (the thread that called backward() runs the
        # engine's CPU work while it waits) do not count as activity of a waiting thread
        ar = ar[~_inside(table.start_ns[ar], table.end_ns[ar], table.start_ns[er], table.end_ns[er])]
        out[(p_, t_)] = (nodes, eng, table.start_ns[ar])
    return out


def _windows(m, u, rec_start, rec_end) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Hand-over windows of waiting thread ``m`` over working thread ``u`` (rule in the module doc):
    (p, v, a, b) node arrays."""
    m_nodes, _, m_rows = m
    u_nodes, u_eng, _ = u
    z = np.zeros(0, np.int64)
    if len(m_nodes) < 2 or not u_eng.any():
        return z, z, z, z
    p, v = m_nodes[:-1], m_nodes[1:]
    e_p, s_v = rec_end[p], rec_start[v]
    us, ue = rec_start[u_nodes], rec_end[u_nodes]
    lo = np.searchsorted(us, e_p, "left")
    hi = np.searchsorted(us, s_v, "left")
    ok = hi > lo
    lo_c, last = np.minimum(lo, len(us) - 1), np.maximum(hi - 1, 0)
    ok &= ue[last] <= s_v
    ok &= (lo == 0) | (ue[np.maximum(lo - 1, 0)] <= e_p)
    n_eng = np.concatenate([[0], np.cumsum(u_eng)])
    ok &= n_eng[hi] > n_eng[lo]
    burst_end = ue[last]
    ok &= np.searchsorted(m_rows, e_p, "right") >= np.searchsorted(m_rows, burst_end, "left")
    nxt = np.searchsorted(m_rows, burst_end, "left")
    resume = m_rows[np.minimum(nxt, len(m_rows) - 1)]
    ok &= (nxt < len(m_rows)) & (resume - burst_end <= RESUME_TOLERANCE_NS)
    return p[ok], v[ok], u_nodes[lo_c[ok]], u_nodes[last[ok]]


def own_gaps(gap, rec_start, rec_end, lane_prev, t0: int, src, dst) -> None:
    """Rewrite the gap of each hand-over destination to its own part (in place):
    ``start - max(end of its thread predecessor (t0 if none), latest end of its sources)``, >= 0."""
    if not len(dst):
        return
    w = np.full(len(gap), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(w, dst, rec_end[src])
    d = sorted_unique(dst)
    prev = lane_prev[d]
    prev_end = np.where(prev >= 0, rec_end[np.maximum(prev, 0)], t0)
    gap[d] = np.maximum(rec_start[d] - np.maximum(prev_end, w[d]), 0)


def handover_edges(table: EventTable, pid, tid, rec_start, rec_end, n_cpu: int,
                   counts: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Stage: the inferred CPU hand-over edges (src, dst) between threads of one process (module doc).

    Counts the edges under "CPU hand-over between threads (inferred edges)".
    """
    th = _threads(table, pid, tid, rec_start, rec_end, n_cpu)
    win = [np.zeros((0, 4), np.int64)]
    for mk, m in th.items():
        for uk, u in th.items():
            if uk != mk and uk[0] == mk[0]:
                win.append(np.stack(_windows(m, u, rec_start, rec_end), axis=1))
    p, v, a, b = _one_waiter(np.concatenate(win), rec_start, rec_end, tid).T
    count(counts, "CPU hand-over between threads (inferred edges)", 2 * len(p))
    return np.concatenate([p, b]), np.concatenate([a, v])


def _one_waiter(w: np.ndarray, rec_start, rec_end, tid) -> np.ndarray:
    """One waiting thread per burst (rows ``(p, v, a, b)``). A thread idle across part of a burst
    yields a window nested in the waiter's: windows are taken widest first (``end b - start a``),
    then by the longest idle gap ``end p .. start v`` (the waiter is idle around the whole burst,
    release and resume included), then earliest resume,
    and a window overlapping one already taken (same U) is dropped. Candidates are few (a handful per step)."""
    if len(w) < 2:
        return w
    lo, hi, u = rec_start[w[:, 2]], rec_end[w[:, 3]], tid[w[:, 2]]
    o = np.lexsort((rec_start[w[:, 1]], rec_end[w[:, 0]] - rec_start[w[:, 1]], -(hi - lo)))
    taken: list[int] = []
    for k in o.tolist():
        if all(hi[k] <= lo[j] or hi[j] <= lo[k] or u[k] != u[j] for j in taken):
            taken.append(k)
    return w[np.sort(np.asarray(taken, np.int64))]
