"""``dataloader``: what if data loading ran in DataLoader worker processes (``num_workers=N``)?

With ``num_workers=0`` PyTorch fetches and collates every batch on the training thread, inside
``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__``; the GPU idles meanwhile. With
``N`` workers (``torch.utils.data.DataLoader`` docs, "Single- and Multi-process Data Loading";
``_MultiProcessingDataLoaderIter``) the mechanism is:

* batch indices go to the workers round robin (batch ``k`` to worker ``k mod N``); each worker
  fetches its batches one after another, each taking the time the training thread spent on it in
  the trace (the same dataset code, in another process);
* at most ``prefetch_factor * N`` batches are requested ahead: the iterator asks for batch
  ``k + prefetch_factor * N`` when the training thread takes batch ``k``;
* the training thread, where it fetched batch ``k``, now waits until that batch is ready, then
  spends the hand-off cost (taking the batch from the result queue) and goes on.

In the graph: the DataLoader time leaves the training thread's gaps; a task of cost ``handoff``
is inserted there that ends no earlier than the batch's worker task (an END edge: a wait); ``N``
worker threads run one task per batch (the fetch, as their CPU gap), each after the worker's
previous batch and after the request (a hand-over edge from the hand-off task of batch
``k - prefetch_factor * N``). The first ``prefetch_factor * N`` batches are ready at the window's
start (the window starts in steady state, the profiler's warm-up steps having filled the queue).

Memory (``docs/memory.md``; :func:`daydream.optimizations.memory_rules.held_blocks`): with
``pin_memory=1`` the iterator keeps up to ``prefetch_factor * N`` fetched batches ahead of the
training thread, in page-locked host memory (``torch.utils.data`` docs, "Memory Pinning" and
``prefetch_factor``: "number of batches loaded in advance by each worker"). A batch's bytes are
those of the host-to-device copies the training thread launches between its DataLoader range and
the next one (the batch's ``.to(device)``; the largest batch of the window). They are reported as
host memory (device -1), held from before the window (the queue is full in steady state); the GPU's
peak does not change, and the note says so.

Limits: worker processes compete for CPU cores with the training process (not modelled: a
host with fewer free cores than ``N`` gets less); batches that take very different times
are not reordered (PyTorch yields in order, as modelled); pin-memory threads are not modelled.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import NotApplicable
from ..costmodel.gpu_memory import GIB, HOST_BYTES_PER_GPU
from ..graph import EdgeKind, Offset, Phase, Rule, lower_median, register_kind
from ..graph.host_clock import clock_of
from ..graph.range_timeline import thread_key
from ..mapping.rules import DATA_LOADING_PATTERN
from ..transform import add_edges, add_threads, insert_cpu_tasks, set_gap
from . import Optimization, Param, register
from ..events.table import CopyKind, Kind
from .common import cpu_nodes_in_ranges, cpu_ranges
from .memory_rules import held_blocks

#: edge kind "batch ready" (id 48: registered ids stay clear of the built-in kinds and the tests' toy kind 40): the hand-off task ends its own cost after the worker task that
#: produced its batch ends (END, like a blocking wait; charged to the CPU on the critical path)
BATCH_READY = register_kind(48, Rule("batch ready", Phase.END, True, Offset.ZERO, "cpu", prefer=5,
                                     doc="the training thread takes a batch after the worker that fetched it is done"))

SINGLE = r"_SingleProcessDataLoaderIter|^enumerate\(DataLoader\)(?!.*_MultiProcessing)"
MULTI = r"_MultiProcessingDataLoaderIter"
WORKER_TID0 = 1 << 30  #: thread ids given to the modelled workers (beyond real Linux tids)


def _batches(graph):
    """(thread pid, tid, range start, range end, the first call after each range) of the
    single-process DataLoader ranges of the thread that has most of them."""
    pid, tid, s, e = cpu_ranges(graph, SINGLE)
    if not len(s):
        raise NotApplicable("no single-process DataLoader range (enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__) in the trace")
    keys, cnt = np.unique(np.stack([pid, tid], 1), axis=0, return_counts=True)
    p, t = keys[np.argmax(cnt)]
    m = (pid == p) & (tid == t)
    s, e = s[m], e[m]
    o = np.argsort(s)
    s, e = s[o], e[o]
    keep = np.concatenate([[True], s[1:] >= e[:-1]])  # nested duplicates (op + annotation) once
    s, e = s[keep], e[keep]
    inside = cpu_nodes_in_ranges(graph, (np.full(len(s), p), np.full(len(s), t), s, e), same_thread=True)
    if (inside >= 0).any():
        raise NotApplicable(f"{int((inside >= 0).sum())} CUDA calls run inside the DataLoader ranges (not modelled: they would move to the workers)")
    calls = np.nonzero(graph.is_cpu & (graph.pid == p) & (graph.tid == t) & (graph.row >= 0))[0]
    calls = calls[np.argsort(graph.rec_start_ns[calls], kind="stable")]
    k = np.searchsorted(graph.rec_start_ns[calls], e, "left")
    ok = k < len(calls)
    if not ok.any():
        raise NotApplicable("no CUDA call follows the DataLoader ranges on their thread")
    s, e, y = s[ok], e[ok], calls[k[ok]]
    first = np.concatenate([[True], y[1:] != y[:-1]])  # two ranges before one call: the last one counts
    last = np.concatenate([y[1:] != y[:-1], [True]])
    return int(p), int(t), s[first], e[last], y[last]


def _handoff_ns(graph, p) -> tuple[int, str]:
    """The hand-off cost: measured when the trace has multi-process DataLoader ranges, else the parameter."""
    _, _, s, e = cpu_ranges(graph, MULTI)
    if len(s):
        return lower_median(e - s), f"measured: lower median of {len(s)} _MultiProcessingDataLoaderIter.__next__ ranges"
    return int(round(p["handoff_us"] * 1e3)), "handoff_us parameter"


def _apply(graph, p):
    pid, tid, s, e, y = _batches(graph)
    n_w, ahead = int(p["num_workers"]), int(p["prefetch_factor"]) * int(p["num_workers"])
    h, h_src = _handoff_ns(graph, p)
    # host time as the what-ifs before this one left it (a scale-cpu of the DataLoader ranges first:
    # the recorded lengths gave the workers the unscaled fetches)
    clk = clock_of(graph)
    key = thread_key(np.full(len(s), pid), np.full(len(s), tid))
    fetch = clk.now(key, s, e)
    y_gap = graph.gap_ns[y]
    pre = np.maximum(y_gap - clk.now(key, s, graph.rec_start_ns[y]), 0)  # the part of y's gap before the range
    post = np.minimum(clk.now(key, e, graph.rec_start_ns[y]), y_gap)
    prev = graph.lane_prev[y]  # inserting before one batch's consumer leaves the others' predecessors as they were
    first = prev < 0  # before the thread's first call: a prefetched batch, its hand-off folded into the gap
    post[first] += pre[first] + h
    # each hand-off stands where its batch's DataLoader range began: in the batch's ProfilerStep
    g, d = insert_cpu_tasks(graph, after=prev[~first], dur_ns=h, gap_ns=pre[~first], name="DataLoader hand-off (modelled)",
                            at_ns=s[~first])
    handoff = y.astype(np.int64, copy=True)
    handoff[~first] = d
    y_mask = np.zeros(g.n, bool)
    y_mask[y] = True
    g = set_gap(g, y_mask, _aligned(y, post, g.n, y_mask))
    if first.any() and fetch[first][0] > 0:  # the prefetched batch: its fetch became the hand-off, inside its step
        cr = g.cpu_ranges
        rng = (cr.pid == pid) & (cr.tid == tid) & (cr.start_ns == s[first][0]) & (cr.end_ns == e[first][0])
        g = dataclasses.replace(g, host_scales=g.host_scales + ((rng, h / float(fetch[first][0])),))
    like = int(y[0])
    batches = [np.arange(w, len(y), n_w) for w in range(min(n_w, len(y)))]  # workers are few; one without a batch in the window is left out
    g, nodes = add_threads(g, [dict(pid=pid, tid=WORKER_TID0 + w, like=like, dur_ns=np.zeros(len(ks), np.int64),
                                    gap_ns=np.where(ks < ahead, 0, fetch[ks]),
                                    names=[f"DataLoader worker {w}: batch {int(k)} (modelled)" for k in ks])
                               for w, ks in enumerate(batches)])
    w_of = np.empty(len(y), np.int64)
    for ks, new in zip(batches, nodes):
        w_of[ks] = new
    g = _workers_on_training_clock(g, w_of, e, pid, tid, len(batches), d, s[~first], e[~first], h)
    hd = np.asarray(handoff, np.int64)
    real = hd != y
    req = np.arange(ahead, len(y))
    # the batch-ready waits, then the requests: added in one call (the graph two calls make)
    g = add_edges(g, np.concatenate([w_of[real], hd[req - ahead]]), np.concatenate([hd[real], w_of[req]]),
                  np.concatenate([np.full(int(real.sum()), BATCH_READY, np.int64), np.full(len(req), EdgeKind.HANDOVER, np.int64)]))
    note = (f"{len(y)} batches ({fetch.sum() / 1e6:,.3f} ms of DataLoader time on thread {tid}) fetched by {n_w} workers "
            f"(prefetch {ahead}); the training thread keeps a {h / 1e3:,.0f} us hand-off per batch ({h_src}); GPU work left alone")
    if p["pin_memory"] and g.memory is not None and len(g.memory):
        nb = batch_bytes(graph, pid, tid, s)
        if nb > 0:
            g = held_blocks(g, {-1: ahead * nb})
            note += (f"; memory: {ahead} pinned batches of {nb / 2**20:,.1f} MiB held in host memory "
                     f"({ahead * nb / 2**20:,.1f} MiB); GPU memory unchanged")
        else:
            note += "; memory: no host-to-device batch copy after the DataLoader ranges, pinned buffers not counted"
    return g, note


def batch_bytes(graph, pid: int, tid: int, starts: np.ndarray) -> int:
    """Bytes of the largest batch: per DataLoader range (``starts``, ascending, on thread
    (``pid``, ``tid``)), the summed bytes of the host-to-device copies that thread launched from
    that range's start to the next one's (the window's end for the last); 0 where none."""
    fb = graph.facts.copy_bytes if graph.facts is not None else None
    if fb is None or not len(starts):
        return 0
    cp = np.flatnonzero((graph.node_kind == Kind.MEMCPY) & (graph.copy_kind == CopyKind.HTOD) & (graph.launch >= 0) & (graph.row >= 0))
    call = graph.launch[cp]
    cp, call = cp[(graph.pid[call] == pid) & (graph.tid[call] == tid)], call[(graph.pid[call] == pid) & (graph.tid[call] == tid)]
    if not len(cp):
        return 0
    k = np.searchsorted(starts, graph.rec_start_ns[call], side="right") - 1
    ok = k >= 0
    nb = np.maximum(fb[graph.row[cp[ok]]], 0)
    return int(np.bincount(k[ok], weights=nb).max()) if ok.any() else 0


def _workers_on_training_clock(g, w_of, e, pid, tid, n_workers, handoff, h_s, h_e, h):
    """``g`` placed on the recorded clock for the host-time what-ifs after it (``scale-cpu``):

    * each worker task at the recorded end of its batch's DataLoader range (``e``, one per batch;
      ``w_of``: the batch's worker task), the workers reading the training thread's recorded host
      time (``TaskGraph.host_alias``): a worker's fetch is the recorded stretch of its batch, so a
      later ``scale-cpu`` of the DataLoader ranges (or of ranges inside them) scales it as it would
      have on the training thread;
    * each hand-off task (``handoff``, of the batches whose range is ``[h_s, h_e]``) over the first
      ``h`` ns of its batch's range (at most the range): the hand-off is the multi-process
      iterator's ``__next__``, DataLoader host time as the first batch's (folded where its range
      was) is."""
    rs, re_ = g.rec_start_ns.copy(), g.rec_end_ns.copy()
    rs[w_of] = e
    re_[w_of] = e
    re_[handoff] = np.minimum(h_s + h, np.maximum(h_e, h_s))
    train = int(thread_key(np.int64(pid), np.int64(tid)))
    alias = tuple((int(thread_key(np.int64(pid), np.int64(WORKER_TID0 + w))), train) for w in range(n_workers))
    return dataclasses.replace(g, rec_start_ns=rs, rec_end_ns=re_, host_alias=g.host_alias + alias)


def _aligned(y, values, n, mask):
    """``values`` (one per ``y``) in node order of ``mask`` (as set_gap takes them)."""
    out = np.zeros(n, np.int64)
    out[y] = values
    return out[mask]


def _warn(graph, p) -> list[str]:
    """Pinned batches over :data:`~daydream.costmodel.gpu_memory.HOST_BYTES_PER_GPU` (the trace
    records no host RAM: the per-GPU share of a DGX H100's, datasheet): the prediction assumes host
    memory the machine may not have."""
    if not p["pin_memory"] or graph.memory is None or not len(graph.memory):
        return []
    try:
        pid, tid, s, _, _ = _batches(graph)
    except NotApplicable:
        return []
    held = int(p["prefetch_factor"]) * int(p["num_workers"]) * batch_bytes(graph, pid, tid, s)
    if held <= HOST_BYTES_PER_GPU:
        return []
    return [f"{int(p['prefetch_factor']) * int(p['num_workers'])} pinned batches hold {held / GIB:,.1f} GiB of page-locked "
            f"host memory, above {HOST_BYTES_PER_GPU // GIB} GiB (the trace records no host RAM: the per-GPU share of a "
            f"DGX H100's 2 TB, NVIDIA datasheet); the machine may not have it: lower num_workers or prefetch_factor"]


register(
    Optimization(
        name="dataloader", warn=_warn,
        summary="data loading moved to DataLoader worker processes (PyTorch num_workers=N)",
        apply=_apply,
        params={
            "num_workers": Param(4, "worker processes; default 4: the PyTorch ImageNet example's --workers default (pytorch/examples imagenet/main.py)",
                                 int, lambda v: 1 <= v <= 256, "1 to 256"),
            "prefetch_factor": Param(2, "batches requested ahead per worker; default 2: torch.utils.data.DataLoader's default",
                                     int, lambda v: 1 <= v <= 64, "1 to 64"),
            "pin_memory": Param(1, "1: batches in page-locked host memory (pin_memory=True, as the PyTorch ImageNet example "
                                   "passes), counted as host memory; 0: not counted", int, lambda v: v in (0, 1), "0 or 1"),
            "handoff_us": Param(100.0, "us the training thread spends per batch taking it from the workers' queue; measured instead when the "
                                       "trace has _MultiProcessingDataLoaderIter ranges; default 100 us: an assumption (no single-process trace "
                                       "can measure it), override with the __next__ time of a multi-worker trace of the job",
                                float, lambda v: 0 <= v <= 1e6, "0 to 1e6"),
        },
    )
)
