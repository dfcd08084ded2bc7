"""A damaged numba cache (garbage index or data files) is ignored and rebuilt: the run compiles
in memory and succeeds, the next run rebuilds the cache (issue 37: a damaged cache made every run
exit 1 until it was deleted)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("numba")

KERNEL = textwrap.dedent('''
    import sys
    import numpy as np
    from daydream.util import jit

    def _helper(x):
        return x * 2

    def _kernel(a):
        s = 0
        for v in a:
            s += _helper_c(v)
        return s

    _helper_c = _helper
    k = jit.compiled_calling(globals(), "_helper_c", _helper, _kernel)
    print(jit.call(k, np.arange(5, dtype=np.int64)))
''')


def _run(tmp: Path, cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    return subprocess.run([sys.executable, str(tmp / "kern.py")], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_a_damaged_cache_is_rebuilt(tmp_path):
    (tmp_path / "kern.py").write_text(KERNEL)
    cache = tmp_path / "cache"
    first = _run(tmp_path, cache)
    assert first.returncode == 0 and first.stdout.strip() == "20", first.stderr
    files = [p for p in cache.rglob("*") if p.suffix in (".nbi", ".nbc")]
    assert files, "numba wrote no cache"
    for p in files:
        p.write_bytes(b"garbage, not a pickle")
    damaged = _run(tmp_path, cache)
    assert damaged.returncode == 0 and damaged.stdout.strip() == "20", damaged.stderr
    again = _run(tmp_path, cache)
    assert again.returncode == 0 and again.stdout.strip() == "20", again.stderr
    # the index was emptied and rewritten by a later compile: no garbage left in it
    assert all(p.read_bytes() != b"garbage, not a pickle" for p in cache.rglob("*.nbi"))
