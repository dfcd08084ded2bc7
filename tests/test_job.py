"""Jobs (daydream.job): ranks read, matched, clocks aligned, collectives split, coupled replay."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import types
from hypothesis import given, settings
from hypothesis import strategies as st

from daydream.cli import main
from daydream.errors import UsageError
from daydream.job import analyze_job, load_ranks, match
from daydream.job.load import expand_inputs, rank_from_name
from daydream.job.match import align, check_world

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
DLRM = TRACES / "param_dlrm"
needs_traces = pytest.mark.skipif(not DLRM.exists(), reason="needs ../shared/traces/param_dlrm")


@pytest.fixture(scope="module")
def dlrm():
    return analyze_job([str(DLRM)])


def _first_nccl_start(rank: int) -> int:
    """The earliest start of an NCCL kernel in rank ``rank``'s table of the DLRM job (ns)."""
    from daydream.events.table import Kind
    from daydream.formats import load_trace

    t = load_trace(str(next(DLRM.glob(f"dlrm_8rank_worker{rank}.*"))))
    c = t.cols
    nccl = np.array([t.names[i].startswith("nccl") for i in c["name_id"]], bool)
    return int(c["start_ns"][(c["kind"] == Kind.KERNEL) & nccl].min())


def test_rank_from_name():
    assert rank_from_name("dlrm_8rank_worker3.pt.trace.json.gz") == 3
    assert rank_from_name("/a/rank12_trace.json") == 12
    assert rank_from_name("trace_node-2.sqlite") == 2
    assert rank_from_name("trace.json") == -1


def test_align_shared_and_estimated():
    # three ranks, two collectives; ends agree on a shared clock
    s = np.array([[100, 500], [40, 480], [90, 510]], np.int64)
    e = np.array([[200, 600], [201, 601], [199, 600]], np.int64)
    off, clock, bad = align(s, e, np.ones_like(s, bool))
    assert clock == "shared" and not off.any() and bad == 0
    shift = np.array([0, 5_000, -3_000], np.int64)[:, None]
    off, clock, bad = align(s + shift, e + shift, np.ones_like(s, bool))
    assert clock == "estimated" and bad == 2
    assert np.abs(off - shift[:, 0]).max() <= 1


@given(st.lists(st.integers(-10**9, 10**9), min_size=2, max_size=6), st.integers(0, 10**6))
@settings(max_examples=50, deadline=None)
def test_align_recovers_offsets(shifts, spread):
    """Any clock shift that breaks a common instant is recovered from the ends (to within
    the ends' own spread)."""
    R = len(shifts)
    rng = np.random.default_rng(spread)
    start = rng.integers(0, 10**6, (R, 4)) + np.arange(4) * 10**7
    arrive = start.max(axis=0)
    end = arrive + 10**5 + rng.integers(0, 3, (R, 4))
    sh = np.asarray(shifts, np.int64) - shifts[0]
    off, clock, _ = align(start + sh[:, None], end + sh[:, None], np.ones((R, 4), bool))
    if clock == "shared":
        # no shift large enough to separate the intervals: they still share an instant
        s2, e2 = start + sh[:, None], end + sh[:, None]
        assert (s2.max(axis=0) <= e2.min(axis=0)).all()
    else:
        assert np.abs(off - sh).max() <= 3


@pytest.mark.slow
@needs_traces
def test_dlrm_job_matched_and_split(dlrm):
    m = dlrm.matching
    assert [r.rank for r in dlrm.ranks] == list(range(8))
    assert {r.rank_source for r in dlrm.ranks} == {"trace"}
    assert m.clock == "shared" and not m.offset_ns.any()
    assert len(m) == 8 and m.member.all()
    # the first all-to-all's waits, derived from the raw tables (shared clock): each rank waits from
    # its first NCCL kernel's start until the last rank's (7.6 ms on rank 1, 2.1 ms on rank 0)
    first = np.array([_first_nccl_start(r) for r in range(8)])
    assert np.array_equal(m.wait_ns[:, 0], first.max() - first)
    assert int(m.ranks[m.last[0]]) == 7 and m.wait_ns[7, 0] == 0
    assert (m.wait_ns >= 0).all() and (m.transfer_ns >= 0).all()
    # wait + transfer is the recorded duration
    assert np.array_equal(m.wait_ns + m.transfer_ns, m.end_ns - m.start_ns)
    assert dlrm.report.straggler is not None and dlrm.report.straggler.rank == 7


