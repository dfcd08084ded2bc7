"""The documented shape of each cupti-jsonl line.

Msgspec structs of the header and of every record kind, and the JSON Schema generated from them
(schemas/cupti-jsonl.schema.json).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

import msgspec

from .cupti_codes import CPU_OP_KIND, FORMAT_VERSION

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
