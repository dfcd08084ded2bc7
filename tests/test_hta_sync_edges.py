"""The HTA cuda_event_sync traces: every GPU->CPU and cross-stream edge they contain, by name."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from daydream.formats import load_trace
from daydream.graph import NODE_CPU, build_graph

HTA = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "hta"
pytestmark = pytest.mark.skipif(not HTA.exists(), reason="../shared/traces absent")


def edges(name):
    g = build_graph(load_trace(str(HTA / name)))
    corr = g.table.correlation[g.row]
    dep = g.dependency_edges
    out = set()
    for s, d in zip(g.edge_src[dep].tolist(), g.edge_dst[dep].tolist()):
        out.add((g.name(s).split("(")[0][:24], int(corr[s]), "->", g.name(d)[:24], int(corr[d])))
    return g, out


def test_cuda_event_sync_edges():
    g, e = edges("cuda_event_sync.json.gz")
    assert e == {
        # cudaMemcpyAsync into pageable memory returns when its own copy is done
        ("Memcpy DtoH ", 1511, "->", "cudaMemcpyAsync", 1511),
        # cudaStreamSynchronize (cuda_sync 'Stream Sync', stream 7) waits for the copy before it
        ("Memcpy DtoH ", 1511, "->", "cudaStreamSynchronize", 1512),
        # cudaEventSynchronize binds to cudaEventRecord 1533, recorded after the spin kernel 1526
        ("at::cuda::", 1526, "->", "cudaEventSynchronize", 1536),
        # cudaDeviceSynchronize waits for the last task on every stream
        ("at::cuda::", 1526, "->", "cudaDeviceSynchronize", 1549),
    }
    # the cudaEventQuery that Kineto also tagged 'Event Sync' never blocks
    names = g.node_names()
    q = [v for v in range(g.n) if names[v] == "cudaEventQuery"]
    assert q and not g.blocking[q].any()


def test_cuda_event_sync_multi_stream_edges():
    g, e = edges("cuda_event_sync_multi_stream.json.gz")
    assert e == {
        # cudaStreamWaitEvent 1389: stream 24 waits for the record 1385 on stream 20; the producer
        # is the GEMM 27 on stream 20, the consumer the first task on stream 24 after the wait
        ("ampere_sgemm_128x64_nn", 27, "->", "Memset (Device)", 1411),
        # cudaDeviceSynchronize 1424 waits for the last task of each of the three streams
        ("ampere_sgemm_128x64_nn", 27, "->", "cudaDeviceSynchronize", 1424),
        ("ampere_sgemm_128x64_nn", 57, "->", "cudaDeviceSynchronize", 1424),
        ("ampere_sgemm_128x64_nn", 1413, "->", "cudaDeviceSynchronize", 1424),
    }
