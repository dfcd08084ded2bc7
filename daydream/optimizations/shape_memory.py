"""What a shape what-if (``shape``/``batch``/``seq``/``hidden``) does to memory: the allocator's
events of the recorded step at the new shapes (docs/memory.md, "shape"; docs/scaling.md, "Memory").

Each block (an allocation and its free, paired by address: :func:`~daydream.graph.memory_part.block_pairs`)
on a GPU is resized by what it is, first rule that applies:

1. **Model state** (× ``hidden² · layers``: the weights are ``k·H × H`` matrices; biases and norms,
   ∝ H, a minority: an assumption, said): a block alive after the last step's end (or never freed)
   that was allocated before the first step, in the backward (gradients) or in the optimizer step
   (its state); a free of a block allocated before the trace; and the level before the window
   (what was allocated before the trace: taken to be the model's parameters, gradients and
   optimizer state, an assumption, said).
2. **A tensor of its op** (activations, temporaries): the block's op is the launching op of the
   next launch call of its thread at or after the call its allocation is anchored to (the op that
   allocates is the one whose call comes next, docs/memory.md; between allocating its output and
   launching its kernel an op may query the device or the stream's capture: such calls launch
   nothing). Where that op's recorded shapes hold tensors whose allocator block is the
   block's size (its inputs, and the output its kind makes: :func:`tensor_blocks`) and all of them
   have one new block size, the block takes it: so ``[B, S, H]`` grows ×batch·seq·hidden, an
   unfused attention's scores ``[B, nh, S, S]`` ×batch·hidden·seq², because their shapes say so.
3. **A workspace** (kept): a block of no tensor of its op's size freed before its thread's next
   launch after its op's (it lives within the op: cuBLASLt's workspace of ``addmm``, 1 MiB blocks on
   the H100 BERT trace), or of such a block's size (above :data:`BLOCK_BYTES`) on its device (a workspace held longer: the
   BLAS handle's workspace has one size, ``CUBLASLT_WORKSPACE_SIZE``, not the shapes'; one of the
   MI300 BERT trace's 76 MiB hipBLASLt blocks is freed at the step's synchronize): its size does
   not follow the shapes.
4. **Otherwise** (inferred, counted in the note): a block of the forward or backward pass × the
   step's activation factor (``batch·seq·hidden``); of the optimizer step × ``hidden²·layers``;
   of another phase (data loading, unmapped) kept as recorded.

Sizes are the allocator's blocks: a request rounded up to :data:`BLOCK_BYTES` (PyTorch's
CUDACachingAllocator ``kMinBlockSize``, c10/cuda/CUDACachingAllocator.cpp). A scaled block whose
recorded size is a multiple of it is rounded up again. Host memory (device −1) is kept.
The rules need every GPU event's block address (:func:`paired_blocks`); the caller
(``shape._apply``) drops the memory verdict of a trace without them, and says so.
"""

from __future__ import annotations

import numpy as np

from ..graph.memory_part import NODE_CPU, block_pairs, changed_events, level_before
from ..mapping.rules import BACKWARD, FORWARD, OPTIMIZER
from .amp_memory import _anchor_nodes

#: the caching allocator's block granularity (bytes): PyTorch's CUDACachingAllocator rounds every
#: request up to a multiple of it (``kMinBlockSize`` = 512, c10/cuda/CUDACachingAllocator.cpp)
BLOCK_BYTES = 512
#: bytes per element of a Kineto ``Input type`` (the C++ types' sizes: 64-bit long, 16-bit half, 8-bit fp8)
ELEMENT_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4, "short int": 2,
                 "bool": 1, "unsigned char": 1, "signed char": 1, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1}
#: bytes per element of the cost library's storage precisions (the 32-, 16- and 8-bit formats)
_DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
#: how a block was resized (the note's counts)
STATE, TENSOR, INFERRED, KEPT = range(4)


