"""The peers' tables (:mod:`daydream.report.tables`) as text (the top rows, at most 100 columns)
and as CSV files (every row; ``--csv DIR``)."""

from __future__ import annotations

import csv
import os
import re

import msgspec

from ..report.tables import ApiRow, CommRow, KernelRow, OpRow, Tables
from ..util.display import CUT, terminal_text

#: rows of each table in the text report (all of them are in --json and --csv)
TOP_ROWS = 8
#: the widest line the text tables print
WIDTH = 100


def _ms(ns: int) -> str:
    return f"{ns / 1e6:,.3f}"


def _us(ns: int) -> str:
    return f"{ns / 1e3:,.1f}"


def _us_short(ns: int) -> str:
    """us with one decimal below 1 ms, whole us above (a column of at most 8 characters up to 10 s)."""
    return f"{ns / 1e3:,.1f}" if ns < 1_000_000 else f"{ns / 1e3:,.0f}"


def _name(s: str, width: int) -> str:
    s = terminal_text(s)
    return s if len(s) <= width else s[: width - len(CUT)] + CUT


#: wrapper kernels whose name says nothing alone: their first template argument names the work
_GENERIC = re.compile(r"^(Kernel\d*|kernel|elementwise_kernel|vectorized_elementwise_kernel|unrolled_elementwise_kernel|"
                      r"device_kernel|multi_tensor_apply_kernel|reduce_kernel|index_elementwise_kernel)$")
_TYPE_WORDS = frozenset({"float", "double", "int", "long", "unsigned", "char", "bool", "short", "void", "signed", "const",
                         "Half", "BFloat16", "half", "bfloat16", "true", "false", "lambda", "anonymous", "namespace"})


def _top_split(s: str, sep: str) -> list[str]:
    """``s`` split at ``sep`` outside <...> and (...)."""
    out, depth, cur = [], 0, []
    for ch in s:
        depth += ch in "<(" and 1 or (ch in ">)" and -1 or 0)
        if ch == sep and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


def kernel_label(name: str) -> str:
    """A kernel name as a person tells kernels apart: ``void``, namespaces and the argument list
    dropped; a generic wrapper (``cutlass::Kernel2<...>``, ATen's ``vectorized_elementwise_kernel<4,
    BinaryFunctor<..., MulFunctor<float>>>``) shown with what its first template argument names
    (``Kernel2<cutlass_80_tensorop_..._align8>``, ``vectorized_elementwise_kernel<MulFunctor>``).
    The full name is in --json and --csv."""
    s = re.sub(r"^void\s+", "", name.strip())
    if s.endswith(")"):
        depth = 0
        for i in range(len(s) - 1, -1, -1):
            depth += {")": 1, "(": -1, ">": 1, "<": -1}.get(s[i], 0)
            if depth == 0:
                s = s[:i] if i > 0 else s
                break
    lt = s.find("<")
    base, args = (s, "") if lt < 0 else (s[:lt], s[lt + 1: s.rfind(">")] if ">" in s else s[lt + 1:])
    short = base.rsplit("::", 1)[-1]
    if not args or not _GENERIC.match(short):
        return short + (s[lt:] if lt >= 0 else "")
    for a in _top_split(args, ","):
        words = [w for w in re.findall(r"[A-Za-z_]\w*", a) if w not in _TYPE_WORDS and not re.search(re.escape(w) + r"\s*::", a)]
        if words:
            named = [w for w in words if re.search(r"Functor|Op$|_op$|_kernel$|gemm|conv", w)]
            return f"{short}<{(named or words)[-1]}>"
    return short


