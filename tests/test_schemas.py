"""The committed JSON Schemas are exactly, byte for byte, what the msgspec definitions generate."""

from pathlib import Path

import pytest

from daydream.report.schemas import SCHEMA_DIR, SCHEMAS, schema_text, write_schemas

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema_file_is_current(name):
    path = ROOT / "schemas" / name
    assert path.exists(), f"{path} missing: run python scripts/write_schemas.py"
    assert path.read_bytes() == schema_text(name).encode(), f"{name} is stale: run python scripts/write_schemas.py"


def test_schema_writer_writes_every_schema_file(tmp_path):
    assert SCHEMA_DIR == ROOT / "schemas"
    written = write_schemas(tmp_path)
    assert sorted(p.name for p in written) == sorted(SCHEMAS)
    for p in written:
        assert p.read_bytes() == (ROOT / "schemas" / p.name).read_bytes()


def test_saved_table_round_trip_through_the_cli(tmp_path, capsys):
    from daydream.cli import main
    from daydream.formats import load_trace

    fixture = ROOT / "fixtures" / "train_step.json.gz"
    saved = tmp_path / "t.npz"
    assert main(["--details", str(fixture), "--save-table", str(saved)]) == 0
    first = capsys.readouterr().out
    assert load_trace(str(saved)).equals(load_trace(str(fixture)))
    assert main(["--details", str(saved)]) == 0
    second = capsys.readouterr().out
    # same report apart from the source line, which names the saved table and the trace it came from
    src = [ln for ln in second.splitlines() if ln.startswith("daydream: ")]
    assert src == [f"daydream: {saved} (saved table of {fixture})  [kineto]"]
    assert [ln for ln in first.splitlines() if not ln.startswith("daydream: ")] == [ln for ln in second.splitlines() if not ln.startswith("daydream: ")]


def test_saved_table_of_another_version_is_refused(tmp_path):
    import msgspec
    import numpy as np

    from daydream.errors import TraceFormatError
    from daydream.events.table import EventTable
    from daydream.formats import load_trace

    t = load_trace(str(ROOT / "fixtures" / "train_step.json.gz"))
    p = tmp_path / "t.npz"
    t.save(str(p))
    with np.load(p) as z:
        arrays = {k: z[k] for k in z.files}
    hdr = msgspec.json.decode(arrays["__header__"].tobytes())
    hdr["schema_version"] = 999
    arrays["__header__"] = np.frombuffer(msgspec.json.encode(hdr), dtype=np.uint8)
    np.savez(p, **arrays)
    with pytest.raises(TraceFormatError, match="schema version 999"):
        EventTable.load(str(p))


def test_saved_table_rank_out_of_range_is_ignored_and_counted(tmp_path):
    """A saved header's rank and world size are checked as the trace readers check theirs (rank -99,
    world size 0 were accepted)."""
    import msgspec

    from daydream.formats import load_trace

    t = load_trace(str(ROOT / "fixtures" / "train_step.json.gz"))
    t.meta = msgspec.structs.replace(t.meta, rank=-99, world_size=0)
    p = tmp_path / "t.npz"
    t.save(str(p))
    again = load_trace(str(p))
    assert (again.meta.rank, again.meta.world_size) == (-1, -1) and again.meta.extra["saved_table"] == str(p)
    assert again.accounting.notes["saved header world_size not a count of ranks from 1 to 2^20 (ignored)"] == 1
    assert again.accounting.notes["saved header rank not a rank from 0 to world_size - 1 (ignored)"] == 1


@pytest.mark.parametrize("target", ["/dev/zero", "fifo", "other"])
def test_saved_table_header_source_is_not_used_as_a_path_unless_verified(tmp_path, target):
    """A tampered header naming /dev/zero (9.7 GB read), a FIFO (hung) or another trace (its sizes
    taken) as the saved-from trace: meta.source is never kept (issue 37: not even for a regular file
    of the recorded size and modification time); the header's text is shown only."""
    import io
    import json
    import os
    import zipfile

    import numpy as np

    from daydream.analysis import analyze
    from daydream.formats import load_trace

    base = tmp_path / "base.npz"
    load_trace(str(ROOT / "fixtures" / "train_step.json.gz")).save(str(base))
    with zipfile.ZipFile(base) as z:
        members = {n: z.read(n) for n in z.namelist()}
    hdr = json.loads(bytes(np.load(io.BytesIO(members["__header__.npy"]))).decode())
    if target == "fifo":
        target = str(tmp_path / "fifo")
        os.mkfifo(target)
    elif target == "other":
        target = str(ROOT / "fixtures" / "train_step.json.gz")
        hdr["meta"]["extra"]["source_identity"] = "1:2"  # not that file's
    hdr["meta"]["source"] = target
    b = io.BytesIO()
    np.save(b, np.frombuffer(json.dumps(hdr).encode(), dtype=np.uint8))
    members["__header__.npy"] = b.getvalue()
    p = tmp_path / "t.npz"
    with zipfile.ZipFile(p, "w") as w:
        for k, v in members.items():
            w.writestr(k, v)
    t = load_trace(str(p))
    assert t.meta.source == "" and t.meta.extra["saved_from"] == target
    from daydream.formats.saved import OLD_TABLE_NOTE

    assert t.accounting.notes[OLD_TABLE_NOTE] == 1  # saved without its side members: it lacks them, and says so
    r = analyze(t, [], rank_all=True)  # nothing opens the named path (a FIFO would hang, /dev/zero would not end)
    assert r.report.ranking
