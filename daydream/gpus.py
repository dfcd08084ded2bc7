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

from .events import DeviceInfo


@dataclass(frozen=True)
class GPU:
    """One GPU model. ``patterns`` are regular expressions searched in the normalized name
    (:func:`normalize`); the table is searched top to bottom."""

    name: str
    tc_tflops: float  #: dense FP16/BF16 Tensor/matrix-core TFLOPS
    mem_gbps: float  #: DRAM bandwidth, GB/s
    source: str
    patterns: tuple[str, ...]
    min_mem_gib: float = 0.0  #: the device's memory must be at least this (disambiguates variants)
    max_mem_gib: float = 1e9


#: The GPU table. Order matters: more specific entries first.
GPUS: tuple[GPU, ...] = (
    GPU("V100 PCIe", 112.0, 900.0,
        "NVIDIA Tesla V100 GPU Accelerator datasheet (V100 PCIe: 112 TFLOPS Tensor Performance, 900 GB/s HBM2)",
        (r"v100.*pcie",)),
    GPU("V100 SXM2", 125.0, 900.0,
        "NVIDIA Tesla V100 GPU Accelerator datasheet (V100 SXM2: 125 TFLOPS Tensor Performance, 900 GB/s HBM2); "
        "the DGX Station's V100-DGXS is the same part",
        (r"v100",)),
    GPU("A100 80GB PCIe", 312.0, 1935.0,
        "NVIDIA A100 Tensor Core GPU datasheet (BF16/FP16 Tensor Core 312 TFLOPS, 624 with sparsity; "
        "A100 80GB PCIe 1,935 GB/s)",
        (r"a100.*pcie",), min_mem_gib=60),
    GPU("A100 40GB PCIe", 312.0, 1555.0,
        "NVIDIA A100 Tensor Core GPU datasheet (BF16/FP16 Tensor Core 312 TFLOPS; A100 40GB PCIe 1,555 GB/s)",
        (r"a100.*pcie",)),
    GPU("A100 80GB SXM", 312.0, 2039.0,
        "NVIDIA A100 Tensor Core GPU datasheet (BF16/FP16 Tensor Core 312 TFLOPS; A100 80GB SXM 2,039 GB/s)",
        (r"a100",), min_mem_gib=60),
    GPU("A100 40GB SXM", 312.0, 1555.0,
        "NVIDIA A100 Tensor Core GPU datasheet (BF16/FP16 Tensor Core 312 TFLOPS; A100 40GB SXM 1,555 GB/s); "
        "A100-PG509-200 boards (42 GB reported) are this part",
        (r"a100",)),
    GPU("H100 PCIe", 756.5, 2000.0,
        "NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe: BF16/FP16 Tensor Core 1,513 TFLOPS with sparsity; 2 TB/s)",
        (r"h100.*pcie",)),
    GPU("H100 SXM", 989.4, 3350.0,
        "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM: BF16/FP16 Tensor Core 1,979 TFLOPS with sparsity; 3.35 TB/s); "
        "'H100 80GB HBM3' is the SXM part (the PCIe card has HBM2e)",
        (r"h100(?!.*nvl)",)),
    GPU("H200", 989.4, 4800.0,
        "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM: BF16/FP16 Tensor Core 1,979 TFLOPS with sparsity; 4.8 TB/s)",
        (r"h200",)),
    GPU("B200", 2250.0, 8000.0,
        "NVIDIA HGX B200 specifications (per GPU: FP16/BF16 Tensor Core 4.5 PFLOPS with sparsity; 8 TB/s HBM3e)",
        (r"b200",)),
    GPU("L4", 121.0, 300.0,
        "NVIDIA L4 Tensor Core GPU datasheet (FP16/BF16 Tensor Core 242 TFLOPS with sparsity; 300 GB/s)",
        (r"(?<![a-z0-9])l4(?![0-9])",)),
    GPU("RTX 3080", 59.5, 760.0,
        "NVIDIA Ampere GA102 GPU Architecture whitepaper, GeForce RTX 3080 (Peak FP16 Tensor TFLOPS with FP32 "
        "Accumulate 59.5 dense; 760 GB/s GDDR6X)",
        (r"3080(?!ti)",)),
    GPU("RTX 4090", 165.2, 1008.0,
        "NVIDIA Ada GPU Architecture whitepaper, GeForce RTX 4090 (Peak FP16 Tensor TFLOPS with FP32 Accumulate "
        "165.2 dense; 1,008 GB/s GDDR6X)",
        (r"4090",)),
    GPU("MI250X GCD", 191.5, 1638.4,
        "AMD Instinct MI250X datasheet (383 TFLOPS peak FP16/BF16 matrix, 3.2768 TB/s per package), halved: one "
        "of the package's two GCDs, which the runtime exposes as one device",
        (r"mi250x.*gcd",)),
    GPU("MI250X", 383.0, 3276.8,
        "AMD Instinct MI250X datasheet (383 TFLOPS peak FP16/BF16 matrix; 3.2768 TB/s HBM2e)",
        (r"mi250x",)),
    GPU("MI250 GCD", 181.0, 1638.4,
        "AMD Instinct MI250 datasheet (362.1 TFLOPS peak FP16/BF16 matrix, 3.2768 TB/s per package), halved: one "
        "of the package's two GCDs, which the runtime exposes as one device",
        (r"mi250.*gcd",)),
    GPU("MI250", 362.1, 3276.8,
        "AMD Instinct MI250 datasheet (362.1 TFLOPS peak FP16/BF16 matrix; 3.2768 TB/s HBM2e)",
        (r"mi250",)),
    GPU("MI300X", 1307.4, 5300.0,
        "AMD Instinct MI300X datasheet (1,307.4 TFLOPS peak FP16/BF16 matrix dense, 2,614.9 with sparsity; 5.3 TB/s)",
        (r"mi300x",)),
)

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
