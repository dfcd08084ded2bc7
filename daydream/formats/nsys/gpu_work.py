"""GPU work of an nsys export: kernels, memcpy and memset.

``CUPTI_ACTIVITY_KIND_KERNEL``, ``_MEMCPY`` and ``_MEMSET`` become KERNEL, MEMCPY and MEMSET rows.

GPU rows carry pid from ``globalPid`` and tid -1; kernels are named demangled, else short; copies
by their copyKind label, with nsys's memory kinds mapped onto CUPTI's.
"""

from __future__ import annotations

import numpy as np

from ...events.table import CopyKind, Kind, MemKind
from .export_schema import KERNEL, MEMCPY, MEMSET
from .id_columns import _pid_of, _u32_id
from .reader_state import ReaderState
from .sqlite_query import _q

#: nsys ENUM_CUDA_MEMCPY_OPER labels (used when the export has no enum table)
_MEMCPY_LABELS = {0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
                  4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
                  8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer",
                  11: "Unified Host-to-Device", 12: "Unified Device-to-Host", 13: "Unified Device-to-Device"}


#: nsys copyKind -> CUPTI CopyKind (0-10 are equal; the unified-memory kinds fold onto their direction)
_COPY_LUT = np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, CopyKind.HTOD, CopyKind.DTOH, CopyKind.DTOD], dtype=np.int8)


#: nsys ENUM_CUDA_MEM_KIND (0 pageable .. 6 managed static, 7 unknown) -> CUPTI MemKind
_MEMKIND_LUT = np.array([MemKind.PAGEABLE, MemKind.PINNED, MemKind.DEVICE, MemKind.ARRAY, MemKind.MANAGED,
                         MemKind.DEVICE_STATIC, MemKind.MANAGED_STATIC, MemKind.UNKNOWN], dtype=np.int8)


def _gpu_common(r: ReaderState, t: str, alias: str) -> tuple[list[str], int]:
    r.q.require(t, "start", "end", "deviceId", "streamId")
    exprs = []
    for col, miss in (("start", -1), ("end", -1), ("globalPid", -1)):
        exprs.extend(r.q.int_expr(t, alias, col, miss))
    for col, miss in (("deviceId", -1), ("streamId", -1), ("correlationId", 0)):
        exprs.append(r.q.int_expr(t, alias, col, miss)[0])
    have = r.q.columns(t)
    exprs.append(f"COALESCE({alias}.contextId, -1)" if "contextId" in have else "-1")
    return exprs, len(exprs)


def _gpu_rows(r: ReaderState, t: str, ints: list[np.ndarray]):
    start, start_n, end, end_n, gpid, gpid_n, dev, stream, corr, ctx = ints[:10]
    keep, end = r.times(t, start, start_n, end, end_n)
    pid = _pid_of(gpid, gpid_n != 0)
    # (process, context) -> device of the GPU work, to place SYNC rows (see read_sync)
    r.ctx_dev.append(np.stack([pid[keep], ctx[keep], _u32_id(dev[keep])], axis=1))
    if np.count_nonzero(gpid_n[keep]):
        r.note(t, "no globalPid (pid -1)", np.count_nonzero(gpid_n[keep]))
    corr = r.corr(t, corr, keep)
    cols = dict(start_ns=start, end_ns=end, pid=pid, tid=np.int64(-1), device=_u32_id(dev),
                stream=_u32_id(stream), correlation=corr)
    return keep, cols


