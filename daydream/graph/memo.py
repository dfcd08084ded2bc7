"""Values derived from a task graph's structure, computed once and shared by the graphs that
differ from it only in task durations (issue 18: a second prediction on a built graph).

A prediction applies a transformation to the baseline graph and replays the result; most
transformations (:func:`daydream.transform.scale`, :func:`~daydream.transform.set_duration`)
change durations only, so everything that depends on the nodes, names, lanes, edges, visiting
order and the graph's constants (``t0``, ``L``, ``G``, ``S``) is the same for both:
kernel classes, the replay's flat inputs, the per-edge rule arrays, the CPU-range timeline. Such
a value is kept in :func:`memo` under a key of its own; a transformation that changes only
durations hands the parent's memo (and the graph's own cached views) to the new graph with
:func:`same_structure`. A transformation that changes anything else makes a graph with an empty
memo (``dataclasses.replace`` does not copy it).

Nothing kept here may depend on durations or CPU gaps (the coupled replay of a job,
``daydream/job/couple.py``, sets gaps in place between rounds). The other arrays of a graph are
not changed in place once it is made (the transformations copy them), which makes the sharing
safe; entries that read the edge rules or the constants carry them in their key.
"""

from __future__ import annotations

from typing import Any, Callable

#: TaskGraph cached views that depend only on the structure (daydream/graph/model.py)
STRUCTURE_VIEWS = ("order_valid", "_in_csr", "lane_prev", "lane_next", "launch", "blocking", "dependency_edges")

_KEY = "_structure_memo"


def memo(graph) -> dict[str, Any]:
    """The structure memo of ``graph`` (created empty on first use)."""
    d = graph.__dict__.get(_KEY)
    if d is None:
        d = graph.__dict__[_KEY] = {}
    return d


def cached(graph, key: str, make: Callable[[], Any]) -> Any:
    """``memo(graph)[key]``, made by ``make()`` the first time."""
    d = memo(graph)
    if key not in d:
        d[key] = make()
    return d[key]


def same_structure(parent, child):
    """Mark ``child`` as ``parent`` with other durations only: it shares the parent's memo and
    cached structure views. Returns ``child``."""
    pd, cd = parent.__dict__, child.__dict__
    for k in STRUCTURE_VIEWS:
        if k in pd:
            cd[k] = pd[k]
    cd[_KEY] = memo(parent)
    return child


def rules_key(ra, graph) -> bytes:
    """A key for the edge rules in force (``daydream.graph.rule_arrays()``) for the kinds of
    ``graph``'s edges, for memo entries that read the rules: a kind registered (or removed and
    registered again) changes it only when the graph has edges of that kind."""
    import numpy as np

    kinds = cached(graph, "edge kinds", lambda: np.unique(graph.edge_kind))
    return kinds.tobytes() + b"".join(getattr(ra, f)[kinds].tobytes()
                                      for f in ("phase", "anchor_end", "offset", "lane", "inherit", "prefer", "known", "launch"))
