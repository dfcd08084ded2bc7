"""``daydream-comm-fit``: the collective-cost fit of a trace (or a job), its residuals beside the
link presets', and the overlap slowdown of its compute kernels.

    daydream-comm-fit TRACE [--link PRESET] [--json FILE|-]
    daydream-comm-fit RANK0 RANK1 ... | FOLDER  [--link PRESET] [--json FILE|-]

One trace: each collective's recorded duration is fitted (it includes waiting for peers: an upper
bound of its transfer). Several traces (one job): each rank's **transfer** of each matched
collective (:mod:`daydream.job.match`). The preset compared is ``--link``, else the board link of
the trace's GPU (:data:`daydream.costmodel.gpus.BOARD_LINKS`, inferred and said so). The fit
itself: :mod:`daydream.costmodel.comm_fit`. Bad input: one line naming the file, exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from ..costmodel import comm as cm
from ..costmodel import comm_fit as cf
from ..costmodel.gpus import BOARD_LINKS
from ..errors import DaydreamError, UsageError
from ..events.table import Kind
from ..graph import NODE_CPU
from ..graph.collectives import kernel_is_collective
from ..optimizations.gpu_upgrade import source_gpu
from ..util.display import terminal_text
from .load import expand_inputs, load_ranks, read_rank
from .match import check_world, match

EXIT_INPUT = 2


def preset_of(graph, link: str) -> tuple[cm.Network | None, str]:
    """(the preset network, how it was chosen): ``link`` (a preset name), else the GPU's board link;
    (None, why) when no link is given and the GPU's board link is not known: the fit is made, only
    the preset comparison is left out.

    Raises:
        UsageError: an unknown preset.
    """
    if link:
        if link.lower() not in cm.PRESETS:
            raise UsageError(f"--link {link!r}: not a link preset ({', '.join(cm.PRESETS)})")
        return cm.Network(cm.PRESETS[link.lower()]), "given by --link"
    gpu, dev = source_gpu(graph, "")
    if gpu is None or gpu.name not in BOARD_LINKS:
        return None, f"none: the link is not known (GPU {dev or 'not named'}); give --link PRESET to compare one"
    return cm.Network(cm.PRESETS[BOARD_LINKS[gpu.name][0]]), f"inferred from the GPU, {gpu.name}"


def overlap_of(graph) -> tuple[float, dict]:
    """:func:`daydream.costmodel.comm_fit.overlap_slowdown` on a graph's recorded GPU tasks
    (compute: kernels that are not collectives, copies or sets)."""
    gpu = (graph.node_kind != NODE_CPU) & (graph.row >= 0)
    comm = gpu & kernel_is_collective(graph)
    compute = gpu & ~comm & (graph.node_kind == Kind.KERNEL)
    return cf.overlap_slowdown(graph.rec_start_ns, graph.rec_end_ns, graph.device, graph.name_id, comm, compute)


def fit_trace(path: str, link: str = "") -> dict:
    """The fit of one rank's trace, JSON-ready.

    Raises:
        TraceFormatError: the file cannot be read. UsageError: no link known.
    """
    r = read_rank(path)
    c = r.coll
    net, how = preset_of(r.graph, link)
    f = cf.fit(c.op, c.size_bytes, c.group_size, c.dur_ns, net, "kernel duration (one rank: includes waiting for peers)")
    slow, detail = overlap_of(r.graph)
    return {"traces": [path], "link": how, **f.to_json(), "collectives": len(c),
            "overlap_slowdown": round(slow, 4), "overlap": detail}


def fit_job(paths: list[str], link: str = "") -> dict:
    """The fit of a job's transfers (every rank's), JSON-ready; the overlap slowdown over its ranks
    (time-weighted mean of the ranks' own).

    Raises:
        UsageError: not one job; TraceFormatError: a file cannot be read.
    """
    ranks = load_ranks(expand_inputs(paths))
    check_world(ranks)
    m = match(ranks)
    net, how = preset_of(ranks[0].graph, link)
    member = m.member
    n = np.broadcast_to(member.sum(axis=0), member.shape)
    op = np.broadcast_to(m.op, member.shape)
    size = np.broadcast_to(m.size_bytes, member.shape)
    f = cf.fit(op[member], size[member], n[member], m.transfer_ns[member], net,
               "transfer (the time after the last participant arrived, every rank)")
    per = [overlap_of(r.graph) for r in ranks]
    return {"traces": [r.path for r in ranks], "link": how, **f.to_json(), "collectives": int(member.sum()),
            "overlap_slowdown_per_rank": [round(s, 4) for s, _ in per], "overlap": [d for _, d in per]}


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    """Aligned text columns (the first left-aligned, the others right-aligned)."""
    w = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    fmt = (lambda r: "  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r)).rstrip())
    return [fmt(head), fmt(["-" * x for x in w]), *[fmt(r) for r in rows]]


def render(doc: dict) -> str:
    """The fit as a text table, one row per operation (names from traces through the display
    helpers): count, group size, message sizes (bytes), the fitted latency (us) and bus bandwidth
    (GB/s), and the |relative error| median / p90 of the fit and of the preset at the same
    collectives, with the preset's median signed error (its bias: + slower than recorded)."""
    lines = [f"collective-cost fit on {len(doc['traces'])} trace(s): {doc['collectives']} collectives",
             f"time fitted: {doc['source']}",
             (f"preset compared: {terminal_text(doc['preset'])} ({terminal_text(doc['link'])})" if doc["preset"] else
              f"preset compared: {terminal_text(doc['link'])}"), ""]
    head = ["operation", "count", "n", "sizes (B)", "L (us)", "busbw (GB/s)", "fit |err| med", "p90",
            "preset |err| med", "p90", "preset bias"]
    rows = []
    for name, o in doc["ops"].items():
        fr, pr = o["fit_residual"], o["preset_residual"]
        scale = o.get("one_size_preset_scale")
        # one size fits no line: the preset scaled to it, said so (its L and busbw are the preset's, scaled)
        fit = ([f"{o['latency_us']:,.2f}", f"{o['busbw_GBps']:,.3f}", f"{fr['median_abs']:.1%}", f"{fr['p90_abs']:.1%}"]
               if not scale else ["one size:", f"preset x {scale:.2f}", "not a fit", "-"])
        cmp = ([f"{pr['median_abs']:.1%}", f"{pr['p90_abs']:.1%}", f"{pr['median_signed']:+.1%}"] if pr else ["-"] * 3)
        rows.append([terminal_text(name), f"{o['count']:,}", str(o["group_size"]),
                     f"{o['size_min_bytes']:,}-{o['size_max_bytes']:,}", *fit, *cmp])
    lines += _table(head, rows) if rows else ["(no sized collective)"]
    for k, v in doc.get("counts", {}).items():
        lines.append(f"  {terminal_text(k)}: {v}")
    lines.append("")
    if "overlap_slowdown" in doc:
        lines.append(f"overlap slowdown of compute under communication: {doc['overlap_slowdown']:.4f}")
        details = [doc["overlap"]]
    else:
        lines.append("overlap slowdown of compute under communication, per rank: "
                     + ", ".join(f"{s:.4f}" for s in doc["overlap_slowdown_per_rank"]))
        details = doc["overlap"]
    for r, d in enumerate(details):
        if d:
            lines.append(("  " if len(details) == 1 else f"  rank {r}: ") + "; ".join(f"{terminal_text(str(k))}: {v}" for k, v in d.items()))
    return "\n".join(lines) + "\n"


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(EXIT_INPUT, f"{self.prog}: error: {terminal_text(message)}\n")


def main(argv: list[str] | None = None) -> int:
    ap = _Parser(prog="daydream-comm-fit", description="Collective costs fitted on a trace's (or a job's) own transfers.")
    ap.add_argument("traces", nargs="+", help="one trace, or every rank's trace (or their folder)")
    ap.add_argument("--link", default="", help="the preset compared (default: the GPU's board link)")
    ap.add_argument("--json", metavar="FILE", help="write the fit as JSON ('-': standard output)")
    ap.add_argument("--debug", action="store_true", help="show tracebacks")
    a = ap.parse_args(argv)
    try:
        paths = expand_inputs(a.traces)
        doc = fit_trace(paths[0], a.link) if len(paths) == 1 else fit_job(paths, a.link)
    except DaydreamError as e:
        if a.debug:
            raise
        print(f"daydream-comm-fit: error: {terminal_text(str(e))}", file=sys.stderr)
        return EXIT_INPUT
    if a.json:
        text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
        if a.json == "-":  # the document alone on standard output
            sys.stdout.write(text)
            return 0
        with open(a.json, "w", encoding="utf-8") as fh:
            fh.write(text)
    sys.stdout.write(render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
