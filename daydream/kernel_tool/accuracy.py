"""Leave-one-GPU-out accuracy on the development data (../shared/kernels/neusight).

For each held-out GPU ``h`` of the development GPUs: constants are fitted on the other GPUs
(:func:`daydream.costmodel.fit.fit`), then

* cross-GPU: every row of ``h`` is predicted from each other GPU's row of the same op and shape
  (:func:`daydream.costmodel.kernel_time.predict_cross`), per source -> target pair and op class;
* shape: every linear/bmm row of ``h`` is predicted from ``h``'s own row at the nearest other
  shape (:func:`daydream.costmodel.fit.nearest_shape`, :func:`~daydream.costmodel.kernel_time.predict_shape`)
  with constants fitted without ``h``.

Error: |predicted / measured - 1|; reported: median, 90th percentile, row count, and the share of
measured times inside the predicted [low, high] range.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from ..costmodel import kernel_time as Mdl
from ..costmodel.fit import fit, nearest_shape, pairs
from .neusight import read_table
from ..costmodel.specs import find_spec
from ..costmodel.work import GEMM_CLASSES, Kernels

FILES = ("linear.csv", "bmm.csv", "elem.csv", "ln.csv", "softmax.csv")
#: Goals (median |error|) per op class: issue 33.
GOALS = {"linear": 0.10, "bmm": 0.10, "elementwise": 0.15, "ln": 0.15, "softmax": 0.15}
CLASS_ORDER = ("linear", "bmm", "elementwise", "ln", "softmax")


def default_root() -> Path:
    """../shared/kernels/neusight relative to the repository root."""
    return Path(__file__).resolve().parents[2].parent / "shared" / "kernels" / "neusight"


def load(root: str | Path | None = None, files=FILES, every: int = 1) -> dict:
    """Development data: GPU table name -> (spec, kernels, measured ns, shape keys). ``every``:
    keep every ``every``-th shape key (a subset for quick tests; the same shapes on every GPU)."""
    root = Path(root) if root else default_root()
    parts: dict = {}
    for f in files:
        t = read_table(root / f)
        keys = t.shape_key()
        keep = np.ones(len(keys), bool)
        if every > 1:
            h = np.array([zlib.crc32(s.encode()) for s in keys.astype(str).tolist()], np.int64)  # stable across runs
            keep = (h % every) == 0
        for dev in np.unique(t.device).tolist():
            m = (t.device == dev) & keep
            spec = find_spec(dev)
            if spec is None:
                raise ValueError(f"unknown device {dev!r} in {f}")
            parts.setdefault(spec.name, []).append((spec, t.kernels.take(m), t.t_ns[m], keys[m]))
    out = {}
    for name, ps in parts.items():
        k = Kernels(**{fd: np.concatenate([getattr(p[1], fd) for p in ps]) for fd in Kernels.__dataclass_fields__})
        out[name] = (ps[0][0], k, np.concatenate([p[2] for p in ps]), np.concatenate([p[3] for p in ps]))
    return out


def _stats(pred: Mdl.Prediction, meas: np.ndarray) -> tuple[float, float, int, float]:
    e = np.abs(pred.point / meas - 1)
    inside = (meas >= pred.low * (1 - 1e-9)) & (meas <= pred.high * (1 + 1e-9))
    return float(np.median(e)), float(np.percentile(e, 90)), int(len(e)), float(inside.mean())


def leave_one_out(data: dict, grid: tuple | None = None, spread: bool = True) -> dict:
    """{'cross': [(src, tgt, class, median, p90, n, in_range)], 'shape': [(gpu, class, median, p90, n,
    in_range)], 'constants': {held-out: Constants}}. ``grid``: :func:`fit`'s search grid;
    ``spread=False`` skips the ranges' development spread (faster; medians unchanged)."""
    cross, shape, consts = [], [], {}
    names = list(data)
    for h in names:
        c = fit({g: v for g, v in data.items() if g != h}, spread=spread, grid=grid)
        consts[h] = c
        spec_h, k_h, t_h, keys_h = data[h]
        for s in names:
            if s == h:
                continue
            spec_s, k_s, t_s, keys_s = data[s]
            ia, ib = pairs(keys_s, keys_h)
            if not len(ia):
                continue
            p = Mdl.predict_cross(k_s.take(ia), t_s[ia], spec_s, spec_h, c=c)
            cls = k_s.cls[ia]
            for cl in CLASS_ORDER:
                m = cls == cl
                if m.any():
                    sub = Mdl.Prediction(p.low[m], p.point[m], p.high[m], p.reason[m])
                    cross.append((s, h, cl) + _stats(sub, t_h[ib][m]))
        gm = np.nonzero(np.isin(k_h.cls, GEMM_CLASSES))[0]
        sub = k_h.take(gm)
        ref = nearest_shape(sub)
        ok = ref >= 0
        p = Mdl.predict_shape(sub.take(ref[ok]), t_h[gm][ref[ok]], sub.take(ok), spec_h, c)
        for cl in GEMM_CLASSES:
            m = sub.cls[ok] == cl
            if m.any():
                pp = Mdl.Prediction(p.low[m], p.point[m], p.high[m], p.reason[m])
                shape.append((h, cl) + _stats(pp, t_h[gm][ok][m]))
    return {"cross": cross, "shape": shape, "constants": consts}


