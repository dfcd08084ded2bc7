"""Decoded cupti-jsonl records -> table rows.

One block of rows per record kind, GPU rows' pids from their API records, external ids and the
daydream overrides applied last.
"""

from __future__ import annotations

import itertools
import operator
from collections import defaultdict
from dataclasses import dataclass, field
from operator import attrgetter

import numpy as np

from ...events.table import COLUMNS, Accounting, DeviceInfo, Kind
from .cupti_codes import (
    ABSENT,
    API_KINDS,
    CPU_OP_KIND,
    KERNEL_KINDS,
    MEMCPY_KINDS,
    UNREPRESENTED_KINDS,
    USED_KINDS,
    api_name,
    memcpy_name,
    memset_name,
    sync_name,
)
from .line_decoding import _NO_OVER, OVERRIDE_COLUMNS, _Line
from .record_columns import (
    _fill_names,
    _ints,
    _isnone,
    _last_per_key,
    _lookup,
    _names_by_key,
    _objs,
    _or,
    _stream,
)
from .record_joins import _link_syncs, _marker_rows, _resolve_external


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
