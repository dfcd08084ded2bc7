"""Select: boolean task masks by kind, name, layer, phase, op, stream, thread or any predicate, and the user-pattern compiler they share."""

from __future__ import annotations

import re
from typing import Callable, Iterable

import numpy as np

from ..util.patterns import compile_user_pattern, search_mask
from ..util.arrays import sorted_unique, unique_inverse
from ..graph.memo import cached, memo
from ..errors import DaydreamError
from ..events.table import Kind
from ..mapping.rules import PHASES
from ..graph import NODE_CPU, TaskGraph


KIND_NAMES = {"cpu": NODE_CPU, "runtime": NODE_CPU, "kernel": int(Kind.KERNEL), "memcpy": int(Kind.MEMCPY), "memset": int(Kind.MEMSET)}


# ------------------------------------------------------------------------------- select ------
def select(
    graph: TaskGraph,
    *,
    kind: str | Iterable[str] | None = None,
    name: str | None = None,
    layer: str | None = None,
    phase: str | Iterable[str] | None = None,
    op: str | None = None,
    stream: int | Iterable[int] | None = None,
    thread: int | Iterable[int] | None = None,
    where: Callable[[TaskGraph], np.ndarray] | None = None,
) -> np.ndarray:
    """Boolean mask (length ``graph.n``) of the tasks matching every given criterion.

    Args:
        kind: "cpu" (API calls), "kernel", "memcpy", "memset", or several.
        name: regular expression searched in the task name.
        layer, op: regular expressions searched in the mapped layer path / framework op
            (needs a mapping; tasks without one never match).
        phase: "forward", "backward", "optimizer", "communication", "other", "unmapped".
        stream: CUDA stream id(s) (GPU tasks only). thread: OS thread id(s) (CPU tasks only).
        where: any function of the graph returning a boolean mask.

    Raises:
        DaydreamError: unknown kind or phase, a bad regular expression, or layer/phase/op asked
            for on a graph without a mapping.
    """
    m = np.ones(graph.n, dtype=bool)
    if kind is not None:
        kinds = [kind] if isinstance(kind, str) else list(kind)
        try:
            codes = [KIND_NAMES[k] for k in kinds]
        except KeyError as e:
            raise DaydreamError(f"unknown task kind {e.args[0]!r}; use one of {sorted(KIND_NAMES)}") from None
        m &= np.isin(graph.node_kind, codes)
    if name is not None:
        m &= name_mask(graph, name)
    if stream is not None:
        streams = [stream] if isinstance(stream, int) else list(stream)
        m &= (graph.node_kind != NODE_CPU) & np.isin(graph.stream, streams)
    if thread is not None:
        threads = [thread] if isinstance(thread, int) else list(thread)
        m &= (graph.node_kind == NODE_CPU) & np.isin(graph.tid, threads)
    if phase is not None or layer is not None or op is not None:
        m &= _mapped_mask(graph, phase, layer, op)
    if where is not None:
        m &= np.asarray(where(graph), dtype=bool)
    return m


def _mapped_mask(graph: TaskGraph, phase, layer, op) -> np.ndarray:
    """Tasks whose mapped phase is one of ``phase`` and whose layer / op label matches."""
    mp = graph.mapping
    if mp is None:
        raise DaydreamError("selecting by layer, phase or op needs a mapped graph (build_graph(table, mapping))")
    m = np.ones(graph.n, dtype=bool)
    if phase is not None:
        phases = [phase] if isinstance(phase, str) else list(phase)
        bad = [p for p in phases if p not in PHASES]
        if bad:
            raise DaydreamError(f"unknown phase {bad[0]!r}; use one of {', '.join(PHASES)}")
        m &= np.isin(mp.phase, [PHASES.index(p) for p in phases])
    labels = np.asarray(mp.labels, dtype=object)
    for ids, pat in ((mp.layer_id, layer), (mp.op_id, op)):
        if pat is None:
            continue
        if not len(labels):
            return np.zeros(graph.n, bool)
        m &= (ids >= 0) & _regex_mask(labels, pat)[np.maximum(ids, 0)]
    return m


#: longest regular expression a user may give (``--opt ...:pattern=``, ``select(name=...)``): keeps
#: the cost of compiling it bounded; names from a trace are never compiled as patterns
MAX_PATTERN_CHARS = 1000


def compile_pattern(pattern: str) -> re.Pattern:
    """A user's regular expression, compiled.

    Raises:
        DaydreamError: it is longer than :data:`MAX_PATTERN_CHARS` or not a valid expression.
    """
    if len(pattern) > MAX_PATTERN_CHARS:
        raise DaydreamError(f"regular expression of {len(pattern):,} characters; at most {MAX_PATTERN_CHARS:,} are accepted")
    try:
        return compile_user_pattern(pattern)  # RE2: no catastrophic backtracking (daydream/util/patterns.py)
    except re.error as e:
        raise DaydreamError(f"bad regular expression {pattern!r}: {e}") from None


def name_mask(graph: TaskGraph, pattern: str, subset: np.ndarray | None = None) -> np.ndarray:
    """Nodes (of ``subset``, default all) whose name matches ``pattern`` (``re.search``), decided
    once per distinct name (kernel names can be thousands of characters long).

    Raises:
        DaydreamError: a bad or over-long regular expression.
    """
    rx = compile_pattern(pattern)
    out = np.zeros(graph.n, dtype=bool)
    cand = np.ones(graph.n, dtype=bool) if subset is None else np.asarray(subset, dtype=bool)
    if cand.any():
        uniq, inv = unique_inverse(graph.name_id[cand])
        out[cand] = name_hits(graph, pattern, uniq, rx)[inv]
    return out


def name_hits(graph: TaskGraph, pattern: str, ids: np.ndarray, rx=None) -> np.ndarray:
    """Whether each name ``graph.names[i]`` of ``ids`` (int array, shape (k,)) matches ``pattern``
    (``re.search``; ``rx``: it compiled, else compiled here). Each name is searched once per
    pattern and graph structure: the answers are kept in the graph's structure memo
    (:mod:`daydream.graph.memo`, shared by the graphs that differ from it in durations only, e.g.
    ``--opt all``'s what-ifs on one baseline), so a name the optimizations ask about again (the
    step and optimizer ranges of every what-if that reads them) is not searched again.

    Raises:
        DaydreamError: a bad or over-long regular expression.
    """
    rx = compile_pattern(pattern) if rx is None else rx
    names = graph.names
    known, hit = cached(graph, "name hits " + pattern, lambda: (np.zeros(len(names), bool), np.zeros(len(names), bool)))
    ids = np.asarray(ids, dtype=np.int64)
    if len(known) < len(names):  # names added to this graph's list since (kept answers stay true)
        known, hit = np.r_[known, np.zeros(len(names) - len(known), bool)], np.r_[hit, np.zeros(len(names) - len(known), bool)]
        memo(graph)["name hits " + pattern] = (known, hit)
    todo = sorted_unique(ids[~known[ids]])
    if len(todo):
        hit[todo] = search_mask(rx, [names[i] for i in todo.tolist()])
        known[todo] = True
    return hit[ids]


def _regex_mask(strings: np.ndarray, pattern: str) -> np.ndarray:
    rx = compile_pattern(pattern)
    uniq, inv = np.unique(strings.astype(str), return_inverse=True)
    hit = search_mask(rx, uniq.tolist())
    return hit[inv.reshape(-1)]
