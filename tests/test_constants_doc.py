"""docs/constants.md lists every numeric constant of the package with its source kind, as
scripts/constants.py writes it from the code (issue 39): the file is current, the audit's
overrides name constants that exist, and the inventory found constants of every model kind."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("constants_script", ROOT / "scripts" / "constants.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_constants_doc_is_current():
    s = _script()
    assert (ROOT / "docs" / "constants.md").read_text(encoding="utf-8") == s.render(s.constants()), \
        "docs/constants.md is stale: run python scripts/constants.py"


def test_inventory_and_overrides():
    s = _script()
    rows = s.constants()
    names = {r["name"] for r in rows}
    assert not set(s.OVERRIDES) - names, f"audit entries for constants that no longer exist: {sorted(set(s.OVERRIDES) - names)}"
    kinds = {r["kind"] for r in rows}
    assert len(rows) >= 100 and {"citation", "fit", "limit", "definition"} <= kinds
    assert s.classify("X", "DRAM bandwidth from the NVIDIA A100 datasheet") == "citation"
    assert s.classify("MAX_THINGS", "") == "limit" and s.classify("Y", "") == "unsourced"
