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

from ..errors import NotApplicable, UsageError
from .couple import Coupled, couple
from .load import RankTrace, expand_inputs, load_ranks
from .match import Matching, check_world, match
from .reporting import JobReport, build_job_report, job_report_json
from ..render.job_text import render_job_text
from .whatif import STRAGGLER, parse_job_specs, predict

__all__ = ["Coupled", "Job", "JobReport", "Matching", "RankTrace", "analyze_job", "couple", "expand_inputs",
           "job_report_json", "load_ranks", "match", "render_job_text"]


@dataclass
class Job:
    """A job's analysis: its ranks, the matching, the coupled replay and the report."""

    ranks: list[RankTrace]
    matching: Matching
    coupled: Coupled
    report: JobReport


def analyze_job(paths: list[str], *, opts: list[str] = (), only: list[int] | None = None, strict: bool = False,
                workers: int = 1, mapper: Callable | None = None) -> Job:
    """Read one trace per rank (files or folders), check they are one job, match and split the
    collectives, replay the ranks coupled, and report.

    ``opts``: ``--opt`` specs (composed in order, one prediction) applied to the ranks ``only``
    (default all), including ``straggler:rank=R`` (:mod:`.whatif`).

    Raises:
        UsageError: not one job (world size, ranks, collectives), or a missing file.
        TraceFormatError: a file cannot be read.
        DaydreamError: the coupled replay does not settle.
    """
    if only is not None and not opts:
        raise UsageError("--ranks selects the ranks an --opt applies to: give --opt NAME too")
    if only is not None and all(o.partition(":")[0].strip() == STRAGGLER for o in opts):
        raise UsageError("--ranks does not apply to straggler:rank=R, which names its rank; --ranks selects the ranks "
                         "of the other optimizations")
    if opts:  # every --opt checked before the ranks are read (a misspelt one was said after); ranks in range below
        parse_job_specs(list(opts), None)
    ranks = load_ranks(expand_inputs(paths), strict=strict, workers=workers, mapper=mapper)
    world = check_world(ranks)
    m = match(ranks)
    c = couple([r.graph for r in ranks], m)
    counts = {f"rank number from the {src}": sum(r.rank_source == src for r in ranks)
              for src in ("file name", "order") if any(r.rank_source == src for r in ranks)}
    report = build_job_report(ranks, m, c, world, counts)
    if only is not None and not set(only) <= set(range(world)):
        raise UsageError(f"--ranks {','.join(map(str, only))}: the job has ranks 0..{world - 1}")
    if opts:
        parsed = parse_job_specs(list(opts), world)
        try:
            report.predictions.append(predict(ranks, m, c, parsed, only))
        except NotApplicable as e:
            report.not_applicable[" + ".join(opts)] = str(e)
    return Job(ranks, m, c, report)
