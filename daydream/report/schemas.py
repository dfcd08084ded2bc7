"""The JSON Schemas of the files daydream defines, by file name in ``schemas/``, and their writer.

Each is generated from msgspec definitions. :func:`schema_text` is the one serialization of a
schema file and :func:`write_schemas` the one writer: ``scripts/write_schemas.py`` calls it and
``tests/test_schemas.py`` fails when a committed file differs from :func:`schema_text` by a byte.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from ..events.table import event_table_schema
from ..formats.cupti_jsonl.line_schema import cupti_jsonl_schema
from ..formats.param_sizes import param_sizes_schema
from .job_model import job_report_schema
from .report_model import report_schema

SCHEMAS: dict[str, Callable[[], dict]] = {
    "event_table.schema.json": event_table_schema,
    "report.schema.json": report_schema,
    "cupti-jsonl.schema.json": cupti_jsonl_schema,
    "ddp-params.schema.json": param_sizes_schema,
    "job_report.schema.json": job_report_schema,
}

#: where the committed schema files live (``schemas/`` at the repository root)
SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"


def schema_text(name: str) -> str:
    """The exact text of the schema file ``name`` (a key of :data:`SCHEMAS`): JSON with sorted
    keys, indented by 2, ending in a newline."""
    return json.dumps(SCHEMAS[name](), indent=2, sort_keys=True) + "\n"


def write_schemas(directory: str | Path = SCHEMA_DIR) -> list[Path]:
    """Write every schema of :data:`SCHEMAS` into ``directory``; returns the paths written."""
    written = []
    for name in SCHEMAS:
        path = Path(directory) / name
        path.write_text(schema_text(name), encoding="utf-8")
        written.append(path)
    return written
