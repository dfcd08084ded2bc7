"""CUPTI's numbers and names in a cupti-jsonl dump.

The format version, absent and invalid values, flag and object-kind constants, the record kinds
read, callback-id tables and the default names of rows.
"""

from __future__ import annotations

from ...events.table import CopyKind, MemKind, SyncKind

#: the format version this module reads and writes
FORMAT_VERSION = 1


#: value of an integer field the line did not have (never a legal value in a dump)
ABSENT = -(1 << 63)


#: CUPTI's "invalid" value of 32-bit ids (``CUPTI_SYNCHRONIZATION_INVALID_VALUE``, invalid stream)
INVALID32 = 0xFFFFFFFF


# CUpti_ActivityFlag bits of MARKER records
MARKER_INSTANTANEOUS = 1 << 0


MARKER_START = 1 << 1


MARKER_END = 1 << 2


# CUpti_ActivityObjectKind
OBJECT_PROCESS, OBJECT_THREAD, OBJECT_DEVICE, OBJECT_CONTEXT, OBJECT_STREAM = 1, 2, 3, 4, 5


#: CUpti_ExternalCorrelationKind CUSTOM0: what PyTorch/Kineto pushes for CPU-op ids
EXTERNAL_KIND_CUSTOM0 = 3


#: extension record kind for framework CPU ops (no CUPTI equivalent)
CPU_OP_KIND = "DAYDREAM_CPU_OP"


# Callback-id tables (fallback names for API records that lack "name")

#: ``cupti_runtime_cbid.h`` ids (../shared/docs/formats.md C.4; ids are append-only across CUDA
#: versions). The collector writes the real name from ``cuptiGetCallbackName``; this table is
#: only used for dumps without ``name``.
RUNTIME_CBID_NAMES: dict[int, str] = {
    13: "cudaLaunch_v3020",
    20: "cudaMalloc_v3020",
    22: "cudaFree_v3020",
    31: "cudaMemcpy_v3020",
    41: "cudaMemcpyAsync_v3020",
    49: "cudaMemset_v3020",
    51: "cudaMemsetAsync_v3020",
    126: "cudaThreadSynchronize_v3020",
    131: "cudaStreamSynchronize_v3020",
    132: "cudaStreamQuery_v3020",
    134: "cudaEventCreateWithFlags_v3020",
    135: "cudaEventRecord_v3020",
    136: "cudaEventDestroy_v3020",
    137: "cudaEventSynchronize_v3020",
    138: "cudaEventQuery_v3020",
    139: "cudaEventElapsedTime_v3020",
    147: "cudaStreamWaitEvent_v3020",
    160: "cudaMemcpyPeer_v4000",
    161: "cudaMemcpyPeerAsync_v4000",
    165: "cudaDeviceSynchronize_v3020",
    211: "cudaLaunchKernel_v7000",
    214: "cudaLaunchKernel_ptsz_v7000",
    225: "cudaMemcpyAsync_ptsz_v7000",
    239: "cudaStreamSynchronize_ptsz_v7000",
    247: "cudaStreamWaitEvent_ptsz_v7000",
    269: "cudaLaunchCooperativeKernel_v9000",
    284: "cudaLaunchHostFunc_v10000",
    310: "cudaGraphInstantiate_v10000",
    311: "cudaGraphLaunch_v10000",
    430: "cudaLaunchKernelExC_v11060",
    482: "cudaMemcpyBatchAsync_v12080",
}


#: ``cupti_driver_cbid.h`` ids (../shared/docs/formats.md C.4).
DRIVER_CBID_NAMES: dict[int, str] = {
    17: "cuCtxSynchronize",
    121: "cuEventSynchronize",
    126: "cuStreamSynchronize",
    295: "cuStreamWaitEvent",
    305: "cuMemcpy",
    306: "cuMemcpyAsync",
    307: "cuLaunchKernel",
    514: "cuGraphLaunch",
    652: "cuLaunchKernelEx",
}


_COPY_KIND_NAMES = {
    CopyKind.HTOD: "HtoD", CopyKind.DTOH: "DtoH", CopyKind.HTOA: "HtoA", CopyKind.ATOH: "AtoH",
    CopyKind.ATOA: "AtoA", CopyKind.ATOD: "AtoD", CopyKind.DTOA: "DtoA", CopyKind.DTOD: "DtoD",
    CopyKind.HTOH: "HtoH", CopyKind.PTOP: "PtoP",
}


