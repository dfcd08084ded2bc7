"""Per-kernel time on another GPU: the rules of ``gpu-upgrade`` (and the GPU facts ``amp`` uses).

A kernel's recorded time ``t`` on the source GPU is split into a fixed part, the smallest time any
kernel takes on that GPU (``floor``: launch ramp-up, block scheduling and drain, memory latency;
measured, see :data:`KERNEL_FLOOR_NS`), and a work part ``t - floor`` that scales with the
throughput the kernel can use::

    t_target = floor_target + max(t - floor_source, 0) * r

Rules, first match decides ``r`` (each kernel gets a rule code, :data:`RULES`, and a bound):

``unchanged``     CPU tasks, host/peer copies, communication kernels: r = 1, floor not changed.
``roofline``      shapes recorded (FLOPs F and bytes B of the launching op,
                  :mod:`daydream.formats.launch_data`): time ∝ max(F / (P·u), B / (W·u)) on each GPU,
                  with P the peak of the kernel's precision path (:meth:`daydream.costmodel.gpus.GPU.peak_tflops`),
                  W the DRAM bandwidth and u the fill (below); r = target / source. The larger term
                  is the kernel's bound on that GPU.
``waves``         launch configuration recorded, no shapes: r = (X_s · u_s) / (X_t · u_t), X the
                  path's peak for a compute-bound kernel, the bandwidth for a memory-bound one.
``peak``          neither: r = X_s / X_t (the datasheet ratio; u = 1 on both).
``unknown-bound`` class ``other`` (no name rule): the smaller of the compute and the memory speed-up
                  (a documented assumption; the note counts its GPU time).

Fill ``u`` (waves and occupancy): resident blocks per SM ``res`` from the occupancy limits
(threads, blocks, registers, shared memory per SM of the GPU; CUDA Occupancy Calculator rules),
capacity ``c = SMs · res``, ``waves = ceil(blocks / c)``, ``u = blocks / (waves · c)``: a grid
smaller than the GPU, or a last partial wave, leaves SMs idle. Kernels whose recorded time is
within ``LATENCY_MULT`` times the floor are reported as latency-bound (their time is mostly the
floor, which does not shrink on a faster GPU).

Limits: the same kernel (same launch configuration) is assumed on the target; libraries of another
vendor (cuBLAS vs hipBLASLt, flash-attention vs CK/Triton) choose different kernels, tiles and grids.
Caches (L2 residency), clocks under power limits and instruction mixes are not modelled.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import numpy as np

from ..util.arrays import few_distinct, sorted_unique
from ..graph import kernels as K
from ..events.table import CopyKind, Kind
from ..formats.launch_data import LaunchData, make_key
from .gpus import GPU
from ..transform import name_mask

#: Rule codes (index into this tuple).
RULES: tuple[str, ...] = ("unchanged", "roofline", "waves", "peak", "unknown-bound")
#: Smallest kernel time per GPU (ns): the minimum kernel duration measured on the real traces of
#: ``../shared/traces`` (SOURCES.md), the least over the traces of that GPU: H100 SXM 1,120
#: (tracelens h100 owlv2; the h100 bert-small trace: 1,600), B200 1,984 (tracelens b200_eager),
#: MI250 GCD 2,240 (hta mi250_minitoy). MI300X: 2,240, the MI250's (the CDNA generation before
#: it, measured on a trace independent of the MI300X bert-small trace, which is the only MI300X
#: trace at hand and judges the cross-GPU model: docs/cross_gpu.md; its own smallest kernel, 1,964,
#: was the value here before and is not used). The A100
#: and V100 traces there are recorded at 1 us resolution (minimums 4,000 and 1,000 ns), too coarse:
#: not listed. GPUs not listed use the source's floor (the smallest kernel of the trace).
KERNEL_FLOOR_NS: dict[str, int] = {"H100 SXM": 1_120, "MI300X": 2_240, "B200": 1_984, "MI250 GCD": 2_240}
#: kernels up to this many times the floor are reported as latency-bound
LATENCY_MULT = 2.0


def kernel_floor_ns(gpu: GPU, graph=None) -> int:
    """The floor of ``gpu``: :data:`KERNEL_FLOOR_NS`, else the smallest kernel time of ``graph`` (the
    trace's own GPU) capped at the largest floor of the table, else 0.

    The cap: a floor is what the smallest kernel costs on a GPU (launch ramp-up, block scheduling,
    memory latency), 1.1-2.2 us on the four GPUs measured. A trace whose smallest kernel is longer
    (e.g. three 123 us kernels on hta/cuda_event_sync_multi_stream) holds no kernel that small, and
    says nothing about the floor: taking its smallest kernel as the floor would make all of its
    time "floor" and predict a 100x speed-up on a faster GPU (found by a new user's try-out)."""
    if gpu.name in KERNEL_FLOOR_NS:
        return KERNEL_FLOOR_NS[gpu.name]
    if graph is not None:  # recorded times: a graph a prediction already changed (--opt amp --opt gpu-upgrade) keeps the trace's floor
        k = (graph.node_kind == Kind.KERNEL) & (graph.row >= 0)
        d = graph.rec_end_ns[k] - graph.rec_start_ns[k]
        d = d[d > 0]
        if len(d):
            return int(min(d.min(), max(KERNEL_FLOOR_NS.values())))
    return 0


def resident_blocks(gpu: GPU, threads: np.ndarray, regs: np.ndarray, smem: np.ndarray) -> np.ndarray:
    """Blocks of ``threads`` threads (``regs`` registers per thread, ``smem`` shared bytes per block;
    -1 unknown: that limit is not applied) resident on one SM of ``gpu``: the least of
    max_blocks_sm, max_threads_sm // threads, regs_sm // (regs · threads rounded up to a warp),
    smem_sm // smem; at least 1 (a launched block always fits one SM)."""
    t = np.maximum(threads, 1).astype(np.int64)
    res = np.minimum(gpu.max_blocks_sm, gpu.max_threads_sm // t)
    warp = 64 if gpu.vendor == "amd" else 32
    if gpu.regs_sm > 0:
        rt = np.where(regs > 0, regs * (-(-t // warp) * warp), 0)
        res = np.where(rt > 0, np.minimum(res, gpu.regs_sm // np.maximum(rt, 1)), res)
    if gpu.smem_kib_sm > 0:
        res = np.where(smem > 0, np.minimum(res, int(gpu.smem_kib_sm * 1024) // np.maximum(smem, 1)), res)
    return np.maximum(res, 1)


def fill(gpu: GPU, blocks: np.ndarray, threads: np.ndarray, regs: np.ndarray, smem: np.ndarray) -> np.ndarray:
    """Used fraction of ``gpu``'s block slots over the grid's waves (0..1]; 1 where blocks <= 0 (unknown)."""
    cap = resident_blocks(gpu, threads, regs, smem) * max(gpu.sms, 1)
    b = np.maximum(blocks, 1)
    waves = -(-b // cap)
    return np.where(blocks > 0, b / (waves * cap), 1.0)


@dataclass
class KernelPlan:
    """Per-node result (length ``graph.n``): rule code (255 = not a GPU task), factor ``r`` on the
    work part, new duration (ns), bound on source and target (index into kernels.BOUNDS, 255 none),
    whether it is latency-bound."""

    rule: np.ndarray
    factor: np.ndarray
    new_dur: np.ndarray
    bound_src: np.ndarray
    bound_tgt: np.ndarray
    latency: np.ndarray
    matched: int  #: GPU kernels matched to a launch record with a launch configuration (a grid)
    tf32_conv: int = 0  #: fp32 convolution kernels modelled on the target's TF32 path (:func:`tf32_convolutions`)
    tf32_mask: np.ndarray | None = None  #: those kernels (bool, shape (n,))


def path_of(info: K.KernelInfo, n: int, default_compute: str = "half") -> np.ndarray:
    """Execution path name per node for the peak lookup: fp8, half, tf32, fp32, fp32_vector."""
    prec = info.precision
    out = np.full(n, default_compute, dtype=object)
    code = K.PRECISION_CODE
    out[prec == code["fp8"]] = "fp8"
    out[prec == code["half"]] = "half"
    out[prec == code["tf32"]] = "tf32"
    out[prec == code["fp32"]] = "fp32"
    out[(prec == code["fp64"]) | (prec == code["int"])] = "fp32_vector"
    return out


#: Tensor-Core efficiency relative to a CUDA-core SGEMM: a kernel moved from CUDA-core fp32 to a
#: Tensor-Core path (``amp``: to 16-bit; ``gpu-upgrade``: an fp32 convolution to the target's TF32)
#: reaches this share of the peak ratio. An assumption, to be replaced by measured pairs: small
#: tiles, epilogues and launch keep Tensor-Core GEMMs further from their peak than SGEMM from its
#: own. The one measured pair at hand, issue 19's A100 SAM ViT-H fp32 -> bf16, ran 8.9x faster
#: where the peak ratio is 312 / 19.5 = 16x, i.e. 0.56. One value for both what-ifs, so that
#: ``gpu-upgrade`` then ``amp`` and ``amp`` then ``gpu-upgrade`` agree.
TC_EFFICIENCY = 0.5

#: Kernels of a convolution, by name (cuDNN, implicit GEMM, Winograd/FFT, wgrad/dgrad/fprop).
CONV_KERNELS = r"(?i)cudnn|conv|wgrad|dgrad|fprop|winograd|fft2d|implicit_?gemm"


def tf32_convolutions(graph, data: LaunchData, row: np.ndarray, comp: np.ndarray, path: np.ndarray,
                      src: GPU, tgt: GPU, mode: str = "auto") -> np.ndarray:
    """Nodes (bool, shape (n,)) whose fp32 convolution runs on the target's TF32 Tensor Cores.

    PyTorch lets cuDNN use TF32 for fp32 convolutions by default (``torch.backends.cudnn.allow_tf32
    = True`` since 1.7; matmuls default to ``allow_tf32 = False`` since 1.12: PyTorch docs, "TensorFloat-32
    (TF32) on Ampere (and later) devices"). A trace from a GPU without TF32 (V100) ran its convolutions
    on CUDA cores in fp32; on a target with TF32 (A100 and later) the same program runs them on TF32
    Tensor Cores, at :data:`TC_EFFICIENCY` of the TF32 peak relative to the CUDA-core one (as
    ``amp`` moves CUDA-core fp32 to 16-bit Tensor Cores). A trace from a GPU with TF32 whose
    convolution kernels are fp32 was run with
    ``allow_tf32`` turned off, and keeps fp32. On ROCm TF32 is opt-in (convolutions stay fp32 by
    default: PyTorch's ROCm TF32 flags), so ``auto`` leaves AMD targets alone. ``mode``: ``auto`` (the rule above), ``on``, ``off``.
    A convolution: a compute-bound fp32 kernel named as one (:data:`CONV_KERNELS`) or launched by
    an op whose name holds ``conv`` (launch data)."""
    n = graph.n
    if mode == "off" or (mode == "auto" and (src.tf32_tflops > 0 or tgt.tf32_tflops == 0 or tgt.vendor != "nvidia")):
        return np.zeros(n, bool)
    cand = comp & (path == "fp32")
    if not cand.any():
        return cand
    out = name_mask(graph, CONV_KERNELS, cand)
    if len(data) and data.op:
        ops = np.array(["conv" in o for o in data.op], bool)
        out |= cand & (row >= 0) & ops[np.maximum(row, 0)]
    return out


def path_overrides(graph) -> np.ndarray:
    """Per node (object, shape (n,)), the path an earlier optimization of the same prediction set
    (``TaskGraph.path_rows``: amp's 16-bit kernels, gpu-upgrade's TF32 convolutions), "" where none
    did, so that a composition counts each change once whatever its order."""
    out = np.full(graph.n, "", dtype=object)
    if graph.path_rows and len(graph.path_rows[0]):
        rows, names = graph.path_rows
        pos = np.searchsorted(rows, graph.row).clip(0, len(rows) - 1)
        hit = (graph.row >= 0) & (rows[pos] == graph.row)
        out[hit] = names[pos[hit]]
    return out


def paths_now(graph, path: np.ndarray) -> np.ndarray:
    """``path`` (per node, :func:`path_of`) with :func:`path_overrides` applied."""
    now = path_overrides(graph)
    return np.where(now != "", now, path)


def with_paths(g, mask: np.ndarray, name: str):
    """``g`` with the recorded tasks of ``mask`` (bool, shape (n,)) noted as now running on ``name``."""
    rows = g.row[mask & (g.row >= 0)].astype(np.int64)
    if not len(rows):
        return g
    old_rows, old_names = g.path_rows if g.path_rows else (np.zeros(0, np.int64), np.zeros(0, object))
    keep = ~np.isin(old_rows, rows)
    all_rows = np.concatenate([old_rows[keep], rows])
    all_names = np.concatenate([old_names[keep], np.full(len(rows), name, dtype=object)])
    o = np.argsort(all_rows, kind="stable")
    return dataclasses.replace(g, path_rows=(all_rows[o], all_names[o]))


def _peaks(gpu: GPU, path: np.ndarray) -> np.ndarray:
    """Peak TFLOP/s of ``gpu`` per task's math path (strings; a few distinct ones, found by
    equality passes rather than a sort of the strings)."""
    out = np.zeros(len(path))
    vals = few_distinct(path)
    for p in (vals if vals is not None else sorted_unique(path)).tolist():
        out[path == p] = gpu.peak_tflops(p)
    return out


#: HIP launch calls whose grid argument is the global work size in work-items, not a block count
#: (HIP API reference: ``hipExtModuleLaunchKernel(f, globalWorkSizeX, ..., localWorkSizeX, ...)``;
#: ``hipHccModuleLaunchKernel`` likewise). ROCm's Tensile GEMMs (``Cijk_*``) are launched this way:
#: the MI300X bert-small trace records grid 73,728 with block 256 for a 288-workgroup GEMM.
WORK_ITEM_LAUNCHES = re.compile(r"hipExtModuleLaunchKernel|hipHccModuleLaunchKernel")


def work_item_grid(graph) -> np.ndarray:
    """Nodes launched by a call of :data:`WORK_ITEM_LAUNCHES` (their recorded grid is in work-items)."""
    out = np.zeros(graph.n, dtype=bool)
    lch = graph.launch
    has = (graph.node_kind == Kind.KERNEL) & (lch >= 0)
    if not has.any():
        return out
    nid = graph.name_id[lch[has]]
    uniq, inv = np.unique(nid, return_inverse=True)
    hit = np.fromiter((WORK_ITEM_LAUNCHES.search(graph.names[int(i)]) is not None for i in uniq), bool, len(uniq))
    out[np.nonzero(has)[0]] = hit[inv.reshape(-1)]
    return out


def match_launches(graph, data: LaunchData) -> np.ndarray:
    """Row of ``data`` for each node (-1 none), by (device, correlation)."""
    out = np.full(graph.n, -1, dtype=np.int64)
    if len(data) == 0:
        return out
    kern = (graph.node_kind == Kind.KERNEL) & (graph.correlation >= 0)
    key = make_key(graph.device[kern], graph.correlation[kern])
    pos = np.searchsorted(data.key, key).clip(0, len(data) - 1)
    hit = data.key[pos] == key
    idx = np.nonzero(kern)[0]
    out[idx[hit]] = pos[hit]
    return out


def plan(graph, src: GPU, tgt: GPU, data: LaunchData, floor_src: int, floor_tgt: int, default_compute: str = "half",
         conv_tf32: str = "auto") -> KernelPlan:
    """Apply the rules to every GPU task of ``graph`` (see the module docstring); ``conv_tf32``:
    :func:`tf32_convolutions`'s mode."""
    n = graph.n
    info = K.kernel_info(graph)
    nk = graph.node_kind
    kern = nk == Kind.KERNEL
    dram = ((nk == Kind.MEMCPY) & (graph.copy_kind == CopyKind.DTOD)) | (nk == Kind.MEMSET)
    comp = kern & info.is_bound("compute")
    mem = (kern & info.is_bound("memory")) | dram
    unk = kern & info.is_bound("unknown")
    row = match_launches(graph, data)
    has = row >= 0
    r = np.maximum(row, 0)
    g = data.grid[r] if len(data) else np.full((n, 3), -1)
    b = data.block[r] if len(data) else np.full((n, 3), -1)
    g = np.where(work_item_grid(graph)[:, None] & (b > 0), -(-g // np.maximum(b, 1)), g)
    blocks = np.where(has & (g[:, 0] > 0), g.prod(axis=1), -1)
    threads = np.where(has & (b[:, 0] > 0), b.prod(axis=1), 1)
    regs = np.where(has, data.regs[r], -1) if len(data) else np.full(n, -1)
    smem = np.where(has, data.smem[r], -1) if len(data) else np.full(n, -1)
    u_s, u_t = fill(src, blocks, threads, regs, smem), fill(tgt, blocks, threads, regs, smem)
    path = paths_now(graph, path_of(info, n, default_compute))
    conv = tf32_convolutions(graph, data, row, comp, path, src, tgt, conv_tf32)
    path_t = np.where(conv, "tf32", path)
    p_s, p_t = _peaks(src, path), _peaks(tgt, path_t)
    p_t = np.where(conv, p_t * TC_EFFICIENCY, p_t)  # CUDA-core fp32 -> TF32 Tensor Cores (TC_EFFICIENCY)
    if tgt.vendor == "nvidia" and tgt.tf32_tflops == 0 and src.tf32_tflops > 0:  # TF32 Tensor Cores -> CUDA cores (Volta)
        p_s = np.where(path == "tf32", p_s * TC_EFFICIENCY, p_s)
    fc = (p_s * u_s) / (p_t * u_t)
    fm = (src.mem_gbps * u_s) / (tgt.mem_gbps * u_t)
    factor = np.ones(n)
    rule = np.full(n, 255, dtype=np.uint8)
    rule[nk != 0] = 0
    factor[comp] = fc[comp]
    factor[mem] = fm[mem]
    factor[unk] = np.maximum(fc, fm)[unk]
    rule[comp | mem] = np.where(blocks[comp | mem] > 0, 2, 3)
    rule[unk] = 4
    bs = np.full(n, 255, dtype=np.uint8)
    bs[comp] = K.BOUND_CODE["compute"]
    bs[mem] = K.BOUND_CODE["memory"]
    bs[unk] = K.BOUND_CODE["unknown"]
    bt = bs.copy()
    factor, rule, bs, bt = _roofline(data, r, has, comp | mem, (p_s, p_t, u_s, u_t), src, tgt, factor, rule, bs, bt)
    scaled = comp | mem | unk
    dur = graph.dur_ns.astype(np.float64)
    fixed = np.minimum(dur, floor_src)
    ratio = floor_tgt / floor_src if floor_src > 0 else 1.0
    new = dur.copy()
    new[scaled] = (fixed * ratio + (dur - fixed) * factor)[scaled]
    lat = scaled & (dur <= LATENCY_MULT * max(floor_src, 1))
    return KernelPlan(rule, factor, np.rint(new).astype(np.int64), bs, bt, lat, int(np.count_nonzero(has & kern & (blocks > 0))),
                      int(np.count_nonzero(conv)), conv)


def _roofline(data, r, has, sel, pu, src, tgt, factor, rule, bs, bt):
    """Kernels whose launching op has shapes: r from the roofline times on each GPU."""
    if not len(data):
        return factor, rule, bs, bt
    p_s, p_t, u_s, u_t = pu
    fl = np.where(has, data.flops[r], -1.0)
    by = np.where(has, data.bytes[r], -1.0)
    m = sel & (fl >= 0) & (by > 0)
    if not m.any():
        return factor, rule, bs, bt
    tc_s, tc_t = fl[m] / (p_s[m] * 1e12 * u_s[m]), fl[m] / (p_t[m] * 1e12 * u_t[m])
    tm_s, tm_t = by[m] / (src.mem_gbps * 1e9 * u_s[m]), by[m] / (tgt.mem_gbps * 1e9 * u_t[m])
    ts, tt = np.maximum(tc_s, tm_s), np.maximum(tc_t, tm_t)
    factor[m] = tt / ts
    rule[m] = 1
    bs[m] = np.where(tc_s >= tm_s, K.BOUND_CODE["compute"], K.BOUND_CODE["memory"])
    bt[m] = np.where(tc_t >= tm_t, K.BOUND_CODE["compute"], K.BOUND_CODE["memory"])
    return factor, rule, bs, bt


def coverage(graph, p: KernelPlan) -> dict[str, tuple[int, int]]:
    """GPU time (ns) and task count per rule, plus 'latency-bound' (a subset)."""
    out = {}
    gpu = graph.node_kind != 0
    info = K.kernel_info(graph)
    kern = graph.node_kind == Kind.KERNEL
    same = gpu & (p.rule == 0)
    why = {"unchanged (communication kernels)": same & kern & info.is_class("communication"),
           "unchanged (host/peer copies)": same & (graph.node_kind == Kind.MEMCPY)}
    why["unchanged (other)"] = same & ~why["unchanged (communication kernels)"] & ~why["unchanged (host/peer copies)"]
    for code, name in enumerate(RULES):
        parts = why.items() if code == 0 else [(name, gpu & (p.rule == code))]
        for label, m in parts:
            if m.any():
                out[label] = (int(graph.dur_ns[m].sum()), int(m.sum()))
    if p.latency.any():
        out["latency-bound"] = (int(graph.dur_ns[p.latency].sum()), int(p.latency.sum()))
    return out


def reasons(graph, p: KernelPlan, src: GPU, tgt: GPU) -> list[tuple[str, str, str, int, int, int]]:
    """Per distinct (kernel name, rule, bounds, latency flag): (name, class, reason, tasks, source ns,
    predicted ns), largest source time first. The reason names the rule, the bound on each GPU and
    whether the kernel is latency-bound. One entry per group, not per task (a few hundred at most)."""
    gpu = np.nonzero(graph.node_kind != 0)[0]
    if not len(gpu):
        return []
    info = K.kernel_info(graph)
    key = np.stack([graph.name_id[gpu].astype(np.int64), p.rule[gpu], p.bound_src[gpu], p.bound_tgt[gpu], p.latency[gpu]], axis=1)
    uniq, inv = np.unique(key, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    cnt = np.bincount(inv)
    ts = np.bincount(inv, weights=graph.dur_ns[gpu].astype(np.float64))
    tp = np.bincount(inv, weights=p.new_dur[gpu].astype(np.float64))
    first = np.full(len(uniq), len(gpu))
    np.minimum.at(first, inv, np.arange(len(gpu)))
    out = []
    for j in np.argsort(-ts).tolist():
        nid, rule, bs, bt, lat = (int(x) for x in uniq[j])
        node = int(gpu[first[j]])
        cls = K.CLASSES[int(info.cls[node])] if info.cls[node] != K.NONE else "-"
        bound = lambda b: K.BOUNDS[b] if b != 255 else "-"  # noqa: E731
        why = f"{RULES[rule]}: {bound(bs)}-bound on {src.name}, {bound(bt)}-bound on {tgt.name}" if rule else "unchanged (not a device kernel scaled by this model)"
        if lat:
            why += "; latency-bound (within 2x the floor)"
        out.append((graph.names[nid], cls, why, int(cnt[j]), int(ts[j]), int(tp[j])))
    return out
