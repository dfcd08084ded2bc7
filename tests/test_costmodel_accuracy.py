"""Leave-one-GPU-out on a subset of the development data: the medians stay where docs/kernels.md says.

Goals (issue 33): median |error| <= 10 % for linear and bmm, <= 15 % for the other classes. The
cross-GPU goals for linear, bmm and softmax are NOT met (docs/kernels.md gives the numbers); for
those classes this test bounds the current level instead, so that a change that makes them worse
fails, and says so in :data:`BOUNDS`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from daydream.kernel_tool import accuracy as A

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "kernels" / "neusight"

#: (mode, class) -> bound on the median over source -> target pairs (cross) / GPUs (shape)
BOUNDS = {
    ("cross", "linear"): 0.16,  # goal 0.10: missed (full data: see docs/kernels.md)
    ("cross", "bmm"): 0.19,  # goal 0.10: missed
    ("cross", "elementwise"): A.GOALS["elementwise"],
    ("cross", "ln"): A.GOALS["ln"],
    ("cross", "softmax"): 0.20,  # goal 0.15: missed
    ("shape", "linear"): A.GOALS["linear"],
    ("shape", "bmm"): A.GOALS["bmm"],
}


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/kernels/neusight not present")
def test_leave_one_gpu_out_subset():
    data = A.load(DATA, every=4)
    res = A.leave_one_out(data, grid=((4.0,), (2.0,), ("best",)), spread=False)
    med = A.pooled(res)
    assert set(med) == set(BOUNDS)
    for key, bound in BOUNDS.items():
        assert med[key] <= bound, (key, med[key], bound)
    # every development GPU was held out once, fitted on the other three
    assert len(res["constants"]) == 4
    for h, c in res["constants"].items():
        assert h not in c.fitted_on and len(c.fitted_on) == 3
