"""The ``fit=FILE`` document of the communication what-ifs (``fsdp``, ``zero``, ``tp``): the JSON
``daydream-comm-fit --json FILE`` writes (:meth:`daydream.costmodel.comm_fit.CommFit.to_json`),
read here; :func:`daydream.costmodel.comm_fit.from_json` checks its fields."""

from __future__ import annotations

import json

from ..errors import UsageError


def read_comm_fit(path: str) -> dict:
    """The document at ``path`` (a JSON object).

    Raises:
        UsageError: it cannot be read, is not JSON, or is not an object (one line naming it).
    """
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError) as e:
        raise UsageError(f"fit={path}: cannot read it: {e}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"fit={path}: not a daydream-comm-fit document (a JSON object)")
    return doc
