"""``amp``: automatic mixed precision (fp32 training -> fp16/bf16 compute with fp32 master weights).

Model (the Daydream paper's AMP model: Zhu, Phanishayee, Pekhimenko, USENIX ATC 2020, arXiv
2006.03318, the "Automatic Mixed Precision" case study of the section that models optimizations
with the primitives; docs/optimizations.md): AMP changes kernel durations only. Kernels that can use Tensor Cores (GEMMs,
convolutions, fused attention: compute-bound, :mod:`daydream.graph.kernels`) become ``compute_factor``
(1/3) as long; every other kernel is memory-bound and moves half the bytes, so it becomes
``memory_factor`` (1/2) as long. CPU tasks are unchanged (the framework launches the same ops).

What is not scaled, and why:

* kernels already in half precision or fp8 (by name, :data:`daydream.graph.kernels.PRECISION_RULES`):
  AMP does not change them. When most of the GEMM/convolution/attention time (of known
  precision) is already half/fp8 (:data:`HALF_SHARE`), the trace already runs in mixed
  precision, the fp32 kernels left are those autocast keeps in fp32, and the optimization does
  not apply ("the trace already runs in half precision");
* optimizer kernels (multi-tensor apply, fused optimizers): under ``torch.autocast`` the
  optimizer updates fp32 master weights and fp32 gradients;
* communication kernels: gradients stay fp32 under autocast, so all-reduce volume is unchanged;
* memcpy/memset tasks (copy engines: input batches stay fp32), fp64, integer and boolean
  kernels (autocast converts fp32 ops only) and kernels of class ``other`` (unknown work).

Kernels whose name gives no precision (``nvjet_*``, Triton) are taken as fp32, PyTorch's default
(a trace whose known-precision GEMMs are mostly half does not get this far, see above).

In the per-GPU model (the default, ``amp:model=gpu``, docs/optimizations.md) these factors apply to
the work part of each kernel above the GPU's kernel floor (:func:`floored_durations`), as in
gpu-upgrade's per-kernel model; the paper's model scales whole kernels.

TF32 GEMMs (Ampere and later run fp32 GEMMs/convolutions on Tensor Cores as TF32) are already on
Tensor Cores at half the fp16 rate: they scale by ``tf32_factor`` (1/2: dense FP16 / dense TF32
Tensor-Core throughput is 312/156 TFLOPS on A100 and 989/495 on H100 SXM, NVIDIA A100 and H100
datasheets).
"""

from __future__ import annotations

import numpy as np

from ..util.arrays import sorted_unique
from ..graph import kernels as K
from ..errors import NotApplicable, UsageError
from ..events.table import Kind
from ..costmodel.gpus import find_gpu
from ..transform import name_mask, scale, set_duration
from . import Optimization, Param, register
from ..costmodel import kernel_model as KM
from .common import mapped_phase, median_launch_ns
from .gpu_upgrade import source_gpu
from . import kernel_cost as KC
from .amp_memory import amp_memory
from .autocast import AUTOCAST_FP32_KERNELS, AUTOCAST_FP32_OPS, AUTOCAST_LOW_OPS, AUTOCAST_PYTORCH_VERSION, autocast_precision
from .grad_scaler import insert_scaler
from ..costmodel.specs import from_table


#: A trace whose compute-bound kernel time (of known precision) is more than this share fp16/bf16/
#: fp8 already runs in mixed precision: the fp32 kernels left in it are the ones autocast keeps
#: in fp32 (losses, normalization statistics), so AMP does not apply.
HALF_SHARE = 0.5


