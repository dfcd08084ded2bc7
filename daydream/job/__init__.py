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

from ..errors import DaydreamError, NotApplicable, UsageError
from ..optimizations import load_all
from ..render.chrome_trace import timeline_doc, write_job_timeline
from ..render.job_text import render_job_text
from ..simulate.critical_path import critical_path
from .couple import Coupled, couple
from .load import RankTrace, expand_inputs, load_ranks
from .match import Matching, check_world, match
from .reporting import JobReport, build_job_report, job_report_json
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
    predicted: Coupled | None = None  #: the coupled replay of the one --opt prediction (none under --opt all)

    def write_timeline(self, path: str) -> None:
        """One Chrome-trace JSON of the job (``--timeline``; the job analyzed with ``timeline=True``): per rank, the single-trace timeline
        writer's processes (the prediction beside the coupled baseline replay, or the baseline
        alone; each with its critical path), one set of pids per rank, on the lowest rank's clock.

        Raises:
            UsageError: the file cannot be written.
        """
        docs = []
        for i, r in enumerate(self.ranks):
            base = (self.coupled.graphs[i], self.coupled.timelines[i])
            if self.predicted is not None:
                pred = (self.predicted.graphs[i], self.predicted.timelines[i])
                doc = timeline_doc(pred, base, critical={0: critical_path(*pred)[0], 1: critical_path(*base)[0]})
            else:
                doc = timeline_doc(base, critical={0: critical_path(*base)[0]})
            for e in doc["traceEvents"]:  # the coupling's pins lane (lane key pid -1): the last peers' arrivals
                if e.get("ph") == "M" and e["name"] == "process_name" and e["pid"] == -1:
                    e["args"] = {"name": e["args"]["name"].replace("process -1", "last peer arrivals (job coupling)")}
            docs.append((int(r.rank), doc, -int(self.matching.offset_ns[i])))
        try:
            write_job_timeline(path, docs)
        except OSError as e:
            raise UsageError(f"cannot write {path}: {e.strerror or e}") from None


def analyze_job(paths: list[str], *, opts: list[str] = (), only: list[int] | None = None, strict: bool = False,
                workers: int = 1, mapper: Callable | None = None, rank_all: bool = False, timeline: bool = False) -> Job:
    """Read one trace per rank (files or folders), check they are one job, match and split the
    collectives, replay the ranks coupled, and report.

    ``opts``: ``--opt`` specs (composed in order, one prediction) applied to the ranks ``only``
    (default all), including ``straggler:rank=R`` (:mod:`.whatif`). ``rank_all`` (``--opt all``):
    instead, every optimization that ``--opt all`` ranks on one trace, alone with its defaults, on
    the ranks ``only``, each replayed coupled; ``report.predictions`` best first (``report.ranked``),
    the others in ``report.not_applicable`` with their reason. ``timeline``: keep each rank's whole
    table, for :meth:`Job.write_timeline`.

    Raises:
        UsageError: not one job (world size, ranks, collectives), or a missing file.
        TraceFormatError: a file cannot be read.
        DaydreamError: the coupled replay does not settle.
    """
    if only is not None and not opts and not rank_all:
        raise UsageError("--ranks selects the ranks an --opt applies to: give --opt NAME too")
    if rank_all and opts:
        raise UsageError("--opt all ranks each optimization alone; it cannot be combined with other --opt")
    if only is not None and all(o.partition(":")[0].strip() == STRAGGLER for o in opts):
        raise UsageError("--ranks does not apply to straggler:rank=R, which names its rank; --ranks selects the ranks "
                         "of the other optimizations")
    if opts:  # every --opt checked before the ranks are read (a misspelt one was said after); ranks in range below
        parse_job_specs(list(opts), None)
    ranks = load_ranks(expand_inputs(paths), strict=strict, workers=workers, mapper=mapper, full_tables=timeline)
    world = check_world(ranks)
    m = match(ranks)
    c = couple([r.graph for r in ranks], m)
    counts = {f"rank number from the {src}": sum(r.rank_source == src for r in ranks)
              for src in ("file name", "order") if any(r.rank_source == src for r in ranks)}
    report = build_job_report(ranks, m, c, world, counts)
    if only is not None and not set(only) <= set(range(world)):
        raise UsageError(f"--ranks {','.join(map(str, only))}: the job has ranks 0..{world - 1}")
    kept: list[Coupled] = []
    if opts:
        parsed = parse_job_specs(list(opts), world)
        try:
            report.predictions.append(predict(ranks, m, c, parsed, only, keep=kept))
        except NotApplicable as e:
            report.not_applicable[" + ".join(opts)] = str(e)
    if rank_all:
        _rank_all(ranks, m, c, only, report)
    return Job(ranks, m, c, report, kept[0] if kept else None)


def _rank_all(ranks: list[RankTrace], m: Matching, c: Coupled, only: list[int] | None, report: JobReport) -> None:
    """``--opt all`` on a job: each optimization that ``--opt all`` ranks on one trace (not the
    generic what-ifs), alone with its defaults, replayed coupled; the predictions best first (job
    speed-up, then name), the others in ``not_applicable`` (a failure on damaged input, too, as
    ``failed: ...``: one does not end the ranking)."""
    for name, opt in load_all().items():
        if opt.what_if:
            continue
        try:
            report.predictions.append(predict(ranks, m, c, [(opt, opt.resolve({}))], only))
        except NotApplicable as e:
            report.not_applicable[name] = str(e)
        except DaydreamError as e:
            report.not_applicable[name] = f"failed: {e}"
    report.predictions.sort(key=lambda p: (-p.speedup, p.name))
    report.ranked = True
