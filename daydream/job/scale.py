"""Running a job's per-rank work on a Dask distributed cluster (``--scheduler ADDRESS``).

Each rank's file is read, its table built, its graph built and its collectives found by a Dask
worker (:func:`daydream.job.load.read_rank`), where the file is: the workers must see the trace
paths (a shared filesystem). Only the per-rank result travels back: the graph's arrays and a
table slimmed to its metadata, CPU ops and annotation ranges. The coupled replay and the report run in
the coordinating process, exactly as on the local path, so the JSON reports are byte-identical.

Needs the ``dask`` extra (``pip install 'daydream[dask]'``: ``dask[distributed]``).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

from ..errors import UsageError


@contextmanager
def dask_mapper(address: str) -> Iterator[Callable]:
    """A ``mapper(fn, items) -> list`` that runs ``fn`` on the Dask cluster at ``address``
    (``tcp://host:8786``, or a scheduler file path ending in ``.json``), results in item order.

    Raises:
        UsageError: Dask is not installed, or the scheduler cannot be reached.
    """
    try:
        from distributed import Client
    except ImportError:
        raise UsageError("--scheduler needs Dask: pip install 'daydream[dask]'") from None
    try:
        client = Client(scheduler_file=address) if address.endswith(".json") else Client(address, timeout="20s")
    except (OSError, TimeoutError, ValueError) as e:
        raise UsageError(f"--scheduler {address}: cannot reach the Dask scheduler ({e})") from None
    try:
        yield lambda fn, items: client.gather(client.map(fn, items, pure=False))
    finally:
        client.close()
