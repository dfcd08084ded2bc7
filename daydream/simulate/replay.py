"""The replay loop (the simulator of the Daydream paper, section 4.4; rules in docs/model.md).

One pass over the tasks in a valid visiting order (:func:`daydream.graph.is_valid_order`).
Each task's start and end follow the rules of its in-edges (:mod:`daydream.graph.edges`)::

    start = max(max(t0, BASE bounds) + gap, START bounds)
    end   = max(start, END bounds) + dur

This is the measured hot loop, so it specializes the three common shapes — a call whose only
in-edge is its thread predecessor (code 1), a GPU task whose only in-edges are its stream
predecessor and its launch (code 0), and a call whose only other in-edge is an END edge from a
GPU task visited before it (code 3: a stream sync, a launch held by a full launch queue) — with
three virtual nodes standing in for "no launching call" (ready at ``t0``) and "first task of its
lane"; every other task (code 2) reads its in-edge list with the rule of each edge. A task with
an END edge whose source may not be final when the task is visited (a blocking copy waits for
the copy it launches itself) is finished lazily: when something reads its end, or after the loop.

The loop's inputs are prepared once as flat arrays (:func:`prepare`); big graphs run them through
the same loop compiled with numba (:mod:`.compiled`), with identical results.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..util import jit
from ..graph import EdgeKind, Phase, TaskGraph, rule_arrays
from ..graph.memo import memo, rules_key
from . import compiled as compiled_kernel

_NEG = -(1 << 200)  # below any time


def _end_edges(graph: TaskGraph, order: np.ndarray, ph) -> tuple[np.ndarray, np.ndarray]:
    """(eager, deferred): END edges whose source is final when the destination is visited (visited
    before it and without END edges of its own), so the destination ends at once; and the nodes
    with another END edge, finished lazily when their end is read."""
    n = graph.n
    src, dst = graph.edge_src, graph.edge_dst
    end_e = ph == Phase.END
    has_end = np.zeros(n, bool)
    has_end[dst[end_e]] = True
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    eager = end_e & ~has_end[src] & (rank[src] < rank[dst])
    deferred = np.zeros(n, bool)
    deferred[dst[end_e & ~eager]] = True
    return eager, deferred


def _codes(graph: TaskGraph, ph, anchor_end, off, eager, deferred) -> np.ndarray:
    """Per node: 1 simple CPU call, 0 simple GPU task, 3 simple call that waits for one GPU task
    visited before it, 2 generic (see module docstring)."""
    n = graph.n
    k, src, dst = graph.edge_kind, graph.edge_src, graph.edge_dst
    is_cpu = graph.is_cpu
    fits = np.where(is_cpu[dst], k == EdgeKind.THREAD, (k == EdgeKind.STREAM) | (k == EdgeKind.LAUNCH))
    fits &= ~(anchor_end & deferred[src])  # reading a lazily finished end needs the generic path
    wait = eager & anchor_end & (off == 0) & is_cpu[dst]
    odd = np.zeros(n, bool)
    odd[dst[~(fits | wait)]] = True
    n_end = np.bincount(dst[ph == Phase.END], minlength=n)
    simple = ~odd & ~deferred
    return np.where(simple & (n_end == 0), np.where(is_cpu, 1, 0), np.where(simple & is_cpu & (n_end == 1), 3, 2)).astype(np.int8)


class Prepared(NamedTuple):
    """The replay's inputs as flat arrays (both the Python loop and the compiled kernel read them).

    Per node (int64 unless said): ``prev`` lane predecessor (virtual node ``n+1`` / ``n+2`` for
    the first call / GPU task of a lane), ``code`` (int8, module docstring), ``a_col`` (code 0:
    the launching call or virtual ``n``; else the CPU gap, ns), ``q_src`` (code 3: the GPU task
    waited for), ``deferred`` (bool: finished lazily). Generic in-edges of code-2 nodes as CSR
    by destination (edge-id order within a node): ``g_ptr`` (n+1), ``g_src``, ``g_ae`` (bool:
    anchored at the source's end), ``g_off`` (ns), ``g_ph`` (int8 Phase); END edges apart in
    ``e_ptr``, ``e_src``, ``e_ae``, ``e_off``. Scalars ns: ``t0``, ``L``, ``G``.
    """

    prev: np.ndarray
    code: np.ndarray
    a_col: np.ndarray
    q_src: np.ndarray
    deferred: np.ndarray
    g_ptr: np.ndarray
    g_src: np.ndarray
    g_ae: np.ndarray
    g_off: np.ndarray
    g_ph: np.ndarray
    e_ptr: np.ndarray
    e_src: np.ndarray
    e_ae: np.ndarray
    e_off: np.ndarray
    t0: int
    L: int
    G: int


def _csr(n: int, idx: np.ndarray, dst, src, ae, off, ph) -> tuple[np.ndarray, ...]:
    """Edges ``idx`` grouped by destination (stable: edge-id order within a node)."""
    idx = idx[np.argsort(dst[idx], kind="stable")]
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst[idx], minlength=n), out=ptr[1:])
    return ptr, src[idx].astype(np.int64, copy=False), ae[idx].astype(np.bool_), off[idx].astype(np.int64, copy=False), ph[idx].astype(np.int8)


def prepare(graph: TaskGraph, order: np.ndarray) -> Prepared:
    """The flat inputs of a replay of ``graph`` visiting ``order`` (must be valid). Everything but
    the CPU gaps is kept in the graph's structure memo (:mod:`daydream.graph.memo`) for ``order``, the
    rules and the graph's constants: a graph that differs only in durations reuses it."""
    ra = rule_arrays()
    key = ("replay.prepare", rules_key(ra, graph), int(graph.t0_ns), int(graph.launch_latency_ns), int(graph.gpu_gap_ns),
           int(graph.staging_latency_ns), graph.staging_key())
    hit = memo(graph).get(key)
    if hit is None or hit[0] is not order:
        hit = memo(graph)[key] = (order, _prepare_structure(graph, order, ra, method="auto"))
    pr = hit[1]
    a_col = np.where(pr.code == 0, pr.a_col, graph.gap_ns).astype(np.int64)
    return pr._replace(a_col=a_col)


#: :func:`_prepare_structure` runs its compiled passes from this many edges ("auto")
PREPARE_MIN = 50_000


def _prepare_structure(graph: TaskGraph, order: np.ndarray, ra, method: str = "numpy") -> Prepared:
    """:func:`prepare` without the CPU gaps (``a_col`` holds the launching call of code-0 nodes):
    :func:`_prepare_reference` with the END-edge work done on the END edges alone (a few per
    cent of the edges: syncs, full launch queues) and each per-edge lookup made once.
    ``method``: "numpy" these array passes; "auto" the same in a few compiled passes
    (:func:`_prepare_kernel`) from :data:`PREPARE_MIN` edges when numba is there ("compiled"
    whatever the size, "python" the kernel uncompiled); the same answers."""
    n = graph.n
    k, src, dst = graph.edge_kind, graph.edge_src, graph.edge_dst
    nk = max(int(k.max()) + 1 if len(k) else 0, len(ra.phase))
    ph_k, ae_k, off_k = (np.resize(a, nk) for a in (ra.phase, ra.anchor_end, ra.graph_offsets_ns(graph)))  # per kind
    ph_k[len(ra.phase):], ae_k[len(ra.phase):], off_k[len(ra.phase):] = 0, False, 0
    fn = jit.kernel_for(_prepare_kernel, len(k), PREPARE_MIN, method)
    lists = None if fn is None else _prepare_lists_kernel if method == "python" else jit.compiled(_prepare_lists_kernel)
    if lists is not None:
        i64 = np.int64
        k, src, dst = np.ascontiguousarray(k, np.uint8), np.ascontiguousarray(src, i64), np.ascontiguousarray(dst, i64)
        ph_k, ae_k, off_k = np.ascontiguousarray(ph_k, np.uint8), np.ascontiguousarray(ae_k, np.bool_), np.ascontiguousarray(off_k, i64)
        prev, code, a_col, deferred = jit.call(
            fn, n, k, src, dst, np.ascontiguousarray(order, i64), ph_k, ae_k, off_k, np.ascontiguousarray(graph.is_cpu, np.bool_),
            np.ascontiguousarray(graph.lane_prev, i64), np.ascontiguousarray(graph.launch, i64), np.uint8(EdgeKind.THREAD),
            np.uint8(EdgeKind.STREAM), np.uint8(EdgeKind.LAUNCH), np.uint8(Phase.END))
        out = jit.call(lists, n, k, src, dst, ph_k, ae_k, off_k, code, np.uint8(Phase.END))
        return _with_staging(graph, Prepared(prev, code, a_col, out[0], deferred, *out[1:], int(graph.t0_ns),
                                             int(graph.launch_latency_ns), int(graph.gpu_gap_ns)))
    is_end = (ph_k == Phase.END)[k]
    end_i = np.flatnonzero(is_end)
    es, ed, ek = src[end_i], dst[end_i], k[end_i]
    has_end = np.zeros(n, bool)
    has_end[ed] = True
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    eager = ~has_end[es] & (rank[es] < rank[ed])  # per END edge (_end_edges)
    deferred = np.zeros(n, bool)
    deferred[ed[~eager]] = True
    is_cpu = graph.is_cpu
    cpu_dst = is_cpu[dst]
    fit_cpu = np.zeros(nk, bool)
    fit_cpu[EdgeKind.THREAD] = True
    fit_gpu = np.zeros(nk, bool)
    fit_gpu[[EdgeKind.STREAM, EdgeKind.LAUNCH]] = True
    fits = np.where(cpu_dst, fit_cpu[k], fit_gpu[k])  # (_codes)
    if deferred.any():
        fits &= ~(ae_k[k] & deferred[src])  # reading a lazily finished end needs the generic path
    fits[end_i] |= eager & ae_k[ek] & (off_k[ek] == 0) & cpu_dst[end_i]  # waits on one GPU task
    odd = np.zeros(n, bool)
    odd[dst[~fits]] = True
    n_end = np.bincount(ed, minlength=n)
    simple = ~odd & ~deferred
    code = np.where(simple & (n_end == 0), np.where(is_cpu, 1, 0), np.where(simple & is_cpu & (n_end == 1), 3, 2)).astype(np.int8)
    lp = graph.lane_prev
    prev = np.where(lp >= 0, lp, np.where(is_cpu, n + 1, n + 2)).astype(np.int64)
    la = graph.launch
    a_col = np.where(la >= 0, la, n).astype(np.int64)
    q_src = np.zeros(n, np.int64)  # code 3: the GPU task the call waits for
    e3 = code[ed] == 3
    q_src[ed[e3]] = es[e3]
    g2 = code[dst] == 2
    g = _csr_by_kind(n, np.flatnonzero(g2 & ~is_end), dst, src, k, ae_k, off_k, ph_k)
    e = _csr_by_kind(n, end_i[g2[end_i]], dst, src, k, ae_k, off_k, ph_k)
    return _with_staging(graph, Prepared(prev, code, a_col, q_src, deferred, *g, *e[:4],
                                         int(graph.t0_ns), int(graph.launch_latency_ns), int(graph.gpu_gap_ns)))


def _with_staging(graph: TaskGraph, p: Prepared) -> Prepared:
    """``p`` with each staged copy's size-dependent staging time (``TaskGraph.staging_extra_ns``)
    added to its launch edge's offset: a staged copy has an ``L + S`` edge from its launching call,
    so it is a code-2 node and that edge is in its generic in-edge list."""
    extra = graph.staging_extra_ns()
    if extra is None:
        return p
    d = np.repeat(np.arange(graph.n), np.diff(p.g_ptr))
    la = graph.launch
    hit = (extra[d] != 0) & (p.g_src == la[d]) & ~p.g_ae & (p.code[d] == 2)
    if not hit.any():
        return p
    g_off = p.g_off.copy()
    g_off[hit] += extra[d[hit]]
    return p._replace(g_off=g_off)


def _prepare_kernel(n, k, src, dst, order, ph_k, ae_k, off_k, is_cpu, lane_prev, launch, k_thread, k_stream, k_launch,
                    p_end):
    """:func:`_prepare_structure`'s node passes, compiled: the END edges (eager or deferring
    their destination), which edges fit their destination's simple code, the codes, and the lane
    and launch columns. Returns (prev, code, a_col, deferred) of :class:`Prepared`."""
    m = len(k)
    has_end = np.zeros(n, np.bool_)
    n_end = np.zeros(n, np.int64)
    for e in range(m):
        if ph_k[k[e]] == p_end:
            has_end[dst[e]] = True
            n_end[dst[e]] += 1
    rank = np.empty(n, np.int64)
    for i in range(n):
        rank[order[i]] = i
    deferred = np.zeros(n, np.bool_)
    for e in range(m):  # END edges whose source may not be final: their destination is finished lazily
        if ph_k[k[e]] == p_end:
            s = src[e]
            if has_end[s] or rank[s] >= rank[dst[e]]:
                deferred[dst[e]] = True
    odd = np.zeros(n, np.bool_)
    for e in range(m):
        kk = k[e]
        d = dst[e]
        cd = is_cpu[d]
        if cd:
            fits = kk == k_thread
        else:
            fits = kk == k_stream or kk == k_launch
        if ae_k[kk] and deferred[src[e]]:  # reading a lazily finished end needs the generic path
            fits = False
        if ph_k[kk] == p_end and ae_k[kk] and off_k[kk] == 0 and cd:  # an eager wait on one GPU task
            s = src[e]
            if not has_end[s] and rank[s] < rank[d]:
                fits = True
        if not fits:
            odd[d] = True
    code = np.empty(n, np.int8)
    prev = np.empty(n, np.int64)
    a_col = np.empty(n, np.int64)
    for v in range(n):
        simple = not odd[v] and not deferred[v]
        c = 2
        if simple and n_end[v] == 0:
            c = 1 if is_cpu[v] else 0
        elif simple and is_cpu[v] and n_end[v] == 1:
            c = 3
        code[v] = c
        p = lane_prev[v]
        prev[v] = p if p >= 0 else (n + 1 if is_cpu[v] else n + 2)
        a = launch[v]
        a_col[v] = a if a >= 0 else n
    return prev, code, a_col, deferred


def _prepare_lists_kernel(n, k, src, dst, ph_k, ae_k, off_k, code, p_end):
    """:func:`_prepare_structure`'s edge lists, compiled: ``q_src`` (the GPU task a code-3 call
    waits for) and the two CSR lists of the code-2 nodes' in-edges (by counting, edge-id order
    within a node). Returns (q_src, g_ptr, g_src, g_ae, g_off, g_ph, e_ptr, e_src, e_ae, e_off)."""
    m = len(k)
    q_src = np.zeros(n, np.int64)
    g_ptr = np.zeros(n + 1, np.int64)
    e_ptr = np.zeros(n + 1, np.int64)
    for e in range(m):
        d = dst[e]
        if code[d] == 2:
            if ph_k[k[e]] == p_end:
                e_ptr[d + 1] += 1
            else:
                g_ptr[d + 1] += 1
        elif code[d] == 3 and ph_k[k[e]] == p_end:
            q_src[d] = src[e]
    for v in range(n):
        g_ptr[v + 1] += g_ptr[v]
        e_ptr[v + 1] += e_ptr[v]
    ng = g_ptr[n]
    ne = e_ptr[n]
    g_src = np.empty(ng, np.int64)
    g_ae = np.empty(ng, np.bool_)
    g_off = np.empty(ng, np.int64)
    g_ph = np.empty(ng, np.int8)
    e_src = np.empty(ne, np.int64)
    e_ae = np.empty(ne, np.bool_)
    e_off = np.empty(ne, np.int64)
    g_at = g_ptr[:n].copy()
    e_at = e_ptr[:n].copy()
    for e in range(m):
        d = dst[e]
        if code[d] != 2:
            continue
        kk = k[e]
        if ph_k[kk] == p_end:
            j = e_at[d]
            e_src[j] = src[e]
            e_ae[j] = ae_k[kk]
            e_off[j] = off_k[kk]
            e_at[d] = j + 1
        else:
            j = g_at[d]
            g_src[j] = src[e]
            g_ae[j] = ae_k[kk]
            g_off[j] = off_k[kk]
            g_ph[j] = ph_k[kk]
            g_at[d] = j + 1
    return q_src, g_ptr, g_src, g_ae, g_off, g_ph, e_ptr, e_src, e_ae, e_off


def _csr_by_kind(n: int, idx: np.ndarray, dst, src, k, ae_k, off_k, ph_k) -> tuple[np.ndarray, ...]:
    """:func:`_csr` with the edges' anchor, offset and phase read from per-kind tables at ``idx`` only."""
    idx = idx[np.argsort(dst[idx], kind="stable")]
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst[idx], minlength=n), out=ptr[1:])
    ki = k[idx]
    return ptr, src[idx].astype(np.int64, copy=False), ae_k[ki].astype(np.bool_), off_k[ki].astype(np.int64), ph_k[ki].astype(np.int8)


