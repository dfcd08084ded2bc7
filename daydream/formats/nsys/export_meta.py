"""The trace metadata of an nsys export: GPUs and export facts.

:class:`DeviceInfo` of every GPU seen (``TARGET_INFO_GPU`` / ``TARGET_INFO_CUDA_GPU``), and the
export's version facts and the tables it has that daydream does not read (``TraceMeta.extra``).
"""

from __future__ import annotations

import numpy as np

from ...events.table import DeviceInfo
from .export_schema import EVENT_TABLES, LOOKUP_TABLES
from .reader_state import ReaderState
from .sqlite_query import _q


def read_devices(r: ReaderState, seen: np.ndarray) -> list[DeviceInfo]:
    fields = {"name": ("name",), "compute_major": ("computeMajor", "computeCapabilityMajor"),
              "compute_minor": ("computeMinor", "computeCapabilityMinor"),
              "num_sms": ("smCount", "numMultiprocessors"), "total_memory_bytes": ("totalMemory", "globalMemorySize")}
    cuda_id: dict[int, int] = {}
    if {"gpuId", "cudaId"} <= set(r.q.columns("TARGET_INFO_CUDA_DEVICE")):
        for g, c in r.q.exec("SELECT gpuId, cudaId FROM TARGET_INFO_CUDA_DEVICE", "table TARGET_INFO_CUDA_DEVICE"):
            if isinstance(g, int) and isinstance(c, int):
                cuda_id.setdefault(g, c)
    found: dict[int, DeviceInfo] = {}
    for table, id_cols in (("TARGET_INFO_GPU", ("cuDevice", "deviceId", "id")),
                           ("TARGET_INFO_CUDA_GPU", ("deviceId", "cuDevice", "id"))):
        have = r.q.columns(table)
        if not have:
            continue
        sel = {f: next((c for c in cands if c in have), None) for f, cands in fields.items()}
        idc = next((c for c in id_cols if c in have), None)
        if idc is None:
            continue
        use_map = table == "TARGET_INFO_GPU" and cuda_id and "id" in have
        cols = [idc] + (["id"] if use_map else []) + [c for c in sel.values() if c]
        for row in r.q.exec(f"SELECT {', '.join(_q(c) for c in cols)} FROM {table}", f"table {table}"):
            vals = dict(zip(cols, row))
            dev = cuda_id.get(vals["id"], vals[idc]) if use_map else vals[idc]
            if not isinstance(dev, int):
                continue
            info = {f: vals[c] for f, c in sel.items() if c}
            if info.get("compute_major") == 0 or info.get("num_sms") == 0:
                continue  # a non-CUDA adapter listed by nsys (e.g. integrated graphics)
            d = found.setdefault(dev, DeviceInfo(id=dev))
            for f, v in info.items():
                if f == "name" and isinstance(v, str) and not d.name:
                    d.name = v
                elif f != "name" and isinstance(v, int) and getattr(d, f) == -1:
                    setattr(d, f, v)
    for dev in seen.tolist():
        found.setdefault(int(dev), DeviceInfo(id=int(dev)))
    return [found[k] for k in sorted(found)]


def read_extra(r: ReaderState) -> dict[str, str]:
    extra: dict[str, str] = {}
    for mt in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if {"name", "value"} <= set(r.q.columns(mt)):
            extra["metadata_table"] = mt
            for k, v in r.q.exec(f"SELECT name, value FROM {mt} WHERE name IN "
                                   "('EXPORT_PRODUCT_VERSION', 'EXPORT_SCHEMA_VERSION', 'DERIVED_WINDOW_NS')", f"table {mt}"):
                extra[str(k)] = str(v)
            break
    used = set(EVENT_TABLES) | set(LOOKUP_TABLES)
    for tname in sorted(r.q.tables):
        if tname in used or tname.startswith(("ENUM_", "sqlite_")):
            continue
        n = r.q.count(tname)
        if n:
            extra[f"not used: {tname}"] = f"{n} rows"
    return extra
