"""Architecture rules of the ``daydream`` package, checked on its source with ``ast``.

(a) No import cycle among daydream modules (module-level and function-level imports alike).
(b) Imports point down the pipeline: a module imports only from its own layer or a lower one
    (:data:`LAYERS`). :mod:`daydream.testing` (test oracles) may import anything, and nothing
    outside it may import it.
(c) No deferred (function-level) import of a daydream module, except in ``daydream/cli.py``
    (which keeps its start-up light). Standard-library and third-party imports are not checked.
(d) No function longer than :data:`MAX_FUNCTION_LINES`, except :data:`ALLOWED_LONG` and the
    debt in :data:`PENDING_SPLIT`.

:data:`KNOWN_VIOLATIONS` and :data:`PENDING_SPLIT` list debt, not permissions: an entry that no
longer occurs fails the test as well, so whoever pays a debt deletes its entry.
"""

from __future__ import annotations

import ast
import fnmatch
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "daydream"
ROOT = "daydream"
TESTING = "daydream.testing"
DEFERRED_IMPORTS_ALLOWED_IN = frozenset({"daydream.cli"})

# The layers, bottom to top; a module may import from its own layer and the layers below it.
# The order is the pipeline: trace formats -> event table -> mapping -> graph -> transformations
# -> replay -> report -> facade. The table definition (``events``) sits below the adapters that
# fill it (``formats`` imports it, not the other way round), with the errors and the CUDA API
# vocabulary under everything. A member names a module, or a package with all its submodules;
# ``*`` globs. Every daydream module outside daydream.testing must be in exactly one layer, and
# every member must name something that exists.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("base", ("daydream.errors", "daydream.util")),
    # the event table, the CUDA API vocabulary and the launch-link ids read straight off it
    ("events", ("daydream.events",)),
    ("formats", ("daydream.formats",)),
    ("mapping", ("daydream.mapping",)),
    # the kernel classifier classifies graph tasks (kernel_info takes a TaskGraph)
    ("graph", ("daydream.graph",)),
    # the cost models (GPU specs, kernel time, collective cost) serve the transformations
    ("transform", ("daydream.costmodel", "daydream.transform", "daydream.optimizations")),
    ("simulate", ("daydream.simulate",)),
    ("report", ("daydream.report", "daydream.render")),
    ("facade", ("daydream.analysis", "daydream.cli", "daydream.job", "daydream.kernel_tool", ROOT)),
)

# Known violations as (rule, importer, imported module), rule one of "cycle", "layer",
# "deferred", "testing". Only the graph-core files (GRAPH_CORE) may have entries here: to be
# removed by the graph-core redesign. Empty, the goal: the redesign (3f78e13) removed the ones it
# had (the simulate <-> schedule cycle, transform importing simulate and schedule, and deferred
# imports in simulate, transform and critical_path).
KNOWN_VIOLATIONS: frozenset[tuple[str, str, str]] = frozenset()
GRAPH_CORE = ("daydream.graph", "daydream.simulate", "daydream.simulate.critical_path", "daydream.transform")  # schedule.py is now simulate/priority.py

MAX_FUNCTION_LINES = 80  # from the ``def`` line to the last line of the body, decorators not counted

# Long on purpose, with the reason.
ALLOWED_LONG: dict[str, str] = {
    "daydream.simulate.replay.replay": "the replay hot loop (was simulate._simulate_fast): inlined for speed",
}

# Functions over the limit today, to be split; delete an entry when its function is split.
PENDING_SPLIT: frozenset[str] = frozenset()


# ------------------------------------------------------------------------------ the scan ----


@dataclass(frozen=True)
class Module:
    name: str
    path: str  #: for messages
    is_package: bool
    tree: ast.Module


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  #: the daydream module imported
    line: int
    deferred: bool  #: inside a function


def parse_modules(sources: dict[str, tuple[bool, str]]) -> dict[str, Module]:
    """``{module name: (is_package, source)}`` parsed."""
    return {name: Module(name, name, is_pkg, ast.parse(src)) for name, (is_pkg, src) in sources.items()}


