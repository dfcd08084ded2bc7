"""Running a job's per-rank work on a Dask distributed cluster (``--scheduler ADDRESS``).

Each rank's file is read, its table built, its graph built and its collectives found by a Dask
worker (:func:`daydream.job.load.read_rank`), where the file is: the workers must see the trace
paths (a shared filesystem). Only the per-rank result travels back: the graph's arrays and a
table slimmed to its metadata, CPU ops and annotation ranges. The coupled replay and the report run in
the coordinating process, exactly as on the local path, so the JSON reports are byte-identical.

Every way the cluster can fail is one error line (:class:`~daydream.errors.UsageError`, exit 2),
never a hang or a traceback (issue 37):

* the address: ``tcp://HOST:PORT``, or a scheduler file (``dask scheduler --scheduler-file``)
  checked before use: a regular file (a FIFO hung), at most :data:`MAX_SCHEDULER_FILE_BYTES`,
  JSON with a string ``address`` starting ``tcp://``;
* the scheduler: a TCP connect within :data:`CONNECT_TIMEOUT_S`, then its handshake (the first
  message a Dask server sends, an 8-byte little-endian length and that many bytes) within
  :data:`HANDSHAKE_TIMEOUT_S`, at most :data:`MAX_HANDSHAKE_BYTES` (a server that accepted and
  never answered hung; one speaking HTTP or sending a huge length ended in MemoryError);
* workers: at least one within :data:`WORKER_WAIT_S` (a scheduler with none hung);
* during the run: the scheduler lost, or no worker left for :data:`WORKER_WAIT_S` (the only
  worker killed hung the run for ever), or a worker dying on a rank (Dask's ``KilledWorker``).

Dask's own log lines stay off stderr unless ``--debug``.

Trust: a Dask cluster runs code sent to it (pickled functions) with the rights of its workers;
connect only to a cluster you control (docs/jobs.md, "Trust"). Each rank's result comes back as
msgpack bytes of plain values (:mod:`daydream.job.wire`), rebuilt into an allow-list of daydream's
own classes, never unpickled by daydream.

Needs the ``dask`` extra (``pip install 'daydream[dask]'``: ``dask[distributed]``).
"""

from __future__ import annotations

import logging
import os
import socket
import stat
import struct
import time
from contextlib import contextmanager
from typing import Callable, Iterator

import msgspec

from ..errors import DaydreamError, UsageError
from .wire import ClusterError, call, result, safe_exception

#: seconds to open the TCP connection to the scheduler
CONNECT_TIMEOUT_S = 10.0
#: seconds for the scheduler's first message once connected (a Dask server sends it at once)
HANDSHAKE_TIMEOUT_S = 10.0
#: largest first message accepted from a scheduler: 1 MiB (a Dask handshake is ~200 bytes of msgpack)
MAX_HANDSHAKE_BYTES = 1 << 20
#: seconds to wait for a worker: at the start, and whenever the cluster has none left mid-run
WORKER_WAIT_S = 30.0
#: seconds between two looks at the cluster while the ranks are read
POLL_S = 0.5
#: largest scheduler file read: 64 KiB (Dask writes ~1 KB)
MAX_SCHEDULER_FILE_BYTES = 64 << 10


class _SchedulerFile(msgspec.Struct):
    address: str


