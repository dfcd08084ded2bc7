"""``--plot`` on a job (daydream.render.job_svg): every number drawn is the JSON report's, the
straggler is marked, strings are escaped, and the job CLI refuses a bad --plot name."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from daydream.cli import main
from daydream.report.job_model import JOB_REPORT_VERSION, JobReport, RankRow, Straggler
from daydream.render.job_svg import render_job_html, render_job_svg

DLRM = Path(__file__).resolve().parents[2] / "shared" / "traces" / "param_dlrm"
NS = "{http://www.w3.org/2000/svg}"


def _rows(svg: str) -> list[tuple[str, list[tuple[str, float]]]]:
    """(class, [(title name, value ms)]) of every bar group drawn."""
    root = ET.fromstring(svg.split("\n", 1)[1])
    out = []
    for g in root.iter(NS + "g"):
        if "row" in (g.get("class") or "").split():
            bars = [t.text.rsplit(": ", 1) for r in g.iter(NS + "rect") for t in r.iter(NS + "title")]
            out.append((g.get("class"), [(n, float(v.replace(",", ""))) for n, v in bars]))
    return out


def _check_numbers(svg: str, rep: dict) -> None:
    """Per rank, in order: measured, coupled replay, then its wait by peer and transfer (ms, 3 decimals)."""
    rows = _rows(svg)
    ranks = rep["rank_rows"]
    steps = [r for r in rows if "wait" not in r[0].split()]
    waits = [r for r in rows if "wait" in r[0].split()]
    assert len(steps) == 2 * len(ranks) and len(waits) == len(ranks)
    strag = rep["straggler"]["rank"] if rep["straggler"] else None
    for i, r in enumerate(ranks):
        assert steps[2 * i][1] == [("measured", round(r["measured_ns"] / 1e6, 3))]
        assert steps[2 * i + 1][1] == [("coupled replay", round(r["replayed_ns"] / 1e6, 3))]
        want = [(f"r{p}", round(ns / 1e6, 3)) for p, ns in sorted(r["waited_for"].items(), key=lambda kv: int(kv[0])) if ns > 0]
        want += [("transfer", round(r["transfer_ns"] / 1e6, 3))] if r["transfer_ns"] > 0 else []
        assert waits[i][1] == want
        assert sum(ns for ns in r["waited_for"].values()) == r["wait_measured_ns"]
        marked = "straggler" in waits[i][0].split()
        assert marked == (r["rank"] == strag) and marked == ("straggler" in steps[2 * i][0].split())


def _report(n: int = 3, straggler: int | None = 2) -> JobReport:
    rows = [RankRow(rank=r, trace=f"<b>w{r}</b>.json", rank_from="trace", clock_offset_ns=0, measured_ns=10_000_000 + r * 1_000_000,
                    replayed_ns=10_100_000 + r * 1_000_000, error_pct=1.0, alone_error_pct=2.0, wait_measured_ns=3_000_000 - r,
                    wait_replayed_ns=3_000_000, waited_for={str(p): 1_000_000 + 1000 * p for p in range(n) if p != r},
                    transfer_ns=200_000, comm_overlap_pct=0.0, last_arrivals=r, critical_path={}) for r in range(n)]
    for r in rows:
        r.wait_measured_ns = sum(r.waited_for.values())
    s = Straggler(rank=straggler, caused_wait_ns=5, late_start_ns=0, cause="<script>", critical_path={}) if straggler is not None else None
    return JobReport(report_version=JOB_REPORT_VERSION, ranks=n, world_size=n, clock="shared", collectives=4, rounds=2,
                     step_measured_ns=rows[-1].measured_ns, step_replayed_ns=rows[-1].replayed_ns, step_error_pct=1.0,
                     rank_rows=rows, collective_rows=[], straggler=s, counts={})


@pytest.mark.parametrize("straggler", [2, None])
def test_job_figure_numbers_equal_the_report(straggler):
    rep = _report(straggler=straggler)
    import msgspec

    data = json.loads(msgspec.json.encode(rep))
    svg = render_job_svg(rep)
    _check_numbers(svg, data)
    assert ("STRAGGLER" in svg) == (straggler is not None) and "<script>" not in svg and "<b>" not in svg
    html = render_job_html(rep)
    assert html.count("<svg") == 1 and 'id="fig-job"' in html


@pytest.mark.skipif(not DLRM.exists(), reason="../shared/traces/param_dlrm not present")
def test_dlrm_job_plot_numbers_equal_the_json_report(tmp_path, capsys):
    svg, js = tmp_path / "job.svg", tmp_path / "job.json"
    assert main([str(DLRM), "--json", str(js), "--plot", str(svg)]) == 0
    capsys.readouterr()
    rep = json.loads(js.read_text())
    assert rep["straggler"] is not None
    _check_numbers(svg.read_text(), rep)


def test_job_plot_usage_errors(tmp_path, capsys):
    """A bad --plot name on a job is a usage error before anything is loaded (exit 2, one line)."""
    folder = tmp_path / "job"
    folder.mkdir()
    assert main([str(folder), "--plot", str(tmp_path / "x.png")]) == 2
    assert "--plot" in capsys.readouterr().err
    same = tmp_path / "out.svg"
    assert main([str(folder), "--plot", str(same), "--json", str(same)]) == 2
    assert "both name" in capsys.readouterr().err
