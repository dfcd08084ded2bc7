"""Bugs a first-time user found, each pinned with the right value."""

from __future__ import annotations

import collections
import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from daydream.analysis import analyze
from daydream.cli import main
from daydream.errors import DaydreamError
from daydream.formats import load_trace
from daydream.graph import profiler_steps
from daydream.optimizations import parse_spec
from daydream.report.windows import step_windows
from daydream.transform import scale

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = str(ROOT / "fixtures" / "train_step.json.gz")
TRACES = ROOT.parent / "shared" / "traces"
needs_traces = pytest.mark.skipif(not TRACES.exists(), reason="../shared/traces absent")


def test_huge_scale_factor_is_refused_not_wrapped(capsys):
    assert main(["--details", FIXTURE, "--opt", "scale-kernels:factor=1e30"]) == 2
    assert "out of range" in capsys.readouterr().err
    r = analyze(load_trace(FIXTURE))
    with pytest.raises(DaydreamError, match="exceed"):
        scale(r.graph, r.graph.node_kind != 0, 1e30)


@pytest.mark.parametrize("args, msg", [
    (["--opt", "amp", "--opt", "amp"], "given twice"),
    (["--opt", "scale-kernels:factor=2,factor=3"], "given twice"),
    (["--opt", "scale-kernels:factor=nan"], "not a number"),
])
def test_ambiguous_requests_are_refused(args, msg, capsys):
    assert main(["--details", FIXTURE, *args]) == 2
    assert msg in capsys.readouterr().err


def test_what_if_may_repeat_and_is_not_ranked(capsys):
    assert main(["--details", FIXTURE, "--opt", "scale-kernels:factor=0.5", "--opt", "scale-kernels:factor=2"]) == 0
    assert main(["--details", FIXTURE, "--opt", "all"]) == 0
    out = capsys.readouterr().out
    ranking = out[out.index("what to try first"):]
    assert "scale-kernels" not in ranking


def _steps_do_not_overlap(graph, tl):
    w = step_windows(graph, tl)
    for a, b in zip(w, w[1:]):
        assert a[3] <= a[4] <= b[3], (a[0], b[0])
        assert a.replayed_cpu_start_ns <= a.replayed_cpu_end_ns <= b.replayed_cpu_start_ns, (a.name, b.name)


@needs_traces
@pytest.mark.parametrize("rel", ["hta/nccl_data.json.gz", "kineto_tbplugin/resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"])
def test_cuda_graphs_steps_stay_ordered_and_never_slow_down(rel):
    r = analyze(load_trace(str(TRACES / rel)), [parse_spec("cuda-graphs")])
    _steps_do_not_overlap(r.predicted_graph, r.predicted)
    p = r.report.predictions[0]
    assert p.steps, "per-step predictions expected"
    for s in p.steps:
        assert s.predicted_ns <= s.replayed_ns, s.name
    assert sum(s.predicted_ns for s in p.steps) <= p.window.predicted_ns


@needs_traces
def test_2021_profiler_steps_are_cpu_ops_and_still_found():
    t = load_trace(str(TRACES / "kineto_tbplugin/resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"))
    assert [s[0] for s in profiler_steps(t)] == [f"ProfilerStep#{i}" for i in range(5, 11)]


@pytest.mark.slow
@needs_traces
def test_timeline_flow_ids_pair_up_across_processes_and_copies(tmp_path):
    for trace, extra in ((str(TRACES / "nsys_ai/mfu_2gpu_before.sqlite"), []), (FIXTURE, ["--opt", "scale-kernels:pattern=gemm"])):
        out = tmp_path / "t.json.gz"
        assert main(["--details", trace, *extra, "--timeline", str(out)]) == 0
        ev = json.loads(gzip.decompress(out.read_bytes()))["traceEvents"]
        c = collections.Counter((e["cat"], e["id"], e["ph"]) for e in ev if e.get("ph") in ("s", "f"))
        assert c and max(c.values()) == 1, [k for k, v in c.items() if v > 1][:3]
