"""Names from a trace are untrusted: every output shows them safely (``daydream/util/display.py``)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import orjson
import pytest

from daydream.cli import main, run
from daydream.util.display import markup_text, terminal_lines, terminal_text

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "train_step.json.gz"

#: clear the screen, retitle the terminal (OSC ... BEL), NUL, a right-to-left override, markup
HOSTILE = "\x1b[2J\x1b]0;t\x07\x00\u202e<script>x</script>]]>"


def _hostile_trace(tmp_path: Path) -> Path:
    """The fixture with HOSTILE prefixed to every kernel, op, annotation and module name, and to
    the device name."""
    doc = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "cpu_op", "python_function", "gpu_memcpy", "gpu_memset") or (
                e.get("cat") == "user_annotation" and not e["name"].startswith("ProfilerStep")):
            e["name"] = HOSTILE + e["name"]
    for d in doc.get("deviceProperties", []):
        d["name"] = HOSTILE + d.get("name", "")
    p = tmp_path / "hostile.json"
    p.write_text(json.dumps(doc))
    return p


def _safe_terminal(text: str) -> None:
    for line in text.split("\n"):
        assert line.isprintable(), repr(line[:200])
    assert "\x1b" not in text and "\x07" not in text and "\x00" not in text and "\u202e" not in text


def test_display_functions():
    assert terminal_text(HOSTILE) == "\\x1b[2J\\x1b]0;t\\x07\\x00\\u202e<script>x</script>]]>"
    assert terminal_text("abcdefghij", 6) == "abc..." and terminal_text("abc", 6) == "abc"
    assert terminal_lines("a\x1bb\nc") == "a\\x1bb\nc"
    assert markup_text("<script>]]>&\"'") == "&lt;script&gt;]]&gt;&amp;&quot;&#x27;"
    assert "\x1b" not in markup_text(HOSTILE)


@pytest.mark.parametrize("opt", [[], ["--opt", "scale-kernels:pattern=gemm,factor=0.5"], ["--opt", "all"]])
def test_every_output_shows_hostile_names_safely(tmp_path, capsys, opt):
    trace = _hostile_trace(tmp_path)
    js, tl = tmp_path / "r.json", tmp_path / "t.json"
    assert run([str(trace), *opt, "--json", str(js), "--timeline", str(tl)]) == 0
    out, err = capsys.readouterr()
    _safe_terminal(out)
    _safe_terminal(err)
    assert "\\x1b[2J" in out  # shown, as a visible escape
    # JSON outputs are valid and carry the original names
    report = orjson.loads(js.read_bytes())  # the raw names, not escaped copies
    assert report["trace"]["devices"][0]["name"] == HOSTILE + "Emulated GPU"
    assert any(x["name"].startswith(HOSTILE) for x in report["layers"])
    timeline = orjson.loads(tl.read_bytes())
    names = {e.get("name", "") for e in timeline["traceEvents"]}
    assert any(n.startswith(HOSTILE) for n in names)


def test_warnings_and_errors_are_one_safe_line(tmp_path, capsys):
    bad = tmp_path / ("x\x1b[2J.json")
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "' + "\\u001b[2J" + '", "ts": "oops"}]}')
    rc = main([str(bad)])  # every event skipped: refused in one line (the file name escaped)
    _, err = capsys.readouterr()
    _safe_terminal(err)
    assert rc == 2 and err.count("\n") <= max(1, err.count("warning") + 1)


def test_wide_values_never_run_together():
    """A value wider than its column keeps a blank between it and its neighbours (issue 17, item 10)."""
    from daydream.render.text import Col, _table

    cols = [Col("name", 6, lambda r: r[0], left=True), Col("a", 8, lambda r: r[1]), Col("b", 8, lambda r: r[2])]
    lines = _table(cols, [("a-very-long-name", "1,127.7067", "201,349.864"), ("x", "1.0", "2.0")])
    assert lines[1].split() == ["a-very-long-name", "1,127.7067", "201,349.864"]
    assert lines[2] == "  x          1.0     2.0"


def test_a_newline_in_a_name_cannot_forge_a_report_line(tmp_path, capsys):
    """A kernel or op name holding a newline is shown as ``\\n`` on its own line of the report, in the
    tables and in the free text alike (second try-out: the critical-path wait line printed it raw,
    and the rest of the name read as a line of its own)."""
    doc = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "cpu_op", "user_annotation") and not e["name"].startswith("ProfilerStep"):
            e["name"] = e["name"] + "\nfake line: answer 1000x"
    p = tmp_path / "newline.json"
    p.write_text(json.dumps(doc))
    assert run([str(p), "--opt", "all"]) == 0
    out, _ = capsys.readouterr()
    assert "\\nfake line: answer 1000x" in out
    assert not any(line.startswith("fake line") for line in out.split("\n"))


def test_csv_cells_from_names_are_cleaned_like_the_terminal(tmp_path, capsys):
    # was: kernels.csv/ops.csv held the raw ESC/BEL/NUL/U+202E of the names (`cat kernels.csv` cleared the screen)
    import csv

    trace = _hostile_trace(tmp_path)
    assert run([str(trace), "--csv", str(tmp_path / "csv")]) == 0
    capsys.readouterr()
    for name in ("kernels.csv", "ops.csv"):
        text = (tmp_path / "csv" / name).read_text(encoding="utf-8")
        assert "\x1b" not in text and "\x07" not in text and "\x00" not in text and "\u202e" not in text
        rows = list(csv.reader(text.splitlines()))
        cells = [c for r in rows[1:] for c in r]
        assert any(c.startswith("\\x1b[2J\\x1b]0;t\\x07\\x00\\u202e<script>") for c in cells), name  # shown, escaped
