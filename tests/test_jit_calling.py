"""daydream.util.jit.compiled_calling: one binding of a compiled kernel and the helper it calls by a
module-level name, used by the replay kernel (simulate/compiled.py) and the critical-path walk
(simulate/critical_walk.py)."""

from __future__ import annotations

import pytest

from daydream.util import jit
from daydream.simulate import compiled, critical_walk


def _helper(x):
    return x + 1


def _kernel(x):
    return _helper_c(x) * 2


_helper_c = _helper


def test_without_numba_nothing_is_bound(monkeypatch):
    monkeypatch.setattr(jit, "compiled", lambda fn: None)
    ns = {"_helper_c": _helper}
    assert jit.compiled_calling(ns, "_helper_c", _helper, _kernel) is None
    assert ns["_helper_c"] is _helper


def test_the_helper_is_bound_before_the_kernel_is_compiled(monkeypatch):
    seen = []

    def fake(fn):
        seen.append((fn.__name__, dict(ns)["_helper_c"]))
        return ("compiled", fn)
    monkeypatch.setattr(jit, "compiled", fake)
    ns = {"_helper_c": _helper}
    assert jit.compiled_calling(ns, "_helper_c", _helper, _kernel) == ("compiled", _kernel)
    assert ns["_helper_c"] == ("compiled", _helper)
    assert seen == [("_helper", _helper), ("_kernel", ("compiled", _helper))]


@pytest.mark.parametrize("mod, name, helper", [(compiled, "_finish_c", "_finish"), (critical_walk, "_put_c", "_put")])
def test_both_kernels_bind_their_helper(mod, name, helper):
    k = mod.kernel()
    if jit.compiled(getattr(mod, helper)) is None:
        assert k is None and getattr(mod, name) is getattr(mod, helper)
    else:
        assert k is jit.compiled(mod._kernel) and getattr(mod, name) is jit.compiled(getattr(mod, helper))


def test_first_pair_is_bound_in_each_kernels_module():
    """events.threads._with_first_pair binds the compiled binary search in the module of the kernel
    it compiles: events.threads (call_threads' passes) and mapping.grouping (_group_contexts)."""
    from daydream.events import threads
    from daydream.mapping import grouping

    for mod, kernel in ((threads, threads._call_threads_kernel), (grouping, grouping._group_contexts)):
        k = threads._with_first_pair(kernel)
        if jit.compiled(threads._first_pair) is None:
            assert k is None and mod._first_pair_c is threads._first_pair
        else:
            assert k is jit.compiled(kernel) and mod._first_pair_c is jit.compiled(threads._first_pair)
