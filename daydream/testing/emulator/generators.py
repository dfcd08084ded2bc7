"""Program generators: :func:`programs`, the hypothesis strategy of valid random programs, and
:func:`training_step_program`, a deterministic small data-parallel training loop.
"""

from __future__ import annotations

import random

from .ops import (
    _COPY_KINDS,
    _HOST_MEMORY,
    _RANGE_CATS,
    Allocate,
    DeviceSync,
    EventRecord,
    EventSync,
    GraphLaunch,
    HostWork,
    Launch,
    Memcpy,
    MemcpyAsync,
    MemsetAsync,
    Op,
    OtherCall,
    RangeBegin,
    RangeEnd,
    StreamSync,
    StreamWaitEvent,
)
from .program import Program, Thread

_STREAMS = (7, 20, 24)
_GRAPH_STREAMS = (101, 102)  #: streams only graph kernels run on (``programs(graph_streams=True)``)
#: device ``d``'s stream ids are ``_STREAMS`` (and ``_GRAPH_STREAMS``) + ``d`` x this: every stream
#: id names one device's stream, as CUPTI's do (``CUpti_ActivityStream.streamId``: "a unique
#: stream ID"), so a trace's ``wait_on_stream`` names the event's stream across devices
_DEVICE_STREAM_STEP = 1000
_KERNELS = ("ampere_sgemm_128x64_tn", "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float> >",
            "void at::native::reduce_kernel<512, 1>", "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)")
_OTHER_CALLS = (("cudaGetDevice", 4), ("cudaStreamIsCapturing", 317), ("cudaEventQuery", 138))


_CHOICES = ("host", "host", "launch", "launch", "launch", "launch", "memcpy_async", "memcpy", "memset",
            "device_sync", "stream_sync", "record", "record", "event_sync", "wait", "wait", "other", "begin", "end")


