"""Builder stage: pageable staging, per trace (``docs/model.md``, "Copies from and to pageable memory").

Two things CUDA does not document numerically are read from the trace's own copies:

* the **staging threshold**: the size above which a ``cudaMemcpyAsync`` from pageable host memory
  to the device synchronizes its stream before staging (CUDA Runtime API, "API synchronization
  behavior": "If pageable memory must first be staged to pinned memory, the driver may synchronize
  with the stream"; no size is given). A copy whose call returned while its stream predecessor was
  still running did not synchronize: the threshold is at least its size. The threshold is the
  largest such copy (:func:`staging_threshold`). A trace without one cannot show it: every pageable
  async copy is then given ``cudaMemcpy``'s documented pageable behaviour (the same page: "a stream
  sync is performed before the copy is initiated"; threshold 0), which each copy's own record can
  still contradict (``waits.pageable_copy_edges``).
* the **staging time** of a staged copy: its DMA starts ``L + S(bytes)`` after its call, where
  ``S(bytes) = S0 + bytes / B`` (the first chunk is staged first; a bigger copy stages a bigger
  first chunk). ``S0`` and ``B`` are fitted by least squares on the staged copies whose stream was
  idle at their launch (:func:`fit_staging`); with one size only, ``S`` is their lower median and
  ``B`` infinite (no slope).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._arrays import lower_median

#: where the threshold comes from when the trace does not show it
THRESHOLD_DOCUMENTED = ("no pageable copy of the trace returned while its stream was busy: every pageable async copy to the "
                        "device is taken to synchronize its stream first (CUDA Runtime API, 'API synchronization "
                        "behavior': cudaMemcpy from pageable memory does; cudaMemcpyAsync 'may')")


@dataclass(frozen=True)
class StagingFit:
    """A trace's pageable staging (all sizes in bytes, times in ns).

    ``threshold_bytes``: copies above it synchronize their stream and are staged; ``threshold_source``:
    "trace" (the largest copy seen returning while its stream was busy) or :data:`THRESHOLD_DOCUMENTED`;
    ``synced_min_bytes``: the smallest copy whose call spanned its stream predecessor's end (a sync
    is consistent with it; -1 none). ``intercept_ns`` (``S0``) and ``ns_per_byte`` (``1 / B``, 0: no
    slope) of ``S(bytes)``, fitted on ``samples`` copies of ``sizes`` distinct sizes between
    ``min_bytes`` and ``max_bytes``; ``max_residual_ns``: the largest |fit - sample|."""

    threshold_bytes: int
    threshold_source: str
    synced_min_bytes: int = -1
    intercept_ns: int = 0
    ns_per_byte: float = 0.0
    samples: int = 0
    sizes: int = 0
    min_bytes: int = 0
    max_bytes: int = 0
    max_residual_ns: int = 0

    @property
    def bandwidth_gbps(self) -> float:
        """The fitted staging bandwidth ``B`` in GB/s (10^9 B/s); 0.0 when there is no slope."""
        return 1.0 / self.ns_per_byte if self.ns_per_byte > 0 else 0.0

    def describe(self) -> str:
        """One line: the threshold and the fit."""
        th = (f"threshold {self.threshold_bytes:,} B (the largest pageable copy seen returning while its stream ran)"
              if self.threshold_source == "trace" else "threshold 0 B (documented behaviour; the trace does not show it)")
        if not self.samples:
            return f"pageable staging: {th}; no staged copy found its stream idle (S not measured)"
        fit = (f"S = {self.intercept_ns / 1e3:,.3f} us + bytes / {self.bandwidth_gbps:,.3f} GB/s" if self.ns_per_byte > 0
               else f"S = {self.intercept_ns / 1e3:,.3f} us (no size dependence fitted)")
        return (f"pageable staging: {th}; {fit} on {self.samples} copies of {self.sizes} sizes "
                f"({self.min_bytes:,}-{self.max_bytes:,} B), largest residual {self.max_residual_ns / 1e3:,.3f} us")


def staging_threshold(is_async: np.ndarray, nbytes: np.ndarray, call_start: np.ndarray, call_end: np.ndarray,
                      prev_end: np.ndarray) -> tuple[int, str, int]:
    """(threshold bytes, source, smallest size consistent with a sync or -1) from the trace's
    pageable host-to-device copies (arrays over them, shape (k,)): ``is_async`` (a
    ``cudaMemcpyAsync``, not a ``cudaMemcpy``), ``nbytes``, the launching call's recorded
    ``call_start``/``call_end`` and the stream predecessor's recorded end ``prev_end`` (int64
    min: none). Never raises."""
    has = is_async & (prev_end > np.iinfo(np.int64).min)
    unsynced = has & (call_end < prev_end)
    synced = has & (call_start < prev_end) & (prev_end <= call_end)
    smin = int(nbytes[synced].min()) if synced.any() else -1
    if unsynced.any():
        return int(nbytes[unsynced].max()), "trace", smin
    return 0, THRESHOLD_DOCUMENTED, smin


def fit_staging(nbytes: np.ndarray, delay_ns: np.ndarray) -> tuple[int, float, int]:
    """(``S0`` ns, ns per byte, largest |residual| ns) of ``delay = S0 + bytes * r`` by least
    squares over the samples (shape (k,)); with fewer than two distinct sizes, or a slope that
    comes out negative, ``S0`` is the lower median of the delays and ``r = 0``. ``S0`` is never
    negative (refitted through 0 when it would be). ``(0, 0.0, 0)`` without samples."""
    if not len(delay_ns):
        return 0, 0.0, 0
    x = nbytes.astype(np.float64)
    y = delay_ns.astype(np.float64)
    r = 0.0
    if len(np.unique(nbytes)) >= 2:
        xm, ym = x.mean(), y.mean()
        r = float(((x - xm) * (y - ym)).sum() / ((x - xm) ** 2).sum())
    if r <= 0:
        a, r = float(lower_median(delay_ns)), 0.0
    else:
        a = ym - r * xm
        if a < 0:
            a, r = 0.0, float((x * y).sum() / (x * x).sum())
    res = np.abs(np.rint(a + r * x) - y)
    return int(round(a)), r, int(res.max())


def staged_idle_delays(staged_nodes: np.ndarray, launch, lane_prev, rec_start, rec_end, x_src, x_dst, L: int) -> np.ndarray:
    """Per staged copy node (shape (k,)): ``start - launch.start - L`` where its stream (and its
    recorded cross-stream producers) were idle at its launch and its stream predecessor was
    launched inside the window (the same samples as ``latency.py``'s ``S``), else int64 min."""
    out = np.full(len(staged_nodes), np.iinfo(np.int64).min, np.int64)
    v = staged_nodes
    la, lp = launch[v], lane_prev[v]
    ok = la >= 0
    gl = np.where(ok, rec_start[np.maximum(la, 0)], 0)
    pe = np.where(lp >= 0, rec_end[np.maximum(lp, 0)], np.iinfo(np.int64).min)
    xpe = np.full(len(launch), np.iinfo(np.int64).min, np.int64)
    if len(x_src):
        np.maximum.at(xpe, x_dst, rec_end[x_src])
    ok &= (np.maximum(pe, xpe[v]) <= gl) & ((lp < 0) | (launch[np.maximum(lp, 0)] >= 0))
    out[ok] = rec_start[v[ok]] - gl[ok] - L
    return out


def measure_staging(staged_nodes: np.ndarray, nbytes: np.ndarray, launch, lane_prev, rec_start, rec_end, x_src, x_dst,
                    L: int, S_median: int, threshold: tuple[int, str, int], row: np.ndarray) -> tuple[int, tuple, StagingFit]:
    """(``S0`` ns, ``TaskGraph.staging_rows``, :class:`StagingFit`) of the staged copies
    ``staged_nodes`` (node ids, shape (k,); ``nbytes`` their sizes, ``row`` every node's table
    row). ``S_median`` is ``latency.py``'s ``S`` (0 when it could not be told from ``L``: then no
    fit, ``S0 = 0``). Counted: the fit's line, once per sample."""
    th, src, smin = threshold
    if not len(staged_nodes):
        return int(S_median), (), StagingFit(th, src, smin)
    d = staged_idle_delays(staged_nodes, launch, lane_prev, rec_start, rec_end, x_src, x_dst, L)
    ok = d > np.iinfo(np.int64).min
    if not ok.any() or not S_median:
        return int(S_median), (), StagingFit(th, src, smin)
    a, r, res = fit_staging(nbytes[ok], d[ok])
    b = nbytes[ok]
    fit = StagingFit(th, src, smin, a, r, int(ok.sum()), len(np.unique(b)), int(b.min()), int(b.max()), res)
    if r <= 0:
        return a, (), fit
    rows = row[staged_nodes]
    o = np.argsort(rows, kind="stable")
    extra = np.rint(nbytes.astype(np.float64) * r).astype(np.int64)
    return a, (rows[o].astype(np.int64), extra[o]), fit
