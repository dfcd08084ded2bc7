"""Host time as the what-ifs so far scaled it, instant by instant of each CPU thread.

A what-if that scales host time records it in ``TaskGraph.host_scales``: (mask over
``graph.cpu_ranges`` of the ranges whose host time it scaled, or None for all host time; factor),
in the order applied. At a recorded instant ``t`` of a thread the host time now runs at the
weight ``w(t)``: the product of the factors of the entries whose ranges of that thread cover
``t`` (None entries cover every instant). A recorded stretch ``[a, b]`` of host time now lasts
``sum over weight classes of rint(length of the class in [a, b] x its weight)``: one rounding
per class, which is the rounding of a single ``scale-cpu`` (``gap - in + rint(in x f)``).

Composed what-ifs read host time through this clock: ``scale-cpu`` after ``scale-cpu`` (the
second one measured the host time inside its ranges on the recorded clock, so x2 then x0.5 ended
at 1.195x the recorded time on ResNet-50's DataLoader), and the range and ProfilerStep boundaries
of :func:`daydream.simulate.carry.boundaries` (which scaled the recorded overlap of each entry in turn,
not the overlap as the entries before had scaled it).

A thread listed in ``TaskGraph.host_alias`` (``dataloader``'s modelled workers) reads the
recorded instants of another thread: its weights are that thread's.

Python loops run over the threads that have scaled ranges, and over weight classes (a handful).
"""

from __future__ import annotations

import numpy as np

from ..util.arrays import sorted_unique
from .model import TaskGraph
from .range_timeline import thread_key


