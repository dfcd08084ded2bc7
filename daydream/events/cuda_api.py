"""What each CUDA/HIP runtime or driver API call does to the dependency graph.

The role of a call is decided from its name alone, once per interned name, so it works for every
format (nsys ``cudaLaunchKernel_v7000``, Kineto ``cudaLaunchKernel``, ROCm ``hipLaunchKernel``,
driver ``cuLaunchKernel``). Facts: ``../shared/docs/formats.md`` section S.1 (CUDA Runtime API
"API synchronization behavior").
"""

from __future__ import annotations

import enum
import re

import numpy as np


class ApiRole(enum.IntEnum):
    OTHER = 0  #: no GPU dependency (cudaMalloc, cudaGetDevice, queries, ...)
    LAUNCH = 1  #: enqueues GPU work that it does not wait for (kernel launch, async copy/set, graph launch)
    MEMCPY_SYNC = 2  #: copy that returns only when its own copy has finished (cudaMemcpy, hipMemcpy)
    DEVICE_SYNC = 3  #: waits for all prior work on the device (cudaDeviceSynchronize, cudaFree)
    STREAM_SYNC = 4  #: waits for all prior work on one stream
    EVENT_SYNC = 5  #: waits for the work before the latest record of one event
    EVENT_RECORD = 6  #: cudaEventRecord: marks a stream position
    STREAM_WAIT_EVENT = 7  #: cudaStreamWaitEvent: GPU-side wait, the CPU does not block


#: (The pageable staging threshold is no constant: each trace's own, ``graph/build/staging.py``.)

#: Launches a CUDA stream holds before a launching call blocks (``docs/model.md``, "Launch-queue
#: back-pressure"). Not documented by NVIDIA and not configurable (``cudaLimitDevRuntimePendingLaunchCount``
#: is about device-side launches and does not change it). Source: a measurement posted on the NVIDIA
#: developer forum (forums.developer.nvidia.com/t/68937, "CUDA stream are blocked when launching lots
#: of kernels (>1000)"; the same on Stack Overflow, question 53970187): a ~190 us kernel launched
#: 10,000 times on one stream, the first ~1000 launch calls took 4-5 us each, every later one about
#: a kernel's duration ("the stream seems to wait for the previous kernel complete"); with three
#: streams each stream held ~1000. Taken as 1024 (the poster's "about 1000"); a launch returns
#: when the task ``depth`` positions before its own on the stream has *ended*. On the traces of
#: ``../shared/traces`` at most 777 tasks of one stream were unfinished at a launch (H100 owlv2;
#: 569 on ResNet-50), without the launch blocking: consistent with any depth above that.
LAUNCH_QUEUE_DEPTH = 1024


