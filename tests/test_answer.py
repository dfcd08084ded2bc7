"""The answer's attribution (issue 31): what bounds the step and its top contributor, each kind on a
trace built to show it: copies, kernels that wait on peers, host time in deep Python frames, data
loading. Each trace is a small table (tests/tablebuilder.py) whose critical path is known by hand."""

from __future__ import annotations

import daydream
from daydream.events.table import CopyKind, Kind, SyncKind
from daydream.report.summary import frame_label

from tablebuilder import TB

US = 1_000


def _answer(table):
    return daydream.analyze(table).report


def _launches(tb: TB, names_kinds, t0: int = 0, dur: int = 400 * US, gap: int = 2 * US) -> int:
    """One launch call per (name, kind, copy kind) back to back on thread 1, its GPU task ``dur`` long
    on stream 7 right after; a device synchronize after the last: the GPU bounds the window."""
    t, g = t0, t0 + 10 * US
    for name, kind, ck in names_kinds:
        c = tb.call("cudaMemcpyAsync" if kind == Kind.MEMCPY else "cudaLaunchKernel", t, t + 5 * US)
        g = max(g, t + 10 * US)
        extra = {"copy_kind": int(ck), "bytes": 64 << 20} if kind == Kind.MEMCPY else {}
        tb.gpu(c, g, g + dur, kind=kind, name=name, **extra)
        g += dur + gap
        t += 6 * US
    c = tb.call("cudaDeviceSynchronize", t, g + 5 * US)
    tb.sync(c, t, g + 5 * US, SyncKind.CONTEXT_SYNC)
    return g


def test_copies_are_their_own_cause_and_bound():
    """A step whose GPU time is mostly host-to-device copies is bound by copies, named by the copy,
    not "GPU compute" named by a copy (the 2-GPU Nsight trace of issue 31)."""
    tb = TB()
    h2d = "[CUDA memcpy Host-to-Device]"
    _launches(tb, [(h2d, Kind.MEMCPY, CopyKind.HTOD)] * 6 + [("ampere_sgemm_128x64_nn", Kind.KERNEL, 0)])
    r = _answer(tb.table())
    a = r.summary.answer
    assert a.bound_by == "copies"
    assert a.bound_detail == f"top: {h2d}"
    cp = r.critical_path
    assert cp.by_cause_ns["copy"] >= 6 * 400 * US  # every copy is on the path, as a copy
    assert cp.by_cause_ns["gpu_compute"] < 2 * 400 * US  # the one kernel and the gaps G
    assert sum(cp.by_cause_ns.values()) == cp.length_ns


def test_gpu_compute_is_named_by_a_kernel_not_a_copy():
    """When kernels bound the step, the top contributor named is a kernel even where a copy has
    more path time than any one kernel name."""
    tb = TB()
    seq = [("[CUDA memcpy Host-to-Device]", Kind.MEMCPY, CopyKind.HTOD)] * 3
    seq += [("kernel_a", Kind.KERNEL, 0)] * 2 + [("kernel_b", Kind.KERNEL, 0), ("kernel_c", Kind.KERNEL, 0)]
    _launches(tb, seq)
    a = _answer(tb.table()).summary.answer
    assert a.bound_by == "GPU compute"
    assert a.bound_detail == "top: kernel_a"


def test_peer_waiting_kernels_are_communication():
    """DeepEP-style kernels (which spin-wait on peers) and NCCL send/recv bound as communication."""
    for name in ("void dpsk::ep::internode::dispatch<true, 8>(int4*, float*)", "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"):
        tb = TB()
        _launches(tb, [(name, Kind.KERNEL, 0)] * 3 + [("ampere_sgemm_128x64_nn", Kind.KERNEL, 0)])
        r = _answer(tb.table())
        assert r.summary.answer.bound_by == "communication", name
        assert r.summary.answer.bound_detail.endswith(name[:70]) or name[:60] in r.summary.answer.bound_detail
        assert r.critical_path.by_cause_ns["communication"] >= 3 * 400 * US


