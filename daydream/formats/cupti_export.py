"""Write any :class:`~daydream.events.table.EventTable` as a ``cupti-jsonl`` v1 dump.

The inverse of :mod:`daydream.formats.cupti_jsonl`: ``load(write(t))`` gives a table equal to
``t`` (:meth:`EventTable.equals`: every column, names resolved) for every table in canonical
order (as :meth:`EventTable.from_columns` sorts it). Rows become the CUPTI records a collector
would have written:

=========  ===========================================================================
row kind   records
=========  ===========================================================================
RUNTIME    ``RUNTIME`` (``DRIVER`` when the category contains "driver") with ``name``,
           ``cbid`` when known, ``processId``, ``threadId``, ``correlationId``
KERNEL     ``CONCURRENT_KERNEL`` (``KERNEL`` when that is the category), with the launch
           configuration (grid, block, registers, shared memory) where the table's launch
           data (:mod:`.launch_data`) has it
MEMCPY     ``MEMCPY`` (``MEMCPY2`` when that is the category) with bytes and copy/memory kinds
MEMSET     ``MEMSET``
SYNC       ``SYNCHRONIZATION``; a link (``link_stream``/``link_correlation``) adds a
           ``CUDA_EVENT`` record sharing its ``cudaEventSyncId``
RANGE      ``MARKER`` START + END pair (same ``id``); thread object when tid >= 0, else
           stream/device object; category -> ``domain``
MARKER     instantaneous ``MARKER``
CPU_OP     ``DAYDREAM_CPU_OP`` (daydream extension kind)
=========  ===========================================================================

External ids become ``EXTERNAL_CORRELATION`` records (CUSTOM0) keyed by correlationId; the
table's devices become ``DEVICE`` records. Whatever the CUPTI fields cannot carry (a -1 pid where
CUPTI has an unsigned field, a row whose external id differs from its correlationId's, a name
that differs from the reader's default) is written as the daydream extension fields ``name``,
``cat``, ``externalId``, ``processId`` or ``daydream`` (exact column values). The exporter finds
those by running the reader's own row builder on the records before writing, and checks the
result again afterwards.
"""

from __future__ import annotations

import gzip
import os

import msgspec
import numpy as np

from ..events.table import COLUMNS, Accounting, EventTable, Kind
from .cupti_jsonl.cupti_codes import (
    ABSENT,
    CPU_OP_KIND,
    DRIVER_CBID_NAMES,
    EXTERNAL_KIND_CUSTOM0,
    FORMAT_VERSION,
    INVALID32,
    KERNEL_KINDS,
    MARKER_END,
    MARKER_INSTANTANEOUS,
    MARKER_START,
    MEMCPY_KINDS,
    OBJECT_DEVICE,
    OBJECT_PROCESS,
    OBJECT_STREAM,
    OBJECT_THREAD,
    RUNTIME_CBID_NAMES,
)
from .cupti_jsonl import NAME
from .cupti_jsonl.row_blocks import build_rows
from .cupti_jsonl.line_decoding import OVERRIDE_COLUMNS, _Line, _NO_OVER, _ObjectId, _Over
from .cupti_jsonl.line_schema import Header
from .launch_data import launch_data_of, make_key

_U32_MAX = 0xFFFFFFFF
_CBIDS = {
    "RUNTIME": {v: k for k, v in RUNTIME_CBID_NAMES.items()},
    "DRIVER": {v: k for k, v in DRIVER_CBID_NAMES.items()},
}
#: TraceMeta.extra keys the reader fills from header fields (not copied back into "extra")
_HEADER_KEYS = ("hostname", "clock", "cuptiVersion", "cudaDriverVersion", "wallClockAtStartNs", "cuptiTsAtStartNs", "pid", "malformed_lines")


def _u32(v: int) -> int:
    """``v`` when it fits a CUPTI uint32 id (and is not the invalid all-ones), else absent."""
    return v if 0 <= v < _U32_MAX else ABSENT


def _u64(v: int) -> int:
    return v if v >= 0 else ABSENT


def _most_common(values: np.ndarray) -> int:
    ok = values[(values >= 0) & (values < _U32_MAX)]
    if not len(ok):
        return -1
    u, counts = np.unique(ok, return_counts=True)
    return int(u[np.argmax(counts)])


