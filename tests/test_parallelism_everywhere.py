"""Issue 35's done-when on the shared traces: ``fsdp``, ``zero:stage=1|2|3``, ``tp:degree=2`` and
``pp:stages=2`` on every trace in ``../shared/traces`` and on the DLRM job (``param_dlrm``,
8 ranks) either predict (a time, and a per-GPU memory verdict where the trace has allocator
events) or are not applicable with a reason naming what the trace lacks; degree 1
(``tp:degree=1``, ``pp:stages=1``, ``zero:world=1``) is the identity, or (``tp`` only, whose plan
needs its column/row pairs) not applicable for the reason degree 2 is."""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path

import pytest

TRACES = Path(__file__).parent.parent.parent / "shared" / "traces"
SPECS = ("fsdp", "zero:stage=1", "zero:stage=2", "zero:stage=3", "tp:degree=2", "pp:stages=2")
IDENTITY = ("tp:degree=1", "pp:stages=1", "zero:stage=3,world=1")
#: what a refusal names: the missing recording option, annotation, shape, size, GPU or link, or
#: why the trace is not a one-GPU training step
MISSING = re.compile(r"record_shapes|input shapes|layer mapping|module annotations|column/row GEMM pair|GPU table|"
                     r"does not name its GPU|board link|act_bytes|collective kernels|forward units?|forward and backward|"
                     r"bandwidth|phase mapping")


def _traces() -> list[str]:
    return sorted(p for p in glob.glob(os.path.join(TRACES, "*", "*")) if p.endswith((".json", ".json.gz", ".sqlite")))


def _verdict_ok(pred, has_memory: bool) -> bool:
    if not has_memory:
        return pred.memory is None
    return pred.memory is not None and all(re.search(r"fits|does not fit|capacity unknown", part)
                                           for part in pred.memory.line.split(";"))


@pytest.mark.slow
@pytest.mark.parametrize("path", _traces() or [None])
def test_parallelism_what_ifs_predict_or_say_why(path):
    if path is None:
        pytest.skip("shared traces not present")
    from daydream.analysis import analyze
    from daydream.formats import load_trace

    t = load_trace(path)
    base = analyze(t)
    has_memory = base.graph.memory is not None and len(base.graph.memory) > 0 and base.report.memory is not None
    na = {}
    for spec in SPECS + IDENTITY:
        r = analyze(t, [spec]).report
        if r.not_applicable:
            (reason,) = r.not_applicable.values()
            assert MISSING.search(reason), (spec, reason)
            assert "\n" not in reason and "Traceback" not in reason
            assert "''" not in reason, reason  # an unnamed GPU is said so ("the traced GPU '' ..." before)
            na[spec] = reason
            continue
        (p,) = r.predictions
        assert p.window.predicted_ns > 0, spec
        assert _verdict_ok(p, has_memory), (spec, p.memory)
        if spec in IDENTITY:
            assert p.window.predicted_ns == p.window.replayed_ns, spec
    # degree 1: the identity wherever it needs nothing degree 2 lacks
    assert "pp:stages=1" not in na and "zero:stage=3,world=1" not in na, na
    if "tp:degree=1" in na:
        assert na["tp:degree=1"] == na.get("tp:degree=2"), na


@pytest.mark.slow
def test_parallelism_what_ifs_on_the_dlrm_job():
    """The DLRM job (8 ranks, no allocator events): each what-if predicts the job (its per-rank
    memory rows empty, as the job report's) or says why not; degree 1 is the identity."""
    folder = TRACES / "param_dlrm"
    if not folder.exists():
        pytest.skip("shared traces not present")
    from daydream.errors import NotApplicable
    from daydream.job import analyze_job
    from daydream.job.whatif import parse_job_specs, predict

    job = analyze_job([str(folder)])
    assert job.report.memory == []
    world = len(job.ranks)
    for spec in SPECS + IDENTITY:
        try:
            pred = predict(job.ranks, job.matching, job.coupled, parse_job_specs([spec], world))
        except NotApplicable as e:
            assert MISSING.search(str(e)), (spec, str(e))
            assert spec not in ("pp:stages=1", "zero:stage=3,world=1"), (spec, str(e))
            continue
        assert pred.memory == [], spec
        if spec in IDENTITY:
            assert pred.predicted_ns == pred.replayed_ns, (spec, pred)
