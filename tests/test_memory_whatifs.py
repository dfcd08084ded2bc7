"""--opt all marks the predictions that do not fit in GPU memory (analysis._fits, the ranking's text row)."""

from __future__ import annotations

from types import SimpleNamespace

from daydream.analysis import _fits
from daydream.render.text import ranking_section
from daydream.report.report_model import Ranked


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
