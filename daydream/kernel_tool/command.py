"""``daydream-kernels``: per-kernel time predictions on another GPU, and their accuracy.

    daydream-kernels predict IN.csv --target "NVIDIA A100-PCIE-40GB" [-o OUT.csv] [--gpu-config F.json ...]
                                    [--precision fp32|tf32|fp16|bf16|fp8]
    daydream-kernels accuracy [--data DIR] [--write docs/kernels.md] [--every N]

``predict`` reads rows in NeuSight's columns (:mod:`daydream.kernel_tool.neusight`), predicts each
row's kernel time on the target from the row's own ``Device`` and ``Latency``
(:func:`daydream.costmodel.kernel_time.predict_cross`) and writes the same rows plus ``Predicted
Latency``, ``Predicted Low`` and ``Predicted High`` (ms; low is the fast end) and ``Range
Reason``. GPUs: NeuSight device names, daydream's GPU table names, or ``--gpu-config`` files in
NeuSight's device_configs format (which also override the table for their device).

Bad input: one line on stderr naming the file, the row and the column; exit status 2. A
``--precision`` the target has no units for (``fp8`` on a GPU without FP8 Tensor Cores, e.g. A100,
V100, T4) is refused the same way (the library itself predicts such a request as fp16, for the
what-ifs).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from ..costmodel import kernel_time as Mdl
from .accuracy import leave_one_out, load, markdown, write_doc
from .neusight import InputError, clean, read_table, write_table
from .configs import load_configs, resolve

EXIT_INPUT = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2 (argparse's own status for usage errors)
        self.exit(EXIT_INPUT, f"{self.prog}: error: {clean(message, 300)}\n")


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="daydream-kernels", description="Per-kernel time on another GPU (NeuSight CSV rows).")
    sub = ap.add_subparsers(dest="cmd", required=True, parser_class=_Parser)
    p = sub.add_parser("predict", help="predict each row's latency on a target GPU")
    p.add_argument("input", help="CSV in NeuSight's columns (OPName, Latency (ms), Device, ...)")
    p.add_argument("--target", required=True, help="GPU name (e.g. 'NVIDIA A100-PCIE-40GB') or a device_configs JSON file")
    p.add_argument("-o", "--output", help="output CSV (default: standard output)")
    p.add_argument("--gpu-config", action="append", default=[], metavar="FILE.json",
                   help="a GPU spec file in NeuSight's device_configs format (repeatable)")
    p.add_argument("--precision", choices=("fp32", "tf32", "fp16", "bf16", "fp8"),
                   help="the target's precision (default: each row's own, fp32 for NeuSight's data)")
    a = sub.add_parser("accuracy", help="leave-one-GPU-out accuracy on the development data")
    a.add_argument("--data", help="folder with linear.csv, bmm.csv, elem.csv, ln.csv, softmax.csv "
                                  "(default: ../shared/kernels/neusight from the repository root)")
    a.add_argument("--write", metavar="FILE.md", help="write the table below the marker of FILE.md")
    a.add_argument("--every", type=int, default=1, help="use every N-th shape only (quick check)")
    return ap


def _predict(args) -> int:
    configs = load_configs(args.gpu_config)
    tgt = resolve(args.target, configs)
    if args.precision == "fp8" and not tgt.has_path("fp8"):
        # predict_cross would time it as fp16 (what a what-if on such a GPU falls back to); asked for
        # directly, it is a request the target cannot run: refuse rather than answer another question
        raise InputError(f"--precision fp8: {clean(tgt.name, 80)} has no FP8 units (datasheet: no FP8 "
                         f"Tensor Core / matrix-core peak); use --precision fp16 or bf16, or an FP8 GPU "
                         f"(H100, H200, B200, L4, L40S, MI300X)")
    t = read_table(args.input)
    n = len(t.t_ns)
    low, point, high = np.zeros(n), np.zeros(n), np.zeros(n)
    reason = np.full(n, "", dtype=object)
    for dev in np.unique(t.device).tolist():
        m = t.device == dev
        try:
            src = resolve(dev, configs)
        except ValueError:
            row = int(np.nonzero(m)[0][0]) + 2
            raise InputError(f"{t.path}: row {row}, column 'Device': unknown GPU {clean(dev, 60)!r} "
                             f"(pass --gpu-config FILE.json)") from None
        p = Mdl.predict_cross(t.kernels.take(m), t.t_ns[m], src, tgt, precision=args.precision)
        low[m], point[m], high[m], reason[m] = p.low, p.point, p.high, p.reason
    extra = {"Predicted Latency": point / 1e6, "Predicted Low": low / 1e6, "Predicted High": high / 1e6,
             "Range Reason": reason}
    write_table(args.output or sys.stdout, t, extra)
    if args.output:
        print(f"wrote {clean(args.output, 200)}: {n} rows predicted on {tgt.name}", file=sys.stderr)
    return 0


def _accuracy(args) -> int:
    data = load(args.data, every=max(args.every, 1))
    text = markdown(leave_one_out(data))
    if args.write:
        write_doc(args.write, text)
        print(f"wrote {clean(args.write, 200)}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "predict":
            return _predict(args)
        return _accuracy(args)
    except (InputError, ValueError) as e:
        print(f"daydream-kernels: error: {clean(str(e), 400)}", file=sys.stderr)
        return EXIT_INPUT
    except OSError as e:
        print(f"daydream-kernels: error: {clean(getattr(e, 'filename', '') or '', 200)}: "
              f"{clean(e.strerror or type(e).__name__, 100)}", file=sys.stderr)
        return EXIT_INPUT


if __name__ == "__main__":
    sys.exit(main())