class _ThreadDraw:
    """The ops of one drawn thread, and what later draws depend on (its recorded events, the lane
    it launched to last, the open ranges)."""

    def __init__(self, draw, st, ti: int, sync_events: bool) -> None:
        self.draw, self.st, self.ti, self.sync_events = draw, st, ti, sync_events
        self.gpu_dur = st.integers(1_000, 200_000)
        self.call = st.integers(1_000, 20_000)
        self.own = st.integers(0, 20_000)
        self.ops: list = []
        self.recorded: list = []  # events this thread recorded, in order
        self.last_lane = None
        self.last_plain = None  # the lane of its last launch other than a graph launch
        self.graph_streams = False  # draw graphs whose kernels run on a stream of their own
        self.current_device_records = False
        self.stream_step = _DEVICE_STREAM_STEP  # device d's stream ids: the ids + d x this  # records only on the device of the thread's last launch
        self.depth = 0
        self.live: list[tuple[int, int]] = []  # (bytes, device) this thread allocated and holds

    def step(self, choice: str, lane: tuple[int, int]) -> None:
        """Append the op for ``choice`` on ``lane`` (or nothing when it does not apply)."""
        getattr(self, "_" + choice)(lane)

    def _host(self, lane) -> None:
        self.ops.append(HostWork(self.draw(self.st.integers(0, 50_000))))

    def _launch(self, lane) -> None:
        d, s = lane
        draw = self.draw
        self.ops.append(Launch(s, draw(self.st.sampled_from(_KERNELS)), draw(self.gpu_dur), draw(self.call), device=d))
        self.last_lane = self.last_plain = lane

    def _graph(self, lane) -> None:
        # launched into the stream of the thread's last other launch, as the builder infers it
        # (a cudaGraphLaunch record has no stream); its kernels on that stream, or on a graph
        # stream of its own (_GRAPH_STREAMS, which nothing else uses)
        lane = self.last_plain or lane
        d, s = lane
        draw, st = self.draw, self.st
        kernels = draw(st.lists(st.tuples(st.sampled_from(_KERNELS), self.gpu_dur), min_size=1, max_size=4))
        own = self.graph_streams and self.last_plain is not None and draw(st.booleans())
        node_stream = draw(st.sampled_from(_GRAPH_STREAMS)) + self.stream_step * d if own else None
        self.ops.append(GraphLaunch(s, kernels, draw(self.call), graph_id=len(self.ops) + 1, device=d, node_stream=node_stream))
        self.last_lane = lane

    def _copy(self, cls, lane, cost) -> None:
        d, s = lane
        draw, st = self.draw, self.st
        kind = draw(st.sampled_from(_COPY_KINDS))
        self.ops.append(cls(s, kind, draw(st.integers(1, 1 << 24)), draw(self.gpu_dur), draw(cost),
                            host_memory=draw(st.sampled_from(_HOST_MEMORY)), device=d))
        self.last_lane = self.last_plain = lane

    def _memcpy_async(self, lane) -> None:
        self._copy(MemcpyAsync, lane, self.call)

    def _memcpy(self, lane) -> None:
        self._copy(Memcpy, lane, self.own)

    def _memset(self, lane) -> None:
        d, s = lane
        draw = self.draw
        self.ops.append(MemsetAsync(s, draw(self.st.integers(1, 1 << 24)), draw(self.gpu_dur), draw(self.call), device=d))
        self.last_lane = self.last_plain = lane

    def _device_sync(self, lane) -> None:
        self.ops.append(DeviceSync(self.draw(self.own), device=lane[0]))

    def _stream_sync(self, lane) -> None:
        if not self.sync_events:
            if self.last_lane is None:
                return
            lane = self.last_lane
        self.ops.append(StreamSync(lane[1], self.draw(self.own), device=lane[0]))

    def _record(self, lane) -> None:
        ev = self.draw(self.st.integers(0, 2))
        if not self.sync_events:
            # without cuda_sync records the record's stream is inferred as the one the thread
            # launched to last (a Kineto cudaEventRecord has no stream arg)
            if self.last_lane is None:
                return
            lane = self.last_lane
            ev = (self.ti, ev)
        elif self.current_device_records:
            # a stream id several devices hold: the record is on the thread's current device (the
            # one it launched to last), as the builder takes it (docs/model.md, rule 6)
            if self.last_lane is None:
                return
            lane = (self.last_lane[0], lane[1])
        self.ops.append(EventRecord(ev, lane[1], self.draw(self.call), device=lane[0]))
        self.recorded.append(ev)

    def _event_sync(self, lane) -> None:
        if not self.recorded:
            return
        ev = self.draw(self.st.sampled_from(self.recorded)) if self.sync_events else self.recorded[-1]
        self.ops.append(EventSync(ev, self.draw(self.own)))

    def _wait(self, lane) -> None:
        if not self.recorded or not self.sync_events:
            return
        d, s = lane
        self.ops.append(StreamWaitEvent(s, self.draw(self.st.sampled_from(self.recorded)), self.draw(self.call), device=d))

    def _other(self, lane) -> None:
        nm, cb = self.draw(self.st.sampled_from(_OTHER_CALLS))
        self.ops.append(OtherCall(nm, self.draw(self.call), cbid=cb))

    def _alloc(self, lane) -> None:
        """Allocate on the lane's device (one in four on the host), 512 B .. 1 GiB."""
        dev = -1 if self.draw(self.st.integers(0, 3)) == 0 else lane[0]
        b = self.draw(self.st.integers(512, 1 << 30))
        self.ops.append(Allocate(b, device=dev))
        self.live.append((b, dev))

    def _free(self, lane) -> None:
        """Free one of the blocks this thread holds (a free before any allocation: of a block
        allocated before the program, as a trace cut from a longer run shows)."""
        if not self.live:
            self.ops.append(Allocate(-self.draw(self.st.integers(512, 1 << 20)), device=lane[0]))
            return
        b, dev = self.live.pop(self.draw(self.st.integers(0, len(self.live) - 1)))
        self.ops.append(Allocate(-b, device=dev))

    def _begin(self, lane) -> None:
        self.ops.append(RangeBegin(f"range_{len(self.ops)}", self.draw(self.st.sampled_from(_RANGE_CATS))))
        self.depth += 1

    def _end(self, lane) -> None:
        if self.depth:
            self.ops.append(RangeEnd())
            self.depth -= 1

    def thread(self) -> Thread:
        """The drawn thread, its open ranges closed."""
        ops = self.ops + [RangeEnd() for _ in range(self.depth)]
        ti = self.ti
        tid = 4242 if ti == 0 else 5000 + ti
        return Thread(ops, pid=4242, tid=tid, name="pt_main_thread" if ti == 0 else f"worker_{ti}")


