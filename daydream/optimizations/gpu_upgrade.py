"""``gpu-upgrade``: what if the trace had run on another GPU?

Model (roofline ratios, no per-kernel shapes needed): a compute-bound kernel (GEMM, convolution,
fused attention; :mod:`daydream.kernels`) runs at the GPU's peak Tensor-Core rate, so it takes
``source.tc_tflops / target.tc_tflops`` of its time; a memory-bound kernel (elementwise,
reduction, normalization, softmax, optimizer, copy and fill kernels), device-to-device copies and
memsets run at DRAM bandwidth, so they take ``source.mem_gbps / target.mem_gbps``. The numbers
are the vendors' datasheet figures in :mod:`daydream.gpus`.

Not scaled: CPU tasks (same host), host<->device and peer copies (PCIe/NVLink, not DRAM),
communication kernels (interconnect-bound) and kernels of class ``other``.

The source GPU is the traced device's name (``TraceMeta.devices`` of the device the GPU tasks ran
on, matched loosely, then by memory size and by architecture/compute-unit count), or
``source=NAME``. With target == source every factor is 1 and the prediction is the replay.
"""

from __future__ import annotations

import numpy as np

from .. import kernels as K
from ..errors import NotApplicable, UsageError
from ..events import CopyKind, Kind
from ..gpus import GPU, find_gpu, gpu_of_device, names
from ..transform import scale
from . import Optimization, Param, register


def source_gpu(graph, given: str) -> tuple[GPU | None, str]:
    """(table entry, traced device name) of the GPU the trace ran on; ``given`` overrides."""
    if given:
        g = find_gpu(given)
        if g is None:
            raise UsageError(f"--opt gpu-upgrade: unknown source GPU {given!r} (known: {', '.join(names())})")
        return g, given
    devs = graph.devices
    if not devs:
        return None, ""
    used = graph.device[graph.node_kind != 0]
    used = used[used >= 0]
    dev_id = int(np.bincount(used).argmax()) if len(used) else devs[0].id
    dev = next((d for d in devs if d.id == dev_id), devs[0])
    return gpu_of_device(dev), dev.name


def _apply(graph, p):
    target = find_gpu(p["target"])
    if target is None:
        raise UsageError(f"--opt gpu-upgrade: unknown target GPU {p['target']!r} (known: {', '.join(names())})")
    src, traced = source_gpu(graph, p["source"])
    if src is None:
        what = f"the traced GPU {traced!r} is not in the GPU table" if traced else "the trace does not name its GPU"
        raise NotApplicable(f"{what}; give it as gpu-upgrade:source=NAME (known: {', '.join(names())})")
    info = K.kernel_info(graph)
    kern = graph.node_kind == Kind.KERNEL
    dram_copy = (graph.node_kind == Kind.MEMCPY) & (graph.copy_kind == CopyKind.DTOD)
    comp = kern & info.is_bound("compute")
    mem = (kern & info.is_bound("memory")) | dram_copy | (graph.node_kind == Kind.MEMSET)
    fc = src.tc_tflops / target.tc_tflops
    fm = src.mem_gbps / target.mem_gbps
    g = scale(graph, comp, fc)
    g = scale(g, mem, fm)
    word = "(same GPU: no change)" if src is target else ("upgrade" if fc <= 1 and fm <= 1 else "change (slower in compute or bandwidth)")
    return g, (f"{src.name} -> {target.name} {word}: {int(comp.sum()):,} compute-bound tasks x{fc:.3f} "
               f"({src.tc_tflops:g} -> {target.tc_tflops:g} TFLOPS), {int(mem.sum()):,} memory-bound x{fm:.3f} "
               f"({src.mem_gbps:g} -> {target.mem_gbps:g} GB/s)")


register(
    Optimization(
        name="gpu-upgrade",
        summary="run on another GPU: compute-bound kernels scale by peak Tensor-Core TFLOPS, memory-bound by DRAM bandwidth",
        apply=_apply,
        params={
            "target": Param("B200", "GPU to predict for (daydream/gpus.py table, names matched loosely: " + ", ".join(names())
                            + "); default B200, the fastest in the table, so --opt all shows the upper bound", str,
                            lambda v: find_gpu(v) is not None, "a GPU of daydream/gpus.py"),
            "source": Param("", "GPU the trace ran on; empty = from the trace's device name", str,
                            lambda v: v == "" or find_gpu(v) is not None, "a GPU of daydream/gpus.py, or empty"),
        },
    )
)
