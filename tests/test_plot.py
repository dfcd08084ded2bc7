"""``--plot FILE.svg`` / ``--plot FILE.html``: the figures of the report (daydream/render/svg.py)."""

from __future__ import annotations

import gzip
import json
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from daydream.cli import main

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "train_step.json.gz"
SVG = "{http://www.w3.org/2000/svg}"
TITLES = {"fig-causes": "Step time by cause", "fig-ranking": "Speed-up of each optimization alone (--opt all)", "fig-gpu": "GPU busy vs idle"}
HOSTILE = "\x1b[2J\x00\u202e<script>x</script>]]>"


def _rows(fig: ET.Element, cls: str) -> list[ET.Element]:
    return [g for g in fig.iter(SVG + "g") if g.get("class") == cls]


def _texts(el: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in el.iter(SVG + "text")]


@pytest.mark.parametrize("opt", [[], ["--opt", "all"], ["--opt", "scale-kernels:pattern=gemm,factor=0.5"]])
def test_svg_figures(tmp_path, capsys, opt):
    svg, js = tmp_path / "f.svg", tmp_path / "r.json"
    assert main(["--details", str(FIXTURE), *opt, "--plot", str(svg), "--json", str(js)]) == 0
    capsys.readouterr()
    report = json.loads(js.read_bytes())
    root = ET.fromstring(svg.read_bytes())
    assert root.tag == SVG + "svg" and root.get("viewBox").startswith("0 0 820 ")
    figs = {g.get("id"): g for g in root.iter(SVG + "g") if g.get("class") == "figure"}
    expected = ["fig-causes", "fig-ranking", "fig-gpu"] if opt == ["--opt", "all"] else ["fig-causes", "fig-gpu"]
    assert list(figs) == expected
    for ident, fig in figs.items():
        assert TITLES[ident] in _texts(fig)
    windows = 1 + len(report["steps"])
    assert len(report["steps"]) == 3
    # one baseline bar per window (the traced window's critical path, each step's breakdown), and per prediction
    assert len(_rows(figs["fig-causes"], "row base")) == windows
    assert len(_rows(figs["fig-causes"], "row prediction")) == len(report["predictions"]) * windows
    assert len(_rows(figs["fig-gpu"], "row base")) == windows and len(_rows(figs["fig-gpu"], "row replayed")) == windows
    legend = " ".join(_texts(root))
    for label in ("GPU compute", "communication", "kernels", "GPU busy", "GPU idle", "(ms)"):
        assert label in legend
    if "fig-ranking" in figs:
        ok = [r for r in report["ranking"] if r["predicted_ns"] >= 0]
        assert len(_rows(figs["fig-ranking"], "row rank")) == len(ok) > 0
        assert "speed-up (x)" in _texts(figs["fig-ranking"])
        na = [t for t in _texts(figs["fig-ranking"]) if t.startswith("not applicable: ")]
        assert len(na) == len(report["ranking"]) - len(ok)


class _Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)


def test_html_page(tmp_path, capsys):
    page = tmp_path / "f.html"
    assert main(["--details", str(FIXTURE), "--opt", "all", "--plot", str(page)]) == 0
    capsys.readouterr()
    text = page.read_text(encoding="utf-8")
    p = _Tags()
    p.feed(text)
    p.close()
    assert p.tags[:2] == ["html", "head"] and p.tags.count("svg") == 3 and p.tags.count("figure") == 3
    assert "script" not in p.tags and "http://" not in text.replace("http://www.w3.org/2000/svg", "")  # self-contained
    svgs = re.findall(r"<svg\b.*?</svg>", text, flags=re.S)
    assert len(svgs) == 3
    for s, title in zip(svgs, TITLES.values()):
        assert title in _texts(ET.fromstring(s))


def _hostile_trace(tmp_path: Path) -> Path:
    """The fixture with HOSTILE in every kernel, op, annotation and module name, the device name
    (shown in the gpu-upgrade note of --opt all) and the file name (ProfilerStep names are
    ``ProfilerStep#N`` exactly, or they are no step)."""
    doc = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "cpu_op", "python_function", "user_annotation"):
            e["name"] = e["name"] if e["name"].startswith("ProfilerStep") else HOSTILE + e["name"]
    for d in doc.get("deviceProperties", []):
        d["name"] = HOSTILE + d.get("name", "")
    p = tmp_path / "x<script>\x1b]]>.json"
    p.write_text(json.dumps(doc))
    return p


@pytest.mark.parametrize("ext", ["svg", "html"])
def test_hostile_names_escaped(tmp_path, capsys, ext):
    trace = _hostile_trace(tmp_path)
    out = tmp_path / f"f.{ext}"
    assert main(["--details", str(trace), "--opt", "all", "--plot", str(out)]) == 0
    capsys.readouterr()
    text = out.read_text(encoding="utf-8")
    assert "<script" not in text and "\x1b" not in text and "\x00" not in text and "\u202e" not in text
    assert "&lt;script&gt;" in text and "]]&gt;" in text and "\\x1b" in text
    for s in re.findall(r"<svg\b.*?</svg>", text, flags=re.S):
        ET.fromstring(s)
    if ext == "svg":
        root = ET.fromstring(text.encode())
        assert any("ProfilerStep#1" in t for t in _texts(root))


@pytest.mark.parametrize("name", ["f.png", "f", "f.svg.gz"])
def test_bad_extension_is_a_usage_error(tmp_path, capsys, name):
    assert main(["--details", str(FIXTURE), "--plot", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--plot" in err and ".svg or .html" in err
    assert not (tmp_path / name).exists()


def test_plot_checked_before_the_load(tmp_path, capsys):
    js = tmp_path / "same.svg"
    assert main(["--details", str(FIXTURE), "--plot", str(js), "--json", str(js)]) == 2
    assert main(["--details", str(FIXTURE), "--plot", str(tmp_path / "no" / "f.svg")]) == 2
    err = capsys.readouterr().err
    assert "both name" in err and "no such directory" in err
