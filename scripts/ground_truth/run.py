"""Ground truth for daydream's optimization models: train small real models on a CUDA GPU, without
and with each optimization really applied, and compare the measured step times with daydream's
predictions from the baseline trace.

Usage (a CUDA machine with PyTorch >= 2.2; run from anywhere):

    python scripts/ground_truth/run.py [--out DIR] [--models cnn,transformer]
                                       [--variants amp,fused-adam,fusion,cuda-graphs]
    python scripts/ground_truth/run.py --from-traces DIR     # no GPU: predict from traces in DIR

For each model it records, with ``torch.profiler`` (schedule wait=1, warmup=1, active=3, so three
``ProfilerStep#N`` ranges), one Kineto trace per variant, ``DIR/<model>-<variant>.json``:

=============  =====================================================  ======================
variant        what runs                                              daydream prediction
=============  =====================================================  ======================
baseline       fp32, eager, ``Adam(foreach=False)``                   (the replay)
amp            ``torch.autocast`` (bf16, or fp16 + GradScaler)        ``--opt amp``
fused-adam     ``Adam(fused=True)``                                   ``--opt fused-adam``
fusion         ``torch.compile`` of the model and of the optimizer    ``--opt fusion``
               step (Inductor, default mode)
cuda-graphs    the whole step (forward, backward, ``Adam(capturable=  ``--opt cuda-graphs``
               True)``) captured with ``torch.cuda.graph``, replayed
=============  =====================================================  ======================

Then it predicts every variant from the baseline trace with daydream (``daydream.analysis``) and
writes ``DIR/results.md`` (a markdown table: predicted vs measured step time and the error) and
``DIR/results.json``. Step times are the mean of the three profiled ``ProfilerStep`` ranges, in
the baseline trace (measured and replayed), the prediction, and each variant's own trace
(measured): profiler overhead is in all of them alike. The unprofiled wall-clock step time of
each variant is reported beside them for context. ``reconbn`` and ``gpu-upgrade`` have no stock
implementation or need a second GPU: they are predicted but not measured.

Designed to finish in well under 8 minutes on one H100/H200 (two small models, 5 variants, a few
steps each; ``torch.compile`` is the slow part). ``--time-limit-s`` stops starting new runs when
the budget is spent, and the table says which were skipped.

Only the GPU part imports torch; the rest (:func:`measured_step_ns`, :func:`predict`,
:func:`compare`, :func:`write_table`, ``--from-traces``) runs anywhere and is tested in
``tests/test_ground_truth.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: variant -> the daydream optimization spec that predicts it (None: the baseline itself)
VARIANTS: dict[str, str | None] = {
    "baseline": None,
    "amp": "amp",
    "fused-adam": "fused-adam",
    "fusion": "fusion",
    "cuda-graphs": "cuda-graphs",
}
#: optimizations predicted but not measured, per model
PREDICT_ONLY: dict[str, list[str]] = {"cnn": ["reconbn"], "transformer": []}
MODELS = ("cnn", "transformer")
TRACE_SUFFIXES = (".json", ".json.gz")


# ================================================================= non-GPU part (tested) =====
@dataclass
class Row:
    """One line of the results table. Times in ns; -1 where there is nothing."""

    model: str
    variant: str
    spec: str
    baseline_measured_ns: int = -1
    baseline_replayed_ns: int = -1
    predicted_ns: int = -1
    measured_ns: int = -1
    unprofiled_ns: int = -1
    note: str = ""

    @property
    def error_pct(self) -> float | None:
        if self.predicted_ns < 0 or self.measured_ns <= 0:
            return None
        return (self.predicted_ns - self.measured_ns) / self.measured_ns * 100.0

    @property
    def predicted_speedup(self) -> float | None:
        if self.predicted_ns <= 0 or self.baseline_replayed_ns <= 0:
            return None
        return self.baseline_replayed_ns / self.predicted_ns

    @property
    def measured_speedup(self) -> float | None:
        if self.measured_ns <= 0 or self.baseline_measured_ns <= 0:
            return None
        return self.baseline_measured_ns / self.measured_ns


def _load(path: str | Path, cache: dict | None = None):
    from daydream.formats import load_trace

    key = str(path)
    if cache is not None and key in cache:
        return cache[key]
    t = load_trace(key)
    if cache is not None:
        cache[key] = t
    return t


def _mean_steps(windows, attr: str) -> int:
    vals = [getattr(w, attr) for w in windows]
    return int(round(statistics.fmean(vals))) if vals else -1


def measured_step_ns(trace: str | Path, cache: dict | None = None) -> tuple[int, int]:
    """(measured, replayed) mean step time of a trace, ns: the mean over its ``ProfilerStep``
    windows, or the whole traced window when it has none."""
    from daydream.analysis import analyze

    rep = analyze(_load(trace, cache)).report
    if rep.steps:
        return _mean_steps(rep.steps, "measured_ns"), _mean_steps(rep.steps, "replayed_ns")
    return rep.window.measured_ns, rep.window.replayed_ns


def predict(baseline: str | Path, spec: str, cache: dict | None = None) -> tuple[int, str]:
    """(predicted mean step time in ns, note) of ``--opt spec`` on the baseline trace; -1 and the
    reason when the optimization does not apply."""
    from daydream.analysis import analyze
    from daydream.optimizations import parse_spec

    rep = analyze(_load(baseline, cache), [parse_spec(spec)]).report
    if not rep.predictions:
        return -1, "not applicable: " + "; ".join(rep.not_applicable.values())
    pred = rep.predictions[0]
    note = "; ".join(a.note for a in pred.optimizations)
    if pred.steps:
        return _mean_steps(pred.steps, "predicted_ns"), note
    return pred.window.predicted_ns, note


def find_trace(folder: Path, model: str, variant: str) -> Path | None:
    for suf in TRACE_SUFFIXES:
        p = folder / f"{model}-{variant}{suf}"
        if p.exists():
            return p
    return None


def compare(folder: str | Path, models=MODELS, variants=tuple(VARIANTS), unprofiled: dict | None = None,
            skipped: dict | None = None) -> list[Row]:
    """Rows of the results table from the traces in ``folder`` (``<model>-<variant>.json[.gz]``).

    ``unprofiled`` maps (model, variant) to a wall-clock step time (ns); ``skipped`` maps
    (model, variant) to why a run did not happen.
    """
    folder = Path(folder)
    unprofiled = unprofiled or {}
    skipped = skipped or {}
    cache: dict = {}
    rows: list[Row] = []
    for model in models:
        base = find_trace(folder, model, "baseline")
        if base is None:
            rows.append(Row(model, "baseline", "", note=skipped.get((model, "baseline"), "no baseline trace")))
            continue
        b_meas, b_rep = measured_step_ns(base, cache)
        rows.append(Row(model, "baseline", "(replay)", b_meas, b_rep, b_rep, b_meas, unprofiled.get((model, "baseline"), -1),
                        note="replay of the baseline trace"))
        for variant in variants:
            spec = VARIANTS.get(variant)
            if spec is None:
                continue
            row = Row(model, variant, spec, b_meas, b_rep, unprofiled_ns=unprofiled.get((model, variant), -1))
            row.predicted_ns, row.note = predict(base, spec, cache)
            tr = find_trace(folder, model, variant)
            if tr is not None:
                row.measured_ns = measured_step_ns(tr, cache)[0]
            else:
                row.note = (skipped.get((model, variant), "not run") + "; " + row.note).strip("; ")
            rows.append(row)
        for spec in PREDICT_ONLY.get(model, []):
            row = Row(model, spec.split(":")[0], spec, b_meas, b_rep)
            row.predicted_ns, note = predict(base, spec, cache)
            row.note = "predicted only (no stock implementation to measure); " + note
            rows.append(row)
    return rows


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}" if ns is not None and ns >= 0 else "—"


def _num(x: float | None, fmt: str) -> str:
    return format(x, fmt) if x is not None else "—"


def write_table(rows: list[Row], path: str | Path | None = None, title: str = "") -> str:
    """The results as a markdown table (also written to ``path`` when given)."""
    head = ["model", "variant", "daydream --opt", "baseline measured (ms)", "baseline replayed (ms)", "predicted (ms)",
            "measured (ms)", "error", "predicted speed-up", "measured speed-up", "unprofiled (ms)", "note"]
    lines = []
    if title:
        lines += [f"# {title}", ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        err = r.error_pct
        cells = [r.model, r.variant, f"`{r.spec}`" if r.spec and not r.spec.startswith("(") else r.spec,
                 _ms(r.baseline_measured_ns), _ms(r.baseline_replayed_ns), _ms(r.predicted_ns), _ms(r.measured_ns),
                 f"{err:+.1f} %" if err is not None else "—", _num(r.predicted_speedup, ".3f"), _num(r.measured_speedup, ".3f"),
                 _ms(r.unprofiled_ns), r.note.replace("|", "/").replace("\n", " ")[:200]]
        lines.append("| " + " | ".join(cells) + " |")
    errs = [abs(r.error_pct) for r in rows if r.error_pct is not None and r.variant != "baseline"]
    lines += ["", f"Mean absolute prediction error over {len(errs)} measured optimizations: "
              + (f"{statistics.fmean(errs):.1f} %" if errs else "—"), ""]
    text = "\n".join(lines)
    if path is not None:
        Path(path).write_text(text)
    return text


def write_json(rows: list[Row], path: str | Path, meta: dict) -> None:
    doc = {"meta": meta, "rows": [dict(asdict(r), error_pct=r.error_pct, predicted_speedup=r.predicted_speedup,
                                       measured_speedup=r.measured_speedup) for r in rows]}
    Path(path).write_text(json.dumps(doc, indent=1))


# ======================================================================== GPU part ==========
@dataclass
class Setup:
    """A model, its data and the knobs of one variant."""

    model: str
    batch: int
    warmup_steps: int = 3
    timed_steps: int = 20
    amp_dtype: str = "bf16"
    extra: dict = field(default_factory=dict)


def build_model(name: str):
    """The two models: a torchvision-free small ResNet-style CNN and a small transformer LM."""
    import torch
    from torch import nn

    if name == "cnn":
        class Block(nn.Module):
            def __init__(self, cin: int, cout: int, stride: int):
                super().__init__()
                self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
                self.b1 = nn.BatchNorm2d(cout)
                self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
                self.b2 = nn.BatchNorm2d(cout)
                self.short = None
                if stride != 1 or cin != cout:
                    self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

            def forward(self, x):
                y = torch.relu(self.b1(self.c1(x)))
                y = self.b2(self.c2(y))
                return torch.relu(y + (x if self.short is None else self.short(x)))

        class SmallResNet(nn.Module):
            def __init__(self, classes: int = 100):
                super().__init__()
                self.stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
                self.layers = nn.Sequential(Block(64, 64, 1), Block(64, 128, 2), Block(128, 256, 2), Block(256, 256, 1))
                self.head = nn.Linear(256, classes)

            def forward(self, x):
                x = self.layers(self.stem(x))
                return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

        return SmallResNet()

    if name == "transformer":
        class SmallLM(nn.Module):
            def __init__(self, vocab: int = 8192, d: int = 512, layers: int = 4, heads: int = 8, seq: int = 256):
                super().__init__()
                self.tok = nn.Embedding(vocab, d)
                self.pos = nn.Parameter(torch.zeros(1, seq, d))
                layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True, norm_first=True)
                self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
                self.norm = nn.LayerNorm(d)
                self.head = nn.Linear(d, vocab)

            def forward(self, x):
                h = self.enc(self.tok(x) + self.pos[:, : x.shape[1]])
                return self.head(self.norm(h))

        return SmallLM()
    raise ValueError(f"unknown model {name!r}")


def make_batch(name: str, batch: int, device):
    import torch

    g = torch.Generator(device="cpu").manual_seed(0)
    if name == "cnn":
        x = torch.randn(batch, 3, 32, 32, generator=g)
        y = torch.randint(0, 100, (batch,), generator=g)
    else:
        x = torch.randint(0, 8192, (batch, 256), generator=g)
        y = torch.randint(0, 8192, (batch, 256), generator=g)
    return x.to(device), y.to(device)


def loss_fn(name: str, out, y):
    import torch.nn.functional as F

    if name == "cnn":
        return F.cross_entropy(out, y)
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def make_step(setup: Setup, variant: str) -> Callable[[], None]:
    """A zero-argument training step for ``variant`` (all one-time work, compilation and graph
    capture included, done before it is returned)."""
    import torch

    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = build_model(setup.model).to(dev).train()
    x, y = make_batch(setup.model, setup.batch, dev)
    name = setup.model

    if variant == "cuda-graphs":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False, capturable=True)
        sx, sy = x.clone(), y.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # warm up on a side stream before capture (CUDA graphs docs)
                opt.zero_grad(set_to_none=True)
                loss_fn(name, model(sx), sy).backward()
                opt.step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(graph):
            loss = loss_fn(name, model(sx), sy)
            loss.backward()
            opt.step()

        def step():
            sx.copy_(x)
            sy.copy_(y)
            graph.replay()

        return step

    opt = torch.optim.Adam(model.parameters(), lr=1e-3, **({"fused": True} if variant == "fused-adam" else {"foreach": False}))
    fwd = model
    opt_step = opt.step
    if variant == "fusion":
        fwd = torch.compile(model)

        @torch.compile
        def opt_step():  # the compiled-optimizer recipe: compile a function that calls step()
            opt.step()
    scaler = None
    dtype = None
    if variant == "amp":
        dtype = torch.bfloat16 if setup.amp_dtype == "bf16" and torch.cuda.is_bf16_supported() else torch.float16
        if dtype == torch.float16:
            scaler = (torch.amp.GradScaler("cuda") if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler")
                      else torch.cuda.amp.GradScaler())

    def step():
        opt.zero_grad(set_to_none=True)
        if dtype is not None:
            with torch.autocast(device_type="cuda", dtype=dtype):
                loss = loss_fn(name, fwd(x), y)
        else:
            loss = loss_fn(name, fwd(x), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt_step()

    return step


def run_variant(setup: Setup, variant: str, out: Path) -> int:
    """Run one variant: warm up, record a Kineto trace of 5 steps (3 active), then time
    ``timed_steps`` unprofiled steps. Returns the unprofiled mean step time (ns)."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    step = make_step(setup, variant)
    for _ in range(setup.warmup_steps):
        step()
    torch.cuda.synchronize()
    path = out / f"{setup.model}-{variant}.json"

    def save(prof):
        prof.export_chrome_trace(str(path))

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], schedule=schedule(wait=1, warmup=1, active=3),
                 on_trace_ready=save) as prof:
        for _ in range(5):
            step()
            prof.step()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(setup.timed_steps):
        step()
    torch.cuda.synchronize()
    return int((time.perf_counter() - t) / setup.timed_steps * 1e9)


