"""A rank's result as plain data, for the trip back from a Dask worker (``--scheduler``).

Pickle runs code named by the data it reads, so a worker (or anyone between it and the
coordinator) could run code in the coordinating process through a pickled result. :func:`encode`
writes a :class:`~daydream.job.load.RankTrace` as msgpack (``msgspec``) of plain values: numbers,
strings, bytes, lists, dicts, numpy arrays as (dtype, shape, bytes) — object arrays as lists of
values — and daydream's own classes as (class name, fields). :func:`decode` rebuilds only the
classes of :data:`ALLOWED` (no ``__init__``, no ``__setstate__``, no import by name): a hostile
worker can send wrong numbers, never code.
"""

from __future__ import annotations

import types
from typing import Any

import msgspec
import numpy as np

from ..errors import TraceFormatError, UsageError
from ..events import table as T
from ..formats import comm_args as CA
from ..formats import launch_data as LD
from ..formats import trace_side as TS
from ..graph import _arrays as GA
from ..graph.build import staging as GS
from ..graph import collectives as GC
from ..events import memory as EM
from ..graph import facts as GF
from ..graph import memory_part as GMP
from ..graph import model as GM
from ..mapping import maps as MM
from . import load as JL

#: the classes a rank's result holds (``RankTrace`` and what its graph and slimmed table hold), by
#: "module:qualname"; filled on first use from the classes themselves
ALLOWED: dict[str, type] = {}
_TAG = "\x00t"  # the key that marks an encoded non-plain value (a dict key no trace name is: dict keys are tagged too)


def _allowed() -> dict[str, type]:
    if not ALLOWED:
        for cls in (T.Accounting, T.DeviceInfo, T.EventTable, T.TraceMeta, CA.CommArgs, LD.LaunchFacts, LD._Ids,
                    TS.CommSource, GA.Counts, GC.Collectives, GF.CpuOps, GF.TraceFacts, GM.CpuRanges, GM.TaskGraph,
                    MM.NodeMapping, JL.RankTrace, types.SimpleNamespace):
            ALLOWED[f"{cls.__module__}:{cls.__qualname__}"] = cls
        for m in (GM, GF, LD, T, EM, GMP, GS):  # other plain classes of those modules that graphs may hold (dataclasses, Structs)
            for v in vars(m).values():
                if isinstance(v, type) and v.__module__ == m.__name__ and (
                        hasattr(v, "__dataclass_fields__") or hasattr(v, "__struct_fields__")):
                    ALLOWED.setdefault(f"{v.__module__}:{v.__qualname__}", v)
    return ALLOWED


def _state(o) -> dict[str, Any]:
    if hasattr(o, "__struct_fields__"):
        return {k: getattr(o, k) for k in o.__struct_fields__}
    out = dict(vars(o)) if hasattr(o, "__dict__") else {}
    for k in getattr(type(o), "__slots__", ()):
        if hasattr(o, k):
            out[k] = getattr(o, k)
    return out


def _enc(o):
    if o is None or isinstance(o, (bool, int, float, str, bytes)):
        return o
    if isinstance(o, np.ndarray):
        if o.dtype == object:
            return {_TAG: "O", "s": list(o.shape), "v": [_enc(x) for x in o.ravel().tolist()]}
        if o.dtype.hasobject or o.dtype.names:
            raise TypeError(f"array of dtype {o.dtype} is not sent")
        return {_TAG: "A", "d": o.dtype.str, "s": list(o.shape), "b": np.ascontiguousarray(o).tobytes()}
    if isinstance(o, np.generic):
        return _enc(o.item())
    if isinstance(o, list):
        return [_enc(x) for x in o]
    if isinstance(o, tuple):
        return {_TAG: "T", "v": [_enc(x) for x in o]}
    if isinstance(o, dict):
        return {_TAG: "D", "v": [[_enc(k), _enc(v)] for k, v in o.items()]}
    name = f"{type(o).__module__}:{type(o).__qualname__}"
    if _allowed().get(name) is not type(o):
        raise TypeError(f"{name} is not a class a rank's result may hold")
    return {_TAG: "C", "c": name, "f": {k: _enc(v) for k, v in _state(o).items()}}


