"""``tp:degree=N`` (Megatron tensor parallelism, daydream/optimizations/tensor_parallel.py).

The emulator judges the graph edit: split kernels take their new durations and a synchronous
all-reduce runs on the stream right after each row-parallel GEMM (``insert_after_kernels``); a
graph built from an emulated trace, so changed, predicts exactly the emulator's run of the program
that issues them (``with_inline``). The plan (which GEMMs are column/row parallel) is checked on a
real trace with module annotations, and degree 1 is the baseline on every shared trace."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_transform import _baseline_keys, _by_corr, _emulated_by_key

from daydream.costmodel import Kernels
from daydream.costmodel import comm as cm
from daydream.formats import load_trace
from daydream.graph import NODE_CPU, build_graph
from daydream.mapping import map_events
from daydream.optimizations import parse_spec
from daydream.optimizations.tensor_parallel import (
    _blocks,
    backward_split_field,
    input_gradient_of,
    insert_after_kernels,
    match_backward,
)
from daydream.simulate import simulate
from daydream.testing.ddp_programs import with_inline
from daydream.testing.emulator import (
    HostWork,
    Launch,
    Program,
    RangeBegin,
    RangeEnd,
    Thread,
    emulate,
    measure_latencies,
    programs,
    to_kineto,
)
from daydream.testing.emulator.shaped import kernel_ns
from daydream.transform import set_duration

NET = cm.Network(cm.PRESETS["nvlink4"])
HERE = os.path.dirname(__file__)
TRACES = os.path.join(HERE, "..", "..", "shared", "traces")


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(programs(max_threads=1), st.integers(0, 2**32), st.integers(1, 4), st.sampled_from([2, 4, 8]))
def test_split_and_inline_allreduces_equal_the_emulator(tmp_path_factory, prog, seed, n_ar, degree):
    run = emulate(prog)
    assume(measure_latencies(run) == (prog.L, prog.G))
    launches = [c for c in run.calls if isinstance(c.op, Launch)]
    assume(len(launches) >= 1)
    rng = np.random.default_rng(seed)
    ai = sorted(rng.choice(len(launches), size=min(n_ar, len(launches)), replace=False).tolist())
    si = sorted(rng.choice(len(launches), size=int(rng.integers(0, len(launches) + 1)), replace=False).tolist())
    p = tmp_path_factory.mktemp("tp") / "t.json"
    to_kineto(run, str(p))
    g = build_graph(load_trace(str(p)))
    corr = g.table.correlation[np.maximum(g.row, 0)]
    node_of = {int(c): i for i, c in enumerate(corr.tolist()) if g.node_kind[i] != NODE_CPU and g.row[i] >= 0}
    split = np.array([node_of[launches[i].correlation] for i in si], np.int64)
    new = np.rint(g.dur_ns[split] / degree).astype(np.int64)  # the split kernels' times (any: the edit is judged)
    anchor = np.array([node_of[launches[i].correlation] for i in ai], np.int64)
    sizes = rng.integers(1 << 10, 64 << 20, len(ai))
    durs = cm.collective_ns(cm.ALL_REDUCE, sizes, degree, NET)
    mask = np.zeros(g.n, bool)
    mask[split] = True
    o = np.argsort(split)
    g2 = set_duration(g, mask, new[o]) if len(split) else g
    g2, nodes = insert_after_kernels(g2, anchor, durs, ["ncclKernel_AllReduce_RING_LL_Sum_float"] * len(anchor))
    changed, where, ar = with_inline(prog, 0, [launches[i].op_index for i in ai], durs.tolist(),
                                     {launches[i].op_index: int(d) for i, d in zip(si, new.tolist())})
    pred = simulate(g2)
    crun = emulate(changed)
    keys = _baseline_keys(run)
    calls, tasks = _by_corr(g2, pred)
    e_calls, e_tasks = _emulated_by_key(crun)
    got_c = {(keys[c][0], where[keys[c][1]]): v for c, v in calls.items()}
    got_t = {(keys[c][0], where[keys[c][1]]): v for c, v in tasks.items()}
    assert got_c == {k: e_calls[k] for k in got_c}
    assert got_t == {k: e_tasks[k] for k in got_t}
    assert [(int(pred.start_ns[v]), int(pred.end_ns[v])) for v in nodes] == [e_tasks[(0, i)] for i in ar]
    # the stream's next kernel after an anchor waits for its all-reduce
    for a, v in zip(anchor.tolist(), nodes.tolist()):
        nxt = g2.lane_next[v]
        if nxt >= 0:
            assert pred.start_ns[nxt] >= pred.end_ns[v]


def test_blocks_are_the_outermost_repeated_modules():
    labels = ["M_0/Enc_0/Layer_0/Attn_0/Linear_0", "M_0/Enc_0/Layer_0/Mlp_0/Linear_1", "M_0/Enc_0/Layer_1/Attn_1/Linear_2",
              "M_0/Head_0/Linear_3", "M_0/Head_0"]
    b = _blocks(labels, np.array([0, 1, 2, 3, 4, -1]))
    assert b[0] == b[1] != b[2] and b[0] >= 0 and b[2] >= 0
    assert b[3] == -1 and b[4] == -1 and b[5] == -1  # the head: no repeated ancestor but its leaf; unlabelled
    # a kernel of the block's own forward (its path is the block): in the block (it was -1, so a
    # GELU called in the block's forward between its linears was not split)
    b = _blocks(labels + ["M_0/Enc_0/Layer_0"], np.array([0, 2, 5]))
    assert b[0] == b[2] >= 0 and b[1] >= 0


BERT = "tracelens/h100_gaunernst_bert-small-uncased__1016001.json.gz"


def _analyze(path, specs):
    from daydream.analysis import analyze
    return analyze(load_trace(path), specs).report


@pytest.mark.slow
def test_bert_pairs_from_the_op_order_and_degree_monotone():
    """BERT-small (4 blocks): per block Q, K, V (one column group) -> output projection (row),
    intermediate (column) -> output (row): 8 pairs, 16 column and 8 row GEMMs; the LM head (not in
    a repeated block) unsplit. Split kernel time falls with the degree; all-reduces are added."""
    path = os.path.join(TRACES, BERT)
    if not os.path.exists(path):
        pytest.skip("shared traces not present")
    notes = {}
    for d in (1, 2, 4):
        r = _analyze(path, [f"tp:degree={d}"])
        assert not r.not_applicable
        notes[d] = r.predictions[-1].optimizations[0].note
        if d == 1:
            assert r.predictions[-1].window.predicted_ns == r.predictions[-1].window.replayed_ns
    assert "8 column/row pairs in 4 blocks" in notes[2] and "column-parallel GEMMs: 16" in notes[2]
    assert "row-parallel GEMMs: 8" in notes[2] and "8 all-reduces" in notes[2] and "no all-reduce" in notes[1]
    ms = [float(notes[d].split("split kernels ")[1].split(" -> ")[1].split(" ms")[0]) for d in (1, 2, 4)]
    assert ms[0] > ms[1] > ms[2]


def _all_traces():
    out = []
    for p in sorted(glob.glob(os.path.join(TRACES, "*", "*"))):
        if p.endswith((".json", ".json.gz", ".sqlite")):
            out.append(p)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("path", _all_traces() or [None])
def test_degree_one_is_the_baseline_on_every_shared_trace(path):
    """tp:degree=1 runs the whole plan (new shapes equal to the old, no all-reduce): the predicted
    window is the replayed one, or the what-if is not applicable (no layers / no pairs)."""
    if path is None:
        pytest.skip("shared traces not present")
    r = _analyze(path, ["tp:degree=1"])
    if r.not_applicable:
        return
    for p in r.predictions:
        assert p.window.predicted_ns == p.window.replayed_ns


# ------------------------------------------------------------------------------- backward ------
_GEMM = "ampere_sgemm_128x64_tn"
_GELU = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>"


def mlp_training_step(blocks: int, T: int, H: int, host_ns: int = 2_000, call_ns: int = 3_000):
    """An MLP (``Block_i`` of a column linear H -> 4H, GELU, a row linear 4H -> H) trained one step
    on one thread: the forward in ``nn.Module`` ranges (ops with ``Input Dims``), the backward in
    reverse as autograd records it (``evaluate_function: AddmmBackward0`` ranges, each an
    ``aten::mm`` input gradient then an ``aten::mm`` weight gradient; GELU's backward between).

    Returns:
        (program, {op index of each GEMM launch: role}), role one of ("col"|"row", "fwd"|"dgrad"|"wgrad", block).
    """
    ops, roles = [RangeBegin("ProfilerStep#1")], {}

    def op(name, dims, k: Kernels, role=None):
        t, grid = kernel_ns(k)
        ops.extend([HostWork(host_ns), RangeBegin(name, "cpu_op", tuple(tuple(d) for d in dims), tuple("float" for _ in dims))])
        if role:
            roles[len(ops)] = role
        ops.extend([Launch(7, k.name[0], t, call_ns, grid=grid), RangeEnd()])

    lin = (lambda M, N, K: Kernels.make("linear", _GEMM, B=1, M=M, N=N, K=K, dtype="fp32"))
    gelu = Kernels.make("elementwise", _GELU, elems=T * 4 * H, inputs=1, dtype="fp32")
    for b in range(blocks):
        ops.append(RangeBegin(f"nn.Module: Block_{b}", "python_function"))
        ops.append(RangeBegin(f"nn.Module: Linear_{2 * b}", "python_function"))
        op("aten::addmm", [[4 * H], [T, H], [H, 4 * H]], lin(4 * H, T, H), ("col", "fwd", b))
        ops.append(RangeEnd())
        op("aten::gelu", [[T, 4 * H]], gelu)
        ops.append(RangeBegin(f"nn.Module: Linear_{2 * b + 1}", "python_function"))
        op("aten::addmm", [[H], [T, 4 * H], [4 * H, H]], lin(H, T, 4 * H), ("row", "fwd", b))
        ops.extend([RangeEnd(), RangeEnd()])
    for b in reversed(range(blocks)):
        ops.append(RangeBegin("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op"))
        op("aten::mm", [[T, H], [H, 4 * H]], lin(4 * H, T, H), ("row", "dgrad", b))
        op("aten::mm", [[H, T], [T, 4 * H]], lin(4 * H, H, T), ("row", "wgrad", b))
        ops.append(RangeEnd())
        ops.append(RangeBegin("autograd::engine::evaluate_function: GeluBackward0", "cpu_op"))
        op("aten::gelu_backward", [[T, 4 * H], [T, 4 * H]], gelu)
        ops.append(RangeEnd())
        ops.append(RangeBegin("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op"))
        op("aten::mm", [[T, 4 * H], [4 * H, H]], lin(H, T, 4 * H), ("col", "dgrad", b))
        op("aten::mm", [[4 * H, T], [T, H]], lin(H, 4 * H, T), ("col", "wgrad", b))
        ops.append(RangeEnd())
    ops.append(RangeEnd())
    return Program([Thread(ops)], launch_latency_ns=5_000, gpu_gap_ns=1_000), roles


def test_backward_gemms_matched_by_reverse_order_and_sizes():
    H, T = 64, 128
    fwd = np.array([[4 * H, T, H], [H, T, 4 * H], [4 * H, T, H], [H, T, 4 * H]])
    # block 1's row, block 1's column, block 0's row, block 0's column: dgrad then wgrad each;
    # block 0's column has no weight gradient (frozen), so its input gradient is matched alone
    bwd = np.array([[4 * H, T, H], [4 * H, H, T], [H, T, 4 * H], [H, 4 * H, T], [4 * H, T, H], [4 * H, H, T], [H, T, 4 * H]])
    assert match_backward(fwd, bwd).tolist() == [3, 3, 2, 2, 1, 1, 0]
    assert match_backward(fwd, np.array([[7, 8, 9]])).tolist() == [-1]
    # which field the degree divides: the forward M (column) or K (row), never the tokens
    assert backward_split_field((4 * H, T, H), (H, T, 4 * H), "M", True) == "K"
    assert backward_split_field((4 * H, T, H), (H, 4 * H, T), "M", False) == "N"
    assert backward_split_field((H, T, 4 * H), (4 * H, T, H), "K", True) == "M"
    assert backward_split_field((H, T, 4 * H), (4 * H, H, T), "K", False) == "M"
    # the input gradient: the (K, N, M) one; when both have that shape (4H == T), the first
    assert input_gradient_of((4 * H, T, H), [(H, 4 * H, T), (H, T, 4 * H)]) == 1
    assert input_gradient_of((128, 128, 32), [(32, 128, 128), (32, 128, 128)]) == 0
    assert input_gradient_of((128, 128, 32), []) == -1


@pytest.mark.slow
@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(2, 3), st.sampled_from([16, 64, 128, 256]), st.sampled_from([32, 64]), st.sampled_from([2, 4, 8]))
def test_backward_split_and_input_gradient_allreduce_equal_the_emulator(blocks, T, H, degree):
    """tp on a trained MLP: the plan splits exactly the column and row GEMMs and their input and
    weight gradients, and issues the all-reduces Megatron does (g after each row GEMM's forward, f
    after each column GEMM's input gradient, of T x H elements); the predicted run equals the
    emulator's run of the program issuing them, with the predicted GEMM times (the edit is judged;
    the kernel-cost library's times are judged by the shape properties)."""
    import tempfile

    prog, roles = mlp_training_step(blocks, T, H)
    run = emulate(prog)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.json")
        to_kineto(run, p)
        t = load_trace(p)
        g = build_graph(t, map_events(t))
    opt, params = parse_spec(f"tp:degree={degree},bandwidth=nvlink4,gpu=H100 SXM")
    g2, note = opt.apply(g, params)
    assert f"backward GEMMs of column-parallel GEMMs split (matched by order and shapes, inferred): {2 * blocks}" in note
    assert f"backward GEMMs of row-parallel GEMMs split (inferred): {2 * blocks}" in note
    assert f"{2 * blocks} all-reduces ({blocks} forward, {blocks} of input gradients" in note
    # the program that issues it: GEMMs at the predicted times, all-reduces inline
    corr = g.table.correlation[np.maximum(g.row, 0)]
    launch_of = {c.correlation: c.op_index for c in run.calls if isinstance(c.op, Launch)}
    op_of_node = {i: launch_of[int(c)] for i, c in enumerate(corr.tolist()) if g.node_kind[i] != NODE_CPU and g.row[i] >= 0}
    # g2 keeps the baseline's node ids for the baseline's tasks (the inserted ones come after)
    new_durs = {o: int(g2.dur_ns[n]) for n, o in op_of_node.items()}  # the split GEMMs and GELUs
    assert f"kernels between a pair split by the library: {blocks}" in note  # each block's GELU
    net = cm.Network(cm.PRESETS["nvlink4"])
    anchors = sorted([o for o, r in roles.items() if r[:2] in (("row", "fwd"), ("col", "dgrad"))])
    nbytes = [T * H * 4] * len(anchors)
    durs = cm.collective_ns(cm.ALL_REDUCE, np.array(nbytes), degree, net)
    changed, _, _ = with_inline(prog, 0, anchors, durs.tolist(), new_durs)
    crun = emulate(changed)
    pred = simulate(g2)
    assert int(pred.end_ns.max()) == max([c.end_ns for c in crun.calls] + [x.end_ns for x in crun.tasks]), note
    gpu = g2.node_kind != NODE_CPU
    assert sorted(zip(pred.start_ns[gpu].tolist(), pred.end_ns[gpu].tolist())) == sorted(
        (x.start_ns, x.end_ns) for x in crun.tasks), note


def test_degree_one_needs_no_link():
    """tp:degree=1 issues no all-reduce, so a GPU without a board link preset (MI300X) is no reason
    to refuse it: it was not applicable ("the MI300X's board link is not known") on the MI300
    BERT trace, where degree 1 must be the identity; degree 2 still asks for the link."""
    import tempfile

    from daydream.errors import NotApplicable
    prog, _ = mlp_training_step(2, 64, 64)
    run = emulate(prog)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.json")
        to_kineto(run, p)
        t = load_trace(p)
        g = build_graph(t, map_events(t))
    opt, params = parse_spec("tp:degree=1,gpu=MI300X")
    g1, note = opt.apply(g, params)
    assert "no link: one rank" in note
    assert int(simulate(g1).end_ns.max()) == int(simulate(g).end_ns.max())
    opt, params = parse_spec("tp:degree=2,gpu=MI300X")
    with pytest.raises(NotApplicable, match="board link"):
        opt.apply(g, params)


def _with_outputs(prog, roles, T: int, H: int, N: int):
    """``prog`` (:func:`mlp_training_step`) with each GEMM and the forward GELU allocating its
    output before its launch, at one tensor-parallel rank's size (``N`` = 1: the traced program):
    Megatron's split outputs ``/ N`` (the column GEMM's and the GELU's ``T x 4H``, the row GEMM's
    input gradient ``T x 4H``, both weight gradients), the row GEMM's output and the column GEMM's
    input gradient whole (fp32). Activations (forward outputs) are freed after their block's last
    backward GEMM, input gradients after the next GEMM's launch, weight gradients kept. The GELU's
    backward allocates nothing here: the tool does not split backward non-GEMM kernels (a limit)."""
    import dataclasses

    from daydream.testing.emulator import Allocate
    full = {("col", "fwd"): T * 4 * H, ("gelu", "fwd"): T * 4 * H, ("row", "fwd"): T * H, ("row", "dgrad"): T * 4 * H,
            ("row", "wgrad"): 4 * H * H, ("col", "dgrad"): T * H, ("col", "wgrad"): H * 4 * H}
    split = {("col", "fwd"), ("gelu", "fwd"), ("row", "dgrad"), ("row", "wgrad"), ("col", "wgrad")}
    size = (lambda key: 4 * full[key] // (N if key in split else 1))
    out, acts, pending, block, backward = [], {}, [], 0, False
    for i, op in enumerate(prog.threads[0].ops):
        role = roles.get(i)
        if not isinstance(op, Launch) or (role is None and backward):
            out.append(op)
            continue
        key = (role[0], role[1]) if role else ("gelu", "fwd")
        block = role[2] if role else block
        backward = backward or key[1] != "fwd"
        a = 0x6F0000000000 + 4096 * i
        out += [Allocate(size(key), addr=a), op]
        out += [Allocate(-sz, addr=x) for x, sz in pending]
        pending = [(a, size(key))] if key[1] == "dgrad" else []
        if key[1] == "fwd":
            acts.setdefault(block, []).append((a, size(key)))
        if key == ("col", "wgrad"):  # the block's backward is done: its activations go
            out += [Allocate(-sz, addr=x) for x, sz in acts.pop(block, [])]
    return dataclasses.replace(prog, threads=[dataclasses.replace(prog.threads[0], ops=out)])


@pytest.mark.slow
@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(2, 3), st.sampled_from([16, 32, 64, 128, 256]), st.sampled_from([16, 32, 64]), st.sampled_from([2, 4, 8]))
def test_tp_memory_per_rank_equals_the_emulated_rank(blocks, T, H, N):
    """One rank's predicted peaks (per device and step) equal the emulator's run of the program
    allocating one rank's tensors: the split GEMMs' outputs and weight gradients / N, the rest
    whole (Megatron §3; the rule in daydream/optimizations/tp_memory.py)."""
    import tempfile

    from daydream.simulate.memory_replay import replay_memory
    from daydream.testing.emulator import memory_peaks
    prog, roles = mlp_training_step(blocks, T, H)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "t.json")
        to_kineto(emulate(_with_outputs(prog, roles, T, H, 1)), p)
        t = load_trace(p)
        g = build_graph(t, map_events(t))
    opt, params = parse_spec(f"tp:degree={N},bandwidth=nvlink4,gpu=H100 SXM")
    g2, note = opt.apply(g, params)
    pred = {dm.device: (dm.peak_allocated_bytes, [s.allocated_bytes for s in dm.steps]) for dm in replay_memory(g2, simulate(g2))}
    want = memory_peaks(emulate(_with_outputs(prog, roles, T, H, N)), ("ProfilerStep#1",))
    assert pred == want, note
    assert f"{5 * blocks} split ops' output blocks shrunk to 1/{N}" in note, note


@pytest.mark.slow
def test_tp_memory_takes_the_split_weights_from_the_level_before_on_bert():
    """H100 BERT-small (4 blocks, hidden 512, fp16, inference): the split GEMMs' weights are 4 x
    (Q, K, V, output 512 x 512 + the MLP's 512 x 2048 and 2048 x 512) = 4 x 12 x 512^2 elements x
    2 B = 24 MiB, each counted once (it counted every launch before); one rank of 2 holds half: the
    level before the window drops by 12 MiB, and the 8 row GEMMs' outputs stay whole."""
    path = os.path.join(TRACES, "tracelens", "h100_gaunernst_bert-small-uncased__1016001.json.gz")
    if not os.path.exists(path):
        pytest.skip("shared traces not present")
    from daydream.simulate.memory_replay import replay_memory
    t = load_trace(path)
    g = build_graph(t, map_events(t))
    opt, params = parse_spec("tp:degree=2")
    g2, note = opt.apply(g, params)
    w = 4 * 12 * 512 * 512 * 2
    assert f"(1-1/2) x {w / 2**20:,.1f} MiB of weights" in note, note
    base = {d.device: d.before_bytes for d in replay_memory(g, simulate(g))}
    pred = {d.device: d.before_bytes for d in replay_memory(g2, simulate(g2))}
    assert pred[0] == base[0] - w // 2
    assert "8 whole outputs kept" in note
