"""Array helpers of the base layer, used by every stage.

:func:`sorted_unique` is ``np.unique(a)`` computed by one sort: numpy 2.x answers a plain
``np.unique`` (no ``return_*``) of integers with a hash table, which on many distinct values is
far slower than sorting (measured here, numpy 2.4.6: 2 M distinct int64 in 1.68 s CPU by
``np.unique``, 0.026 s by sort-and-compare; the same result).

:func:`unique_inverse` is ``np.unique(a, return_inverse=True)`` of integers whose range is small
(name ids, phase codes) by counting instead of an argsort.

:func:`small_pages` turns off numpy's transparent-huge-page advice for the arrays a stage
allocates (a decorator for the stages that allocate many short-lived large temporaries).
"""

from __future__ import annotations

import functools
import os

import numpy as np

try:  # numpy >= 2.0
    from numpy._core.multiarray import _set_madvise_hugepage
except ImportError:  # numpy 1.x
    try:
        from numpy.core.multiarray import _set_madvise_hugepage
    except ImportError:
        _set_madvise_hugepage = None


def unique_inverse(a) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(a, return_inverse=True)`` of a 1-d integer or boolean array, the inverse flat
    (int64), the values in ``a``'s dtype: by counting (a ``bincount`` over the value range,
    O(n + range)) when the range is at most ``max(2**16, 2 n)``, else by ``np.unique``'s sort.
    Other dtypes go to ``np.unique``."""
    a = np.asarray(a)
    if a.dtype.kind not in "biu" or a.ndim != 1:
        u, inv = np.unique(a, return_inverse=True)
        return u, inv.reshape(-1)
    if not len(a):
        return a.copy(), np.zeros(0, np.int64)
    lo, hi = int(a.min()), int(a.max())
    if hi - lo > max(1 << 16, 2 * len(a)):
        u, inv = np.unique(a, return_inverse=True)
        return u, inv.reshape(-1)
    c = a.astype(np.int64) - lo
    present = np.bincount(c, minlength=hi - lo + 1) > 0
    rank = np.cumsum(present) - 1
    return (np.flatnonzero(present) + lo).astype(a.dtype), rank[c]


def sorted_unique(a) -> np.ndarray:
    """The sorted distinct values of the flattened ``a``, exactly as ``np.unique(a)`` (same dtype).

    Integer and boolean arrays are sorted and compared with their neighbour; other dtypes (floats,
    whose NaNs np.unique folds, strings, objects) go to ``np.unique``.

    Raises:
        TypeError: as ``np.unique`` for values that cannot be ordered.
    """
    a = np.asarray(a)
    if a.dtype.kind not in "biu":
        return np.unique(a)
    s = np.sort(a, axis=None)
    if len(s) < 2:
        return s
    keep = np.empty(len(s), bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


#: :func:`stable_group_order` sorts by counting when the keys take at most this many values
FEW_GROUPS = 16


def few_distinct(keys: np.ndarray, limit: int = FEW_GROUPS) -> np.ndarray | None:
    """The sorted distinct values of the 1-d ``keys`` when there are at most ``limit``, else
    None: one pass per distinct value over the keys not yet matched, so that a handful of keys
    (threads, streams) costs a few O(n) passes instead of a sort."""
    rest = np.asarray(keys)
    vals = []
    while len(rest):
        if len(vals) == limit:
            return None
        v = rest[0]
        vals.append(v)
        rest = rest[rest != v]
    return np.sort(np.array(vals, dtype=np.asarray(keys).dtype))


def stable_group_order(keys: np.ndarray, limit: int = FEW_GROUPS) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` of a 1-d integer array: with at most ``limit``
    distinct values (:func:`few_distinct`) each key is replaced by its rank among them, in 8
    bits, which numpy's stable sort orders by a radix pass (O(n); numpy 2.4 sorts int64 keys
    by merging, ~20 ms for 700 k rows)."""
    keys = np.asarray(keys)
    u = few_distinct(keys, limit) if keys.dtype.kind in "iu" and limit <= 256 else None
    if u is None or len(u) < 2:
        return np.argsort(keys, kind="stable")
    code = np.zeros(len(keys), np.uint8)
    for i, v in enumerate(u.tolist()[1:], 1):
        code[keys == v] = i
    return np.argsort(code, kind="stable")


def small_pages(fn):
    """``fn`` run with numpy's ``madvise(MADV_HUGEPAGE)`` of new large arrays turned off, the
    previous setting restored after (also on an exception); nothing else changes, the results
    are the same.

    Why: numpy (Linux) advises transparent huge pages for every array of 4 MB or more; with the
    kernel's default ``defrag=madvise`` the first touch of such an array faults in (and may first
    compact) 2 MB pages, in kernel time. The mapping and the graph build allocate many large
    short-lived temporaries once per run, so that kernel time grew faster than the input:
    measured (nsys 4 M rows, one run per process, CPU s, 3 runs interleaved) mapping 1.42-1.67 ->
    0.92-0.95, of which kernel time 0.73-0.96 -> 0.22-0.25; graph build 1.45-1.93 -> 0.97-1.00;
    user time unchanged, the replay after unchanged. Below 4 MB per array (the 1 M inputs'
    task arrays) nothing changes. The report (``build_report``, ``build_prediction``) and the
    what-ifs (``analysis.apply_all``) run under it too: the whole ``--opt all`` command on the
    4 M nsys bench table took 6.0-7.9 s of system CPU with the advice and 3.1-3.9 s without it
    (two runs each, user 12.3-13.8 s either way); the 1 M table's, 0.72-0.95 s against 0.54-0.64 s.

    ``DAYDREAM_HUGEPAGES=keep`` leaves numpy's setting alone. Without numpy's private switch
    (another numpy) ``fn`` runs as it is.
    """
    if _set_madvise_hugepage is None:
        return fn

    @functools.wraps(fn)
    def run(*args, **kwargs):
        if os.environ.get("DAYDREAM_HUGEPAGES", "").strip().lower() == "keep":
            return fn(*args, **kwargs)
        was = _set_madvise_hugepage(False)
        try:
            return fn(*args, **kwargs)
        finally:
            _set_madvise_hugepage(was)

    return run
