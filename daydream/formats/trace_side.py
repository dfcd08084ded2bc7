"""What an event table carries beside its rows: launch data and collective arguments, taken at
load and saved with a saved table.

Two things the what-ifs need are not rows of the table:

* launch data (:class:`~daydream.formats.launch_data.LaunchData`: per-kernel launch configuration
  and the launching op's shapes and work), on ``EventTable.launch`` as a
  :class:`~daydream.formats.launch_data.LaunchFacts`: the Kineto reader collects it in its own pass;
  for the other formats :func:`capture` reads it when the trace is loaded;
* the collective arguments (:class:`~daydream.formats.comm_args.CommArgs`: message sizes, groups,
  ``AccumulateGrad`` input shapes), on ``EventTable.comm`` as a :class:`CommSource`: decoded from
  the trace the first time something asks (a second decode of the JSON costs about twice the
  load, and only the collective and gradient finders need it), once per table.

:func:`save_table` writes both into a saved table (``--save-table``) as members of the ``.npz``
(``side.*``: plain arrays and a JSON header, no pickle); :func:`load_side` reads them back and
checks them, so a saved table is enough for every what-if: nothing reads the trace file again. A
table saved before these members existed gets them from its trace when that is at hand unchanged
(as it did then).
"""

from __future__ import annotations

from typing import Any, Optional

import msgspec
import numpy as np

from ..errors import TraceFormatError
from ..events.table import EventTable
from .comm_args import CommArgs, read_comm_args
from .comm_args import empty as comm_args_empty
from .launch_data import LaunchData, LaunchFacts, read_launch_data

#: the first bytes of an SQLite database (an nsys export): never a Kineto JSON document
_SQLITE_MAGIC = b"SQLite format 3\x00"

#: saved-table members of the launch data: name -> dtype (grid and block: n x 3, flattened)
LAUNCH_MEMBERS = {"key": np.int64, "grid": np.int64, "block": np.int64, "regs": np.int64, "smem": np.int64,
                  "flops": np.float64, "bytes": np.float64, "last_bytes": np.float64, "last_elem": np.int64, "op": np.int32}
#: members added later (a table saved before them reads as "unknown": -1 / 0), name -> (dtype, values per kernel)
LAUNCH_OPTIONAL = {"shape": (np.int64, 4), "dtype": (np.int8, 1), "shape_id": (np.int64, 1)}
#: saved-table members of the collective args: name -> dtype (the str columns as ids into ``strings``)
COMM_MEMBERS = {"name": np.int32, "cat": np.int32, "ext": np.int64, "corr": np.int64, "collective": np.int32,
                "in_nelems": np.int64, "out_nelems": np.int64, "group_size": np.int64, "elem_bytes": np.int64,
                "pg": np.int32, "dims_nelems": np.int64}
_COMM_STR = ("name", "cat", "collective", "pg")
_JSON_MEMBER = "side.__json__"


def comm_args_of(source: str) -> CommArgs:
    """:func:`~daydream.formats.comm_args.read_comm_args` of the trace file ``source``, without
    reading the whole file when it is an SQLite database (an nsys export, which holds no Kineto
    args): then empty, with the reason set, as the reader returns it after failing to parse."""
    try:
        with open(source, "rb") as f:
            head = f.read(len(_SQLITE_MAGIC))
    except OSError:
        head = b""
    if head == _SQLITE_MAGIC:
        return comm_args_empty(f"collective args not read from {source}: an SQLite database, not a Kineto JSON document")
    return read_comm_args(source)


class CommSource:
    """The collective args of one trace file, decoded on the first :meth:`get` and kept (shared by
    the tables :meth:`EventTable.take` makes). ``args`` given: those, nothing is read."""

    def __init__(self, source: str, args: Optional[CommArgs] = None) -> None:
        self.source = source
        self._args = args

    def get(self) -> CommArgs:
        if self._args is None:
            self._args = comm_args_of(self.source)
        return self._args


