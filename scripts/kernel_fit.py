"""Refit the kernel-cost model's constants on the development GPUs and write daydream/costmodel/_fitted.py.

    python scripts/kernel_fit.py [--data ../shared/kernels/neusight] [--check]

Fitted on every GPU of the data set (../shared/kernels/neusight: Tesla P100-PCIE-16GB, Tesla T4,
Tesla V100-PCIE-32GB, NVIDIA A100-PCIE-40GB); what is fitted and how: daydream/costmodel/fit.py.
``--check``: exit 1 if the file on disk differs from a fresh fit (nothing written).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daydream.kernel_tool.accuracy import default_root, load  # noqa: E402
from daydream.costmodel.fit import fit, to_python  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=str(default_root()))
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args(argv)
    data = load(a.data)
    c = fit(data)
    text = to_python(c, "Constants of the kernel-cost model, fitted by scripts/kernel_fit.py (do not edit by hand).\n\n"
                     "Fitted on: " + ", ".join(c.fitted_on) + " (../shared/kernels/neusight, all rows).\n"
                     "See daydream/costmodel/fit.py for what each constant is and how it is fitted.\n")
    out = ROOT / "daydream" / "costmodel" / "_fitted.py"
    if a.check:
        same = out.exists() and out.read_text() == text
        print("up to date" if same else f"{out} differs from a fresh fit")
        return 0 if same else 1
    out.write_text(text)
    print(f"wrote {out}: c_tile {c.c_tile:g}, h_occ {c.h_occ:g}, tile policy {c.tile_policy}, eta {c.eta} GFLOP/s/W")
    return 0


if __name__ == "__main__":
    sys.exit(main())
