"""docs/figure.svg (shown in the README) is exactly what scripts/make_figures.py writes, and its
numbers are the report's."""

from __future__ import annotations

import importlib.util
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("make_figures", ROOT / "scripts" / "make_figures.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_figure_is_current():
    mod = _script()
    path = ROOT / "docs" / "figure.svg"
    assert path.exists(), "docs/figure.svg missing: run python scripts/make_figures.py"
    assert path.read_text(encoding="utf-8") == mod.figure_text(), "docs/figure.svg is stale: run python scripts/make_figures.py"
    assert path.stat().st_size < 40_000
    root = ET.fromstring(path.read_bytes())
    assert [g.get("id") for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "figure"] == ["fig-causes"]
    assert "docs/figure.svg" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_sample_answer_is_the_tools():
    """The README's first screen shows the answer the tool prints for its one command (the lines
    up to the bound, and the what-if's first words; the rest may be shortened there)."""
    import contextlib
    import io

    from daydream.cli import main

    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    at = next(i for i, x in enumerate(readme) if x.strip().startswith("daydream: fixtures/train_step.json.gz"))
    assert at < 40  # within the first screen
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([str(ROOT / "fixtures" / "train_step.json.gz"), "--opt", "scale-kernels:pattern=gemm,factor=0.5"]) == 0
    got = out.getvalue().replace(str(ROOT) + "/", "").splitlines()
    assert [x.strip() for x in readme[at:at + 3]] == [x.strip() for x in got[:3]]
    assert readme[at + 3].strip()[:80] == got[3].strip()[:80]  # the what-if, re-wrapped in the README's indent
