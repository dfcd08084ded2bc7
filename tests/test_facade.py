"""The public surface: ``import daydream`` is enough for a script."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import daydream

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "train_step.json.gz"


def test_one_import_runs_the_pipeline_with_every_spec_form():
    table = daydream.load_trace(str(FIXTURE))
    a = daydream.analyze(table, ["scale-kernels:pattern=gemm,factor=0.5"])
    b = daydream.analyze(table, [("scale-kernels", {"pattern": "gemm", "factor": 0.5})])
    c = daydream.analyze(table, [daydream.parse_spec("scale-kernels:pattern=gemm,factor=0.5")])
    speedups = {r.report.predictions[0].window.speedup for r in (a, b, c)}
    assert len(speedups) == 1 and speedups.pop() > 1.0


def test_composed_names_are_applied_in_order_or_reported_not_applicable():
    table = daydream.load_trace(str(FIXTURE))
    r = daydream.analyze(table, ["amp", ("fusion", {"reads": 3})])
    assert r.report.predictions or "amp + fusion" in r.report.not_applicable


def test_bad_specs_are_refused_plainly():
    table = daydream.load_trace(str(FIXTURE))
    with pytest.raises(daydream.analysis.UsageError, match="unknown optimization"):
        daydream.analyze(table, ["no-such-opt"])
    with pytest.raises(TypeError):
        daydream.analyze(table, [42])
    with pytest.raises(TypeError):
        daydream.analyze("a path", [])


def test_primitives_and_registry_are_public():
    table = daydream.load_trace(str(FIXTURE))
    g = daydream.build_graph(table, daydream.map_events(table))
    base = daydream.simulate(g)
    g2 = daydream.scale(g, daydream.select(g, kind="kernel"), 0.5)
    assert daydream.simulate(g2).span_end_ns < base.span_end_ns
    assert {"amp", "fusion", "cuda-graphs"} <= set(daydream.optimizations())
    assert np.array_equal(daydream.simulate(g).start_ns, base.start_ns)