def _host_bound(tb: TB, frames, outer: str | None = None):
    """Thread 1 computes for 5 ms (a CPU gap) inside ``frames`` (outermost first, python_function
    events), then launches one short kernel: host work bounds the window."""
    t0, t1 = 1_000 * US, 6_000 * US
    if outer is not None:
        tb.range(outer, 0, t1 + 100 * US)
    for i, f in enumerate(frames):
        tb.range(f, t0 + i * US, t1 - i * US, cat="python_function")
    c = tb.call("cudaLaunchKernel", t1 + 10 * US, t1 + 15 * US)
    tb.gpu(c, t1 + 20 * US, t1 + 40 * US, name="k")
    c = tb.call("cudaDeviceSynchronize", t1 + 16 * US, t1 + 50 * US)
    tb.sync(c, t1 + 16 * US, t1 + 50 * US, SyncKind.CONTEXT_SYNC)


def test_host_time_goes_to_the_deepest_user_frame():
    """Host time is charged to the deepest user Python frame of the recorded stack, not to the
    outermost frame (``<string>(1): <module>``), nor to a library frame or a built-in below it."""
    tb = TB()
    _host_bound(tb, ["<string>(1): <module>", "train.py(40): main", "image_transforms.py(12): normalize",
                     "torch/nn/functional.py(2500): normalize", "vllm/model_executor/parameter.py(122): __torch_function__",
                     "<built-in method div of type object at 0x7f>"])
    a = _answer(tb.table()).summary.answer
    assert a.bound_by == "host work"
    assert a.bound_detail.endswith("top: normalize (image_transforms.py:12)"), a.bound_detail


def test_data_loading_named_by_its_deepest_frame_else_its_range():
    """Data loading (a DataLoader range around the host time) is named by the deepest user frame in
    it when the stack was recorded, else by the DataLoader range."""
    dl = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    tb = TB()
    _host_bound(tb, ["/home/me/data/augment.py(88): random_crop"], outer=dl)
    a = _answer(tb.table()).summary.answer
    assert a.bound_by == "data loading"
    assert a.bound_detail == "top: random_crop (augment.py:88)"
    tb = TB()
    _host_bound(tb, [], outer=dl)
    a = _answer(tb.table()).summary.answer
    assert (a.bound_by, a.bound_detail) == ("data loading", f"top: {dl}")


def test_frame_label():
    assert frame_label("/a/b/image_transforms.py(12): normalize") == "normalize (image_transforms.py:12)"
    assert frame_label("aten::mm") == "aten::mm"


# ---------------------------------------------------------------- tables, one screen, speed-ups ----
import glob  # noqa: E402
import os  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from daydream.render.table_text import write_csv  # noqa: E402
from daydream.render.text import ANSWER_MAX_LINES, WIDTH, render_text  # noqa: E402
from daydream.report.summary import median  # noqa: E402

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "train_step.json.gz")


def test_tables_add_up_to_the_event_table(tmp_path):
    """Each table's sums, against sums taken straight from the event table's rows."""
    t = daydream.load_trace(FIXTURE)
    r = daydream.analyze(t).report
    tb = r.tables
    gpu = np.isin(t.kind, [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET])
    dur = (t.end_ns - t.start_ns)
    assert sum(k.total_ns for k in tb.kernels) == int(dur[gpu].sum())
    assert sum(k.calls for k in tb.kernels) == int(gpu.sum())
    for name in {t.names[i] for i in t.name_id[gpu].tolist()}:  # per name, over its launching ops
        m = gpu & (t.name_id == t.names.index(name))
        rows = [k for k in tb.kernels if k.name == name]
        assert sum(k.total_ns for k in rows) == int(dur[m].sum())
        assert min(k.min_ns for k in rows) == int(dur[m].min()) and max(k.max_ns for k in rows) == int(dur[m].max())
    api = t.kind == Kind.RUNTIME
    assert sum(a.total_ns for a in tb.cuda_api) == int(dur[api].sum())
    assert {a.name: a.calls for a in tb.cuda_api} == {n: int(np.count_nonzero(api & (t.name_id == t.names.index(n))))
                                                      for n in {t.names[i] for i in t.name_id[api].tolist()}}
    ops = t.kind == Kind.CPU_OP
    assert sum(o.calls for o in tb.ops) == int(ops.sum())
    assert sum(o.cpu_total_ns for o in tb.ops) == int(dur[ops].sum())
    # self time: the union of the op intervals of each thread, computed here by a sweep over them
    union = 0
    for tid in np.unique(t.tid[ops]).tolist():
        m = ops & (t.tid == tid)
        s, e = np.sort(t.start_ns[m]), t.end_ns[m][np.argsort(t.start_ns[m], kind="stable")]
        hi = -1
        for a, b in zip(s.tolist(), e.tolist()):
            if b > hi:
                union += b - max(a, hi)
                hi = b
    assert abs(sum(o.cpu_self_ns for o in tb.ops) - union) <= len(tb.ops)  # rounding per name
    # GPU time launched: every GPU task with a launching op is counted under one op
    assert sum(o.gpu_ns for o in tb.ops) == sum(k.total_ns for k in tb.kernels if k.op != "(no op)")
    assert sum(k.pct for k in tb.cuda_api) == pytest.approx(100, abs=0.1)
    coll = sum(c.count for c in tb.communication)
    assert coll == sum(k.calls for k in tb.kernels if k.cls == "communication")
    paths = write_csv(tb, str(tmp_path))
    with open(paths[0], encoding="utf-8") as f:
        assert len(f.read().splitlines()) == len(tb.kernels) + 1


