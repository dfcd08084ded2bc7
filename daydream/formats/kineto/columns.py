"""Kineto per-event columns: decoded events turned into numpy columns, one slice at a time.

:class:`_Columns` accumulates the columns (so each slice of decoded events can be freed) with
C-level iteration and numpy, Python work only per distinct value; :mod:`.rows` makes the table of
them. Also the shapes passed between the row stages (:class:`_PairInfo`, :class:`_EventCols`,
:class:`_Rows`).
"""

from __future__ import annotations

import dataclasses
import itertools
import operator
from typing import Optional

import numpy as np

from ...events.memory import MemoryEvents
from ...events.table import Kind
from ...util.intern import _Ids
from ..launch_data import LaunchFacts, clean_ext, clean_ints, clean_triples
from . import times
from .categories import (
    _C_B,
    _C_INSTANT,
    _C_ROW,
    _FLOW_ID_TYPES,
    _classify,
    _is_launch_flow_end,
    _launch_class,
    _Reasons,
    _sync_kind_value,
)
from .projection import (
    _ABSENT,
    _NO_EVENT_ARGS,
    _NONNUM,
    _generic_args,
    _int_attr,
    _int_column,
    _int_column_typed,
)
from .memory_events import MEMORY_ARGS
from .times import _us_join_parse, _us_text_to_ns


def _take(seq, idx: np.ndarray):
    """The items of ``seq`` at the sorted distinct positions ``idx`` (a tuple, or ``seq`` itself for all)."""
    k = len(idx)
    if k == len(seq):
        return seq
    if k == 0:
        return ()
    if k == 1:
        return (seq[int(idx[0])],)
    return operator.itemgetter(*idx.tolist())(seq)


