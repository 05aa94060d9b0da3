"""Following logs while a job writes them: each read parses only the complete lines appended since the
previous one (by byte offset), with the readers' own parsers (readers.py), so a long job's logs are
read once, not again at every update. The dashboard uses these; the reports read whole files.

A file that shrank or was replaced (another inode) is read again from its start, and the caller is
told (``restarted``), so what it kept from the old file can be dropped.
"""
from __future__ import annotations

import io
import os
from typing import List, Optional, Tuple

from hpclaunch.monitors import schema
from hpclaunch.reports import readers

# At most this much is parsed per read: the first read of a huge log takes several reads, each bounded.
MAX_READ = 32 << 20
SMALL_READ = 16 << 10   # below this, the csv module parses the lines (pyarrow's start costs more)


class Tail:
    """The complete lines appended to one file since the last read. ``start``: a file longer than this
    at the first read is followed from its last ``start`` bytes (from the first line that starts
    there), not from its beginning: a view of many files' recent past (the dashboard's page of a large
    job) instead of every file's whole history."""

    def __init__(self, path, max_read: int = MAX_READ, start: Optional[int] = None):
        self.path = str(path)
        self.offset = 0
        self.max_read = max_read
        self.start = start
        self.skipped = 0          # bytes never read: the head of a file followed from its end
        self._ident: Optional[Tuple[int, int]] = None

    def read(self) -> Tuple[bytes, bool]:
        """(new complete lines, restarted): ``restarted`` when the file was truncated or replaced since
        the last read. A line still being written stays for the next read."""
        try:
            st = os.stat(self.path)
        except OSError:
            return b"", False
        ident, restarted = (st.st_dev, st.st_ino), False
        if ident != self._ident or st.st_size < self.offset:
            restarted = self._ident is not None
            self._ident, self.offset = ident, 0
            if self.start is not None and st.st_size > self.start:
                self.offset = self.skipped = self._line_after(st.st_size - self.start)
        if st.st_size <= self.offset:
            return b"", restarted
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(min(st.st_size - self.offset, self.max_read))
        except OSError:
            return b"", restarted
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) >= self.max_read:  # one line longer than a whole read: no log writes that; skip it
                self.offset += len(data)
            return b"", restarted
        self.offset += cut + 1
        return data[:cut + 1], restarted


    def _line_after(self, pos: int) -> int:
        """The offset of the first line that starts at or after ``pos`` (0 if unreadable)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(max(0, pos - 1))
                f.readline()   # the rest of the line ``pos`` falls in (none when pos - 1 is its newline)
                return f.tell()
        except OSError:
            return 0


class CsvFollower:
    """A contract CSV (``kind`` "gpu" or "host"): each read gives a Table of the rows appended since."""

    COLUMNS = {
        "gpu": (schema.GPU_SCHEMA, readers.GPU_NUMERIC, readers.GPU_TEXT, readers.GPU_OPTIONAL),
        "host": (schema.HOST_SCHEMA, readers.HOST_NUMERIC, readers.HOST_TEXT, ()),
    }

    def __init__(self, path, kind: str, engine: str = "auto", max_read: int = MAX_READ, start: Optional[int] = None):
        self.tail = Tail(path, max_read, start)
        self.schema, self.numeric, self.text, self.optional = self.COLUMNS[kind]
        self.engine = engine
        self.header: Optional[List[str]] = None

    def read(self) -> Tuple[Optional[readers.Table], bool]:
        """(the new rows, or None when there are none; restarted, as Tail.read)."""
        data, restarted = self.tail.read()
        if restarted:
            self.header = None
        if not data:
            return None, restarted
        skip = 0
        if self.header is None and self.tail.skipped:   # followed from its end: its header, from its head
            try:
                with open(self.tail.path, "r", newline="", errors="replace") as f:
                    self.header = readers.head_of(f)[1]
            except OSError:
                pass
        if self.header is None:  # the file's first lines: its schema line and header
            _, header, skip = readers.head_of(_lines(data, newline=""))
            if header is None:  # not written yet: read these lines again next time
                self.tail.offset = 0
                return None, restarted
            self.header = header
        # a few lines (a running job's, read every second): the csv module, a fifth of pyarrow's
        # per-call cost; both engines read the same table
        engine = "csv" if self.engine == "auto" and len(data) < SMALL_READ else self.engine
        table = readers.read_rows(self.tail.path, data, self.header, skip, self.numeric, self.text,
                                  engine, self.optional)
        return (table if table.n else None), restarted


class JsonlFollower:
    """A JSON-lines file (metrics/rank<R>.jsonl): each read gives the records appended since, and how
    many lines did not parse."""

    def __init__(self, path, max_read: int = MAX_READ, start: Optional[int] = None):
        self.tail = Tail(path, max_read, start)

    def read(self) -> Tuple[List[dict], int, bool]:
        data, restarted = self.tail.read()
        if not data:
            return [], 0, restarted
        records, bad = readers.parse_jsonl(_lines(data, newline=None))
        return records, bad, restarted


def _lines(data: bytes, newline: Optional[str]) -> io.StringIO:
    """The lines of ``data`` as open() would give them with this ``newline`` (the readers' own files)."""
    return io.StringIO(data.decode("utf-8", "replace"), newline=newline)
