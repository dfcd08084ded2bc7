"""Names from a trace made safe for each place they are shown.

A trace is a file from somewhere else: every name in it (kernel, op, annotation, NVTX range,
thread, device, process) is text its author chose, and may hold terminal escape sequences (an
``ESC [2J`` clears the screen, ``ESC ]0;...BEL`` retitles the terminal), NUL, or bidirectional
overrides (U+202E) that make text read differently from what it is. This module is the one place
where such text becomes displayable:

* terminal (text report, warnings, errors): :func:`terminal_text` replaces every character that
  is not printable (C0/C1 controls, DEL, format and bidi controls, line and paragraph separators)
  by its visible escape (``\\x1b``, ``\\u202e``), and shortens over-long text with the cut marked;
* HTML and SVG: :func:`markup_text` escapes ``& < > " '`` (so ``<script>`` and ``]]>`` stay text);
* JSON (``--json``, the Chrome timeline): the raw name; the JSON encoder makes it valid.

Nothing read from a trace is used as a file path, a regular expression, a format string or code.
"""

from __future__ import annotations

import html

#: marks where :func:`terminal_text` cut a name
CUT = "..."


def terminal_text(text: str, max_len: int | None = None) -> str:
    """``text`` with each non-printable character replaced by its escape, at most ``max_len``
    characters long (the end cut and marked with :data:`CUT`) when given."""
    if not text.isprintable():
        text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    if max_len is not None and len(text) > max_len:
        text = text[: max(max_len - len(CUT), 0)] + CUT
    return text


def terminal_lines(text: str) -> str:
    """Each line of ``text`` through :func:`terminal_text` (the newlines kept)."""
    return "\n".join(terminal_text(line) for line in text.split("\n"))


def markup_text(text: str) -> str:
    """``text`` for HTML or SVG: markup characters escaped, non-printable ones as escapes."""
    return html.escape(terminal_text(text), quote=True)


def plural(n: int, word: str, many: str | None = None) -> str:
    """``n`` and ``word`` agreeing in number: ``1 GPU``, ``4 GPUs``, ``1 micro-batch``, ``2,048 micro-batches``
    (``many``: the plural when it is not ``word + "s"``)."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"
