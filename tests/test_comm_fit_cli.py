"""``daydream-comm-fit`` (``daydream/job/transfers.py``): the fit as a readable table, ``--json -``
alone on standard output, names from traces made safe, bad input one line and exit status 2."""

from __future__ import annotations

import json
import os

import pytest

from daydream.job.transfers import main, render

TRACES = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "traces")


def _doc(name="all-reduce"):
    res = {"median_abs": 0.1, "p90_abs": 0.5, "median_signed": -0.25, "max_abs": 0.6}
    return {"traces": ["a.json"], "collectives": 3, "source": "kernel duration", "preset": "NVLink 3 (A100)",
            "link": "given by --link", "counts": {},
            "ops": {name: {"count": 3, "group_size": 2, "size_min_bytes": 1024, "size_max_bytes": 1 << 20,
                           "latency_us": 12.5, "busbw_GBps": 40.0, "fit_residual": res, "preset_residual": res}},
            "overlap_slowdown": 1.25, "overlap": {"names compared": 4}}


def test_render_is_a_table_with_one_row_per_operation():
    lines = render(_doc()).splitlines()
    head = next(i for i, x in enumerate(lines) if x.startswith("operation"))
    assert set(lines[head + 1].replace(" ", "")) == {"-"}
    row = lines[head + 2].split()
    assert row[:5] == ["all-reduce", "3", "2", "1,024-1,048,576", "12.50"]
    assert row[5:] == ["40.000", "10.0%", "50.0%", "10.0%", "50.0%", "-25.0%"]
    # the columns line up: every cell of the row ends where its heading's column ends
    assert len(lines[head + 2]) == len(lines[head + 1])
    assert "names compared: 4" in render(_doc())


def test_render_makes_trace_names_safe():
    out = render(_doc("all\x1b[2Jreduce"))
    assert "\x1b" not in out


def test_bad_file_is_one_line_and_status_2(tmp_path, capsys):
    p = tmp_path / "bad.json"
    p.write_text("{ not json")
    assert main([str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.json" in err[0] and "Traceback" not in err[0]


@pytest.mark.slow
def test_json_to_stdout_is_the_document_alone(capsys):
    p = os.path.join(TRACES, "hta", "nccl_data.json.gz")
    if not os.path.exists(p):
        pytest.skip("shared traces not present")
    assert main([p, "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["ops"]) == {"all-reduce", "broadcast"}
    assert main([p]) == 0
    text = capsys.readouterr().out
    assert all(name in text for name in doc["ops"]) and "{" not in text


def test_one_size_row_is_marked_not_a_fit():
    # was: b200's one all-gather shown as "fitted" L 21.69 us, busbw 1,336 GB/s (above NVLink 5's peak), |err| 0.0 %
    doc = _doc("all-gather")
    doc["ops"]["all-gather"].update(size_min_bytes=402176, size_max_bytes=402176, count=1, one_size_preset_scale=0.6734)
    row = next(x for x in render(doc).splitlines() if x.startswith("all-gather"))
    assert "one size:" in row and "preset x 0.67" in row and "not a fit" in row and "12.50" not in row


def test_one_size_fit_carries_its_preset_scale_and_no_link_still_fits():
    import numpy as np

    from daydream.costmodel import comm as cm
    from daydream.costmodel import comm_fit as cf

    net = cm.Network(cm.PRESETS["nvlink4"])
    ag = next(k for k, v in cf.OP_NAMES.items() if v == "all-gather")
    pre = float(cm.collective_ns(ag, np.array([1 << 20]), 8, net)[0])
    f = cf.fit([ag], [1 << 20], [8], [2 * pre], net, "t")
    assert abs(f.ops[ag].preset_scale - 2.0) < 1e-9 and f.to_json()["ops"]["all-gather"]["one_size_preset_scale"] == 2.0
    # the JSON round trip keeps it (a fit=FILE document)
    assert cf.from_json(f.to_json(), net).ops[ag].preset_scale == 2.0
    # no preset: lines fitted, nothing compared; one size counted as not fitted (was: refused, exit 2)
    s = np.array([1 << 16, 1 << 20, 1 << 22])
    g = cf.fit([ag, ag, ag, ag], [*s, 1 << 20], [8, 8, 8, 4], [10_000, 30_000, 90_000, 5_000], None, "t")
    assert g.to_json()["preset"] is None and g.ops[ag].preset_residual == {} and g.ops[ag].preset_scale == 0
    h = cf.fit([ag], [1 << 20], [8], [10_000], None, "t")
    assert not h.ops and sum(h.counts.values()) == 1


@pytest.mark.slow
def test_unknown_link_fits_and_skips_only_the_preset_comparison(capsys):
    p = os.path.join(TRACES, "nsys_ai", "mfu_2gpu_before.sqlite")
    if not os.path.exists(p):
        pytest.skip("shared traces not present")
    assert main([p]) == 0  # was: exit 2, "link ... not known: give --link"
    out = capsys.readouterr().out
    assert "preset compared: none" in out and "--link" in out
