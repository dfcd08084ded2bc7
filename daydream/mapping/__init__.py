"""Map launches and GPU tasks to the layer, framework op and training phase that issued them.

Works on the :class:`~daydream.events.table.EventTable` alone (formats -> events -> mapping -> graph).
For every RUNTIME row and every GPU task row (KERNEL, MEMCPY, MEMSET) :func:`map_events` finds
the *context* of the CPU call that launched it:

* **Context rows** are the CPU-side annotation ranges (``Kind.RANGE`` rows with ``device < 0``:
  Kineto ``user_annotation`` and ``python_function``, NVTX ranges) and the framework ops
  (``Kind.CPU_OP``). A context *encloses* a runtime call when it is on the same (pid, tid) and
  ``ctx.start <= call.start and call.end <= ctx.end`` (the ``nsys`` ``nvtx_kern_sum`` rule; the
  kernel's own execution time does not enter the test). A GPU row takes the context of its
  launching runtime row, found by (pid, correlation id) (:func:`daydream.events.links.launch_rows`, as
  the graph builder does).
* **Layer path**: the chain of enclosing ``nn.Module: <Class>_<k>`` ranges (Kineto
  ``with_modules``/``with_stack``), outermost to innermost, prefix dropped, joined by ``/``
  (``BertLMHeadModel_0/BertModel_0/BertEncoder_0/...``). When no module range encloses the call,
  the chain of enclosing *scope annotations* is used instead: CPU-side ranges that are neither
  ``python_function`` frames nor op-like NVTX ranges, plus ``#``-named record_function scopes
  that old traces store as ops (``Optimizer.step#SGD.step``), except those whose phase rule says
  "structural" (``ProfilerStep#N``).
* **Op**: the innermost enclosing framework op: a CPU_OP row (except ``#``-named
  record_function scopes), or an NVTX range that looks like an op (``torch.autograd.profiler.
  emit_nvtx`` names such as ``aten::mm, seq = 12, op_id = 7`` -> ``aten::mm``; namespaced
  identifiers ``ns::name``; NCCL API ranges ``ncclSend``).
* **Phase**: from :data:`PHASE_RULES`, see :func:`map_events` and ``docs/mapping.md``.
* **Gap phase / gap layer** of a runtime call: the phase and layer in effect during the CPU gap
  before it on its thread, from the contexts enclosing the gap's midpoint (``Mapping.gap_phase``,
  ``Mapping.gap_layer_id``; the report charges ``TaskGraph.gap_ns`` to them).

"Innermost" among several enclosing contexts is the one that starts last (ties: the shorter),
which is the innermost for properly nested ranges and stays well defined when ranges overlap.

Everything is vectorized: per thread, contexts are sorted by (start asc, end desc) and a sparse
table of the running maximum of ends answers "the latest-starting context with start <= s and
end >= e" for all queries at once by binary lifting (``O((n + q) log n)`` numpy work). Python
loops run only over threads, priority levels, nesting depths and distinct names.

Big inputs (numba there, :data:`SWEEP_MIN` items) take compiled passes instead, each O(n) over
the contexts with no per-thread copies: :func:`_context_keys` selects the contexts and writes
their columns, :func:`_group_contexts` lists each thread's, and :func:`_sweep_fused` answers
every search of a thread in one stack sweep. The numpy path is their reference (the tests
compare them); the answers are the same.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ..util.arrays import few_distinct, small_pages, sorted_unique, stable_group_order
from ..util import jit
from ..events.table import EventTable, Kind
from ..events.links import launch_rows

#: Phase names; ``Mapping.phase`` holds indices into this tuple.
PHASES: tuple[str, ...] = ("unmapped", "forward", "backward", "optimizer", "communication", "other", "data_loading")
UNMAPPED, FORWARD, BACKWARD, OPTIMIZER, COMMUNICATION, OTHER, DATA_LOADING = range(len(PHASES))
PHASE_CODE: dict[str, int] = {p: i for i, p in enumerate(PHASES)}


@dataclass(frozen=True)
class PhaseRule:
    """One phase rule: contexts whose name matches ``pattern`` (``re.search``) claim ``phase``.

    ``phase`` None marks a structural range that says nothing about the phase (and is never a
    layer). ``ops_only`` rules apply only to framework-op contexts. Each context name takes the
    *first* rule of the table that matches it; among the contexts enclosing a call, the one with
    the highest ``priority`` decides, the innermost of them on ties.
    """

    pattern: str
    phase: str | None
    priority: int
    ops_only: bool = False


_WORD = r"(?<![A-Za-z]){}(?![A-Za-z])"

#: CPU ranges that are data loading: PyTorch's DataLoader iterator (``torch.utils.data``:
#: ``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`` with ``num_workers=0``,
#: ``..._MultiProcessingDataLoaderIter.__next__`` with workers, the names the profiler gives the
#: ``__next__`` record_function), any range naming a data loader, and the usual user annotations
#: (``## data_load ##``, ``data_loading``, ``load_batch``).
DATA_LOADING_PATTERN = (r"^enumerate\(DataLoader\)|_SingleProcessDataLoaderIter|_MultiProcessingDataLoaderIter"
                        r"|(?i:dataloader|data_?load|load_?batch)")

#: The phase rules, as data. Order matters for classifying one name (first match); priority
#: decides between enclosing contexts (highest wins). Patterns are matched against the display
#: name (emit_nvtx suffixes such as ``, seq = 12, op_id = 7`` removed).
PHASE_RULES: tuple[PhaseRule, ...] = (
    PhaseRule(r"^ProfilerStep#", None, 0),
    PhaseRule(r"^nn\.Module: ", "forward", 10),
    PhaseRule(r"^nccl:|^gloo:|^mpi:|^ucc:|^nccl[A-Z]|^rccl|ncclKernel|ncclDevKernel|c10d::|c10d_functional::"
              r"|record_param_comms|(?i:all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|all2all)",
              "communication", 40),
    PhaseRule(r"^Optimizer\.(step|zero_grad)#|(?i:optimizer)", "optimizer", 30),
    PhaseRule(r"autograd::engine::evaluate_function|Backward\d*$|" + _WORD.format("backward"), "backward", 20),
    PhaseRule(DATA_LOADING_PATTERN, "data_loading", 5),
    PhaseRule(_WORD.format("forward"), "forward", 10),
    # any framework op not claimed above: ops outside backward/optimizer scopes run in forward
    PhaseRule(r"", "forward", 1, ops_only=True),
)

@dataclass(frozen=True)
class RangeRule:
    """One rule naming the CPU range host time is charged to (critical path, ``scale-cpu``).

    A CPU range (annotation or framework op) whose name matches ``pattern`` (``re.search``, first
    matching rule of the table) is a candidate at ``priority``; ``priority`` None marks a range
    that is never a label (structural ``ProfilerStep#N``, Python stack frames). At an instant of a
    thread, the enclosing candidates of the highest priority decide; among them the ``outermost``
    (the call the user made: ``aten::conv2d`` rather than the ``aten::cudnn_convolution`` inside
    it) or the innermost (the most specific annotation).
    """

    pattern: str
    priority: int | None
    outermost: bool = True


#: The range rules, as data (first match per name; highest priority among enclosing ranges).
#: Data loading claims everything inside it (the collate ops it runs are data loading), then the
#: optimizer's step / zero_grad scopes, then framework ops (namespaced ``ns::name`` and engine
#: ops, the outermost), then any other annotation (the innermost).
RANGE_RULES: tuple[RangeRule, ...] = (
    RangeRule(r"^ProfilerStep#|^\S+\.py\(\d+\): |^<built-in |^built-in method |^PyTorch Profiler", None),
    RangeRule(DATA_LOADING_PATTERN, 50, True),
    RangeRule(r"^Optimizer\.(step|zero_grad)#", 40, True),
    RangeRule(r"^[A-Za-z_][\w.]*::|Backward\d*$", 30, True),
    RangeRule(r"", 20, False),
)

#: Runtime calls on an autograd thread get this phase at this priority (see :func:`map_events`).
AUTOGRAD_THREAD_RULE = PhaseRule(r"", "backward", 2)
#: Share of a thread's enclosed runtime calls that backward contexts must enclose for it to be
#: treated as an autograd engine thread.
AUTOGRAD_THREAD_SHARE = 0.5
#: GPU tasks whose name matches this are communication, whatever launched them.
#: names are matched (phase rules here, kernel rules in daydream.graph.kernels) on their first
#: NAME_PREFIX characters, so that the cost per name is bounded whatever a damaged or hostile
#: trace holds; real names are at most ~5,000 characters and their hints come first.
NAME_PREFIX = 8192
COMM_KERNEL_PATTERN = r"(?i)^nccl|^rccl|ncclKernel|ncclDevKernel|^void\s+nccl|\bnccl\w*Kernel"

def is_comm_kernel_name(name: str, rx: re.Pattern | None = None) -> bool:
    """Whether ``name`` (its first :data:`NAME_PREFIX` characters) matches
    :data:`COMM_KERNEL_PATTERN` (``rx``: that pattern compiled). Every alternative of the
    pattern contains ``nccl`` or ``rccl`` (case-insensitive), so names without either (lowered)
    are answered without the regex, which scans long templated kernel names slowly."""
    head = name[:NAME_PREFIX].lower()
    if "nccl" not in head and "rccl" not in head:
        return False
    return bool((rx or re.compile(COMM_KERNEL_PATTERN)).search(name, 0, NAME_PREFIX))


_MODULE_RE = re.compile(r"^nn\.Module: (.*)$", re.S)
#: emit_nvtx range names: "<op>, seq = N, op_id = M" / "<op>, op_id = M" / "<op>, sizes = [...]"
_NVTX_SUFFIX_RE = re.compile(r"^(.*?), (?:seq|op_id|sizes|stashed seq|input_op_ids) = ", re.S)


_NVTX_SUFFIX_KEYS = ("seq = ", "op_id = ", "sizes = ", "stashed seq = ", "input_op_ids = ")


def _nvtx_base(name: str) -> str | None:
    """What :data:`_NVTX_SUFFIX_RE` captures in ``name`` (the text before the first ``", "``
    that starts an emit_nvtx suffix), None when it does not match: by ``str.find`` (a few C
    calls per name; the regex tries its lazy prefix at every position)."""
    p = name.find(", ")
    while p >= 0:
        if name.startswith(_NVTX_SUFFIX_KEYS, p + 2):
            return name[:p]
        p = name.find(", ", p + 1)
    return None


def nvtx_base_name(name: str) -> str:
    """``name`` without an emit_nvtx suffix (``aten::mm, seq = 12, op_id = 7`` -> ``aten::mm``):
    the per-call part that makes every call's range name unique; other names unchanged."""
    m = _NVTX_SUFFIX_RE.match(name) if ", " in name else None
    return m.group(1) if m else name


def fold_by_op(names: list[str], ns: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Distinct range ``names`` with their times ``ns`` (shape (len(names),)) summed per op:
    emit_nvtx per-call names fold into their :func:`nvtx_base_name`. Returns the folded names in
    first-seen order and their sums (shape (k,); ``names``, ``ns`` unchanged when none folds).
    The one fold of per-call ranges, for the summary's tables and ``CriticalPath.by_range_ns``."""
    base = [nvtx_base_name(n) for n in names]  # distinct range names: few
    if base == names:
        return names, ns
    uniq = list(dict.fromkeys(base))
    where = {b: i for i, b in enumerate(uniq)}
    return uniq, np.bincount(np.array([where[b] for b in base], np.int64), weights=ns, minlength=len(uniq))


#: an identifier, possibly namespaced (``aten::mm``, ``FlashAttnFunc``, ``MulBackward0``)
_IDENT_RE = re.compile(r"^[A-Za-z_][\w.]*(?:::[\w.]+)*$")
#: op-like without an emit_nvtx suffix: a namespaced identifier or an NCCL API range (``ncclSend``)
_NAMESPACED_RE = re.compile(r"^(?:[A-Za-z_][\w.]*(?:::[\w.]+)+|nccl[A-Z]\w*)$")
_NO_LABEL = -1


@dataclass
class Mapping:
    """Per-row context of a table (length ``len(table)`` arrays).

    Attributes:
        phase: uint8 index into :data:`PHASES` for RUNTIME and GPU task rows (``unmapped`` for all
            other rows).
        layer_id: int32 index into ``labels`` of the layer path, -1 none.
        op_id: int32 index into ``labels`` of the innermost framework op, -1 none.
        launch_row: for GPU task rows, the RUNTIME row that launched them; -1 otherwise.
        labels: the interned layer paths and op names.
        gap_phase: uint8 phase code of the CPU gap *before* each RUNTIME row on its thread (the
            framework/Python time since the thread's previous call; see :func:`map_events`),
            ``unmapped`` for all other rows.
        gap_layer_id: int32 index into ``labels`` of the layer path of that gap, -1 none.
        autograd_threads: (pid, tid) of the threads treated as autograd engine threads.
        counts: diagnostics (rows mapped, GPU rows without launch, ...).
        launch_unique: True when ``launch_row`` was found with no two runtime calls sharing a
            (process, correlation id): the link is then the same whatever order the calls are
            taken in, and the graph builder reuses it instead of linking again.
        call_threads: the table's RUNTIME rows by thread (:func:`call_threads`), which the
            graph builder's first stage reuses; None: it computes them.
        cpu_range_columns: int64 (pid, tid, start_ns, end_ns, name_id) of the CPU-side RANGE
            and CPU_OP rows in row order, which the mapping reads for its contexts and the graph
            builder keeps as ``TaskGraph.cpu_ranges``; None: the builder gathers them.
    """

    phase: np.ndarray
    layer_id: np.ndarray
    op_id: np.ndarray
    launch_row: np.ndarray
    labels: list[str]
    autograd_threads: list[tuple[int, int]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    gap_phase: np.ndarray | None = None
    gap_layer_id: np.ndarray | None = None
    launch_unique: bool = False
    call_threads: "CallThreads | None" = None
    cpu_range_columns: tuple[np.ndarray, ...] | None = None

    def __post_init__(self) -> None:
        n = len(self.phase)
        if self.gap_phase is None:
            self.gap_phase = np.zeros(n, dtype=np.uint8)
        if self.gap_layer_id is None:
            self.gap_layer_id = np.full(n, -1, dtype=np.int32)

    def phase_of_rows(self, rows) -> np.ndarray:
        """Phase names (object array of str) of the given rows (indices or bool mask)."""
        return np.asarray(PHASES, dtype=object)[self.phase[rows]]

    def _label_of(self, ids: np.ndarray, none: str) -> np.ndarray:
        lab = np.asarray(self.labels + [none], dtype=object)
        return lab[np.where(ids >= 0, ids, len(self.labels))]

    def layer_of_rows(self, rows, none: str = "") -> np.ndarray:
        """Layer paths (object array of str, ``none`` where absent) of the given rows."""
        return self._label_of(self.layer_id[rows], none)

    def op_of_rows(self, rows, none: str = "") -> np.ndarray:
        """Op names (object array of str, ``none`` where absent) of the given rows."""
        return self._label_of(self.op_id[rows], none)

    def for_nodes(self, rows, method: str = "auto") -> "NodeMapping":
        """The mapping of graph nodes: ``rows`` are their table rows (``TaskGraph.row``), -1 for
        nodes without one (unmapped, no layer, no op). ``method``: when every node has a row, one
        compiled pass (:func:`_pick_kernel`) from :data:`GPU_ROWS_MIN` nodes when numba is there
        ("auto"; "compiled" whatever the size, "python" the kernel uncompiled, "numpy" never),
        else numpy gathers; the same answers."""
        rows = np.asarray(rows, dtype=np.int64)
        ok = rows >= 0
        every = bool(ok.all())  # a built graph: every node has a row
        fn = jit.kernel_for(_pick_kernel, len(rows), GPU_ROWS_MIN, method) if every else None
        if fn is not None and all(a.dtype == d for a, d in ((self.phase, np.uint8), (self.layer_id, np.int32), (self.op_id, np.int32),
                                                             (self.gap_phase, np.uint8), (self.gap_layer_id, np.int32))):
            n = len(rows)
            o = (np.empty(n, np.uint8), np.empty(n, np.int32), np.empty(n, np.int32), np.empty(n, np.uint8), np.empty(n, np.int32))
            jit.call(fn, rows, self.phase, self.layer_id, self.op_id, self.gap_phase, self.gap_layer_id, *o)
            return NodeMapping(*o, list(self.labels))
        r = rows if every else rows[ok]

        def pick(a: np.ndarray, missing: int, dtype) -> np.ndarray:
            if every:
                return a[r].astype(dtype, copy=False)
            out = np.full(len(rows), missing, dtype=dtype)
            out[ok] = a[r]
            return out

        return NodeMapping(pick(self.phase, UNMAPPED, np.uint8), pick(self.layer_id, -1, np.int32),
                           pick(self.op_id, -1, np.int32), pick(self.gap_phase, UNMAPPED, np.uint8),
                           pick(self.gap_layer_id, -1, np.int32), list(self.labels))


@dataclass(frozen=True)
class NodeMapping:
    """Per-node layer/phase facts of a task graph (codes index ``PHASES`` / ``labels``).

    Attributes (length ``n``): phase (uint8), layer_id, op_id (int32, -1 none), gap_phase
    (uint8: the phase in effect during the CPU gap before a CPU node; None: charge the gap to the
    node's own phase), gap_layer_id (int32 or None). labels: the layer/op strings the ids index.
    """

    phase: np.ndarray
    layer_id: np.ndarray
    op_id: np.ndarray
    gap_phase: np.ndarray | None
    gap_layer_id: np.ndarray | None
    labels: list[str]

    def take(self, idx: np.ndarray) -> "NodeMapping":
        """The mapping of nodes ``idx`` (fancy index; repeats allowed)."""
        def t(a):
            return a[idx] if a is not None else None

        return NodeMapping(self.phase[idx], self.layer_id[idx], self.op_id[idx], t(self.gap_phase),
                           t(self.gap_layer_id), self.labels)


# ---------------------------------------------------------------------------------------------
# interval machinery


#: below this many intervals + queries :meth:`_Enclosers.innermost` uses its numpy sparse table
#: instead of the compiled sweep (importing numba costs ~0.3 s; the table does ~10^5 in ~0.02 s)
SWEEP_MIN = 50_000


class _Enclosers:
    """Intervals of one thread sorted by (start asc, end desc).

    :meth:`innermost` answers, for many queries ``[s, e]`` at once, the latest-starting interval
    with ``start <= s`` and ``end >= e`` (index into the sorted order, -1 none): by a stack
    sweep compiled with numba (:func:`_sweep_innermost`, O(n + q log n)) for big inputs, else
    by a max-end sparse table in numpy (O((n + q) log n)); both give the same answers.
    """

    def __init__(self, start: np.ndarray, end: np.ndarray) -> None:
        ident = len(start) < 2 or bool(np.all(start[1:] >= start[:-1]))  # contexts come in start order
        if ident:
            o, ss = np.arange(len(start)), start
        else:
            o = np.argsort(start, kind="stable")
            ss = start[o]
        if len(o) > 1:  # equal starts: the longer first (np.lexsort((-end, start)) on the tied ones only)
            eq = ss[1:] == ss[:-1]
            if eq.any():
                tied = np.zeros(len(o), dtype=bool)
                tied[1:] = eq
                tied[:-1] |= eq
                p = np.flatnonzero(tied)  # runs of equal starts, in start order
                sub = o[p]
                srt = sub[np.lexsort((-end[sub], start[sub]))]
                ident = ident and bool((srt == sub).all())
                o[p] = srt
        self.order = o
        #: the order is the identity (``start``/``end`` are then the arrays given, not copies)
        self.identity = ident
        self.start = start if ident else start[o]
        self.end = end if ident else end[o]

    def __len__(self) -> int:
        return len(self.order)

    def _levels(self) -> list[np.ndarray]:
        """The sparse table: level l holds max(end[i : i + 2**l])."""
        levels = [self.end]
        w = 1
        while 2 * w <= len(self.end):
            prev = levels[-1]
            levels.append(np.maximum(prev[: len(prev) - w], prev[w:]))
            w *= 2
        return levels

    def innermost(self, qs: np.ndarray, qe: np.ndarray, k: np.ndarray | None = None, method: str = "auto") -> np.ndarray:
        """Largest sorted index j < k with end[j] >= qe (k defaults to #starts <= qs); -1 none.

        ``method``: "table" (numpy), "sweep" (compiled; the table without numba), "sweep-py"
        (the sweep uncompiled, for tests), "auto" (sweep from :data:`SWEEP_MIN` items).
        """
        if len(self) == 0:
            return np.full(len(qe), -1, dtype=np.int64)
        if k is None:
            k = np.searchsorted(self.start, qs, side="right")
        k = np.asarray(k, dtype=np.int64)
        qe = np.asarray(qe, dtype=np.int64)
        if method == "sweep-py":
            return _by_sweep(_sweep_innermost, self.end, k, qe)
        if method != "table" and jit.wanted(len(self) + len(qe), SWEEP_MIN, forced=method == "sweep"):
            fn = jit.compiled(_sweep_innermost)
            if fn is not None:
                return _by_sweep(fn, self.end, k, qe)
        return self._by_table(k, qe)

    def _by_table(self, k: np.ndarray, qe: np.ndarray) -> np.ndarray:
        levels = self._levels()
        cur = k.copy()
        for lvl in range(len(levels) - 1, -1, -1):
            w = 1 << lvl
            can = np.flatnonzero(cur >= w)
            if len(can) == 0:
                continue
            blk_max = levels[lvl][cur[can] - w]
            skip = can[blk_max < qe[can]]
            cur[skip] -= w
        j = cur - 1
        ok = j >= 0
        ok[ok] = self.end[j[ok]] >= qe[ok]
        return np.where(ok, j, -1)

    def any_enclosing(self, qs: np.ndarray, qe: np.ndarray) -> np.ndarray:
        """Whether some interval encloses each query (prefix max of ends)."""
        if len(self) == 0:
            return np.zeros(len(qe), dtype=bool)
        k = np.searchsorted(self.start, qs, side="right")
        pm = np.maximum.accumulate(self.end)
        ok = k > 0
        ok[ok] = pm[k[ok] - 1] >= qe[ok]
        return ok

    def parents(self) -> np.ndarray:
        """For each sorted interval, the innermost earlier interval enclosing it (-1 none)."""
        n = len(self)
        return self.innermost(self.start, self.end, np.arange(n, dtype=np.int64))


def _by_sweep(fn, end: np.ndarray, k: np.ndarray, qe: np.ndarray) -> np.ndarray:
    """:meth:`_Enclosers.innermost` by the sweep ``fn`` (:func:`_sweep_innermost`, compiled or not)."""
    o = np.argsort(k, kind="stable")
    out = np.empty(len(k), dtype=np.int64)
    out[o] = jit.call(fn, np.ascontiguousarray(end, np.int64), k[o], qe[o])
    return out


def _sweep_innermost(end, k, qe):
    """Per query t (``k`` ascending): the largest j < k[t] with end[j] >= qe[t], -1 none.

    Intervals are pushed in order on a stack that keeps only those no later interval outlasts
    (ends strictly decreasing upwards): the answer is always on it (nothing after it reaches
    ``qe``), the topmost entry with end >= qe, found by bisection. O(n + q log n).
    """
    n = len(end)
    q = len(k)
    out = np.empty(q, np.int64)
    stack = np.empty(n, np.int64)
    top = 0
    i = 0
    for t in range(q):
        kk = k[t]
        while i < kk:
            e = end[i]
            while top > 0 and end[stack[top - 1]] <= e:
                top -= 1
            stack[top] = i
            top += 1
            i += 1
        x = qe[t]
        lo = 0
        hi = top
        while lo < hi:  # first stack position whose end is below x
            mid = (lo + hi) // 2
            if end[stack[mid]] >= x:
                lo = mid + 1
            else:
                hi = mid
        out[t] = stack[lo - 1] if lo > 0 else -1
    return out


#: categories of the fused sweep (:func:`_sweep_fused`): bit i of a context's membership word
_CAT_MODULE, _CAT_SCOPE, _CAT_OP, _CAT_BW = range(4)
#: first category bit of the priority levels (one bit per level, highest priority first)
_CAT_LEVEL0 = 4


def _sweep_fused(start, end, c, rk, member_k, phase_k, oplab_k, ncat, nflat, qs, qe, qo, nq):
    """Every category's :func:`_sweep_innermost` of one thread in one pass, queries in ``qs`` order.

    Contexts: ``c`` (int32 or int64, (n,)) lists the thread's contexts in (start asc, end desc)
    order as indices into ``start``/``end`` (int64 ns) and ``rk`` (key index) of all contexts;
    per key k: ``member_k[k]`` (bit c: category c < ``ncat``), ``phase_k[k]`` (phase code),
    ``oplab_k[k]`` (op label id, -1 none). Categories ``0 .. nflat-1`` (module, scope, op,
    backward) are answered each; the later ones are priority levels (highest first), of which
    only the first with a hit is. Queries ``qs``/``qe`` (int64 ns, (q,); the first ``nq`` the
    calls) are taken in the order ``qo`` (``qs[qo]`` ascending). A category's hit for a query:
    its latest member j (in ``c`` order) starting at or before qs with end[j] >= qe.

    Returns (int64 unless said): ``hit_mod``, ``hit_scope`` (q,): the hit's index among the
    category's members, -1 none; ``op_hit`` (nq,): the op hit's label; ``ph``, ``lev`` (q,):
    the phase code of the first level's hit and that level's index; ``enclosed`` (q,) bool:
    some context starting at or before qs ends at or after qe; ``n_bw``: calls with a backward
    hit; ``counts`` (ncat,): members per category; ``sub_mod``, ``par_mod`` / ``sub_scope``,
    ``par_scope``: per module / scope member, its position in ``c`` and its parent's member
    index (:meth:`_Enclosers.parents` of the category, -1 none). One stack of (end, payload)
    per category, ends strictly decreasing upwards (:func:`_sweep_innermost`), the payload what
    the caller reads of a hit (member index, op label, phase code). O((n + q) ncat log n)."""
    n = len(c)
    q = len(qs)
    counts = np.zeros(ncat, np.int64)
    for i in range(n):
        m = member_k[rk[c[i]]]
        cc = 0
        while (m >> cc) != 0:
            counts[cc] += (m >> cc) & 1
            cc += 1
    offset = np.zeros(ncat + 1, np.int64)  # each category's part of one stack array
    for cc in range(ncat):
        offset[cc + 1] = offset[cc] + counts[cc]
    st_end = np.empty(max(offset[ncat], 1), np.int64)
    st_val = np.empty(max(offset[ncat], 1), np.int64)
    top = np.zeros(ncat, np.int64)
    sub_mod = np.empty(counts[_CAT_MODULE], np.int64)
    par_mod = np.empty(counts[_CAT_MODULE], np.int64)
    sub_scope = np.empty(counts[_CAT_SCOPE], np.int64)
    par_scope = np.empty(counts[_CAT_SCOPE], np.int64)
    nsub = np.zeros(2, np.int64)  # next slot of the module and the scope members
    hit_mod = np.full(q, -1, np.int64)
    hit_scope = np.full(q, -1, np.int64)
    op_hit = np.full(nq, -1, np.int64)
    ph = np.full(q, -1, np.int64)
    lev = np.full(q, -1, np.int64)
    enclosed = np.zeros(q, np.bool_)
    n_bw = 0
    i = 0
    run_max = 0  # largest end pushed so far (meaningful once i > 0)
    for t in range(q + 1):
        x_s = qs[qo[t]] if t < q else 0
        while i < n and (t == q or start[c[i]] <= x_s):  # after the last query: the rest (their parents)
            ci = c[i]
            e = end[ci]
            if i == 0 or e > run_max:
                run_max = e
            k = rk[ci]
            _push_c(st_end, st_val, offset, top, member_k[k], e, i, oplab_k[k], phase_k[k], nflat, sub_mod, par_mod, sub_scope,
                    par_scope, nsub)
            i += 1
        if t == q:
            break
        r = qo[t]
        x = qe[r]
        enclosed[r] = i > 0 and run_max >= x
        hit_mod[r] = _reach_c(st_end, st_val, offset[_CAT_MODULE], top[_CAT_MODULE], x)
        hit_scope[r] = _reach_c(st_end, st_val, offset[_CAT_SCOPE], top[_CAT_SCOPE], x)
        if r < nq:
            op_hit[r] = _reach_c(st_end, st_val, offset[_CAT_OP], top[_CAT_OP], x)
            if _reach_c(st_end, st_val, offset[_CAT_BW], top[_CAT_BW], x) >= 0:
                n_bw += 1
        for cc in range(nflat, ncat):
            v = _reach_c(st_end, st_val, offset[cc], top[cc], x)
            if v >= 0:
                ph[r] = v
                lev[r] = cc - nflat
                break
    return hit_mod, hit_scope, op_hit, ph, lev, enclosed, n_bw, counts, sub_mod, par_mod, sub_scope, par_scope


def _push(st_end, st_val, offset, top, m, e, i, oplab, phase, nflat, sub_mod, par_mod, sub_scope, par_scope, nsub):
    """:func:`_sweep_fused`: push context ``i`` (in ``c`` order; category bits ``m``, end ``e``,
    op label ``oplab``, phase code ``phase``) on the stacks of its categories, popping the
    entries it outlasts; a module or scope member takes the next slot ``nsub[category]`` of
    ``sub_*``/``par_*`` (its position; its parent's slot: the topmost entry reaching ``e``)."""
    cc = 0
    while (m >> cc) != 0:
        if (m >> cc) & 1:
            base = offset[cc]
            tp = top[cc]
            val = 0
            if cc == _CAT_MODULE or cc == _CAT_SCOPE:
                val = nsub[cc]
                par = _reach_c(st_end, st_val, base, tp, e)
                if cc == _CAT_MODULE:
                    sub_mod[val] = i
                    par_mod[val] = par
                else:
                    sub_scope[val] = i
                    par_scope[val] = par
                nsub[cc] = val + 1
            elif cc == _CAT_OP:
                val = oplab
            elif cc >= nflat:
                val = phase
            while tp > 0 and st_end[base + tp - 1] <= e:
                tp -= 1
            st_end[base + tp] = e
            st_val[base + tp] = val
            top[cc] = tp + 1
        cc += 1


def _reach(st_end, st_val, base, top, x):
    """The payload of the topmost entry p < ``top`` of the stack at ``base`` (ends strictly
    decreasing upwards) with end >= x, -1 none (payloads are >= 0): doubling steps down from
    the top, then bisection."""
    hi = top  # positions hi and above end below x
    step = 1
    lo = hi - 1
    while lo >= 0 and st_end[base + lo] < x:
        hi = lo
        lo -= step
        step *= 2
    lo = max(lo, -1) + 1  # positions below lo reach x
    while lo < hi:
        mid = (lo + hi) // 2
        if st_end[base + mid] >= x:
            lo = mid + 1
        else:
            hi = mid
    return st_val[base + lo - 1] if lo > 0 else -1


_reach_c = _reach  # rebound to the compiled helpers by _fused_kernel()
_push_c = _push


def _first_pair(ap, at, n, p, t):
    """The first index ``i < n`` with ``(ap[i], at[i]) >= (p, t)`` (``n`` if none); ``ap``/``at``
    ascending by (pid, tid) over ``[0, n)``: the binary search of :func:`_group_contexts` and
    :func:`_call_threads_kernel` (compiled with them, :func:`_with_first_pair`)."""
    lo = 0
    hi = n
    while lo < hi:
        mid = (lo + hi) // 2
        if ap[mid] < p or (ap[mid] == p and at[mid] < t):
            lo = mid + 1
        else:
            hi = mid
    return lo


_first_pair_c = _first_pair  # rebound to the compiled helper by _with_first_pair()


def _with_first_pair(kernel):
    """``kernel`` compiled with :func:`_first_pair` compiled for it (None without numba)."""
    return jit.compiled_calling(globals(), "_first_pair_c", _first_pair, kernel)


def _group_contexts(c_pid, c_tid, c_start, c_end, th_pid, th_tid):
    """The contexts of each thread (pid, tid) of ``th_pid``/``th_tid`` (int64, (T,), sorted by
    (pid, tid), distinct), from the contexts' int64 columns (n,), n below 2**31: returns ``idx``
    (int32: the indices of the contexts on one of the threads, grouped by thread in that order,
    ascending within), ``off`` (int64 (T + 1,): thread k's are ``idx[off[k]:off[k + 1]]``) and
    ``in_order`` (bool (T,): thread k's contexts in index order are in (start asc, end desc)
    order, the order :class:`_Enclosers` sorts them into). Two passes (count, fill), a binary
    search per run of contexts on one thread in each; what :func:`_by_thread` gives by packed
    keys or lexsort."""
    n = len(c_pid)
    nt = len(th_pid)
    off = np.zeros(nt + 1, np.int64)
    pos = np.zeros(nt, np.int64)
    idx = np.empty(0, np.int32)
    in_order = np.ones(nt, np.bool_)
    last_s = np.zeros(nt, np.int64)
    last_e = np.zeros(nt, np.int64)
    for rep in range(2):
        have = False
        lp = 0
        lt = 0
        lk = -1
        for i in range(n):
            p = c_pid[i]
            t = c_tid[i]
            if not have or p != lp or t != lt:
                lo = _first_pair_c(th_pid, th_tid, nt, p, t)
                lk = lo if lo < nt and th_pid[lo] == p and th_tid[lo] == t else -1
                have = True
                lp = p
                lt = t
            if lk < 0:
                continue
            if rep == 0:
                off[lk + 1] += 1
                continue
            j = pos[lk]
            s = c_start[i]
            e = c_end[i]
            if j > off[lk] and (s < last_s[lk] or (s == last_s[lk] and e > last_e[lk])):
                in_order[lk] = False
            last_s[lk] = s
            last_e[lk] = e
            idx[j] = i
            pos[lk] = j + 1
        if rep == 0:
            for k in range(nt):
                off[k + 1] += off[k]
                pos[k] = off[k]
            idx = np.empty(off[nt], np.int32)
    return idx, off, in_order


class _Interner:
    def __init__(self) -> None:
        self.labels: list[str] = []
        self._ids: dict[str, int] = {}

    def __call__(self, s: str) -> int:
        i = self._ids.get(s)
        if i is None:
            i = self._ids[s] = len(self.labels)
            self.labels.append(s)
        return i


def _path_labels(parent: np.ndarray, comp: np.ndarray, comp_names: list[str], intern: _Interner) -> np.ndarray:
    """Label id of the path root -> ... -> each node (``parent`` indices precede their children)."""
    n = len(parent)
    path = np.full(n, _NO_LABEL, dtype=np.int64)
    if n == 0:
        return path
    depth = np.zeros(n, dtype=np.int64)
    anc = parent.copy()
    while True:
        has = np.flatnonzero(anc >= 0)
        if len(has) == 0:
            break
        depth[has] += 1
        anc[has] = parent[anc[has]]
    for d in range(int(depth.max()) + 1):
        idx = np.flatnonzero(depth == d)
        pp = path[parent[idx]] if d else np.full(len(idx), _NO_LABEL, dtype=np.int64)
        ci = comp[idx].astype(np.int64, copy=False)
        span = int(ci.max()) + 1 if len(ci) else 1
        packed, inv = np.unique((pp + 1) * span + ci, return_inverse=True)  # (parent path, component) pairs, in order
        uniq = np.stack([packed // span - 1, packed % span], axis=1)
        ids = np.empty(len(uniq), dtype=np.int64)
        for u, (p, c) in enumerate(uniq.tolist()):  # one iteration per distinct path
            name = comp_names[c]
            ids[u] = intern(name if p < 0 else intern.labels[p] + "/" + name)
        path[idx] = ids[inv.reshape(-1)]
    return path


# ---------------------------------------------------------------------------------------------
# name classification


class _Contexts:
    """The context rows of a table and what each one says.

    What a context says depends only on its key (name, CPU_OP or not, ``python_function`` or
    not): ``by_key`` holds it once per distinct key present and ``rk`` each row's key index, and
    the per-row arrays (aligned with ``rows``) are gathered on first use only; the fused sweep
    reads the key arrays through ``rk`` for one thread's contexts at a time instead.

    Per-row attributes: module (bool: an ``nn.Module:`` range, a layer component), op (bool: a
    framework op), scope (bool: a scope annotation, fallback layer component), phase (int: phase
    code its rule gives, -1 none), prio (int: priority of its rule, meaningless where phase is
    -1), comp (int: index into ``comp_names`` of its layer component, -1 none), op_name (int:
    index into ``op_names`` of its op label, -1 none), member (int64: the categories of the
    fused sweep it belongs to, bits _CAT_MODULE, _SCOPE, _OP, _BW and _CAT_LEVEL0 + its
    priority level, see :func:`_member_bits`).
    """

    FIELDS = ("module", "op", "scope", "phase", "prio", "comp", "op_name", "member")

    def __init__(self, rows: np.ndarray | None, rk: np.ndarray, by_key: dict[str, np.ndarray], comp_names: list[str],
                 op_names: list[str], table: EventTable | None = None) -> None:
        if rows is not None:
            self.rows = rows  #: table rows (CPU-side RANGE rows and CPU_OP rows); None: found in ``table`` on first use
        self._table = table
        self.n = len(rk)  #: how many context rows
        self.rk = rk  #: per row: index of its key in the ``by_key`` arrays
        self.by_key = by_key
        self.comp_names = comp_names
        self.op_names = op_names
        self.name_id: np.ndarray | None = None  #: int64 name id of each row
        #: the rows are the graph's CPU ranges too (no CPU_OP row on a device)
        self.all_cpu_side = False
        #: int64 (pid, tid, start_ns, end_ns) of each row (:func:`_context_keys`' columns)
        self.columns: tuple[np.ndarray, ...] | None = None

    def __getattr__(self, name: str) -> np.ndarray:
        if name == "rows" and self.__dict__.get("_table") is not None:  # only the numpy searches read them
            k = self._table.kind
            rows = self.__dict__["rows"] = np.flatnonzero(((k == Kind.RANGE) & (self._table.device < 0)) | (k == Kind.CPU_OP))
            return rows
        if name not in _Contexts.FIELDS:
            raise AttributeError(name)
        a = self.__dict__[name] = self.by_key[name][self.rk]
        return a


def _phase_levels(rules: Sequence[PhaseRule]) -> list[int]:
    """The priority levels of ``rules`` that give a phase (and the autograd rule's), highest first."""
    return sorted({r.priority for r in rules if r.phase is not None} | {AUTOGRAD_THREAD_RULE.priority}, reverse=True)


def _member_bits(module, scope, op, phase, prio, levels: list[int]) -> np.ndarray:
    """The fused sweep's category bits (:data:`_CAT_MODULE` ...) of contexts with these facts."""
    asc = np.asarray(levels[::-1], dtype=np.int64)  # level index of each priority, -1 none
    j = np.minimum(np.searchsorted(asc, prio), len(asc) - 1)
    lv = np.where((asc[j] == prio) & (phase >= 0), len(asc) - 1 - j, -1)
    bits = (module.astype(np.int64) << _CAT_MODULE) | (scope.astype(np.int64) << _CAT_SCOPE) | (op.astype(np.int64) << _CAT_OP)
    bits |= ((phase == BACKWARD).astype(np.int64) << _CAT_BW) | np.where(lv >= 0, np.int64(1) << (_CAT_LEVEL0 + np.maximum(lv, 0)), 0)
    return bits


def _classify_names(names: list[str], used: np.ndarray, rules: Sequence[PhaseRule]):
    """Per-name facts (arrays over name ids; only ``used`` ids are filled). Whatever depends on
    the display name alone is worked out once per distinct one (emit_nvtx names are unique per
    call, their display names are not)."""
    n = len(names)
    display = list(names)
    ids = np.flatnonzero(used)
    compiled = [(re.compile(r.pattern), r.ops_only) for r in rules]
    keys: dict[tuple[str, bool], int] = {}  # distinct (display name, emit_nvtx suffix?) -> index
    kind, mod, hashed = [], [], []
    for i in ids.tolist():  # one iteration per distinct context name
        s = names[i]
        base = _nvtx_base(s) if ", " in s else None
        key = (s, False) if base is None else (base, True)
        display[i] = key[0]
        j = keys.get(key)
        if j is None:
            j = keys[key] = len(keys)
        kind.append(j)
        mod.append(s.startswith("nn.Module: "))
        hashed.append("#" in s)
    per_key = [(bool(_IDENT_RE.match(base)) if sfx else bool(_NAMESPACED_RE.match(base)), *_first_rules(compiled, base))
               for base, sfx in keys]  # one per distinct display name
    f = np.array(per_key, dtype=np.int64).reshape(-1, 3)[np.array(kind, dtype=np.int64)]
    module, has_hash, nvtx_op = (np.zeros(n, dtype=bool) for _ in range(3))
    rule, op_rule = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    module[ids], has_hash[ids] = np.array(mod, bool), np.array(hashed, bool)
    nvtx_op[ids], rule[ids], op_rule[ids] = f[:, 0] != 0, f[:, 1], f[:, 2]
    return display, module, nvtx_op, has_hash, rule, op_rule


def _first_rules(compiled: list, base: str) -> tuple[int, int]:
    """(first rule any context of this display name takes, first rule an op takes), -1 none."""
    r_any = r_op = -1
    for j, (rx, ops_only) in enumerate(compiled):
        if rx.search(base, 0, NAME_PREFIX):  # bounded cost per name
            if r_op < 0:
                r_op = j
            if not ops_only:
                r_any = j
                break
    return r_any, r_op


def _classify_contexts(table: EventTable, rules: Sequence[PhaseRule]) -> _Contexts:
    """Find the context rows of ``table`` and classify them (module / op / scope, phase rule).

    What a context says depends only on (name, CPU_OP or not, ``python_function`` category or
    not): each distinct such key present is classified once (:func:`_classify_keys`), and the
    rows take their key's answers."""
    names = table.names
    py_id = [i for i, s in enumerate(names) if s == "python_function"]
    rows, _, counts, all_cpu_side, more = _context_keys(table.kind, table.device, table.name_id, table.cat_id, py_id, len(names),
                                                        columns=(table.pid, table.tid, table.start_ns, table.end_ns), rows=False)
    rk, name_id, *columns = more
    present = np.flatnonzero(counts)  # sorted distinct keys
    k = _classify_keys(names, present, rules)
    k["member"] = _member_bits(k["module"], k["scope"], k["op"], k["phase"], k["prio"], _phase_levels(rules))
    ctx = _Contexts(rows, rk, {f: k[f] for f in _Contexts.FIELDS}, k["comp_names"], k["op_names"], table)
    ctx.name_id = name_id
    ctx.columns = tuple(columns)
    ctx.all_cpu_side = all_cpu_side
    return ctx


#: :func:`_context_keys` compiles its two passes from this many table rows ("auto")
CONTEXT_KEYS_MIN = 50_000


def _context_keys(kind: np.ndarray, device: np.ndarray, name_id: np.ndarray, cat_id: np.ndarray, py_id: list[int],
                  n_names: int, method: str = "auto", columns: tuple | None = None, rows: bool = True) -> tuple:
    """The context rows of table columns (length n each: ``kind``, ``device``, ``name_id``,
    ``cat_id``; ``py_id``: the name ids of ``python_function``, ``n_names`` names): CPU-side
    RANGE rows and CPU_OP rows. Returns (rows int64 (m,), their keys int64 (m,):
    ``name_id * 4 + 2 * is CPU_OP + is python_function``, key counts int64 (4 * n_names,), no
    CPU_OP row on a device). Two compiled passes (:func:`_context_keys_kernel`) from
    :data:`CONTEXT_KEYS_MIN` rows when numba is there ("auto"; "compiled" whatever the size,
    "python" the kernel uncompiled, "numpy" never), else numpy passes; the same answers.

    ``columns``: the table's (pid, tid, start_ns, end_ns) (length n each); the keys are then not
    kept (None in their place) and a fifth item is returned, arrays (m,) each: (each row's index
    among the keys present (rank of its key among the nonzero counts; int32), its name id, its
    pid, tid, start_ns, end_ns (int64)), written by the same passes when compiled.

    ``rows`` False: the compiled passes (with ``columns``) do not keep the rows (None in their
    place; the caller needs their count only, which the columns give).

    Raises:
        IndexError, ValueError: a context row's name id outside ``[0, n_names)`` (numpy's
            errors, whichever method).
    """
    fn = jit.kernel_for(_context_keys_kernel, len(kind), CONTEXT_KEYS_MIN, method)
    if columns is not None and 4 * n_names >= 1 << 31:  # the kernel keeps the keys in int32 meanwhile
        fn = None
    if fn is not None:
        is_py = np.zeros(max(n_names, 1), np.bool_)
        is_py[py_id] = True
        e = np.zeros(0, np.int64)
        cols = e, e, e, e
        if columns is not None:
            cols = tuple(np.ascontiguousarray(c, np.int64) for c in columns)
        keep_rows = rows or columns is None
        rows, key, counts, all_cpu, ok, more = jit.call(
            fn, np.ascontiguousarray(kind, np.uint8), np.ascontiguousarray(device, np.int32),
            np.ascontiguousarray(name_id, np.int32), np.ascontiguousarray(cat_id, np.int32), is_py, bool(py_id), n_names,
            np.uint8(Kind.RANGE), np.uint8(Kind.CPU_OP), columns is not None, *cols, keep_rows)
        if ok:
            return (rows if keep_rows else None, None if columns is not None else key, counts, bool(all_cpu)) + ((more,) if columns is not None else ())
        # a name id out of range: the numpy passes raise numpy's error
    is_op, cpu_side = kind == Kind.CPU_OP, device < 0
    rows = np.flatnonzero(((kind == Kind.RANGE) & cpu_side) | is_op)
    key = name_id[rows].astype(np.int64)
    key *= 2
    key += kind[rows] == Kind.CPU_OP
    key *= 2
    if py_id:
        cat = cat_id[rows]
        if len(cat) and int(cat.min()) >= 0 and int(cat.max()) < n_names:  # a lookup table over the names
            is_py = np.zeros(n_names, bool)
            is_py[py_id] = True
            key += is_py[cat]
        else:
            key += np.isin(cat, py_id)
    counts = np.bincount(key, minlength=4 * n_names)
    if len(counts) > 4 * n_names:
        raise IndexError(f"name id {int(key.max()) >> 2} out of range for {n_names} names")
    out = rows, key, counts, not bool((is_op & ~cpu_side).any())
    if columns is None:
        return out
    present = np.flatnonzero(counts)
    at = np.zeros(4 * n_names, dtype=np.int64)
    at[present] = np.arange(len(present))
    return (rows, None) + out[2:] + ((at[key].astype(np.int32), key >> 2, *(c[rows].astype(np.int64, copy=False) for c in columns)),)


def _context_keys_kernel(kind, device, name_id, cat_id, is_py, use_py, n_names, k_range, k_op, want_cols, pid, tid, start,
                         end, want_rows=True):
    """:func:`_context_keys`'s passes: count the context rows, then fill rows (``want_rows``;
    else an empty array), keys and key counts (and, ``want_cols``, the rows' pid, tid, start,
    end and name id, then their key's rank among the present keys: the fifth item, empty arrays
    otherwise); ``ok`` False (nothing filled) when a context row's name id is out of range."""
    n = len(kind)
    m = 0
    all_cpu = True
    for i in range(n):
        k = kind[i]
        if k == k_op:
            m += 1
            if device[i] >= 0:
                all_cpu = False
        elif k == k_range and device[i] < 0:
            m += 1
    rows = np.empty(m if want_rows else 0, np.int64)
    key = np.empty(0 if want_cols else m, np.int64)  # with the columns: the keys in rk, ranked in place after
    counts = np.zeros(4 * n_names, np.int64)
    mc = m if want_cols else 0
    rk = np.empty(mc, np.int32)
    nm_out = np.empty(mc, np.int64)
    c_pid = np.empty(mc, np.int64)
    c_tid = np.empty(mc, np.int64)
    c_start = np.empty(mc, np.int64)
    c_end = np.empty(mc, np.int64)
    more = (rk, nm_out, c_pid, c_tid, c_start, c_end)
    n_py = len(is_py)
    j = 0
    for i in range(n):
        k = kind[i]
        is_op = k == k_op
        if is_op or (k == k_range and device[i] < 0):
            nm = name_id[i]
            if nm < 0 or nm >= n_names:
                return rows[:0], key[:0], counts, all_cpu, False, more
            x = np.int64(nm) * 4
            if is_op:
                x += 2
            c = cat_id[i]
            if use_py and c >= 0 and c < n_py and is_py[c]:
                x += 1
            if want_rows:
                rows[j] = i
            counts[x] += 1
            if want_cols:
                rk[j] = x
                nm_out[j] = nm
                c_pid[j] = pid[i]
                c_tid[j] = tid[i]
                c_start[j] = start[i]
                c_end[j] = end[i]
            else:
                key[j] = x
            j += 1
    if want_cols:
        at = np.empty(4 * n_names, np.int32)  # a key's rank among the present keys
        r = 0
        for x in range(4 * n_names):
            at[x] = r
            if counts[x] > 0:
                r += 1
        for j in range(m):
            rk[j] = at[rk[j]]
    return rows, key, counts, all_cpu, True, more


def _classify_keys(names: list[str], key: np.ndarray, rules: Sequence[PhaseRule]) -> dict:
    """Module / op / scope flags, phase and priority of the rule, layer component and op label of
    each context key (``name_id * 4 + 2 * is CPU_OP + is python_function``; sorted, distinct)."""
    used = np.zeros(len(names), dtype=bool)
    name = key // 4
    used[name] = True
    display, module_n, nvtx_op_n, hash_n, rule_n, op_rule_n = _classify_names(names, used, rules)
    is_op_kind = (key & 2) != 0
    python = (key & 1) != 0
    module = module_n[name] & ~is_op_kind
    op = np.where(is_op_kind, ~hash_n[name], nvtx_op_n[name] & ~python) & ~module
    rule = np.where(op, op_rule_n[name], rule_n[name])
    phase_codes = np.array([PHASE_CODE[r.phase] if r.phase is not None else -1 for r in rules] + [-1], dtype=np.int64)
    prio = np.array([r.priority for r in rules] + [0], dtype=np.int64)
    rule_i = np.where(rule >= 0, rule, len(rules))
    phase = phase_codes[rule_i]
    structural = (rule >= 0) & (phase < 0)
    scope = ~module & ~op & ~structural & np.where(is_op_kind, hash_n[name], ~python)

    comp_names: list[str] = []
    comp_of_name = np.full(len(names), -1, dtype=np.int64)
    for i in sorted_unique(name[module | scope]).tolist():  # distinct layer component names
        m = _MODULE_RE.match(names[i]) if module_n[i] else None
        comp_of_name[i] = len(comp_names)
        comp_names.append(m.group(1) if m else display[i])
    op_of_name = np.full(len(names), -1, dtype=np.int64)
    op_ids: dict[str, int] = {}
    for i in sorted_unique(name[op]).tolist():  # distinct op names
        op_of_name[i] = op_ids.setdefault(display[i], len(op_ids))
    return {"module": module, "op": op, "scope": scope, "phase": phase, "prio": prio[rule_i],
            "comp": np.where(module | scope, comp_of_name[name], -1), "op_name": np.where(op, op_of_name[name], -1),
            "comp_names": comp_names, "op_names": list(op_ids)}


# ---------------------------------------------------------------------------------------------
# main entry


@small_pages
def map_events(table: EventTable, rules: Sequence[PhaseRule] = PHASE_RULES, method: str = "auto") -> Mapping:
    """Layer path, framework op and phase of every RUNTIME and GPU task row of ``table``.

    Phase of a runtime call (GPU rows take their launching call's phase):

    1. Each context name takes the first rule of ``rules`` whose pattern it matches (``ops_only``
       rules only for framework ops). Among the contexts enclosing the call whose rule gives a
       phase, the highest priority wins; on equal priority the innermost.
    2. A thread where backward contexts enclose more than :data:`AUTOGRAD_THREAD_SHARE` of the
       enclosed runtime calls is an autograd engine thread: every call on it counts as enclosed
       by a backward context of priority ``AUTOGRAD_THREAD_RULE.priority`` (2: above the "any op
       is forward" default, below every named rule).
    3. No phase from 1-2: ``other`` when some context (or rule 2) encloses the call, else
       ``unmapped``.
    4. GPU tasks whose name matches :data:`COMM_KERNEL_PATTERN` (NCCL/RCCL kernels) are
       ``communication`` whatever launched them; GPU tasks without a launching call are otherwise
       ``unmapped``.

    Gap phase and gap layer of a runtime call r: the gap is ``[prev_end, r.start]``, ``prev_end``
    the largest end of the earlier runtime calls of its thread (the table's earliest timestamp for
    its first call; clamped to ``r.start``). The contexts enclosing the gap's midpoint (a point
    query, same thread) decide, by rules 1-3 above (rule 2 on the threads the calls made autograd
    threads).

    Other rows (CPU_OP, RANGE, SYNC, MARKER) stay ``unmapped`` with no layer or op. Never raises
    for a readable table; a table without annotations maps every row ``unmapped``.

    ``method`` (same results whichever): "auto" answers a thread's interval searches in one
    compiled sweep (:func:`_sweep_fused`) from :data:`SWEEP_MIN` contexts + queries when numba
    is there, else one numpy search per context class, and writes the sweep's answers into the
    row maps by one more compiled pass (:func:`_finish_thread`); "numpy" always the numpy
    searches; "fused" the compiled passes whatever the size; "fused-np" the compiled sweep
    whatever the size with numpy steps after it; "fused-py" the sweep and the pass after it
    uncompiled (tests).
    """
    kind = table.kind
    out = _RowMaps.empty(len(table))
    counts: dict[str, int] = {}
    intern = _Interner()
    autograd_threads: list[tuple[int, int]] = []

    rt_rows, gpu_rows = task_rows(kind)
    ctx = _classify_contexts(table, rules) if len(rt_rows) else None
    threads = call_threads(table, rt_rows)
    if ctx is not None and ctx.n:
        autograd_threads = _map_runtime_calls(table, rules, ctx, rt_rows, out, intern, method, threads)
    cpu_range_columns = None
    if ctx is not None and ctx.n and ctx.all_cpu_side:
        cpu_range_columns = (*ctx.columns, ctx.name_id)
    launch_unique = False
    if len(gpu_rows):
        launch_unique = _map_gpu_rows(table, rt_rows, gpu_rows, out, counts)
    phase, gap_phase = out.phase, out.gap_phase
    counts["runtime calls"] = len(rt_rows)
    counts["runtime calls unmapped"] = int(np.count_nonzero(phase[rt_rows] == UNMAPPED))
    counts["GPU tasks"] = len(gpu_rows)
    counts["GPU tasks unmapped"] = int(np.count_nonzero(phase[gpu_rows] == UNMAPPED))
    counts["CPU gaps before runtime calls unmapped"] = int(np.count_nonzero(gap_phase[rt_rows] == UNMAPPED))
    return Mapping(
        phase, out.layer_id, out.op_id, out.launch_row, intern.labels, autograd_threads, counts, gap_phase, out.gap_layer_id,
        launch_unique, threads, cpu_range_columns,
    )


@dataclass
class _RowMaps:
    """The per-row results of :func:`map_events` (arrays over table rows), filled in place."""

    phase: np.ndarray  #: uint8 phase code
    layer_id: np.ndarray  #: int32 label id of the layer path, -1 none
    op_id: np.ndarray  #: int32 label id of the innermost framework op, -1 none
    launch_row: np.ndarray  #: int64 launching RUNTIME row of GPU task rows, -1 none
    gap_phase: np.ndarray  #: uint8 phase code of the CPU gap before each RUNTIME row
    gap_layer_id: np.ndarray  #: int32 label id of that gap's layer path, -1 none

    @classmethod
    def empty(cls, n_rows: int) -> "_RowMaps":
        """Every row unmapped, without layer, op or launch."""
        return cls(
            phase=np.zeros(n_rows, dtype=np.uint8),
            layer_id=np.full(n_rows, -1, dtype=np.int32),
            op_id=np.full(n_rows, -1, dtype=np.int32),
            launch_row=np.full(n_rows, -1, dtype=np.int64),
            gap_phase=np.zeros(n_rows, dtype=np.uint8),
            gap_layer_id=np.full(n_rows, -1, dtype=np.int32),
        )


@dataclass
class _ThreadContexts:
    """The contexts of one thread: ``c`` indexes the arrays of ``ctx``; start/end in ns."""

    ctx: _Contexts
    c: np.ndarray
    cs: np.ndarray  #: start_ns of each context
    ce: np.ndarray  #: end_ns of each context

    def subset(self, mask: np.ndarray) -> tuple[_Enclosers, np.ndarray]:
        """(interval finder of the contexts selected by ``mask``, their ``ctx`` indices in its sorted order)."""
        enc = _Enclosers(self.cs[mask], self.ce[mask])
        return enc, self.c[mask][enc.order]


def _map_runtime_calls(
    table: EventTable, rules: Sequence[PhaseRule], ctx: _Contexts, rt_rows: np.ndarray, out: _RowMaps, intern: _Interner,
    method: str = "auto", threads: "CallThreads | None" = None,
) -> list[tuple[int, int]]:
    """Fill layer, op and phase of the RUNTIME rows and of the gaps before them, thread by thread.

    Each thread's queries are its calls ``[start, end]``, then the midpoints of the gaps before
    them. Returns the (pid, tid) of the threads found to be autograd engine threads. ``method``:
    see :func:`map_events`.
    """
    autograd_threads: list[tuple[int, int]] = []
    op_label = np.array([intern(s) for s in ctx.op_names] + [-1], dtype=np.int64)
    levels = _phase_levels(rules)
    start, end = table.start_ns, table.end_ns
    c_pid, c_tid, c_start, c_end = ctx.columns
    group = _group_kernel(method, ctx.n + 2 * len(rt_rows)) if threads is not None and len(rt_rows) else None
    if group is not None:  # contexts grouped by thread in one compiled pass, gap midpoints in thread order
        per_thread = _grouped_threads(group, table, rt_rows, threads, ctx.columns)
    else:
        gap_mid = _gap_midpoints(table, rt_rows, threads, by_row=True)  # read at rt_rows only
        per_thread = ((key, q, c, None, gap_mid[q]) for key, q, c in _by_thread(table, rt_rows, ctx.rows, (c_pid, c_tid)))
    for (pid, tid), q, c, in_order, mid in per_thread:  # one iteration per thread
        nq = len(q)
        fn = _fused_kernel(method, len(c) + 2 * nq)
        fin = _finish_kernel(method) if fn is not None else None
        if fin is not None:  # queries made, and the sweep's answers written into ``out``, by compiled passes
            qs, qe, qo, ok = jit.call(_finish_kernel(method, _thread_queries), np.ascontiguousarray(q, np.int64), start, end,
                                      np.ascontiguousarray(mid, np.int64))
            if _thread_fused(fn, ctx, c, in_order, qs, qe, nq, levels, intern, op_label, finish=(fin, q, out),
                             qo=qo if ok else np.argsort(qs, kind="stable")):
                autograd_threads.append((pid, tid))
            continue
        qs = np.concatenate([start[q], mid])
        qe = np.concatenate([end[q], mid])
        if fn is not None:  # every interval search of the thread in one compiled sweep
            lay, op_ids, ph, is_autograd = _thread_fused(fn, ctx, c, in_order, qs, qe, nq, levels, intern, op_label)
        else:
            whole = len(c) == ctx.n  # the thread has every context (c ascending, distinct: c is arange)
            th = _ThreadContexts(ctx, c, c_start if whole else c_start[c], c_end if whole else c_end[c])
            lay = _layer_ids(th, qs, qe, intern)
            op_ids = _op_ids(th, qs[:nq], qe[:nq], op_label) if ctx.op[c].any() else None
            ph, is_autograd = _thread_phases(th, qs, qe, nq, levels)
        out.layer_id[q] = lay[:nq]
        out.gap_layer_id[q] = lay[nq:]
        if op_ids is not None:
            out.op_id[q] = op_ids
        if is_autograd:
            autograd_threads.append((pid, tid))
        out.phase[q] = ph[:nq]
        out.gap_phase[q] = ph[nq:]
    return autograd_threads


def _group_kernel(method: str, size: int):
    """:func:`_group_contexts` to use for ``size`` contexts + queries (compiled; uncompiled for
    "fused-py"), or None for :func:`_by_thread` (``method`` "numpy", or "auto" below
    :data:`SWEEP_MIN` / without numba)."""
    if method == "fused-py":
        return _group_contexts if size < 1 << 31 else None
    if method == "numpy" or not jit.wanted(size, SWEEP_MIN, forced=method in ("fused", "fused-np")) or size >= 1 << 31:
        return None
    return _with_first_pair(_group_contexts)


def _grouped_threads(fn, table: EventTable, rt_rows: np.ndarray, threads: "CallThreads", columns: tuple):
    """What :func:`_map_runtime_calls` iterates, by :func:`_group_contexts` (``fn``): per thread
    with calls and contexts, in (pid, tid) order, ((pid, tid), its calls (ascending rows), its
    context indices (ascending), whether those are in sweep order, the gap midpoints of its calls);
    the threads, calls and contexts :func:`_by_thread` yields, and :func:`_gap_midpoints`."""
    c_pid, c_tid, c_start, c_end = columns
    firsts = np.flatnonzero(threads.new_thread)
    th_pid = table.pid[threads.rt_rows[firsts]].astype(np.int64)
    th_tid = table.tid[threads.rt_rows[firsts]].astype(np.int64)
    idx, off, in_order = jit.call(fn, c_pid, c_tid, c_start, c_end, th_pid, th_tid)
    mid = _gap_midpoints(table, rt_rows, threads, in_thread_order=True)
    bounds = np.append(firsts, len(threads.rt_rows)).tolist()
    off = off.tolist()
    for k in range(len(firsts)):
        if off[k + 1] > off[k]:
            a, b = bounds[k], bounds[k + 1]
            yield ((int(th_pid[k]), int(th_tid[k])), threads.rt_rows[a:b], idx[off[k]:off[k + 1]], bool(in_order[k]),
                   mid[a:b])


def _fused_kernel(method: str, size: int):
    """The fused sweep to use for a thread of ``size`` contexts + queries, or None for the
    per-search numpy path (``method`` "numpy", or "auto" below :data:`SWEEP_MIN` / without numba)."""
    if method == "fused-py":
        return _sweep_fused
    if method == "numpy" or not jit.wanted(size, SWEEP_MIN, forced=method in ("fused", "fused-np")):
        return None
    reach = jit.compiled(_reach)  # the kernel's helpers, compiled and bound to the names it calls them by
    if reach is None:
        return None
    globals()["_reach_c"] = reach
    return jit.compiled_calling(globals(), "_push_c", _push, _sweep_fused)


def _query_order(qs: np.ndarray, nq: int) -> np.ndarray:
    """An order of the queries ``qs`` (the ``nq`` call starts, then their gap midpoints) with
    ``qs`` ascending: each call's gap midpoint before its start, when that is ascending (calls in
    start order, as the gap rule makes the midpoint of call i lie between the starts of calls
    i - 1 and i), else a stable argsort. The fused sweep's answers do not depend on the order
    among equal ``qs``."""
    qo = np.empty(len(qs), np.int64)
    qo[0::2] = np.arange(nq, len(qs))
    qo[1::2] = np.arange(nq)
    s = qs[qo]
    if bool(np.all(s[1:] >= s[:-1])):
        return qo
    return np.argsort(qs, kind="stable")


def _thread_fused(fn, ctx: _Contexts, c: np.ndarray, in_order: bool | None, qs: np.ndarray, qe: np.ndarray, nq: int,
                  levels: list[int], intern: _Interner, op_label: np.ndarray, finish=None, qo=None):
    """(layer ids, op ids of the calls or None, phase codes, is autograd thread) of one thread's
    queries by one :func:`_sweep_fused` pass over its contexts ``c`` (indices into ``ctx``,
    ascending; ``in_order``: they are in (start asc, end desc) order already, None: unknown);
    the same answers as :func:`_layer_ids`, :func:`_op_ids` and :func:`_thread_phases` (a
    category's members keep the order the thread's (start asc, end desc) sort gives them, which
    is their own sort).

    ``finish``: (:func:`_finish_thread` to run, the thread's call rows (nq,), the
    :class:`_RowMaps` to fill): the answers are written into the row maps at those rows (calls
    and gaps) by that pass instead, and only whether the thread is an autograd thread returned.
    ``qo``: the queries' sweep order when the caller has it (else :func:`_query_order`)."""
    c_start, c_end = ctx.columns[2], ctx.columns[3]
    srt = c
    if not in_order:
        enc = _Enclosers(c_start[c], c_end[c])
        if not enc.identity:
            srt = c[enc.order]
    bk = ctx.by_key
    (hit_mod, hit_scope, op_hit, ph, lev, enclosed, n_bw, counts, sub_mod, par_mod, sub_scope, par_scope) = jit.call(
        fn, c_start, c_end, np.ascontiguousarray(srt), ctx.rk, bk["member"], bk["phase"], op_label[bk["op_name"]],
        _CAT_LEVEL0 + len(levels), _CAT_LEVEL0, np.ascontiguousarray(qs, np.int64), np.ascontiguousarray(qe, np.int64),
        _query_order(qs, nq) if qo is None else qo, nq)
    if finish is not None:
        fin, rows, out = finish
        path = [_path_labels(par, bk["comp"][ctx.rk[srt[sub]]], ctx.comp_names, intern)
                for sub, par in ((sub_mod, par_mod), (sub_scope, par_scope))]
        is_autograd = bool(counts[_CAT_BW]) and _is_autograd(int(n_bw), int(np.count_nonzero(enclosed[:nq])))
        ag = AUTOGRAD_THREAD_RULE.priority
        jit.call(fin, np.ascontiguousarray(rows, np.int64), nq, hit_mod, path[0], hit_scope, path[1], op_hit,
                 bool(counts[_CAT_OP]), ph, lev, enclosed, is_autograd, levels.index(ag) if ag in levels else -2,
                 PHASE_CODE[AUTOGRAD_THREAD_RULE.phase], OTHER, UNMAPPED, out.layer_id, out.gap_layer_id, out.op_id, out.phase,
                 out.gap_phase)
        return is_autograd
    lay = np.full(len(qs), -1, dtype=np.int64)
    for sub, par, hit in ((sub_mod, par_mod, hit_mod), (sub_scope, par_scope, hit_scope)):
        if not len(sub):
            continue
        paths = _path_labels(par, bk["comp"][ctx.rk[srt[sub]]], ctx.comp_names, intern)
        take = (hit >= 0) & (lay < 0)
        lay[take] = paths[hit[take]]
    op_ids = op_hit if counts[_CAT_OP] else None
    ph, is_autograd = _phases_from_hits(int(n_bw), ph, lev, bool(counts[_CAT_BW]), enclosed, nq, levels)
    return lay, op_ids, ph, is_autograd


def _phases_from_hits(n_bw: int, ph: np.ndarray, lev: np.ndarray, has_bw: bool, enclosed: np.ndarray,
                      nq: int, levels: list[int]) -> tuple[np.ndarray, bool]:
    """:func:`_thread_phases` from the fused sweep's answers (``n_bw``: calls with an enclosing
    backward context; ``ph``: per query, the phase of the context its first level with a hit
    gives, -1 none; ``has_bw``: the thread has backward contexts; ``enclosed``: some context of
    the thread encloses the query)."""
    is_autograd = has_bw and _is_autograd(n_bw, int(np.count_nonzero(enclosed[:nq])))
    if is_autograd:
        enclosed[:] = True
    if is_autograd and AUTOGRAD_THREAD_RULE.priority in levels:  # below its level: the autograd rule
        ph[(lev < 0) | (lev > levels.index(AUTOGRAD_THREAD_RULE.priority))] = PHASE_CODE[AUTOGRAD_THREAD_RULE.phase]
    return np.where(ph >= 0, ph, np.where(enclosed, OTHER, UNMAPPED)).astype(np.uint8), is_autograd


def _is_autograd(n_bw: int, n_enclosed: int) -> bool:
    """Rule 2 of :func:`map_events`: a thread with backward contexts whose ``n_enclosed`` calls
    enclosed by some context include ``n_bw`` with a backward one is an autograd engine thread
    when those are more than :data:`AUTOGRAD_THREAD_SHARE` of them (decided by the calls alone)."""
    return n_enclosed > 0 and bool(n_bw > AUTOGRAD_THREAD_SHARE * n_enclosed)


def _finish_kernel(method: str, kernel=None):
    """``kernel`` (default :func:`_finish_thread`, to run after the fused sweep; or
    :func:`_thread_queries`) compiled, uncompiled for "fused-py", or None for the numpy steps
    (``method`` "fused-np", or without numba)."""
    kernel = _finish_thread if kernel is None else kernel
    if method == "fused-py":
        return kernel
    if method == "fused-np":
        return None
    return jit.compiled(kernel)


def _thread_queries(q, start, end, mid):
    """One thread's queries for the fused sweep, as :func:`_map_runtime_calls`' numpy steps and
    :func:`_query_order` make them: ``qs`` = (the calls' ``start`` at rows ``q``, then the gap
    midpoints ``mid``), ``qe`` = (their ``end``, then ``mid``) (int64, (2 nq,)), and ``qo``,
    each call's gap midpoint before its start, with ``ok`` whether ``qs[qo]`` is ascending (else
    the caller sorts)."""
    nq = len(q)
    qs = np.empty(2 * nq, np.int64)
    qe = np.empty(2 * nq, np.int64)
    qo = np.empty(2 * nq, np.int64)
    ok = True
    last = np.int64(0)
    for i in range(nq):
        r = q[i]
        s = np.int64(start[r])
        m = mid[i]
        qs[i] = s
        qe[i] = end[r]
        qs[nq + i] = m
        qe[nq + i] = m
        qo[2 * i] = nq + i
        qo[2 * i + 1] = i
        if m > s or (i > 0 and m < last):
            ok = False
        last = s
    return qs, qe, qo, ok


def _finish_thread(rows, nq, hit_mod, path_mod, hit_scope, path_scope, op_hit, has_op, ph, lev, enclosed, autograd,
                   ag_level, ag_code, other, unmapped, layer_id, gap_layer_id, op_id, phase, gap_phase):
    """What :func:`_thread_fused` and :func:`_phases_from_hits` make of one thread's fused-sweep
    answers (queries: the ``nq`` calls at table rows ``rows``, then their gap midpoints), written
    into the row maps (``layer_id``, ``gap_layer_id``, ``op_id`` int32; ``phase``, ``gap_phase``
    uint8; over table rows) in one pass: the layer is the module path of the query's module hit
    (``path_mod[hit_mod]``), else the scope path of its scope hit, else -1; the op (calls, when
    ``has_op``) the op hit; the phase the first level's hit ``ph`` (level ``lev``), on an
    ``autograd`` thread replaced by ``ag_code`` when that level is below the autograd rule's
    (``ag_level``, -2 when the rule is not among the levels), else ``other`` when some context
    (or the autograd rule) encloses the query, else ``unmapped``."""
    for t in range(2 * nq):
        r = rows[t] if t < nq else rows[t - nq]
        lay = -1
        h = hit_mod[t]
        if h >= 0:
            lay = path_mod[h]
        if lay < 0:
            h = hit_scope[t]
            if h >= 0:
                lay = path_scope[h]
        p = ph[t]
        if autograd and ag_level > -2 and (lev[t] < 0 or lev[t] > ag_level):
            p = ag_code
        if p < 0:
            p = other if (autograd or enclosed[t]) else unmapped
        if t < nq:
            layer_id[r] = lay
            phase[r] = p
            if has_op:
                op_id[r] = op_hit[t]
        else:
            gap_layer_id[r] = lay
            gap_phase[r] = p


def _layer_ids(th: _ThreadContexts, qs: np.ndarray, qe: np.ndarray, intern: _Interner) -> np.ndarray:
    """Label id of the layer path of each query ``[qs, qe]``: module chain, else scope chain; -1 none."""
    ctx, c = th.ctx, th.c
    lay = np.full(len(qs), -1, dtype=np.int64)
    for mask in (ctx.module[c], ctx.scope[c]):
        if not mask.any():
            continue
        enc, srt = th.subset(mask)
        paths = _path_labels(enc.parents(), ctx.comp[srt], ctx.comp_names, intern)
        hit = enc.innermost(qs, qe)
        take = (hit >= 0) & (lay < 0)
        lay[take] = paths[hit[take]]
    return lay


def _op_ids(th: _ThreadContexts, qs: np.ndarray, qe: np.ndarray, op_label: np.ndarray) -> np.ndarray:
    """Label id of the innermost framework op enclosing each call ``[qs, qe]``; -1 none."""
    ctx = th.ctx
    enc, srt = th.subset(ctx.op[th.c])
    hit = enc.innermost(qs, qe)
    ok = hit >= 0
    ids = np.full(len(qs), -1, dtype=np.int64)
    ids[ok] = op_label[ctx.op_name[srt[hit[ok]]]]
    return ids


def _thread_phases(th: _ThreadContexts, qs: np.ndarray, qe: np.ndarray, nq: int, levels: list[int]) -> tuple[np.ndarray, bool]:
    """(uint8 phase code of each query, whether the thread is an autograd engine thread).

    The first ``nq`` queries are the calls (they alone decide the autograd test). A query takes
    the highest priority level with an enclosing context, the innermost within it.
    """
    ctx = th.ctx
    enclosed = _Enclosers(th.cs, th.ce).any_enclosing(qs, qe)
    c_phase, c_prio = ctx.phase[th.c], ctx.prio[th.c]
    bw = c_phase == BACKWARD
    is_autograd = False
    if bw.any() and enclosed[:nq].any():  # decided by the calls alone
        bw_enc = _Enclosers(th.cs[bw], th.ce[bw]).any_enclosing(qs[:nq], qe[:nq])
        is_autograd = bool(bw_enc.sum() > AUTOGRAD_THREAD_SHARE * enclosed[:nq].sum())
    if is_autograd:
        enclosed[:] = True
    ph = np.full(len(qs), -1, dtype=np.int64)
    for p in levels:
        todo = np.flatnonzero(ph < 0)
        if len(todo) == 0:
            break
        mask = (c_prio == p) & (c_phase >= 0)
        if mask.any():
            enc, srt = th.subset(mask)
            hit = enc.innermost(qs[todo], qe[todo])
            ok = hit >= 0
            ph[todo[ok]] = ctx.phase[srt[hit[ok]]]
        if is_autograd and p == AUTOGRAD_THREAD_RULE.priority:
            ph[ph < 0] = PHASE_CODE[AUTOGRAD_THREAD_RULE.phase]
    return np.where(ph >= 0, ph, np.where(enclosed, OTHER, UNMAPPED)).astype(np.uint8), is_autograd


#: :func:`_map_gpu_rows` and :meth:`Mapping.for_nodes` run their compiled passes from this many rows ("auto")
GPU_ROWS_MIN = 50_000


def _map_gpu_rows(table: EventTable, rt_rows: np.ndarray, gpu_rows: np.ndarray, out: _RowMaps, counts: dict[str, int],
                  method: str = "auto") -> bool:
    """GPU task rows inherit phase, layer and op from their launching call; NCCL/RCCL kernels are
    communication. Returns whether no two runtime calls share a (process, correlation id).
    ``method``: the inheriting as one compiled pass (:func:`_inherit_kernel`) from
    :data:`GPU_ROWS_MIN` GPU rows when numba is there ("auto"; "compiled" whatever the size,
    "python" the kernel uncompiled, "numpy" never), else numpy scatters; the same answers."""
    lr, dup = launch_rows(table, rt_rows, gpu_rows)
    missing = _inherit(gpu_rows, lr, out, method)
    g_names = table.name_id[gpu_rows]
    rx = re.compile(COMM_KERNEL_PATTERN)
    comm_names = np.zeros(len(table.names), dtype=bool)
    for i in sorted_unique(g_names).tolist():  # one iteration per distinct GPU task name
        comm_names[i] = is_comm_kernel_name(table.names[i], rx)
    comm = comm_names[g_names]
    out.phase[gpu_rows[comm]] = COMMUNICATION
    counts["GPU tasks without a launching call"] = missing
    counts["GPU tasks named as NCCL/RCCL kernels (communication)"] = int(np.count_nonzero(comm))
    return not bool(dup.any())


def _inherit(gpu_rows: np.ndarray, lr: np.ndarray, out: _RowMaps, method: str = "auto") -> int:
    """Write each GPU row's launch row ``lr`` (int64 runtime rows aligned with ``gpu_rows``, -1
    none) into ``out``, and the launching row's phase, layer and op at the rows that have one;
    returns how many have none. See :func:`_map_gpu_rows` for ``method``."""
    fn = jit.kernel_for(_inherit_kernel, len(gpu_rows), GPU_ROWS_MIN, method)
    if fn is not None:
        return int(jit.call(fn, np.ascontiguousarray(gpu_rows, np.int64), np.ascontiguousarray(lr, np.int64), out.launch_row,
                            out.phase, out.layer_id, out.op_id))
    out.launch_row[gpu_rows] = lr
    has = lr >= 0
    out.phase[gpu_rows[has]] = out.phase[lr[has]]
    out.layer_id[gpu_rows[has]] = out.layer_id[lr[has]]
    out.op_id[gpu_rows[has]] = out.op_id[lr[has]]
    return int(np.count_nonzero(~has))


def _inherit_kernel(gpu_rows, lr, launch_row, phase, layer_id, op_id):
    """:func:`_map_gpu_rows`' pass: each GPU row's launch row ``lr`` (runtime rows, -1 none) and,
    when it has one, that row's phase, layer and op, written in place; returns how many have none."""
    missing = 0
    for i in range(len(gpu_rows)):
        r = gpu_rows[i]
        a = lr[i]
        launch_row[r] = a
        if a >= 0:
            phase[r] = phase[a]
            layer_id[r] = layer_id[a]
            op_id[r] = op_id[a]
        else:
            missing += 1
    return missing


def _pick_kernel(rows, phase, layer_id, op_id, gap_phase, gap_layer_id, o_phase, o_layer, o_op, o_gap_phase, o_gap_layer):
    """:meth:`Mapping.for_nodes`' pass (every node with a row): the five row maps gathered at ``rows``."""
    for i in range(len(rows)):
        r = rows[i]
        o_phase[i] = phase[r]
        o_layer[i] = layer_id[r]
        o_op[i] = op_id[r]
        o_gap_phase[i] = gap_phase[r]
        o_gap_layer[i] = gap_layer_id[r]


@dataclass
class CallThreads:
    """The RUNTIME rows of a table by thread, as the mapping and the graph builder both need them.

    Attributes:
        rt_rows: the RUNTIME rows sorted by (pid, tid, row).
        new_thread: bool per entry: the first call of its thread.
        prev_end: per entry, the largest end of the earlier calls of its thread in that order
            (:func:`prev_max_end`), ``np.iinfo(np.int64).min`` for a thread's first call.
    """

    rt_rows: np.ndarray
    new_thread: np.ndarray
    prev_end: np.ndarray


#: :func:`task_rows` runs its compiled passes from this many rows ("auto")
TASK_ROWS_MIN = 50_000


def task_rows(kind: np.ndarray, rt: bool = True, gpu: bool = True, method: str = "auto") -> tuple:
    """(the RUNTIME rows, the GPU task rows: KERNEL, MEMCPY and MEMSET) of a table's ``kind``
    column, int64, ascending; None in place of those not asked for (``rt``, ``gpu``). Two
    compiled passes (:func:`_task_rows_kernel`: count, fill) from :data:`TASK_ROWS_MIN` rows
    when numba is there ("auto"; "compiled" whatever the size, "python" the kernel uncompiled,
    "numpy" never), else numpy's comparisons; the same answers."""
    fn = jit.kernel_for(_task_rows_kernel, len(kind), TASK_ROWS_MIN, method)
    if fn is not None:
        r, g = jit.call(fn, np.ascontiguousarray(kind, np.uint8), np.uint8(Kind.RUNTIME), np.uint8(Kind.KERNEL),
                        np.uint8(Kind.MEMCPY), np.uint8(Kind.MEMSET), rt, gpu)
    else:
        r = np.flatnonzero(kind == Kind.RUNTIME) if rt else None
        g = np.flatnonzero((kind == Kind.KERNEL) | (kind == Kind.MEMCPY) | (kind == Kind.MEMSET)) if gpu else None
    return (r if rt else None), (g if gpu else None)


def _task_rows_kernel(kind, k_rt, k_kernel, k_memcpy, k_memset, rt, gpu):
    """:func:`task_rows`' passes (the rows not asked for: empty)."""
    n_rt = 0
    n_g = 0
    for i in range(len(kind)):
        k = kind[i]
        if k == k_rt:
            n_rt += 1
        elif k == k_kernel or k == k_memcpy or k == k_memset:
            n_g += 1
    r = np.empty(n_rt if rt else 0, np.int64)
    g = np.empty(n_g if gpu else 0, np.int64)
    a = 0
    b = 0
    for i in range(len(kind)):
        k = kind[i]
        if k == k_rt:
            if rt:
                r[a] = i
                a += 1
        elif gpu and (k == k_kernel or k == k_memcpy or k == k_memset):
            g[b] = i
            b += 1
    return r, g


#: :func:`call_threads` runs its compiled passes from this many calls ("auto")
CALL_THREADS_MIN = 50_000
#: the compiled passes of :func:`call_threads` give up (numpy's sorts take over) beyond this many threads
CALL_THREADS_MAX_THREADS = 1024


def call_threads(table: EventTable, rt_rows: np.ndarray, method: str = "auto") -> CallThreads:
    """:class:`CallThreads` of the RUNTIME rows ``rt_rows`` (ascending). Three compiled passes
    (:func:`_call_threads_kernel`: the distinct threads, a counting placement, the running max)
    from :data:`CALL_THREADS_MIN` calls when numba is there and the calls are on at most
    :data:`CALL_THREADS_MAX_THREADS` threads ("auto"; "compiled" whatever the size, "python"
    the kernel uncompiled, "numpy" never), else numpy's sorts and scans; the same answers."""
    fn = jit.kernel_for(_call_threads_kernel, len(rt_rows), CALL_THREADS_MIN, method)
    if fn is not None and fn is not _call_threads_kernel:
        fn = _with_first_pair(_call_threads_kernel)
    if fn is not None:
        rows, new_thread, prev_end, ok = jit.call(fn, np.ascontiguousarray(rt_rows, np.int64), table.pid, table.tid, table.end_ns,
                                                  CALL_THREADS_MAX_THREADS)
        if ok:
            return CallThreads(rows, new_thread, prev_end)
    rt_pid, rt_tid = table.pid[rt_rows], table.tid[rt_rows]
    tk = pair_keys(rt_pid, rt_tid)
    # by (pid, tid, row); rows are already start-sorted within a thread
    o = stable_group_order(tk[0]) if tk is not None else np.lexsort((rt_rows, rt_tid, rt_pid))
    rt_rows = rt_rows[o]
    rt_pid, rt_tid = rt_pid[o], rt_tid[o]
    new_thread = np.ones(len(rt_rows), dtype=bool)
    if tk is not None:
        ko = tk[0][o]
        new_thread[1:] = ko[1:] != ko[:-1]
    else:
        new_thread[1:] = (rt_pid[1:] != rt_pid[:-1]) | (rt_tid[1:] != rt_tid[:-1])
    prev_end = np.full(len(rt_rows), np.iinfo(np.int64).min, dtype=np.int64)
    if len(rt_rows):  # running max of the previous calls' ends within each thread
        prev_end = prev_max_end(table.end_ns[rt_rows].astype(np.int64, copy=False), new_thread, np.iinfo(np.int64).min)
    return CallThreads(rt_rows, new_thread, prev_end)


def _call_threads_kernel(rt_rows, pid, tid, end, cap):
    """:func:`call_threads`' passes over the calls ``rt_rows`` (int64, ascending) of the table
    columns ``pid``, ``tid``, ``end``: each call's thread among the distinct (pid, tid) kept
    sorted as they are met (at most ``cap``, else ``ok`` False and nothing else filled), the
    calls placed by thread (ascending (pid, tid)) in row order, then per placed call whether it
    starts its thread and the running max of the earlier ends (int64 min for a thread's first).
    Returns (rows, new_thread, prev_end, ok)."""
    n = len(rt_rows)
    kp = np.empty(cap, np.int64)  # distinct (pid, tid), ascending, and the order they were met in
    kt = np.empty(cap, np.int64)
    kid = np.empty(cap, np.int64)
    th = np.empty(n, np.int32)  # each call's thread, by the order the threads were met in
    nk = 0
    lp = 0
    lt = 0
    lk = -1
    for i in range(n):
        r = rt_rows[i]
        p = np.int64(pid[r])
        t = np.int64(tid[r])
        if lk < 0 or p != lp or t != lt:  # runs of one thread cost a comparison
            lp = p
            lt = t
            lo = _first_pair_c(kp, kt, nk, p, t)
            if lo < nk and kp[lo] == p and kt[lo] == t:
                lk = kid[lo]
            else:
                if nk == cap:
                    return rt_rows[:0], np.zeros(0, np.bool_), np.zeros(0, np.int64), False
                for j in range(nk, lo, -1):
                    kp[j] = kp[j - 1]
                    kt[j] = kt[j - 1]
                    kid[j] = kid[j - 1]
                kp[lo] = p
                kt[lo] = t
                kid[lo] = nk
                lk = nk
                nk += 1
        th[i] = lk
    rank = np.empty(nk, np.int64)  # met order -> sorted position
    for j in range(nk):
        rank[kid[j]] = j
    off = np.zeros(nk + 1, np.int64)
    for i in range(n):
        off[rank[th[i]] + 1] += 1
    for k in range(nk):
        off[k + 1] += off[k]
    rows = np.empty(n, np.int64)
    new_thread = np.zeros(n, np.bool_)
    prev_end = np.empty(n, np.int64)
    pos = off[:nk].copy()
    for i in range(n):
        k = rank[th[i]]
        rows[pos[k]] = rt_rows[i]
        pos[k] += 1
    small = np.iinfo(np.int64).min
    best = small
    k = 0
    for j in range(n):
        while k < nk and off[k] == j:  # the first call of thread k (every thread has calls)
            k += 1
        e = np.int64(end[rows[j]])
        if j == off[k - 1]:
            new_thread[j] = True
            prev_end[j] = small
            best = e
        else:
            prev_end[j] = best
            if e > best:
                best = e
    return rows, new_thread, prev_end, True


def _gap_midpoints(table: EventTable, rt_rows: np.ndarray, threads: CallThreads | None = None, by_row: bool = False,
                   in_thread_order: bool = False, method: str = "auto") -> np.ndarray:
    """Midpoint of the CPU gap before each runtime row (aligned with ``rt_rows``; ``by_row``: an
    int64 array over the table's rows instead, set at ``rt_rows`` only, the rest undefined;
    ``in_thread_order``: aligned with ``threads.rt_rows`` instead, ``threads`` required).

    The gap of call r on thread (pid, tid) is ``[prev_end, start_r]``, ``prev_end`` the largest
    end of the earlier calls of the thread (in start order, ties by row), or the table's earliest
    timestamp for the thread's first call. A call that starts before ``prev_end`` (nested in or
    overlapping an earlier call) has an empty gap: its midpoint is its start. ``threads``: the
    :func:`call_threads` of ``rt_rows`` (every RUNTIME row, ascending), used when the calls are
    in start order (its (pid, tid, row) order is then this one).

    ``method``: with ``in_thread_order``, "auto" checks the start order and makes the midpoints in
    one compiled pass each (:func:`_midpoints_kernel`) from :data:`PREV_MAX_MIN` calls when numba
    is there ("compiled" whatever the size, "python" the kernel uncompiled, "numpy" never); the
    same answers.
    """
    n = len(rt_rows)
    if n == 0:
        return np.zeros(len(table) if by_row else 0, dtype=np.int64)
    t0 = int(table.start_ns.min())
    fn = jit.kernel_for(_midpoints_kernel, n, PREV_MAX_MIN, method) if threads is not None and in_thread_order else None
    if fn is not None:
        mid, ok = jit.call(fn, np.ascontiguousarray(rt_rows, np.int64), np.ascontiguousarray(threads.rt_rows, np.int64),
                           threads.new_thread, threads.prev_end, table.start_ns, np.int64(t0))
        if ok:
            return mid
    s = table.start_ns[rt_rows].astype(np.int64, copy=False)
    if threads is not None and bool(np.all(s[1:] >= s[:-1])):  # rows in start order: ties already by row
        so = table.start_ns[threads.rt_rows].astype(np.int64, copy=False)
        prev_end = threads.prev_end.copy()
        prev_end[threads.new_thread] = t0
        lo = np.minimum(prev_end, so)
        if in_thread_order:
            return lo + (so - lo) // 2
        mid = np.empty(len(table), dtype=np.int64)  # by row, then back to the order of rt_rows
        mid[threads.rt_rows] = lo + (so - lo) // 2
        return mid if by_row else mid[rt_rows]
    pid, tid = table.pid[rt_rows].astype(np.int64, copy=False), table.tid[rt_rows].astype(np.int64, copy=False)
    e = table.end_ns[rt_rows].astype(np.int64, copy=False)
    o = np.lexsort((rt_rows, s, tid, pid))
    new = np.ones(n, dtype=bool)
    new[1:] = (pid[o][1:] != pid[o][:-1]) | (tid[o][1:] != tid[o][:-1])
    prev_end = prev_max_end(e[o], new, t0)
    so = s[o]
    lo = np.minimum(prev_end, so)
    mid = np.empty(n, dtype=np.int64)
    mid[o] = lo + (so - lo) // 2
    if in_thread_order:  # rt_rows ascending, threads.rt_rows a permutation of them
        return mid[np.searchsorted(rt_rows, threads.rt_rows)]
    if by_row:
        full = np.empty(len(table), dtype=np.int64)
        full[rt_rows] = mid
        return full
    return mid


def _midpoints_kernel(rt_rows, th_rows, new_thread, prev_end, start, t0):
    """:func:`_gap_midpoints` (``in_thread_order``, calls in start order): ``ok`` whether the
    calls ``rt_rows`` are in start order (nothing else made if not), and the midpoint of the gap
    before each call of ``th_rows`` (the calls by thread; its :class:`CallThreads`' thread starts
    and running max ``prev_end``), the gap starting at ``t0`` for a thread's first call."""
    n = len(rt_rows)
    for i in range(1, n):
        if start[rt_rows[i]] < start[rt_rows[i - 1]]:
            return np.zeros(0, np.int64), False
    mid = np.empty(len(th_rows), np.int64)
    for j in range(len(th_rows)):
        so = np.int64(start[th_rows[j]])
        lo = t0 if new_thread[j] else prev_end[j]
        if so < lo:
            lo = so
        mid[j] = lo + (so - lo) // 2
    return mid, True


#: :func:`prev_max_end` compiles its scan from this many items ("auto")
PREV_MAX_MIN = 50_000


def prev_max_end(eo: np.ndarray, new: np.ndarray, t0: int, method: str = "auto") -> np.ndarray:
    """Per item: the largest ``eo`` of the earlier items of its segment (segments start where
    ``new``, and at item 0), ``t0`` for a segment's first item; int64, shape ``eo.shape`` (1-d).
    One compiled pass (:func:`_prev_max_kernel`) from :data:`PREV_MAX_MIN` items when numba is
    there ("auto"; "compiled" whatever the size, "numpy" never, "python" the kernel uncompiled);
    else numpy scans: segment offsets on the values when they fit in int64, else on ranks (int64
    timestamps of any size are safe). The same answers."""
    n = len(eo)
    fn = jit.kernel_for(_prev_max_kernel, n, PREV_MAX_MIN, method)
    if fn is not None:
        out = np.empty(n, np.int64)
        jit.call(fn, np.ascontiguousarray(eo, np.int64), np.ascontiguousarray(new, np.bool_), np.int64(t0), out)
        return out
    if n == 0:
        return np.zeros(0, np.int64)
    seg = np.cumsum(new) - 1
    lo = int(eo.min())
    span = int(eo.max()) - lo + 2
    if (int(seg[-1]) + 2) * span < (1 << 62):
        v, back = eo - np.int64(lo), None
    else:
        back = np.argsort(eo, kind="stable")
        v = np.empty(n, dtype=np.int64)
        v[back] = np.arange(n)
        span = n + 1
    shifted = np.empty(n, dtype=np.int64)
    shifted[0] = -1
    shifted[1:] = v[:-1]
    shifted[new] = -1  # nothing earlier on the thread
    acc = np.maximum.accumulate(shifted + 1 + seg * np.int64(span)) - seg * np.int64(span) - 1
    if back is None:
        return np.where(acc >= 0, acc + np.int64(lo), t0)
    return np.where(acc >= 0, eo[back[np.maximum(acc, 0)]], t0)


def _prev_max_kernel(eo, new, t0, out):
    """:func:`prev_max_end`'s scan: one pass, writing ``out`` in place."""
    best = t0
    have = False
    for i in range(len(eo)):
        if new[i]:
            have = False
        out[i] = best if have else t0
        v = eo[i]
        if not have or v > best:
            best = v
            have = True


def pair_keys(a: np.ndarray, b: np.ndarray, *more: np.ndarray) -> list[np.ndarray] | None:
    """One int64 per (a, b) pair, ordered as the pairs are (a first), for ``(a, b)`` and each
    further pair of arrays in ``more`` (a2, b2, ...) on one common scale; None when the packed
    pairs would not fit in 62 bits."""
    pairs = [(a, b)] + [(more[i], more[i + 1]) for i in range(0, len(more), 2)]
    alls = [x for x in (a,) + more[0::2] if len(x)]
    blls = [x for x in (b,) + more[1::2] if len(x)]
    if not alls:
        return [np.zeros(0, np.int64) for _ in pairs]
    alo, ahi = min(int(x.min()) for x in alls), max(int(x.max()) for x in alls)
    blo, bhi = min(int(x.min()) for x in blls), max(int(x.max()) for x in blls)
    bb = (bhi - blo).bit_length()
    if (ahi - alo).bit_length() + bb > 62:
        return None
    return [((x.astype(np.int64) - np.int64(alo)) << np.int64(bb)) | (y.astype(np.int64) - np.int64(blo)) for x, y in pairs]


def _by_thread(table: EventTable, q_rows: np.ndarray, c_rows: np.ndarray, c_cols: tuple | None = None):
    """Yield ((pid, tid), query rows, context indices into c_rows) per thread with queries
    (``c_cols``: the int64 pid and tid of ``c_rows`` when the caller has them)."""
    q_pid, q_tid = table.pid[q_rows].astype(np.int64, copy=False), table.tid[q_rows].astype(np.int64, copy=False)
    if c_cols is None:
        c_cols = table.pid[c_rows].astype(np.int64, copy=False), table.tid[c_rows].astype(np.int64, copy=False)
    c_pid, c_tid = c_cols
    ascending = len(q_rows) > 0 and bool(np.all(q_rows[1:] > q_rows[:-1]))
    if ascending and len(c_rows) and _one_thread(q_pid, q_tid, c_pid, c_tid):  # what the packed keys would yield, unpacked
        yield (int(q_pid[0]), int(q_tid[0])), q_rows, np.arange(len(c_rows), dtype=np.int64)
        return
    keys = pair_keys(q_pid, q_tid, c_pid, c_tid)
    if keys is not None and ascending:
        yield from _by_thread_key(q_rows, keys[0], keys[1], q_pid, q_tid)
        return
    qo = np.lexsort((q_tid, q_pid))
    co = np.lexsort((c_tid, c_pid))
    qp, qt = q_pid[qo], q_tid[qo]
    cp, ct = c_pid[co], c_tid[co]
    new = np.ones(len(qo), dtype=bool)
    new[1:] = (qp[1:] != qp[:-1]) | (qt[1:] != qt[:-1])
    firsts = np.flatnonzero(new)
    bounds = np.append(firsts, len(qo))
    for k in range(len(firsts)):
        pid, tid = int(qp[firsts[k]]), int(qt[firsts[k]])
        lo = np.searchsorted(cp, pid, "left")
        hi = np.searchsorted(cp, pid, "right")
        lo2 = lo + np.searchsorted(ct[lo:hi], tid, "left")
        hi2 = lo + np.searchsorted(ct[lo:hi], tid, "right")
        q = np.sort(q_rows[qo[bounds[k]:bounds[k + 1]]])
        c = np.sort(co[lo2:hi2])
        if len(c):
            yield (pid, tid), q, c



def _one_thread(q_pid: np.ndarray, q_tid: np.ndarray, c_pid: np.ndarray, c_tid: np.ndarray) -> bool:
    """Whether the queries and contexts (non-empty) are all on one thread: (pid, tid) of the first query."""
    p, t = q_pid[0], q_tid[0]
    return all(int(a.min()) == v == int(a.max()) for a, v in ((q_pid, p), (q_tid, t), (c_pid, p), (c_tid, t)))


def _by_thread_key(q_rows: np.ndarray, qk: np.ndarray, ck: np.ndarray, q_pid: np.ndarray, q_tid: np.ndarray):
    """:func:`_by_thread` on packed (pid, tid) keys (``q_rows`` ascending): a stable sort keeps
    each thread's rows and contexts ascending, as the lexsort and np.sort there do. With few
    threads (:func:`~daydream.util.arrays.few_distinct`), one equality pass per thread instead."""
    threads = few_distinct(qk)
    if threads is not None:
        for key in threads.tolist():  # ascending, as the sorted keys below
            qm = qk == key
            c = np.flatnonzero(ck == key)
            if len(c):
                f = int(np.argmax(qm))
                yield (int(q_pid[f]), int(q_tid[f])), q_rows[qm], c
        return
    qo = np.argsort(qk, kind="stable")
    co = np.argsort(ck, kind="stable")
    qs, cs = qk[qo], ck[co]
    new = np.ones(len(qo), dtype=bool)
    new[1:] = qs[1:] != qs[:-1]
    firsts = np.flatnonzero(new)
    bounds = np.append(firsts, len(qo)).tolist()
    for k, f in enumerate(firsts.tolist()):
        key = qs[f]
        c = co[np.searchsorted(cs, key, "left"):np.searchsorted(cs, key, "right")]
        if len(c):
            yield (int(q_pid[qo[f]]), int(q_tid[qo[f]])), q_rows[qo[bounds[k]:bounds[k + 1]]], c
