"""The job report (:class:`~daydream.report.job_model.JobReport`, built by
:mod:`daydream.job.reporting`) for a terminal: plain text, one row per rank, the straggler, the
job critical path, the first collectives and the what-ifs; trace-derived strings through
``terminal_text``.
"""

from __future__ import annotations

import re
import textwrap

from ..util.display import CUT, terminal_text
from ..report.job_model import JobReport


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.3f}"


#: the widest line of the text (the single-trace report's limit, issue 31)
WIDTH = 100
_ROW = re.compile(r"^\s*(rank\s|\d+\s)")


def _fit(line: str) -> str:
    """``line`` within :data:`WIDTH` columns: a table row (the rank table) cut at the end (the JSON
    has every column whole), prose wrapped under its own indent."""
    if len(line) <= WIDTH:
        return line
    if _ROW.match(line):
        return line[: WIDTH - len(CUT)] + CUT
    indent = line[: len(line) - len(line.lstrip())]
    return "\n".join(textwrap.wrap(line, WIDTH, initial_indent="", subsequent_indent=indent + "    ",
                                    break_on_hyphens=False, break_long_words=True)) or line


def _size(b: int) -> str:
    return f"{b / 2**30:,.2f} GiB" if b >= 2**30 else f"{b / 2**20:,.1f} MiB"


def _memory_row(x) -> str:
    """One rank's memory line (trace text goes through ``terminal_text`` with the whole report)."""
    parts = ", ".join(f"{k} {v:.0f} %" for k, v in sorted(x.shares_pct.items(), key=lambda kv: -kv[1])[:3] if k != "allocator slack")
    least = "at least " if x.at_least else ""
    step = f" in {x.step}" if x.step else ""
    # "r<N>", not "rank <N>": a wrapped line (a rank-table row would be cut at the width)
    return f"  r{x.rank} GPU {x.device}: peak {least}{_size(x.peak_allocated_bytes)}{step}" + (f" ({parts})" if parts else "") + \
        f"; {x.verdict}"


