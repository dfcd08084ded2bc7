"""Launch links carried only by ``ac2g`` flow events (kineto reader, issue "Reliability, second round" 11).

Hand-made traces whose kernels (or runtime calls) carry no ``args.correlation``: the flows bind to
their slices as the Chrome trace format binds them and give both sides one correlation id. On the
real traces (which all carry args.correlation) reading the flows changes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import daydream
from daydream.events.table import Kind
from daydream.formats import kineto
from daydream.formats.kineto import flows as kineto_flows

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
REAL = sorted(TRACES.glob("*/*.json.gz"))

TAKEN = "launch link taken from a flow event"
DISAGREE = "launch flow disagreeing with args.correlation (args.correlation kept)"


def rt(name, ts, dur=5, corr=None, tid=1):
    args = {} if corr is None else {"correlation": corr}
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 10, "tid": tid, "ts": ts, "dur": dur, "args": args}


def kern(name, ts, dur=10, corr=None, stream=7):
    args = {"device": 0, "stream": stream}
    if corr is not None:
        args["correlation"] = corr
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur, "args": args}


def flow(ph, fid, ts, pid, tid, bp=True, cat="ac2g"):
    e = {"ph": ph, "cat": cat, "name": cat, "id": fid, "pid": pid, "tid": tid, "ts": ts}
    if ph == "f" and bp:
        e["bp"] = "e"
    return e


def write(tmp_path, events, name="t.json"):
    p = tmp_path / name
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return p


def rows(tb, kind):
    i = np.flatnonzero(tb.kind == kind)
    return {tb.names[int(tb.name_id[j])]: int(tb.correlation[j]) for j in i}


def test_flows_link_kernels_without_correlation(tmp_path):
    ev = [
        rt("cudaLaunchKernel", 100, corr=5),
        rt("cudaLaunchKernel", 200),  # no correlation on either side: a fresh id
        rt("cudaLaunchKernel", 300, corr=9),
        kern("k_a", 150),
        kern("k_b", 250),
        kern("k_c", 350),
        flow("s", 1, 100, 10, 1),
        flow("f", 1, 150, 0, 7),  # bp e, at the kernel's start
        flow("s", 2, 202, 10, 1),  # inside the call, not at its start
        flow("f", 2, 240, 0, 7, bp=False),  # no bp: the next kernel starting at or after 240
        flow("s", 3, 300, 10, 1),
        flow("f", 3, 355, 0, 7),  # bp e, inside the kernel
    ]
    tb = kineto.load(str(write(tmp_path, ev)))
    k, r = rows(tb, Kind.KERNEL), tb.correlation[tb.kind == Kind.RUNTIME]
    assert k["k_a"] == 5 and k["k_c"] == 9
    assert k["k_b"] > 9 and k["k_b"] in set(r.tolist())  # fresh, above every recorded id, on its call
    assert tb.accounting.notes[TAKEN] == 3
    assert tb.accounting.balanced
    g = daydream.build_graph(daydream.load_trace(str(write(tmp_path, ev, "u.json"))))
    assert np.count_nonzero(g.launch >= 0) == 3


def test_runtime_call_without_correlation_takes_the_kernels(tmp_path):
    ev = [rt("cudaLaunchKernel", 100), kern("k_a", 150, corr=42), flow("s", 1, 100, 10, 1), flow("f", 1, 150, 0, 7)]
    tb = kineto.load(str(write(tmp_path, ev)))
    assert tb.correlation[tb.kind == Kind.RUNTIME].tolist() == [42]
    assert tb.accounting.notes[TAKEN] == 1


def test_unbound_and_unpaired_flows_are_counted(tmp_path):
    ev = [
        rt("cudaLaunchKernel", 100, corr=5),
        kern("k_a", 150),
        kern("k_b", 250),
        flow("s", 1, 50, 10, 1),  # before any call: binds to nothing
        flow("f", 1, 150, 0, 7),
        flow("f", 2, 250, 0, 7),  # no start of id 2
        flow("s", 3, 100, 10, 1),
        flow("f", 3, 500, 0, 7),  # bp e past every kernel
    ]
    tb = kineto.load(str(write(tmp_path, ev)))
    notes = tb.accounting.notes
    assert notes["launch flow whose start is not within a runtime/driver call (not read)"] == 1
    assert notes["launch flow whose finish is not on a GPU task (not read)"] == 1
    assert notes["launch flow finish without a start of the same id (not read)"] == 1
    assert TAKEN not in notes or notes[TAKEN] == 0
    assert (tb.correlation[tb.kind == Kind.KERNEL] == -1).all()
    assert tb.accounting.balanced


def test_disagreeing_flow_keeps_args_correlation(tmp_path):
    ev = [
        rt("cudaLaunchKernel", 100, corr=5),
        rt("cudaLaunchKernel", 200, corr=6),
        kern("k_a", 150, corr=6),  # the flow says call 5, args.correlation says 6
        kern("k_b", 250),  # some task lacks an id, so the flows are read
        flow("s", 1, 100, 10, 1),
        flow("f", 1, 150, 0, 7),
        flow("s", 2, 200, 10, 1),
        flow("f", 2, 250, 0, 7),
    ]
    tb = kineto.load(str(write(tmp_path, ev)))
    assert rows(tb, Kind.KERNEL) == {"k_a": 6, "k_b": 6}
    assert tb.accounting.notes[DISAGREE] == 1
    assert tb.accounting.notes[TAKEN] == 1


def test_legacy_async_flows_and_graph_launch(tmp_path):
    """Legacy category; one start serving several finishes (a graph launch)."""
    ev = [
        rt("cudaGraphLaunch", 100, corr=3),
        kern("k_a", 150),
        kern("k_b", 170),
        flow("s", 3, 100, 10, 1, cat="async"),
        flow("f", 3, 150, 0, 7, cat="async"),
        flow("f", 3, 170, 0, 7, cat="async"),
    ]
    tb = kineto.load(str(write(tmp_path, ev)))
    assert rows(tb, Kind.KERNEL) == {"k_a": 3, "k_b": 3}


@pytest.mark.slow
@pytest.mark.skipif(not REAL, reason="../shared/traces not present")
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_traces_unchanged_when_flows_are_read(path, monkeypatch):
    """Every real Kineto trace carries args.correlation: reading its flows changes no column."""
    base = kineto.load(str(path))
    monkeypatch.setattr(kineto_flows, "_FLOW_LINKS_ALWAYS", True)
    forced = kineto.load(str(path))
    assert set(base.cols) == set(forced.cols)
    for c in base.cols:
        np.testing.assert_array_equal(base.cols[c], forced.cols[c], err_msg=c)
    assert forced.accounting.notes.get(TAKEN, 0) == 0
