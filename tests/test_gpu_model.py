"""gpu-upgrade's per-kernel rules (daydream/costmodel/kernel_model.py) on hand-built kernels
with exact expected times, the host-path parameters, and the launch-data reader on real traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from daydream.events.table import DeviceInfo, TraceMeta
from daydream.formats.launch_data import LaunchData, make_key, op_work, read_launch_data
from daydream.costmodel.gpus import GPUS, find_gpu
from daydream.graph import NODE_CPU, build_graph
from daydream.costmodel import kernel_model as KM
from daydream.optimizations import parse_spec
from daydream.simulate import simulate

from tablebuilder import TB
from test_launch_pass import _nsys_db

SGEMM = "volta_sgemm_128x64_nn"
ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >"
       "(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)")
OTHER = "my_custom_kernel"
HGEMM = "ampere_h16816gemm_128x128_ldg8_nn"
H100, A100 = find_gpu("H100 SXM"), find_gpu("A100 40GB SXM")
TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"


def four_kernels():
    """sgemm 10 us, add 5 us, an unclassified kernel 4 us, an fp16 GEMM 8 us, back to back."""
    b = TB()
    calls = [b.call("cudaLaunchKernel", 20 * i, 20 * i + 10) for i in range(4)]
    s = 1000
    for c, name, d in zip(calls, (SGEMM, ADD, OTHER, HGEMM), (10_000, 5_000, 4_000, 8_000)):
        b.gpu(c, s, s + d, name=name)
        s += d
    return build_graph(b.table()), calls


def launch_data(calls):
    """sgemm: 264 blocks of 256 threads, 128 registers; hgemm: 1,024 blocks of 128 threads, shapes 4096^3."""
    return LaunchData(key=make_key([0, 0], [calls[0], calls[3]]), grid=np.array([[264, 1, 1], [1024, 1, 1]]),
                      block=np.array([[256, 1, 1], [128, 1, 1]]), regs=np.array([128, -1]), smem=np.array([0, -1]),
                      flops=np.array([-1.0, 2 * 4096.0**3]), bytes=np.array([-1.0, 3 * 4096.0**2 * 2]), op=["", "aten::mm"])


def test_occupancy_and_fill():
    # 256 threads x 128 registers = 32,768 registers per block: 2 blocks per SM on both
    assert KM.resident_blocks(H100, np.array([256]), np.array([128]), np.array([0]))[0] == 2
    assert KM.resident_blocks(A100, np.array([128]), np.array([-1]), np.array([-1]))[0] == 16  # 2048 / 128 threads
    assert KM.resident_blocks(A100, np.array([128]), np.array([-1]), np.array([100 * 1024]))[0] == 1  # 164 KiB / 100 KiB
    # 264 blocks: one full wave on H100 (132 x 2), two waves on A100 (108 x 2 = 216): 264 / 432 used
    assert KM.fill(H100, np.array([264]), np.array([256]), np.array([128]), np.array([0]))[0] == 1.0
    assert KM.fill(A100, np.array([264]), np.array([256]), np.array([128]), np.array([0]))[0] == pytest.approx(264 / 432)
    assert KM.fill(A100, np.array([-1]), np.array([1]), np.array([-1]), np.array([-1]))[0] == 1.0  # unknown grid


def test_each_rule_exact():
    g, calls = four_kernels()
    p = KM.plan(g, H100, A100, launch_data(calls), floor_src=1000, floor_tgt=2000)
    k = g.node_kind != NODE_CPU
    # sgemm, waves: 2000 + 9000 * (67 * 1) / (19.5 * 264/432) = 52,601.4
    # add, peak (no launch record): 2000 + 4000 * 3350 / 1555 = 10,617.4
    # other, unknown bound: the smaller speed-up, max(989.4/312, 3350/1555) -> 2000 + 3000 * 3.1712 = 11,513.5
    # hgemm, roofline: compute-bound on both; fill 1024/2112 on H100, 1024/1728 on A100:
    #   2000 + 7000 * (989.4 * 1024/2112) / (312 * 1024/1728) = 20,162.1
    assert p.new_dur[k].tolist() == [52601, 10617, 11513, 20162]
    assert [KM.RULES[r] for r in p.rule[k]] == ["waves", "peak", "unknown-bound", "roofline"]
    assert p.factor[k][0] == pytest.approx(67 / (19.5 * 264 / 432))
    cov = KM.coverage(g, p)
    assert cov["roofline"] == (8000, 1) and cov["waves"] == (10000, 1) and cov["peak"] == (5000, 1)


def test_roofline_bound_can_change_with_the_gpu():
    """A GEMM whose arithmetic intensity lies between the two GPUs' ridge points."""
    g, calls = four_kernels()
    d = launch_data(calls)
    # intensity 200 FLOP/B: A100 ridge 312e12 / 1555e9 = 200.6 (memory-bound there), H100 295 (memory too);
    # V100 125e12 / 900e9 = 139 -> compute-bound on V100
    d.flops[1], d.bytes[1] = 200.0 * 1e8, 1e8
    v100 = find_gpu("V100 SXM2")
    p = KM.plan(g, v100, A100, d, 1000, 1000)
    i = np.nonzero(g.node_kind != NODE_CPU)[0][3]
    assert KM.RULES[p.rule[i]] == "roofline"
    assert p.bound_src[i] == 0 and p.bound_tgt[i] == 1  # compute on V100, memory on A100


