"""What a kernel does: its op class, shapes, work (FLOPs, bytes) and GEMM tile.

:class:`Kernels` holds ``n`` kernels as arrays (one row each), as a trace or a NeuSight CSV records
them. Work per row (``flops`` in FLOP, ``bytes`` in B, for element size ``s`` bytes of the
precision, :data:`DTYPE_BYTES`):

==============  ===============================================  ========================================
op class        FLOPs                                            bytes (DRAM traffic, each tensor once)
==============  ===============================================  ========================================
linear          2·B·M·N·K (one multiply-add = 2 FLOPs)           s·(M·K + B·N·K + B·M·N)  (weight M·K shared)
bmm             2·B·M·N·K                                        s·B·(M·K + K·N + M·N)
elementwise     E (one op per element)                           s·E·(inputs + 1)
ln (layer norm) 8·E (mean, variance, scale, shift)               s·E·2 (read x, write y; γ, β, mean,
                                                                 rstd are O(rows + columns))
softmax         5·E (max, sub, exp, sum, div)                    s·E·2
attention       4·B·M·N·K (QKᵀ and PV; B = batch·heads,          s·B·(2·M·K + 2·N·K)
                M queries, N keys, K head dim)
==============  ===============================================  ========================================

GEMM shapes are cuBLAS's (column-major): the output is M × N, the reduction K; grid x tiles M
with the tile's TM, grid y tiles N with TN. A PyTorch ``linear`` x[rows, in] · W[out, in]ᵀ is
M = out, N = rows, K = in (cuBLAS computes the transposed product).

``E`` is the element count (NeuSight: ``B·H``). Elementwise ``inputs``: 2 for binary ops
(``add``, ``mul``, ``pow``, ``div``: tensor ⊕ tensor), 1 for unary ops and tensor ⊕ scalar
(NeuSight's ``addu``, ``mulu``, ``powu``, ``divu``, ``relu``, ``gelu``, ``tanh``).

GEMM tiles are parsed from kernel names (:func:`parse_tile`): cuBLAS
``<arch>_sgemm_<TM>x<TN>_<layout>`` (``ampere_sgemm_128x64_tn``, ``volta_sgemm_128x32_sliced1x4_tn``,
``maxwell_sgemm_32x128_nn``), xmma ``..._tilesize<TM>x<TN>x<TK>...``, CUTLASS
``cutlass_..._<TM>x<TN>_<TK>x<stages>_...``, AMD Tensile's macro tile ``Cijk_..._MT<TM>x<TN>x<DU>_...``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

#: Op classes. ``gemm`` classes are compute-bound candidates; the rest stream memory.
OP_CLASSES: tuple[str, ...] = ("linear", "bmm", "elementwise", "ln", "softmax", "attention", "other")
GEMM_CLASSES = ("linear", "bmm")
MEMORY_CLASSES = ("elementwise", "ln", "softmax")
#: Bytes per element of a precision (fp8: 1; tf32 is stored as fp32).
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "half": 2, "fp8": 1}
#: NeuSight elementwise op names with two tensor inputs (the ``u`` variants take a scalar).
BINARY_OPS = frozenset({"add", "mul", "pow", "div", "sub"})
UNARY_OPS = frozenset({"addu", "mulu", "powu", "divu", "subu", "relu", "gelu", "tanh", "sigmoid", "exp", "silu"})

_TILE_RES = (
    re.compile(r"tilesize(\d+)x(\d+)"),                 # xmma: ..._tilesize128x128x16_...
    re.compile(r"_MT(\d+)x(\d+)x\d+_"),                 # ROCm Tensile: Cijk_..._MT128x144x64_... (MacroTile M x N x depth U)
    re.compile(r"gemm\w*?_(\d+)x(\d+)_"),                # cuBLAS / CUTLASS: sgemm_128x64_tn, s1688gemm_128x256_16x3
    re.compile(r"_(\d+)x(\d+)(?:x\d+)?_"),               # any other <TM>x<TN>_
)
#: Tile when the name carries none (cuBLAS's most common large FP32 tile in the development data).
DEFAULT_TILE = (128, 128)


def parse_tile(name: str) -> tuple[int, int]:
    """(TM, TN): the output tile of a GEMM kernel name, or :data:`DEFAULT_TILE`."""
    for r in _TILE_RES:
        m = r.search(name)
        if m:
            a, b = int(m.group(1)), int(m.group(2))
            if 8 <= a <= 512 and 8 <= b <= 512:
                return a, b
    return DEFAULT_TILE


def op_class(op: str, name: str = "") -> str:
    """Op class of an op name (NeuSight ``OPName``, or a trace's op/kernel name)."""
    o = op.lower()
    if o in ("linear", "addmm", "mm", "matmul", "gemm"):
        return "linear"
    if o in ("bmm", "baddbmm"):
        return "bmm"
    if o in BINARY_OPS or o in UNARY_OPS or o == "elementwise":
        return "elementwise"
    if o in ("ln", "layer_norm", "layernorm", "norm", "rms_norm"):
        return "ln"
    if o in ("softmax", "log_softmax"):
        return "softmax"
    if "attention" in o or "sdpa" in o or "flash" in o:
        return "attention"
    n = name.lower()
    if "gemm" in n:
        return "linear"
    if "softmax" in n:
        return "softmax"
    if "layer_norm" in n:
        return "ln"
    if "elementwise" in n:
        return "elementwise"
    if "flash" in n or "fmha" in n or "attention" in n:
        return "attention"
    return "other"


@dataclass
class Kernels:
    """``n`` kernels (all arrays of length ``n``; ``grid``/``block`` shape (n, 3); -1 = unknown).

    ``cls``: op class (:data:`OP_CLASSES`); ``name``: kernel name; ``B, M, N, K``: GEMM/attention
    shape (B batch); ``elems``: element count of memory-bound ops; ``inputs``: tensor inputs of an
    elementwise op; ``dtype``: storage precision per row (:data:`DTYPE_BYTES` keys);
    ``regs``: registers per thread, ``smem``: shared bytes per block."""

    cls: np.ndarray
    name: np.ndarray
    B: np.ndarray
    M: np.ndarray
    N: np.ndarray
    K: np.ndarray
    elems: np.ndarray
    inputs: np.ndarray
    grid: np.ndarray
    block: np.ndarray
    dtype: np.ndarray
    regs: np.ndarray = field(default=None)
    smem: np.ndarray = field(default=None)

    def __post_init__(self):
        n = len(self.cls)
        if self.regs is None:
            self.regs = np.full(n, -1, np.int64)
        if self.smem is None:
            self.smem = np.full(n, -1, np.int64)

    def __len__(self) -> int:
        return len(self.cls)

    def take(self, idx) -> "Kernels":
        """Rows ``idx`` (indices or a bool mask)."""
        return Kernels(**{k: getattr(self, k)[idx] for k in self.__dataclass_fields__})

    def with_dtype(self, dtype: str) -> "Kernels":
        k = self.take(slice(None))
        k.dtype = np.full(len(self), dtype, dtype=object)
        return k

    @staticmethod
    def make(cls, name="", B=1, M=-1, N=-1, K=-1, elems=-1, inputs=1, grid=(-1, -1, -1), block=(-1, -1, -1),
             dtype="fp32", regs=-1, smem=-1) -> "Kernels":
        """One or more kernels from scalars or sequences (broadcast to a common length)."""
        cols = dict(cls=cls, name=name, B=B, M=M, N=N, K=K, elems=elems, inputs=inputs, dtype=dtype, regs=regs, smem=smem)
        n = max(len(v) if isinstance(v, (list, tuple, np.ndarray)) else 1 for v in cols.values())
        g, b = np.asarray(grid, np.int64), np.asarray(block, np.int64)
        n = max(n, len(g) if g.ndim == 2 else 1, len(b) if b.ndim == 2 else 1)
        out = {}
        for k, v in cols.items():
            a = np.asarray(v, dtype=object if k in ("cls", "name", "dtype") else np.int64)
            out[k] = np.broadcast_to(a, (n,)).copy()
        out["grid"] = np.broadcast_to(g.reshape(-1, 3), (n, 3)).copy()
        out["block"] = np.broadcast_to(b.reshape(-1, 3), (n, 3)).copy()
        return Kernels(**out)


def dtype_bytes(dtype: np.ndarray) -> np.ndarray:
    return np.array([DTYPE_BYTES.get(str(d), 4) for d in dtype], np.float64) if len(dtype) else np.zeros(0)


def flops_bytes(k: Kernels) -> tuple[np.ndarray, np.ndarray]:
    """(FLOPs, bytes) per row (float64; the table of the module docstring). 0 where unknown."""
    s = dtype_bytes(k.dtype)
    B, M, N, K = (np.maximum(x, 0).astype(np.float64) for x in (k.B, k.M, k.N, k.K))
    B = np.maximum(B, 1)
    E = np.maximum(k.elems, 0).astype(np.float64)
    c = k.cls
    fl = np.zeros(len(k))
    by = np.zeros(len(k))
    lin, bmm, att = c == "linear", c == "bmm", c == "attention"
    gem = lin | bmm
    fl[gem] = 2 * B[gem] * M[gem] * N[gem] * K[gem]
    by[lin] = s[lin] * (M[lin] * K[lin] + B[lin] * N[lin] * K[lin] + B[lin] * M[lin] * N[lin])
    by[bmm] = s[bmm] * B[bmm] * (M[bmm] * K[bmm] + K[bmm] * N[bmm] + M[bmm] * N[bmm])
    fl[att] = 4 * B[att] * M[att] * N[att] * K[att]
    by[att] = s[att] * B[att] * (2 * M[att] * K[att] + 2 * N[att] * K[att])
    el, ln, sm = c == "elementwise", c == "ln", c == "softmax"
    fl[el], by[el] = E[el], s[el] * E[el] * (np.maximum(k.inputs[el], 1) + 1)
    fl[ln], by[ln] = 8 * E[ln], s[ln] * E[ln] * 2
    fl[sm], by[sm] = 5 * E[sm], s[sm] * E[sm] * 2
    return fl, by


def tiles_of(names: np.ndarray) -> np.ndarray:
    """(n, 2) int64 tiles of kernel names (:func:`parse_tile`, one parse per distinct name)."""
    uniq, inv = np.unique(np.asarray(names, dtype=str), return_inverse=True)
    t = np.array([parse_tile(u) for u in uniq], np.int64).reshape(-1, 2)
    return t[inv.reshape(-1)]