def _targets(graph, info: K.KernelInfo):
    """(fp32 compute-bound mask, TF32 compute-bound mask, memory-bound mask, half/fp8 kernels,
    half share of the known-precision compute-bound time)."""
    kern = graph.node_kind == Kind.KERNEL
    low = info.has_precision(*K.LOW_PRECISIONS)
    unknown = info.has_precision("unknown")
    comp = kern & info.is_bound("compute")
    known = comp & ~unknown
    t_low = int(graph.dur_ns[known & low].sum())
    t_all = int(graph.dur_ns[known].sum())
    share = t_low / t_all if t_all > 0 else 0.0
    floaty = info.has_precision("fp32", "tf32") | unknown  # no precision in the name: the fp32 default
    eligible = kern & ~info.is_class("optimizer", "communication", "other")
    opt = mapped_phase(graph, "optimizer")
    if opt is not None:  # the optimizer step (loop-style SGD's per-parameter add_/mul_, zero_grad's fills): fp32 master weights
        eligible &= ~opt
    c32 = eligible & comp & floaty & ~info.has_precision("tf32")
    ctf = eligible & comp & info.has_precision("tf32")
    mem = eligible & info.is_bound("memory") & floaty
    already = int(np.count_nonzero(eligible & info.is_bound("compute", "memory") & low))
    return c32, ctf, mem, already, share


def _apply_paper(graph, p):
    info = K.kernel_info(graph)
    if not np.any(graph.node_kind == Kind.KERNEL):
        raise NotApplicable("the trace has no GPU kernels")
    c32, ctf, mem, already, share = _targets(graph, info)
    if share > HALF_SHARE:
        raise NotApplicable(f"the trace already runs in half precision ({share:.0%} of the GEMM/convolution/attention time "
                            f"of known precision is fp16/bf16/fp8)")
    n = int(np.count_nonzero(c32 | ctf | mem))
    if n == 0:
        if already:
            raise NotApplicable(f"the trace already runs in half precision ({already:,} half/fp8 kernels, none in fp32)")
        raise NotApplicable("no compute- or memory-bound fp32 kernel in the trace")
    g = scale(graph, c32, p["compute_factor"])
    g = scale(g, ctf, p["tf32_factor"])
    g = scale(g, mem, p["memory_factor"])
    before = int(graph.dur_ns[c32 | ctf | mem].sum())
    after = int(g.dur_ns[c32 | ctf | mem].sum())
    note = (f"{int(c32.sum()):,} fp32 compute-bound kernels x{p['compute_factor']:.3g}, {int(ctf.sum()):,} TF32 x{p['tf32_factor']:.3g}, "
            f"{int(mem.sum()):,} memory-bound x{p['memory_factor']:.3g} (GPU time {before / 1e6:,.3f} -> {after / 1e6:,.3f} ms)")
    if already:
        note += f"; {already:,} kernels already half/fp8 left as they are"
    return g, note


#: Tensor-Core efficiency relative to a CUDA-core SGEMM (:data:`._kernel_model.TC_EFFICIENCY`,
#: shared with gpu-upgrade's fp32 -> TF32 convolutions)
TC_EFFICIENCY = KM.TC_EFFICIENCY


def _path_factor(gpu, path: str, eff: float) -> float:
    """Duration multiplier of a compute-bound kernel moved from ``path`` (fp32 / tf32) to 16-bit Tensor
    Cores on ``gpu``: path peak / (half peak x efficiency), the efficiency only when the path is
    NVIDIA's CUDA-core fp32 (TF32 and AMD's FP32 matrix path are matrix units already); at most 1."""
    peak = gpu.peak_tflops(path)
    cuda_core = path == "fp32" or (path == "tf32" and gpu.tf32_tflops == 0)  # no TF32 (Volta): fp32 on CUDA cores
    e = eff if (cuda_core and gpu.vendor == "nvidia") else 1.0
    return min(1.0, peak / (gpu.tc_tflops * e))


def _path_times(graph, info, mask) -> dict[str, float]:
    """GPU time (ms) per precision path over ``mask``."""
    out = {}
    for code, name in enumerate(K.PRECISIONS):
        m = mask & (info.precision == code)
        if m.any():
            out[name] = float(graph.dur_ns[m].sum()) / 1e6
    return out