@needs_traces
def test_dlrm_coupled_replay(dlrm):
    """Every collective's transfer starts at its replayed last arrival on every rank, and ends
    after its recorded transfer; each rank's coupled replay is within 0.1 % of its replay alone
    (the coupling adds no error of its own: |coupled| < |alone| + 0.1 %; the ranks' own errors are listed in docs/jobs.md)."""
    m, c = dlrm.matching, dlrm.coupled
    for i, (g, tl) in enumerate(zip(c.graphs, c.timelines)):
        v = m.node[i]
        assert np.array_equal(tl.end_ns[v], np.maximum(tl.start_ns[v], c.arrive_ns) + m.transfer_ns[i])
        assert np.array_equal(c.arrive_ns, np.max([t.start_ns[m.node[j]] for j, t in enumerate(c.timelines)], axis=0))
    for row in dlrm.report.rank_rows:  # coupling adds no error of its own (it may remove some: peers replayed)
        assert abs(row.error_pct) < abs(row.alone_error_pct) + 0.1
        assert abs(row.error_pct) < 10
    assert dlrm.report.rank_rows[7].waited_for.keys() <= {"4", "5"}
    # the path starts at the slowest rank's end; it passes to a peer only through a collective
    # whose replayed last arrival is that peer; segments are contiguous in time; the job is
    # host-bound (the path is mostly CPU time)
    cp = dlrm.report.critical_path
    assert cp.segments[0].rank == max(dlrm.report.rank_rows, key=lambda r: r.replayed_ns).rank
    for a, b in zip(cp.segments, cp.segments[1:]):
        assert a.via_collective >= 0 and a.start_ns == b.end_ns
        k = a.via_collective
        assert c.timelines[b.rank].start_ns[m.node[b.rank, k]] == c.arrive_ns[k]
    assert sum(s.end_ns - s.start_ns for s in cp.segments) == cp.total_ns
    assert cp.by_cause_ns["cpu"] > 0.9 * cp.total_ns


@needs_traces
def test_a_late_rank_delays_its_peers(dlrm):
    """Delaying rank 7 (the straggler) before its first collective delays every rank's end of
    that collective by the same amount; rank 0's replay is otherwise unchanged."""
    from daydream.job import couple

    m = dlrm.matching
    graphs = [r.graph for r in dlrm.ranks]
    g7 = graphs[7]
    first_cpu = int(g7.order[np.nonzero(g7.is_cpu[g7.order])[0][0]])
    gap = g7.gap_ns.copy()
    gap[first_cpu] += 1_000_000
    import dataclasses

    graphs = [*graphs[:7], dataclasses.replace(g7, gap_ns=gap)]
    c2 = couple(graphs, m)
    base = dlrm.coupled
    d = c2.timelines[0].end_ns[m.node[0, 0]] - base.timelines[0].end_ns[m.node[0, 0]]
    assert d == 1_000_000
    assert c2.arrive_ns[0] - base.arrive_ns[0] == 1_000_000


@needs_traces
def test_job_refusals(tmp_path):
    two = [str(DLRM / f"dlrm_8rank_worker{i}.pt.trace.json.gz") for i in (0, 1)]
    with pytest.raises(UsageError, match="world size 8"):
        check_world(load_ranks(two))
    dup = tmp_path / "rank0.json.gz"
    shutil.copy(two[0], dup)
    with pytest.raises(UsageError, match="both rank 0"):
        load_ranks([two[0], str(dup)])
    with pytest.raises(UsageError, match="no such"):
        expand_inputs([str(tmp_path / "nope")])


@pytest.mark.slow
@needs_traces
def test_cli_job_json_deterministic(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["--details", str(DLRM), "--json", str(a)]) == 0
    out = capsys.readouterr().out
    assert "straggler: rank 7" in out
    files = sorted(str(p) for p in DLRM.iterdir())
    assert main(["--details", *files, "--json", str(b), "--workers", "2"]) == 0
    assert a.read_bytes() == b.read_bytes()
    doc = json.loads(a.read_bytes())
    assert doc["ranks"] == 8 and doc["straggler"]["rank"] == 7
    assert main(["--details", files[0], files[1]]) == 2
    assert "world size 8" in capsys.readouterr().err


