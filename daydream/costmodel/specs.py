"""GPU specifications for the kernel-cost model: one :class:`Spec` per GPU.

A :class:`Spec` is built from, in order of preference:

1. :data:`EXTRA_GPUS` below: GPUs that :mod:`daydream.gpus` lacks (P100, T4, P4), each with the
   datasheet it comes from;
2. :func:`daydream.gpus.find_gpu`: the project's GPU table (datasheet peaks, SM counts, L2, per-SM
   occupancy limits, each entry with its source);
3. a NeuSight ``device_configs`` JSON file (``--gpu-config``): ``Device``, ``Mem_Bw`` (GB/s),
   ``Num_Sm``, ``Core_Per_SM``, ``Freq`` (MHz), ``SingleFLOPs`` (GFLOP/s), ``L2Cache`` (MB). Such a
   GPU has only a CUDA-core FP32 path unless it is also found in the tables above.

Board power (``tdp_w``, watts) is not in :mod:`daydream.gpus`; :data:`BOARD_POWER_W` gives it with
the datasheet line. It feeds the power cap of the FP32 CUDA-core path
(:mod:`daydream.costmodel.kernel_time`, ``power cap``).

Units: throughputs TFLOP/s (10^12), bandwidth GB/s (10^9 B/s), L2 MiB, clock MHz, power W.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .gpus import GPU, find_gpu, normalize

#: Kernel-library generation of an architecture: the prefix cuBLAS puts on its FP32 GEMM kernel
#: names (``maxwell_sgemm_*`` on Pascal, ``volta_sgemm_*`` on Volta and Turing, ``ampere_sgemm_*``
#: on Ampere and Ada: the kernel names recorded in ../shared/kernels/neusight for P100, V100, T4
#: and A100; cuBLAS 12 on Hopper names its kernels ``sm90_xmma_*``/``nvjet_*``).
FAMILY_OF_CC: dict[int, str] = {6: "maxwell", 7: "volta", 8: "ampere", 9: "sm90", 10: "sm100"}


@dataclass(frozen=True)
class Spec:
    """One GPU for the cost model (units in the module docstring).

    ``peaks``: dense peak TFLOP/s per math path (``fp32`` CUDA-core / FP32 GEMM path, ``tf32``,
    ``half`` (FP16/BF16 Tensor Core or AMD MFMA), ``fp8``); a missing path falls back as
    :meth:`daydream.gpus.GPU.peak_tflops` does. ``cc_major``: CUDA compute capability major (0: AMD
    or unknown). ``source``: where the numbers come from."""

    name: str
    vendor: str
    sms: int
    fp32_tflops: float
    mem_gbps: float
    l2_mib: float
    clock_mhz: float
    tdp_w: float
    cc_major: int
    peaks: dict = field(default_factory=dict)
    max_threads_sm: int = 2048
    max_blocks_sm: int = 32
    regs_sm: int = 65536
    smem_kib_sm: float = 96.0
    source: str = ""

    @property
    def chip(self) -> str:
        """GPU die (:data:`CHIP`), "" unknown."""
        return chip_of(self.name)

    @property
    def process(self) -> str:
        """Fabrication process (:data:`PROCESS_NODE`), "" unknown."""
        return process_of(self.name)

    def peak(self, path: str) -> float:
        """Dense peak (TFLOP/s) of ``path`` (fp32, tf32, half, fp8); falls back fp8 -> half,
        tf32 -> fp32, half -> fp32 where the GPU lacks the path (Pascal has no Tensor Cores)."""
        order = {"fp8": ("fp8", "half", "fp32"), "half": ("half", "fp32"), "bf16": ("half", "fp32"),
                 "fp16": ("half", "fp32"), "tf32": ("tf32", "fp32"), "fp32": ("fp32",)}[path]
        for p in order:
            v = self.peaks.get(p, 0.0)
            if v > 0:
                return v
        return self.fp32_tflops

    def has_path(self, path: str) -> bool:
        p = {"bf16": "half", "fp16": "half"}.get(path, path)
        return self.peaks.get(p, 0.0) > 0

    @property
    def family(self) -> str:
        """cuBLAS kernel-name generation (:data:`FAMILY_OF_CC`); ``rocm`` for AMD."""
        if self.vendor == "amd":
            return "rocm"
        return FAMILY_OF_CC.get(self.cc_major, "ampere")


#: Board power, W (the datasheet's "max power consumption" / TDP line).
BOARD_POWER_W: dict[str, tuple[float, str]] = {
    "P100 PCIe": (250, "NVIDIA Tesla P100 PCIe datasheet: 250 W"),
    "T4": (70, "NVIDIA T4 datasheet: 70 W"),
    "P4": (75, "NVIDIA Tesla P4 datasheet: 50 W / 75 W (75 W configuration)"),
    "V100 PCIe": (250, "NVIDIA Tesla V100 datasheet: PCIe 250 W"),
    "V100 SXM2": (300, "NVIDIA Tesla V100 datasheet: SXM2 300 W"),
    "A100 40GB PCIe": (250, "NVIDIA A100 datasheet: A100 40GB PCIe 250 W"),
    "A100 80GB PCIe": (300, "NVIDIA A100 datasheet: A100 80GB PCIe 300 W"),
    "A100 40GB SXM": (400, "NVIDIA A100 datasheet: SXM 400 W"),
    "A100 80GB SXM": (400, "NVIDIA A100 datasheet: SXM 400 W"),
    "H100 PCIe": (350, "NVIDIA H100 datasheet: PCIe 300-350 W"),
    "H100 SXM": (700, "NVIDIA H100 datasheet: SXM up to 700 W"),
    "H200": (700, "NVIDIA H200 datasheet: SXM up to 700 W"),
    "B200": (1000, "NVIDIA HGX B200 specifications: up to 1,000 W per GPU"),
    "L40S": (350, "NVIDIA L40S datasheet: 350 W"),
    "L4": (72, "NVIDIA L4 datasheet: 72 W"),
    "RTX A6000": (300, "NVIDIA RTX A6000 datasheet: 300 W"),
    "A10G": (150, "AWS G5 documentation / A10 class: 150 W"),
    "A10": (150, "NVIDIA A10 datasheet: 150 W"),
    "RTX 3080": (320, "GeForce RTX 3080 specifications: 320 W"),
    "RTX 3090": (350, "GeForce RTX 3090 specifications: 350 W"),
    "RTX 4090": (450, "GeForce RTX 4090 specifications: 450 W"),
    "MI300X": (750, "AMD Instinct MI300X datasheet: 750 W"),
    "MI325X": (1000, "AMD Instinct MI325X datasheet: 1,000 W"),
    "MI250": (560, "AMD Instinct MI250 datasheet: 560 W"),
    "MI250X": (560, "AMD Instinct MI250X datasheet: 560 W"),
    "MI250 GCD": (280, "AMD Instinct MI250 datasheet: 560 W per package, halved per GCD"),
    "MI250X GCD": (280, "AMD Instinct MI250X datasheet: 560 W per package, halved per GCD"),
}

#: Fabrication process per GPU (name prefix -> process): NVIDIA architecture whitepapers (Pascal
#: GP100: TSMC 16 nm FinFET; GP104 (P4): 16 nm; Volta GV100: TSMC 12 nm FFN; Turing TU104 (T4):
#: TSMC 12 nm FFN; Ampere GA100: TSMC 7 nm N7; GA102 (A10, A10G, A6000, RTX 30): Samsung 8 nm;
#: Hopper GH100 and Ada AD10x (L4, L40S, RTX 4090): TSMC 4N; Blackwell B200: TSMC 4NP); AMD CDNA2
#: (MI250): TSMC 6 nm, CDNA3 (MI300X, MI325X): TSMC 5 nm compute dies.
PROCESS_NODE: tuple[tuple[str, str], ...] = (
    ("P100", "tsmc16"), ("P4", "tsmc16"), ("V100", "tsmc12"), ("T4", "tsmc12"), ("A100", "tsmc7"),
    ("A10", "samsung8"), ("RTX A6000", "samsung8"), ("RTX 30", "samsung8"), ("H100", "tsmc4n"), ("H200", "tsmc4n"),
    ("L4", "tsmc4n"), ("RTX 4090", "tsmc4n"), ("B200", "tsmc4np"), ("MI250", "tsmc6"), ("MI3", "tsmc5"),
)


def process_of(name: str) -> str:
    """The process of a table name (:data:`PROCESS_NODE`, first matching prefix), "" unknown."""
    for pre, node in PROCESS_NODE:
        if name.startswith(pre):
            return node
    return ""


#: GPU die per table-name prefix (first match): boards of one die run the same kernels with the
#: same per-SM efficiency, so a fitted efficiency carries over (NVIDIA architecture whitepapers and
#: datasheets: P100 GP100, P4 GP104, V100 GV100, T4 TU104, A100 GA100, A10/A10G/RTX A6000/RTX 30
#: GA102, H100/H200 GH100, L4 AD104, L40S/RTX 4090 AD102, B200 GB100; AMD: MI250 CDNA2 (Aldebaran),
#: MI300X/MI325X CDNA3).
CHIP: tuple[tuple[str, str], ...] = (
    ("P100", "GP100"), ("P4", "GP104"), ("V100", "GV100"), ("T4", "TU104"), ("A100", "GA100"), ("A10", "GA102"),
    ("RTX A6000", "GA102"), ("RTX 30", "GA102"), ("H100", "GH100"), ("H200", "GH100"), ("L40S", "AD102"),
    ("L4", "AD104"), ("RTX 4090", "AD102"), ("B200", "GB100"), ("MI250", "CDNA2"), ("MI3", "CDNA3"),
)


def chip_of(name: str) -> str:
    """The die of a table name (:data:`CHIP`), "" unknown."""
    for pre, chip in CHIP:
        if name.startswith(pre):
            return chip
    return ""


#: Compute capability major per table name (CUDA C++ Programming Guide, "CUDA-Enabled GPUs").
CC_MAJOR: dict[str, int] = {"V100": 7, "A100": 8, "H100": 9, "H200": 9, "B200": 10, "L40S": 8, "L4": 8, "RTX A6000": 8,
                            "A10": 8, "RTX 3080": 8, "RTX 3090": 8, "RTX 4090": 8}

#: GPUs missing from :mod:`daydream.gpus` (name patterns searched in :func:`daydream.gpus.normalize`d names).
EXTRA_GPUS: tuple[tuple[str, Spec], ...] = (
    (r"p100", Spec("P100 PCIe", "nvidia", 56, 9.3, 732.0, 4.0, 1303, 250, 6, {"fp32": 9.3, "half": 0.0},
                   2048, 32, 65536, 64,
                   "NVIDIA Tesla P100 PCIe datasheet (9.3 TFLOPS single precision, 18.7 half (CUDA cores, no Tensor Cores), "
                   "732 GB/s HBM2, 250 W); Pascal GP100 whitepaper (56 SMs, 4 MB L2, 64 KB shared memory per SM); "
                   "CUDA C++ Programming Guide cc 6.0 limits")),
    (r"(?<![a-z0-9])p4(?![0-9])", Spec("P4", "nvidia", 20, 5.5, 192.0, 2.0, 1063, 75, 6, {"fp32": 5.5},
                                       2048, 32, 65536, 96,
                                       "NVIDIA Tesla P4 datasheet (5.5 TFLOPS single precision, 192 GB/s GDDR5, 50/75 W); "
                                       "GP104 (20 SMs, 2 MB L2); CUDA C++ Programming Guide cc 6.1 limits")),
    (r"(?<![a-z0-9])t4(?![0-9])", Spec("T4", "nvidia", 40, 8.1, 320.0, 4.0, 1590, 70, 7,
                                       {"fp32": 8.1, "half": 65.0},
                                       1024, 16, 65536, 64,
                                       "NVIDIA T4 datasheet (8.1 TFLOPS single precision, 65 TFLOPS FP16 Tensor Core (mixed), "
                                       "320 GB/s GDDR6, 70 W); Turing TU104 (40 SMs, 4 MB L2, boost 1,590 MHz); CUDA C++ "
                                       "Programming Guide cc 7.5 limits (1,024 threads, 16 blocks, 64 KB shared per SM)")),
)


def _cc_major(g: GPU) -> int:
    if g.vendor == "amd":
        return 0
    for k, v in CC_MAJOR.items():
        if g.name.startswith(k):
            return v
    return 8


def from_table(g: GPU) -> Spec:
    """A :class:`Spec` from a :mod:`daydream.gpus` entry (its peaks and limits) plus its board power."""
    peaks = {"fp32": g.fp32_gemm_tflops or g.fp32_tflops, "tf32": g.tf32_tflops, "half": g.tc_tflops, "fp8": g.fp8_tflops}
    return Spec(g.name, g.vendor, g.sms, g.fp32_tflops, g.mem_gbps, g.l2_mib, g.clock_mhz,
                BOARD_POWER_W.get(g.name, (0.0, ""))[0], _cc_major(g), peaks, g.max_threads_sm, g.max_blocks_sm,
                g.regs_sm or 65536, g.smem_kib_sm or 64.0, g.source + "; " + g.arch_source)


def find_spec(name: str) -> Spec | None:
    """The :class:`Spec` for a device name (NeuSight's ``Device`` column, a trace's device name, or a
    table name such as ``"A100 40GB PCIe"``), or None. Memory size in the name (``-40GB``, ``80GB``)
    picks the A100 variant."""
    key = normalize(name)
    for pat, s in EXTRA_GPUS:
        if re.search(pat, key):
            return s
    m = re.search(r"(?<![0-9])(\d+)\s*GB", name, re.I)
    g = find_gpu(name, int(m.group(1)) * 2**30 if m else -1)
    return from_table(g) if g is not None else None


