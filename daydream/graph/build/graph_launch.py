"""Builder stage: CUDA-graph launches whose kernels run on streams of their own (``docs/model.md``,
"CUDA-graph launches").

A ``cudaGraphLaunch(graph, stream)`` runs in ``stream``'s order: the graph starts after what
``stream`` ran before the launch, and what ``stream`` runs next waits for the whole graph (CUDA
Programming Guide, "CUDA Graphs": "a graph launch is submitted to a stream ... and is ordered with
respect to other asynchronous work in that stream"). The driver may run the graph's kernels on
streams of its own, and CUPTI then records them there: nothing in the trace ties them to the
launch stream, no stream-wait call included, and a replay lets them overlap the launch stream's
earlier work (one trace: -26.1 % per step before, -0.04 % with the orderings below).

The rule, for a graph launch call ``g``:

1. ``g``'s tasks are the GPU tasks it launched (they carry its correlation id). ``g`` runs *on
   streams of its own* when none of its tasks is on its launch stream and every stream they are on
   holds only graph-launched tasks.
2. Its *launch stream* ``s`` is not in the trace (a ``cudaGraphLaunch`` record names no stream):
   it is the stream of the calling thread's last launch before ``g`` other than a graph launch,
   on the same device (PyTorch replays a graph on the current stream, where the thread's other
   work goes). With no such launch nothing is added (counted: :data:`UNKNOWN`).
3. Edges of kind :attr:`EdgeKind.GRAPH` (``graph launch order``: START, the source's end + ``G``,
   origin INFERRED, counted: :data:`ORDERED`): from the last task launched into ``s`` before ``g``
   to the first of ``g``'s tasks on each stream (*entry*), and from the last of ``g``'s tasks on
   each stream to the first task launched into ``s`` after ``g`` (*exit*).
4. For every other lookup of "the last task on ``s`` launched before a call" (stream and device
   synchronize, event records, cross-stream waits) and "the first task on ``s`` launched after a
   call" (the consumer of a wait), ``g`` stands in ``s`` at its call's position: by its last task
   (the one the trace records starting last) and by its first task
   (:meth:`.waits.WaitIndex.set_graph_entries`).

The emulator's ``GraphLaunch(stream, kernels, ..., node_stream=...)`` has these semantics
(``tests/test_graph_launch.py``, property over random programs with graph launches whose kernels
run on other streams). Limit: a graph whose kernels run on several streams is taken to end with
the task the trace records starting last, for the lookups of rule 4.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._arrays import count
from .tasks import Lanes, Nodes
from .waits import WaitIndex

_NONE = np.zeros(0, np.int64)

ORDERED = ("CUDA-graph launch whose kernels run on streams of their own, ordered in its launch stream "
           "(the thread's last launch stream before it; inferred edges)")
UNKNOWN = ("CUDA-graph launch whose kernels run on streams of their own, by a thread with no earlier launch "
           "on their device: its launch stream cannot be told (not ordered)")


def is_graph_launch_name(name: str) -> bool:
    """A graph-launch API (``cudaGraphLaunch``, ``cudaGraphLaunch_v10000``, ``cuGraphLaunch``,
    ``hipGraphLaunch``)."""
    return "GraphLaunch" in name


@dataclass
class GraphLaunches:
    """The graph launches running on streams of their own (rule 1), shape (k,) each.

    Attributes:
        call: the launching CPU node. lane: its inferred launch stream's lane (rule 2).
        head, tail: its first and last task (the trace's recorded start order).
        src, dst: the entry and exit edges (rule 3).
    """

    call: np.ndarray
    lane: np.ndarray
    head: np.ndarray
    tail: np.ndarray
    src: np.ndarray
    dst: np.ndarray


def graph_launches(ix: WaitIndex, nodes: Nodes, lanes: Lanes, c_name: np.ndarray, names: list[str],
                   rec_start: np.ndarray, counts) -> GraphLaunches:
    """Find the graph launches of rule 1, install them in ``ix`` (rule 4) and return them with
    their edges (rule 3). ``c_name``: name id of each CPU node (into ``names``)."""
    n_cpu = nodes.n_cpu
    used = np.unique(c_name)
    graph_name = np.zeros(len(names), bool)
    graph_name[used] = [is_graph_launch_name(names[i]) for i in used.tolist()]
    is_graph = graph_name[c_name] if n_cpu else np.zeros(0, bool)
    empty = GraphLaunches(_NONE, _NONE, _NONE, _NONE, _NONE, _NONE)
    if not is_graph.any():
        return empty
    gpu = np.arange(n_cpu, len(nodes.launch))
    la = nodes.launch[gpu]
    by_graph = (la >= 0) & is_graph[np.maximum(la, 0)]
    ordinary_lane = np.zeros(len(lanes.keys), bool)
    ordinary_lane[lanes.lane[gpu[~by_graph]]] = True
    gt = gpu[by_graph]
    calls = la[by_graph]
    s = ix.ffill_thread(np.where(is_graph, -1, ix.launched_lane))  # rule 2, per CPU node
    t_lane = lanes.lane[gt]
    sc = s[calls]
    dev = lanes.keys[:, 2]
    not_own = np.zeros(n_cpu, bool)  # rule 1 fails: a task on the launch stream or on a stream with other work
    np.logical_or.at(not_own, calls, ordinary_lane[t_lane] | (t_lane == sc))
    uc = np.unique(calls)
    own = uc[~not_own[uc]]
    unknown = s[own] < 0  # (a launch stream on another device counts as unknown too)
    same_dev = np.zeros(len(own), bool)
    first_task = np.full(n_cpu, -1, np.int64)
    np.maximum.at(first_task, calls, np.arange(len(calls)))
    same_dev[~unknown] = dev[s[own[~unknown]]] == dev[t_lane[first_task[own[~unknown]]]]
    count(counts, UNKNOWN, int((~same_dev).sum()), missing=True)
    own = own[same_dev]
    if not len(own):
        return empty
    # the tasks of those launches, by (call, lane, recorded start): heads and tails per stream
    keep = np.isin(calls, own)
    gt, calls, t_lane = gt[keep], calls[keep], t_lane[keep]
    o = np.lexsort((gt, rec_start[gt], t_lane, calls))
    gt, calls, t_lane = gt[o], calls[o], t_lane[o]
    grp = np.ones(len(gt), bool)
    grp[1:] = (calls[1:] != calls[:-1]) | (t_lane[1:] != t_lane[:-1])
    last = np.ones(len(gt), bool)
    last[:-1] = grp[1:]
    heads, tails = gt[grp], gt[last]  # per (call, stream)
    hc, tc = calls[grp], calls[last]
    # one head and one tail per call for the lookups (rule 4): the first and last recorded start
    o2 = np.lexsort((gt, rec_start[gt], calls))
    gs, cs = gt[o2], calls[o2]
    cfirst = np.ones(len(gs), bool)
    cfirst[1:] = cs[1:] != cs[:-1]
    clast = np.ones(len(gs), bool)
    clast[:-1] = cfirst[1:]
    call_head, call_tail, call = gs[cfirst], gs[clast], cs[cfirst]
    lane = s[call]
    ix.set_graph_entries(lane, ix.c_start[call], ix.c_corr[call], call_head, call_tail)
    # rule 3 (searched with the graph launches installed: a graph follows an earlier one on s)
    e_src = ix.last_before(s[hc], ix.c_start[hc], ix.c_corr[hc])
    x_dst = ix.first_after(s[tc], ix.c_start[tc], ix.c_corr[tc])
    src = np.concatenate([e_src[e_src >= 0], tails[x_dst >= 0]])
    dst = np.concatenate([heads[e_src >= 0], x_dst[x_dst >= 0]])
    count(counts, ORDERED, len(call))
    # the thread launched into s (a later stream sync without a record waits there)
    ix.launched_lane[call] = lane
    ix.last_launch_lane_before = ix.ffill_thread(ix.launched_lane)
    return GraphLaunches(call, lane, call_head, call_tail, src.astype(np.int64), dst.astype(np.int64))
