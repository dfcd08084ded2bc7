"""Fitting the model's constants on development data (measured rows of some GPUs).

What is fitted, in order (:func:`fit`), on the rows of the GPUs passed (``scripts/kernel_fit.py``
fits on all four development GPUs and writes ``daydream/costmodel/_fitted.py``; the accuracy
evaluation refits on three at a time):

1. ``c_tile`` (tile efficiency, :func:`daydream.costmodel.kernel_time.tile_efficiency`), ``h_occ``
   (latency hiding, :func:`daydream.costmodel.kernel_time.wave_fill`) and ``tile_policy`` (the target's
   GEMM tile, :func:`daydream.costmodel.kernel_time.predict_cross`): the combination of
   :data:`C_TILE_GRID` × :data:`H_GRID` × :data:`TILE_POLICIES` with the least in-sample cross-GPU
   error on the GEMM rows of the fitted GPUs (mean over ordered GPU pairs and GEMM classes of the
   median |predicted / measured - 1|), each with its own efficiencies (step 2).
   ``tiles`` (:func:`preferred_tiles`) is counted from the kernel names first.
2. ``eff[gpu][class]``: the median over that GPU's rows of that class of
   ``(T1 - floor) / (t - floor)``, ``T1`` the model time at efficiency 1 (memory classes first, so
   that a GEMM's memory term uses the GPU's fitted bandwidth).
3. ``eta[process]`` (GFLOP/s per W): the largest ``eff[gpu]['linear'] · fp32 peak / TDP`` over the
   NVIDIA GPUs fitted of that process: the least power cap that none of them contradicts.
4. ``spread[mode][class]``: the 10th and 90th percentiles of measured / predicted over the fitted
   GPUs' own pairs (cross: every ordered GPU pair, same shape; shape: each GEMM row from its
   nearest other shape on the same GPU), in-sample.
"""

from __future__ import annotations

import numpy as np

from . import kernel_time as Mdl
from .specs import Spec
from .work import GEMM_CLASSES, MEMORY_CLASSES, Kernels, tiles_of

#: Values tried for the tile-efficiency constant, the latency-hiding constant and the tile policy.
C_TILE_GRID = (0.0, 2.0, 4.0, 8.0)
H_GRID = (0.0, 1.0, 2.0, 4.0)
#: The target's GEMM tile: ``best`` (the candidate with the least model time, a stand-in for
#: cuBLAS's heuristic) by design. ``fitted`` (the tile the target's library generation used most
#: on the fitted GPUs, :func:`preferred_tiles`) was tried: leave-one-GPU-out medians got worse
#: (linear 13.2 % vs 12.9 %, bmm 17.1 % vs 15.4 %), so it is only an option of predict_cross.
TILE_POLICIES = ("best",)
FIT_CLASSES = MEMORY_CLASSES + GEMM_CLASSES


def _ones(gpus: list[Spec], c_tile: float, eff: dict | None = None, h: float = 0.0) -> Mdl.Constants:
    e = {g.name: {cl: 1.0 for cl in FIT_CLASSES} for g in gpus}
    if eff:
        for g, d in eff.items():
            e[g].update(d)
    return Mdl.Constants(e, c_tile, {}, {}, tuple(g.name for g in gpus), h)


def _ratio(k: Kernels, t: np.ndarray, gpu: Spec, c: Mdl.Constants) -> np.ndarray:
    f = Mdl.floor_ns(gpu)
    T1 = Mdl.model_time_ns(k, gpu, c)
    return (T1 - f) / np.maximum(t - f, 1.0)


def preferred_tiles(data) -> dict:
    """Library generation -> op class -> (TM, TN, threads): the tile (from the kernel names) and
    block size most rows of that class used on the fitted GPUs of that generation."""
    count: dict = {}
    for g, k, t, _ in data.values():
        tiles = tiles_of(k.name)
        thr = np.where(k.block[:, 0] > 0, np.prod(np.maximum(k.block, 1), axis=1), 256)
        for cl in GEMM_CLASSES:
            m = k.cls == cl
            for (tm, tn), th in zip(tiles[m].tolist(), thr[m].tolist()):
                key = (tm, tn, int(th))
                d = count.setdefault(g.family, {}).setdefault(cl, {})
                d[key] = d.get(key, 0) + 1
    return {f: {cl: list(max(d.items(), key=lambda kv: (kv[1], kv[0]))[0]) for cl, d in by.items()}
            for f, by in count.items()}


def _fit_eff(data, gpus, c_tile: float, h: float) -> dict:
    eff: dict = {}
    for g, k, t, _ in data.values():
        eff[g.name] = {}
        for stage in (MEMORY_CLASSES, GEMM_CLASSES):
            c = _ones(gpus, c_tile, eff, h)
            for cl in stage:
                m = k.cls == cl
                if m.any():
                    eff[g.name][cl] = float(np.median(_ratio(k.take(m), t[m], g, c)))
    return eff


def _gemm_pairs(data) -> list:
    """(source, target, source rows, target rows) of the GEMM rows measured on both."""
    vals = list(data.values())
    out = []
    for s, ks, ts, keys_s in vals:
        gm = np.isin(ks.cls, GEMM_CLASSES)
        for g, kt, tt, keys_t in vals:
            if s is g:
                continue
            ia, ib = pairs(keys_s[gm], keys_t)
            ia = np.nonzero(gm)[0][ia]
            if len(ia):
                out.append((s, g, ks.take(ia), ts[ia], tt[ib]))
    return out