def pooled(res: dict) -> dict:
    """Median over the pairs' medians per class (cross) and per class (shape)."""
    out = {}
    for cl in CLASS_ORDER:
        v = [r[3] for r in res["cross"] if r[2] == cl]
        if v:
            out[("cross", cl)] = float(np.median(v))
    for cl in GEMM_CLASSES:
        v = [r[2] for r in res["shape"] if r[1] == cl]
        if v:
            out[("shape", cl)] = float(np.median(v))
    return out


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def markdown(res: dict) -> str:
    """The generated part of docs/kernels.md."""
    L = ["Cross-GPU (leave-one-GPU-out: constants fitted on the other three GPUs; each target row predicted",
         "from the source GPU's row of the same shape). |error| = |predicted / measured - 1|; *in range*: share",
         "of measured times inside [low, high].", "",
         "| source -> target | class | rows | median | p90 | in range | goal |", "|---|---|---|---|---|---|---|"]
    for s, h, cl, med, p90, n, inr in res["cross"]:
        ok = "met" if med <= GOALS[cl] else f"**missed** (goal {_pct(GOALS[cl])})"
        L.append(f"| {s} -> {h} | {cl} | {n:,} | {_pct(med)} | {_pct(p90)} | {_pct(inr)} | {ok} |")
    L += ["", "Shape mode (same GPU; each linear/bmm row predicted from the nearest other shape's row; constants",
          "fitted without that GPU).", "", "| GPU | class | rows | median | p90 | in range | goal |", "|---|---|---|---|---|---|---|"]
    for h, cl, med, p90, n, inr in res["shape"]:
        ok = "met" if med <= GOALS[cl] else f"**missed** (goal {_pct(GOALS[cl])})"
        L.append(f"| {h} | {cl} | {n:,} | {_pct(med)} | {_pct(p90)} | {_pct(inr)} | {ok} |")
    L += ["", "Summary: median over the pairs' medians.", "", "| mode | class | median of medians | goal |", "|---|---|---|---|"]
    for (mode, cl), v in pooled(res).items():
        L.append(f"| {mode} | {cl} | {_pct(v)} | {'met' if v <= GOALS[cl] else '**missed**'} ({_pct(GOALS[cl])}) |")
    L += ["", "Fitted constants per held-out GPU (fitted on the other three):", "",
          "| held out | c_tile | h_occ | tile policy | eta (GFLOP/s/W) | fitted on |", "|---|---|---|---|---|---|"]
    for h, c in res["constants"].items():
        L.append(f"| {h} | {c.c_tile:g} | {c.h_occ:g} | {c.tile_policy} | {', '.join(f'{k} {v:.1f}' for k, v in sorted(c.eta.items()))} | {', '.join(c.fitted_on)} |")
    return "\n".join(L) + "\n"