def test_kernel_at_the_floor_does_not_speed_up():
    g, calls = four_kernels()
    p = KM.plan(g, H100, find_gpu("B200"), LaunchData(), floor_src=5000, floor_tgt=5000)
    i = np.nonzero(g.node_kind != NODE_CPU)[0][1]  # the 5 us add is all floor
    assert p.new_dur[i] == 5000 and p.latency[i]


def test_identity_plan_is_exact():
    g, calls = four_kernels()
    for gpu in GPUS:
        p = KM.plan(g, gpu, gpu, launch_data(calls), 1000, 1000)
        assert np.array_equal(p.new_dur, g.dur_ns), gpu.name


def run(g, spec):
    opt, params = parse_spec(spec)
    g2, note = opt.apply(g, params)
    return g2, simulate(g2), note


def gpu_graph(device="NVIDIA H100 80GB HBM3"):
    g, _ = four_kernels()
    g.table.meta = TraceMeta(devices=[DeviceInfo(id=0, name=device)])
    g.devices = g.table.meta.devices
    return g


def test_host_path_parameters():
    g = gpu_graph()
    g2, tl, note = run(g, "gpu-upgrade:target=H100 SXM,cpu_speed=2,launch_latency_ns=300,launch_cpu_ns=4")
    cpu = g.node_kind == NODE_CPU
    assert g2.launch_latency_ns == 300 and "launch latency L" in note
    assert np.array_equal(g2.dur_ns[cpu], np.full(4, 4))  # launch calls set to 4 ns after halving
    assert np.array_equal(g2.gap_ns[cpu], np.rint(g.gap_ns[cpu] / 2).astype(np.int64))
    assert np.array_equal(g2.dur_ns[~cpu], g.dur_ns[~cpu])  # same GPU: kernels unchanged
    assert tl.start_ns[np.nonzero(~cpu)[0][0]] == 300  # first kernel ready L after its call at 0


def test_note_and_cross_vendor():
    g = gpu_graph()
    _, _, note = run(g, "gpu-upgrade:target=MI300X")
    assert "H100 SXM -> MI300X" in note and "cross-vendor" in note and "peak 3 tasks" in note
    assert "unknown-bound 1 tasks" in note and "launch data for 0 of 4 kernels" in note
    _, _, note = run(g, "gpu-upgrade:target=B200")
    assert "cross-vendor" not in note


