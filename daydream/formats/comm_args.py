"""The collective arguments of a Kineto trace: what the event table does not keep.

PyTorch's profiler writes the message of a collective in the ``args`` of three kinds of events
(``torch/csrc/profiler/util.cpp`` ``saveNcclMeta``; PyTorch >= 2.0):

* the ``record_param_comms`` CPU op and, from PyTorch 2.1, the NCCL kernel itself:
  ``Collective name``, ``In msg nelems``, ``Out msg nelems``, ``Group size``, ``dtype``,
  ``Process Group Name``, ``Process Group Ranks``, ``In split size``, ``Out split size``;
* the ``nccl:*`` user annotation of PyTorch 1.x with ``record_shapes``: ``Input Dims`` and
  ``Input type`` (the message's shape and element type; no group size);
* framework ops with ``record_shapes`` (``torch::autograd::AccumulateGrad`` etc.): ``Input Dims``.

This reader decodes the trace a second time with a narrow msgspec struct and returns those args as
columns, one row per event that has any of them, keyed by the identifiers the table also holds
(``correlation`` for GPU events, ``External id`` for CPU events), so :mod:`daydream.graph.collectives`
joins them to table rows. It never raises on a trace the main adapter accepted: what it cannot
read is returned as a reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import msgspec
import numpy as np

from ..errors import TraceFormatError
from . import open_maybe_gzip

#: element sizes (bytes) of the ``dtype`` / ``Input type`` strings PyTorch writes
#: (``c10::ScalarType`` names and their C++ spellings)
DTYPE_BYTES = {
    "float": 4, "float32": 4, "c10::float": 4, "int": 4, "int32": 4, "uint32": 4,
    "double": 8, "float64": 8, "long": 8, "int64": 8, "long int": 8, "uint64": 8, "complexfloat": 8,
    "half": 2, "float16": 2, "c10::half": 2, "bfloat16": 2, "c10::bfloat16": 2, "short": 2, "int16": 2,
    "byte": 1, "char": 1, "bool": 1, "int8": 1, "uint8": 1, "unsigned char": 1, "signed char": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "complexdouble": 16,
}


class _Args(msgspec.Struct, gc=False):
    ext: Any = msgspec.field(name="External id", default=None)
    corr: Any = msgspec.field(name="correlation", default=None)
    coll: Any = msgspec.field(name="Collective name", default=None)
    in_n: Any = msgspec.field(name="In msg nelems", default=None)
    out_n: Any = msgspec.field(name="Out msg nelems", default=None)
    group: Any = msgspec.field(name="Group size", default=None)
    dtype: Any = msgspec.field(name="dtype", default=None)
    pg: Any = msgspec.field(name="Process Group Name", default=None)
    dims: Any = msgspec.field(name="Input Dims", default=None)
    types: Any = msgspec.field(name="Input type", default=None)


class _Ev(msgspec.Struct, gc=False):
    name: Any = None
    cat: Any = None
    args: Optional[_Args] = None


class _Doc(msgspec.Struct, gc=False):
    traceEvents: list[_Ev] = []


@dataclass
class CommArgs:
    """Columns (one row per event with collective args or input shapes), all the same length:

    name, cat (object arrays of str); ext (External id), corr (correlation), -1 none;
    collective (str, "" none); in_nelems, out_nelems, group_size (int64, -1 unknown);
    elem_bytes (int64, -1 unknown: the ``dtype`` / first ``Input type``); pg (str);
    dims_nelems (int64: elements of the first input shape, -1 none).
    ``reason``: why nothing could be read ("" when the file was read).
    """

    name: np.ndarray
    cat: np.ndarray
    ext: np.ndarray
    corr: np.ndarray
    collective: np.ndarray
    in_nelems: np.ndarray
    out_nelems: np.ndarray
    group_size: np.ndarray
    elem_bytes: np.ndarray
    pg: np.ndarray
    dims_nelems: np.ndarray
    reason: str = ""
    extra: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.name)


def _int(v: Any) -> int:
    if isinstance(v, bool):
        return -1
    if isinstance(v, int):
        return v if -(2**62) < v < 2**62 else -1
    if isinstance(v, str):
        try:
            return int(v)
        except ValueError:
            return -1
    return -1


def _first_dims(v: Any) -> int:
    """Elements of the first shape in an ``Input Dims`` list ([[a, b], ...] -> a*b), -1 none."""
    if not isinstance(v, list) or not v or not isinstance(v[0], list) or not v[0]:
        return -1
    n = 1
    for d in v[0]:
        if not isinstance(d, int) or isinstance(d, bool) or d < 0 or d > 2**40:
            return -1
        n *= d
    return n


def elem_bytes(dtype: Any) -> int:
    """Bytes per element of a PyTorch dtype string (``DTYPE_BYTES``), -1 unknown."""
    if not isinstance(dtype, str):
        return -1
    return DTYPE_BYTES.get(dtype.strip().lower(), -1)


def empty(reason: str = "") -> CommArgs:
    z = np.zeros(0, np.int64)
    o = np.zeros(0, object)
    return CommArgs(o, o.copy(), z, z.copy(), o.copy(), z.copy(), z.copy(), z.copy(), z.copy(), o.copy(), z.copy(), reason)


def read_comm_args(path: str) -> CommArgs:
    """The collective args and input shapes of the Kineto trace at ``path`` (module docstring).

    Returns an empty :class:`CommArgs` with ``reason`` set when the file is not a readable Kineto
    JSON document (e.g. an nsys database, a saved table whose source moved, damaged JSON).
    """
    try:
        data = open_maybe_gzip(path)
        doc = msgspec.json.decode(data, type=_Doc)
    except (TraceFormatError, msgspec.DecodeError, OSError, ValueError) as e:
        return empty(f"collective args not read from {path}: {str(e)[:200]}")
    evs = [e for e in doc.traceEvents if e.args is not None and (e.args.coll is not None or e.args.in_n is not None or e.args.dims is not None)]
    if not evs:
        return empty()
    a = [e.args for e in evs]

    def col(f, fn=_int):
        return np.fromiter((fn(getattr(x, f)) for x in a), dtype=np.int64, count=len(a))

    def scol(f):
        return np.array([v if isinstance(v := getattr(x, f), str) else "" for x in a], dtype=object)

    eb = np.fromiter((elem_bytes(x.dtype) if x.dtype is not None else
                      elem_bytes(x.types[0]) if isinstance(x.types, list) and x.types else -1 for x in a), np.int64, len(a))
    return CommArgs(
        name=np.array([e.name if isinstance(e.name, str) else "" for e in evs], dtype=object),
        cat=np.array([e.cat if isinstance(e.cat, str) else "" for e in evs], dtype=object),
        ext=col("ext"), corr=col("corr"), collective=scol("coll"), in_nelems=col("in_n"), out_nelems=col("out_n"),
        group_size=col("group"), elem_bytes=eb, pg=np.array([str(x.pg) if x.pg is not None else "" for x in a], dtype=object),
        dims_nelems=col("dims", _first_dims))