def run_gpu(out: Path, models, variants, time_limit_s: float, amp_dtype: str) -> tuple[dict, dict, dict]:
    """Run every (model, variant); returns (unprofiled ns, skipped reasons, meta)."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("run.py: no CUDA device (use --from-traces DIR to predict from existing traces)")
    torch.backends.cudnn.benchmark = True
    batches = {"cnn": 128, "transformer": 16}
    start = time.monotonic()
    unprofiled: dict = {}
    skipped: dict = {}
    for model in models:
        for variant in ["baseline", *[v for v in variants if v != "baseline"]]:
            if time.monotonic() - start > time_limit_s:
                skipped[(model, variant)] = f"skipped: the {time_limit_s:.0f} s time limit was reached"
                continue
            t0 = time.monotonic()
            try:
                unprofiled[(model, variant)] = run_variant(Setup(model, batches[model], amp_dtype=amp_dtype), variant, out)
            except Exception as e:  # one broken variant (e.g. no compiler toolchain) must not stop the rest
                skipped[(model, variant)] = f"failed: {type(e).__name__}: {str(e)[:120]}"
            finally:
                torch.cuda.empty_cache()
            print(f"{model:<12} {variant:<12} {time.monotonic() - t0:6.1f} s", flush=True)
    meta = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
            "amp_dtype": amp_dtype, "seconds": round(time.monotonic() - start, 1)}
    return unprofiled, skipped, meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="ground_truth_out", help="folder for traces and results (default ground_truth_out)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--variants", default=",".join(v for v in VARIANTS if v != "baseline"))
    ap.add_argument("--from-traces", metavar="DIR", help="no GPU: compare the <model>-<variant>.json traces already in DIR")
    ap.add_argument("--time-limit-s", type=float, default=420.0, help="stop starting new runs after this many seconds")
    ap.add_argument("--amp-dtype", choices=("bf16", "fp16"), default="bf16")
    args = ap.parse_args(argv)
    models = [m for m in args.models.split(",") if m]
    variants = [v for v in args.variants.split(",") if v]
    bad = [v for v in variants if v not in VARIANTS] + [m for m in models if m not in MODELS]
    if bad:
        ap.error(f"unknown model or variant: {', '.join(bad)}")
    unprofiled: dict = {}
    skipped: dict = {}
    if args.from_traces:
        out = Path(args.from_traces)
        meta = {"from_traces": str(out)}
    else:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        unprofiled, skipped, meta = run_gpu(out, models, variants, args.time_limit_s, args.amp_dtype)
    rows = compare(out, models, ["baseline", *variants], unprofiled, skipped)
    title = "daydream ground truth" + (f": {meta['gpu']}, torch {meta['torch']}" if "gpu" in meta else "")
    text = write_table(rows, out / "results.md", title)
    write_json(rows, out / "results.json", meta)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
