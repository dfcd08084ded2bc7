"""Builder stage: the launch latency ``L`` and GPU gap ``G`` of a trace (``docs/model.md`` rule 5)."""

from __future__ import annotations

import numpy as np

from ...util import jit
from .._arrays import count, lower_median, trimmed_mean

#: fraction of the queued-pair gaps cut from each end before averaging them into G. A mean, not a
#: median, because gaps add up along a queue (with the median, about 1.0 us on the V100 ResNet-50
#: trace, the replayed kernels drifted 237 us early by the middle of a step). The trim is fitted by
#: ``scripts/fit_gap_trim.py`` on a fit set of real traces then not used to judge it (the H100 Owlv2
#: inference trace and nsys_ai/mfu_2gpu_before: GPU start error p50 0.026 % of the step untrimmed,
#: 0.034 % at the 5 % first chosen on the ResNet-50 trace, rising with every larger trim): no trim.
#: Judged on the other traces (docs/accuracy.md): ResNet-50's start error p50 / p99 18.8 / 81.8 ->
#: 18.5 / 78.2 us, mfu_2gpu_after's 46.4 / 90.7 -> 26.1 / 69.6 us. The emulator's programs carry
#: their own G (``Program.gpu_gap_ns``, drawn per program), independent of this fit.
GAP_TRIM = 0.0
#: below this many queued pairs a mean is dominated by one odd gap: use the median (the GTX 1060
#: export extrap/con_kernel.sqlite has 4 pairs and a trimmed mean of 23 ms)
GAP_MIN_PAIRS = 20

_MIN = np.iinfo(np.int64).min
_MAX = np.iinfo(np.int64).max


#: counted when L rests only on first-of-stream tasks in a trace holding work launched before it
L_UNPROVEN = ("launch latency L measured only on tasks first on their stream in a trace holding GPU work launched "
              "before it (samples): L may include a backlog the trace does not show")
#: the start of the count said when no launched GPU task finds its stream idle: ``L`` is then the
#: sourced default of :func:`daydream.events.cuda_api.default_launch_latency` (the rest of the key
#: gives the value and its source; counted once per launched GPU task)
L_DEFAULT = "launch latency L not measurable: no launched GPU task found its stream idle (the GPU is backlogged throughout the trace)"


def _default_said(counts, default, n_launched: int, bound: int) -> int:
    """``default[0]``, at most ``bound`` (the least delay from a launch to its task's start in the
    trace: no task starts before its launch + L, so L is at most that), counted in ``counts`` (a
    missing link) with the value and its source."""
    v, src = default
    if bound < v:
        v, src = max(int(bound), 0), f"least launch-to-start delay in the trace (below the {src})"
    if counts is not None:
        count(counts, f"{L_DEFAULT}; L = {v / 1e3:,.3f} us, the {src}", n_launched, missing=True)
    return int(v)


