"""The figures' numbers are the JSON report's: every bar segment of ``--plot`` (its <title>,
``series: value``) read back and matched with the ``--json`` document of the same run."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from daydream.cli import main
from daydream.render.svg import OP_PREDICTIONS, SERIES

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "train_step.json.gz"
BERT = ROOT.parent / "shared" / "traces" / "tracelens"
SVG = "{http://www.w3.org/2000/svg}"
LABEL = {v[0]: k for k, v in SERIES.items()}


def _bars(fig: ET.Element) -> list[tuple[str, dict[str, float]]]:
    """(row class, {series key: value}) of each bar of a figure, top to bottom."""
    out = []
    for g in fig.iter(SVG + "g"):
        if (g.get("class") or "").startswith("row"):
            vals = {}
            for t in g.iter(SVG + "title"):
                label, _, v = t.text.rpartition(": ")
                vals[LABEL[label]] = float(v.replace(",", ""))
            out.append((g.get("class"), vals))
    return out


def _ms(ns: int) -> float:
    return round(ns / 1e6, 3)


def _nonzero(d: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in d.items() if v > 0}


def _draw(tmp_path, capsys, *args) -> tuple[dict[str, ET.Element], dict]:
    svg, js = tmp_path / "f.svg", tmp_path / "r.json"
    assert main([*map(str, args), "--plot", str(svg), "--json", str(js)]) == 0
    capsys.readouterr()
    root = ET.fromstring(svg.read_bytes())
    figs = {g.get("id"): g for g in root.iter(SVG + "g") if g.get("class") == "figure"}
    return figs, json.loads(js.read_bytes())


def _check_causes_and_gpu(figs, rep) -> None:
    bars = _bars(figs["fig-causes"])
    ranked = [r for r in rep["ranking"] if r["predicted_ns"] >= 0 and r["speedup"] > 0]
    cps = ([rep["critical_path"]["by_cause_ns"]] + [p["critical_path"]["by_cause_ns"] for p in rep["predictions"]]
           + [r["by_cause_ns"] for r in ranked])
    assert [_nonzero(v) for _, v in bars[: len(cps)]] == [_nonzero({c: _ms(n) for c, n in cp.items()}) for cp in cps]
    rest = []
    if rep["predictions"]:  # each step: the replayed baseline, then each prediction
        for s in rep["steps"]:
            rest.append({"base": _ms(s["replayed_ns"])})
            for p in rep["predictions"]:
                rest += [{"predicted": _ms(w["predicted_ns"])} for w in p["steps"] if w["name"] == s["name"]]
    labels = ["+".join(o["name"] for o in p["optimizations"]) for p in rep["predictions"]] or [r["name"] for r in ranked][:OP_PREDICTIONS]
    for o in rep["pictures"]["ops"]:  # each top op's GPU time: the replayed baseline, then the predictions
        rest.append({"base": _ms(o["baseline_ns"])})
        rest += [{"predicted": _ms(o["predicted_ns"][x])} for x in labels if x in o["predicted_ns"]]
    assert [_nonzero(v) for _, v in bars[len(cps):]] == [_nonzero(k) for k in rest]
    gpu = []
    for w in [rep["window"], *rep["steps"]]:
        gpu.append({"busy": _ms(w["gpu_busy_measured_ns"]), "idle": _ms(w["gpu_idle_measured_ns"])})
        gpu.append({"busy": _ms(w["gpu_busy_replayed_ns"]), "idle": _ms(w["gpu_idle_replayed_ns"])})
    assert [_nonzero(v) for _, v in _bars(figs["fig-gpu"])] == [_nonzero(g) for g in gpu]


@pytest.mark.parametrize("opt", [[], ["--opt", "scale-kernels:pattern=gemm,factor=0.5"], ["--opt", "amp", "--opt", "fused-adam"]])
def test_causes_and_gpu_figures_are_the_reports(tmp_path, capsys, opt):
    figs, rep = _draw(tmp_path, capsys, FIXTURE, *opt)
    _check_causes_and_gpu(figs, rep)


def test_ranking_figure_is_the_reports(tmp_path, capsys):
    figs, rep = _draw(tmp_path, capsys, FIXTURE, "--opt", "all")
    ok = [r for r in rep["ranking"] if r["predicted_ns"] >= 0 and r["speedup"] > 0]
    assert [v["speedup"] for _, v in _bars(figs["fig-ranking"])] == [round(r["speedup"], 3) for r in ok]
    _check_causes_and_gpu(figs, rep)


def _check_compare(figs, rep) -> None:
    c = rep["comparison"]
    bars = _bars(figs["fig-compare"])
    want = []
    for group in ("window", "kernel class", "critical path"):
        for r in c["rows"]:
            if r["group"] == group and (r["before_ns"] or r["predicted_ns"] or r["after_ns"]):
                first = ("predicted", r["predicted_ns"]) if c["predicted_by"] else ("before", r["before_ns"])
                want += [{first[0]: _ms(first[1])}, {"after": _ms(r["after_ns"])}]
    assert [_nonzero(v) for _, v in bars] == [_nonzero(w) for w in want]
    assert len(bars) == len(want) > 0


def test_compare_figure_is_the_reports(tmp_path, capsys):
    figs, rep = _draw(tmp_path, capsys, FIXTURE, "--opt", "scale-kernels:pattern=gemm,factor=0.5", "--compare-to", FIXTURE)
    _check_compare(figs, rep)
    _check_causes_and_gpu(figs, rep)
    figs, rep = _draw(tmp_path, capsys, FIXTURE, "--compare-to", FIXTURE)
    _check_compare(figs, rep)


@pytest.mark.skipif(not BERT.exists(), reason="../shared/traces/tracelens not present")
def test_figures_on_the_bert_pair(tmp_path, capsys):
    h100 = BERT / "h100_gaunernst_bert-small-uncased__1016001.json.gz"
    mi300 = BERT / "mi300_gaunernst_bert-small-uncased__1016001.json.gz"
    figs, rep = _draw(tmp_path, capsys, h100, "--opt", "gpu-upgrade:target=MI300X", "--compare-to", mi300)
    assert list(figs) == ["fig-causes", "fig-timeline", "fig-gpu", "fig-memory", "fig-compare"]  # BERT has allocator events
    _check_causes_and_gpu(figs, rep)
    _check_compare(figs, rep)
