"""Memory pages of a command's big arrays: numpy asks the kernel for transparent huge pages
(``madvise(MADV_HUGEPAGE)``) on every array of 4 MiB or more, which a command run makes and frees
by the hundred above 1 M tasks (temporaries of the report and the what-ifs).

With the kernel's THP ``defrag`` set to ``madvise`` (``/sys/kernel/mm/transparent_hugepage/defrag``:
Ubuntu's and most distributions' default), each first touch of such an array may compact memory
synchronously to find a 2 MiB page, in kernel time. On the 4 M-event nsys bench input
(1.58 M tasks, scripts/bench.py) the whole ``--opt all`` command took 6-8 s of system CPU with the
advice and 3-4 s without it, user CPU unchanged (13 s; two runs of each, 2-core shared VM); the
report stage alone 1.0-1.2 s of system CPU against 0.6 s. At 1 M events (arrays mostly under
4 MiB) the two are within noise. The commands (``daydream-analyze``) therefore turn the advice off
for their run (:func:`small_pages`); the library leaves numpy's setting alone.
Source: numpy's ``NUMPY_MADVISE_HUGEPAGE`` (numpy reference, "Environment variables"), the same
switch at import time; the kernel's Documentation/admin-guide/mm/transhuge.rst ("defrag").
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator


@contextmanager
def small_pages() -> Iterator[bool]:
    """Within the block, numpy gives no huge-page advice on new arrays; the previous setting is
    restored on exit. Yields whether the switch exists in this numpy (False: nothing changed)."""
    try:
        from numpy._core.multiarray import _get_madvise_hugepage, _set_madvise_hugepage
    except ImportError:
        try:  # numpy 1.x
            from numpy.core.multiarray import _get_madvise_hugepage, _set_madvise_hugepage
        except ImportError:  # a numpy without the switch: its default stays
            yield False
            return
    before = _get_madvise_hugepage()
    _set_madvise_hugepage(False)
    try:
        yield True
    finally:
        _set_madvise_hugepage(before)
