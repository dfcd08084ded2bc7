"""Leave-one-GPU-out medians of the power-cap variants tried for issue 33 (not adopted; docs/kernels.md,
"Tried for issue 33 and not adopted"). Reproduces that table's rows for this session's variants:

    python scripts/kernel_tried_power.py VARIANT [--ct C_TILE --h H | --grid]

VARIANT:

* ``base``: the model as it is (daydream.costmodel).
* ``dram``: the power cap counts the energy of DRAM bytes beside that of FLOPs: for an NVIDIA GPU
  without fitted values whose process has a fitted ``eta``, a FP32 GEMM takes at least
  ``T_pow = F_pad / (eta · TDP · e_tile · u) + bytes · E_byte / TDP`` (``bytes``: the op's compulsory
  bytes, daydream.costmodel.work; ``E_byte`` = 8 × the DRAM access energy per bit: HBM2 3.9 pJ/bit,
  O'Connor et al., "Fine-Grained DRAM", MICRO 2017; GDDR6 7.5 pJ/bit, Micron "Ultra-Bandwidth
  Solutions" memory comparison, average device power); ``eta`` refitted per process on the fitted
  GPUs' linear rows with their DRAM power (median bytes / measured time × ``E_byte``) taken off
  the board power.
* ``dramtile``: as ``dram`` with the GEMM's DRAM bytes those of its tiles without L2 reuse
  (``B·(M·K·⌈N/TN⌉ + N·K·⌈M/TM⌉ + M·N)·s``, an upper bound).
* ``excl``: the default efficiency (GEMM classes) of a GPU without fitted values is the median over
  the fitted GPUs that are not power-limited: a fitted GPU whose FP32 peak needs more GFLOP/s per W
  (peak / TDP) than the fitted ``eta`` of any newer process reaches is left out (T4 at 70 W needs
  116 GFLOP/s/W; TSMC 7 nm's A100 reaches 72).

* ``diag``: no variant; diagnostics of the model as it is, quoted in docs/kernels.md: the
  leave-one-GPU-out medians with each pair's own median bias divided out (what is left once the
  held-out GPU's efficiency level is known), the P100's linear rows' measured / model time by
  reduction length and operand footprint, and T4's by kernel duration.

``--ct``/``--h``: the same (c_tile, h) in every fold (default 4, 1); ``--grid``: the fit's own
search per fold. Judged only by the leave-one-GPU-out protocol (daydream.kernel_tool.accuracy).
The variants are applied by replacing daydream.costmodel functions in this process only.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from daydream.costmodel import fit as F
from daydream.costmodel import kernel_time as Mdl
from daydream.costmodel.work import GEMM_CLASSES, dtype_bytes, flops_bytes
from daydream.kernel_tool import accuracy as A

#: DRAM access energy (J per bit) by memory type: HBM2 (O'Connor et al. MICRO 2017), GDDR6 (Micron).
E_BIT = {"hbm2": 3.9e-12, "gddr6": 7.5e-12}
MEMORY = {"T4": "gddr6", "P100 PCIe": "hbm2", "V100 PCIe": "hbm2", "A100 40GB PCIe": "hbm2"}
ORDER = {"tsmc16": 0, "tsmc12": 1, "tsmc7": 2}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("variant", choices=("base", "dram", "dramtile", "excl", "diag"))
    ap.add_argument("--ct", type=float, default=4.0)
    ap.add_argument("--h", type=float, default=1.0)
    ap.add_argument("--grid", action="store_true")
    a = ap.parse_args(argv)
    v = a.variant
    if v == "diag":
        return diag(a.ct, a.h)
    model0, fit0, de0 = Mdl.model_time_ns, F.fit, Mdl.Constants.default_eff

    def e_byte(gpu) -> float:
        return 8 * E_BIT[MEMORY.get(gpu.name, "hbm2")]

    def model(k, gpu, c=None, geom=None, which="point", cap="node", tc_eff=Mdl.TC_EFFICIENCY):
        c = c or Mdl.default_constants()
        capv = Mdl.power_cap_tflops(gpu, c, cap)
        if v not in ("dram", "dramtile") or not np.isfinite(capv):
            return model0(k, gpu, c, geom, which, cap, tc_eff)
        T = model0(k, gpu, c, geom, which, "off", tc_eff)
        fl, by = flops_bytes(k)
        g = geom or Mdl.source_geometry(k, gpu)
        u = np.where(g.persistent, 1.0, Mdl.wave_fill(gpu, g.blocks, g.threads, Mdl._regs(g.tile, g.threads), k.smem, c.h_occ))
        et = Mdl.tile_efficiency(g.tile[:, 0].astype(float), g.tile[:, 1].astype(float), c.c_tile)
        M, N, K, B = (np.maximum(x, 1) for x in (k.M, k.N, k.K, k.B))
        tm, tn = g.tile[:, 0], g.tile[:, 1]
        pad = (-(-M // tm) * tm) * (-(-N // tn) * tn) / (M * N)
        gem = np.isin(k.cls, GEMM_CLASSES) & (Mdl.path_of(k.dtype) == "fp32")
        if v == "dramtile":
            by = np.where(gem, np.maximum(by, B * (M * K * -(-N // tn) + N * K * -(-M // tm) + M * N) * dtype_bytes(k.dtype)), by)
        t_pow = fl * pad / (capv * 1e3 * et * u) + by * e_byte(gpu) * 1e9 / gpu.tdp_w
        return np.where(gem, np.maximum(T, Mdl.floor_ns(gpu) + t_pow), T)

    def default_eff(self, cls, gpu=None):
        ex = getattr(self, "excl", set())
        vals = np.array([e[cls] for g, e in self.eff.items() if cls in e and g not in ex], float)
        if cls in GEMM_CLASSES and ex and len(vals):
            allv = np.array([e[cls] for e in self.eff.values() if cls in e], float)
            return float(np.median(vals)), float(allv.min()), float(allv.max())
        return de0(self, cls, gpu)

    def fit(d, spread=True, grid=None):
        c = fit0(d, spread=False, grid=grid)
        if v in ("dram", "dramtile"):
            eta: dict = {}
            for g, k, t, _ in d.values():
                if g.vendor == "nvidia" and g.tdp_w > 0 and g.process and "linear" in c.eff[g.name]:
                    m = k.cls == "linear"
                    _, by = flops_bytes(k.take(np.nonzero(m)[0]))
                    p_dram = float(np.median(by / t[m])) * 1e9 * e_byte(g)
                    eta[g.process] = max(eta.get(g.process, 0.0), c.eff[g.name]["linear"] * g.peak("fp32") * 1e3 / (g.tdp_w - p_dram))
            c.eta = eta
        if v == "excl":
            c.excl = set()
            for g, _, _, _ in d.values():
                newer = [e for p, e in c.eta.items() if p != g.process and ORDER.get(p, -1) >= ORDER.get(g.process, 9)]
                if g.tdp_w > 0 and newer and g.peak("fp32") * 1e3 / g.tdp_w > max(newer):
                    c.excl.add(g.name)
        return c

    Mdl.model_time_ns, F.fit, A.fit, Mdl.Constants.default_eff = model, fit, fit, default_eff
    grid = None if a.grid else ((a.ct,), (a.h,), ("best",))
    res = A.leave_one_out(A.load(), grid=grid, spread=False)
    p = A.pooled(res)
    print(v, "grid" if a.grid else f"c_tile {a.ct:g}, h {a.h:g}", "cross:",
          ", ".join(f"{cl} {100 * x:.1f} %" for (mode, cl), x in p.items() if mode == "cross"))
    for h, c in res["constants"].items():
        print(f"  held out {h}: c_tile {c.c_tile:g}, h {c.h_occ:g}, eta", {k: round(x, 1) for k, x in c.eta.items()},
              "left out of the median:", sorted(getattr(c, "excl", set())))
    return 0


def diag(ct: float, h: float) -> int:
    data = A.load()
    names = list(data)
    res: dict = {}
    for held in names:
        c = F.fit({g: x for g, x in data.items() if g != held}, spread=False, grid=((ct,), (h,), ("best",)))
        _, _k_h, t_h, keys_h = data[held]
        for s in names:
            if s == held:
                continue
            spec_s, k_s, t_s, keys_s = data[s]
            ia, ib = F.pairs(keys_s, keys_h)
            r = Mdl.predict_cross(k_s.take(ia), t_s[ia], spec_s, data[held][0], c=c, ranges=False).point / t_h[ib]
            for cl in A.CLASS_ORDER:
                m = k_s.cls[ia] == cl
                if m.any():
                    res.setdefault(cl, []).append((np.median(np.abs(r[m] - 1)), np.median(np.abs(r[m] / np.median(r[m]) - 1))))
    print(f"leave-one-GPU-out, c_tile {ct:g}, h {h:g}: median of pair medians (as judged; each pair's median bias divided out)")
    for cl, x in res.items():
        print(f"  {cl}: {100 * np.median([e[0] for e in x]):.1f} %; {100 * np.median([e[1] for e in x]):.1f} %")
    c = Mdl.default_constants()
    print("measured / model time of linear rows (constants of _fitted.py) by K and operand bytes (M·K + N·K)·4 (MiB):")
    edges = [0, 256, 512, 1024, 2048, np.inf]
    for g, (spec, k, t, _) in data.items():
        m = np.nonzero(k.cls == "linear")[0]
        kk, tt = k.take(m), t[m]
        r = tt / Mdl.model_time_ns(kk, spec, c)
        K = kk.K.astype(float)
        fp = (kk.M + kk.N) * K * 4 / 2**20
        for lab, km in (("K <= 8192", K <= 8192), ("K > 8192", K > 8192)):
            cells = []
            for lo, hi in itertools.pairwise(edges):
                mm = km & (fp > lo) & (fp <= hi)
                cells.append(f"{np.median(r[mm]):.2f} ({mm.sum()})" if mm.sum() >= 5 else "-")
            print(f"  {g:15} {lab:9}", " | ".join(cells))
    print("measured / model time by kernel duration (grids over 8 blocks per SM):")
    for g, (spec, k, t, _) in data.items():
        for cl in GEMM_CLASSES:
            m = np.nonzero(k.cls == cl)[0]
            kk, tt = k.take(m), t[m]
            geo = Mdl.source_geometry(kk, spec)
            r = tt / Mdl.model_time_ns(kk, spec, c, geo)
            big = geo.blocks / spec.sms > 8
            cells = []
            for lo, hi in ((1e5, 3e5), (3e5, 1e6), (1e6, 3e6), (3e6, 1e7), (1e7, 3e7), (3e7, np.inf)):
                mm = big & (tt > lo) & (tt <= hi)
                if mm.sum() >= 10:
                    cells.append(f">{lo / 1e6:g} ms: {np.median(r[mm]):.2f} ({mm.sum()})")
            print(f"  {g:15} {cl:6}", ", ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
