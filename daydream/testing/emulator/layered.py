"""Layered training steps for the emulator, and their activation-checkpointed versions.

:class:`LayeredStep` is a model of ``L`` layers run as one training step on one thread: each
layer an ``nn.Module: Block_i`` range of framework ops (``aten::op<j>``), each op allocating its
activation and a temporary, launching a forward kernel and freeing the temporary; the layer's
last op also allocates its output (the next layer's input). Then the backward, unlabelled as the
autograd engine records it: per op in reverse order an ``autograd::engine::evaluate_function:
Op<j>Backward0`` range that launches the backward kernel and frees the op's activation (the
output of layer ``i`` is freed once the backward of layer ``i + 1`` is done), each layer's
backward after some host work of the engine (``pre_bwd_ns``); a final stream synchronize.

:meth:`LayeredStep.program` writes it with ``checkpoint`` layers run as ``torch.utils.checkpoint``
runs them: after the layer's forward its activations are freed; right before its backward the
layer's forward ops are run again (after the engine's host work; host work, activation and temporary allocations, the same
kernels on the same streams; not the output), then the backward as before. This is the
emulator's statement of the semantics; ``daydream.optimizations.activation_checkpointing``
predicts it from the trace of the plain program.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import strategies as st

from .ops import Allocate, HostWork, Launch, RangeBegin, RangeEnd, StreamSync
from .program import Program, Thread

_BASE = 0x7F0000000000


@dataclass(frozen=True)
class LayerOp:
    """One forward op of a layer and its backward (ns; bytes; ``tmp_bytes`` 0: no temporary)."""

    stream: int
    fwd_host_ns: int
    fwd_call_ns: int
    fwd_kernel_ns: int
    bwd_host_ns: int
    bwd_call_ns: int
    bwd_kernel_ns: int
    act_bytes: int
    tmp_bytes: int


@dataclass(frozen=True)
class LayeredStep:
    """``layers[i]``: the ops of layer ``i``; ``out_bytes[i]``: its output's size."""

    layers: tuple
    out_bytes: tuple
    sync_stream: int = 7
    #: per layer, host work (ns) before its backward (the autograd engine's), before a recompute
    pre_bwd_ns: tuple = ()
    #: per op index, the framework op's name (``aten::<name>``; its backward ``<Name>Backward0``); default ``op<j>``
    op_names: tuple = ()
    #: per op index, the shapes of the forward op's inputs (``Input Dims``, all ``float``: the last
    #: one its fp32 weight), or None; default: no shapes recorded
    op_dims: tuple = ()

    def op_name(self, j: int) -> str:
        return self.op_names[j] if self.op_names else f"op{j}"

    def program(self, checkpoint=frozenset(), L: int = 5_000, G: int = 1_000) -> Program:
        """The step as a one-thread :class:`Program` inside ``ProfilerStep#1``, the layers of
        ``checkpoint`` (indices) checkpointed (module docstring)."""
        addr = {}

        def a(key) -> int:
            return addr.setdefault(key, _BASE + 4096 * len(addr))

        def forward(i: int, replay: bool) -> list:
            out = []
            for j, op in enumerate(self.layers[i]):
                body = [HostWork(op.fwd_host_ns), Allocate(op.act_bytes, addr=a(("act", i, j)))]
                if op.tmp_bytes:
                    body.append(Allocate(op.tmp_bytes, addr=a(("tmp", i, j))))
                if j == len(self.layers[i]) - 1 and not replay:
                    body.append(Allocate(self.out_bytes[i], addr=a(("out", i))))
                body.append(Launch(op.stream, f"fwd_{i}_{j}", op.fwd_kernel_ns, op.fwd_call_ns))
                if op.tmp_bytes:
                    body.append(Allocate(-op.tmp_bytes, addr=a(("tmp", i, j))))
                dims = self.op_dims[j] if self.op_dims else None
                begin = RangeBegin(f"aten::{self.op_name(j)}", "cpu_op", dims=tuple(map(tuple, dims)) if dims else None,
                                   types=("float",) * len(dims) if dims else None)
                out += body if replay else [begin, *body, RangeEnd()]
            return out

        ops = [RangeBegin("ProfilerStep#1")]
        for i in range(len(self.layers)):
            ops += [RangeBegin(f"nn.Module: Block_{i}", "python_function"), *forward(i, False)]
            if i in checkpoint:
                ops += [Allocate(-op.act_bytes, addr=a(("act", i, j))) for j, op in enumerate(self.layers[i])]
            ops.append(RangeEnd())
        for i in reversed(range(len(self.layers))):
            if self.pre_bwd_ns:
                ops.append(HostWork(self.pre_bwd_ns[i]))
            if i in checkpoint:
                ops += forward(i, True)
            for j in reversed(range(len(self.layers[i]))):
                op = self.layers[i][j]
                ops += [RangeBegin(f"autograd::engine::evaluate_function: {self.op_name(j).capitalize()}Backward0", "cpu_op"), HostWork(op.bwd_host_ns),
                        Launch(op.stream, f"bwd_{i}_{j}", op.bwd_kernel_ns, op.bwd_call_ns),
                        Allocate(-op.act_bytes, addr=a(("act", i, j)))]
                ops.append(RangeEnd())
            if i >= 1:  # the input of layer i (output of layer i - 1) is freed once layer i's backward is done
                ops.append(Allocate(-self.out_bytes[i - 1], addr=a(("out", i - 1))))
        ops += [StreamSync(self.sync_stream, 1_000), Allocate(-self.out_bytes[-1], addr=a(("out", len(self.layers) - 1))),
                RangeEnd()]
        return Program([Thread(ops)], launch_latency_ns=L, gpu_gap_ns=G)


@st.composite
def layered_steps(draw, max_layers: int = 4, max_ops: int = 3, streams=(7, 8)):
    """A :class:`LayeredStep` of 2 .. ``max_layers`` layers of 1 .. ``max_ops`` ops."""
    ns = st.integers(0, 40).map(lambda v: v * 500)
    size = st.integers(1, 64).map(lambda v: v * 512)
    n_layers = draw(st.integers(2, max_layers))
    width = draw(st.integers(1, max_ops))  # repeated blocks: the same ops in every layer (their times and sizes differ)
    layers = tuple(tuple(LayerOp(draw(st.sampled_from(streams)), draw(ns), draw(ns) + 500, draw(ns), draw(ns), draw(ns) + 500,
                                 draw(ns), draw(size), draw(st.sampled_from([0, 512, 4096])))
                         for _ in range(width)) for _ in range(n_layers))
    return LayeredStep(layers, tuple(draw(size) for _ in range(n_layers)), draw(st.sampled_from(streams)),
                       tuple(draw(ns) for _ in range(n_layers)))
