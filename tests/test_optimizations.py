"""The optimization library: each model pinned on a small hand-built trace with exact expected
times, and every optimization run on every real trace (it applies or says why not; no predicted
slowdown; identity parameters give the replay).

Hand-built traces: one CPU thread (pid 100, tid 1), stream 7. Launch latency ``L`` and GPU gap
``G`` are measured by the graph builder (docs/model.md rule 5); each test states them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from daydream.errors import NotApplicable, UsageError
from daydream.events.table import DeviceInfo, Kind, TraceMeta
from daydream.formats import load_trace
from daydream.costmodel.gpus import find_gpu, gpu_of_device
from daydream.costmodel.gpus import names as gpu_names
from daydream.graph import NODE_CPU, build_graph
from daydream.mapping.maps import NodeMapping
from daydream.mapping.rules import PHASES
from daydream.mapping import map_events
from daydream.optimizations import load_all, parse_spec
from daydream.simulate import simulate

from tablebuilder import TB

SGEMM = "volta_sgemm_128x64_nn"
HGEMM = "ampere_h16816gemm_128x128_ldg8_stages_64x3_nn"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)"
MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >(int)"
BN_FW = "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(cudnnTensorStruct, float const*)"
BN_BW = "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(float, float, float, float)"
RELU = "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::clamp_min_scalar_kernel_impl(at::TensorIterator&, c10::Scalar)::{lambda()#1}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int)"
RELU_BW = "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, at::native::(anonymous namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}>, at::detail::Array<char*, 3> >(int)"
FUSED_ADAM_KERNEL = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>, double>(int)"


def run(graph, spec: str):
    """(predicted graph, its timeline, note) of ``--opt spec`` on ``graph``."""
    opt, params = parse_spec(spec)
    g2, note = opt.apply(graph, params)
    return g2, simulate(g2), note


def end(tl) -> int:
    return int(tl.end_ns.max())


def node(g, name: str, kind=None) -> int:
    names = g.node_names()
    hits = [v for v in range(g.n) if names[v] == name and (kind is None or g.node_kind[v] == kind)]
    assert len(hits) == 1, (name, hits)
    return hits[0]


def with_phase(g, phase_of_node: dict[int, str], layer_of_node: dict[int, int] | None = None, labels=None):
    """The graph with mapping annotations: the given phases (others unmapped) and layer ids."""
    phase = np.zeros(g.n, np.uint8)
    for v, p in phase_of_node.items():
        phase[v] = PHASES.index(p)
    layer = np.full(g.n, -1, np.int32)
    for v, lid in (layer_of_node or {}).items():
        layer[v] = lid
    nm = NodeMapping(phase, layer, np.full(g.n, -1, np.int32), None, None, list(labels or ["layer0", "layer1"]))
    return dataclasses.replace(g, mapping=nm)


# ------------------------------------------------------------------------------------- amp ---
def amp_trace(third=HGEMM):
    b = TB()
    c1 = b.call("cudaLaunchKernel", 0, 100)
    c2 = b.call("cudaLaunchKernel", 200, 300)
    c3 = b.call("cudaLaunchKernel", 400, 500)
    b.call("cudaDeviceSynchronize", 600, 7200)
    b.gpu(c1, 1100, 4100, name=SGEMM)  # idle stream at launch: L = 1100
    b.gpu(c2, 4100, 5100, name=ADD)  # queued behind it: G = 0
    b.gpu(c3, 5100, 7100, name=third)
    return b.table()


def test_amp_exact():
    g = build_graph(amp_trace())
    assert (g.launch_latency_ns, g.gpu_gap_ns) == (1100, 0)
    base = simulate(g)
    assert end(base) == 7200
    g2, tl, note = run(g, "amp")
    # sgemm 3000 -> 1000, add 1000 -> 500, the half-precision GEMM stays 2000: 1100 + 3500 + sync own 100
    assert tl.end_ns[node(g2, SGEMM)] == 2100
    assert tl.end_ns[node(g2, ADD)] == 2600
    assert tl.end_ns[node(g2, HGEMM)] == 4600
    assert end(tl) == 4700
    assert "already half" in note
    # identity
    _, tl1, _ = run(g, "amp:compute_factor=1,memory_factor=1,tf32_factor=1")
    assert np.array_equal(tl1.end_ns, base.end_ns) and np.array_equal(tl1.start_ns, base.start_ns)


def test_amp_tf32_factor():
    tf32 = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>(cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4::Params)"
    g = build_graph(amp_trace(third=tf32))
    _, tl, _ = run(g, "amp")
    # 1100 + 1000 + 500 + 2000/2 = 3600, + 100 own
    assert end(tl) == 3700


def test_amp_not_applicable_when_all_half():
    b = TB()
    c1 = b.call("cudaLaunchKernel", 0, 100)
    b.gpu(c1, 1100, 4100, name=HGEMM)
    with pytest.raises(NotApplicable, match="already runs in half precision"):
        run(build_graph(b.table()), "amp")


def test_amp_unknown_precision_follows_the_trace():
    # an nvjet GEMM (no precision in its name) next to a bf16 GEMM: taken as half, left alone
    b = TB()
    c1 = b.call("cudaLaunchKernel", 0, 100)
    c2 = b.call("cudaLaunchKernel", 200, 300)
    b.gpu(c1, 1100, 4100, name="sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64")
    b.gpu(c2, 4100, 5100, name="nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN")
    with pytest.raises(NotApplicable):
        run(build_graph(b.table()), "amp")


# ------------------------------------------------------------------------------ fused-adam ---
def adam_trace(kernel=ADD):
    b = TB()
    b.call("cudaGetDevice", 0, 10)
    b.range("Optimizer.step#Adam.step", 900, 2000)
    calls = [b.call("cudaLaunchKernel", s, s + 10) for s in (1000, 1100, 1200, 1300)]
    b.call("cudaDeviceSynchronize", 1400, 1900)
    for c, s in zip(calls, (1500, 1600, 1700, 1800)):
        b.gpu(c, s, s + 50, name=kernel)  # each on an idle stream: L = 500
    return b.table()


def test_fused_adam_exact_from_ranges():
    g = build_graph(adam_trace())
    assert (g.launch_latency_ns, g.gpu_gap_ns) == (500, 0)
    assert end(simulate(g)) == 1900
    g2, tl, note = run(g, "fused-adam")
    # one launch (the first, at 1000..1010) and one 200 ns kernel from 1500; the sync keeps its
    # 90 ns gap (starts 1100), waits until 1700, own 50
    assert g2.n == g.n - 6
    assert end(tl) == 1750
    assert "Optimizer.step" in note
    _, tl2, _ = run(g, "fused-adam:kernel_factor=0.5,launch_ns=30")
    assert end(tl2) == 1650  # kernel 100 ns: 1500..1600, + 50


def test_fused_adam_from_mapped_phase():
    g = build_graph(adam_trace())
    calls = [v for v in range(g.n) if g.node_kind[v] == NODE_CPU and g.name(v) == "cudaLaunchKernel"]
    kernels = [v for v in range(g.n) if g.node_kind[v] == Kind.KERNEL]
    gm = with_phase(g, {v: "optimizer" for v in calls + kernels})
    _, tl, note = run(gm, "fused-adam")
    assert end(tl) == 1750 and "mapped optimizer phase" in note


def test_fused_adam_not_applicable():
    with pytest.raises(NotApplicable, match="already runs fused"):
        run(build_graph(adam_trace(FUSED_ADAM_KERNEL)), "fused-adam")
    with pytest.raises(NotApplicable, match="no optimizer step"):
        run(build_graph(amp_trace()), "fused-adam")


# ---------------------------------------------------------------------------------- fusion ---
def chain_trace():
    b = TB()
    cs = [b.call("cudaLaunchKernel", s, s + 10) for s in (0, 100, 200)]
    b.call("cudaDeviceSynchronize", 300, 800)
    for c, s, name in zip(cs, (500, 600, 700), (ADD, MUL, ADD)):
        b.gpu(c, s, s + 50, name=name)  # idle at launch: L = 500
    return b.table()


def test_fusion_exact():
    g = build_graph(chain_trace())
    assert (g.launch_latency_ns, g.gpu_gap_ns) == (500, 0)
    assert end(simulate(g)) == 800
    g2, tl, note = run(g, "fusion")
    # 3 kernels: bytes ratio (2 + 2*1 + 1) / (3 * 3) = 5/9 of 150 ns = 83 ns (> longest 50);
    # 2 launches and their gaps go: the sync starts at 100, waits for 500 + 83, own 50
    assert g2.n == g.n - 4
    assert end(tl) == 633
    assert "1 chains of 3" in note
    _, tl1, _ = run(g, "fusion:reads=1,writes=1")  # ratio (1 + 0 + 1) / (3 * 2) = 1/3: 50 = longest
    assert end(tl1) == 600
    # identity: max_chain=1 fuses nothing
    g0, tl0, _ = run(g, "fusion:max_chain=1")
    assert g0 is g and np.array_equal(tl0.end_ns, simulate(g).end_ns)


def test_fusion_respects_layers_when_mapped():
    g = build_graph(chain_trace())
    k = [v for v in range(g.n) if g.node_kind[v] == Kind.KERNEL]
    gm = with_phase(g, {v: "forward" for v in k}, {k[0]: 0, k[1]: 0, k[2]: 1})
    _, tl, _ = run(gm, "fusion")
    # only the first two fuse (ratio 4/6 of 100 = 67): e1 500..567; the third launch moves up to
    # 100 (its predecessor call and gap are gone) but its kernel waits for e1 and its own ready
    # time 600: 600..650; the sync starts at 200 and ends 650 + 50
    assert end(tl) == 700


def test_fusion_leaves_the_optimizer_phase_alone():
    """Kernels of the mapped optimizer phase do not fuse (the optimizer step's per-parameter updates:
    fused-adam's): third try-out, ResNet-50's SGD add_/mul_ and zero_grad fills were 3,864 of 4,806
    fused kernels, most of fusion's 1.151x (now 1.012x)."""
    g = build_graph(chain_trace())
    k = [v for v in range(g.n) if g.node_kind[v] == Kind.KERNEL]
    _, _, note = run(with_phase(g, {v: "forward" for v in k}, {v: 0 for v in k}), "fusion")
    assert "1 chains of 3" in note
    with pytest.raises(NotApplicable):
        run(with_phase(g, {v: "optimizer" for v in k}, {v: 0 for v in k}), "fusion")


def test_fusion_not_applicable():
    with pytest.raises(NotApplicable):
        run(build_graph(amp_trace()), "fusion")


# --------------------------------------------------------------------------------- reconbn ---
def bn_trace(with_bn=True):
    b = TB()
    cs = [b.call("cudaLaunchKernel", s, s + 10) for s in (0, 100, 200, 300)]
    b.call("cudaDeviceSynchronize", 400, 1550)
    names = (BN_FW, RELU, RELU_BW, BN_BW) if with_bn else (SGEMM, RELU, RELU_BW, ADD)
    for c, (s, e), name in zip(cs, ((500, 800), (800, 900), (900, 1000), (1000, 1500)), names):
        b.gpu(c, s, e, name=name)
    return b.table()


def test_reconbn_exact():
    g = build_graph(bn_trace())
    assert (g.launch_latency_ns, g.gpu_gap_ns) == (500, 0)
    base = simulate(g)
    assert end(base) == 1550
    g2, tl, note = run(g, "reconbn")
    # BN fw 300 -> 200 (500..700); both ReLUs fused away with their launches; BN bw 500 -> 300,
    # launched at 100 (ready 600), after BN fw: 700..1000; the sync starts at 200, ends 1050
    assert tl.end_ns[node(g2, BN_FW)] == 700
    assert tl.end_ns[node(g2, BN_BW)] == 1000
    assert end(tl) == 1050
    assert "2 ReLU" in note
    _, tl0, _ = run(g, "reconbn:fw_factor=1,bw_factor=1,fuse_relu=0")
    assert np.array_equal(tl0.end_ns, base.end_ns)


def test_reconbn_not_applicable_without_bn():
    with pytest.raises(NotApplicable, match="no batch-normalization"):
        run(build_graph(bn_trace(with_bn=False)), "reconbn")


# ----------------------------------------------------------------------------- cuda-graphs ---
def step_trace(two_steps=False):
    b = TB()
    b.range("ProfilerStep#1", 0, 2000)
    cs = [b.call("cudaLaunchKernel", s, s + 10) for s in (10, 120, 230)]
    b.call("cudaDeviceSynchronize", 340, 880)
    for c, s in zip(cs, (510, 620, 730)):
        b.gpu(c, s, s + 100, name=SGEMM)  # each launched onto an idle stream: L = 500
    if two_steps:
        b.range("ProfilerStep#2", 2000, 4000)
        cs = [b.call("cudaLaunchKernel", s, s + 10) for s in (2010, 2120)]
        b.call("cudaDeviceSynchronize", 2230, 2730)
        for c, s in zip(cs, (2510, 2620)):
            b.gpu(c, s, s + 100, name=SGEMM)
    return b.table()


def test_cuda_graphs_exact():
    g = build_graph(step_trace())
    assert (g.launch_latency_ns, g.gpu_gap_ns) == (500, 0)
    assert end(simulate(g)) == 880
    g2, tl, note = run(g, "cuda-graphs")
    # one graph launch (10..20, lasting the 10 ns median launch) releases the three kernels at
    # 510: 510..810; the sync keeps its 100 ns gap (starts 120) and ends 810 + 50
    assert g2.n == g.n - 2
    assert end(tl) == 860
    assert "1 graph launch (" in note  # singular (fourth try-out)
    _, tl2, _ = run(g, "cuda-graphs:graph_launch_ns=40")
    assert end(tl2) == 860  # the graph launch's end does not gate the kernels (launch start + L)
    _, tlw, _ = run(g, "cuda-graphs:region=window")
    assert end(tlw) == 860


def test_cuda_graphs_one_launch_per_step():
    g = build_graph(step_trace(two_steps=True))
    g2, tl, note = run(g, "cuda-graphs")
    assert "2 graph launches" in note and g2.n == g.n - 3
    assert end(tl) < end(simulate(g))


def _queued_three(later_calls, sync, starts, dur, names):
    """Graph of one step: three launches (the first at 10..20, the others at ``later_calls``) of kernels
    ``names`` starting at ``starts``, ``dur`` ns each, then a device synchronize at ``sync``; built with
    a launch queue of depth 1, so the later launches wait for room (QUEUE edges)."""
    b = TB()
    b.range("ProfilerStep#1", 0, 2000)
    calls = [b.call("cudaLaunchKernel", 10, 20)] + [b.call("cudaLaunchKernel", s, e) for s, e in later_calls]
    b.call("cudaDeviceSynchronize", *sync)
    for c, s, name in zip(calls, starts, names):
        b.gpu(c, s, s + dur, name=name)
    return build_graph(b.table(), launch_queue_depth=1)


def test_launch_queue_back_pressure_is_not_a_synchronization():
    """Launches past the launch-queue depth wait for room (QUEUE edges, blocking) but do not
    synchronize: a CUDA graph captures across them and fusion may fuse across them (found by a
    new user: from the 1,025th launch of a stream on, cuda-graphs split at every launch)."""
    # the queue holds one launch: the 2nd returns after kernel 1 ends (610), the 3rd after kernel 2 (720)
    g = _queued_three(((30, 615), (625, 725)), (735, 880), (510, 620, 730), 90, (SGEMM,) * 3)
    cpu = g.node_kind == NODE_CPU
    launches = cpu & np.isin(np.arange(g.n), g.launch[g.launch >= 0])
    assert (g.blocking & launches).sum() == 2  # the 2nd and 3rd launch wait for the queue
    assert not (g.synchronizing & launches).any()
    assert g.synchronizing[cpu].sum() == 1  # the device synchronize
    _, _, note = run(g, "cuda-graphs")
    assert "1 graph launch (" in note  # singular (fourth try-out)


def test_fusion_fuses_kernels_the_launch_queue_waits_for():
    """A kernel whose end frees room for a later launch (a QUEUE edge from it) has no reader of its
    result: it still fuses (second try-out: every kernel of a long stream but the last 1,024 has one,
    so fusion fused only the last step of ResNet-50, 1.002x instead of 1.151x)."""
    # the queue holds one launch: the 2nd returns after kernel 1 ends (570), the 3rd after kernel 2 (640)
    g = _queued_three(((30, 575), (585, 645)), (655, 800), (510, 580, 650), 60, (ADD, MUL, ADD))
    assert (g.edge_kind == 6).sum() == 2  # two QUEUE edges, from kernels 1 and 2
    g2, tl, note = run(g, "fusion")
    assert "1 chains of 3" in note
    assert g2.n == g.n - 4 and (g2.node_kind == Kind.KERNEL).sum() == 1
    assert end(tl) < end(simulate(g))


# ----------------------------------------------------------------------------- gpu-upgrade ---
def gpu_trace(device="Tesla V100-SXM2-32GB", memory=34_089_730_048, cap=(7, 0), sms=80):
    b = TB()
    c1 = b.call("cudaLaunchKernel", 0, 10)
    c2 = b.call("cudaLaunchKernel", 20, 30)
    b.call("cudaDeviceSynchronize", 40, 2700)
    b.gpu(c1, 500, 1750, name=SGEMM)  # L = 500
    b.gpu(c2, 1750, 2650, name=ADD)  # queued: G = 0
    t = b.table()
    t.meta = TraceMeta(devices=[DeviceInfo(id=0, name=device, compute_major=cap[0], compute_minor=cap[1], num_sms=sms,
                                           total_memory_bytes=memory)])
    return t


def test_gpu_upgrade_exact():
    g = build_graph(gpu_trace())
    assert end(simulate(g)) == 2700
    g2, tl, note = run(g, "gpu-upgrade:target=A100 40GB SXM,kernel_model=peak")
    # sgemm 1250 * 125/312 = 500.8 -> 501; add 900 * 900/1555 = 520.9 -> 521
    assert g2.dur_ns[node(g2, SGEMM)] == 501 and g2.dur_ns[node(g2, ADD)] == 521
    assert end(tl) == 500 + 501 + 521 + 50
    assert "V100 SXM2 -> A100 40GB SXM" in note
    # identity: target == source
    with pytest.raises(NotApplicable, match="already ran on the target"):  # the same GPU, the same host: nothing to change
        run(g, "gpu-upgrade:target=v100-sxm2")
    _, tl1, _ = run(g, "gpu-upgrade:target=v100-sxm2,launch_latency_ns=500")  # the same L: the identity
    assert np.array_equal(tl1.end_ns, simulate(g).end_ns)


def test_gpu_upgrade_source():
    g = build_graph(gpu_trace(device="GeForce GTX 1060 with Max-Q Design", memory=6 << 30, cap=(6, 1), sms=10))
    with pytest.raises(NotApplicable, match="not in the GPU table"):
        run(g, "gpu-upgrade")
    _, tl, note = run(g, "gpu-upgrade:source=RTX 3080,target=RTX 4090")
    assert "RTX 3080 -> RTX 4090" in note
    with pytest.raises(UsageError):
        parse_spec("gpu-upgrade:target=GTX 480")


def test_gpu_table_matching():
    assert find_gpu("NVIDIA A100-PG509-200", 42_297_524_224).name == "A100 40GB SXM"
    assert find_gpu("NVIDIA A100-SXM4-80GB", 85_000_000_000).name == "A100 80GB SXM"
    assert find_gpu("A100-PCIE-40GB", 42_505_273_344).name == "A100 40GB PCIe"
    assert find_gpu("NVIDIA H100 80GB HBM3").name == "H100 SXM"
    assert find_gpu("NVIDIA H100 PCIe").name == "H100 PCIe"
    assert find_gpu("Tesla V100-DGXS-32GB").name == "V100 SXM2"
    assert find_gpu("NVIDIA GeForce RTX 3080").name == "RTX 3080"
    assert find_gpu("NVIDIA L4").name == "L4" and find_gpu("NVIDIA L40S").name == "L40S"
    assert find_gpu("AMD Instinct MI300X").name == "MI300X"
    assert find_gpu("b200").name == "B200" and find_gpu("h200").name == "H200"
    dev = DeviceInfo(id=0, name="AMD Radeon Graphics", compute_major=9, compute_minor=0, num_sms=104)
    assert gpu_of_device(dev).name == "MI250 GCD"
    for name in gpu_names():
        assert find_gpu(name).name == name  # every table entry is reachable by its own name


# ----------------------------------------------------------------------------- real traces ---
TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces"
REAL = sorted(p for p in TRACES.glob("*/*") if p.suffix in (".gz", ".json", ".sqlite"))
#: every registered optimization that predicts a speed-up (what-ifs such as scale-kernels can slow down)
#: optimizations that trade time for memory: a predicted slowdown is what they do
TRADES = ("activation-checkpointing",)
SPEEDUPS = tuple(name for name, o in load_all().items() if not o.what_if and name not in TRADES)


@pytest.fixture(scope="module")
def real_graphs():
    if not REAL:
        pytest.skip("no real traces in ../shared/traces")
    out = {}
    for p in REAL:
        t = load_trace(str(p))
        g = build_graph(t, map_events(t))
        out[str(p.relative_to(TRACES))] = (g, simulate(g))
    return out


@pytest.mark.slow
def test_every_optimization_on_every_real_trace(real_graphs):
    """Each applies (no predicted slowdown) or says plainly why not. amp is held to it without its
    cast kernels: the casts autocast adds (a kernel and a launch per forward GEMM's weight) can
    outweigh the gain of a tiny model (hta/mi250_minitoy: 9.581 -> 9.587 ms), a real slowdown."""
    applied = {name: 0 for name in SPEEDUPS}
    for trace, (g, base) in real_graphs.items():
        for name in SPEEDUPS:
            try:
                g2, tl, note = run(g, "amp:casts=off" if name == "amp" else name)
            except NotApplicable as e:
                assert len(str(e)) > 10, (trace, name)
                continue
            assert note, (trace, name)
            assert end(tl) <= end(base), (trace, name, end(tl), end(base))
            applied[name] += 1
    assert all(v >= 1 for v in applied.values()), applied


def test_identity_parameters_replay_exactly_on_real_traces(real_graphs):
    for trace, (g, base) in real_graphs.items():
        specs = ["amp:model=paper,compute_factor=1,memory_factor=1,tf32_factor=1", "amp:dtype=fp32", "fusion:max_chain=1",
                 "reconbn:fw_factor=1,bw_factor=1,fuse_relu=0"]
        dev = g.table.meta.devices
        src = gpu_of_device(dev[0]) if dev else None
        if src is not None:
            specs.append(f"gpu-upgrade:target={src.name}")
        for spec in specs:
            try:
                _, tl, _ = run(g, spec)
            except NotApplicable:
                continue
            assert np.array_equal(tl.end_ns, base.end_ns) and np.array_equal(tl.start_ns, base.start_ns), (trace, spec)


def test_unmapped_fallbacks_on_a_real_trace(real_graphs):
    """Without a mapping (graph.mapping is None) the optimizations find the same steps."""
    g, base = real_graphs["kineto_tbplugin/resnet50_num_workers_0_worker0.1623143089861.pt.trace.json.gz"]
    gu = dataclasses.replace(g, mapping=None)
    for name in ("fused-adam", "fusion", "cuda-graphs"):
        _, tl, note = run(gu, name)
        assert end(tl) < end(base), name
    _, _, note = run(gu, "fused-adam")
    assert "Optimizer.step ranges" in note and "6 optimizer step(s)" in note


def test_integer_ns_parameters_take_float_notation_of_integers():
    """cuda-graphs:graph_launch_ns=1e9 was refused ("not a valid int") while gpu-upgrade's
    launch_latency_ns=1e9 was accepted (fourth try-out): integer ns parameters take integral float
    notation and refuse a fraction, naming what they take."""
    import pytest

    from daydream.errors import UsageError
    from daydream.optimizations import REGISTRY, integer_ns

    assert integer_ns("1e9") == 10**9 and integer_ns("5000.0") == 5000 and integer_ns(" -1 ") == -1 and integer_ns("12") == 12
    for bad in ("5000.5", "nan", "inf", "1e30", "x"):
        with pytest.raises(ValueError):
            integer_ns(bad)
    for opt, k in (("cuda-graphs", "graph_launch_ns"), ("fused-adam", "launch_ns")):
        p = REGISTRY[opt].resolve({k: "1e9"})
        assert p[k] == 10**9 and type(p[k]) is int
        assert REGISTRY[opt].resolve({k: "5000.0"})[k] == 5000
        with pytest.raises(UsageError, match=rf"^--opt {opt}: {k}='5000.5' is not a valid integer number of ns \(5000, 5e3 or 5000.0; not a fraction\)$"):
            REGISTRY[opt].resolve({k: "5000.5"})