def launch_latency_and_gap(is_gpu, launch, lane_prev, rec_start, rec_end, x_src, x_dst,
                           staged: np.ndarray | None = None, counts: dict | None = None, method: str = "auto",
                           default: tuple[int, str] | None = None, unknown_producer: np.ndarray | None = None) -> tuple[int, int, int]:
    """(L, G, S) in ns, measured from the recorded times.

    ``L``: lower median of ``start - launch.start`` over GPU tasks whose GPU predecessors (stream
    predecessor, cross-stream producers ``x_src -> x_dst``) had all ended by the launch and whose
    stream predecessor was launched inside the window; the first task of a stream in the trace
    (no predecessor: one that ran across the start of a cut window would not be in the trace) is a
    sample only when no other task (staged copies aside) is. ``G``:
    mean (:data:`GAP_TRIM`-trimmed; lower median below :data:`GAP_MIN_PAIRS` pairs) of ``start - prev.end``
    over queued tasks (ready by ``prev.end`` and bound by it), never above ``L``; 0 when no sample.
    ``S`` (pageable staging latency): the DMA of a copy from pageable host memory above the
    staging size (``staged``, per node) starts only once its first chunk is staged into the
    driver's pinned buffer (CUDA Runtime API, "API synchronization behavior"): the lower median of
    ``start - launch.start - L`` over such copies whose stream was idle at launch (left out of the
    ``L`` samples; a queued one is ready at ``launch.start + L + S`` for ``G``); 0 when there is none,
    or when no other task gives an ``L`` sample (``L`` then comes from the staged copies).
    ``counts`` (optional) gets :data:`L_UNPROVEN` (a missing link) when ``L`` rests only on
    first-of-stream tasks and the trace holds GPU tasks launched before it (a sure sign of a
    window cut from a longer run; a cut that leaves no such task cannot be told from the trace).
    ``default`` (``(ns, source)``, :func:`daydream.events.cuda_api.default_launch_latency`): ``L``
    when no launched GPU task gives a sample (the GPU backlogged at every launch), counted under
    :data:`L_DEFAULT` with its value and source; ``G`` is measured with it (without: ``L = G = 0``).
    ``unknown_producer`` (node indices): GPU tasks held by a
    cross-stream wait whose producer the trace does not name (the consumers of unlinked waits,
    :func:`.inferred.unlinked_consumers`): neither an ``L`` nor a ``G`` sample, since what held
    them is not known (an emulated backlogged trace measured ``G`` 1.7 us where it is 0 from
    such gaps). ``S`` here is one
    value; the builder then fits it as a function of size (:mod:`.staging`, ``S0 + bytes / B``).

    ``method``: "auto" classifies the GPU tasks and collects the queued gaps in two compiled
    passes (:func:`_classify_kernel`, :func:`_gaps_kernel`) from :data:`LATENCY_MIN` GPU tasks
    when numba is there ("compiled" whatever the size, "python" the kernels uncompiled, "numpy"
    the array passes below); the same answers.
    """
    staged = np.zeros(len(is_gpu), bool) if staged is None else staged
    gi = np.flatnonzero(is_gpu)
    fn = jit.kernel_for(_classify_kernel, len(gi), LATENCY_MIN, method)
    if fn is not None:
        return _latency_compiled(fn, jit.kernel_for(_gaps_kernel, len(gi), LATENCY_MIN, method), gi, launch, lane_prev,
                                 rec_start, rec_end, x_src, x_dst, staged, counts, default, unknown_producer)  # every sample is a GPU task: the work runs on their arrays alone
    la, lpg, st, rs = launch[gi], lane_prev[gi], staged[gi], rec_start[gi]
    has = lpg >= 0
    pe = np.full(len(gi), _MIN, dtype=np.int64)  # latest recorded end of the stream predecessor
    pe[has] = rec_end[lpg[has]]
    xpe = np.full(len(gi), _MIN, dtype=np.int64)
    if len(x_src):
        xfull = np.full(len(is_gpu), _MIN, dtype=np.int64)
        np.maximum.at(xfull, x_dst, rec_end[x_src])
        xpe = xfull[gi]
    if unknown_producer is not None and len(unknown_producer):  # a producer ending "never": no sample
        xpe[np.isin(gi, unknown_producer)] = _MAX
    gl_start = np.where(la >= 0, rec_start[np.maximum(la, 0)], 0)
    idle = (la >= 0) & (np.maximum(pe, xpe) <= gl_start)
    # only where the stream predecessor was launched inside the window: before a window cut from a
    # longer run, the stream can hold a backlog the trace does not show
    i = np.flatnonzero(idle)
    idle[i] = (lpg[i] < 0) | (launch[np.maximum(lpg[i], 0)] >= 0)
    # the first task of a stream in the trace may queue behind a task that ran across the window's
    # start (not in the trace): sampled only when no task shows its stream idle by a predecessor
    proven = idle & has
    if (proven & ~st).any():
        idle = proven
    elif counts is not None and (idle & ~st).any() and (la < 0).any():  # a sure sign of a cut
        count(counts, L_UNPROVEN, int((idle & ~st).sum()), missing=True)
    plain = idle & ~st
    if not plain.any():  # S cannot be told apart from L without a plain sample: L from all, S = 0
        plain, st = idle, np.zeros_like(st)
    if default is not None and not plain.any() and (la >= 0).any():  # backlogged throughout: no sample
        L = _default_said(counts, default, int((la >= 0).sum()), int((rs - gl_start)[la >= 0].min()))
    else:
        L = max(lower_median(rs[plain] - gl_start[plain]), 0)
    S = max(lower_median(rs[idle & st] - gl_start[idle & st] - L), 0)
    queued = (la >= 0) & has
    queued &= (gl_start + L + np.where(st, S, 0) <= pe) & (xpe <= pe)
    gaps = rs[queued] - pe[queued]
    G = trimmed_mean(gaps, GAP_TRIM) if len(gaps) >= GAP_MIN_PAIRS else lower_median(gaps)
    return L, min(max(G, 0), L), S