def _cross_score(gp, c: Mdl.Constants) -> float:
    """Mean over (pair, GEMM class) of the median |predicted / measured - 1|."""
    errs = []
    for s, g, k, ts, tt in gp:
        p = Mdl.predict_cross(k, ts, s, g, c=c, ranges=False).point
        e = np.abs(p / tt - 1)
        for cl in GEMM_CLASSES:
            m = k.cls == cl
            if m.sum() >= 5:
                errs.append(np.median(e[m]))
    return float(np.mean(errs)) if errs else 0.0


def fit(data: dict[str, tuple[Spec, Kernels, np.ndarray, np.ndarray]], spread: bool = True,
        grid: tuple | None = None) -> Mdl.Constants:
    """Constants from ``data``: GPU table name -> (spec, kernels, measured ns, shape keys).
    ``grid``: (c_tile values, h values, tile policies) instead of the module's grids (tests use a
    smaller one)."""
    c_grid, h_grid, pols = grid or (C_TILE_GRID, H_GRID, TILE_POLICIES)
    gpus = [v[0] for v in data.values()]
    names = tuple(g.name for g in gpus)
    gp = _gemm_pairs(data)
    tiles = preferred_tiles(data)
    best = (np.inf, c_grid[0], h_grid[0], pols[0])
    for ct in c_grid:
        for h in h_grid:
            eff = _fit_eff(data, gpus, ct, h)
            for pol in pols:
                score = _cross_score(gp, Mdl.Constants(eff, ct, {}, {}, names, h, pol, tiles))
                if score < best[0] - 1e-12:
                    best = (score, ct, h, pol)
    _, ct, h, pol = best
    eff = _fit_eff(data, gpus, ct, h)
    eta: dict = {}
    for g in gpus:
        if g.vendor == "nvidia" and g.tdp_w > 0 and "linear" in eff[g.name] and g.process:
            eta[g.process] = max(eta.get(g.process, 0.0), eff[g.name]["linear"] * g.peak("fp32") * 1000.0 / g.tdp_w)
    c = Mdl.Constants(eff, ct, eta, {}, names, h, pol, tiles)
    if spread:
        c.spread = {"cross": _spread_cross(data, c), "shape": _spread_shape(data, c)}
    return c


def pairs(keys_a: np.ndarray, keys_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices (ia, ib) of rows with the same key in a and b (the first row of a repeated key)."""
    ua, ia = np.unique(keys_a.astype(str), return_index=True)
    ub, ib = np.unique(keys_b.astype(str), return_index=True)
    _, xa, xb = np.intersect1d(ua, ub, return_indices=True)
    return ia[xa], ib[xb]


def _q(x: np.ndarray) -> tuple[float, float]:
    return (float(np.percentile(x, 10)), float(np.percentile(x, 90))) if len(x) else (1.0, 1.0)


def _spread_cross(data, c) -> dict:
    out: dict = {}
    vals = list(data.values())
    for s, ks, ts, keys_s in vals:
        for g, kt, tt, keys_t in vals:
            if s is g:
                continue
            ia, ib = pairs(keys_s, keys_t)
            if not len(ia):
                continue
            p = Mdl.predict_cross(ks.take(ia), ts[ia], s, g, c=c).point
            r = tt[ib] / p
            for cl in np.unique(ks.cls[ia]).tolist():
                out.setdefault(cl, []).append(r[ks.cls[ia] == cl])
    return {cl: _q(np.concatenate(v)) for cl, v in out.items()}


def nearest_shape(k: Kernels, exclude_self: bool = True) -> np.ndarray:
    """Index of the nearest other row of the same class (log-distance over B, M, N, K, elems)."""
    X = np.log2(np.maximum(np.stack([k.B, k.M, k.N, k.K, k.elems], axis=1), 1).astype(float))
    out = np.full(len(k), -1, np.int64)
    for cl in np.unique(k.cls).tolist():
        idx = np.nonzero(k.cls == cl)[0]
        if len(idx) < 2:
            continue
        d = np.abs(X[idx][:, None, :] - X[idx][None, :, :]).sum(axis=2)
        if exclude_self:
            d[d == 0] = np.inf  # itself and exact duplicates
        out[idx] = idx[np.argmin(d, axis=1)]
    return out


def _spread_shape(data, c) -> dict:
    out: dict = {}
    for g, k, t, _ in data.values():
        m = np.isin(k.cls, GEMM_CLASSES)
        idx = np.nonzero(m)[0]
        if not len(idx):
            continue
        sub = k.take(idx)
        ref = nearest_shape(sub)
        ok = ref >= 0
        p = Mdl.predict_shape(sub.take(ref[ok]), t[idx][ref[ok]], sub.take(ok), g, c).point
        r = t[idx][ok] / p
        for cl in np.unique(sub.cls[ok]).tolist():
            out.setdefault(cl, []).append(r[sub.cls[ok] == cl])
    return {cl: _q(np.concatenate(v)) for cl, v in out.items()}


def to_python(c: Mdl.Constants, header: str) -> str:
    """Source text of ``_fitted.py`` holding ``c``."""
    def r(x):
        return round(float(x), 5)
    eff = {g: {cl: r(v) for cl, v in d.items()} for g, d in c.eff.items()}
    spread = {m: {cl: [r(a), r(b)] for cl, (a, b) in d.items()} for m, d in c.spread.items()}
    body = {"eff": eff, "c_tile": r(c.c_tile), "eta": {k: r(v) for k, v in c.eta.items()}, "spread": spread, "fitted_on": list(c.fitted_on)}
    import pprint
    body["h_occ"], body["tile_policy"], body["tiles"] = r(c.h_occ), c.tile_policy, c.tiles
    return f'"""{header}"""\n\nFITTED = {pprint.pformat(body, width=110, sort_dicts=True)}\n'
