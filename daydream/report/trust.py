"""How far to trust a report: the verdict on the baseline replay (its step or window error against
the project's accuracy targets; the GPU start error as a second line saying what it risks, and
deciding too for a trace without steps), the recorded wait the replay reproduces least and
what held it (:func:`replay_cause`), and the warnings about what the trace lacks or how it was
recorded (:func:`_warnings`).
"""

from __future__ import annotations

import numpy as np

from ..util.arrays import sorted_unique
from ..simulate.critical_path import communication_mask
from ..events.table import EventTable
from ..graph import NODE_CPU, EdgeKind, TaskGraph, profiler_steps
from ..graph.startup import startup_calls
from ..graph.kernels import classify_name
from ..simulate import Timeline
from .summary import answer_steps
from .report_model import START_ERROR_REASON, STARTUP_WORDS, TRUNCATED_REASON, UNLINKED_WORDS, Trust, WindowStats
from .windows import _process_ids

#: Replay error (|%|, per ProfilerStep or of the traced window) above which the baseline replay
#: is only "fair": the project's accuracy target of 1 % per step (docs/accuracy.md, where a trace
#: within it is "ok"). Above :data:`TRUST_UNRELIABLE_PCT` it is "unreliable": predictions made
#: from it are marked (and ``--strict`` refuses them). Both are the project's stated accuracy
#: targets, chosen by hand, not constants fitted to data.
TRUST_FAIR_PCT = 1.0
TRUST_UNRELIABLE_PCT = 5.0


def trust_verdict(max_step_error_pct: float, window_error_pct: float, steps: int = 1, start_error_pct: float = 0.0,
                  start_error_us: float = 0.0, judge_start: bool | None = None) -> tuple[str, str]:
    """(verdict, reason) of a baseline replay (docs/model.md, "How far the baseline replay is
    trusted"). The step error decides: the worse of the largest ProfilerStep error and the
    window error (|%|). A trace without steps (``steps`` 0) is judged on its GPU start error too
    (p99 ``start_error_us``, ``start_error_pct`` of the window): the worse of the two decides,
    since a window error alone says little of where GPU work runs. With steps the start error is
    no part of the verdict: it is the second line (:func:`start_error_line`). ``judge_start``
    (default: no steps) judges the start error with steps too (:func:`build_trust`: some step was
    measured at 0 ns, so the steps measure nothing there)."""
    what, err = ("max step error", max_step_error_pct) if steps and max_step_error_pct >= window_error_pct else ("window error", window_error_pct)
    if (not steps) if judge_start is None else judge_start:
        by_start = start_error_verdict(start_error_pct, start_error_us, steps)
        if by_start is not None and start_error_pct > err:
            return by_start
    if err > TRUST_UNRELIABLE_PCT:
        return "unreliable", f"{what} {err:.2f} % > {TRUST_UNRELIABLE_PCT:g} %: the baseline replay does not reproduce the trace"
    if err > TRUST_FAIR_PCT:
        return "fair", f"{what} {err:.2f} % > {TRUST_FAIR_PCT:g} % (the accuracy target)"
    return "good", f"{what} {err:.2f} % <= {TRUST_FAIR_PCT:g} %"


def start_error_verdict(start_error_pct: float, start_error_us: float, steps: int = 1) -> tuple[str, str] | None:
    """(verdict, reason) from the p99 GPU start error as % of the median step (the window without
    steps), or None when it is within TRUST_FAIR_PCT. A GPU task replayed e away from its recorded
    start has its slack misplaced by e: a prediction that changes the work around it can move by
    up to e, so e as a share of the step bounds a prediction error on the same scale as the step
    error, and is held to the same targets (docs/model.md, "How far the baseline replay is trusted")."""
    ref = "the median step" if steps else "the window"
    what = f"{START_ERROR_REASON} {start_error_us:,.0f} us is {start_error_pct:.2f} % of {ref}"
    if start_error_pct > TRUST_UNRELIABLE_PCT:
        return "unreliable", f"{what} > {TRUST_UNRELIABLE_PCT:g} %: the replay does not reproduce when GPU work runs"
    if start_error_pct > TRUST_FAIR_PCT:
        return "fair", f"{what} > {TRUST_FAIR_PCT:g} %: predictions that move GPU work can be off by as much"
    return None


