"""Kineto ``ts``/``dur``: JSON number texts in microseconds to exact int64 nanoseconds.

Three parses give the same values (the tests compare them): :func:`_us_join_parse`, the fast one
(numpy's C integer parser over the texts joined in one buffer; plain decimals only), the numpy
byte-matrix parse of :func:`_us_text_to_ns` (the reference) and its compiled twin
:func:`_parse_us_kernel` (through :mod:`daydream.util.jit`, for traces of millions of events);
what none takes goes through ``Decimal`` (:func:`_us_fallback`). Also home of :data:`_FAST`, the
switch of every fast path of the Kineto reader (read as ``times._FAST`` by the other parts).
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Optional

import numpy as np

from ...util import jit

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_MAX_US_INT = (_INT64_MAX - 999) // 1000
#: longest JSON number text parsed column-wise (longer ones take the slow path)
_MAX_NUMBER_TEXT = 40

#: False: the reference path everywhere a faster one exists (zlib, the numpy ts/dur parse, the
#: searchsorted join of sparse columns, the (ph, cat) dict); tests compare both
_FAST = True

#: events already read from a file before its ts/dur texts are parsed by the compiled kernel
#: (:func:`_parse_us_kernel`; both give the same values) where the joined-buffer parse
#: (:func:`_us_join_parse`, used first) declines them (texts that are not plain decimals). Importing numba and loading the cached
#: kernel cost ~0.5 s CPU and ~115 MB of peak RSS (LLVM; measured on the bench VM); the kernel saves
#: ~0.4 us a value over the numpy byte matrix. From 2 M events on a file pays for both (a 1 M-event
#: load stays as it was, below its file size in peak memory, scripts/bench.py)
US_KERNEL_AFTER_EVENTS = 2_000_000


def _us_text_to_ns(raws: list, events_seen: int = 0, method: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Exact int64 ns from JSON number texts in microseconds; returns (ns, ok).

    By default the texts go to :func:`_us_join_parse` (one buffer, numpy's C integer parser),
    which takes them when every one is a plain decimal; else (or with ``method`` set otherwise)
    plain decimals (``-?digits[.digits]``) are parsed in bulk: by a compiled pass over the texts
    joined in one buffer (:func:`_parse_us_kernel`, once ``events_seen`` reaches
    :data:`US_KERNEL_AFTER_EVENTS`, or ``method="kernel"`` / ``"kernel-py"`` uncompiled for
    tests), else column-wise with numpy (``method="numpy"``); the rest (exponents, numbers
    written as JSON strings, null, absent) go through ``Decimal`` one by one (rare), absent and
    non-numbers giving ok=False. More than 3 decimals round half away from zero; a value beyond
    int64 saturates (and is then skipped as out of range).
    """
    n = len(raws)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    if (method == "auto" and _FAST) or method == "join":
        got = _us_join_parse(raws)
        if got is not None:
            return got
    fn = None
    if method == "kernel-py":
        fn = _parse_us_kernel
    elif method != "numpy" and jit.wanted(events_seen + n, US_KERNEL_AFTER_EVENTS, forced=method == "kernel"):
        fn = jit.compiled(_parse_us_kernel)
    if fn is not None:
        lens = np.fromiter(map(len, raws), np.int64, count=n)
        offs = np.zeros(n + 1, np.int64)
        np.cumsum(lens, out=offs[1:])
        buf = np.frombuffer(b"".join(raws), np.uint8)
        ns, simple, empty = jit.call(fn, buf, offs, _MAX_US_INT, _MAX_NUMBER_TEXT)
        return _us_fallback(raws, ns, simple, empty, lambda i: bytes(raws[i]))
    bs = list(map(bytes, raws))
    a = np.array(bs, dtype=bytes)
    if a.dtype.itemsize > _MAX_NUMBER_TEXT:  # not a plain number (e.g. an object); keep the matrix small
        a = np.array([b if len(b) <= _MAX_NUMBER_TEXT else b"?" for b in bs], dtype=bytes)
    w = a.dtype.itemsize
    # column-major: byte j of every text is one contiguous row
    mat = np.ascontiguousarray(a.view(np.uint8).reshape(n, w).T)
    del a
    neg = mat[0] == 45  # '-'
    allowed = _PLAIN_BYTE[mat]  # digits, '.', padding
    allowed[0] |= neg
    dig = _DIGIT_VALUE[mat]  # -1 for other bytes
    dot = mat == 46
    n_dots = dot.sum(axis=0)
    dotpos = np.where(n_dots > 0, dot.argmax(axis=0), w)
    del dot
    empty = mat[0] == 0
    ip = np.zeros(n, np.int64)
    int_digits = np.zeros(n, np.int64)
    for j in range(w):
        take = (dig[j] >= 0) & (j < dotpos)
        int_digits += take
        ip = np.where(take, ip * 10 + dig[j], ip)
    simple = allowed.all(axis=0) & (n_dots <= 1) & (int_digits >= 1) & (int_digits <= 18) & ~empty
    rows = np.arange(n)
    frac = np.zeros(n, np.int64)
    for k in (1, 2, 3, 4):
        c = dotpos + k
        d = dig[np.minimum(c, w - 1), rows]
        d = np.where((c < w) & (d >= 0), d, 0).astype(np.int64)
        if k < 4:
            frac = frac * 10 + d
        else:
            frac = frac + (d >= 5)
    simple &= ip <= _MAX_US_INT  # ip * 1000 + 999 fits in int64
    ns = np.where(simple, ip, 0) * 1000 + frac
    ns = np.where(neg, -ns, ns)
    return _us_fallback(raws, ns, simple, empty, bs.__getitem__)


