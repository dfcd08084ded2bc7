"""The files each extension touches, as docs/model.md ("Extending daydream") says: a toy
optimization and a toy format added to a copy of the package, touching only the files listed,
are found and run; a built-in edge kind is named only in its rule, its builder stage and the
places listed here with the reason."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from daydream.formats import ADAPTER_MODULES, FormatReader
from daydream.graph.edges import EdgeKind
from daydream.optimizations import load_all

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "daydream"
FIXTURE = ROOT / "fixtures" / "train_step.json.gz"

TOY_OPT = textwrap.dedent('''
    """A toy what-if: every kernel twice as fast (the extension-contract test)."""
    from ..transform import scale, select
    from . import Optimization, Param, register

    def _apply(graph, p):
        return scale(graph, select(graph, kind="kernel"), p["factor"]), "kernels scaled"

    register(Optimization("toy-whatif", "every kernel scaled", _apply, {"factor": Param(0.5, "scale factor")}, what_if=True))
''')

TOY_FORMAT = textwrap.dedent('''
    """A toy format: a file starting with TOYTRACE holds no events (the extension-contract test)."""
    from ..events.table import EventTable
    NAME = "toy"
    DESCRIPTION = "toy trace (TOYTRACE header)"

    def sniff(head, path):
        return head.startswith(b"TOYTRACE")

    def load(path, *, strict=False):
        return EventTable.empty() if hasattr(EventTable, "empty") else None
''')


def _copy_package(tmp_path: Path) -> Path:
    dst = tmp_path / "pkg"
    shutil.copytree(PACKAGE, dst / "daydream", ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def _run(root: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "DAYDREAM_JIT": "off"})


@pytest.mark.slow
def test_an_optimization_is_one_module(tmp_path):
    root = _copy_package(tmp_path)
    (root / "daydream" / "optimizations" / "toy_whatif.py").write_text(TOY_OPT)
    r = _run(root, "import sys; from daydream.cli import main; "
                   f"sys.exit(main([{str(FIXTURE)!r}, '--details', '--opt', 'toy-whatif:factor=0.5']))")
    assert r.returncode == 0, r.stderr
    assert "toy-whatif" in r.stdout and "kernels scaled" in r.stdout
    listed = _run(root, "from daydream.cli import main; main(['--list-opts'])")
    assert "toy-whatif" in listed.stdout


@pytest.mark.slow
def test_a_format_is_one_module_and_its_name_in_the_sniffing_order(tmp_path):
    root = _copy_package(tmp_path)
    fmt = root / "daydream" / "formats"
    (fmt / "toy.py").write_text(TOY_FORMAT)
    init = fmt / "__init__.py"
    text = init.read_text()
    new = re.sub(r'ADAPTER_MODULES = \(', 'ADAPTER_MODULES = ("toy", ', text, count=1)
    assert new != text
    init.write_text(new)
    trace = tmp_path / "t.toy"
    trace.write_bytes(b"TOYTRACE\n")
    r = _run(root, f"from daydream.formats import detect; print(detect({str(trace)!r}).NAME)")
    assert r.returncode == 0 and r.stdout.strip() == "toy", r.stderr


def test_every_adapter_is_a_format_reader():
    import importlib

    mods = [importlib.import_module(f"daydream.formats.{m}") for m in ADAPTER_MODULES]
    assert len(mods) == len(ADAPTER_MODULES) >= 4
    for m in mods:
        assert isinstance(m, FormatReader), m.__name__


def test_an_optimization_names_itself_in_its_own_module_only():
    """An optimization's name appears (as code, not in a docstring) only in its own module, except
    where another stage refers to it on purpose."""
    on_purpose = {
        ("dataloader", "analysis.py"): "the answer suggests it for a data-loading bound",
        ("world-size", "job/whatif.py"): "a job refuses world-size on some ranks only",
    }
    #: what-ifs named by an ordinary word that other modules use as a column or parameter name
    #: ("seq" of the allocator's events, "hidden" communication, "shape" of a kernel): not checked
    ordinary_words = {"shape", "seq", "hidden", "layers", "batch"}
    reg = {k: v for k, v in load_all().items() if k not in ordinary_words}
    assert len(reg) >= 10
    texts = {p: _code_strings(p) for p in PACKAGE.rglob("*.py")}
    for name, opt in reg.items():
        own = PACKAGE / (opt.apply.__module__.split(".", 1)[1].replace(".", "/") + ".py")
        for p, strings in texts.items():
            if p == own:
                continue
            rel = str(p.relative_to(PACKAGE))
            if any(s == name or s.startswith(name + ":") for s in strings):
                assert (name, rel) in on_purpose, f"{name} is named in {rel}"


def _code_strings(path: Path) -> list[str]:
    import ast

    tree = ast.parse(path.read_text())
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs]


#: where a built-in edge kind may be named outside graph/edges.py and the builder stages, and why
KIND_USES = {
    "simulate/replay.py": "the fast replay specializes the three common shapes (thread, stream, launch)",
    "simulate/launch_order.py": "a stream shared by threads is rebuilt in launch order (stream edges)",
    "transform/insertion.py": "inserted tasks get their lane order, launch and waits",
    "transform/lanes.py": "a new thread's lane order",
    "transform/dependencies.py": "latent cross-stream waits surface when a wait is removed",
    "optimizations/comm_common.py": "communication what-ifs re-time the waits on collectives",
    "optimizations/remove_syncs.py": "the what-if removes blocking waits",
    "optimizations/dataloader.py": "the what-if re-times the workers' hand-overs",
    "optimizations/common.py": "the launch queue of inserted launches",
    "optimizations/grad_scaler.py": "the inserted unscale/update kernels keep the waits of the optimizer step",
    "optimizations/shape_depth.py": "copied layers keep their in-block waits and count their hand-overs",
    "optimizations/sharding.py": "an inserted all-gather or reduce-scatter is waited for across streams (prefetch)",
    "optimizations/tensor_parallel.py": "what waited for a row-parallel GEMM also waits for the all-reduce after it",
    "report/make.py": "the report counts waits by kind",
    "report/trust.py": "the trust verdict counts unlinked waits",
}


def test_edge_kinds_are_named_only_in_their_rule_their_stage_and_the_listed_places():
    allowed_dirs = ("graph/edges.py", "graph/build/", "graph/queue.py")
    seen_uses = set()
    for p in sorted(PACKAGE.rglob("*.py")):
        rel = str(p.relative_to(PACKAGE))
        names = set(re.findall(r"EdgeKind\.([A-Z_]+)", p.read_text()))
        if not names or rel.startswith(allowed_dirs) or rel.startswith("testing/"):
            continue
        assert rel in KIND_USES, f"{rel} names edge kinds {sorted(names)}: a new kind would have to touch it"
        seen_uses.add(rel)
    assert len(EdgeKind) >= 8 and seen_uses, "no module was checked"
    stale = set(KIND_USES) - seen_uses
    assert not stale, f"listed but no longer naming an edge kind: {sorted(stale)}"
