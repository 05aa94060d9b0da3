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
HEAD_BYTES = 8 << 10    # a contract CSV's schema line and header are in its first this-many bytes


class Tail:
    """The complete lines appended to one file since the last read. ``start``: a file longer than this
    at the first read is followed from its last ``start`` bytes (from the first line that starts
    there), not from its beginning: a view of many files' recent past (the dashboard's page of a large
    job) instead of every file's whole history. Such a first read also keeps the file's first
    HEAD_BYTES when ``keep_head`` (``head``: where a CSV's header is). One open and one pread a read
    (two for a CSV's first): a large job's page follows 10,000 files."""

    def __init__(self, path, max_read: int = MAX_READ, start: Optional[int] = None, keep_head: bool = False):
        self.path = str(path)
        self.offset = 0
        self.max_read = max_read
        self.start = start
        self.skipped = 0          # bytes never read: the head of a file followed from its end
        self.keep_head = keep_head
        self.head: Optional[bytes] = None   # its first HEAD_BYTES, read with them skipped (keep_head)
        self._ident: Optional[Tuple[int, int]] = None

    def read(self) -> Tuple[bytes, bool]:
        """(new complete lines, restarted): ``restarted`` when the file was truncated or replaced since
        the last read. A line still being written stays for the next read."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return b"", False
        restarted = False
        try:
            st = os.fstat(fd)
            ident = (st.st_dev, st.st_ino)
            data = None
            if ident != self._ident or st.st_size < self.offset:
                restarted = self._ident is not None
                self._ident, self.offset, self.head = ident, 0, None
                if self.start is not None and st.st_size > self.start:
                    data = self._from_line_after(fd, st.st_size - self.start, st.st_size)
                    self.head = os.pread(fd, HEAD_BYTES, 0) if self.keep_head else None
            if data is None:
                if st.st_size <= self.offset:
                    return b"", restarted
                data = os.pread(fd, min(st.st_size - self.offset, self.max_read), self.offset)
        except OSError:
            return b"", restarted
        finally:
            os.close(fd)
        cut = data.rfind(b"\n")
        if cut < 0:
            if len(data) >= self.max_read:  # one line longer than a whole read: no log writes that; skip it
                self.offset += len(data)
            return b"", restarted
        self.offset += cut + 1
        return data[:cut + 1], restarted

    def _from_line_after(self, fd: int, pos: int, size: int) -> bytes:
        """Sets ``offset`` (and ``skipped``) to the first line that starts at or after ``pos`` (> 0), and
        returns the bytes from there (at most max_read), read at once with the line ``pos`` falls in."""
        lead = os.pread(fd, min(size - (pos - 1), self.max_read + 1), pos - 1)
        nl = lead.find(b"\n")   # the end of the line pos falls in (pos - 1 itself when a line starts at pos)
        if nl < 0 and pos - 1 + len(lead) < size:   # a line longer than a read: find its end, read on there
            with open(fd, "rb", closefd=False) as f:
                f.seek(pos - 1 + len(lead))
                f.readline()
                self.offset = self.skipped = f.tell()
            return os.pread(fd, min(size - self.offset, self.max_read), self.offset)
        self.offset = self.skipped = pos + nl if nl >= 0 else size
        return lead[nl + 1:nl + 1 + self.max_read] if nl >= 0 else b""


class CsvFollower:
    """A contract CSV (``kind`` "gpu" or "host"): each read gives a Table of the rows appended since."""

    COLUMNS = {
        "gpu": (schema.GPU_SCHEMA, readers.GPU_NUMERIC, readers.GPU_TEXT, readers.GPU_OPTIONAL),
        "host": (schema.HOST_SCHEMA, readers.HOST_NUMERIC, readers.HOST_TEXT, ()),
    }

    def __init__(self, path, kind: str, engine: str = "auto", max_read: int = MAX_READ, start: Optional[int] = None):
        self.tail = Tail(path, max_read, start, keep_head=True)
        self.schema, self.numeric, self.text, self.optional = self.COLUMNS[kind]
        self.engine = engine
        self.header: Optional[List[str]] = None

    def read(self) -> Tuple[Optional[readers.Table], bool]:
        """(the new rows, or None when there are none; restarted, as Tail.read)."""
        data, skip, restarted = self.take()
        if data is None:
            return None, restarted
        return self.parse([data], [skip]), restarted

    def take(self) -> Tuple[Optional[bytes], int, bool]:
        """read() without the parse: (the new complete lines or None, how many of their first lines are
        the schema line and header, restarted). parse() reads them, with other files' of the same
        ``header`` (one parse for a large job's many files)."""
        data, restarted = self.tail.read()
        if restarted:
            self.header = None
        if not data:
            return None, 0, restarted
        skip = 0
        if self.header is None and self.tail.skipped:   # followed from its end: its header, from its head
            self.header = self._head_header()
        if self.header is None:  # the file's first lines: its schema line and header
            _, header, skip = readers.head_of(_lines(data, newline=""))
            if header is None:  # not written yet: read these lines again next time
                self.tail.offset = 0
                return None, 0, restarted
            self.header = header
        return data, skip, restarted

    def parse(self, chunks: List[bytes], skips: List[int]) -> Optional[readers.Table]:
        """The rows of ``chunks`` (take()'s lines of files with this one's header and kind, each less
        its first ``skips`` lines) as one table, None when there are none."""
        data = b"".join(c if not k else c[_after_lines(c, k):] for c, k in zip(chunks, skips)) \
            if len(chunks) > 1 else chunks[0]
        skip = skips[0] if len(chunks) == 1 else 0
        # a few lines (a running job's, read every second): the csv module, a fifth of pyarrow's
        # per-call cost; both engines read the same table
        engine = "csv" if self.engine == "auto" and len(data) < SMALL_READ else self.engine
        table = readers.read_rows(self.tail.path, data, self.header, skip, self.numeric, self.text,
                                  engine, self.optional)
        return table if table.n else None

    def _head_header(self) -> Optional[List[str]]:
        head = self.tail.head
        if head is not None:
            header = readers.head_of(_lines(head, newline=""))[1]
            if header is not None or len(head) < HEAD_BYTES:
                return header
        try:   # a head longer than HEAD_BYTES
            with open(self.tail.path, "r", newline="", errors="replace") as f:
                return readers.head_of(f)[1]
        except OSError:
            return None


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


def _after_lines(data: bytes, k: int) -> int:
    """The offset just past the first ``k`` lines of ``data``."""
    pos = 0
    for _ in range(k):
        pos = data.index(b"\n", pos) + 1
    return pos
