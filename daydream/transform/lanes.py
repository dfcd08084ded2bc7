"""Lanes: new CPU threads (with their tasks) and empty GPU streams added to a graph, all by
:func:`add_lanes` (:func:`add_thread`, :func:`add_threads` and :func:`add_stream` are its cases)."""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import DaydreamError
from ..graph import NODE_CPU, EdgeKind, Origin, TaskGraph, dedupe_edges
from .graph_copy import _take_nodes, _with_valid_order
from .dependencies import add_edges


def _add_one_thread(graph: TaskGraph, *, pid: int, tid: int, like: int, dur_ns, gap_ns, names: list[str]) -> tuple[TaskGraph, np.ndarray]:
    """:func:`add_thread` one thread at a time (the path :func:`add_lanes` takes when the batched
    one does not apply: it says what is wrong, or repairs the visiting order)."""
    if not 0 <= like < graph.n or graph.node_kind[like] != NODE_CPU:
        raise DaydreamError("add_thread: the model task must be a CPU task")
    key = np.array([0, pid, tid, 0], np.int64)
    if len(graph.lane_keys) and (graph.lane_keys == key).all(axis=1).any():
        raise DaydreamError(f"add_thread: thread {pid}/{tid} exists already")
    k = len(names)
    ln = len(graph.lanes)
    g = _take_nodes(graph, np.concatenate([np.arange(graph.n), np.full(k, like, np.int64)]))
    new = np.arange(graph.n, graph.n + k)
    g.row[new], g.lane[new], g.correlation[new], g.pid[new], g.tid[new] = -1, ln, -1, pid, tid
    g.name_id[new] = len(graph.names) + np.arange(k)
    g.dur_ns[new] = np.asarray(dur_ns, np.int64)
    g.gap_ns[new] = np.asarray(gap_ns, np.int64)
    g = dataclasses.replace(g, names=[*graph.names, *names], lanes=[*graph.lanes, f"cpu pid {pid} tid {tid}"],
                            lane_is_gpu=np.append(graph.lane_is_gpu, False), lane_keys=np.vstack([graph.lane_keys, key[None, :]]),
                            order=np.concatenate([graph.order, new]))
    g = g.with_edges(g.edge_src, g.edge_dst, g.edge_kind, g.edge_origin)
    if k > 1:
        g = add_edges(g, new[:-1], new[1:], EdgeKind.THREAD)
    return _with_valid_order(g), new


def _add_threads(graph: TaskGraph, threads: list[dict]) -> tuple[TaskGraph, list[np.ndarray]]:
    """The threads of :func:`add_lanes`, at one copy of the graph where it can (see :func:`add_threads`)."""
    keys = [(int(t["pid"]), int(t["tid"])) for t in threads]
    ok = (graph.order_valid and len(set(keys)) == len(keys)
          and all(0 <= t["like"] < graph.n and graph.node_kind[t["like"]] == NODE_CPU for t in threads)
          and not (len(graph.lane_keys) and any((graph.lane_keys == np.array([0, p, q, 0], np.int64)).all(axis=1).any() for p, q in keys)))
    if not ok or not threads:  # the one-by-one path says what is wrong (or repairs the order as it does)
        out = []
        for t in threads:
            graph, new = _add_one_thread(graph, **t)
            out.append(new)
        return graph, out
    n, ln = graph.n, len(graph.lanes)
    ks = [len(t["names"]) for t in threads]
    first = n + np.cumsum([0, *ks[:-1]])
    news = [np.arange(f, f + k) for f, k in zip(first.tolist(), ks)]
    g = _take_nodes(graph, np.concatenate([np.arange(n)] + [np.full(k, t["like"], np.int64) for t, k in zip(threads, ks)]))
    names = list(graph.names)
    for i, (t, new) in enumerate(zip(threads, news)):
        g.row[new], g.lane[new], g.correlation[new], g.pid[new], g.tid[new] = -1, ln + i, -1, t["pid"], t["tid"]
        g.name_id[new] = len(names) + np.arange(len(new))
        g.dur_ns[new] = np.asarray(t["dur_ns"], np.int64)
        g.gap_ns[new] = np.asarray(t["gap_ns"], np.int64)
        names += list(t["names"])
    key_rows = np.array([[0, p, q, 0] for p, q in keys], np.int64)
    chain = [x for x in news if len(x) > 1]
    src, dst, kind, origin = graph.edge_src, graph.edge_dst, graph.edge_kind, graph.edge_origin
    if chain:
        src, dst, kind, origin = dedupe_edges(np.concatenate([src, *[x[:-1] for x in chain]]), np.concatenate([dst, *[x[1:] for x in chain]]),
                                              np.concatenate([kind, np.full(sum(len(x) - 1 for x in chain), EdgeKind.THREAD, np.uint8)]),
                                              np.concatenate([origin, np.full(sum(len(x) - 1 for x in chain), Origin.INSERTED, np.uint8)]))
    g = dataclasses.replace(g, names=names, lanes=[*graph.lanes, *(f"cpu pid {p} tid {q}" for p, q in keys)],
                            lane_is_gpu=np.append(graph.lane_is_gpu, np.zeros(len(keys), bool)),
                            lane_keys=np.vstack([graph.lane_keys, key_rows]), order=np.concatenate([graph.order, *news]))
    # the order stays valid: the new tasks come after all others, each thread's in thread order
    return g.with_edges(src, dst, kind, origin).known_valid(), news


