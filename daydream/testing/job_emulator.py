"""A multi-rank job emulator: one :class:`~daydream.testing.emulator.Program` per rank, whose
collectives synchronise the ranks as NCCL kernels do.

A collective is a :class:`~daydream.testing.emulator.Launch` whose kernel name is an NCCL kernel
(:data:`ALL_REDUCE`, ...) and whose ``kernel_dur_ns`` is its **transfer**. The k-th collective
launched by each rank (in its collective thread's program order; NCCL requires every rank of a
communicator to issue the same collectives in the same order) is one collective of the job; a collective whose ``Launch.comm`` names a ``Process Group Name`` is
matched the same way among the ranks that launch collectives of that group only (a pipeline's
send/recv between two stages). On
the GPU a collective kernel starts by the single-rank rules (its stream, its launch), then spins
until the last participant's kernel has started, then transfers with the others until the last
byte (the collective ends on every participant together)::

    end(k on r) = max over ranks q of start(k on q) + max over ranks q of transfer(k on q)

so its recorded duration is its wait plus the collective's transfer, as in a real NCCL trace. The ranks share
one clock (``Program.t0_ns``); skew comes from their own host work.

The job is run by the single-rank :func:`~daydream.testing.emulator.emulate` (unchanged) in
rounds: each round sets every collective's duration to ``wait + transfer`` from the previous
round's starts (first round: no wait) and runs every rank. A collective's start depends only on
collectives launched before it, so the rounds settle after at most (collectives + 1) rounds; a
job that does not settle (a deadlock) raises ValueError.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass

from .emulator import Launch, Program, Run, emulate, to_kineto

ALL_REDUCE = "ncclKernel_AllReduce_RING_LL_Sum_float"
ALL_TO_ALL = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"
_NCCL = re.compile(r"^nccl(Dev)?Kernel_")


def is_collective(op) -> bool:
    return isinstance(op, Launch) and _NCCL.match(op.kernel_name) is not None


def collective_ops(program: Program) -> list[tuple[int, int]]:
    """(thread index, op index) of the program's collectives, in order.

    Raises:
        ValueError: collectives on more than one thread (their order would be the launch order
            across threads, which the rounds could change).
    """
    out = [(ti, k) for ti, th in enumerate(program.threads) for k, op in enumerate(th.ops) if is_collective(op)]
    if len({ti for ti, _ in out}) > 1:
        raise ValueError("collectives must be launched from one thread per rank")
    return out


def group_of(op) -> str:
    """A collective's communicator: its ``Process Group Name`` (``Launch.comm``), "" (the world)
    when it names none."""
    return str(dict(op.comm).get("Process Group Name", ""))


@dataclass(frozen=True)
class JobRun:
    """The runs of every rank (rank = index), the collectives' places in each program, the
    last arrival of each collective of the job (ns; ordered by group name, then order in the
    group) and the rounds it took; ``ids[r][j]``: the job collective (index into ``arrive_ns``)
    of rank r's j-th collective."""

    runs: tuple[Run, ...]
    places: tuple[tuple[tuple[int, int], ...], ...]
    arrive_ns: tuple[int, ...]
    rounds: int
    ids: tuple[tuple[int, ...], ...] = ()

    def collective_tasks(self, rank: int) -> list[int]:
        """Indices (into ``runs[rank].tasks``) of the rank's collectives, in order."""
        run = self.runs[rank]
        by_call = {(c.thread, c.op_index): c.task for c in run.calls}
        return [by_call[p] for p in self.places[rank]]

    def rank_arrivals(self, rank: int) -> list[int]:
        """The last arrival (ns) of each of the rank's collectives, in its order."""
        return [self.arrive_ns[i] for i in self.ids[rank]]


def _with_durations(program: Program, places: list[tuple[int, int]], durs: list[int]) -> Program:
    threads = list(program.threads)
    for (ti, k), d in zip(places, durs):
        ops = list(threads[ti].ops)
        ops[k] = dataclasses.replace(ops[k], kernel_dur_ns=d)
        threads[ti] = dataclasses.replace(threads[ti], ops=tuple(ops))
    return dataclasses.replace(program, threads=tuple(threads))


