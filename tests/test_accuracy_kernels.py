"""scripts/accuracy_kernels.py: the kernel-cost section of docs/accuracy.md (scripts/accuracy.py SECTIONS)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import accuracy  # noqa: E402
import accuracy_kernels as AK  # noqa: E402
from daydream.kernel_tool import accuracy as A  # noqa: E402

KERNELS = ROOT.parent / "shared" / "kernels"


def test_registered_as_a_section():
    assert "accuracy_kernels" in accuracy.SECTIONS


def test_real_pair_missing_traces_say_so(tmp_path):
    lines = AK.real_pair(tmp_path)
    assert len(lines) == 2 and "not found" in lines[1] and "not measured" in lines[1]


@pytest.mark.slow
@pytest.mark.skipif(not (KERNELS / "neusight").is_dir(), reason="../shared/kernels/neusight not present")
def test_development_table_matches_the_leave_one_out_run(monkeypatch):
    # a subset and one grid point (the full run is scripts/accuracy.py's); the table must carry the
    # run's own numbers: every ordered pair once, and each class's verdict from its median vs GOALS
    monkeypatch.setattr(AK, "load", lambda root: A.load(root, every=8))
    runs = []

    def loo(data):
        res = A.leave_one_out(data, grid=((4.0,), (2.0,), ("best",)), spread=False)
        runs.append(res)
        return res

    monkeypatch.setattr(AK, "leave_one_out", loo)
    lines = AK.development(KERNELS)
    res = runs[0]
    pair_rows = [ln for ln in lines if "→" in ln and ln.startswith("| ") and "source" not in ln]
    assert len(pair_rows) == 12
    summary = {ln.split(" | ")[0][2:]: ln for ln in lines if ln.startswith("| ") and "≤" in ln}
    for (mode, cl), med in A.pooled(res).items():
        if mode != "cross":
            continue
        row = summary[cl]
        assert f"{100 * med:.1f} %" in row
        assert row.rstrip(" |").endswith("met" if med <= A.GOALS[cl] else "**missed**")
        assert re.search(r"\| ≤ \d+\.\d %", row)
