"""Test oracles and program generators; no part of the analysis pipeline.

:mod:`daydream.testing.emulator` runs CUDA programs under the rules of ``docs/model.md`` and
writes their traces; the tests and ``scripts/make_fixture.py`` use it to check daydream against
an independent reference. Nothing else in :mod:`daydream` imports this package
(``tests/test_architecture.py`` enforces it).
"""