@needs_traces
def test_single_trace_unchanged(capsys):
    assert main(["--details", str(DLRM / "dlrm_8rank_worker0.pt.trace.json.gz")]) == 0
    assert "job:" not in capsys.readouterr().out


@needs_traces
def test_whatif_identity_and_one_rank(dlrm):
    """A what-if that changes nothing predicts the baseline exactly; slowing one rank's compute
    never makes any rank faster, and the rank itself is not faster."""
    from daydream.job.whatif import parse_job_specs, predict

    m, c = dlrm.matching, dlrm.coupled
    p = predict(dlrm.ranks, m, c, parse_job_specs(["scale-kernels:factor=1"], 8))
    base = [r.replayed_ns for r in dlrm.report.rank_rows]
    assert p.rank_predicted_ns == base and p.predicted_ns == p.replayed_ns and p.speedup == 1.0
    slow = predict(dlrm.ranks, m, c, parse_job_specs([r"scale-kernels:pattern=^(?!nccl),factor=3"], 8), only=[4])
    assert slow.ranks == [4]
    assert all(a >= b for a, b in zip(slow.rank_predicted_ns, base))
    assert slow.rank_predicted_ns[4] > base[4]
    # each rank's note says what the optimization did there (was: notes {} on every applied rank)
    assert sorted(p.notes) == [str(r) for r in range(8)] and all(v.startswith("scale-kernels: ") for v in p.notes.values())
    assert list(slow.notes) == ["4"] and "scaled by 3: " in slow.notes["4"]


@needs_traces
def test_whatif_straggler(dlrm):
    from daydream.job.whatif import parse_job_specs, predict

    p = predict(dlrm.ranks, dlrm.matching, dlrm.coupled, parse_job_specs(["straggler:rank=7"], 8))
    assert "7" in p.notes and "earlier" in p.notes["7"]
    # rank 7 no longer arrives last at the first collective: its peers wait less there
    assert p.predicted_ns <= p.replayed_ns
    for bad in ("straggler", "straggler:rank=8", "straggler:rank=x", "straggler:r=1"):
        with pytest.raises(UsageError):
            parse_job_specs([bad], 8)


@pytest.mark.slow
@needs_traces
def test_cli_job_opt(capsys):
    assert main(["--details", str(DLRM), "--opt", "fused-adam", "--ranks", "0,3"]) == 0
    out = capsys.readouterr().out
    assert "what-if fused-adam on ranks 0,3" in out
    assert main(["--details", str(DLRM), "--opt", "amp", "--ranks", "9"]) == 2
    assert main(["--details", str(DLRM), "--opt", "all", "--opt", "amp"]) == 2  # --opt all alone (a job ranks too)


@needs_traces
def test_job_json_matches_schema(dlrm):
    jsonschema = pytest.importorskip("jsonschema")
    from daydream.job import job_report_json

    schema = json.loads((ROOT / "schemas" / "job_report.schema.json").read_text())
    jsonschema.validate(json.loads(job_report_json(dlrm.report)), schema)


def _fake_rank(rank, colls):
    """A RankTrace stand-in: ``colls`` = [(group, op, start_ns, end_ns)] in launch order."""
    from types import SimpleNamespace

    from daydream.job.load import RankTrace

    n = len(colls)
    s = np.array([c[2] for c in colls], np.int64)
    e = np.array([c[3] for c in colls], np.int64)
    graph = SimpleNamespace(position_ns=s - 10, rec_start_ns=s, rec_end_ns=e)
    coll = SimpleNamespace(node=np.arange(n, dtype=np.int64), op=np.array([c[1] for c in colls], np.uint8),
                           size_bytes=np.full(n, 64, np.int64))
    return RankTrace(f"rank{rank}.json", rank, "file name", 3, graph, coll, np.array([c[0] for c in colls], dtype=object))


