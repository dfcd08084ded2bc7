"""A pipeline-parallel job for the job emulator: one program per stage issuing the schedule of
:func:`daydream.optimizations.pipeline_schedule.stage_order`, so that
``tests/test_pipeline_parallel.py`` can check the schedule model against the emulator's run.

Each stage is one CPU thread launching, back to back, one kernel per item on one stream: a
forward (``pp_fwd_<i>``) or backward (``pp_bwd_<i>``) kernel of the stage's time, or an NCCL
send/recv kernel (:data:`P2P`) in the process group of its link (``pp_link_<l>``, 2 ranks: the
job emulator matches it with the other stage's k-th exchange on that link, as NCCL does), whose
duration is the link's transfer.
"""

from __future__ import annotations

from ..optimizations.pipeline_schedule import FWD, stage_order
from ..optimizations.pipeline_schedule import P2P as _P2P
from .emulator import Launch, Program, Thread

#: an NCCL point-to-point kernel (``ncclDevKernel_SendRecv`` in PyTorch >= 2.0 traces)
P2P = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
STREAM = 7


def link_group(link: int) -> str:
    return f"pp_link_{link}"


def pipeline_job(fwd_ns, bwd_ns, p2p_ns, M: int, schedule: str, *, call_ns: int = 0, launch_latency_ns: int = 0,
                 gpu_gap_ns: int = 0, p2p_bytes: int = 0) -> list[Program]:
    """The stages' programs (rank = stage); arguments as
    :func:`~daydream.optimizations.pipeline_schedule.run_schedule` (``p2p_bytes``: the exchanged
    message's size, written into the kernels' args as ``In msg nelems`` of int8)."""
    S = len(fwd_ns)
    progs = []
    for s in range(S):
        ops = []
        for kind, x in stage_order(S, M, schedule, s):
            if kind == _P2P:
                comm = (("Process Group Name", link_group(x)), ("Group size", 2), ("Collective name", "send"),
                        ("In msg nelems", int(p2p_bytes)), ("Out msg nelems", int(p2p_bytes)), ("dtype", "Char"))
                ops.append(Launch(STREAM, P2P, int(p2p_ns[x]), call_ns, comm=comm))
            else:
                d = fwd_ns[s] if kind == FWD else bwd_ns[s]
                ops.append(Launch(STREAM, f"pp_{'fwd' if kind == FWD else 'bwd'}_{x}", int(d), call_ns))
        progs.append(Program([Thread(ops, pid=100 + s, tid=100 + s)], launch_latency_ns=launch_latency_ns,
                             gpu_gap_ns=gpu_gap_ns, launch_queue_depth=0))
    return progs
