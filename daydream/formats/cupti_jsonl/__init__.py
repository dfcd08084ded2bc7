"""Reader for ``cupti-jsonl`` v1, daydream's own raw CUPTI activity dump (JSON Lines).

The format is documented in ``docs/cupti-jsonl.md`` and its JSON Schema is generated from the
msgspec structs below into ``schemas/cupti-jsonl.schema.json`` (``python
scripts/write_schemas.py``). In short: line 1 is a ``HEADER`` object, every
other line is one CUPTI activity record, ``{"kind": "<CUPTI kind name without prefix>", ...}``,
with the C struct's camelCase field names. All times are CUPTI nanoseconds (``cupti_ns``), kept
as they are on the table's clock. ``scripts/collect_cupti.py`` writes such files on a GPU machine;
:func:`daydream.formats.cupti_export.write_cupti_jsonl` writes any event table in this format.

Reading is columnar: every line is decoded by msgspec into one flat struct (:class:`_Line`,
absent fields hold a sentinel), columns are pulled out with ``np.fromiter`` and all joins
(API call <-> GPU work, external correlation, SYNCHRONIZATION <-> CUDA_EVENT, marker START <->
END) are sorted-array lookups, so records may come in any order.
"""

from __future__ import annotations

import itertools
import warnings
import operator
import re
from collections import defaultdict
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Annotated, Any, Literal, Optional

import msgspec
import numpy as np

from ...errors import TraceFormatError
from ...events.table import (
    COLUMNS,
    Accounting,
    CopyKind,
    DeviceInfo,
    EventTable,
    Kind,
    MemKind,
    SyncKind,
    TraceMeta,
)
from .. import checked_rank, read_maybe_gzip

NAME = "cupti-jsonl"
DESCRIPTION = (
    'raw CUPTI activity dump: JSON Lines (plain or gzip) whose first line is {"kind":"HEADER","format":"cupti-jsonl",...}, '
    "as written by scripts/collect_cupti.py"
)
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


# ---------------------------------------------------------------------------------------------
# Callback-id tables (fallback names for API records that lack "name")
# ---------------------------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------------------------
# Schema structs: the documented shape of each line (generated into schemas/)
# ---------------------------------------------------------------------------------------------

U32 = Annotated[int, msgspec.Meta(ge=0, le=0xFFFFFFFF)]
U64 = Annotated[int, msgspec.Meta(ge=0)]
I64 = Annotated[int, msgspec.Meta(ge=-(1 << 63) + 1, le=(1 << 63) - 1)]
I8 = Annotated[int, msgspec.Meta(ge=-128, le=127)]
Ns = Annotated[int, msgspec.Meta(ge=-(1 << 63) + 1, description="timestamp, ns (CUPTI writes uint64 cuptiGetTimestamp ns)")]


def _doc(t: Any, text: str) -> Any:
    return Annotated[t, msgspec.Meta(description=text)]


class Header(msgspec.Struct, tag_field="kind", tag="HEADER", omit_defaults=True, kw_only=True):
    """Line 1 of every dump: identifies the format and the recording."""

    format: _doc(Literal["cupti-jsonl"], "always 'cupti-jsonl'")
    version: _doc(Literal[1], "format version; this schema describes version 1")
    pid: _doc(Optional[U32], "process id of the recorded program: the pid of API records without processId and of GPU records without an API record of their correlationId") = None
    hostname: Optional[str] = None
    clock: _doc(str, "time base of all timestamps: 'cupti_ns' (cuptiGetTimestamp nanoseconds)") = "cupti_ns"
    cuptiVersion: _doc(Optional[int], "cuptiGetVersion()") = None
    cudaDriverVersion: _doc(Optional[int], "cuDriverGetVersion()") = None
    wallClockAtStartNs: _doc(Optional[int], "Unix epoch ns when recording started; with cuptiTsAtStartNs maps cupti_ns to wall time") = None
    cuptiTsAtStartNs: _doc(Optional[int], "cuptiGetTimestamp() at the same moment, ns") = None
    rank: _doc(Optional[int], "distributed rank (RANK), when known") = None
    worldSize: _doc(Optional[int], "distributed world size (WORLD_SIZE), when known") = None
    extra: _doc(dict[str, str], "free-form facts; daydream copies them into TraceMeta.extra") = {}


class Overrides(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True):
    """daydream extension: exact EventTable column values of this record's row, applied last.

    The exporter writes it only for values the CUPTI fields cannot carry (a -1 where CUPTI has an
    unsigned field, a column CUPTI has no field for), so that every table survives write -> read.
    """

    start_ns: Optional[I64] = None
    end_ns: Optional[I64] = None
    pid: Optional[I64] = None
    tid: Optional[I64] = None
    device: Optional[Annotated[int, msgspec.Meta(ge=-(1 << 31), le=(1 << 31) - 1)]] = None
    stream: Optional[I64] = None
    correlation: Optional[I64] = None
    bytes: Optional[I64] = None
    copy_kind: Optional[I8] = None
    src_kind: Optional[I8] = None
    dst_kind: Optional[I8] = None
    sync_kind: Optional[I8] = None
    link_stream: Optional[I64] = None
    link_correlation: Optional[I64] = None


class _Record(msgspec.Struct, tag_field="kind", omit_defaults=True, kw_only=True):
    """Fields every record line may carry as daydream extensions."""

    cat: _doc(Optional[str], "daydream extension: the row's category; default: the record kind (MARKER: its domain)") = None
    externalId: _doc(Optional[I64], "daydream extension: the row's external id (-1: none), instead of the EXTERNAL_CORRELATION lookup") = None
    daydream: _doc(Optional[Overrides], "daydream extension: exact column values, applied last") = None


_EXT = "daydream extension (not a CUPTI field of this kind)"


class ApiRecord(_Record, tag="RUNTIME", kw_only=True):
    """CUpti_ActivityAPI of the runtime domain: one CUDA runtime call on a CPU thread."""

    cbid: _doc(Optional[U32], "callback id (cupti_runtime_cbid.h / cupti_driver_cbid.h)") = None
    name: _doc(Optional[str], "function name (cuptiGetCallbackName); readers fall back to a cbid table") = None
    domain: _doc(Optional[Literal["runtime", "driver"]], "callback domain") = None
    start: Ns
    end: Ns
    processId: _doc(Optional[U32], "absent: the header's pid") = None
    threadId: Optional[U32] = None
    correlationId: _doc(Optional[U32], "links the call to the GPU records it launched") = None
    returnValue: Optional[int] = None
    deviceId: _doc(Optional[U32], _EXT) = None
    streamId: _doc(Optional[U32], _EXT) = None


class DriverApiRecord(ApiRecord, tag="DRIVER", kw_only=True):
    """CUpti_ActivityAPI of the driver domain (same fields as RUNTIME)."""


