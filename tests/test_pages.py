"""daydream.util.pages: the commands turn numpy's huge-page advice off for their run only."""

from __future__ import annotations

import pytest

from daydream.util.pages import small_pages

mod = pytest.importorskip("numpy._core.multiarray")


def test_small_pages_switches_the_advice_off_and_restores_it():
    before = mod._get_madvise_hugepage()
    for start in (True, False):
        mod._set_madvise_hugepage(start)
        with small_pages() as switched:
            assert switched and mod._get_madvise_hugepage() is False
        assert mod._get_madvise_hugepage() is start
    mod._set_madvise_hugepage(before)


def test_the_command_runs_without_the_advice(monkeypatch, tmp_path):
    """cli.main runs its work inside small_pages (seen from inside the run) and restores the setting."""
    import daydream.cli as cli

    seen = []
    monkeypatch.setattr(cli, "_main", lambda argv: seen.append(mod._get_madvise_hugepage()) or 0)
    before = mod._get_madvise_hugepage()
    mod._set_madvise_hugepage(True)
    try:
        assert cli.main(["x"]) == 0
        assert seen == [False] and mod._get_madvise_hugepage() is True
    finally:
        mod._set_madvise_hugepage(before)
