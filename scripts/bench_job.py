"""Wall time and peak memory of a job analysis (docs/jobs.md, "Scale").

    python scripts/bench_job.py DIR [--workers N] [--scheduler ADDRESS | --local-cluster N]

Prints one JSON line: ranks, wall_s (read + match + coupled replay + report), rounds, and the
coordinating process's peak RSS (``getrusage(RUSAGE_SELF).ru_maxrss``; the workers' own peak, the
largest child, apart).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--scheduler")
    ap.add_argument("--local-cluster", type=int, default=0, help="start a Dask LocalCluster of N worker processes")
    a = ap.parse_args(argv)
    from daydream.job import analyze_job, job_report_json

    t0 = time.perf_counter()
    cluster = None
    if a.local_cluster:
        from distributed import LocalCluster

        cluster = LocalCluster(n_workers=a.local_cluster, threads_per_worker=1, processes=True, dashboard_address=None)
        a.scheduler = cluster.scheduler_address
    t1 = time.perf_counter()
    if a.scheduler:
        from daydream.job.scale import dask_mapper

        with dask_mapper(a.scheduler) as mapper:
            job = analyze_job([a.folder], mapper=mapper)
    else:
        job = analyze_job([a.folder], workers=a.workers)
    wall = time.perf_counter() - t1
    body = job_report_json(job.report)
    if cluster is not None:
        cluster.close()
    print(json.dumps({
        "ranks": job.report.ranks, "collectives": job.report.collectives, "rounds": job.report.rounds,
        "workers": a.local_cluster or a.workers, "dask": bool(a.scheduler), "wall_s": round(wall, 2),
        "cluster_start_s": round(t1 - t0, 2), "coordinator_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "largest_child_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1),
        "report_bytes": len(body), "straggler": job.report.straggler.rank if job.report.straggler else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
