"""A user's regular expression (``--opt scale-kernels:pattern=...``, scale-cpu's ``range=``,
``select(name=...)``), compiled so that no pattern can hang a run.

Python's ``re`` backtracks: ``(a+)+$`` searched in 28 ``a`` and a ``b`` took 27-42 s (issue 37).
Every pattern RE2 can express (``google-re2``; RE2 matches in time linear in the text whatever
the pattern: https://github.com/google/re2/wiki/WhyRE2) is matched by RE2. RE2 has no
look-around (``(?!nccl)``) and no back-references (``\\1``); a pattern that needs them is matched
by Python's ``re`` under a time budget: all its searches together may take
:data:`MATCH_BUDGET_S` seconds, past which :class:`~daydream.errors.DaydreamError` says so (the
budget is a ``SIGALRM`` interval timer, so such a pattern is matched in the main thread only).
Names from a trace are never compiled as patterns.
"""

from __future__ import annotations

import re
import signal
import threading
import time

import numpy as np
import re2

from ..errors import DaydreamError

#: longest regular expression a user may give: keeps the cost of compiling it bounded
MAX_PATTERN_CHARS = 1000
#: memory RE2 may use for one compiled expression (RE2's own default ``max_mem``, 8 MiB); an
#: expression needing more is refused as too complex
MAX_PATTERN_MEM = 8 << 20
#: seconds all the searches of one look-around/back-reference pattern (Python's ``re``) may take
#: together. Not fitted to any trace: a user-facing bound on one run's wait; a search of a
#: look-around pattern without nested quantifiers in a 10,000-character kernel name takes
#: microseconds, so only a backtracking pattern comes near it.
MATCH_BUDGET_S = 5.0

#: RE2's words for the constructs it lacks (look-around, back-references): such a pattern goes to ``re``
_RE2_LACKS = ("invalid perl operator", "invalid escape sequence", "invalid named capture group")


def compile_user_pattern(pattern: str, *, ignore_case: bool = False):
    """``pattern`` compiled: an object with ``.search(text[, pos[, endpos]])`` (None or a match)
    and ``.pattern``.

    Args:
        pattern: the user's expression (Python ``re`` syntax).
        ignore_case: match letters of either case.

    Raises:
        DaydreamError: longer than :data:`MAX_PATTERN_CHARS`, not a valid expression, or too
            complex for RE2 (over :data:`MAX_PATTERN_MEM`); the message quotes the pattern. A
            look-around/back-reference pattern's ``.search`` raises it when the searches exceed
            :data:`MATCH_BUDGET_S`, or when called off the main thread.
    """
    if not isinstance(pattern, str):
        raise DaydreamError(f"regular expression {pattern!r}: a string is needed")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise DaydreamError(f"regular expression of {len(pattern):,} characters; at most {MAX_PATTERN_CHARS:,} are accepted")
    opts = re2.Options()
    opts.log_errors = False  # RE2 would print its own line on stderr: the error below is the one line
    opts.case_sensitive = not ignore_case
    opts.max_mem = MAX_PATTERN_MEM
    try:
        return re2.compile(pattern, opts)
    except re2.error as e:
        why = e.args[0].decode("utf-8", "replace") if e.args and isinstance(e.args[0], bytes) else str(e)
    if not any(k in why for k in _RE2_LACKS):
        raise DaydreamError(f"bad regular expression {pattern!r}: {why}")
    try:
        return _Bounded(re.compile(pattern, re.IGNORECASE if ignore_case else 0))
    except re.error as e:
        raise DaydreamError(f"bad regular expression {pattern!r}: {e}") from None


class _Timeout(BaseException):
    pass


def _alarm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise _Timeout()


class _Bounded:
    """A Python ``re`` pattern whose searches share one time budget (:data:`MATCH_BUDGET_S`)."""

    def __init__(self, rx: re.Pattern) -> None:
        self._rx = rx
        self.pattern = rx.pattern
        self._left = MATCH_BUDGET_S

    def _refuse(self) -> DaydreamError:
        return DaydreamError(f"regular expression {self.pattern!r}: matching it took over {MATCH_BUDGET_S:g} s "
                             "(catastrophic backtracking; look-around and back-references are matched by Python's re, "
                             "which backtracks): simplify it, e.g. without nested repeats like (a+)+")

    def search(self, text: str, *args):
        return self._searches([text], args, False)[0]

    def search_many(self, texts: list[str]) -> np.ndarray:
        """Per text whether :meth:`search` finds a match (bool, shape (len(texts),)): the same
        budget and errors, one interval timer for them all (setting and clearing the timer and
        the handler per search cost more than the searches: 18,500 distinct range names of the
        1 M nsys bench table, 0.6 s under cProfile)."""
        return np.array(self._searches(texts, (), True), bool).reshape(len(texts))

    def _searches(self, texts: list[str], args: tuple, found: bool) -> list:
        if threading.current_thread() is not threading.main_thread():
            raise DaydreamError(f"regular expression {self.pattern!r}: look-around and back-references can be matched "
                                "only in the main thread (their time bound is a signal); use an expression without them")
        if self._left <= 0:
            raise self._refuse()
        prev = signal.signal(signal.SIGALRM, _alarm)
        t0 = time.perf_counter()
        try:
            signal.setitimer(signal.ITIMER_REAL, self._left)
            search = self._rx.search
            if found:
                return [search(t, *args) is not None for t in texts]
            return [search(t, *args) for t in texts]
        except _Timeout:
            self._left = 0.0
            raise self._refuse() from None
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, prev)
            self._left -= time.perf_counter() - t0


def search_mask(rx, texts) -> np.ndarray:
    """Per text of ``texts`` (a sequence of str) whether the compiled user pattern ``rx``
    (:func:`compile_user_pattern`) finds a match: bool array of ``len(texts)``. Errors as
    ``rx.search``'s (a look-around pattern over its budget, or off the main thread)."""
    many = getattr(rx, "search_many", None)
    if many is not None:
        return many(list(texts))
    search = rx.search
    return np.fromiter((search(t) is not None for t in texts), bool, count=len(texts))
