"""daydream-kernels: CSV round trip, errors (exit 2, one line, no traceback), untrusted text."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from daydream.kernel_tool.command import main

HEADER = ["OPName", "Latency", "Device", "Kernel Name", "Grid x", "Grid y", "Grid z", "Block x", "Block y", "Block z",
          "B", "M", "N", "K", "H"]
ROWS = [
    ["linear", "1.1143167972564698", "Tesla V100-PCIE-32GB", "volta_sgemm_128x64_tn", "20", "16", "1", "128", "1", "1",
     "1", "1024", "2560", "2560", ""],
    ["bmm", "0.1117247983813285", "Tesla V100-PCIE-32GB", "volta_sgemm_32x128_nn", "4", "1", "384", "256", "1", "1",
     "384", "128", "64", "128", ""],
    ["add", "0.7671167969703674", "Tesla T4", "vectorized_elementwise_kernel", "102400", "1", "1", "128", "1", "1",
     "32768", "", "", "", "1600"],
    ["ln", "0.8186048150062561", "NVIDIA A100-PCIE-40GB", "vectorized_layer_norm_kernel", "32768", "1", "1", "32", "4",
     "1", "32768", "", "", "", "1600"],
    ["softmax", "0.7137215971946717", "Tesla P100-PCIE-16GB", "cunn_SoftMaxForward", "32768", "1", "1", "256", "1", "1",
     "32768", "", "", "", "1600"],
]


def _write(path: Path, rows, header=HEADER):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def _read(path: Path):
    with open(path, newline="") as f:
        return list(csv.reader(f))


def test_round_trip(tmp_path):
    src = _write(tmp_path / "in.csv", ROWS)
    out = tmp_path / "out.csv"
    assert main(["predict", str(src), "--target", "NVIDIA A100-PCIE-40GB", "-o", str(out)]) == 0
    got = _read(out)
    assert got[0] == HEADER + ["Predicted Latency", "Predicted Low", "Predicted High", "Range Reason"]
    assert [r[: len(HEADER)] for r in got[1:]] == ROWS
    for r in got[1:]:
        pt, lo, hi = (float(x) for x in r[len(HEADER): len(HEADER) + 3])
        assert 0 < lo <= pt <= hi
    # the A100 row predicted on the A100: its own latency, exactly
    assert float(got[4][len(HEADER)]) == float(ROWS[3][1])


def test_gpu_config_target_and_stdout(tmp_path, capsys):
    src = _write(tmp_path / "in.csv", ROWS[:1])
    cfg = tmp_path / "gpu.json"
    cfg.write_text('{"Device": "Made Up GPU", "Mem_Bw": 500, "Num_Sm": 50, "Freq": 1500, "SingleFLOPs": 9600, '
                   '"L2Cache": 8}')
    assert main(["predict", str(src), "--target", "Made Up GPU", "--gpu-config", str(cfg)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and lines[0].endswith("Range Reason")
    assert main(["predict", str(src), "--target", str(cfg)]) == 0


@pytest.mark.parametrize("mutate,where", [
    (lambda r: r.__setitem__(1, "abc"), "row 3, column 'Latency'"),
    (lambda r: r.__setitem__(1, "-1"), "row 3, column 'Latency'"),
    (lambda r: r.__setitem__(11, "12.5"), "row 3, column 'M'"),
    (lambda r: r.__setitem__(2, "Quantum GPU\x1b[31m"), "row 3, column 'Device'"),
    (lambda r: (r.__setitem__(0, "frob\x07"), r.__setitem__(3, "mystery_kernel")), "row 3, column 'OPName'"),
    (lambda r: r.__setitem__(13, ""), "row 3, column 'K'"),
    # try-out: an integer beyond int64 was an OverflowError traceback (exit 1)
    (lambda r: r.__setitem__(11, "99999999999999999999"), "row 3, column 'M'"),
    (lambda r: r.__setitem__(11, "1e300"), "row 3, column 'M'"),
    # try-out: an unknown OPName was classed by its kernel name ('sgemm' -> linear) and predicted silently
    (lambda r: r.__setitem__(0, "foo"), "row 3, column 'OPName'"),
])
def test_bad_row_exit_2(tmp_path, capsys, mutate, where):
    rows = [list(r) for r in ROWS]
    mutate(rows[1])
    src = _write(tmp_path / "bad.csv", rows)
    assert main(["predict", str(src), "--target", "Tesla T4", "-o", str(tmp_path / "o.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(src) in err and where in err
    assert not any(ord(ch) < 32 and ch != "\n" for ch in err)


def test_missing_column_unknown_target_missing_file(tmp_path, capsys):
    src = _write(tmp_path / "nolat.csv", [r[:1] + r[2:] for r in ROWS], header=HEADER[:1] + HEADER[2:])
    assert main(["predict", str(src), "--target", "Tesla T4"]) == 2
    assert "missing column 'Latency'" in capsys.readouterr().err
    good = _write(tmp_path / "in.csv", ROWS)
    assert main(["predict", str(good), "--target", "Nonexistent\x1b GPU"]) == 2
    err = capsys.readouterr().err
    assert "unknown GPU" in err and "\x1b" not in err
    assert main(["predict", str(tmp_path / "nope.csv"), "--target", "Tesla T4"]) == 2
    assert "nope.csv" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["predict", str(good)])  # --target missing: usage error
    assert e.value.code == 2


def test_kernel_names_with_control_characters_round_trip(tmp_path):
    rows = [list(r) for r in ROWS[:1]]
    rows[0][3] = "volta_sgemm_128x64_tn\x1b]0;evil\x07"
    src = _write(tmp_path / "in.csv", rows)
    out = tmp_path / "out.csv"
    assert main(["predict", str(src), "--target", "Tesla T4", "-o", str(out)]) == 0
    assert _read(out)[1][3] == rows[0][3]  # data kept as is in the CSV; only messages are cleaned


@pytest.mark.parametrize("target", ["NVIDIA A100-PCIE-40GB", "Tesla V100-PCIE-32GB", "Tesla T4"])
def test_fp8_on_a_gpu_without_fp8_units_refused(tmp_path, capsys, target):
    # try-out finding: --precision fp8 on an A100 was answered (as fp16) without a word
    src = _write(tmp_path / "in.csv", ROWS[:1])
    out = tmp_path / "out.csv"
    assert main(["predict", str(src), "--target", target, "--precision", "fp8", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fp8" in err and "FP8 units" in err and "Traceback" not in err
    assert not out.exists()


def test_fp8_on_an_fp8_gpu_accepted(tmp_path):
    src = _write(tmp_path / "in.csv", ROWS[:1])
    out = tmp_path / "out.csv"
    assert main(["predict", str(src), "--target", "H100 SXM", "--precision", "fp8", "-o", str(out)]) == 0
    got = _read(out)
    assert "fp8-unsupported" not in got[1][-1]
