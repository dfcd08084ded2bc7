"""Regression snapshots: asserts that pin the tool's own output on a real trace without a derivation.

Each exists to notice a change of that output, not to judge it: a failure here says "this number
moved", and the change's author decides whether the new number is right and updates it with the
reason in the commit. Every test says why it is a snapshot and what would replace it with a
derivation (issue 39: tests elsewhere derive their expected values, or assert an inequality the
mechanism implies). Moved here from tests/test_tryout_findings.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from daydream.analysis import analyze
from daydream.cli import main
from daydream.formats import load_trace

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
needs_traces = pytest.mark.skipif(not TRACES.exists(), reason="../shared/traces not present")


def _joined(out: str) -> str:
    """The answer block of a text report (up to its first blank line), its wrapped lines joined."""
    return " ".join(x.strip() for x in out.split("\n\n", 1)[0].splitlines())



# snapshot: fusion's chain count on mfu_2gpu_before (164 chains of 328 kernels) is the tool's own output;
# it exists to notice when a change to the launch-queue or scope rules moves which kernels fuse (each such
# change so far was a finding, see the comment). The mechanism's own property (fusion applies; it says so)
# is the first assert.
@needs_traces
def test_fusion_not_applicable_does_not_deny_back_to_back_kernels_it_saw():
    # mfu_2gpu_before: 2,270 memory-bound kernels follow another on their stream, kept apart by
    # the scope rules (each emit_nvtx op launches its own); fusion said "no two memory-bound
    # kernels are launched back to back on one stream and thread"
    # Later: those pairs were kept apart by launch-queue back-pressure taken as a synchronization;
    # with TaskGraph.synchronizing, 60 chains fuse (the reason's wording is kept by the test below);
    # and since a kernel the launch queue waits for may fuse (has_dependents leaves QUEUE edges out),
    # 164: the kernels before the last 1,024 of each stream are no longer held back
    r = analyze(load_trace(str(TRACES / "nsys_ai" / "mfu_2gpu_before.sqlite")), ["fusion"]).report
    assert "fusion" not in r.not_applicable
    assert r.predictions[0].optimizations[0].note.startswith("164 chains of 328 memory-bound kernels fused")


# snapshot: the 48 % share of nccl_data's critical path is the tool's own number; the test's point (the
# phase is named before the share) is wording, the number pins where the critical path walk puts the host
# work.
@needs_traces
def test_answer_line_names_the_phase_its_host_work_share_is_of(capsys):
    # was: "bound by host work (48 % of the critical path; in backward; ...)" on a path 100 % CPU
    assert main(["--details", str(TRACES / "hta" / "nccl_data.json.gz")]) == 0
    first = _joined(capsys.readouterr().out)
    assert "(median of 3 ProfilerSteps)" in first
    assert "bound by host work in backward (48 % of the critical path; top: autograd::engine::" in first


# snapshot: the counts (1 NCCL collective, 73 multimem all-reduces of the B200 trace) are the trace's, read
# by the tool's kernel classes; kept as a snapshot until an independent count of the trace's kernel names
# replaces it.
@pytest.mark.skipif(not (TRACES / "tracelens").exists(), reason="../shared/traces not present")
def test_communication_section_counts_the_collective_kernels_the_warning_counts():
    """B200 eager: the warning spoke of 74 collective kernels, the communication section of 1 (the
    73 symmetric-memory multimem all-reduces are communication but no NCCL collective; accuracy
    try-out, finding 8). The section now counts them, and says they are not re-costed."""
    from daydream.render.text import communication_section
    r = analyze(load_trace(str(TRACES / "tracelens" / "b200_eager_trace.json.gz"))).report
    assert (r.communication.collectives, r.communication.other_tasks) == (1, 73)
    assert any("its 74 collective kernels" in w for w in r.warnings)
    assert "73 other communication tasks" in communication_section(r)[0]