#: Launch latency ``L`` (ns) per GPU generation, for a trace that cannot show its own: one whose
#: GPU is backlogged at every launch (no launched task finds its stream idle, ``docs/model.md``
#: rule 5 and "A GPU backlogged throughout the trace"). Each value is ``L`` as rule 5 measures it
#: on the development trace of that generation with the most GPU tasks (``../shared/traces``,
#: SOURCES.md there); ``tests/test_backlogged.py`` re-measures each from its trace. No
#: NVIDIA or AMD document gives a launch-to-start latency per generation, and the published
#: figures found (a few us to tens of us, differently measured) do not say how they were measured.
DEFAULT_LAUNCH_LATENCY_NS: dict[str, tuple[int, str]] = {
    "volta": (8_000, "hta/df_index_resolver.json.gz (Tesla V100-SXM2-32GB, 19,370 kernels)"),
    "ampere": (11_547, "hta/nccl_data.json.gz (A100-PG509-200, 2,700 kernels)"),
    "hopper": (6_537, "tracelens/h100_google_owlv2-large-patch14-ensemble__1016001.json.gz (H100 80GB HBM3, 4,330 kernels)"),
    "blackwell": (10_209, "tracelens/b200_eager_trace.json.gz (B200, 768 kernels)"),
    "cdna2": (13_039, "hta/mi250_minitoy_train_ROCm6_2_kineto.json.gz (MI250 GCD, 14 kernels)"),
    "cdna3": (18_228, "tracelens/mi300_gaunernst_bert-small-uncased__1016001.json.gz (MI300X VF, 60 kernels)"),
}
#: a GPU of no generation above (or no GPU named): the lower median of the values above
DEFAULT_LAUNCH_LATENCY_OTHER_NS = sorted(v for v, _ in DEFAULT_LAUNCH_LATENCY_NS.values())[(len(DEFAULT_LAUNCH_LATENCY_NS) - 1) // 2]

_AMD = re.compile(r"amd|radeon|instinct|\bmi\d{3}", re.I)


def gpu_generation(name: str, compute_major: int = -1, compute_minor: int = -1) -> str:
    """The generation of a traced GPU (a key of :data:`DEFAULT_LAUNCH_LATENCY_NS`), or "" when not
    known. NVIDIA by compute capability (CUDA C++ Programming Guide, "Compute Capabilities": 7.0/7.2
    Volta, 8.x Ampere (8.9 Ada is its own, not listed), 9.0 Hopper, 10.x/12.x Blackwell), else by
    name; AMD by name (MI300/MI325 CDNA3, MI210/MI250 CDNA2) or gfx version (9.0 gfx90a: CDNA2,
    9.4 gfx94x: CDNA3)."""
    n = name.lower()
    if _AMD.search(n):
        if re.search(r"mi3\d\d", n) or (compute_major, compute_minor) == (9, 4):
            return "cdna3"
        if re.search(r"mi2[15]0", n) or (compute_major, compute_minor) == (9, 0):
            return "cdna2"
        return ""
    by_cc = {(7, 0): "volta", (7, 2): "volta", (8, 0): "ampere", (8, 6): "ampere", (8, 7): "ampere", (9, 0): "hopper"}
    if (compute_major, compute_minor) in by_cc:
        return by_cc[(compute_major, compute_minor)]
    if compute_major in (10, 12):
        return "blackwell"
    for pat, gen in ((r"v100", "volta"), (r"a100|a10g?\b|a30|a40|rtx ?30\d0|rtx a\d000", "ampere"), (r"h100|h200|h800|gh200", "hopper"),
                     (r"b100|b200|gb200|b300", "blackwell")):
        if re.search(pat, n):
            return gen
    return ""


def default_launch_latency(devices) -> tuple[int, str]:
    """(``L`` in ns, where it comes from) for a trace whose GPU is backlogged throughout: the
    value of :data:`DEFAULT_LAUNCH_LATENCY_NS` for the generation of the first device of
    ``devices`` (``DeviceInfo``-like: ``name``, ``compute_major``, ``compute_minor``) whose
    generation is known, else :data:`DEFAULT_LAUNCH_LATENCY_OTHER_NS`. Never raises."""
    for d in devices or ():
        gen = gpu_generation(getattr(d, "name", "") or "", int(getattr(d, "compute_major", -1)), int(getattr(d, "compute_minor", -1)))
        if gen:
            v, src = DEFAULT_LAUNCH_LATENCY_NS[gen]
            return v, f"{gen.capitalize() if not gen.startswith('cdna') else gen.upper()} default, measured on {src}"
    return DEFAULT_LAUNCH_LATENCY_OTHER_NS, "GPU generation not known: the lower median of the per-generation defaults"


def is_hip(name: str) -> bool:
    """A ROCm/HIP API name (their copies keep the plain "waits for its own copy" rule)."""
    return name.startswith("hip")


_SUFFIX = re.compile(r"(_v\d+)$")
_VARIANT = re.compile(r"_(ptsz|ptds|spt)$")

# base names (after stripping the _vNNNN version suffix and the per-thread variant)
_ROLES: dict[str, ApiRole] = {}
for _n in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cudaLaunch",
           "cudaLaunchCooperativeKernelMultiDevice", "cudaGraphLaunch", "cudaLaunchHostFunc",
           "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel", "cuLaunchGrid", "cuGraphLaunch",
           "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel", "hipExtModuleLaunchKernel",
           "hipLaunchCooperativeKernel", "hipGraphLaunch", "hipHccModuleLaunchKernel",
           "cudaMemcpyAsync", "cudaMemcpy2DAsync", "cudaMemcpy3DAsync", "cudaMemcpyPeerAsync",
           "cudaMemcpyToSymbolAsync", "cudaMemcpyFromSymbolAsync", "cudaMemcpyBatchAsync",
           "cuMemcpyAsync", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyDtoDAsync",
           "hipMemcpyAsync", "hipMemcpyHtoDAsync", "hipMemcpyDtoHAsync", "hipMemcpyDtoDAsync",
           "cudaMemset", "cudaMemsetAsync", "cudaMemset2D", "cudaMemset2DAsync", "cudaMemsetD8Async",
           "cuMemsetD8", "cuMemsetD32", "cuMemsetD8Async", "cuMemsetD32Async",
           "hipMemset", "hipMemsetAsync", "hipMemsetD32Async", "hipMemsetD8Async"):
    _ROLES[_n] = ApiRole.LAUNCH
for _n in ("cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyToSymbol", "cudaMemcpyFromSymbol",
           "cudaMemcpyPeer", "cuMemcpy", "cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpyDtoD",
           "hipMemcpy", "hipMemcpyHtoD", "hipMemcpyDtoH", "hipMemcpyDtoD", "hipMemcpyWithStream"):
    _ROLES[_n] = ApiRole.MEMCPY_SYNC
for _n in ("cudaDeviceSynchronize", "cudaThreadSynchronize", "cuCtxSynchronize", "hipDeviceSynchronize",
           "cudaFree", "cudaFreeHost", "cuMemFree", "hipFree"):
    _ROLES[_n] = ApiRole.DEVICE_SYNC
for _n in ("cudaStreamSynchronize", "cuStreamSynchronize", "hipStreamSynchronize"):
    _ROLES[_n] = ApiRole.STREAM_SYNC
for _n in ("cudaEventSynchronize", "cuEventSynchronize", "hipEventSynchronize"):
    _ROLES[_n] = ApiRole.EVENT_SYNC
for _n in ("cudaEventRecord", "cudaEventRecordWithFlags", "cuEventRecord", "cuEventRecordWithFlags",
           "hipEventRecord", "hipEventRecordWithFlags"):
    _ROLES[_n] = ApiRole.EVENT_RECORD
for _n in ("cudaStreamWaitEvent", "cuStreamWaitEvent", "hipStreamWaitEvent"):
    _ROLES[_n] = ApiRole.STREAM_WAIT_EVENT


def base_name(name: str) -> str:
    """``cudaLaunchKernel_ptsz_v7000`` -> ``cudaLaunchKernel`` (version suffix and variant removed)."""
    return _VARIANT.sub("", _SUFFIX.sub("", name))


def api_role(name: str) -> ApiRole:
    return _ROLES.get(base_name(name), ApiRole.OTHER)


def roles_of_names(names: list[str]) -> np.ndarray:
    """``ApiRole`` of every interned name, as a uint8 array indexed by name id."""
    return np.fromiter((api_role(s) for s in names), dtype=np.uint8, count=len(names))
