"""Reading one trace per rank: which file is which rank, and one :class:`RankTrace` each.

The rank of a file is, in this order: the trace's own ``distributedInfo.rank`` (Kineto), a number
in the file name (the last group of digits after ``rank``, ``worker``, ``node``, ``proc`` or
``gpu``, e.g. ``dlrm_8rank_worker3.pt.trace.json.gz`` -> 3), and else the lowest rank no other file
claims, in the order given (a position could collide with a stated rank: "both rank 0").
Each source is counted (reported). Files are read and their graphs built independently, so
:func:`load_ranks` runs them in a process pool (``workers``) or through any ``map`` callable (a
Dask client's, :mod:`daydream.job.scale`).
"""

from __future__ import annotations

import os
import re
import signal
import sys
import warnings
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np

from ..errors import UsageError
from ..events.table import Kind
from ..formats import MEMORY_ALLOWANCE, MEMORY_PER_FILE_BYTE, load_trace
from ..graph import TaskGraph, build_graph
from ..graph.collectives import Collectives, find_collectives
from ..mapping import map_events
from ..util import jit

#: suffixes of the files a folder given on the command line contributes
TRACE_SUFFIXES = (".json", ".json.gz", ".jsonl", ".jsonl.gz", ".sqlite", ".npz")

_RANK_RX = re.compile(r"(?:rank|worker|node|proc|gpu)[_\-.]?(\d+)", re.IGNORECASE)


@dataclass
class RankTrace:
    """One rank's trace as the job needs it: the graph (its table slimmed to what the job reads,
    :func:`slim_table`), its collectives, the
    process group of each collective ("" where the trace does not say), and where the rank
    number came from ("trace", "file name" or "order")."""

    path: str
    rank: int
    rank_source: str
    world_size: int  #: from the trace, -1 unknown
    graph: TaskGraph
    coll: Collectives
    group: np.ndarray  #: object str per collective: the ``Process Group Name`` ("" unknown)
    fmt: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  #: the adapter's warnings (e.g. a salvaged truncated file), one line each


def expand_inputs(items: Iterable[str]) -> list[str]:
    """The trace files named by ``items``: files as given, folders by their trace files
    (:data:`TRACE_SUFFIXES`) in name order.

    Raises:
        UsageError: an item does not exist, a folder holds no trace file, or one file is named twice.
    """
    out: list[str] = []
    for it in items:
        if os.path.isdir(it):
            files = sorted(f for f in os.listdir(it) if f.lower().endswith(TRACE_SUFFIXES) and not f.startswith("."))
            if not files:
                raise UsageError(f"{it}: the folder holds no trace file ({', '.join(TRACE_SUFFIXES)})")
            out.extend(os.path.join(it, f) for f in files)
        elif os.path.exists(it):
            out.append(it)
        else:
            raise UsageError(f"{it}: no such file or folder")
    seen: dict[str, str] = {}
    for f in out:  # one file given twice would be two ranks of one trace
        real = os.path.realpath(f)
        if real in seen:
            raise UsageError(f"{f}: the same trace is given twice ({seen[real]} and {f}); give one trace per rank")
        seen[real] = f
    return out


def rank_from_name(path: str) -> int:
    """The rank a file name states (last ``rank3``/``worker3``/... group), -1 none."""
    m = _RANK_RX.findall(os.path.basename(path))
    return int(m[-1]) if m else -1


def _group_names(graph: TaskGraph, coll: Collectives) -> np.ndarray:
    """Per collective: the process group named in the kernel's own args (joined by correlation),
    "" where the trace does not say."""
    out = np.full(len(coll), "", dtype=object)
    a = graph.facts.comm_args if len(coll) and graph.facts is not None else None  # (read once: find_collectives read them)
    if a is None:
        return out
    m = (a.corr >= 0) & (a.pg != "") if len(a) else np.zeros(0, bool)
    if not m.any():
        return out
    o = np.argsort(a.corr[m], kind="stable")
    kc, kp = a.corr[m][o], a.pg[m][o]
    corr = graph.correlation[coll.node]
    j = np.clip(np.searchsorted(kc, corr), 0, len(kc) - 1)
    hit = (corr >= 0) & (kc[j] == corr)
    out[hit] = kp[j[hit]]
    return out


def read_rank(path: str, index: int = 0, strict: bool = False, full_table: bool = False) -> RankTrace:
    """Read ``path``, build its graph and find its collectives (picklable: runs in a worker).
    ``full_table``: keep the graph's whole table (a job's ``--timeline`` draws from it), not
    :func:`slim_table`'s part.

    Raises:
        TraceFormatError: the file cannot be read.
    """
    with warnings.catch_warnings(record=True) as caught:  # kept for the caller to show (a worker's stderr is not the user's)
        warnings.simplefilter("always", UserWarning)
        table = load_trace(path, strict=strict)
    jit.add_workload(len(table))  # the process's ranks together (daydream.util.jit: the workload gate)
    graph = build_graph(table, map_events(table))
    coll = find_collectives(graph)
    group = _group_names(graph, coll)
    meta = table.meta
    if not full_table:
        graph.table = slim_table(table)
    if meta.rank >= 0:
        rank, src = int(meta.rank), "trace"
    elif rank_from_name(path) >= 0:
        rank, src = rank_from_name(path), "file name"
    else:
        rank, src = index, "order"
    return RankTrace(path, rank, src, int(meta.world_size), graph, coll, group, meta.format,
                     warnings=[str(w.message) for w in caught if issubclass(w.category, UserWarning)])


