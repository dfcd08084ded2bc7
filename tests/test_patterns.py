"""User patterns (``pattern=`` of scale-kernels, scale-cpu's ``range=``, ``select(name=...)``) are
matched by RE2 (daydream/util/patterns.py): no pattern can backtrack catastrophically (issue 37:
``(a+)+$``-like patterns of 29 characters took 27-42 s with Python's ``re``)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from daydream.errors import DaydreamError
from daydream.transform import compile_pattern
import daydream.util.patterns  # noqa: F401
from daydream.util.patterns import MAX_PATTERN_CHARS, compile_user_pattern

#: the reported catastrophic patterns and a text that makes a backtracking engine try 2^n paths
EVIL = [("(a+)+$", "a" * 28 + "b"), ("(x+x+)+y", "x" * 40), ("^(a|aa)+$", "a" * 60 + "!"), ("(.*a){20}", "a" * 30)]


@pytest.mark.parametrize("pattern,text", EVIL)
def test_catastrophic_pattern_matches_in_linear_time(pattern, text):
    for rx in (compile_user_pattern(pattern), compile_pattern(pattern), compile_user_pattern(pattern, ignore_case=True)):
        t0 = time.perf_counter()
        rx.search(text * 100)  # a long kernel name
        assert time.perf_counter() - t0 < 0.2


def test_ignore_case_and_plain_search():
    assert compile_user_pattern("GEMM", ignore_case=True).search("volta_sgemm_128x64") is not None
    assert compile_user_pattern("GEMM").search("volta_sgemm_128x64") is None
    assert compile_user_pattern(r"^nccl\w+").search("ncclKernel_AllReduce") is not None


@pytest.mark.parametrize("pattern,says", [("(a", "missing )"), ("[z-a]", "range"), ("(?<!a", "missing )")])
def test_bad_pattern_is_one_clear_error(pattern, says, capfd):
    with pytest.raises(DaydreamError, match="bad regular expression") as e:
        compile_user_pattern(pattern)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert capfd.readouterr().err == ""  # RE2's own log line is kept off stderr


def test_look_around_and_back_references_still_match():
    """RE2 lacks them; Python's re matches them (``scale-kernels:pattern=^(?!nccl)``: every kernel but NCCL's)."""
    rx = compile_user_pattern("^(?!nccl)", ignore_case=True)
    assert rx.search("volta_sgemm") is not None and rx.search("NCCLKernel_AllReduce") is None
    assert compile_user_pattern(r"(ab)\1").search("xabab") is not None


def test_backtracking_look_around_pattern_is_stopped_by_the_budget(monkeypatch):
    import daydream.util.patterns as pat

    monkeypatch.setattr(pat, "MATCH_BUDGET_S", 0.3)
    rx = compile_user_pattern("(a+)+$(?!x)")
    assert rx.search("aab") is None and rx.search("aa") is not None
    t0 = time.perf_counter()
    with pytest.raises(DaydreamError, match="catastrophic backtracking"):
        rx.search("a" * 40 + "b")
    assert time.perf_counter() - t0 < 2
    with pytest.raises(DaydreamError, match="took over"):  # spent: later searches refused at once
        rx.search("aa")


def test_look_around_off_the_main_thread_is_refused():
    from concurrent.futures import ThreadPoolExecutor

    rx = compile_user_pattern("^(?!nccl)")
    with ThreadPoolExecutor(1) as ex, pytest.raises(DaydreamError, match="main thread"):
        ex.submit(rx.search, "k").result()


def test_over_long_pattern_refused():
    with pytest.raises(DaydreamError, match="at most"):
        compile_user_pattern("a" * (MAX_PATTERN_CHARS + 1))


@pytest.mark.slow
def test_scale_kernels_pattern_goes_through_re2(capsys):
    """The optimizations that searched with Python's re (recompiling the pattern IGNORECASE) now
    use the safe engine: the CLI answers a catastrophic pattern at once."""
    from daydream.analysis import analyze
    from daydream.formats import load_trace
    from pathlib import Path

    table = load_trace(str(Path(__file__).resolve().parents[1] / "fixtures" / "train_step.json.gz"))
    from daydream.optimizations import parse_spec

    for spec in ("scale-kernels:pattern=(a+)+$,factor=0.5", "scale-cpu:range=(a+)+$,factor=0.5"):
        t0 = time.perf_counter()
        try:
            analyze(table, [parse_spec(spec)])
        except DaydreamError:
            pass
        assert time.perf_counter() - t0 < 30
    from daydream.optimizations import scale_cpu, scale_kernels
    import inspect

    for m in (scale_cpu, scale_kernels):  # no Python-re compile of a user pattern is left
        assert "re.compile(compile_pattern" not in inspect.getsource(m)


def test_search_mask_is_search_per_text_and_keeps_the_budget(monkeypatch):
    """search_mask: one bool per text, as ``search(text) is not None``, for RE2 and for a
    look-around pattern (one timer for the batch); a backtracking text in a batch spends the
    budget as a lone search does."""
    import daydream.util.patterns as pat
    from daydream.util.patterns import search_mask

    texts = ["volta_sgemm", "NCCLKernel_AllReduce", "", "ncc", "aten::mm, seq = 3"]
    for pattern in ("^(?!nccl)", "nccl|mm", r"(m)\1"):
        rx = compile_user_pattern(pattern, ignore_case=True)
        got = search_mask(rx, texts)
        assert got.dtype == bool and got.tolist() == [rx.search(t) is not None for t in texts], pattern
    assert search_mask(compile_user_pattern("^(?!x)"), []).shape == (0,)
    monkeypatch.setattr(pat, "MATCH_BUDGET_S", 0.3)
    rx = compile_user_pattern("(a+)+$(?!x)")
    t0 = time.perf_counter()
    with pytest.raises(DaydreamError, match="catastrophic backtracking"):
        search_mask(rx, ["aa", "a" * 40 + "b", "aa"])
    assert time.perf_counter() - t0 < 2
    with pytest.raises(DaydreamError, match="took over"):
        search_mask(rx, ["aa"])