def _apply_gpu(graph, p, gpu):
    """The per-GPU model: fp32/TF32 compute-bound kernels by the path factor, capped by the roofline of
    the launching op's shapes; memory-bound kernels outside the autocast fp32 list by memory_factor."""
    info = K.kernel_info(graph)
    c32, ctf, mem, already, share = _targets(graph, info)
    if share > HALF_SHARE:
        raise NotApplicable(f"the trace already runs in half precision ({share:.0%} of the GEMM/convolution/attention time "
                            f"of known precision is fp16/bf16/fp8)")
    if p["tf32"] == "on":  # the baseline ran fp32 GEMMs as TF32: unnamed-precision GEMMs are TF32
        unk = c32 & info.has_precision("unknown")
        c32, ctf = c32 & ~unk, ctf | unk
    now = KM.path_overrides(graph)  # paths an earlier optimization set
    c32, ctf = c32 & (now == ""), ctf | ((c32 | ctf) & (now == "tf32"))
    mem = mem & (now != "half")
    mem = mem & ~name_mask(graph, AUTOCAST_FP32_KERNELS, mem)
    if not (c32 | ctf | mem).any():
        raise NotApplicable("no compute- or memory-bound fp32 kernel in the trace" if not already
                            else f"the trace already runs in half precision ({already:,} half/fp8 kernels, none in fp32)")
    f32, ftf = _path_factor(gpu, "fp32", p["tc_efficiency"]), _path_factor(gpu, "tf32", p["tc_efficiency"])
    factor = np.ones(graph.n)
    factor[c32], factor[ctf], factor[mem] = f32, ftf, p["memory_factor"]
    cap = _roofline_cap(graph, gpu, factor.copy(), c32 | ctf)
    sel = c32 | ctf | mem
    floor = KM.kernel_floor_ns(gpu, graph) if p["floor_ns"] < 0 else int(p["floor_ns"])
    g = set_duration(graph, sel, floored_durations(graph.dur_ns[sel], factor[sel], cap[sel], floor))
    kern = graph.node_kind == Kind.KERNEL
    unk = sel & info.has_precision("unknown")  # no precision in the name: taken as fp32, and changed as such
    before, after = _path_times(graph, info, kern & ~unk), _path_times(g, info, kern & ~sel)
    if unk.any():
        before["unknown precision (taken as fp32)"] = float(graph.dur_ns[unk].sum()) / 1e6
    moved = float(g.dur_ns[c32 | ctf].sum()) / 1e6
    after[p["dtype"]] = after.get("half", 0.0) + moved
    after.pop("half", None)
    after["fp32 (memory-bound, halved bytes)"] = float(g.dur_ns[mem].sum()) / 1e6
    fmt = lambda d: ", ".join(f"{k} {v:.3f}" for k, v in d.items())  # noqa: E731
    why = f", {p['dtype_why']}" if p.get("dtype_why") else ""
    nv = gpu.vendor == "nvidia"  # the efficiency applies off NVIDIA's CUDA cores only (_path_factor)
    eff = f", efficiency {p['tc_efficiency']:g}" if nv else ""
    note = (f"{gpu.name} model ({p['dtype']}{why}): {int(c32.sum()):,} fp32 {'CUDA-core' if nv else 'matrix-core'} compute kernels "
            f"x{f32:.4g}, {int(ctf.sum()):,} TF32 x{ftf:.4g} (peaks {gpu.peak_tflops('fp32'):g}/{gpu.peak_tflops('tf32'):g} -> "
            f"{gpu.tc_tflops:g} TFLOPS{eff}), {int(mem.sum()):,} memory-bound x{p['memory_factor']:g}, above a kernel floor of "
            f"{floor / 1e3:,.3f} us ({int((graph.dur_ns[sel] <= floor).sum()):,} kernels at or below the floor left as they are); GPU ms per path "
            f"before: {fmt(before)}; after: {fmt(after)}")
    if already:
        note += f"; {already:,} kernels already half/fp8 left as they are"
    if p["casts"] == "on":
        g, words = _add_casts(graph, g, gpu, c32 | ctf, p)
        note += "; " + words
    return KM.with_paths(g, c32 | ctf, "half"), note


