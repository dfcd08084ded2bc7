"""Optional numba compilation of the measured loops (the replay, the mapping's interval sweep).

A kernel is written as a plain Python function over numpy arrays; :func:`compiled` returns it
compiled by numba (``njit``, with numba's on-disk cache), or None when numba is not installed or
the environment turns compilation off. Every caller keeps a numpy or pure-Python path that gives
the same results, and the tests compare them (tests/test_replay_compiled.py,
tests/test_mapping.py).

Why numba: the per-task replay loop and the interval sweep are sequential (each step reads the
previous ones), so numpy cannot express them without a per-element Python loop or an O(n log n)
workaround; compiled they run at about 10 ns a step (issue 18 measured 24-33x on the replay).
numba is a dependency (pyproject.toml) but optional at run time: importing it costs about 0.3 s,
so callers compile only for inputs big enough to pay that back.

Cache: ``cache=True`` keeps the machine code beside the module (or in ``NUMBA_CACHE_DIR``, or
numba's user-wide cache directory when the package directory is read-only), so a kernel's
one-time compile (1-5 s) is paid once per machine. When no cache location is writable numba
refuses ``cache=True``; the kernel is then compiled in memory, once per process.

Environment: ``DAYDREAM_JIT=off`` (or ``python``) never compiles; ``DAYDREAM_JIT=on`` (or
``compiled``) makes callers use their kernels whatever the input size; default ``auto``: from a
caller's size threshold, or at any size once the kernel is loaded in the process (:func:`loaded`).

Workload gate (``auto`` only): a per-kernel threshold sees one array, not the run, and numba's
import plus the loading of ~26 cached kernels (0.45-0.65 s CPU, and a first compile of 10-15 s
on a new machine or after an upgrade) is paid once per process whatever the kernels save. So a
process that states its work (:func:`add_workload`: the analysis facade and the job reader add
each event table's rows before mapping) never imports numba while that total stays under
:data:`BREAK_EVEN_ROWS` (``DAYDREAM_JIT_BREAK_EVEN`` overrides it); above it, every kernel runs from its own threshold as before. A process
that states nothing (a library caller of ``map_events``/``simulate``; the parent of a job whose
ranks were read in worker processes, each worker stating its own) keeps the per-kernel
thresholds alone. ``DAYDREAM_JIT=on`` and a caller's ``method="compiled"`` pass the gate.
"""

from __future__ import annotations

import os
import warnings

_compiled: dict[object, object] = {}

#: event-table rows (summed over the tables a process analyzes) from which ``auto`` mode lets
#: the kernels compile: the break-even of numba's import and cached-kernel load against the
#: numpy paths, CPU time (user + sys) of whole ``daydream-analyze`` runs with a warm cache vs
#: ``DAYDREAM_JIT=off``, fitted on the generated Kineto and nsys traces of 0.25-2 M events
#: (``scripts/bench.py --jit-tiers``, the "JIT tiers" table of docs/performance.md: compiled
#: dearer up to 0.47 M rows, even at 0.52 M, cheaper from 0.94 M; the crossing, 0.52 M, taken
#: down to the nearest measured size step). The real traces of that table (all far under it)
#: are the inputs it is judged on: their ``auto`` run must cost what ``off`` costs.
BREAK_EVEN_ROWS = 500_000

_workload: int | None = None  # rows stated by add_workload, None: nothing stated


def add_workload(rows: int) -> None:
    """State that this process analyzes an event table of ``rows`` rows (added to the rows
    stated before: numba's import is paid once per process, whatever the number of tables)."""
    global _workload
    _workload = (_workload or 0) + max(int(rows), 0)


def workload() -> int | None:
    """The rows stated by :func:`add_workload` so far, or None when nothing was stated."""
    return _workload


def reset_workload(rows: int | None = None) -> None:
    """Set the stated rows to ``rows`` (None: nothing stated; tests restore the state with it)."""
    global _workload
    _workload = rows


def gated() -> bool:
    """Whether the workload gate keeps ``auto`` mode off numba: rows were stated and their total
    is under :data:`BREAK_EVEN_ROWS` (see the module doc)."""
    return _workload is not None and _workload < break_even() and mode() == "auto"


def break_even() -> int:
    """:data:`BREAK_EVEN_ROWS`, or ``DAYDREAM_JIT_BREAK_EVEN`` (rows; 0: no gate) where set: the
    bench measures the compiled tier below the break-even with it, and a machine whose numba
    loads faster can lower it. Raises nothing: an unreadable value is ignored."""
    v = os.environ.get("DAYDREAM_JIT_BREAK_EVEN", "").strip().replace("_", "")
    return int(v) if v.isdigit() else BREAK_EVEN_ROWS


