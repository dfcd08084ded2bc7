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