def _elide(s: str, width: int) -> str:
    """``s`` cut in the middle to ``width`` characters (kernel names differ at both ends)."""
    s = terminal_text(s)
    if len(s) <= width:
        return s
    keep = width - len(CUT)
    return s[: (keep + 1) // 2] + CUT + s[len(s) - keep // 2:]


def _line(name: str, width: int, cells: list[tuple[str, int]]) -> str:
    return "  " + f"{_name(name, width):<{width}}" + "".join(f"{c:>{w}}" for c, w in cells)


def _more(n: int, what: str) -> list[str]:
    return [f"  ... {n - TOP_ROWS:,} more {what} (--json, --csv)"] if n > TOP_ROWS else []


def kernels_text(rows: list[KernelRow]) -> list[str]:
    if not rows:
        return []
    w = 38  # 2 + 38 + 50 + 10 columns: WIDTH
    cols = [("calls", 7), ("total ms", 10), ("mean us", 9), ("min us", 9), ("max us", 9), ("GPU %", 6)]
    out = ["top GPU tasks [launching op] (measured; full names in --json, --csv)", _line("kernel [op]", w, cols) + "  class"]
    for k in rows[:TOP_ROWS]:
        op = _elide(k.op.removeprefix("aten::"), 12) if k.op else ""
        label = _elide(kernel_label(k.name), w - len(op) - 3 if op else w)
        out.append(_line(f"{label} [{op}]" if op else label, w, [(f"{k.calls:,}", 7), (_ms(k.total_ns), 10), (_us_short(k.mean_ns), 9),
                                                                    (_us_short(k.min_ns), 9), (_us_short(k.max_ns), 9),
                                                                    (f"{k.gpu_pct:.1f}", 6)]) + "  " + k.cls[:8])
    return out + _more(len(rows), "rows")


def ops_text(rows: list[OpRow]) -> list[str]:
    if not rows:
        return []
    w = 44
    cols = [("calls", 8), ("CPU ms", 11), ("self ms", 11), ("GPU ms", 11), ("launches", 10)]
    out = ["top framework ops by CPU time (measured; GPU: time of the tasks they launched)", _line("op", w, cols)]
    for o in rows[:TOP_ROWS]:
        out.append(_line(o.name, w, [(f"{o.calls:,}", 8), (_ms(o.cpu_total_ns), 11), (_ms(o.cpu_self_ns), 11), (_ms(o.gpu_ns), 11),
                                     (f"{o.launches:,}", 10)]))
    return out + _more(len(rows), "ops")


def api_text(rows: list[ApiRow]) -> list[str]:
    if not rows:
        return []
    w = 36
    cols = [("calls", 9), ("total ms", 11), ("mean us", 10), ("min us", 10), ("max us", 11), ("%", 7)]
    out = ["CUDA API calls (measured)", _line("call", w, cols)]
    for a in rows[:TOP_ROWS]:
        out.append(_line(a.name, w, [(f"{a.calls:,}", 9), (_ms(a.total_ns), 11), (_us(a.mean_ns), 10), (_us(a.min_ns), 10),
                                     (_us(a.max_ns), 11), (f"{a.pct:.1f}", 7)]))
    return out + _more(len(rows), "calls")


def comm_text(rows: list[CommRow]) -> list[str]:
    if not rows:
        return []
    w = 16
    cols = [("size MiB", 11), ("count", 8), ("total ms", 11), ("busbw GB/s", 12), ("overlap %", 11)]
    out = ["collectives by kind and size (measured; overlap: with compute on the same GPU)", _line("kind", w, cols)]
    for c in rows[:TOP_ROWS]:
        size = f"{c.size_bytes / 2**20:,.2f}" if c.size_bytes >= 0 else "unknown"
        bw = f"{c.busbw_median_gbps:,.2f}" if c.busbw_median_gbps is not None else "-"
        out.append(_line(c.op, w, [(size, 11), (f"{c.count:,}", 8), (_ms(c.total_ns), 11), (bw, 12), (f"{c.overlap_pct:.1f}", 11)]))
    return out + _more(len(rows), "rows")


def tables_text(t: Tables | None) -> list[list[str]]:
    """The text tables, one section each (empty ones left out)."""
    if t is None:
        return []
    return [s for s in (kernels_text(t.kernels), ops_text(t.ops), api_text(t.cuda_api), comm_text(t.communication)) if s]


def _cell(v):
    """A CSV cell: None empty; a text (a name from the trace is untrusted) with each non-printable
    character as its escape (:func:`~daydream.util.display.terminal_text`, not cut: ESC/BEL bytes
    would reach the terminal of whoever ``cat``s the file), then, where a spreadsheet would run it
    as a formula (``=``, ``+``, ``-``, ``@`` first), kept as text by a leading apostrophe."""
    if v is None:
        return ""
    if isinstance(v, str):
        v = terminal_text(v)
        if v[:1] in ("=", "+", "-", "@"):
            return "'" + v
    return v


#: file name of each table under --csv DIR, and the rows' struct
CSV_FILES = {"kernels.csv": ("kernels", KernelRow), "ops.csv": ("ops", OpRow), "cuda_api.csv": ("cuda_api", ApiRow),
             "communication.csv": ("communication", CommRow)}


def write_csv(t: Tables, folder: str) -> list[str]:
    """Every row of each table as ``folder/NAME.csv`` (one header line: the struct's field names;
    times in ns as in --json); the paths written. Names are written whole (CSV quoting), their
    non-printable characters as escapes (as on the terminal), so a spreadsheet reads them whole."""
    os.makedirs(folder, exist_ok=True)
    out = []
    for fname, (attr, struct) in CSV_FILES.items():
        fields = [f.name for f in msgspec.structs.fields(struct)]
        path = os.path.join(folder, fname)
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(fields)
            for row in getattr(t, attr):
                w.writerow([_cell(getattr(row, k)) for k in fields])
        out.append(path)
    return out
