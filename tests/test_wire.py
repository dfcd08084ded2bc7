"""A rank's result crosses from a Dask worker as msgpack of plain values (daydream/job/wire.py),
rebuilt only into daydream's allow-listed classes: a hostile worker can send wrong numbers, never
code (issue 37, "Trust")."""

from __future__ import annotations

import pickle
from pathlib import Path

import msgspec
import numpy as np
import pytest

from daydream.errors import TraceFormatError, UsageError
from daydream.job import wire
from daydream.job.load import read_rank

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "train_step.json.gz"


def _same(a, b, path="r"):
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, path
        if a.dtype == object:
            assert list(a.ravel()) == list(b.ravel()), path
        else:
            assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), path
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            _same(a[k], b[k], f"{path}.{k}")
    elif hasattr(a, "__struct_fields__") or hasattr(a, "__dict__"):
        assert type(a) is type(b), path
        _same(wire._state(a), wire._state(b), path)
    else:
        assert a == b or (a != a and b != b), path


@pytest.mark.slow
def test_a_rank_round_trips_exactly():
    r = read_rank(str(FIXTURE))
    _same(r, wire.result(wire.call(read_rank, str(FIXTURE))))


def test_a_workers_error_comes_back_as_the_same_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(TraceFormatError) as e:
        wire.result(wire.call(read_rank, str(bad)))
    assert e.value.path == str(bad)


@pytest.mark.parametrize("payload", [
    pickle.dumps(print),  # a pickle: never unpickled
    msgspec.msgpack.encode({"ok": {wire._TAG: "C", "c": "os:system", "f": {}}}),  # a class outside the allow-list
    msgspec.msgpack.encode({"ok": {wire._TAG: "A", "d": "|O", "s": [1], "b": b"\0" * 8}}),  # an object array from bytes
    msgspec.msgpack.encode({"error": ["SystemExit", [0]]}),
    msgspec.msgpack.encode({"ok": 1, "more": 2}),
    b"not msgpack at all \xc1",
])
def test_hostile_results_are_refused_in_one_line(payload):
    with pytest.raises(UsageError, match="does not accept"):
        wire.result(payload)


def test_encode_refuses_a_class_it_does_not_know():
    class Foreign:
        pass

    with pytest.raises(TypeError, match="not a class"):
        wire.encode(Foreign())
