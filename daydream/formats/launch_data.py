"""Per-kernel launch configuration and recorded op shapes, read beside the event table.

The event table (:mod:`daydream.events.table`) keeps what the graph and the replay need; per-kernel
performance models (``gpu-upgrade``, ``amp``) also want what the profilers record about each
kernel launch and the op that launched it, keyed by (device, correlation id), the identity the
graph keeps for every GPU task. :func:`launch_data_of` gives them for an event table: the Kineto
reader collects them in its own pass over the events (:class:`LaunchFacts` on
``EventTable.launch``; about 0.1 s per million events); other tables read them from the trace
file again (:func:`read_launch_data`: Nsight Systems through Arrow where installed; this re-read
is also the reference the loader's pass is tested against):

* Kineto (``torch.profiler``) kernel ``args``: ``grid`` and ``block`` (3 ints each), ``registers
  per thread``, ``shared memory`` (bytes, static + dynamic), and ``External id`` -> the ``cpu_op``
  with the same id (the innermost op around the launch) and its ``Input Dims`` / ``Input type``
  (recorded with ``record_shapes=True``). ROCm traces carry ``grid``/``block`` only (registers
  and shared memory absent: -1). Kineto's ``blocks per SM``, ``warps per SM`` and ``est. achieved
  occupancy %`` are derived from these and the device's SM count (Kineto's
  ``CuptiActivityProfiler``), so they are not read: :mod:`daydream.costmodel.kernel_model`
  recomputes them for any GPU.
* Nsight Systems SQLite ``CUPTI_ACTIVITY_KIND_KERNEL``: ``gridX/Y/Z``, ``blockX/Y/Z``,
  ``registersPerThread``, ``staticSharedMemory + dynamicSharedMemory``; no shapes.
* cupti-jsonl dumps: the same fields of the ``CONCURRENT_KERNEL``/``KERNEL`` records
  (CUpti_ActivityKernel), keyed by the rows' device and correlation id as the reader makes them
  (``daydream`` overrides applied); no shapes.

Ops with shapes give FLOPs and bytes (:func:`op_work`) for GEMMs (``aten::mm``, ``addmm``,
``bmm``, ``baddbmm``), scaled-dot-product attention, and elementwise/reduction ops (bytes of the
inputs plus one output the size of the largest input). An op that launched more than one kernel
shares its work among them in no known way: its kernels get no shapes (counted).

Everything is best effort: a file that cannot be read again (moved, a saved ``.npz`` table, an
unknown format) gives an empty :class:`LaunchData` with the reason; nothing here raises on trace
content.
"""

from __future__ import annotations

import re

import gzip
import itertools
import operator
import os
import sqlite3
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Optional

import msgspec
import numpy as np

from ..errors import TraceFormatError
from ..events.table import source_identity
from . import GZIP_MAGIC, cupti_jsonl, inflate_limit, sqlite_arrow

#: bytes per element of the ``Input type`` strings Kineto records (c10 scalar type names)
DTYPE_BYTES: dict[str, int] = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4, "short int": 2,
    "signed char": 1, "unsigned char": 1, "bool": 1, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1, "c10::complex<float>": 8,
}

#: op data types (``LaunchData.dtype`` codes): Kineto ``Input type`` -> name
DTYPES: tuple[str, ...] = ("", "fp32", "fp16", "bf16", "fp8", "fp64", "int")
_DTYPE_OF = {"float": 1, "c10::Half": 2, "c10::BFloat16": 3, "c10::Float8_e4m3fn": 4, "c10::Float8_e5m2": 4,
             "c10::Float8_e4m3fnuz": 4, "c10::Float8_e5m2fnuz": 4, "double": 5, "long int": 6, "int": 6}

_GEMM_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_addmm_activation"})
_ATTN_OPS = ("scaled_dot_product", "_flash_attention", "_efficient_attention", "attention_forward")
#: gathers/scatters read a few rows of their largest input: the elementwise byte count does not hold
_GATHER_WORDS = ("index", "embedding", "gather", "scatter", "take", "nonzero", "masked_select")