class KernelRecord(_Record, tag="CONCURRENT_KERNEL", kw_only=True):
    """CUpti_ActivityKernel9/10/13: one kernel execution (fields beyond those listed are allowed)."""

    name: _doc(Optional[str], "kernel name, mangled as CUPTI reports it") = None
    start: Ns
    end: Ns
    deviceId: Optional[U32] = None
    contextId: Optional[U32] = None
    streamId: Optional[U32] = None
    correlationId: _doc(Optional[U32], "correlationId of the launching API record") = None
    gridX: Optional[int] = None
    gridY: Optional[int] = None
    gridZ: Optional[int] = None
    blockX: Optional[int] = None
    blockY: Optional[int] = None
    blockZ: Optional[int] = None
    registersPerThread: Optional[int] = None
    staticSharedMemory: Optional[int] = None
    dynamicSharedMemory: Optional[int] = None
    graphId: Optional[int] = None
    graphNodeId: Optional[int] = None
    processId: _doc(Optional[U32], _EXT + ": launching process, instead of the correlationId lookup") = None
    threadId: _doc(Optional[U32], _EXT) = None


class SerialKernelRecord(KernelRecord, tag="KERNEL", kw_only=True):
    """Same struct as CONCURRENT_KERNEL (CUPTI's serializing kernel kind)."""


class MemcpyRecord(_Record, tag="MEMCPY", kw_only=True):
    """CUpti_ActivityMemcpy6: one memory copy."""

    copyKind: _doc(Optional[U32], "CUpti_ActivityMemcpyKind: 1 HtoD, 2 DtoH, 3 HtoA, 4 AtoH, 5 AtoA, 6 AtoD, 7 DtoA, 8 DtoD, 9 HtoH, 10 PtoP") = None
    srcKind: _doc(Optional[U32], "CUpti_ActivityMemoryKind: 0 unknown, 1 pageable, 2 pinned, 3 device, 4 array, 5 managed, 6 device static, 7 managed static") = None
    dstKind: _doc(Optional[U32], "CUpti_ActivityMemoryKind of the destination") = None
    flags: _doc(Optional[int], "bit 0: asynchronous") = None
    bytes: Optional[U64] = None
    start: Ns
    end: Ns
    deviceId: Optional[U32] = None
    contextId: Optional[U32] = None
    streamId: Optional[U32] = None
    correlationId: Optional[U32] = None
    runtimeCorrelationId: Optional[U32] = None
    graphId: Optional[int] = None
    graphNodeId: Optional[int] = None
    name: _doc(Optional[str], _EXT + "; default 'Memcpy HtoD (Pageable -> Device)'") = None
    processId: _doc(Optional[U32], _EXT) = None
    threadId: _doc(Optional[U32], _EXT) = None


class PeerMemcpyRecord(MemcpyRecord, tag="MEMCPY2", kw_only=True):
    """CUpti_ActivityMemcpyPtoP4: a peer-to-peer copy."""

    srcDeviceId: Optional[U32] = None
    srcContextId: Optional[U32] = None
    dstDeviceId: Optional[U32] = None
    dstContextId: Optional[U32] = None


class MemsetRecord(_Record, tag="MEMSET", kw_only=True):
    """CUpti_ActivityMemset4: one memory set."""

    value: Optional[int] = None
    bytes: Optional[U64] = None
    start: Ns
    end: Ns
    deviceId: Optional[U32] = None
    contextId: Optional[U32] = None
    streamId: Optional[U32] = None
    correlationId: Optional[U32] = None
    flags: Optional[int] = None
    memoryKind: _doc(Optional[U32], "CUpti_ActivityMemoryKind") = None
    graphId: Optional[int] = None
    graphNodeId: Optional[int] = None
    name: _doc(Optional[str], _EXT + "; default 'Memset (Device)'") = None
    processId: _doc(Optional[U32], _EXT) = None
    threadId: _doc(Optional[U32], _EXT) = None


class SynchronizationRecord(_Record, tag="SYNCHRONIZATION", kw_only=True):
    """CUpti_ActivitySynchronization2: what a synchronizing call waited on."""

    type: _doc(Optional[U32], "CUpti_ActivitySynchronizationType: 1 event sync, 2 stream wait event, 3 stream sync, 4 context sync") = None
    start: Ns
    end: Ns
    correlationId: _doc(Optional[U32], "of the synchronizing API call") = None
    contextId: Optional[U32] = None
    streamId: _doc(Optional[U32], "stream synchronized or waiting; 4294967295 = invalid (context/event sync)") = None
    cudaEventId: _doc(Optional[U32], "event waited on; 4294967295 = invalid") = None
    cudaEventSyncId: _doc(Optional[U64], "equals CUDA_EVENT.cudaEventSyncId of the awaited event record (CUDA 12.8+)") = None
    name: _doc(Optional[str], _EXT + "; default 'Stream Sync', 'Event Sync', 'Stream Wait Event', 'Context Sync'") = None
    deviceId: _doc(Optional[U32], _EXT) = None
    processId: _doc(Optional[U32], _EXT) = None
    threadId: _doc(Optional[U32], _EXT) = None


class CudaEventRecord(_Record, tag="CUDA_EVENT", kw_only=True):
    """CUpti_ActivityCudaEvent2: one cudaEventRecord; SYNCHRONIZATION records link to it."""

    correlationId: _doc(Optional[U32], "of the cudaEventRecord call") = None
    contextId: Optional[U32] = None
    streamId: _doc(Optional[U32], "stream the event was recorded on") = None
    eventId: Optional[U32] = None
    deviceId: Optional[U32] = None
    deviceTimestamp: Optional[int] = None
    cudaEventSyncId: Optional[U64] = None


class ObjectId(msgspec.Struct, omit_defaults=True):
    """The CUpti_ActivityObjectKindId union, flattened: thread objects fill processId/threadId,
    device/context/stream objects fill deviceId/contextId/streamId."""

    processId: Optional[U32] = None
    threadId: Optional[U32] = None
    deviceId: Optional[U32] = None
    contextId: Optional[U32] = None
    streamId: Optional[U32] = None


class MarkerRecord(_Record, tag="MARKER", kw_only=True):
    """CUpti_ActivityMarker2 (NVTX): a range START or END, or an instantaneous marker."""

    flags: _doc(U32, "1 instantaneous, 2 start, 4 end (CUpti_ActivityFlag bits)")
    timestamp: Ns
    id: _doc(U64, "pairs a START with its END")
    objectKind: _doc(Optional[U32], "1 process, 2 thread, 3 device, 4 context, 5 stream") = None
    objectId: Optional[ObjectId] = None
    name: _doc(Optional[str], "message; null on END records") = None
    domain: _doc(Optional[str], "NVTX domain; null = default domain") = None


class MarkerDataRecord(_Record, tag="MARKER_DATA", kw_only=True):
    """CUpti_ActivityMarkerData: payload and color of a marker (read, not represented)."""

    id: Optional[U64] = None
    flags: Optional[int] = None
    payloadKind: Optional[int] = None
    payload: Any = None
    color: Optional[int] = None
    category: Optional[int] = None


class ExternalCorrelationRecord(_Record, tag="EXTERNAL_CORRELATION", kw_only=True):
    """CUpti_ActivityExternalCorrelation: maps a correlationId to a framework id."""

    externalKind: _doc(Optional[U32], "1 unknown, 2 OpenACC, 3 CUSTOM0 (PyTorch op ids), 4 CUSTOM1, 5 CUSTOM2") = None
    externalId: U64
    correlationId: U32