def cupti_records(table: EventTable) -> tuple[Header, list[_Line]]:
    """The header and record lines that represent ``table`` losslessly (see the module doc).

    Raises:
        ValueError: a row whose kind is not a :class:`~daydream.events.table.Kind`, or an int64 column
            holding -2**63 (the reader's "absent" value).
        RuntimeError: the records would not read back as ``table`` (a bug in daydream).
    """
    n = len(table)
    kind = table.cols["kind"]
    bad = ~np.isin(kind, np.array([int(k) for k in Kind], dtype=kind.dtype))
    if bad.any():
        raise ValueError(f"row {int(np.flatnonzero(bad)[0])} has kind {int(kind[bad][0])}, not a daydream Kind")
    for col in COLUMNS:
        if table.cols[col].dtype == np.int64 and (table.cols[col] == ABSENT).any():
            raise ValueError(f"column {col} holds -2**63, which cupti-jsonl reserves for 'absent'")
    header_pid = _most_common(table.cols["pid"][np.isin(kind, [Kind.RUNTIME, Kind.CPU_OP])])
    recs, row_of = _natural_records(table)
    _add_launch(table, recs, row_of)
    _add_external_correlations(table, recs, row_of)
    recs[:0] = _device_records(table)
    row_of = np.concatenate([np.full(len(recs) - len(row_of), -1, dtype=np.int64), np.asarray(row_of, dtype=np.int64)])

    names = np.empty(len(table.names), dtype=object)
    names[:] = table.names
    rows = build_rows(recs, header_pid, Accounting())
    if len(rows.src) != n:
        raise RuntimeError(f"cupti-jsonl export: {len(rows.src)} rows read back from {n} (a daydream bug)")
    _patch(table, names, recs, row_of, rows)
    rows = build_rows(recs, header_pid, Accounting())
    diff = _differences(table, names, row_of, rows)
    if diff:
        raise RuntimeError(f"cupti-jsonl export does not read back equal (columns {sorted(diff)}; a daydream bug)")

    meta = table.meta
    extra = {k: v for k, v in meta.extra.items() if k not in _HEADER_KEYS}
    if meta.format and meta.format != NAME:
        extra["exported_from_format"] = meta.format
    if meta.source and meta.format != NAME:
        extra["exported_from"] = meta.source
    header = Header(
        format="cupti-jsonl", version=FORMAT_VERSION,
        pid=None if header_pid < 0 else header_pid,
        hostname=meta.extra.get("hostname"),
        clock=meta.extra.get("clock", "cupti_ns" if meta.format in ("", NAME) else f"{meta.format} trace clock, ns"),
        rank=None if meta.rank < 0 else meta.rank,
        worldSize=None if meta.world_size < 0 else meta.world_size,
        extra=extra,
    )
    return header, recs


def write_cupti_jsonl(table: EventTable, path: str | os.PathLike, *, compresslevel: int = 6) -> None:
    """Write ``table`` to ``path`` as a cupti-jsonl v1 dump (gzip when the name ends in ``.gz``).

    Times are written as the table's int64 ns. Reading the file back with
    :func:`daydream.formats.cupti_jsonl.load` gives a table that ``equals`` this one.

    Raises:
        ValueError: a row whose kind is not a daydream Kind, or a column value of -2**63.
        OSError: the file cannot be written.
    """
    header, recs = cupti_records(table)
    enc = msgspec.json.Encoder()
    data = enc.encode(header) + b"\n" + enc.encode_lines(recs)
    if str(path).endswith(".gz"):
        with gzip.open(path, "wb", compresslevel=compresslevel) as f:
            f.write(data)
    else:
        with open(path, "wb") as f:
            f.write(data)


# ---------------------------------------------------------------------------------------------


def _device_records(table: EventTable) -> list[_Line]:
    out = []
    for d in table.meta.devices:
        def opt(v: int) -> int:
            return ABSENT if v < 0 else int(v)
        out.append(_Line(
            kind="DEVICE", id=opt(d.id), name=d.name or None,
            computeCapabilityMajor=opt(d.compute_major), computeCapabilityMinor=opt(d.compute_minor),
            numMultiprocessors=opt(d.num_sms), globalMemorySize=opt(d.total_memory_bytes)))
    return out