def _job_ids(programs: list[Program], places) -> tuple[list[list[int]], int]:
    """Per rank, the job collective of each of its collectives: within a group (``group_of``),
    the k-th collective of each member rank is one collective (NCCL's rule per communicator)."""
    groups = [[group_of(programs[r].threads[ti].ops[k]) for ti, k in places[r]] for r in range(len(programs))]
    names = sorted({g for gs in groups for g in gs})
    count = {g: [gs.count(g) for gs in groups if g in gs] for g in names}
    if "" in count and len(count[""]) != len(programs):
        count[""].append(0)
    for g, c in count.items():
        if len(set(c)) > 1:
            raise ValueError(f"every rank of group {g!r} must launch the same number of collectives in it, got {c}")
    base, n = {}, 0
    for g in names:
        base[g] = n
        n += count[g][0]
    ids = []
    for gs in groups:
        seen: dict[str, int] = {}
        row = []
        for g in gs:
            row.append(base[g] + seen.get(g, 0))
            seen[g] = seen.get(g, 0) + 1
        ids.append(row)
    return ids, n


def emulate_job(programs: list[Program]) -> JobRun:
    """Run a job (one program per rank, rank = index; see the module docstring). Collectives
    naming a ``Process Group Name`` (``Launch.comm``) are matched within that group's ranks
    (e.g. a send/recv pair of two pipeline stages); the others among all ranks.

    Raises:
        ValueError: the ranks of a group have different numbers of collectives in it, or the rounds
            do not settle (a deadlock).
    """
    places = [collective_ops(p) for p in programs]
    ids, K = _job_ids(programs, places)
    transfer = [[programs[r].threads[ti].ops[k].kernel_dur_ns for ti, k in places[r]] for r in range(len(programs))]
    joint = [0] * K
    for r in range(len(programs)):
        for j, i in enumerate(ids[r]):
            joint[i] = max(joint[i], transfer[r][j])
    wait = [[0] * len(p) for p in places]
    for rounds in range(1, K + 3):
        runs = [emulate(_with_durations(p, places[r], [joint[i] + w for i, w in zip(ids[r], wait[r])]))
                for r, p in enumerate(programs)]
        job = JobRun(tuple(runs), tuple(tuple(p) for p in places), (), rounds, tuple(tuple(x) for x in ids))
        starts = [[runs[r].tasks[i].start_ns for i in job.collective_tasks(r)] for r in range(len(runs))]
        arrive = [0] * K
        for r in range(len(runs)):
            for j, i in enumerate(ids[r]):
                arrive[i] = max(arrive[i], starts[r][j])
        new = [[arrive[i] - s for i, s in zip(ids[r], starts[r])] for r in range(len(runs))]
        if new == wait:
            return dataclasses.replace(job, arrive_ns=tuple(arrive))
        wait = new
    raise ValueError("the job did not settle: its collectives wait on each other in a cycle (a deadlock)")


def shift_run(run: Run, d_ns: int) -> Run:
    """``run`` as a clock ``d_ns`` ahead would record it (every time + ``d_ns``)."""
    def sh(rec, names):
        return dataclasses.replace(rec, **{n: getattr(rec, n) + d_ns for n in names})

    return dataclasses.replace(
        run, program=dataclasses.replace(run.program, t0_ns=run.program.t0_ns + d_ns),
        calls=tuple(sh(c, ("start_ns", "end_ns")) for c in run.calls),
        tasks=tuple(sh(t, ("ready_ns", "start_ns", "end_ns")) for t in run.tasks),
        ranges=tuple(sh(r, ("start_ns", "end_ns")) for r in run.ranges))


def write_job(job: JobRun, folder: str | os.PathLike, offsets_ns: list[int] | None = None, **kw) -> list[str]:
    """Write each rank's run as a Kineto trace ``rank{r}.json`` in ``folder``, its clock
    ``offsets_ns[r]`` ahead of the shared one (default 0); returns the paths (``kw`` goes to
    :func:`~daydream.testing.emulator.to_kineto`)."""
    paths = []
    for r, run in enumerate(job.runs):
        p = os.path.join(folder, f"rank{r}.json")
        to_kineto(shift_run(run, offsets_ns[r]) if offsets_ns else run, p, **kw)
        paths.append(p)
    return paths
