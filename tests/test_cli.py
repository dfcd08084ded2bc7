"""daydream-analyze end to end: report, --json (schema, determinism), --timeline (re-reads and
replays to itself), --opt plumbing, and clean exits for bad input and usage."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from daydream.cli import main
from daydream.formats import load_trace
from daydream.graph import build_graph
from daydream.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = str(ROOT / "fixtures" / "train_step.json.gz")
TRACES = ROOT.parent / "shared" / "traces"


def run_cli(*args, capsys=None):
    code = main(["--details", *(str(a) for a in args)])
    out = capsys.readouterr() if capsys else None
    return code, out


@pytest.mark.slow
def test_fixture_report(capsys):
    code, out = run_cli(FIXTURE, capsys=capsys)
    assert code == 0
    text = out.out
    for needle in ("traced window", "ProfilerStep#1", "ProfilerStep#3", "measured ms", "replayed ms", "GPU busy", "CPU gaps", "sync wait", "critical path"):
        assert needle in text
    # the fixture is emulated: the replay is exact
    line = next(l for l in text.splitlines() if l.strip().startswith("traced window"))
    assert " 0.00 " in line


def test_json_validates_and_is_deterministic(tmp_path, capsys):
    schema = json.loads((ROOT / "schemas" / "report.schema.json").read_text())
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert run_cli(FIXTURE, "--json", a, "--opt", "scale-kernels:pattern=gemm,factor=0.5", capsys=capsys)[0] == 0
    assert run_cli(FIXTURE, "--json", b, "--opt", "scale-kernels:pattern=gemm,factor=0.5", capsys=capsys)[0] == 0
    assert a.read_bytes() == b.read_bytes()
    doc = json.loads(a.read_bytes())
    jsonschema.validate(doc, schema)
    p = doc["predictions"][0]
    assert p["window"]["speedup"] > 1.0
    assert p["optimizations"][0]["name"] == "scale-kernels"


def test_timeline_rereads_and_replays_to_itself(tmp_path, capsys):
    out = tmp_path / "tl.json.gz"
    assert run_cli(FIXTURE, "--opt", "scale-kernels:pattern=gemm,factor=0.5", "--timeline", out, capsys=capsys)[0] == 0
    doc = json.loads(gzip.decompress(out.read_bytes()))
    cats = {e.get("cat") for e in doc["traceEvents"]}
    assert {"kernel", "cuda_runtime", "ac2g", "critical_path", "dependency", "cuda_sync"} <= cats
    assert any(e.get("args", {}).get("critical_path") == 1 for e in doc["traceEvents"])
    with pytest.warns(UserWarning, match="read the prediction"):  # two copies: the prediction is read back
        table = load_trace(str(out))
    g = build_graph(table)
    tl = simulate(g)
    assert np.array_equal(tl.start_ns, g.rec_start_ns) and np.array_equal(tl.end_ns, g.rec_end_ns)


def test_opt_all_ranks(capsys):
    code, out = run_cli(FIXTURE, "--opt", "all", capsys=capsys)
    assert code == 0
    assert "what to try first" in out.out


def test_not_applicable_is_said_plainly(capsys):
    code, out = run_cli(FIXTURE, "--opt", "scale-kernels:pattern=zzz_no_such_kernel", capsys=capsys)
    assert code == 3  # the report is printed; the optimization asked for by name does not apply (issue 12)
    assert "scale-kernels: not applicable: no kernel name matches 'zzz_no_such_kernel'" in out.out
    assert "daydream-analyze: not applicable: scale-kernels: no kernel name matches" in out.err


def test_list_opts(capsys):
    code, out = run_cli("--list-opts", capsys=capsys)
    assert code == 0 and "scale-kernels" in out.out and "factor=" in out.out


def test_composition_applies_in_order(tmp_path, capsys):
    j = tmp_path / "r.json"
    run_cli(FIXTURE, "--opt", "scale-kernels:pattern=gemm,factor=0.5", "--opt", "scale-kernels:pattern=gemm,factor=2", "--json", j, capsys=capsys)
    doc = json.loads(j.read_bytes())
    p = doc["predictions"][0]
    assert [o["name"] for o in p["optimizations"]] == ["scale-kernels", "scale-kernels"]
    # x0.5 then x2 is the identity (durations are even-rounded ns: allow 1 ns per kernel)
    assert abs(p["window"]["predicted_ns"] - doc["window"]["replayed_ns"]) <= 200


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--opt", "bogus"], "unknown optimization"),
        (["--opt", "scale-kernels:factor=-1"], "out of range"),
        (["--opt", "scale-kernels:nope=1"], "unknown parameter"),
        (["--opt", "scale-kernels:factor"], "name=value"),
        (["--json", "/nonexistent-dir/x.json"], "cannot write"),
        (["--bogus-flag"], "unrecognized"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args, needle, capsys):
    code, out = run_cli(FIXTURE, *args, capsys=capsys)
    assert code == 2
    err = out.err.strip()
    assert needle in err.lower() or needle in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"", "empty"),
        (b"hello, this is not a trace\n", "not a trace"),
        (b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1', "nothing"),
    ],
)
def test_bad_files_exit_2(tmp_path, content, needle, capsys):
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    code, out = run_cli(p, capsys=capsys)
    assert code in (0, 2)
    assert "Traceback" not in out.err
    if code == 2:
        assert str(p) in out.err and len(out.err.strip().splitlines()) == 1


def test_console_script_no_traceback_on_bad_input(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    r = subprocess.run([sys.executable, "-m", "daydream.cli", str(p)], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr and str(p) in r.stderr


def _kineto_with_kernels():
    if not TRACES.exists():
        return []
    out = []
    for p in sorted(TRACES.rglob("*.json.gz")):
        out.append(p)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("path", _kineto_with_kernels(), ids=lambda p: p.name[:40])
def test_every_real_kineto_trace_reports(path, capsys):
    code, out = run_cli(path, capsys=capsys)
    assert code == 0, out.err
    assert "traced window" in out.out


def test_progress_lines_only_for_big_files_on_a_terminal(monkeypatch, capsys):
    import daydream.cli as cli

    monkeypatch.setattr(cli, "PROGRESS_MIN_BYTES", 1)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    code = main(["--details", FIXTURE])
    err = capsys.readouterr().err
    assert code == 0 and "reading" in err and "analysis done" in err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert main(["--details", FIXTURE]) == 0
    assert "reading" not in capsys.readouterr().err


def test_full_stdout_is_a_clean_error():
    r = subprocess.run([sys.executable, "-m", "daydream.cli", FIXTURE], stdout=open("/dev/full", "w"), stderr=subprocess.PIPE, text=True)
    assert r.returncode == 2 and "cannot write the report" in r.stderr and "Traceback" not in r.stderr


def test_dash_is_stdout_for_the_timeline_and_refused_for_the_saved_table(tmp_path, capsys, monkeypatch):
    """``--timeline -`` writes the Chrome-trace JSON to standard output (the report's text is then
    not printed, as with ``--json -``), never a file named '-'; ``--save-table -`` (a binary .npz)
    and two outputs on standard output are usage errors, before the trace is read."""
    monkeypatch.chdir(tmp_path)
    code, out = run_cli(FIXTURE, "--opt", "scale-kernels", "--timeline", "-", capsys=capsys)
    assert code == 0 and not (tmp_path / "-").exists()
    doc = json.loads(out.out)
    assert doc["traceName"].startswith("daydream timeline of ") and doc["traceEvents"]
    code, out = run_cli(FIXTURE, "--save-table", "-", capsys=capsys)
    assert code == 2 and not (tmp_path / "-").exists()
    assert out.err.strip().splitlines() == ["daydream-analyze: error: --save-table -: the saved table is a binary .npz file "
                                            "and cannot go to standard output; name a file"]
    code, out = run_cli(FIXTURE, "--json", "-", "--timeline", "-", capsys=capsys)
    assert code == 2 and out.out == ""
    assert out.err.strip().splitlines() == ["daydream-analyze: error: --json and --timeline both name '-' (standard output); give one of them a file"]