#: what a GPU start error puts at risk: the predictions that move GPU work
START_RISK = ("predictions that move GPU work (kernel speed-ups, fusion, cuda-graphs, overlap and sharding what-ifs) can be "
              "off by up to that share of {ref}; host-only what-ifs are not")


def start_error_line(start_error_pct: float, start_error_us: float, steps: int = 1, unseen: str = "") -> tuple[str, str]:
    """(start verdict, second trust line): the GPU start error judged by the step error's
    thresholds ("good" within TRUST_FAIR_PCT), and in words what it risks (:data:`START_RISK`)
    when it is over the target, with ``unseen`` (:func:`unseen_hold`: what the trace cannot show
    held the GPU) when there is one; "" when the start error is within the target and nothing is
    unseen."""
    v = start_error_verdict(start_error_pct, start_error_us, steps)
    verdict = v[0] if v is not None else "good"
    ref = "the median step" if steps else "the window"
    head = f"{START_ERROR_REASON} {start_error_us:,.0f} us = {start_error_pct:.2f} % of {ref}"
    if verdict == "good":
        return verdict, f"{head} (within {TRUST_FAIR_PCT:g} %); {unseen}" if unseen else ""
    limit = TRUST_UNRELIABLE_PCT if verdict == "unreliable" else TRUST_FAIR_PCT
    line = f"{head} ({verdict}: > {limit:g} %): " + START_RISK.format(ref="a step" if steps else "the window")
    return verdict, f"{line}; {unseen}" if unseen else line


#: :func:`unseen_hold` looks at this many of the worst-placed GPU tasks at most
UNSEEN_SAMPLE = 50


def unseen_hold(graph: TaskGraph, tl: Timeline, rec: Timeline, gpu: np.ndarray, d_us: np.ndarray, p99_us: float) -> str:
    """Where the trace cannot show what held the GPU, in words; "" otherwise. Of the GPU tasks
    replayed furthest from their recorded start (|error| at or above the p99 ``p99_us`` and over
    1 us, the :data:`UNSEEN_SAMPLE` largest; ``gpu`` their mask, ``d_us`` the errors over it),
    when at least half run inside CUDA graph launches (a launching call with several GPU tasks,
    not the first of them: what the GPU did between a graph's kernels is not in the trace), or
    wait on a collective kernel (are one, follow one on their stream, or start after one of
    another stream of the device ended last: a collective's recorded duration includes waiting
    for peer ranks, which a one-rank trace cannot show)."""
    idx = np.flatnonzero(gpu)
    big = (d_us >= p99_us) & (d_us > 1.0)
    worst = idx[big][np.argsort(-d_us[big], kind="stable")[:UNSEEN_SAMPLE]]
    if not len(worst):
        return ""
    la = graph.launch
    lw = la[worst]
    gi = np.flatnonzero((la >= 0) & (graph.node_kind != NODE_CPU))
    per = np.bincount(la[gi], minlength=graph.n)
    first = np.full(graph.n, -1, np.int64)
    if len(gi):  # the first task of each launch (by recorded start)
        o = gi[np.lexsort((rec.start_ns[gi], la[gi]))]
        head = np.r_[True, la[o][1:] != la[o][:-1]]
        first[la[o][head]] = o[head]
    in_graph = int(((lw >= 0) & (per[np.maximum(lw, 0)] > 1) & (first[np.maximum(lw, 0)] != worst)).sum())
    memo: dict[int, bool] = {}

    def comm(i: int) -> bool:
        nid = int(graph.name_id[i])
        if nid not in memo:
            memo[nid] = classify_name(graph.names[nid])[0] == "communication"
        return memo[nid]

    n_comm = 0
    before = _ended_before_many(graph, rec, worst).tolist()
    for x, q in zip(worst.tolist(), before):  # at most UNSEEN_SAMPLE tasks
        p = int(graph.lane_prev[x])
        n_comm += comm(x) or (p >= 0 and comm(p)) or (q >= 0 and comm(q))
    n = len(worst)
    what = f"of the {n:,} GPU tasks replayed furthest from their recorded start"
    if 2 * in_graph >= n:
        return (f"{in_graph:,} {what} run inside CUDA graph launches: the trace does not show what held the GPU between a "
                "graph's kernels")
    if 2 * n_comm >= n:
        return (f"{n_comm:,} {what} wait on collective kernels: a collective's recorded duration includes waiting for peer "
                "ranks, which a one-rank trace cannot show")
    return ""


