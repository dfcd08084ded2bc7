"""The ``--plot`` page and SVG opened in a real headless Chromium (the system's package:
``apt-get install chromium``; ``.ci/run`` installs it when it can): no console message (a page
without scripts logs nothing unless the browser rejects something, e.g. an invalid SVG attribute
or a resource it cannot load), every figure in the parsed DOM, and a screenshot of the window's
size that is not blank. The screenshot's pixels are counted by Chromium itself (the PNG drawn on
a canvas from a data: URI), so the test needs no imaging package.

Skipped, with the reason, when no Chromium is found (``DAYDREAM_CHROMIUM`` names one explicitly).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from daydream.cli import main

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "train_step.json.gz"
BERT = ROOT.parent / "shared" / "traces" / "tracelens"
WIDTH, HEIGHT = 900, 1400
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


def _chromium() -> str | None:
    env = os.environ.get("DAYDREAM_CHROMIUM")
    if env:
        return env
    return next((p for p in map(shutil.which, CANDIDATES) if p), None)


CHROMIUM = _chromium()
pytestmark = [pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium found (apt-get install chromium, or set DAYDREAM_CHROMIUM): the --plot browser test is skipped",
), pytest.mark.slow]  # each opens Chromium two to three times: seconds
CONSOLE = re.compile(r":CONSOLE[:(]\d*\)?\]? (.*)$")


def _run(tmp_path: Path, url: str, *flags: str) -> subprocess.CompletedProcess:
    """Chromium headless on ``url``; stderr carries the page's console messages."""
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--force-device-scale-factor=1",
           "--no-first-run", "--disable-extensions", f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr",
           "--v=0", *flags, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)


def console(stderr: str) -> list[str]:
    """The page's console messages in Chromium's stderr log."""
    return [m.group(1) for m in map(CONSOLE.search, stderr.splitlines()) if m]


def open_page(tmp_path: Path, page: Path) -> tuple[list[str], str, Path]:
    """(console messages, the DOM as parsed, the screenshot) of ``page``."""
    png = tmp_path / "shot.png"
    shot = _run(tmp_path, page.as_uri(), f"--window-size={WIDTH},{HEIGHT}", f"--screenshot={png}")
    dom = _run(tmp_path, page.as_uri(), "--dump-dom")
    assert png.exists(), shot.stderr[-2000:]
    return console(shot.stderr) + console(dom.stderr), dom.stdout, png


def png_size(png: Path) -> tuple[int, int]:
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def pixel_facts(tmp_path: Path, png: Path) -> dict:
    """Chromium decodes the screenshot on a canvas and counts: width, height, pixels that are not
    white, and distinct colours (of a sample)."""
    uri = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode()
    page = tmp_path / "count.html"
    page.write_text(
        "<!DOCTYPE html><html><body><canvas id=c></canvas><script>"
        "const i=new Image();i.onload=()=>{const c=document.getElementById('c');c.width=i.width;c.height=i.height;"
        "const x=c.getContext('2d');x.drawImage(i,0,0);const d=x.getImageData(0,0,i.width,i.height).data;"
        "let ink=0;const cols=new Set();for(let p=0;p<d.length;p+=4){if(d[p]<245||d[p+1]<245||d[p+2]<245)ink++;"
        "if(p%(4*97)==0)cols.add((d[p]<<16)|(d[p+1]<<8)|d[p+2]);}"
        "console.log('FACTS'+JSON.stringify({w:i.width,h:i.height,ink:ink,colours:cols.size}));};"
        f"i.src='{uri}';</script></body></html>"
    )
    out = _run(tmp_path, page.as_uri(), "--dump-dom", "--virtual-time-budget=5000")
    facts = [m[len('"FACTS'):] for m in console(out.stderr) if m.startswith('"FACTS')]
    assert facts, out.stderr[-2000:]
    return json.loads(facts[0].split('", source:')[0])


def _check(tmp_path: Path, page: Path, figures: int, drawn: int = 3) -> dict:
    messages, dom, png = open_page(tmp_path, page)
    assert messages == [], messages
    assert dom.count("<svg") == figures and dom.count('class="figure"') + dom.count("<figure>") == drawn
    assert png_size(png) == (WIDTH, HEIGHT)
    facts = pixel_facts(tmp_path, png)
    assert (facts["w"], facts["h"]) == (WIDTH, HEIGHT)
    assert facts["ink"] > 0.03 * WIDTH * HEIGHT and facts["colours"] >= 5, facts
    return facts


#: the layout check, run in the browser on a copy of the page with this script appended (the page
#: itself has none): every drawn element's box (text, rect, line) inside its <svg>'s box, and no
#: <svg> wider than the page's body; logs "LAYOUT" and the offenders as JSON
LAYOUT_JS = (
    "const over=[];const body=document.body.getBoundingClientRect();"
    "for(const svg of document.querySelectorAll('svg')){const r=svg.getBoundingClientRect();"
    "if(r.right>Math.max(body.right,window.innerWidth)+0.5)over.push('svg wider than the page: '+Math.round(r.width));"
    "for(const el of svg.querySelectorAll('text,rect,line')){if(el.closest('defs'))continue;const b=el.getBoundingClientRect();"
    "if(b.width===0&&b.height===0)continue;"
    "if(b.left<r.left-0.5||b.right>r.right+0.5||b.top<r.top-0.5||b.bottom>r.bottom+0.5)"
    "over.push(el.tagName+' '+(el.textContent||'').slice(0,50)+' '+[b.left-r.left,b.right-r.left,b.top-r.top,b.bottom-r.top]"
    ".map(Math.round).join(','));}}"
    "console.log('LAYOUT'+JSON.stringify({svgs:document.querySelectorAll('svg').length,over:over}));"
)