@dataclass
class LaunchData:
    """Columns over the kernels of a trace (length ``n``), sorted by ``key`` = device * 2^40 + correlation.

    grid, block: (n, 3) int64 (-1 unknown); regs: registers per thread, smem: shared memory bytes per
    block (-1 unknown); flops, bytes: the launching op's work when it launched this kernel alone
    (-1 unknown); op: the launching op's name ("" unknown). ``reason``: why nothing was read.
    """

    key: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    grid: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))
    block: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))
    regs: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    smem: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    flops: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    #: bytes of the op's last tensor input as recorded (a GEMM's weight operand; -1 unknown), on every
    #: kernel of the op (also where it launched several)
    last_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    #: element size (bytes) of that input: 4 for fp32 (-1 unknown)
    last_elem: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: (n, 4) int64, the launching op's shape where it launched this kernel alone (-1 unknown; an
    #: array of another length, as tests and older saved tables give, means unknown for all):
    #: GEMM ops (B, M, N, K) in cuBLAS's terms (output M x N column-major, reduction K: ``mm``
    #: a[m, k] · b[k, n] is M = n, N = m, K = k; B the batch of ``bmm``); attention (B·heads,
    #: queries, keys, head dim); any other op (rows, row length, tensor inputs, -1) of its largest
    #: input (rows · row length = its elements, the row its last dimension). :func:`op_shape`.
    shape: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), np.int64))
    #: the op's data type (index into :data:`DTYPES`; 0 unknown): its first floating tensor input's
    dtype: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    op: list = field(default_factory=list)
    #: the launching op's recorded shapes, on every kernel of the op (also where it launched
    #: several): an index into ``shapes`` (-1 none), whose entries are the distinct (op name,
    #: ``Input Dims``, ``Input type``) (decoded JSON). Empty where the source has no shapes (Nsight
    #: Systems, CUPTI dumps, a saved table): the shape what-ifs' input
    shape_id: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    shapes: list = field(default_factory=list)
    reason: str = ""
    counts: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.key)


def make_key(device, correlation) -> np.ndarray:
    return np.asarray(device, dtype=np.int64) * (1 << 40) + np.asarray(correlation, dtype=np.int64)


# ------------------------------------------------------------------------------ op work ------
def _numel(dims: Any) -> int:
    if not isinstance(dims, list) or not all(isinstance(d, int) and d >= 0 for d in dims):
        return -1
    n = 1
    for d in dims:
        n *= d
    return n


def last_operand(dims: Any, types: Any) -> tuple[float, int]:
    """(bytes, element size) of the last tensor input of an op; (-1, -1) when unknown."""
    if not isinstance(dims, list) or not isinstance(types, list) or len(dims) != len(types):
        return -1.0, -1
    for d, t in zip(reversed(dims), reversed(types)):
        if isinstance(d, list) and d:
            n, s = _numel(d), DTYPE_BYTES.get(t, 0) if isinstance(t, str) else 0
            return (float(n * s), s) if n >= 0 and s else (-1.0, -1)
    return -1.0, -1


#: convolution ops (forward and backward; cuDNN, MIOpen, mkldnn and the generic ones)
_CONV = re.compile(r"convolution|(?<![a-z])conv(?:\d?d|_transpose\d?d|_tbc)(?![a-z])")


def _conv_work(name: str, t: list, nbytes: list) -> tuple[float, float]:
    """(FLOPs, bytes) of a convolution op from its tensor inputs ``t`` (shapes), or (-1, -1) where
    they do not give them. Op work goes to a kernel only where the op launched that one kernel
    (:func:`_columns`), and cuDNN computes each gradient in a kernel of its own, so a backward op
    is taken to compute one gradient: ``2 N K P Q (C/g) R S`` (output gradient [N, K, P, Q], weight
    [K, C/g, R, S]). The recorded inputs give the output's size only in a backward pass (the forward
    output depends on strides and padding, recorded as lists without values):

    * ``..._convolution_backward_input`` (grad_output, weight);
    * ``aten::convolution_backward`` (PyTorch 2: grad_output, input, weight);
    * ``aten::cudnn_convolution_backward`` (PyTorch 1.x: input, grad_output, weight);
    * the forward, ``..._backward_weight`` (the weight's R, S not recorded) and transposed
      convolutions (their weight is [C_in, C_out/g, R, S]): unknown.

    Before, a convolution counted one FLOP per element (the elementwise rule): ResNet-50's cuDNN
    convolutions were memory-bound by the roofline, and gpu-upgrade scaled them by bandwidth."""
    four = [d for d in t if len(d) == 4]
    if "transpose" in name:
        return -1.0, -1.0
    go = w = None
    if name.endswith("_convolution_backward_input") and len(four) >= 2:
        go, w = four[0], four[1]
    elif name == "aten::convolution_backward" and len(four) >= 3:
        go, w = four[0], four[2]
    elif name.endswith("cudnn_convolution_backward") and len(four) >= 3:
        go, w = four[1], four[2]
    if go is None:
        return -1.0, -1.0
    n, k, p, q = go
    return 2.0 * n * k * p * q * w[1] * w[2] * w[3], sum(nbytes) + max(nbytes)


