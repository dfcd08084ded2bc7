"""Record a raw CUPTI activity dump (``cupti-jsonl`` v1) of a Python program, on a GPU machine.

Run a training script under the collector::

    pip install cupti-python          # NVIDIA's bindings, matching the installed CUDA
    python scripts/collect_cupti.py --out trace.cupti.jsonl.gz -- train.py --epochs 1
    python scripts/collect_cupti.py --out 'trace.{rank}.cupti.jsonl.gz' -m my_pkg.train -- --lr 0.1
    daydream-analyze trace.cupti.jsonl.gz

or wrap a block of code::

    from collect_cupti import collect          # scripts/ on sys.path
    with collect("step.cupti.jsonl.gz"):
        train_one_step()

``{rank}`` and ``{pid}`` in the output name are replaced (RANK from torchrun, else 0), so every
process of a distributed job writes its own file. ``--nvtx`` also runs the program under
``torch.autograd.profiler.emit_nvtx()`` so every PyTorch op becomes an NVTX range (MARKER
records): daydream uses them to map kernels to layers.

The file is JSON Lines (gzip when the name ends in ``.gz``): a HEADER line, then one line per
CUPTI record as :func:`record_to_line` serializes it. The format is ``docs/cupti-jsonl.md``;
``daydream.formats.cupti_jsonl`` reads it. ``cupti`` is imported only when collection starts,
so this module imports (and its pure functions are tested) on machines without CUDA.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import enum
import gzip
import os
import re
import runpy
import socket
import sys
import threading
import time
from typing import Any, Callable, Iterator

#: activity kinds enabled by default (names of ``cupti.ActivityKind``); unsupported ones are skipped
DEFAULT_KINDS = (
    "RUNTIME", "DRIVER", "CONCURRENT_KERNEL", "MEMCPY", "MEMCPY2", "MEMSET", "SYNCHRONIZATION",
    "CUDA_EVENT", "MARKER", "MARKER_DATA", "EXTERNAL_CORRELATION", "DEVICE", "OVERHEAD",
)
#: kinds whose records are API calls: they get "domain" and (when resolvable) "name"
API_DOMAINS = {"RUNTIME": "runtime", "DRIVER": "driver"}
#: CUpti_ActivityObjectKind: PROCESS/THREAD use the ``pt`` union member, DEVICE/CONTEXT/STREAM ``dcs``
_PT_KINDS = (1, 2)
_DCS_KINDS = (3, 4, 5)
#: attributes of binding objects that are not record fields
_SKIP_ATTRS = frozenset(("ptr",))
_MAX_DEPTH = 6

_CAMEL = re.compile(r"_([a-z0-9])")


def camel(name: str) -> str:
    """``correlation_id`` -> ``correlationId``; a trailing ``_`` (Python keyword escape) is dropped."""
    return _CAMEL.sub(lambda m: m.group(1).upper(), name.rstrip("_"))


_attr_cache: dict[type, tuple[str, ...]] = {}


def _fields(obj: Any) -> list[tuple[str, Any]]:
    """Public data attributes of a record object, by ``dir()`` (binding classes expose their
    fields as properties; the name list is cached per class for objects without a ``__dict__``)."""
    if isinstance(getattr(obj, "__dict__", None), dict):
        names = tuple(n for n in dir(obj) if not n.startswith("_") and n not in _SKIP_ATTRS)
    else:
        names = _attr_cache.get(type(obj))
        if names is None:
            names = tuple(n for n in dir(obj) if not n.startswith("_") and n not in _SKIP_ATTRS)
            _attr_cache[type(obj)] = names
    out = []
    for n in names:
        try:
            v = getattr(obj, n)
        except Exception:  # a union member that cannot be read, a property that raises
            continue
        if callable(v) and not isinstance(v, enum.Enum):
            continue
        out.append((n, v))
    return out


def _to_json(v: Any, depth: int = 0) -> Any:
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, enum.Enum):
        return int(v.value) if isinstance(v.value, int) else str(v.value)
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return v
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if depth >= _MAX_DEPTH:
        return str(v)
    if isinstance(v, (list, tuple)):
        return [_to_json(x, depth + 1) for x in v]
    if isinstance(v, dict):
        return {str(k): _to_json(x, depth + 1) for k, x in v.items()}
    tolist = getattr(v, "tolist", None)  # numpy scalars and arrays
    if callable(tolist):
        return _to_json(tolist(), depth + 1)
    return {camel(k): _to_json(x, depth + 1) for k, x in _fields(v)}


def _flatten_object_id(obj: Any, object_kind: Any) -> Any:
    """The objectId union as one flat object: the ``pt`` member for process/thread objects, the
    ``dcs`` member for device/context/stream ones (``device`` renamed ``deviceId``)."""
    if not isinstance(obj, dict) or not ({"pt", "dcs"} & obj.keys()):
        return obj
    pt, dcs = obj.get("pt") or {}, obj.get("dcs") or {}
    dcs = {("deviceId" if k == "device" else k): v for k, v in dcs.items()} if isinstance(dcs, dict) else {}
    if object_kind in _PT_KINDS:
        return dict(pt) if isinstance(pt, dict) else {}
    if object_kind in _DCS_KINDS:
        return dcs
    return {**dcs, **(pt if isinstance(pt, dict) else {})}


def record_to_line(obj: Any, kind_name: str, *, callback_name: Callable[[str, int], str | None] | None = None) -> dict:
    """One CUPTI activity record (a cupti-python object) as a cupti-jsonl record line.

    Pure function of its arguments: every public data attribute becomes a field with its
    camelCase C name (``correlation_id`` -> ``correlationId``), nested struct/union objects are
    converted recursively (the marker/overhead ``objectId`` union is flattened to the member its
    ``objectKind`` selects), enums become their integer value, bytes become hex. ``kind`` is set
    to ``kind_name`` (``cupti.ActivityKind(kind).name``). RUNTIME/DRIVER records get ``domain``
    and, when ``callback_name(domain, cbid)`` returns one, ``name``.

    Args:
        obj: the record (any object with attributes; tests use ``types.SimpleNamespace``).
        kind_name: the activity kind's name without prefix, e.g. ``"CONCURRENT_KERNEL"``.
        callback_name: resolves an API callback id to its function name (``cuptiGetCallbackName``).
    """
    line: dict[str, Any] = {"kind": kind_name}
    for k, v in _fields(obj):
        if k != "kind":  # an int in the bindings; the line carries the name
            line[camel(k)] = _to_json(v)
    if "objectId" in line:
        line["objectId"] = _flatten_object_id(line["objectId"], line.get("objectKind"))
    domain = API_DOMAINS.get(kind_name)
    if domain is not None:
        line["domain"] = domain
        if not line.get("name") and callback_name is not None and isinstance(line.get("cbid"), int):
            try:
                name = callback_name(domain, line["cbid"])
            except Exception:
                name = None
            if name:
                line["name"] = str(name)
    return line


def header_line(cupti: Any = None) -> dict:
    """The HEADER object for this process (cupti: the bindings module, for versions and clock)."""
    h: dict[str, Any] = {"kind": "HEADER", "format": "cupti-jsonl", "version": 1, "pid": os.getpid(),
                         "hostname": socket.gethostname(), "clock": "cupti_ns", "wallClockAtStartNs": time.time_ns()}
    if cupti is not None:
        for key, fn in (("cuptiTsAtStartNs", "get_timestamp"), ("cuptiVersion", "get_version")):
            try:
                h[key] = int(getattr(cupti, fn)())
            except Exception:
                pass
    drv = _driver_version()
    if drv is not None:
        h["cudaDriverVersion"] = drv
    for key, env in (("rank", "RANK"), ("worldSize", "WORLD_SIZE")):
        if os.environ.get(env, "").isdigit():
            h[key] = int(os.environ[env])
    return h


def _driver_version() -> int | None:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int(0)
        return int(v.value) if lib.cuDriverGetVersion(ctypes.byref(v)) == 0 else None
    except Exception:
        return None


def output_path(pattern: str) -> str:
    """``pattern`` with ``{rank}`` (RANK or LOCAL_RANK, else 0) and ``{pid}`` filled in."""
    rank = os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0"))
    return pattern.replace("{rank}", rank).replace("{pid}", str(os.getpid()))


class Collector:
    """Writes every CUPTI activity record of this process to a cupti-jsonl file.

    ``start()`` imports ``cupti`` (cupti-python), writes the header, registers the buffer
    callbacks and enables the kinds; ``stop()`` flushes all buffers, disables the kinds and
    closes the file. Records are serialized inside CUPTI's buffer-completed callback (the
    binding's objects are only valid there).

    Raises:
        ImportError: (``start``) cupti-python is not installed.
    """

    def __init__(self, out: str, kinds: tuple[str, ...] = DEFAULT_KINDS, buffer_bytes: int = 8 << 20) -> None:
        self.out = output_path(out)
        self.kinds = tuple(kinds)
        self.buffer_bytes = int(buffer_bytes)
        self.enabled: list[Any] = []
        self.records = 0
        self.errors = 0
        self._lock = threading.Lock()
        self._file = None
        self._cupti = None
        self._kind_names: dict[int, str] = {}
        self._cb_names: dict[tuple[str, int], str | None] = {}
        self._encode = None

    # -- callbacks -------------------------------------------------------------------------
    def _buffer_requested(self):
        return self.buffer_bytes, 0

    def _callback_name(self, domain: str, cbid: int) -> str | None:
        key = (domain, cbid)
        if key not in self._cb_names:
            c = self._cupti
            try:
                dom = c.CallbackDomain.RUNTIME_API if domain == "runtime" else c.CallbackDomain.DRIVER_API
                self._cb_names[key] = c.get_callback_name(dom, cbid)
            except Exception:
                self._cb_names[key] = None
        return self._cb_names[key]

    def _kind_name(self, kind: int) -> str:
        name = self._kind_names.get(kind)
        if name is None:
            try:
                name = self._cupti.ActivityKind(kind).name
            except Exception:
                name = f"KIND_{int(kind)}"
            self._kind_names[kind] = name
        return name

    def _buffer_completed(self, activities) -> None:
        lines = []
        for a in activities:
            try:
                lines.append(self._encode(record_to_line(a, self._kind_name(int(a.kind)), callback_name=self._callback_name)))
            except Exception:
                self.errors += 1
        with self._lock:
            if self._file is not None and lines:
                self._file.write(b"\n".join(lines) + b"\n")
                self.records += len(lines)

    # -- control ---------------------------------------------------------------------------
    def start(self) -> "Collector":
        try:
            from cupti import cupti  # lazily: only on the GPU machine
        except ImportError as e:
            raise ImportError(f"collect_cupti needs NVIDIA's cupti-python bindings (pip install cupti-python): {e}") from e

        self._cupti = cupti
        try:
            import msgspec

            self._encode = msgspec.json.Encoder().encode
        except ImportError:
            import json

            self._encode = lambda d: json.dumps(d, separators=(",", ":")).encode()
        opener = gzip.open if self.out.endswith(".gz") else open
        self._file = opener(self.out, "wb")
        self._file.write(self._encode(header_line(cupti)) + b"\n")
        cupti.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
        for k in self.kinds:
            try:
                kind = getattr(cupti.ActivityKind, k)
                cupti.activity_enable(kind)
                self.enabled.append(kind)
            except Exception as e:  # kind unsupported by this CUPTI or binding
                print(f"collect_cupti: activity kind {k} not enabled ({e})", file=sys.stderr)
        return self

    def stop(self) -> None:
        c = self._cupti
        if c is None:
            return
        try:
            c.activity_flush_all(1)
        finally:
            for kind in self.enabled:
                try:
                    c.activity_disable(kind)
                except Exception:
                    pass
            with self._lock:
                if self._file is not None:
                    self._file.close()
                    self._file = None
            self._cupti = None
        note = f", {self.errors} records could not be serialized" if self.errors else ""
        print(f"collect_cupti: wrote {self.records} records to {self.out}{note}", file=sys.stderr)


@contextlib.contextmanager
def collect(out: str, kinds: tuple[str, ...] = DEFAULT_KINDS, nvtx: bool = False) -> Iterator[Collector]:
    """Record CUPTI activity of the ``with`` block into ``out`` (see :class:`Collector`).

    With ``nvtx``, the block also runs under ``torch.autograd.profiler.emit_nvtx()``.
    """
    c = Collector(out, kinds).start()
    try:
        with contextlib.ExitStack() as stack:
            if nvtx:
                import torch

                stack.enter_context(torch.autograd.profiler.emit_nvtx())
            yield c
    finally:
        c.stop()


def main(argv: list[str] | None = None) -> int:
    """Command line: run a script (or ``-m`` module) under :func:`collect`; 2 without cupti-python."""
    ap = argparse.ArgumentParser(
        prog="collect_cupti.py",
        description="Run a Python program and write its CUPTI activity records as a cupti-jsonl dump.",
        epilog="example: python scripts/collect_cupti.py --out trace.cupti.jsonl.gz -- train.py --epochs 1",
    )
    ap.add_argument("--out", "-o", default="trace.{rank}.cupti.jsonl.gz", help="output file; {rank} and {pid} are filled in (default %(default)s)")
    ap.add_argument("--kinds", default=",".join(DEFAULT_KINDS), help="comma-separated cupti.ActivityKind names (default: %(default)s)")
    ap.add_argument("--exclude", default="", help="comma-separated kinds to leave out of --kinds (e.g. DRIVER)")
    ap.add_argument("--nvtx", action="store_true", help="run under torch.autograd.profiler.emit_nvtx() (op names as NVTX ranges)")
    ap.add_argument("-m", dest="module", help="run a module (like python -m) instead of a script")
    ap.add_argument("program", nargs=argparse.REMAINDER, help="script and its arguments (after --)")
    args = ap.parse_args(argv)
    prog = list(args.program)
    if prog and prog[0] == "--":
        prog = prog[1:]
    if not args.module and not prog:
        ap.error("name a script to run (after --) or a module with -m")
    exclude = {k.strip() for k in args.exclude.split(",") if k.strip()}
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip() and k.strip() not in exclude)

    try:
        from cupti import cupti  # noqa: F401  (fail early, before the program runs)
    except ImportError as e:
        print(f"collect_cupti: needs NVIDIA's cupti-python bindings (pip install cupti-python): {e}", file=sys.stderr)
        return 2
    with collect(args.out, kinds, nvtx=args.nvtx):
        if args.module:
            sys.argv = [args.module, *prog]
            runpy.run_module(args.module, run_name="__main__", alter_sys=True)
        else:
            script = prog[0]
            sys.argv = list(prog)
            sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
            try:
                runpy.run_path(script, run_name="__main__")
            except SystemExit as e:  # the program's own exit: stop collecting first, then exit
                if e.code not in (None, 0):
                    raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