def encode(obj) -> bytes:
    """``obj`` (a RankTrace) as msgpack bytes of plain values.

    Raises:
        TypeError: it holds a value of a class not in :data:`ALLOWED` (a bug: the class is added there).
    """
    return msgspec.msgpack.encode(_enc(obj))


def _dec(o, depth: int):
    if depth > 64:
        raise ValueError("nested too deeply")
    if isinstance(o, list):
        return [_dec(x, depth + 1) for x in o]
    if not isinstance(o, dict):
        return o
    tag = o.get(_TAG)
    if tag == "A":
        dt = np.dtype(o["d"])
        if dt.hasobject:
            raise ValueError("object dtype")
        return np.frombuffer(o["b"], dtype=dt).reshape(o["s"]).copy()
    if tag == "O":
        a = np.empty(len(o["v"]), dtype=object)
        a[:] = [_dec(x, depth + 1) for x in o["v"]] if o["v"] else []
        return a.reshape(o["s"])
    if tag == "T":
        return tuple(_dec(x, depth + 1) for x in o["v"])
    if tag == "D":
        return {_dec(k, depth + 1): _dec(v, depth + 1) for k, v in o["v"]}
    if tag == "C":
        cls = _allowed().get(o["c"])
        if cls is None:
            raise ValueError(f"class {o['c']!r} is not accepted")
        fields = {k: _dec(v, depth + 1) for k, v in o["f"].items()}
        if hasattr(cls, "__struct_fields__"):  # a msgspec Struct (its __init__ only stores fields)
            if set(fields) - set(cls.__struct_fields__):
                raise ValueError(f"unknown fields of {o['c']}")
            return cls(**fields)
        obj = cls.__new__(cls)
        for k, v in fields.items():
            object.__setattr__(obj, k, v)
        return obj
    raise ValueError("an untagged mapping")


