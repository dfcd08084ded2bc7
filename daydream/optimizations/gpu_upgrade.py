"""``gpu-upgrade``: what if the trace had run on another GPU?

Model (roofline ratios, no per-kernel shapes needed): a compute-bound kernel (GEMM, convolution,
fused attention; :mod:`daydream.graph.kernels`) runs at the GPU's peak Tensor-Core rate, so it takes
``source.tc_tflops / target.tc_tflops`` of its time; a memory-bound kernel (elementwise,
reduction, normalization, softmax, optimizer, copy and fill kernels), device-to-device copies and
memsets run at DRAM bandwidth, so they take ``source.mem_gbps / target.mem_gbps``. The numbers
are the vendors' datasheet figures in :mod:`daydream.costmodel.gpus`.

Not scaled: CPU tasks (same host), host<->device and peer copies (PCIe/NVLink, not DRAM),
communication kernels (interconnect-bound) and kernels of class ``other``.

The source GPU is the traced device's name (``TraceMeta.devices`` of the device the GPU tasks ran
on, matched loosely, then by memory size and by architecture/compute-unit count), or
``source=NAME``. With target == source every factor is 1: not applicable unless a host parameter
changes something (then only that changes).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..util.arrays import sorted_unique
from ..graph import kernels as K
from ..errors import NotApplicable, UsageError
from ..events.table import CopyKind, DeviceInfo, Kind
from ..costmodel.gpus import GPU, find_gpu, gpu_of_device, names
from ..events.cuda_api import ApiRole
from ..graph import NODE_CPU
from ..transform import scale, scale_gaps, set_duration, set_launch_latency
from . import Optimization, Param, register
from ..costmodel import kernel_model as KM
from ..costmodel.specs import from_table
from ..costmodel.kernel_time import floor_ns
from . import kernel_cost as KC
from .common import cpu_roles, median_launch_ns


def source_gpu(graph, given: str) -> tuple[GPU | None, str]:
    """(table entry, traced device name) of the GPU the trace ran on; ``given`` overrides. The
    device properties under the id most GPU tasks ran on, else the only GPU model the trace's
    properties name; (None, "") when they name several models and none under that id."""
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
    dev = next((d for d in devs if d.id == dev_id), None)
    if dev is None:  # no properties under the id the GPU work ran on (MI300X traces: properties id 0, work on 2)
        if len({d.name for d in devs}) != 1:
            return None, ""  # devices of several models: which one ran the work is not known
        dev = devs[0]  # one model in the node: that is the GPU (the header says the ids differ)
    return gpu_of_device(dev), dev.name


def on_target(graph, g, target: GPU):
    """``g`` (the upgraded graph) with its devices named as ``target`` (the table's name, which
    :func:`source_gpu` finds again), so that a what-if composed after this one (``amp``'s per-GPU
    model, ``compression``'s bandwidth) models the GPU after the upgrade, not the traced one.
    Every GPU task was rescaled for ``target``, so every device is renamed; a trace that names no
    device gets one entry for the device its GPU tasks used most."""
    devs = list(graph.devices)
    if not devs:
        used = graph.device[(graph.node_kind != NODE_CPU) & (graph.device >= 0)]
        if not len(used):
            return g
        devs = [DeviceInfo(id=int(np.bincount(used).argmax()))]
    new = [DeviceInfo(id=d.id, name=target.name, num_sms=target.sms or -1) for d in devs]
    recorded = graph.recorded_devices if graph.recorded_devices is not None else list(graph.devices)
    return dataclasses.replace(g, devices=new, recorded_devices=recorded)


def _host(graph, p) -> tuple:
    """The host and launch path of the target platform (parameters ``cpu_speed``, ``launch_latency_ns``,
    ``launch_cpu_ns``): a new graph and the note's words."""
    words = []
    g = graph
    cpu = graph.node_kind == NODE_CPU
    if p["cpu_speed"] != 1.0:
        g = scale(g, cpu, 1.0 / p["cpu_speed"])
        g = scale_gaps(g, cpu, 1.0 / p["cpu_speed"])
        words.append(f"host CPU x{p['cpu_speed']:g} as fast (CPU tasks and gaps x{1 / p['cpu_speed']:.3f})")
    if p["launch_cpu_ns"] >= 0:
        calls = sorted_unique(graph.launch[(graph.node_kind == Kind.KERNEL) & (graph.launch >= 0)])
        m = np.zeros(graph.n, dtype=bool)
        m[calls] = True
        m &= cpu_roles(graph) == ApiRole.LAUNCH
        g = set_duration(g, m, int(p["launch_cpu_ns"]))
        words.append(f"{int(m.sum()):,} kernel-launch calls cost {p['launch_cpu_ns'] / 1e3:g} us "
                     f"(trace median {median_launch_ns(graph) / 1e3:,.3f} us)")
    if p["launch_latency_ns"] >= 0:
        g = set_launch_latency(g, int(p["launch_latency_ns"]))
        words.append(f"launch latency L {graph.launch_latency_ns / 1e3:,.3f} -> {p['launch_latency_ns'] / 1e3:g} us")
    return g, words


def _peak_model(graph, src: GPU, target: GPU):
    """The first model (``kernel_model=peak``): peak Tensor-Core and bandwidth ratios, no floor."""
    info = K.kernel_info(graph)
    kern = graph.node_kind == Kind.KERNEL
    dram_copy = (graph.node_kind == Kind.MEMCPY) & (graph.copy_kind == CopyKind.DTOD)
    comp = kern & info.is_bound("compute")
    mem = (kern & info.is_bound("memory")) | dram_copy | (graph.node_kind == Kind.MEMSET)
    fc = src.tc_tflops / target.tc_tflops
    fm = src.mem_gbps / target.mem_gbps
    g = scale(scale(graph, comp, fc), mem, fm)
    return g, (f"peak model: {int(comp.sum()):,} compute-bound tasks x{fc:.3f} ({src.tc_tflops:g} -> {target.tc_tflops:g} TFLOPS), "
               f"{int(mem.sum()):,} memory-bound x{fm:.3f} ({src.mem_gbps:g} -> {target.mem_gbps:g} GB/s)")


def _launch_model(graph, src: GPU, target: GPU, p):
    """Per-kernel rules of :mod:`._kernel_model`: a new graph and the note."""
    if p["conv_tf32"] == "on" and target.tf32_tflops == 0:
        raise UsageError(f"gpu-upgrade: conv_tf32=on, but the {target.name} has no TF32 Tensor Cores (its fp32 convolutions run on "
                         "CUDA cores as fp32): give conv_tf32=auto or off")
    data = graph.facts.launch
    floor_s = KM.kernel_floor_ns(src, graph)
    floor_t = int(p["target_floor_ns"]) if p["target_floor_ns"] >= 0 else (
        KM.KERNEL_FLOOR_NS.get(target.name, floor_s) if target is not src else floor_s)
    pl = KM.plan(graph, src, target, data, floor_s, floor_t, conv_tf32=p["conv_tf32"])
    gpu = graph.node_kind != NODE_CPU
    g = set_duration(graph, gpu, pl.new_dur[gpu])
    if pl.tf32_conv:  # a later amp sees them on TF32 (KM.paths_now)
        g = KM.with_paths(g, pl.tf32_mask, "tf32")
    cov = KM.coverage(graph, pl)
    total = max(int(graph.dur_ns[gpu].sum()), 1)
    parts = [f"{k} {v[1]:,} tasks {v[0] / 1e6:,.3f} ms ({v[0] / total:.0%})" for k, v in cov.items() if k != "latency-bound"]
    if "latency-bound" in cov:  # a subset of the rules' tasks: shares above add up to 100 % without it
        v = cov["latency-bound"]
        parts.append(f"of these latency-bound {v[1]:,} tasks {v[0] / 1e6:,.3f} ms ({v[0] / total:.0%})")
    kern = graph.node_kind == Kind.KERNEL
    note = (f"per-kernel model: GPU task time {total / 1e6:,.3f} -> {int(pl.new_dur[gpu].sum()) / 1e6:,.3f} ms; "
            f"floor {floor_s / 1e3:,.3f} -> {floor_t / 1e3:,.3f} us; rules: " + ", ".join(parts)
            + f"; launch data for {pl.matched:,} of {int(kern.sum()):,} kernels" + (f" ({data.reason})" if data.reason else ""))
    if pl.tf32_conv:
        note += (f"; {pl.tf32_conv:,} fp32 convolution kernels on the target's TF32 Tensor Cores (PyTorch's default "
                 "cudnn.allow_tf32=True; conv_tf32=off keeps fp32)")
    return g, note


def _library_model(graph, src: GPU, target: GPU, p):
    """Each kernel the kernel-cost library can describe (:mod:`.kernel_cost`) timed on the target by
    :func:`daydream.costmodel.predict_cross`, with its range; the rest by the per-kernel rules
    (:func:`_launch_model`), counted in the note."""
    g, rules_note = _launch_model(graph, src, target, p)
    s_src, s_tgt = from_table(src), from_table(target)
    row = KM.match_launches(graph, graph.facts.launch) if graph.facts is not None else np.full(graph.n, -1, np.int64)
    d = KC.describe(graph, s_src, row, KM.work_item_grid(graph))
    if not len(d.nodes):
        return g, rules_note + "; kernel-cost library: no kernel described (no launch data), all by the rules above"
    t = graph.dur_ns[d.nodes]
    # from each kernel's anchor (its measured time on the traced GPU), at the precision it runs at now
    g, pred, pt = KC.retime(graph, g, d, s_src, s_tgt)
    c = d.counts
    total = max(int(graph.dur_ns[graph.node_kind == Kind.KERNEL].sum()), 1)
    share = int(t.sum()) / total
    rest = c["kernels"] - c["described"]
    note = (f"kernel-cost library (daydream/costmodel, docs/kernels.md): {c['described']:,} of {c['kernels']:,} kernels "
            f"({share:.0%} of kernel time) {t.sum() / 1e6:,.3f} -> {pt.sum() / 1e6:,.3f} ms, floor "
            f"{floor_ns(s_src) / 1e3:,.3f} -> {floor_ns(s_tgt) / 1e3:,.3f} us"
            + (f"; {c['bytes inferred from time']:,} memory-bound kernels without op shapes: bytes inferred from their "
               "measured time" if c['bytes inferred from time'] else "")
            + (f"; {rest:,} kernels the library cannot describe ({c[KC.NO_SHAPES]:,} compute kernels without the op's "
               f"shapes, {c['not described: other/communication']:,} other or communication kernels) and copies/sets "
               "by the per-kernel rules: " + rules_note if rest else "; copies and sets by the per-kernel rules"))
    return g, note


def _apply(graph, p):
    target = find_gpu(p["target"])
    if target is None:
        raise UsageError(f"--opt gpu-upgrade: unknown target GPU {p['target']!r} (known: {', '.join(names())})")
    if not (graph.node_kind != NODE_CPU).any() and p["cpu_speed"] == 1.0:  # nothing this what-if changes
        raise NotApplicable("the trace has no GPU kernels, copies or sets (cpu_speed changes its host side)")
    src, traced = source_gpu(graph, p["source"])
    if src is None:
        what = f"the traced GPU {traced!r} is not in the GPU table" if traced else "the trace does not name its GPU"
        raise NotApplicable(f"{what}; give it as gpu-upgrade:source=NAME (known: {', '.join(names())})")
    same_host = p["cpu_speed"] == 1.0 and p["launch_cpu_ns"] < 0 and p["launch_latency_ns"] < 0 and p["target_floor_ns"] < 0
    if src is target and same_host:  # nothing would change (e.g. --opt all's default target on a B200 trace)
        raise NotApplicable(f"the trace already ran on the target ({target.name}); give another target=NAME")
    if p["kernel_model"] == "peak":
        g, note = _peak_model(graph, src, target)
    elif p["kernel_model"] == "library":
        g, note = _library_model(graph, src, target, p)
    else:
        g, note = _launch_model(graph, src, target, p)
    g, host = _host(g, p)
    g = on_target(graph, g, target)
    word = "(same GPU)" if src is target else ""
    out = f"{src.name} -> {target.name} {word}".rstrip() + ": " + note
    if host:
        out += "; " + "; ".join(host)
    nodev = int(((graph.node_kind != NODE_CPU) & (graph.device < 0)).sum())
    if nodev:  # the trace did not say where they ran: they are taken to have run on the traced GPU
        out += f"; {nodev:,} GPU tasks without a device id modelled as run on the {src.name}"
    if src.vendor != target.vendor:
        out += (f"; cross-vendor ({src.vendor} -> {target.vendor}): the target's libraries choose other kernels "
                "(tiles, grids, fusion), which this model does not know")
    return g, out


register(
    Optimization(
        name="gpu-upgrade",
        summary="run on another GPU: per-kernel floor + roofline/waves/peak rules from launch data and shapes; host path as parameters",
        apply=_apply,
        params={
            "target": Param("B200", "GPU to predict for (daydream/costmodel/gpus.py table, names matched loosely: " + ", ".join(names())
                            + "); default B200, the fastest in the table, so --opt all shows the upper bound", str,
                            lambda v: find_gpu(v) is not None, "a GPU of daydream/costmodel/gpus.py"),
            "source": Param("", "GPU the trace ran on; empty = from the trace's device name", str,
                            lambda v: v == "" or find_gpu(v) is not None, "a GPU of daydream/costmodel/gpus.py, or empty"),
            "kernel_model": Param("library", "per-kernel model: 'library' (the kernel-cost library, daydream/costmodel/"
                                  "kernel_time.py, docs/kernels.md, for the kernels it can describe; the launch rules for the "
                                  "rest; the prediction carries the library's range), 'launch' (floor + work part scaled by "
                                  "roofline / waves / peak rules, daydream/costmodel/kernel_model.py) or 'peak' (the first "
                                  "model: peak Tensor-Core and bandwidth ratios)", str,
                                  lambda v: v in ("library", "launch", "peak"), "library, launch or peak"),
            "target_floor_ns": Param(-1.0, "smallest kernel time on the target, ns; -1 = the measured table "
                                     "(_kernel_model.KERNEL_FLOOR_NS), else the source's", float, lambda v: v == -1 or 0 <= v <= 1e9,
                                     "-1 or 0..1e9"),
            "conv_tf32": Param("auto", "fp32 convolutions on the target's TF32 Tensor Cores: auto = when the traced GPU has no "
                               "TF32 and the target has (PyTorch's default torch.backends.cudnn.allow_tf32=True), on, off",
                               str, lambda v: v in ("auto", "on", "off"), "auto, on or off"),
            "cpu_speed": Param(1.0, "host CPU speed relative to the traced host (CPU task durations and gaps are divided "
                               "by it); 1 = same host (no source for another host: give a measured ratio)", float,
                               lambda v: 0 < v <= 100, "0 < x <= 100"),
            "launch_latency_ns": Param(-1.0, "launch latency L of the target platform, ns; -1 = the trace's measured L "
                                       "(docs/model.md rule 5)", float, lambda v: v == -1 or 0 <= v <= 1e9, "-1 or 0..1e9"),
            "launch_cpu_ns": Param(-1.0, "CPU cost of one kernel-launch call on the target platform, ns; -1 = as "
                                   "recorded", float, lambda v: v == -1 or 0 <= v <= 1e9, "-1 or 0..1e9"),
        },
    )
)