def scheduler_address(address: str) -> str:
    """The ``tcp://HOST:PORT`` address ``address`` names: itself, or the ``address`` field of the
    scheduler file it names (any argument not starting ``tcp://`` is taken for one).

    Raises:
        UsageError: another scheme, or a scheduler file that is missing, not a regular file, over
            :data:`MAX_SCHEDULER_FILE_BYTES`, not JSON, or without a string ``tcp://`` ``address``.
    """
    if "://" in address:
        if not address.startswith("tcp://"):
            raise UsageError(f"--scheduler {address}: only tcp:// addresses are supported (tcp://HOST:PORT, or a scheduler .json file)")
        return address
    where = f"--scheduler {address}"
    try:
        st = os.stat(address)
    except FileNotFoundError:
        raise UsageError(f"{where}: no such scheduler file (give tcp://HOST:PORT, or the file `dask scheduler --scheduler-file` wrote)") from None
    except OSError as e:
        raise UsageError(f"{where}: cannot read the scheduler file ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        what = "a named pipe (FIFO)" if stat.S_ISFIFO(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise UsageError(f"{where}: the scheduler file is {what}; name the JSON file the scheduler wrote")
    if st.st_size > MAX_SCHEDULER_FILE_BYTES:
        raise UsageError(f"{where}: the scheduler file is {st.st_size:,} bytes; a Dask scheduler file is JSON of about 1 KB "
                         f"(at most {MAX_SCHEDULER_FILE_BYTES:,} read)")
    try:
        with open(address, "rb") as f:
            data = f.read(MAX_SCHEDULER_FILE_BYTES + 1)
    except OSError as e:
        raise UsageError(f"{where}: cannot read the scheduler file ({e.strerror or e})") from None
    try:
        doc = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        raise UsageError(f"{where}: the scheduler file is not JSON") from None
    if not isinstance(doc, dict) or "address" not in doc:
        raise UsageError(f"{where}: the scheduler file has no \"address\" (a JSON object with \"address\": \"tcp://HOST:PORT\")")
    addr = doc["address"]
    if not isinstance(addr, str) or not addr.startswith("tcp://"):
        raise UsageError(f"{where}: the scheduler file's \"address\" is not a tcp:// address string ({type(addr).__name__})")
    return addr


def _host_port(address: str) -> tuple[str, int]:
    rest = address[len("tcp://"):]
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    try:
        p = int(port)
    except ValueError:
        p = -1
    if not host or not 0 < p < 65536:
        raise UsageError(f"--scheduler {address}: not tcp://HOST:PORT")
    return host, p


def probe(address: str) -> None:
    """Connect to ``address`` and read the scheduler's first message within the time bounds.

    Raises:
        UsageError: no connection within :data:`CONNECT_TIMEOUT_S`, no first message within
            :data:`HANDSHAKE_TIMEOUT_S`, or one that is not a Dask message (HTTP, a length over
            :data:`MAX_HANDSHAKE_BYTES`).
    """
    host, port = _host_port(address)
    where = f"--scheduler {address}"
    try:
        s = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
    except socket.timeout:
        raise UsageError(f"{where}: cannot reach the Dask scheduler (no connection within {CONNECT_TIMEOUT_S:g} s)") from None
    except OSError as e:
        raise UsageError(f"{where}: cannot reach the Dask scheduler ({e.strerror or e})") from None
    try:
        s.settimeout(HANDSHAKE_TIMEOUT_S)
        deadline = time.monotonic() + HANDSHAKE_TIMEOUT_S
        head = _read(s, 8, deadline, where)
        if head.startswith(b"HTTP/") or head[:1] == b"<":
            raise UsageError(f"{where}: not a Dask scheduler (it answers in HTTP: the dashboard's port? the scheduler's is 8786 by default)")
        (n,) = struct.unpack("<Q", head)
        if not 0 < n <= MAX_HANDSHAKE_BYTES:
            raise UsageError(f"{where}: not a Dask scheduler (its first message claims {n:,} bytes; a Dask handshake has a few hundred)")
        _read(s, n, deadline, where)
    finally:
        s.close()


def _read(s: socket.socket, n: int, deadline: float, where: str) -> bytes:
    buf = b""
    while len(buf) < n:
        s.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            got = s.recv(min(n - len(buf), 1 << 16))
        except socket.timeout:
            raise UsageError(f"{where}: the server accepted the connection but sent no Dask handshake within "
                             f"{HANDSHAKE_TIMEOUT_S:g} s (not a Dask scheduler, or a stuck one)") from None
        except OSError as e:
            raise UsageError(f"{where}: the connection to the Dask scheduler failed ({e.strerror or e})") from None
        if not got:
            raise UsageError(f"{where}: the server closed the connection before a Dask handshake (not a Dask scheduler?)")
        buf += got
    return buf


@contextmanager
def _quiet(debug: bool):
    """Dask's loggers (``distributed``, ``tornado``) off stderr unless ``debug``."""
    if debug:
        yield
        return
    loggers = [logging.getLogger(n) for n in ("distributed", "tornado", "asyncio")]
    old = [(lg, lg.level, lg.propagate, lg.handlers[:]) for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, level, _, _ in old:
            lg.setLevel(level)


@contextmanager
def dask_mapper(address: str, debug: bool = False) -> Iterator[Callable]:
    """A ``mapper(fn, items) -> list`` that runs ``fn`` on the Dask cluster at ``address``
    (``tcp://host:8786``, or a scheduler file), results in item order.

    Raises:
        UsageError: Dask is not installed; the address or scheduler file is bad; the scheduler
            cannot be reached or does not answer as one; no worker joins within
            :data:`WORKER_WAIT_S`; mid-run, the scheduler is lost, no worker is left for
            :data:`WORKER_WAIT_S`, or a worker dies running a rank.
    """
    try:
        import distributed
    except ImportError:
        raise UsageError("--scheduler needs Dask: pip install 'daydream[dask]'") from None
    addr = scheduler_address(address)
    named = address if addr == address else f"{address} ({addr})"
    probe(addr)
    with _quiet(debug):
        try:
            # results are bytes (daydream.job.wire): the client decodes data frames with msgpack only, never pickle
            client = distributed.Client(addr, timeout=CONNECT_TIMEOUT_S, deserializers=["msgpack"])
        except Exception as e:  # noqa: BLE001 - anything the connection raises is the cluster's, said in one line
            raise UsageError(f"--scheduler {named}: cannot connect to the Dask scheduler ({type(e).__name__}: {e})") from None
        try:
            try:
                client.wait_for_workers(1, timeout=WORKER_WAIT_S)
            except (TimeoutError, distributed.TimeoutError) if hasattr(distributed, "TimeoutError") else TimeoutError:
                raise UsageError(f"--scheduler {named}: no Dask worker joined the scheduler within {WORKER_WAIT_S:g} s "
                                 f"(0 workers); start one: dask worker {addr}") from None
            except Exception as e:  # noqa: BLE001
                raise UsageError(f"--scheduler {named}: lost the Dask scheduler ({type(e).__name__}: {e})") from None
            with _no_exception_pickles(distributed):
                yield lambda fn, items: _run(distributed, client, fn, items, named)
        finally:
            try:
                client.close(timeout=2)
            except Exception:  # noqa: BLE001 - closing a client whose scheduler is gone
                pass


@contextmanager
def _no_exception_pickles(distributed):
    """While the client runs: the exception of an erred task (pickled bytes from the cluster) is
    built by ``wire.safe_exception`` (built-in exception classes only; any other class becomes a
    ``ClusterError`` naming it, never imported) and its traceback is dropped unread, instead of
    ``pickle.loads`` of both in ``distributed.client.clean_exception``. Process-wide while it
    lasts (Dask looks the function up in its module)."""
    mod = distributed.client
    orig = getattr(mod, "clean_exception", None)
    if orig is None:  # another Dask: nothing to narrow (docs/jobs.md, "Trust")
        yield
        return

    def clean_exception(exception=None, traceback=None, **kw):
        if isinstance(exception, (bytes, bytearray)):
            exception = safe_exception(exception)
        return orig(exception, None, **kw)

    mod.clean_exception = clean_exception
    try:
        yield
    finally:
        mod.clean_exception = orig


def _run(distributed, client, fn, items, named: str) -> list:
    """``fn`` over ``items`` on the cluster, watching it (module docstring)."""
    futures = client.map(call, [fn] * len(items), items, pure=False)  # results come back as msgpack bytes, not pickles
    no_worker_since = None
    while True:
        try:
            distributed.wait(futures, timeout=POLL_S)
            break  # every rank finished or failed: gather says which
        except (TimeoutError, getattr(distributed, "TimeoutError", TimeoutError)):
            pass
        except Exception as e:  # noqa: BLE001
            raise UsageError(f"--scheduler {named}: lost the Dask scheduler ({type(e).__name__})") from None
        if any(f.status == "error" for f in futures):
            break
        if client.status not in ("running", "connecting"):
            raise UsageError(f"--scheduler {named}: lost the Dask scheduler (the client is {client.status}); "
                             f"{sum(f.status == 'finished' for f in futures)} of {len(futures)} ranks were read")
        try:
            n = len(client.scheduler_info(**({"n_workers": -1} if _takes_n_workers(client) else {})).get("workers", {}))
        except Exception:  # noqa: BLE001
            raise UsageError(f"--scheduler {named}: lost the Dask scheduler") from None
        if n:
            no_worker_since = None
        elif no_worker_since is None:
            no_worker_since = time.monotonic()
        elif time.monotonic() - no_worker_since > WORKER_WAIT_S:
            raise UsageError(f"--scheduler {named}: the Dask cluster lost its last worker and none joined within "
                             f"{WORKER_WAIT_S:g} s (0 workers; {sum(f.status == 'finished' for f in futures)} of {len(futures)} ranks read)")
    try:
        return [result(b, f"the Dask worker reading rank file #{i}") for i, b in enumerate(client.gather(futures))]
    except ClusterError as e:
        if e.kind.endswith("KilledWorker"):
            raise UsageError(f"--scheduler {named}: a Dask worker died while reading a rank ({e.kind}); "
                             "check the workers' memory and logs") from None
        first = (str(e).strip().splitlines() or [""])[0]
        raise UsageError(f"--scheduler {named}: the Dask cluster could not read a rank ({first}); the scheduler and "
                         "workers need the same Python packages as daydream (daydream itself included)") from None
    except distributed.KilledWorker as e:  # another Dask, where the exception was not narrowed
        raise UsageError(f"--scheduler {named}: a Dask worker died while reading a rank ({e}); "
                         "check the workers' memory and logs") from None
    except (OSError, getattr(distributed, "CommClosedError", OSError)) as e:
        raise UsageError(f"--scheduler {named}: lost the Dask scheduler ({type(e).__name__})") from None
    except DaydreamError:  # a rank's own error (a bad trace): said as on the local path
        raise
    except Exception as e:  # noqa: BLE001 - the cluster could not run the task (e.g. another environment)
        first = (str(e).strip().splitlines() or [""])[0]
        raise UsageError(f"--scheduler {named}: the Dask cluster could not read a rank ({type(e).__name__}: {first}); "
                         "the scheduler and workers need the same Python packages as daydream (daydream itself included)") from None


def _takes_n_workers(client) -> bool:
    import inspect

    try:
        return "n_workers" in inspect.signature(client.scheduler_info).parameters
    except (TypeError, ValueError):
        return False
