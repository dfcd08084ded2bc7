"""``daydream-analyze``: read a trace, replay it, print the report.

Exit status: 0 report printed; 2 bad input or usage (one line on stderr); 1 a bug in daydream
(``--debug`` shows the traceback); 3 the report was printed, but an optimization asked for by
name (not ``--opt all``) does not apply (one line on stderr per optimization, with the reason).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

from . import __version__
from .util.display import terminal_text
from .util.temps import DIR_PREFIX, FILE_PREFIX, clean_stale, dir_prefix, file_prefix
from .errors import DaydreamError, TraceFormatError, UnreliableReplay, UsageError, caused_by_interrupt


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own usage errors: one line, exit 2
        raise UsageError(f"{self.prog}: {message} (see --help)")


class _Once(argparse.Action):
    """A one-file option given twice is refused (argparse would keep the last one silently and
    write nothing to the first file)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest) is not None:
            parser.error(f"{option_string} given twice")
        setattr(namespace, self.dest, values)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="daydream-analyze",
        description="Replay a GPU training trace as a dependency graph and report measured vs replayed "
        "iteration time. Reads Nsight Systems SQLite exports, PyTorch profiler (Kineto) JSON, and "
        "daydream's CUPTI JSON Lines dumps; the format is detected from the content.",
    )
    p.add_argument("trace", nargs="?", help="trace file (.sqlite, .json, .json.gz, .jsonl[.gz], or a saved table .npz)")
    p.add_argument("more_traces", nargs="*", metavar="TRACE", help="more traces (or a folder): one per rank of one job, replayed coupled (docs/jobs.md)")
    p.add_argument("--workers", type=int, default=1, metavar="N", help="job: read the ranks' traces in N processes")
    p.add_argument("--ranks", metavar="R,R,...", help="job: apply --opt to these ranks only (default: every rank)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="job: read the ranks on this Dask cluster (tcp://host:8786 or a scheduler .json file; needs daydream[dask])")
    p.add_argument(
        "--opt",
        action="append",
        default=[],
        metavar="NAME[:param=value,...]",
        help="predict the effect of an optimization; repeat to compose them in order; 'all' ranks every applicable one",
    )
    p.add_argument("--list-opts", action="store_true", help="list the optimizations and their parameters")
    p.add_argument("--timeline", metavar="FILE", action=_Once, help="write the predicted (and baseline) timeline as Chrome-trace JSON for Perfetto (.json or .json.gz); '-' for stdout")
    p.add_argument("--json", metavar="FILE", action=_Once, help="write the report as JSON (schemas/report.schema.json); '-' for stdout")
    p.add_argument("--save-table", metavar="FILE", action=_Once, help="save the parsed event table (.npz, a file: not '-') to skip parsing next time")
    p.add_argument("--plot", metavar="FILE", action=_Once, help="draw the report's figures: FILE.svg, or FILE.html (one page, the figures inline)")
    p.add_argument("--compare-to", metavar="AFTER_TRACE", action=_Once,
                   help="compare with a trace recorded after making the change: the --opt prediction (or, without --opt, this trace) against its measurement, by step, phase, kernel class and CPU range")
    p.add_argument("--details", action="store_true", help="the full report after the answer: steps, time by kind, phases, layers, "
                   "critical path, waits, predictions, input (default: the answer and the top tables, one screen)")
    p.add_argument("--csv", metavar="DIR", action=_Once, help="write the tables (kernels, ops, CUDA API, collectives) as CSV files into DIR")
    p.add_argument("--strict", action="store_true", help="refuse damaged input (e.g. a truncated JSON) instead of salvaging it")
    p.add_argument(
        "--strict-replay",
        action="store_true",
        help="refuse to predict (exit 2) when the baseline replay is unreliable (a step or window error over 5 %%)",
    )
    p.add_argument("--contention", default="off", metavar="off|measured|FACTOR",
                   help="the contention model for the replay and every prediction: a kernel that starts while another "
                   "stream's kernel runs lasts FACTOR x its time; 'measured': the trace's own factor (docs/model.md); default off")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--version", action="version", version=f"daydream {__version__}")
    return p


def _write(path: str, data: bytes) -> None:
    if path == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    _atomic(path, write)


def _save_table(path: str, table) -> None:
    """Write ``table`` with its launch data and collective args (``--save-table``)."""
    from .formats.trace_side import save_table

    _atomic(path, lambda p: save_table(table, p))


def _atomic(path: str, write) -> None:
    """``write(name)`` to a temporary file in ``path``'s folder, then rename it to ``path``.

    A reader (or a second run writing the same file) sees the old file or the new one, never a
    partial one; a failed write leaves the old file as it was. The temporary name ends with the
    file's own name, so writers that choose gzip by the extension still do. An existing target
    that is not a regular file (a FIFO, a device) is refused (:func:`_not_regular`).
    """
    import tempfile

    why = _not_regular(path)
    if why:
        raise UsageError(f"cannot write {path}: {why}")
    folder, name = os.path.split(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=file_prefix(), suffix="-" + name, dir=folder)
        os.close(fd)
        mask = os.umask(0o22)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # the mode open() would have given, not mkstemp's 0600
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    except UsageError as e:
        raise UsageError(str(e).replace(tmp, path)) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _one_line(text: str) -> str:
    """``text`` with every character that is not printable (newlines, control characters quoted
    from a damaged file) escaped, so a message is one line on any terminal."""
    return terminal_text(text)


def _check_output(path: str | None, flag: str, trace: str | list[str]) -> None:
    """Refuse, before the slow load, an output that cannot be written or would replace an input
    (``trace``: the input file, or a job's rank files)."""
    if not path or path == "-":
        return
    if os.path.isdir(path):
        raise UsageError(f"cannot write {path} ({flag}): it is a directory")
    why = _not_regular(path)
    if why:
        raise UsageError(f"cannot write {path} ({flag}): {why}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"cannot write {path} ({flag}): no such directory {parent}")
    for t in [trace] if isinstance(trace, str) else trace:
        try:
            same = os.path.exists(path) and os.path.samefile(path, t)
        except OSError:
            same = False
        if same:
            raise UsageError(f"{flag} {path} is an input trace; daydream never overwrites its input")


def _not_regular(path: str) -> str:
    """Why an existing ``path`` cannot be an output ("" when it is a regular file or absent): a
    FIFO blocked the run for ever after the slow load until a reader came, a device (``/dev/full``,
    a terminal) took the bytes elsewhere; outputs are regular files, or '-' for standard output."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return ""
    except OSError as e:
        return e.strerror or str(e)
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return ""
    what = ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "a special file")
    return f"it is {what}; outputs are regular files ('-' for standard output)"


def _check_stdout(outputs) -> None:
    """``-`` (standard output) is for one text output, --json or --timeline (the report's text is
    then not printed); --save-table writes a binary .npz file and --plot an .svg/.html file."""
    flags = [flag for path, flag in outputs if path == "-"]
    if "--save-table" in flags:
        raise UsageError("--save-table -: the saved table is a binary .npz file and cannot go to standard output; name a file")
    if len(flags) > 1:
        raise UsageError(f"{' and '.join(flags)} both name '-' (standard output); give one of them a file")


def _timeline_to_stdout(result) -> None:
    """``--timeline -``: the Chrome-trace JSON (not gzipped) on standard output."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix=dir_prefix("timeline")) as d:
        tmp = os.path.join(d, "timeline.json")
        try:
            result.write_timeline(tmp)
        except UsageError as e:
            raise UsageError(str(e).replace(tmp, "a temporary file for --timeline -")) from None
        with open(tmp, "rb") as f:
            data = f.read()
    _write("-", data)


def _check_distinct(outputs) -> None:
    """Refuse two output flags naming the same file (one would silently replace the other)."""
    seen: dict[str, str] = {}
    for path, flag in outputs:
        if not path or path == "-":
            continue
        key = os.path.realpath(path)
        if key in seen:
            raise UsageError(f"{seen[key]} and {flag} both name {path}; give each output its own file")
        seen[key] = flag


#: warning lines of this run, printed when it ends without an error (an error is one line alone:
#: a salvaged file's warning printed before a later refusal read as two problems)
_WARNINGS: list[str] = []


def _warn(text: str) -> None:
    _WARNINGS.append(_one_line(f"daydream-analyze: warning: {text}"))


def _flush_warnings(show: bool) -> None:
    lines, _WARNINGS[:] = _WARNINGS[:], []
    for line in lines if show else ():
        print(line, file=sys.stderr)


def _load(path: str, strict: bool):
    """load_trace, with the adapters' warnings (e.g. a salvaged truncated file) as one stderr line each."""
    import warnings

    from .formats import load_trace

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        table = load_trace(path, strict=strict)
    for w in caught:
        kind = "" if issubclass(w.category, UserWarning) else f"{w.category.__name__}: "
        _warn(f"{kind}{w.message}")
    from .events.table import Kind

    if not (table.kind != Kind.MARKER).any():  # nothing to replay: a report of zeros would read as an answer
        read, skipped = sum(table.accounting.read.values()), sum(table.accounting.skipped.values())
        raise TraceFormatError(path, "", "no CPU call, range or GPU task to analyse" + (
            " (the trace holds no events)" if not read else f" ({read:,} records read, {skipped:,} of them skipped, "
            f"{len(table):,} instant markers kept)"))
    return table


def _check_trust(report, args) -> None:
    """``--strict-replay``: refuse predictions made on an unreliable baseline replay."""
    t = report.trust
    if args.strict_replay and (args.opt or report.ranking) and t is not None and t.verdict == "unreliable":
        raise UnreliableReplay(f"{args.trace}: baseline replay unreliable ({t.reason}); predictions refused (--strict-replay)")


#: files at least this big get progress lines on stderr (when stderr is a terminal)
PROGRESS_MIN_BYTES = 50 * 1024 * 1024


class _Progress:
    """Stage lines on stderr for long runs: only when stderr is a terminal and the file is big."""

    def __init__(self, path: str) -> None:
        import time

        self._time = time.perf_counter
        try:
            size = os.path.getsize(path)
        except OSError:
            size = 0
        self.on = sys.stderr.isatty() and size >= PROGRESS_MIN_BYTES
        self.t0 = self._time()
        if self.on:
            print(f"daydream-analyze: reading {path} ({size / 2**20:,.0f} MiB) ...", file=sys.stderr, flush=True)

    def stage(self, what: str) -> None:
        if self.on:
            print(f"daydream-analyze: {what} ({self._time() - self.t0:,.1f} s)", file=sys.stderr, flush=True)


def _compare(result, args) -> None:
    """``--compare-to``: analyze the other trace and put the comparison in the report."""
    from .analysis import analyze
    from .report.compare import compare

    after = analyze(_load(args.compare_to, args.strict), contention=args.contention)
    result.report.comparison = compare(result, after)


def _check_files(args) -> None:
    """One trace's outputs and its --compare-to trace, checked before the slow load."""
    outputs = ((args.json, "--json"), (args.timeline, "--timeline"), (args.save_table, "--save-table"), (args.plot, "--plot"))
    _check_stdout(outputs)
    for path, flag in outputs:
        _check_output(path, flag, args.trace)
        if args.compare_to:
            _check_output(path, flag, args.compare_to)
    _check_distinct(outputs)
    _check_suffixes(args)
    if args.compare_to:  # the other input too (a FIFO was found only after the first trace's load)
        from .formats import check_regular

        check_regular(args.compare_to)


def _check_suffixes(args) -> None:
    """Refuse a --plot or --save-table name that does not say what the file will be."""
    if args.plot and os.path.splitext(args.plot)[1].lower() not in (".svg", ".html"):
        raise UsageError(f"--plot {args.plot}: the file name must end in .svg or .html")
    if args.save_table and args.save_table != "-" and not args.save_table.lower().endswith(".npz"):
        raise UsageError(f"--save-table {args.save_table}: the table is an .npz file; name it so (e.g. trace.npz)")


def _one_trace_folder(args) -> str:
    """The trace argument, or the one trace file of the folder it names (a folder of one trace is
    that trace: it ran as a job of one rank, which refuses --opt all)."""
    if not os.path.isdir(args.trace) or args.more_traces or args.scheduler:
        return args.trace
    from .job.load import expand_inputs

    try:
        files = expand_inputs([args.trace])
    except UsageError:  # said by the job's path, after its usage checks
        return args.trace
    return files[0] if len(files) == 1 else args.trace


def _clean_left_overs(args) -> None:
    """Remove the temporaries of killed runs (daydream/util/temps.py) from the output folders
    named and from the system's temporary folder."""
    import tempfile

    folders = {os.path.dirname(os.path.abspath(p)) for p in (args.json, args.timeline, args.save_table, args.plot)
               if p and p != "-"}
    for f in sorted(folders):
        clean_stale(f, FILE_PREFIX)
    clean_stale(tempfile.gettempdir(), DIR_PREFIX, require_pid=True)


def run(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _clean_left_overs(args)
    from .optimizations import describe_all

    if args.list_opts:
        sys.stdout.write(describe_all())
        return 0
    if not args.trace:
        raise UsageError("daydream-analyze: a trace file is needed (see --help)")
    if args.scheduler and not (args.more_traces or os.path.isdir(args.trace)):
        raise UsageError("--scheduler reads the ranks of a job on a Dask cluster: give several traces or a folder of them")
    args.trace = _one_trace_folder(args)
    if args.more_traces or os.path.isdir(args.trace) or args.scheduler:
        return _run_job(args)
    if args.ranks is not None or args.workers != 1:
        raise UsageError("--ranks and --workers apply to a job (several traces, or a folder of them), not to one trace")
    if "all" in args.opt and len(args.opt) > 1:
        raise UsageError("--opt all ranks each optimization alone; it cannot be combined with other --opt")
    from .analysis import analyze, contention_arg

    args.contention = contention_arg(args.contention)  # a usage error before the slow load
    specs = [] if args.opt == ["all"] else list(args.opt)
    if args.opt == ["all"]:
        specs = None
    from .optimizations import parse_spec

    opts = [parse_spec(s) for s in specs] if specs else []  # usage errors before the slow load
    if args.compare_to and specs is None:
        raise UsageError("--compare-to compares one prediction with a measurement; it cannot be combined with --opt all")
    _check_files(args)
    progress = _Progress(args.trace)
    table = _load(args.trace, args.strict)
    progress.stage(f"read {len(table):,} events; building the graph and replaying")
    if args.save_table:
        _save_table(args.save_table, table)
    try:
        result = analyze(table, opts, rank_all=specs is None, contention=args.contention)
    except TraceFormatError as e:  # found by the replay (e.g. damaged times): name the file the user gave
        if e.path == args.trace:
            raise
        raise TraceFormatError(args.trace, e.where, e.reason) from None
    progress.stage("analysis done")
    if args.compare_to:
        _compare(result, args)
    _check_trust(result.report, args)
    if args.timeline == "-":
        _timeline_to_stdout(result)
    elif args.timeline:
        _atomic(args.timeline, result.write_timeline)
        if result.predicted_graph is None and args.opt:  # --opt all ranks many; a refused --opt made none
            _warn(f"{args.timeline}: holds the baseline replay only "
                  + ("(--opt all ranks each optimization alone; give --opt NAME for a prediction's timeline)"
                     if specs is None else "(the --opt asked did not apply)"))
    if args.json:
        from .report.report_model import report_json

        _write(args.json, report_json(result.report))
    if args.plot:
        from .render.svg import render_html, render_svg

        draw = render_html if args.plot.lower().endswith(".html") else render_svg
        _write(args.plot, draw(result.report).encode())
    _write_tables(args, result.report)
    if "-" not in (args.json, args.timeline):
        from .render.text import render_text

        try:
            sys.stdout.write(render_text(result.report, details=args.details))
            sys.stdout.flush()
        except BrokenPipeError:
            raise
        except OSError as e:
            raise UsageError(f"cannot write the report to standard output: {e.strerror or e}") from None
    return _not_applicable_status(result.report)


#: exit status when an optimization asked for by name does not apply (the report is printed)
EXIT_NOT_APPLICABLE = 3


def _not_applicable_status(report) -> int:
    """0, or :data:`EXIT_NOT_APPLICABLE` with one stderr line per optimization asked for by name
    that does not apply (``--opt all`` ranks them instead, lists them in ``not_applicable`` too,
    and exits 0)."""
    from .report.report_model import requested_not_applicable

    asked = {} if getattr(report, "ranked", False) else requested_not_applicable(report.not_applicable, getattr(report, "ranking", []))
    for name, why in asked.items():
        print(_one_line(f"daydream-analyze: not applicable: {name}: {why}"), file=sys.stderr)
    return EXIT_NOT_APPLICABLE if asked else 0


def _write_tables(args, report) -> None:
    """``--csv DIR``: the report's tables as CSV files (daydream.render.table_text.write_csv)."""
    if not getattr(args, "csv", None) or report.tables is None:
        return
    from .render.table_text import write_csv

    try:
        write_csv(report.tables, args.csv)
    except OSError as e:
        raise UsageError(f"cannot write the CSV tables to {args.csv}: {e.strerror or e}") from None


def _run_job(args) -> int:
    """Several traces (or a folder): one job, its ranks replayed coupled (daydream.job)."""
    from .job import analyze_job, job_report_json, render_job_text
    from .job.load import expand_inputs

    if (args.save_table or args.compare_to or getattr(args, "csv", None)
            or str(getattr(args, "contention", "off")).lower() != "off"):
        raise UsageError("a job (several traces) takes --opt NAME or all, --ranks, --json, --plot, --timeline, --strict-replay "
                         "and --workers; --save-table/--compare-to/--csv/--contention apply to one trace")
    rank_all = "all" in args.opt
    if rank_all and len(args.opt) > 1:
        raise UsageError("--opt all ranks each optimization alone; it cannot be combined with other --opt")
    if args.timeline == "-":
        raise UsageError("--timeline - (standard output) is for one trace; give a job's timeline a file name")
    if args.workers < 1:
        raise UsageError("--workers must be at least 1")
    try:
        only = sorted({int(x) for x in args.ranks.split(",")}) if args.ranks is not None else None
    except ValueError:
        raise UsageError(f"--ranks {args.ranks!r}: rank numbers separated by commas (e.g. 0,3)") from None
    _check_job_plot(args)
    if args.opt and not rank_all:  # before connecting to a cluster or reading any rank
        from .job.whatif import parse_job_specs

        parse_job_specs(list(args.opt), None)
    paths = [args.trace, *args.more_traces]
    inputs = expand_inputs(paths)
    _check_output(args.json, "--json", inputs)
    _check_output(args.plot, "--plot", inputs)
    _check_output(args.timeline, "--timeline", inputs)
    opts = [] if rank_all else args.opt
    if args.scheduler:
        from .job.scale import dask_mapper

        with dask_mapper(args.scheduler, debug=args.debug) as mapper:
            job = analyze_job(paths, opts=opts, only=only, strict=args.strict, mapper=mapper, rank_all=rank_all,
                              timeline=bool(args.timeline))
    else:
        from .job.load import cap_workers

        workers, why = cap_workers(args.workers, inputs) if args.workers > 1 else (1, "")
        if why:
            _warn(f"--workers {args.workers}: reading with {workers} processes ({why})")
        job = analyze_job(paths, opts=opts, only=only, strict=args.strict, workers=workers, rank_all=rank_all,
                          timeline=bool(args.timeline))
    for r in job.ranks:
        for w in r.warnings:
            _warn(w)
    if args.strict_replay and args.opt and job.report.trust == "unreliable":
        raise UnreliableReplay(f"{args.trace}: the job's coupled baseline replay is unreliable ({job.report.trust_reason}); "
                               "predictions refused (--strict-replay)")
    if args.json:
        _write(args.json, job_report_json(job.report))
    if args.timeline:
        _atomic(args.timeline, job.write_timeline)
        if job.predicted is None and args.opt:
            _warn(f"{args.timeline}: holds the coupled baseline replay only "
                  + ("(--opt all ranks each optimization alone; give --opt NAME for a prediction's timeline)"
                     if rank_all else "(the --opt asked did not apply)"))
    if args.plot:
        from .render.job_svg import render_job_html, render_job_svg

        _write(args.plot, (render_job_html if args.plot.lower().endswith(".html") else render_job_svg)(job.report).encode())
    if args.json != "-":
        sys.stdout.write(render_job_text(job.report))
        sys.stdout.flush()
    return _not_applicable_status(job.report)


def _check_job_plot(args) -> None:
    """A job's ``--plot``: .svg or .html, not the --json file (usage errors)."""
    if not args.plot:
        return
    if os.path.splitext(args.plot)[1].lower() not in (".svg", ".html"):
        raise UsageError(f"--plot {args.plot}: the file name must end in .svg or .html")
    _check_distinct(((args.json, "--json"), (args.plot, "--plot")))


class _Terminated(BaseException):
    """SIGTERM (a kill, a batch scheduler's time limit) or SIGHUP (the terminal closed) as an
    exception, so that ``finally`` blocks run: an nsys export's private copy in the temporary folder
    (4.3 GB) was left behind. ``signum``: which."""

    def __init__(self, signum: int = 15) -> None:
        super().__init__(signum)
        self.signum = signum


def _on_sigterm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise _Terminated(signum)


def _handle(signal, signums) -> dict:
    """Install :func:`_on_sigterm` for each of ``signums`` whose handler is the default (a SIGHUP
    that ``nohup`` ignores stays ignored); returns the previous handlers, to put back."""
    prev = {}
    for n in signums:
        if n == signal.SIGTERM or signal.getsignal(n) == signal.SIG_DFL:
            prev[n] = signal.signal(n, _on_sigterm)
    return prev


def _closed_stdio() -> bool:
    """Standard streams closed by the caller (``daydream-analyze ... >&-``): Python leaves them
    None, and the report's first write was an AttributeError (exit 1). Each is pointed at the null
    device; returns whether standard output was closed."""
    closed = sys.stdout is None
    for name in ("stderr", "stdout"):
        if getattr(sys, name) is None:
            try:
                setattr(sys, name, open(os.devnull, "w"))
            except OSError:
                pass
    return closed


def main(argv: list[str] | None = None) -> int:
    import signal
    import threading

    if _closed_stdio():
        print("daydream-analyze: warning: standard output is closed; the report's text (and any '-' output) is not written",
              file=sys.stderr)

    from . import errors

    signums = [signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
    prev = _handle(signal, signums) if threading.current_thread() is threading.main_thread() else {}
    errors.in_main = True
    try:
        return _main(argv)
    finally:
        errors.in_main = False
        for n, h in prev.items():
            signal.signal(n, h)


def _main(argv: list[str] | None) -> int:
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    _WARNINGS.clear()
    try:
        code = run(argv)
        _flush_warnings(True)
    except DaydreamError as e:
        _flush_warnings(debug)
        if debug:
            traceback.print_exc()
        print(_one_line(f"daydream-analyze: error: {e}" if not str(e).startswith("daydream-analyze") else str(e)), file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("daydream-analyze: interrupted", file=sys.stderr)
        code = 130
    except _Terminated as e:
        hup = e.signum != 15
        print("daydream-analyze: hung up (the terminal closed)" if hup else "daydream-analyze: terminated", file=sys.stderr)
        code = 128 + e.signum
    except BrokenPipeError:
        code = 0
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
    except Exception as e:  # a bug in daydream (or a Ctrl-C that an import turned into an ImportError)
        if caused_by_interrupt(e) and not debug:
            print("daydream-analyze: interrupted", file=sys.stderr)
            return 130
        if debug:
            traceback.print_exc()
        else:
            print(
                _one_line(f"daydream-analyze: internal error ({type(e).__name__}: {e}); please report it with the trace, and rerun with --debug for details"),
                file=sys.stderr,
            )
        code = 1
    return code


if __name__ == "__main__":
    sys.exit(main())