def block_bytes(n) -> np.ndarray:
    """The allocator's block (bytes, int64 array) for requests of ``n`` bytes: at least one
    :data:`BLOCK_BYTES`, rounded up to its multiple."""
    n = np.asarray(n, np.int64)
    return np.maximum(1, -(-n // BLOCK_BYTES)) * BLOCK_BYTES


def _numel(d) -> int:
    n = 1
    for x in d:
        n *= x
    return n


def output_elems(row: dict | None) -> int:
    """Elements of the output an op's kind makes from its kernel row (``shape.kernel_row``): a
    GEMM's ``B·M·N``, fused attention's ``B·M·K`` (``[B, nh, S, hd]``), an elementwise, norm or
    softmax op's largest input (``elems``); -1 none."""
    if row is None:
        return -1
    if row["cls"] in ("linear", "bmm"):
        return row["B"] * row["M"] * row["N"]
    if row["cls"] == "attention":
        return row["B"] * row["M"] * row["K"]
    return row["elems"]


def tensor_blocks(old: list, new: list, row_old: dict | None, row_new: dict | None) -> tuple[np.ndarray, np.ndarray]:
    """(old block bytes, new block bytes), int64 arrays, of an op's tensors: its inputs ``old``/``new``
    ([(dims, Input type)], the same tensors before and after the what-if) and the output its kind
    makes (:func:`output_elems`, the op's element type)."""
    ob, nb = [], []
    for (d0, t), (d1, _) in zip(old, new):
        es = ELEMENT_BYTES.get(t) if isinstance(t, str) else None
        if es:
            ob.append(_numel(d0) * es)
            nb.append(_numel(d1) * es)
    e0, e1 = output_elems(row_old), output_elems(row_new)
    if e0 > 0 and e1 > 0:
        es = _DTYPE_BYTES.get(row_old["dtype"], 4)
        ob.append(e0 * es)
        nb.append(e1 * es)
    return block_bytes(ob), block_bytes(nb)


def _scale(b: np.ndarray, f: float) -> np.ndarray:
    """Blocks ``b`` (bytes, > 0) × ``f``: rounded up to the allocator's blocks where ``b`` is one."""
    x = np.ceil(b * f - 1e-9).astype(np.int64)
    return np.where(b % BLOCK_BYTES == 0, block_bytes(x), np.maximum(x, 1))


def _by_tensor(ev, cand: np.ndarray, op: np.ndarray, blocks: list) -> np.ndarray:
    """New bytes of the allocations ``cand`` (bool) from their op's tensors (``blocks[op]``); -1 where
    no tensor of the op has the block's size, or those that have it disagree on the new size."""
    out = np.full(len(ev), -1, np.int64)
    for o in np.unique(op[cand]).tolist():  # a loop over distinct ops (a few hundred), numpy per event
        m = np.flatnonzero(cand & (op == o))
        ob, nb = blocks[o]
        if not len(ob):
            continue
        eq = ev.bytes[m][:, None] == ob[None, :]
        hi = np.where(eq, nb[None, :], -1).max(axis=1)
        lo = np.where(eq, nb[None, :], np.iinfo(np.int64).max).min(axis=1)
        out[m] = np.where(eq.any(axis=1) & (hi == lo), hi, -1)
    return out


def paired_blocks(gm) -> bool:
    """Whether every GPU allocator event of ``gm`` has a block address (PyTorch >= 1.10's ``Addr``):
    the rules resize an allocation and its free together, which needs them paired
    (:func:`~daydream.graph.memory_part.block_pairs`); without addresses a resized allocation's
    free would keep its recorded size and the level would drift by the difference each time."""
    ev = gm.events
    return bool((ev.addr[ev.device >= 0] >= 0).all())


def _span(graph) -> tuple[int, int]:
    """(first step's recorded start, last step's recorded end), ns; the whole trace without steps."""
    steps = graph.facts.steps if graph.facts is not None else ()
    if not steps:
        return -(1 << 62), 1 << 62
    return min(s for _, s, *_ in steps), max(e for _, _, e, *_ in steps)


def next_launches(graph, launched: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(per node, the position of the next launch call of its thread at or after it, -1 none; per
    position, its node) over the CPU tasks in thread order (``launched``: bool per node, the call
    launched a GPU task). Consecutive launches of a thread have consecutive positions."""
    cpu = np.flatnonzero(graph.node_kind == NODE_CPU)
    o = cpu[np.lexsort((graph.rec_start_ns[cpu], graph.tid[cpu], graph.pid[cpu]))]
    lo = o[launched[o]]  # the launch calls in thread order: their positions
    rank = np.full(len(o), len(lo), np.int64)
    rank[launched[o]] = np.arange(len(lo))
    nxt = np.minimum.accumulate(rank[::-1])[::-1]
    j = np.minimum(nxt, max(len(lo) - 1, 0))
    same = (nxt < len(lo)) & (graph.pid[lo[j]] == graph.pid[o]) & (graph.tid[lo[j]] == graph.tid[o]) if len(lo) else \
        np.zeros(len(o), bool)
    pos = np.full(graph.n, -1, np.int64)
    pos[o] = np.where(same, nxt, -1)
    return pos, lo


def resized_bytes(graph, gm, call_op: np.ndarray, blocks: list, f_act: float, f_state: float) -> tuple[np.ndarray, np.ndarray]:
    """(new ``Bytes`` of every event of ``gm``, how each was resized: :data:`STATE`, :data:`TENSOR`,
    :data:`INFERRED`, :data:`KEPT`) by the module's rules; ``call_op``: per node of ``graph``, the
    index into ``blocks`` of the op its call launched (-1: none, or it launched nothing);
    ``blocks``: per op, its :func:`tensor_blocks`."""
    ev = gm.events
    n = len(ev)
    node = _anchor_nodes(graph, gm)
    pos, lo = next_launches(graph, call_op >= 0)
    at = np.where((node >= 0) & ~gm.at_end, pos[np.maximum(node, 0)], -1)  # each event's next launch (position)
    op = np.where(at >= 0, call_op[lo[np.maximum(at, 0)]] if len(lo) else -1, -1)
    al, fr = block_pairs(ev, np.arange(n))
    free_of = np.full(n, -1, np.int64)
    free_of[al] = fr
    paired = np.zeros(n, bool)
    paired[fr] = True
    s0, e1 = _span(graph)
    gpu = ev.device >= 0
    alloc = gpu & (ev.bytes > 0)
    phase = gm.phase if gm.phase is not None else np.zeros(n, np.uint8)
    t_free = np.where(free_of >= 0, ev.ts_ns[np.maximum(free_of, 0)], np.iinfo(np.int64).max)
    state = alloc & (t_free >= e1) & ((ev.ts_ns < s0) | (phase == BACKWARD) | (phase == OPTIMIZER))
    how = np.full(n, KEPT, np.int64)
    new = ev.bytes.copy()
    how[state] = STATE
    new[state] = _scale(ev.bytes[state], f_state)
    t = _by_tensor(ev, alloc & ~state & (op >= 0), op, blocks)
    how[t > 0], new[t > 0] = TENSOR, t[t > 0]
    ws = np.zeros(n, bool)  # a workspace: freed before the launch after its op's
    ws[al] = (at[al] >= 0) & (at[fr] >= 0) & (at[fr] <= at[al] + 1) & (ev.pid[fr] == ev.pid[al]) & (ev.tid[fr] == ev.tid[al])
    ws &= how == KEPT
    # ... or of such a workspace's size on its device, held longer (the BLAS handle's workspace has
    # one size, set per handle, not by the shapes: the MI300 BERT trace's 76 MiB hipBLASLt blocks,
    # one of them freed at the step's synchronize); not the allocator's smallest block, any small tensor's
    key = ev.device.astype(np.int64) * (int(ev.bytes.max(initial=0)) + 1) + ev.bytes
    ws |= alloc & (how == KEPT) & (ev.bytes > BLOCK_BYTES) & np.isin(key, key[ws])
    rest = alloc & (how == KEPT) & ~ws
    for ph, f in ((FORWARD, f_act), (BACKWARD, f_act), (OPTIMIZER, f_state)):
        m = rest & (phase == ph)
        how[m], new[m] = INFERRED, _scale(ev.bytes[m], f)
    orphan = gpu & (ev.bytes < 0) & ~paired
    how[orphan], new[orphan] = STATE, -_scale(-ev.bytes[orphan], f_state)
    how[fr], new[fr] = how[al], -new[al]
    return new, how


def shape_memory(graph, gm, call_op: np.ndarray, blocks: list, f_act: float, f_state: float):
    """(``gm`` at the new shapes, the note's words): :func:`resized_bytes`, and each GPU's level
    before the window × ``f_state`` (where recorded)."""
    new, how = resized_bytes(graph, gm, call_op, blocks, f_act, f_state)
    ev = gm.events
    cols = ev.columns()
    cols["bytes"] = new
    before = {}
    for d in ev.devices():
        if d >= 0:
            lvl, exact = level_before(ev, np.flatnonzero(ev.device == d))
            if exact:
                before[int(d)] = int(np.ceil(lvl * f_state))
    n = len(ev)
    mem = changed_events(gm, cols, gm.anchor_row, gm.offset_ns, gm.at_end, gm.step,
                         gm.phase if gm.phase is not None else np.zeros(n, np.uint8), np.zeros(n, np.int64),
                         np.arange(n, dtype=np.int64), before=before)
    alloc = ev.bytes > 0
    c = np.bincount(how[alloc], minlength=4)
    words = (f"memory at the new shapes: {c[TENSOR]:,} blocks by their op's tensors, {c[STATE]:,} model-state blocks "
             f"x{f_state:g} (parameters, gradients, optimizer state ~ hidden^2 x layers; with what was allocated before "
             f"the trace: an assumption), {c[INFERRED]:,} blocks by the step factor (inferred: x{f_act:g} in the forward "
             f"and backward, no tensor of their size in their op's shapes), {c[KEPT]:,} kept (workspaces freed within their "
             "op or of their size, other phases, host)")
    return mem, words


def peak_needs(graph, gm, capacity, margins: dict, default_margin: float) -> dict:
    """Per GPU of ``gm``: (peak allocated bytes in recorded order, needs = peak × margin, capacity)
    with ``capacity(device)`` -> bytes (-1 unknown) and the margin of ``margins`` (else
    ``default_margin``)."""
    ev = gm.events
    out = {}
    for d in ev.devices():
        if d < 0:
            continue
        k = np.flatnonzero(ev.device == d)
        lvl, _ = level_before(ev, k)
        peak = max(lvl, int(lvl + np.cumsum(ev.bytes[k]).max())) if len(k) else lvl
        out[int(d)] = (peak, int(np.ceil(peak * margins.get(int(d), default_margin))), capacity(int(d)))
    return out
