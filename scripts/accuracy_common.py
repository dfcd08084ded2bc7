"""What the docs/accuracy.md section modules share: the shared traces with allocator events, a
trace's mapped graph, replayed peaks per device, MiB text (one place, not one copy per section)."""

from __future__ import annotations

from pathlib import Path

from daydream.formats import load_trace
from daydream.graph import build_graph
from daydream.mapping import map_events
from daydream.simulate import simulate
from daydream.simulate.memory_replay import replay_memory

#: the shared traces (relative to ../shared/traces) with allocator events the memory sections judge
MEMORY_TRACES = ("tracelens/h100_gaunernst_bert-small-uncased__1016001.json.gz",
                 "tracelens/mi300_gaunernst_bert-small-uncased__1016001.json.gz",
                 "tracelens/h100_google_owlv2-large-patch14-ensemble__1016001.json.gz",
                 "hta/df_index_resolver.json.gz",
                 "kineto_tbplugin/resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz")


def mapped_graph(path: Path | str):
    """The trace's graph with the layer mapping (what daydream-analyze builds)."""
    t = load_trace(str(path))
    return build_graph(t, map_events(t))


def peaks(g) -> dict[int, tuple[int, bool]]:
    """Per device: (replayed peak allocated bytes, is it a lower bound)."""
    return {dm.device: (dm.peak_allocated_bytes, not dm.exact_before) for dm in replay_memory(g, simulate(g))}


def mib(b: int) -> str:
    return f"{b / 2**20:,.1f}"