class HostClock:
    """The weights of host time on every CPU thread of ``graph`` (see the module doc), with an
    extra mask ``within`` over ``graph.cpu_ranges`` (the ranges a new what-if selects) whose cover
    is a class bit of its own (weight 1): :meth:`lengths` then also tells host time inside them.

    Times are int64 ns; thread keys are :func:`daydream.graph.range_timeline.thread_key` values.
    """

    def __init__(self, graph: TaskGraph, within: np.ndarray | None = None):
        masks = [(m, float(f)) for m, f in graph.host_scales if m is not None]
        glob = 1.0
        for m, f in graph.host_scales:
            if m is None:
                glob *= float(f)
        cr = graph.cpu_ranges
        if cr is not None:  # ranges of no length cover no instant
            pos = cr.end_ns > cr.start_ns
            masks = [(m & pos, f) for m, f in masks]
            within = within & pos if within is not None else None
        self._sel = [m for m, _ in masks] + ([within] if within is not None else [])
        self._bits = len(self._sel)
        self.within_bit = self._bits - 1 if within is not None else -1  #: class bit of ``within`` (-1: none)
        self._fac = np.array([f for _, f in masks] + ([1.0] if within is not None else []), np.float64)
        self._glob = glob
        self._cr = cr
        self._threads: dict[int, tuple] = {}
        self._classes: np.ndarray | None = None
        have = [m for m in self._sel if cr is not None and m is not None and m.any()]
        keys = thread_key(cr.pid, cr.tid) if have else np.zeros(0, np.int64)
        any_sel = np.zeros(len(keys), bool)
        for m in have:
            any_sel |= m
        self._keys = keys
        self._scaled_threads = set(sorted_unique(keys[any_sel]).tolist()) if have else set()
        self._alias = {int(a): int(b) for a, b in getattr(graph, "host_alias", ())}
        self._scaled_threads |= {a for a, b in self._alias.items() if b in self._scaled_threads}

    # ------------------------------------------------------------------ classes ----------
    def weight(self, cls: np.ndarray) -> np.ndarray:
        """Weight of class ids ``cls`` (bit j set: inside entry j's ranges; the ``within`` bit weighs 1)."""
        cls = np.asarray(cls, np.int64)
        w = np.full(cls.shape, self._glob, np.float64)
        for j in range(self._bits):
            w = np.where((cls >> j) & 1, w * self._fac[j], w)
        return w

    def _thread(self, k: int) -> tuple:
        """(breakpoints, class id of the segment starting at each breakpoint) of thread ``k``; the
        time before the first and after the last breakpoint is class 0."""
        got = self._threads.get(k)
        if got is not None:
            return got
        if k in self._alias:  # a thread that reads another's recorded instants (TaskGraph.host_alias)
            got = self._threads[k] = self._thread(self._alias[k])
            return got
        on = self._keys == k
        merged = []
        for m in self._sel:
            sel = np.flatnonzero(on & m) if m is not None else np.zeros(0, np.int64)
            merged.append(_merge(self._cr.start_ns[sel], self._cr.end_ns[sel]))
        bp = sorted_unique(np.concatenate([np.concatenate([lo, hi]) for lo, hi in merged]))
        cls = np.zeros(len(bp), np.int64)
        for j, (lo, hi) in enumerate(merged):
            if len(lo):
                i = np.searchsorted(lo, bp, "right") - 1
                ii = np.maximum(i, 0)
                cls |= ((i >= 0) & (bp < hi[ii])).astype(np.int64) << j
        got = self._threads[k] = (bp, cls)
        return got

    def classes(self) -> np.ndarray:
        """The class ids that occur on any thread (0 always: time outside every range)."""
        if self._classes is None:
            out = {0}
            for k in self._scaled_threads:
                out.update(self._thread(k)[1].tolist())
            self._classes = np.array(sorted(out), np.int64)
        return self._classes

    def now(self, key: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """How long the recorded stretches ``[a, b]`` of threads ``key`` last now (int64 ns, shape (q,))."""
        cls = self.classes()
        return self.scaled(self.lengths(key, a, b, cls), cls)

    def lengths(self, key: np.ndarray, a: np.ndarray, b: np.ndarray, cls: np.ndarray) -> np.ndarray:
        """Recorded ns of each ``[a, b]`` (shape (q,), ``a <= b``) on thread ``key`` spent in each
        class of ``cls`` (shape (c,), from :meth:`classes`): int64 (q, c)."""
        a = np.asarray(a, np.int64)
        b = np.maximum(np.asarray(b, np.int64), a)
        out = np.zeros((len(a), len(cls)), np.int64)
        col0 = int(np.searchsorted(cls, 0))
        rest = np.ones(len(a), bool)
        for k in self._scaled_threads:
            q = np.flatnonzero(key == k)
            if not len(q):
                continue
            rest[q] = False
            bp, sc = self._thread(k)
            seg = np.diff(bp)
            for c_i, c in enumerate(cls.tolist()):
                cum = np.concatenate([[0], np.cumsum(np.where(sc[:-1] == c, seg, 0))])
                out[q, c_i] = _covered(bp, sc, cum, c, b[q]) - _covered(bp, sc, cum, c, a[q])
            out[q, col0] += (b[q] - a[q]) - out[q].sum(axis=1)  # outside the breakpoints: class 0
        out[rest, col0] = b[rest] - a[rest]
        return out

    def scaled(self, lengths: np.ndarray, cls: np.ndarray, inside: bool | None = None) -> np.ndarray:
        """Host time now (int64 ns) of stretches whose class lengths are ``lengths`` (from
        :meth:`lengths`): one rint per class; ``inside`` True/False: only the classes inside/outside
        the ``within`` ranges."""
        w = self.weight(cls)
        keep = np.ones(len(cls), bool)
        if inside is not None and self.within_bit >= 0:
            keep = ((cls >> self.within_bit) & 1).astype(bool) == inside
        return np.rint(lengths[:, keep] * w[keep]).astype(np.int64).sum(axis=1)

    def start_before(self, key: np.ndarray, b: np.ndarray, now_ns: np.ndarray) -> np.ndarray:
        """The recorded start ``a <= b`` of a stretch ending at ``b`` that lasts ``now_ns`` now
        (int64, shape (q,)): the latest such ``a`` (a stretch at weight 0 adds nothing); ``b -
        now_ns`` where no what-if scaled host time."""
        b = np.asarray(b, np.int64)
        now = np.asarray(now_ns, np.int64)
        if not self._scaled_threads and self._glob == 1.0:
            return b - now
        out = np.empty(len(b), np.int64)
        rest = np.ones(len(b), bool)
        for k in self._scaled_threads:
            q = np.flatnonzero(key == k)
            if len(q):
                rest[q] = False
                bp, sc = self._thread(k)
                out[q] = _invert(bp, self.weight(sc), self._glob, b[q], now[q])
        g = self._glob
        out[rest] = b[rest] - (np.rint(now[rest] / g).astype(np.int64) if g > 0 else 0)
        return np.minimum(out, b)


def clock_of(graph: TaskGraph) -> HostClock:
    """The :class:`HostClock` of ``graph`` (no ``within`` ranges), made once per graph object and
    kept beside it; not in the structure memo (``daydream/graph/memo.py``), which graphs of other
    ``host_scales`` share."""
    got = graph.__dict__.get("_host_clock")
    if got is None:
        got = graph.__dict__["_host_clock"] = HostClock(graph)
    return got


def _merge(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals covering the union of ``[s, e)``."""
    if not len(s):
        z = np.zeros(0, np.int64)
        return z, z
    o = np.argsort(s, kind="stable")
    ls, le = s[o].astype(np.int64), np.maximum.accumulate(e[o].astype(np.int64))
    new = np.concatenate([[True], ls[1:] > le[:-1]])
    blk = np.cumsum(new) - 1
    lo = ls[new]
    hi = np.zeros(len(lo), np.int64)
    np.maximum.at(hi, blk, le)
    return lo, hi


def _covered(bp: np.ndarray, sc: np.ndarray, cum: np.ndarray, c: int, t: np.ndarray) -> np.ndarray:
    """Recorded ns of class ``c`` between the first breakpoint and ``t`` (0 before it)."""
    i = np.searchsorted(bp, t, "right") - 1
    ii = np.clip(i, 0, len(bp) - 1)
    inside = (i >= 0) & (i < len(bp) - 1) & (sc[ii] == c)
    return np.where(i < 0, 0, cum[ii] + np.where(inside, t - bp[ii], 0))


def _invert(bp: np.ndarray, w: np.ndarray, glob: float, b: np.ndarray, now: np.ndarray) -> np.ndarray:
    """Per query, the latest ``a <= b`` with ``W(b) - W(a) = now`` for the piecewise-linear host
    clock ``W`` of one thread (slope ``w[i]`` from ``bp[i]``, ``glob`` outside the breakpoints),
    times relative to ``bp[0]`` in float64 (a trace spans far less than 2^53 ns)."""
    x = (bp - bp[0]).astype(np.float64)
    slope = np.concatenate([w[:-1], [glob]])  # from each breakpoint; after the last: outside every range
    cw = np.concatenate([[0.0], np.cumsum(w[:-1] * np.diff(x))])

    def clock(t):
        i = np.searchsorted(x, t, "right") - 1
        ii = np.maximum(i, 0)
        return np.where(i < 0, glob * t, cw[ii] + slope[ii] * (t - x[ii]))

    tb = (b - bp[0]).astype(np.float64)
    target = clock(tb) - now
    j = np.searchsorted(cw, target, "right") - 1  # the last breakpoint whose clock is <= target
    jj = np.maximum(j, 0)
    sl = np.where(j < 0, glob, slope[jj])
    base = np.where(j < 0, 0.0, x[jj])
    ta = base + np.divide(target - np.where(j < 0, 0.0, cw[jj]), sl, out=np.zeros_like(target), where=sl > 0)
    a = np.rint(ta).astype(np.int64) + bp[0]
    return np.where(now <= 0, b, a)
