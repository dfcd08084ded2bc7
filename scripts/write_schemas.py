"""Regenerate the JSON Schemas in schemas/ from the msgspec definitions.

    python scripts/write_schemas.py

tests/test_schemas.py fails when a committed schema differs from what this writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daydream.schemas import SCHEMAS  # noqa: E402


def main() -> None:
    for name, make in SCHEMAS.items():
        path = ROOT / "schemas" / name
        path.write_text(json.dumps(make(), indent=2, sort_keys=True) + "\n")
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
