"""The what-ifs' name matching kept per graph structure (issue 38): each distinct name is searched
once per pattern, the answers equal a fresh search, and a graph with a new structure searches again."""
from __future__ import annotations

import dataclasses

import numpy as np

from daydream import load_trace
from daydream.graph import build_graph
from daydream.graph.memo import same_structure
from daydream.mapping import map_events
from daydream.optimizations.common import cpu_ranges
from daydream.transform import selection
from daydream.util.patterns import compile_user_pattern, search_mask


def _graph():
    t = load_trace("fixtures/train_step.json.gz")
    return build_graph(t, map_events(t))


def test_each_name_is_searched_once_per_pattern_and_structure(monkeypatch):
    g = _graph()
    searched = []

    def counting(rx, texts):
        searched.extend(texts)
        return search_mask(rx, texts)

    monkeypatch.setattr(selection, "search_mask", counting)
    pat = "gemm|Profiler"
    fresh = np.array([search_mask(compile_user_pattern(pat), [n]) [0] for n in g.names], bool)[g.name_id]
    first = selection.name_mask(g, pat)
    assert np.array_equal(first, fresh) and first.any()
    n_first = len(searched)
    assert n_first == len(set(searched)) == len(np.unique(g.name_id))
    # again, on a subset, through cpu_ranges, and on a graph of the same structure: no new search
    sub = g.node_kind == g.node_kind[0]
    assert np.array_equal(selection.name_mask(g, pat, sub), fresh & sub)
    cpu_ranges(g, pat)
    g2 = same_structure(g, dataclasses.replace(g))
    assert np.array_equal(selection.name_mask(g2, pat), fresh)
    assert len(searched) == n_first + len(set(np.unique(g.cpu_ranges.name_id).tolist()) - set(np.unique(g.name_id).tolist()))
    # another pattern, and a graph with an empty memo (a changed structure), search again
    selection.name_mask(g, "relu")
    assert len(searched) > n_first
    before = len(searched)
    selection.name_mask(dataclasses.replace(g), pat)
    assert len(searched) == before + n_first
