"""The kernel-level task graph of a trace (Daydream paper, section 4; ``docs/model.md``).

Nodes are CPU tasks (the runtime/driver API calls of each thread, each with the CPU gap before
it) and GPU tasks (kernels, memcpys, memsets); edges carry a kind whose replay rule is written
once in :mod:`daydream.graph.edges`. The builder (:func:`build_graph`) runs named stages:
tasks and launch links (:mod:`.tasks`), waits (:mod:`.waits`), ``L`` and ``G``
(:mod:`.latency`), and order repair (:mod:`.order`).
"""

from ._arrays import lower_median
from .build import build_graph
from .edges import (
    RULES,
    EdgeKind,
    Offset,
    Origin,
    Phase,
    Rule,
    kind_name,
    register_kind,
    rule_arrays,
    unregister_kind,
)
from .model import NODE_CPU, NodeMapping, TaskGraph, dedupe_edges
from .order import check_topological, is_valid_order, kahn_order, topological_order, visit_constraints
from .steps import profiler_steps

__all__ = [
    "NODE_CPU", "RULES", "EdgeKind", "NodeMapping", "Offset", "Origin", "Phase", "Rule", "TaskGraph", "build_graph",
    "check_topological", "dedupe_edges", "is_valid_order", "kahn_order", "kind_name", "lower_median", "profiler_steps", "register_kind",
    "rule_arrays", "topological_order", "unregister_kind", "visit_constraints",
]