def decode(data: bytes, where: str = "a Dask worker"):
    """The object :func:`encode` wrote.

    Raises:
        UsageError: ``data`` is not such an encoding, or names a class not in :data:`ALLOWED`.
    """
    try:
        return _dec(msgspec.msgpack.decode(data), 0)
    except (msgspec.DecodeError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
        raise UsageError(f"{where} sent back a result daydream does not accept ({e}); is the cluster yours?") from None


#: characters of a worker's error message kept (the rest is cut: a message is one line of the report)
MESSAGE_CHARS = 2000


def call(fn, item) -> bytes:
    """``fn(item)`` encoded, on a worker: the result, daydream's own error (a bad trace) as
    (class, parts), or any other exception ``fn`` raised as ("WorkerError", [its class name, its
    message]), so that the task never fails on the cluster and nothing comes back pickled (an
    erred task's exception reaches the client as a pickle)."""
    try:
        return encode({"ok": fn(item)})
    except TraceFormatError as e:
        return encode({"error": ["TraceFormatError", [e.path, e.where, e.reason]]})
    except UsageError as e:
        return encode({"error": ["UsageError", [e.message]]})
    except Exception as e:  # noqa: BLE001 - every other failure of the work travels as plain data
        return encode({"error": ["WorkerError", [type(e).__name__[:200], str(e)[:MESSAGE_CHARS]]]})


class ClusterError(Exception):
    """An error the Dask cluster reported, as plain data: ``kind`` (a class name the cluster
    gave, never imported) and ``message``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}" if message else kind)
        self.kind, self.message = kind, message


class _Opaque:
    """What a restricted unpickle builds for any class it does not allow: it takes any arguments
    and state and runs nothing."""

    def __init__(self, *args, **kw) -> None:
        self.args = args

    def __setstate__(self, state) -> None:
        pass


#: the exception classes an erred Dask task's pickle may build for real: Python's built-in ones
#: that are ``Exception`` subclasses (not SystemExit, KeyboardInterrupt or GeneratorExit, which the
#: client would act on when Dask raises them: a cluster could end the run with an exit code it chose)
SAFE_EXCEPTIONS = {n: c for n, c in vars(__import__("builtins")).items() if isinstance(c, type) and issubclass(c, Exception)}


def _tblib_exception(func, args_or_attrs, cause=None, tb=None, context=None, suppress_context=False, notes=None, args=(), *,
                     attrs: bool = False):
    """``tblib.pickling_support``'s rebuilders (Dask installs them for every exception), for the
    allowed classes only: the exception is built from its class and arguments (its attributes set
    when ``attrs``), its cause and context kept where they are exceptions, its traceback dropped."""
    if not (isinstance(func, type) and func in SAFE_EXCEPTIONS.values()):
        return _Opaque(func)
    inst = func.__new__(func, *args) if attrs else func(*args_or_attrs)
    if attrs and isinstance(args_or_attrs, dict):
        for k, v in args_or_attrs.items():
            if isinstance(k, str) and not k.startswith("__"):
                setattr(inst, k, v)
    inst.__cause__ = cause if isinstance(cause, BaseException) else None
    inst.__context__ = context if isinstance(context, BaseException) else None
    return inst


#: the tblib rebuilders a pickled exception from Dask names, by "module.name"
_TBLIB = {"tblib.pickling_support.unpickle_exception": lambda *a, **k: _tblib_exception(*a, **k),
          "tblib.pickling_support.unpickle_exception_with_attrs": lambda *a, **k: _tblib_exception(*a, attrs=True, **k)}


def safe_exception(data) -> BaseException:
    """The exception an erred Dask task sent (pickled bytes), built without running the cluster's
    code: a built-in exception class is built with its arguments; any other class (Dask's
    ``KilledWorker``, a class of the worker's code) is never imported: the result is a
    :class:`ClusterError` naming it ("module.Class") with the text of its string arguments. A
    pickle that does not load gives ``ClusterError("unreadable", ...)``."""
    import io
    import pickle

    named: list[str] = []

    class _Restricted(pickle.Unpickler):
        def find_class(self, module, name):
            full = f"{module}.{name}"
            if full in _TBLIB:
                return _TBLIB[full]
            named.append(full)
            if module == "builtins" and name in SAFE_EXCEPTIONS:
                return SAFE_EXCEPTIONS[name]
            return _Opaque

        def persistent_load(self, pid):
            return None

    if isinstance(data, BaseException):
        return data
    if not isinstance(data, (bytes, bytearray)):
        return ClusterError("unreadable", str(data)[:MESSAGE_CHARS])
    try:
        obj = _Restricted(io.BytesIO(bytes(data))).load()
    except Exception as e:  # noqa: BLE001 - any damage of the bytes
        return ClusterError("unreadable", f"an error pickle that does not load ({type(e).__name__})")
    if isinstance(obj, BaseException) and all(not isinstance(a, _Opaque) for a in obj.args):
        obj.__traceback__ = None
        return obj
    texts = [a for a in getattr(obj, "args", ()) if isinstance(a, (str, int, float))]
    return ClusterError(next((n for n in named if not n.startswith("builtins.")), named[0] if named else "unknown"),
                        " ".join(map(str, texts))[:MESSAGE_CHARS])


def result(data: bytes, where: str = "a Dask worker"):
    """What :func:`call` returned: the value, or its error raised.

    Raises:
        TraceFormatError, UsageError: the worker's error (any other exception the work raised on
            the worker: a UsageError with its class name and message's first line); UsageError:
            not such a result.
    """
    out = decode(data, where) if isinstance(data, bytes) else None
    if not isinstance(out, dict) or not ({"ok"} == set(out) or {"error"} == set(out)):
        raise UsageError(f"{where} sent back a result daydream does not accept; is the cluster yours?")
    if "ok" in out:
        return out["ok"]
    kind, parts = out["error"]
    if kind == "TraceFormatError" and len(parts) == 3 and all(isinstance(p, str) for p in parts):
        raise TraceFormatError(*parts)
    if kind == "UsageError" and len(parts) == 1 and isinstance(parts[0], str):
        raise UsageError(parts[0])
    if kind == "WorkerError" and len(parts) == 2 and all(isinstance(p, str) for p in parts):
        first = (parts[1].strip().splitlines() or [""])[0]
        raise UsageError(f"{where} failed ({parts[0]}: {first}); the worker's own error, sent back as plain data")
    raise UsageError(f"{where} sent back an error daydream does not accept; is the cluster yours?")