def render_job_text(r: JobReport) -> str:
    """The job report for a terminal (trace-derived strings through ``terminal_text``)."""
    out = [f"job: {r.ranks} ranks (world size {r.world_size}), {r.collectives} collectives matched per rank, "
           f"clock {r.clock}; coupled replay settled in {r.rounds} rounds",
           f"job step (slowest rank): measured {_ms(r.step_measured_ns)} ms, replayed {_ms(r.step_replayed_ns)} ms "
           f"({r.step_error_pct:+.2f} %)",
           f"baseline replay (coupled): {r.trust} ({r.trust_reason})", "",
           f"{'rank':>4} {'measured ms':>12} {'replayed ms':>12} {'err %':>7} {'alone %':>8} {'wait ms':>8} "
           f"{'transfer ms':>11} {'overlap %':>9} {'bound by':>13} {'replay':>10}  waited for (ms)"]
    for x in r.rank_rows:
        wf = ", ".join(f"r{k} {_ms(v)}" for k, v in sorted(x.waited_for.items(), key=lambda kv: -kv[1])[:3])
        out.append(f"{x.rank:>4} {_ms(x.measured_ns):>12} {_ms(x.replayed_ns):>12} {x.error_pct:>7.2f} {x.alone_error_pct:>8.2f} "
                   f"{_ms(x.wait_measured_ns):>8} {_ms(x.transfer_ns):>11} {x.comm_overlap_pct:>9.1f} "
                   f"{max(x.critical_path, key=x.critical_path.get) if x.critical_path else '-':>13} {x.trust or '-':>10}  {wf}")
    if r.idle:
        out += ["", "where each rank's GPU time goes (coupled replay, ms): compute; bubble (waiting at send/recv for the "
                "other stage); waiting for peers at collectives; transfer; idle (nothing pending); communication exposed / "
                "hidden under compute",
                f"{'rank':>4} {'window':>10} {'compute':>10} {'bubble':>10} {'peer wait':>10} {'transfer':>10} {'idle':>10} "
                f"{'exposed':>10} {'hidden':>10}"]
        for x in r.idle:
            out.append(f"{x.rank:>4} {_ms(x.window_ns):>10} {_ms(x.compute_ns):>10} {_ms(x.bubble_ns):>10} "
                       f"{_ms(x.peer_wait_ns):>10} {_ms(x.transfer_ns):>10} {_ms(x.idle_ns):>10} {_ms(x.exposed_comm_ns):>10} "
                       f"{_ms(x.hidden_comm_ns):>10}")
    if r.memory:
        out += ["", "GPU memory per rank (coupled replay; docs/memory.md): peak allocated, the step at the peak and its "
                "largest parts (% of that step's peak), verdict"]
        out += [_memory_row(x) for x in r.memory]
    if r.straggler is not None:
        s = r.straggler
        out += ["", f"straggler: rank {s.rank} (its peers waited {_ms(s.caused_wait_ns)} ms for it): {s.cause}"]
    if r.critical_path is not None:
        cp = r.critical_path
        causes = ", ".join(f"{k} {_ms(v)}" for k, v in sorted(cp.by_cause_ns.items(), key=lambda kv: -kv[1]) if v)
        hops = " <- ".join(f"rank {sg.rank}" + (f" (collective {sg.via_collective})" if sg.via_collective >= 0 else " from its trace start")
                           for sg in cp.segments)
        out += ["", f"job critical path {_ms(cp.total_ns)} ms: {hops}; by cause: {causes}"]
        gap = r.step_replayed_ns - cp.total_ns
        if gap > 0 and cp.segments:  # the walk stops at a trace start later than the job step's
            out.append(f"  it ends at rank {cp.segments[-1].rank}'s trace start, {_ms(gap)} ms after the job step begins: "
                       f"what rank {cp.segments[-1].rank} ran before its trace starts is not in its trace (docs/jobs.md)")
    if r.collective_rows:
        out += ["", "collectives (first 10): #, op, bytes, last to arrive (recorded / replayed), longest wait ms, transfer ms"]
        for x in r.collective_rows[:10]:
            grp = f" [{x.group}]" if x.group else ""
            size = f"{x.size_bytes:,} B" if x.size_bytes >= 0 else "size unknown"
            out.append(f"  {x.index:>3} {x.op}{grp} {size}  rank {x.last_rank} / {x.last_rank_replayed}  "
                       f"{_ms(x.wait_max_ns)}  {_ms(x.transfer_ns)}")
    if r.ranked:
        out += ["", f"--opt all: {len(r.predictions)} optimizations alone, each replayed coupled on "
                    + ("the ranks asked" if any(p.ranks and len(p.ranks) < r.ranks for p in r.predictions) else "every rank")
                    + ", best first by the job step; " + (f"{len(r.not_applicable)} not applicable (below)" if r.not_applicable else "all apply")]
    for p in r.predictions:
        who = f" on ranks {','.join(map(str, p.ranks))}" if p.ranks else ""
        mark = "  UNRELIABLE: see the baseline replay above" if r.trust == "unreliable" else ""
        out += ["", f"what-if {p.name}{who}: job step {_ms(p.replayed_ns)} -> {_ms(p.predicted_ns)} ms ({p.speedup:.3f}x){mark}",
                "  per rank ms: " + ", ".join(f"r{i} {_ms(x)}" for i, x in enumerate(p.rank_predicted_ns))]
        out += [f"  rank {k}: {v}" for k, v in p.notes.items()]
        if p.memory:
            out += ["  predicted GPU memory per rank:"] + [" " + _memory_row(x) for x in p.memory]
    for k, v in r.not_applicable.items():
        out.append(f"what-if {k}: not applicable: {v}")
    for k, v in r.counts.items():
        out.append(f"note: {k}: {v:,}")
    return "\n".join(_fit(terminal_text(x)) for x in out) + "\n"  # one line each: a newline in a name shows as \\n
