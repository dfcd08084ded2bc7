"""``daydream-analyze``: read a trace, replay it, print the report.

Exit status: 0 report printed; 2 bad input or usage (one line on stderr); 1 a bug in daydream
(``--debug`` shows the traceback).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from . import __version__
from .errors import DaydreamError, UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own usage errors: one line, exit 2
        raise UsageError(f"{self.prog}: {message} (see --help)")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="daydream-analyze",
        description="Replay a GPU training trace as a dependency graph and report measured vs replayed "
        "iteration time. Reads Nsight Systems SQLite exports, PyTorch profiler (Kineto) JSON, and "
        "daydream's CUPTI JSON Lines dumps; the format is detected from the content.",
    )
    p.add_argument("trace", nargs="?", help="trace file (.sqlite, .json, .json.gz, .jsonl[.gz], or a saved table .npz)")
    p.add_argument(
        "--opt",
        action="append",
        default=[],
        metavar="NAME[:param=value,...]",
        help="predict the effect of an optimization; repeat to compose them in order; 'all' ranks every applicable one",
    )
    p.add_argument("--list-opts", action="store_true", help="list the optimizations and their parameters")
    p.add_argument("--timeline", metavar="FILE", help="write the predicted (and baseline) timeline as Chrome-trace JSON for Perfetto (.json or .json.gz)")
    p.add_argument("--json", metavar="FILE", help="write the report as JSON (schemas/report.schema.json); '-' for stdout")
    p.add_argument("--save-table", metavar="FILE", help="save the parsed event table (.npz) to skip parsing next time")
    p.add_argument("--strict", action="store_true", help="refuse damaged input (e.g. a truncated JSON) instead of salvaging it")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--version", action="version", version=f"daydream {__version__}")
    return p


def _write(path: str, data: bytes) -> None:
    if path == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None


def run(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from .optimizations import describe_all

    if args.list_opts:
        sys.stdout.write(describe_all())
        return 0
    if not args.trace:
        raise UsageError("daydream-analyze: a trace file is needed (see --help)")
    if "all" in args.opt and len(args.opt) > 1:
        raise UsageError("--opt all ranks each optimization alone; it cannot be combined with other --opt")
    from .analysis import analyze

    from .formats import load_trace

    specs = [] if args.opt == ["all"] else list(args.opt)
    if args.opt == ["all"]:
        specs = None
    from .optimizations import parse_spec

    opts = [parse_spec(s) for s in specs] if specs else []  # usage errors before the slow load
    table = load_trace(args.trace, strict=args.strict)
    if args.save_table:
        try:
            table.save(args.save_table)
        except OSError as e:
            raise UsageError(f"cannot write {args.save_table}: {e.strerror or e}") from None
    result = analyze(table, opts, rank_all=specs is None)
    if args.timeline:
        result.write_timeline(args.timeline)
    if args.json:
        from .report import report_json

        _write(args.json, report_json(result.report))
    if args.json != "-":
        from .report import render_text

        sys.stdout.write(render_text(result.report))
    return 0


def main(argv: list[str] | None = None) -> int:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    try:
        code = run(argv)
    except DaydreamError as e:
        if debug:
            traceback.print_exc()
        print(f"daydream-analyze: error: {e}" if not str(e).startswith("daydream-analyze") else str(e), file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("daydream-analyze: interrupted", file=sys.stderr)
        code = 130
    except BrokenPipeError:
        code = 0
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
    except Exception as e:  # a bug in daydream
        if debug:
            traceback.print_exc()
        else:
            print(
                f"daydream-analyze: internal error ({type(e).__name__}: {e}); please report it with the trace, and rerun with --debug for details",
                file=sys.stderr,
            )
        code = 1
    return code


if __name__ == "__main__":
    sys.exit(main())