_POW10 = 10 ** np.arange(19, dtype=np.int64)
#: |k| below which k with d <= 3 decimals is a ts/dur of at most _MAX_US_INT whole us
_US_LIMIT = (_MAX_US_INT + 1) * _POW10[:4]


def _us_join_parse(raws: list) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """(ns, ok) of JSON number texts in microseconds, as :func:`_us_text_to_ns` gives them, or
    None when some text is neither empty (an absent value) nor a plain decimal
    ``-?digits[.digits]`` (the caller then parses them the reference way).

    The texts are joined with spaces into one buffer whose grammar is checked with numpy; the
    digits (the dot removed) are read by numpy's C integer parser (``np.fromstring``, one
    call), and each value k with d decimals becomes ``k * 10^(3 - d)`` ns (d > 3: the first
    3 decimals, the 4th rounding half away from zero). Texts with more than 19 digits, or a
    value beyond ``_MAX_US_INT`` us, take ``Decimal`` (as in the reference), so the result is
    the exact value for every text.
    """
    n = len(raws)
    joined = b" ".join(raws)
    u = np.frombuffer(joined, np.uint8)
    if len(u) == 0:  # one empty text
        return np.zeros(n, np.int64), np.zeros(n, bool)
    if u.max() > 57:  # '9'
        return None
    sep = np.flatnonzero(u == 32)
    minus = np.flatnonzero(u == 45)
    dots = np.flatnonzero(u == 46)
    if len(sep) != n - 1 or np.count_nonzero(u < 48) != len(sep) + len(minus) + len(dots):  # a byte not in "0-9 -."
        return None
    start = np.empty(n, np.int64)
    start[0] = 0
    start[1:] = sep + 1
    end = np.empty(n, np.int64)
    end[:-1] = sep
    end[-1] = len(u)
    full = end > start  # empty texts (absent values): ok False, ns 0, as the reference gives
    nfull = int(np.count_nonzero(full))
    if nfull == 0:
        return np.zeros(n, np.int64), np.zeros(n, bool)
    neg = np.zeros(n, bool)
    neg[full] = u[start[full]] == 45
    # '-' only first and followed by a digit; '.' between digits, at most one a text
    if len(minus) and (len(minus) != int(neg.sum()) or not np.all(minus + 1 < end[neg])):
        return None
    if len(dots) == n:  # a dot in every text: dot i must lie inside text i
        if not (np.all(dots > start + neg) and np.all(dots + 1 < end)):
            return None
        dec = end - dots - 1  # decimals of each text
    else:
        dec = np.zeros(n, np.int64)
        if len(dots):
            owner = np.searchsorted(sep, dots)  # the text holding each dot
            if np.any(owner[1:] == owner[:-1]) or np.any(dots <= start[owner] + neg[owner]) or np.any(dots + 1 >= end[owner]):
                return None
            dec[owner] = end[owner] - dots - 1
    try:
        k = np.fromstring(joined.replace(b".", b""), dtype=np.int64, sep=" ")
    except ValueError:
        return None
    if len(k) != nfull:
        return None
    if nfull < n:
        k_full = np.zeros(n, np.int64)
        k_full[full] = k
        k = k_full
    ndig = end - start - neg - (dec > 0)
    hi = int(dec.max())
    if hi <= 3:  # k * 10^(3 - d): exact where |k| < (_MAX_US_INT + 1) * 10^d (else Decimal)
        lim = _US_LIMIT[dec]
        simple = (ndig <= 19) & (k < lim) & (k > -lim) & full  # a saturated k (too many digits) fails too
        ns = k if int(dec.min()) == 3 else k * _POW10[3 - dec]
    else:
        simple = (ndig <= 19) & (k != _INT64_MAX) & (k != _INT64_MIN) & full
        mag = np.abs(np.where(simple, k, 0))
        d = np.minimum(dec, 18)
        simple &= mag // _POW10[d] <= _MAX_US_INT
        mag = np.where(simple, mag, 0)
        small = d <= 3
        dd = np.where(small, 4, d)
        ns = np.where(small, mag * _POW10[np.where(small, 3 - d, 0)], mag // _POW10[dd - 3] + ((mag // _POW10[dd - 4]) % 10 >= 5))
        ns = np.where(neg, -ns, ns)
    return _us_fallback(raws, ns, simple, ~full, lambda i: bytes(raws[i]))


def _us_fallback(raws, ns: np.ndarray, simple: np.ndarray, empty: np.ndarray, text) -> tuple[np.ndarray, np.ndarray]:
    """(ns, ok) after the ``Decimal`` parse of the texts that are neither plain nor empty."""
    ok = simple.copy()
    for i in np.nonzero(~simple & ~empty)[0].tolist():
        b = text(i)
        if b[:1] == b'"' and b[-1:] == b'"':  # a number written as a JSON string (rocprof): its text
            b = b[1:-1].strip()
        try:
            v = (Decimal(b.decode("ascii")) * 1000).to_integral_value(rounding=ROUND_HALF_UP)
            if v.is_finite():  # beyond int64: saturated, so that it is skipped as out of range
                ns[i] = int(min(max(v, _INT64_MIN + 1), _INT64_MAX - 1))
                ok[i] = True
        except (ArithmeticError, UnicodeDecodeError, ValueError):  # decimal.InvalidOperation, Overflow, ...
            pass
    return ns, ok


def _parse_us_kernel(buf, offs, max_us_int, max_text):
    """The numpy byte-matrix parse of :func:`_us_text_to_ns`, text by text (compiled by numba).

    Text i is ``buf[offs[i]:offs[i + 1]]``. Returns (ns, simple, empty): ``simple`` where the
    text is ``-?digits[.digits]`` with 1-18 integer digits and a value that fits (then ``ns``
    is exact: 3 decimals, the 4th rounding half away from zero); for other texts ``ns`` is what
    the matrix parse leaves there (the first 3 decimals after the first dot, signed; 0 for a
    text over ``max_text`` bytes), overwritten by the ``Decimal`` fallback where it parses.
    """
    n = len(offs) - 1
    ns = np.zeros(n, np.int64)
    simple = np.zeros(n, np.bool_)
    empty = np.zeros(n, np.bool_)
    for i in range(n):  # bytes are read as int64 (uint8 arithmetic would wrap uncompiled)
        a = offs[i]
        b = offs[i + 1]
        if a == b:
            empty[i] = True
            continue
        neg = np.int64(buf[a]) == 45
        j = a + 1 if neg else a
        ip = 0
        nd = 0
        while j < b and 48 <= np.int64(buf[j]) <= 57:
            if nd < 18:
                ip = ip * 10 + (np.int64(buf[j]) - 48)
            nd += 1
            j += 1
        frac = 0
        up = 0
        if j < b and np.int64(buf[j]) == 46:
            j += 1
            k = 0
            while j < b and 48 <= np.int64(buf[j]) <= 57:
                if k < 3:
                    frac = frac * 10 + (np.int64(buf[j]) - 48)
                elif k == 3 and np.int64(buf[j]) >= 53:
                    up = 1
                k += 1
                j += 1
            while k < 3:
                frac *= 10
                k += 1
        if j == b and 1 <= nd <= 18 and ip <= max_us_int:
            v = ip * 1000 + frac + up
            ns[i] = -v if neg else v
            simple[i] = True
        elif b - a <= max_text:  # what the matrix parse leaves for a text it does not take
            p = a
            while p < b and np.int64(buf[p]) != 46:
                p += 1
            v = 0
            for k in range(1, 5):
                c = p + k
                d = np.int64(buf[c]) - 48 if c < b and 48 <= np.int64(buf[c]) <= 57 else 0
                if k < 4:
                    v = v * 10 + d
                elif d >= 5:
                    v += 1
            ns[i] = -v if neg else v
    return ns, simple, empty


#: bytes of a plain decimal text in the matrix of _us_text_to_ns: digits, '.', padding (0)
_PLAIN_BYTE = np.zeros(256, bool)
_PLAIN_BYTE[48:58] = True
_PLAIN_BYTE[46] = True
_PLAIN_BYTE[0] = True
#: value of a digit byte, -1 for any other byte
_DIGIT_VALUE = np.full(256, -1, np.int8)
_DIGIT_VALUE[48:58] = np.arange(10)


def _lookup(keys: list, table: dict, n: int, dtype) -> np.ndarray:
    return np.fromiter(map(table.__getitem__, keys), dtype=dtype, count=n)
