"""Device memory capacity of the GPUs of :mod:`daydream.costmodel.gpus`, for "will it fit?".

The capacity of a traced device is the trace's own figure where it records one (Kineto
``deviceProperties.totalGlobalMem``, nsys ``TARGET_INFO_GPU``: ``DeviceInfo.total_memory_bytes``);
this table serves devices the trace does not size and ``gpu-upgrade``'s target. Figures are the
vendors' nominal capacities (their "GB" of HBM/GDDR is GiB: an 80 GB H100 reports
``totalGlobalMem`` 85,520,809,984 B = 79.6 GiB in the shared H100 traces), so a traced device
reports a little less than its entry (the driver keeps some).
"""

from __future__ import annotations

from ..events.table import DeviceInfo
from .gpus import find_gpu

GIB = 1 << 30

#: Host memory one GPU's process can be expected to have, bytes, where the trace records no host
#: RAM: the per-GPU share of the DGX H100's system memory (NVIDIA DGX H100 datasheet: 2 TB of
#: system memory for 8 GPUs = 256 GB each). Pinned (page-locked) host memory above it is warned of.
HOST_BYTES_PER_GPU = 2048 * GIB // 8

#: GPU table name -> (capacity, bytes; source)
CAPACITY: dict[str, tuple[int, str]] = {
    "V100 PCIe": (16 * GIB, "NVIDIA Tesla V100 datasheet (16 or 32 GB HBM2; the 16 GB part, the smaller)"),
    "V100 SXM2": (16 * GIB, "NVIDIA Tesla V100 datasheet (16 or 32 GB HBM2; the 16 GB part, the smaller)"),
    "A100 80GB PCIe": (80 * GIB, "NVIDIA A100 datasheet: 80 GB HBM2e"),
    "A100 40GB PCIe": (40 * GIB, "NVIDIA A100 datasheet: 40 GB HBM2"),
    "A100 80GB SXM": (80 * GIB, "NVIDIA A100 datasheet: 80 GB HBM2e"),
    "A100 40GB SXM": (40 * GIB, "NVIDIA A100 datasheet: 40 GB HBM2"),
    "H100 PCIe": (80 * GIB, "NVIDIA H100 datasheet: 80 GB HBM2e (PCIe)"),
    "H100 SXM": (80 * GIB, "NVIDIA H100 datasheet: 80 GB HBM3 (SXM)"),
    "H200": (141 * GIB, "NVIDIA H200 datasheet: 141 GB HBM3e"),
    "B200": (180 * GIB, "NVIDIA DGX B200 datasheet: 1,440 GB GPU memory over 8 GPUs"),
    "L40S": (48 * GIB, "NVIDIA L40S datasheet: 48 GB GDDR6"),
    "L4": (24 * GIB, "NVIDIA L4 datasheet: 24 GB GDDR6"),
    "RTX A6000": (48 * GIB, "NVIDIA RTX A6000 datasheet: 48 GB GDDR6"),
    "A10G": (24 * GIB, "AWS EC2 G5 instances: 24 GB per A10G"),
    "A10": (24 * GIB, "NVIDIA A10 datasheet: 24 GB GDDR6"),
    "RTX 3080": (10 * GIB, "NVIDIA GeForce RTX 3080 specifications: 10 GB GDDR6X (the original part)"),
    "RTX 3090": (24 * GIB, "NVIDIA GeForce RTX 3090 specifications: 24 GB GDDR6X"),
    "RTX 4090": (24 * GIB, "NVIDIA GeForce RTX 4090 specifications: 24 GB GDDR6X"),
    "MI250X GCD": (64 * GIB, "AMD Instinct MI250X datasheet: 128 GB HBM2e per package, half per GCD"),
    "MI250X": (128 * GIB, "AMD Instinct MI250X datasheet: 128 GB HBM2e"),
    "MI250 GCD": (64 * GIB, "AMD Instinct MI250 datasheet: 128 GB HBM2e per package, half per GCD"),
    "MI250": (128 * GIB, "AMD Instinct MI250 datasheet: 128 GB HBM2e"),
    "MI325X": (256 * GIB, "AMD Instinct MI325X datasheet: 256 GB HBM3E"),
    "MI300X": (192 * GIB, "AMD Instinct MI300X datasheet: 192 GB HBM3"),
}


def device_capacity(devices: list, device: int) -> tuple[int, str]:
    """(capacity in bytes, where it comes from) of GPU ``device`` among ``devices``
    (``DeviceInfo``s); (-1, "") when neither the trace nor the table knows it."""
    dev = next((d for d in devices if isinstance(d, DeviceInfo) and d.id == device), None)
    if dev is None:
        return -1, ""
    if dev.total_memory_bytes > 0:
        return int(dev.total_memory_bytes), "the trace (device properties: total memory)"
    g = find_gpu(dev.name) if dev.name else None
    if g is not None and g.name in CAPACITY:
        cap, src = CAPACITY[g.name]
        return cap, f"{g.name}: {src}"
    return -1, ""