def programs(*, max_threads: int = 3, max_streams: int = 3, max_ops: int = 40, max_devices: int = 1,
             sync_events: bool = True, graph_launches: bool = False, wait_latency: bool = False,
             graph_streams: bool = False, memory: bool = False, shared_stream_ids: bool = False):
    """Hypothesis strategy of valid random programs.

    1..``max_threads`` threads (one process), streams from ``(7, 20, 24)[:max_streams]`` on
    ``max_devices`` devices (device ``d``'s stream ids + 1000 ``d``: ids unique across devices, as
    CUPTI's are; events recorded on one device are waited for on any), 0..``max_ops`` ops per thread. Durations in ns: kernels and copies
    1_000..200_000, calls 1_000..20_000, own costs of blocking calls 0..20_000, host work
    0..50_000; ``L`` in 2_000..15_000, ``G`` in 0..min(L, 3_000); ``staging_bytes`` 0 (every pageable
    host-to-device copy synchronizes its stream: a trace of them shows no threshold). A thread syncs on or waits for an
    event only after it recorded it itself; with several threads, events are shared, so which
    record a wait binds to depends on timing (the trace's ``cuda_sync`` records say).

    Args:
        sync_events: False restricts programs to those whose sync targets can be inferred from a
            trace *without* ``cuda_sync`` records (model.md fallback): stream syncs only on the
            stream the thread launched to last, event syncs only of the thread's last recorded
            event, records only on the stream the thread launched to last, thread-local events,
            no cudaStreamWaitEvent.
        graph_launches: also draw :class:`GraphLaunch` ops (1-4 kernels on one stream), about
            one op in ten (off by default, so other properties draw the programs they always did).
            A graph is launched into the stream of its thread's last other launch (any drawn
            stream when there is none).
        graph_streams: with ``graph_launches``, about half the graphs of a thread that launched
            before run their kernels on a stream of their own (101 or 102: only graph kernels run
            there), ``GraphLaunch.node_stream``.
        wait_latency: also draw ``Program.wait_latency_ns`` in ``0..L`` (else 0).
        shared_stream_ids: every device has the same stream ids (a trace that reuses ids per
            device), and an event is recorded only on the device the thread launched to last (any
            stream of it; none before the thread's first launch): the builder's rule for an id
            several devices hold.
        memory: also draw :class:`Allocate` ops (allocations of 512 B .. 1 GiB on a lane's device or
            the host, and frees of what the thread holds), about one op in six.
    """
    from hypothesis import strategies as st

    @st.composite
    def _programs(draw):
        L = draw(st.integers(2_000, 15_000))
        G = draw(st.integers(0, min(L, 3_000)))
        n_threads = draw(st.integers(1, max_threads))
        streams = _STREAMS[: draw(st.integers(1, max_streams))]
        devices = tuple(range(draw(st.integers(1, max_devices))))
        step = 0 if shared_stream_ids else _DEVICE_STREAM_STEP
        lanes = [(d, s + step * d) for d in devices for s in streams]
        choices = _CHOICES + ("graph", "graph") if graph_launches else _CHOICES
        choices = choices + ("alloc", "alloc", "free", "free") if memory else choices
        threads = []
        for ti in range(n_threads):
            td = _ThreadDraw(draw, st, ti, sync_events)
            td.graph_streams = graph_streams
            td.current_device_records = shared_stream_ids
            td.stream_step = step
            for _ in range(draw(st.integers(0, max_ops))):
                choice = draw(st.sampled_from(choices))
                td.step(choice, draw(st.sampled_from(lanes)))
            threads.append(td.thread())
        W = draw(st.integers(0, L)) if wait_latency else 0
        # staging_bytes=0: every pageable host-to-device copy synchronizes its stream, the
        # documented behaviour the model takes where a trace does not show a threshold (no copy
        # ever returns while its stream runs here); tests/test_pageable_copies.py draws thresholds
        return Program(threads, launch_latency_ns=L, gpu_gap_ns=G, wait_latency_ns=W, staging_bytes=0)

    return _programs()


_GEMM = "ampere_sgemm_128x64_tn"
_GEMM_BWD = ("ampere_sgemm_128x64_nn", "ampere_sgemm_64x64_nt")
_RELU = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2>)"
_RELU_BWD = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}, at::detail::Array<char*, 3> >(int, at::native::(anonymous namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}, at::detail::Array<char*, 3>)"
_REDUCE = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)"
_SOFTMAX = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)"
_NLL = "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)"
_NLL_BWD = "void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, long>(float*, float const*, long const*, float const*, float const*, bool, int, int, long, long)"
_SOFTMAX_BWD = "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*, float const*, long)"
_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
_FOREACH = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)",
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::BinaryOpScalarFunctor<float, 1, 1, 0>, std::multiplies<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<1>, at::native::(anonymous namespace)::BinaryOpScalarFunctor<float, 1, 1, 0>, std::multiplies<float>, float)",
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<3>, at::native::(anonymous namespace)::PointwiseOpScalarFunctor<float, 3, 3, 0>, std::multiplies<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<3>, at::native::(anonymous namespace)::PointwiseOpScalarFunctor<float, 3, 3, 0>, std::multiplies<float>, float)",
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::UnaryOpFunctor<float, 2, 1, 1>, at::native::sqrt_functor<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::UnaryOpFunctor<float, 2, 1, 1>, at::native::sqrt_functor<float>, float)")
_MAIN, _COMM, _COPY = 7, 20, 24  # the streams of training_step_program


