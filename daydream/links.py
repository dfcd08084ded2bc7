"""Links between rows of an :class:`~daydream.events.EventTable` that the trace records by id.

The launch link is written once here and used by the mapper and the graph builder alike: a GPU
task row (kernel, memcpy, memset) is launched by the runtime/driver call row of the same process
with the same correlation id (CUPTI, Kineto and nsys all record it; ``../shared/docs/formats.md``).
"""

from __future__ import annotations

import numpy as np

from .events import EventTable


def _corr_key(pid: np.ndarray, corr: np.ndarray) -> np.ndarray:
    return (pid.astype(np.int64) << np.int64(40)) ^ (corr.astype(np.int64) & np.int64((1 << 40) - 1))


def gpu_pids(table: EventTable, gpu_rows: np.ndarray, rt_rows: np.ndarray) -> np.ndarray:
    """Process id of each GPU row; rows without one (-1) take the only process that makes API
    calls, when there is exactly one."""
    g_pid = table.pid[gpu_rows].astype(np.int64).copy()
    cpu_pids = np.unique(table.pid[rt_rows])
    if len(cpu_pids) == 1:
        g_pid[g_pid < 0] = cpu_pids[0]
    return g_pid


def launch_rows(table: EventTable, rt_rows: np.ndarray, gpu_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The launching runtime row of each GPU row by (process, correlation id), -1 when none.

    Args:
        rt_rows: candidate runtime-call rows; gpu_rows: GPU task rows (int arrays of table rows).
    Returns:
        (launch row per GPU row, int64 length ``len(gpu_rows)``; per runtime row, bool: it shares
        its correlation id with an earlier call of its process — the earliest one is the link).
    """
    out = np.full(len(gpu_rows), -1, dtype=np.int64)
    if len(gpu_rows) == 0 or len(rt_rows) == 0:
        return out, np.zeros(len(rt_rows), bool)
    rt_pid = table.pid[rt_rows].astype(np.int64)
    rt_corr = table.correlation[rt_rows].astype(np.int64)
    g_pid = gpu_pids(table, gpu_rows, rt_rows)
    g_corr = table.correlation[gpu_rows].astype(np.int64)
    rk = _corr_key(rt_pid, rt_corr)
    o = np.lexsort((table.start_ns[rt_rows], rk))
    o = o[rt_corr[o] >= 0]
    rk_sorted = rk[o]
    dup = np.zeros(len(rt_rows), bool)
    if len(rk_sorted) > 1:
        dup[o[1:][rk_sorted[1:] == rk_sorted[:-1]]] = True
    gk = _corr_key(g_pid, g_corr)
    j = np.searchsorted(rk_sorted, gk)
    ok = (j < len(rk_sorted)) & (g_corr >= 0) & (g_pid >= 0)
    ok[ok] &= rk_sorted[j[ok]] == gk[ok]
    out[ok] = rt_rows[o[j[ok]]]
    return out, dup
