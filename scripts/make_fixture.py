"""Write ``fixtures/train_step.json.gz``: a small, realistic Kineto training trace with known truth.

How it is made: ``daydream.testing.emulator.training_step_program(n_layers=4, steps=3, seed=0)`` (one
Python thread, compute stream 7, all-reduce stream 20, copy stream 24; L = 5000 ns, G = 1000 ns)
is run by the reference emulator (``daydream.testing.emulator.emulate``, the rules of ``docs/model.md``)
and written by ``daydream.testing.emulator.to_kineto`` with ``cuda_sync`` events, gzip'd with mtime 0.
Everything is deterministic: rerunning this script reproduces the file byte for byte, and
``emulate(training_step_program())`` gives the exact ns start and end of every call and GPU task
in it.

Usage: ``python scripts/make_fixture.py [OUTPUT]`` (default ``fixtures/train_step.json.gz``).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from daydream.testing.emulator import emulate, to_kineto, training_step_program  # noqa: E402


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else ROOT / "fixtures" / "train_step.json.gz"
    out.parent.mkdir(parents=True, exist_ok=True)
    run = emulate(training_step_program(n_layers=4, steps=3, seed=0))
    doc = to_kineto(run, out, emit_sync_events=True)
    print(f"{out}: {len(doc['traceEvents'])} events, {len(run.calls)} API calls, {len(run.tasks)} GPU tasks, "
          f"{out.stat().st_size} bytes, span {(run.end_ns - run.trace_t0_ns) / 1e3:.3f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
