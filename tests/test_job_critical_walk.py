"""The job's critical path (daydream/job/critical.py) walks each rank with the compiled walk
where the single-rank critical path does (daydream.simulate.critical_path._compiled_walk), with results
identical to the Python walk."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from daydream.job.critical import job_critical_path, rank_critical_path
from daydream.simulate import critical_walk

from test_job_emulated import _analyze, jobs


def _both(res):
    m, c = res.matching, res.coupled
    rows = range(c.pin.shape[0])
    return [job_critical_path(m, c, i) for i in rows], [rank_critical_path(c, i) for i in rows]


@pytest.mark.slow
@given(jobs())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
def test_job_walk_compiled_equals_python(monkeypatch, progs):
    if critical_walk.kernel() is None:
        return  # no numba: only the Python walk exists
    _, res = _analyze(progs)
    calls = []
    real = critical_walk.walk

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)

    with monkeypatch.context() as mp:
        mp.setenv("DAYDREAM_JIT", "off")
        py = _both(res)
    with monkeypatch.context() as mp:
        mp.setenv("DAYDREAM_JIT", "on")  # every graph walks compiled, whatever its size
        mp.setattr(critical_walk, "walk", spy)
        comp = _both(res)
    assert calls, "the compiled walk did not run"
    assert comp == py
