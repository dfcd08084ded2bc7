"""emit_nvtx ranges (one name per call: ``aten::add, seq = 12, op_id = 7``) are summed per op
in ``CriticalPath.by_range_ns`` as in the summary's top CPU ranges: one fold
(:func:`daydream.mapping.rules.fold_by_op`) for both."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from daydream.analysis import analyze
from daydream.formats import load_trace
from daydream.mapping.rules import fold_by_op
from tablebuilder import TB

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"


def emit_nvtx_table():
    """Three calls of aten::add, each in its own emit_nvtx range on the one thread, each
    launching a kernel; then a device synchronize."""
    b = TB()
    t = 0
    for i in range(3):
        b.range(f"aten::add, seq = {i + 1}, op_id = {10 + i}", t, t + 20_000)
        c = b.call("cudaLaunchKernel", t + 5_000, t + 15_000)
        b.gpu(c, t + 20_000, t + 22_000)
        t += 30_000
    b.range("optimizer", t, t + 10_000)
    b.call("cudaDeviceSynchronize", t + 2_000, t + 8_000)
    return b.table()


def test_by_range_ns_sums_emit_nvtx_calls_per_op():
    r = analyze(emit_nvtx_table()).report
    by = r.critical_path.by_range_ns
    assert "aten::add" in by and not any(", seq = " in k or ", op_id = " in k for k in by)
    rows = {t.name: t for t in r.summary.top_cpu_ranges}
    assert by["aten::add"] == rows["aten::add"].path_ns > 0  # the text's table and the JSON agree


def test_fold_by_op():
    names = ["(no range)", "aten::mm, seq = 1, op_id = 7", "Annotation", "aten::mm, seq = 2, op_id = 9"]
    out, ns = fold_by_op(names, np.array([5.0, 2.0, 1.0, 3.0]))
    assert out == ["(no range)", "aten::mm", "Annotation"] and ns.tolist() == [5.0, 5.0, 1.0]
    same = ["a", "b::c"]
    assert fold_by_op(same, np.array([1.0, 2.0]))[0] is same


@pytest.mark.skipif(not TRACES.is_dir(), reason="../shared/traces not available")
def test_by_range_ns_of_an_emit_nvtx_trace_names_ops():
    # was: "aten::layer_norm, seq = 47588, op_id = 999617" and ten single FSDP::pre_forward calls
    r = analyze(load_trace(str(TRACES / "nsys_ai" / "mfu_2gpu_before.sqlite"))).report
    by = r.critical_path.by_range_ns
    assert not any(", op_id = " in k or ", seq = " in k for k in by)
    rows = {t.name: t.path_ns for t in r.summary.top_cpu_ranges}
    for name in ("aten::linear", "aten::layer_norm", "aten::add"):
        assert by[name] == rows[name]
