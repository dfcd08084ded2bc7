"""One error family for everything daydream refuses to do.

Adapters, the graph builder and the CLI raise these; the CLI turns any of them into one line on
stderr and exit status 2. Anything else escaping, :class:`InternalError` included, is a bug in
daydream (exit status 1).
"""

from __future__ import annotations


class DaydreamError(Exception):
    """Base class: a clear, user-facing, one-line reason."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class TraceFormatError(DaydreamError):
    """A trace file that cannot be read.

    Args:
        path: the file, as the user named it.
        where: the place in the file: ``"byte offset 1234"``, ``"table CUPTI_ACTIVITY_KIND_KERNEL"``,
            ``"line 17"``, ``"traceEvents[42]"``; empty when the whole file is at fault.
        reason: what is wrong, in words a user can act on.
    """

    def __init__(self, path: str, where: str, reason: str) -> None:
        self.path = str(path)
        self.where = where
        self.reason = reason
        loc = f"{self.path}: {where}: " if where else f"{self.path}: "
        super().__init__(loc + reason)

    def __reduce__(self):
        # rebuilt from its three parts when it crosses a process boundary (``--workers``: a rank
        # read in a pool worker); pickled by its message alone it could not be, and the pool broke
        return (type(self), (self.path, self.where, self.reason))


class InternalError(Exception):
    """A broken invariant of daydream's own (a bug, not bad input): the CLI reports it as an
    internal error with exit status 1. Not a :class:`DaydreamError`, so nothing that handles bad
    input catches it."""


class UsageError(DaydreamError):
    """A bad command line: unknown optimization, bad parameter value, unwritable output."""


class NotApplicable(DaydreamError):
    """The optimization does not apply to this trace; the message says why."""


class UnreliableReplay(DaydreamError):
    """``--strict-replay``: the baseline replay is too far from the trace to predict from."""


_interrupted = False
#: whether the command's main() is running (set by daydream.cli.main): outside it, nothing is to be
#: unwound, and a KeyboardInterrupt raised in the interpreter's own code (runpy compiling the
#: module, the console script's import) would end in a traceback
in_main = False


def on_sigint(signum, frame):  # noqa: ARG001 - signal handler signature
    """The command's SIGINT handler: inside main(), Python's own (raise KeyboardInterrupt),
    remembering that it came, for :func:`caused_by_interrupt`; before or after it (start-up
    imports, interpreter code), the one line and exit status 130 at once."""
    global _interrupted
    _interrupted = True
    if not in_main:
        import os
        import sys

        try:
            sys.stderr.write("daydream-analyze: interrupted\n")
            sys.stderr.flush()
        finally:
            os._exit(130)
    raise KeyboardInterrupt


def caused_by_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is a Ctrl-C, or an error raised because of one: numpy, interrupted while it
    imports, re-raises the KeyboardInterrupt as an ImportError (``PyCapsule_Import could not
    import module "datetime"``), sometimes with the interrupt dropped from the chain: so also
    whether :func:`on_sigint` ran. Follows ``__cause__``/``__context__`` (at most 20 links)."""
    if _interrupted:
        return True
    for _ in range(20):
        if exc is None:
            return False
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
