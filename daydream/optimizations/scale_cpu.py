"""``scale-cpu``: what if the host code inside some CPU ranges ran ``factor`` times as long?

The general "what if this host code were faster" question: the CPU time inside every CPU range
(framework op, ``record_function`` / NVTX annotation, ``DataLoader`` iterator, optimizer step)
whose name matches ``range`` (a regular expression, case-insensitive), on every thread, takes
``factor`` times as long. Host time is the API calls and the CPU gaps between them
(``docs/model.md``): the part of a call or of a gap that lies inside a matching range (recorded
times) is scaled, the rest is left alone; GPU work is left alone. A call that blocks keeps its
wait (only its own cost is host time). A trace without API calls (CPU only) has no host time in
this model: the what-if does not apply, and says so.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import NotApplicable
from ..graph.host_clock import HostClock
from ..graph.range_timeline import thread_key
from ..transform import MAX_PATTERN_CHARS, set_duration, set_gap
from ..util.patterns import compile_user_pattern, search_mask
from . import Optimization, Param, register


def _match(graph, pattern: str) -> np.ndarray:
    """Mask over ``graph.cpu_ranges`` of the ranges whose name matches (case-insensitive)."""
    cr = graph.cpu_ranges
    if cr is None or not len(cr.pid):
        return np.zeros(0, bool)
    rx = compile_user_pattern(pattern, ignore_case=True)
    uniq, inv = np.unique(cr.name_id, return_inverse=True)
    hit = search_mask(rx, [graph.names[i] for i in uniq.tolist()])
    return hit[inv.reshape(-1)]


def _apply(graph, p):
    pat, f = p["range"], p["factor"]
    match = _match(graph, pat)
    if not match.any():
        raise NotApplicable(f"no CPU range name matches {pat!r} (case-insensitive)")
    cpu = np.nonzero(graph.is_cpu)[0]
    if not len(cpu):  # a CPU-only trace: its ranges hold time, but the model carries host time on API calls
        raise NotApplicable(f"CPU ranges match {pat!r}, but the trace has no CUDA API calls: host time is carried by the "
                            "calls and the CPU gaps before them (docs/model.md), so a trace without calls has none to scale")
    key = thread_key(graph.pid[cpu], graph.tid[cpu])
    rs = graph.rec_start_ns[cpu]
    gap, dur = graph.gap_ns[cpu], graph.dur_ns[cpu]
    # host time as the what-ifs before this one left it (HostClock): a gap that lasts ``gap`` now
    # began at the recorded instant ``a``; the part of it inside the ranges is measured there
    clk = HostClock(graph, within=match)
    cls = clk.classes()
    lens = clk.lengths(key, clk.start_before(key, rs, gap), rs, cls)
    g_in = np.minimum(clk.scaled(lens, cls, inside=True), gap)
    span = np.maximum(graph.rec_end_ns[cpu] - rs, 0)
    lens = clk.lengths(key, rs, rs + span, cls)
    w = clk.weight(cls)
    c_in = (lens * np.where(((cls >> clk.within_bit) & 1).astype(bool), w, 0.0)).sum(axis=1)
    c_all = (lens * w).sum(axis=1)
    share = np.divide(c_in, c_all, out=np.zeros(len(cpu)), where=(span > 0) & (c_all > 0))
    d_in = np.where(share >= 1.0, dur, np.rint(dur * share).astype(np.int64))
    new_gap = gap - g_in + np.rint(g_in * f).astype(np.int64)
    new_dur = dur - d_in + np.rint(d_in * f).astype(np.int64)
    if not (g_in.any() or d_in.any()):
        raise NotApplicable(f"CPU ranges match {pat!r} but no API call or CPU gap before one lies inside them "
                            "(host time is carried by the calls and the gaps before them)")
    m = np.zeros(graph.n, bool)
    m[cpu] = True
    g = set_duration(set_gap(graph, m, new_gap), m, new_dur)
    g = dataclasses.replace(g, host_scales=graph.host_scales + ((match, float(f)),))  # range boundaries in the gaps move with them
    before = int(g_in.sum() + d_in.sum())
    rest = int(gap.sum() + dur.sum()) - before
    note = (f"{match.sum():,} CPU ranges match {pat!r}: {before / 1e6:,.3f} ms of host time inside them x{f:g} "
            f"(gaps {g_in.sum() / 1e6:,.3f} ms, calls {d_in.sum() / 1e6:,.3f} ms); {rest / 1e6:,.3f} ms of host time and all GPU work left alone")
    return g, note


register(
    Optimization(
        name="scale-cpu",
        summary="host (CPU) time inside CPU ranges whose name matches a regular expression takes `factor` times as long",
        apply=_apply,
        what_if=True,
        params={
            "range": Param("DataLoader", f"regular expression (case-insensitive, at most {MAX_PATTERN_CHARS} characters) searched in CPU range names: ops, annotations, DataLoader, optimizer", str),
            "factor": Param(0.5, "host time multiplier, 0..1000 (user's what-if; no default source)", float, lambda v: 0 <= v <= 1000, "0 to 1000"),
        },
    )
)