#: the verdict's words for :func:`held_before_trace` (docs/model.md, "Work launched before the window")
HELD_WORDS = "first step held by work launched before the trace"


def held_before_trace(graph: TaskGraph) -> tuple[int, int]:
    """(ns, streams): how long GPU work launched before the trace held its streams after the trace
    start ``t0``, as the trace shows it, and on how many streams. A stream whose first task in the
    trace has no launching call holds work launched before the trace: that task was ready at
    ``t0`` at the latest, so its recorded start after ``t0`` is time the stream spent on work the
    trace does not hold (a kernel running across the window's start, its gap ``G`` after it).
    The replay starts such a task at ``t0`` (rule 4: no launching call), so this is what it
    leaves out, not modelled: the largest ``recorded start - t0`` over those first tasks (ns,
    >= 0). Read from the graph's lane order, launches and recorded starts only; (0, 0) when no
    stream starts with such a task."""
    first = np.flatnonzero((graph.node_kind != NODE_CPU) & (graph.lane_prev < 0) & (graph.launch < 0)
                           & (graph.rec_end_ns >= graph.rec_start_ns))
    if not len(first):
        return 0, 0
    held = graph.rec_start_ns[first] - int(graph.t0_ns)
    return max(int(held.max()), 0), int(np.count_nonzero(held > 0))


def held_line(held_ns: int, streams: int, ref_ns: float, steps: int) -> str:
    """The verdict's sentence on :func:`held_before_trace` when it is material (at least
    TRUST_FAIR_PCT of ``ref_ns``, the first step, or the window without steps), else ""."""
    if held_ns <= 0 or ref_ns <= 0 or held_ns * 100 < TRUST_FAIR_PCT * ref_ns:
        return ""
    ref = "the first step" if steps else "the window"
    words = HELD_WORDS if steps else HELD_WORDS.replace("first step", "window")
    return (f"{words}: {held_ns / 1e3:,.0f} us ({held_ns * 100 / ref_ns:.1f} % of {ref}; {streams:,} stream"
            f"{'s' * (streams != 1)} start with a task launched before it), not modelled: the replay starts that work at the "
            "trace start")


def truncation_note(table: EventTable) -> str:
    """The adapter's note of a salvaged truncated file (``Accounting.notes``), or "" when it was whole."""
    return next((k for k in table.accounting.notes if k.startswith("truncated file")), "")


def build_trust(graph: TaskGraph, tl: Timeline, rec: Timeline, window: WindowStats, steps: list[WindowStats]) -> Trust:
    """The :class:`Trust` of a baseline replay ``tl`` against the recorded timeline ``rec``."""
    step_err = max((abs(w.error_pct) for w in steps), default=0.0)
    win_err = abs(window.error_pct)
    gpu = (graph.node_kind != NODE_CPU) & (graph.rec_end_ns >= graph.rec_start_ns)
    d_us = np.abs(tl.start_ns[gpu] - rec.start_ns[gpu]) / 1e3
    p50, p99 = (float(np.percentile(d_us, 50)), float(np.percentile(d_us, 99))) if len(d_us) else (0.0, 0.0)
    worked = answer_steps(steps)  # as the answer's step (summary.build_summary)
    lens = [w.measured_ns for w in worked if w.measured_ns > 0]  # a step measured at 0 ns is no scale
    ref_ns = float(np.median(lens)) if lens else float(window.measured_ns)
    p99_pct = round(p99 * 1e5 / ref_ns, 3) if ref_ns > 0 else 0.0
    # a step measured at 0 ns is no measurement: such steps are judged on their start error too
    verdict, reason = trust_verdict(step_err, win_err, len(steps), p99_pct, p99, judge_start=not steps or any(w.measured_ns <= 0 for w in steps))
    unseen = unseen_hold(graph, tl, rec, gpu, d_us, p99) if len(d_us) else ""
    start_verdict, start_line = start_error_line(p99_pct, p99, len(steps), unseen)
    cut = truncation_note(graph.table)
    if cut:  # the replay can only match what survived: the steps' work after the cut is not in the trace
        verdict, reason = "unreliable", (f"{TRUNCATED_REASON} ({cut.removeprefix('truncated file: ')}): the steps and the window "
                                         "miss the work recorded after the cut")
    held_ns, held_streams = held_before_trace(graph)
    first_ns = next((w.measured_ns for w in steps if w.measured_ns > 0), 0) if steps else window.measured_ns
    held = held_line(held_ns, held_streams, float(first_ns), len(steps))
    if held:
        reason = f"{reason}; {held}"
    inferred = {k: v["inferred"] for k, v in sorted(graph.edge_counts().items()) if v.get("inferred")}
    missing = getattr(graph.counts, "missing", ())
    incomplete = {k: v for k, v in sorted(graph.counts.items()) if v and k in missing}
    cause = replay_cause(graph, tl, rec, window.measured_ns) if verdict != "good" else ""
    return Trust(verdict, f"{reason}; {cause}" if cause else reason, step_err + 0.0, len(steps), win_err + 0.0, round(p50, 3), round(p99, 3),
                 int(np.count_nonzero(gpu)), inferred, incomplete, cause, p99_pct, start_verdict, start_line,
                 round(held_ns / 1e3, 3), held)


