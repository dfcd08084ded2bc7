"""Reading back a timeline daydream wrote (``--timeline``, :mod:`daydream.render.chrome_trace`).

A timeline written with ``--opt`` holds two copies of the program: the prediction (real process,
device and correlation ids) and the baseline replay beside it (process ids +
``BASELINE_PID_OFFSET``, devices + ``BASELINE_DEVICE_OFFSET``). Read as one trace, the two copies
would be one program of twice the processes, whose steps overlap. The file says what it is
(``traceName`` "daydream timeline of ..."), so the reader keeps the prediction and skips the
baseline copy's rows, counted in ``Accounting.skipped`` and warned about once. A file written
without ``--opt`` holds one copy and is read whole.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..events.table import Accounting, EventTable

#: how ``traceName`` of a daydream timeline begins (:func:`daydream.render.chrome_trace.write_timeline`)
TRACE_NAME_PREFIX = "daydream timeline of "
#: the baseline copy's process ids, device ids and correlation ids are the prediction's plus these
BASELINE_PID_OFFSET = 10_000_000
BASELINE_DEVICE_OFFSET = 1000
BASELINE_CORRELATION_OFFSET = 1 << 36  #: keeps the two copies' correlation ids apart
SKIP_REASON = "daydream timeline: the baseline replay's copy (the prediction is read)"


def prediction_only(path: str, table: EventTable) -> EventTable:
    """``table`` without the baseline copy's rows when it is a daydream timeline holding both copies;
    otherwise ``table`` itself. The accounting stays balanced: each skipped row leaves its category's
    ``kept`` count for ``skipped``. Warns (UserWarning) when rows are skipped."""
    if not table.meta.extra.get("traceName", "").startswith(TRACE_NAME_PREFIX) or not len(table):
        return table
    base = (table.cols["pid"] >= BASELINE_PID_OFFSET) | (table.cols["device"] >= BASELINE_DEVICE_OFFSET)
    if not base.any() or base.all():
        return table
    cats, counts = np.unique(table.cols["cat_id"][base], return_counts=True)
    kept = table.accounting.kept
    by_cat = {table.names[int(c)]: int(n) for c, n in zip(cats.tolist(), counts.tolist())}
    if any(kept.get(k, 0) < n for k, n in by_cat.items()):  # rows not one per kept record: leave the file as read
        return table
    out = table.take(~base)
    a = table.accounting
    acct = out.accounting = Accounting(read=dict(a.read), kept=dict(a.kept), skipped=dict(a.skipped), notes=dict(a.notes))
    for k, n in by_cat.items():
        acct.kept[k] -= n
        if not acct.kept[k]:
            del acct.kept[k]
    acct.add("skipped", SKIP_REASON, int(base.sum()))
    warnings.warn(f"{path}: a daydream timeline holding the prediction and the baseline replay; read the prediction "
                  f"({int(base.sum()):,} rows of the baseline copy skipped)", UserWarning, stacklevel=3)
    return out
