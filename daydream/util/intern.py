"""Interning: distinct values to dense ids 0, 1, ... in order of first appearance."""

from __future__ import annotations


class _Ids(dict):
    """Distinct values -> ids 0, 1, ... in order of first appearance (looking up a new value adds it)."""

    def __missing__(self, key):
        i = self[key] = len(self)
        return i