def _apply_library(graph, p, gpu):
    """The kernel-cost library's model (``amp:model=library``, the default; docs/optimizations.md):
    each kernel autocast runs in 16-bit (:func:`.autocast.autocast_precision`) that the library can
    describe (:mod:`.kernel_cost`) re-timed by ``predict_cross`` at ``dtype`` on the GPU, with its
    range; 16-bit compute kernels it cannot describe (no op shapes) by the per-GPU path factors
    (:func:`_path_factor`, above the kernel floor); then the time effects autocast adds (weight
    casts; for fp16, GradScaler's kernels). Returns (graph, note)."""
    info = K.kernel_info(graph)
    c32, ctf, mem, already, share = _targets(graph, info)
    if share > HALF_SHARE:
        raise NotApplicable(f"the trace already runs in half precision ({share:.0%} of the GEMM/convolution/attention time "
                            f"of known precision is fp16/bf16/fp8)")
    if p["tf32"] == "on":
        unk = c32 & info.has_precision("unknown")
        c32, ctf = c32 & ~unk, ctf | unk
    kern = graph.node_kind == Kind.KERNEL
    row = KM.match_launches(graph, graph.facts.launch) if graph.facts is not None else np.full(graph.n, -1, np.int64)
    opt = kern & info.is_class("optimizer")
    ph = mapped_phase(graph, "optimizer")
    if ph is not None:
        opt |= kern & ph
    low, how = autocast_precision(graph, info, row, opt)
    spec = from_table(gpu)
    d = KC.describe(graph, spec, row, KM.work_item_grid(graph))
    described = np.zeros(graph.n, bool)
    described[d.nodes] = True
    _, _, _, prec_now, _ = KC.anchors(graph, d.nodes, graph.dur_ns[d.nodes], spec)
    now = np.full(graph.n, "", dtype=object)
    now[d.nodes] = prec_now
    now = np.where(now == "", KM.path_overrides(graph), now)  # the factor model's paths ("half", "tf32")
    is_low = np.isin(now, ("half", "fp16", "bf16"))
    c32, ctf = c32 & ~np.isin(now, ("tf32",)), ctf | ((c32 | ctf) & (now == "tf32"))  # gpu-upgrade's TF32 convolutions
    comp = (c32 | ctf) & low & ~is_low
    memk = mem & low & ~is_low
    fp32_kept = int((mem & ~low).sum())
    if p["dtype"] == "fp32":  # autocast off: every kernel at the precision it runs at (the identity)
        comp[:], memk[:] = False, False
    elif not (comp | memk).any():
        raise NotApplicable("no compute- or memory-bound fp32 kernel in the trace" if not already
                            else f"the trace already runs in half precision ({already:,} half/fp8 kernels, none in fp32)")
    lib = (comp | memk) & described
    g = graph
    t_lib_before = float(graph.dur_ns[lib].sum())
    if lib.any():
        sel = lib[d.nodes]
        sub = KC.Described(d.nodes[sel], d.kernels.take(sel), d.inferred[sel], d.counts)
        g, pred, dur = KC.retime(graph, g, sub, spec, spec, np.full(int(sel.sum()), p["dtype"], dtype=object))
    rest = comp & ~described  # compute kernels without the op's shapes: the per-GPU path factors
    words = [f"{gpu.name} through the kernel-cost library ({p['dtype']}{', ' + p['dtype_why'] if p.get('dtype_why') else ''}): "
             f"{int(lib.sum()):,} kernels autocast runs in 16-bit re-timed by predict_cross, {t_lib_before / 1e6:,.3f} -> "
             f"{float(g.dur_ns[lib].sum()) / 1e6:,.3f} ms ({int((lib & comp).sum()):,} compute, {int((lib & memk).sum()):,} "
             f"memory-bound; {int((d.inferred & lib[d.nodes]).sum()):,} of them with bytes inferred from their measured time)"]
    if rest.any():
        r32, rtf = rest & c32, rest & ctf
        factor = np.ones(graph.n)
        factor[r32] = _path_factor(gpu, "fp32", p["tc_efficiency"])
        factor[rtf] = _path_factor(gpu, "tf32", p["tc_efficiency"])
        floor = KM.kernel_floor_ns(gpu, graph) if p["floor_ns"] < 0 else int(p["floor_ns"])
        before = float(g.dur_ns[rest].sum())
        g = set_duration(g, rest, floored_durations(g.dur_ns[rest], factor[rest], factor[rest], floor))
        words.append(f"{int(rest.sum()):,} 16-bit compute kernels without the op's shapes by the per-GPU path factors "
                     f"(fp32 x{_path_factor(gpu, 'fp32', p['tc_efficiency']):.4g}, TF32 x{_path_factor(gpu, 'tf32', p['tc_efficiency']):.4g} "
                     f"above a floor of {floor / 1e3:,.3f} us): {before / 1e6:,.3f} -> {float(g.dur_ns[rest].sum()) / 1e6:,.3f} ms")
    words.append(f"autocast's op lists (PyTorch {AUTOCAST_PYTORCH_VERSION}): {how['by op']:,} kernels by their launching op, "
                 f"{how['by kernel name']:,} by kernel name, {how['by input (rule 3)']:,} ops on neither list at their inputs' type; "
                 f"{fp32_kept:,} memory-bound kernels kept fp32")
    if already:
        words.append(f"{already:,} kernels already half/fp8 left as they are")
    g = KM.with_paths(g, comp, "half")
    if p["casts"] == "on" and p["dtype"] != "fp32":
        g, more = _add_casts(graph, g, gpu, comp, p, scaler=False)
        words.append(more)
        if p["dtype"] == "fp16":
            g, more = _scaler(graph, g, gpu, spec, comp, opt, p)
            words.append(more)
    return g, "; ".join(words)