def test_match_by_process_group():
    """Collectives of two sub-communicators are matched within each group, by order; a rank
    outside a group is not a participant, and each group's last arrival is its own."""
    from daydream.graph.collectives import Op

    ar, a2a = int(Op.ALL_REDUCE), int(Op.ALL_TO_ALL)
    ranks = [_fake_rank(0, [("a", ar, 100, 500), ("a", ar, 900, 1000)]),
             _fake_rank(1, [("a", ar, 300, 501), ("b", a2a, 400, 700), ("a", ar, 950, 1001)]),
             _fake_rank(2, [("b", a2a, 650, 700)])]
    m = match(ranks)
    assert list(m.group) == ["a", "a", "b"]
    assert m.node.tolist() == [[0, 1, -1], [0, 2, 1], [-1, -1, 0]]
    assert m.clock == "shared"
    assert m.arrive_ns.tolist() == [300, 950, 650]
    assert m.ranks[m.last].tolist() == [1, 1, 2]
    assert m.wait_ns.tolist() == [[200, 50, 0], [0, 0, 250], [0, 0, 0]]
    assert m.transfer_ns.tolist() == [[200, 50, 0], [201, 51, 50], [0, 0, 50]]
    bad = [_fake_rank(0, [("a", ar, 1, 2)]), _fake_rank(1, [("a", a2a, 1, 2)])]
    with pytest.raises(UsageError, match="is all-reduce / all-to-all on different ranks .*not one job"):  # op names, not enum numbers
        match(bad)
    short = [_fake_rank(0, [("", ar, 1, 2), ("", ar, 3, 4)]), _fake_rank(1, [("", ar, 1, 2)]), _fake_rank(2, [("", ar, 1, 2), ("", ar, 3, 4)])]
    with pytest.raises(UsageError, match=r"different numbers of collectives \(rank 1 \(rank1.json\): 1; the others: 2\)"):
        match(short)
    cut = _fake_rank(1, [])
    cut.warnings.append("the file is truncated at byte 10: kept the 3 complete events")
    with pytest.raises(UsageError, match=r"rank 1 \(rank1.json, a truncated file\) issued no collective while the others issued 1"):
        match([_fake_rank(0, [("", ar, 1, 2)]), cut])


@pytest.mark.skipif(not (TRACES / "extrap").exists(), reason="needs ../shared/traces/extrap")
def test_unrelated_traces_are_not_a_job(capsys):
    """Bug found trying a folder of unrelated single-GPU traces (extrap/: three HPC codes): they
    were taken as a 3-rank job with 0 collectives. Nothing ties such files together (no stated
    world size, no collective): refused, one line, exit 2."""
    assert main(["--details", str(TRACES / "extrap")]) == 2
    err = capsys.readouterr().err
    assert "none has a collective: not one job" in err and "Traceback" not in err


def test_missing_ranks_are_listed_with_their_count():
    """A long list of missing ranks says how many (second try-out: 8 of 126 shown as if all)."""
    from daydream.job.match import _first

    assert _first([2, 3]) == "rank(s) 2, 3"
    assert _first(list(range(2, 128))) == "126 ranks: 2, 3, 4, 5, 6, 7, 8, 9, ..."


@needs_traces
def test_job_text_says_where_the_critical_path_stops(dlrm):
    """DLRM's job critical path (12.4 ms) ends at rank 7's trace start, 7.35 ms into the 19.8 ms job
    step; the text now says so instead of leaving the difference unexplained (second try-out)."""
    from daydream.job import render_job_text

    r = dlrm.report
    gap = r.step_replayed_ns - r.critical_path.total_ns
    assert gap > 0
    text = render_job_text(r)
    last = r.critical_path.segments[-1].rank
    assert f"it ends at rank {last}'s trace start, {gap / 1e6:,.3f} ms after the job step begins" in text


