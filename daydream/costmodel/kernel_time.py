"""Per-kernel time on a GPU: the mechanisms, and the two prediction modes.

Times are in ns inside (NeuSight's CSVs are ms; :mod:`daydream.kernel_tool.neusight` converts).

Model time of ``n`` kernels on GPU ``g`` (:func:`model_time_ns`)::

    T = floor_g + max(T_compute, T_memory)
    T_compute = F_pad / (P_g,path · e_g,class · e_tile · u)          (GEMM, attention)
    T_memory  = bytes / (W_g · e_g,class · l2)                        (every class)

Mechanisms and their sources:

* **Work** ``F``, ``bytes`` from the op's shapes (:mod:`daydream.costmodel.work`). GEMMs compute
  whole tiles: ``F_pad = 2·B·⌈M/TM⌉·TM·⌈N/TN⌉·TN·K``.
* **Peak** ``P_g,path``: the datasheet's dense peak of the math path (fp32 CUDA cores, tf32, fp16/bf16
  Tensor Core or AMD MFMA, fp8) (:mod:`daydream.costmodel.specs`, :mod:`daydream.gpus`); ``W_g``
  the datasheet's DRAM bandwidth.
* **Waves** ``u``: a grid of ``b`` blocks runs in ``waves = ⌈b / (SMs · r)⌉``, ``r`` the blocks
  resident per SM (CUDA Occupancy Calculator rules: threads, blocks, registers, shared memory per
  SM of the GPU, CUDA C++ Programming Guide "Compute Capabilities"); ``u = b / (waves · SMs · r)``
  is the used share of the GPU. GEMM grids are re-tiled on the target: ``b = B·⌈M/TM⌉·⌈N/TN⌉·splitK``.
  Persistent kernels (``persistent`` in the name, or a grid equal to the source's SM count that is
  not the shape's tiling ``B·⌈M/TM⌉·⌈N/TN⌉·splitK``) run one block per SM of the target: ``u = 1`` and their grid follows the target's SM count.
  Registers per thread of a cuBLAS SGEMM are not recorded by NeuSight: estimated as the tile's
  accumulators per thread plus :data:`SGEMM_EXTRA_REGS`, at most 255 (an assumption).
* **Tile efficiency** ``e_tile = I / (I + c_tile)``, ``I = TM·TN/(TM+TN)`` the tile's operand reuse
  (FLOPs per element loaded into shared memory per k-step is 2·I): small tiles load more per
  FLOP. ``c_tile`` is FITTED (:mod:`daydream.costmodel.fit`).
* **Efficiency** ``e_g,class``: the share of peak (compute) or bandwidth (memory) the library
  reaches, FITTED per development GPU and op class (the median over its rows,
  :mod:`daydream.costmodel.fit`). Another board of a fitted GPU's die (:data:`specs.CHIP`: A100
  SXM and 80 GB boards, GA100 like the A100 PCIe) takes that GPU's values at its point. A GPU
  without fitted values of its own or its die's takes the median over the development GPUs, and for memory classes scales it by the GPU's
  published DRAM utilization where the vendor gives one (:data:`DRAM_UTILIZATION`).
* **Power cap** (FP32 CUDA-core path of an NVIDIA GPU without fitted values): the achieved FP32
  rate is at most ``eta_node · TDP`` (board power from the datasheet, :data:`specs.BOARD_POWER_W`),
  ``eta_node`` (GFLOP/s per W) a property of the fabrication process (:data:`specs.PROCESS_NODE`:
  energy per operation is set by the transistors), FITTED per process as the largest rate per watt
  a development GPU of that process reaches (the least cap none of them contradicts). Low-power
  boards (T4: 70 W) do not sustain their boost clock under SGEMM. A GPU of a process no
  development GPU shares gets no cap at its point (an older process's ``eta`` is only a lower
  bound for a newer one); the slow end of its range takes the largest ``eta`` fitted.
* **L2**: a kernel whose bytes fit in the GPU's L2 (``l2_mib`` from the spec sheet / device_configs)
  streams at :data:`L2_BANDWIDTH_FACTOR` times DRAM bandwidth (``l2``; 1 otherwise).
* **Row re-reads** (layer norm, softmax): these kernels give each row to one block and read it
  more than once: layer norm twice (Welford moments, then normalize: ATen
  ``vectorized_layer_norm_kernel``), the block softmax three times (max, sum of exponentials,
  output: ATen ``cunn_SoftMaxForward``, used for rows longer than 1,024 elements; the warp softmax
  ``softmax_warp_forward`` keeps rows of up to 1,024 in registers and reads once). A re-read comes
  from L2 when the rows in flight, ``SMs · r · H · s`` bytes (``r`` resident blocks per SM, ``H``
  the row length), fit in L2; the share that does not fit comes from DRAM again:
  extra bytes ``R · s · E · (1 - min(1, L2 / in-flight))`` (:func:`reread_bytes`).
* **Floor**: the launch-overhead floor :data:`FLOOR_NS`, the smallest kernel time measured per GPU.

Cross-GPU mode (:func:`predict_cross`), anchored on the source's measured time ``t``::

    t_target = floor_t + max(t - floor_s, 0) · (T_t - floor_t) / (T_s - floor_s)

Shape mode (:func:`predict_shape`): the same with ``T`` of the new and the reference shape on one
GPU; :func:`predict_model` gives ``T`` alone (no anchor).

Uncertainty (:class:`Prediction`): ``low`` is the fast end (smallest time), ``high`` the slow
end; ``low <= point <= high``. Its sources per row, combined by taking the extremes:

* the other tiles the target's library has (:data:`TILE_CANDIDATES`) whose model time is within
  :data:`TILE_PLAUSIBLE` of the best one (cuBLAS's heuristic may pick any of them);
* for a target without fitted values: the fitted efficiencies' range over the development GPUs,
  and the power cap on and off;
* the spread of the development data: the 10th and 90th percentile of measured / predicted over
  the development pairs, per op class and mode (FITTED, ``spread``);
* cross-vendor (NVIDIA <-> AMD) and attention: ×[:data:`CROSS_LIBRARY_RANGE`] (other library).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._fitted import FITTED
from .specs import Spec, chip_of
from .work import GEMM_CLASSES, MEMORY_CLASSES, Kernels, dtype_bytes, flops_bytes, tiles_of

#: Smallest kernel time per GPU (ns), measured on real traces (daydream.costmodel.kernel_model
#: KERNEL_FLOOR_NS: H100 SXM 1,120; B200 1,984; MI250 GCD 2,240; MI300X the MI250's, measured on an
#: independent trace: the one MI300X trace at hand judges the model); other GPUs
#: :data:`DEFAULT_FLOOR_NS`, the middle of that measured range (an assumption).
FLOOR_NS: dict[str, float] = {"H100 SXM": 1120.0, "MI300X": 2240.0, "B200": 1984.0, "MI250 GCD": 2240.0}
DEFAULT_FLOOR_NS = 2000.0
#: Registers per thread of an SGEMM beyond its accumulators (addresses, A/B fragments, loop
#: state): an assumption that puts cuBLAS's 128x128 / 256-thread tile at ~104 registers (2 blocks
#: per SM on a 64K-register SM).
SGEMM_EXTRA_REGS = 40
#: L2 streaming bandwidth / DRAM bandwidth: V100 about 2,156 vs 750 GB/s measured (Jia et al.,
#: "Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking", 2018, section 3, memory
#: throughput table): ~2.9. Not fitted (no development row's bytes fit in L2) and not validated.
L2_BANDWIDTH_FACTOR = 2.9
#: Published DRAM utilization (a share of peak bandwidth reached by streaming code): NVIDIA Tesla
#: V100 GPU Architecture whitepaper (2017), HBM2 section: GV100 up to 95 %, GP100 76 %. Used only
#: for GPUs without fitted values (for memory-bound classes).
DRAM_UTILIZATION: dict[str, float] = {"P100 PCIe": 0.76, "V100 PCIe": 0.95, "V100 SXM2": 0.95}
#: cuBLAS FP32 GEMM tiles (TM, TN, threads) per kernel-name generation: those recorded in
#: ../shared/kernels/neusight (maxwell on P100, volta on V100/T4, ampere on A100). Later
#: generations (sm90, sm100) and AMD use Ampere's list (an assumption).
TILE_CANDIDATES: dict[str, tuple[tuple[int, int, int], ...]] = {
    "maxwell": ((128, 64, 128), (32, 128, 256), (64, 64, 64), (128, 128, 256)),
    "volta": ((128, 128, 256), (128, 64, 128), (128, 32, 256), (32, 128, 256), (64, 64, 64), (64, 32, 256)),
    "ampere": ((128, 128, 256), (128, 64, 128), (128, 32, 256), (32, 128, 256), (64, 64, 64), (64, 32, 256),
               (32, 32, 128)),
}
#: A candidate tile is plausible when its model time is within this factor of the best one (an assumption).
TILE_PLAUSIBLE = 1.25
#: Range factor when the target's library differs (cross-vendor, attention): docs/cross_gpu.md
#: measured H100 <-> MI300X GEMM errors of -8 % / -42 % and attention -72 % / +106 %.
CROSS_LIBRARY_RANGE = (0.5, 2.0)
#: Share of a Tensor-Core path's peak relative to the FP32 path's fitted share (daydream's
#: _kernel_model.TC_EFFICIENCY: one measured A100 fp32 -> bf16 pair gave 0.56); range 0.35-0.8
#: (an assumption).
TC_EFFICIENCY, TC_EFFICIENCY_RANGE = 0.5, (0.35, 0.8)


@dataclass
class Constants:
    """Fitted constants (:mod:`daydream.costmodel.fit`). ``eff[gpu][class]``: share of peak
    (GEMM) or bandwidth (memory classes); ``c_tile``: tile-efficiency constant; ``eta``: GFLOP/s
    per W per process node (power cap); ``spread[mode][class]``: (p10, p90) of measured/predicted; ``fitted_on``:
    the GPUs (table names)."""

    eff: dict
    c_tile: float
    eta: dict
    spread: dict
    fitted_on: tuple
    h_occ: float = 0.0  #: latency-hiding constant of :func:`wave_fill`
    tile_policy: str = "best"  #: GEMM tile on the target (:func:`predict_cross`)
    #: library generation -> op class -> (TM, TN, threads): the tile the fitted GPUs' library used most
    tiles: dict = field(default_factory=dict)

    def has(self, gpu: Spec) -> bool:
        return gpu.name in self.eff

    def default_eff(self, cls: str, gpu: Spec | None = None) -> tuple[float, float, float]:
        """(point, low-efficiency, high-efficiency) for a GPU without fitted values."""
        vals = np.array([e[cls] for e in self.eff.values() if cls in e], float)
        if not len(vals):
            return 0.7, 0.5, 0.9
        if cls in MEMORY_CLASSES and gpu is not None and gpu.name in DRAM_UTILIZATION:
            rel = np.array([e[cls] / e["elementwise"] for e in self.eff.values() if cls in e and "elementwise" in e])
            if len(rel):
                u = DRAM_UTILIZATION[gpu.name]  # the published figure sets the point; the range
                # spans it and the development GPUs' own range (the figure is approximate)
                return (float(u * np.median(rel)), float(min(u * rel.min(), vals.min())),
                        float(max(u * rel.max(), vals.max())))
        return float(np.median(vals)), float(vals.min()), float(vals.max())


def _load_default() -> Constants:
    return Constants(FITTED["eff"], FITTED["c_tile"], FITTED["eta"], FITTED["spread"], tuple(FITTED["fitted_on"]),
                     FITTED["h_occ"], FITTED["tile_policy"], FITTED.get("tiles", {}))


_DEFAULT: list = []


def default_constants() -> Constants:
    """The constants fitted on all development GPUs (``daydream/costmodel/_fitted.py``, written by
    ``scripts/kernel_fit.py``)."""
    if not _DEFAULT:
        _DEFAULT.append(_load_default())
    return _DEFAULT[0]


def floor_ns(gpu: Spec) -> float:
    """Launch-overhead floor of ``gpu`` (ns), :data:`FLOOR_NS`."""
    return FLOOR_NS.get(gpu.name, DEFAULT_FLOOR_NS)


def path_of(dtype: np.ndarray) -> np.ndarray:
    """Math path per storage precision: fp32 -> fp32 (CUDA cores), tf32, fp16/bf16 -> half, fp8."""
    m = {"fp32": "fp32", "tf32": "tf32", "fp16": "half", "bf16": "half", "half": "half", "fp8": "fp8"}
    return np.array([m.get(str(d), "fp32") for d in dtype], dtype=object)


def resident_blocks(gpu: Spec, threads: np.ndarray, regs: np.ndarray, smem: np.ndarray) -> np.ndarray:
    """Blocks resident per SM (CUDA Occupancy Calculator rules; -1 regs/smem = limit not applied)."""
    t = np.maximum(threads, 1).astype(np.int64)
    warp = 64 if gpu.vendor == "amd" else 32
    res = np.minimum(gpu.max_blocks_sm, gpu.max_threads_sm // t)
    rt = np.where(regs > 0, regs * (-(-t // warp) * warp), 0)
    res = np.where(rt > 0, np.minimum(res, gpu.regs_sm // np.maximum(rt, 1)), res)
    res = np.where(smem > 0, np.minimum(res, int(gpu.smem_kib_sm * 1024) // np.maximum(smem, 1)), res)
    return np.maximum(res, 1)


def wave_fill(gpu: Spec, blocks: np.ndarray, threads: np.ndarray, regs: np.ndarray, smem: np.ndarray,
              h: float = 0.0) -> np.ndarray:
    """``u`` (0..1]: the share of ``gpu``'s throughput a grid of ``blocks`` blocks uses; 1 where
    blocks <= 0 (unknown).

    The busiest SM gets ``j = ⌈blocks / SMs⌉`` blocks; ``r`` fit at once (:func:`resident_blocks`).
    ``x`` co-resident blocks keep an SM busy at ``φ(x) = x / (x + h)`` of its peak (latency hiding
    needs more than one block; ``h`` FITTED). The SM takes ``T(j) = j / φ(j)`` tile-times for
    ``j <= r``, else ``⌈j / r⌉ · r / φ(r)`` (rounds); a perfectly spread grid would take
    ``(blocks / SMs) / φ(r)``: ``u`` is their ratio. ``h = 0``: plain waves over SMs."""
    r = resident_blocks(gpu, threads, regs, smem).astype(np.float64)
    sms = max(gpu.sms, 1)
    b = np.maximum(blocks, 1).astype(np.float64)
    j = np.ceil(b / sms)
    phi = lambda x: x / (x + h)  # noqa: E731
    T = np.where(j <= r, j / phi(j), np.ceil(j / r) * r / phi(r))
    ideal = (b / sms) / phi(r)
    return np.where(blocks > 0, np.minimum(ideal / T, 1.0), 1.0)


def tile_efficiency(tm: np.ndarray, tn: np.ndarray, c_tile: float) -> np.ndarray:
    """``I / (I + c_tile)`` with ``I = TM·TN/(TM+TN)`` (module docstring)."""
    i = tm * tn / np.maximum(tm + tn, 1)
    return i / (i + c_tile)


@dataclass
class Geometry:
    """GEMM launch on one GPU: tile (n, 2), threads per block, blocks, split-K factor, persistent flag."""

    tile: np.ndarray
    threads: np.ndarray
    blocks: np.ndarray
    split: np.ndarray
    persistent: np.ndarray


def source_geometry(k: Kernels, gpu: Spec) -> Geometry:
    """The launch as recorded (tile from the name; grid and block when recorded, else derived)."""
    tile = tiles_of(k.name)
    rec = (k.grid[:, 0] > 0)
    blocks_rec = np.where(rec, np.prod(np.maximum(k.grid, 1), axis=1), -1)
    threads = np.where(k.block[:, 0] > 0, np.prod(np.maximum(k.block, 1), axis=1), 256)
    Bn = np.maximum(k.B, 1)
    gz = np.maximum(k.grid[:, 2], 1)
    split = np.where((k.cls == "linear") & rec, gz, np.where(rec & (gz % Bn == 0), gz // Bn, 1))
    split = np.maximum(split, 1)
    tiles = Bn * -(-np.maximum(k.M, 1) // tile[:, 0]) * -(-np.maximum(k.N, 1) // tile[:, 1]) * split
    blocks = np.where(rec, blocks_rec, tiles)
    names = np.asarray(k.name, dtype=str)
    pers = np.char.find(np.char.lower(names), "persistent") >= 0
    # a grid of the SM count is persistent unless it is the shape's own tiling (then it is a grid of
    # tiles that happens to fill the GPU once: found by the shape what-if's judge, issue 34)
    pers |= rec & (blocks_rec == gpu.sms) & (blocks_rec != tiles)
    return Geometry(tile, threads, blocks, split, pers)


def retile(k: Kernels, g: Geometry, tile: np.ndarray, threads: np.ndarray, gpu: Spec) -> Geometry:
    """The same GEMMs with ``tile``/``threads`` on ``gpu``: blocks = B·⌈M/TM⌉·⌈N/TN⌉·splitK;
    persistent kernels: one block per SM of ``gpu``."""
    Bn = np.maximum(k.B, 1)
    blocks = Bn * -(-np.maximum(k.M, 1) // tile[:, 0]) * -(-np.maximum(k.N, 1) // tile[:, 1]) * g.split
    blocks = np.where(g.persistent, gpu.sms, blocks)
    return Geometry(tile, threads, blocks, g.split, g.persistent)


def _regs(tile: np.ndarray, threads: np.ndarray) -> np.ndarray:
    return np.minimum(tile[:, 0] * tile[:, 1] // np.maximum(threads, 1) + SGEMM_EXTRA_REGS, 255)


def fitted_as(gpu: Spec, c: Constants) -> str | None:
    """The fitted GPU whose efficiencies ``gpu`` uses: itself, else a fitted board of the same die
    (:data:`specs.CHIP`: A100 SXM / 80 GB take the A100 PCIe's), else None."""
    if gpu.name in c.eff:
        return gpu.name
    if gpu.chip:
        for name in sorted(c.eff):
            if chip_of(name) == gpu.chip:
                return name
    return None


def _eff(gpu: Spec, cls: np.ndarray, c: Constants, which: str) -> np.ndarray:
    """Fitted efficiency per row (``which``: point, low (slow end: least efficiency), high)."""
    out = np.ones(len(cls))
    j = {"point": 0, "low": 1, "high": 2}[which]
    mate = fitted_as(gpu, c)
    for cl in np.unique(cls).tolist():
        m = cls == cl
        key = "linear" if cl in ("attention", "other") else cl
        if mate is not None and key in c.eff[mate] and (which == "point" or mate == gpu.name):
            out[m] = c.eff[mate][key]
        elif mate is not None and key in c.eff[mate]:  # same die, another board: its value and the spread
            d = c.default_eff(key, gpu)
            out[m] = min(d[1], c.eff[mate][key]) if which == "low" else max(d[2], c.eff[mate][key])
        else:
            out[m] = c.default_eff(key, gpu)[j]
    return out


#: Extra row reads of multi-pass kernels beyond the first (module docstring, "Row re-reads").
REREADS = {"ln": 1, "softmax_block": 2, "softmax_warp": 0}
#: Rows up to this many elements use ATen's warp softmax (PyTorch SoftMax.cu dispatch).
WARP_SOFTMAX_MAX = 1024


def reread_bytes(k: Kernels, gpu: Spec) -> np.ndarray:
    """DRAM bytes (shape (n,)) that layer-norm and softmax kernels read again (module docstring).
    For these classes ``B`` is the row count and ``elems / B`` the row length."""
    out = np.zeros(len(k))
    m = np.isin(k.cls, ("ln", "softmax"))
    if not m.any():
        return out
    s = dtype_bytes(k.dtype)
    rows = np.maximum(k.B, 1).astype(float)
    E = np.maximum(k.elems, 0).astype(float)
    H = E / rows
    names = np.char.lower(np.asarray(k.name, dtype=str))
    warp = (np.char.find(names, "softmax_warp") >= 0) | ((np.char.find(names, "cunn_softmax") < 0) & (H <= WARP_SOFTMAX_MAX))
    R = np.where(k.cls == "ln", REREADS["ln"], np.where(warp, REREADS["softmax_warp"], REREADS["softmax_block"]))
    threads = np.where(k.block[:, 0] > 0, np.prod(np.maximum(k.block, 1), axis=1),
                       np.where(k.cls == "ln", 128, 512))
    r = resident_blocks(gpu, threads, np.full(len(k), -1), np.full(len(k), -1))
    flight = gpu.sms * r * H * s
    hit = np.minimum(1.0, gpu.l2_mib * 2**20 / np.maximum(flight, 1.0))
    return np.where(m, R * s * E * (1 - hit), 0.0)


def power_cap_tflops(gpu: Spec, c: Constants, mode: str = "node") -> float:
    """FP32 rate cap of ``gpu`` (TFLOP/s; inf = none): ``eta · TDP`` with ``eta`` of its process
    (``mode`` ``node``), or the largest fitted ``eta`` where its process has none (``any``);
    ``off``: none. Only NVIDIA GPUs without fitted values with a known board power are capped."""
    if mode == "off" or c.has(gpu) or gpu.vendor != "nvidia" or gpu.tdp_w <= 0 or not c.eta:
        return np.inf
    eta = c.eta.get(gpu.process)
    if eta is None:
        if mode != "any":
            return np.inf
        eta = max(c.eta.values())
    return eta * gpu.tdp_w / 1000.0


def model_time_ns(k: Kernels, gpu: Spec, c: Constants | None = None, geom: Geometry | None = None,
                  which: str = "point", cap: str = "node", tc_eff: float = TC_EFFICIENCY) -> np.ndarray:
    """Model time ``T`` (ns, shape (n,)) of ``k`` on ``gpu`` (module docstring). ``geom``: the GEMM
    launch (default: :func:`source_geometry`); ``which``: efficiency end for GPUs without fitted
    values (``point``, ``low`` = least efficient, ``high``); ``cap``: power cap mode
    (:func:`power_cap_tflops`)."""
    c = c or default_constants()
    fl, by = flops_bytes(k)
    by = by + reread_bytes(k, gpu)
    cls = k.cls
    e = _eff(gpu, cls, c, which)
    path = path_of(k.dtype)
    peak = np.array([gpu.peak(p) for p in path.tolist()], float) if len(k) else np.zeros(0)
    eff_peak = peak * e
    tc = (path != "fp32") & (peak > gpu.peaks.get("fp32", gpu.fp32_tflops) * 1.01)
    eff_peak = np.where(tc, eff_peak * tc_eff, eff_peak)
    eff_peak = np.where(path == "fp32", np.minimum(eff_peak, power_cap_tflops(gpu, c, cap)), eff_peak)
    g = geom or source_geometry(k, gpu)
    gem = np.isin(cls, GEMM_CLASSES + ("attention",))
    u = wave_fill(gpu, g.blocks, g.threads, _regs(g.tile, g.threads), k.smem, c.h_occ)
    u = np.where(g.persistent, 1.0, u)
    et = tile_efficiency(g.tile[:, 0].astype(float), g.tile[:, 1].astype(float), c.c_tile)
    M, N = np.maximum(k.M, 1), np.maximum(k.N, 1)
    pad = (-(-M // g.tile[:, 0]) * g.tile[:, 0]) * (-(-N // g.tile[:, 1]) * g.tile[:, 1]) / (M * N)
    f_eff = np.where(gem & (cls != "attention"), fl * pad, fl)
    t_comp = np.where(gem, f_eff / np.maximum(eff_peak * 1e3 * et * u, 1e-9), 0.0)  # TFLOP/s * 1e3 = FLOP/ns
    bw = gpu.mem_gbps * np.where(gem, _eff(gpu, np.full(len(k), "elementwise", dtype=object), c, which), e)
    l2 = np.where(by <= gpu.l2_mib * 2**20, L2_BANDWIDTH_FACTOR, 1.0)
    t_mem = by / np.maximum(bw * l2, 1e-9)  # GB/s = B/ns
    return floor_ns(gpu) + np.maximum(t_comp, t_mem)


@dataclass
class Prediction:
    """Per-kernel prediction (ns, shape (n,)): ``low`` fast end <= ``point`` <= ``high`` slow end.
    ``reason``: why the range is wide (comma-separated codes: ``tiles`` other tiles plausible,
    ``unfitted`` target efficiency from other GPUs, ``library`` cross-vendor/attention, ``precision``
    another math path, ``spread`` development-data spread only)."""

    low: np.ndarray
    point: np.ndarray
    high: np.ndarray
    reason: np.ndarray

    def total(self) -> tuple[float, float, float]:
        """(low, point, high) of the sum: the ends add up (kernels on one GPU share its errors:
        comonotone, the widest honest range for a step)."""
        return float(self.low.sum()), float(self.point.sum()), float(self.high.sum())

    def __len__(self) -> int:
        return len(self.point)


def _anchor(t: np.ndarray, T_s: np.ndarray, f_s: float, T_t: np.ndarray, f_t: float) -> np.ndarray:
    return f_t + np.maximum(t - f_s, 0.0) * (T_t - f_t) / np.maximum(T_s - f_s, 1e-9)


def _candidates(k: Kernels, g: Geometry, gpu: Spec) -> list[Geometry]:
    fam = gpu.family if gpu.family in TILE_CANDIDATES else "ampere"
    out = []
    for tm, tn, th in TILE_CANDIDATES[fam]:
        tile = np.tile(np.array([[tm, tn]], np.int64), (len(k), 1))
        out.append(retile(k, g, tile, np.full(len(k), th, np.int64), gpu))
    return out


def predict_cross(k: Kernels, t_ns, src: Spec, tgt: Spec, precision: str | None = None,
                  c: Constants | None = None, tile_policy: str | None = None, ranges: bool = True) -> Prediction:
    """Time of kernels ``k`` measured at ``t_ns`` (ns, shape (n,)) on ``src``, on ``tgt`` at
    ``precision`` (None: as recorded; fp32, tf32, fp16, bf16, fp8; fp8 on a GPU without FP8 units
    is predicted as fp16, reason ``fp8-unsupported``).

    GEMMs: ``tile_policy`` ``same`` keeps the recorded tile (re-tiled grid on the target's SM
    count); ``best`` takes the target library's candidate with the least model time; ``fitted``
    takes the tile the development GPUs of the target's library generation used most for that op
    class (``c.tiles``), else ``best``; None: ``c.tile_policy``. ``ranges=False``: point only (low = high = point). Identity:
    ``src is tgt`` (or equal), same precision: returns ``t_ns`` exactly."""
    c = c or default_constants()
    tile_policy = tile_policy or c.tile_policy
    t = np.asarray(t_ns, dtype=np.float64)
    n = len(k)
    fp8_fallback = precision == "fp8" and not tgt.has_path("fp8")
    if fp8_fallback:  # no FP8 units: the program runs (and stores) 16-bit
        precision = "fp16"
    k_t = k if precision is None else k.with_dtype(precision)
    g_s = source_geometry(k, src)
    T_s = model_time_ns(k, src, c, g_s)
    f_s, f_t = floor_ns(src), floor_ns(tgt)
    gem = np.isin(k.cls, GEMM_CLASSES)
    same_gpu = src == tgt
    same_prec = precision is None or bool(np.all(k.dtype == k_t.dtype))
    if same_gpu and same_prec:
        z = np.full(n, "", dtype=object)
        return Prediction(t.copy(), t.copy(), t.copy(), z)
    g_same = retile(k, g_s, g_s.tile, g_s.threads, tgt) if not same_gpu else g_s
    T_same = model_time_ns(k_t, tgt, c, g_same)
    cands = _candidates(k, g_s, tgt) if gem.any() and (ranges or tile_policy != "same") else []
    Tc = np.array([model_time_ns(k_t, tgt, c, gc) for gc in cands]) if cands else np.zeros((0, n))
    T_point = T_same
    if tile_policy in ("best", "fitted") and len(Tc):
        T_point = np.where(gem, np.minimum(Tc.min(axis=0), T_same), T_same)
    if tile_policy == "fitted" and not same_gpu:
        T_point = _fitted_tiles(k, k_t, g_s, tgt, c, T_point)
    point = _anchor(t, T_s, f_s, T_point, f_t)
    lo, hi = point.copy(), point.copy()
    if not ranges:
        return Prediction(lo, point, hi, np.full(n, "", dtype=object))
    reason = [[] for _ in range(n)]
    if len(Tc):
        best = np.minimum(np.minimum(Tc.min(axis=0), T_same), T_point)
        ok = Tc <= TILE_PLAUSIBLE * best
        alt_lo = np.where(ok, Tc, np.inf).min(axis=0)
        alt_hi = np.where(ok, Tc, -np.inf).max(axis=0)
        a_lo, a_hi = _anchor(t, T_s, f_s, alt_lo, f_t), _anchor(t, T_s, f_s, alt_hi, f_t)
        wide = gem & ((a_lo < lo * 0.98) | (a_hi > hi * 1.02))
        lo = np.where(gem, np.minimum(lo, a_lo), lo)
        hi = np.where(gem, np.maximum(hi, a_hi), hi)
        for i in np.nonzero(wide)[0].tolist():
            reason[i].append("tiles")
    if not c.has(tgt):
        T_fast = model_time_ns(k_t, tgt, c, g_same, which="high", cap="off")
        T_slow = model_time_ns(k_t, tgt, c, g_same, which="low", cap="any")
        lo = np.minimum(lo, _anchor(t, T_s, f_s, T_fast, f_t))
        hi = np.maximum(hi, _anchor(t, T_s, f_s, T_slow, f_t))
        for r in reason:
            r.append("unfitted")
    if not same_prec:
        T_fast = model_time_ns(k_t, tgt, c, g_same, tc_eff=TC_EFFICIENCY_RANGE[1])
        T_slow = model_time_ns(k_t, tgt, c, g_same, tc_eff=TC_EFFICIENCY_RANGE[0])
        lo = np.minimum(lo, _anchor(t, T_s, f_s, T_fast, f_t))
        hi = np.maximum(hi, _anchor(t, T_s, f_s, T_slow, f_t))
        for r in reason:
            r.append("precision")
    if fp8_fallback:
        for r in reason:
            r.append("fp8-unsupported")
    lib = (k.cls == "attention") | (src.vendor != tgt.vendor)
    lo = np.where(lib, np.minimum(lo, point * CROSS_LIBRARY_RANGE[0]), lo)
    hi = np.where(lib, np.maximum(hi, point * CROSS_LIBRARY_RANGE[1]), hi)
    for i in np.nonzero(lib)[0].tolist():
        reason[i].append("library")
    lo, hi = _spread(k.cls, point, lo, hi, c.spread.get("cross", {}), reason)
    return Prediction(lo, point, hi, np.array([",".join(r) for r in reason], dtype=object))


def _fitted_tiles(k: Kernels, k_t: Kernels, g_s, tgt: Spec, c: Constants, T_point: np.ndarray) -> np.ndarray:
    """``T_point`` with the op classes for which the target's library generation has a preferred
    tile (``c.tiles``) re-timed at that tile."""
    n = len(k)
    for cl, (tm, tn, th) in c.tiles.get(tgt.family, {}).items():
        m = k.cls == cl
        if m.any():
            tile = np.tile(np.array([[tm, tn]], np.int64), (n, 1))
            T_f = model_time_ns(k_t, tgt, c, retile(k, g_s, tile, np.full(n, th, np.int64), tgt))
            T_point = np.where(m, T_f, T_point)
    return T_point


def _spread(cls, point, lo, hi, spread: dict, reason):
    for cl, (q_lo, q_hi) in spread.items():
        m = cls == cl
        lo = np.where(m, np.minimum(lo, point * min(q_lo, 1.0)), lo)
        hi = np.where(m, np.maximum(hi, point * max(q_hi, 1.0)), hi)
    for r in reason:
        if not r:
            r.append("spread")
    return lo, hi


def predict_shape(ref: Kernels, t_ref_ns, new: Kernels, gpu: Spec, c: Constants | None = None) -> Prediction:
    """Time on ``gpu`` of kernels ``new`` (shape (n,)) from measured rows ``ref`` (same length,
    row i the reference of new row i: same op class, another shape) at ``t_ref_ns`` (ns).
    ``new`` keeps ``ref``'s tile (re-tiled grid). Identity: ``new`` equal to ``ref`` returns
    ``t_ref_ns``."""
    c = c or default_constants()
    t = np.asarray(t_ref_ns, dtype=np.float64)
    g_r = source_geometry(ref, gpu)
    T_r = model_time_ns(ref, gpu, c, g_r)
    same = (ref.B == new.B) & (ref.M == new.M) & (ref.N == new.N) & (ref.K == new.K) & (ref.elems == new.elems) \
        & (ref.dtype == new.dtype) & (ref.cls == new.cls) & (ref.inputs == new.inputs)
    k2 = Kernels(**{**{f: getattr(new, f) for f in new.__dataclass_fields__}, "name": ref.name,
                    "grid": np.full((len(new), 3), -1, np.int64), "block": ref.block})
    g_n = retile(k2, g_r, g_r.tile, g_r.threads, gpu)
    T_n = model_time_ns(k2, gpu, c, g_n)
    f = floor_ns(gpu)
    point = np.where(same, t, _anchor(t, T_r, f, T_n, f))
    reason = [[] for _ in range(len(new))]
    lo, hi = point.copy(), point.copy()
    gem = np.isin(new.cls, GEMM_CLASSES) & ~same
    if gem.any():
        Tc = np.array([model_time_ns(k2, gpu, c, gc) for gc in _candidates(k2, g_n, gpu)])
        best = np.minimum(Tc.min(axis=0), T_n)
        ok = Tc <= TILE_PLAUSIBLE * best
        a_lo = _anchor(t, T_r, f, np.where(ok, Tc, np.inf).min(axis=0), f)
        a_hi = _anchor(t, T_r, f, np.where(ok, Tc, -np.inf).max(axis=0), f)
        lo, hi = np.where(gem, np.minimum(lo, a_lo), lo), np.where(gem, np.maximum(hi, a_hi), hi)
        for i in np.nonzero(gem)[0].tolist():
            reason[i].append("tiles")
    lo, hi = _spread(new.cls, point, lo, hi, c.spread.get("shape", {}), reason)
    lo, hi = np.where(same, t, lo), np.where(same, t, hi)
    return Prediction(lo, point, hi, np.array([",".join(r) if not s else "" for r, s in zip(reason, same.tolist())],
                                              dtype=object))


def predict_model(k: Kernels, gpu: Spec, c: Constants | None = None) -> np.ndarray:
    """Model time alone (ns, shape (n,)), no measured anchor: the fitted efficiency of ``gpu``
    (or the development GPUs' median)."""
    return model_time_ns(k, gpu, c)