class _Columns:
    """The per-event columns of a document, accumulated one slice of events at a time.

    :meth:`add` turns decoded events into numpy columns (so the events can be freed) and
    :func:`_build_table` makes the table from all of them, exactly as one call with all the events would.
    Dense columns (one entry per event): ``pair`` (id of the distinct (ph, cat)), ``name`` (id of
    the distinct name value), ``pid``, ``tid``, ``ts``/``ts_ok``. Sparse ones (event index in
    ``<col>@``, value), taken only from the events they are used for: ``dur`` of X events;
    ``args.device``/``stream``/``correlation`` of GPU and runtime events; ``External id`` of events
    that can become rows; ``bytes`` of memcpy/memset events; the ``cuda_sync`` args of sync events.
    """

    def __init__(self) -> None:
        self.n = 0
        #: events that can become rows (``python_function`` ones apart: they cost less), and of them
        #: GPU tasks and CUDA runtime calls (graph tasks): what the streaming reader's memory bound
        #: counts (``formats.row_budget``)
        self.row_events = self.python_events = self.task_events = 0
        self._py_p = np.zeros(0, bool)  # per (ph, cat) pair: a python_function event
        self.pair_ix = _Ids()
        self.ph_ix = _Ids()  # the fast path's ids of ph and cat values, and (ph id, cat id) -> pair id
        self.cat_ix = _Ids()
        self._lut = np.zeros((0, 0), np.int32)
        self.name_ix = _Ids()
        self.parts: dict[str, list[np.ndarray]] = {}
        self._cls_p = np.zeros(0, np.int8)
        self._kind_p = np.zeros(0, np.int16)
        self._gpu_p = np.zeros(0, bool)
        self._flow_p = np.zeros(0, bool)
        self._launch_p = np.zeros(0, np.int8)  # 1 kernel, 0 op, -1 neither (launch_data's categories)
        self.launch = LaunchFacts()
        self.memory = MemoryEvents.empty()  # the allocator's events (set with the rows)

    def _put(self, col: str, a: np.ndarray) -> None:
        self.parts.setdefault(col, []).append(a)

    def column(self, col: str, dtype) -> np.ndarray:
        parts = self.parts.get(col)
        if not parts:
            return np.zeros(0, dtype)
        if len(parts) > 1:  # keep the whole column only, not the slices too
            parts[:] = [np.concatenate(parts)]
        return parts[0]

    def drop(self, *cols: str) -> None:
        """Free columns that are no longer needed."""
        for c in cols:
            self.parts.pop(c, None)

    def sparse(self, col: str, rows: np.ndarray, fill: int, dtype) -> np.ndarray:
        """Values of sparse column ``col`` at event indices ``rows`` (``fill`` where it has none)."""
        idx = self.column(col + "@", np.int64)
        val = self.column(col, dtype)
        if times._FAST and len(idx) and len(rows) * 8 >= self.n:  # many rows: scatter into a dense column, gather
            dense = np.full(self.n, fill, dtype)
            dense[idx] = val
            return dense[rows]
        out = np.full(len(rows), fill, dtype)
        if len(idx) and len(rows):
            j = np.minimum(np.searchsorted(idx, rows), len(idx) - 1)
            hit = idx[j] == rows
            out[hit] = val[j[hit]]
        return out

    def add(self, events, typed: bool = False) -> None:
        """Add the columns of ``events`` (``typed``: decoded as ``_IntEvent``, no floats in the
        integer fields, so they are read without a type check per value)."""
        n = len(events)
        if n == 0:
            return
        g = operator.attrgetter
        ints = _int_column_typed if typed else _int_column
        base = self.n
        pair_of = self._pair_ids(events) if times._FAST else None
        if pair_of is None:
            pair_of = np.fromiter(map(self.pair_ix.__getitem__, zip(map(g("ph"), events), map(g("cat"), events))), np.int32, count=n)
        if len(self.pair_ix) > len(self._cls_p):  # classify the new (ph, cat) pairs
            info = [_classify(p, c, _Reasons())[:3] for p, c in list(self.pair_ix)[len(self._cls_p) :]]
            self._cls_p = np.concatenate([self._cls_p, np.array([i[0] for i in info], np.int8)])
            self._kind_p = np.concatenate([self._kind_p, np.array([i[1] for i in info], np.int16)])
            self._gpu_p = np.concatenate([self._gpu_p, np.array([i[2] for i in info], bool)])
            new = list(self.pair_ix)[len(self._flow_p) :]
            self._flow_p = np.concatenate([self._flow_p, np.array([_is_launch_flow_end(p, c) for p, c in new], bool)])
            self._launch_p = np.concatenate([self._launch_p, np.array([_launch_class(c) for _, c in new], np.int8)])
        cls = self._cls_p[pair_of]
        self._put("pair", pair_of)
        name_of = np.fromiter(map(self.name_ix.__getitem__, map(g("name"), events)), np.int32, count=n)
        self._put("name", name_of)
        self._put("pid", _int_attr(events, "pid", n, typed, True))
        self._put("tid", _int_attr(events, "tid", n, typed, True))
        ts, ok = _us_text_to_ns(list(map(g("ts"), events)), base)
        self._put("ts", ts)
        self._put("ts_ok", ok)
        # dur: only X events use it (the fast path parses every event's, absent ones cost little)
        xi = np.flatnonzero(cls == _C_ROW)
        got = _us_join_parse(list(map(g("dur"), events))) if times._FAST else None
        if got is None:
            d, ok = _us_text_to_ns(list(map(g("dur"), _take(events, xi))), base)
        else:
            d, ok = got[0][xi], got[1][xi]
        self._put("dur@", xi + base)
        self._put("dur", d)
        self._put("dur_ok", ok)
        self._add_flow_ends(events, np.flatnonzero(self._flow_p[pair_of]), base)
        # args of the events that can become rows
        ri = np.flatnonzero((cls == _C_ROW) | (cls == _C_INSTANT) | (cls == _C_B))
        m = len(ri)
        if typed:  # every event's args (no copy of the rows' selection), the ext ids of the rows
            args = list(map(g("args"), events))
            ext_all = _int_attr(args, "external_id", n, True)
            self._add_launch(events, args, ext_all, pair_of, name_of)
            ext = ext_all[ri]
            del ext_all
            at = ri  # row i's args: args[at[i]]
        else:
            self._add_launch(events, None, None, pair_of, name_of)
            args = _generic_args(_take(events, ri))
            ext = ints(list(map(g("external_id"), args)), m)
            at = np.arange(m)
        legacy = np.flatnonzero(ext <= _NONNUM)
        if len(legacy):
            ext[legacy] = ints(list(map(g("external_id_legacy"), _take(args, at[legacy]))), len(legacy))
        self._put("ext@", ri + base)
        self._put("ext", ext)
        kind = self._kind_p[pair_of[ri]]
        gpu = self._gpu_p[pair_of[ri]]
        self._count_rows(pair_of[ri], gpu | (kind == Kind.RUNTIME))
        for cols, sel in (
            (("device", "stream", "correlation", "daydream_pid"), gpu | (kind == Kind.RUNTIME)),
            (("bytes",), (kind == Kind.MEMCPY) | (kind == Kind.MEMSET)),
            (("wait_on_stream", "wait_on_cuda_event_record_corr_id"), kind == Kind.SYNC),
            (MEMORY_ARGS, cls[ri] == _C_INSTANT),  # the allocator's [memory] instants
        ):
            sel = np.flatnonzero(sel)
            sub = _take(args, at[sel])
            for c in cols:
                self._put(c + "@", ri[sel] + base)
                self._put(c, _int_attr(sub, c, len(sel), typed))
            if cols[0] == "wait_on_stream":
                raw = list(map(g("cuda_sync_kind"), sub))
                conv = {v: _sync_kind_value(v) for v in set(raw)}
                self._put("cuda_sync_kind@", ri[sel] + base)
                self._put("cuda_sync_kind", np.fromiter(map(conv.__getitem__, raw), np.int8, count=len(sel)))
        self.n += n

    def _count_rows(self, pairs: np.ndarray, task: np.ndarray) -> None:
        """Count the events of ``pairs`` (pair ids of events that can become rows) for the memory
        bound: python_function ones apart, and the graph tasks among them (``task``, bool)."""
        if len(self._py_p) < len(self.pair_ix):
            new = list(self.pair_ix)[len(self._py_p):]
            self._py_p = np.concatenate([self._py_p, np.array([c == "python_function" for _, c in new], bool)])
        py = int(np.count_nonzero(self._py_p[pairs]))
        self.python_events += py
        self.row_events += len(pairs) - py
        self.task_events += int(np.count_nonzero(task))

    def _add_launch(self, events, args: Optional[list], ext_all: Optional[np.ndarray], pair_of: np.ndarray, name_of: np.ndarray) -> None:
        """Add the launch facts of the kernel and op events (by category, any ph, as
        :func:`daydream.formats.launch_data.read_launch_data` reads them) to ``self.launch``.
        ``args``, ``ext_all``: every event's args and ``External id`` column (the typed path has
        them, decoded as ``_IntEvent``), else None."""
        lc = self._launch_p[pair_of]
        g = operator.attrgetter
        typed = args is not None
        ki = np.flatnonzero(lc == 1)
        if len(ki):
            a = list(_take(args, ki)) if typed else _generic_args(_take(events, ki))
            present = np.fromiter(map(operator.is_not, a, itertools.repeat(_NO_EVENT_ARGS[typed])), bool, len(a))
            if not present.all():  # a kernel without args is not read (one with an empty object is)
                a = list(itertools.compress(a, present.tolist()))
            if a:
                self.launch.add_kernels(clean_ints(list(map(g("device"), a)), typed), clean_ints(list(map(g("correlation"), a)), typed),
                                        clean_ext(list(map(g("external_id"), a)), list(map(g("external_id_legacy"), a)), _ABSENT, typed),
                                        clean_triples(list(map(g("grid"), a)), typed), clean_triples(list(map(g("block"), a)), typed),
                                        clean_ints(list(map(g("regs"), a)), typed), clean_ints(list(map(g("smem"), a)), typed))
        oi = np.flatnonzero(lc == 0)
        if not len(oi):
            return
        # an op without args has no external id: dropped with the others that have none
        if typed:  # the column's absent/null -> legacy key; out of the reference's range (incl. _NONNUM) -> -1
            ext = ext_all[oi]
            miss = np.flatnonzero(ext == _ABSENT)
            if len(miss):
                ext[miss] = clean_ints(list(map(g("external_id_legacy"), _take(args, oi[miss]))), True)
            ext[(ext >= 1 << 62) | (ext <= -(1 << 62))] = -1
            keep = ext >= 0
            oi, ext = oi[keep], ext[keep]
            a = _take(args, oi)
        else:
            a = _generic_args(_take(events, oi))
            ext = clean_ext(list(map(g("external_id"), a)), list(map(g("external_id_legacy"), a)), _ABSENT, False)
        if len(oi):
            self.launch.add_ops(ext, name_of[oi], list(map(g("dims"), a)), list(map(g("types"), a)))

    def _pair_ids(self, events) -> Optional[np.ndarray]:
        """The (ph, cat) pair id of each event (new pairs added to ``pair_ix`` in order of first
        appearance, as the reference's dict over (ph, cat) tuples does), from one id per ph and
        one per cat and a dense (ph, cat) table; None when that table would pass 4 M entries."""
        g = operator.attrgetter
        n = len(events)
        ph = np.fromiter(map(self.ph_ix.__getitem__, map(g("ph"), events)), np.int32, count=n)
        cat = np.fromiter(map(self.cat_ix.__getitem__, map(g("cat"), events)), np.int32, count=n)
        nph, ncat = len(self.ph_ix), len(self.cat_ix)
        if nph * ncat > 1 << 22:
            return None
        if self._lut.shape != (nph, ncat):
            lut = np.full((nph, ncat), -1, np.int32)
            lut[: self._lut.shape[0], : self._lut.shape[1]] = self._lut
            self._lut = lut
        pair_of = self._lut[ph, cat]
        new = np.flatnonzero(pair_of < 0)
        if len(new):
            key = ph[new].astype(np.int64) * ncat + cat[new]
            uk, first = np.unique(key, return_index=True)
            phs, cats = list(self.ph_ix), list(self.cat_ix)
            for k in uk[np.argsort(first)].tolist():
                self._lut[k // ncat, k % ncat] = self.pair_ix[(phs[k // ncat], cats[k % ncat])]
            pair_of = self._lut[ph, cat]
        return pair_of

    def _add_flow_ends(self, events, fi: np.ndarray, base: int) -> None:
        """Sparse columns of the launch flow ends ``fi``: ``flow`` (the id as an integer, a number
        written as text parsed; < 0 without one), and ``flow_bp_e`` (``bp: "e"``)."""
        if len(fi) == 0:
            return
        g = operator.attrgetter
        ends = _take(events, fi)
        m = len(fi)
        ids = list(map(g("id"), ends))
        if not set(map(type, ids)) <= _FLOW_ID_TYPES:  # an object or array as id: no id
            ids = [i if type(i) in _FLOW_ID_TYPES else None for i in ids]
        self._put("flow@", fi + base)
        self._put("flow", _int_column(ids, m))
        self._put("flow_bp_e", np.fromiter(map(operator.eq, map(g("bp"), ends), itertools.repeat("e")), bool, count=m))


@dataclasses.dataclass
class _PairInfo:
    """What each distinct (ph, cat) pair of the document is; every array is indexed by pair id."""

    cls: np.ndarray  #: int8 event class (_C_ROW, _C_INSTANT, _C_B, _C_E, _C_SKIP)
    kind: np.ndarray  #: int16 row Kind, -1 for none
    gpu: np.ndarray  #: bool: its rows live on a GPU stream
    reason: np.ndarray  #: int32 skip reason (a _Reasons code), -1 when the category is not skipped
    readkey: np.ndarray  #: int32 index into ``readkey_names``
    readkey_names: list[str]  #: Accounting read/kept keys: the category, else "ph <ph>"
    cat_names: list[str]  #: the category of each pair ("" when it has none)


@dataclasses.dataclass
class _EventCols:
    """Per-event columns (one entry per input event) used to choose the events that become rows."""

    cls: np.ndarray  #: int8 event class
    reason: np.ndarray  #: int32 skip reason code, -1 while kept (the selections write it in place)
    in_play: np.ndarray  #: bool: not skipped by its class, ts not out of range
    pid: np.ndarray  #: int64, _ABSENT / _NONNUM when absent / not a number
    tid: np.ndarray  #: int64, same sentinels
    pid_ok: np.ndarray  #: bool: pid is a number
    ts_ns: np.ndarray  #: int64 ns on the trace clock, base time not added
    ts_ok: np.ndarray  #: bool: ts is a number
    dur_ns: np.ndarray  #: int64 ns, set for X events only
    dur_ok: np.ndarray  #: bool: dur is a number (X events only)
    hi_b: int  #: largest ts (ns, without base time) that keeps the time within TIME_LIMIT_NS


@dataclasses.dataclass
class _Rows:
    """The rows of the table, in event order: X events, then instants, then B/E pairs."""

    src: np.ndarray  #: int64 index of the event each row comes from (the B event of a pair)
    start: np.ndarray  #: int64 ns, base time added
    end: np.ndarray  #: int64 ns, >= start
    kind: np.ndarray  #: int64 Kind
    on_gpu: np.ndarray  #: bool: the row lives on a GPU stream
