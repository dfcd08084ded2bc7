"""nsys export -> cupti-jsonl dump -> the same EventTable, the same graph, the same replay."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from daydream.formats import load_trace
from daydream.formats.cupti_export import write_cupti_jsonl
from daydream.graph import build_graph
from daydream.simulate import simulate

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
SQLITE = sorted(TRACES.rglob("*.sqlite")) if TRACES.exists() else []

GRAPH_ARRAYS = ("row", "node_kind", "lane", "lane_prev", "dur_ns", "gap_ns", "blocking", "launch", "edge_src", "edge_dst", "edge_kind", "edge_origin", "order")


@pytest.mark.slow
@pytest.mark.parametrize("path", SQLITE, ids=lambda p: p.name)
def test_nsys_to_cupti_dump_keeps_table_graph_and_replay(path, tmp_path):
    t1 = load_trace(str(path))
    dump = tmp_path / "t.cupti.jsonl.gz"
    write_cupti_jsonl(t1, str(dump))
    t2 = load_trace(str(dump))
    assert t2.meta.format == "cupti-jsonl"
    assert t1.equals(t2)
    g1, g2 = build_graph(t1), build_graph(t2)
    for a in GRAPH_ARRAYS:
        assert np.array_equal(getattr(g1, a), getattr(g2, a)), a
    assert (g1.launch_latency_ns, g1.gpu_gap_ns) == (g2.launch_latency_ns, g2.gpu_gap_ns)
    r1, r2 = simulate(g1), simulate(g2)
    assert np.array_equal(r1.start_ns, r2.start_ns) and np.array_equal(r1.end_ns, r2.end_ns)
