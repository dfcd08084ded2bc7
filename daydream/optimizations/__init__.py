"""Optimizations: each one a module in this package that registers itself with :func:`register`.

An optimization changes a :class:`~daydream.graph.TaskGraph` the way the real optimization would
change the program, using only the primitives of :mod:`daydream.transform`. Its model constants
are named parameters with a default, a unit and the source of the default, overridable on the
command line: ``--opt NAME:param=value,param=value``.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import NotApplicable, UsageError  # noqa: F401 - NotApplicable re-exported (defined in daydream.errors)
from ..graph import TaskGraph


#: largest integer parameter written in float notation (1e9): floats are exact integers up to 2^53
MAX_INTEGRAL_FLOAT = 2**53


def integer_ns(text: str) -> int:
    """An integer number of ns from the command line: ``5000``, or float notation of an integer
    (``5e3``, ``5000.0``, ``1e9``), as the float-typed ns parameters accept it.

    Raises:
        ValueError: not a number, a fraction (``5000.5``), not finite, or beyond 2^53 in float notation.
    """
    t = text.strip()
    try:
        return int(t)
    except ValueError:
        pass
    v = float(t)
    if not (abs(v) <= MAX_INTEGRAL_FLOAT and v == int(v)):  # NaN fails the first test
        raise ValueError(f"not an integral number: {text!r}")
    return int(v)


integer_ns.__name__ = "integer number of ns (5000, 5e3 or 5000.0; not a fraction)"  # named in --opt errors


@dataclass(frozen=True)
class Param:
    """One model parameter of an optimization."""

    default: Any
    help: str  #: meaning, unit and the source of the default
    type: Callable[[str], Any] = float
    check: Callable[[Any], bool] | None = None  #: validity test of a value
    check_help: str = ""


@dataclass(frozen=True)
class Optimization:
    """A registered optimization.

    ``apply(graph, params) -> (graph, note)`` returns the transformed graph and a one-line note on
    what it changed; it raises :class:`NotApplicable` with the reason when nothing applies.
    """

    name: str
    summary: str
    apply: Callable[[TaskGraph, dict[str, Any]], tuple[TaskGraph, str]]
    params: dict[str, Param] = field(default_factory=dict)
    #: a generic what-if (e.g. scale-kernels): may be given several times, and is not ranked by --opt all
    what_if: bool = False
    #: ``warn(graph, params) -> [line]``: what the prediction assumed that the user should know
    #: (a tp degree over one node costed on the intra-node link), shown as the report's warnings
    warn: Callable[[TaskGraph, dict[str, Any]], list[str]] | None = None

    def resolve(self, overrides: dict[str, str]) -> dict[str, Any]:
        """Defaults overridden by ``overrides`` (strings from the command line), type-checked.

        Raises:
            UsageError: unknown parameter or a value of the wrong type or range.
        """
        out = {k: p.default for k, p in self.params.items()}
        for k, raw in overrides.items():
            p = self.params.get(k)
            if p is None:
                known = ", ".join(self.params) or "none"
                raise UsageError(f"--opt {self.name}: unknown parameter {k!r} (parameters: {known})")
            try:
                v = p.type(raw)
            except (TypeError, ValueError):
                what = getattr(p.type, "__name__", "value")  # a description that has its article is used as it is
                what = what if what.startswith(("a ", "an ")) else "a valid " + what
                raise UsageError(f"--opt {self.name}: {k}={raw!r} is not {what}") from None
            if isinstance(v, float) and v != v:
                raise UsageError(f"--opt {self.name}: {k}={raw!r} is not a number")
            if isinstance(v, float) and abs(v) == float("inf"):  # no model parameter is infinite; its arithmetic would give NaN
                raise UsageError(f"--opt {self.name}: {k}={raw!r} is not a finite number")
            if isinstance(v, int) and not isinstance(v, bool) and not -(1 << 62) <= v < (1 << 62):  # arrays hold int64
                raise UsageError(f"--opt {self.name}: {k}={raw!r} out of range ({p.check_help or 'below 2^62 in magnitude'})")
            if p.check is not None and not p.check(v):
                raise UsageError(f"--opt {self.name}: {k}={raw!r} out of range ({p.check_help})")
            out[k] = v
        return Params(out, overrides)


class Params(dict):
    """Resolved parameters (name -> typed value), remembering the strings the user gave
    (``given``: name -> raw text) so that reports echo them as written."""

    given: dict[str, str]

    def __init__(self, values: dict[str, Any], given: dict[str, str] | None = None) -> None:
        super().__init__(values)
        self.given = dict(given or {})


def echo(params: dict[str, Any]) -> dict[str, str]:
    """Parameters as text for a report: as the user wrote them where given, else the value."""
    given = getattr(params, "given", {})
    return {k: given.get(k, str(v)) for k, v in params.items()}


REGISTRY: dict[str, Optimization] = {}


def register(opt: Optimization) -> Optimization:
    if opt.name in REGISTRY:
        raise RuntimeError(f"optimization {opt.name!r} registered twice")
    REGISTRY[opt.name] = opt
    return opt


def load_all() -> dict[str, Optimization]:
    """Import every module of this package (each registers its optimizations); the registry."""
    for m in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{m.name}")
    return dict(sorted(REGISTRY.items()))


def parse_spec(spec: str) -> tuple[Optimization, dict[str, Any]]:
    """``"name:p=v,q=w"`` -> (optimization, resolved parameters).

    Raises:
        UsageError: unknown optimization, malformed spec, or bad parameters.
    """
    opts = load_all()
    name, _, rest = spec.partition(":")
    name = name.strip()
    opt = opts.get(name)
    if opt is None and name in JOB_ONLY:
        raise UsageError(f"{name} is a what-if of a job: give every rank's trace (or their folder), docs/jobs.md")
    if opt is None:
        raise UsageError(f"unknown optimization {name!r}; --list-opts shows the available ones ({', '.join(opts)})")
    return opt, opt.resolve(split_params(spec, rest))


def split_params(spec: str, rest: str) -> dict[str, str]:
    """The parameters after ``name:`` in ``spec`` as name -> value text. Items are separated by
    commas; a value in double or single quotes (``pattern="a{1,3}"``, ``pattern='a,b'``) may hold
    commas and the other quote, and loses its quotes. Every ``--opt`` (single traces and jobs) goes
    through here.

    Raises:
        UsageError: an item without ``=``, a parameter given twice, an unclosed quote, or text
            after a closing quote before the next comma.
    """
    out: dict[str, str] = {}
    if not rest.strip():
        return out
    malformed = (f"--opt {spec!r}: parameters are written name=value, separated by commas; "
                 "a value holding a comma goes in quotes (pattern=\"a{1,3}\")")
    i, n = 0, len(rest)
    while True:
        eq = rest.find("=", i)
        comma = rest.find(",", i)
        if eq < 0 or (0 <= comma < eq) or not rest[i:eq].strip():
            raise UsageError(malformed)
        k = rest[i:eq].strip()
        j = eq + 1
        while j < n and rest[j].isspace():
            j += 1
        if j < n and rest[j] in "\"'":
            q = rest[j]
            close = rest.find(q, j + 1)
            if close < 0:
                raise UsageError(f"--opt {spec!r}: the quote {q} of {k} is not closed")
            v = rest[j + 1:close]
            end = rest.find(",", close + 1)
            end = n if end < 0 else end
            if rest[close + 1:end].strip():
                raise UsageError(f"--opt {spec!r}: text after the closing quote {q} of {k}; "
                                 "separate parameters with commas")
        else:
            end = rest.find(",", j)
            end = n if end < 0 else end
            v = rest[j:end].strip()
        if k in out:
            raise UsageError(f"--opt {spec!r}: parameter {k!r} given twice")
        out[k] = v
        if end >= n:
            return out
        i = end + 1


def check_composition(opts: list[tuple[Optimization, dict[str, Any]]]) -> None:
    """Refuse an optimization given twice (applying AMP twice compounds its model silently);
    generic what-ifs may repeat.

    Raises:
        UsageError: the same optimization twice.
    """
    seen = set()
    for o, _ in opts:
        if o.name in seen and not o.what_if:
            raise UsageError(f"--opt {o.name} is given twice; an optimization applies once")
        seen.add(o.name)


#: what-ifs of a job only (``daydream.job.whatif``: several ranks' traces replayed coupled): name -> (summary, parameters)
JOB_ONLY: dict[str, tuple[str, dict[str, str]]] = {
    "straggler": ("a job's rank as fast as the median rank: it starts its step with the median rank and its work is "
                  "scaled to the median's (job only: give every rank's trace, docs/jobs.md)",
                  {"rank": "the rank made as fast as the median (required)"}),
}


def describe_all() -> str:
    """The ``--list-opts`` text: one line per optimization, then its parameters; the job-only what-ifs last."""
    lines = []
    for name, opt in load_all().items():
        lines.append(f"{name:<16} {opt.summary}" + ("  [what-if; not ranked by --opt all]" if opt.what_if else ""))
        for k, p in opt.params.items():
            d = f"{p.default:.4g}" if isinstance(p.default, float) else str(p.default)
            lines.append(f"    {k + '=' + d:<28} {p.help}")
    for name, (summary, params) in JOB_ONLY.items():
        lines.append(f"{name:<16} {summary}  [job what-if]")
        lines.extend(f"    {k + '=R':<28} {h}" for k, h in params.items())
    return "\n".join(lines) + "\n"
