"""The JSON Schemas of the files daydream defines, by file name in ``schemas/``.

Each is generated from msgspec definitions; ``scripts/write_schemas.py`` writes them and
``tests/test_schemas.py`` fails when a committed file is stale.
"""

from __future__ import annotations

from typing import Callable

from .events import event_table_schema
from .formats.cupti_jsonl import cupti_jsonl_schema
from .report import report_schema

SCHEMAS: dict[str, Callable[[], dict]] = {
    "event_table.schema.json": event_table_schema,
    "report.schema.json": report_schema,
    "cupti-jsonl.schema.json": cupti_jsonl_schema,
}
