"""The :class:`TaskGraph`: tasks as typed arrays, dependencies as an edge list with kinds.

Nodes are CPU tasks (API calls, each with the CPU gap before it) and GPU tasks (kernels, memcpys,
memsets). Edges are ``(edge_src, edge_dst, edge_kind, edge_origin)`` arrays; what each kind means
in a replay is its :class:`~daydream.graph.edges.Rule`. Derived views (``lane_prev``,
``launch``, ``blocking``, the CSR of in-edges) are computed from the edges on first use.

All arrays are numpy, one entry per node (``n`` nodes) unless stated; times are int64 ns.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..mapping.maps import NodeMapping
from .facts import TraceFacts
from .memory_part import GraphMemory
from .order import is_valid_order
from .edges import MAX_KINDS, RULES, EdgeKind, Origin, Phase, kind_name, rule_arrays

NODE_CPU = 0  #: ``node_kind`` value for CPU tasks; GPU tasks keep their events.Kind value (2, 3, 4)


@dataclass(frozen=True)
class CpuRanges:
    """CPU-side annotation ranges and framework ops of the trace (NVTX, ``user_annotation``,
    ``cpu_op``), for optimizations that find their region by name (steps, optimizer steps).
    Arrays of one length: pid, tid, start_ns, end_ns (int64 ns), name_id (into ``TaskGraph.names``)."""

    pid: np.ndarray
    tid: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    name_id: np.ndarray


@dataclass
class TaskGraph:
    """Dependency graph in array form.

    Node attributes (length ``n``):
        row: EventTable row each node came from (provenance; -1 for inserted tasks).
        node_kind: NODE_CPU, or Kind.KERNEL / MEMCPY / MEMSET.
        lane: lane index; ``lanes[lane]`` names it ("cpu pid/tid" or "gpu dev/stream").
        name_id: index into ``names`` (the table's interned names, then inserted tasks' names).
        pid, tid (-1 for GPU tasks), device (-1 for CPU tasks), stream (-1 for CPU tasks),
            correlation (-1 none): the task's recorded identity; copy_kind (events.CopyKind of a
            memcpy, 0 otherwise).
        dur_ns: duration; for blocking CPU calls their own cost (``docs/model.md`` rule 3).
        gap_ns: CPU gap before a CPU node; 0 for GPU nodes.
        rec_start_ns, rec_end_ns: the recorded interval (reports and measurement only; the
            simulator never reads them).
        position_ns: the ordering key (a call's recorded start; a GPU task's launch's start).
        order: a visiting order of all nodes for the simulator.
    Edge attributes (length ``m``): edge_src, edge_dst (int64 node ids), edge_kind (uint8
        :class:`~daydream.graph.edges.EdgeKind` or a registered kind), edge_origin (uint8
        :class:`~daydream.graph.edges.Origin`).
    Graph attributes: t0_ns (trace start), launch_latency_ns and gpu_gap_ns (``L`` and ``G``),
        counts (what the builder kept as artefacts or could not link, by reason), mapping
        (:class:`NodeMapping` or None), priority / priority_lanes (set by ``set_priority``),
        launch_queue_depth (``D`` of the launch-queue edges; ``remove``/``insert`` remake them).
    """

    table: object  #: the EventTable the graph was built from (provenance and reports only; the what-ifs read ``facts``)
    row: np.ndarray
    node_kind: np.ndarray
    lane: np.ndarray
    lanes: list[str]
    lane_is_gpu: np.ndarray
    #: (n_lanes, 4) int64: (is_gpu, pid, tid or device, 0 or stream) of each lane
    lane_keys: np.ndarray
    name_id: np.ndarray
    names: list[str]
    pid: np.ndarray
    tid: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    correlation: np.ndarray
    copy_kind: np.ndarray
    dur_ns: np.ndarray
    gap_ns: np.ndarray
    rec_start_ns: np.ndarray
    rec_end_ns: np.ndarray
    position_ns: np.ndarray
    order: np.ndarray
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_kind: np.ndarray
    edge_origin: np.ndarray
    t0_ns: int
    launch_latency_ns: int
    gpu_gap_ns: int
    counts: dict[str, int] = field(default_factory=dict)
    mapping: NodeMapping | None = None
    #: the trace's devices (``events.DeviceInfo``: id, name, memory) and CPU ranges
    devices: list = field(default_factory=list)
    cpu_ranges: CpuRanges | None = None
    priority: np.ndarray | None = None
    priority_lanes: tuple[int, ...] = ()
    #: launch-queue depth the QUEUE edges were made for (``graph/queue.py``); 0: none made
    launch_queue_depth: int = 0
    #: ``S``: how long after ``L`` the DMA of a staged pageable HtoD copy starts (``graph/latency.py``);
    #: the intercept of the staging fit when it has a slope
    staging_latency_ns: int = 0
    #: each staged copy's staging time beyond ``S`` (its bytes / the fitted staging bandwidth,
    #: ``graph/build/staging.py``): (table rows, int64 sorted; ns, int64); () none. Rows are stable
    #: identities: kept by every transformation
    staging_rows: tuple = ()
    #: the trace's staging fit and threshold (:class:`daydream.graph.build.staging.StagingFit`), or None
    staging_fit: object = None
    #: execution paths an optimization changed (``optimizations._kernel_model.paths_now``): (table
    #: rows, int64 sorted; their path names, e.g. "tf32", "half"); a row not listed runs on the path
    #: its kernel name says. Kept by every transformation (rows are stable identities).
    path_rows: tuple = ()
    #: per-kernel duration range a what-if's cost model gave (``gpu-upgrade``/``amp`` through the
    #: kernel-cost library, :mod:`daydream.optimizations.kernel_cost`): (table rows, int64 sorted;
    #: fast-end / point and slow-end / point duration ratios, float64; the library's reason codes,
    #: object). A prediction replays the graph with each end (``daydream.analysis``). Kept by
    #: every transformation (rows are stable identities).
    dur_range: tuple = ()
    #: what each kernel the kernel-cost library re-timed is anchored on
    #: (:func:`daydream.optimizations.kernel_cost.retime`): (table rows, int64 sorted; measured ns
    #: before the first re-time, float64; the GPU that time was measured on (``costmodel.specs.Spec``,
    #: object); the precision it runs at now ("" as recorded, else fp16/bf16/tf32/fp32, object); the
    #: library's point for it now, ns, float64). Every re-time predicts from the anchor, so
    #: ``gpu-upgrade`` and ``amp`` compose in either order to one prediction. Kept by every
    #: transformation (rows are stable identities).
    cost_anchor: tuple = ()
    #: host time a what-if scaled, in the order applied: (mask over ``cpu_ranges`` of the ranges
    #: whose host time was scaled, or None for all host time; factor). Recorded instants inside a
    #: changed CPU gap (range and ProfilerStep boundaries, :func:`daydream.simulate.carry.boundaries`) move
    #: by it. Kept by every transformation (the CPU ranges are the table's).
    host_scales: tuple = ()
    #: threads whose host time is another thread's recorded host time: ((thread key, key of the
    #: thread whose recorded instants it reads), ...), :func:`daydream.graph.range_timeline.thread_key`
    #: values. ``dataloader``'s modelled workers fetch the batches the training thread fetched in
    #: the trace: a worker task's CPU gap is the recorded stretch of its batch on the training
    #: thread, so the what-ifs' scales of that stretch apply to it (``graph/host_clock.py``).
    host_alias: tuple = ()
    #: the allocator's events anchored to CPU tasks (``graph/memory_part.py``), or None: the trace
    #: has none. Kept by every transformation (anchors are table rows).
    memory: GraphMemory | None = None
    #: cross-stream waits the trace does not tie to their event and no rule inferred: (producer table
    #: rows, consumer table rows), int64, a superset of what they can wait for
    #: (:func:`daydream.graph.build.inferred.latent_waits`); not replayed, a prediction's bound adds them.
    #: Rows are stable identities: kept by every transformation.
    latent_waits: tuple = ()
    #: the devices as the trace recorded them, where a what-if renamed ``devices`` (``gpu-upgrade``:
    #: the GPU after the upgrade); None: ``devices`` are the recorded ones. What the recorded times
    #: came from (the link the collectives ran on) is read from these.
    recorded_devices: list | None = None
    #: what the what-ifs need from the trace beyond the tasks (launch data, collective args, CPU ops,
    #: profiler steps, the trace's file and world size: :class:`~daydream.graph.facts.TraceFacts`),
    #: taken at build; None for a graph made otherwise. Kept by every transformation.
    facts: TraceFacts | None = None
    #: the contention model's factor (docs/model.md, "Contention between streams"): a kernel the
    #: replay starts while another stream's kernel of its device runs lasts this x its duration;
    #: 0.0 off (the default). Set by :func:`daydream.graph.contention.with_contention`, kept by
    #: every transformation.
    contention_factor: float = 0.0
    #: where :attr:`contention_factor` came from, in words ("" when off)
    contention_source: str = ""

    # ------------------------------------------------------------------ node views ----------
    def staging_extra_ns(self) -> np.ndarray | None:
        """Per node (shape ``(n,)``, int64 ns): a staged copy's staging time beyond ``S``
        (:attr:`staging_rows`), 0 elsewhere; None when the graph has none."""
        if not len(self.staging_rows) or not len(self.staging_rows[0]):
            return None
        rows, extra = self.staging_rows
        i = np.minimum(np.searchsorted(rows, self.row), len(rows) - 1)
        return np.where((rows[i] == self.row) & (self.node_kind != NODE_CPU), extra[i], 0).astype(np.int64)

    def staging_key(self) -> tuple:
        """A memo key part for :attr:`staging_rows` (replay and binding caches)."""
        if not len(self.staging_rows):
            return ()
        return (len(self.staging_rows[0]), hash(np.asarray(self.staging_rows[1]).tobytes()), hash(np.asarray(self.staging_rows[0]).tobytes()))

    @property
    def n(self) -> int:
        return len(self.node_kind)

    @property
    def m(self) -> int:
        return len(self.edge_src)

    @property
    def is_cpu(self) -> np.ndarray:
        return self.node_kind == NODE_CPU

    @property
    def is_gpu(self) -> np.ndarray:
        return self.node_kind != NODE_CPU

    @property
    def inserted(self) -> np.ndarray:
        """Tasks added by a transformation (no recorded interval of their own)."""
        return self.row < 0

    def name(self, v: int) -> str:
        return self.names[int(self.name_id[v])]

    def node_names(self) -> np.ndarray:
        """Name of every node, as an object array."""
        return np.asarray(self.names, dtype=object)[self.name_id] if self.n else np.zeros(0, object)

    @cached_property
    def order_valid(self) -> bool:
        """``order`` satisfies every visit constraint of the edges (checked once per graph; the
        builder and the transformations set it when they have just made the order valid)."""
        return is_valid_order(self, self.order)

    def known_valid(self) -> "TaskGraph":
        """Mark ``order`` as valid without checking it (for code that has just checked or
        built it); returns the graph."""
        self.__dict__["order_valid"] = True
        return self

    # ------------------------------------------------------------------ edge views ----------
    @cached_property
    def _in_csr(self) -> tuple[np.ndarray, np.ndarray]:
        o = np.lexsort((self.edge_src, self.edge_dst))
        ptr = np.zeros(self.n + 1, np.int64)
        if len(o):
            np.cumsum(np.bincount(self.edge_dst, minlength=self.n), out=ptr[1:])
        return ptr, o.astype(np.int64)

    @property
    def in_ptr(self) -> np.ndarray:
        """CSR pointer (length n+1) into :attr:`in_edges`."""
        return self._in_csr[0]

    @property
    def in_edges(self) -> np.ndarray:
        """Edge ids grouped by destination (by source within one destination)."""
        return self._in_csr[1]

    def _single(self, mask_kinds: np.ndarray) -> np.ndarray:
        """Per node: the source of its (at most one) in-edge whose kind is in the mask, or -1."""
        out = np.full(self.n, -1, np.int64)
        m = mask_kinds[self.edge_kind]
        out[self.edge_dst[m]] = self.edge_src[m]
        return out

    @cached_property
    def lane_prev(self) -> np.ndarray:
        """Previous task on the same lane (thread or stream order edge), or -1."""
        return self._single(rule_arrays().lane)

    @cached_property
    def lane_next(self) -> np.ndarray:
        """Next task on the same lane, or -1."""
        out = np.full(self.n, -1, np.int64)
        lp = self.lane_prev
        has = lp >= 0
        out[lp[has]] = np.nonzero(has)[0]
        return out

    @cached_property
    def launch(self) -> np.ndarray:
        """The CPU call that launched each GPU task (launch edge), or -1."""
        return self._single(rule_arrays().launch)

    @cached_property
    def blocking(self) -> np.ndarray:
        """CPU tasks whose end waits for something (an END-phase edge into them)."""
        ra = rule_arrays()
        out = np.zeros(self.n, bool)
        out[self.edge_dst[ra.phase[self.edge_kind] == Phase.END]] = True
        return out & self.is_cpu

    @cached_property
    def synchronizing(self) -> np.ndarray:
        """CPU tasks that wait for GPU work to end (bool, shape (n,)): an END-phase edge into them
        whose rule charges ``"sync"`` (synchronize calls, blocking copies, event and stream syncs).
        Unlike :attr:`blocking`, a launch that waits for room in a full launch queue (``QUEUE``
        edges, back-pressure of 1,024 pending launches) and CPU hand-offs are not synchronizations:
        a CUDA graph or a fused kernel does not have to stop there."""
        sync = np.zeros(MAX_KINDS, bool)
        for k, r in RULES.items():
            sync[k] = r.phase == Phase.END and r.cause == "sync"
        out = np.zeros(self.n, bool)
        out[self.edge_dst[sync[self.edge_kind]]] = True
        return out & self.is_cpu

    def edges_of(self, *kinds: int) -> tuple[np.ndarray, np.ndarray]:
        """(src, dst) of the edges of the given kinds."""
        m = np.isin(self.edge_kind, np.asarray(kinds, dtype=np.uint8))
        return self.edge_src[m], self.edge_dst[m]

    def preds(self, v: int, *kinds: int) -> np.ndarray:
        """Sources of the in-edges of ``v`` (of the given kinds; all when none given)."""
        e = self.in_edges[self.in_ptr[v] : self.in_ptr[v + 1]]
        if kinds:
            e = e[np.isin(self.edge_kind[e], np.asarray(kinds, dtype=np.uint8))]
        return self.edge_src[e]

    def edge_counts(self) -> dict[str, dict[str, int]]:
        """Edges by kind name and origin name (``{"launch": {"recorded": 12}}``), for reports."""
        out: dict[str, dict[str, int]] = {}
        if self.m == 0:
            return out
        key = self.edge_kind.astype(np.int64) * 8 + self.edge_origin
        u, c = np.unique(key, return_counts=True)
        for k, cnt in zip(u.tolist(), c.tolist()):
            out.setdefault(kind_name(k // 8), {})[Origin(k % 8).name.lower()] = int(cnt)
        return out

    @cached_property
    def dependency_edges(self) -> np.ndarray:
        """Per edge: True for the edges that are neither lane order nor a launch (waits,
        cross-stream waits, hand-overs, registered kinds): what a task waits for beyond its
        own thread or stream and its launch."""
        ra = rule_arrays()
        return ~ra.lane[self.edge_kind] & ~ra.launch[self.edge_kind]

    def with_edges(self, src, dst, kind, origin) -> "TaskGraph":
        """A copy of the graph with its edge list replaced (derived views recomputed)."""
        return dataclasses.replace(self, edge_src=np.asarray(src, np.int64), edge_dst=np.asarray(dst, np.int64),
                                   edge_kind=np.asarray(kind, np.uint8), edge_origin=np.asarray(origin, np.uint8))


def concat_edges(parts: list[tuple[np.ndarray, np.ndarray, int, int]], tail=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Concatenate ``(src, dst, kind, origin)`` groups into four edge arrays (src, dst int64;
    kind, origin uint8), then ``tail`` (four edge arrays, appended as they are) when given: one
    copy of every edge."""
    if not parts and tail is None:
        z = np.zeros(0, np.int64)
        return z, z.copy(), np.zeros(0, np.uint8), np.zeros(0, np.uint8)
    t = [] if tail is None else [tail]
    src = np.concatenate([np.asarray(p[0], np.int64) for p in parts] + [np.asarray(x[0], np.int64) for x in t])
    dst = np.concatenate([np.asarray(p[1], np.int64) for p in parts] + [np.asarray(x[1], np.int64) for x in t])
    kind = np.concatenate([np.full(len(p[0]), p[2], np.uint8) for p in parts] + [np.asarray(x[2], np.uint8) for x in t])
    origin = np.concatenate([np.full(len(p[0]), p[3], np.uint8) for p in parts] + [np.asarray(x[3], np.uint8) for x in t])
    return src, dst, kind, origin


def lexsort_packed(keys) -> np.ndarray:
    """``np.lexsort(keys)`` (the last key primary; ties by position) of 1-d integer arrays of one
    length, by one stable argsort of the keys packed into an int64 when every value is >= 0 and
    the product of their ranges stays below 2**62 (node ids, edge rules: a few passes instead
    of one merge sort per key); else ``np.lexsort``."""
    keys = [np.asarray(k) for k in keys]
    if (not len(keys) or not len(keys[0]) or any(k.dtype.kind not in "biu" or k.dtype == np.uint64 for k in keys)
            or min(int(k.min()) for k in keys) < 0):
        return np.lexsort(keys)
    spans = [int(k.max()) + 1 for k in keys]
    total = 1
    for s in spans:
        total *= s
    if total >= 1 << 62:
        return np.lexsort(keys)
    packed = keys[-1].astype(np.int64)
    for k, s in zip(keys[-2::-1], spans[-2::-1]):
        packed = packed * s + k
    return np.argsort(packed, kind="stable")


def dedupe_edges(src, dst, kind, origin):
    """Drop self-loops and edges that repeat the constraint of another edge (same source,
    destination, phase, anchor and offset), keeping the preferred kind; the order of the kept
    edges is kept."""
    ra = rule_arrays()
    keep = src != dst
    src, dst, kind, origin = src[keep], dst[keep], kind[keep], origin[keep]
    if not len(src):
        return src, dst, kind, origin
    rule_key = (ra.phase[kind].astype(np.int64) * 2 + ra.anchor_end[kind]) * 4 + ra.offset[kind]
    o = lexsort_packed((ra.prefer[kind], rule_key, src, dst))
    first = np.ones(len(o), bool)
    first[1:] = (dst[o[1:]] != dst[o[:-1]]) | (src[o[1:]] != src[o[:-1]]) | (rule_key[o[1:]] != rule_key[o[:-1]])
    o = np.sort(o[first])
    return src[o], dst[o], kind[o], origin[o]
