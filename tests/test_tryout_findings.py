"""Defects a new user found trying the merged tool (CPU what-ifs, gpu-upgrade, communication
what-ifs, --compare-to) on the real traces, each pinned with the right behaviour."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from daydream.analysis import analyze
from daydream.cli import main
from daydream.errors import UsageError
from daydream.events.table import Kind
from daydream.formats import load_trace
from daydream.mapping.rules import nvtx_base_name
from daydream.optimizations.comm_common import MAX_PIECES, MIB, check_pieces
from daydream.report.summary import EMPTY_PATH
from derived import resnet50_weight_numel

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
needs_traces = pytest.mark.skipif(not TRACES.exists(), reason="../shared/traces absent")
RESNET = TRACES / "kineto_tbplugin" / "resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"


def test_check_pieces_refuses_a_size_that_cuts_too_many_pieces():
    assert check_pieces(100 * MIB, 25 * MIB, "buckets: size") == 4
    assert check_pieces(0, 1.0, "buckets: size") == 0
    with pytest.raises(UsageError, match="pieces"):
        check_pieces(100 * MIB, 100 * MIB / (MAX_PIECES + 1), "buckets: size")


@needs_traces
def test_tiny_bucket_size_is_a_usage_error_not_a_memory_error(capsys):
    # was: internal error (MemoryError: Unable to allocate 726. GiB ...), exit 1
    assert main(["--details", str(TRACES / "hta" / "nccl_data.json.gz"), "--opt", "buckets:size=1e-9"]) == 2
    err = capsys.readouterr().err
    assert "pieces" in err and "internal error" not in err


@pytest.mark.slow
@needs_traces
def test_tiny_p3_slice_is_refused_quickly(capsys):
    # was: ran for many minutes (5.8 M slices inserted one by one)
    assert main(["--details", str(RESNET), "--opt", "p3:world=64,slice_mb=0.0001"]) == 2
    assert "slice_mb" in capsys.readouterr().err


@needs_traces
def test_answer_step_is_not_the_empty_trailing_step():
    # mi250: ProfilerStep#1 9.3 ms with all the work, ProfilerStep#2 0.049 ms with no API call;
    # the answer said "step 0.049 ms (median of 2 ProfilerSteps)"
    r = analyze(load_trace(str(TRACES / "hta" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"))).report
    worked = [s for s in r.steps if not s.note]
    assert len(worked) == 1 and len(r.steps) == 2
    assert r.summary.answer.step_ns == worked[0].replayed_ns
    assert r.summary.answer.steps == 1


def _empty_trace(tmp_path) -> str:
    p = tmp_path / "empty.json"
    p.write_text(json.dumps({"traceEvents": []}))
    return str(p)


def test_empty_critical_path_is_not_called_synchronization(tmp_path, capsys):
    # was: "bound by synchronization (0 % of the critical path)" (the tie-break of all-zero shares)
    f = _empty_trace(tmp_path)
    a = analyze(load_trace(f)).report.summary.answer
    assert a.bound_by == "host work" and a.bound_detail == EMPTY_PATH
    # the command refuses a trace with nothing to analyse (exit 2, one line): a report of zeros
    # with "baseline replay: good" read as an answer (new-user finding)
    assert main(["--details", f]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CPU call, range or GPU task to analyse (the trace holds no events)" in err[0]


@needs_traces
def test_cpu_only_trace_is_bound_by_host_work():
    a = analyze(load_trace(str(TRACES / "hta" / "cpu_only.json.gz"))).report.summary.answer
    assert a.bound_by == "host work" and a.bound_detail == EMPTY_PATH


@needs_traces
def test_gpu_upgrade_without_gpu_tasks_does_not_apply(capsys):
    # was: ranked first by --opt all ("try gpu-upgrade 1.00x") on a trace with no GPU task
    f = str(TRACES / "hta" / "cupti_profiler_benchmark_result_924719_1679055439_trace.json.gz")
    assert main(["--details", f, "--opt", "gpu-upgrade"]) == 3
    assert "no GPU kernels" in capsys.readouterr().err
    assert main(["--details", f, "--opt", "gpu-upgrade:cpu_speed=2"]) == 0  # the host side still changes
    r = analyze(load_trace(f), rank_all=True).report
    assert "gpu-upgrade" not in r.summary.answer.whatifs


def test_nvtx_base_name():
    assert nvtx_base_name("aten::mm, seq = 12, op_id = 7") == "aten::mm"
    assert nvtx_base_name("aten::to, op_id = 998949") == "aten::to"
    assert nvtx_base_name("aten::add, sizes = [[2], [2]]") == "aten::add"
    assert nvtx_base_name("FSDP::pre_forward (blocks.1), x") == "FSDP::pre_forward (blocks.1), x"
    assert nvtx_base_name("DataLoader") == "DataLoader"


@needs_traces
def test_compare_pairs_emit_nvtx_ranges_by_op():
    # was: "CPU range: aten::to, op_id = 998949   0.000  15.319  -100 %": every emit_nvtx range
    # name is unique per call, so no range of one trace matched the other's
    from daydream.report.compare import compare

    before = analyze(load_trace(str(TRACES / "nsys_ai" / "mfu_2gpu_before.sqlite")))
    after = analyze(load_trace(str(TRACES / "nsys_ai" / "mfu_2gpu_after.sqlite")))
    rows = [r for r in compare(before, after).rows if r.group == "CPU range"]
    assert rows and all(", op_id = " not in r.name and ", seq = " not in r.name for r in rows)
    assert any(r.name == "aten::to" and r.before_ns > 0 and r.after_ns > 0 for r in rows)


def test_top_cpu_ranges_sum_emit_nvtx_calls_per_op():
    # was: rows such as "aten::layer_norm, seq = 47588, op_id = 999617" (one call) and
    # "other: aten:: (4456 names)" on the nsys_ai trace
    import numpy as np

    from daydream.report.summary import _by_op

    names = ["(no range)", "aten::mm, seq = 1, op_id = 7", "aten::mm, seq = 2, op_id = 9", "Annotation"]
    out, tot, path = _by_op(names, np.array([5.0, 2.0, 3.0, 1.0]), {"aten::mm, seq = 2, op_id = 9": 3, "Annotation": 1})
    assert out == ["(no range)", "aten::mm", "Annotation"]
    assert tot.tolist() == [5.0, 5.0, 1.0] and path == {"aten::mm": 3, "Annotation": 1}


@needs_traces
def test_top_cpu_ranges_of_an_emit_nvtx_trace_name_ops():
    r = analyze(load_trace(str(TRACES / "nsys_ai" / "mfu_2gpu_before.sqlite"))).report
    rows = r.summary.top_cpu_ranges
    assert rows and not any(", op_id = " in t.name or ", seq = " in t.name for t in rows)
    assert sum(t.total_pct for t in rows) == pytest.approx(100.0, abs=0.2)


@pytest.mark.parametrize("flag, a, b", [("--plot", "a.svg", "b.html"), ("--json", "a.json", "b.json"),
                                        ("--timeline", "a.json.gz", "b.json.gz"), ("--save-table", "a.npz", "b.npz")])
def test_one_file_option_given_twice_is_refused(flag, a, b, tmp_path, capsys):
    # was: exit 0, only the second file written, the first silently not
    fixture = str(Path(__file__).resolve().parents[1] / "fixtures" / "train_step.json.gz")
    assert main(["--details", fixture, flag, str(tmp_path / a), flag, str(tmp_path / b)]) == 2
    assert "given twice" in capsys.readouterr().err
    assert not (tmp_path / a).exists() and not (tmp_path / b).exists()


@needs_traces
def test_answer_does_not_suggest_a_what_if_that_gains_nothing(capsys):
    # was: "try cuda-graphs 1.00x" (con_kernel: 539.987 -> 539.811 ms), advice that gains nothing
    from daydream.report.summary import WHATIF_MIN_SPEEDUP

    r = analyze(load_trace(str(TRACES / "extrap" / "con_kernel.sqlite")), rank_all=True).report
    assert r.ranking and all(v >= WHATIF_MIN_SPEEDUP for v in r.summary.answer.whatifs.values())
    assert "cuda-graphs" not in r.summary.answer.whatifs
    r = analyze(load_trace(str(RESNET)), rank_all=True).report  # real gains are still suggested
    assert r.summary.answer.whatifs and all(v >= WHATIF_MIN_SPEEDUP for v in r.summary.answer.whatifs.values())


@needs_traces
def test_a_trace_without_small_kernels_does_not_set_the_floor():
    """hta/cuda_event_sync_multi_stream (A100, three 123 us kernels): the A100 has no measured floor,
    and the trace's smallest kernel had been taken as the floor, so all of its time was 'floor' and
    A100 -> H100 predicted 0.372 -> 0.003 ms (124x). The trace-derived floor is capped at the
    largest measured floor; the predicted GPU time stays within the datasheets' ratios (< 5x)."""
    import numpy as np

    from daydream.events.table import Kind
    from daydream.costmodel.gpus import find_gpu
    from daydream.costmodel import kernel_model as KM

    res = analyze(load_trace(str(TRACES / "hta" / "cuda_event_sync_multi_stream.json.gz")), ["gpu-upgrade:target=H100"])
    g, pg = res.graph, res.predicted_graph
    assert KM.kernel_floor_ns(find_gpu("A100"), g) == max(KM.KERNEL_FLOOR_NS.values())
    before = int(g.dur_ns[g.node_kind == Kind.KERNEL].sum())
    after = int(pg.dur_ns[pg.node_kind == Kind.KERNEL].sum())
    assert before / 5 < after < before