def test_amd_to_nvidia():
    g = gpu_graph("AMD Instinct MI300X VF")
    g2, _, note = run(g, "gpu-upgrade:target=H100 SXM")
    assert "MI300X -> H100 SXM" in note and "(amd -> nvidia)" in note
    assert g2.dur_ns.sum() != g.dur_ns.sum()


def test_op_work():
    assert op_work("aten::mm", [[64, 32], [32, 16]], ["float", "float"]) == (2.0 * 64 * 32 * 16, 4.0 * (64 * 32 + 32 * 16 + 64 * 16))
    assert op_work("aten::addmm", [[16], [64, 32], [32, 16], [], []], ["c10::BFloat16"] * 3 + ["Scalar"] * 2)[0] == 2.0 * 64 * 32 * 16
    assert op_work("aten::bmm", [[3, 4, 5], [3, 5, 6]], ["float", "float"])[0] == 2.0 * 3 * 4 * 5 * 6
    f, b = op_work("aten::_flash_attention_forward", [[1, 8, 128, 64], [1, 8, 128, 64], [1, 8, 128, 64]], ["c10::Half"] * 3)
    assert f == 4.0 * 8 * 128 * 128 * 64 and b == 4 * 8 * 128 * 64 * 2.0
    assert op_work("aten::add", [[10, 10], [10, 10], []], ["float", "float", "Scalar"]) == (100.0, 1200.0)
    assert op_work("aten::index_select", [[100, 8], [], [5]], ["float", "Scalar", "long int"]) == (-1.0, -1.0)
    assert op_work("aten::mm", [[2, 3], [4, 5]], ["float", "float"]) == (-1.0, -1.0)  # mismatched inner dims
    assert op_work("aten::mm", "junk", None) == (-1.0, -1.0)


def test_launch_data_on_real_traces():
    p = TRACES / "tracelens" / "h100_gaunernst_bert-small-uncased__1016001.json.gz"
    if not p.exists():
        pytest.skip("no real traces")
    d = read_launch_data(str(p), "kineto")
    assert len(d) == 60 and d.counts["with launch configuration"] == 60 and d.counts["with shapes"] >= 50
    n = read_launch_data(str(TRACES / "nsys_ai" / "mock.sqlite"), "nsys")
    assert len(n) == 2 and (n.grid[:, 0] > 0).all()
    assert read_launch_data(str(p), "saved").reason and read_launch_data("/nonexistent", "kineto").reason
    bad = TRACES / ".." / "nope.json"
    assert read_launch_data(str(bad), "kineto").reason


def test_launch_data_bad_content(tmp_path):
    f = tmp_path / "t.json"
    f.write_text('{"traceEvents": [{"cat": "kernel", "args": {"grid": [1, "x", 2], "correlation": 1e400}}, 5]}')
    assert "unreadable" in read_launch_data(str(f), "kineto").reason
    f.write_text('{"traceEvents": [{"cat": "kernel", "name": "k", "args": {"grid": [1, "x", 2], "correlation": 3, "device": 0}}]}')
    d = read_launch_data(str(f), "kineto")
    assert len(d) == 1 and d.grid[0].tolist() == [-1, -1, -1]


# ------------------------------------------------------------------ the emulator as the judge ---
from hypothesis import HealthCheck, assume, given, settings, strategies as st  # noqa: E402