class _StepWriter:
    """Appends the ops of :func:`training_step_program`, drawing the seeded jitter in program order."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ops: list = []
        self.add = self.ops.append

    def j(self, ns: int) -> int:
        return max(0, int(round(ns * self.rng.uniform(0.9, 1.1))))

    def cpu_op(self, name: str, *inner: Op, host: int = 2_500) -> None:
        self.add(RangeBegin(name, "cpu_op"))
        self.add(HostWork(self.j(host)))
        self.ops.extend(inner)
        self.add(RangeEnd())

    def kernel(self, name: str, dur: int, stream: int = _MAIN) -> Launch:
        return Launch(stream, name, self.j(dur), self.j(5_000))

    def batch_copy(self, wait_previous: bool) -> None:
        add, j = self.add, self.j
        add(HostWork(j(40_000)))  # dataloader __next__
        if wait_previous:
            add(EventSync("batch_copied", j(1_500)))  # pinned buffer reuse
        add(RangeBegin("aten::to", "cpu_op"))
        add(HostWork(j(3_000)))
        self.cpu_op("aten::copy_", MemcpyAsync(_COPY, "HtoD", 64 * 1024 * 4, j(30_000), j(7_000), host_memory="pinned"))
        add(RangeEnd())
        add(EventRecord("batch_copied", _COPY, j(2_000)))
        add(StreamWaitEvent(_MAIN, "batch_copied", j(2_000)))

    def forward(self, n_layers: int) -> None:
        add, j, cpu_op, kernel = self.add, self.j, self.cpu_op, self.kernel
        add(RangeBegin("nn.Module: Net_0", "python_function"))
        for i in range(n_layers):
            add(HostWork(j(8_000)))
            add(RangeBegin(f"nn.Module: Linear_{i}", "python_function"))
            add(RangeBegin("aten::linear", "cpu_op"))
            add(HostWork(j(2_000)))
            add(RangeBegin("aten::t", "cpu_op"))
            add(HostWork(j(1_500)))
            add(RangeEnd())
            cpu_op("aten::addmm", kernel(_GEMM, 45_000))
            add(RangeEnd())
            add(RangeEnd())
            add(HostWork(j(5_000)))
            add(RangeBegin(f"nn.Module: ReLU_{i}", "python_function"))
            cpu_op("aten::relu", kernel(_RELU, 4_000))
            add(RangeEnd())
        add(RangeEnd())
        add(HostWork(j(6_000)))
        add(RangeBegin("aten::cross_entropy_loss", "cpu_op"))
        cpu_op("aten::log_softmax", kernel(_SOFTMAX, 6_000))
        cpu_op("aten::nll_loss_forward", MemsetAsync(_MAIN, 4, j(1_500), j(4_000)), HostWork(j(1_000)), kernel(_NLL, 3_000))
        add(RangeEnd())

    def backward(self, n_layers: int) -> None:
        add, j, cpu_op, kernel = self.add, self.j, self.cpu_op, self.kernel
        add(HostWork(j(20_000)))
        for fn, kname, dur in (("NllLossBackward0", _NLL_BWD, 3_000), ("LogSoftmaxBackward0", _SOFTMAX_BWD, 5_000)):
            add(RangeBegin(f"autograd::engine::evaluate_function: {fn}", "cpu_op"))
            cpu_op(fn, kernel(kname, dur))
            add(RangeEnd())
        for i in reversed(range(n_layers)):
            add(HostWork(j(6_000)))
            add(RangeBegin("autograd::engine::evaluate_function: ReluBackward0", "cpu_op"))
            cpu_op("ReluBackward0", kernel(_RELU_BWD, 4_500))
            add(RangeEnd())
            add(HostWork(j(4_000)))
            add(RangeBegin("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op"))
            add(RangeBegin("AddmmBackward0", "cpu_op"))
            cpu_op("aten::mm", kernel(_GEMM_BWD[0], 50_000))
            if i:
                cpu_op("aten::mm", kernel(_GEMM_BWD[1], 48_000))
            cpu_op("aten::sum", kernel(_REDUCE, 7_000))
            add(RangeEnd())
            add(RangeEnd())

    def allreduce(self) -> None:
        add, j = self.add, self.j
        add(HostWork(j(10_000)))
        add(EventRecord("grads_ready", _MAIN, j(2_000)))
        add(StreamWaitEvent(_COMM, "grads_ready", j(2_000)))
        add(RangeBegin("nccl:all_reduce", "user_annotation"))
        self.cpu_op("record_param_comms", self.kernel(_ALLREDUCE, 150_000, stream=_COMM), host=6_000)
        add(RangeEnd())
        add(EventRecord("allreduce_done", _COMM, j(2_000)))
        add(StreamWaitEvent(_MAIN, "allreduce_done", j(2_000)))

    def optimizer_and_sync(self) -> None:
        add, j = self.add, self.j
        add(HostWork(j(15_000)))
        add(RangeBegin("Optimizer.step#Adam.step"))
        for _group in range(3):
            for op_name, kname in zip(("aten::_foreach_add_", "aten::_foreach_mul_", "aten::_foreach_addcmul_",
                                       "aten::_foreach_sqrt"), _FOREACH):
                self.cpu_op(op_name, self.kernel(kname, 6_000), host=3_000)
        add(RangeEnd())
        add(EventRecord("step_done", _MAIN, j(2_000)))  # step timer: end event
        # step timing: wait for the end event (waits for the optimizer kernels)
        add(HostWork(j(5_000)))
        add(EventSync("step_done", j(1_500)))
        # loss.item()
        add(HostWork(j(12_000)))
        add(RangeBegin("aten::item", "cpu_op"))
        self.cpu_op("aten::_local_scalar_dense",
                    MemcpyAsync(_MAIN, "DtoH", 4, j(2_000), j(4_000), host_memory="pageable"),
                    StreamSync(_MAIN, j(2_000)))
        add(RangeEnd())
        add(HostWork(j(20_000)))


def training_step_program(n_layers: int = 4, steps: int = 3, *, seed: int = 0, first_step: int = 1,
                          launch_latency_ns: int = 5_000, gpu_gap_ns: int = 1_000) -> Program:
    """A realistic small data-parallel training loop on one thread, deterministic for a ``seed``.

    Per step (inside a ``ProfilerStep#N`` user annotation):

    * wait (``cudaEventSynchronize``) until the previous batch copy finished, then copy the next
      batch host-to-device from pinned memory on a side stream 24, ``cudaEventRecord`` there and
      ``cudaStreamWaitEvent`` on the compute stream 7;
    * forward: per layer an ``nn.Module: Linear_i`` (``aten::linear`` -> ``aten::addmm``, a long
      gemm) and ``nn.Module: ReLU_i`` (short elementwise kernel); loss (softmax, nll, a memset);
    * backward on stream 7 (two gemms, a bias reduction, a threshold backward per layer);
    * gradient all-reduce on stream 20 gated by record/wait events both ways;
    * ``Optimizer.step#Adam.step`` with many small multi-tensor kernels;
    * a step timer: ``cudaEventRecord`` after the optimizer, ``cudaEventSynchronize`` on it;
    * ``loss.item()``: ``cudaMemcpyAsync`` device-to-pageable (blocking) and
      ``cudaStreamSynchronize``.

    After the last step, a device-to-device copy and a ``cudaDeviceSynchronize`` that waits for it.
    Durations get +-10 % seeded jitter.
    """
    w = _StepWriter(seed)
    for step in range(first_step, first_step + steps):
        w.add(RangeBegin(f"ProfilerStep#{step}"))
        w.batch_copy(step > first_step)
        w.forward(n_layers)
        w.backward(n_layers)
        w.allreduce()
        w.optimizer_and_sync()
        w.add(RangeEnd())  # ProfilerStep
    # EMA copy of the weights, then torch.cuda.synchronize()
    w.add(HostWork(w.j(30_000)))
    w.cpu_op("aten::copy_", MemcpyAsync(_MAIN, "DtoD", 4 * 1024 * 1024 * n_layers, w.j(80_000), w.j(6_000)))
    w.add(HostWork(w.j(5_000)))
    w.add(DeviceSync(w.j(3_000)))
    return Program([Thread(w.ops, pid=4242, tid=4242, name="pt_main_thread")],
                   launch_latency_ns=launch_latency_ns, gpu_gap_ns=gpu_gap_ns)