def _scaler(graph, g, gpu, spec, comp, opt, p):
    """GradScaler's kernels for fp16 (:mod:`.grad_scaler`), sized by the forward GEMM/convolution
    weights with recorded shapes (``_forward_casts``: a lower bound where an op recorded none)."""
    if not opt.any():
        return g, "fp16 loss scaling not placed (no optimizer kernels: inference)"
    _, wbytes, why = _forward_casts(graph, gpu, comp, KM.kernel_floor_ns(gpu, graph))
    steps = max(len(graph.facts.steps) if graph.facts is not None else 0, 1)
    if wbytes.sum() <= 0:
        return g, f"fp16 loss scaling not placed (gradient bytes unknown: {why or 'no weight shapes'})"
    return insert_scaler(graph, g, opt, spec, float(wbytes.sum()) / steps, median_launch_ns(graph))


def floored_durations(dur: np.ndarray, factor: np.ndarray, cap: np.ndarray, floor: int) -> np.ndarray:
    """New durations (ns, int64, shape of ``dur``) of kernels whose work part scales by ``factor``.

    A kernel's time is a fixed part, the GPU's kernel floor (launch ramp-up, block scheduling, memory
    latency: :func:`._kernel_model.kernel_floor_ns`, measured per GPU), and a work part that scales
    with the FLOPs or bytes it processes, the decomposition gpu-upgrade's per-kernel model uses
    (``docs/optimizations.md``): ``floor + (t - floor) x factor`` for ``t > floor``, ``t`` otherwise
    (a kernel at the floor does not get faster with fewer bytes). ``cap`` (>= ``factor``) is the
    roofline's lower bound on ``new / t`` where the launching op's shapes give one."""
    dur = np.asarray(dur, np.int64)
    lin = floor + (dur - floor) * factor
    new = np.where(dur > floor, np.maximum(lin, cap * dur), dur)
    return np.rint(new).astype(np.int64)


def _roofline_cap(graph, gpu, factor, comp):
    """Where the launching op's FLOPs and bytes are recorded, a compute kernel cannot become faster than
    its 16-bit roofline allows: factor >= max(F / P_half, B / 2 / W) / recorded time."""
    data = graph.facts.launch if comp.any() else None
    if data is None or not len(data):
        return factor
    row = KM.match_launches(graph, data)
    m = comp & (row >= 0)
    r = row[m]
    ok = (data.flops[r] >= 0) & (data.bytes[r] > 0)
    idx = np.nonzero(m)[0][ok]
    r = r[ok]
    t16 = np.maximum(data.flops[r] / (gpu.tc_tflops * 1e12), data.bytes[r] / 2 / (gpu.mem_gbps * 1e9)) * 1e9
    floor = np.minimum(t16 / np.maximum(graph.dur_ns[idx], 1), 1.0)
    factor[idx] = np.maximum(factor[idx], floor)
    return factor