def _natural_records(table: EventTable) -> tuple[list[_Line], list[int]]:
    """One record per row (two for ranges and linked syncs), with the fields CUPTI has."""
    c = {k: table.cols[k].tolist() for k in COLUMNS}
    names = table.names
    recs: list[_Line] = []
    row_of: list[int] = []
    next_id = 1
    for r in range(len(table)):
        k = c["kind"][r]
        name = names[c["name_id"][r]]
        cat = names[c["cat_id"][r]]
        start, end = c["start_ns"][r], c["end_ns"][r]
        pid, tid, dev, stream = c["pid"][r], c["tid"][r], c["device"][r], c["stream"][r]
        if k == Kind.RANGE or k == Kind.MARKER:
            obj_kind, obj = _object_id(pid, tid, dev, stream)
            domain = None if cat == "MARKER" else cat
            mid = next_id
            next_id += 1
            if k == Kind.RANGE:
                recs.append(_Line(kind="MARKER", flags=MARKER_START, timestamp=start, id=mid, objectKind=obj_kind, objectId=obj, name=name, domain=domain))
                recs.append(_Line(kind="MARKER", flags=MARKER_END, timestamp=end, id=mid, objectKind=obj_kind, objectId=obj))
                row_of += [r, -1]
            else:
                recs.append(_Line(kind="MARKER", flags=MARKER_INSTANTANEOUS, timestamp=start, id=mid, objectKind=obj_kind, objectId=obj, name=name, domain=domain))
                row_of.append(r)
            continue

        common = dict(
            start=start, end=end, threadId=_u32(tid), deviceId=_u32(dev), streamId=_u32(stream),
            correlationId=_u32(c["correlation"][r]), bytes=_u64(c["bytes"][r]),
            copyKind=_u32(c["copy_kind"][r]) or ABSENT, srcKind=_u32(c["src_kind"][r]) or ABSENT,
            dstKind=_u32(c["dst_kind"][r]) or ABSENT,
        )
        if k == Kind.RUNTIME:
            rk = "DRIVER" if "driver" in cat.lower() else "RUNTIME"
            rec = _Line(kind=rk, name=name, domain=rk.lower(), cbid=_CBIDS[rk].get(name, ABSENT), processId=_u32(pid), **common)
        elif k == Kind.CPU_OP:
            ext = c["external_id"][r]
            rec = _Line(kind=CPU_OP_KIND, name=name, processId=_u32(pid), externalId=ABSENT if ext == -1 else ext, **common)
        elif k == Kind.KERNEL:
            rec = _Line(kind=cat if cat in KERNEL_KINDS else "CONCURRENT_KERNEL", name=name, **common)
        elif k == Kind.MEMCPY:
            rec = _Line(kind=cat if cat in MEMCPY_KINDS else "MEMCPY", **common)
        elif k == Kind.MEMSET:
            rec = _Line(kind="MEMSET", **common)
        else:  # Kind.SYNC
            if stream == -1:
                common["streamId"] = INVALID32
            rec = _Line(kind="SYNCHRONIZATION", type=_u32(c["sync_kind"][r]), **common)
            ls, lc = c["link_stream"][r], c["link_correlation"][r]
            if ls != -1 or lc != -1:
                sid = next_id
                next_id += 1
                recs.append(_Line(kind="CUDA_EVENT", correlationId=_u32(lc), streamId=_u32(ls), eventId=sid, cudaEventSyncId=sid))
                row_of.append(-1)
                rec.cudaEventId = sid
                rec.cudaEventSyncId = sid
        if cat != rec.kind:
            rec.cat = cat
        recs.append(rec)
        row_of.append(r)
    return recs, row_of


def _add_launch(table: EventTable, recs: list[_Line], row_of: list[int]) -> None:
    """Give each kernel record the launch configuration the table's launch data holds for its
    (device, correlation id) (:func:`~daydream.formats.launch_data.launch_data_of`): grid, block,
    registers per thread, and the shared memory per block as ``staticSharedMemory`` with
    ``dynamicSharedMemory`` 0 (the sources record the sum only). Unknown values stay absent."""
    la = launch_data_of(table)
    if not len(la):
        return
    rows = np.asarray(row_of, dtype=np.int64)
    at = np.flatnonzero(rows >= 0)
    at = at[table.cols["kind"][rows[at]] == Kind.KERNEL]
    key = make_key(table.cols["device"][rows[at]], table.cols["correlation"][rows[at]])
    pos = np.minimum(np.searchsorted(la.key, key), len(la.key) - 1)
    hit = la.key[pos] == key
    at, pos = at[hit], pos[hit]
    for i, g, b, r, m in zip(at.tolist(), la.grid[pos].tolist(), la.block[pos].tolist(), la.regs[pos].tolist(), la.smem[pos].tolist()):
        rec = recs[i]
        if g[0] >= 0:
            rec.gridX, rec.gridY, rec.gridZ = g
        if b[0] >= 0:
            rec.blockX, rec.blockY, rec.blockZ = b
        if r >= 0:
            rec.registersPerThread = r
        if m >= 0:
            rec.staticSharedMemory, rec.dynamicSharedMemory = m, 0


