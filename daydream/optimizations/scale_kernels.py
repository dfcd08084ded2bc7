"""``scale-kernels``: what if the kernels whose name matches a pattern ran ``factor`` times as long?

The simplest what-if, and the building block of kernel-level optimizations: e.g. a faster GEMM
library (``pattern=gemm,factor=0.8``) or a regression check (``factor=1.2``).
"""

from __future__ import annotations

import numpy as np

from ..errors import NotApplicable
from ..transform import scale, select
from . import Optimization, Param, register


def _apply(graph, p):
    m = select(graph, kind=["kernel"], name=p["pattern"])
    n = int(np.count_nonzero(m))
    if n == 0:
        raise NotApplicable(f"no kernel name matches {p['pattern']!r}")
    return scale(graph, m, p["factor"]), f"{n:,} kernels matching {p['pattern']!r} scaled by {p['factor']:g}"


register(
    Optimization(
        name="scale-kernels",
        summary="kernels whose name matches a regular expression take `factor` times as long",
        apply=_apply,
        what_if=True,
        params={
            "pattern": Param(".", "regular expression searched in kernel names (default: every kernel)", str),
            "factor": Param(0.5, "duration multiplier, 0..1000 (user's what-if; no default source)", float, lambda v: 0 <= v <= 1000, "0 to 1000"),
        },
    )
)
