"""Per-kernel launch configuration and recorded op shapes, read beside the event table.

The event table (:mod:`daydream.events`) keeps what the graph and the replay need; per-kernel
performance models (``gpu-upgrade``, ``amp``) also want what the profilers record about each
kernel launch and the op that launched it. This module reads those facts from the trace file
again, keyed by (device, correlation id), the identity the graph keeps for every GPU task:

* Kineto (``torch.profiler``) kernel ``args``: ``grid`` and ``block`` (3 ints each), ``registers
  per thread``, ``shared memory`` (bytes, static + dynamic), and ``External id`` -> the ``cpu_op``
  with the same id (the innermost op around the launch) and its ``Input Dims`` / ``Input type``
  (recorded with ``record_shapes=True``). ROCm traces carry ``grid``/``block`` only (registers
  and shared memory absent: -1). Kineto's ``blocks per SM``, ``warps per SM`` and ``est. achieved
  occupancy %`` are derived from these and the device's SM count (Kineto's
  ``CuptiActivityProfiler``), so they are not read: :mod:`daydream.optimizations._kernel_model`
  recomputes them for any GPU.
* Nsight Systems SQLite ``CUPTI_ACTIVITY_KIND_KERNEL``: ``gridX/Y/Z``, ``blockX/Y/Z``,
  ``registersPerThread``, ``staticSharedMemory + dynamicSharedMemory``; no shapes.

Ops with shapes give FLOPs and bytes (:func:`op_work`) for GEMMs (``aten::mm``, ``addmm``,
``bmm``, ``baddbmm``), scaled-dot-product attention, and elementwise/reduction ops (bytes of the
inputs plus one output the size of the largest input). An op that launched more than one kernel
shares its work among them in no known way: its kernels get no shapes (counted).

Everything is best effort: a file that cannot be read again (moved, a saved ``.npz`` table, an
unknown format) gives an empty :class:`LaunchData` with the reason; nothing here raises on trace
content.
"""

from __future__ import annotations

import gzip
import os
import sqlite3
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Optional

import msgspec
import numpy as np

from . import GZIP_MAGIC, inflate_limit

#: bytes per element of the ``Input type`` strings Kineto records (c10 scalar type names)
DTYPE_BYTES: dict[str, int] = {
    "float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4, "short int": 2,
    "signed char": 1, "unsigned char": 1, "bool": 1, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1, "c10::complex<float>": 8,
}

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
    #: bytes of the op's last tensor input as recorded (a GEMM's weight operand; -1 unknown)
    last_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float64))
    #: element size (bytes) of that input: 4 for fp32 (-1 unknown)
    last_elem: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    op: list = field(default_factory=list)
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
            n, s = _numel(d), DTYPE_BYTES.get(t, 0)
            return (float(n * s), s) if n >= 0 and s else (-1.0, -1)
    return -1.0, -1


def op_work(name: str, dims: Any, types: Any) -> tuple[float, float]:
    """(FLOPs, bytes) of one op from its recorded input shapes and types; (-1, -1) when unknown.

    GEMM (``mm``/``addmm``: A [M, K], B [K, N]; ``bmm``/``baddbmm``: [b, M, K] x [b, K, N]): 2·M·N·K
    FLOPs (b times), bytes A + B + C. Attention (Q [B, H, S, D], K [B, H, Sk, D], V): 4·B·H·S·Sk·D
    FLOPs (QK^T and PV), bytes Q + K + V + O. Others: one FLOP per element of the largest input,
    bytes = every tensor input + one output as large as the largest input.
    """
    if not isinstance(dims, list) or not isinstance(types, list) or len(dims) != len(types):
        return -1.0, -1.0
    tensors = [(d, DTYPE_BYTES.get(t, 0)) for d, t in zip(dims, types) if isinstance(d, list) and d]
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
    big = max(nbytes)
    return float(max(_numel(d) for d, _ in tensors)), sum(nbytes) + big


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