def _prepare_reference(graph: TaskGraph, order: np.ndarray, ra) -> Prepared:
    """:func:`_prepare_structure` as first written, one whole-edge pass per rule (the tests' reference)."""
    n = graph.n
    k, src, dst = graph.edge_kind, graph.edge_src, graph.edge_dst
    ph, anchor_end = ra.phase[k], ra.anchor_end[k]
    off = ra.edge_offsets_ns(graph)
    eager, deferred = _end_edges(graph, order, ph)
    code = _codes(graph, ph, anchor_end, off, eager, deferred)
    is_cpu = graph.is_cpu
    lp = graph.lane_prev
    prev = np.where(lp >= 0, lp, np.where(is_cpu, n + 1, n + 2)).astype(np.int64)
    la = graph.launch
    a_col = np.where(la >= 0, la, n).astype(np.int64)
    q_src = np.zeros(n, np.int64)  # code 3: the GPU task the call waits for
    e3 = np.nonzero((ph == Phase.END) & (code[dst] == 3))[0]
    q_src[dst[e3]] = src[e3]
    g2 = code[dst] == 2
    is_end = ph == Phase.END
    g = _csr(n, np.nonzero(g2 & ~is_end)[0], dst, src, anchor_end, off, ph)
    e = _csr(n, np.nonzero(g2 & is_end)[0], dst, src, anchor_end, off, ph)
    return Prepared(prev, code, a_col, q_src, deferred, *g, *e[:4],
                    int(graph.t0_ns), int(graph.launch_latency_ns), int(graph.gpu_gap_ns))


