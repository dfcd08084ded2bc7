"""Whole jobs: one trace per rank, read together, matched, aligned and replayed coupled.

    from daydream.job import analyze_job
    job = analyze_job(["rank0.json.gz", "rank1.json.gz"])
    print(job.report.straggler)

Modules: :mod:`.load` (which file is which rank, read in parallel), :mod:`.match` (collectives
matched across ranks, clocks aligned, wait/transfer split), :mod:`.couple` (the coupled replay),
:mod:`.report` (the job report, text and JSON). ``docs/jobs.md`` describes the model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .couple import Coupled, couple
from .load import RankTrace, expand_inputs, load_ranks
from .match import Matching, check_world, match
from .report import JobReport, build_job_report, job_report_json, render_job_text

__all__ = ["Coupled", "Job", "JobReport", "Matching", "RankTrace", "analyze_job", "couple", "expand_inputs",
           "job_report_json", "load_ranks", "match", "render_job_text"]


@dataclass
class Job:
    """A job's analysis: its ranks, the matching, the coupled replay and the report."""

    ranks: list[RankTrace]
    matching: Matching
    coupled: Coupled
    report: JobReport


def analyze_job(paths: list[str], *, strict: bool = False, workers: int = 1, mapper: Callable | None = None) -> Job:
    """Read one trace per rank (files or folders), check they are one job, match and split the
    collectives, replay the ranks coupled, and report.

    Raises:
        UsageError: not one job (world size, ranks, collectives), or a missing file.
        TraceFormatError: a file cannot be read.
        DaydreamError: the coupled replay does not settle.
    """
    ranks = load_ranks(expand_inputs(paths), strict=strict, workers=workers, mapper=mapper)
    world = check_world(ranks)
    m = match(ranks)
    c = couple([r.graph for r in ranks], m)
    counts = {f"rank number from the {src}": sum(r.rank_source == src for r in ranks)
              for src in ("file name", "order") if any(r.rank_source == src for r in ranks)}
    return Job(ranks, m, c, build_job_report(ranks, m, c, world, counts))
