"""The ``ddp:params=FILE`` JSON of a model's parameter sizes (``schemas/ddp-params.schema.json``), read and checked."""

from __future__ import annotations

import json
import sys

import msgspec
import numpy as np
from ..errors import UsageError
from . import check_regular
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
#: most parameters (tensors) in one file: 2^22 (4 M); real models have 10^2-10^5 parameter tensors
MAX_PARAMS = 2**22
#: most gradient bytes in all: 2^50 (1 PiB; a 10-trillion-parameter float32 model has 2^45). Bounds
#: every sum of sizes far below int64 (2^63), and the time of a transfer of them at 1 B/ns under 2^62 ns
MAX_TOTAL_BYTES = 2**50
#: largest ``ddp:params`` file read: 256 MiB (2^22 entries of ~60 bytes with their names)
MAX_PARAM_FILE_BYTES = 256 << 20


def read_param_sizes(path: str) -> np.ndarray:
    """Gradient sizes in bytes, in backward order (reverse of the file's), from a ``ParamSizes`` file.

    The file is opened as a trace is: a regular file only (a FIFO, a device or a directory is
    refused before any open), at most :data:`MAX_PARAM_FILE_BYTES`, JSON nested no deeper than the
    decoder's recursion limit, at most :data:`MAX_PARAMS` entries of at most
    :data:`MAX_PARAM_NUMEL` elements and :data:`MAX_TOTAL_BYTES` in all.

    Raises:
        UsageError: unreadable or invalid file (the message names the file and the place).
        TraceFormatError: not a regular file, or missing.
    """
    check_regular(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PARAM_FILE_BYTES + 1)
    except OSError as e:
        raise UsageError(f"{path}: cannot read ({e.strerror or e})") from None
    if len(data) > MAX_PARAM_FILE_BYTES:
        raise UsageError(f"{path}: larger than {MAX_PARAM_FILE_BYTES:,} bytes; a parameter-size file lists at most "
                         f"{MAX_PARAMS:,} parameters")
    schema = 'schema: schemas/ddp-params.schema.json ({"parameters": [{"numel": N, "dtype": "float32"}, ...]})'
    try:
        msgspec.json.decode(data)  # the JSON first: a truncated file is said to be one, whatever its fields
    except msgspec.DecodeError as e:
        why = f"the JSON ends early at byte {len(data):,} (a truncated file?)" if "truncated" in str(e) else f"not JSON ({e})"
        raise UsageError(f"{path}: {why}; {schema}") from None
    except RecursionError:
        raise UsageError(f"{path}: JSON nested too deeply (arrays or objects inside each other more than "
                         f"{sys.getrecursionlimit():,} levels); {schema}") from None
    try:
        doc = msgspec.json.decode(data, type=ParamSizes)
    except (msgspec.DecodeError, json.JSONDecodeError) as e:
        raise UsageError(f"{path}: not a parameter-size file ({e}); {schema}") from None
    n = len(doc.parameters)
    if not n:
        raise UsageError(f"{path}: no parameters")
    if n > MAX_PARAMS:
        raise UsageError(f"{path}: {n:,} parameters; at most 2^22 ({MAX_PARAMS:,}) are accepted")
    numel = np.fromiter((q.numel for q in doc.parameters), np.int64, n) if n else np.zeros(0, np.int64)  # numel < 2^63: msgspec's int64
    width = np.fromiter((elem_bytes(q.dtype) for q in doc.parameters), np.int64, n)
    for bad, what in ((width < 0, "dtype"), (numel < 0, "numel"), (numel > MAX_PARAM_NUMEL, "numel")):
        if bad.any():
            i = int(bad.argmax())
            q = doc.parameters[i]
            raise UsageError(f"{path}: parameters[{i}].{what}: " + (
                f"unknown PyTorch dtype {q.dtype!r} (e.g. float32, bfloat16, float16, int64)" if what == "dtype" else
                f"{q.numel} is negative (a count of elements)" if q.numel < 0 else
                f"{q.numel} is over 2^44 elements (no real parameter is that large)"))
    out = numel * width  # each < 2^44 x 16 = 2^48: no overflow
    csum = np.cumsum(out.astype(np.float64))  # in float: an int64 sum of 2^22 x 2^48 would wrap (2^70)
    if csum[-1] > MAX_TOTAL_BYTES:
        i = int(np.argmax(csum > MAX_TOTAL_BYTES))
        raise UsageError(f"{path}: the parameters' gradients total more than 2^50 bytes (1 PiB) by parameters[{i}] "
                         f"(of {n:,}); no real model is that large")
    return out[::-1].copy()