@cache
def package_modules() -> dict[str, Module]:
    """Every module of the daydream package on disk, by dotted name."""
    out = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts.pop()
        name = ".".join(parts)
        rel = str(path.relative_to(PACKAGE_DIR.parent))
        out[name] = Module(name, rel, is_pkg, ast.parse(path.read_text(encoding="utf-8"), filename=rel))
    return out


def _is_daydream(name: str) -> bool:
    return name == ROOT or name.startswith(ROOT + ".")


def _from_base(mod: Module, node: ast.ImportFrom) -> str:
    """The absolute module a ``from X import ...`` reads from."""
    if node.level == 0:
        return node.module or ""
    pkg = mod.name.split(".") if mod.is_package else mod.name.split(".")[:-1]
    base = pkg[: len(pkg) - (node.level - 1)]
    return ".".join(base + (node.module.split(".") if node.module else []))


def imports_of(mod: Module, modules: dict[str, Module]) -> tuple[list[Import], list[str]]:
    """The daydream imports of ``mod``, and messages for those that name no module."""
    found: list[Import] = []
    unresolved: list[str] = []

    def add(target: str, line: int, deferred: bool) -> None:
        if target not in modules:
            msg = f"{mod.path}:{line}: imports {target}, which is no daydream module"
            if msg not in unresolved:
                unresolved.append(msg)
        elif target != mod.name and Import(mod.name, target, line, deferred) not in found:
            found.append(Import(mod.name, target, line, deferred))

    def visit(node: ast.AST, deferred: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if _is_daydream(alias.name):
                        add(alias.name, child.lineno, deferred)
            elif isinstance(child, ast.ImportFrom):
                base = _from_base(mod, child)
                if _is_daydream(base):
                    for alias in child.names:
                        sub = f"{base}.{alias.name}"
                        add(sub if sub in modules else base, child.lineno, deferred)  # a module or a name in base
            visit(child, deferred or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(mod.tree, False)
    return found, unresolved


def all_imports(modules: dict[str, Module]) -> tuple[list[Import], list[str]]:
    found, unresolved = [], []
    for mod in modules.values():
        f, u = imports_of(mod, modules)
        found += f
        unresolved += u
    return found, unresolved


def _matches(member: str, module: str) -> bool:
    if "*" in member:
        return fnmatch.fnmatchcase(module, member)
    return module == member or (member != ROOT and module.startswith(member + "."))


def _in_testing(module: str) -> bool:
    return module == TESTING or module.startswith(TESTING + ".")


def layer_problems(modules: dict[str, Module], layers=LAYERS) -> list[str]:
    """Modules in no layer or in two, and members that name no module."""
    out = []
    for m in sorted(modules):
        if _in_testing(m):
            continue
        hits = [name for name, members in layers if any(_matches(x, m) for x in members)]
        if len(hits) != 1:
            out.append(f"{m} is in {len(hits)} layers {hits}: give it exactly one in LAYERS")
    for name, members in layers:
        for x in members:
            if not any(_matches(x, m) for m in modules):
                out.append(f"LAYERS[{name!r}] member {x!r} matches no module: delete it")
    return out


def layer_index(module: str, layers=LAYERS) -> int:
    return next(i for i, (_, members) in enumerate(layers) if any(_matches(x, module) for x in members))


def cycle_edges(imports: list[Import]) -> set[tuple[str, str]]:
    """The import edges that lie on a cycle (edges inside a strongly connected component)."""
    succ: dict[str, set[str]] = {}
    for i in imports:
        succ.setdefault(i.importer, set()).add(i.target)
        succ.setdefault(i.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    comp: dict[str, int] = {}
    stack: list[str] = []
    counter = 0

    def strongconnect(v: str) -> None:  # Tarjan; the graph has a few dozen nodes
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        for w in sorted(succ[v]):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w not in comp:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            while True:
                w = stack.pop()
                comp[w] = index[v]
                if w == v:
                    break

    for v in sorted(succ):
        if v not in index:
            strongconnect(v)
    return {(a, b) for a in succ for b in succ[a] if comp[a] == comp[b]}


def violations(modules: dict[str, Module], imports: list[Import], layers=LAYERS) -> dict[tuple[str, str, str], list[str]]:
    """``{(rule, importer, imported): [where, ...]}`` over every rule of (a), (b) and (c)."""
    out: dict[tuple[str, str, str], list[str]] = {}

    def add(rule: str, i: Import, why: str) -> None:
        out.setdefault((rule, i.importer, i.target), []).append(f"{modules[i.importer].path}:{i.line}: {why}")

    on_cycle = cycle_edges(imports)
    for i in imports:
        if (i.importer, i.target) in on_cycle:
            add("cycle", i, f"{i.importer} -> {i.target} is on an import cycle")
        if i.deferred and i.importer not in DEFERRED_IMPORTS_ALLOWED_IN:
            add("deferred", i, f"deferred import of {i.target} inside a function: import it at module level")
        if _in_testing(i.importer):
            continue
        if _in_testing(i.target):
            add("testing", i, f"{i.target} holds test oracles; the package must not import it")
        elif layer_index(i.target, layers) > layer_index(i.importer, layers):
            add("layer", i, f"layer {layers[layer_index(i.importer, layers)][0]!r} imports from the later "
                            f"layer {layers[layer_index(i.target, layers)][0]!r} ({i.target})")
    return out


def function_lengths(modules: dict[str, Module]) -> dict[str, int]:
    """Lines of every function and method, by qualified name (``module.Class.method``, nested
    functions under their parent)."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                q = f"{prefix}.{child.name}"
                out[q] = child.end_lineno - child.lineno + 1
                visit(child, q)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}.{child.name}")
            else:
                visit(child, prefix)

    for mod in modules.values():
        visit(mod.tree, mod.name)
    return out


def _debt_report(found: dict, known: frozenset, what: str) -> str:
    new = sorted(set(found) - known)
    stale = sorted(known - set(found))
    lines = []
    if new:
        lines.append(f"new {what}:")
        for k in new:
            lines += [f"  {k}"] + [f"    {w}" for w in found[k]]
    if stale:
        lines.append(f"no longer occurring, delete from the known set ({what}):")
        lines += [f"  {k}" for k in stale]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the rules ----


@cache
def _scan():
    modules = package_modules()
    imports, unresolved = all_imports(modules)
    return modules, imports, unresolved


@pytest.mark.slow
def test_the_scan_sees_the_package():
    modules, imports, _ = _scan()
    assert {"daydream", "daydream.analysis", "daydream.cli", "daydream.events.table", "daydream.testing.emulator"} <= set(modules)
    edges = {(i.importer, i.target, i.deferred) for i in imports}
    assert ("daydream.analysis", "daydream.report.make", False) in edges
    assert ("daydream.cli", "daydream.analysis", True) in edges  # the allowed deferred imports


def test_every_daydream_import_names_a_module():
    _, _, unresolved = _scan()
    assert not unresolved, "\n".join(unresolved)


def test_every_module_has_one_layer():
    modules, _, _ = _scan()
    problems = layer_problems(modules)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("rules", [("cycle",), ("layer", "testing"), ("deferred",)], ids=["cycles", "layers", "deferred"])
def test_import_rules(rules):
    modules, imports, unresolved = _scan()
    if unresolved or layer_problems(modules):
        pytest.fail("see test_every_daydream_import_names_a_module and test_every_module_has_one_layer")
    found = {k: v for k, v in violations(modules, imports).items() if k[0] in rules}
    known = frozenset(k for k in KNOWN_VIOLATIONS if k[0] in rules)
    report = _debt_report(found, known, "import violations")
    assert not report, report


def test_known_violations_are_graph_core_debt_only():
    assert {k[0] for k in KNOWN_VIOLATIONS} <= {"cycle", "layer", "deferred", "testing"}
    outside = [k for k in KNOWN_VIOLATIONS if not any(_matches(g, k[1]) for g in GRAPH_CORE)]
    assert not outside, f"KNOWN_VIOLATIONS may only hold graph-core debt: {outside}"


def test_no_function_is_too_long():
    modules, _, _ = _scan()
    lengths = function_lengths(modules)
    long_ = {q: n for q, n in lengths.items() if n > MAX_FUNCTION_LINES}
    missing = sorted(set(ALLOWED_LONG) - set(long_))
    assert not missing, f"ALLOWED_LONG names functions that are gone or short now, delete them: {missing}"
    assert not set(ALLOWED_LONG) & PENDING_SPLIT
    found = {q: [f"{n} lines (limit {MAX_FUNCTION_LINES})"] for q, n in long_.items() if q not in ALLOWED_LONG}
    report = _debt_report(found, PENDING_SPLIT, "functions over the limit (PENDING_SPLIT)")
    assert not report, report


# ------------------------------------------------------- the checker on a made-up package ----

_FAKE_LAYERS = (("low", ("pkg.a",)), ("high", ("pkg.b", "pkg.sub")), ("top", ("pkg",)))
_FAKE = {
    "pkg": (True, ""),
    "pkg.a": (False, "from . import b\n"),  # layer violation, and a cycle with b
    "pkg.b": (False, "import os\n\ndef f():\n    from .a import x\n    import heapq\n"),  # deferred
    "pkg.sub": (True, "from .leaf import y\nfrom .. import testing\n"),
    "pkg.sub.leaf": (False, "from ..a import z\n"),
    "pkg.testing": (True, "from ..b import f\n"),
}


def test_checker_on_a_made_up_package(monkeypatch):
    monkeypatch.setitem(globals(), "ROOT", "pkg")
    monkeypatch.setitem(globals(), "TESTING", "pkg.testing")
    modules = parse_modules(_FAKE)
    imports, unresolved = all_imports(modules)
    assert not unresolved
    assert {(i.importer, i.target, i.deferred) for i in imports} == {
        ("pkg.a", "pkg.b", False), ("pkg.b", "pkg.a", True), ("pkg.sub", "pkg.sub.leaf", False),
        ("pkg.sub", "pkg.testing", False), ("pkg.sub.leaf", "pkg.a", False), ("pkg.testing", "pkg.b", False),
    }
    assert layer_problems(modules, _FAKE_LAYERS) == []
    assert set(violations(modules, imports, _FAKE_LAYERS)) == {
        ("cycle", "pkg.a", "pkg.b"), ("cycle", "pkg.b", "pkg.a"), ("layer", "pkg.a", "pkg.b"),
        ("deferred", "pkg.b", "pkg.a"), ("testing", "pkg.sub", "pkg.testing"),
    }
    assert function_lengths(modules) == {"pkg.b.f": 3}


# ------------------------------------------------------- no trace read after the build ----
#: packages that work on a built graph only: the trace's facts they need are in ``TaskGraph.facts``
#: (daydream/graph/facts.py), never the event table (``graph.table``) or a file
GRAPH_ONLY = ("daydream.optimizations", "daydream.costmodel")
#: calls that read a file or a trace (by the name called, bare or as an attribute)
FILE_READS = frozenset({"open", "load", "loadtxt", "fromfile", "read_text", "read_bytes", "load_trace", "read_launch_data",
                        "launch_data_of", "read_comm_args", "comm_args_of", "comm_args_of_table", "open_maybe_gzip",
                        "read_maybe_gzip", "connect"})


def trace_reads(mod: Module) -> list[str]:
    """Where ``mod`` reads the event table (an attribute ``.table``; the ``events.table`` module
    imported is not a read) or opens a file (:data:`FILE_READS`)."""
    out = []
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.Attribute) and node.attr == "table":
            out.append((node.lineno, f"{mod.path}:{node.lineno}: reads .table"))
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name in FILE_READS:
                out.append((node.lineno, f"{mod.path}:{node.lineno}: calls {name}()"))
    return [m for _, m in sorted(out)]


def test_what_ifs_read_no_table_and_no_file():
    found = [m for name, mod in package_modules().items() if any(_matches(p, name) for p in GRAPH_ONLY) for m in trace_reads(mod)]
    assert not found, "what the what-ifs need from the trace is in TaskGraph.facts (daydream/graph/facts.py):\n" + "\n".join(found)


def test_trace_read_checker():
    mod = parse_modules({"pkg.x": (False, "from ..events.table import Kind\nimport numpy as np\n"
                                           "def f(g, p):\n    a = g.table.meta\n    b = np.load(p)\n    with open(p) as h:\n        pass\n"
                                           "    return g.facts.launch\n")})["pkg.x"]
    assert trace_reads(mod) == ["pkg.x:4: reads .table", "pkg.x:5: calls load()", "pkg.x:6: calls open()"]
