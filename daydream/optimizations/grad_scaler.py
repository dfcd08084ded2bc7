"""fp16 loss scaling: ``torch.cuda.amp.GradScaler``'s kernels, inserted with their launches.

With ``float16`` autocast, training scales the loss and, once per optimizer step,
``scaler.step(optimizer)`` unscales the gradients and checks them for inf/NaN
(``torch._amp_foreach_non_finite_check_and_unscale_``: a multi-tensor pass that reads and writes
every fp32 gradient) before the optimizer's kernels, and ``scaler.update()`` then adjusts the scale
(``torch._amp_update_scale_``: one tiny kernel) after them (PyTorch documentation, "Automatic Mixed
Precision examples", "Typical Mixed Precision Training"; ``torch/amp/grad_scaler.py``). ``bfloat16``
has fp32's exponent range and needs no loss scaling (same documentation: GradScaler is for fp16).

Placement (:func:`insert_scaler`): the optimizer step's kernels on a stream form runs (consecutive
in stream order); where the trace has ``ProfilerStep#N`` ranges, each step's last run is its
``optimizer.step()`` (``zero_grad``'s fills, also mapped to the optimizer, come before the
backward pass), else every run is one. Per run, the unscale kernel goes right before the run's first kernel, after the
stream's kernel before it, launched right after that kernel's launching call, and the update
kernel right after the run's last kernel, launched right after its call. Whatever waited for the
anchor kernel (blocking calls, cross-stream consumers) also waits for the new kernel, as
:func:`daydream.transform.add_kernel_after` does; all insertions are one :func:`insert_tasks` call.

Time (:func:`scaler_ns`): the kernel-cost model's time (:func:`daydream.costmodel.predict_model`,
no measured anchor) of a memory-bound elementwise pass over the gradients' fp32 elements (read
and write: 8 B per element), and of a one-element kernel for the update (the GPU's floor).
"""

from __future__ import annotations

import numpy as np

from ..costmodel.kernel_time import predict_model
from ..costmodel.specs import Spec
from ..costmodel.work import Kernels
from ..events.table import Kind
from ..graph import EdgeKind
from ..transform import insert_tasks

#: names given to the inserted kernels (the classifier reads the first as a multi-tensor
#: optimizer-class kernel, memory-bound)
UNSCALE_NAME = "multi_tensor_apply_kernel<_amp_foreach_non_finite_check_and_unscale_> (GradScaler, inserted)"
UPDATE_NAME = "amp_update_scale_cuda_kernel<float> (GradScaler, inserted)"


def scaler_ns(spec: Spec, grad_bytes: float) -> tuple[int, int]:
    """(unscale, update) kernel time (ns) on ``spec`` for ``grad_bytes`` of fp32 gradients."""
    k = Kernels.make(cls="elementwise", elems=[max(int(grad_bytes // 4), 1), 1], inputs=1, dtype="fp32")
    t = predict_model(k, spec)
    return int(round(t[0])), int(round(t[1]))


def optimizer_runs(graph, opt: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kernel before each run's first optimizer kernel on its stream (-1 none), first, last) of the
    runs of consecutive ``opt`` kernels in each stream's order (int64 arrays, one per run)."""
    kern = np.nonzero((graph.node_kind == Kind.KERNEL) & np.isin(graph.lane, graph.lane[opt]))[0] if opt.any() \
        else np.zeros(0, np.int64)
    if not len(kern):
        z = np.zeros(0, np.int64)
        return z, z, z
    o = np.lexsort((kern, graph.position_ns[kern], graph.lane[kern]))
    k, lane, f = kern[o], graph.lane[kern[o]], opt[kern[o]]
    new_lane = np.r_[True, lane[1:] != lane[:-1]]
    starts = np.nonzero(f & (new_lane | ~np.r_[False, f[:-1]]))[0]
    ends = np.nonzero(f & np.r_[(lane[1:] != lane[:-1]) | ~f[1:], True])[0]
    before = np.where(new_lane[starts], -1, k[np.maximum(starts - 1, 0)])
    return before, k[starts], k[ends]


def insert_scaler(graph, g, opt: np.ndarray, spec: Spec, grad_bytes: float, call_ns: int):
    """``g`` with GradScaler's two kernels per optimizer run (module docstring) and a note; ``graph``
    (same nodes as ``g``) gives the runs. ``call_ns``: each launch call's duration."""
    before, first, last = optimizer_runs(graph, opt)
    steps = graph.facts.steps if graph.facts is not None else ()
    if steps and len(first):  # one scaler step per ProfilerStep: its last run (zero_grad's fills come before the backward)
        lo = np.array([st[1] for st in steps], np.int64)
        hi = np.array([st[2] for st in steps], np.int64)
        at = graph.position_ns[first]
        step = np.searchsorted(lo, at, side="right") - 1
        inside = (step >= 0) & (at <= hi[np.maximum(step, 0)])
        keep = inside & np.r_[step[1:] != step[:-1], True]
        before, first, last = before[keep], first[keep], last[keep]
    ok = (before >= 0) & (graph.launch[np.maximum(before, 0)] >= 0) & (graph.launch[last] >= 0)
    if not ok.any():
        return g, "fp16 loss scaling not placed (no optimizer kernel with a launched kernel before it)"
    before, last = before[ok], last[ok]
    t_un, t_up = scaler_ns(spec, grad_bytes)
    s, d = g.edges_of(EdgeKind.WAIT, EdgeKind.XSTREAM)
    after, names, kinds, launch, dur, succs = [], [], [], [], [], []
    n = g.n
    for anchor, kname, kdur in [(a, UNSCALE_NAME, t_un) for a in before.tolist()] + [(a, UPDATE_NAME, t_up) for a in last.tolist()]:
        j = len(after)
        call = int(g.launch[anchor])
        after += [call, anchor]
        names += ["cudaLaunchKernel", kname]
        kinds += ["cpu", "kernel"]
        launch += [-1, n + j]
        dur += [call_ns, kdur]
        succs += [(j + 1, int(w)) for w in sorted(set(d[s == anchor].tolist()) - {call})]
    if len(set(after)) != len(after):  # an anchor twice (a run's update and the next run's unscale on one kernel)
        return g, "fp16 loss scaling not placed (optimizer runs share an anchor kernel)"
    g, _ = insert_tasks(g, after=np.array(after, np.int64), dur_ns=np.array(dur, np.int64), names=names, kind=kinds,
                        launch=np.array(launch, np.int64), gap_ns=0, succs=succs)
    runs = len(last)
    return g, (f"fp16 loss scaling: GradScaler's unscale/inf-check ({t_un / 1e3:,.3f} us: {grad_bytes / 1e6:,.1f} MB of fp32 "
               f"gradients read and written) and update-scale ({t_up / 1e3:,.3f} us) kernels inserted with their launches "
               f"around {runs:,} optimizer step(s)")
