#!/usr/bin/env python3
"""Every numeric constant of the daydream package with the kind of its source, as docs/constants.md.

    python scripts/constants.py            # writes docs/constants.md
    python scripts/constants.py --check    # exit 1 when docs/constants.md is stale or a model constant has no source

A constant is a module-level UPPER_CASE name bound to an expression with a number in it, or a
``Param`` default of an optimization. Its source kind is read from its own comment (the ``#:`` lines
above it, an inline ``#`` comment, or the Param's help text):

- ``limit``: an implementation bound or a size threshold (not a model constant: MAX_, _MIN, LIMIT,
  CHUNK, ..., or a comment that says so);
- ``citation``: a spec sheet, a paper section, vendor documentation;
- ``per trace``: measured on the trace at hand (a mechanism);
- ``assumption``: a model constant its comment calls an assumption (no source: to be measured);
- ``fit``: fitted on data, the data named (measured on the development traces counts here);
- ``definition``: a unit, a format code, a sentinel or an enumeration (ns per us, a CUPTI kind), or
  data whose numbers are not model constants (name rules, GPU spec tables: each entry cites its own);
- ``presentation``: table widths, figure sizes, how many rows a table shows;
- ``what-if``: a parameter's default that only states the question asked (a scale factor, a count of
  ranks), overridable on the command line;
- ``unsourced``: none of these: listed first, to be sourced.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "daydream"
DOC = ROOT / "docs" / "constants.md"

DEFINITION_NAME = re.compile(r"(^_?NONE$|ABSENT|^_?NO_|^EXIT_|^MIB$|^KIB$|^GIB$|POW10|^DTYPES$|^[UI]\d+$|_TYPES$|^_CATS$|^MARKER_|"
                             r"_OFFSET$|_ORDER$|_VALUE$|_BYTE$|^PEER$|_RULES?$|^GPUS$|^EXTRA_GPUS$|^_CC\d+$|^FAMILY_OF|^FITTED$|GRID$|"
                             r"^GOALS$|_ONLY$|^NETWORK_PARAMS$|^WORKER_TID0$|^_BIG$|_KEYS$)")
LIMIT_NAME = re.compile(r"(^_?MAX_|_MAX$|_MIN$|^_?MIN_|LIMIT|CHUNK|_BYTES$|_STEP$|_TRIES|_BLOCK$|_ROUNDS$|_SIZE$|_ROWS$|_CAP$|"
                        r"HEAD_|_DEPTH$|PREFIX|_LEN$|_CHARS$|_ITEMS$|_THREADS$|_MISSES$|_COUNT$|VERSION|_FLOOR$|_RATIO$)")
KINDS = (
    # the first match decides; a constant measured on the project's own traces is a fit to them
    ("fit", re.compile(r"measured on (the )?(real|development) traces|minimum kernel duration measured|accuracy target", re.I)),
    ("assumption", re.compile(r"\bassum", re.I)),
    ("citation", re.compile(r"spec sheet|datasheet|whitepaper|white paper|\bpaper\b|§|\bsection\b|documentation|docs?\b|"
                            r"\bguide\b|arxiv|usenix|isca|mlsys|nccl-tests|cuda c\+\+|programming guide|nvidia|amd|"
                            r"pytorch|kineto|cupti|nsight|\bsource:|\bcited?\b|https?://|et al|\bnccl\b|torch[./]|'s default|dgx|"
                            r"occupancy calculator|compute capabilit", re.I)),
    ("fit", re.compile(r"\bfitted\b|\bgrid search\b|\bregress", re.I)),
    ("per trace", re.compile(r"measured (per|on the|from the) trace|per trace|from the trace|of the trace at hand|calibrat", re.I)),
    ("definition", re.compile(r"\bunits?\b|\bns per\b|\bcode\b|\benum|\bkind\b|\bid\b|\bbit\b|format version|magic", re.I)),
    ("limit", re.compile(r"\blimit|\bbound\b|threshold|at most|at least|largest|smallest .* accepted|guard|cap\b|"
                         r"to keep|compiled from|numba|overflow|int64|memory bound|decompression", re.I)),
)


def _comment_above(lines: list[str], lineno: int) -> str:
    out = []
    i = lineno - 2
    while i >= 0 and lines[i].lstrip().startswith("#"):
        out.append(lines[i].strip().lstrip("#:").strip())
        i -= 1
    return " ".join(reversed(out))


def _inline(lines: list[str], node) -> str:
    text = " ".join(lines[node.lineno - 1: node.end_lineno])
    m = re.search(r"#(.*)$", text)
    return m.group(1).strip() if m else ""


def _has_number(node) -> bool:
    return any(isinstance(c, ast.Constant) and isinstance(c.value, (int, float)) and not isinstance(c.value, bool)
               for c in ast.walk(node))


#: constants whose comment misleads the rules above, with what is known of their source (issue 39's
#: audit); an entry whose constant no longer exists fails tests/test_constants_doc.py
OVERRIDES: dict[str, tuple[str, str]] = {
    "STARTUP_FACTOR": ("assumption", "x1000 the trace's median call: no measurement or citation, to be measured"),
    "STARTUP_MIN_NS": ("assumption", "1 ms: no measurement or citation, to be measured"),
    # issue 39's second audit: each constant listed as unsourced, with its kind and what is known of its source
    "CAPACITY": ("citation", "each entry's own datasheet, named in its source field"),
    "DEFAULT_FLOOR_NS": ("assumption", "2 us, the middle of FLOOR_NS's measured floors (1.1-2.2 us), for GPUs without one"),
    "REREADS": ("citation", "the kernels' algorithms in PyTorch's source: layer norm reads its row twice (moments, then "
                "normalize: ATen cuda/layer_norm_kernel.cu), the block softmax three times (max, sum, write: cuda/SoftMax.cu "
                "cunn_SoftMaxForward), the warp softmax once (the row held in registers: cuda/PersistentSoftmax.cuh)"),
    "DEFAULT_TILE": ("fit", "cuBLAS's most common large FP32 tile in the development kernel data, which also judges it"),
    "DEFAULT_LAUNCH_LATENCY_OTHER_NS": ("citation", "the lower median of DEFAULT_LAUNCH_LATENCY_NS, each entry cited"),
    "MEMORY_BASE": ("limit", "part of the memory bound's allowance (docs/errors.md, Resource bounds): 38 MB measured after "
                    "the imports, rounded up with the table's start"),
    "INFLATE_HOLD": ("limit", "part of the memory bound: the reader's buffer grows by concatenation, two copies alive"),
    "_DTYPE_OF": ("definition", "codes of PyTorch dtype names"),
    "DEVICE_KINDS": ("citation", "Nsight Systems export schema: CUDA_MEMOPR_MEMORY_KIND values of device memory"),
    "_FETCH_BATCH": ("limit", "rows fetched per SQLite batch: bounds memory, changes no result"),
    "LAUNCH_OPTIONAL": ("definition", "formats of the saved table's optional members"),
    "TOLERANCE_DIV": ("assumption", "half a gap G either side of the expected start: not measured"),
    "NODE_CPU": ("definition", "the node_kind code of CPU tasks"),
    "CONNECT_TIMEOUT_S": ("limit", "a timeout of the Dask path (docs/jobs.md, When the cluster fails)"),
    "HANDSHAKE_TIMEOUT_S": ("limit", "a timeout of the Dask path (docs/jobs.md, When the cluster fails)"),
    "WORKER_WAIT_S": ("limit", "a timeout of the Dask path (docs/jobs.md, When the cluster fails)"),
    "POLL_S": ("limit", "how often the Dask path looks at the cluster: changes no result"),
    "SERIES_FACTORS": ("definition", "the problem-size factors the kernel series are measured at (the data's grid)"),
    "AUTOGRAD_THREAD_SHARE": ("assumption", "a majority rule (half of a thread's runtime calls inside backward contexts): "
                              "not measured"),
    "HIDDEN_MULTIPLES": ("citation", "Transformer widths: QKV 3H, MLP 4H (Vaswani et al. 2017); 2H and 8H, GLU variants "
                         "(Shazeer 2020)"),
    "_PROBE_NS": ("definition", "a probe time: the anchor is linear in it, so no result depends on it"),
    "_SHAPE_PARAMS": ("definition", "the what-if's parameter table; each Param's default is its own row"),
    "_COMMON": ("definition", "the what-ifs' shared parameter table; each Param's default is its own row"),
    "PH_FWD": ("definition", "the forward phase's code in daydream.mapping.rules.PHASES"),
    "DEFAULT_FRAGMENTATION": ("fit", "the median of the reserved/allocated ratios of the four shared traces that record "
                              "them; used only on traces that record none, so none judges it yet"),
    "PICTURE_COLUMNS": ("presentation", "the width in px of the SVG's plot area"),
    "CURVE_BUCKETS": ("presentation", "points a memory curve keeps for the --plot figure (every peak kept); no number "
                      "the report judges depends on it"),
    "SCHEMA_DIR": ("definition", "a path, not a number"),
    "WHATIF_MIN_SPEEDUP": ("presentation", "the least speed-up printed above 1.00x at two decimals"),
    "TRUST_UNRELIABLE_PCT": ("limit", "a verdict threshold chosen by hand (the project's stated accuracy tiers, with "
                             "TRUST_FAIR_PCT): it changes no prediction"),
    "SUSPICIOUS_LAUNCH_LATENCY_NS": ("limit", "a warning threshold: no prediction depends on it"),
    "FEW_STEPS": ("limit", "chooses between two passes that find the same members"),
    "FRAME_TOP": ("presentation", "frames listed per phase"),
    "_NEG": ("definition", "a sentinel below any time"),
    "BOUND_BY_LANE": ("definition", "a sentinel code of Timeline.bound_start"),
    "STALE_AFTER_S": ("limit", "age after which a left-over temporary is removed: changes no result"),
    "GAP_TRIM": ("fit", "fitted by scripts/fit_gap_trim.py on the Owlv2 H100 and mfu_2gpu_before traces, judged on the others"),
    "GAP_MIN_PAIRS": ("assumption", "20 pairs: below it one odd gap dominates a mean (con_kernel: 4 pairs, mean 23 ms); "
                      "the count itself is not measured"),
    "HALF_SHARE": ("assumption", "a trace counts as already 16-bit when half its compute-bound kernel time is"),
    "RESUME_TOLERANCE_NS": ("assumption", "1 ms: no measurement"),
}


def classify(name: str, comment: str, module: str = "") -> str:
    if name in OVERRIDES:
        return OVERRIDES[name][0]
    if DEFINITION_NAME.search(name):
        return "definition"
    if module.startswith("daydream/render/") or re.match(r"^_?TOP_|WIDTH|CHAR_W|_COLS$|_NAME$|_SPAN$|_BELOW$", name):
        return "presentation"
    if name == "PARAM" and re.search(r"user's what-if|^number of|^\d: |, default 1$|slice size|^depth factor|^problem-size factor|"
                                     r"^data-parallel ranks|^ZeRO stage|^tensor-parallel GPUs|^host CPU speed relative", comment):
        return "what-if"
    for kind, rx in KINDS:
        if rx.search(comment):
            return kind
    if LIMIT_NAME.search(name):
        return "limit"
    return "unsourced"


def constants() -> list[dict]:
    rows = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if "/testing/" in rel:  # the emulator's own values are the judge's, listed apart
            continue
        src = path.read_text(encoding="utf-8")
        lines = src.splitlines()
        tree = ast.parse(src)
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                target = node.targets[0] if isinstance(node, ast.Assign) else node.target
                if isinstance(target, ast.Name) and re.fullmatch(r"_?[A-Z][A-Z0-9_]*", target.id) and _has_number(node.value):
                    comment = (_comment_above(lines, node.lineno) + " " + _inline(lines, node)).strip()
                    if target.id in OVERRIDES:
                        comment = f"[audit: {OVERRIDES[target.id][1]}] {comment}"
                    rows.append(dict(module=rel, name=target.id, value=ast.unparse(node.value)[:48], comment=comment,
                                     kind=classify(target.id, comment, rel)))
        for call in ast.walk(tree):  # Param(default, "help ...") of an optimization
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "Param" and len(call.args) >= 2:
                d, h = call.args[0], call.args[1]
                if isinstance(d, ast.Constant) and isinstance(d.value, (int, float)) and not isinstance(d.value, bool) \
                        and isinstance(h, ast.Constant) and isinstance(h.value, str):
                    rows.append(dict(module=rel, name=f"Param@{call.lineno}", value=repr(d.value), comment=h.value,
                                     kind=classify("PARAM", h.value, rel)))
    return rows


def render(rows: list[dict]) -> str:
    by = {}
    for r in rows:
        by.setdefault(r["kind"], []).append(r)
    order = ("unsourced", "assumption", "fit", "per trace", "citation", "what-if", "definition", "presentation", "limit")
    out = ["# Numeric constants and their sources", "",
           "Written by `python scripts/constants.py` from the package's own comments (the `#:` lines above a",
           "constant, its inline comment, or a `Param`'s help text); the kinds and the rules that read them",
           "are in the script's docstring. Model constants are the `fit`, `per trace` and `citation` rows;",
           "`unsourced` rows are listed first: each is a model constant without a stated source, or a",
           "bound whose comment does not say it is one.", "",
           "| kind | count |", "|---|---|"]
    out += [f"| {k} | {len(by.get(k, []))} |" for k in order]
    for k in order:
        rs = by.get(k, [])
        if not rs:
            continue
        out += ["", f"## {k}", "", "| module | constant | value | source (its comment) |", "|---|---|---|---|"]
        for r in rs:
            c = r["comment"].replace("|", "\\|")
            c = c if len(c) <= 160 else c[:157] + "..."
            v = r["value"].replace("|", "\\|")
            out.append(f"| `{r['module'].removeprefix('daydream/')}` | `{r['name']}` | `{v}` | {c} |")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    text = render(constants())
    if "--check" in argv:
        ok = DOC.exists() and DOC.read_text(encoding="utf-8") == text
        if not ok:
            print("docs/constants.md is stale: run python scripts/constants.py", file=sys.stderr)
        return 0 if ok else 1
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