def _forward_casts(graph, gpu, sel, floor_ns: int) -> tuple[np.ndarray, np.ndarray, str]:
    """Autocast's weight casts: before each forward GEMM/convolution op on the lower-precision list
    whose last operand (the weight) was recorded fp32, a cast kernel reads it (4 B/element) and writes
    it in 16-bit (2 B): floor + 1.5 x weight bytes / bandwidth (ns), on the op's first compute kernel
    (one per op: ops that launched several kernels had none, 168 of ResNet-50's 324 convolutions and
    linears over 6 steps). Returns (cast ns per node, weight bytes per node, why none where none)."""
    cast = np.zeros(graph.n)
    wbytes = np.zeros(graph.n)
    fwd = mapped_phase(graph, "forward")
    if fwd is None:
        return cast, wbytes, "no forward/backward mapping"
    data = graph.facts.launch
    if not len(data):
        return cast, wbytes, data.reason or "no launch records"
    row = KM.match_launches(graph, data)
    m = sel & fwd & (row >= 0)
    r = row[m]
    low = np.fromiter((data.op[i].removeprefix("aten::") in AUTOCAST_LOW_OPS for i in r.tolist()), bool, len(r))
    ok = low & (data.last_elem[r] == 4) & (data.last_bytes[r] > 0)
    idx = np.nonzero(m)[0][ok]
    ext = graph.facts.external_id[graph.row[idx]]  # one cast per op, before its first GEMM kernel (an op may launch several)
    first = np.ones(len(idx), bool)
    has = ext >= 0
    if has.any():
        o = np.lexsort((graph.position_ns[idx[has]], ext[has]))
        e_sorted = ext[has][o]
        keep = np.concatenate([[True], e_sorted[1:] != e_sorted[:-1]])
        f = np.zeros(int(has.sum()), bool)
        f[o[keep]] = True
        first[has] = f
    idx = idx[first]
    wbytes[idx] = data.last_bytes[r[ok]]
    cast[idx] = floor_ns + 1.5 * wbytes[idx] / (gpu.mem_gbps * 1e9) * 1e9
    return cast, wbytes, "" if len(idx) else "no forward GEMM with recorded fp32 weight shapes"


def _add_casts(graph, g, gpu, sel, p, scaler: bool = True):
    """Fold the cast kernels into their GEMMs (same stream, back to back) and their launch calls into the
    GEMMs' launch calls; for fp16, GradScaler's per-step unscale + inf check (reads and writes every fp32
    gradient: 2 x weight bytes per step, plus one tiny update-scale kernel) into the optimizer kernels."""
    floor = KM.kernel_floor_ns(gpu, graph)
    cast, wbytes, why = _forward_casts(graph, gpu, sel, floor)
    words = []
    has = cast > 0
    if has.any():
        g = set_duration(g, has, np.rint(g.dur_ns[has] + cast[has]).astype(np.int64))
        calls = graph.launch[has]
        calls = calls[calls >= 0]
        g = set_duration(g, np.isin(np.arange(g.n), calls), g.dur_ns[sorted_unique(calls)] + median_launch_ns(graph))
        words.append(f"{int(has.sum()):,} cast kernels (fp32 weights -> {p['dtype']}, {wbytes.sum() / 1e6:,.1f} MB) folded into "
                     f"their GEMMs: +{cast.sum() / 1e6:,.3f} ms GPU")
    else:
        words.append(f"cast kernels not placed ({why})")
    if p["dtype"] == "fp16" and scaler:
        opt = (graph.node_kind == Kind.KERNEL) & K.kernel_info(graph).is_class("optimizer")
        ph = mapped_phase(graph, "optimizer")
        if ph is not None:
            opt |= (graph.node_kind == Kind.KERNEL) & ph
        if opt.any() and wbytes.sum() > 0:
            steps = max(len(graph.facts.steps), 1)
            extra = steps * 2 * floor + 2 * wbytes.sum() / (gpu.mem_gbps * 1e9) * 1e9
            share = graph.dur_ns[opt] / max(graph.dur_ns[opt].sum(), 1)
            g = set_duration(g, opt, np.rint(g.dur_ns[opt] + extra * share).astype(np.int64))
            words.append(f"fp16 loss scaling ({steps} step(s)): +{extra / 1e6:,.3f} ms on the optimizer kernels")
        else:
            words.append("fp16 loss scaling not placed (" + ("no optimizer kernels: inference" if not opt.any() else "no weight shapes") + ")")
    return g, "; ".join(words)