class _KEvent(msgspec.Struct):
    cat: Any = None
    name: Any = None
    args: Optional[_KArgs] = None


class _KDoc(msgspec.Struct):
    traceEvents: list[_KEvent] = []


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


def _kineto(path: str) -> LaunchData:
    doc = msgspec.json.decode(_read_bytes(path), type=_KDoc)
    ops: dict[int, tuple[str, Any, Any]] = {}
    kern = []
    for e in doc.traceEvents:
        a = e.args
        if a is None or not isinstance(e.cat, str):
            continue
        cat = e.cat.lower()
        ext = _int(a.ext if a.ext is not None else a.ext2)
        if cat in ("cpu_op", "operator") and ext >= 0:
            ops[ext] = (str(e.name), a.dims, a.types)
        elif cat == "kernel":
            kern.append((_int(a.device), _int(a.correlation), ext, _triple(a.grid), _triple(a.block), _int(a.regs), _int(a.smem)))
    return _columns(kern, ops)


def _columns(kern: list, ops: dict) -> LaunchData:
    n = len(kern)
    out = LaunchData(counts={"kernels": n})
    if n == 0:
        out.reason = "no kernel records"
        return out
    dev, corr, ext = (np.fromiter((k[i] for k in kern), np.int64, n) for i in range(3))
    grid = np.asarray([k[3] for k in kern], np.int64).reshape(n, 3)
    block = np.asarray([k[4] for k in kern], np.int64).reshape(n, 3)
    regs = np.fromiter((k[5] for k in kern), np.int64, n)
    smem = np.fromiter((k[6] for k in kern), np.int64, n)
    u, cnt = np.unique(ext, return_counts=True)
    per_ext = dict(zip(u.tolist(), cnt.tolist()))
    flops = np.full(n, -1.0)
    nbytes = np.full(n, -1.0)
    lb = np.full(n, -1.0)
    le = np.full(n, -1, dtype=np.int64)
    opn = [""] * n
    shared = 0
    for i, x in enumerate(ext.tolist()):  # one entry per kernel record: the reader's measured core
        o = ops.get(x) if x >= 0 else None
        if o is None:
            continue
        opn[i] = o[0]
        if per_ext[x] > 1:
            shared += 1
            continue
        flops[i], nbytes[i] = op_work(o[0], o[1], o[2])
        lb[i], le[i] = last_operand(o[1], o[2])
    order = np.argsort(make_key(dev, corr), kind="stable")
    out.key, out.grid, out.block, out.regs, out.smem = make_key(dev, corr)[order], grid[order], block[order], regs[order], smem[order]
    out.flops, out.bytes, out.op = flops[order], nbytes[order], [opn[i] for i in order.tolist()]
    out.last_bytes, out.last_elem = lb[order], le[order]
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
        rows = con.execute(f"SELECT {', '.join(need)}, {regs}, {smem} FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    finally:
        con.close()
    kern = [(_int(r[0]), _int(r[1]), -1, _triple(list(r[2:5])), _triple(list(r[5:8])), _int(r[8]), _int(r[9])) for r in rows]
    return _columns(kern, {})


def read_launch_data(path: str, fmt: str) -> LaunchData:
    """Launch configuration and shapes of the kernels of trace ``path`` (format name ``fmt``, as in
    ``TraceMeta.format``). Never raises on the file's content: an empty result says why."""
    if not path or not os.path.isfile(path):
        return LaunchData(reason="the trace file is not at hand (a saved table, or moved)")
    try:
        if fmt == "kineto":
            return _kineto(path)
        if fmt == "nsys":
            return _nsys(path)
    except (OSError, ValueError, msgspec.DecodeError, sqlite3.Error, MemoryError) as e:
        return LaunchData(reason=f"launch data unreadable ({type(e).__name__})")
    return LaunchData(reason=f"format {fmt or 'unknown'!r} records no launch configuration here")
