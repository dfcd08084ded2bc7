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