def read_kernels(r: ReaderState) -> np.ndarray:
    t = KERNEL
    have = r.q.columns(t)
    name_cols = [c for c in ("demangledName", "shortName") if c in have]
    if not name_cols:
        r.q.require(t, "demangledName")
    exprs, n = _gpu_common(r, t, "k")
    joins = " ".join(f"LEFT JOIN StringIds n{i} ON n{i}.id = k.{_q(c)}" for i, c in enumerate(name_cols))
    name_sql = "COALESCE(" + ", ".join(f"NULLIF(n{i}.value, '')" for i in range(len(name_cols))) + ", NULL)"
    ints, ((name_id, unknown),) = r.q.fetch(t, exprs, [name_sql], f"FROM {t} k {joins}", intern=["<unknown kernel>"])
    keep, cols = _gpu_rows(r, t, ints)
    if np.count_nonzero(unknown & keep):
        r.note(t, "kernel name not in StringIds", np.count_nonzero(unknown & keep))
    cols["name_id"] = name_id
    return _emit(r, t, keep, cols, Kind.KERNEL)


def _emit(r: ReaderState, t: str, keep: np.ndarray, cols: dict, kind: Kind) -> np.ndarray:
    """Emit the kept rows of table ``t`` as GPU tasks of ``kind`` (category: the table's name);
    returns their devices (the GPUs the trace names)."""
    cols["cat_id"] = np.int32(r.names.intern(t))
    cols["kind"] = np.uint8(kind)
    devices = cols["device"][keep]
    r.emit(t, keep, cols)
    return devices


def read_memcpy(r: ReaderState) -> np.ndarray:
    t = MEMCPY
    exprs, n = _gpu_common(r, t, "m")
    for col in ("bytes", "copyKind", "srcKind", "dstKind"):
        exprs.append(r.q.int_expr(t, "m", col, -1)[0])
    ints, _ = r.q.fetch(t, exprs, [], f"FROM {t} m")
    keep, cols = _gpu_rows(r, t, ints)
    nbytes, ck, sk, dk = ints[n:]
    labels = dict(_MEMCPY_LABELS)
    if "ENUM_CUDA_MEMCPY_OPER" in r.q.tables and {"id", "label"} <= set(r.q.columns("ENUM_CUDA_MEMCPY_OPER")):
        for i, label in r.q.exec("SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER", "table ENUM_CUDA_MEMCPY_OPER"):
            if isinstance(i, int) and isinstance(label, str):
                labels[i] = label
    uk, inv = np.unique(ck, return_inverse=True)
    label_ids = r.intern(f"[CUDA memcpy {labels.get(int(v), 'Unknown')}]" for v in uk)
    cols["name_id"] = label_ids[inv.reshape(-1)] if len(uk) else np.zeros(0, np.int32)
    in_lut = (ck >= 0) & (ck < len(_COPY_LUT))
    cols["copy_kind"] = np.where(in_lut, _COPY_LUT[np.clip(ck, 0, len(_COPY_LUT) - 1)], CopyKind.UNKNOWN)
    if np.count_nonzero(keep & (ck >= 11) & in_lut):
        r.note(t, "unified-memory copyKind folded onto HtoD/DtoH/DtoD", np.count_nonzero(keep & (ck >= 11) & in_lut))
    if np.count_nonzero(keep & ~in_lut):
        r.note(t, "unknown copyKind (copy_kind 0)", np.count_nonzero(keep & ~in_lut))
    for src, dst in ((sk, "src_kind"), (dk, "dst_kind")):
        ok = (src >= 0) & (src < len(_MEMKIND_LUT))
        cols[dst] = np.where(ok, _MEMKIND_LUT[np.clip(src, 0, len(_MEMKIND_LUT) - 1)], MemKind.UNKNOWN)
    cols["bytes"] = nbytes
    return _emit(r, t, keep, cols, Kind.MEMCPY)


def read_memset(r: ReaderState) -> np.ndarray:
    t = MEMSET
    exprs, n = _gpu_common(r, t, "m")
    exprs.append(r.q.int_expr(t, "m", "bytes", -1)[0])
    ints, _ = r.q.fetch(t, exprs, [], f"FROM {t} m")
    keep, cols = _gpu_rows(r, t, ints)
    cols["bytes"] = ints[n]
    cols["name_id"] = np.int32(r.names.intern("[CUDA memset]"))
    return _emit(r, t, keep, cols, Kind.MEMSET)