def _add_one_stream(graph: TaskGraph, *, pid: int, device: int, stream: int | None = None) -> tuple[TaskGraph, int]:
    """One stream of :func:`add_lanes` (see :func:`add_stream`)."""
    if stream is None:
        gpu = graph.node_kind != NODE_CPU
        stream = int(graph.stream[gpu].max()) + 1 if gpu.any() else 0
    key = np.array([[1, pid, device, stream]], dtype=np.int64)
    if len(graph.lane_keys) and (graph.lane_keys == key).all(axis=1).any():
        raise DaydreamError(f"add_stream: stream {stream} of device {device} already has a lane")
    return dataclasses.replace(
        graph, lanes=[*graph.lanes, f"gpu {device} stream {stream} (pid {pid})"],
        lane_is_gpu=np.append(graph.lane_is_gpu, True), lane_keys=np.vstack([graph.lane_keys.reshape(-1, 4), key])), len(graph.lanes)


def add_lanes(graph: TaskGraph, *, threads: list[dict] = (), streams: list[dict] = ()) -> tuple[TaskGraph, list[np.ndarray], list[int]]:
    """New graph with lanes added: CPU threads, each running its tasks, then empty GPU streams.
    Every lane is added by it; :func:`add_thread`, :func:`add_threads` and :func:`add_stream` are
    its cases.

    Args:
        threads: dicts of :func:`add_thread`'s keyword arguments (pid, tid, like, dur_ns, gap_ns,
            names); added as :func:`add_threads` adds them (the graph that adding them one after
            the other makes, at one copy of the graph).
        streams: dicts of :func:`add_stream`'s keyword arguments (pid, device, stream), added one
            after the other.

    Returns:
        (new graph, ids of each thread's new tasks in thread order, the new streams' lane ids).

    Raises:
        DaydreamError: as :func:`add_thread` and :func:`add_stream`.
    """
    out: list[np.ndarray] = []
    if len(threads):
        graph, out = _add_threads(graph, list(threads))
    lanes = []
    for s in streams:
        graph, ln = _add_one_stream(graph, **s)
        lanes.append(ln)
    return graph, out, lanes


def add_thread(graph: TaskGraph, *, pid: int, tid: int, like: int, dur_ns, gap_ns, names: list[str]) -> tuple[TaskGraph, np.ndarray]:
    """New graph with one more CPU thread (lane ``cpu pid/tid``) running ``len(names)`` tasks in
    thread order: task i lasts ``dur_ns[i]`` after a gap ``gap_ns[i]`` (ns). The tasks copy the
    identity and mapping of ``like`` (a CPU node) and have no table row; other dependencies are
    added with :func:`add_edges`.

    Returns:
        (new graph, ids of the new tasks in thread order).

    Raises:
        DaydreamError: ``like`` is not a CPU task, or the thread exists already.
    """
    g, news, _ = add_lanes(graph, threads=[dict(pid=pid, tid=tid, like=like, dur_ns=dur_ns, gap_ns=gap_ns, names=names)])
    return g, news[0]


def add_threads(graph: TaskGraph, threads: list[dict]) -> tuple[TaskGraph, list[np.ndarray]]:
    """New graph with several CPU threads added: the graph that :func:`add_thread` makes for
    ``threads[0]``, ``threads[1]``, ... one after the other (each a dict of its keyword
    arguments: pid, tid, like, dur_ns, gap_ns, names), with the same node ids, edges and visiting
    order, at one copy of the graph instead of one per thread. (One after the other, the first
    thread of more than one task dedupes the edge list; the others append their thread edges,
    which repeat nothing: they join new tasks only.)

    Returns:
        (new graph, ids of each thread's new tasks in thread order).

    Raises:
        DaydreamError: as :func:`add_thread` (a model task that is not a CPU task, a thread that
            exists already).
    """
    g, news, _ = add_lanes(graph, threads=threads)
    return g, news


def add_stream(graph: TaskGraph, *, pid: int, device: int, stream: int | None = None) -> tuple[TaskGraph, int]:
    """New graph with one more (empty) GPU stream lane on ``device`` of process ``pid``.

    Args:
        stream: the stream id; default: one more than the largest stream id of the graph.

    Returns:
        (new graph, id of the new lane).

    Raises:
        DaydreamError: the stream already has a lane.
    """
    g, _, lanes = add_lanes(graph, streams=[dict(pid=pid, device=device, stream=stream)])
    return g, lanes[0]
