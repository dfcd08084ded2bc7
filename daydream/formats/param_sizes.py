"""The ``ddp:params=FILE`` JSON of a model's parameter sizes (``schemas/ddp-params.schema.json``), read and checked."""

from __future__ import annotations

import json
import msgspec
import numpy as np
from ..errors import UsageError
from .comm_args import elem_bytes


# -------------------------------------------------------------------------- gradient sizes ----
class ParamSize(msgspec.Struct, forbid_unknown_fields=True):
    """One parameter: ``numel`` elements of ``dtype`` (a PyTorch dtype name, default float32)."""

    numel: int
    name: str = ""
    dtype: str = "float32"


class ParamSizes(msgspec.Struct, forbid_unknown_fields=True):
    """The ``ddp:params=FILE`` JSON: the model's parameters in ``model.parameters()`` order (DDP
    fills buckets in reverse of it, the order backward produces gradients)."""

    parameters: list[ParamSize]


def param_sizes_schema() -> dict:
    """JSON Schema of :class:`ParamSizes` (``schemas/ddp-params.schema.json``)."""
    return msgspec.json.schema(ParamSizes)


#: largest element count of one parameter accepted from a ``ddp:params`` file (2^44: 16 Ti elements)
MAX_PARAM_NUMEL = 2**44


def read_param_sizes(path: str) -> np.ndarray:
    """Gradient sizes in bytes, in backward order (reverse of the file's), from a ``ParamSizes`` file.

    Raises:
        UsageError: unreadable or invalid file (the message names the file and the place).
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise UsageError(f"{path}: cannot read ({e.strerror or e})") from None
    schema = 'schema: schemas/ddp-params.schema.json ({"parameters": [{"numel": N, "dtype": "float32"}, ...]})'
    try:
        msgspec.json.decode(data)  # the JSON first: a truncated file is said to be one, whatever its fields
    except msgspec.DecodeError as e:
        why = f"the JSON ends early at byte {len(data):,} (a truncated file?)" if "truncated" in str(e) else f"not JSON ({e})"
        raise UsageError(f"{path}: {why}; {schema}") from None
    try:
        doc = msgspec.json.decode(data, type=ParamSizes)
    except (msgspec.DecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"{path}: not a parameter-size file ({e}); {schema}") from None
    out = []
    for i, q in enumerate(doc.parameters):
        b = elem_bytes(q.dtype)
        if b < 0:
            raise UsageError(f"{path}: parameters[{i}].dtype: unknown PyTorch dtype {q.dtype!r} (e.g. float32, bfloat16, float16, int64)")
        if q.numel < 0:
            raise UsageError(f"{path}: parameters[{i}].numel: {q.numel} is negative (a count of elements)")
        if q.numel > MAX_PARAM_NUMEL:
            raise UsageError(f"{path}: parameters[{i}].numel: {q.numel} is over 2^44 elements (no real parameter is that large)")
        out.append(q.numel * b)
    if not out:
        raise UsageError(f"{path}: no parameters")
    return np.asarray(out[::-1], np.int64)