MARKER = "<!-- generated by `daydream-kernels accuracy --write docs/kernels.md`: everything below is replaced -->"


def write_doc(path: str | Path, text: str) -> None:
    """Replace the part of ``path`` below :data:`MARKER` (the text above it is kept)."""
    p = Path(path)
    head = p.read_text().split(MARKER)[0] if p.exists() else "# Kernel cost model\n\n"
    p.write_text(head.rstrip("\n") + "\n\n" + MARKER + "\n\n" + text)


#: the dimension a batch (or token count) multiplies, per op class (cuBLAS shapes: a linear's rows are N)
SERIES_DIM = {"linear": "N", "bmm": "B", "elementwise": "B", "ln": "B", "softmax": "B"}
SERIES_FACTORS = (2, 4, 8, 16)


def shape_series(data: dict, consts: dict | None = None) -> list:
    """The shape model alone on problem-size series of the development data: each row predicted
    from the same GPU's row of the same op whose batch dimension (:data:`SERIES_DIM`) is ``f``
    times smaller, every other dimension equal (f in :data:`SERIES_FACTORS`), with
    :func:`~daydream.costmodel.kernel_time.predict_shape` (constants fitted without that GPU where
    ``consts`` holds them: ``leave_one_out``'s) and with the linear guess ``t·f``.

    Returns [(gpu, class, f, rows, model median |error|, model median error, linear median |error|,
    linear median error)] (signed error: predicted / measured - 1)."""
    out = []
    for h, (spec, k, t, keys) in data.items():
        c = (consts or {}).get(h)
        for cl in CLASS_ORDER:
            idx = np.nonzero(k.cls == cl)[0]
            if not len(idx):
                continue
            d = SERIES_DIM[cl]
            other = [x for x in ("B", "M", "N", "K") if x != d]
            row_len = np.where(k.B[idx] > 0, k.elems[idx] // np.maximum(k.B[idx], 1), -1)
            # rows of one series: same op name, precision, kernel inputs, other dimensions (memory: row length)
            op = np.array([s.split("|")[0] for s in keys[idx].astype(str)], dtype=object)
            sig = {}
            for j, i in enumerate(idx.tolist()):  # a GPU's rows of one class: a few thousand
                key = (op[j], str(k.dtype[i]), int(k.inputs[i]), *(int(getattr(k, x)[i]) for x in other), int(row_len[j]))
                sig.setdefault(key, {})[int(getattr(k, d)[i])] = i
            for f in SERIES_FACTORS:
                ref, new = [], []
                for rows in sig.values():
                    for v, i in rows.items():
                        if v % f == 0 and v // f in rows:
                            ref.append(rows[v // f])
                            new.append(i)
                if not new:
                    continue
                ref, new = np.asarray(ref), np.asarray(new)
                p = Mdl.predict_shape(k.take(ref), t[ref], k.take(new), spec, c).point
                e = p / t[new] - 1
                lin = t[ref] * f / t[new] - 1
                out.append((h, cl, f, len(new), float(np.median(np.abs(e))), float(np.median(e)),
                            float(np.median(np.abs(lin))), float(np.median(lin))))
    return out


def series_markdown(rows: list) -> str:
    """The table of :func:`shape_series` (docs/scaling.md)."""
    L = ["| GPU | class | factor | rows | model median \\|error\\| | model median error | linear median \\|error\\| | linear median error |",
         "|---|---|---|---|---|---|---|---|"]
    for h, cl, f, n, med, sgn, lmed, lin in rows:
        L.append(f"| {h} | {cl} | x{f} | {n:,} | {_pct(med)} | {sgn * 100:+.1f} % | {_pct(lmed)} | {lin * 100:+.1f} % |")
    return "\n".join(L) + "\n"