def comm_args_of_table(table) -> Optional[CommArgs]:
    """The collective args ``table`` carries (``EventTable.comm``), else those of the file it names
    (``meta.source``); None where it names none."""
    comm = getattr(table, "comm", None)
    if comm is not None:
        return comm.get()
    source = getattr(getattr(table, "meta", None), "source", "") or ""
    return comm_args_of(source) if source else None


def capture(path: str, table: EventTable) -> EventTable:
    """Give a table an adapter just read from ``path`` its launch data (read now where the reader did
    not collect it in its own pass) and the source of its collective args (read on first use)."""
    if table.launch is None:
        table.launch = LaunchFacts.holding(read_launch_data(path, table.meta.format))
    if table.comm is None and table.meta.source:
        table.comm = CommSource(table.meta.source)
    return table


# ------------------------------------------------------------------------ saved tables ----
class _LaunchHead(msgspec.Struct, forbid_unknown_fields=True):
    reason: str
    counts: dict[str, int]
    ops: list[str]
    #: LaunchData.shapes: the distinct (op name, Input Dims, Input type) (decoded JSON); older saved tables: none
    shapes: list[Any] = []


class _CommHead(msgspec.Struct, forbid_unknown_fields=True):
    reason: str
    strings: list[str]


class _SideHead(msgspec.Struct, forbid_unknown_fields=True):
    launch: _LaunchHead
    comm: Optional[_CommHead] = None


def _ids(values) -> tuple[np.ndarray, list[str]]:
    """int32 ids of ``values`` (str) into their distinct values (sorted)."""
    u, inv = np.unique(np.asarray(list(values), dtype=object).astype(str), return_inverse=True) if len(values) else (np.zeros(0, str), np.zeros(0, np.int64))
    return inv.astype(np.int32).reshape(-1), [str(s) for s in u.tolist()]


def side_members(table: EventTable) -> dict[str, np.ndarray]:
    """The ``side.*`` members of a saved table: its launch data and collective args (read now if
    they were not yet)."""
    facts = table.launch if table.launch is not None else LaunchFacts.holding(LaunchData(reason="the table names no trace file to read launch data from"))
    d = facts.data()
    op_id, ops = _ids(d.op)
    out = {f"side.launch.{k}": np.asarray(op_id if k == "op" else getattr(d, k), dtype=t).reshape(-1) for k, t in LAUNCH_MEMBERS.items()}
    for k, (t, w) in LAUNCH_OPTIONAL.items():
        a = np.asarray(getattr(d, k), dtype=t).reshape(-1)
        if len(a) == w * len(d.key):
            out[f"side.launch.{k}"] = a
    comm_head = None
    a = comm_args_of_table(table)
    if a is not None:
        strings = sorted({str(s) for k in _COMM_STR for s in getattr(a, k).tolist()})
        at = {s: i for i, s in enumerate(strings)}
        for k, t in COMM_MEMBERS.items():
            v = getattr(a, k)
            out[f"side.comm.{k}"] = np.fromiter((at[str(s)] for s in v.tolist()), t, len(v)) if k in _COMM_STR else np.asarray(v, t)
        comm_head = _CommHead(a.reason, strings)
    head = _SideHead(_LaunchHead(d.reason, {str(k): int(v) for k, v in d.counts.items()}, ops,
                                 [list(x) for x in getattr(d, "shapes", [])]), comm_head)
    out[_JSON_MEMBER] = np.frombuffer(msgspec.json.encode(head), dtype=np.uint8)
    return out


def save_table(table: EventTable, path: str) -> None:
    """:meth:`EventTable.save` with the table's launch data and collective args (:func:`side_members`)."""
    table.save(path, side_members(table))


def _bad(path: str, member: str, why: str) -> TraceFormatError:
    return TraceFormatError(path, f"member {member}", why)


def _member(path: str, z, name: str, dtype) -> np.ndarray:
    """A 1-D member of exactly ``dtype`` (checked before: :func:`daydream.formats.saved._check_members`)."""
    if name + ".npy" not in z.files and name not in z.files:
        raise _bad(path, name, "missing")
    a = z[name]
    if a.ndim != 1 or a.dtype != np.dtype(dtype):
        raise _bad(path, name, f"not a 1-D {np.dtype(dtype).name} array")
    return a


