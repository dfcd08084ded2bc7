"""Regenerate the JSON Schemas in schemas/ from the msgspec definitions.

    python scripts/write_schemas.py

The writing is ``daydream.report.schemas.write_schemas``; tests/test_schemas.py fails when a committed
schema differs from what it writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daydream.report.schemas import write_schemas  # noqa: E402


def main() -> None:
    for path in write_schemas(ROOT / "schemas"):
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
