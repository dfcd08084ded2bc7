"""The shape model alone on NeuSight's problem-size series (docs/scaling.md, "Accuracy"): prints
the table; constants fitted without the predicted GPU (leave one GPU out), as docs/kernels.md.

    python scripts/shape_series.py [--in-sample]
"""

from __future__ import annotations

import sys

from daydream.costmodel.fit import fit
from daydream.kernel_tool.accuracy import load, series_markdown, shape_series


def main(argv: list[str]) -> int:
    data = load()
    consts = None if "--in-sample" in argv else {h: fit({g: v for g, v in data.items() if g != h}, spread=False) for h in data}
    sys.stdout.write(series_markdown(shape_series(data, consts)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
