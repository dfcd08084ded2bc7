"""Cross-GPU and precision ground truth: record the same small models on the GPU at hand so that
measured pairs can be added, and compare recorded pairs with daydream's predictions.

Usage::

    # on a machine with a CUDA/ROCm GPU: DIR/<gpu>/<model>-baseline.json (fp32, TF32 off) and the
    # precision set DIR/<gpu>/<model>-{fp32,bf16,fp16}.json (torch.autocast; fp16 with GradScaler)
    python scripts/ground_truth/pairs.py record --out DIR [--models cnn,transformer] [--precision]

    # anywhere (no GPU): A and B are two <gpu> folders recorded as above (or any two traces of one
    # program): gpu-upgrade predicted both ways beside the measured times (scripts/cross_gpu.py)
    python scripts/ground_truth/pairs.py compare DIR/A DIR/B [--write FILE.md]

    # anywhere: fp32 trace vs its bf16/fp16 runs: --opt amp (and amp:model=paper) beside measured
    python scripts/ground_truth/pairs.py amp DIR/<gpu> [--write FILE.md]

``record`` reuses ``run.py``'s models, step and profiler schedule (three ProfilerSteps); the
``--dry-run`` flag lists what would be recorded and runs nothing (CPU-testable).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
for p in (str(ROOT), str(ROOT / "scripts"), str(HERE)):
    if p not in sys.path:
        sys.path.insert(0, p)

import run as gt  # noqa: E402  (scripts/ground_truth/run.py)

PRECISIONS = ("fp32", "bf16", "fp16")


def plan_runs(models, precision: bool) -> list[tuple[str, str, str]]:
    """(model, file stem, what runs) for each recording."""
    out = [(m, f"{m}-baseline", "fp32 eager, TF32 matmul off (PyTorch default)") for m in models]
    if precision:
        for m in models:
            out += [(m, f"{m}-fp32", "fp32 eager, TF32 off"), (m, f"{m}-bf16", "torch.autocast bf16"),
                    (m, f"{m}-fp16", "torch.autocast fp16 + GradScaler")]
    return out


def gpu_slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower() or "gpu"


def record(out: Path, models, precision: bool, dry_run: bool) -> list[Path]:  # pragma: no cover - needs a GPU
    runs = plan_runs(models, precision)
    if dry_run:
        for m, stem, what in runs:
            print(f"{stem:<24} {what}")
        return []
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("pairs.py record: no GPU (compare and amp run without one)")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    folder = out / gpu_slug(torch.cuda.get_device_name(0))
    folder.mkdir(parents=True, exist_ok=True)
    batches = {"cnn": 128, "transformer": 16}
    done = []
    for m, stem, _ in runs:
        dtype = stem.rsplit("-", 1)[1]
        variant = "amp" if dtype in ("bf16", "fp16") else "baseline"
        setup = gt.Setup(m, batches[m], amp_dtype=dtype if variant == "amp" else "bf16")
        gt.run_variant(setup, variant, folder)
        src = folder / f"{m}-{variant}.json"
        dst = folder / f"{stem}.json"
        if src != dst:
            src.replace(dst)
        done.append(dst)
        torch.cuda.empty_cache()
    return done


def traces_in(folder: Path) -> dict[str, Path]:
    return {p.name.split(".json")[0]: p for p in sorted(folder.iterdir()) if p.name.endswith((".json", ".json.gz"))}


def compare(a: Path, b: Path, write: str | None) -> str:
    """gpu-upgrade both ways over the traces of the same stem in folders a and b."""
    import cross_gpu as cg  # scripts/cross_gpu.py

    ta, tb = traces_in(a), traces_in(b)
    args = [str(x) for s in sorted(set(ta) & set(tb)) for x in (ta[s], tb[s])]
    if not args:
        raise SystemExit(f"pairs.py compare: no trace name in both {a} and {b}")
    cg.main(args + (["--write", write] if write else []))
    return " ".join(args)


def amp_table(folder: Path, write: str | None) -> str:
    """--opt amp (GPU-table model) and amp:model=paper predicted from <model>-fp32 beside the bf16/fp16 runs."""
    t = traces_in(folder)
    lines = ["| model | measured | amp (gpu model) | amp (paper) | baseline |", "|---|---|---|---|---|"]
    for stem in sorted(s for s in t if s.endswith("-fp32")):
        model = stem[: -len("-fp32")]
        base, _ = gt.measured_step_ns(t[stem])
        for dt in ("bf16", "fp16"):
            if f"{model}-{dt}" not in t:
                continue
            meas, _ = gt.measured_step_ns(t[f"{model}-{dt}"])
            ours, _ = gt.predict(t[stem], f"amp:dtype={dt}")
            paper, _ = gt.predict(t[stem], "amp:model=paper")
            lines.append(f"| {model} {dt} | {meas / 1e6:.3f} ms | {ours / 1e6:.3f} ms ({(ours - meas) / meas * 100:+.1f} %) | "
                         f"{paper / 1e6:.3f} ms ({(paper - meas) / meas * 100:+.1f} %) | {base / 1e6:.3f} ms |")
    text = "\n".join(lines)
    print(text)
    if write:
        Path(write).write_text(text + "\n", encoding="utf-8")
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--out", default="ground_truth_out")
    r.add_argument("--models", default=",".join(gt.MODELS))
    r.add_argument("--precision", action="store_true", help="also record the fp32/bf16/fp16 set")
    r.add_argument("--dry-run", action="store_true")
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    c.add_argument("--write")
    m = sub.add_parser("amp")
    m.add_argument("folder")
    m.add_argument("--write")
    a = ap.parse_args(argv)
    if a.cmd == "record":
        models = [x for x in a.models.split(",") if x]
        bad = [x for x in models if x not in gt.MODELS]
        if bad:
            ap.error(f"unknown model: {', '.join(bad)}")
        record(Path(a.out), models, a.precision, a.dry_run)
    elif a.cmd == "compare":
        compare(Path(a.a), Path(a.b), a.write)
    else:
        amp_table(Path(a.folder), a.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
