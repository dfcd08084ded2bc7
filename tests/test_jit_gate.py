"""The JIT workload gate (issue 38): in ``auto`` mode a process whose stated event rows stay under
the break-even never imports numba; ``DAYDREAM_JIT=on``, ``method="compiled"`` and ``off`` keep
their meaning; a process that states nothing keeps the per-kernel thresholds."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from daydream.util import jit

ROOT = Path(__file__).resolve().parents[1]


def _k(x):
    return x


def test_nothing_stated_keeps_the_per_kernel_thresholds(monkeypatch):
    monkeypatch.delenv("DAYDREAM_JIT", raising=False)
    jit.reset_workload(None)
    assert jit.wanted(10, 5) and not jit.wanted(4, 5)


def test_under_the_break_even_auto_never_wants_a_kernel(monkeypatch):
    monkeypatch.delenv("DAYDREAM_JIT", raising=False)
    monkeypatch.delenv("DAYDREAM_JIT_BREAK_EVEN", raising=False)
    jit.reset_workload(None)
    jit.add_workload(jit.BREAK_EVEN_ROWS - 2)
    assert jit.gated() and not jit.wanted(10**9, 5)
    assert jit.kernel_for(_k, 10**9, 5) is None  # the numpy path: nothing compiled, numba not asked
    assert jit.kernel_for(_k, 1, 5, "python") is _k
    assert jit.wanted(1, 5, forced=True)  # method="compiled" / a loaded kernel pass the gate
    jit.add_workload(1)
    assert jit.gated()  # rows add up over the tables of a process
    jit.add_workload(1)
    assert not jit.gated() and jit.wanted(10, 5) and not jit.wanted(4, 5)


def test_the_environment_passes_or_moves_the_gate(monkeypatch):
    jit.reset_workload(10)
    monkeypatch.setenv("DAYDREAM_JIT", "on")
    assert not jit.gated() and jit.wanted(1, 5)
    monkeypatch.setenv("DAYDREAM_JIT", "off")
    assert not jit.wanted(10**9, 5, forced=True)
    monkeypatch.setenv("DAYDREAM_JIT", "auto")
    assert jit.gated()
    monkeypatch.setenv("DAYDREAM_JIT_BREAK_EVEN", "0")
    assert not jit.gated() and jit.wanted(10, 5)
    monkeypatch.setenv("DAYDREAM_JIT_BREAK_EVEN", "junk")
    assert jit.break_even() == jit.BREAK_EVEN_ROWS


@pytest.mark.slow
@pytest.mark.parametrize("extra,imported", [({}, False), ({"DAYDREAM_JIT_BREAK_EVEN": "0"}, True)])
def test_a_small_trace_analyzed_in_auto_mode_never_imports_numba(extra, imported):
    """The replay's own threshold set to 0 would compile it on the fixture; the gate alone keeps
    numba out (the control: the gate disabled, numba imported)."""
    pytest.importorskip("numba")  # the third-party JIT (optional at run time), not a daydream module
    code = ("import sys\nimport daydream\nfrom daydream.formats import load_trace\nfrom daydream.simulate import compiled\n"
            "compiled.MIN_TASKS = 0\n"
            "daydream.analyze(load_trace(sys.argv[1]), ['scale-kernels'])\nprint('numba' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(ROOT), **extra)
    env.pop("DAYDREAM_JIT", None)
    if not extra:
        env.pop("DAYDREAM_JIT_BREAK_EVEN", None)
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "fixtures" / "train_step.json.gz")], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.strip().splitlines()[-1] == str(imported)
