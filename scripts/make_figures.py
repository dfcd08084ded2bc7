"""Write ``docs/figure.svg``, the figure the README shows: ``--plot``'s "Step time by cause" for
the project's own fixture (``fixtures/train_step.json.gz``) with the prediction
``scale-kernels:pattern=gemm,factor=0.5`` (GEMM kernels twice as fast).

Deterministic: tests/test_docs_figure.py fails when the committed file differs from what this
script writes. Usage: ``python scripts/make_figures.py [OUTPUT]``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from daydream.analysis import analyze  # noqa: E402
from daydream.formats import load_trace  # noqa: E402
from daydream.render.svg import render_figure  # noqa: E402

TRACE = "fixtures/train_step.json.gz"
OPT = "scale-kernels:pattern=gemm,factor=0.5"
OUTPUT = ROOT / "docs" / "figure.svg"


def figure_text() -> str:
    """The README figure's SVG text (the trace named by its path in the repository)."""
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        result = analyze(load_trace(TRACE), [OPT])
    finally:
        os.chdir(cwd)
    return render_figure(result.report, "fig-causes")


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else OUTPUT
    text = figure_text()
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} ({len(text.encode()):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
