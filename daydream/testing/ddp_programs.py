"""Collectives in emulated programs: the program a data-parallel what-if describes.

An all-reduce in the emulator is an NCCL-named kernel on a communication stream, launched after
a cross-stream wait on the kernel that produced its bucket's last gradient, exactly what DDP's
autograd hook issues (``cudaEventRecord`` on the compute stream, ``cudaStreamWaitEvent`` on the
communication stream, the NCCL launch), each call taking no CPU time; its duration comes from
:func:`daydream.costmodel.comm.collective_ns`, the model the prediction uses. The optimizer's wait is
``cudaEventRecord`` on the communication stream and ``cudaStreamWaitEvent`` on the compute stream
before the waiting kernel's launch. :func:`with_allreduces` writes that program; the property in
``tests/test_comm_emulated.py`` checks that :func:`daydream.optimizations.comm_common.insert_allreduces`
predicts its run.
"""

from __future__ import annotations

import dataclasses

from .emulator import EventRecord, Launch, Program, StreamWaitEvent

#: stream id of the emulated communication stream
COMM_STREAM = 9999


def with_allreduces(prog: Program, thread: int, anchors: list[int], durs: list[int], waiter: int | None,
                    name: str = "ncclKernel_AllReduce_RING_LL_Sum_float") -> tuple[Program, dict[int, int], list[int]]:
    """``prog`` with one all-reduce after each anchor op (a :class:`Launch` index of ``thread``,
    ascending), of ``durs[k]`` ns, and, when ``waiter`` (a Launch index) is given, its kernel
    waiting for the last all-reduce.

    Returns:
        (changed program, old op index -> new op index, new op indices of the all-reduce launches).
    """
    th = prog.threads[thread]
    ops, where, ar = [], {}, []
    for i, op in enumerate(th.ops):
        if waiter is not None and i == waiter:
            ops += [EventRecord(("opt", i), COMM_STREAM, 0, device=op.device), StreamWaitEvent(op.stream, ("opt", i), 0, device=op.device)]
        where[i] = len(ops)
        ops.append(op)
        for k in [k for k, a in enumerate(anchors) if a == i]:
            assert isinstance(op, Launch)
            ops += [EventRecord(("ar", k), op.stream, 0, device=op.device), StreamWaitEvent(COMM_STREAM, ("ar", k), 0, device=op.device)]
            ar.append(len(ops))
            ops.append(Launch(COMM_STREAM, name, int(durs[k]), 0, device=op.device))
    threads = list(prog.threads)
    threads[thread] = dataclasses.replace(th, ops=tuple(ops))
    return dataclasses.replace(prog, threads=tuple(threads)), where, ar


def with_prefetched(prog: Program, thread: int, anchors: list[int], consumers: list[int], durs: list[int],
                    name: str = "ncclKernel_AllGather_RING_LL_Sum_float") -> tuple[Program, dict[int, int], list[int]]:
    """``prog`` with the prefetched all-gathers FSDP issues: collective k launched on
    :data:`COMM_STREAM` right after the anchor op ``anchors[k]`` (a :class:`Launch` index of
    ``thread``), no input wait, and ``EventRecord`` (communication stream) / ``StreamWaitEvent``
    (the consumer's stream) right before the consumer op ``consumers[k]`` (-1: none waits), each
    call taking no CPU time. The program :func:`daydream.optimizations.sharding.insert_prefetched`
    predicts.

    Returns:
        (changed program, old op index -> new op index, new op indices of the collective launches).
    """
    th = prog.threads[thread]
    ops, where, ag = [], {}, []
    for i, op in enumerate(th.ops):
        for k in [k for k, c in enumerate(consumers) if c == i]:
            ops += [EventRecord(("ag", k), COMM_STREAM, 0, device=op.device), StreamWaitEvent(op.stream, ("ag", k), 0, device=op.device)]
        where[i] = len(ops)
        ops.append(op)
        for k in [k for k, a in enumerate(anchors) if a == i]:
            assert isinstance(op, Launch)
            ag.append(len(ops))
            ops.append(Launch(COMM_STREAM, name, int(durs[k]), 0, device=op.device))
    threads = list(prog.threads)
    threads[thread] = dataclasses.replace(th, ops=tuple(ops))
    return dataclasses.replace(prog, threads=tuple(threads)), where, ag


def with_inline(prog: Program, thread: int, anchors: list[int], durs: list[int], new_durs: dict[int, int] | None = None,
                name: str = "ncclKernel_AllReduce_RING_LL_Sum_float") -> tuple[Program, dict[int, int], list[int]]:
    """``prog`` with the synchronous collectives Megatron's tensor parallelism issues: collective k
    launched on the anchor's own stream right after the anchor op ``anchors[k]`` (a
    :class:`Launch` index of ``thread``), taking no CPU time, so the stream's next kernel waits
    for it; and the kernels of ``new_durs`` (Launch index -> ns) given new durations (the split
    GEMMs). The program :func:`daydream.optimizations.tensor_parallel.insert_after_kernels`
    (after :func:`daydream.transform.set_duration`) predicts.

    Returns:
        (changed program, old op index -> new op index, new op indices of the collective launches).
    """
    th = prog.threads[thread]
    new_durs = new_durs or {}
    ops, where, ar = [], {}, []
    for i, op in enumerate(th.ops):
        where[i] = len(ops)
        ops.append(dataclasses.replace(op, kernel_dur_ns=int(new_durs[i])) if i in new_durs else op)
        for k in [k for k, a in enumerate(anchors) if a == i]:
            assert isinstance(op, Launch)
            ar.append(len(ops))
            ops.append(Launch(op.stream, name, int(durs[k]), 0, device=op.device))
    threads = list(prog.threads)
    threads[thread] = dataclasses.replace(th, ops=tuple(ops))
    return dataclasses.replace(prog, threads=tuple(threads)), where, ar