def op_work(name: str, dims: Any, types: Any) -> tuple[float, float]:
    """(FLOPs, bytes) of one op from its recorded input shapes and types; (-1, -1) when unknown.

    GEMM (``mm``/``addmm``: A [M, K], B [K, N]; ``bmm``/``baddbmm``: [b, M, K] x [b, K, N]): 2·M·N·K
    FLOPs (b times), bytes A + B + C. Attention (Q [B, H, S, D], K [B, H, Sk, D], V): 4·B·H·S·Sk·D
    FLOPs (QK^T and PV), bytes Q + K + V + O. Convolutions: :func:`_conv_work` (the backward passes;
    the forward's output size is not recorded). Others: one FLOP per element of the largest input,
    bytes = every tensor input + one output as large as the largest input.
    """
    if not isinstance(dims, list) or not isinstance(types, list) or len(dims) != len(types):
        return -1.0, -1.0
    tensors = [(d, DTYPE_BYTES.get(t, 0) if isinstance(t, str) else 0) for d, t in zip(dims, types) if isinstance(d, list) and d]
    if not tensors or any(s == 0 or _numel(d) < 0 for d, s in tensors):
        return -1.0, -1.0
    nbytes = [float(_numel(d) * s) for d, s in tensors]
    if name in _GEMM_OPS:
        mats = [d for d, _ in tensors if len(d) in (2, 3)]
        a, b = (mats[-2], mats[-1]) if len(mats) >= 2 else (None, None)
        if a is None or len(a) != len(b) or a[-1] != b[-2]:
            return -1.0, -1.0
        m, k, n = a[-2], a[-1], b[-1]
        batch = a[0] if len(a) == 3 else 1
        return 2.0 * batch * m * n * k, sum(nbytes) + float(batch * m * n * tensors[-1][1])
    if any(s in name for s in _ATTN_OPS):
        q, kk = tensors[0][0], tensors[1][0] if len(tensors) > 1 else None
        if kk is None or len(q) != 4 or len(kk) != 4:
            return -1.0, -1.0
        bsz, h, s, d = q
        return 4.0 * bsz * h * s * kk[2] * d, sum(nbytes[:3]) + nbytes[0]
    if any(w in name for w in _GATHER_WORDS):
        return -1.0, -1.0
    if _CONV.search(name):
        return _conv_work(name, [d for d, _ in tensors], nbytes)
    big = max(nbytes)
    return float(max(_numel(d) for d, _ in tensors)), sum(nbytes) + big