def _ids_in(path: str, name: str, a: np.ndarray, n: int) -> None:
    if len(a) and (int(a.min()) < 0 or int(a.max()) >= n):
        raise _bad(path, name, f"ids past the {n} strings of the side header")


def load_side(path: str, table: EventTable) -> bool:
    """Set ``table.launch`` and ``table.comm`` from the ``side.*`` members of the saved table at
    ``path``; False when it has none (saved before they existed).

    Raises:
        TraceFormatError: a member is missing, of the wrong type or length, or names a string past
            the header's.
    """
    with np.load(path, allow_pickle=False) as z:
        if _JSON_MEMBER + ".npy" not in z.files and _JSON_MEMBER not in z.files:
            return False
        try:
            head = msgspec.json.decode(_member(path, z, _JSON_MEMBER, np.uint8).tobytes(), type=_SideHead)
        except msgspec.DecodeError as e:
            raise _bad(path, _JSON_MEMBER, f"not a side header ({e})") from None
        la = {k: _member(path, z, f"side.launch.{k}", t) for k, t in LAUNCH_MEMBERS.items()}
        opt = {k: _member(path, z, f"side.launch.{k}", t) for k, (t, _) in LAUNCH_OPTIONAL.items()
               if f"side.launch.{k}.npy" in z.files or f"side.launch.{k}" in z.files}
        co = {k: _member(path, z, f"side.comm.{k}", t) for k, t in COMM_MEMBERS.items()} if head.comm is not None else None
    n = len(la["key"])
    for k, a in la.items():
        if len(a) != (3 * n if k in ("grid", "block") else n):
            raise _bad(path, f"side.launch.{k}", f"{len(a):,} values for {n:,} kernels")
    for k, a in opt.items():
        if len(a) != LAUNCH_OPTIONAL[k][1] * n:
            raise _bad(path, f"side.launch.{k}", f"{len(a):,} values for {n:,} kernels")
    _ids_in(path, "side.launch.op", la["op"], len(head.launch.ops))
    ops = np.asarray(head.launch.ops, dtype=object)
    d = LaunchData(key=la["key"], grid=la["grid"].reshape(n, 3), block=la["block"].reshape(n, 3), regs=la["regs"], smem=la["smem"],
                   flops=la["flops"], bytes=la["bytes"], last_bytes=la["last_bytes"], last_elem=la["last_elem"],
                   op=ops[la["op"]].tolist() if n else [], reason=head.launch.reason, counts=dict(head.launch.counts),
                   shape=opt["shape"].reshape(n, 4) if "shape" in opt else np.full((n, 4), -1, np.int64),
                   dtype=opt["dtype"] if "dtype" in opt else np.zeros(n, np.int8))
    shapes = [tuple(x) if isinstance(x, list) and len(x) == 3 else None for x in head.launch.shapes]
    sid = opt["shape_id"] if "shape_id" in opt else np.full(n, -1, np.int64)
    if None in shapes or (len(sid) and (sid.min() < -1 or sid.max() >= len(shapes))):
        raise _bad(path, "side.launch.shape_id", f"not ids into the {len(shapes):,} recorded op shapes")
    d.shape_id, d.shapes = sid, shapes
    table.launch = LaunchFacts.holding(d)
    if co is None:
        table.comm = None
        return True
    m = len(co["name"])
    strings = np.asarray(head.comm.strings, dtype=object)
    cols: dict[str, Any] = {}
    for k, a in co.items():
        if len(a) != m:
            raise _bad(path, f"side.comm.{k}", f"{len(a):,} values for {m:,} rows")
        if k in _COMM_STR:
            _ids_in(path, f"side.comm.{k}", a, len(strings))
            cols[k] = strings[a] if m else np.zeros(0, object)
        else:
            cols[k] = a
    table.comm = CommSource(table.meta.source, CommArgs(**cols, reason=head.comm.reason))
    return True

