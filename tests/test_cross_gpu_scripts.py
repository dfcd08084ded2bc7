"""scripts/cross_gpu.py and scripts/ground_truth/pairs.py without a GPU: the dry run, comparing two
folders of recorded traces (the bert-small H100/MI300X pair stands in, linked under one name)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAIR = ROOT / ".." / "shared" / "traces" / "tracelens"


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def pairs():
    return _load("ground_truth_pairs", ROOT / "scripts" / "ground_truth" / "pairs.py")


def test_dry_run_lists_recordings(pairs, capsys):
    pairs.main(["record", "--dry-run", "--precision", "--models", "transformer"])
    out = capsys.readouterr().out
    for stem in ("transformer-baseline", "transformer-fp32", "transformer-bf16", "transformer-fp16"):
        assert stem in out
    assert pairs.gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"


def test_compare_two_folders(pairs, tmp_path, capsys):
    h = PAIR / "h100_gaunernst_bert-small-uncased__1016001.json.gz"
    m = PAIR / "mi300_gaunernst_bert-small-uncased__1016001.json.gz"
    if not h.exists():
        pytest.skip("no real traces")
    for folder, src in (("h100", h), ("mi300x", m)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "bert-baseline.json.gz").symlink_to(src.resolve())
    out_md = tmp_path / "pairs.md"
    pairs.main(["compare", str(tmp_path / "h100"), str(tmp_path / "mi300x"), "--write", str(out_md)])
    text = out_md.read_text()
    assert "H100 SXM -> MI300X" in text and "MI300X -> H100 SXM" in text and "predicted: launch" in text
    assert text.count("| measured on target |") == 2 and "kernel class" in text