_MEM_KIND_NAMES = {
    MemKind.PAGEABLE: "Pageable", MemKind.PINNED: "Pinned", MemKind.DEVICE: "Device", MemKind.ARRAY: "Array",
    MemKind.MANAGED: "Managed", MemKind.DEVICE_STATIC: "Device Static", MemKind.MANAGED_STATIC: "Managed Static",
}


_SYNC_NAMES = {
    SyncKind.EVENT_SYNC: "Event Sync", SyncKind.STREAM_WAIT_EVENT: "Stream Wait Event",
    SyncKind.STREAM_SYNC: "Stream Sync", SyncKind.CONTEXT_SYNC: "Context Sync",
}


def api_name(kind: str, cbid: int) -> str:
    """Name of a RUNTIME/DRIVER call from its callback id; ``"<runtime cbid N>"`` when unknown."""
    table = DRIVER_CBID_NAMES if kind == "DRIVER" else RUNTIME_CBID_NAMES
    name = table.get(int(cbid))
    if name is None:
        domain = "driver" if kind == "DRIVER" else "runtime"
        return f"<{domain} cbid {cbid}>" if cbid != ABSENT else f"<{domain} call>"
    return name


def memcpy_name(copy_kind: int, src_kind: int, dst_kind: int) -> str:
    """Default name of a MEMCPY record, Kineto style: ``"Memcpy HtoD (Pageable -> Device)"``."""
    ck = _COPY_KIND_NAMES.get(copy_kind, "Unknown")
    return f"Memcpy {ck} ({_MEM_KIND_NAMES.get(src_kind, 'Unknown')} -> {_MEM_KIND_NAMES.get(dst_kind, 'Unknown')})"


def memset_name(memory_kind: int) -> str:
    """Default name of a MEMSET record: ``"Memset (Device)"``, or ``"Memset"`` without memoryKind."""
    if memory_kind == ABSENT:
        return "Memset"
    return f"Memset ({_MEM_KIND_NAMES.get(memory_kind, 'Unknown')})"


def sync_name(sync_type: int) -> str:
    """Default name of a SYNCHRONIZATION record, Kineto style (``"Stream Sync"``, ...)."""
    return _SYNC_NAMES.get(sync_type, "Unknown Sync")


#: record kinds that become rows of the table (the rest are folded in or skipped)
API_KINDS = ("RUNTIME", "DRIVER")


KERNEL_KINDS = ("CONCURRENT_KERNEL", "KERNEL")


MEMCPY_KINDS = ("MEMCPY", "MEMCPY2")


USED_KINDS = frozenset(API_KINDS + KERNEL_KINDS + MEMCPY_KINDS + (
    "MEMSET", "SYNCHRONIZATION", "CUDA_EVENT", "MARKER", "EXTERNAL_CORRELATION", "DEVICE", CPU_OP_KIND))


#: CUpti_ActivityKind names daydream knows but does not represent (counted as skipped, not "unknown")
UNREPRESENTED_KINDS = frozenset((
    "MARKER_DATA", "OVERHEAD", "CONTEXT", "STREAM", "NAME", "MEMORY", "MEMORY2", "MEMORY_POOL",
    "GRAPH_TRACE", "DEVICE_GRAPH_TRACE", "JIT", "ENVIRONMENT", "MODULE", "FUNCTION", "DEVICE_ATTRIBUTE",
    "UNIFIED_MEMORY_COUNTER", "CDP_KERNEL", "PREEMPTION", "OPENACC_DATA", "OPENACC_LAUNCH", "OPENACC_OTHER",
    "OPENMP", "CUDA_DEVICE", "NVLINK", "PCIE", "INSTRUCTION_EXECUTION", "SOURCE_LOCATOR", "GLOBAL_ACCESS",
    "BRANCH", "SHARED_ACCESS", "INSTRUCTION_CORRELATION", "PC_SAMPLING", "PC_SAMPLING_RECORD_INFO",
    "EVENT", "EVENT_INSTANCE", "METRIC", "METRIC_INSTANCE", "INSTANTANEOUS_EVENT", "INSTANTANEOUS_EVENT_INSTANCE",
    "INSTANTANEOUS_METRIC", "INSTANTANEOUS_METRIC_INSTANCE", "SYNCHRONIZATION_INTERNAL", "MEM_DECOMPRESS",
    "CONFIDENTIAL_COMPUTE_ROTATION", "INTERNAL_LAUNCH_API", "COUNT",
))
