"""The critical-path walk (:class:`daydream.simulate.critical_path._Walk`) compiled with numba: the same
steps, the same charges, to the nanosecond.

:func:`walk` runs :func:`_kernel`, the Python walk statement for statement over int64 arrays:
from the task that ends last, each step follows the binding record of the replay (end waited,
start edge, lane, base edge or the trace start) and records the segment it charges as
(node, ns, OWN / GAP / EDGE, cause code, gap-phase flag), only when ns > 0 as the Python walk does.
:func:`daydream.simulate.critical_path.critical_path` sums those into the per-cause and per-phase
breakdowns. tests/test_critical_walk.py compares both walks (path, every charge, the summary)
on random emulator programs and transformed graphs, and runs the kernel uncompiled too.

Why compiled: the walk was most of a second prediction (issue 18: 1.8 s of 2.0 s CPU on the
1 M-event nsys bench input, ~290 k charges each a Python call and a few dict updates).

int64: every charged ns is a difference of two replayed times (or of a time and the trace start
or a gap); :func:`fits` requires all of them below 2**61 in magnitude, so no difference wraps.
Otherwise, and when the walk would pass ``2 n + 2`` steps (a cycle in the records: the Python walk
never ends there either), :func:`walk` returns None and the caller runs the Python walk.
"""

from __future__ import annotations

import numpy as np

from ..util import jit

#: graphs with fewer tasks walk in Python unless forced: the same import cost as the replay
#: kernel (:data:`daydream.simulate.compiled.MIN_TASKS`), paid once per process.
MIN_TASKS = 100_000
#: bound on |every time and gap| for the kernel to run (differences of two stay in int64)
LIMIT = 1 << 61
OWN, GAP, EDGE = 0, 1, 2  # as daydream.simulate.critical_path
C_CPU, C_GPU, C_COMM, C_LAUNCH = 0, 1, 2, 3  # indices into daydream.simulate.critical_path.CAUSES


def fits(t0: int, *arrays: np.ndarray) -> bool:
    """True when ``t0`` and every value of ``arrays`` lie below :data:`LIMIT` in magnitude."""
    if abs(int(t0)) >= LIMIT:
        return False
    return all(len(a) == 0 or (int(a.min()) > -LIMIT and int(a.max()) < LIMIT) for a in arrays)


def _kernel(v, start, end, gap, is_cpu, comm, bs, bb, be, src, anchor_end, edge_cause, lane_prev, t0, by_lane):
    """The walk from ``v``: (path, charge rows (node, ns, part), cause and gap arrays, end-waited nodes, path
    length, charges, end-waited count); path length -1 when it passed ``2 n + 2`` steps."""
    n = len(start)
    cap = 2 * n + 2  # a blocking call can be on the path twice (its end, then its start)
    path = np.empty(cap, np.int64)
    ch = np.empty((3 * cap, 3), np.int64)  # (node, ns, part) rows: the caller's charges array, no restacking
    ccause = np.empty(3 * cap, np.int8)
    cgap = np.empty(3 * cap, np.bool_)
    ew = np.empty(cap, np.int64)
    npath, nch, new = 0, 0, 0
    t = end[v]
    at_start = False
    while v >= 0:
        if npath == cap:
            return path, ch, ccause, cgap, ew, -1, 0, 0
        path[npath] = v
        npath += 1
        if not at_start:
            e = be[v]
            if e >= 0:  # the end waited: own cost after the wait, then what it waited for
                ew[new] = v
                new += 1
                u = src[e]
                at_start = not anchor_end[e]
                tu = start[u] if at_start else end[u]
                nch = _put_c(ch, ccause, cgap, nch, v, t - tu, OWN, edge_cause[e], False)
                v, t = u, tu
                continue
            own = C_CPU if is_cpu[v] else (C_COMM if comm[v] else C_GPU)
            nch = _put_c(ch, ccause, cgap, nch, v, t - start[v], OWN, own, False)
        t = start[v]
        e = bs[v]
        if e >= 0:  # the start was set by an edge: its offset, then its source
            u = src[e]
            at_start = not anchor_end[e]
            tu = start[u] if at_start else end[u]
            nch = _put_c(ch, ccause, cgap, nch, v, t - tu, EDGE, edge_cause[e], False)
            v, t = u, tu
            continue
        if e == by_lane:  # waited for its (priority-scheduled) lane: the task before it
            u = lane_prev[v]
            tu = end[u if u >= 0 else n + u]  # Python's end[-1] when there is none, as the Python walk
            nch = _put_c(ch, ccause, cgap, nch, v, t - tu, EDGE, C_GPU, False)
            v, t, at_start = u, tu, False
            continue
        lo = t - gap[v]  # base + gap: the gap, then what set the base
        c = C_CPU if is_cpu[v] else C_LAUNCH
        p = GAP if is_cpu[v] else EDGE
        nch = _put_c(ch, ccause, cgap, nch, v, t - lo, p, c, is_cpu[v])
        e = bb[v]
        if e >= 0:
            u = src[e]
            at_start = not anchor_end[e]
            tu = start[u] if at_start else end[u]
            nch = _put_c(ch, ccause, cgap, nch, v, lo - tu, EDGE, edge_cause[e], True)
            v, t = u, tu
            continue
        nch = _put_c(ch, ccause, cgap, nch, v, lo - t0, p, c, is_cpu[v])
        v = -1
    return path, ch, ccause, cgap, ew, npath, nch, new


def _put(ch, ccause, cgap, i, v, ns, part, cause, gap):
    """Record charge ``i`` when ``ns`` > 0; the next free index."""
    if ns <= 0:
        return i
    ch[i, 0], ch[i, 1], ch[i, 2], ccause[i], cgap[i] = v, ns, part, cause, gap
    return i + 1


def kernel():
    """The compiled kernel, or None without numba (:func:`daydream.util.jit.compiled_calling`: the
    kernel calls the compiled _put through the name ``_put_c``)."""
    return jit.compiled_calling(globals(), "_put_c", _put, _kernel)


_put_c = _put  # rebound to the compiled _put by kernel()


def walk(fn, v: int, start, end, gap, is_cpu, comm, bs, bb, be, src, anchor_end, edge_cause, lane_prev, t0: int, by_lane: int):
    """Run the walk kernel ``fn`` (compiled or plain) from node ``v``.

    Args: per-node int64 ``start``/``end`` (replayed ns), ``gap`` (ns), bool ``is_cpu``/``comm``,
    int64 binding records ``bs``/``bb``/``be`` (:class:`~daydream.simulate.Timeline`); per-edge
    int64 ``src``, bool ``anchor_end``, int8 ``edge_cause`` (index into CAUSES); int64
    ``lane_prev`` (per node, may be empty when no record is ``by_lane``).

    Returns:
        (path node ids, last to first; charges as a (k, 3) int64 array of (node, ns, part);
        cause codes (k,) int8; gap-phase flags (k,) bool; end-waited nodes), or None when the
        walk passed ``2 n + 2`` steps.
    """
    path, ch, ccause, cgap, ew, npath, nch, new = jit.call(
        fn, int(v), start, end, gap, is_cpu, comm, bs, bb, be, src, anchor_end, edge_cause, lane_prev, int(t0), int(by_lane))
    if npath < 0:
        return None
    parts = ch[:nch]  # a view: only the pages written are resident
    return path[:npath].copy(), parts, ccause[:nch].copy(), cgap[:nch].copy(), ew[:new].copy()
