"""docs/accuracy.md section: the interleaved pipeline schedule (``pp:schedule=interleaved,chunks=V``;
issue 35). Three measurements, every number computed by the run:

1. The schedule model against the job emulator running the same ranks' programs
   (:func:`daydream.testing.pipeline_programs.pipeline_job`) on seeded random jobs (2-4 ranks, 2-3
   chunks, ``M`` a multiple of ``S``, host call costs, ``L``, ``G``): items whose start and end
   differ, the largest difference, and the bubble per rank.
2. Equal chunks without transfers or host costs: each rank's idle fraction against
   ``(S-1)/(V M + S - 1)`` (Narayanan et al. SC 2021 §2.2.2) and 1F1B's ``(S-1)/(M + S - 1)``.
3. The DLRM rank 0 trace (``param_dlrm``): ``pp`` at 2 stages, 8 micro-batches, 1F1B against
   interleaved with 2 chunks (its 5 units make at most 5 chunks), as the what-if reports it.

Hooked into ``scripts/accuracy.py`` (``SECTIONS``)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from daydream.optimizations.pipeline_schedule import ideal_bubble_fraction, run_schedule
from daydream.testing.job_emulator import emulate_job
from daydream.testing.pipeline_programs import pipeline_job

SEED, JOBS = 35, 30


def _random_jobs(rng: np.random.Generator, n: int):
    for _ in range(n):  # jobs: tens
        S, V = int(rng.integers(2, 5)), int(rng.integers(2, 4))
        M = S * int(rng.integers(1, 4))
        L = int(rng.integers(0, 20_001))
        kw = {"call_ns": int(rng.integers(0, 30_001)), "launch_latency_ns": L, "gpu_gap_ns": int(rng.integers(0, L + 1)),
              "chunks": V}
        yield (rng.integers(1_000, 200_001, S * V).tolist(), rng.integers(1_000, 200_001, S * V).tolist(),
               rng.integers(0, 50_001, S).tolist(), M, kw)


def _model_vs_emulator() -> list[str]:
    rng = np.random.default_rng(SEED)
    items = differ = worst = bub_differ = ranks = 0
    for fwd, bwd, p2p, M, kw in _random_jobs(rng, JOBS):
        model = run_schedule(fwd, bwd, p2p, M, "interleaved", **kw)
        job = emulate_job(pipeline_job(fwd, bwd, p2p, M, "interleaved", **kw))
        t0 = job.runs[0].program.t0_ns
        for s, run in enumerate(job.runs):
            st = np.array([t.start_ns - t0 for t in run.tasks], np.int64)
            en = np.array([t.end_ns - t0 for t in run.tasks], np.int64)
            d = np.maximum(np.abs(st - model.start_ns[s]), np.abs(en - model.end_ns[s]))
            items += len(d)
            differ += int((d > 0).sum())
            worst = max(worst, int(d.max(initial=0)))
            waits = sum(a - run.tasks[i].start_ns for a, i in zip(job.rank_arrivals(s), job.collective_tasks(s)))
            bub_differ += int(waits != model.bubble_ns[s])
            ranks += 1
    return [(f"- Model vs the job emulator ({JOBS} seeded jobs, seed {SEED}; 2-4 ranks, 2-3 chunks, M = S x 1..3): "
            f"{differ:,} of {items:,} items differ in start or end (largest {worst:,} ns); the bubble differs on "
            f"{bub_differ} of {ranks} ranks.")]


def _equal_chunks() -> list[str]:
    rows = ["", "| S | V | M | idle fraction (each rank) | (S-1)/(VM+S-1) | 1F1B, same work |", "|---|---|---|---|---|---|"]
    f, b = 3_000, 7_000
    for S, V, M in ((2, 2, 4), (4, 2, 8), (4, 3, 8), (8, 2, 16), (8, 4, 16)):
        r = run_schedule([f] * (S * V), [b] * (S * V), [0] * S, M, "interleaved", chunks=V)
        one = run_schedule([V * f] * S, [V * b] * S, [0] * (S - 1), M, "1f1b")
        fr = sorted({round(float(x) / r.step_ns, 6) for x in r.idle_ns})
        rows.append(f"| {S} | {V} | {M} | {'/'.join(f'{x:.2%}' for x in fr)} | {ideal_bubble_fraction(S, M, V):.2%} | "
                    f"{one.bubble_fraction:.2%} |")
    return rows


def _dlrm(traces: Path) -> list[str]:
    path = traces / "param_dlrm" / "dlrm_8rank_worker0.pt.trace.json.gz"
    if not path.exists():
        return ["", "- DLRM rank 0: trace not present."]
    from daydream.analysis import analyze
    from daydream.formats import load_trace
    t = load_trace(str(path))
    out = ["", "DLRM rank 0 (`param_dlrm`; `act_bytes=1048576`, 2 stages, 8 micro-batches):", ""]
    pipes = []
    for spec in ("pp:stages=2,microbatches=8,act_bytes=1048576",
                 "pp:stages=2,microbatches=8,act_bytes=1048576,schedule=interleaved,chunks=2"):
        r = analyze(t, [spec]).report
        if r.not_applicable:
            out.append(f"- `{spec}`: not applicable: {next(iter(r.not_applicable.values()))}")
            continue
        p = r.predictions[0]
        m = re.search(r"the first step's pipeline ([\d.,]+) ms of GPU time.*?idle ([\d.]+%) of the step", p.optimizations[0].note if p.optimizations else "")
        x = re.search(r"(\d+) exchanges a step", p.optimizations[0].note if p.optimizations else "")
        pipe = f"pipeline {m.group(1)} ms, idle {m.group(2)} per rank" if m else "pipeline: not in the note"
        if m:
            pipes.append(float(m.group(1).replace(",", "")))
        pipe += f", {x.group(1)} exchanges a step" if x else ""
        out.append(f"- `{spec}`: {pipe}; window {p.window.replayed_ns / 1e6:,.3f} -> {p.window.predicted_ns / 1e6:,.3f} ms")
    if len(pipes) == 2:
        verdict = "outweighs" if pipes[1] > pipes[0] else "does not outweigh"
        out += ["", f"On DLRM the interleaved pipeline is {pipes[1] / pipes[0]:.2f}x the 1F1B one: the extra traffic {verdict}",
                "the smaller bubble there."]
    return out


def section(traces: Path, kernels: Path) -> list[str]:
    out = ["## The interleaved pipeline schedule (`pp:schedule=interleaved,chunks=V`)",
           "",
           "Megatron's interleaved 1F1B (Narayanan et al., SC 2021, §2.2.2): each rank holds `V` model chunks",
           "(`scripts/accuracy_pipeline_interleaved.py`; the model: docs/distributed.md, \"Pipeline parallel\").",
           ""]
    out += _model_vs_emulator()
    out += _equal_chunks()
    out += _dlrm(traces)
    out += ["", "Interleaving sends each micro-batch's activation and gradient across every chunk cut (`S V - 1` cuts",
            "instead of `S - 1`; the paper's caveat, §2.2.2), so it gains only where an exchange is cheap beside a chunk's",
            "compute; and a rank here takes part in a point's exchanges with its two neighbours one after the other, where",
            "Megatron posts them as one NCCL group (an upper bound on that cost)."]
    return out
