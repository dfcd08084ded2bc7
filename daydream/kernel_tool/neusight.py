"""Rows in NeuSight's CSV columns (../shared/kernels/SOURCES.md) <-> :class:`~daydream.costmodel.work.Kernels`.

Columns read: ``OPName``, ``Latency`` (ms), ``Device`` (required); ``Kernel Name``, ``Grid x/y/z``,
``Block x/y/z``, ``B``, ``M``, ``N``, ``K`` (GEMMs: NeuSight's M rows, N reduction, K output columns;
stored as cuBLAS's output M × N with reduction K, see :func:`read_table`), ``H`` (elementwise, layer norm, softmax: the
element count is ``B·H``), ``Precision`` (optional: fp32 when absent; NeuSight's set is FP32).
Times become ns (``Latency`` × 10^6).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..costmodel.work import BINARY_OPS, GEMM_CLASSES, Kernels, op_class

REQUIRED = ("OPName", "Latency", "Device")
#: The largest integer a column may hold: 2**53, the largest a float (which the CSV's text is read
#: as) holds exactly; larger values are not integers a row can mean (and overflowed int64 before).
INT_MAX = 2 ** 53
_INT_COLS = ("Grid x", "Grid y", "Grid z", "Block x", "Block y", "Block z", "B", "M", "N", "K", "H")


class InputError(ValueError):
    """A bad input row: the message names the file, the row (1 = the header) and the column."""


def clean(text: str, limit: int = 80) -> str:
    """``text`` without control characters (untrusted text such as kernel names), cut to ``limit``."""
    s = "".join(ch if ch.isprintable() else "?" for ch in str(text))
    return s if len(s) <= limit else s[: limit - 3] + "..."


@dataclass
class Table:
    """Rows of one CSV: ``header`` and ``rows`` (lists of strings, for writing back),
    ``kernels``, ``t_ns`` (measured, ns), ``device`` (object array), ``op`` (OPName)."""

    path: str
    header: list
    rows: list
    kernels: Kernels
    t_ns: np.ndarray
    device: np.ndarray
    op: np.ndarray

    def shape_key(self) -> np.ndarray:
        """One string per row naming the op and its shape (rows of the same key on two GPUs are a pair)."""
        k = self.kernels
        return np.array([f"{o}|{b}|{m}|{n}|{kk}|{e}" for o, b, m, n, kk, e in
                         zip(self.op.tolist(), k.B.tolist(), k.M.tolist(), k.N.tolist(), k.K.tolist(), k.elems.tolist())],
                        dtype=object)


def _num(v: str, path, row: int, col: str, integer: bool) -> float:
    try:
        x = float(v)
    except ValueError:
        raise InputError(f"{path}: row {row}, column {col!r}: not a number: {clean(v, 40)!r}") from None
    if not np.isfinite(x):
        raise InputError(f"{path}: row {row}, column {col!r}: not a finite number")
    if integer and abs(x) > INT_MAX:
        raise InputError(f"{path}: row {row}, column {col!r}: too large ({clean(v, 40)!r} > 2**53)")
    if integer and x != int(x):
        raise InputError(f"{path}: row {row}, column {col!r}: not an integer: {clean(v, 40)!r}")
    return x


def _check_shapes(p: str, cls: np.ndarray, vals: dict, ops: list) -> None:
    """Each row's shape columns against its op class (a GEMM needs M, N, K; a memory-bound op B and
    H, with B·H at most 2**53); an unknown class is an unknown OPName.

    Raises:
        InputError: the file, row and column named.
    """
    for i in range(len(cls)):
        rn = i + 2
        if cls[i] in GEMM_CLASSES:
            for c in ("M", "N", "K"):
                if vals[c][i] <= 0:
                    raise InputError(f"{p}: row {rn}, column {c!r}: a {cls[i]} row needs a positive {c}")
        elif cls[i] in ("elementwise", "ln", "softmax"):
            for c in ("B", "H"):
                if vals[c][i] <= 0:
                    raise InputError(f"{p}: row {rn}, column {c!r}: a {cls[i]} row needs a positive {c}")
            if float(vals["B"][i]) * float(vals["H"][i]) > INT_MAX:
                raise InputError(f"{p}: row {rn}, column 'H': B·H = {float(vals['B'][i]) * float(vals['H'][i]):.3g} "
                                 f"elements, more than 2**53")
        else:
            raise InputError(f"{p}: row {rn}, column 'OPName': unknown op {clean(ops[i], 40)!r}")


def read_table(path: str | Path, require_latency: bool = True) -> Table:
    """Read a CSV in NeuSight's columns.

    Raises:
        InputError: unreadable file, a missing column, or a bad value (file, row and column named).
    """
    p = str(path)
    try:
        with open(p, newline="") as f:
            rd = csv.reader(f)
            try:
                header = next(rd)
            except StopIteration:
                raise InputError(f"{p}: empty file (no header row)") from None
            rows = [r for r in rd]
    except OSError as e:
        raise InputError(f"{p}: cannot read ({clean(e.strerror or type(e).__name__)})") from None
    except (csv.Error, UnicodeDecodeError) as e:
        raise InputError(f"{p}: not a CSV file ({clean(str(e))})") from None
    col = {h.strip(): i for i, h in enumerate(header)}
    need = REQUIRED if require_latency else ("OPName", "Device")
    for c in need:
        if c not in col:
            raise InputError(f"{p}: row 1: missing column {c!r}")
    n = len(rows)
    vals = {c: np.full(n, -1, np.int64) for c in _INT_COLS}
    lat = np.full(n, np.nan)
    ops, names, devs, dts = [], [], [], []
    for i, r in enumerate(rows):
        rn = i + 2
        if len(r) < len(header):
            raise InputError(f"{p}: row {rn}: {len(r)} fields, the header has {len(header)}")
        op = r[col["OPName"]].strip()
        if not op:
            raise InputError(f"{p}: row {rn}, column 'OPName': empty")
        ops.append(op)
        dev = r[col["Device"]].strip()
        if not dev:
            raise InputError(f"{p}: row {rn}, column 'Device': empty")
        devs.append(dev)
        names.append(r[col["Kernel Name"]] if "Kernel Name" in col else "")
        dts.append(r[col["Precision"]].strip().lower() if "Precision" in col and r[col["Precision"]].strip() else "fp32")
        if "Latency" in col and (require_latency or r[col["Latency"]].strip()):
            x = _num(r[col["Latency"]], p, rn, "Latency", False)
            if x <= 0:
                raise InputError(f"{p}: row {rn}, column 'Latency': must be positive (ms)")
            lat[i] = x
        for c in _INT_COLS:
            if c in col and r[col[c]].strip() != "":
                x = _num(r[col[c]], p, rn, c, True)
                if x < 0:
                    raise InputError(f"{p}: row {rn}, column {c!r}: negative")
                vals[c][i] = int(x)
    op_arr = np.array(ops, dtype=object)
    # the class from OPName alone: an unknown OPName is refused, not classed by its kernel name
    # (a 'foo' row with an sgemm kernel would be predicted as a linear layer without a word)
    cls = np.array([op_class(o) for o in ops], dtype=object)
    _check_shapes(p, cls, vals, ops)
    B = np.where(vals["B"] > 0, vals["B"], 1)
    mem = np.isin(cls, ("elementwise", "ln", "softmax"))
    elems = np.where(mem, B * np.maximum(vals["H"], 0), -1)
    inputs = np.array([2 if o.lower() in BINARY_OPS else 1 for o in ops], np.int64) if n else np.zeros(0, np.int64)
    grid = np.stack([vals["Grid x"], vals["Grid y"], vals["Grid z"]], axis=1) if n else np.zeros((0, 3), np.int64)
    block = np.stack([vals["Block x"], vals["Block y"], vals["Block z"]], axis=1) if n else np.zeros((0, 3), np.int64)
    # NeuSight's (M, N, K) are (rows, reduction, columns of the output); cuBLAS's (column-major)
    # output is M = NeuSight K (grid x, the tile's TM) by N = NeuSight M (grid y, TN), reduction
    # K = NeuSight N: grid x = ceil(K_ns / TM) and grid y = ceil(M_ns / TN) on every GEMM row of
    # ../shared/kernels/neusight (checked on all 8,493 linear/bmm rows).
    k = Kernels(cls, np.array(names, dtype=object), B, np.where(mem, -1, vals["K"]), np.where(mem, -1, vals["M"]),
                np.where(mem, -1, vals["N"]), elems, inputs, grid, block, np.array(dts, dtype=object))
    return Table(p, header, rows, k, lat * 1e6, np.array(devs, dtype=object), op_arr)


def write_table(out, t: Table, extra: dict[str, np.ndarray]) -> None:
    """Write ``t``'s rows with ``extra`` columns (name -> values; floats written exactly, other
    values as text) appended, to ``out`` (a path or an open text file)."""
    if isinstance(out, (str, Path)):
        with open(out, "w", newline="") as f:
            write_table(f, t, extra)
        return
    w = csv.writer(out)
    w.writerow(list(t.header) + list(extra))
    cols = [np.asarray(v) for v in extra.values()]
    fmt = [(lambda x: repr(float(x))) if c.dtype.kind == "f" else str for c in cols]
    for i, r in enumerate(t.rows):
        w.writerow(list(r) + [f(c[i]) for f, c in zip(fmt, cols)])
