"""Collectives matched across ranks, clocks aligned, and each rank's time in a collective split
into waiting for the last peer and the transfer itself.

**Matching.** A collective belongs to a process group: the ``Process Group Name`` of its kernel's
args (PyTorch >= 2.1) where the trace says, else one group of every rank. Within a group, the
k-th collective of each participating rank (in launch order: ``position_ns``, then node id) is
one collective of the job; NCCL requires every rank of a communicator to issue the same
collectives in the same order, so this is the matching NCCL itself performs. The job is refused
(:class:`~daydream.errors.UsageError`) when the ranks' counts or operations differ, or when the
ranks given are not ``0 .. world_size - 1`` of the ``world_size`` the traces state.

**Clocks.** On one shared clock every rank is inside a matched collective at the instant its last
participant arrives, so the intervals of a matched collective have a common point
(``max start <= min end``) -- the test needs no tolerance. When every matched collective passes,
the clock is shared and no offset is applied. Otherwise each rank's offset to the lowest rank is
estimated as the median, over the collectives both take part in, of the difference of their ends
(a collective's transfer ends together on all ranks), and reported as inferred.

**Split.** With aligned recorded times, ``T = max start`` (the last arrival); each rank waits
``T - start`` for its peers and transfers ``end - T`` (clamped at 0, counted when negative).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from ..util.arrays import sorted_unique
from ..graph.collectives import Op
from ..util.display import terminal_text
from ..errors import UsageError
from .load import RankTrace, check_world_sizes

#: operations that may name one collective on different ranks (an all-to-all runs as SendRecv
#: kernels; the args name it where the trace has them)
_COMPATIBLE = {frozenset((int(Op.ALL_TO_ALL), int(Op.SEND_RECV)))}


@dataclass
class Matching:
    """The job's collectives, one column each, and the ranks, one row each.

    ranks: int64 (R,) rank numbers; node: int64 (R, K) node id of the collective in each rank's
    graph (-1: the rank is not in its group); op: uint8 (K,) :class:`~daydream.graph.collectives.Op`;
    group: object (K,) process group ("" unknown); size_bytes: int64 (K,) the largest size a
    participant recorded (-1 unknown); offset_ns: int64 (R,) each rank's clock minus the lowest
    rank's (0 on a shared clock); clock: "shared" or "estimated"; start_ns / end_ns: int64 (R, K)
    recorded on the lowest rank's clock (0 where not a participant); arrive_ns: int64 (K,) the
    last arrival; last: int64 (K,) row of the last-arriving rank; wait_ns / transfer_ns: int64
    (R, K); counts: what was inferred or clamped.
    """

    ranks: np.ndarray
    node: np.ndarray
    op: np.ndarray
    group: np.ndarray
    size_bytes: np.ndarray
    offset_ns: np.ndarray
    clock: str
    start_ns: np.ndarray
    end_ns: np.ndarray
    arrive_ns: np.ndarray
    last: np.ndarray
    wait_ns: np.ndarray
    transfer_ns: np.ndarray
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def member(self) -> np.ndarray:
        """bool (R, K): the rank takes part in the collective."""
        return self.node >= 0

    def __len__(self) -> int:
        return self.node.shape[1]


def check_world(ranks: list[RankTrace]) -> int:
    """The job's world size: the ranks' stated ``world_size`` (equal on all that state one),
    else the number of traces.

    Raises:
        UsageError: the stated sizes differ, or the ranks given are not 0 .. world_size - 1.
    """
    check_world_sizes(ranks)
    stated = sorted({r.world_size for r in ranks if r.world_size > 0})
    if not stated and len(ranks) > 1 and not any(len(r.coll) for r in ranks):
        # nothing ties the files together: no stated job size and no collective to match
        raise UsageError(f"none of the {len(ranks)} traces states a world size and none has a collective: "
                         "not one job (analyse each trace on its own)")
    world = stated[0] if stated else len(ranks)
    got = [r.rank for r in ranks]
    if got != list(range(world)):
        missing = sorted(set(range(world)) - set(got))
        extra = sorted(set(got) - set(range(world)))
        what = (f"missing {_first(missing)}" if missing else f"{_first(extra)} outside 0..{world - 1}")
        raise UsageError(f"the job has world size {world} but {len(ranks)} trace(s) were given ({what}); "
                         "one trace per rank is needed")
    return world


def _named(r: RankTrace) -> str:
    """'rank R (file name)', and ', a truncated file' when its adapter salvaged a cut file: the
    reason a rank lacks collectives the others have."""
    cut = ", a truncated file" if any("truncated" in w for w in r.warnings) else ""
    return f"rank {r.rank} ({terminal_text(os.path.basename(r.path))}{cut})"


def _sequences(ranks: list[RankTrace]) -> dict[str, list[np.ndarray]]:
    """Per group: per rank, the indices (into its Collectives) of its collectives in launch order."""
    out: dict[str, list[np.ndarray]] = {}
    for i, r in enumerate(ranks):
        pos = r.graph.position_ns[r.coll.node]
        o = np.lexsort((r.coll.node, pos))
        for gname in sorted_unique(r.group).tolist() if len(r.group) else []:
            out.setdefault(gname, [np.zeros(0, np.int64)] * len(ranks))
            out[gname][i] = o[r.group[o] == gname]
    return out


def match(ranks: list[RankTrace]) -> Matching:
    """Match the ranks' collectives, align clocks and split each into wait and transfer.

    Raises:
        UsageError: the traces are not one job (see the module docstring).
    """
    R = len(ranks)
    cols_node, cols_op, cols_group, cols_size = [], [], [], []
    for gname, seqs in sorted(_sequences(ranks).items()):
        part = [i for i in range(R) if len(seqs[i])]
        lens = {i: len(seqs[i]) for i in part}
        if len(set(lens.values())) > 1:
            counts = list(lens.values())
            usual = max(set(counts), key=counts.count)
            detail = ", ".join([f"{_named(ranks[i])}: {n}" for i, n in lens.items() if n != usual][:8]) + f"; the others: {usual}"
            raise UsageError(f"the ranks issued different numbers of collectives{' in group ' + gname if gname else ''} "
                             f"({detail}): not one job, or traces of different steps")
        if not gname and len(part) != R:
            none = ", ".join([_named(ranks[i]) for i in range(R) if i not in part][:8])
            raise UsageError(f"{none} issued no collective while the others issued {len(seqs[part[0]])}: not one job")
        K = len(seqs[part[0]])
        node = np.full((R, K), -1, np.int64)
        ops = np.zeros((R, K), np.int64)
        size = np.full((R, K), -1, np.int64)
        for i in part:
            node[i] = ranks[i].coll.node[seqs[i]]
            ops[i] = ranks[i].coll.op[seqs[i]]
            size[i] = ranks[i].coll.size_bytes[seqs[i]]
        op = _common_op(ops[part], [ranks[i].rank for i in part], gname)
        cols_node.append(node)
        cols_op.append(op)
        cols_group.append(np.full(K, gname, dtype=object))
        cols_size.append(size.max(axis=0) if K else np.zeros(0, np.int64))
    node = np.concatenate(cols_node, axis=1) if cols_node else np.zeros((R, 0), np.int64)
    op = np.concatenate(cols_op) if cols_op else np.zeros(0, np.uint8)
    return _split(ranks, node, op.astype(np.uint8), np.concatenate(cols_group) if cols_group else np.zeros(0, object),
                  np.concatenate(cols_size) if cols_size else np.zeros(0, np.int64))


def _common_op(ops: np.ndarray, rank_ids: list[int], gname: str) -> np.ndarray:
    """The operation of each matched collective (P, K) -> (K,); raises UsageError on a mismatch."""
    if not ops.shape[1]:
        return np.zeros(0, np.uint8)
    known = np.where(ops == Op.UNKNOWN, -1, ops)
    best = known.max(axis=0)
    for k in range(ops.shape[1]) if (known != best).any() else ():  # only on a mismatch: a few
        vals = {int(x) for x in known[:, k] if x >= 0}
        if len(vals) > 1 and frozenset(vals) not in _COMPATIBLE:
            i = int(np.argmax(known[:, k] != best[k]))
            names = " / ".join(Op(v).name.lower().replace("_", "-") for v in sorted(vals))
            raise UsageError(f"collective #{k + 1}{' of group ' + gname if gname else ''} is {names} on different ranks "
                             f"(rank {rank_ids[i]} differs): the ranks did not issue the same collectives; not one job")
        if vals >= {int(Op.ALL_TO_ALL)}:
            best[k] = int(Op.ALL_TO_ALL)
    return np.maximum(best, 0).astype(np.uint8)


def _recorded(ranks: list[RankTrace], node: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    R, K = node.shape
    s = np.zeros((R, K), np.int64)
    e = np.zeros((R, K), np.int64)
    for i, r in enumerate(ranks):
        m = node[i] >= 0
        s[i, m] = r.graph.rec_start_ns[node[i, m]]
        e[i, m] = r.graph.rec_end_ns[node[i, m]]
    return s, e


def align(start: np.ndarray, end: np.ndarray, member: np.ndarray) -> tuple[np.ndarray, str, int]:
    """(offset per rank (R,), "shared" or "estimated", collectives without a common instant).

    Shared when every matched collective's intervals have a common instant on the clocks as
    recorded; otherwise offset_r = median over collectives shared with row 0 of (end_r - end_0).
    """
    R, K = start.shape
    big = np.iinfo(np.int64).max
    if K == 0:
        return np.zeros(R, np.int64), "shared", 0
    latest = np.where(member, start, -big).max(axis=0)
    earliest_end = np.where(member, end, big).min(axis=0)
    bad = int(np.count_nonzero(latest > earliest_end))
    if bad == 0:
        return np.zeros(R, np.int64), "shared", 0
    off = np.zeros(R, np.int64)
    for i in range(1, R):  # ranks: one median each
        both = member[i] & member[0]
        if both.any():
            off[i] = int(np.median(end[i, both] - end[0, both]))
    return off, "estimated", bad


def _split(ranks, node, op, group, size) -> Matching:
    R, K = node.shape
    member = node >= 0
    s, e = _recorded(ranks, node)
    off, clock, bad = align(s, e, member)
    s = np.where(member, s - off[:, None], 0)
    e = np.where(member, e - off[:, None], 0)
    counts: dict[str, int] = {}
    if clock == "estimated":
        counts["rank clock offset estimated from collective ends (inferred)"] = int(np.count_nonzero(off))
        counts["matched collectives without a common instant on the recorded clocks"] = bad
    neg = np.iinfo(np.int64).min
    arrive = np.where(member, s, neg).max(axis=0) if K else np.zeros(0, np.int64)
    last = np.where(member, s, neg).argmax(axis=0) if K else np.zeros(0, np.int64)
    wait = np.where(member, arrive[None, :] - s, 0)
    raw = e - arrive[None, :]
    transfer = np.where(member, np.maximum(raw, 0), 0)
    if (member & (raw < 0)).any():
        counts["collective ending before its last participant arrived (transfer clamped to 0)"] = int(np.count_nonzero(member & (raw < 0)))
    return Matching(np.array([r.rank for r in ranks], np.int64), node, op, group, size, off, clock, s, e,
                    arrive, last, wait, transfer, counts)


def _first(ranks: list[int], n: int = 8) -> str:
    """``rank(s) 2, 3, 4`` for a short list; the first ``n`` and how many in all for a long one."""
    head = ", ".join(map(str, ranks[:n]))
    return f"rank(s) {head}" if len(ranks) <= n else f"{len(ranks):,} ranks: {head}, ..."