#: the parameters of one model only, at their defaults (:func:`_check_model_params`)
PAPER_ONLY = {"compute_factor": 1 / 3, "tf32_factor": 0.5}
GPU_ONLY = {"dtype": "auto", "tf32": "auto", "gpu": "", "casts": "on", "floor_ns": -1.0, "tc_efficiency": None}


def _check_model_params(p: dict, model: str) -> None:
    """Refuse a parameter the model in use does not read, given another value than its default
    (it would be ignored). Raises UsageError."""
    other = GPU_ONLY if model == "paper" else PAPER_ONLY if model == "gpu" else {**PAPER_ONLY, "memory_factor": 0.5}
    given = [k for k, d in other.items() if p.get(k, d) != (TC_EFFICIENCY if k == "tc_efficiency" else d)]
    if given:
        raise UsageError(f"--opt amp: {', '.join(given)} {'is' if len(given) == 1 else 'are'} not read by amp:model={model} "
                         + ("(the per-GPU model takes its factors from the GPU table; compute_factor and tf32_factor are the "
                            "paper model's: give amp:model=paper)" if model == "gpu" else
                            "(the library model times each kernel at its 16-bit bytes and Tensor-Core peak; the factors are "
                            "the paper model's or, memory_factor, the per-GPU model's: give amp:model=paper or model=gpu)"
                            if model == "library" else
                            "(the paper model reads compute_factor, tf32_factor and memory_factor only)"))


def _apply(graph, p):
    if not np.any(graph.node_kind == Kind.KERNEL):
        raise NotApplicable("the trace has no GPU kernels")
    if p["model"] == "paper":
        _check_model_params(p, "paper")
        return _apply_paper(graph, p)
    gpu, traced = source_gpu(graph, p["gpu"])
    if p["dtype"] == "fp32" and p["model"] != "library":
        raise UsageError("--opt amp: dtype=fp32 (autocast off, the identity) is read by amp:model=library only")
    if gpu is None and p["dtype"] == "fp32":  # autocast off: nothing changes, on any GPU
        return graph, "dtype=fp32: autocast off, every kernel at the precision it runs at (the identity)"
    if gpu is None:
        g, note = _apply_paper(graph, p)
        return g, note + " (paper model: the GPU is not in the table" + (f": {traced!r}" if traced else "") + "; give amp:gpu=NAME)"
    _check_model_params(p, p["model"])
    if p["tf32"] == "on" and not gpu.tf32_tflops:
        raise NotApplicable(f"the {gpu.name} has no TF32 Tensor Cores, so its fp32 GEMMs cannot have run as TF32; give amp:tf32=off "
                            "(or auto)")
    if p["model"] == "library":
        # time only; amp's memory effect (activations halved) plugs in here as its own function on
        # the returned graph, e.g. ``g, note = _apply_library(...); return _memory_effect(g, note, p)``
        return _apply_library(graph, _with_dtype(p, gpu), gpu)
    if p["dtype"] == "fp32":
        raise UsageError("--opt amp: dtype=fp32 (autocast off, the identity) is read by amp:model=library only")
    return _apply_gpu(graph, _with_dtype(p, gpu), gpu)


def _with_dtype(p: dict, gpu) -> dict:
    """``p`` with ``dtype`` resolved for ``gpu``: ``auto`` is bf16 where its Tensor Cores take bf16
    (``GPU.bf16``), else fp16 (with GradScaler's loss scaling). Raises NotApplicable for bf16 on a
    GPU without bf16 Tensor Cores (Volta: bf16 matmuls would not run on Tensor Cores at all)."""
    if p["dtype"] == "auto":
        return {**p, "dtype": "bf16" if gpu.bf16 else "fp16", "dtype_why": "" if gpu.bf16 else "auto: no bf16 Tensor Cores"}
    if p["dtype"] == "bf16" and not gpu.bf16:
        # torch.autocast("cuda", dtype=torch.bfloat16) raises "Current CUDA Device does not support bfloat16.
        # Please switch dtype to float16." where torch.cuda.is_bf16_supported() is False (torch/amp/autocast_mode.py);
        # where a PyTorch version reports emulated support (is_bf16_supported(including_emulation=True)), bf16 has no
        # Tensor-Core path on compute capability < 8.0 (bf16 Tensor Cores came with Ampere: NVIDIA A100 whitepaper)
        raise NotApplicable(f"the {gpu.name} has no bf16 Tensor Cores (compute capability < 8.0: torch.autocast refuses bf16 "
                            "there, 'Current CUDA Device does not support bfloat16'); give amp:dtype=fp16 (or auto)")
    return p


