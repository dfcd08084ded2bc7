"""Opening an Nsight Systems SQLite export for reading.

The SQLite magic check (with the advice to export an ``.nsys-rep`` first), the read-only immutable
URI, and a private copy when a ``-wal`` / ``-journal`` file beside the export holds committed
content; the original file and its folder are never written.
"""

from __future__ import annotations

import functools
import os
import shutil
import sqlite3
import tempfile
import urllib.parse

from ...errors import TraceFormatError
from ...util.temps import dir_prefix
from .. import SQLITE_MAGIC

#: exports contain user strings that are not always valid UTF-8 (e.g. Windows user names)
_TEXT_REPLACE = functools.partial(str, encoding="utf-8", errors="replace")


class ExportFile:
    """An export file opened for reading: read-only and immutable, or, when a -wal / -journal
    file beside it holds committed content, a private copy in a temporary folder (removed by
    :meth:`cleanup`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        #: the temporary folder of the private copy, or None
        self._tmp: tempfile.TemporaryDirectory | None = None

    def connect(self) -> tuple[sqlite3.Connection, str | None]:
        """The connection (text decoded as UTF-8, invalid bytes replaced), and the URI Arrow's driver may
        open the same database by (None when a private copy is read: sqlite3 alone applied its
        -wal / -journal file)."""
        path = self.path
        if os.path.isdir(path):
            raise TraceFormatError(path, "", "is a directory, not a trace file")
        try:
            with open(path, "rb") as f:
                head = f.read(len(SQLITE_MAGIC))
        except FileNotFoundError:
            raise TraceFormatError(path, "", "no such file") from None
        except OSError as e:
            raise TraceFormatError(path, "", f"cannot read ({e.strerror or e})") from None
        if head != SQLITE_MAGIC:
            raise TraceFormatError(
                path, "", "not a SQLite database; if this is an Nsight Systems report (.nsys-rep/.qdrep), "
                "export it first: nsys export --type sqlite --output trace.sqlite REPORT.nsys-rep")
        uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro&immutable=1"
        private = bool(_side_files(path))
        if private:  # committed content beside the file: read a private copy
            uri = self._private_copy()
        try:
            con = sqlite3.connect(uri, uri=True)
        except sqlite3.Error as e:
            raise TraceFormatError(path, "", f"cannot open the SQLite database ({e})") from None
        # exports contain user strings that are not always valid UTF-8 (e.g. Windows user names)
        con.text_factory = _TEXT_REPLACE
        # the private copy (rare) is read by sqlite3 alone, which applied its -wal / -journal file
        return con, (None if private else uri)

    def _private_copy(self) -> str:
        """URI of a copy of the database with its -wal or -journal file, in a temporary folder.

        SQLite's immutable open ignores those files: a WAL holds committed transactions not yet
        written to the database file, a hot rollback journal the pages an unfinished transaction
        overwrote. A normal (read-write) open of the copy makes SQLite apply the first and roll
        back the second, so the copy reads exactly what any SQLite reader of the original would;
        the original file and its folder are never written.
        """
        self._tmp = tempfile.TemporaryDirectory(prefix=dir_prefix("sqlite"))  # cleaned by a later run if this one is killed
        dst = os.path.join(self._tmp.name, "trace.sqlite")
        try:
            shutil.copyfile(self.path, dst)
            for suffix in _side_files(self.path):
                shutil.copyfile(self.path + suffix, dst + suffix)
        except OSError as e:
            self._tmp.cleanup()
            self._tmp = None
            raise TraceFormatError(
                self.path, "", f"cannot copy the database and its {' / '.join(_side_files(self.path))} file to read its committed "
                f"content ({e.strerror or e}); make a clean copy first: sqlite3 FILE \".backup clean.sqlite\"") from None
        return "file:" + urllib.parse.quote(dst) + "?mode=rw"

    def cleanup(self) -> None:
        """Remove the private copy, if one was made."""
        if self._tmp is not None:
            self._tmp.cleanup()


#: the first bytes of a WAL file (big-endian magic 0x377f0682 or 0x377f0683) and of a hot rollback
#: journal (0xd9d505f920a163d7): SQLite file format, "The WAL File Format" and "The Rollback Journal"
_SIDE_MAGIC = {"-wal": (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83"), "-journal": (b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7",)}


def _side_files(path: str) -> list[str]:
    """The ``-wal`` / ``-journal`` files SQLite keeps beside ``path`` that SQLite would apply: regular
    files that begin with their format's magic number. Others SQLite ignores (a WAL with a bad header
    is empty to it), and so does this reader: a 50 GB all-zero ``-wal`` beside a 372 KB export was
    copied to the temporary folder in full."""
    out = []
    for suffix, magic in _SIDE_MAGIC.items():
        p = path + suffix
        try:
            if not os.path.isfile(p) or os.path.getsize(p) == 0:
                continue
            with open(p, "rb") as f:
                head = f.read(8)
        except OSError:
            continue
        if any(head.startswith(m) for m in magic):
            out.append(suffix)
    return out
