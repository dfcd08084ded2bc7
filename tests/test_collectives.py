"""Collective detection (daydream/graph/collectives.py): kernel names, nccl-tests' bus-bandwidth
factors, and the collectives found on the real traces that have them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import daydream
from daydream.graph.collectives import (
    Algo,
    Op,
    SizeSource,
    bus_factor,
    find_collectives,
    op_of_name,
    parse_kernel_name,
)
from daydream.graph import build_graph
from daydream.mapping import map_events

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
needs = pytest.mark.skipif(not (TRACES / "hta" / "nccl_data.json.gz").exists(), reason="../shared/traces not present")


def test_kernel_names():
    assert parse_kernel_name("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)") == (Op.ALL_REDUCE, Algo.RING, "LL")
    assert parse_kernel_name("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)") == (Op.ALL_GATHER, Algo.RING, "LL")
    assert parse_kernel_name("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)") == (Op.SEND_RECV, Algo.RING, "SIMPLE")
    assert parse_kernel_name("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)") == (Op.SEND_RECV, Algo.UNKNOWN, "")
    assert parse_kernel_name("ncclKernel_ReduceScatter_TREE_LL128_Sum_half") == (Op.REDUCE_SCATTER, Algo.TREE, "LL128")
    assert parse_kernel_name("ncclKernel_Broadcast_RING_LL_Sum_int8_t") == (Op.BROADCAST, Algo.RING, "LL")
    assert parse_kernel_name("volta_sgemm_128x64_nn")[0] == Op.UNKNOWN


def test_collective_names():
    assert op_of_name("nccl:all_to_all") == Op.ALL_TO_ALL
    assert op_of_name("_allgather_base") == Op.ALL_GATHER
    assert op_of_name("allreduce") == Op.ALL_REDUCE
    assert op_of_name("reduce_scatter_tensor") == Op.REDUCE_SCATTER
    assert op_of_name("nccl:broadcast") == Op.BROADCAST
    assert op_of_name("wait") == Op.UNKNOWN


def test_bus_factors_are_nccl_tests():
    # nccl-tests doc/PERFORMANCE.md
    assert bus_factor(Op.ALL_REDUCE, 8) == pytest.approx(2 * 7 / 8)
    assert bus_factor(Op.ALL_GATHER, 8) == pytest.approx(7 / 8)
    assert bus_factor(Op.REDUCE_SCATTER, 4) == pytest.approx(3 / 4)
    assert bus_factor(Op.ALL_TO_ALL, 2) == pytest.approx(1 / 2)
    assert bus_factor(Op.BROADCAST, 8) == 1.0
    assert bus_factor(Op.SEND_RECV, 2) == 1.0
    assert np.isnan(bus_factor(Op.UNKNOWN, 8))
    assert np.isnan(bus_factor(Op.ALL_REDUCE, 0))


def _colls(rel):
    t = daydream.load_trace(str(TRACES / rel))
    return find_collectives(build_graph(t, map_events(t)))


@needs
def test_nccl_data_sizes_from_kernel_args():
    c = _colls("hta/nccl_data.json.gz")
    assert len(c) == 21
    assert (c.op == Op.ALL_REDUCE).sum() == 15 and (c.op == Op.BROADCAST).sum() == 6
    assert (c.size_source == SizeSource.KERNEL_ARGS).all() and (c.group_size == 2).all()
    i = int(np.argmax(c.size_bytes))
    assert 6637568 * 4 in c.size_bytes.tolist()  # a kernel's In msg nelems x float
    assert c.size_bytes.min() > 0
    # busbw = S / t * 2(n-1)/n, n = 2 -> busbw == algbw for all-reduce
    ar = c.op == Op.ALL_REDUCE
    assert np.allclose(c.busbw[ar], c.algbw[ar])
    assert c.algbw[i] == pytest.approx(c.size_bytes[i] / c.dur_ns[i] * 1e9)


@needs
def test_dlrm_sizes_from_annotation_shapes():
    c = _colls("param_dlrm/dlrm_8rank_worker0.pt.trace.json.gz")
    assert len(c) == 8
    assert (c.op == Op.ALL_TO_ALL).sum() == 5 and (c.op == Op.ALL_REDUCE).sum() == 3
    assert (c.size_source == SizeSource.ANNOTATION_SHAPES).all()
    assert (c.group_size == 8).all()  # from distributedInfo
    assert c.counts["collective group size from distributedInfo world_size"] == 8
    # nccl:all_reduce Input Dims [[394241]] float -> 1,576,964 bytes
    assert 394241 * 4 in c.size_bytes.tolist()


@pytest.mark.slow
@needs
def test_df_index_resolver_sizes_unknown_and_counted():
    c = _colls("hta/df_index_resolver.json.gz")
    assert len(c) == 2020 and (c.op == Op.ALL_REDUCE).all()
    assert c.counts["collective without a message size in the trace"] == 2020
    assert np.isnan(c.busbw).all()


@needs
def test_b200_all_gather():
    c = _colls("tracelens/b200_eager_trace.json.gz")
    assert len(c) == 1 and c.op[0] == Op.ALL_GATHER and c.group_size[0] == 8
    assert c.size_bytes[0] == 201088 * 2  # Out msg nelems x bf16
    assert c.busbw[0] == pytest.approx(c.size_bytes[0] / c.dur_ns[0] * 1e9 * 7 / 8)
