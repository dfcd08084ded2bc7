"""The replay loop compiled with numba: the same rules, the same times to the nanosecond.

:func:`daydream.simulate.replay.replay` prepares flat arrays (:class:`~.replay.Prepared`) and
runs either its Python loop or :func:`_kernel` here, compiled by numba on first use. The kernel
is the Python loop statement for statement, over int64 arrays instead of Python ints; the
lazily finished ends (a blocking copy that waits for the copy it launches) use an explicit stack
instead of recursion. tests/test_replay_compiled.py checks both paths give identical start, end
and blocked times (hence identical binding records, which are derived from those times) on
random emulator programs and random transformed graphs, and runs the kernel uncompiled too.

Why compiled: the per-task Python loop was the replay's whole cost (about 0.4-0.6 us a task;
issue 18 measured 24-33x faster compiled). numba is a dependency, but the package still works
without it (the Python loop runs); it is imported only when a graph is big enough to pay for
the import (:data:`MIN_TASKS`).

int64: compiled integers wrap silently where Python ints grow, so :func:`fits_int64` bounds
every time the replay can produce before the kernel runs: each time is the trace start plus a
sum of durations, gaps and edge offsets along one chain of tasks, so it is at most
``|t0| + |L| + sum(|dur| + |gap| + |L| + |G|) + sum(|edge offset|)`` in magnitude; when that
bound reaches :data:`LIMIT` (2**62, leaving room for the sentinel and for ``blocked = w - s``),
the Python loop runs instead (and raises its usual error when a time leaves int64).

Compilation, its cache and the ``DAYDREAM_JIT`` switch: :mod:`daydream.util.jit`.
"""

from __future__ import annotations

import numpy as np

from ..util import jit

#: graphs with fewer tasks replay in Python unless forced: importing numba and loading the
#: cached kernel costs about 0.3 s (measured: ``import numba`` 0.24-0.34 s on the 2-core bench
#: VM), what the Python loop spends on about 500 k tasks; a run replays the graph several times
#: (baseline, predictions, windows), so the kernel pays off from about 100 k tasks.
MIN_TASKS = 100_000
#: bound on |every replayed time| for the kernel to run (see the module docstring)
LIMIT = float(1 << 62)
_NEG = -(1 << 62)  # below any time the kernel can meet (|times| < LIMIT)


def fits_int64(p, dur: np.ndarray, gap: np.ndarray) -> bool:
    """True when every time a replay of these inputs can produce is below :data:`LIMIT` in
    magnitude (float sums: exact enough, the limit is far from the int64 edge)."""
    n = len(dur)
    total = abs(float(p.t0)) + abs(float(p.L)) + n * (abs(float(p.L)) + abs(float(p.G)))
    for a in (dur, gap, p.g_off, p.e_off):
        if len(a):
            total += float(np.abs(a.astype(np.float64)).sum())
    return total < LIMIT


def kernel():
    """The compiled kernel, or None without numba (:func:`daydream.util.jit.compiled_calling`: the
    kernel calls the compiled _finish through the name ``_finish_c``)."""
    return jit.compiled_calling(globals(), "_finish_c", _finish, _kernel)


def use_kernel(graph, p, forced: bool = False, dur: np.ndarray | None = None) -> bool:
    """Whether :func:`run` should replay this graph: :func:`daydream.util.jit.wanted` (size
    :data:`MIN_TASKS`), every time within int64 (:func:`fits_int64`, with the durations ``dur``
    replayed, default ``graph.dur_ns``), numba importable."""
    if not jit.wanted(graph.n, MIN_TASKS, forced):
        return False
    return fits_int64(p, graph.dur_ns if dur is None else dur, graph.gap_ns) and kernel() is not None


def run(p, order: np.ndarray, dur: np.ndarray, gap: np.ndarray, fn=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, blocked) int64 arrays of length n: the kernel (``fn``, default the compiled
    one) over prepared inputs ``p``."""
    fn = fn or kernel()
    args = (order, p.prev, p.code, p.a_col, p.q_src, p.deferred.astype(np.bool_),
            p.g_ptr, p.g_src, p.g_ae, p.g_off, p.g_ph, p.e_ptr, p.e_src, p.e_ae, p.e_off,
            np.ascontiguousarray(dur, np.int64), np.ascontiguousarray(gap, np.int64), p.t0, p.L, p.G, _NEG)
    start, end, blocked = jit.call(fn, *args)
    n = len(dur)
    return start[:n], end[:n], blocked


def _kernel(order, prev, code, a_col, q_src, deferred, g_ptr, g_src, g_ae, g_off, g_ph,
            e_ptr, e_src, e_ae, e_off, dur, gap, t0, L, G, NEG):
    """The replay loop of :func:`daydream.simulate.replay.replay`, over arrays (compiled by
    numba; also runs as plain Python, slowly, for the tests). Returns (start, end, blocked)."""
    n = len(dur)
    start = np.zeros(n + 3, np.int64)
    end = np.zeros(n + 3, np.int64)
    blocked = np.zeros(n, np.int64)
    pend = np.zeros(n + 3, np.bool_)
    pend[:n] = deferred
    start[n] = t0 - L  # virtual "no launching call"
    end[n + 1] = t0  # virtual first call of a thread
    end[n + 2] = NEG  # virtual first task of a stream
    stack = np.empty(n + 1, np.int64)  # lazily finished ends: node, next END edge, running max
    spos = np.empty(n + 1, np.int64)
    smax = np.empty(n + 1, np.int64)
    for i in range(n):
        v = order[i]
        c = code[v]
        p = prev[v]
        a = a_col[v]
        d = dur[v]
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
            sb = NEG
            for j in range(g_ptr[v], g_ptr[v + 1]):
                u = g_src[j]
                if g_ae[j]:
                    if pend[u]:
                        _finish_c(u, start, end, blocked, pend, e_ptr, e_src, e_ae, e_off, dur, stack, spos, smax)
                    t = end[u] + g_off[j]
                else:
                    t = start[u] + g_off[j]
                if g_ph[j] == 0:
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
                for j in range(e_ptr[v], e_ptr[v + 1]):
                    u = e_src[j]
                    t = (end[u] if e_ae[j] else start[u]) + e_off[j]
                    if t > w:
                        w = t
                blocked[v] = w - s
                end[v] = w + d
    for u in range(n):
        if deferred[u] and pend[u]:
            _finish_c(u, start, end, blocked, pend, e_ptr, e_src, e_ae, e_off, dur, stack, spos, smax)
    return start, end, blocked


def _finish(u, start, end, blocked, pend, e_ptr, e_src, e_ae, e_off, dur, stack, spos, smax):
    """Finish ``u`` (its end after its END edges), first finishing any lazily finished source
    it reads: the Python loop's recursive ``finish`` with an explicit stack."""
    top = 0
    pend[u] = False
    stack[0] = u
    spos[0] = e_ptr[u]
    smax[0] = start[u]
    while top >= 0:
        x = stack[top]
        j = spos[top]
        if j == e_ptr[x + 1]:
            blocked[x] = smax[top] - start[x]
            end[x] = smax[top] + dur[x]
            top -= 1
            continue
        y = e_src[j]
        if e_ae[j] and pend[y]:  # finish y first, then read edge j again
            pend[y] = False
            top += 1
            stack[top] = y
            spos[top] = e_ptr[y]
            smax[top] = start[y]
            continue
        t = (end[y] if e_ae[j] else start[y]) + e_off[j]
        if t > smax[top]:
            smax[top] = t
        spos[top] = j + 1


_finish_c = _finish  # rebound to the compiled _finish by kernel()