@needs_traces
def test_start_error_share_is_of_the_answer_step_not_the_empty_trailing_one():
    # mi250: ProfilerStep#1 9.288 ms holds all the work, ProfilerStep#2 0.049 ms has no API call.
    # The answer's step excludes the empty step; the trust line took the median of both (4.67 ms)
    # and said "GPU start error p99 5,559 us is 119.06 % of the median step"
    r = analyze(load_trace(str(TRACES / "hta" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"))).report
    worked = [s for s in r.steps if not s.note]
    assert len(worked) == 1
    want = r.trust.gpu_start_error_p99_us * 1e5 / worked[0].measured_ns
    assert r.trust.gpu_start_error_p99_pct == pytest.approx(want, abs=1e-3)


@pytest.mark.parametrize("cut", [5, 20, 100])
def test_a_gzip_cut_short_is_called_truncated_not_empty(cut, tmp_path, capsys):
    # was: "the file is empty" (5-40 bytes kept) or "not a trace daydream can read" (100 bytes)
    data = (ROOT / "fixtures" / "train_step.json.gz").read_bytes()
    p = tmp_path / "cut.json.gz"
    p.write_bytes(data[:cut])
    assert main(["--details", str(p)]) == 2
    err = capsys.readouterr().err
    assert "truncated" in err and f"byte offset {cut}" in err and "empty" not in err
    assert len(err.strip().splitlines()) == 1


def test_an_empty_gzip_stream_is_still_an_empty_file(tmp_path, capsys):
    import gzip

    p = tmp_path / "empty.json.gz"
    p.write_bytes(gzip.compress(b""))
    assert main(["--details", str(p)]) == 2
    assert "the file is empty" in capsys.readouterr().err


@needs_traces
def test_source_kernel_floor_is_measured_not_taken_from_a_prior_prediction():
    # dlrm rank 0 (V100, no measured floor in the table: the trace's smallest kernel, 2.0 us).
    # `--opt amp --opt gpu-upgrade:target=A10G` said "floor 1.000 -> 1.000 us": the floor was read
    # from the durations amp had just halved, not from the recorded kernels
    import numpy as np

    from daydream.costmodel.gpus import find_gpu
    from daydream.graph import NODE_CPU
    from daydream.costmodel.kernel_model import kernel_floor_ns
    from daydream.transform import scale

    g = analyze(load_trace(str(TRACES / "param_dlrm" / "dlrm_8rank_worker0.pt.trace.json.gz"))).graph
    v100 = find_gpu("V100 SXM2")
    halved = scale(g, g.node_kind != NODE_CPU, 0.5)
    kernels = g.node_kind == Kind.KERNEL  # the floor is the trace's smallest kernel (derived from the graph's durations)
    assert kernel_floor_ns(v100, g) == int(g.dur_ns[kernels].min())
    assert kernel_floor_ns(v100, halved) == kernel_floor_ns(v100, g)
    r = analyze(load_trace(str(TRACES / "param_dlrm" / "dlrm_8rank_worker0.pt.trace.json.gz")),
                ["amp", "gpu-upgrade:target=A10G"]).report
    notes = " ".join(o.note for o in r.predictions[0].optimizations if o.name == "gpu-upgrade")
    floor_us = kernel_floor_ns(v100, g) / 1e3
    assert f"floor {floor_us:.3f} -> {floor_us:.3f} us" in notes and np.isfinite(r.predictions[0].window.predicted_ns)


def _args_null_trace(tmp_path: Path) -> Path:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 5, "args": None},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2, "dur": 1,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 3, "dur": 2,
         "args": {"device": 0, "stream": 7, "correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 6, "dur": 2, "args": None},
    ]
    path = tmp_path / "args_null.json"
    path.write_text(json.dumps({"traceEvents": events}))
    return path


@pytest.mark.parametrize("fast", [True, False])
def test_args_null_is_read_as_no_args(tmp_path, monkeypatch, fast):
    # was: exit 2, "traceEvents[0].args: wrong JSON type: Expected `object`, got `null`"
    from daydream.formats.kineto import times as kineto_times

    monkeypatch.setattr(kineto_times, "_FAST", fast)
    table = load_trace(str(_args_null_trace(tmp_path)))
    names = [table.names[i] for i in table.cols["name_id"]]
    assert names == ["aten::mm", "cudaLaunchKernel", "k", "k2"]
    k, k2 = names.index("k"), names.index("k2")
    # k2 has no args: device from the pid, stream from the tid, no correlation
    assert table.cols["device"][k2] == 0 and table.cols["stream"][k2] == 7
    assert table.cols["correlation"][k2] == -1 and table.cols["correlation"][k] == 1
    assert table.cols["external_id"][names.index("aten::mm")] == -1


@pytest.mark.slow
@needs_traces
def _joined(out: str) -> str:
    """The answer block of a text report (up to its first blank line), its wrapped lines joined."""
    return " ".join(x.strip() for x in out.split("\n\n", 1)[0].splitlines())


def test_answer_lines_answer_the_opt_asked(capsys):
    # was: the asked --opt's speed-up only on line ~99 of the report, the answer line about other what-ifs
    assert main(["--details", str(RESNET), "--opt", "amp", "--opt", "fusion"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("answer: ")
    answer = _joined(out)  # the answer's lines, wrapped at 100 columns (issue 31), joined
    base = analyze(load_trace(str(RESNET)), []).report  # the replayed baseline (it moves with the model: not pinned)
    step, win = base.summary.answer.step_ns / 1e6, base.window.replayed_ns / 1e6
    assert f"what-if amp + fusion: median step {step:,.3f} -> " in answer and f"traced window {win:,.3f} -> " in answer
    assert "per-step speed-ups " in answer
    assert main(["--details", str(RESNET), "--opt", "amp:dtype=bf16"]) == 3  # exit 3: not applicable
    answer = _joined(capsys.readouterr().out)
    assert "what-if amp: not applicable: the V100 SXM2 has no bf16 Tensor Cores" in answer and "give amp:dtype=fp16 (or auto)" in answer


def test_cpu_rows_without_a_numeric_tid_are_counted(tmp_path):
    # was: cpu_op events with a string tid lost their thread silently (no range, no count)
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": "main", "ts": 1, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 11, "dur": 1,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": "stream 7", "ts": 13, "dur": 2,
         "args": {"device": 0, "stream": 7, "correlation": 1}},
    ]
    path = tmp_path / "str_tid.json"
    path.write_text(json.dumps({"traceEvents": events}))
    table = load_trace(str(path))
    notes = table.accounting.notes
    key = next(k for k in notes if k.startswith("CPU rows whose tid is absent or not a number"))
    assert notes[key] == 1  # the kernel's "stream 7" tid is not counted: GPU rows take their stream from args


@needs_traces
def test_fused_adam_note_names_the_optimizer(capsys):
    # was: "fused-adam 1.10x" recommended on an SGD trace without saying which optimizer it fuses
    assert main(["--details", str(RESNET), "--opt", "fused-adam"]) == 0
    assert "6 optimizer step(s) (the mapped optimizer phase; SGD): " in capsys.readouterr().out


def test_overlapping_profiler_steps_are_warned():
    from daydream.report.trust import overlapping_steps

    # was: accepted silently (a step's 34 kernels also counted in the step before)
    steps = [("ProfilerStep#1", 0, 100, 1, 1), ("ProfilerStep#2", 90, 200, 1, 1), ("ProfilerStep#3", 200, 300, 1, 1),
             ("ProfilerStep#1", 50, 150, 2, 2)]  # another process (a rank of the same job) may overlap
    assert overlapping_steps(steps) == 1
    assert overlapping_steps(steps[2:]) == 0 and overlapping_steps([]) == 0


def test_gpu_tasks_sharing_a_launch_are_counted():
    # was: four kernels with one correlation id were linked to one call without a word
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from tablebuilder import TB

    from daydream.graph import build_graph

    b = TB()
    c = b.call("cudaLaunchKernel", 0, 10)
    c2 = b.call("cudaLaunchKernel", 20, 30)
    for s in (100, 200, 300):
        b.gpu(c, s, s + 50)
    b.gpu(c2, 400, 450)
    g = build_graph(b.table())
    key = next(k for k in g.counts if k.startswith("GPU tasks sharing their launching call"))
    assert g.counts[key] == 3


@pytest.mark.parametrize("fast", [True, False])
def test_args_null_launch_data_from_the_load_equals_the_re_read(tmp_path, monkeypatch, fast):
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_launch_pass import assert_same

    from daydream.formats.kineto import times as kineto_times
    from daydream.formats import launch_data as LD

    monkeypatch.setattr(kineto_times, "_FAST", fast)
    path = _args_null_trace(tmp_path)
    a, b = LD.launch_data_of(load_trace(str(path))), LD.read_launch_data(str(path), "kineto")
    assert_same(a, b)


def test_saved_table_never_reads_launch_data_from_the_trace_it_names(tmp_path):
    # was: a saved table re-read whatever file sat at its (relative) source path: other kernels'
    # launch data, silently; then (issue 37) it still read a file of the recorded size and mtime:
    # a path chosen by the input. Now a table without its own launch data lacks it, and says so.
    import os
    import shutil

    from daydream.formats import launch_data as LD
    from daydream.formats.saved import OLD_TABLE_NOTE

    src = tmp_path / "a.json"
    shutil.copy(_args_null_trace(tmp_path), src)
    t = load_trace(str(src))
    t.launch = None  # as a table saved before tables carried it
    npz = tmp_path / "a.npz"
    t.save(str(npz))
    saved = load_trace(str(npz))
    assert saved.meta.source == "" and os.path.isabs(saved.meta.extra["saved_from"])
    assert "names no trace file" in LD.launch_data_of(saved).reason
    assert saved.accounting.notes[OLD_TABLE_NOTE] == 1


def test_answer_line_says_when_the_replay_is_unreliable(tmp_path, capsys):
    # was: the replayed step was given as the answer, UNRELIABLE only lines later
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
         "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 900, "dur": 50,
         "args": {"device": 0, "stream": 7, "correlation": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 20, "dur": 5,
         "args": {"correlation": 2}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 30, "dur": 50,
         "args": {"device": 0, "stream": 7, "correlation": 2}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "pid": 1, "tid": 1, "ts": 30, "dur": 930},
    ]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"traceEvents": events}))
    assert main(["--details", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    verdict = next(x for x in out if x.strip().startswith("baseline replay:"))
    # kernels that ran out of their stream's launch order: the replay cannot reproduce the step
    assert verdict.strip().startswith("baseline replay: unreliable")
    assert out[0].startswith("answer: step ") and out[0].endswith("; UNRELIABLE baseline replay (see below)")


def test_a_composition_names_the_optimization_that_does_not_apply():
    """``--opt fusion --opt amp`` on a 16-bit trace: the refusal says it is amp (second try-out:
    'fusion + amp: not applicable: the trace already runs in half precision' named neither)."""
    from daydream.analysis import apply_all, resolve_opt
    from daydream.errors import NotApplicable
    from daydream.graph import build_graph

    from tablebuilder import TB

    b = TB()
    cs = [b.call("cudaLaunchKernel", s, s + 10) for s in (0, 100)]
    b.call("cudaDeviceSynchronize", 200, 700)
    b.gpu(cs[0], 500, 600, name="ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn")
    b.gpu(cs[1], 600, 650, name="void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>(int)")
    g = build_graph(b.table())
    with pytest.raises(NotApplicable, match=r"^amp \(after scale-kernels\): the trace already runs in half precision"):
        apply_all(g, [resolve_opt("scale-kernels:factor=0.5"), resolve_opt("amp")])
    with pytest.raises(NotApplicable, match=r"^amp: the trace already runs in half precision"):
        apply_all(g, [resolve_opt("amp"), resolve_opt("scale-kernels:factor=0.5")])
    with pytest.raises(NotApplicable, match=r"^the trace already runs in half precision"):  # alone: its own name is the key
        apply_all(g, [resolve_opt("amp")])


@needs_traces
@pytest.mark.parametrize("extra", [["--compare-to", "X"]])
def test_job_mode_refuses_what_it_does_not_do(capsys, extra):
    """Job mode took --compare-to and did nothing with it (second try-out); --strict-replay is
    a job option since the job report judges its coupled replay (tests/test_job.py)."""
    ranks = sorted((TRACES / "param_dlrm").glob("*.json.gz"))[:2]
    assert main(["--details", str(ranks[0]), str(ranks[1]), *extra]) == 2
    assert "apply to one trace" in capsys.readouterr().err


def test_one_trace_refuses_job_options(capsys):
    """--ranks and --workers with one trace were ignored."""
    trace = str(ROOT / "fixtures" / "train_step.json.gz")
    for extra in (["--ranks", "0"], ["--workers", "2"]):
        assert main(["--details", trace, *extra]) == 2
        assert "apply to a job" in capsys.readouterr().err
    # --scheduler with one trace tried to reach the cluster first (20 s) (third try-out)
    assert main(["--details", trace, "--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert "give several traces or a folder" in capsys.readouterr().err


@needs_traces
def test_what_if_line_compares_one_step_with_itself(tmp_path):
    """The what-if line's step is the answer's median step before and after (second try-out: the
    median of the predicted steps came from another step, and 'gpu-upgrade: step 175.152 -> 176.074
    ms (median)' read as a slowdown while 5 of 6 steps got faster)."""
    from daydream.render.text import asked_lines

    from daydream.report.summary import median

    rep = analyze(load_trace(str(RESNET)), ["gpu-upgrade:kernel_model=launch"]).report  # the launch rules (the numbers above)
    p = rep.predictions[0]
    line = asked_lines(rep)[0]
    # issue 31: the true medians of the same steps before and after (6 steps: the mean of the middle two)
    before, after = median(w.replayed_ns for w in rep.steps), median(w.predicted_ns for w in p.steps)
    assert before == rep.summary.answer.step_ns == (sorted(w.replayed_ns for w in rep.steps)[2] + sorted(w.replayed_ns for w in rep.steps)[3]) / 2
    assert f"median step {before / 1e6:,.3f} -> {after / 1e6:,.3f} ms ({before / after:.3f}x)" in line
    sp = sorted(w.speedup for w in p.steps)
    assert f"per-step speed-ups {sp[0]:.3f}x to {sp[-1]:.3f}x (median {(sp[2] + sp[3]) / 2:.3f}x)" in line


@needs_traces
def test_time_by_task_kind_rows_add_up_with_what_no_step_holds():
    """ResNet-50's final cudaDeviceSynchronize (16.2 ms) belongs to no ProfilerStep: the window's
    sync wait was 16.677 ms and the steps summed to 0.470 (second try-out). An 'outside the steps'
    row holds the rest, so every column adds up."""
    from daydream.render.text import BREAKDOWN_FIELDS, breakdown_section

    rep = analyze(load_trace(str(RESNET))).report
    lines = breakdown_section(rep)
    rest = next(ln for ln in lines if ln.strip().startswith("outside the steps"))
    vals = [float(x.replace(",", "")) for x in rest.split()[3:]]
    for (_, f), v in zip(BREAKDOWN_FIELDS, vals):
        total = getattr(rep.window.breakdown, f) - sum(getattr(w.breakdown, f) for w in rep.steps)
        assert abs(v - total / 1e6) < 1e-3, f
    assert vals[2] > 16.0  # the sync wait after the last step


@needs_traces
def test_no_gpu_task_no_measured_launch_latency(capsys):
    """A trace without GPU tasks said 'launch latency L = 0.000 us (measured)' (second try-out)."""
    assert main(["--details", str(TRACES / "hta" / "cpu_only.json.gz")]) == 0
    out = capsys.readouterr().out
    assert "launch latency L, GPU gap G: not measured (no GPU task in the trace)" in out and "(measured)" not in out


@pytest.mark.slow
@needs_traces
def test_a_wait_on_inferred_hand_overs_says_so(capsys):
    """ResNet-50's answer names a wait for the autograd engine thread that rests only on inferred
    hand-over edges; neither the text nor the JSON said so (second try-out)."""
    rep = analyze(load_trace(str(RESNET))).report
    w = rep.summary.answer.wait
    assert w is not None and w.engine and w.edges > 0 and w.inferred_edges == w.edges
    assert main(["--details", str(RESNET)]) == 0
    line = _joined(capsys.readouterr().out)
    assert "waits in backward()" in line and f"[inferred: all {w.edges} edges from thread" in line


def test_comparison_labels_say_what_they_measure(capsys):
    """The comparison's 'phase CPU' (API calls only) and 'CPU range' (inclusive) read like the phase
    table's CPU time (calls and gaps) and the top-CPU-range table's (second try-out)."""
    trace = str(ROOT / "fixtures" / "train_step.json.gz")
    assert main(["--details", trace, "--compare-to", trace]) == 0
    out = capsys.readouterr().out
    assert "phase API calls: " in out and "CPU range incl.: " in out
    assert "  phase CPU: " not in out and "  CPU range: " not in out


@needs_traces
def test_gpu_upgrade_rule_shares_add_up():
    """The rules' shares of GPU time add up to 100 %; latency-bound tasks, a subset, are given as
    such (second try-out: 17 %, 1 %, 76 %, 0 %, 5 %, 41 % read as one partition)."""
    import re

    rep = analyze(load_trace(str(RESNET)), ["gpu-upgrade:kernel_model=launch"]).report  # the rules' note
    note = rep.predictions[0].optimizations[0].note
    rules = note.split("rules: ", 1)[1].split("; ", 1)[0]
    main_part, _, subset = rules.partition(", of these latency-bound ")
    shares = [int(x) for x in re.findall(r"\((\d+)%\)", main_part)]
    assert 98 <= sum(shares) <= 102 and subset


@needs_traces
def test_two_ranks_in_one_nsys_file_are_predicted_per_process_and_warned():
    """mfu_2gpu_before holds 2 ranks: the prediction has a row per process like the baseline, and a
    warning says the ranks are replayed independently, collectives keeping their recorded waits
    (second try-out finding 12)."""
    rep = analyze(load_trace(str(TRACES / "nsys_ai" / "mfu_2gpu_before.sqlite")), ["scale-kernels:pattern=flash,factor=0.5"]).report
    p = rep.predictions[0]
    assert [w.name for w in p.processes] == [w.name for w in rep.processes] and len(p.processes) == 2
    assert max(w.predicted_ns for w in p.processes) == p.window.predicted_ns
    assert any(w.startswith("this trace holds 2 processes whose ") and "independent processes" in w for w in rep.warnings)


def test_every_section_line_is_one_line():
    """Each element of a section is one line of output (render_text escapes a newline inside one, so
    a multi-line element would show as '\\n'): predictions with a 'changed:' line included."""
    from daydream.render.text import sections

    t = load_trace(str(ROOT / "fixtures" / "train_step.json.gz"))
    for opts, rank_all in ((["scale-kernels:pattern=gemm,factor=0.5"], False), (["amp", "remove-syncs"], False), ([], True)):
        rep = analyze(t, opts, rank_all=rank_all).report
        assert rep.predictions or rep.ranking
        for sec in sections(rep):
            for line in sec:
                assert "\n" not in line, line[:120]


@needs_traces
def test_a_window_holding_cuda_start_up_is_warned():
    """AlexNet's window is 69 % one call: cudaDeviceGetStreamPriorityRange, 29.9 s (CUDA context
    creation); the answer said 'bound by host work in forward' with no word of start-up (second
    try-out). Steady-state traces (ResNet-50: one 2 ms call, 0.2 % of the window) are not warned."""
    from daydream.render.text import answer_lines

    t = load_trace(str(TRACES / "hta" / "alexnet_benchmark_result_2869224_1695835535_trace.json.gz"))
    rep = analyze(t).report
    w = [x for x in rep.warnings if "one-time start-up" in x]
    # derived from the table: the longest call is the priority-range query (CUDA context creation),
    # and the warning's total holds it and is at most the window
    c = t.cols
    call = int(np.argmax(np.where(c["kind"] == Kind.RUNTIME, c["end_ns"] - c["start_ns"], -1)))
    assert t.names[c["name_id"][call]] == "cudaDeviceGetStreamPriorityRange"
    longest = (c["end_ns"][call] - c["start_ns"][call]) / 1e6
    m = re.match(r"(\d+) API calls that do not wait for the GPU take ([\d,.]+) ms \(cudaDeviceGetStreamPriorityRange ([\d,.]+) ms", w[0])
    assert len(w) == 1 and m and m.group(3) == f"{longest:,.1f}"
    assert longest <= float(m.group(2).replace(",", "")) <= rep.window.measured_ns / 1e6
    assert " ".join(x.strip() for x in answer_lines(rep)).endswith("; the window holds one-time start-up (see the warning below))"[:-1])
    rep = analyze(load_trace(str(RESNET))).report
    assert not any("one-time start-up" in x for x in rep.warnings)


def test_steps_sharing_a_name_keep_their_own_baseline(tmp_path):
    """Two ProfilerSteps with one name (two processes' ProfilerStep#5, a renamed step): each predicted
    step is paired with its own baseline row (third try-out: both took the second one's, and a fake
    0.971x appeared in the answer line)."""
    import gzip as gz

    doc = json.loads(gz.decompress((ROOT / "fixtures" / "train_step.json.gz").read_bytes()))
    names = sorted({e["name"] for e in doc["traceEvents"] if str(e.get("name", "")).startswith("ProfilerStep#")})
    assert len(names) >= 2
    for e in doc["traceEvents"]:
        if e.get("name") == names[1]:
            e["name"] = names[0]
    p = tmp_path / "dup.json"
    p.write_text(json.dumps(doc))
    rep = analyze(load_trace(str(p)), ["scale-kernels:pattern=gemm,factor=0.5"]).report
    pred = rep.predictions[0]
    assert [w.name for w in pred.steps] == [w.name for w in rep.steps]
    assert [w.replayed_ns for w in pred.steps] == [w.replayed_ns for w in rep.steps]
    assert len({w.replayed_ns for w in pred.steps}) == len(pred.steps)


def test_gpu_tasks_without_a_process_make_no_process_row():
    """GPU tasks whose process the trace does not give (no launching call) made a 'process -1' row
    with a -78 % error in a two-process trace (third try-out); the window holds them."""
    from tablebuilder import TB

    b = TB(pid=100)
    k = b.call("cudaLaunchKernel", 0, 1000)
    b.gpu(k, 3000, 5000, stream=7, name="a", device=0)
    b.pid = 200
    k2 = b.call("cudaLaunchKernel", 500, 1500, corr=k + 1)
    b.gpu(k2, 4000, 6000, stream=7, name="b", device=1)
    b.gpu(999, 6500, 9000, stream=9, name="orphan", device=1)  # no launching call in the trace
    rep = analyze(b.table()).report
    assert [w.name.split(" (")[0] for w in rep.processes] == ["process 100", "process 200"]


@needs_traces
def test_compare_without_steps_says_so(capsys):
    """--compare-to between traces without ProfilerSteps printed 'max step error 0.00 %' (third try-out)."""
    before, after = TRACES / "nsys_ai" / "mfu_2gpu_before.sqlite", TRACES / "nsys_ai" / "mfu_2gpu_after.sqlite"
    assert main(["--details", str(before), "--compare-to", str(after)]) == 0
    out = capsys.readouterr().out
    assert "no ProfilerSteps to compare" in out and "max step error 0.00 %" not in out


def test_opt_all_timeline_says_it_holds_the_baseline_only(tmp_path, capsys):
    """--opt all --timeline wrote the baseline replay alone, silently (third try-out)."""
    out = tmp_path / "t.json.gz"
    assert main(["--details", str(ROOT / "fixtures" / "train_step.json.gz"), "--opt", "all", "--timeline", str(out)]) == 0
    err = capsys.readouterr().err
    assert out.exists() and "holds the baseline replay only (--opt all ranks each optimization alone" in err


@pytest.mark.slow
@needs_traces
def test_answer_flags_what_ifs_on_traces_with_unlinked_cross_stream_waits():
    """nccl_data's 18 cudaStreamWaitEvent name no event: cuda-graphs ran its all-reduces before backward
    and the answer said 'try cuda-graphs 5.39x' without a caveat (third try-out)."""
    from daydream.render.text import answer_lines

    rep = analyze(load_trace(str(TRACES / "hta" / "nccl_data.json.gz")), rank_all=True).report
    # now a range: the low end replays every dependency those waits can have (accuracy try-out, finding 2)
    # issue 31: the speed-up tried is the median step's; the range is the traced window's, labelled
    text = " ".join(x.strip() for x in answer_lines(rep))
    cg = next(k for k in rep.ranking if k.name == "cuda-graphs")  # the line states the ranking's numbers
    assert cg.speedup_bound < cg.speedup, "the range's low end replays the waits held"
    assert f"try cuda-graphs {cg.step_speedup:.2f}x (window {cg.speedup_bound:.2f}-{cg.speedup:.2f}x)" in text
    assert text.split("try ", 1)[1].split("\n")[0].split(" thread ")[0].endswith("(a range where cross-stream waits name no event: see the warning below)")
    rep = analyze(load_trace(str(RESNET)), rank_all=True).report
    text = " ".join(x.strip() for x in answer_lines(rep) if x.strip().startswith("try "))
    assert text and "optimistic" not in text and "range" not in text


@needs_traces
def test_unlinked_waits_on_a_single_stream_trace_are_no_caveat():
    """The B200 trace has 2 cudaStreamWaitEvent without their event but its GPU work runs on one
    stream ("0 cross-stream" edges): no edge between streams can be missing, yet the answer called
    its what-ifs "optimistic where streams wait on each other" (fourth try-out). The graph lines
    still count the waits."""
    from daydream.report.report_model import UNLINKED_WORDS
    from daydream.render.text import answer_lines

    r = analyze(load_trace(str(TRACES / "tracelens" / "b200_eager_trace.json.gz")), rank_all=True)
    assert r.graph.counts["cudaStreamWaitEvent without a sync record naming its event (no cross-stream edge)"] == 2
    assert not any(UNLINKED_WORDS in w for w in r.report.warnings)
    text = " ".join(x.strip() for x in answer_lines(r.report))
    assert "try " in text and "optimistic" not in text


@needs_traces
def test_devices_line_names_the_only_gpu_when_the_properties_id_differs(capsys):
    """MI300X bert-small: deviceProperties has id 0, the kernels run on device 2; the header said
    "devices: GPU 2" without the name (fourth try-out). One GPU and one device's properties: the
    name is shown and the id difference said."""
    assert main(["--details", str(TRACES / "tracelens" / "mi300_gaunernst_bert-small-uncased__1016001.json.gz")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("  devices: "))
    assert line == ("  devices: 2: AMD Instinct MI300X VF (the name of the trace's only device properties, recorded as "
                    "device 0: ids differ)")


@needs_traces
def test_singular_counts_tasks_title_and_op_names_in_waits(capsys, tmp_path):
    """Fourth try-out: "1 ProfilerStep regions" and "1 graph launches"; memcpy rows under "top
    kernels by GPU time" (MI250); the waits lines of an Nsight trace showed emit_nvtx's per-call
    ", op_id = 999599" (shown as the op now; the JSON keeps the recorded name)."""
    assert main(["--details", str(TRACES / "extrap" / "con_kernel.sqlite"), "--opt", "cuda-graphs"]) == 0
    # the graph launch costs the lower median of the trace's cudaLaunchKernel calls (derived from the table)
    t = load_trace(str(TRACES / "extrap" / "con_kernel.sqlite"))
    c = t.cols
    launch = (c["kind"] == Kind.RUNTIME) & np.array([t.names[i].startswith("cudaLaunchKernel") for i in c["name_id"]], bool)
    d = np.sort(c["end_ns"][launch] - c["start_ns"][launch])
    assert (f"    cuda-graphs: 1 graph launch (the whole window (the trace has no ProfilerStep ranges); {int(d[(len(d) - 1) // 2]):,} ns) "
            "replace") in capsys.readouterr().out
    assert main(["--details", str(TRACES / "hta" / "triton_example.json.gz"), "--opt", "cuda-graphs"]) == 3
    assert "no region (1 ProfilerStep region) has" in capsys.readouterr().out
    assert main(["--details", str(TRACES / "hta" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz")]) == 0
    out = capsys.readouterr().out.splitlines()
    i = next(i for i, x in enumerate(out) if x.startswith("  top GPU tasks by GPU time (kernels, copies, sets)"))
    assert out[i + 1].startswith("  Memcpy HtoD") and not any("top kernels by GPU time" in x for x in out)
    js = tmp_path / "r.json"
    assert main(["--details", str(TRACES / "nsys_ai" / "mfu_2gpu_before.sqlite"), "--json", str(js)]) == 0
    waits = [x for x in capsys.readouterr().out.splitlines() if " waits in " in x]
    assert waits and not any("op_id" in x for x in waits) and any(" waits in aten::to for GPU: " in x for x in waits)
    rep = json.loads(js.read_bytes())
    assert any(", op_id = " in w["during"] for w in rep["critical_path"]["waits"])  # raw names in JSON


@pytest.mark.slow
@needs_traces
def test_ddp_after_cuda_graphs_keeps_its_overlap():
    """ddp's gradients are ready at the kernel launched last before each AccumulateGrad, by the
    recorded launch: after cuda-graphs (one graph launch per step) every bucket was ready at the
    step's last backward kernel, so the all-reduces no longer overlapped backward and the order of
    the two changed the prediction (fifth try-out: 688.8 vs 625.0 ms)."""
    import daydream

    t = daydream.load_trace(str(RESNET))
    a = daydream.analyze(t, ["dataloader", "cuda-graphs", "ddp:bandwidth=pcie3"])
    b = daydream.analyze(t, ["dataloader", "ddp:bandwidth=pcie3", "cuda-graphs"])
    assert a.report.predictions[0].window.predicted_ns == b.report.predictions[0].window.predicted_ns


@pytest.mark.slow
@needs_traces
def test_reconbn_fuses_the_relus_of_bn_layers_only():
    """reconbn fuses a ReLU backward only where its BN forward had its ReLU fused (fifth try-out:
    ResNet-50's post-residual-add ReLUs lost their backward too: 492 removed, not 6 x (33 + 33));
    PyTorch 2's ReLU kernel (launch_clamp_scalar) is a ReLU (nccl_data: 0 forward ReLUs fused)."""
    import daydream

    for trace, n in ((RESNET, 396), (TRACES / "hta" / "nccl_data.json.gz", 198)):
        r = daydream.analyze(daydream.load_trace(str(trace)), ["reconbn"])
        assert f"{n} ReLU kernels fused away" in r.report.predictions[0].optimizations[0].note


@pytest.mark.skipif(not (TRACES / "kineto_tbplugin").exists(), reason="../shared/traces not present")
def test_top_gpu_tasks_path_column_counts_copies():
    """The "other: copy" row of the top GPU tasks showed 0.000 ms on the path while the critical
    path charged about 11.5 ms to ResNet-50's pageable HtoD memcpys: a name's class was taken from
    the name alone, and a memcpy's name is no kernel name (accuracy try-out, finding 5). The rows now
    hold all of the path's GPU-task time (the critical path's copies: not pinned, it moves with the model)."""
    r = analyze(load_trace(str(TRACES / "kineto_tbplugin" / "resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"))).report
    rows = {t.name: t for t in r.summary.top_kernels}
    copy = next(t for n, t in rows.items() if n.startswith("other: copy"))
    copies = sum(v for k, v in r.critical_path.by_kernel_ns.items() if "Memcpy" in k or "memcpy" in k)
    assert copy.path_ns > 10_000_000 and copy.path_ns <= copies
    assert sum(t.path_ns for t in r.summary.top_kernels) == sum(r.critical_path.by_kernel_ns.values())


@pytest.mark.skipif(not (TRACES / "hta").exists(), reason="../shared/traces not present")
def test_fusion_note_says_how_much_host_time_goes():
    """On CPU-bound nccl_data all of fusion's gain comes from the launch calls and CPU gaps it
    removes; the note named only the chains' GPU time (accuracy try-out, finding 3). cuDNN's own
    kernels inside convolution ops (layout transforms) are not fused (975 launches removed before,
    93.213 ms)."""
    from daydream.graph import NODE_CPU, build_graph
    from daydream.mapping import map_events
    from daydream.optimizations import parse_spec
    from daydream.optimizations.fusion import _extern_kernels, chains
    t = load_trace(str(TRACES / "hta" / "nccl_data.json.gz"))
    g = build_graph(t, map_events(t))
    opt, p = parse_spec("fusion")
    g2, note = opt.apply(g, p)

    def host(h):  # (CPU tasks, their own time and the gaps before them), from the graph itself
        cpu = h.node_kind == NODE_CPU
        return int(cpu.sum()), int(h.dur_ns[cpu].sum() + h.gap_ns[cpu].sum())

    (n1, t1), (n2, t2) = host(g), host(g2)
    assert n1 - n2 > 0 and f"host: {n1 - n2} launch calls and the CPU gaps before them removed, {(t1 - t2) / 1e6:,.3f} ms" in note
    ext = _extern_kernels(g)
    assert ext.sum() > 500 and not ((chains(g, 64) >= 0) & ext).any()


@pytest.mark.parametrize("info, note", [
    ({"world_size": 1e20, "rank": 0}, "distributedInfo.world_size not a count of ranks from 1 to 2^20 (ignored)"),
    ({"world_size": 4, "rank": 5}, "distributedInfo.rank not a rank from 0 to world_size - 1 (ignored)"),
    ({"world_size": 4, "rank": -1}, "distributedInfo.rank not a rank from 0 to world_size - 1 (ignored)"),
])
def test_bad_distributed_info_is_ignored_with_a_note(tmp_path, info, note):
    """world_size 1e20 crashed the collective detection (OverflowError, exit 1); rank 5 of 4 was
    shown as such (new-user try-out, finding 2)."""
    import gzip
    import json
    doc = json.loads(gzip.decompress((ROOT / "fixtures" / "train_step.json.gz").read_bytes()))
    doc["distributedInfo"] = info
    f = tmp_path / "t.json"
    f.write_text(json.dumps(doc))
    t = load_trace(str(f))
    assert t.accounting.notes.get(note) == 1
    assert (t.meta.rank, t.meta.world_size) == ((-1, 4) if info["world_size"] == 4 else (0, -1))
    analyze(t)  # no crash


def test_step_members_are_node_ids_not_a_mask_per_step():
    """Each ProfilerStep held a node mask of the whole graph: memory grew as steps x nodes (50 k steps
    of one kernel each, a 20 MB trace: 3.79 GB; new-user try-out, finding 1). Members are now the
    steps' node ids, so together they hold each node at most once per process's steps."""
    from daydream.graph import build_graph
    from daydream.report.windows import step_windows
    from daydream.simulate import simulate
    t = load_trace(str(ROOT / "fixtures" / "train_step.json.gz"))
    g = build_graph(t)
    sw = step_windows(g, simulate(g))
    assert len(sw) == 3 and all(w.members.dtype.kind == "i" for w in sw)
    ids = np.concatenate([w.members for w in sw])
    assert len(ids) == len(np.unique(ids)) <= g.n


@pytest.mark.skipif(not (TRACES / "hta").exists(), reason="../shared/traces not present")
def test_cuda_graphs_keeps_one_time_start_up():
    """hta simple_add records the first iteration: cuda-graphs removed its 4,219 ms first
    cudaLaunchKernel (module loading, which the report's own warning names as start-up) and
    predicted 1.126x; a graphed program loads its modules too (new-user try-out, finding 3)."""
    from daydream.graph import build_graph
    from daydream.graph.startup import startup_calls
    from daydream.mapping import map_events
    from daydream.optimizations import parse_spec
    from daydream.simulate import simulate
    t = load_trace(str(TRACES / "hta" / "simple_add.json.gz"))
    g = build_graph(t, map_events(t))
    slow = np.flatnonzero(startup_calls(g))
    assert len(slow) and g.dur_ns[slow].max() > 4_000_000_000
    window = int(simulate(g).end_ns.max()) - g.t0_ns
    for spec in ("cuda-graphs", "fusion"):
        opt, p = parse_spec(spec)
        g2, _ = opt.apply(g, p)
        assert np.isin(g.row[slow], g2.row).all(), spec  # the start-up calls are still there
        assert int(simulate(g2).end_ns.max()) - g2.t0_ns > 0.99 * window, spec


def test_gzip_damage_is_named(tmp_path):
    """A gzip file whose deflate data was zeroed in the middle inflated to garbage and was called
    'not a trace daydream can read'; one without its 8-byte end marker (CRC, size) was read
    silently, also with --strict (new-user try-out, finding 6)."""
    import gzip
    import warnings as w
    from daydream.errors import TraceFormatError
    raw = json.dumps(json.loads(gzip.decompress((ROOT / "fixtures" / "train_step.json.gz").read_bytes()))).encode()
    z = gzip.compress(raw, 6)
    from daydream.formats import HEAD_BYTES
    for content in (z, gzip.compress(b"x" * (3 * HEAD_BYTES), 6)):  # a trace, and content no adapter takes
        bad_crc = tmp_path / "crc.json.gz"
        bad_crc.write_bytes(content[:-8] + bytes(4) + content[-4:])
        with pytest.raises(TraceFormatError, match="damaged gzip (data|stream).*incorrect data check"):
            load_trace(str(bad_crc))
    tail = tmp_path / "tail.json.gz"
    tail.write_bytes(z[:-8])
    with pytest.raises(TraceFormatError, match="no end marker"):
        load_trace(str(tail), strict=True)
    with w.catch_warnings(record=True) as got:
        w.simplefilter("always")
        t = load_trace(str(tail))
    assert t.accounting.notes.get("gzip stream without its end marker (the file is cut short; its CRC was not checked)") == 1
    assert any("no end marker" in str(x.message) for x in got)


@pytest.mark.skipif(not (TRACES / "nsys_ai").exists(), reason="../shared/traces not present")
def test_answer_line_shortens_a_long_kernel_name():
    """The first line quoted mfu_2gpu_before's ~400-character flash_fwd_kernel name whole (new-user
    try-out, finding 10); the tables shorten theirs."""
    from daydream.report.summary import ANSWER_NAME_MAX
    r = analyze(load_trace(str(TRACES / "nsys_ai" / "mfu_2gpu_before.sqlite"))).report
    top = r.summary.answer.bound_detail.split("top: ", 1)[1]
    assert top.startswith("void flash::flash_fwd_kernel") and len(top) == ANSWER_NAME_MAX and top.endswith("...")


def test_straggler_is_listed_and_said_to_be_a_job_what_if():
    """straggler was missing from --list-opts, and on one trace it was an 'unknown optimization'
    (new-user try-out, finding 11)."""
    from daydream.optimizations import JOB_ONLY, describe_all, parse_spec
    from daydream.job.whatif import STRAGGLER
    assert STRAGGLER in JOB_ONLY and "straggler" in describe_all()
    with pytest.raises(UsageError, match="straggler is a what-if of a job"):
        parse_spec("straggler:rank=0")


def test_save_table_wants_an_npz_name(tmp_path, capsys):
    """--save-table o/t.json wrote an .npz table under a .json name (new-user try-out, finding 11)."""
    code = main(["--details", str(ROOT / "fixtures" / "train_step.json.gz"), "--save-table", str(tmp_path / "t.json")])
    assert code == 2 and "is an .npz file" in capsys.readouterr().err and not (tmp_path / "t.json").exists()


def _fixture_with_first(tmp_path, cat: str, **fields) -> str:
    """The project fixture with the first complete event of category ``cat`` given ``fields``."""
    import gzip

    d = json.loads(gzip.open(ROOT / "fixtures" / "train_step.json.gz").read())
    e = next(e for e in d["traceEvents"] if e.get("cat") == cat and e.get("ph") == "X")
    e.update(fields)
    p = tmp_path / "t.json"
    p.write_text(json.dumps(d))
    return str(p)


def test_steps_measured_at_zero_are_not_shown_exact(tmp_path):
    """A kernel recorded 10^15 us long in the first step made the other steps 0 ms measured and 1 ms
    replayed with 0.00 % error, the median step 0 ns (the GPU start error p99 of 10^15 us was then
    no share of it) and the verdict "good"; now those steps' errors are relative to the median step
    measured longer than 0, and the verdict is unreliable."""
    from daydream.report.windows import ZERO_STEP_NOTE

    r = analyze(load_trace(_fixture_with_first(tmp_path, "kernel", dur=1e15)), [])
    zero = [w for w in r.report.steps if w.measured_ns == 0]
    assert zero and all(w.note.endswith(ZERO_STEP_NOTE) for w in zero)
    ref = float(np.median([w.measured_ns for w in r.report.steps if w.measured_ns > 0]))
    assert all(w.error_pct == round(w.replayed_ns / ref * 100, 4) for w in zero)
    assert r.report.trust.verdict == "unreliable" and "GPU start error p99" in r.report.trust.reason


def test_a_kernel_recorded_long_before_its_launch_does_not_start_the_trace(tmp_path):
    """One kernel's ts set 1,000 s early made the trace start there: every thread's first CPU gap
    was 1,000 s, the window 1,000,126 ms and the answer "bound by host work"; now the trace starts
    at the earliest other timestamp and the kernel is counted."""
    base = analyze(load_trace(str(ROOT / "fixtures" / "train_step.json.gz")), [])
    r = analyze(load_trace(_fixture_with_first(tmp_path, "kernel", ts=-1e9)), [])
    assert r.graph.t0_ns == base.graph.t0_ns
    assert r.report.window.measured_ns == base.report.window.measured_ns
    assert r.graph.counts["GPU task recorded starting before its launching call and before the rest of the trace (left out of the trace start)"] == 1


@pytest.mark.parametrize("spec", ["fusion:max_chain=999999999999999999999", "fusion:max_chain=4611686018427387904",
                                  "dataloader:num_workers=-99999999999999999999999"])
def test_huge_integer_parameters_are_usage_errors(spec, capsys):
    """fusion:max_chain=10^21 was 'internal error (OverflowError ...)', exit 1 (numpy int64 arithmetic)."""
    assert main(["--details", str(ROOT / "fixtures" / "train_step.json.gz"), "--opt", spec]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "out of range" in err and "internal error" not in err


def test_kineto_gpu_event_with_a_negative_device_is_counted(tmp_path):
    import gzip

    d = json.loads(gzip.open(ROOT / "fixtures" / "train_step.json.gz").read())
    next(e for e in d["traceEvents"] if e.get("cat") == "kernel")["args"]["device"] = -1
    p = tmp_path / "t.json"
    p.write_text(json.dumps(d))
    assert load_trace(str(p)).accounting.notes.get("GPU event with a negative device id (args.device)") == 1


@needs_traces
def test_an_empty_ranks_list_is_refused(capsys):
    """--ranks '' (an unset shell variable) ran the what-if on every rank; '1,,2' was refused."""
    assert main(["--details", str(TRACES / "param_dlrm"), "--opt", "scale-kernels:pattern=gemm,factor=0.5", "--ranks", ""]) == 2
    assert "rank numbers separated by commas" in capsys.readouterr().err
    assert main(["--details", str(ROOT / "fixtures" / "train_step.json.gz"), "--ranks", ""]) == 2
    assert "apply to a job" in capsys.readouterr().err


@needs_traces
@pytest.mark.parametrize("view", [False, True])
def test_nsys_export_without_its_kernel_table_says_so(tmp_path, view):
    """A copy of an export with CUPTI_ACTIVITY_KIND_KERNEL dropped (or replaced by a view) read as a
    GPU that ran nothing, without a word."""
    import shutil
    import sqlite3

    p = tmp_path / "t.sqlite"
    shutil.copy(TRACES / "nsys_ai" / "mfu_2gpu_before.sqlite", p)
    con = sqlite3.connect(p)
    if view:
        con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME TO K2")
        con.execute("CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS SELECT * FROM K2")
    else:
        con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    con.commit()
    con.close()
    notes = load_trace(str(p)).accounting.notes
    assert notes.get("no CUPTI_ACTIVITY_KIND_KERNEL table: the CUDA calls' kernels are not in the trace") == 1
    assert notes.get("CUPTI_ACTIVITY_KIND_KERNEL is a view, not a table: not read", 0) == int(view)


def test_ranking_survives_a_task_longer_than_a_transformation_may_make(tmp_path, monkeypatch):
    """A recorded 10^15 us kernel (beyond transform.MAX_DURATION_NS) made scale-by-0.5 raise
    'a scaled duration would exceed 52 days', and --opt all stopped there; shrinking such a task is
    allowed, and an optimization that fails is listed as failed, the others still ranked."""
    from daydream import analysis
    from daydream.errors import DaydreamError

    t = load_trace(_fixture_with_first(tmp_path, "kernel", dur=1e15))
    r = analyze(t, [], rank_all=True)
    amp = next(x for x in r.report.ranking if x.name == "amp")
    assert amp.predicted_ns > 0 and amp.speedup > 1
    real = analysis.apply_all

    def boom(graph, opts):
        if opts[0][0].name == "fusion":
            raise DaydreamError("scale: a scaled duration would exceed 52 days; use a smaller factor")
        return real(graph, opts)

    monkeypatch.setattr(analysis, "apply_all", boom)
    r = analyze(load_trace(str(ROOT / "fixtures" / "train_step.json.gz")), [], rank_all=True)
    f = next(x for x in r.report.ranking if x.name == "fusion")
    assert f.predicted_ns == -1 and f.note.startswith("failed: scale:")
    assert any(x.predicted_ns > 0 for x in r.report.ranking)


@needs_traces
def test_amp_casts_one_weight_per_forward_gemm_op():
    """ResNet-50 (V100, 6 steps): 53 convolutions and one linear per step are 324 weight casts, 612.1 MB;
    ops that launched several kernels (Winograd, split GEMMs) had no shapes, so only 168 casts of
    285.5 MB were placed (try-out finding)."""
    t = load_trace(str(RESNET))
    r = analyze(t, ["amp"])
    note = r.report.predictions[0].optimizations[0].note
    # derived: one cast per conv2d / linear op in the trace, and the weights of ResNet-50 (He et al. 2016,
    # torchvision's 1000-class model: conv and fc weights) in fp32, once per step
    names = [t.names[i] for i in t.cols["name_id"]]
    casts = names.count("aten::conv2d") + names.count("aten::linear")
    steps = sum(n.startswith("ProfilerStep#") for n in set(names))
    mb = resnet50_weight_numel() * 4 * steps / 1e6
    assert f"{casts} cast kernels (fp32 weights -> fp16, {mb:,.1f} MB) folded into their GEMMs" in note



def test_steps_of_no_length_do_not_make_the_answer_step(tmp_path):
    """Every event duplicated (a trace merged with itself): half the steps are copies of no length, and
    the answer said 'step 0.000 ms (median of 6 ProfilerSteps)'."""
    import gzip

    d = json.loads(gzip.open(ROOT / "fixtures" / "train_step.json.gz").read())
    d["traceEvents"] = d["traceEvents"] + json.loads(json.dumps(d["traceEvents"]))
    p = tmp_path / "t.json"
    p.write_text(json.dumps(d))
    r = analyze(load_trace(str(p)), [])
    assert any(w.measured_ns == 0 and w.replayed_ns == 0 for w in r.report.steps)
    assert r.report.summary.answer.step_ns > 0


def test_no_gpu_work_because_every_gpu_event_was_skipped_says_so(tmp_path):
    """The fixture's GPU events with pid "GPU 0" (a string) are all skipped; the warning that the trace
    has no GPU work now names the skipped records next to the answer (they were only at the bottom)."""
    import gzip

    d = json.loads(gzip.open(ROOT / "fixtures" / "train_step.json.gz").read())
    for e in d["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync"):
            e["pid"] = "GPU 0"
    p = tmp_path / "t.json"
    p.write_text(json.dumps(d))
    r = analyze(load_trace(str(p)), [])
    w = next(x for x in r.report.warnings if x.startswith("the trace has no GPU kernels"))
    assert "The reader skipped" in w and "non-numeric pid" in w


@pytest.mark.slow
@needs_traces
def test_amp_after_gpu_upgrade_does_not_depend_on_the_tf32_setting():
    """Under autocast the convolutions run in 16 bits whether cuDNN would have used TF32 or not:
    ResNet-50 V100 -> A100 then amp gave 151.7 ms of kernels with conv_tf32 on and 120.9 ms off (the
    convolutions' FLOPs were counted per element, so gpu-upgrade timed them as memory-bound while
    labelling them TF32). Both, and amp first, now agree within 0.01 %."""
    t = load_trace(str(RESNET))
    gpu = []
    # both through the kernel-cost library (each kernel predicted from its measured time, whatever
    # ran before: kernel_cost.retime), so the orders and the TF32 setting agree
    for specs in (["gpu-upgrade:target=A100", "amp:casts=off"],
                  ["gpu-upgrade:target=A100,conv_tf32=off", "amp:casts=off"],
                  ["amp:casts=off", "gpu-upgrade:target=A100"]):
        g = analyze(t, specs).predicted_graph
        gpu.append(int(g.dur_ns[~g.is_cpu].sum()))
    assert max(gpu) - min(gpu) <= 1e-4 * min(gpu), gpu


@pytest.mark.slow
@needs_traces
def test_what_if_line_says_when_the_median_step_is_not_the_others_story():
    """dataloader (one worker) then x4 fetches: the answer's median step, fed by a prefetched batch,
    gets 1.486x faster while most steps get slower (median 0.669x, window 0.863x); the line led with
    1.486x alone (try-out finding)."""
    from daydream.render.text import asked_lines

    rep = analyze(load_trace(str(RESNET)), ["dataloader:num_workers=1", "scale-cpu:factor=4"]).report
    line = asked_lines(rep)[0]
    # issue 31: the median step is now the true median of the steps before over the same after, so it
    # tells the steps' story itself (0.832x; one step, fed by a prefetched batch, 1.486x, was named before)
    from daydream.report.summary import median

    p = rep.predictions[0]
    before, after = median(w.replayed_ns for w in rep.steps), median(w.predicted_ns for w in p.steps)
    sp = sorted(w.speedup for w in p.steps)
    assert before / after < 1 and median(sp) < 1 < sp[-1], "most steps slower, one (a prefetched batch) faster"
    assert (f"median step {before / 1e6:,.3f} -> {after / 1e6:,.3f} ms ({before / after:.3f}x), per-step speed-ups "
            f"{sp[0]:.3f}x to {sp[-1]:.3f}x (median {median(sp):.3f}x)") in line
    rep = analyze(load_trace(str(RESNET)), ["gpu-upgrade:kernel_model=launch"]).report  # the launch rules
    assert "but the per-step" not in asked_lines(rep)[0]


@pytest.mark.parametrize("op, extern", [
    ("aten::cudnn_convolution", True), ("aten::convolution_backward", True), ("aten::conv2d", True), ("aten::mkldnn_convolution", True),
    ("aten::addmm", True), ("aten::linear", True), ("aten::_scaled_dot_product_flash_attention", True), ("aten::_scaled_mm", True),
    ("fb::convex_sum", False), ("aten::upsample_linear1d", False), ("prims::convert_element_type", False), ("aten::mul", False),
])
def test_extern_ops_are_the_library_calls(op, extern):
    """fusion leaves out the kernels of ops a compiler hands to a library; 'conv' or 'linear' inside
    another op's name (convex_sum, convert_element_type, upsample_linear1d) matched (try-out finding)."""
    import re

    from daydream.optimizations.fusion import EXTERN_OPS

    assert bool(re.search(EXTERN_OPS, op)) == extern


def test_disagreement_needs_three_steps_and_a_margin():
    """With two steps the lower one was called the median and the 'but' clause fired whenever they
    differed; 1.001x against 0.999x counted as a disagreement (try-out finding)."""
    from daydream.render.text import _disagree

    assert not _disagree(1.952, 1.0, 2)
    assert not _disagree(1.001, 0.999, 6)
    assert _disagree(1.486, 0.669, 6) and _disagree(1.05, 0.95, 6)