from daydream.formats import load_trace  # noqa: E402
from daydream.testing.emulator import emulate, measure_latencies, programs, to_kineto  # noqa: E402
from daydream.transform import set_launch_latency  # noqa: E402

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.mark.slow
@SETTINGS
@given(programs(max_threads=1), st.integers(0, 20_000))
def test_target_launch_latency_equals_the_emulator(tmp_path_factory, prog, new_l):
    """One launching thread (with several, a sync call that the recording saw wait for a task of another
    thread may not wait for it when L changes: the recorded order is fixed in the graph). The program run with
    another launch latency L' (G <= L') is what the replay predicts with
    launch_latency_ns=L' from the trace of the program run with L."""
    import dataclasses

    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    assume(new_l >= prog.G)
    path = tmp_path_factory.mktemp("e") / "emu.json"
    to_kineto(run, str(path))
    graph = build_graph(load_trace(str(path)))
    tl = simulate(set_launch_latency(graph, new_l))
    want = emulate(dataclasses.replace(prog, launch_latency_ns=new_l))
    corr = graph.table.correlation[graph.row]
    cpu = graph.node_kind == NODE_CPU
    exp = {("c", c.correlation): (c.start_ns, c.end_ns) for c in want.calls}
    exp.update({("t", t.correlation): (t.start_ns, t.end_ns) for t in want.tasks})
    got = {("c" if k else "t", int(c)): (int(s), int(e)) for k, c, s, e in zip(cpu, corr, tl.start_ns, tl.end_ns)}
    assert got == exp


def test_hip_work_item_grids():
    """hipExtModuleLaunchKernel records the global work size: 73,728 work-items of 256 = 288 blocks."""
    b = TB()
    c1 = b.call("hipExtModuleLaunchKernel", 0, 10)
    c2 = b.call("hipLaunchKernel", 20, 30)
    b.gpu(c1, 1000, 9000, name="Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT16x16x128_MI16x16x1")
    b.gpu(c2, 9000, 12000, name=ADD)
    g = build_graph(b.table())
    wi = KM.work_item_grid(g)
    k = np.nonzero(g.node_kind != NODE_CPU)[0]
    assert wi[k].tolist() == [True, False]
    mi300, h100 = find_gpu("MI300X"), H100
    d = LaunchData(key=make_key([0, 0], [c1, c2]), grid=np.array([[73728, 1, 1], [36, 1, 1]]),
                   block=np.array([[256, 1, 1], [256, 1, 1]]), regs=np.array([-1, -1]), smem=np.array([-1, -1]),
                   flops=np.array([-1.0, -1.0]), bytes=np.array([-1.0, -1.0]), op=["", ""])
    p = KM.plan(g, mi300, h100, d, 1000, 1000)
    # 288 blocks of 256: MI300X 304 CUs x 8 resident -> u = 288 / 2432; H100 132 x 8 = 1056 -> u = 288 / 1056
    fc = (1307.4 * 288 / 2432) / (989.4 * 288 / 1056)  # bf16 ('_B_' Tensile type): half path
    assert p.factor[k[0]] == pytest.approx(fc)


@pytest.mark.slow
def test_identity_with_host_parameters_on_every_real_trace(real_graphs):
    """Target = source and host parameters at the trace's own values: the baseline exactly."""
    from daydream.costmodel.gpus import gpu_of_device
    from daydream.optimizations.common import median_launch_ns

    done = 0
    for name, g in real_graphs.items():
        src = gpu_of_device(g.devices[0]) if g.devices else None
        if src is None or not (g.node_kind != NODE_CPU).any():  # no GPU task: gpu-upgrade does not apply
            continue
        base = simulate(g)
        spec = (f"gpu-upgrade:target={src.name},cpu_speed=1,launch_latency_ns={g.launch_latency_ns},"
                f"target_floor_ns={KM.kernel_floor_ns(src, g)}")
        g2, tl, _ = run(g, spec)
        assert np.array_equal(tl.start_ns, base.start_ns) and np.array_equal(tl.end_ns, base.end_ns), name
        done += 1
    assert done >= 5


def test_every_real_trace_places_its_gpu_time(real_graphs):
    """The note accounts for all GPU time: the rules' shares add up to the GPU task time."""
    import re as _re

    for name, g in real_graphs.items():
        if not (g.node_kind != NODE_CPU).any():
            continue
        _, _, note = run(g, "gpu-upgrade:source=H100 SXM,target=MI300X,kernel_model=launch")
        shares = [int(x) for x in _re.findall(r"\((\d+)%\)", note.split("latency-bound")[0])]
        assert 97 <= sum(shares) <= 103, (name, note)