def replay_cause(graph: TaskGraph, tl: Timeline, rec: Timeline, window_ns: int) -> str:
    """In words, the blocking call whose recorded wait the replay reproduces least, when that
    alone is worth more than the accuracy target (TRUST_FAIR_PCT of the window), and what held
    the GPU work it waited for in the trace: the task of that stream that started latest after
    what the graph lets it wait for (launch + L, stream predecessor + G), and the task of another
    stream of the device that ended last before it. A collective (NCCL/RCCL) kernel there is named
    as such: its recorded duration includes waiting for peer ranks, which a one-rank trace cannot
    show. '' when no wait is missed by that much.
    """
    b = np.nonzero(graph.blocking)[0]
    miss = rec.blocked_ns[b] - tl.blocked_ns[b]
    if not len(b) or int(miss.max()) * 100 <= TRUST_FAIR_PCT * window_ns:
        return ""
    i = int(b[np.argmax(miss)])
    out = (f"largest missed wait: {graph.name(i)} blocked {rec.blocked_ns[i] / 1e6:,.3f} ms in the trace, "
           f"{tl.blocked_ns[i] / 1e6:,.3f} ms replayed")
    waited = graph.preds(i, EdgeKind.WAIT)
    if not len(waited):
        return out
    w = int(waited[np.argmax(rec.end_ns[waited])])
    x, late = _held_task(graph, rec, w, int(rec.start_ns[i]))
    out += (f"; the {_short(graph.name(x))} it waited for" if x == w else f"; the GPU work it waited for queued behind {_short(graph.name(x))}, which")
    out += f" started {late / 1e3:,.0f} us later than its launch and stream allow"
    p = _ended_before(graph, rec, x)
    if p < 0:
        return out
    out += f", {(rec.start_ns[x] - rec.end_ns[p]) / 1e3:,.0f} us after {_short(graph.name(p))} (stream {graph.lane_keys[graph.lane[p], 3]}) ended"
    unlinked = sum(v for k, v in graph.counts.items() if k.startswith("cudaStreamWaitEvent without"))
    if unlinked:
        out += f" (a cross-stream wait the trace does not link? {unlinked:,} cudaStreamWaitEvent without an event id)"
    if classify_name(graph.name(p))[0] == "communication":
        out += (f"; collective kernels' durations include waiting for peer ranks ({(rec.end_ns[p] - rec.start_ns[p]) / 1e6:,.3f} ms here), "
                "which a one-rank trace cannot show")
    return out


def _short(name: str, n: int = 48) -> str:
    return name if len(name) <= n else name[: n - 3] + "..."


