"""Daydream: predict what an optimization would do to a DNN training iteration, from its trace.

The public surface, in one import::

    import daydream
    table = daydream.load_trace("trace.json.gz")          # any supported format
    result = daydream.analyze(table, ["amp", ("fusion", {"reads": 3})])
    print(result.report.predictions[0].window.speedup)

Own what-ifs use the primitives (``select``, ``scale``, ``remove``, ``insert``, ``add_edges``,
``set_priority``) on ``result.graph`` and replay with ``simulate``; ``optimizations()`` is the
registry behind ``--opt``.
"""

__version__ = "0.1.0"

import os as _os
import sys as _sys


def _cli_entry() -> bool:
    """Whether this process is the ``daydream-analyze`` command (its console script, or
    ``python -m daydream.cli``)."""
    argv = getattr(_sys, "orig_argv", _sys.argv)
    return _os.path.basename(_sys.argv[0] or "").startswith("daydream-analyze") or "daydream.cli" in argv[:4]


if _cli_entry():  # a Ctrl-C remembered even where an import turns it into another error (daydream.errors)
    import signal as _signal
    import threading as _threading

    from .errors import on_sigint as _on_sigint

    if _threading.current_thread() is _threading.main_thread():
        _signal.signal(_signal.SIGINT, _on_sigint)

try:  # the heavy imports (numpy, every stage): a Ctrl-C here is the command's "interrupted", not a traceback
    from .analysis import Result, analyze, resolve_opt  # noqa: E402
    from .formats import load_trace  # noqa: E402
    from .graph import EdgeKind, Origin, Rule, TaskGraph, build_graph, register_kind  # noqa: E402
    from .mapping import map_events  # noqa: E402
    from .optimizations import NotApplicable, parse_spec  # noqa: E402
    from .optimizations import load_all as optimizations  # noqa: E402
    from .simulate import Timeline, simulate  # noqa: E402
    from .transform import add_edges, add_kernel_after, insert, remove, scale, select, set_priority  # noqa: E402
except BaseException as _e:  # (numpy turns a Ctrl-C during its import into an ImportError)
    from .errors import caused_by_interrupt as _by_ctrl_c

    if not (_cli_entry() and _by_ctrl_c(_e)):
        raise
    _sys.stderr.write("daydream-analyze: interrupted\n")
    raise SystemExit(130) from None

__all__ = [
    "EdgeKind", "NotApplicable", "Origin", "Result", "Rule", "TaskGraph", "Timeline", "__version__", "add_edges",
    "add_kernel_after", "analyze", "build_graph", "insert", "load_trace", "map_events", "optimizations", "parse_spec",
    "register_kind", "remove", "resolve_opt", "scale", "select", "set_priority", "simulate",
]
