"""The Dask path (``--scheduler``) under faults, each against a real local scheduler/worker (or a
fake server) started here on 127.0.0.1 as subprocesses and killed by their pid: one error line
and exit 2 within bounded time, never a hang or a traceback (issue 37; daydream/job/scale.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from daydream.cli import main
from daydream.job import scale

distributed = pytest.importorskip("distributed")

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "train_step.json.gz"
pytestmark = pytest.mark.slow


@pytest.fixture
def job(tmp_path) -> Path:
    d = tmp_path / "job"
    d.mkdir()
    for r in (0, 1):
        shutil.copy(FIXTURE, d / f"rank{r}.json.gz")
    return d


@pytest.fixture(autouse=True)
def short_bounds(monkeypatch):
    monkeypatch.setattr(scale, "CONNECT_TIMEOUT_S", 3.0)
    monkeypatch.setattr(scale, "HANDSHAKE_TIMEOUT_S", 2.0)
    monkeypatch.setattr(scale, "WORKER_WAIT_S", 4.0)


def refused(capsys, *args, says: str, within: float = 30.0) -> str:
    t0 = time.monotonic()
    code = main([str(a) for a in args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert says in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert time.monotonic() - t0 < within
    return err


class FakeServer:
    """A TCP server on 127.0.0.1 that accepts and then stays silent, answers HTTP, or sends a huge
    frame length."""

    def __init__(self, mode: str) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.mode, self.conns = mode, []
        self.address = f"tcp://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(c)
            if self.mode == "http":
                c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            elif self.mode == "huge":
                c.sendall(b"\xff" * 64)

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.mark.parametrize("mode,says", [("silent", "no Dask handshake"), ("http", "HTTP"), ("huge", "first message claims")])
def test_a_server_that_is_not_a_scheduler(job, capsys, mode, says):
    srv = FakeServer(mode)
    try:
        refused(capsys, job, "--scheduler", srv.address, says=says, within=15)
    finally:
        srv.close()


def test_scheduler_files(job, capsys, tmp_path):
    missing = tmp_path / "nope.json"
    refused(capsys, job, "--scheduler", missing, says="no such scheduler file", within=5)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    refused(capsys, job, "--scheduler", fifo, says="named pipe", within=5)
    for doc, says in ((b"not json", "not JSON"), (b'{"id": 1}', 'no "address"'), (b'{"address": 8786}', "not a tcp://"),
                      (b'{"address": "inproc://x"}', "not a tcp://"), (b"[1, 2]", 'no "address"')):
        f = tmp_path / "s.json"
        f.write_bytes(doc)
        refused(capsys, job, "--scheduler", f, says=says, within=5)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (scale.MAX_SCHEDULER_FILE_BYTES + 1))
    refused(capsys, job, "--scheduler", big, says="bytes", within=5)


def _start(args: list[str], tmp_path: Path, name: str) -> subprocess.Popen:
    log = open(tmp_path / f"{name}.log", "wb")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}  # this module's _slow_read
    return subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, env=env)


def _kill(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)


def _scheduler(tmp_path) -> tuple[subprocess.Popen, str, Path]:
    f = tmp_path / "scheduler.json"
    p = _start(["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                "--scheduler-file", str(f)], tmp_path, "scheduler")
    t0 = time.monotonic()
    while time.monotonic() - t0 < 30:
        if f.exists():
            try:
                return p, json.loads(f.read_text())["address"], f
            except (ValueError, KeyError):
                pass
        time.sleep(0.1)
    _kill(p)
    pytest.fail("the scheduler did not start within 30 s")


def test_scheduler_without_a_worker(job, capsys, tmp_path):
    p, addr, f = _scheduler(tmp_path)
    try:
        refused(capsys, job, "--scheduler", addr, says="no Dask worker joined", within=25)
        refused(capsys, job, "--scheduler", f, says="0 workers", within=25)  # the scheduler file works too
    finally:
        _kill(p)


def test_the_only_worker_killed_mid_run(job, capsys, tmp_path, monkeypatch):
    """The worker is killed while it reads the ranks (a read made slow here): the run said nothing
    for ever; now the lost worker is reported once WORKER_WAIT_S passes without one."""
    p, addr, _ = _scheduler(tmp_path)
    w = _start(["distributed.cli.dask_worker", addr, "--nthreads", "1", "--no-nanny", "--no-dashboard"],
               tmp_path, "worker")
    try:
        c = distributed.Client(addr, timeout=20)
        c.wait_for_workers(1, timeout=30)
        c.close()
        killer = threading.Timer(2.0, lambda: os.kill(w.pid, signal.SIGKILL))
        killer.start()
        monkeypatch.setattr("daydream.job.load._read_star", _slow_read)
        refused(capsys, job, "--scheduler", addr, says="lost its last worker", within=40)
    finally:
        _kill(w)
        _kill(p)


def _slow_read(a):
    time.sleep(30)
    from daydream.job.load import read_rank

    return read_rank(*a)


def test_the_scheduler_killed_mid_run(job, capsys, tmp_path, monkeypatch):
    p, addr, _ = _scheduler(tmp_path)
    w = _start(["distributed.cli.dask_worker", addr, "--nthreads", "1", "--no-nanny", "--no-dashboard"], tmp_path, "worker")
    try:
        c = distributed.Client(addr, timeout=20)
        c.wait_for_workers(1, timeout=30)
        c.close()
        threading.Timer(2.0, lambda: os.kill(p.pid, signal.SIGKILL)).start()
        monkeypatch.setattr("daydream.job.load._read_star", _slow_read)
        refused(capsys, job, "--scheduler", addr, says="lost the Dask scheduler", within=40)
    finally:
        _kill(w)
        _kill(p)


def _cluster(tmp_path):
    p, addr, _ = _scheduler(tmp_path)
    w = _start(["distributed.cli.dask_worker", addr, "--nthreads", "1", "--no-nanny", "--no-dashboard"], tmp_path, "worker")
    c = distributed.Client(addr, timeout=20)
    c.wait_for_workers(1, timeout=30)
    c.close()
    return p, w, addr


def _failing_read(a):
    raise RuntimeError("the disk is on fire\x1b[2J\nsecond line")


def test_a_worker_side_failure_travels_as_plain_data(job, capsys, tmp_path, monkeypatch):
    """Any exception of the work on a worker comes back as (class name, message) through the wire
    format: the task does not err, so the client unpickles no exception. Before, the RuntimeError
    erred the task and came back pickled (distributed.client.clean_exception: pickle.loads)."""
    unpickled = []
    orig = distributed.client.clean_exception
    monkeypatch.setattr(distributed.client, "clean_exception", lambda *a, **k: unpickled.append(a) or orig(*a, **k))
    p, w, addr = _cluster(tmp_path)
    try:
        monkeypatch.setattr("daydream.job.load._read_star", _failing_read)
        err = refused(capsys, job, "--scheduler", addr, says="failed (RuntimeError: the disk is on fire\\x1b[2J)", within=40)
        assert "second line" not in err and "sent back as plain data" in err
    finally:
        _kill(w)
        _kill(p)
    assert unpickled == []


def _mark(target: str) -> RuntimeError:
    """What a hostile pickle calls on loading: makes a folder, in the coordinating process only
    (Dask's worker loads the pickle once to check it)."""
    if os.environ.get("DAYDREAM_TEST_CLIENT"):
        os.mkdir(target)
    return RuntimeError("payload")


class _Payload(Exception):
    """An exception whose pickle, when loaded, calls _mark: what a hostile cluster could send."""

    def __init__(self, target: str) -> None:
        super().__init__(target)
        self.target = target

    def __reduce__(self):
        return (_mark, (self.target,))


def _erring_call(fn, item):
    raise _Payload(os.environ["DAYDREAM_TEST_PAYLOAD"])


def test_an_erred_tasks_exception_is_never_unpickled(job, capsys, tmp_path, monkeypatch):
    """A task that errs on the cluster (here: its function raises an exception whose pickle calls
    a function that makes a folder) reaches the client as pickled bytes; daydream builds only
    built-in exception classes from them and names any other callable instead of calling it: the
    folder is never made. Before, Dask's pickle.loads made it in the coordinating process."""
    target = tmp_path / "made-by-the-cluster"
    monkeypatch.setenv("DAYDREAM_TEST_PAYLOAD", str(target))
    p, w, addr = _cluster(tmp_path)  # the worker inherits the payload's path, not the client's mark
    try:
        monkeypatch.setenv("DAYDREAM_TEST_CLIENT", "1")
        monkeypatch.syspath_prepend(str(ROOT / "tests"))  # the payload's module importable here, as the worker's is
        monkeypatch.setattr(scale, "call", _erring_call)
        refused(capsys, job, "--scheduler", addr, says="_mark", within=40)
    finally:
        _kill(w)
        _kill(p)
    assert not target.exists()


def test_safe_exception_builds_builtins_only(tmp_path, monkeypatch):
    import pickle

    monkeypatch.setenv("DAYDREAM_TEST_CLIENT", "1")
    from daydream.job.wire import ClusterError, safe_exception

    assert repr(safe_exception(pickle.dumps(KeyError("k", 3)))) == repr(KeyError("k", 3))
    target = tmp_path / "x"
    got = safe_exception(pickle.dumps(_Payload(str(target))))
    assert isinstance(got, ClusterError) and got.kind.endswith("._mark") and not target.exists()
    assert safe_exception(b"\x80\x05junk").kind == "unreadable"
    nested = safe_exception(pickle.dumps(ValueError(_Payload(str(target)))))
    assert isinstance(nested, ClusterError) and not target.exists()
    # a cluster cannot make the client exit or act as interrupted: those classes are only named
    for exc in (SystemExit(7), KeyboardInterrupt()):
        got = safe_exception(pickle.dumps(exc))
        assert isinstance(got, ClusterError) and got.kind == f"builtins.{type(exc).__name__}"
