"""The committed JSON Schemas are exactly what the msgspec definitions generate."""

import json
from pathlib import Path

import pytest

from daydream.schemas import SCHEMAS

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema_file_is_current(name):
    path = ROOT / "schemas" / name
    assert path.exists(), f"{path} missing: run python scripts/write_schemas.py"
    assert json.loads(path.read_text()) == SCHEMAS[name](), f"{name} is stale: run python scripts/write_schemas.py"
