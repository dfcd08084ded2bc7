import sys
from pathlib import Path

# tests import small helpers (tablebuilder) from this folder
sys.path.insert(0, str(Path(__file__).parent))

import pytest


@pytest.fixture(autouse=True)
def _jit_workload_restored():
    """The JIT workload gate is process state (daydream.util.jit.add_workload): a test that
    analyzes a trace must not leave it set for the next test."""
    from daydream.util import jit

    was = jit.workload()
    yield
    jit.reset_workload(was)


@pytest.fixture(scope="session")
def real_graphs():
    """Every real trace of ../shared/traces built into a mapped graph, by file name (skips without
    them). A test module may define its own ``real_graphs`` (another shape) over this one."""
    from daydream.formats import load_trace
    from daydream.graph import build_graph
    from daydream.mapping import map_events

    traces = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
    paths = sorted(p for p in traces.glob("*/*") if p.suffix in (".gz", ".json", ".sqlite"))
    if not paths:
        pytest.skip("no real traces")
    out = {}
    for p in paths:
        t = load_trace(str(p))
        out[p.name] = build_graph(t, map_events(t))
    return out
