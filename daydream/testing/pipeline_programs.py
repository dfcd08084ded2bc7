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
from .emulator import Allocate, Launch, Program, RangeBegin, RangeEnd, Thread

#: an NCCL point-to-point kernel (``ncclDevKernel_SendRecv`` in PyTorch >= 2.0 traces)
P2P = "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"
STREAM = 7


def link_group(link: int) -> str:
    return f"pp_link_{link}"


def pipeline_job(fwd_ns, bwd_ns, p2p_ns, M: int, schedule: str, *, call_ns: int = 0, launch_latency_ns: int = 0,
                 gpu_gap_ns: int = 0, p2p_bytes: int = 0, state_bytes=None, fwd_mem=None, chunks: int = 1) -> list[Program]:
    """The stages' programs (rank = stage); arguments as
    :func:`~daydream.optimizations.pipeline_schedule.run_schedule` (``p2p_bytes``: the exchanged
    message's size, written into the kernels' args as ``In msg nelems`` of int8; interleaved with
    ``chunks = V >= 2``: ``fwd_ns``, ``bwd_ns`` and ``fwd_mem`` per model chunk ``v S + s``, a
    compute kernel named ``pp_fwd_<x>`` with ``x = v M + i``, and link ``S - 1`` the wrap).

    Memory (``state_bytes`` (S,) bytes and ``fwd_mem``: per stage, a micro-batch forward's
    allocations and frees in order, ``(signed bytes, block key)``; either given): each stage
    allocates its state before ``ProfilerStep#1`` (a range around its items), a forward allocates
    its micro-batch's blocks in order before its kernel's launch call, and a backward frees, after
    its launch call, that micro-batch's blocks still alive (its activations)."""
    V = int(chunks) if schedule == "interleaved" else 1
    S = len(fwd_ns) // V
    mem = state_bytes is not None or fwd_mem is not None
    progs = []
    for s in range(S):
        ops = []
        alive: dict = {}  # (micro-batch, key) -> bytes
        for kind, x in stage_order(S, M, schedule, s, V):
            if kind == _P2P:
                comm = (("Process Group Name", link_group(x)), ("Group size", 2), ("Collective name", "send"),
                        ("In msg nelems", int(p2p_bytes)), ("Out msg nelems", int(p2p_bytes)), ("dtype", "Char"))
                ops.append(Launch(STREAM, P2P, int(p2p_ns[x]), call_ns, comm=comm))
            else:
                c = (x // M) * S + s  # the model chunk
                d = fwd_ns[c] if kind == FWD else bwd_ns[c]
                if kind == FWD and fwd_mem is not None:
                    for b, key in fwd_mem[c]:
                        addr = _addr(s, x, key)
                        ops.append(Allocate(int(b), addr=addr))
                        alive[(x, key)] = alive.get((x, key), 0) + int(b)
                ops.append(Launch(STREAM, f"pp_{'fwd' if kind == FWD else 'bwd'}_{x}", int(d), call_ns))
                if kind != FWD and fwd_mem is not None:
                    for (mb, key), b in list(alive.items()):
                        if mb == x and b > 0:
                            ops.append(Allocate(-b, addr=_addr(s, mb, key)))
                            del alive[(mb, key)]
        if mem:
            st = int(state_bytes[s]) if state_bytes is not None else 0
            ops = ([Allocate(st, addr=_addr(s, -1, "state"))] if st else []) + [RangeBegin("ProfilerStep#1"), *ops, RangeEnd()]
        progs.append(Program([Thread(ops, pid=100 + s, tid=100 + s)], launch_latency_ns=launch_latency_ns,
                             gpu_gap_ns=gpu_gap_ns, launch_queue_depth=0))
    return progs


_ADDR: dict = {}


def _addr(stage: int, mb: int, key) -> int:
    """A distinct address per (stage, micro-batch, block)."""
    return _ADDR.setdefault((stage, mb, key), 0x7E0000000000 + 4096 * len(_ADDR))