def _factor(v: float) -> bool:
    return 0 <= v <= 1


register(
    Optimization(
        name="amp",
        summary="automatic mixed precision: fp32/TF32 GEMM/conv/attention kernels by the GPU's peak ratio to 16-bit Tensor "
                "Cores, memory-bound kernels outside autocast's fp32 list 2x (amp:model=paper: the Daydream paper's 3x/2x)",
        apply=lambda graph, p: amp_memory(graph, *_apply(graph, p), AUTOCAST_LOW_OPS),  # memory: amp_memory.py
        params={
            "model": Param("library", "'library': the kernel-cost library (daydream/costmodel, docs/kernels.md) at the "
                           "16-bit type for the kernels it describes, the per-GPU factors for the rest, with a range; 'gpu': "
                           "factors from the GPU table per execution path; 'paper': the Daydream paper's constants below", str,
                           lambda v: v in ("library", "gpu", "paper"), "library, gpu or paper"),
            "dtype": Param("auto", "16-bit type autocast uses: bf16, fp16 (adds GradScaler's kernels), or auto = bf16 where "
                           "the GPU's Tensor Cores take it (Ampere / CDNA2 and later), else fp16 (V100); bf16 and fp16 have the "
                           "same Tensor-Core peak where both exist; fp32 (model=library only) = autocast off, the identity",
                           str, lambda v: v in ("auto", "bf16", "fp16", "fp32"), "auto, bf16, fp16 or fp32"),
            "tf32": Param("auto", "what the baseline's fp32 GEMMs ran as: auto = from kernel names (unnamed: fp32, PyTorch's "
                          "default allow_tf32=False for matmul), on = unnamed-precision GEMMs were TF32, off", str,
                          lambda v: v in ("auto", "on", "off"), "auto, on or off"),
            "gpu": Param("", "GPU of the trace; empty = from its device name (daydream/costmodel/gpus.py)", str,
                         lambda v: v == "" or find_gpu(v) is not None, "a GPU of daydream/costmodel/gpus.py, or empty"),
            "casts": Param("on", "add autocast's weight-cast kernels (forward GEMMs with recorded fp32 weights) and, for "
                           "fp16, GradScaler's loss-scaling work: on or off", str, lambda v: v in ("on", "off"), "on or off"),
            "floor_ns": Param(-1.0, "kernel floor (ns) that does not scale with precision: -1 = the GPU's measured floor "
                              "(_kernel_model.KERNEL_FLOOR_NS, else the trace's smallest kernel capped at the table's largest), "
                              "0 = scale whole kernels", float, lambda v: v == -1 or 0 <= v <= 1e9, "-1 or 0..1e9"),
            "tc_efficiency": Param(TC_EFFICIENCY, "Tensor-Core efficiency relative to CUDA-core SGEMM (assumption, see "
                                   "amp.TC_EFFICIENCY)", float, lambda v: 0 < v <= 1, "0 < x <= 1"),
            "compute_factor": Param(1 / 3, "duration multiplier of fp32 compute-bound kernels (GEMM, conv, attention); "
                                    "1/3 = the Daydream paper's AMP model (Tensor-Core kernels 3x faster)", float, _factor, "0..1"),
            "memory_factor": Param(0.5, "duration multiplier of fp32 memory-bound kernels; 1/2 = half the bytes moved "
                                   "(Daydream paper's AMP model)", float, _factor, "0..1"),
            "tf32_factor": Param(0.5, "duration multiplier of TF32 Tensor-Core kernels; 1/2 = dense FP16/TF32 Tensor-Core "
                                 "throughput ratio (NVIDIA A100 datasheet 312/156 TFLOPS, H100 SXM 989/495)", float, _factor, "0..1"),
        },
    )
)
