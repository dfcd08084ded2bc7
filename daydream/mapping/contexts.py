"""The context rows of an event table (CPU-side ranges and framework ops) and what each says.

:func:`_classify_contexts` selects them (:func:`_context_keys`, compiled from
:data:`CONTEXT_KEYS_MIN` rows, else numpy) and classifies each distinct key once
(:func:`_classify_keys`: module, scope, op, phase rule and priority, layer component, op
label) into a :class:`_Contexts`; :class:`_Interner` and :func:`_path_labels` intern the layer
paths.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from ..events.table import EventTable, Kind
from ..util import jit
from ..util.arrays import sorted_unique
from .enclose import _CAT_BW, _CAT_LEVEL0, _CAT_MODULE, _CAT_OP, _CAT_SCOPE
from .rules import (
    _IDENT_RE,
    _MODULE_RE,
    _NAMESPACED_RE,
    AUTOGRAD_THREAD_RULE,
    BACKWARD,
    NAME_PREFIX,
    PHASE_CODE,
    PhaseRule,
    _nvtx_base,
)

_NO_LABEL = -1


class _Interner:
    def __init__(self) -> None:
        self.labels: list[str] = []
        self._ids: dict[str, int] = {}

    def __call__(self, s: str) -> int:
        i = self._ids.get(s)
        if i is None:
            i = self._ids[s] = len(self.labels)
            self.labels.append(s)
        return i


def _path_labels(parent: np.ndarray, comp: np.ndarray, comp_names: list[str], intern: _Interner) -> np.ndarray:
    """Label id of the path root -> ... -> each node (``parent`` indices precede their children)."""
    n = len(parent)
    path = np.full(n, _NO_LABEL, dtype=np.int64)
    if n == 0:
        return path
    depth = np.zeros(n, dtype=np.int64)
    anc = parent.copy()
    while True:
        has = np.flatnonzero(anc >= 0)
        if len(has) == 0:
            break
        depth[has] += 1
        anc[has] = parent[anc[has]]
    for d in range(int(depth.max()) + 1):
        idx = np.flatnonzero(depth == d)
        pp = path[parent[idx]] if d else np.full(len(idx), _NO_LABEL, dtype=np.int64)
        ci = comp[idx].astype(np.int64, copy=False)
        span = int(ci.max()) + 1 if len(ci) else 1
        packed, inv = np.unique((pp + 1) * span + ci, return_inverse=True)  # (parent path, component) pairs, in order
        uniq = np.stack([packed // span - 1, packed % span], axis=1)
        ids = np.empty(len(uniq), dtype=np.int64)
        for u, (p, c) in enumerate(uniq.tolist()):  # one iteration per distinct path
            name = comp_names[c]
            ids[u] = intern(name if p < 0 else intern.labels[p] + "/" + name)
        path[idx] = ids[inv.reshape(-1)]
    return path


class _Contexts:
    """The context rows of a table and what each one says.

    What a context says depends only on its key (name, CPU_OP or not, ``python_function`` or
    not): ``by_key`` holds it once per distinct key present and ``rk`` each row's key index, and
    the per-row arrays (aligned with ``rows``) are gathered on first use only; the fused sweep
    reads the key arrays through ``rk`` for one thread's contexts at a time instead.

    Per-row attributes: module (bool: an ``nn.Module:`` range, a layer component), op (bool: a
    framework op), scope (bool: a scope annotation, fallback layer component), phase (int: phase
    code its rule gives, -1 none), prio (int: priority of its rule, meaningless where phase is
    -1), comp (int: index into ``comp_names`` of its layer component, -1 none), op_name (int:
    index into ``op_names`` of its op label, -1 none), member (int64: the categories of the
    fused sweep it belongs to, bits _CAT_MODULE, _SCOPE, _OP, _BW and _CAT_LEVEL0 + its
    priority level, see :func:`_member_bits`).
    """

    FIELDS = ("module", "op", "scope", "phase", "prio", "comp", "op_name", "member")

    def __init__(self, rows: np.ndarray | None, rk: np.ndarray, by_key: dict[str, np.ndarray], comp_names: list[str],
                 op_names: list[str], table: EventTable | None = None) -> None:
        if rows is not None:
            self.rows = rows  #: table rows (CPU-side RANGE rows and CPU_OP rows); None: found in ``table`` on first use
        self._table = table
        self.n = len(rk)  #: how many context rows
        self.rk = rk  #: per row: index of its key in the ``by_key`` arrays
        self.by_key = by_key
        self.comp_names = comp_names
        self.op_names = op_names
        self.name_id: np.ndarray | None = None  #: int64 name id of each row
        #: the rows are the graph's CPU ranges too (no CPU_OP row on a device)
        self.all_cpu_side = False
        #: int64 (pid, tid, start_ns, end_ns) of each row (:func:`_context_keys`' columns)
        self.columns: tuple[np.ndarray, ...] | None = None

    def __getattr__(self, name: str) -> np.ndarray:
        if name == "rows" and self.__dict__.get("_table") is not None:  # only the numpy searches read them
            k = self._table.kind
            rows = self.__dict__["rows"] = np.flatnonzero(((k == Kind.RANGE) & (self._table.device < 0)) | (k == Kind.CPU_OP))
            return rows
        if name not in _Contexts.FIELDS:
            raise AttributeError(name)
        a = self.__dict__[name] = self.by_key[name][self.rk]
        return a


def _phase_levels(rules: Sequence[PhaseRule]) -> list[int]:
    """The priority levels of ``rules`` that give a phase (and the autograd rule's), highest first."""
    return sorted({r.priority for r in rules if r.phase is not None} | {AUTOGRAD_THREAD_RULE.priority}, reverse=True)


def _member_bits(module, scope, op, phase, prio, levels: list[int]) -> np.ndarray:
    """The fused sweep's category bits (:data:`_CAT_MODULE` ...) of contexts with these facts."""
    asc = np.asarray(levels[::-1], dtype=np.int64)  # level index of each priority, -1 none
    j = np.minimum(np.searchsorted(asc, prio), len(asc) - 1)
    lv = np.where((asc[j] == prio) & (phase >= 0), len(asc) - 1 - j, -1)
    bits = (module.astype(np.int64) << _CAT_MODULE) | (scope.astype(np.int64) << _CAT_SCOPE) | (op.astype(np.int64) << _CAT_OP)
    bits |= ((phase == BACKWARD).astype(np.int64) << _CAT_BW) | np.where(lv >= 0, np.int64(1) << (_CAT_LEVEL0 + np.maximum(lv, 0)), 0)
    return bits


def _classify_names(names: list[str], used: np.ndarray, rules: Sequence[PhaseRule]):
    """Per-name facts (arrays over name ids; only ``used`` ids are filled). Whatever depends on
    the display name alone is worked out once per distinct one (emit_nvtx names are unique per
    call, their display names are not)."""
    n = len(names)
    display = list(names)
    ids = np.flatnonzero(used)
    compiled = [(re.compile(r.pattern), r.ops_only) for r in rules]
    keys: dict[tuple[str, bool], int] = {}  # distinct (display name, emit_nvtx suffix?) -> index
    kind, mod, hashed = [], [], []
    for i in ids.tolist():  # one iteration per distinct context name
        s = names[i]
        base = _nvtx_base(s) if ", " in s else None
        key = (s, False) if base is None else (base, True)
        display[i] = key[0]
        j = keys.get(key)
        if j is None:
            j = keys[key] = len(keys)
        kind.append(j)
        mod.append(s.startswith("nn.Module: "))
        hashed.append("#" in s)
    per_key = [(bool(_IDENT_RE.match(base)) if sfx else bool(_NAMESPACED_RE.match(base)), *_first_rules(compiled, base))
               for base, sfx in keys]  # one per distinct display name
    f = np.array(per_key, dtype=np.int64).reshape(-1, 3)[np.array(kind, dtype=np.int64)]
    module, has_hash, nvtx_op = (np.zeros(n, dtype=bool) for _ in range(3))
    rule, op_rule = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    module[ids], has_hash[ids] = np.array(mod, bool), np.array(hashed, bool)
    nvtx_op[ids], rule[ids], op_rule[ids] = f[:, 0] != 0, f[:, 1], f[:, 2]
    return display, module, nvtx_op, has_hash, rule, op_rule


def _first_rules(compiled: list, base: str) -> tuple[int, int]:
    """(first rule any context of this display name takes, first rule an op takes), -1 none."""
    r_any = r_op = -1
    for j, (rx, ops_only) in enumerate(compiled):
        if rx.search(base, 0, NAME_PREFIX):  # bounded cost per name
            if r_op < 0:
                r_op = j
            if not ops_only:
                r_any = j
                break
    return r_any, r_op


def _classify_contexts(table: EventTable, rules: Sequence[PhaseRule]) -> _Contexts:
    """Find the context rows of ``table`` and classify them (module / op / scope, phase rule).

    What a context says depends only on (name, CPU_OP or not, ``python_function`` category or
    not): each distinct such key present is classified once (:func:`_classify_keys`), and the
    rows take their key's answers."""
    names = table.names
    py_id = [i for i, s in enumerate(names) if s == "python_function"]
    rows, _, counts, all_cpu_side, more = _context_keys(table.kind, table.device, table.name_id, table.cat_id, py_id, len(names),
                                                        columns=(table.pid, table.tid, table.start_ns, table.end_ns), rows=False)
    rk, name_id, *columns = more
    present = np.flatnonzero(counts)  # sorted distinct keys
    k = _classify_keys(names, present, rules)
    k["member"] = _member_bits(k["module"], k["scope"], k["op"], k["phase"], k["prio"], _phase_levels(rules))
    ctx = _Contexts(rows, rk, {f: k[f] for f in _Contexts.FIELDS}, k["comp_names"], k["op_names"], table)
    ctx.name_id = name_id
    ctx.columns = tuple(columns)
    ctx.all_cpu_side = all_cpu_side
    return ctx


#: :func:`_context_keys` compiles its two passes from this many table rows ("auto")
CONTEXT_KEYS_MIN = 50_000


def _context_keys(kind: np.ndarray, device: np.ndarray, name_id: np.ndarray, cat_id: np.ndarray, py_id: list[int],
                  n_names: int, method: str = "auto", columns: tuple | None = None, rows: bool = True) -> tuple:
    """The context rows of table columns (length n each: ``kind``, ``device``, ``name_id``,
    ``cat_id``; ``py_id``: the name ids of ``python_function``, ``n_names`` names): CPU-side
    RANGE rows and CPU_OP rows. Returns (rows int64 (m,), their keys int64 (m,):
    ``name_id * 4 + 2 * is CPU_OP + is python_function``, key counts int64 (4 * n_names,), no
    CPU_OP row on a device). Two compiled passes (:func:`_context_keys_kernel`) from
    :data:`CONTEXT_KEYS_MIN` rows when numba is there ("auto"; "compiled" whatever the size,
    "python" the kernel uncompiled, "numpy" never), else numpy passes; the same answers.

    ``columns``: the table's (pid, tid, start_ns, end_ns) (length n each); the keys are then not
    kept (None in their place) and a fifth item is returned, arrays (m,) each: (each row's index
    among the keys present (rank of its key among the nonzero counts; int32), its name id, its
    pid, tid, start_ns, end_ns (int64)), written by the same passes when compiled.

    ``rows`` False: the compiled passes (with ``columns``) do not keep the rows (None in their
    place; the caller needs their count only, which the columns give).

    Raises:
        IndexError, ValueError: a context row's name id outside ``[0, n_names)`` (numpy's
            errors, whichever method).
    """
    fn = jit.kernel_for(_context_keys_kernel, len(kind), CONTEXT_KEYS_MIN, method)
    if columns is not None and 4 * n_names >= 1 << 31:  # the kernel keeps the keys in int32 meanwhile
        fn = None
    if fn is not None:
        is_py = np.zeros(max(n_names, 1), np.bool_)
        is_py[py_id] = True
        e = np.zeros(0, np.int64)
        cols = e, e, e, e
        if columns is not None:
            cols = tuple(np.ascontiguousarray(c, np.int64) for c in columns)
        keep_rows = rows or columns is None
        rows, key, counts, all_cpu, ok, more = jit.call(
            fn, np.ascontiguousarray(kind, np.uint8), np.ascontiguousarray(device, np.int32),
            np.ascontiguousarray(name_id, np.int32), np.ascontiguousarray(cat_id, np.int32), is_py, bool(py_id), n_names,
            np.uint8(Kind.RANGE), np.uint8(Kind.CPU_OP), columns is not None, *cols, keep_rows)
        if ok:
            return (rows if keep_rows else None, None if columns is not None else key, counts, bool(all_cpu)) + ((more,) if columns is not None else ())
        # a name id out of range: the numpy passes raise numpy's error
    is_op, cpu_side = kind == Kind.CPU_OP, device < 0
    rows = np.flatnonzero(((kind == Kind.RANGE) & cpu_side) | is_op)
    key = name_id[rows].astype(np.int64)
    key *= 2
    key += kind[rows] == Kind.CPU_OP
    key *= 2
    if py_id:
        cat = cat_id[rows]
        if len(cat) and int(cat.min()) >= 0 and int(cat.max()) < n_names:  # a lookup table over the names
            is_py = np.zeros(n_names, bool)
            is_py[py_id] = True
            key += is_py[cat]
        else:
            key += np.isin(cat, py_id)
    counts = np.bincount(key, minlength=4 * n_names)
    if len(counts) > 4 * n_names:
        raise IndexError(f"name id {int(key.max()) >> 2} out of range for {n_names} names")
    out = rows, key, counts, not bool((is_op & ~cpu_side).any())
    if columns is None:
        return out
    present = np.flatnonzero(counts)
    at = np.zeros(4 * n_names, dtype=np.int64)
    at[present] = np.arange(len(present))
    return (rows, None) + out[2:] + ((at[key].astype(np.int32), key >> 2, *(c[rows].astype(np.int64, copy=False) for c in columns)),)


def _context_keys_kernel(kind, device, name_id, cat_id, is_py, use_py, n_names, k_range, k_op, want_cols, pid, tid, start,
                         end, want_rows=True):
    """:func:`_context_keys`'s passes: count the context rows, then fill rows (``want_rows``;
    else an empty array), keys and key counts (and, ``want_cols``, the rows' pid, tid, start,
    end and name id, then their key's rank among the present keys: the fifth item, empty arrays
    otherwise); ``ok`` False (nothing filled) when a context row's name id is out of range."""
    n = len(kind)
    m = 0
    all_cpu = True
    for i in range(n):
        k = kind[i]
        if k == k_op:
            m += 1
            if device[i] >= 0:
                all_cpu = False
        elif k == k_range and device[i] < 0:
            m += 1
    rows = np.empty(m if want_rows else 0, np.int64)
    key = np.empty(0 if want_cols else m, np.int64)  # with the columns: the keys in rk, ranked in place after
    counts = np.zeros(4 * n_names, np.int64)
    mc = m if want_cols else 0
    rk = np.empty(mc, np.int32)
    nm_out = np.empty(mc, np.int64)
    c_pid = np.empty(mc, np.int64)
    c_tid = np.empty(mc, np.int64)
    c_start = np.empty(mc, np.int64)
    c_end = np.empty(mc, np.int64)
    more = (rk, nm_out, c_pid, c_tid, c_start, c_end)
    n_py = len(is_py)
    j = 0
    for i in range(n):
        k = kind[i]
        is_op = k == k_op
        if is_op or (k == k_range and device[i] < 0):
            nm = name_id[i]
            if nm < 0 or nm >= n_names:
                return rows[:0], key[:0], counts, all_cpu, False, more
            x = np.int64(nm) * 4
            if is_op:
                x += 2
            c = cat_id[i]
            if use_py and c >= 0 and c < n_py and is_py[c]:
                x += 1
            if want_rows:
                rows[j] = i
            counts[x] += 1
            if want_cols:
                rk[j] = x
                nm_out[j] = nm
                c_pid[j] = pid[i]
                c_tid[j] = tid[i]
                c_start[j] = start[i]
                c_end[j] = end[i]
            else:
                key[j] = x
            j += 1
    if want_cols:
        at = np.empty(4 * n_names, np.int32)  # a key's rank among the present keys
        r = 0
        for x in range(4 * n_names):
            at[x] = r
            if counts[x] > 0:
                r += 1
        for j in range(m):
            rk[j] = at[rk[j]]
    return rows, key, counts, all_cpu, True, more


def _classify_keys(names: list[str], key: np.ndarray, rules: Sequence[PhaseRule]) -> dict:
    """Module / op / scope flags, phase and priority of the rule, layer component and op label of
    each context key (``name_id * 4 + 2 * is CPU_OP + is python_function``; sorted, distinct)."""
    used = np.zeros(len(names), dtype=bool)
    name = key // 4
    used[name] = True
    display, module_n, nvtx_op_n, hash_n, rule_n, op_rule_n = _classify_names(names, used, rules)
    is_op_kind = (key & 2) != 0
    python = (key & 1) != 0
    module = module_n[name] & ~is_op_kind
    op = np.where(is_op_kind, ~hash_n[name], nvtx_op_n[name] & ~python) & ~module
    rule = np.where(op, op_rule_n[name], rule_n[name])
    phase_codes = np.array([PHASE_CODE[r.phase] if r.phase is not None else -1 for r in rules] + [-1], dtype=np.int64)
    prio = np.array([r.priority for r in rules] + [0], dtype=np.int64)
    rule_i = np.where(rule >= 0, rule, len(rules))
    phase = phase_codes[rule_i]
    structural = (rule >= 0) & (phase < 0)
    scope = ~module & ~op & ~structural & np.where(is_op_kind, hash_n[name], ~python)

    comp_names: list[str] = []
    comp_of_name = np.full(len(names), -1, dtype=np.int64)
    for i in sorted_unique(name[module | scope]).tolist():  # distinct layer component names
        m = _MODULE_RE.match(names[i]) if module_n[i] else None
        comp_of_name[i] = len(comp_names)
        comp_names.append(m.group(1) if m else display[i])
    op_of_name = np.full(len(names), -1, dtype=np.int64)
    op_ids: dict[str, int] = {}
    for i in sorted_unique(name[op]).tolist():  # distinct op names
        op_of_name[i] = op_ids.setdefault(display[i], len(op_ids))
    return {"module": module, "op": op, "scope": scope, "phase": phase, "prio": prio[rule_i],
            "comp": np.where(module | scope, comp_of_name[name], -1), "op_name": np.where(op, op_of_name[name], -1),
            "comp_names": comp_names, "op_names": list(op_ids)}