def _slower_host(prog, k: int):
    """The same program on a host k times slower: host work and every call's own CPU time x k."""
    import dataclasses

    def op(o):
        names = [f.name for f in dataclasses.fields(o)] if dataclasses.is_dataclass(o) else []
        ch = {n: getattr(o, n) * k for n in names if n in ("call_dur_ns", "call_own_ns") or (n == "dur_ns" and type(o).__name__ == "HostWork")}
        return dataclasses.replace(o, **ch) if ch else o

    threads = [dataclasses.replace(t, ops=tuple(op(o) for o in t.ops)) for t in prog.threads]
    return dataclasses.replace(prog, threads=tuple(threads))


def _exact(graph, tl, want):
    corr = graph.table.correlation[graph.row]
    cpu = graph.node_kind == NODE_CPU
    exp = {("c", c.correlation): (c.start_ns, c.end_ns) for c in want.calls}
    exp.update({("t", t.correlation): (t.start_ns, t.end_ns) for t in want.tasks})
    got = {("c" if k else "t", int(c)): (int(s), int(e)) for k, c, s, e in zip(cpu, corr, tl.start_ns, tl.end_ns)}
    return got == exp


@pytest.mark.slow
@SETTINGS
@given(programs(max_threads=1), st.sampled_from([2, 4]))
def test_slower_host_equals_the_emulator(tmp_path_factory, prog, k):
    """gpu-upgrade's cpu_speed=1/k (same GPU) predicts the program run on a host k times slower: CPU
    gaps and call durations (a blocking call's own cost) x k."""
    rec = emulate(prog)
    assume(measure_latencies(rec) == (prog.L, prog.G))
    path = tmp_path_factory.mktemp("e") / "emu.json"
    to_kineto(rec, str(path))
    graph = build_graph(load_trace(str(path)))
    assume(graph.t0_ns == prog.t0_ns)
    g2, tl, note = run(graph, f"gpu-upgrade:source=H100 SXM,target=H100 SXM,cpu_speed={1 / k}")
    assert "host CPU" in note
    assert _exact(graph, tl, emulate(_slower_host(prog, k)))


def test_reasons_per_kernel_group():
    g, calls = four_kernels()
    p = KM.plan(g, H100, A100, launch_data(calls), floor_src=1000, floor_tgt=2000)
    rows = KM.reasons(g, p, H100, A100)
    assert [r[0] for r in rows] == [SGEMM, HGEMM, ADD, OTHER]  # largest source time first
    assert rows[0][2] == "waves: compute-bound on H100 SXM, compute-bound on A100 40GB SXM"
    assert rows[1][1] == "gemm" and rows[1][2].startswith("roofline: compute-bound")
    assert rows[3][2].startswith("unknown-bound: unknown-bound")
    assert [r[4] for r in rows] == [10000, 8000, 5000, 4000] and rows[0][5] == 52601


_ODD = st.one_of(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(-3, 1 << 31 + 1), st.none(),
                 st.floats(allow_nan=False, allow_infinity=False, width=32), st.sampled_from(["7", "x", b"\x01"]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(*([_ODD] * 11)), min_size=1, max_size=8))
