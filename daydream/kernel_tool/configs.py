"""GPUs named on the daydream-kernels command line: a name from the spec tables, or a device_configs JSON file (NeuSight's format)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from ..costmodel.gpus import normalize
from ..costmodel.specs import Spec, find_spec


#: Spec-sheet keys of a NeuSight device_configs JSON file and their meaning.
CONFIG_KEYS = ("Device", "Mem_Bw", "Num_Sm", "Freq", "SingleFLOPs", "L2Cache")


def from_config(path: str | Path) -> Spec:
    """A :class:`Spec` from a device_configs JSON file. Where the device is also in the tables
    (:func:`find_spec`), the tables' entry is used with the file's SM count, bandwidth, FP32 peak
    and L2 (the file describes the machine that was measured).

    Raises:
        ValueError: a missing key or a non-numeric value (the message names the file and the key).
    """
    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"{p}: cannot read a JSON GPU config ({type(e).__name__})") from None
    if not isinstance(d, dict):
        raise ValueError(f"{p}: a GPU config must be a JSON object")
    for k in CONFIG_KEYS:
        if k not in d:
            raise ValueError(f"{p}: missing key {k!r}")
    try:
        sms, bw, fp32 = int(d["Num_Sm"]), float(d["Mem_Bw"]), float(d["SingleFLOPs"]) / 1000.0
        l2, clk = float(d["L2Cache"]), float(d["Freq"])
    except (TypeError, ValueError):
        raise ValueError(f"{p}: a numeric key holds a non-number") from None
    if sms <= 0 or bw <= 0 or fp32 <= 0:
        raise ValueError(f"{p}: Num_Sm, Mem_Bw and SingleFLOPs must be positive")
    base = find_spec(str(d["Device"]))
    src = f"device config {p.name}"
    if base is None:
        return Spec(str(d["Device"]), "nvidia", sms, fp32, bw, l2, clk, float(d.get("TDP", 0) or 0), 8, {"fp32": fp32},
                    source=src)
    peaks = dict(base.peaks)
    peaks["fp32"] = fp32 * (base.peaks.get("fp32", base.fp32_tflops) / base.fp32_tflops if base.fp32_tflops else 1.0)
    return replace(base, sms=sms, mem_gbps=bw, fp32_tflops=fp32, l2_mib=l2, clock_mhz=clk, peaks=peaks,
                   source=base.source + "; " + src)


def load_configs(paths) -> dict[str, Spec]:
    """device_configs files -> {normalized device name: Spec} (keyed by the file's ``Device`` and
    by the resulting spec's name), for :func:`resolve`."""
    out: dict[str, Spec] = {}
    for f in paths:
        s = from_config(f)
        out[normalize(s.name)] = s
        out[normalize(str(json.loads(Path(f).read_text())["Device"]))] = s
    return out


def resolve(name_or_path: str, configs: dict[str, Spec] | None = None) -> Spec:
    """A GPU by name (``configs`` first, keyed by :func:`daydream.gpus.normalize`d device name, then
    :func:`find_spec`) or by the path of a device_configs JSON file.

    Raises:
        ValueError: unknown GPU.
    """
    if configs:
        s = configs.get(normalize(name_or_path))
        if s is not None:
            return s
    if name_or_path.endswith(".json") and Path(name_or_path).is_file():
        return from_config(name_or_path)
    s = find_spec(name_or_path)
    if s is None:
        raise ValueError(f"unknown GPU {name_or_path!r} (pass --gpu-config FILE.json)")
    return s