#: :func:`launch_latency_and_gap` runs its compiled passes from this many GPU tasks ("auto")
LATENCY_MIN = 50_000

#: :func:`_classify_kernel`'s classes of a GPU task: not idle at its launch; idle and first on its
#: stream in the trace (plain, staged copy); idle behind a stream predecessor (plain, staged copy)
_BUSY, _FIRST, _FIRST_STAGED, _PROVEN, _PROVEN_STAGED = 0, 1, 2, 3, 4


def _latency_compiled(classify, gaps_fn, gi, launch, lane_prev, rec_start, rec_end, x_src, x_dst, staged, counts, default=None,
                      unknown_producer=None):
    """:func:`launch_latency_and_gap` by its two kernels: the same samples, selected by class."""
    unknown = unknown_producer is not None and len(unknown_producer) > 0
    if len(x_src) or unknown:
        xfull = np.full(len(launch), _MIN, dtype=np.int64)
        np.maximum.at(xfull, x_dst, rec_end[x_src])
        if unknown:
            xfull[unknown_producer] = _MAX
    else:
        xfull = np.zeros(0, np.int64)
    args = (np.ascontiguousarray(gi, np.int64), np.ascontiguousarray(launch, np.int64), np.ascontiguousarray(lane_prev, np.int64),
            np.ascontiguousarray(staged, np.bool_), np.ascontiguousarray(rec_start, np.int64), np.ascontiguousarray(rec_end, np.int64), xfull)
    cls = np.empty(len(gi), np.uint8)
    d = np.empty(len(gi), np.int64)  # start - launch start
    unlaunched = bool(jit.call(classify, *args, cls, d))
    if (cls == _PROVEN).any():  # a task shows its stream idle by a predecessor: the first-of-stream ones are no samples
        plain, st_idle = cls == _PROVEN, cls == _PROVEN_STAGED
    else:
        plain = cls == _FIRST
        st_idle = (cls == _FIRST_STAGED) | (cls == _PROVEN_STAGED)
        if counts is not None and plain.any() and unlaunched:  # a sure sign of a cut
            count(counts, L_UNPROVEN, int(plain.sum()), missing=True)
    if not plain.any():  # S cannot be told apart from L without a plain sample: L from all, S = 0
        plain, st_idle = plain | st_idle, np.zeros(len(gi), bool)
    launched = launch[gi] >= 0
    if default is not None and not plain.any() and launched.any():  # backlogged throughout: no sample
        L = _default_said(counts, default, int(launched.sum()), int(d[launched].min()))
    else:
        L = max(lower_median(d[plain]), 0)
    S = max(lower_median(d[st_idle] - L), 0)
    gaps = np.empty(len(gi), np.int64)
    gaps = gaps[: int(jit.call(gaps_fn, *args, np.int64(L), np.int64(S), gaps))]
    G = trimmed_mean(gaps, GAP_TRIM) if len(gaps) >= GAP_MIN_PAIRS else lower_median(gaps)
    return L, min(max(G, 0), L), S


def _classify_kernel(gi, launch, lane_prev, staged, rec_start, rec_end, xfull, cls, d):
    """Per GPU task ``gi[t]``: its class (``_BUSY`` .. ``_PROVEN_STAGED``) in ``cls[t]`` and
    ``start - launch start`` in ``d[t]`` (0 unlaunched); returns whether a GPU task has no launch."""
    lo = np.iinfo(np.int64).min
    unlaunched = False
    for t in range(len(gi)):
        v = gi[t]
        la = launch[v]
        lp = lane_prev[v]
        pe = rec_end[lp] if lp >= 0 else lo
        xpe = xfull[v] if len(xfull) else lo
        gl = rec_start[la] if la >= 0 else 0
        d[t] = rec_start[v] - gl
        cls[t] = 0
        if la < 0:
            unlaunched = True
            continue
        if max(pe, xpe) > gl:
            continue
        if lp < 0:
            cls[t] = 2 if staged[v] else 1
        elif launch[lp] >= 0:
            cls[t] = 4 if staged[v] else 3
    return unlaunched


