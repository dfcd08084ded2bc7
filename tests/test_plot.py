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
TITLES = {"fig-causes": "Baseline and prediction", "fig-ranking": "Speed-up of each optimization alone (--opt all)",
          "fig-timeline": "One step, baseline and predicted", "fig-gpu": "GPU busy vs idle"}
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
    expected = {(): ["fig-causes", "fig-gpu"], ("--opt", "all"): ["fig-causes", "fig-ranking", "fig-timeline", "fig-gpu"]}.get(
        tuple(opt), ["fig-causes", "fig-timeline", "fig-gpu"])
    assert list(figs) == expected
    for ident, fig in figs.items():
        assert any(t.startswith(TITLES[ident]) for t in _texts(fig))
    windows = 1 + len(report["steps"])
    assert len(report["steps"]) == 3
    ops = report["pictures"]["ops"]
    ranked = [r for r in report["ranking"] if r["predicted_ns"] >= 0 and r["speedup"] > 0]
    preds = len(report["predictions"]) or len(ranked)
    # the baseline and each prediction side by side: critical path by cause, each step (with --opt), each top op
    base = 1 + (len(report["steps"]) if report["predictions"] else 0) + len(ops)
    assert len(_rows(figs["fig-causes"], "row base")) == base
    assert len(_rows(figs["fig-causes"], "row prediction")) == (
        len(report["predictions"]) * (1 + len(report["steps"]) + len(ops)) if report["predictions"] else len(ranked) + min(3, len(ranked)) * len(ops))
    assert preds or len(_rows(figs["fig-causes"], "row prediction")) == 0
    assert len(_rows(figs["fig-gpu"], "row base")) == windows and len(_rows(figs["fig-gpu"], "row replayed")) == windows
    legend = " ".join(_texts(root))
    for label in ("GPU compute", "communication", "GPU busy", "GPU idle", "(ms)"):
        assert label in legend
    # the answer heads the picture
    assert _texts(root)[0].startswith("answer: step ")
    if "fig-ranking" in figs:
        ok = [r for r in report["ranking"] if r["predicted_ns"] >= 0]
        assert len(_rows(figs["fig-ranking"], "row rank")) == len(ok) > 0
        assert "speed-up (x)" in _texts(figs["fig-ranking"])
        na = [t for t in _texts(figs["fig-ranking"]) if t.startswith("not applicable: ")]
        assert len(na) == len(report["ranking"]) - len(ok)
    if "fig-timeline" in figs:
        pic = report["pictures"]["step"]
        assert len(_rows(figs["fig-timeline"], "lane")) == 2 * len(pic["lanes"]) > 0


def test_speedup_axis_starts_at_one(tmp_path, capsys):
    """Issue 31: bars started at 0, so 1.074x looked like 1.018x. The ranking's axis starts at x1
    (lower only when a prediction is slower than the baseline) and a bar's length is its speed-up
    less the origin, so the bars' lengths are in the ratio of the gains."""
    svg, js = tmp_path / "f.svg", tmp_path / "r.json"
    assert main([str(FIXTURE), "--opt", "all", "--plot", str(svg), "--json", str(js)]) == 0
    capsys.readouterr()
    report = json.loads(js.read_bytes())
    root = ET.fromstring(svg.read_bytes())
    fig = next(g for g in root.iter(SVG + "g") if g.get("id") == "fig-ranking")
    ok = [r for r in report["ranking"] if r["predicted_ns"] >= 0 and r["speedup"] > 0]
    origin = min([1.0] + [r["speedup"] for r in ok])
    origin = int(origin * 20) / 20 if origin < 1 else 1.0
    widths = [float(next(g.iter(SVG + "rect")).get("width")) if list(g.iter(SVG + "rect")) else 0.0 for g in _rows(fig, "row rank")]
    gains = [r["speedup"] - origin for r in ok]
    top = max(range(len(gains)), key=lambda i: gains[i])
    for w, gn in zip(widths, gains):
        if gn > 0.01:
            assert w / widths[top] == pytest.approx(gn / gains[top], abs=0.01)
    assert f"{origin:g}" in _texts(fig)  # the axis' first tick


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
    assert p.tags[:2] == ["html", "head"] and p.tags.count("svg") == 4 and p.tags.count("figure") == 4
    assert "script" not in p.tags and "http://" not in text.replace("http://www.w3.org/2000/svg", "")  # self-contained
    svgs = re.findall(r"<svg\b.*?</svg>", text, flags=re.S)
    assert len(svgs) == 4
    for s, title in zip(svgs, TITLES.values()):
        assert any(t.startswith(title) for t in _texts(ET.fromstring(s)))
    # the answer is the page's headline; the title is the file's name, not its path
    h1 = re.search(r"<h1>(.*?)</h1>", text).group(1)
    assert h1.startswith("answer: step ")
    assert re.search(r"<title>(.*?)</title>", text).group(1) == "daydream: train_step.json.gz"


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
