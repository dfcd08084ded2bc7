"""Kineto ``[memory]`` instants: the allocator's events, read into the table's memory part.

PyTorch's profiler with ``profile_memory=True`` writes one instant per allocation or free of the
caching allocator (``ph: "i"``, name ``[memory]``, cat ``cpu_instant_event``, none before Kineto
2021), on the thread that called the allocator, with ``args``: ``Bytes`` (+ allocation, - free),
``Addr``, ``Device Type`` (c10::DeviceType: 0 CPU, 1 CUDA, 6 HIP; ROCm builds write 6),
``Device Id`` (-1 for the host), and since PyTorch 1.10 ``Total Allocated``, ``Total Reserved``
(the allocator's totals on that device after the event) and ``Ev Idx`` (the profiler's event
index: it orders events written with the same microsecond ``ts``). PyTorch 1.8 (the
``kineto_tbplugin`` ResNet-50 trace) writes only ``Bytes``, ``Device Type`` and ``Device Id``.

The instants stay MARKER rows of the table, as before; each one is also an entry of
:class:`~daydream.events.memory.MemoryEvents` or, where it cannot be one, counted in
``Accounting.notes`` by reason ("allocator event ([memory]) left out of the memory table: ...").
"""

from __future__ import annotations

import numpy as np

from ...events.memory import MemoryEvents
from ...events.table import Accounting
from .projection import _NONNUM

#: the args read from instants (``projection._ARG_FIELDS``)
MEMORY_ARGS = ("mem_bytes", "mem_addr", "mem_device_type", "mem_device_id", "mem_total_allocated",
               "mem_total_reserved", "mem_seq")
#: the name of the allocator's instants
MEMORY_NAME = "[memory]"
#: c10::DeviceType values read: CPU (host memory), CUDA, HIP (c10/core/DeviceType.h)
HOST_TYPE, GPU_TYPES = 0, (1, 6)
_LEFT_OUT = "allocator event ([memory]) left out of the memory table: "


def memory_events(cc, src: np.ndarray, start: np.ndarray, is_marker: np.ndarray, pid: np.ndarray, tid: np.ndarray,
                  acct: Accounting) -> MemoryEvents:
    """The ``[memory]`` MARKER rows as :class:`MemoryEvents` (``cc``: the document's ``_Columns``;
    ``src``, ``start``, ``is_marker``, ``pid``, ``tid``: per row, its event, start in ns with the
    base time, whether it is a MARKER, its pid and tid). Vectorized; counts what it leaves out."""
    name_id = dict.get(cc.name_ix, MEMORY_NAME)
    if name_id is None or not len(src):
        return MemoryEvents.empty()
    rows = np.flatnonzero(is_marker & (cc.column("name", np.int32)[src] == name_id))
    if not len(rows):
        return MemoryEvents.empty()
    ev = src[rows]
    a = {c: cc.sparse(c, ev, _NONNUM - 1, np.int64) for c in MEMORY_ARGS}  # absent: below every sentinel
    ok = a["mem_bytes"] > _NONNUM
    acct.add("notes", _LEFT_OUT + "Bytes absent, null (a NaN or Infinity) or not an integer", int(np.count_nonzero(~ok)))
    dtype, dev_id = a["mem_device_type"], a["mem_device_id"]
    gpu = np.isin(dtype, GPU_TYPES)
    host = (dtype == HOST_TYPE) | ((dtype <= _NONNUM) & (dev_id <= _NONNUM))  # no device fields: the host
    bad = ok & ~(gpu | host)
    acct.add("notes", _LEFT_OUT + "Device Type not CPU, CUDA or HIP", int(np.count_nonzero(bad)))
    ok &= ~bad
    bad = ok & gpu & ~((dev_id >= 0) & (dev_id < 2**31))
    acct.add("notes", _LEFT_OUT + "GPU event with a Device Id absent, negative or out of range", int(np.count_nonzero(bad)))
    ok &= ~bad
    bad = ok & ((pid[rows] < 0) | (tid[rows] < 0))
    acct.add("notes", _LEFT_OUT + "on no thread (pid or tid absent or not a number)", int(np.count_nonzero(bad)))
    ok &= ~bad
    k = np.flatnonzero(ok)
    acct.add("notes", "allocator event ([memory]) read into the memory table", len(k))

    def known(c):  # totals, address and index: -1 where absent, not a number or negative
        v = a[c][k]
        return np.where(v >= 0, v, -1)

    ta, tr = known("mem_total_allocated"), known("mem_total_reserved")
    both = (ta >= 0) & (tr >= 0)
    tr = np.where(both | (ta < 0), tr, -1)
    return MemoryEvents.from_columns({
        "ts_ns": start[rows][k], "bytes": a["mem_bytes"][k], "addr": known("mem_addr"), "total_allocated": ta,
        "total_reserved": tr, "seq": known("mem_seq"), "pid": pid[rows][k], "tid": tid[rows][k],
        "device": np.where(gpu[k], dev_id[k], -1),
    })