def mode() -> str:
    """"off", "on" or "auto", from ``DAYDREAM_JIT``."""
    m = os.environ.get("DAYDREAM_JIT", "auto").strip().lower()
    return {"python": "off", "0": "off", "compiled": "on", "1": "on"}.get(m, m if m in ("off", "on") else "auto")


def wanted(size: int, min_size: int, forced: bool = False) -> bool:
    """Whether a caller should use its compiled kernel for an input of ``size`` (its own
    threshold ``min_size``; ``forced``: the caller's caller asked for it, or the kernel is
    loaded already). In ``auto`` mode also False while the process's stated workload is under
    the break-even (:func:`gated`), whatever ``size``."""
    m = mode()
    if m == "off":
        return False
    return forced or m == "on" or (size >= min_size and not gated())


def kernel_for(kernel, size: int, min_size: int, method: str = "auto"):
    """The function a caller with a compiled kernel and a numpy reference runs for ``method``, or None
    for its numpy path: "python" the kernel uncompiled, "numpy" None, "compiled" the kernel compiled
    whatever ``size``, "auto" compiled from ``min_size`` items (:func:`wanted`); None also without
    numba."""
    if method == "python":
        return kernel
    if method == "numpy" or not wanted(size, min_size, forced=method == "compiled"):
        return None
    return compiled(kernel)


def loaded(fn) -> bool:
    """Whether ``fn`` is compiled in this process already (:func:`compiled` returned it, numba
    imported). A caller whose size threshold stands for numba's import and the kernel's loading
    passes this as ``forced`` to :func:`wanted`: once paid, the kernel serves inputs of any size
    (a prediction's graph can be smaller than the baseline that loaded it)."""
    return _compiled.get(fn) is not None


def compiled(fn):
    """``fn`` compiled by numba (once per process, machine code from the on-disk cache when
    there is one), or None without numba."""
    if fn not in _compiled:
        try:
            import numba
        except ImportError:
            _compiled[fn] = None
        else:
            _compiled[fn] = compile_with(numba, fn)
    return _compiled[fn]


def compiled_calling(namespace: dict, name: str, helper, kernel):
    """``kernel`` compiled, after binding ``name`` in ``namespace`` (the kernel's module globals)
    to ``helper`` compiled: a compiled kernel calls another function through a module-level name,
    which numba resolves when it compiles the kernel, so the name must hold the compiled helper
    by then (the plain one stays bound otherwise, for the pure-Python path). None without numba,
    and ``name`` then left as it was."""
    h = compiled(helper)
    if h is None:
        return None
    namespace[name] = h
    return compiled(kernel)


def compile_with(numba, fn):
    """``numba.njit(cache=True)(fn)``, or in-memory compilation when no cache location is writable.

    A damaged on-disk cache (a truncated or garbage index or data file: numba raises while it
    loads it, e.g. ``UnpicklingError``) is not an error of the run: see :func:`_guard`."""
    try:
        d = numba.njit(cache=True, nogil=True)(fn)
    except Exception:  # numba: "cannot cache function ...: no locator available"
        return numba.njit(nogil=True)(fn)
    _guard(d)
    return d


def _from_cache(exc: BaseException) -> bool:
    """Whether ``exc`` was raised inside numba's on-disk cache (numba/core/caching.py)."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.replace("\\", "/").endswith("numba/core/caching.py"):
            return True
        tb = tb.tb_next
    return False


def _drop_caches() -> None:
    """Every kernel of this process compiles in memory from now on, and each cache index is
    emptied so that the next run rebuilds the cache (numba's ``Cache.flush`` writes an empty
    index; the damaged data files are then never read)."""
    from numba.core.caching import NullCache

    for d in _compiled.values():
        c = getattr(d, "_cache", None)
        if c is None or isinstance(c, NullCache):
            continue
        try:
            c.flush()
        except Exception:  # an unwritable cache: compiling in memory is enough
            pass
        d._cache = NullCache()


def _guard(d) -> None:
    """Make dispatcher ``d`` survive a damaged cache: numba loads the cache when a call needs a
    compiled version (the first call with new argument types, here or in a kernel calling it),
    so the dispatcher's compile step retries once in memory after :func:`_drop_caches` (a
    kernel calling a helper whose cache is damaged fails in the helper's load: every cache of
    the process goes)."""
    compile_one = d.compile

    def compile_guarded(sig):
        try:
            return compile_one(sig)
        except Exception as e:
            if not _from_cache(e):
                raise
            _drop_caches()
            from numba.core.caching import NullCache

            d._cache = NullCache()  # also when d is not (yet) among the process's kernels
            return compile_one(sig)

    d.compile = compile_guarded


def call(fn, *args):
    """``fn(*args)`` with numba's warnings silenced (it warns when it cannot write its cache;
    the kernel still runs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)
