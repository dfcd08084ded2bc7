"""The phase and range rules of the mapping, as data, and the names they read.

Phase codes (:data:`PHASES`), the phase rules (:data:`PHASE_RULES`) and range rules
(:data:`RANGE_RULES`), NCCL/RCCL kernel names (:func:`is_comm_kernel_name`) and emit_nvtx
display names (:func:`nvtx_base_name`, :func:`fold_by_op`); see ``docs/mapping.md``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

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


#: GPU tasks of all-to-all / expert-parallel libraries that move data between GPUs and spin-wait
#: on their peers inside the kernel (DeepEP ``deep_ep::internode::dispatch``, its forks'
#: ``dpsk::ep::internode::*``, ``ep::intranode::combine``; NVSHMEM ``nvshmemi_*``/``nvshmemx_*``
#: device kernels; MSCCL++; pplx-kernels; UCCL-EP): their time is time spent on peers, so they are
#: communication (phase, kernel class, critical-path cause), whatever launched them. They are not
#: NCCL/RCCL collectives (:data:`COMM_KERNEL_PATTERN`): no collective is read from their names and
#: the communication what-ifs do not re-cost them.
PEER_KERNEL_PATTERN = (r"(?i)deep_?ep::|dpsk::ep::|(?:^|[^\w])ep::(?:internode|intranode|internode_ll|low_latency)::"
                       r"|nvshmem[ix]?_|mscclpp|(?:^|[^\w])pplx|uccl")


def is_peer_kernel_name(name: str, rx: re.Pattern | None = None) -> bool:
    """Whether ``name`` (its first :data:`NAME_PREFIX` characters) matches :data:`PEER_KERNEL_PATTERN`."""
    return bool((rx or re.compile(PEER_KERNEL_PATTERN)).search(name, 0, NAME_PREFIX))


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