def _held_task(graph: TaskGraph, rec: Timeline, w: int, since: int) -> tuple[int, int]:
    """(task, ns): of ``w`` and the tasks before it on its stream still unfinished at ``since``,
    the one whose recorded start is latest after its launch (+ L) and stream predecessor (+ G)."""
    best, late = w, -1
    x = w
    while x >= 0 and rec.end_ns[x] > since:
        prev, lc = int(graph.lane_prev[x]), int(graph.launch[x])
        ready = max(int(rec.start_ns[lc]) + graph.launch_latency_ns if lc >= 0 else graph.t0_ns,
                    int(rec.end_ns[prev]) + graph.gpu_gap_ns if prev >= 0 else graph.t0_ns)
        if int(rec.start_ns[x]) - ready > late:
            best, late = x, int(rec.start_ns[x]) - ready
        x = prev
    return best, max(late, 0)


def _ended_before(graph: TaskGraph, rec: Timeline, x: int) -> int:
    """The GPU task of another stream of ``x``'s device, placed before ``x``, that ended last at or
    before ``x``'s recorded start (the lowest task id of those that ended then); -1 when there is none."""
    return int(_ended_before_many(graph, rec, np.array([x], np.int64))[0])


def _ended_before_many(graph: TaskGraph, rec: Timeline, xs: np.ndarray) -> np.ndarray:
    """:func:`_ended_before` of each task id of ``xs`` (int64, shape (k,)): one sort of the GPU
    tasks by recorded end (then id descending), then per query a backward scan of the tasks that
    ended by its start, in chunks doubling from 256 until one qualifies (another stream of its
    device, ``position_ns`` at or before its own): O(n log n + k * scanned), where a pass of
    boolean masks over the whole graph per query (k = UNSEEN_SAMPLE of them) was 50 passes."""
    out = np.full(len(xs), -1, np.int64)
    gi = np.flatnonzero(graph.node_kind != NODE_CPU)
    if not len(gi) or not len(xs):
        return out
    o = gi[np.lexsort((-gi, rec.end_ns[gi]))]
    end_o, lane_o, pos_o = rec.end_ns[o], graph.lane[o], graph.position_ns[o]
    dev_o = graph.lane_keys[lane_o, 2]
    for q, x in enumerate(np.asarray(xs, np.int64).tolist()):  # a few queries (UNSEEN_SAMPLE at most)
        lx, px = graph.lane[x], graph.position_ns[x]
        dx = graph.lane_keys[lx, 2]
        hi = int(np.searchsorted(end_o, rec.start_ns[x], "right"))
        w = 256
        while hi > 0:
            lo = max(hi - w, 0)
            hit = np.flatnonzero((lane_o[lo:hi] != lx) & (dev_o[lo:hi] == dx) & (pos_o[lo:hi] <= px))
            if len(hit):
                out[q] = o[lo + hit[-1]]
                break
            hi, w = lo, 2 * w
    return out


#: a measured launch latency above this looks like a one-off (lazy module loading, a cold start)
#: rather than the launch path (typically 3-30 us on the traces in ../shared/traces)
SUSPICIOUS_LAUNCH_LATENCY_NS = 1_000_000


def overlapping_steps(steps: list[tuple[str, int, int, int, int]]) -> int:
    """How many ProfilerStep ranges (:func:`daydream.graph.profiler_steps`: name, start, end, pid,
    tid) end after the next step of their process starts (steps of different processes may overlap:
    ranks of one job)."""
    by_pid: dict[int, list[tuple[int, int]]] = {}
    for _name, s, e, pid, _tid in steps:  # ProfilerSteps: a few per process
        by_pid.setdefault(pid, []).append((s, e))
    return sum(sum(1 for (_, e), (s2, _) in zip(v, v[1:]) if s2 < e) for v in (sorted(x) for x in by_pid.values()))


def _world_size(graph: TaskGraph) -> int:
    """The world size the trace names (``meta.world_size``), or -1."""
    meta = getattr(graph.table, "meta", None)
    return int(getattr(meta, "world_size", -1) or -1)


def _streams_side_by_side(graph: TaskGraph) -> bool:
    """Whether some process has GPU tasks on two or more streams of one device: only then can a
    cross-stream wait the trace did not link let streams overlap in a prediction."""
    gk = graph.lane_keys[graph.lane_is_gpu][:, 1:3]
    return len(gk) > len(np.unique(gk, axis=0))


