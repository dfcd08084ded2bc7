"""Collective costs fitted on a trace's own transfers, the link presets as the fallback, and the
slowdown of compute kernels overlapped by communication.

**The fit.** Per collective operation (all-reduce, all-gather, ...), the recorded times ``t`` (ns)
of the trace's sized collectives (``S`` bytes, ``n`` ranks, ``n > 1``) are fitted by the
alpha-beta form of :mod:`daydream.costmodel.comm`, with the latency and the bandwidth free::

    t = L + w(op, n) S / B        w = the transfer factor of the module table (2(n-1)/n ring
                                   all-reduce, (n-1)/n all-gather / reduce-scatter / all-to-all,
                                   1 broadcast / reduce / send-recv)

by least squares on the relative error (weights ``1/t``, so small and large messages count
alike), ``L >= 0`` and ``1/B >= 0`` (a two-unknown non-negative least squares, solved in closed
form). The fitted ``B`` is a bus bandwidth (nccl-tests ``doc/PERFORMANCE.md``). A single size
fits no line: the preset's time is then scaled by the median ratio of the recorded times to it
(latency and transfer alike).

What ``t`` is matters (Echo, §8.3: a plain alpha-beta model is 26-28 % off inside a server; its
error is the waiting it does not model): on a **job** (every rank's trace), ``t`` is each rank's
**transfer**, the recorded time after the last participant arrived (:mod:`daydream.job.match`);
on **one rank's trace** it is the kernel's duration, which includes waiting for peers, so the fit
is an upper bound of the transfer cost and says so (``source``).

**Where the fit is used** (:func:`collective_ns`): an operation the trace has, at sizes within
``[min S / SIZE_MARGIN, max S x SIZE_MARGIN]`` of its fitted collectives; the latency scaled to
another group size by the preset's ratio ``(b + steps(n') a) / (b + steps(n) a)``, the bandwidth
kept. Every other operation or size is costed by the preset network
(:func:`daydream.costmodel.comm.collective_ns`), and counted.

**Overlap slowdown** (:func:`overlap_slowdown`): compute kernels running while a collective runs
on the same GPU share its SMs and memory bandwidth (the Daydream paper measured collectives 1.34x
slower overlapped, :data:`~daydream.costmodel.comm.PAPER_CONTENTION`; Echo, compute 4.67 %
slower). Measured per trace: for every compute kernel name recorded both overlapped by a
collective (on another stream of its GPU) and not, the ratio of the median durations; the
slowdown is their geometric mean weighted by the overlapped kernels' time. 1.0 (no evidence)
where no name has both.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import comm as cm

#: how far outside the fitted sizes (factor) the fit is still used; beyond, the presets. A
#: stated choice, not fitted: one doubling either way around the measured range.
SIZE_MARGIN = 2.0
#: fewest kernels of one name on each side (overlapped / not) for its ratio to count
MIN_SAMPLES = 2

OP_NAMES = {cm.ALL_REDUCE: "all-reduce", cm.ALL_GATHER: "all-gather", cm.REDUCE_SCATTER: "reduce-scatter",
            cm.ALL_TO_ALL: "all-to-all", cm.BROADCAST: "broadcast", cm.REDUCE: "reduce", cm.SEND_RECV: "send/recv"}


def _xfer_factor(op, n) -> np.ndarray:
    """Transfer factor ``w`` of the ring / pairwise forms (comm module table), float64."""
    n = np.maximum(np.asarray(n, np.float64), 1.0)
    frac = (n - 1) / n
    op = np.asarray(op)
    return np.where(op == cm.ALL_REDUCE, 2 * frac,
                    np.where(np.isin(op, (cm.ALL_GATHER, cm.REDUCE_SCATTER, cm.ALL_TO_ALL)), frac, 1.0))


def _steps(op, n) -> np.ndarray:
    n = np.maximum(np.asarray(n, np.float64), 1.0)
    op = np.asarray(op)
    return np.where(op == cm.ALL_REDUCE, 2 * (n - 1), np.where(op == cm.SEND_RECV, 1.0, n - 1))


@dataclass(frozen=True)
class OpFit:
    """The fit of one operation: ``latency_ns`` (L at ``group``), ``busbw`` (bytes/s), the
    collectives fitted (``count``), their sizes' range (bytes), the group size, and the relative
    residuals ``(model - t) / t`` of the fit and of the preset at the same points: median of the
    absolute value, p90 and max absolute, and the signed median (bias)."""

    op: int
    count: int
    group: int
    size_min: int
    size_max: int
    latency_ns: float
    busbw: float
    fit_residual: dict
    preset_residual: dict
    #: > 0: one size only, so no line is fitted: the preset scaled by this factor (the median
    #: recorded / preset time); ``latency_ns`` and ``busbw`` are the preset's times it, not a fit
    preset_scale: float = 0.0


@dataclass
class CommFit:
    """Per operation its :class:`OpFit`; ``preset``: the fallback network; ``source``: what the
    fitted times are ("transfer" on a job, "duration (includes peer wait)" on one rank); counts."""

    ops: dict[int, OpFit]
    preset: cm.Network | None
    source: str
    counts: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict:
        """JSON-ready: ``{"source", "preset", "ops": {name: {...}}, "counts"}`` (GB/s, us)."""
        return {"source": self.source, "preset": self.preset.intra.name if self.preset is not None else None,
                "counts": dict(self.counts),
                "ops": {OP_NAMES[o]: {"count": f.count, "group_size": f.group, "size_min_bytes": f.size_min,
                                      "size_max_bytes": f.size_max, "latency_us": round(f.latency_ns / 1e3, 3),
                                      "busbw_GBps": round(f.busbw / 1e9, 4), "fit_residual": f.fit_residual,
                                      "preset_residual": f.preset_residual,
                                      **({"one_size_preset_scale": round(f.preset_scale, 4)} if f.preset_scale > 0 else {})}
                        for o, f in sorted(self.ops.items())}}


def from_json(doc: dict, preset: cm.Network, where: str = "fit") -> CommFit:
    """The :class:`CommFit` of a ``daydream-comm-fit --json`` document (:meth:`CommFit.to_json`:
    us and GB/s there, ns and bytes/s here); ``preset`` the fallback network.

    Raises:
        ValueError: not such a document (names ``where``, the file, and the field).
    """
    by_name = {v: k for k, v in OP_NAMES.items()}
    try:
        ops = {}
        for name, o in dict(doc["ops"]).items():
            if name not in by_name:
                raise ValueError(f"unknown operation {name!r}")
            bw = float(o["busbw_GBps"]) * 1e9
            if not (bw > 0 and np.isfinite(bw)):
                raise ValueError(f"{name}: busbw_GBps must be > 0")
            ops[by_name[name]] = OpFit(by_name[name], int(o["count"]), int(o["group_size"]), int(o["size_min_bytes"]),
                                       int(o["size_max_bytes"]), float(o["latency_us"]) * 1e3, bw,
                                       dict(o.get("fit_residual", {})), dict(o.get("preset_residual", {})),
                                       float(o.get("one_size_preset_scale", 0.0) or 0.0))
        return CommFit(ops, preset, str(doc.get("source", "")), {})
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"{where}: not a daydream-comm-fit document ({type(e).__name__}: {e})") from None


def _residuals(model: np.ndarray, t: np.ndarray) -> dict:
    r = (model - t) / t
    a = np.abs(r)
    return {"median_abs": round(float(np.median(a)), 4), "p90_abs": round(float(np.quantile(a, 0.9)), 4),
            "max_abs": round(float(a.max()), 4), "median_signed": round(float(np.median(r)), 4)}


def _nnls2(x: np.ndarray, t: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """min sum w^2 (L + k x - t)^2 over L >= 0, k >= 0 (closed form: the free optimum, else the
    best of the two faces)."""
    W = w * w
    sw, sx, sxx, st, sxt = W.sum(), (W * x).sum(), (W * x * x).sum(), (W * t).sum(), (W * x * t).sum()
    det = sw * sxx - sx * sx
    if det > 0:
        L, k = (st * sxx - sx * sxt) / det, (sw * sxt - sx * st) / det
        if L >= 0 and k >= 0:
            return float(L), float(k)
    cands = [(max(st / sw, 0.0), 0.0), (0.0, max(sxt / sxx, 0.0) if sxx > 0 else 0.0)]
    return min(cands, key=lambda c: float((W * (c[0] + c[1] * x - t) ** 2).sum()))


def fit(op, size_bytes, n, t_ns, preset: cm.Network | None, source: str) -> CommFit:
    """Fit each operation's latency and bus bandwidth on recorded collectives (module docstring).

    Args:
        op, size_bytes, n, t_ns: per collective (K,): :mod:`daydream.costmodel.comm` op codes, the
            nccl-tests size ``S`` (bytes; < 0 unknown), the group size, the time fitted (ns).
        preset: the network the presets give (the traced link); residuals are reported for it too.
            None: the link is not known: lines are fitted, nothing is compared (empty preset
            residuals), and an operation of one size, which only scales the preset, is not fitted
            (counted).
        source: what ``t_ns`` is (reported).

    Returns:
        the :class:`CommFit` (operations without a usable point are absent, counted).
    """
    op, s, n, t = (np.asarray(a) for a in (op, size_bytes, n, t_ns))
    ok = (s > 0) & (n > 1) & (t > 0) & np.isin(op, list(OP_NAMES))
    counts = {"collective without a size, a group or a time (not fitted)": int(np.count_nonzero(~ok))} if (~ok).any() else {}
    ops = {}
    for o in sorted(set(op[ok].tolist())):  # operations: a handful
        m = ok & (op == o)
        nn = int(np.median(n[m]))
        m &= n == nn
        x = _xfer_factor(o, nn) * s[m].astype(np.float64) * 1e9  # ns per (1/B) at B in bytes/s
        tt = t[m].astype(np.float64)
        pre = cm.collective_ns(o, s[m], nn, preset).astype(np.float64) if preset is not None else None
        r = 0.0
        if len(np.unique(s[m])) >= 2:
            L, k = _nnls2(x, tt, 1.0 / tt)
        elif pre is None:
            key = "operation of one size and no preset to scale (not fitted: give --link)"
            counts[key] = counts.get(key, 0) + int(m.sum())
            continue
        else:
            r = float(np.median(tt / pre))  # one size: the preset scaled to it (latency and transfer alike)
            L = r * float(pre[0] - _xfer_factor(o, nn) * s[m][0] * 1e9 / preset.intra.bandwidth)
            k = r / preset.intra.bandwidth
        busbw = 1.0 / k if k > 0 else float("inf")
        model = L + k * x
        ops[int(o)] = OpFit(int(o), int(m.sum()), nn, int(s[m].min()), int(s[m].max()), L, busbw,
                            _residuals(model, tt), _residuals(pre, tt) if pre is not None else {}, r)
    return CommFit(ops, preset, source, counts)


def collective_ns(f: CommFit | None, op: int, size, n, net: cm.Network) -> tuple[np.ndarray, int]:
    """Time (int64 ns) of collectives of ``op`` (``size`` bytes array, ``n`` ranks): the trace's
    fit where it holds (the operation fitted, the size within :data:`SIZE_MARGIN` of the fitted
    range), ``net``'s presets elsewhere (module docstring). ``n <= 1`` costs 0.

    Returns:
        (times, how many were costed by the fit).
    """
    s = np.asarray(size, np.float64)
    out = cm.collective_ns(op, s, n, net)
    o = None if f is None else f.ops.get(int(op))
    if o is None or int(n) <= 1:
        return out, 0
    use = (s >= o.size_min / SIZE_MARGIN) & (s <= o.size_max * SIZE_MARGIN)
    a, b = net.intra.latency_ns, net.base_latency_ns
    lat = o.latency_ns * (b + _steps(op, n) * a) / (b + _steps(op, o.group) * a)
    t = lat + _xfer_factor(op, n) * s / o.busbw * 1e9 * net.contention
    return np.where(use, np.rint(t).astype(np.int64), out), int(use.sum())


def overlap_slowdown(start_ns, end_ns, device, name_id, is_comm, is_compute) -> tuple[float, dict]:
    """The slowdown of compute kernels overlapped by a collective on their GPU (module docstring).

    Args:
        start_ns, end_ns, device, name_id: per GPU task (recorded times, ns).
        is_comm: bool mask of the collectives; is_compute: bool mask of the compute kernels.

    Returns:
        (slowdown >= 0; 1.0 without evidence, detail: names compared, kernels overlapped, per-name
        ratios' range).
    """
    start, end, dev, nid = (np.asarray(a, np.int64) for a in (start_ns, end_ns, device, name_id))
    over = np.zeros(len(start), bool)
    for d in np.unique(dev[is_comm]).tolist():  # GPUs: a handful
        c = np.nonzero(is_comm & (dev == d))[0]
        o = np.argsort(start[c], kind="stable")
        cs, ce = start[c][o], np.maximum.accumulate(end[c][o])  # running max: any earlier collective still running
        k = np.nonzero(is_compute & (dev == d))[0]
        j = np.searchsorted(cs, end[k], side="left") - 1
        over[k] = (j >= 0) & (ce[np.maximum(j, 0)] > start[k])
    k = np.nonzero(is_compute)[0]
    dur = (end - start).astype(np.float64)
    ratios, weights = [], []
    for u in np.unique(nid[k[over[k]]]).tolist():  # names overlapped: tens to hundreds
        m = k[nid[k] == u]
        a, b = m[over[m]], m[~over[m]]
        if len(a) >= MIN_SAMPLES and len(b) >= MIN_SAMPLES and np.median(dur[b]) > 0:
            ratios.append(float(np.median(dur[a]) / np.median(dur[b])))
            weights.append(float(dur[a].sum()))
    detail = {"compute kernels overlapped": int(over[k].sum()), "names compared": len(ratios)}
    if not ratios:
        return 1.0, detail
    r, w = np.asarray(ratios), np.asarray(weights)
    detail["per-name ratio min"], detail["per-name ratio max"] = round(float(r.min()), 4), round(float(r.max()), 4)
    return float(np.exp((w * np.log(np.maximum(r, 1e-9))).sum() / w.sum())), detail
