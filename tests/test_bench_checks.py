"""scripts/bench.py's own checks (issue 38): the growth check fails a stage whose CPU time grows
more than GROWTH_TOLERANCE x faster than its input, reading each stage's best run; the JIT tiers
section states the break-even where compiled stops costing more than off."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("daydream_bench", ROOT / "scripts" / "bench.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _res(report_1m, report_4m, min_4m=None):
    def inp(ev, rep, mn):
        p = {"report_cpu": rep, "graph_cpu": 1.0, "map_cpu": 1.0, "sim_cpu": 1.0}
        if mn is not None:
            p["min_report_cpu"] = mn
        return {"manifest": {"events": ev}, "pipeline": p}
    return {"sizes": {"1m": {"nsys_1m.sqlite": inp(1_000_000, report_1m, None)},
                      "4m": {"nsys_4m.sqlite": inp(4_000_000, report_4m, min_4m)}}, "load_only": {}}


def _verdicts(res):
    return {g.split(": ")[1].split(" (")[0]: ok for g, _, ok in bench._growth_goals(res, [1_000_000, 4_000_000])}


def test_a_stage_growing_faster_than_its_input_fails():
    v = _verdicts(_res(1.0, 4.0 * 1.3))
    assert v["report"] is False  # x5.2 for events x4
    assert v["mapping"] is True  # x1 for events x4


def test_linear_stages_pass_and_the_best_run_is_read():
    v = _verdicts(_res(1.0, 4.0 * 1.3, min_4m=4.0 * 1.1))
    assert v["report"] is True


def test_break_even_between_the_sizes_where_compiled_stops_costing_more():
    t = {"break_even_const": 500_000, "inputs": [
        {"file": f"g{n}", "real": False, "mb": 1.0, "off": {"cpu": 1.0, "rows": n}, "compiled": {"cpu": 1.0 + d, "rows": n},
         "auto": {"cpu": 1.0, "rows": n, "numba": False}} for n, d in ((250_000, 0.4), (500_000, 0.2), (1_000_000, -0.2))]}
    text = "\n".join(bench._jit_section(t))
    assert "750,000 rows" in text  # +0.2 at 0.5 M, -0.2 at 1 M: linear crossing


@pytest.mark.slow
def test_the_bench_loads_every_kernel_on_an_empty_numba_cache(tmp_path):
    """_warm_jit compiled call_threads' kernel without binding its compiled helper: on an empty
    numba cache typing failed, and every before/after pipeline of a fresh source tree errored."""
    pytest.importorskip("numba")  # the third-party JIT (optional at run time), not a daydream module
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(ROOT), DAYDREAM_SRC=str(ROOT))
    env.pop("DAYDREAM_JIT", None)
    code = ("import importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('b', {str(ROOT / 'scripts' / 'bench.py')!r})\n"
            "b = importlib.util.module_from_spec(spec); spec.loader.exec_module(b)\nb._warm_jit()\nprint('ok')")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")