def test_nsys_launch_columns_cleaned_in_sql_as_in_python(tmp_path_factory, rows):
    """The nsys launch columns, cleaned in SQL, equal the per-value Python rules (_int, _triple)
    applied to the raw rows."""
    import sqlite3

    from daydream.formats import launch_data as LD

    f = tmp_path_factory.mktemp("ld") / "k.sqlite"
    _nsys_db(f, rows)
    d = LD._read(str(f), "nsys")
    con = sqlite3.connect(str(f))
    raw = con.execute("SELECT deviceId, correlationId, gridX, gridY, gridZ, blockX, blockY, blockZ, registersPerThread, "
                      "staticSharedMemory + dynamicSharedMemory FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    con.close()
    want = sorted((LD.make_key(LD._int(r[0]), LD._int(r[1])).item(), LD._triple(list(r[2:5])), LD._triple(list(r[5:8])),
                   LD._int(r[8]), LD._int(r[9])) for r in raw)
    got = sorted(zip(d.key.tolist(), map(tuple, d.grid.tolist()), map(tuple, d.block.tolist()), d.regs.tolist(), d.smem.tolist()))
    assert got == want


def test_launch_data_read_once_per_file(tmp_path):
    """A second read of an unchanged file is the first one's result; a changed file is read again."""
    f = tmp_path / "t.json"
    f.write_text('{"traceEvents": [{"cat": "kernel", "name": "k", "args": {"grid": [1, 1, 1], "correlation": 3, "device": 0}}]}')
    a = read_launch_data(str(f), "kineto")
    assert read_launch_data(str(f), "kineto") is a and len(a) == 1
    f.write_text('{"traceEvents": [{"cat": "Kernel", "name": "k", "args": {"grid": [2, 1, 1], "correlation": 3, "device": 0}}, '
                 '{"cat": "kernel", "name": "k", "args": {"grid": [1, 1, 1], "correlation": 4, "device": 0}}]}')
    b = read_launch_data(str(f), "kineto")
    assert b is not a and len(b) == 2 and b.grid[:, 0].tolist() == [2, 1]


def test_gpu_tasks_without_a_device_are_counted_in_the_note():
    b = TB()
    c0, c1 = b.call("cudaLaunchKernel", 0, 10), b.call("cudaLaunchKernel", 20, 30)
    b.gpu(c0, 1000, 11_000, name=SGEMM)
    b.gpu(c1, 11_000, 16_000, name=ADD, device=-1)
    g = build_graph(b.table())
    g.table.meta = TraceMeta(devices=[DeviceInfo(id=0, name="NVIDIA H100 80GB HBM3")])
    g.devices = g.table.meta.devices
    _, _, note = run(g, "gpu-upgrade:target=B200")
    assert "1 GPU tasks without a device id modelled as run on the H100 SXM" in note
    _, _, note = run(gpu_graph(), "gpu-upgrade:target=B200")
    assert "without a device id" not in note


def sgemm_and_conv_on_v100():
    """(graph, GPU task nodes): a 10 us SGEMM and a 10 us cuDNN fp32 convolution on a V100."""
    b = TB()
    calls = [b.call("cudaLaunchKernel", 20 * i, 20 * i + 10) for i in range(2)]
    b.gpu(calls[0], 1000, 11_000, name=SGEMM)
    b.gpu(calls[1], 11_000, 21_000, name="volta_scudnn_128x64_relu_interior_nn_v1")
    g = build_graph(b.table())
    g.table.meta = TraceMeta(devices=[DeviceInfo(id=0, name="Tesla V100-SXM2-32GB")])
    g.devices = g.table.meta.devices
    return g, np.nonzero(g.node_kind != NODE_CPU)[0]


def test_fp32_convolutions_run_as_tf32_on_an_ampere_target():
    """V100 -> A100: cuDNN convolutions take the TF32 path (PyTorch's cudnn.allow_tf32=True), an SGEMM
    keeps fp32 (matmul allow_tf32=False); conv_tf32=off keeps both fp32; from an A100 trace (which had
    TF32 and ran fp32 convolutions anyway) nothing moves (new-user finding)."""
    g, k = sgemm_and_conv_on_v100()
    v100 = find_gpu("V100 SXM2")
    floor = KM.kernel_floor_ns(v100, g)
    assert floor == 2240  # the trace's smallest kernel (10 us) capped at the table's largest floor
    g2, _, note = run(g, "gpu-upgrade:target=A100 40GB SXM")
    # the convolution moves from CUDA cores to TF32 Tensor Cores at KM.TC_EFFICIENCY of the TF32 peak, as amp's fp32 -> 16-bit
    assert g2.dur_ns[k].tolist() == [round(floor + 7760 * 15.7 / 19.5), round(floor + 7760 * 15.7 / (156.0 * KM.TC_EFFICIENCY))]
    assert "1 fp32 convolution kernels on the target's TF32 Tensor Cores" in note
    g3, _, note3 = run(g, "gpu-upgrade:target=A100 40GB SXM,conv_tf32=off")
    assert g3.dur_ns[k].tolist() == [round(floor + 7760 * 15.7 / 19.5)] * 2 and "TF32 Tensor Cores" not in note3
    g.table.meta = TraceMeta(devices=[DeviceInfo(id=0, name="NVIDIA A100-SXM4-40GB")])
    g.devices = g.table.meta.devices
    _, _, note4 = run(g, "gpu-upgrade:target=H100 SXM")
    assert "TF32 Tensor Cores" not in note4


def test_tf32_convolutions_compose_with_amp_once():
    """gpu-upgrade (V100 -> A100) puts fp32 convolutions on TF32; a later amp scales them by the TF32
    path (x0.5), not again from fp32; amp first makes them 16-bit, and gpu-upgrade then does not move
    them to TF32 (new-user finding: the TF32 gain was counted twice). MI300X targets keep fp32 (ROCm:
    TF32 is opt-in)."""
    g, k = sgemm_and_conv_on_v100()
    g1, _, _ = run(g, "gpu-upgrade:target=A100 40GB SXM")
    g2, _, note = run(g1, "amp:model=gpu,casts=off,floor_ns=0")
    assert "1 fp32 CUDA-core compute kernels x0.125, 1 TF32 x0.5" in note
    assert g2.dur_ns[k[1]] == round(g1.dur_ns[k[1]] * 0.5)
    h1, _, _ = run(g, "amp:model=gpu,casts=off")
    _, _, note2 = run(h1, "gpu-upgrade:target=A100 40GB SXM")
    assert "TF32 Tensor Cores" not in note2
    _, _, note3 = run(g, "gpu-upgrade:target=MI300X")
    assert "TF32 Tensor Cores" not in note3


def test_op_work_with_non_string_types_has_no_shapes():
    # was: internal error (TypeError: unhashable type: 'dict') on an op whose Input type held objects
    assert op_work("aten::mm", [[2, 3], [3, 4]], [{"a": 1}, "float"]) == (-1.0, -1.0)
    from daydream.formats.launch_data import last_operand

    assert last_operand([[2, 3], [3, 4]], ["float", ["x"]]) == (-1.0, -1)


def test_source_gpu_does_not_guess_between_models():
    """Device properties under another id than the GPU work's: one model named is that GPU; two
    models named is not known (was: the first entry, silently)."""
    from types import SimpleNamespace

    from daydream.events.table import DeviceInfo
    from daydream.optimizations.gpu_upgrade import source_gpu

    def g(*names):
        return SimpleNamespace(devices=[DeviceInfo(id=i, name=n) for i, n in enumerate(names)],
                               device=np.array([-1, 2, 2]), node_kind=np.array([0, 2, 2]))

    gpu, traced = source_gpu(g("AMD Instinct MI300X VF"), "")
    assert gpu is not None and gpu.name == "MI300X" and traced == "AMD Instinct MI300X VF"
    assert source_gpu(g("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"), "") == (None, "")


def test_gpu_upgrade_and_amp_agree_on_a_convolution_in_either_order():
    """V100 fp32 convolution -> A100 bf16: gpu-upgrade then amp (CUDA-core fp32 -> TF32 at the
    Tensor-Core efficiency, then TF32 -> 16-bit) equals amp then gpu-upgrade (fp32 -> 16-bit at the
    efficiency, then V100 -> A100 16-bit); the efficiency applied on one path only made them differ
    by 2x (try-out finding)."""
    g, k = sgemm_and_conv_on_v100()
    a, _, _ = run(run(g, "gpu-upgrade:target=A100 40GB SXM")[0], "amp:casts=off")
    b, _, _ = run(run(g, "amp:casts=off")[0], "gpu-upgrade:target=A100 40GB SXM")
    assert abs(int(a.dur_ns[k[1]]) - int(b.dur_ns[k[1]])) <= 2
    floor = KM.kernel_floor_ns(find_gpu("V100 SXM2"), g)
    assert abs(int(b.dur_ns[k[1]]) - round(floor + 7760 * 15.7 / (312.0 * KM.TC_EFFICIENCY))) <= 2  # the work part at bf16


def test_convolution_work_from_its_backward_shapes():
    """A convolution op counted one FLOP per element (the elementwise rule), so the roofline made
    ResNet-50's cuDNN convolutions memory-bound (6.4 MFLOP for a 355 us weight gradient) and
    gpu-upgrade scaled them by bandwidth; amp then gave the same kernel another factor with TF32 on
    than off (try-out finding). A backward op: one gradient, 2 N K P Q (C/g) R S, with the operand order
    of each name; the forward, backward-weight and transposed ones: unknown."""
    go, w, x = [32, 2048, 7, 7], [2048, 512, 1, 1], [32, 512, 7, 7]
    f, b = op_work("aten::cudnn_convolution_backward_input", [[], go, w, [], []], ["GenericList", "float", "float", "GenericList", "Int"])
    assert f == 2.0 * 32 * 2048 * 7 * 7 * 512 * 1 * 1 and b > 0
    f2, _ = op_work("aten::convolution_backward", [go, x, w, [], []], ["float", "float", "float", "GenericList", "Int"])
    assert f2 == f  # one gradient per kernel (work goes to ops that launched one kernel)
    f3, _ = op_work("aten::cudnn_convolution_backward", [x, go, w, [], []], ["float", "float", "float", "GenericList", "Int"])
    assert f3 == f  # PyTorch 1.x: (input, grad_output, weight)
    assert op_work("aten::cudnn_convolution_transpose_backward_input", [[], go, w], ["GenericList", "float", "float"]) == (-1.0, -1.0)
    assert op_work("aten::cudnn_convolution", [x, [64, 512, 3, 3], [], []], ["float", "float", "GenericList", "GenericList"]) == (-1.0, -1.0)
    assert op_work("aten::cudnn_convolution_backward_weight", [[], go, x], ["GenericList", "float", "float"]) == (-1.0, -1.0)
    assert op_work("aten::convert_element_type", [x], ["float"])[0] == 32 * 512 * 7 * 7  # not a convolution


def test_tf32_kernel_moved_to_cuda_cores_gets_the_efficiency_back():
    """A100 -> V100 (no TF32): a TF32 GEMM moves from Tensor Cores to CUDA cores, the inverse of the
    V100 -> A100 convolution: the peak ratio times KM.TC_EFFICIENCY (x4.97), not the bare ratio (x9.9)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from test_amp_gpu import TF32, trace

    g = trace(names=(TF32,))
    pl = KM.plan(g, find_gpu("A100 40GB SXM"), find_gpu("V100 SXM2"), LaunchData(), 0, 0)
    k = np.nonzero(g.node_kind != 0)[0]
    assert pl.factor[k][0] == pytest.approx(156.0 * KM.TC_EFFICIENCY / 15.7)


def test_conv_tf32_on_for_a_target_without_tf32_is_refused():
    """conv_tf32=on with a V100 target was accepted, said 'TF32 Tensor Cores' and ran those
    convolutions at half the CUDA-core rate (the fp32 peak times the Tensor-Core efficiency)."""
    from daydream.errors import UsageError

    g, _ = sgemm_and_conv_on_v100()
    g.table.meta = TraceMeta(devices=[DeviceInfo(id=0, name="NVIDIA A100-SXM4-40GB")])
    g.devices = g.table.meta.devices
    with pytest.raises(UsageError, match="has no TF32 Tensor Cores"):
        run(g, "gpu-upgrade:target=V100 SXM2,conv_tf32=on")
