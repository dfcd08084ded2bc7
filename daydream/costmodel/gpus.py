"""Peak throughput and memory bandwidth of GPUs, for the ``gpu-upgrade`` optimization.

Every number is the vendor's published figure, from the document named in ``source``:

* ``tc_tflops``: peak dense (no structured sparsity) FP16/BF16 Tensor-Core (NVIDIA) or matrix-core
  (AMD) throughput, TFLOPS, with FP32 accumulation where the vendor lists both (GeForce parts run
  FP32-accumulate at half the FP16-accumulate rate). Where a datasheet gives only the sparse
  figure, the dense figure is half of it (NVIDIA's datasheets footnote "with sparsity"; dense is
  one half).
* ``mem_gbps``: peak DRAM bandwidth, GB/s (10^9 bytes per second).

A GPU of the trace is found by its device name (``TraceMeta.devices``, from Kineto
``deviceProperties`` or nsys ``TARGET_INFO_GPU``), matched loosely (case, spaces, "NVIDIA",
"Tesla", "GeForce", "AMD", "Instinct" do not matter), then by memory size (A100 40 GB vs 80 GB),
and, for generic names such as ROCm's "AMD Radeon Graphics", by architecture and compute-unit
count (:data:`SIGNATURES`).

AMD MI250/MI250X packages hold two graphics compute dies (GCDs); the runtime, and so PyTorch and
its traces, shows each GCD as one device with half the package's compute units, memory and
bandwidth. The ``MI250 GCD``/``MI250X GCD`` entries are those devices: half the package figures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..events.table import DeviceInfo


@dataclass(frozen=True)
class GPU:
    """One GPU model. ``patterns`` are regular expressions searched in the normalized name
    (:func:`normalize`); the table is searched top to bottom.

    Throughputs are dense peaks in TFLOPS (10^12 FLOP/s), 0.0 where the GPU has no such path;
    bandwidth in GB/s (10^9 B/s); per-SM (NVIDIA) / per-CU (AMD) limits are those of the
    architecture (CUDA C++ Programming Guide, "Compute Capabilities" table; AMD CDNA ISA guides).
    """

    name: str
    tc_tflops: float  #: dense FP16/BF16 Tensor/matrix-core TFLOPS
    mem_gbps: float  #: DRAM bandwidth, GB/s
    source: str
    patterns: tuple[str, ...]
    min_mem_gib: float = 0.0  #: the device's memory must be at least this (disambiguates variants)
    max_mem_gib: float = 1e9
    vendor: str = "nvidia"  #: "nvidia" or "amd"
    sms: int = 0  #: streaming multiprocessors (NVIDIA) or compute units (AMD)
    clock_mhz: float = 0.0  #: peak (boost) engine clock, MHz
    l2_mib: float = 0.0  #: last-level on-die cache (L2), MiB
    fp32_tflops: float = 0.0  #: FP32 on CUDA cores / vector ALUs (non-tensor)
    fp32_gemm_tflops: float = 0.0  #: FP32 GEMM path without TF32: CUDA cores (NVIDIA) or FP32 matrix cores (AMD)
    tf32_tflops: float = 0.0  #: TF32 (NVIDIA) / XF32-TF32 (AMD MI300) Tensor/matrix-core, dense
    fp8_tflops: float = 0.0  #: FP8 Tensor/matrix-core, dense
    max_threads_sm: int = 2048  #: resident threads per SM/CU
    max_blocks_sm: int = 32  #: resident blocks (workgroups) per SM/CU
    regs_sm: int = 65536  #: 32-bit registers per SM; 0 = not modelled (AMD: per-SIMD VGPR files)
    smem_kib_sm: float = 0.0  #: shared memory (LDS) per SM/CU usable by blocks, KiB
    arch_source: str = ""  #: where the SM/CU count, clock, cache and per-SM limits come from
    #: BF16 on the Tensor/matrix cores: NVIDIA Ampere and later (A100 whitepaper: Volta's Tensor Cores
    #: take FP16 only), AMD CDNA2 and later (MI200 ISA guide: BF16 MFMA); without it ``tc_tflops`` is FP16's
    bf16: bool = True

    def peak_tflops(self, path: str) -> float:
        """Dense peak of an execution path: ``fp32`` (CUDA cores / AMD FP32 GEMM path), ``fp32_vector``,
        ``tf32``, ``half`` (FP16/BF16 Tensor Core), ``fp8``. A path the GPU lacks falls back to the next
        slower one it has (fp8 -> half, tf32 -> fp32 GEMM path).

        Raises:
            KeyError: unknown path.
        """
        if path == "fp8":
            return self.fp8_tflops or self.tc_tflops
        if path == "half":
            return self.tc_tflops
        if path == "tf32":
            return self.tf32_tflops or self.fp32_gemm_tflops or self.fp32_tflops
        if path == "fp32":
            return self.fp32_gemm_tflops or self.fp32_tflops
        if path == "fp32_vector":
            return self.fp32_tflops
        raise KeyError(path)


_CC70 = dict(max_threads_sm=2048, max_blocks_sm=32, regs_sm=65536, smem_kib_sm=96)
_CC80 = dict(max_threads_sm=2048, max_blocks_sm=32, regs_sm=65536, smem_kib_sm=164)
_CC86 = dict(max_threads_sm=1536, max_blocks_sm=16, regs_sm=65536, smem_kib_sm=100)
_CC89 = dict(max_threads_sm=1536, max_blocks_sm=24, regs_sm=65536, smem_kib_sm=100)
_CC90 = dict(max_threads_sm=2048, max_blocks_sm=32, regs_sm=65536, smem_kib_sm=228)
_CC100 = dict(max_threads_sm=2048, max_blocks_sm=32, regs_sm=65536, smem_kib_sm=228)
#: CDNA2/CDNA3 compute unit: 4 SIMDs x 8 wave64 slots = 2,048 work-items, 64 KiB LDS (AMD CDNA2 and
#: CDNA3 ISA reference guides; ROCm reports maxThreadsPerMultiProcessor 2048 and 65,536 B LDS, seen in
#: the MI250/MI300X traces of ../shared/traces)
_CDNA = dict(vendor="amd", max_threads_sm=2048, max_blocks_sm=32, regs_sm=0, smem_kib_sm=64)
_CUDA_GUIDE = "CUDA C++ Programming Guide, Compute Capabilities table (per-SM limits)"

#: The FP32 GEMM path of an SM whose FP32 peak counts a datapath shared with INT32, as a fraction
#: of that peak. On GA10x (compute capability 8.6) and AD10x (8.9) SMs, half of the 128 FP32 lanes
#: share their datapath with INT32 (NVIDIA Ampere GA102 GPU Architecture whitepaper, "2x FP32
#: throughput"; NVIDIA Ada GPU Architecture whitepaper), so a GEMM's address and loop arithmetic
#: takes FP32 issue slots and SGEMM cannot reach the datasheet's FP32 peak. Measured: cuBLAS SGEMM
#: (4096 x 4096) ran at 23.25 TFLOPS on an RTX A6000 whose FP32 peak is 38.7 TFLOPS (S. Boehm,
#: "How to Optimize a CUDA Matmul Kernel for cuBLAS-like Performance: a Worklog", 2022; RTX A6000
#: datasheet), i.e. 0.601. GA100 (A100), GV100 (V100) and GH100 (H100) SMs have dedicated FP32
#: lanes: their FP32 GEMM path is the FP32 peak.
SHARED_DATAPATH_SGEMM = 23.25 / 38.7
_SD = SHARED_DATAPATH_SGEMM

#: The GPU table. Order matters: more specific entries first.
GPUS: tuple[GPU, ...] = (
    GPU("V100 PCIe", 112.0, 900.0,
        "NVIDIA Tesla V100 GPU Accelerator datasheet (V100 PCIe: 112 TFLOPS Tensor Performance, 14 TFLOPS single "
        "precision, 900 GB/s HBM2)",
        (r"v100.*pcie",), sms=80, clock_mhz=1380, l2_mib=6, fp32_tflops=14.0, fp32_gemm_tflops=14.0,
        arch_source="NVIDIA Tesla V100 GPU Architecture whitepaper (80 SMs, 6 MB L2; PCIe boost 1,380 MHz); " + _CUDA_GUIDE,
        bf16=False, **_CC70),
    GPU("V100 SXM2", 125.0, 900.0,
        "NVIDIA Tesla V100 GPU Accelerator datasheet (V100 SXM2: 125 TFLOPS Tensor Performance, 15.7 TFLOPS single "
        "precision, 900 GB/s HBM2); the DGX Station's V100-DGXS is the same part",
        (r"v100",), sms=80, clock_mhz=1530, l2_mib=6, fp32_tflops=15.7, fp32_gemm_tflops=15.7,
        arch_source="NVIDIA Tesla V100 GPU Architecture whitepaper (80 SMs, 6 MB L2, SXM2 boost 1,530 MHz); " + _CUDA_GUIDE,
        bf16=False, **_CC70),
    GPU("A100 80GB PCIe", 312.0, 1935.0,
        "NVIDIA A100 Tensor Core GPU datasheet (BF16/FP16 Tensor Core 312 TFLOPS, 624 with sparsity; TF32 156; FP32 "
        "19.5; A100 80GB PCIe 1,935 GB/s)",
        (r"a100.*pcie",), min_mem_gib=60, sms=108, clock_mhz=1410, l2_mib=40, fp32_tflops=19.5, fp32_gemm_tflops=19.5,
        tf32_tflops=156.0, arch_source="NVIDIA A100 Tensor Core GPU Architecture whitepaper (108 SMs, 1,410 MHz boost, "
        "40 MB L2); " + _CUDA_GUIDE, **_CC80),
    GPU("A100 40GB PCIe", 312.0, 1555.0,
        "NVIDIA A100 Tensor Core GPU datasheet (BF16/FP16 Tensor Core 312 TFLOPS; TF32 156; FP32 19.5; A100 40GB PCIe "
        "1,555 GB/s)",
        (r"a100.*pcie",), sms=108, clock_mhz=1410, l2_mib=40, fp32_tflops=19.5, fp32_gemm_tflops=19.5,
        tf32_tflops=156.0, arch_source="NVIDIA A100 Tensor Core GPU Architecture whitepaper (108 SMs, 1,410 MHz boost, "
        "40 MB L2); " + _CUDA_GUIDE, **_CC80),
    GPU("A100 80GB SXM", 312.0, 2039.0,
        "NVIDIA A100 Tensor Core GPU datasheet (BF16/FP16 Tensor Core 312 TFLOPS; TF32 156; FP32 19.5; A100 80GB SXM "
        "2,039 GB/s)",
        (r"a100",), min_mem_gib=60, sms=108, clock_mhz=1410, l2_mib=40, fp32_tflops=19.5, fp32_gemm_tflops=19.5,
        tf32_tflops=156.0, arch_source="NVIDIA A100 Tensor Core GPU Architecture whitepaper (108 SMs, 1,410 MHz boost, "
        "40 MB L2); " + _CUDA_GUIDE, **_CC80),
    GPU("A100 40GB SXM", 312.0, 1555.0,
        "NVIDIA A100 Tensor Core GPU datasheet (BF16/FP16 Tensor Core 312 TFLOPS; TF32 156; FP32 19.5; A100 40GB SXM "
        "1,555 GB/s); A100-PG509-200 boards (42 GB reported) are this part",
        (r"a100",), sms=108, clock_mhz=1410, l2_mib=40, fp32_tflops=19.5, fp32_gemm_tflops=19.5,
        tf32_tflops=156.0, arch_source="NVIDIA A100 Tensor Core GPU Architecture whitepaper (108 SMs, 1,410 MHz boost, "
        "40 MB L2); " + _CUDA_GUIDE, **_CC80),
    GPU("H100 PCIe", 756.5, 2000.0,
        "NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe: BF16/FP16 Tensor Core 1,513 TFLOPS with sparsity, TF32 756 "
        "with sparsity, FP8 3,026 with sparsity, FP32 51 TFLOPS; 2 TB/s)",
        (r"h100.*pcie",), sms=114, clock_mhz=1755, l2_mib=50, fp32_tflops=51.0, fp32_gemm_tflops=51.0,
        tf32_tflops=378.0, fp8_tflops=1513.0,
        arch_source="NVIDIA H100 Tensor Core GPU Architecture whitepaper (H100 PCIe: 114 SMs, 50 MB L2; boost 1,755 MHz); "
        + _CUDA_GUIDE, **_CC90),
    GPU("H100 SXM", 989.4, 3350.0,
        "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: BF16/FP16 Tensor Core 1,979 TFLOPS with sparsity, TF32 989 "
        "with sparsity, FP8 3,958 with sparsity, FP32 67 TFLOPS; 3.35 TB/s); 'H100 80GB HBM3' is the SXM part (the PCIe "
        "card has HBM2e)",
        (r"h100(?!.*nvl)",), sms=132, clock_mhz=1980, l2_mib=50, fp32_tflops=67.0, fp32_gemm_tflops=67.0,
        tf32_tflops=494.7, fp8_tflops=1978.9,
        arch_source="NVIDIA H100 Tensor Core GPU Architecture whitepaper (H100 SXM5: 132 SMs, 50 MB L2, boost 1,980 MHz); "
        "the H100 trace of ../shared/traces reports numSms 132; " + _CUDA_GUIDE, **_CC90),
    GPU("H200", 989.4, 4800.0,
        "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM: BF16/FP16 Tensor Core 1,979 TFLOPS with sparsity, TF32 989 "
        "with sparsity, FP8 3,958 with sparsity, FP32 67 TFLOPS; 4.8 TB/s)",
        (r"h200",), sms=132, clock_mhz=1980, l2_mib=50, fp32_tflops=67.0, fp32_gemm_tflops=67.0,
        tf32_tflops=494.7, fp8_tflops=1978.9,
        arch_source="the H100 SXM5 die (NVIDIA H100 architecture whitepaper: 132 SMs, 50 MB L2); " + _CUDA_GUIDE, **_CC90),
    GPU("B200", 2250.0, 8000.0,
        "NVIDIA HGX B200 specifications (per GPU: FP16/BF16 Tensor Core 4.5 PFLOPS with sparsity, TF32 2.2 PFLOPS with "
        "sparsity, FP8 9 PFLOPS with sparsity, FP32 75 TFLOPS; 8 TB/s HBM3e)",
        (r"b200",), sms=148, clock_mhz=1965, l2_mib=126, fp32_tflops=75.0, fp32_gemm_tflops=75.0,
        tf32_tflops=1100.0, fp8_tflops=4500.0,
        arch_source="numSms 148 reported by the B200 trace of ../shared/traces (deviceProperties); clock and L2: NVIDIA "
        "Blackwell architecture technical brief (approximate, not in a datasheet); " + _CUDA_GUIDE, **_CC100),
    GPU("L40S", 362.05, 864.0,
        "NVIDIA L40S datasheet (BF16/FP16 Tensor 362.05 TFLOPS, 733 with sparsity; TF32 183; FP8 733; FP32 91.6; "
        "864 GB/s GDDR6)",
        (r"l40s",), sms=142, clock_mhz=2520, l2_mib=96, fp32_tflops=91.6, fp32_gemm_tflops=91.6 * _SD, tf32_tflops=183.0,
        fp8_tflops=733.0, arch_source="NVIDIA Ada GPU Architecture whitepaper (AD102: L40S 142 SMs, 96 MB L2, boost "
        "2,520 MHz); " + _CUDA_GUIDE, **_CC89),
    GPU("L4", 121.0, 300.0,
        "NVIDIA L4 Tensor Core GPU datasheet (FP16/BF16 Tensor Core 242 TFLOPS with sparsity, TF32 120 with sparsity, "
        "FP8 485 with sparsity, FP32 30.3 TFLOPS; 300 GB/s)",
        (r"(?<![a-z0-9])l4(?![0-9])",), sms=58, clock_mhz=2040, l2_mib=48, fp32_tflops=30.3, fp32_gemm_tflops=30.3 * _SD,
        tf32_tflops=60.0, fp8_tflops=242.5, arch_source="NVIDIA Ada GPU Architecture whitepaper (AD104: L4 58 SMs, 48 MB "
        "L2, boost 2,040 MHz); " + _CUDA_GUIDE, **_CC89),
    GPU("RTX A6000", 154.8, 768.0,
        "NVIDIA RTX A6000 datasheet (Tensor Performance 309.7 TFLOPS with sparsity: 154.8 dense FP16/BF16; "
        "single precision 38.7 TFLOPS; 768 GB/s GDDR6)",
        (r"(?<![a-z0-9])a6000",), sms=84, clock_mhz=1800, l2_mib=6, fp32_tflops=38.7, fp32_gemm_tflops=38.7 * _SD,
        tf32_tflops=77.4, arch_source="NVIDIA Ampere GA102 GPU Architecture whitepaper (GA102: RTX A6000 84 SMs, 6 MB L2); "
        "boost 1,800 MHz (38.7 TFLOPS / (84 x 128 x 2)); " + _CUDA_GUIDE, **_CC86),
    GPU("A10G", 70.0, 600.0,
        "AWS EC2 G5 instance documentation (NVIDIA A10G Tensor Core GPU: 24 GB GDDR6, 80 RT cores = 80 SMs) and the "
        "A10 vs A10G specification table of Baseten, 'NVIDIA A10 vs A10G for ML model inference' (FP32 35 TFLOPS, "
        "TF32 Tensor 35, BF16/FP16 Tensor 70 dense, 600 GB/s): Tensor Cores at the GeForce rate with FP32 accumulate",
        (r"a10g",), sms=80, clock_mhz=1710, l2_mib=6, fp32_tflops=35.0, fp32_gemm_tflops=35.0 * _SD, tf32_tflops=35.0,
        arch_source="GA102 (NVIDIA Ampere GA102 GPU Architecture whitepaper: 6 MB L2); boost 1,710 MHz (35 TFLOPS / "
        "(80 x 128 x 2)); " + _CUDA_GUIDE, **_CC86),
    GPU("A10", 125.0, 600.0,
        "NVIDIA A10 Tensor Core GPU datasheet (BF16/FP16 Tensor Core 125 TFLOPS, 250 with sparsity; TF32 62.5; FP32 "
        "31.2 TFLOPS; 24 GB GDDR6, 600 GB/s)",
        (r"(?<![a-z0-9])a10(?![0-9g])",), sms=72, clock_mhz=1695, l2_mib=6, fp32_tflops=31.2, fp32_gemm_tflops=31.2 * _SD,
        tf32_tflops=62.5, arch_source="NVIDIA Ampere GA102 GPU Architecture whitepaper (GA102: 6 MB L2); A10 72 SMs "
        "(72 RT cores, datasheet), boost 1,695 MHz; " + _CUDA_GUIDE, **_CC86),
    GPU("RTX 3080", 59.5, 760.0,
        "NVIDIA Ampere GA102 GPU Architecture whitepaper, GeForce RTX 3080 (Peak FP16 Tensor TFLOPS with FP32 "
        "Accumulate 59.5 dense, TF32 29.8, FP32 29.8; 760 GB/s GDDR6X)",
        (r"3080(?!ti)",), sms=68, clock_mhz=1710, l2_mib=5, fp32_tflops=29.8, fp32_gemm_tflops=29.8 * _SD, tf32_tflops=29.8,
        arch_source="NVIDIA Ampere GA102 GPU Architecture whitepaper (RTX 3080: 68 SMs, 5 MB L2, boost 1,710 MHz); "
        + _CUDA_GUIDE, **_CC86),
    GPU("RTX 3090", 71.0, 936.0,
        "NVIDIA Ampere GA102 GPU Architecture whitepaper, GeForce RTX 3090 (Peak FP16 Tensor TFLOPS with FP32 "
        "Accumulate 71 dense, TF32 35.6, FP32 35.6; 936 GB/s GDDR6X)",
        (r"3090",), sms=82, clock_mhz=1695, l2_mib=6, fp32_tflops=35.6, fp32_gemm_tflops=35.6 * _SD, tf32_tflops=35.6,
        arch_source="NVIDIA Ampere GA102 GPU Architecture whitepaper (RTX 3090: 82 SMs, 6 MB L2, boost 1,695 MHz); "
        + _CUDA_GUIDE, **_CC86),
    GPU("RTX 4090", 165.2, 1008.0,
        "NVIDIA Ada GPU Architecture whitepaper, GeForce RTX 4090 (Peak FP16 Tensor TFLOPS with FP32 Accumulate "
        "165.2 dense, TF32 82.6, FP8 330.3 with FP32 accumulate, FP32 82.6; 1,008 GB/s GDDR6X)",
        (r"4090",), sms=128, clock_mhz=2520, l2_mib=72, fp32_tflops=82.6, fp32_gemm_tflops=82.6 * _SD, tf32_tflops=82.6,
        fp8_tflops=330.3, arch_source="NVIDIA Ada GPU Architecture whitepaper (RTX 4090: 128 SMs, 72 MB L2, boost "
        "2,520 MHz); " + _CUDA_GUIDE, **_CC89),
    GPU("MI250X GCD", 191.5, 1638.4,
        "AMD Instinct MI250X datasheet (383 TFLOPS peak FP16/BF16 matrix, 95.7 FP32 matrix, 47.9 FP32 vector, "
        "3.2768 TB/s per package), halved: one of the package's two GCDs, which the runtime exposes as one device",
        (r"mi250x.*gcd",), sms=110, clock_mhz=1700, l2_mib=8, fp32_tflops=23.95, fp32_gemm_tflops=47.85,
        arch_source="AMD CDNA2 architecture whitepaper (110 CUs and 8 MB L2 per GCD, 1,700 MHz peak engine clock)", **_CDNA),
    GPU("MI250X", 383.0, 3276.8,
        "AMD Instinct MI250X datasheet (383 TFLOPS peak FP16/BF16 matrix; 95.7 FP32 matrix; 47.9 FP32 vector; "
        "3.2768 TB/s HBM2e)",
        (r"mi250x",), sms=220, clock_mhz=1700, l2_mib=16, fp32_tflops=47.9, fp32_gemm_tflops=95.7,
        arch_source="AMD CDNA2 architecture whitepaper (220 CUs, 2 x 8 MB L2, 1,700 MHz)", **_CDNA),
    GPU("MI250 GCD", 181.0, 1638.4,
        "AMD Instinct MI250 datasheet (362.1 TFLOPS peak FP16/BF16 matrix, 90.5 FP32 matrix, 45.3 FP32 vector, "
        "3.2768 TB/s per package), halved: one of the package's two GCDs, which the runtime exposes as one device",
        (r"mi250.*gcd",), sms=104, clock_mhz=1700, l2_mib=8, fp32_tflops=22.65, fp32_gemm_tflops=45.25,
        arch_source="AMD CDNA2 architecture whitepaper (104 CUs and 8 MB L2 per GCD, 1,700 MHz); the MI250 trace of "
        "../shared/traces reports numSms 104", **_CDNA),
    GPU("MI250", 362.1, 3276.8,
        "AMD Instinct MI250 datasheet (362.1 TFLOPS peak FP16/BF16 matrix; 90.5 FP32 matrix; 45.3 FP32 vector; "
        "3.2768 TB/s HBM2e)",
        (r"mi250",), sms=208, clock_mhz=1700, l2_mib=16, fp32_tflops=45.3, fp32_gemm_tflops=90.5,
        arch_source="AMD CDNA2 architecture whitepaper (208 CUs, 2 x 8 MB L2, 1,700 MHz)", **_CDNA),
    GPU("MI325X", 1307.4, 6000.0,
        "AMD Instinct MI325X datasheet (1,307.4 TFLOPS peak FP16/BF16 matrix dense, FP8 2,614.9, TF32 653.7, FP32 "
        "matrix/vector 163.4; 6 TB/s HBM3E)",
        (r"mi325",), sms=304, clock_mhz=2100, l2_mib=32, fp32_tflops=163.4, fp32_gemm_tflops=163.4, tf32_tflops=653.7,
        fp8_tflops=2614.9, arch_source="AMD CDNA3 architecture whitepaper (304 CUs, 8 XCDs x 4 MB L2, 256 MB Infinity "
        "Cache, 2,100 MHz peak)", **_CDNA),
    GPU("MI300X", 1307.4, 5300.0,
        "AMD Instinct MI300X datasheet (1,307.4 TFLOPS peak FP16/BF16 matrix dense, 2,614.9 with sparsity; FP8 2,614.9; "
        "TF32 653.7; FP32 matrix/vector 163.4; 5.3 TB/s)",
        (r"mi300x",), sms=304, clock_mhz=2100, l2_mib=32, fp32_tflops=163.4, fp32_gemm_tflops=163.4, tf32_tflops=653.7,
        fp8_tflops=2614.9, arch_source="AMD CDNA3 architecture whitepaper (304 CUs, 8 XCDs x 4 MB L2, 256 MB Infinity "
        "Cache, 2,100 MHz peak); the MI300X trace of ../shared/traces reports numSms 304", **_CDNA),
)

#: The GPU-to-GPU link of each board, a :data:`daydream.costmodel.comm.PRESETS` key, with its source
#: (the datasheet's interconnect line): SXM boards talk over NVLink (through NVSwitch on HGX/DGX
#: baseboards), PCIe boards over PCIe at their host interface's generation. The link a trace's
#: collectives ran on is taken from here (``network``'s ``traced=`` overrides it, and the note says
#: it was inferred): an NVLink bridge between two PCIe cards is not visible in a trace. AMD boards
#: are absent (Infinity Fabric has no preset): their traces need ``traced=``.
BOARD_LINKS: dict[str, tuple[str, str]] = {
    "V100 PCIe": ("pcie3", "Tesla V100 datasheet: PCIe Gen3 32 GB/s (both directions)"),
    "V100 SXM2": ("nvlink2", "Tesla V100 datasheet: NVLink 300 GB/s (SXM2)"),
    "A100 80GB PCIe": ("pcie4", "A100 datasheet: PCIe Gen4 64 GB/s (NVLink bridge for 2 GPUs optional)"),
    "A100 40GB PCIe": ("pcie4", "A100 datasheet: PCIe Gen4 64 GB/s (NVLink bridge for 2 GPUs optional)"),
    "A100 80GB SXM": ("nvlink3", "A100 datasheet: NVLink 600 GB/s (SXM)"),
    "A100 40GB SXM": ("nvlink3", "A100 datasheet: NVLink 600 GB/s (SXM)"),
    "H100 PCIe": ("pcie5", "H100 datasheet: PCIe Gen5 128 GB/s (NVLink bridge optional)"),
    "H100 SXM": ("nvlink4", "H100 datasheet: NVLink 900 GB/s (SXM)"),
    "H200": ("nvlink4", "H200 datasheet: NVLink 900 GB/s (H200 SXM)"),
    "B200": ("nvlink5", "HGX B200 datasheet: NVLink 1.8 TB/s per GPU"),
    "L40S": ("pcie4", "L40S datasheet: PCIe Gen4 x16 64 GB/s, no NVLink"),
    "L4": ("pcie4", "L4 datasheet: PCIe Gen4 x16 64 GB/s, no NVLink"),
    "RTX A6000": ("pcie4", "RTX A6000 datasheet: PCIe Gen4 x16 (NVLink bridge for 2 GPUs optional)"),
    "A10G": ("pcie4", "A10G (AWS G5): PCIe Gen4 x16, no NVLink"),
    "A10": ("pcie4", "A10 datasheet: PCIe Gen4 64 GB/s, no NVLink"),
    "RTX 3080": ("pcie4", "GeForce RTX 3080 specifications: PCIe Gen4 x16, no NVLink"),
    "RTX 3090": ("pcie4", "GeForce RTX 3090 specifications: PCIe Gen4 x16 (NVLink bridge for 2 GPUs optional)"),
    "RTX 4090": ("pcie4", "GeForce RTX 4090 specifications: PCIe Gen4 x16, no NVLink"),
}

#: Devices whose name is generic: (compute capability major, minor, SMs/CUs) -> table name.
#: ROCm reports gfx90a as capability 9.0; MI250 packages have 208 CUs (104 per GCD), MI250X 220
#: (110 per GCD) (AMD Instinct MI250/MI250X datasheets).
SIGNATURES: dict[tuple[int, int, int], str] = {
    (9, 0, 104): "MI250 GCD",
    (9, 0, 110): "MI250X GCD",
}

_DROP = re.compile(r"nvidia|tesla|geforce|amd|instinct|radeon|graphics|\(r\)|[\s_\-]+")


def normalize(name: str) -> str:
    """Lower-case the name and drop vendor words, spaces, dashes and underscores."""
    return _DROP.sub("", name.lower())


def find_gpu(name: str, memory_bytes: int = -1) -> GPU | None:
    """The table entry for a device or user-given name (fuzzy), or None.

    ``memory_bytes`` (the device's total memory, -1 unknown) picks the 40 GB or 80 GB A100.
    """
    key = normalize(name)
    if not key:
        return None
    mem_gib = memory_bytes / 2**30 if memory_bytes and memory_bytes > 0 else -1.0
    exact = {normalize(g.name): g for g in GPUS}
    if key in exact:
        return exact[key]
    for g in GPUS:
        if any(re.search(p, key) for p in g.patterns):
            if mem_gib < 0:
                if g.min_mem_gib > 0 and not re.search(r"80", key):
                    continue  # memory unknown: an 80 GB variant only when the name says so
                return g
            if g.min_mem_gib <= mem_gib <= g.max_mem_gib:
                return g
    return None


def gpu_of_device(dev: DeviceInfo) -> GPU | None:
    """The table entry for a traced device: by name, else by (capability, SM/CU count)."""
    g = find_gpu(dev.name, dev.total_memory_bytes)
    if g is None:
        sig = SIGNATURES.get((dev.compute_major, dev.compute_minor, dev.num_sms))
        if sig is not None:
            g = find_gpu(sig)
    return g


def names() -> list[str]:
    return [g.name for g in GPUS]