def op_shape(name: str, dims: Any, types: Any) -> tuple[int, int, int, int, int]:
    """(4 shape values of ``LaunchData.shape``, dtype code of :data:`DTYPES`) of one op from its
    recorded input shapes and types; -1s (and 0) where they do not give them. The same
    conventions as :func:`op_work`."""
    none = (-1, -1, -1, -1, 0)
    if not isinstance(dims, list) or not isinstance(types, list) or len(dims) != len(types):
        return none
    tensors = [(d, t) for d, t in zip(dims, types) if isinstance(d, list) and d and _numel(d) >= 0]
    if not tensors:
        return none
    code = next((_DTYPE_OF[t] for _, t in tensors if isinstance(t, str) and _DTYPE_OF.get(t, 6) < 6), 0)
    if name in _GEMM_OPS:
        mats = [d for d, _ in tensors if len(d) in (2, 3)]
        a, b = (mats[-2], mats[-1]) if len(mats) >= 2 else (None, None)
        if a is None or len(a) != len(b) or a[-1] != b[-2]:
            return none
        return (a[0] if len(a) == 3 else 1), b[-1], a[-2], a[-1], code
    if any(s in name for s in _ATTN_OPS):
        q, kk = tensors[0][0], tensors[1][0] if len(tensors) > 1 else None
        if kk is None or len(q) != 4 or len(kk) != 4:
            return none
        if name.split("::")[-1].startswith(("_flash_attention", "_efficient_attention")):  # ATen's kernels' ops: [B, S, H, D]
            return q[0] * q[2], q[1], kk[1], q[3], code
        return q[0] * q[1], q[2], kk[2], q[3], code  # scaled_dot_product_*: [B, H, S, D]
    big = max((d for d, _ in tensors), key=_numel)
    cols = int(big[-1])
    return (_numel(big) // cols if cols > 0 else 0), cols, len(tensors), -1, code


# ------------------------------------------------------------------------------ Kineto -------
class _KArgs(msgspec.Struct, rename={"ext": "External id", "ext2": "external id", "regs": "registers per thread",
                                      "smem": "shared memory", "dims": "Input Dims", "types": "Input type"}):
    ext: Any = None
    ext2: Any = None
    correlation: Any = None
    device: Any = None
    grid: Any = None
    block: Any = None
    regs: Any = None
    smem: Any = None
    dims: Any = None
    types: Any = None


class _KExt(msgspec.Struct, rename={"ext": "External id", "ext2": "external id"}):
    ext: Any = None
    ext2: Any = None


class _KEvent(msgspec.Struct):
    """One trace event with its ``args`` left undecoded: only kernel and op events' args are read
    (about a quarter of a Kineto trace's events), the rest are skipped at JSON-scan speed."""

    cat: Any = None
    name: Any = None
    args: msgspec.Raw = msgspec.Raw(b"")


class _KDoc(msgspec.Struct):
    traceEvents: list[_KEvent] = []


_ARGS = msgspec.json.Decoder(Optional[_KArgs])
#: event categories read (lower case): 1 kernel, 0 op
_CATS = {"kernel": 1, "cpu_op": 0, "operator": 0}
#: the same, for the loaders that collect launch facts in their own pass
LAUNCH_CATEGORIES = _CATS
_EXT = msgspec.json.Decoder(Optional[_KExt])


def _read_bytes(path: str) -> bytes:
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(2)
        f.seek(0)
        if head != GZIP_MAGIC:
            return f.read()
        limit = inflate_limit(path, size)
        with gzip.GzipFile(fileobj=f) as g:
            data = g.read(limit + 1)
    if len(data) > limit:
        raise ValueError("decompresses past the inflate limit")
    return data


def _int(v: Any, default: int = -1) -> int:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < 2**62 else default


def _triple(v: Any) -> tuple[int, int, int]:
    if isinstance(v, list) and len(v) == 3 and all(isinstance(x, int) and 0 <= x < 2**31 for x in v):
        return int(v[0]), int(v[1]), int(v[2])
    return -1, -1, -1


def _ext(a) -> int:
    return _int(a.ext if a.ext is not None else a.ext2)


def _kineto(path: str) -> LaunchData:
    """Kernels' args, then the args of the ops whose external id a kernel names (the last op with
    an id wins); an ``args`` that is not an object (or null) in a kernel or op event raises
    ``msgspec.DecodeError``, as a malformed document does."""
    doc = msgspec.json.decode(_read_bytes(path), type=_KDoc)
    kern = []
    op_events = []
    for e in doc.traceEvents:  # one pass over the events: the reader's measured core
        c = e.cat
        k = _CATS.get(c) if isinstance(c, str) else None
        if k is None:
            if not isinstance(c, str) or c.islower():
                continue
            k = _CATS.get(c.lower())
        if k is None or not e.args:
            continue
        if k:
            a = _ARGS.decode(e.args)
            if a is not None:
                kern.append((_int(a.device), _int(a.correlation), _ext(a), _triple(a.grid), _triple(a.block), _int(a.regs), _int(a.smem)))
        else:
            op_events.append(e)
    wanted = {k[2] for k in kern if k[2] >= 0}
    last: dict[int, _KEvent] = {}
    for e in op_events:
        a = _EXT.decode(e.args)
        x = _ext(a) if a is not None else -1
        if x in wanted:
            last[x] = e
    ops: dict[int, tuple[str, Any, Any]] = {}
    for x, e in last.items():
        a = _ARGS.decode(e.args)
        ops[x] = (str(e.name), a.dims, a.types)
    return _columns(_kernel_arrays(kern), ops)


def _kernel_arrays(kern: list) -> tuple:
    """(device, correlation, external id, grid (n, 3), block (n, 3), regs, smem) int64 arrays of
    the kernel tuples the Kineto pass collects."""
    n = len(kern)
    dev, corr, ext = (np.fromiter((k[i] for k in kern), np.int64, n) for i in range(3))
    grid = np.asarray([k[3] for k in kern], np.int64).reshape(n, 3)
    block = np.asarray([k[4] for k in kern], np.int64).reshape(n, 3)
    regs = np.fromiter((k[5] for k in kern), np.int64, n)
    smem = np.fromiter((k[6] for k in kern), np.int64, n)
    return dev, corr, ext, grid, block, regs, smem


def _columns(cols: tuple, ops: dict) -> LaunchData:
    """The sorted :class:`LaunchData` of the kernel columns ``cols`` (:func:`_kernel_arrays`);
    ``ops``: external id -> (op name, Input Dims, Input type)."""
    dev, corr, ext, grid, block, regs, smem = cols
    n = len(dev)
    out = LaunchData(counts={"kernels": n})
    if n == 0:
        out.reason = "no kernel records"
        return out
    u, cnt = np.unique(ext, return_counts=True)
    per_ext = dict(zip(u.tolist(), cnt.tolist()))
    flops = np.full(n, -1.0)
    nbytes = np.full(n, -1.0)
    lb = np.full(n, -1.0)
    le = np.full(n, -1, dtype=np.int64)
    shp = np.full((n, 4), -1, dtype=np.int64)
    dt = np.zeros(n, dtype=np.int8)
    opn = [""] * n
    sid = np.full(n, -1, np.int64)
    shape_ids: dict = {}
    shapes: list = []
    shared = 0
    memo: dict[bytes, tuple] = {}  # ops of the same name and shapes repeat every iteration
    for i in np.flatnonzero(ext >= 0).tolist() if ops else ():  # one entry per kernel record: the reader's measured core
        x = int(ext[i])
        o = ops.get(x)
        if o is None:
            continue
        opn[i] = o[0]
        try:
            key = msgspec.json.encode((o[0], o[1], o[2]))
        except (TypeError, OverflowError, msgspec.EncodeError):  # nothing JSON cannot say comes from a decode; kept safe
            key = None
        if key is not None and o[1] is not None:
            j = shape_ids.get(key)
            if j is None:
                j = shape_ids[key] = len(shapes)
                shapes.append((o[0], o[1], o[2]))
            sid[i] = j
        if per_ext[x] > 1:  # the op's work cannot be split among its kernels; its weight operand is the op's own
            shared += 1
            lb[i], le[i] = last_operand(o[1], o[2])
            continue
        w = memo.get(key) if key is not None else None
        if w is None:
            w = (*op_work(o[0], o[1], o[2]), *last_operand(o[1], o[2]), op_shape(o[0], o[1], o[2]))
            if key is not None:
                memo[key] = w
        flops[i], nbytes[i], lb[i], le[i], sh = w
        shp[i], dt[i] = sh[:4], sh[4]
    order = np.argsort(make_key(dev, corr), kind="stable")
    out.key, out.grid, out.block, out.regs, out.smem = make_key(dev, corr)[order], grid[order], block[order], regs[order], smem[order]
    out.flops, out.bytes, out.op = flops[order], nbytes[order], [opn[i] for i in order.tolist()]
    out.last_bytes, out.last_elem = lb[order], le[order]
    out.shape, out.dtype = shp[order], dt[order]
    out.shape_id = sid[order]
    out.shapes = shapes
    out.counts.update({"with launch configuration": int(np.count_nonzero(grid[:, 0] > 0)),
                       "with shapes": int(np.count_nonzero(flops >= 0)),
                       "op launched several kernels (no shapes)": shared})
    return out


# ------------------------------------------------------------------------------ nsys ---------
def _nsys(path: str) -> LaunchData:
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro&immutable=1"
    con = sqlite3.connect(uri, uri=True)
    try:
        con.execute("PRAGMA trusted_schema = OFF")
        cols = {r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
        need = ("deviceId", "correlationId", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
        if not set(need) <= cols:
            return LaunchData(reason="no CUPTI_ACTIVITY_KIND_KERNEL launch columns")
        regs = "registersPerThread" if "registersPerThread" in cols else "-1"
        sm = [c for c in ("staticSharedMemory", "dynamicSharedMemory") if c in cols]
        smem = " + ".join(sm) if sm else "-1"
        sql = f"SELECT {', '.join(need)}, {regs} AS regs, {smem} AS smem FROM CUPTI_ACTIVITY_KIND_KERNEL"
        rows = con.execute(_clean_sql(sql)).fetchall()
    finally:
        con.close()
    a = np.array(rows, np.int64).reshape(len(rows), 10)
    n = len(a)
    return _columns((a[:, 0], a[:, 1], np.full(n, -1, np.int64), a[:, 2:5], a[:, 5:8], a[:, 8], a[:, 9]), {})


def _cupti_jsonl(path: str) -> LaunchData:
    """The kernel records' ``gridX/Y/Z``, ``blockX/Y/Z``, ``registersPerThread`` and
    ``staticSharedMemory + dynamicSharedMemory`` of a cupti-jsonl dump (CUpti_ActivityKernel's
    fields; no shapes), cleaned as :func:`_int` and :func:`_triple` clean Kineto's args; shared
    memory is unknown (-1) when either part is."""
    dev, corr, recs = cupti_jsonl.kernel_launches(path)
    n = len(dev)
    get = operator.attrgetter
    grid = clean_triples(list(map(get("gridX", "gridY", "gridZ"), recs)), typed=False)
    block = clean_triples(list(map(get("blockX", "blockY", "blockZ"), recs)), typed=False)
    regs = clean_ints(list(map(get("registersPerThread"), recs)), typed=False)
    st = clean_ints(list(map(get("staticSharedMemory"), recs)), typed=False)
    dy = clean_ints(list(map(get("dynamicSharedMemory"), recs)), typed=False)
    smem = np.where((st >= 0) & (dy >= 0), st + dy, -1)
    return _columns((dev.astype(np.int64), corr.astype(np.int64), np.full(n, -1, np.int64), grid, block, regs, smem), {})


def _clean_sql(select: str) -> str:
    """The kernel rows of ``select`` (columns deviceId, correlationId, gridX/Y/Z, blockX/Y/Z, regs,
    smem) with every value an integer, as :func:`_int` and :func:`_triple` clean them: a number
    of magnitude below 2^62 (a real truncated toward zero), else -1; a grid or block whose three
    values are integers in [0, 2^31), else (-1, -1, -1)."""
    def num(c: str) -> str:
        return (f"CASE WHEN typeof({c}) IN ('integer', 'real') AND {c} > -4611686018427387904.0 AND {c} < 4611686018427387904.0 "
                f"THEN CAST({c} AS INTEGER) ELSE -1 END")

    def triple(cs: tuple[str, ...]) -> str:
        ok = " AND ".join(f"typeof({c}) = 'integer' AND {c} >= 0 AND {c} < 2147483648" for c in cs)
        return ", ".join(f"CASE WHEN {ok} THEN {c} ELSE -1 END" for c in cs)

    return (f"SELECT {num('deviceId')}, {num('correlationId')}, {triple(('gridX', 'gridY', 'gridZ'))}, "
            f"{triple(('blockX', 'blockY', 'blockZ'))}, {num('regs')}, {num('smem')} FROM ({select})")


# ------------------------------------------------------------------- the loaders' own pass ---
_BIG = 1 << 62


def clean_ints(values: list, typed: bool) -> np.ndarray:
    """int64 array of :func:`_int` over ``values``. ``typed``: the values are ints or None only (a
    typed decode: no floats, strings or bools), so ``np.fromiter`` takes them where none is None
    and none passes int64; anything else is cleaned one value at a time."""
    n = len(values)
    if typed:
        try:
            a = np.fromiter(values, np.int64, n)
        except (TypeError, ValueError, OverflowError):
            pass
        else:
            a[(a >= _BIG) | (a <= -_BIG)] = -1
            return a
    return np.fromiter(map(_int, values), np.int64, n)


def clean_ext(ext: list, legacy: list, absent: int, typed: bool) -> np.ndarray:
    """The kernels' or ops' external ids as :func:`_ext` reads them (``External id``, else where
    that is absent or null ``external id``); ``absent``: the value the loader's projection gives an
    absent key (so a value of exactly ``absent``, -2^63, is read as absent), ``typed`` as in
    :func:`clean_ints`."""
    if typed:
        try:
            a = np.fromiter(ext, np.int64, len(ext))
        except (TypeError, ValueError, OverflowError):
            a = None
        if a is not None and not np.any(a == absent):
            a[(a >= _BIG) | (a <= -_BIG)] = -1
            return a
    pick = [y if x is None or (type(x) is int and x == absent) else x for x, y in zip(ext, legacy)]
    return clean_ints(pick, typed)


def clean_triples(values: list, typed: bool) -> np.ndarray:
    """(n, 3) int64 array of :func:`_triple` over ``values`` (``typed``: 3-tuples of ints, else any)."""
    n = len(values)
    if typed:
        try:
            a = np.fromiter(itertools.chain.from_iterable(values), np.int64, 3 * n).reshape(n, 3)
        except (TypeError, ValueError, OverflowError):
            pass
        else:
            a[((a < 0) | (a >= 1 << 31)).any(axis=1)] = -1
            return a
    return np.asarray([_triple(list(v) if isinstance(v, tuple) else v) for v in values], np.int64).reshape(n, 3)


class LaunchFacts:
    """The launch facts a loader collected in its own pass over the trace (``EventTable.launch``):
    the kernels' columns and, for Kineto, every op event's external id, name and recorded shapes
    (the ``Input Dims`` / ``Input type`` JSON text, kept undecoded and interned: an iteration's ops
    repeat the last one's). :meth:`data` makes from them the :class:`LaunchData` that
    :func:`read_launch_data` reads from the file (the same: compared on every real trace by the
    tests), on first call, decoding shapes only for the ops kernels name.

    ``reason``: why there is nothing (a :class:`LaunchData` with that reason)."""

    def __init__(self, reason: str = "") -> None:
        self.reason = reason
        self._kern: list[tuple] = []
        self._ops: list[tuple] = []  # (ext, name ids, shape ids)
        self._shape_ids = _Ids()  # (Input Dims text, Input type text) -> id
        self._names: list = []  # name ids -> name values
        #: the ops kernels name (:meth:`finish`): (external ids, name ids, shape ids), or None
        self._picked: Optional[tuple] = None
        self._data: Optional[LaunchData] = None

    @classmethod
    def holding(cls, data: LaunchData) -> "LaunchFacts":
        """Facts whose :meth:`data` is ``data`` (read from the file at load, or from a saved table)."""
        out = cls(data.reason)
        out._data = data
        return out

    def add_kernels(self, dev, corr, ext, grid, block, regs, smem) -> None:
        """Append kernel columns (int64; grid and block (n, 3)), in file order."""
        if len(dev):
            self._kern.append((dev, corr, ext, grid, block, regs, smem))

    def add_ops(self, ext: np.ndarray, name_id: np.ndarray, dims: list, types: list) -> None:
        """Append op events (file order) with an external id >= 0: external ids, name ids (into the
        names :meth:`finish` gets), and ``Input Dims`` / ``Input type`` as raw JSON text (bytes-like,
        empty when absent; copied, no view of the caller's buffer is kept)."""
        n = len(ext)
        if not n:
            return
        d, t = _as_bytes(dims), _as_bytes(types)
        self._ops.append((ext, name_id, np.fromiter(map(self._shape_ids.__getitem__, zip(d, t)), np.int32, n)))

    def finish(self, names: list) -> None:
        """End of the pass (``names``: name id -> name value): the kernel columns are joined, and of
        the ops only those a kernel names are kept (the last op event with each external id, as
        :func:`read_launch_data` takes it)."""
        parts = self._kern
        if parts:
            self._kern = [tuple(np.concatenate([p[i] for p in parts]) for i in range(7))]
        ops, self._ops = self._ops, []
        self._names = names
        self._picked = None
        if not ops or not parts:
            return
        kext = self._kern[0][2]
        ext = np.concatenate([p[0] for p in ops])
        u, cnt = np.unique(kext[kext >= 0], return_counts=True)
        idx = np.flatnonzero(np.isin(ext, u))
        x, rev = np.unique(ext[idx][::-1], return_index=True)
        last = idx[len(idx) - 1 - rev]  # the last op event of each id
        shape = np.concatenate([p[2] for p in ops])[last]  # (an op of several kernels: its weight operand only, _columns)
        self._picked = (x, np.concatenate([p[1] for p in ops])[last], shape)

    def data(self) -> LaunchData:
        """The :class:`LaunchData` (made once, after :meth:`finish`; callers must not modify it)."""
        if self._data is None:
            self._data = LaunchData(reason=self.reason) if self.reason else self._make()
        return self._data

    def _make(self) -> LaunchData:
        if self._kern:
            kern = self._kern[0]
        else:
            z = np.zeros(0, np.int64)
            kern = (z, z, z, np.zeros((0, 3), np.int64), np.zeros((0, 3), np.int64), z, z)
        return _columns(kern, self._named_ops())

    def _named_ops(self) -> dict:
        """External id -> (op name, Input Dims, Input type) of the ops :meth:`finish` kept."""
        if self._picked is None:
            return {}
        texts = list(self._shape_ids)
        memo: dict = {}
        out = {}
        for xi, nm, k in zip(*(a.tolist() for a in self._picked)):  # one entry per op a kernel names: only on request
            name = str(self._names[nm])
            if k < 0:
                out[xi] = (name, None, None)
                continue
            v = memo.get(k)
            if v is None:
                d, t = texts[k]
                v = memo[k] = (msgspec.json.decode(d) if d else None, msgspec.json.decode(t) if t else None)
            out[xi] = (name, *v)
        return out


class _Ids(dict):
    """Distinct values -> ids 0, 1, ... in order of first appearance (looking up a new value adds it)."""

    def __missing__(self, key):
        i = self[key] = len(self)
        return i


def _as_bytes(raws: list) -> list:
    """``bytes`` of each bytes-like item: split from their join on NUL, which valid JSON text never
    holds unescaped (one C pass each), else one at a time."""
    out = b"\x00".join(raws).split(b"\x00")
    return out if len(out) == len(raws) else list(map(bytes, raws))


def launch_data_of(table) -> LaunchData:
    """The :class:`LaunchData` of an event table: what its loader collected (``table.launch``)
    where it did, else :func:`read_launch_data` of the file it was read from (``meta.source``)."""
    facts = getattr(table, "launch", None)
    if facts is not None:
        return facts.data()
    meta = getattr(table, "meta", None)
    source = getattr(meta, "source", "")
    if not source:  # a saved table whose trace is not at hand unchanged (formats/saved.py), or a table made in memory
        return LaunchData(reason="the table names no trace file to read launch data from")
    ident = getattr(meta, "extra", {}).get("source_identity", "") if meta is not None else ""
    if ident and source_identity(source) != ident:  # a saved table whose trace file moved or changed since
        return LaunchData(reason="the trace file the table was saved from is not at hand unchanged (moved, or changed "
                                 "since --save-table)")
    return read_launch_data(source, getattr(meta, "format", ""))


# ------------------------------------------------------------------------------ nsys, fast ---
#: the Nsight Systems kernel columns launch data needs (regs and shared memory are optional)
NSYS_LAUNCH_COLUMNS = ("deviceId", "correlationId", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")


def _nsys_launch_columns(have) -> Optional[list[str]]:
    """The SELECT list of :func:`_nsys`'s columns over ``CUPTI_ACTIVITY_KIND_KERNEL`` (with columns
    ``have``): device, correlation, grid X/Y/Z, block X/Y/Z, registers, shared memory, as stored;
    None without the columns :data:`NSYS_LAUNCH_COLUMNS`."""
    if not set(NSYS_LAUNCH_COLUMNS) <= set(have):
        return None
    regs = '"registersPerThread"' if "registersPerThread" in have else "-1"
    sm = [f'"{k}"' for k in ("staticSharedMemory", "dynamicSharedMemory") if k in have]
    return [f'"{k}"' for k in NSYS_LAUNCH_COLUMNS] + [regs, "(" + " + ".join(sm) + ")" if sm else "-1"]


def clean_launch_ints(cols: list) -> list:
    """:func:`_clean_sql`'s cleaning of :func:`_nsys_launch_columns`, for int64 columns (no NULL): device,
    correlation, registers and shared memory -1 at a magnitude of 2^62 or more; a grid or block -1
    (all three) where one of its values is not in [0, 2^31)."""
    out = []
    for i, a in enumerate(cols):
        a = np.array(a, np.int64)
        if i in (0, 1, 8, 9):
            a[(a >= _BIG) | (a <= -_BIG)] = -1
        out.append(a)
    for lo in (2, 5):
        bad = np.zeros(len(out[0]), bool)
        for a in out[lo: lo + 3]:
            bad |= (a < 0) | (a >= 1 << 31)
        for a in out[lo: lo + 3]:
            a[bad] = -1
    return out


def _nsys_fast(path: str) -> LaunchData:
    """:func:`_nsys` (the same result), through Arrow (:mod:`.sqlite_arrow`) where it is installed
    and pays for its import: the columns as stored, cleaned in numpy (:func:`clean_launch_ints`),
    where every value is a non-NULL integer; else (a NULL, REAL or text value, a driver error, no
    Arrow) :func:`_nsys`. 0.15 s instead of 0.56 s on 124 k kernels (nsys_1m)."""
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro&immutable=1"
    con = sqlite3.connect(uri, uri=True)
    try:
        con.execute("PRAGMA trusted_schema = OFF")
        have = {r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
        exprs = _nsys_launch_columns(have)
        n = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0] if exprs else 0
    finally:
        con.close()
    got = None
    if exprs is not None and sqlite_arrow.wanted(n):
        try:
            rd = sqlite_arrow.ArrowReader(uri)
        except Exception:  # noqa: BLE001 - the driver could not open it: sqlite3 reads it
            rd = None
        if rd is not None:
            try:
                got = rd.fetch(f"SELECT {', '.join(exprs)} FROM CUPTI_ACTIVITY_KIND_KERNEL", len(exprs), 0, n)
            finally:
                rd.close()
    if got is None:
        return _nsys(path)
    a = clean_launch_ints(got[0])
    return _columns((a[0], a[1], np.full(len(a[0]), -1, np.int64), np.stack(a[2:5], axis=1), np.stack(a[5:8], axis=1), a[8], a[9]), {})


#: the last file read: (path, format, size, mtime ns) -> its LaunchData. One entry: a process
#: predicts from one trace (``gpu-upgrade`` and ``amp`` read it up to three times in ``--opt all``)
_LAST: list = []


def read_launch_data(path: str, fmt: str) -> LaunchData:
    """Launch configuration and shapes of the kernels of trace ``path`` (format name ``fmt``, as in
    ``TraceMeta.format``). Never raises on the file's content: an empty result says why.

    The result of the last file read is kept (keyed by path, format, size and modification time)
    and returned again while the file is unchanged: callers must not modify it."""
    if not path or not os.path.isfile(path):
        return LaunchData(reason="the trace file is not at hand (a saved table, or moved)")
    try:
        st = os.stat(path)
    except OSError as e:
        return LaunchData(reason=f"launch data unreadable ({type(e).__name__})")
    key = (os.path.abspath(path), fmt, st.st_size, st.st_mtime_ns)
    if _LAST and _LAST[0][0] == key:
        return _LAST[0][1]
    out = _read(path, fmt)
    _LAST[:] = [(key, out)]
    return out


def _read(path: str, fmt: str) -> LaunchData:
    try:
        if fmt == "kineto":
            return _kineto(path)
        if fmt == "nsys":
            return _nsys_fast(path)
        if fmt == cupti_jsonl.NAME:
            return _cupti_jsonl(path)
    except (OSError, ValueError, msgspec.DecodeError, sqlite3.Error, MemoryError, TraceFormatError) as e:
        return LaunchData(reason=f"launch data unreadable ({type(e).__name__})")
    return LaunchData(reason=f"format {fmt or 'unknown'!r} records no launch configuration here")