def _in_lists(ptr: np.ndarray, src, ae, off, ph) -> dict[int, list[tuple[int, bool, int, int]]]:
    """CSR in-edges as {node: [(src, anchor_end, offset, phase), ...]} (the Python loop's form)."""
    nodes = np.nonzero(np.diff(ptr))[0].tolist()
    rows = list(zip(src.tolist(), ae.tolist(), off.tolist(), ph.tolist()))
    bounds = ptr.tolist()
    return {v: rows[bounds[v]:bounds[v + 1]] for v in nodes}


def replay(graph: TaskGraph, order: np.ndarray, compiled: bool | None = None, dur: np.ndarray | None = None) -> tuple:
    """(start, end, blocked) of every node, ns, visiting ``order`` (must be valid): int64 arrays
    from the compiled kernel (:mod:`.compiled`), lists of ints from the Python loop.

    ``compiled``: None picks the kernel when :func:`.compiled.use_kernel` says so (numba
    importable, graph big enough or the kernel already loaded in this process
    (:func:`daydream.util.jit.loaded`: a prediction's smaller graph after a big baseline), every time
    provably within int64); True/False force the choice (True still falls back when numba is
    missing or a time could leave int64).
    Both give the same times to the nanosecond (tests/test_replay_compiled.py). ``dur``: the
    durations to replay (int64 (n,), ns), default ``graph.dur_ns`` (the contention model's
    stretched ones, :mod:`.contention`).
    """
    n = graph.n
    dur_ns = graph.dur_ns if dur is None else dur
    pr = prepare(graph, order)
    forced = compiled is True or (compiled is None and jit.loaded(compiled_kernel._kernel))
    if (compiled is not False) and compiled_kernel.use_kernel(graph, pr, forced=forced, dur=dur_ns):
        return compiled_kernel.run(pr, np.ascontiguousarray(order, np.int64), dur_ns, graph.gap_ns)
    t0, L, G = pr.t0, pr.L, pr.G
    V_LAUNCH, V_CPU0, V_GPU0 = n, n + 1, n + 2
    prev, code, a_col, deferred = pr.prev, pr.code, pr.a_col, pr.deferred
    q_src = pr.q_src.tolist()
    # generic in-edge lists of code-2 nodes: (src, anchor_end, offset, phase); END edges apart
    gen = _in_lists(pr.g_ptr, pr.g_src, pr.g_ae, pr.g_off, pr.g_ph)
    gen_end = _in_lists(pr.e_ptr, pr.e_src, pr.e_ae, pr.e_off, np.full(len(pr.e_src), Phase.END, np.int8))
    start = [0] * (n + 3)
    end = [0] * (n + 3)
    blocked = [0] * n
    pend = deferred.tolist() + [False] * 3
    start[V_LAUNCH] = t0 - L
    end[V_CPU0] = t0
    end[V_GPU0] = _NEG

    def finish(u: int) -> None:
        pend[u] = False
        w = s_u = start[u]
        for x, ae, o, _ in gen_end.get(u, ()):
            if ae and pend[x]:
                finish(x)
            t = (end[x] if ae else start[x]) + o
            if t > w:
                w = t
        blocked[u] = w - s_u
        end[u] = w + dur[u]

    dur = dur_ns.tolist()
    gap = graph.gap_ns.tolist()
    for v, p, c, a, d in zip(order.tolist(), prev[order].tolist(), code[order].tolist(), a_col[order].tolist(),
                             dur_ns[order].tolist()):
        if c == 1:  # call after the previous call on its thread plus the gap (a)
            s = end[p] + a
            start[v] = s
            end[v] = s + d
        elif c == 0:  # GPU task after its launch (a) + L and its stream predecessor + G
            s = start[a] + L
            e = end[p] + G
            if e > s:
                s = e
            start[v] = s
            end[v] = s + d
        elif c == 3:  # a call (as code 1) whose end waits for a GPU task already replayed
            s = end[p] + a
            start[v] = s
            w = end[q_src[v]]
            if w > s:
                blocked[v] = w - s
                end[v] = w + d
            else:
                end[v] = s + d
        else:
            base = t0
            sb = _NEG
            for u, ae, o, q in gen.get(v, ()):
                if ae:
                    if pend[u]:
                        finish(u)
                    t = end[u] + o
                else:
                    t = start[u] + o
                if q == 0:
                    if t > base:
                        base = t
                elif t > sb:
                    sb = t
            s = base + gap[v]
            if sb > s:
                s = sb
            start[v] = s
            if not pend[v]:  # END edges, if any, are eager: their sources are final
                w = s
                for u, ae, o, _ in gen_end.get(v, ()):
                    t = (end[u] if ae else start[u]) + o
                    if t > w:
                        w = t
                blocked[v] = w - s
                end[v] = w + d
    for u in np.flatnonzero(deferred).tolist():
        if pend[u]:
            finish(u)
    return start[:n], end[:n], blocked