class DeviceRecord(_Record, tag="DEVICE", kw_only=True):
    """CUpti_ActivityDevice5 (subset): a GPU; becomes TraceMeta.devices."""

    id: Optional[U32] = None
    name: Optional[str] = None
    computeCapabilityMajor: Optional[int] = None
    computeCapabilityMinor: Optional[int] = None
    numMultiprocessors: Optional[int] = None
    globalMemorySize: Optional[int] = None


class OverheadRecord(_Record, tag="OVERHEAD", kw_only=True):
    """CUpti_ActivityOverhead: CUPTI/driver overhead interval (read, not represented)."""

    overheadKind: Optional[int] = None
    objectKind: Optional[int] = None
    objectId: Optional[ObjectId] = None
    start: Optional[int] = None
    end: Optional[int] = None
    correlationId: Optional[int] = None


class CpuOpRecord(_Record, tag=CPU_OP_KIND, kw_only=True):
    """daydream extension: a framework CPU op (EventTable Kind.CPU_OP, Kineto ``cpu_op``)."""

    name: Optional[str] = None
    start: Ns
    end: Ns
    processId: _doc(Optional[U32], "absent: the header's pid") = None
    threadId: Optional[U32] = None
    correlationId: Optional[U32] = None
    deviceId: Optional[U32] = None
    streamId: Optional[U32] = None


#: record structs in the schema, in documentation order
RECORD_TYPES = (
    ApiRecord, DriverApiRecord, KernelRecord, SerialKernelRecord, MemcpyRecord, PeerMemcpyRecord,
    MemsetRecord, SynchronizationRecord, CudaEventRecord, MarkerRecord, MarkerDataRecord,
    ExternalCorrelationRecord, DeviceRecord, OverheadRecord, CpuOpRecord,
)

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


def cupti_jsonl_schema() -> dict:
    """JSON Schema of one line of a ``cupti-jsonl`` v1 dump (header or record).

    Generated from :class:`Header` and :data:`RECORD_TYPES`; ``schemas/cupti-jsonl.schema.json``
    is this function's output (``python scripts/write_schemas.py``, :mod:`daydream.report.schemas`).
    Records of kinds not listed are allowed (readers skip them); unknown fields are allowed.
    """
    schemas, defs = msgspec.json.schema_components([Header, *RECORD_TYPES], ref_template="#/$defs/{name}")
    known = sorted(["HEADER", *(t.__struct_config__.tag for t in RECORD_TYPES)])
    other = {
        "title": "OtherRecord",
        "description": "A CUPTI record of another kind (e.g. CONTEXT, STREAM, MEMORY2): allowed, skipped by readers.",
        "type": "object",
        "properties": {"kind": {"type": "string", "not": {"enum": known}}},
        "required": ["kind"],
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://daydream.dev/schemas/cupti-jsonl.schema.json",
        "title": "cupti-jsonl line",
        "description": (
            f"One line of a cupti-jsonl v{FORMAT_VERSION} dump (JSON Lines, optionally gzip). Line 1 is a HEADER; "
            "every other line is one CUPTI activity record named by 'kind' (CUpti_ActivityKind without prefix) with "
            "the C struct's camelCase field names. Timestamps are CUPTI ns. See docs/cupti-jsonl.md."
        ),
        "anyOf": [*schemas, other],
        "$defs": defs,
    }


# ---------------------------------------------------------------------------------------------
# Decoding structs: one flat struct for every line; absent integers read as ABSENT
# ---------------------------------------------------------------------------------------------

_Int = Annotated[int, msgspec.Meta(ge=-(1 << 63) + 1)]  # msgspec itself rejects values above uint64


