"""Temporary files and folders of a run, named so that a later run can clean up after a killed one.

A run writes each output to ``.daydream-PID-XXXX-NAME`` in the output's folder and renames it
(``daydream/cli.py``, ``_atomic``), and may copy an Nsight Systems database with its WAL into
``daydream-PID-sqlite-XXXX/`` in the temporary folder (4.3 GB for a big export). A run killed by
SIGKILL (or the OOM killer) cannot remove them; the next run removes, at its start, those of its
folders whose PID is not a live process on this machine and that were last modified more than
:data:`STALE_AFTER_S` ago (a folder shared over the network may hold another machine's live run:
its PID means nothing here, and the age bound keeps its files; names without a PID, from daydream
versions before this one, go by age alone, and only in an output's folder).
"""

from __future__ import annotations

import os
import re
import shutil
import time

#: a left-over is removed only when older than this (seconds since last modified): an hour, far
#: longer than one output's write (the temporary lives from the write's start to its rename)
STALE_AFTER_S = 3600.0
#: the output temporaries' prefix (in the output's folder) and the temporary folders' (in the system's)
FILE_PREFIX, DIR_PREFIX = ".daydream-", "daydream-"

_PID = re.compile(r"(\d+)-")
_OURS = re.compile(r"(?:sqlite|timeline)-")


def file_prefix() -> str:
    """Prefix of this run's output temporaries: ``.daydream-PID-``."""
    return f"{FILE_PREFIX}{os.getpid()}-"


def dir_prefix(what: str) -> str:
    """Prefix of this run's temporary folders for ``what``: ``daydream-PID-WHAT-``."""
    return f"{DIR_PREFIX}{os.getpid()}-{what}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # someone else's live process (or not a pid we can ask about): kept
    return True


def clean_stale(folder: str, prefix: str, *, require_pid: bool = False, now: float | None = None) -> list[str]:
    """Remove ``folder``'s entries named ``prefix...`` left by dead runs (module docstring); returns
    their paths. ``require_pid``: only names ``prefix PID-WORD-...`` (in a folder shared with other
    programs, the system's temporary folder). Entries of another user are never touched. Never
    raises: a folder that cannot be listed or an entry that cannot be removed is left as it is."""
    removed: list[str] = []
    now = time.time() if now is None else now
    try:
        names = [n for n in os.listdir(folder) if n.startswith(prefix)]
    except OSError:
        return removed
    for n in names:
        path = os.path.join(folder, n)
        m = _PID.match(n, len(prefix))
        if require_pid and not (m and _OURS.match(n, m.end())):
            continue
        if m and _alive(int(m.group(1))):
            continue
        try:
            st = os.lstat(path)
            if now - st.st_mtime < STALE_AFTER_S or st.st_uid != os.getuid():
                continue
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
            removed.append(path)
        except OSError:
            continue
    return removed