def _object_id(pid: int, tid: int, dev: int, stream: int) -> tuple[int, _ObjectId]:
    obj = _ObjectId(processId=_u32(pid), threadId=_u32(tid), deviceId=_u32(dev), streamId=_u32(stream))
    if tid >= 0:
        return OBJECT_THREAD, obj
    if stream >= 0:
        return OBJECT_STREAM, obj
    if dev >= 0:
        return OBJECT_DEVICE, obj
    if pid >= 0:
        return OBJECT_PROCESS, obj
    return ABSENT, obj


def _add_external_correlations(table: EventTable, recs: list[_Line], row_of: list[int]) -> None:
    """Append one EXTERNAL_CORRELATION per correlationId: the external id most of its rows have."""
    kind, corr, ext = table.cols["kind"], table.cols["correlation"], table.cols["external_id"]
    use = ~np.isin(kind, [Kind.RANGE, Kind.MARKER, Kind.CPU_OP]) & (corr >= 0) & (corr < _U32_MAX) & (ext >= 0)
    if not use.any():
        return
    u, counts = np.unique(np.stack([corr[use], ext[use]], axis=1), axis=0, return_counts=True)
    order = np.lexsort((u[:, 1], -counts, u[:, 0]))  # per corr: most rows, then smallest ext
    uo = u[order]
    first = np.ones(len(uo), dtype=bool)
    first[1:] = uo[1:, 0] != uo[:-1, 0]
    for c_, e_ in uo[first].tolist():
        recs.append(_Line(kind="EXTERNAL_CORRELATION", externalKind=EXTERNAL_KIND_CUSTOM0, externalId=e_, correlationId=c_))
        row_of.append(-1)


def _originals(table: EventTable, names: np.ndarray, row_of: np.ndarray, rows) -> tuple[np.ndarray, dict]:
    r = row_of[rows.src]
    if (r < 0).any():
        raise RuntimeError("cupti-jsonl export: a helper record became a row (a daydream bug)")
    orig = {c: table.cols[c][r] for c in COLUMNS}
    orig["name"] = names[orig.pop("name_id")] if len(names) else np.zeros(len(r), dtype=object)
    orig["cat"] = names[orig.pop("cat_id")] if len(names) else np.zeros(len(r), dtype=object)
    return r, orig


def _differences(table: EventTable, names: np.ndarray, row_of: np.ndarray, rows) -> dict[str, np.ndarray]:
    """Per column, the rows (positions in ``rows``) whose read-back value differs."""
    _, orig = _originals(table, names, row_of, rows)
    out = {}
    for c, want in orig.items():
        got = rows.names if c == "name" else rows.cats if c == "cat" else rows.cols[c]
        d = np.flatnonzero(got != want)
        if len(d):
            out[c] = d
    return out


def _patch(table: EventTable, names: np.ndarray, recs: list[_Line], row_of: np.ndarray, rows) -> None:
    """Add extension fields to the records whose rows would not read back equal."""
    _, orig = _originals(table, names, row_of, rows)
    over: dict[int, dict[str, int]] = {}
    gpu_like = np.isin(orig["kind"], [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC])
    for c, idx in _differences(table, names, row_of, rows).items():
        for i in idx.tolist():
            rec = recs[int(rows.src[i])]
            v = orig[c][i]
            if c == "name":
                rec.name = v
            elif c == "cat":
                rec.cat = v
            elif c == "external_id":
                rec.externalId = int(v)
            elif c == "pid" and gpu_like[i] and _u32(int(v)) != ABSENT:
                rec.processId = int(v)
            elif c in OVERRIDE_COLUMNS:
                over.setdefault(int(rows.src[i]), {})[c] = int(v)
            else:  # kind: cannot differ for a valid Kind
                raise RuntimeError(f"cupti-jsonl export cannot represent column {c} (a daydream bug)")
    for i, d in over.items():
        rec = recs[i]
        base = {} if rec.daydream is _NO_OVER else msgspec.structs.asdict(rec.daydream)
        base.update(d)
        rec.daydream = _Over(**base)


__all__ = ["write_cupti_jsonl", "cupti_records"]
