"""The vectorized batched insertion (daydream/transform/insertion.py: insert_tasks, insert_launches)
gives what its per-task loops gave (tests/insertion_reference.py), on random batches: chains of
tasks anchored on inserted tasks, tasks at lanes' ends (an empty new stream among them) between
tasks anchored on the lanes' tails, launches, waits and consumers, and the errors (same message)."""

from __future__ import annotations

import numpy as np
import pytest

import insertion_reference as ref
from daydream import load_trace
from daydream.errors import DaydreamError
from daydream.graph import NODE_CPU, build_graph
from daydream.simulate import check_topological, simulate
from daydream.transform import add_stream
from daydream.transform.insertion import insert_launches, insert_tasks

FIELDS = ("node_kind", "lane", "name_id", "pid", "tid", "device", "stream", "copy_kind", "dur_ns", "gap_ns", "rec_start_ns",
          "rec_end_ns", "position_ns", "edge_src", "edge_dst", "edge_kind", "edge_origin", "order", "launch")


@pytest.fixture(scope="module")
def graph():
    g = build_graph(load_trace("fixtures/train_step.json.gz"))
    gpu = np.flatnonzero(g.node_kind != NODE_CPU)
    g, _ = add_stream(g, pid=int(g.pid[gpu[0]]), device=int(g.device[gpu[0]]))
    return g


def _outcome(fn, *args, **kw):
    try:
        g, ids = fn(*args, **kw)
    except DaydreamError as e:
        return ("error", str(e))
    return ("ok", {f: getattr(g, f).tolist() for f in FIELDS}, g.names, ids.tolist(), bool(g.order_valid))


def _random_batch(g, rng) -> dict:
    n = g.n
    cpu, gpu = np.flatnonzero(g.node_kind == NODE_CPU), np.flatnonzero(g.node_kind != NODE_CPU)
    lanes_cpu, lanes_gpu = np.flatnonzero(~g.lane_is_gpu), np.flatnonzero(g.lane_is_gpu)
    tails = np.flatnonzero(g.lane_next < 0)
    k_n = int(rng.integers(1, 14))
    after, lane, like, launch, kind, used = [], [], [], [], [], set()
    new_cpu, new_gpu = [], []
    for k in range(k_n):
        gpu_task = bool(rng.integers(2))
        mode = int(rng.integers(4))  # 0: an old node, 1: an old lane's tail, 2: an inserted task, 3: a lane's end
        pool = {0: gpu if gpu_task else cpu, 1: [t for t in tails if g.node_kind[t] != NODE_CPU] if gpu_task else
                [t for t in tails if g.node_kind[t] == NODE_CPU], 2: new_gpu if gpu_task else new_cpu}.get(mode, [])
        pool = [int(x) for x in pool if int(x) not in used]
        if mode == 3 or not pool:
            a = -1
            ln = int(rng.choice(lanes_gpu if gpu_task else lanes_cpu))
            lk = int(rng.choice(gpu if gpu_task else cpu))
        else:
            a = int(rng.choice(pool))
            used.add(a)
            ln = int(g.lane[a]) if a < n and rng.integers(2) else -1
            lk = -1
        after.append(a)
        lane.append(ln)
        like.append(lk)
        callers = list(cpu[:20]) + new_cpu
        launch.append(int(rng.choice(callers)) if gpu_task and rng.integers(3) else -1)
        kind.append("kernel" if gpu_task else "cpu")
        if a >= 0:  # the reference fails (IndexError) on a task anchored on one at a lane's end: not offered
            (new_gpu if gpu_task else new_cpu).append(n + k)
    done = n + k_n
    preds = [(int(rng.integers(k_n)), int(rng.choice(gpu))) for _ in range(int(rng.integers(0, 4)))]
    succs = [(int(rng.integers(k_n)), int(rng.integers(done))) for _ in range(int(rng.integers(0, 3)))]
    if rng.integers(8) == 0:  # now and then a wrong lane, to compare the errors
        lane[int(rng.integers(k_n))] = int(rng.choice(lanes_cpu))
    return dict(after=after, lane=lane, like=like, launch=launch, kind=kind, dur_ns=rng.integers(1, 1000, k_n),
                names=[f"t{k}" for k in range(k_n)], gap_ns=rng.integers(0, 50, k_n), preds=preds, succs=succs)


