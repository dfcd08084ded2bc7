"""Vectorized helpers over the columns fetched from an nsys export.

Multi-column key matching (exact, and latest-earlier-record lookups), the OS pid/tid packed in
``globalTid``/``globalPid``, CUPTI's invalid 32-bit ids, and times beyond the supported range.
"""

from __future__ import annotations

import numpy as np

from .. import TIME_LIMIT_NS

_U32_NONE = 0xFFFFFFFF  # CUPTI's "invalid" stream/device/event id


def _match_ids(rec_keys: list[np.ndarray], qry_keys: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Integer ids of multi-column keys, equal exactly when the keys are equal (records, queries)."""
    n = len(rec_keys[0])
    cols = [np.concatenate([r, q]).astype(np.int64, copy=False) for r, q in zip(rec_keys, qry_keys)]
    if len(cols[0]) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # pack the columns into one int64 when their ranges fit (the usual case: pid 24 bits, ids 32)
    lows = [int(c.min()) for c in cols]
    bits = [max(int(c.max()) - lo, 0).bit_length() for c, lo in zip(cols, lows)]
    if sum(bits) <= 62:
        key = np.zeros(len(cols[0]), np.int64)
        for c, lo, nb in zip(cols, lows, bits):
            key = (key << np.int64(nb)) | (c - lo)
    else:
        _, key = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
        key = np.asarray(key).reshape(-1).astype(np.int64)
    return key[:n], key[n:]


def _lookup_exact(rec_keys: list[np.ndarray], qry_keys: list[np.ndarray]) -> np.ndarray:
    """For each query row, the index of the first record row with equal keys, else -1."""
    nq = len(qry_keys[0])
    if len(rec_keys[0]) == 0 or nq == 0:
        return np.full(nq, -1, np.int64)
    rk, qk = _match_ids(rec_keys, qry_keys)
    order = np.argsort(rk, kind="stable")
    srt = rk[order]
    pos = np.minimum(np.searchsorted(srt, qk), len(srt) - 1)
    return np.where(srt[pos] == qk, order[pos], -1)


def _lookup_latest_before(rec_keys: list[np.ndarray], rec_order: np.ndarray,
                          qry_keys: list[np.ndarray], qry_order: np.ndarray) -> np.ndarray:
    """For each query, the record with equal keys and the largest ``rec_order < qry_order``, else -1."""
    nq, nr = len(qry_keys[0]), len(rec_keys[0])
    if nr == 0 or nq == 0:
        return np.full(nq, -1, np.int64)
    rk, qk = _match_ids(rec_keys, qry_keys)
    _, kinv = np.unique(np.concatenate([rk, qk]), return_inverse=True)
    rk, qk = kinv[:nr].astype(np.int64), kinv[nr:].astype(np.int64)
    _, oinv = np.unique(np.concatenate([rec_order, qry_order]), return_inverse=True)
    oinv = np.asarray(oinv).reshape(-1).astype(np.int64)
    width = np.int64(oinv.max() + 2)
    comp = rk * width + oinv[:nr]
    order = np.argsort(comp, kind="stable")
    srt = comp[order]
    j = np.searchsorted(srt, qk * width + oinv[nr:], side="left") - 1
    jj = np.clip(j, 0, None)
    ok = (j >= 0) & (srt[jj] // width == qk)
    return np.where(ok, order[jj], -1)


def _pid_of(g: np.ndarray, null: np.ndarray) -> np.ndarray:
    """OS pid from a serialized ``globalTid``/``globalPid`` (bits 24-47); -1 where NULL."""
    return np.where(null, -1, (g >> 24) & 0xFFFFFF)


def _tid_of(g: np.ndarray, null: np.ndarray) -> np.ndarray:
    """OS tid from a serialized ``globalTid`` (bits 0-23); -1 where NULL."""
    return np.where(null, -1, g & 0xFFFFFF)


def _u32_id(a: np.ndarray) -> np.ndarray:
    """Device/stream/event ids with CUPTI's invalid value (0xFFFFFFFF) and negatives as -1."""
    return np.where((a < 0) | (a == _U32_NONE), -1, a)


_FAR = "start or end more than 2^62 ns (about 146 years) from the clock's zero"


def _out_of_range(t: np.ndarray) -> np.ndarray:
    """Times outside +-TIME_LIMIT_NS (see :mod:`daydream.formats`)."""
    return (t <= -TIME_LIMIT_NS) | (t >= TIME_LIMIT_NS)