def test_csv_keeps_formula_names_as_text(tmp_path):
    from daydream.render.table_text import _cell
    assert _cell("=HYPERLINK(1)") == "'=HYPERLINK(1)" and _cell("aten::mm") == "aten::mm" and _cell(None) == ""


def test_true_median():
    """The answer's step is the true median (the lower median before: 2 of [1, 2, 3, 4])."""
    assert median([4, 1, 3, 2]) == 2.5 and median([3, 1, 2]) == 2 and median([]) == 0.0


def test_no_slower_prediction_is_something_to_try():
    """--opt all: what the answer suggests is at least WHATIF_MIN_SPEEDUP by the median step, and the
    ranking's numbered rows (what to try) are never below 1.0x."""
    r = daydream.analyze(daydream.load_trace(FIXTURE), [], rank_all=True).report
    assert all(v >= 1.005 for v in r.summary.answer.whatifs.values())
    text = render_text(r)
    tried = text.split("what to try first", 1)[1].split("predicted no faster", 1)[0]
    for line in tried.splitlines()[1:]:
        head = line.split()
        if len(head) > 2 and head[0].rstrip(".").isdigit():
            assert float(head[2].rstrip("x")) >= 1.0, line


def _short_report_checks(text: str) -> None:
    lines = text.splitlines()
    assert max(map(len, lines)) <= WIDTH, max(lines, key=len)
    before = lines.index("") if "" in lines else len(lines)
    assert before <= ANSWER_MAX_LINES
    head = next(i for i, x in enumerate(lines) if not x.startswith("    ") and i > 0)  # the file line, wrapped
    assert lines[head].startswith("answer: "), lines[: head + 1]


def test_one_screen_on_the_fixture():
    r = daydream.analyze(daydream.load_trace(FIXTURE), [], rank_all=True).report
    _short_report_checks(render_text(r, details=False))


TRACES = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "..", "shared", "traces", "*", "*.*")))
TRACES = [p for p in TRACES if p.endswith((".gz", ".sqlite", ".json"))]


@pytest.mark.slow
@pytest.mark.parametrize("path", TRACES, ids=os.path.basename)
def test_one_screen_on_every_real_trace(path):
    """The default report: at most ANSWER_MAX_LINES lines before the tables, none over WIDTH columns."""
    r = daydream.analyze(daydream.load_trace(path), [], rank_all=True).report
    _short_report_checks(render_text(r, details=False))


def test_collective_overlap_with_compute():
    """A collective on stream 8 overlapped by a kernel of stream 7 for 300 of its 400 us (and by a
    kernel of another GPU, which does not count) reads 75 % overlap; its row counts and sums it."""
    tb = TB()
    c1 = tb.call("cudaLaunchKernel", 0, 5 * US)
    c2 = tb.call("cudaLaunchKernel", 6 * US, 10 * US)
    c3 = tb.call("cudaLaunchKernel", 11 * US, 15 * US)
    tb.gpu(c1, 100 * US, 500 * US, stream=8, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    tb.gpu(c2, 50 * US, 400 * US, stream=7, name="ampere_sgemm_128x64_nn")
    tb.gpu(c3, 0, 600 * US, stream=9, name="other_gpu_kernel", device=1)
    c = tb.call("cudaDeviceSynchronize", 16 * US, 610 * US)
    tb.sync(c, 16 * US, 610 * US, SyncKind.CONTEXT_SYNC)
    rows = _answer(tb.table()).tables.communication
    assert len(rows) == 1 and rows[0].op == "all-reduce" and rows[0].count == 1 and rows[0].total_ns == 400 * US
    assert rows[0].overlap_pct == 75.0
