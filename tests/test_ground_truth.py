"""The non-GPU parts of the ground-truth harness (scripts/ground_truth/run.py), with the fixture
trace (fixtures/train_step.json.gz) standing in for the traces a GPU run records."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

from daydream.analysis import analyze
from daydream.formats import load_trace
from daydream.optimizations import parse_spec

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "train_step.json.gz"


@pytest.fixture(scope="module")
def gt():
    spec = importlib.util.spec_from_file_location("ground_truth_run", ROOT / "scripts" / "ground_truth" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["ground_truth_run"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def report():
    return analyze(load_trace(str(FIXTURE))).report


def test_importing_needs_no_torch(gt):
    """torch is imported only inside the GPU functions, so the rest runs anywhere."""
    import ast

    tree = ast.parse((ROOT / "scripts" / "ground_truth" / "run.py").read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = [a.name for n in top for a in n.names] + [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
    assert not any(x.split(".")[0] == "torch" for x in names)
    assert "torch" not in gt.__dict__


def test_measured_step_is_the_mean_profiler_step(gt, report):
    meas, rep = gt.measured_step_ns(FIXTURE)
    steps = [s.measured_ns for s in report.steps]
    assert len(steps) == 3
    assert meas == round(sum(steps) / 3)
    assert rep == round(sum(s.replayed_ns for s in report.steps) / 3)
    assert meas == rep  # the emulated fixture replays exactly


def test_predict_matches_daydream(gt):
    ns, note = gt.predict(FIXTURE, "amp")
    pred = analyze(load_trace(str(FIXTURE)), [parse_spec("amp")]).report.predictions[0]
    assert ns == round(sum(s.predicted_ns for s in pred.steps) / len(pred.steps))
    assert 0 < ns < gt.measured_step_ns(FIXTURE)[1]
    assert "memory-bound" in note
    ns, note = gt.predict(FIXTURE, "reconbn")
    assert ns == -1 and note.startswith("not applicable: no batch-normalization")


def test_compare_and_table(gt, tmp_path):
    # the fixture stands in for the baseline and for the AMP run; fused-adam was not run
    shutil.copy(FIXTURE, tmp_path / "cnn-baseline.json.gz")
    shutil.copy(FIXTURE, tmp_path / "cnn-amp.json.gz")
    rows = gt.compare(tmp_path, ["cnn"], ["baseline", "amp", "fused-adam"], unprofiled={("cnn", "amp"): 2_000_000},
                      skipped={("cnn", "fused-adam"): "failed: RuntimeError"})
    by = {r.variant: r for r in rows}
    assert list(by) == ["baseline", "amp", "fused-adam", "reconbn"]
    base, amp, fa, rb = by["baseline"], by["amp"], by["fused-adam"], by["reconbn"]
    assert base.error_pct == 0.0 and base.measured_speedup == 1.0
    assert amp.measured_ns == base.baseline_measured_ns and amp.measured_speedup == 1.0
    assert amp.error_pct == pytest.approx((amp.predicted_ns - amp.measured_ns) / amp.measured_ns * 100)
    assert amp.error_pct < 0 and amp.predicted_speedup > 1
    assert amp.unprofiled_ns == 2_000_000
    assert fa.measured_ns == -1 and fa.error_pct is None and fa.note.startswith("failed: RuntimeError") and fa.predicted_ns > 0
    assert rb.predicted_ns == -1 and "predicted only" in rb.note

    text = gt.write_table(rows, tmp_path / "results.md", "test")
    lines = text.splitlines()
    assert lines[0] == "# test"
    table = [ln for ln in lines if ln.startswith("|")]
    assert len(table) == 2 + len(rows)
    assert table[0].startswith("| model | variant | daydream --opt | baseline measured (ms)")
    amp_line = next(ln for ln in table if "| amp |" in ln)
    assert f"{amp.error_pct:+.1f} %" in amp_line and "`amp`" in amp_line and "| 2.000 |" in amp_line
    fa_line = next(ln for ln in table if "| fused-adam |" in ln)
    assert "| — |" in fa_line
    assert "Mean absolute prediction error over 1 measured optimizations" in text
    assert (tmp_path / "results.md").read_text() == text


def test_from_traces_cli(gt, tmp_path, capsys):
    shutil.copy(FIXTURE, tmp_path / "transformer-baseline.json.gz")
    shutil.copy(FIXTURE, tmp_path / "transformer-cuda-graphs.json.gz")
    assert gt.main(["--from-traces", str(tmp_path), "--models", "transformer", "--variants", "cuda-graphs"]) == 0
    out = capsys.readouterr().out
    assert "| transformer | cuda-graphs |" in out
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["meta"] == {"from_traces": str(tmp_path)}
    assert [r["variant"] for r in doc["rows"]] == ["baseline", "cuda-graphs"]
    assert doc["rows"][1]["measured_ns"] > 0 and doc["rows"][1]["predicted_ns"] > 0
    with pytest.raises(SystemExit):
        gt.main(["--from-traces", str(tmp_path), "--variants", "bogus"])


def test_missing_baseline(gt, tmp_path):
    rows = gt.compare(tmp_path, ["cnn"], ["baseline", "amp"])
    assert len(rows) == 1 and rows[0].note == "no baseline trace"
