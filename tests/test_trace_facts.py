"""Launch data and collective args travel with the table (formats/trace_side.py) and the graph
(graph/facts.py): a saved table is enough for every what-if, and nothing reads the trace again."""

from __future__ import annotations

import io
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from daydream.errors import TraceFormatError
from daydream.formats import load_trace
from daydream.formats import launch_data as LD
from daydream.formats.trace_side import save_table
from daydream.graph import build_graph
from daydream.mapping import map_events

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
NCCL = TRACES / "hta" / "nccl_data.json.gz"
NSYS = TRACES / "nsys_ai" / "mock.sqlite"


def _same_launch(a: LD.LaunchData, b: LD.LaunchData) -> None:
    for k in ("key", "grid", "block", "regs", "smem", "flops", "bytes", "last_bytes", "last_elem"):
        assert np.array_equal(getattr(a, k), getattr(b, k)), k
    assert a.op == b.op and a.reason == b.reason and a.counts == b.counts


def _same_comm(a, b) -> None:
    for k in ("name", "cat", "ext", "corr", "collective", "in_nelems", "out_nelems", "group_size", "elem_bytes", "pg", "dims_nelems"):
        assert np.array_equal(getattr(a, k), getattr(b, k)), k
    assert a.reason == b.reason


@pytest.mark.parametrize("name", [NCCL, NSYS], ids=["kineto-nccl", "nsys"])
def test_saved_table_carries_launch_data_and_comm_args(name, tmp_path):
    if not name.exists():
        pytest.skip("shared traces not present")
    trace = tmp_path / name.name
    shutil.copy(name, trace)
    table = load_trace(str(trace))
    assert table.launch is not None and table.comm is not None  # taken at load
    g = build_graph(table, map_events(table))
    save_table(table, str(tmp_path / "t.npz"))
    trace.unlink()  # nothing below may need the trace
    saved = load_trace(str(tmp_path / "t.npz"))
    gs = build_graph(saved, map_events(saved))
    _same_launch(gs.facts.launch, g.facts.launch)
    if g.facts.comm_args is None:
        assert gs.facts.comm_args is None
    else:
        _same_comm(gs.facts.comm_args, g.facts.comm_args)
    assert not any("not read back" in k for k in saved.accounting.notes)


def test_graph_facts_join_the_collective_args():
    if not NCCL.exists():
        pytest.skip("shared traces not present")
    from daydream.graph.collectives import find_collectives

    table = load_trace(str(NCCL))
    g = build_graph(table, map_events(table))
    c = find_collectives(g)
    assert len(c) and (c.size_bytes >= 0).all()
    assert g.facts.comm_args is g.facts.comm_args  # read once


def test_damaged_side_member_is_refused(tmp_path):
    if not NSYS.exists():
        pytest.skip("shared traces not present")
    table = load_trace(str(NSYS))
    path = tmp_path / "t.npz"
    save_table(table, str(path))
    bad = tmp_path / "bad.npz"
    with zipfile.ZipFile(path) as zin, zipfile.ZipFile(bad, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename == "side.launch.op.npy":  # ids past the header's op names
                arr = np.full(len(LD.launch_data_of(table)), 10**6, np.int32)
                buf = io.BytesIO()
                np.save(buf, arr)
                data = buf.getvalue()
            zout.writestr(info, data)
    with pytest.raises(TraceFormatError, match="side.launch.op"):
        load_trace(str(bad))