def _warnings(graph: TaskGraph) -> list[str]:
    out = []
    c = graph.counts
    waits = sum(v for k, v in c.items() if k.startswith("cudaStreamWaitEvent without"))
    if waits and _streams_side_by_side(graph):  # with one stream per GPU a missing cross-stream edge orders nothing
        out.append(
            f"{waits:,} {UNLINKED_WORDS}, so those edges are missing: "
            "predictions may let streams (e.g. NCCL) overlap more than the program allows; each prediction's 'bound' line "
            "(and --opt all's '>=') replays it with every dependency those waits can have. Record with "
            "torch.profiler._ExperimentalConfig(enable_cuda_sync_events=True) or Nsight Systems for exact edges."
        )
    gpu = int(np.count_nonzero(graph.node_kind != NODE_CPU))
    if gpu == 0:
        acc = graph.table.accounting if graph.table is not None else None
        skipped = {k: v for k, v in acc.skipped.items() if not k.startswith(("flow event", "metadata event"))} if acc is not None else {}
        top = max(skipped.items(), key=lambda kv: kv[1]) if skipped else None
        why = (f" The reader skipped {sum(skipped.values()):,} records ({top[1]:,}: {top[0]}); if the GPU events are among "
               "them, the answer is not the trace's (see 'input').") if top else ""
        out.append("the trace has no GPU kernels, copies or sets: only its CPU side is replayed, and no GPU optimization applies." + why)
    orphans = sum(v for k, v in c.items() if k.startswith("GPU task without a launching call"))
    if gpu and orphans > 0.1 * gpu:
        out.append(f"{orphans:,} of {gpu:,} GPU tasks have no launching call in the trace (a cut or sampled trace?): they are placed by stream order only.")
    over = overlapping_steps(profiler_steps(graph.table))
    if over:
        out.append(f"{over:,} ProfilerStep ranges overlap the next step of their process (a malformed or merged trace?): the tasks "
                   "in both are counted in both steps, so the step rows do not add up to the window.")
    pids, procs = _process_ids(graph)
    comm = communication_mask(graph) & (pids >= 0)
    if gpu and comm.any() and len(sorted_unique(pids[comm])) > 1:
        out.append(f"this trace holds {len(procs):,} processes whose {int(comm.sum()):,} collective kernels talk to each "
                   "other; they are replayed as independent processes: each collective keeps its recorded time, its wait for "
                   "peers included, so a what-if that speeds up one process does not shorten its peers' waits. For coupled ranks "
                   "give one trace per rank (docs/jobs.md).")
    elif gpu and comm.any() and _world_size(graph) > 1:
        meta = graph.table.meta
        out.append(f"this trace is {'rank ' + str(meta.rank) if meta.rank >= 0 else 'one rank'} of a job of {_world_size(graph):,} ranks "
                   f"(its distributedInfo): its {int(comm.sum()):,} collective kernels keep their recorded time, their wait for "
                   "peers included, which one rank's trace cannot tell from the transfer; a what-if that changes the collectives "
                   "or the work before them is judged without the peers. For the job, give every rank's trace (docs/jobs.md).")
    slow = np.nonzero(startup_calls(graph))[0]
    span = int(graph.rec_end_ns.max()) - int(graph.t0_ns) if graph.n else 0
    if len(slow) and graph.dur_ns[slow].sum() * 100 >= TRUST_FAIR_PCT * max(span, 1):  # material: as much as the accuracy target
        top = slow[np.argsort(-graph.dur_ns[slow], kind="stable")[:3]]
        names = ", ".join(f"{graph.name(int(v))} {graph.dur_ns[v] / 1e6:,.1f} ms" for v in top)
        out.append(f"{len(slow):,} API call{'s' * (len(slow) != 1)} that do{'es' * (len(slow) == 1)} not wait for the GPU take {graph.dur_ns[slow].sum() / 1e6:,.1f} ms ({names}): "
                   f"{STARTUP_WORDS} (context creation on the first GPU runtime call, module loading on a kernel's first "
                   "launch, library handles). The window is not a steady-state step: record after warm-up (torch.profiler "
                   "schedule(wait=, warmup=, active=)) before judging a what-if on it.")
    if graph.launch_latency_ns > SUSPICIOUS_LAUNCH_LATENCY_NS:
        out.append(
            f"the measured launch latency L = {graph.launch_latency_ns / 1e3:,.0f} us is unusually large (few launches on an idle stream, "
            "or a cold start such as lazy module loading); replayed GPU start times are uncertain."
        )
    return out