def layout(tmp_path: Path, page: Path) -> dict:
    """{"svgs": count, "over": elements outside their <svg>} measured by Chromium on a copy of ``page``."""
    text = page.read_text(encoding="utf-8")
    probe = tmp_path / "probe.html"
    if page.suffix == ".svg":  # an SVG document: inline it in a page of its own width
        text = "<!DOCTYPE html><html><body style=\"margin:0\">" + text.split("?>", 1)[-1] + "</body></html>"
    probe.write_text(text.replace("</body>", f"<script>{LAYOUT_JS}</script></body>"), encoding="utf-8")
    out = _run(tmp_path, probe.as_uri(), "--dump-dom", f"--window-size={WIDTH},{HEIGHT}")
    facts = [m for m in console(out.stderr) if m.startswith('"LAYOUT')]
    assert facts, out.stderr[-2000:]
    return json.loads(facts[0][len('"LAYOUT'):].split('", source:')[0])


def _fits(tmp_path: Path, page: Path) -> None:
    facts = layout(tmp_path, page)
    assert facts["svgs"] >= 1 and facts["over"] == [], facts["over"][:10]


@pytest.mark.parametrize("ext", ["html", "svg"])
def test_plot_opens_in_chromium(tmp_path, capsys, ext):
    """The page has four figures (baseline and prediction, one step's timeline, GPU busy,
    predicted against measured), each an inline <svg>; the SVG file holds them in one <svg> as
    <g class="figure">; everything drawn lies inside its <svg>."""
    page = tmp_path / f"f.{ext}"
    args = [str(FIXTURE), "--opt", "scale-kernels:pattern=gemm,factor=0.5", "--compare-to", str(FIXTURE), "--plot", str(page)]
    assert main(args) == 0
    capsys.readouterr()
    _check(tmp_path, page, 4 if ext == "html" else 1, drawn=4)
    _fits(tmp_path, page)


@pytest.mark.slow
@pytest.mark.parametrize("ext", ["html", "svg"])
def test_opt_all_page_fits_in_chromium(tmp_path, capsys, ext):
    """--opt all: the baseline and every prediction side by side, the ranking, one step's timeline."""
    page = tmp_path / f"all.{ext}"
    assert main([str(FIXTURE), "--opt", "all", "--plot", str(page)]) == 0
    capsys.readouterr()
    _check(tmp_path, page, 4 if ext == "html" else 1, drawn=4)
    _fits(tmp_path, page)


def test_layout_check_can_fail(tmp_path):
    """Negative control: a text that runs past its viewBox and an SVG wider than the page are caught."""
    bad = tmp_path / "over.html"
    bad.write_text('<!DOCTYPE html><html><body style="margin:0;width:300px"><svg xmlns="http://www.w3.org/2000/svg" '
                   'viewBox="0 0 200 40" width="200" height="40"><text x="150" y="20">a long label past the edge</text></svg>'
                   '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 2000 10" width="2000" height="10"><rect width="5" height="5"/></svg>'
                   "</body></html>")
    over = layout(tmp_path, bad)["over"]
    assert any("a long label past the edge" in x for x in over) and any("wider than the page" in x for x in over), over


@pytest.mark.skipif(not BERT.exists(), reason="../shared/traces/tracelens not present")
def test_bert_pair_page_opens_in_chromium(tmp_path, capsys):
    page = tmp_path / "bert.html"
    assert main([str(BERT / "h100_gaunernst_bert-small-uncased__1016001.json.gz"), "--opt", "gpu-upgrade:target=MI300X",
                 "--compare-to", str(BERT / "mi300_gaunernst_bert-small-uncased__1016001.json.gz"), "--plot", str(page)]) == 0
    capsys.readouterr()
    _check(tmp_path, page, 5, drawn=5)  # four figures and the memory curves (BERT has allocator events: issue 32)
    _fits(tmp_path, page)


DLRM = ROOT.parent / "shared" / "traces" / "param_dlrm"


@pytest.mark.skipif(not DLRM.exists(), reason="../shared/traces/param_dlrm not present")
@pytest.mark.parametrize("ext", ["html", "svg"])
def test_job_plot_opens_in_chromium(tmp_path, capsys, ext):
    """A job's --plot (one figure: each rank's step, its wait by peer and transfer)."""
    page = tmp_path / f"job.{ext}"
    assert main([str(DLRM), "--plot", str(page)]) == 0
    capsys.readouterr()
    _check(tmp_path, page, 1, drawn=1)
    _fits(tmp_path, page)


def test_the_checks_can_fail(tmp_path):
    """Negative controls: a console error, an invalid SVG attribute and a blank page are caught."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
                   '<rect width="-5" height="3"/></svg><script>console.error("boom")</script></body></html>')
    messages, _, _ = open_page(tmp_path, bad)
    assert any("boom" in m for m in messages) and any("negative" in m.lower() or "rect" in m for m in messages), messages
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    messages, _, png = open_page(tmp_path, blank)
    assert messages == [] and png_size(png) == (WIDTH, HEIGHT)
    assert pixel_facts(tmp_path, png)["ink"] == 0
