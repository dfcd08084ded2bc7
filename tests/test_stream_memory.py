"""Issue 37, what was left: the memory promise on the streaming Kineto path.

A small .gz inflating to a dense but valid trace was read by the streaming reader, which only
capped the inflated bytes by ratio (``inflate_limit(held=False)``): 640 k kernels from a 242 KB
file peaked at 680 MB where 10 x the file + 300 MB = 302 MB are promised. The reader now bounds
the rows it decodes (``formats.row_budget``). The per-row costs were fitted on CPU-op-only and
kernel-only and python_function-only families (``daydream/formats/__init__.py``); they are judged
here on other data: Python frame / CPU op / runtime / kernel mixes, 16 per timestamp, just under
and past the cap.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from daydream.formats import MEMORY_ALLOWANCE, MEMORY_PER_FILE_BYTE, PYTHON_ROW_PEAK_BYTES, ROW_PEAK_BYTES, TASK_PEAK_BYTES, row_budget

ROOT = Path(__file__).resolve().parents[1]
MB = 1 << 20

DRIVER = r"""
import json, os, sys
from daydream.cli import main
out = []
for path in json.loads(sys.argv[1]):
    pid = os.fork()
    if pid == 0:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, 1)
        err = os.open(path + ".err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(err, 2)
        os._exit(main(["--details", path]))
    _, status, ru = os.wait4(pid, 0)
    out.append({"path": path, "rss": ru.ru_maxrss * 1024, "code": os.waitstatus_to_exitcode(status)})
print(json.dumps(out))
"""


def _mix(n_triples: int, tie: int) -> bytes:
    """A valid trace of ``n_triples`` (Python frame, CPU op, cudaLaunchKernel, kernel) linked by
    correlation, ``tie`` of them per timestamp (so it compresses far better than a real trace)."""
    ev = []
    for i in range(n_triples):
        t = i // tie
        ev.append(f'{{"ph":"X","cat":"python_function","name":"model.py(12): forward","pid":1,"tid":1,"ts":{t},"dur":1,'
                  f'"args":{{"Python id":{i}}}}}')
        ev.append(f'{{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":{t},"dur":1,"args":{{"External id":{i}}}}}')
        ev.append(f'{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":{t},"dur":1,'
                  f'"args":{{"correlation":{i},"External id":{i}}}}}')
        ev.append(f'{{"ph":"X","cat":"kernel","name":"gemm","pid":0,"tid":7,"ts":{t},"dur":1,'
                  f'"args":{{"correlation":{i},"stream":7,"device":0,"External id":{i}}}}}')
    return ('{"traceEvents":[' + ",".join(ev) + "]}").encode()


def _cost(n_triples: int) -> int:
    return n_triples * (3 * ROW_PEAK_BYTES + PYTHON_ROW_PEAK_BYTES + 2 * TASK_PEAK_BYTES)


def _sized(tmp_path: Path, name: str, share: float, tie: int) -> Path:
    """A mix whose rows cost ``share`` of the budget of its own compressed size."""
    n = int(share * row_budget(0) / _cost(1))
    for _ in range(4):  # the budget grows with the file: settle n and the size together
        data = gzip.compress(_mix(n, tie), 6)
        n = int(share * row_budget(len(data)) / _cost(1))
    p = tmp_path / name
    p.write_bytes(gzip.compress(_mix(n, tie), 6))
    return p


@pytest.mark.slow
def test_a_dense_streaming_bomb_stays_within_the_memory_bound(tmp_path):
    under = _sized(tmp_path, "under.json.gz", 0.95, 16)
    over = _sized(tmp_path, "over.json.gz", 3.0, 16)
    # inflating 24 times, within the ratio cap: before the row bound, `over` (3 x the budget) was read whole
    r = subprocess.run([sys.executable, "-c", DRIVER, json.dumps([str(under), str(over)])],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stderr
    got = {x["path"]: x for x in json.loads(r.stdout)}
    for p in (under, over):
        bound = MEMORY_PER_FILE_BYTE * p.stat().st_size + MEMORY_ALLOWANCE
        x = got[str(p)]
        print(p.name, p.stat().st_size, "bytes:", x["rss"] // MB, "MB peak, bound", bound // MB, "MB, exit", x["code"])
        assert x["rss"] <= bound, (p.name, x["rss"] // MB, bound // MB)
    assert got[str(under)]["code"] == 0, Path(str(under) + ".err").read_text()
    assert got[str(over)]["code"] == 2
    err = Path(str(over) + ".err").read_text().splitlines()
    assert len(err) == 1 and str(over) in err[0] and "memory bound" in err[0] and "gunzip" in err[0], err


def test_the_row_bound_refuses_in_the_streaming_reader(tmp_path, capsys):
    """The refusal comes from the streaming reader itself (one line, exit 2), not a fallback."""
    from daydream.cli import main

    p = _sized(tmp_path, "small.json.gz", 1.2, 4096)
    assert main([str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{p}: traceEvents:" in err[0] and "events or more" in err[0], err


def test_real_traces_are_within_the_row_bound():
    """Every real .json.gz trace of ../shared/traces is under its row budget (none refused)."""
    from daydream.formats import load_trace

    traces = sorted((ROOT.parent / "shared" / "traces").glob("*/*.json.gz"))
    if not traces:
        pytest.skip("no ../shared/traces")
    for t in traces[:3]:
        assert len(load_trace(str(t))) > 0