class _ObjectId(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    processId: _Int = ABSENT
    threadId: _Int = ABSENT
    deviceId: _Int = ABSENT
    contextId: _Int = ABSENT
    streamId: _Int = ABSENT


class _Over(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    start_ns: _Int = ABSENT
    end_ns: _Int = ABSENT
    pid: _Int = ABSENT
    tid: _Int = ABSENT
    device: _Int = ABSENT
    stream: _Int = ABSENT
    correlation: _Int = ABSENT
    bytes: _Int = ABSENT
    copy_kind: _Int = ABSENT
    src_kind: _Int = ABSENT
    dst_kind: _Int = ABSENT
    sync_kind: _Int = ABSENT
    link_stream: _Int = ABSENT
    link_correlation: _Int = ABSENT


_NO_OBJECT = _ObjectId()
_NO_OVER = _Over()
#: override fields, in the order the reader applies them (all of them EventTable columns)
OVERRIDE_COLUMNS = tuple(f.name for f in msgspec.structs.fields(_Over))


class _Line(msgspec.Struct, omit_defaults=True, gc=False):
    """Every field the reader uses, of every record kind; unknown fields are ignored."""

    kind: str
    name: Optional[str] = None
    cat: Optional[str] = None
    cbid: _Int = ABSENT
    domain: Optional[str] = None
    start: _Int = ABSENT
    end: _Int = ABSENT
    timestamp: _Int = ABSENT
    processId: _Int = ABSENT
    threadId: _Int = ABSENT
    deviceId: _Int = ABSENT
    contextId: _Int = ABSENT
    streamId: _Int = ABSENT
    correlationId: _Int = ABSENT
    bytes: _Int = ABSENT
    copyKind: _Int = ABSENT
    srcKind: _Int = ABSENT
    dstKind: _Int = ABSENT
    memoryKind: _Int = ABSENT
    flags: _Int = ABSENT
    type: _Int = ABSENT
    cudaEventId: _Int = ABSENT
    cudaEventSyncId: _Int = ABSENT
    eventId: _Int = ABSENT
    id: _Int = ABSENT
    objectKind: _Int = ABSENT
    objectId: _ObjectId = _NO_OBJECT
    externalKind: _Int = ABSENT
    externalId: _Int = ABSENT
    computeCapabilityMajor: _Int = ABSENT
    computeCapabilityMinor: _Int = ABSENT
    numMultiprocessors: _Int = ABSENT
    globalMemorySize: _Int = ABSENT
    # kernel launch configuration: read only by launch_data (per-kernel models), cleaned there;
    # untyped so that an odd value never makes a kernel record malformed
    gridX: Any = None
    gridY: Any = None
    gridZ: Any = None
    blockX: Any = None
    blockY: Any = None
    blockZ: Any = None
    registersPerThread: Any = None
    staticSharedMemory: Any = None
    dynamicSharedMemory: Any = None
    daydream: _Over = _NO_OVER


class _KindOnly(msgspec.Struct):
    kind: str


_LINE_DECODER = msgspec.json.Decoder(_Line)
_KIND_DECODER = msgspec.json.Decoder(_KindOnly)


# ---------------------------------------------------------------------------------------------
# Column helpers
# ---------------------------------------------------------------------------------------------


class _OutOfRange(Exception):
    """An integer field beyond int64 (``load`` names its line)."""

    def __init__(self, kind: str, attr: str, value: int) -> None:
        super().__init__(kind, attr, value)
        self.kind, self.attr, self.value = kind, attr, value


def _ints(objs: list, attr: str) -> np.ndarray:
    """int64 column of ``attr`` over ``objs`` (dotted names allowed).

    Raises _OutOfRange for a value outside int64 (2**64-1 would otherwise wrap to -1, "absent").
    """
    get = attrgetter(attr)
    try:
        return np.fromiter(map(get, objs), dtype=np.int64, count=len(objs))
    except OverflowError:
        for o in objs:
            v = get(o)
            if isinstance(v, int) and not -(1 << 63) <= v < (1 << 63):
                raise _OutOfRange(getattr(o, "kind", "?"), attr, v) from None
        raise


def _objs(objs: list, attr: str) -> np.ndarray:
    return np.fromiter(map(attrgetter(attr), objs), dtype=object, count=len(objs))


def _isnone(a: np.ndarray) -> np.ndarray:
    return np.fromiter(map(operator.is_, a, itertools.repeat(None)), dtype=bool, count=len(a))


def _or(a: np.ndarray, default: int) -> np.ndarray:
    return np.where(a == ABSENT, default, a)


def _stream(a: np.ndarray) -> np.ndarray:
    return np.where((a == ABSENT) | (a == INVALID32), -1, a)


def _last_per_key(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct keys, index of each key's last occurrence)."""
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    last = np.ones(len(sk), dtype=bool)
    last[:-1] = sk[1:] != sk[:-1]
    return sk[last], order[last]


def _lookup(ukeys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Position of each query in the sorted distinct ``ukeys``, -1 where absent."""
    if len(ukeys) == 0:
        return np.full(len(query), -1, dtype=np.int64)
    pos = np.minimum(np.searchsorted(ukeys, query), len(ukeys) - 1)
    return np.where(ukeys[pos] == query, pos, -1)


def _codes(*cols: np.ndarray) -> np.ndarray:
    """Dense int codes of the rows of several equal-length key columns."""
    if len(cols[0]) == 0:
        return np.zeros(0, dtype=np.int64)
    _, inv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
    return inv.reshape(-1).astype(np.int64)


def _occurrence(keys: np.ndarray) -> np.ndarray:
    """For each element: how many earlier elements have the same key (0 for the first)."""
    n = len(keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    first = np.ones(n, dtype=bool)
    first[1:] = sk[1:] != sk[:-1]
    start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    out = np.empty(n, dtype=np.int64)
    out[order] = np.arange(n) - start
    return out


def _names_by_key(fn, *keys: np.ndarray) -> np.ndarray:
    """Object array of ``fn(*key)`` per element of the key columns, calling fn once per distinct key."""
    if len(keys[0]) == 0:
        return np.zeros(0, dtype=object)
    u, inv = np.unique(np.stack(keys, axis=1), axis=0, return_inverse=True)
    out = np.empty(len(u), dtype=object)
    out[:] = [fn(*k) for k in u.tolist()]
    return out[inv.reshape(-1)]


def _fill_names(names: np.ndarray, missing: np.ndarray, defaults) -> np.ndarray:
    if missing.any():
        names = names.copy()
        names[missing] = defaults(missing)
    return names


@dataclass
class Rows:
    """Rows built from decoded records, grouped by record kind (not yet sorted).

    ``src[i]`` is the index (into the record list) of the record that defines row i (for a range:
    its START record); ``cols`` holds every EventTable column except name/cat, which are strings
    in ``names``/``cats``.
    """

    src: np.ndarray
    cols: dict[str, np.ndarray]
    names: np.ndarray
    cats: np.ndarray
    devices: list[DeviceInfo]


# ---------------------------------------------------------------------------------------------
# Records -> rows
# ---------------------------------------------------------------------------------------------


def build_rows(recs: list[_Line], header_pid: int, acc: Accounting) -> Rows:
    """Turn decoded record lines into table rows, resolving every cross-record link.

    Pure function of ``recs`` (the exporter runs it to check what a reader will see). Counts
    what it read, kept and skipped into ``acc``. ``header_pid`` is the header's ``pid`` or -1.
    """
    b = _Builder.of(recs, header_pid, acc)
    api_blocks = _call_and_gpu_blocks(b)
    _sync_block(b)
    mk_idx, mk = b.sub("MARKER")
    open_ranges = _marker_rows(mk_idx, mk, b.blocks, b.derive_pid, acc) if mk else None
    devices = _device_infos(b)
    _skip_unused_kinds(b)
    src, cols, names, cats, need = _concat_blocks(b.blocks, b.derive_pid)
    srcrecs = b.arr[src].tolist()
    # unmatched marker STARTs run to the end of the trace
    if open_ranges is not None and open_ranges.any():
        times = np.concatenate([cols["start_ns"], cols["end_ns"]])
        cols["end_ns"][open_ranges] = int(times.max()) if len(times) else -1
    _gpu_pids(cols, need, api_blocks, header_pid, acc)
    # external ids: explicit field, else the EXTERNAL_CORRELATION record
    explicit = _ints(srcrecs, "externalId")
    ext = _or(explicit, -1)
    lookup_rows = (explicit == ABSENT) & (cols["correlation"] >= 0)
    _resolve_external(b.sub("EXTERNAL_CORRELATION")[1], cols["correlation"], lookup_rows, ext, acc)
    cols["external_id"] = ext
    _apply_overrides(srcrecs, cols)  # last
    return Rows(src=src, cols=cols, names=names, cats=cats, devices=devices)


@dataclass
class _Builder:
    """State shared by the steps of :func:`build_rows`: the records by kind and the row blocks.

    A block is a dict: ``src`` (record index of each row), ``cols`` (int64 columns), ``names``,
    ``cats`` (object arrays); blocks of :meth:`plain` also hold ``recs`` and ``kname``.
    """

    arr: np.ndarray  #: object array of the records
    groups: dict[str, np.ndarray]  #: record kind -> indices into ``arr``, in file order
    header_pid: int
    acc: Accounting
    blocks: list[dict] = field(default_factory=list)
    #: per block: bool per row, its pid comes from the API record of its correlationId
    derive_pid: list[np.ndarray] = field(default_factory=list)

    @classmethod
    def of(cls, recs: list[_Line], header_pid: int, acc: Accounting) -> "_Builder":
        """Group the records by kind (in order of first appearance), counting each in ``acc.read``."""
        n = len(recs)
        arr = np.empty(n, dtype=object)
        arr[:] = recs
        kind_ids: defaultdict[str, int] = defaultdict(itertools.count().__next__)
        codes = np.fromiter(map(kind_ids.__getitem__, map(attrgetter("kind"), recs)), dtype=np.int64, count=n)
        groups: dict[str, np.ndarray] = {}
        for kname, code in kind_ids.items():
            idx = np.flatnonzero(codes == code)
            groups[kname] = idx
            acc.add("read", kname, len(idx))
        return cls(arr, groups, header_pid, acc)

    def sub(self, kname: str) -> tuple[np.ndarray, list]:
        """(indices, records) of the records of kind ``kname``."""
        idx = self.groups.get(kname, np.zeros(0, dtype=np.int64))
        return idx, self.arr[idx].tolist()

    def plain(self, kname: str, row_kind: Kind, name_default, gpu: bool) -> dict | None:
        """Append the block of one row per ``kname`` record (start/end records); None when there are none.

        ``name_default(recs, cols, missing)`` gives the names of the records without one; ``gpu``:
        their pid is left ABSENT when absent (found later from the API records), else the
        header's pid.
        """
        idx, rs = self.sub(kname)
        m = len(rs)
        if not m:
            return None
        start, end = _ints(rs, "start"), _ints(rs, "end")
        pid = _ints(rs, "processId")
        cols = {
            "kind": np.full(m, int(row_kind), dtype=np.int64),
            "start_ns": _or(start, -1),
            "end_ns": _or(end, -1),
            "pid": pid if gpu else _or(pid, self.header_pid),
            "tid": _or(_ints(rs, "threadId"), -1),
            "device": _or(_ints(rs, "deviceId"), -1),
            "stream": _stream(_ints(rs, "streamId")),
            "correlation": _or(_ints(rs, "correlationId"), -1),
            "bytes": _or(_ints(rs, "bytes"), -1),
            "copy_kind": _or(_ints(rs, "copyKind"), 0),
            "src_kind": _or(_ints(rs, "srcKind"), 0),
            "dst_kind": _or(_ints(rs, "dstKind"), 0),
            "sync_kind": np.zeros(m, dtype=np.int64),
            "link_stream": np.full(m, -1, dtype=np.int64),
            "link_correlation": np.full(m, -1, dtype=np.int64),
        }
        neg = ((start != ABSENT) & (start < 0)) | ((end != ABSENT) & (end < 0))
        self.acc.add("notes", f"{kname} with a negative timestamp (times -1)", int(neg.sum()))
        cols["start_ns"][neg] = cols["end_ns"][neg] = -1
        back = ~neg & (start != ABSENT) & (end != ABSENT) & (end < start)
        self.acc.add("notes", f"{kname} end before start (end set to start)", int(back.sum()))
        cols["end_ns"][back] = cols["start_ns"][back]
        if gpu:
            bad_dev = cols["device"] < -1
            self.acc.add("notes", f"{kname} with a negative deviceId (-1: unknown)", int(bad_dev.sum()))
            cols["device"][bad_dev] = -1
        names = _objs(rs, "name")
        no_name = _isnone(names)
        if kname in KERNEL_KINDS or kname == CPU_OP_KIND:  # calls, copies and sets are named from their codes
            self.acc.add("notes", f"{kname} without a name", int(no_name.sum()))
        names = _fill_names(names, no_name, lambda miss: name_default(rs, cols, miss))
        cats = _objs(rs, "cat")
        cats = _fill_names(cats, _isnone(cats), lambda miss: kname)
        missing_t = (start == ABSENT) | (end == ABSENT)
        self.acc.add("notes", f"{kname} without start/end (times -1)", int(missing_t.sum()))
        self.acc.add("notes", f"{kname} with start = end = 0 (timestamp unavailable)", int(((start == 0) & (end == 0)).sum()))
        self.acc.add("kept", kname, m)
        block = {"src": idx, "cols": cols, "names": names, "cats": cats, "recs": rs, "kname": kname}
        self.blocks.append(block)
        self.derive_pid.append(np.full(m, gpu))
        return block


def _call_and_gpu_blocks(b: _Builder) -> list[dict]:
    """Blocks of the CPU-side calls (API records, CPU ops) and GPU work; returns the API blocks."""
    api_blocks = []
    for kname in API_KINDS:
        blk = b.plain(kname, Kind.RUNTIME, lambda rs, cols, miss, k=kname: _names_by_key(lambda c: api_name(k, c), _ints(rs, "cbid")[miss]), gpu=False)
        if blk:
            api_blocks.append(blk)
    b.plain(CPU_OP_KIND, Kind.CPU_OP, lambda rs, cols, miss: "<unnamed op>", gpu=False)
    for kname in KERNEL_KINDS:
        b.plain(kname, Kind.KERNEL, lambda rs, cols, miss: "<unnamed kernel>", gpu=True)
    for kname in MEMCPY_KINDS:
        b.plain(
            kname, Kind.MEMCPY,
            lambda rs, cols, miss: _names_by_key(memcpy_name, cols["copy_kind"][miss], cols["src_kind"][miss], cols["dst_kind"][miss]),
            gpu=True,
        )
    b.plain("MEMSET", Kind.MEMSET, lambda rs, cols, miss: _names_by_key(memset_name, _ints(rs, "memoryKind")[miss]), gpu=True)
    return api_blocks


def _sync_block(b: _Builder) -> None:
    """The SYNC block, linked to the CUDA_EVENT records it waits on (those are kept, the rest skipped)."""
    sb = b.plain("SYNCHRONIZATION", Kind.SYNC, lambda rs, cols, miss: _names_by_key(sync_name, _or(_ints(rs, "type"), 0)[miss]), gpu=True)
    _, ev = b.sub("CUDA_EVENT")
    ev_used = np.zeros(len(ev), dtype=bool)
    if sb:
        rs = sb["recs"]
        sb["cols"]["sync_kind"] = _or(_ints(rs, "type"), 0)
        _link_syncs(sb, rs, ev, ev_used, b.acc)
    b.acc.add("kept", "CUDA_EVENT", int(ev_used.sum()))
    b.acc.add("skipped", "CUDA_EVENT not awaited by any SYNCHRONIZATION", int((~ev_used).sum()))


def _device_infos(b: _Builder) -> list[DeviceInfo]:
    """The DEVICE records as DeviceInfo (-1 for absent numbers)."""
    def opt(v: int) -> int:
        return -1 if v == ABSENT else int(v)

    _, dv = b.sub("DEVICE")
    devices = [
        DeviceInfo(
            id=opt(r.id), name=r.name or "", compute_major=opt(r.computeCapabilityMajor),
            compute_minor=opt(r.computeCapabilityMinor), num_sms=opt(r.numMultiprocessors),
            total_memory_bytes=opt(r.globalMemorySize))
        for r in dv
    ]
    b.acc.add("kept", "DEVICE", len(dv))
    return devices


def _skip_unused_kinds(b: _Builder) -> None:
    """Count the records of the kinds that make no rows as skipped, by reason."""
    for kname, idx in b.groups.items():
        if kname in USED_KINDS:
            continue
        if kname == "HEADER":
            b.acc.add("skipped", "HEADER line after line 1", len(idx))
        elif kname in UNREPRESENTED_KINDS:
            b.acc.add("skipped", f"{kname} records (not represented in the event table)", len(idx))
        else:
            b.acc.add("skipped", f"unknown record kind {kname!r}", len(idx))


def _concat_blocks(blocks: list[dict], derive_pid: list[np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """(src, int64 cols, names, cats, pid-from-API mask) of all the blocks, in block order."""
    if not blocks:
        cols = {c: np.zeros(0, dtype=np.int64) for c in COLUMNS if c not in ("name_id", "cat_id")}
        empty = np.zeros(0, dtype=object)
        return np.zeros(0, dtype=np.int64), cols, empty, empty, np.zeros(0, dtype=bool)
    src = np.concatenate([b["src"] for b in blocks]).astype(np.int64)
    cols = {c: np.concatenate([b["cols"][c] for b in blocks]).astype(np.int64) for c in blocks[0]["cols"]}
    names = np.concatenate([b["names"] for b in blocks])
    cats = np.concatenate([b["cats"] for b in blocks])
    return src, cols, names, cats, np.concatenate(derive_pid)


def _gpu_pids(cols: dict[str, np.ndarray], need: np.ndarray, api_blocks: list[dict], header_pid: int, acc: Accounting) -> None:
    """Set (in place) the pid of the GPU rows without one: that of the API record with the same correlationId.

    Among several API records of one correlationId, the last in the file; without any, and on
    every row still without a pid, the header's pid.
    """
    need &= cols["pid"] == ABSENT
    if need.any():
        api_corr = np.concatenate([b["cols"]["correlation"] for b in api_blocks]) if api_blocks else np.zeros(0, np.int64)
        api_pid = np.concatenate([b["cols"]["pid"] for b in api_blocks]) if api_blocks else np.zeros(0, np.int64)
        ok = api_corr >= 0
        ukeys, last = _last_per_key(api_corr[ok])
        pos = _lookup(ukeys, cols["correlation"][need])
        found = pos >= 0
        pids = api_pid[ok][last]
        cols["pid"][need] = np.where(found, pids[np.maximum(pos, 0)] if len(pids) else header_pid, header_pid)
        rows = np.flatnonzero(need)
        kinds = cols["kind"][rows]
        for k, label in ((Kind.KERNEL, "kernel"), (Kind.MEMCPY, "memcpy"), (Kind.MEMSET, "memset")):
            miss = (~found) & (kinds == k) & (cols["correlation"][rows] >= 0)
            acc.add("notes", f"{label} without an API record of the same correlationId", int(miss.sum()))
    cols["pid"][cols["pid"] == ABSENT] = header_pid


def _apply_overrides(srcrecs: list, cols: dict[str, np.ndarray]) -> None:
    """Set (in place) the column values the records' ``daydream`` extension field gives."""
    has = np.fromiter(map(operator.is_not, map(attrgetter("daydream"), srcrecs), itertools.repeat(_NO_OVER)), dtype=bool, count=len(srcrecs))
    if has.any():
        rows = np.flatnonzero(has)
        orecs = [srcrecs[i] for i in rows]
        for c in OVERRIDE_COLUMNS:
            v = _ints(orecs, f"daydream.{c}")
            set_ = v != ABSENT
            cols[c][rows[set_]] = v[set_]


def _link_syncs(sb: dict, rs: list, ev: list, ev_used: np.ndarray, acc: Accounting) -> None:
    """Fill link_stream/link_correlation of SYNC rows from CUDA_EVENT records (in place)."""
    cols = sb["cols"]
    m = len(rs)
    s_corr = cols["correlation"]
    s_sid = _ints(rs, "cudaEventSyncId")
    s_ctx = _ints(rs, "contextId")
    s_eid = _ints(rs, "cudaEventId")
    link = np.full(m, -1, dtype=np.int64)
    if ev:
        e_corr = _ints(ev, "correlationId")
        e_sid = _ints(ev, "cudaEventSyncId")
        e_ctx = _ints(ev, "contextId")
        e_eid = _ints(ev, "eventId")
        # 1. cudaEventSyncId, when both sides have it
        bad = (ABSENT, -1, INVALID32)
        e_ok = ~np.isin(e_sid, bad)
        s_ok = ~np.isin(s_sid, bad)
        ukeys, last = _last_per_key(e_sid[e_ok])
        pos = _lookup(ukeys, s_sid[s_ok])
        link[np.flatnonzero(s_ok)[pos >= 0]] = np.flatnonzero(e_ok)[last[pos[pos >= 0]]]
        # 2. (contextId, eventId): the latest record with a smaller correlationId
        s_try = (link < 0) & ~np.isin(s_eid, bad) & (s_corr >= 0)
        e_try = ~np.isin(e_eid, bad) & (e_corr != ABSENT)
        if s_try.any() and e_try.any():
            si, ei = np.flatnonzero(s_try), np.flatnonzero(e_try)
            code = _codes(np.concatenate([s_ctx[si], e_ctx[ei]]), np.concatenate([s_eid[si], e_eid[ei]]))
            rank = _codes(np.concatenate([s_corr[si], e_corr[ei]]))
            width = int(rank.max()) + 2
            s_key = code[: len(si)] * width + rank[: len(si)]
            e_key = code[len(si):] * width + rank[len(si):]
            order = np.argsort(e_key, kind="stable")
            ek = e_key[order]
            pos = np.searchsorted(ek, s_key, side="left") - 1
            posc = np.maximum(pos, 0)
            ok = (pos >= 0) & (ek[posc] // width == s_key // width)
            link[si[ok]] = ei[order[posc[ok]]]
        linked = link >= 0
        ev_used[link[linked]] = True
        e_stream = _stream(_ints(ev, "streamId"))
        cols["link_stream"][linked] = e_stream[link[linked]]
        cols["link_correlation"][linked] = _or(e_corr, -1)[link[linked]]
    wants = (~np.isin(s_sid, (ABSENT, -1, INVALID32))) | (~np.isin(s_eid, (ABSENT, -1, INVALID32)))
    acc.add("notes", "SYNCHRONIZATION on an event without its CUDA_EVENT record", int((wants & (link < 0)).sum()))


def _resolve_external(xs: list, corr: np.ndarray, rows: np.ndarray, ext: np.ndarray, acc: Accounting) -> None:
    """ext[rows] = externalId of the EXTERNAL_CORRELATION record of each row's correlationId.

    Several records for one correlationId: a CUSTOM0 one (or one without externalKind) wins over
    other kinds, then the last in the file.
    """
    if not xs:
        return
    x_corr, x_ext, x_kind = _ints(xs, "correlationId"), _ints(xs, "externalId"), _ints(xs, "externalKind")
    valid = (x_corr != ABSENT) & (x_ext != ABSENT)
    acc.add("skipped", "EXTERNAL_CORRELATION without correlationId/externalId", int((~valid).sum()))
    vi = np.flatnonzero(valid)
    pri = ((x_kind[vi] == EXTERNAL_KIND_CUSTOM0) | (x_kind[vi] == ABSENT)).astype(np.int64)
    order = np.lexsort((vi, pri, x_corr[vi]))  # by corr, then priority, then file order
    sc = x_corr[vi][order]
    last = np.ones(len(sc), dtype=bool)
    last[:-1] = sc[1:] != sc[:-1]
    chosen = vi[order[last]]
    ukeys = sc[last]
    acc.add("skipped", "EXTERNAL_CORRELATION superseded by another for the same correlationId", len(vi) - len(chosen))
    pos = _lookup(ukeys, corr[rows])
    hit = pos >= 0
    ri = np.flatnonzero(rows)
    ext[ri[hit]] = x_ext[chosen[pos[hit]]]
    used = np.zeros(len(chosen), dtype=bool)
    used[pos[hit]] = True
    acc.add("kept", "EXTERNAL_CORRELATION", int(used.sum()))
    acc.add("skipped", "EXTERNAL_CORRELATION without a record of its correlationId", int((~used).sum()))


def _marker_rows(idx: np.ndarray, mk: list, blocks: list, derive_pid: list, acc: Accounting) -> np.ndarray:
    """Append RANGE rows (START/END pairs) and MARKER rows; return the mask of open ranges.

    The mask is over the concatenation of all blocks (the RANGE block is appended last but one).
    """
    flags = _or(_ints(mk, "flags"), 0)
    is_start = (flags & MARKER_START) != 0
    is_end = ~is_start & ((flags & MARKER_END) != 0)
    is_inst = ~is_start & ~is_end & ((flags & MARKER_INSTANTANEOUS) != 0)
    other = ~(is_start | is_end | is_inst)
    ids = _ints(mk, "id")
    ts = _or(_ints(mk, "timestamp"), -1)
    si, ei = np.flatnonzero(is_start), np.flatnonzero(is_end)
    # k-th START of an id pairs with the k-th END of that id, in file order
    s_key = np.stack([ids[si], _occurrence(ids[si])], axis=1)
    e_key = np.stack([ids[ei], _occurrence(ids[ei])], axis=1)
    code = _codes(np.concatenate([s_key[:, 0], e_key[:, 0]]), np.concatenate([s_key[:, 1], e_key[:, 1]]))
    s_code, e_code = code[: len(si)], code[len(si):]
    ukeys, first = _last_per_key(e_code)  # (id, occurrence) codes are unique among ENDs
    pos = _lookup(ukeys, s_code)
    matched = pos >= 0
    end_of = np.where(matched, ei[first[np.maximum(pos, 0)]] if len(ei) else 0, -1)

    acc.add("kept", "MARKER", int(len(si) + matched.sum() + is_inst.sum()))
    acc.add("skipped", "MARKER END without a matching START", int(len(ei) - matched.sum()))
    acc.add("skipped", "MARKER with flags neither START, END nor INSTANTANEOUS", int(other.sum()))
    acc.add("notes", "MARKER START without END (range runs to the trace end)", int((~matched).sum()))

    pid = _or(_ints(mk, "objectId.processId"), -1)
    tid = _or(_ints(mk, "objectId.threadId"), -1)
    dev = _or(_ints(mk, "objectId.deviceId"), -1)
    stream = _stream(_ints(mk, "objectId.streamId"))
    names = _objs(mk, "name")
    names = _fill_names(names, _isnone(names), lambda miss: "")
    cats = _objs(mk, "cat")
    dom = _objs(mk, "domain")
    cats = np.where(_isnone(cats), np.where(_isnone(dom), "MARKER", dom), cats)

    def block(rows: np.ndarray, kind: Kind, end: np.ndarray) -> None:
        r = len(rows)
        blocks.append({
            "src": idx[rows],
            "cols": {
                "kind": np.full(r, int(kind), dtype=np.int64),
                "start_ns": ts[rows], "end_ns": end,
                "pid": pid[rows], "tid": tid[rows], "device": dev[rows], "stream": stream[rows],
                "correlation": np.full(r, -1, dtype=np.int64),
                "bytes": np.full(r, -1, dtype=np.int64),
                "copy_kind": np.zeros(r, dtype=np.int64), "src_kind": np.zeros(r, dtype=np.int64),
                "dst_kind": np.zeros(r, dtype=np.int64), "sync_kind": np.zeros(r, dtype=np.int64),
                "link_stream": np.full(r, -1, dtype=np.int64), "link_correlation": np.full(r, -1, dtype=np.int64),
            },
            "names": names[rows], "cats": cats[rows],
        })
        derive_pid.append(np.zeros(r, dtype=bool))

    before = sum(len(b["src"]) for b in blocks)
    block(si, Kind.RANGE, np.where(matched, ts[np.maximum(end_of, 0)], -1))
    open_mask = np.zeros(before + len(si), dtype=bool)
    open_mask[before:] = ~matched
    block(np.flatnonzero(is_inst), Kind.MARKER, ts[is_inst])
    return np.concatenate([open_mask, np.zeros(int(is_inst.sum()), dtype=bool)])


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def sniff(head: bytes, path: str) -> bool:
    """True when the first line of ``head`` is a cupti-jsonl HEADER object, or a cupti-jsonl
    record (a dump whose header is missing: :func:`load` then says so)."""
    body = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not body.startswith(b"{"):
        return False
    first = body.split(b"\n", 1)[0]
    if b"cupti-jsonl" not in first and b'"kind"' not in first:
        return False
    try:
        obj = msgspec.json.decode(first)
    except msgspec.DecodeError:
        return False
    if not isinstance(obj, dict):
        return False
    if obj.get("format") == "cupti-jsonl" and obj.get("kind") == "HEADER":
        return True
    return obj.get("kind") in _RECORD_KINDS and "traceEvents" not in obj


#: the record kinds of the format (a first line of one of these is a dump without its header)
_RECORD_KINDS = frozenset(t.__struct_config__.tag for t in RECORD_TYPES)


def _read_header(path: str, data: bytes) -> tuple[Header, int, int]:
    """(header, byte offset of the line after it, its line number)."""
    pos = 0
    if data.startswith(b"\xef\xbb\xbf"):
        pos = 3
    lineno = 1
    while True:  # skip leading blank lines
        nl = data.find(b"\n", pos)
        line = data[pos:] if nl < 0 else data[pos:nl]
        if line.strip() or nl < 0:
            break
        pos, lineno = nl + 1, lineno + 1
    if not line.strip():
        raise TraceFormatError(path, "", "the file is empty")
    where = f"line {lineno}"
    try:
        obj = msgspec.json.decode(line)
    except msgspec.DecodeError as e:
        raise TraceFormatError(path, where, f"not a cupti-jsonl header (not JSON: {e})") from None
    if not isinstance(obj, dict) or obj.get("kind") != "HEADER":
        raise TraceFormatError(path, where, 'missing cupti-jsonl header: the first line must be {"kind":"HEADER","format":"cupti-jsonl","version":1,...}')
    if obj.get("format") != "cupti-jsonl":
        raise TraceFormatError(path, where, f"header names format {obj.get('format')!r}, not 'cupti-jsonl'")
    v = obj.get("version")
    if not isinstance(v, int) or isinstance(v, bool):
        raise TraceFormatError(path, where, f"header version {v!r} is not an integer (this daydream reads \"version\": {FORMAT_VERSION})")
    if v != FORMAT_VERSION:
        raise TraceFormatError(path, where, f"cupti-jsonl version {v!r}; this daydream reads version {FORMAT_VERSION}")
    try:
        header = msgspec.json.decode(line, type=Header)
    except msgspec.ValidationError as e:
        raise TraceFormatError(path, where, f"bad header field: {e}") from None
    return header, (len(data) if nl < 0 else nl + 1), lineno


def decode_records(path: str, data: bytes, start: int, first_lineno: int, strict: bool, acc: Accounting) -> tuple[list[_Line], list[int]]:
    """Decode every line from byte ``start`` on; returns (records, line numbers of bad lines).

    Fast path: one ``decode_lines`` call. If any line fails, every line is decoded on its own to
    find the bad ones: a line that is not JSON, or whose field types do not fit a record kind
    daydream reads, is malformed (TraceFormatError when ``strict``, else skipped and counted). A
    record of a kind daydream does not read is only counted, whatever its fields.
    """
    body = memoryview(data)[start:]
    try:
        return _LINE_DECODER.decode_lines(body), []
    except msgspec.DecodeError:
        pass
    recs: list[_Line] = []
    bad: list[int] = []
    for i, line in enumerate(bytes(body).split(b"\n")):
        if not line.strip():
            continue
        try:
            recs.append(_LINE_DECODER.decode(line))
            continue
        except msgspec.DecodeError as e:
            err = e
        try:
            k = _KIND_DECODER.decode(line).kind
        except msgspec.DecodeError:
            k = None
        if k is not None and k not in USED_KINDS:
            recs.append(_Line(kind=k))  # counted and skipped as its kind
            continue
        lineno = first_lineno + i
        if strict:
            raise TraceFormatError(path, f"line {lineno}", f"malformed record ({err})")
        bad.append(lineno)
        acc.add("read", "malformed line", 1)
        acc.add("skipped", "malformed line", 1)
    return recs, bad


def _out_of_range_error(path: str, data: bytes, e: _OutOfRange) -> TraceFormatError:
    """The error for an integer beyond int64, naming the first line that holds its text."""
    field = e.attr.rsplit(".", 1)[-1]
    at = re.search(rb'"%s"\s*:\s*%d(?![0-9])' % (re.escape(field.encode()), e.value), data)
    where = "line %d" % (data.count(b"\n", 0, at.start()) + 1) if at else ""
    return TraceFormatError(
        path, where, f"{e.kind} record: {e.attr} = {e.value} is outside the 64-bit signed integer range (the record is "
        "damaged, or a 64-bit unsigned value was written as-is); fix or drop the record")


def _note_truncation(path: str, data: bytes, bad: list[int], gz_cut: bool, kept: int, acc: Accounting) -> None:
    """Note and warn (once) when the dump was cut: its last line, without a newline, is malformed
    (``bad`` holds it), or the gzip stream ended without its end marker (``gz_cut``) though what it
    inflated ends at a line end."""
    last = data.count(b"\n") + 1 if data and not data.endswith(b"\n") else -1
    if bad and bad[-1] == last:
        acc.add("notes", f"truncated file: line {last} cut short")
        what = f"its last line ({last}) is cut short and was skipped; kept the {kept:,} complete records before it"
    elif gz_cut:
        acc.add("notes", "truncated file: gzip stream cut short")
        what = f"its gzip stream ends without its end marker; kept the {kept:,} records it holds, those after the cut are lost"
    else:
        return
    warnings.warn(f"{path}: the file is truncated: {what} (--strict refuses such a file)", UserWarning, stacklevel=3)


def kernel_launches(path: str) -> tuple[np.ndarray, np.ndarray, list[_Line]]:
    """The kernel rows of the dump ``path`` as :func:`load` makes them, for the launch data of the
    per-kernel models (:mod:`daydream.formats.launch_data`).

    Returns:
        (device, correlation, records): int64 arrays of length n (the rows' values, after the
        ``daydream`` overrides) and each kernel row's record, whose ``gridX`` .. ``blockZ``,
        ``registersPerThread``, ``staticSharedMemory`` and ``dynamicSharedMemory`` are as written
        (None when absent; not cleaned). Malformed lines are skipped, as :func:`load` skips them.

    Raises:
        TraceFormatError: what :func:`load` raises on the same file (without ``strict``).
    """
    path = str(path)
    data, _ = read_maybe_gzip(path)
    header, body_start, header_line = _read_header(path, data)
    acc = Accounting()
    recs, _ = decode_records(path, data, body_start, header_line + 1, False, acc)
    try:
        rows = build_rows(recs, -1 if header.pid is None else int(header.pid), acc)
    except _OutOfRange as e:
        raise _out_of_range_error(path, data, e) from None
    k = np.flatnonzero(rows.cols["kind"] == Kind.KERNEL)
    return rows.cols["device"][k], rows.cols["correlation"][k], [recs[i] for i in rows.src[k].tolist()]


def _rank_of(header: Header, acc: Accounting) -> dict[str, int]:
    """``rank`` and ``world_size`` of the header (-1 unknown); values out of range are ignored and
    counted, as the Kineto reader does with ``distributedInfo``."""
    r, w = checked_rank(None if header.rank is None else int(header.rank), None if header.worldSize is None else int(header.worldSize),
                        acc, "header ", "rank", "worldSize")
    return {"rank": r, "world_size": w}


def load(path: str, *, strict: bool = False) -> EventTable:
    """Read a cupti-jsonl v1 dump (plain or gzip) into an :class:`EventTable`.

    Times are CUPTI ns as recorded. Runtime/driver records become RUNTIME rows, kernels KERNEL,
    copies MEMCPY, sets MEMSET, SYNCHRONIZATION records SYNC rows (linked to their CUDA_EVENT),
    NVTX START/END pairs RANGE rows, instantaneous NVTX markers MARKER rows, DAYDREAM_CPU_OP
    records CPU_OP rows; EXTERNAL_CORRELATION records set ``external_id`` and DEVICE records
    ``meta.devices``. ``table.accounting`` says what was read, kept and skipped (balanced).

    Args:
        path: the dump.
        strict: raise on the first malformed line instead of skipping it.

    Raises:
        TraceFormatError: unreadable/corrupt file, missing or wrong header, unsupported version,
            or (``strict``) a malformed line, naming the line number.
    """
    path = str(path)
    data, gz_cut = read_maybe_gzip(path)
    if gz_cut and strict:
        raise TraceFormatError(path, "gzip stream", "the gzip stream is cut short (no end marker); strict mode does not salvage it")
    header, body_start, header_line = _read_header(path, data)
    acc = Accounting()
    recs, bad = decode_records(path, data, body_start, header_line + 1, strict, acc)
    header_pid = -1 if header.pid is None else int(header.pid)
    try:
        rows = build_rows(recs, header_pid, acc)
    except _OutOfRange as e:
        raise _out_of_range_error(path, data, e) from None

    order = np.argsort(rows.src, kind="stable")
    cols = {c: a[order] for c, a in rows.cols.items()}
    ids: defaultdict[str, int] = defaultdict(itertools.count().__next__)
    m = len(order)
    cols["name_id"] = np.fromiter(map(ids.__getitem__, rows.names[order].tolist()), dtype=np.int32, count=m)
    cols["cat_id"] = np.fromiter(map(ids.__getitem__, rows.cats[order].tolist()), dtype=np.int32, count=m)

    extra = {k: str(v) for k, v in header.extra.items()}
    for key in ("hostname", "clock", "cuptiVersion", "cudaDriverVersion", "wallClockAtStartNs", "cuptiTsAtStartNs", "pid"):
        v = getattr(header, key)
        if v is not None:
            extra[key] = str(v)
    if bad:
        extra["malformed_lines"] = ",".join(map(str, bad[:20])) + (",..." if len(bad) > 20 else "")
    _note_truncation(path, data, bad, gz_cut, len(recs), acc)
    meta = TraceMeta(source=path, format=NAME, devices=rows.devices, extra=extra, **_rank_of(header, acc))
    return EventTable.from_columns(cols, list(ids), meta, acc)