@pytest.mark.slow
@pytest.mark.parametrize("passes", [16, 0])  # 0: the task-by-task ranks at once
def test_insert_tasks_is_its_loop_reference(graph, passes, monkeypatch):
    import daydream.transform.insertion as ins

    monkeypatch.setattr(ins, "RANK_PASSES", passes)
    rng = np.random.default_rng(38)
    seen = {"ok": 0, "error": 0}
    for _ in range(200):
        spec = _random_batch(graph, rng)
        want = _outcome(ref.insert_tasks, graph, **spec)
        assert _outcome(insert_tasks, graph, **spec) == want, spec
        seen[want[0]] += 1
    assert seen["ok"] > 40 and seen["error"] > 5, seen  # both paths were compared


def test_insert_launches_is_its_loop_reference(graph):
    """Calls at one anchor follow one another (each after the call inserted there before it)."""
    cpu, gpu = np.flatnonzero(graph.node_kind == NODE_CPU), np.flatnonzero(graph.node_kind != NODE_CPU)
    lane = int(np.flatnonzero(graph.lane_is_gpu)[-1])  # the new, empty stream
    rng = np.random.default_rng(7)
    for _ in range(10):
        k_n = int(rng.integers(1, 9))
        anchor = rng.choice(cpu[-6:], k_n)  # repeats
        kw = dict(lane=lane, anchor=anchor, like=rng.choice(gpu[:5], k_n), dur_ns=rng.integers(1, 99, k_n),
                  names=[f"k{i}" for i in range(k_n)], call_name="c")
        assert _outcome(insert_launches, graph, **kw) == _outcome(ref.insert_launches, graph, **kw)


def test_a_task_anchored_on_one_inserted_at_a_lanes_end_is_the_one_by_one_insertion(graph):
    """The loops raised IndexError here (a bug, found by the comparison above): a kernel at the new
    stream's end, a kernel anchored on it, another at the stream's end after both: the lane links,
    edges and replay of the one-by-one insertion (the identity fields differ by design: the batch's
    anchored task takes its anchor's model task's, see insert_tasks' ``like``)."""
    from daydream.transform import insert, insert_on_stream

    gpu = np.flatnonzero(graph.node_kind != NODE_CPU)
    lane, like, n = int(np.flatnonzero(graph.lane_is_gpu)[-1]), int(gpu[0]), graph.n
    one, _ = insert_on_stream(graph, lane=lane, like=like, dur_ns=5, name="a")
    one, _ = insert(one, after=n, dur_ns=6, name="b")
    one, _ = insert_on_stream(one, lane=lane, like=like, dur_ns=7, name="c")
    batch, ids = insert_tasks(graph, after=[-1, n, -1], lane=[lane, lane, lane], like=[like, -1, like], dur_ns=[5, 6, 7],
                              names=["a", "b", "c"])
    assert ids.tolist() == [n, n + 1, n + 2]
    for f in ("node_kind", "lane", "dur_ns", "edge_src", "edge_dst", "edge_kind", "edge_origin", "launch", "lane_next"):
        assert np.array_equal(getattr(one, f), getattr(batch, f)), f
    assert one.names == batch.names
    check_topological(batch, batch.order)  # a valid visiting order (not necessarily the one-by-one's)
    assert np.array_equal(simulate(one).end_ns, simulate(batch).end_ns)
    with pytest.raises(IndexError):
        ref.insert_tasks(graph, after=[-1, n], lane=[lane, lane], like=[like, -1], dur_ns=[5, 6], names=["a", "b"])