def _gaps_kernel(gi, launch, lane_prev, staged, rec_start, rec_end, xfull, L, S, gaps):
    """The queued GPU tasks' gaps ``start - stream predecessor's end`` (ready by that end and bound
    by it, with ``L`` and ``S``), written to the front of ``gaps`` in task order; returns how many."""
    lo = np.iinfo(np.int64).min
    k = 0
    for t in range(len(gi)):
        v = gi[t]
        la = launch[v]
        lp = lane_prev[v]
        if la < 0 or lp < 0:
            continue
        pe = rec_end[lp]
        xpe = xfull[v] if len(xfull) else lo
        if rec_start[la] + L + (S if staged[v] else 0) <= pe and xpe <= pe:
            gaps[k] = rec_start[v] - pe
            k += 1
    return k


def _launch_latency_and_gap_reference(is_gpu, launch, lane_prev, rec_start, rec_end, x_src, x_dst,
                                      staged: np.ndarray | None = None, counts: dict | None = None,
                                      default: tuple[int, str] | None = None, unknown_producer=None) -> tuple[int, int, int]:
    """:func:`launch_latency_and_gap` as first written, on arrays over every node (the tests' reference)."""
    staged = np.zeros(len(is_gpu), bool) if staged is None else staged
    n = len(is_gpu)
    gpu_n = np.nonzero(is_gpu)[0]
    pe = np.full(n, _MIN, dtype=np.int64)  # latest recorded end of the stream predecessor
    lp = lane_prev[gpu_n]
    pe[gpu_n[lp >= 0]] = rec_end[lp[lp >= 0]]
    xpe = np.full(n, _MIN, dtype=np.int64)
    if len(x_src):
        np.maximum.at(xpe, x_dst, rec_end[x_src])
    if unknown_producer is not None and len(unknown_producer):
        xpe[unknown_producer] = _MAX
    gl_start = np.where(launch >= 0, rec_start[np.maximum(launch, 0)], 0)
    idle = is_gpu & (launch >= 0) & (np.maximum(pe, xpe) <= gl_start)
    # only where the stream predecessor was launched inside the window: before a window cut from a
    # longer run, the stream can hold a backlog the trace does not show
    i = np.flatnonzero(idle)
    idle[i] = (lane_prev[i] < 0) | (launch[np.maximum(lane_prev[i], 0)] >= 0)
    # the first task of a stream in the trace may queue behind a task that ran across the window's
    # start (not in the trace): sampled only when no task shows its stream idle by a predecessor
    proven = idle & (lane_prev >= 0)
    if (proven & ~staged).any():
        idle = proven
    elif counts is not None and (idle & ~staged).any() and (is_gpu & (launch < 0)).any():  # a sure sign of a cut
        count(counts, L_UNPROVEN, int((idle & ~staged).sum()), missing=True)
    plain = idle & ~staged
    if not plain.any():  # S cannot be told apart from L without a plain sample: L from all, S = 0
        plain, staged = idle, np.zeros_like(staged)
    if default is not None and not plain.any() and (is_gpu & (launch >= 0)).any():  # backlogged throughout
        lm = is_gpu & (launch >= 0)
        L = _default_said(counts, default, int(lm.sum()), int((rec_start[lm] - gl_start[lm]).min()))
    else:
        L = max(lower_median(rec_start[plain] - gl_start[plain]), 0)
    S = max(lower_median(rec_start[idle & staged] - gl_start[idle & staged] - L), 0)
    queued = is_gpu & (launch >= 0) & (lane_prev >= 0)
    queued &= (gl_start + L + np.where(staged, S, 0) <= pe) & (xpe <= pe)
    gaps = rec_start[queued] - pe[queued]
    G = trimmed_mean(gaps, GAP_TRIM) if len(gaps) >= GAP_MIN_PAIRS else lower_median(gaps)
    return L, min(max(G, 0), L), S