def test_a_rank_reads_its_adapter_warnings_for_the_cli(tmp_path):
    """A rank's adapter warnings (a salvaged truncated file) are kept on the RankTrace, so the CLI
    prints them as its one-line warnings instead of a worker's raw UserWarning (third try-out)."""
    import gzip as gz
    import warnings as w

    from daydream.job.load import read_rank

    data = gz.decompress((ROOT / "fixtures" / "train_step.json.gz").read_bytes())
    p = tmp_path / "rank0.json"
    p.write_bytes(data[: len(data) * 3 // 4])
    with w.catch_warnings():
        w.simplefilter("error")  # nothing escapes as a raw warning
        r = read_rank(str(p))
    assert len(r.warnings) == 1 and "is truncated" in r.warnings[0]


@needs_traces
def test_job_outputs_never_replace_a_rank_file(tmp_path, capsys):
    """--json naming one of the job's rank files (in a folder or a list) is refused
    before anything is written (was: the rank trace silently replaced by the job report)."""
    job = tmp_path / "job"
    shutil.copytree(DLRM, job)
    victim = job / "dlrm_8rank_worker0.pt.trace.json.gz"
    before = victim.read_bytes()
    files = sorted(str(p) for p in job.iterdir())
    for argv in ([str(job), "--json", str(victim)], [*files, "--json", str(victim)]):
        assert main(argv) == 2
        assert "is an input trace; daydream never overwrites its input" in capsys.readouterr().err
    assert victim.read_bytes() == before


@needs_traces
def test_job_ranks_needs_an_optimization_for_it(capsys):
    assert main(["--details", str(DLRM), "--ranks", "3"]) == 2
    assert "give --opt NAME too" in capsys.readouterr().err
    assert main(["--details", str(DLRM), "--ranks", "3", "--opt", "straggler:rank=7"]) == 2
    assert "does not apply to straggler" in capsys.readouterr().err


@pytest.mark.slow
@needs_traces
def test_job_optimization_that_applies_nowhere_exits_3(capsys):
    assert main(["--details", str(DLRM), "--opt", "reconbn"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("daydream-analyze: not applicable: reconbn: ranks 0,1,2,3,4,5,6,7: ")


@needs_traces
def test_straggler_composes_in_order(dlrm):
    """straggler is judged on the job the optimizations before it left; composed, each rank's
    note keeps every optimization (was: the straggler's note replaced them); a rank given twice
    or not behind the median is refused (was: compounded, and 'x1.000' applied)."""
    from daydream.errors import NotApplicable
    from daydream.job.whatif import parse_job_specs, predict

    def run(*specs, only=None):
        return predict(dlrm.ranks, dlrm.matching, dlrm.coupled, parse_job_specs(list(specs), 8), only)

    once = run("straggler:rank=7")
    # the numbers are the straggler rule's on the replayed job (they move with the model): the form is checked
    assert re.fullmatch(r"step start \d+\.\d{3} ms earlier, own work x0\.\d{3}", once.notes["7"]), once.notes["7"]
    with pytest.raises(UsageError, match="given twice"):
        run("straggler:rank=7", "straggler:rank=7")
    both = run("cuda-graphs", "straggler:rank=7", only=[7])
    assert both.notes["7"].startswith("cuda-graphs: ") and "; step start " in both.notes["7"]
    fast = run("scale-cpu:range=.,factor=0.01")
    after = run("scale-cpu:range=.,factor=0.01", "straggler:rank=7")
    assert after.predicted_ns <= fast.predicted_ns
    with pytest.raises(NotApplicable, match="rank 1 is not behind the median rank"):
        run("straggler:rank=1")


@needs_traces
def test_one_rank_of_a_job_warns_that_its_collectives_hold_peer_waits(capsys):
    """A single rank's trace of a multi-rank job (distributedInfo world size 8) says that its
    collectives keep their recorded peer waits (was: silent, and a nccl what-if looked real)."""
    assert main(["--details", str(DLRM / "dlrm_8rank_worker1.pt.trace.json.gz")]) == 0
    out = capsys.readouterr().out
    assert "warning: this trace is rank 1 of a job of 8 ranks (its distributedInfo): its 8 collective kernels keep" in out


@pytest.mark.slow
@needs_traces
def test_job_replay_trust_is_the_jobs_own_and_lists_its_ranks(dlrm, capsys):
    """The job's verdict is its own step error's; each rank's verdict of its coupled replay (the
    single-trace rule) is listed in the reason, never deciding. Before, rank 1's GPU start error
    (p99 1,039 us, 5.22 % of its step) made the whole job unreliable (a cliff at the worst rank)
    although the job's step replays within 1 %."""
    from daydream.report.trust import trust_verdict

    r = dlrm.report
    for x in r.rank_rows:
        assert x.trust == trust_verdict(abs(x.error_pct), abs(x.error_pct), 1, x.gpu_start_error_p99_pct, x.gpu_start_error_p99_us)[0]
    assert r.trust == trust_verdict(abs(r.step_error_pct), abs(r.step_error_pct))[0] == "good"
    assert "; ranks: " + ", ".join(f"{x.rank} {x.trust}" for x in r.rank_rows) in r.trust_reason
    assert main(["--details", str(DLRM), "--opt", "straggler:rank=7", "--strict-replay"]) == 0  # nothing to refuse on a good job
    assert "baseline replay (coupled): good (" in capsys.readouterr().out


def test_one_bad_rank_does_not_decide_the_job():
    from daydream.job.reporting import _job_trust

    row = types.SimpleNamespace
    rows = [row(rank=0, trust="good", error_pct=0.1, gpu_start_error_p99_us=10.0, gpu_start_error_p99_pct=0.1),
            row(rank=1, trust="unreliable", error_pct=7.0, gpu_start_error_p99_us=5000.0, gpu_start_error_p99_pct=9.0)]
    v, reason = _job_trust(0.4, rows)
    assert v == "good" and reason.startswith("job step error 0.40 %")
    assert "ranks: 0 good, 1 unreliable (rank 1: window error 7.00 %, GPU start error p99 5,000 us = 9.00 % of its step)" in reason
    assert reason.endswith("; GPU start error p99 over 1 % of the step on rank 1 (9.00 %): predictions that move GPU work there "
                           "can be off by as much")
    assert _job_trust(6.0, rows)[0] == "unreliable" and _job_trust(2.0, rows[:1])[0] == "fair"


def _fixture_with(tmp_path, name, info):
    """The fixture trace with ``distributedInfo`` set (None: removed), written as ``name``."""
    import gzip
    doc = json.loads(gzip.decompress((ROOT / "fixtures" / "train_step.json.gz").read_bytes()))
    doc.pop("distributedInfo", None)
    if info is not None:
        doc["distributedInfo"] = info
    f = tmp_path / name
    f.write_text(json.dumps(doc))
    return str(f)


def test_job_inputs_said_as_they_are(tmp_path, capsys):
    """New-user try-out, finding 7: one file given twice was a job of two ranks; a folder of one
    trace ran as a job of one rank (refusing --opt all); a file without a stated rank took its
    position, which another file stated ('both rank 0'); traces of jobs of 128 and 8 ranks were
    'both rank 0' instead of 'not one job'."""
    fx = str(ROOT / "fixtures" / "train_step.json.gz")
    with pytest.raises(UsageError, match="the same trace is given twice"):
        expand_inputs([fx, fx])
    one = tmp_path / "one"
    one.mkdir()
    shutil.copy(fx, one / "t.json.gz")
    assert main(["--details", str(one), "--opt", "all"]) == 0
    assert "what to try first" in capsys.readouterr().out
    d = tmp_path / "mixed"
    d.mkdir()
    a = _fixture_with(d, "a.json", {"rank": 0, "world_size": 2})
    b = _fixture_with(d, "b.json", None)  # no stated rank, first in no order that matters: takes the free rank 1
    ranks = load_ranks([b, a])
    assert [(r.rank, r.rank_source) for r in ranks] == [(0, "trace"), (1, "order")]
    c = _fixture_with(d, "c.json", {"rank": 1, "world_size": 8})
    with pytest.raises(UsageError, match="of a job of 8 ranks .* of one of 2 .*not one job"):
        load_ranks([a, c])


def test_world_size_one_on_a_job_is_refused():
    """world-size:n=1 on a job noted 'no rank waits' while the coupled replay kept every wait
    (19.761 -> 19.753 ms): at world size 1 the ranks are separate runs, so it is refused."""
    from daydream.job.whatif import parse_job_specs

    with pytest.raises(UsageError, match="world size 1 no rank has peers"):
        parse_job_specs(["world-size:n=1"], 8)
    assert parse_job_specs(["world-size:n=2"], 8)


@needs_traces
def test_world_size_on_some_ranks_only_is_refused(dlrm):
    """world-size on --ranks 0 was accepted without a word; it changes every collective's group."""
    from daydream.job.whatif import parse_job_specs, predict

    with pytest.raises(UsageError, match="applies to every rank"):
        predict(dlrm.ranks, dlrm.matching, dlrm.coupled, parse_job_specs(["world-size:n=16"], 8), [0])
