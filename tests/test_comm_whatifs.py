"""Communication what-ifs on real traces: ddp:world=1 is the baseline, doubling bandwidth never
slows a prediction, more workers never make communication cheaper per byte."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import daydream
from daydream.graph import build_graph
from daydream.mapping import map_events
from daydream.optimizations import parse_spec
from daydream.simulate import simulate

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
RESNET = "kineto_tbplugin/resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"
WITH_COLLECTIVES = ["hta/nccl_data.json.gz", "tracelens/b200_eager_trace.json.gz", "param_dlrm/dlrm_8rank_worker0.pt.trace.json.gz"]
needs = pytest.mark.skipif(not (TRACES / RESNET).exists(), reason="../shared/traces not present")


def _graph(rel):
    t = daydream.load_trace(str(TRACES / rel))
    return build_graph(t, map_events(t))


def _end(g, spec):
    opt, p = parse_spec(spec)
    g2, _ = opt.apply(g, p)
    return int(simulate(g2).end_ns.max()), g2


@needs
def test_ddp_world_1_is_the_baseline_and_bandwidth_helps():
    g = _graph(RESNET)
    base = simulate(g)
    e1, g1 = _end(g, "ddp:world=1")
    tl = simulate(g1)
    assert np.array_equal(tl.start_ns, base.start_ns) and np.array_equal(tl.end_ns, base.end_ns)
    slow, g8 = _end(g, "ddp:world=8,link=pcie3")
    fast, _ = _end(g, "ddp:world=8,link=32GB/s")  # 2x PCIe 3 bandwidth
    assert fast <= slow and slow >= int(base.end_ns.max())
    assert (g8.row < 0).sum() == 60  # 30 all-reduces and the 30 calls that launch them


@needs
@pytest.mark.parametrize("rel", WITH_COLLECTIVES)
def test_doubling_bandwidth_never_slows(rel):
    g = _graph(rel)
    for a, b in (("pcie3", "pcie4"), ("pcie4", "pcie5"), ("ib200", "ib400"), ("nvlink2", "nvlink3")):
        assert _end(g, f"network:link={b}")[0] <= _end(g, f"network:link={a}")[0]


@needs
@pytest.mark.parametrize("rel", WITH_COLLECTIVES)
def test_more_workers_never_cheaper_per_byte(rel):
    from daydream.collectives import find_collectives
    g = _graph(rel)
    c = find_collectives(g)
    m = c.size_bytes > 0
    prev = None
    for n in (2, 4, 8, 16, 64, 256):
        _, g2 = _end(g, f"world-size:n={n},inter=ib200")
        per_byte = g2.dur_ns[c.node[m]] / c.size_bytes[m]
        if prev is not None:
            assert (per_byte >= prev - 1e-12).all(), n
        prev = per_byte
