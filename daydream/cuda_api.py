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
