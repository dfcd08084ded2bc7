"""--opt all marks the predictions that do not fit in GPU memory (analysis._fits, the ranking's text row)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from daydream.analysis import _fits
from daydream.costmodel.gpu_memory import CAPACITY
from daydream.formats import load_trace
from daydream.graph import build_graph
from daydream.mapping import map_events
from daydream.optimizations import parse_spec
from daydream.render.text import ranking_section
from daydream.report.memory_fit import memory_summary
from daydream.report.report_model import Ranked
from daydream.simulate import simulate

TRACES = Path(__file__).resolve().parent.parent.parent / "shared" / "traces"


def _mem(*fits):
    return SimpleNamespace(devices=[SimpleNamespace(device=d, fits=f) for d, f in enumerate(fits)])


def test_fits_needs_every_gpu_with_a_known_capacity():
    assert _fits(None) is None
    assert _fits(_mem(None)) is None  # capacity unknown
    assert _fits(_mem(True, None)) is True
    assert _fits(_mem(True, False)) is False
    host = SimpleNamespace(devices=[SimpleNamespace(device=-1, fits=None)])
    assert _fits(host) is None


def test_ranking_row_of_a_prediction_that_does_not_fit_says_so():
    rows = [Ranked("amp", 10, 1.5, "n", memory="GPU 0: does not fit (...)", fits=False),
            Ranked("fused-adam", 20, 1.1, "n", memory="GPU 0: fits (...)", fits=True)]
    r = SimpleNamespace(ranking=rows, trust=None)
    text = ranking_section(r)
    assert "DOES NOT FIT" in text[1] and "amp" in text[1]
    assert "DOES NOT FIT" not in "\n".join(text[2:])


def test_gpu_upgrade_judges_the_prediction_against_the_target_capacity():
    """H100 BERT-small (80 GB H100, the trace's own 79.2 GiB) upgraded to an L4: the prediction's
    verdict is against the L4's 24 GB (NVIDIA L4 datasheet), the baseline's against the trace's."""
    path = TRACES / "tracelens" / "h100_gaunernst_bert-small-uncased__1016001.json.gz"
    if not path.exists():
        pytest.skip("shared trace not present")
    t = load_trace(str(path))
    g = build_graph(t, map_events(t))
    base = memory_summary(g, simulate(g))
    opt, p = parse_spec("gpu-upgrade:target=L4")
    g2, _ = opt.apply(g, p)
    pred = memory_summary(g2, simulate(g2))
    b = next(d for d in base.devices if d.device == 0)
    assert b.capacity_source.startswith("the trace") and "of 79.2 GiB" in b.verdict
    d = next(d for d in pred.devices if d.device == 0)
    assert d.capacity_bytes == CAPACITY["L4"][0] and d.capacity_source.startswith("L4: NVIDIA L4 datasheet")
    assert "of 24.0 GiB" in d.verdict
