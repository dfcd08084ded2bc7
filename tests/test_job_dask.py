"""The Dask path (--scheduler) gives the same JSON report as the local path, byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from daydream.cli import main

distributed = pytest.importorskip("distributed")

ROOT = Path(__file__).resolve().parents[1]
DLRM = ROOT.parent / "shared" / "traces" / "param_dlrm"


@pytest.mark.slow
@pytest.mark.skipif(not DLRM.exists(), reason="needs ../shared/traces/param_dlrm")
def test_dask_local_cluster_byte_identical(tmp_path, capsys):
    local, remote = tmp_path / "local.json", tmp_path / "dask.json"
    assert main([str(DLRM), "--json", str(local)]) == 0
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        assert main([str(DLRM), "--json", str(remote), "--scheduler", cluster.scheduler_address]) == 0
        assert main([str(DLRM), "--json", str(tmp_path / "w.json"), "--opt", "straggler:rank=7",
                     "--scheduler", cluster.scheduler_address]) == 0
    assert local.read_bytes() == remote.read_bytes()
    assert b'"straggler"' in (tmp_path / "w.json").read_bytes()


@pytest.mark.slow
def test_dask_unreachable_scheduler(tmp_path, capsys):
    import shutil

    for r in (0, 1):  # the inputs are checked first (an empty folder is refused before any connection)
        shutil.copy(Path(__file__).resolve().parents[1] / "fixtures" / "train_step.json.gz", tmp_path / f"rank{r}.json.gz")
    assert main([str(tmp_path), "--scheduler", "tcp://127.0.0.1:9"]) == 2
    assert "scheduler" in capsys.readouterr().err
