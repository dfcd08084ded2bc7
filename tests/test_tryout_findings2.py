"""Try-out findings of issues 31/33/35/37's follow-ups: each was seen on the merged tool on a real
trace (or a trace made to show it) and is pinned here with the right behaviour."""

from __future__ import annotations

from pathlib import Path

import pytest

from daydream.cli import main
from daydream.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
needs_traces = pytest.mark.skipif(not TRACES.exists(), reason="../shared/traces absent")
RESNET = TRACES / "kineto_tbplugin" / "resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"
DLRM = TRACES / "param_dlrm"


def test_straggler_negative_rank_is_not_said_against_the_format_limit():
    from daydream.job.whatif import parse_job_specs

    # was: "the job has ranks 0..1048575" (the format's largest world size, before the ranks are read)
    with pytest.raises(UsageError) as e:
        parse_job_specs(["straggler:rank=-1"], None)
    assert "numbered from 0" in str(e.value) and "1048575" not in str(e.value)
    with pytest.raises(UsageError, match=r"ranks 0\.\.7"):
        parse_job_specs(["straggler:rank=8"], 8)
    assert parse_job_specs(["straggler:rank=9"], None) == [("straggler", {"rank": 9})]  # judged once the job is read


@needs_traces
def test_straggler_negative_rank_on_a_job_cli(capsys):
    assert main([str(DLRM), "--opt", "straggler:rank=-1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "1048575" not in err and "numbered from 0" in err


@needs_traces
@pytest.mark.slow
def test_activation_checkpointing_bad_pattern_is_bad_input(capsys):
    # was: exit 3 ("not applicable: layers='(' is not a regular expression"); scale-kernels' pattern=( exits 2
    assert main([str(RESNET), "--opt", "activation-checkpointing:layers=("]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad regular expression '('" in err


def test_activation_checkpointing_pattern_goes_through_the_bounded_matcher():
    from daydream.errors import DaydreamError
    from daydream.optimizations.activation_checkpointing import unit_paths

    with pytest.raises(DaydreamError, match="bad regular expression"):
        unit_paths(["a.b"], {0}, "(")


def test_plural_and_parameter_type_descriptions():
    from daydream.optimizations import REGISTRY, load_all
    from daydream.util.display import plural

    assert (plural(1, "GPU"), plural(4, "GPU"), plural(1, "micro-batch", "micro-batches")) == ("1 GPU", "4 GPUs", "1 micro-batch")
    assert plural(2048, "micro-batch", "micro-batches") == "2,048 micro-batches"
    load_all()
    # was: "bandwidth='0GB/s' is not a valid a link preset ...": a description with its own article read twice
    with pytest.raises(UsageError) as e:
        REGISTRY["tp"].resolve({"bandwidth": "0GB/s"})
    assert "valid a " not in str(e.value) and "is not a link preset" in str(e.value)
    for opt in REGISTRY.values():
        for k, p in opt.params.items():
            name = getattr(p.type, "__name__", "")
            assert not name.startswith(("a ", "an ")) or "valid" not in name, (opt.name, k)


@needs_traces
@pytest.mark.slow
def test_one_gpu_and_one_micro_batch_in_the_notes(capsys):
    bert = TRACES / "tracelens" / "h100_gaunernst_bert-small-uncased__1016001.json.gz"
    main(["--details", str(bert), "--opt", "tp:degree=1", "--opt", "pp:stages=1,microbatches=1"])
    out = capsys.readouterr().out
    assert "over 1 GPU on" in out and "over 1 GPUs" not in out
    assert "1 micro-batch of" in out and "1 micro-batches" not in out