def slim_table(table):
    """The part of ``table`` a job keeps once the rank's graph is built: its metadata, its
    accounting, and its CPU ops and annotation ranges (the ``ProfilerStep#N`` step windows, and the
    ops the collective and gradient finders join their args to by External id); the runtime
    calls and GPU activities, already in the graph, stay in the process that read the file. (A
    graph node's table row no longer indexes this table; nothing a job runs reads it.)"""
    keep = np.isin(table.kind, (Kind.CPU_OP, Kind.RANGE))
    return table.take(np.nonzero(keep)[0])


def _read_star(a: tuple[str, int, bool, bool]) -> RankTrace:
    return read_rank(*a)


def load_ranks(paths: list[str], *, strict: bool = False, workers: int = 1,
               mapper: Callable | None = None, full_tables: bool = False) -> list[RankTrace]:
    """Read every rank (in a process pool of ``workers`` when > 1, or with ``mapper(fn, items)``,
    e.g. a Dask client's map-and-gather), then give each its rank. ``full_tables``: see
    :func:`read_rank`.

    A trace's own rank wins; the others keep their file-name rank or their position. Returns the
    ranks sorted by rank.

    Raises:
        UsageError: two files claim one rank, or their world sizes differ.
        TraceFormatError: a file cannot be read.
    """
    items = [(p, i, strict, full_tables) for i, p in enumerate(paths)]
    if mapper is not None:
        ranks = list(mapper(_read_star, items))
    elif workers > 1 and len(items) > 1:
        ranks = _pool_map(_read_star, items, min(workers, len(items)))
    else:
        ranks = [_read_star(a) for a in items]
    check_world_sizes(ranks)
    seen: dict[int, RankTrace] = {}
    for r in ranks:  # ranks the traces or their file names state
        if r.rank_source == "order":
            continue
        if r.rank in seen:
            o = seen[r.rank]
            raise UsageError(f"{r.path} and {o.path} are both rank {r.rank} ({r.rank_source}, {o.rank_source}); one trace per rank is needed")
        seen[r.rank] = r
    free = (i for i in range(len(ranks) + len(seen) + 1) if i not in seen)
    for r in ranks:  # the others: the ranks no file claims, in the order given
        if r.rank_source == "order":
            r.rank = next(free)
            seen[r.rank] = r
    return sorted(ranks, key=lambda r: r.rank)


def _die_with_parent(parent: int) -> None:
    """A pool worker's initializer: SIGKILL when the coordinating process dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``), so a killed run leaves no worker reading a trace; elsewhere the
    pool's own end-of-parent detection is all there is."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1 (linux/prctl.h)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(1)


def _pool_map(fn, items: list, workers: int) -> list:
    """``fn`` over ``items`` in ``workers`` processes that die with this one.

    Raises:
        UsageError: a worker process died (killed: out of memory?), ending the run.
    """
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    try:
        with ProcessPoolExecutor(max_workers=workers, initializer=_die_with_parent, initargs=(os.getpid(),)) as ex:
            return list(ex.map(fn, items))
    except BrokenProcessPool:
        raise UsageError(f"a --workers process died while reading the ranks (killed, e.g. out of memory); the run is ended: "
                         f"rerun with fewer --workers (given {workers})") from None


def cap_workers(workers: int, paths: list[str]) -> tuple[int, str]:
    """(the number of reading processes to start, why it is fewer than ``workers`` or ""): at most
    one per rank file, per CPU this process may run on, and per share of the available memory a
    rank may take: daydream's memory bound, 10 x the largest file + 300 MB (docs/errors.md,
    "Resource bounds")."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    biggest = max((os.path.getsize(p) for p in paths if os.path.isfile(p)), default=0)
    per = MEMORY_PER_FILE_BYTE * biggest + MEMORY_ALLOWANCE
    avail = available_memory()
    by_mem = max(1, avail // per) if avail > 0 else workers
    n = max(1, min(workers, len(paths), cpus, by_mem))
    why = []
    if n < workers and cpus < workers:
        why.append(f"{cpus} CPUs")
    if n < workers and by_mem < workers:
        why.append(f"{avail / 2**30:.1f} GiB available memory holds {by_mem} ranks of up to {per / 2**20:,.0f} MiB each")
    return n, ("; ".join(why) if why else "")


def available_memory() -> int:
    """Bytes of memory available to new processes (Linux ``MemAvailable``), 0 unknown."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 0


def check_world_sizes(ranks: list[RankTrace]) -> None:
    """Refuse traces that state different world sizes (they are not one job).

    Raises:
        UsageError: two traces' ``distributedInfo.world_size`` differ.
    """
    stated = [r for r in ranks if r.world_size > 0]
    for r in stated[1:]:
        if r.world_size != stated[0].world_size:
            raise UsageError(f"{r.path} is of a job of {r.world_size:,} ranks and {stated[0].path} of one of {stated[0].world_size:,} "
                             "(their distributedInfo): not one job")
