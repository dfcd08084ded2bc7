"""``scale-kernels``: what if the kernels whose name matches a pattern ran ``factor`` times as long?

The simplest what-if, and the building block of kernel-level optimizations: e.g. a faster GEMM
library (``pattern=gemm,factor=0.8``) or a regression check (``factor=1.2``).
"""

from __future__ import annotations


import numpy as np

from ..util.arrays import unique_inverse
from ..errors import NotApplicable
from ..graph.memo import cached
from ..transform import scale, select
from ..util.patterns import compile_user_pattern, search_mask
from . import Optimization, Param, register


def _kernel_names(graph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kernel mask, distinct name ids of the kernels, each kernel's index into them): the
    graph's structure only, kept in its memo (shared: do not change them)."""
    def make():
        kern = select(graph, kind=["kernel"])
        uniq, inv = unique_inverse(graph.name_id[kern])
        return kern, uniq, inv
    return cached(graph, "scale_kernels.names", make)


def _apply(graph, p):
    rx = compile_user_pattern(p["pattern"], ignore_case=True)
    kern, uniq, inv = _kernel_names(graph)
    hit = search_mask(rx, [graph.names[i] for i in uniq.tolist()])
    m = np.zeros(graph.n, bool)
    m[kern] = hit[inv]
    n = int(np.count_nonzero(m))
    if n == 0:
        raise NotApplicable(f"no kernel name matches {p['pattern']!r} (case-insensitive)")
    matched, total = int(graph.dur_ns[m].sum()), int(graph.dur_ns[kern].sum())
    other = int(np.count_nonzero(~graph.is_cpu)) - n
    return scale(graph, m, p["factor"]), (f"{n:,} kernels matching {p['pattern']!r} (case-insensitive) scaled by {p['factor']:g}: "
                                          f"{matched / 1e6:,.3f} of {total / 1e6:,.3f} ms of kernel time matched; "
                                          f"{other:,} other GPU tasks (kernels, copies, sets) and all CPU time left alone")


register(
    Optimization(
        name="scale-kernels",
        summary="kernels whose name matches a regular expression take `factor` times as long",
        apply=_apply,
        what_if=True,
        params={
            "pattern": Param(".", "regular expression searched in kernel names, case-insensitive (default: every kernel)", str),
            "factor": Param(0.5, "duration multiplier, 0..1000 (user's what-if; no default source)", float, lambda v: 0 <= v <= 1000, "0 to 1000"),
        },
    )
)
