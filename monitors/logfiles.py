"""Append-only writers for the monitor's CSV and JSONL files.

Each writer owns one file descriptor opened with ``O_APPEND`` and writes a whole
interval's rows with a single ``os.write`` (looping only on a short write), so a
killed daemon leaves at most one partial last line, unterminated, which readers
skip: a row counts only if it ends in a newline (see ``monitors/schema.py``). There is no user-space buffering: nothing is lost on
SIGKILL that was "written" before it.

Cells never contain commas, quotes or newlines (strings are sanitised), so a
file can be read with ``csv.reader`` or with ``line.split(",")`` alike.

A write that fails with ``OSError`` (ENOSPC, EDQUOT, EIO, ...) drops those rows,
is counted, and is reported once per failure streak through the ``on_error``
callback; the first successful write after a streak reports the recovery, once,
through ``on_recover`` (with the number of writes the streak dropped), so a
reader can tell where the gap in the file ends and why it is there.

A log is never written through a link, nor into a FIFO: one found at a log's name (someone who
can write the folder planted it) is moved aside as ``<name>.<n>.old``, as a file with another
header is, and the file is opened with ``O_NOFOLLOW`` and ``O_NONBLOCK`` (a FIFO never holds the
daemon up), and refused if it is a FIFO all the same.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
from typing import Callable, Iterable, Optional, Sequence

from . import schema as _schema

_BAD = str.maketrans({",": ";", "\n": " ", "\r": " ", '"': "'"})


def cell(value) -> str:
    """Format one CSV cell: ``None`` is the empty cell (not measured), never 0."""
    if value is None:
        return ""
    if value is True:
        return "1"
    if value is False:
        return "0"
    if isinstance(value, float):
        if value != value:  # NaN is "not measured" too
            return ""
        return repr(round(value, 3))
    if isinstance(value, int):
        return str(value)
    return str(value).translate(_BAD)


def format_rows(rows: Iterable[Sequence]) -> str:
    """The rows as CSV lines, each cell as :func:`cell` formats it. The common exact types are
    inlined: this runs for every row of every sample (the power trace alone is tens of rows a
    second per GPU), and a function call per cell was a third of the daemon's own work."""
    lines = []
    for row in rows:
        cells = []
        add = cells.append
        for v in row:
            t = type(v)
            if v is None:
                add("")
            elif t is float:
                if -1e12 < v < 1e12:
                    # repr(round(v, 3)) with one float-to-text conversion instead of two (round
                    # is one too): the same digits, as both round to 3 places exactly, and below
                    # 1e12 those are at most 15 significant digits, which name one double.
                    v = ("%.3f" % v).rstrip("0")
                    add(v + "0" if v[-1] == "." else v)
                else:  # NaN (not measured: empty), infinities, huge values
                    add(repr(round(v, 3)) if v == v else "")
            elif t is int:
                add(str(v))
            elif t is str:
                add(v.translate(_BAD))
            else:  # bool, numpy scalars, subclasses: the general rule
                add(cell(v))
        lines.append(",".join(cells))
    return "\n".join(lines) + "\n" if lines else ""


def format_trace_rows(rows: Iterable[Sequence]) -> str:
    """Power-trace rows ``(time float, host str, GPU index int, watts float)``: the same text as
    :func:`format_rows`, without its per-cell type dispatch. The trace is tens of rows a second
    per GPU: formatted cell by cell it was the largest part of the daemon's work with GPUs. A row
    with a float :func:`format_rows` writes another way (NaN, infinities, huge) goes to it."""
    out = []
    add = out.append
    host = cell_host = None
    for row in rows:
        t, h, i, w = row
        if -1e12 < t < 1e12 and -1e12 < w < 1e12:
            if h is not host:
                host, cell_host = h, h.translate(_BAD)
            t = ("%.3f" % t).rstrip("0")
            w = ("%.3f" % w).rstrip("0")
            add(f"{t}0,{cell_host},{i},{w}0\n" if t[-1] == "." and w[-1] == "." else
                f"{t}0,{cell_host},{i},{w}\n" if t[-1] == "." else
                f"{t},{cell_host},{i},{w}0\n" if w[-1] == "." else f"{t},{cell_host},{i},{w}\n")
        else:
            add(format_rows((row,)))
    return "".join(out)


def close_fds(*fds: Optional[int]) -> None:
    """Close each descriptor that is not None, quietly (a close error loses nothing written here:
    every write was a syscall of its own). Returns None, for ``self.fd = close_fds(self.fd)``."""
    for fd in fds:
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass
    return None


ErrorHook = Callable[[str, OSError], None]
RecoverHook = Callable[[str, int, OSError], None]  # path, writes dropped in the streak, its last error


class _AppendFile:
    """A file opened for appending, written with one syscall per batch."""

    def __init__(self, path: str, on_error: Optional[ErrorHook] = None,
                 write: Callable[[int, bytes], int] = os.write,
                 on_recover: Optional[RecoverHook] = None):
        self.path = path
        self._on_error = on_error
        self._on_recover = on_recover
        self._write = write
        self.fd: Optional[int] = None
        self.dropped_writes = 0
        self.streak_dropped = 0  # writes dropped since the last successful one
        self.failing = False
        self.last_error: Optional[OSError] = None
        self.torn_lines = 0      # writes cut short (ENOSPC mid-write) whose part could not be removed
        self._torn = False       # such a cut line is still open: close it off before the next write

    def _close_off(self) -> str:
        """What ends a cut line so that every reader skips it (see the subclasses)."""
        return "\n"

    def _open(self) -> bool:
        if self.fd is not None:
            return True
        try:
            self.fd = _open_no_link(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            return True
        except OSError as e:
            self._failed(e)
            return False

    def _failed(self, e: OSError) -> None:
        self.dropped_writes += 1
        self.streak_dropped += 1
        self.last_error = e
        if not self.failing:
            self.failing = True
            if self._on_error is not None:
                try:
                    self._on_error(self.path, e)
                except Exception:  # the hook must never take the daemon down
                    pass

    def write_text(self, text: str) -> bool:
        """Write ``text`` in one go; False (and the rows dropped) on OSError."""
        if not text:
            return True
        if self.fd is None and not self._open():
            return False
        if self._torn:
            text = self._close_off() + text
        data = text.encode("utf-8", "replace")
        written = 0
        try:
            n = self._write(self.fd, data)
            written = n
            if n < len(data):  # a short write: go on with the rest
                view = memoryview(data)[n:]
                while view:
                    n = self._write(self.fd, view)
                    written += n
                    view = view[n:]
        except OSError as e:
            if written:
                self._remove_part(written)
            self._failed(e)
            return False
        self._torn = False
        if self.failing:
            self.failing = False  # cleared first: the hook may write through this very file
            dropped, self.streak_dropped = self.streak_dropped, 0
            if self._on_recover is not None:
                try:
                    self._on_recover(self.path, dropped, self.last_error)
                except Exception:  # the hook must never take the daemon down
                    pass
        return True

    def _remove_part(self, written: int) -> None:
        """A write cut short (the disk filled mid-line): cut the file back to where the write began,
        so the part never joins the next write into a valid-looking row (a time of 1.8e16 s once).
        One daemon writes each file (O_APPEND), so the part is the file's last ``written`` bytes:
        the offset is asked for only now, not before every write. If the cut fails, the line is
        closed off before the next write instead (readers skip it)."""
        try:
            os.ftruncate(self.fd, os.fstat(self.fd).st_size - written)
        except OSError:
            self._torn = True
            self.torn_lines += 1

    def close(self) -> None:
        self.fd = close_fds(self.fd)


def _open_no_link(path: str, flags: int, mode: int = 0o644) -> int:
    """``os.open`` that never follows a link at ``path`` nor waits on or writes to a FIFO (OSError
    saying what it found). A device is opened: only root can make one (the tests' /dev/full)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link is at this name: not followed (someone who can "
                          "write this folder may have planted it)", path) from None
        raise
    if stat.S_ISFIFO(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "a FIFO is at this name: not written", path)
    return fd


def _planted(path: str) -> bool:
    """A link, FIFO or socket at ``path``: what anyone who can write the folder can put there."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return stat.S_ISLNK(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _move_aside(path: str) -> str:
    """Rename ``path`` to the first free ``<path>.<n>.old`` (a rename moves a link itself, never
    what it names); the new name. OSError if it cannot."""
    n = 1
    while os.path.lexists(f"{path}.{n}.old"):
        n += 1
    os.replace(path, f"{path}.{n}.old")
    return f"{path}.{n}.old"


def _read_head(path: str, limit: int = 8192) -> Optional[bytes]:
    """First bytes of a regular file (never of a link, device or FIFO), or None."""
    try:
        fd = _open_no_link(path, os.O_RDONLY)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read(limit)


def _ends_with_newline(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"
    except OSError:
        return True


class CsvLog(_AppendFile):
    """One monitor CSV file: ``# schema=...`` line, header, rows.

    Opening an existing file whose schema line and header match appends to it
    (a requeued attempt). A partial last line left by a killed writer is closed
    off first with one comma per column and a newline: a line cut inside its last
    cell has the right cell count and a wrong value, and merely ending it would
    turn it into a valid-looking interior row; padded, it has more cells than the
    header (it had at least one), so every reader skips it. Padding rather than
    truncating keeps the evidence of the lost row, needs no write access beyond
    appending, and cannot cut rows another writer appends meanwhile. The cut line
    is counted in ``self.closed_partial``. A file with another schema or header
    is renamed to ``<name>.<n>.old`` and a fresh one started; ``self.moved_aside``
    then names it.
    """

    def __init__(self, path: str, schema: str, columns: Sequence[str],
                 on_error: Optional[ErrorHook] = None,
                 write: Callable[[int, bytes], int] = os.write,
                 on_recover: Optional[RecoverHook] = None,
                 formatter: Callable[[Iterable[Sequence]], str] = format_rows):
        super().__init__(path, on_error, write, on_recover)
        self.formatter = formatter  # rows -> text: format_rows, or format_trace_rows for the trace
        self.schema = schema
        self.columns = tuple(columns)
        self.moved_aside: Optional[str] = None
        self.appended = False
        self.closed_partial = 0  # 1 when a killed writer's cut last row was padded off
        self._pending = ""  # header (or line end) not yet written: goes before the next rows
        self._prepare()

    def _prepare(self) -> None:
        first = _schema.header_comment(self.schema)
        header = ",".join(self.columns) + "\n"
        planted = _planted(self.path)
        head = None if planted else _read_head(self.path)
        if head or planted:
            lines = (head or b"").split(b"\n", 2)
            if len(lines) >= 2 and lines[0].decode("utf-8", "replace") + "\n" == first \
                    and lines[1].decode("utf-8", "replace") + "\n" == header:
                self.appended = True
                if not _ends_with_newline(self.path):
                    if os.path.getsize(self.path) < len((first + header).encode()):
                        self._pending = "\n"  # only the header's newline is missing
                    else:
                        self._pending = "," * len(self.columns) + "\n"
                        self.closed_partial = 1
                    self._write_pending()
                return
            try:
                self.moved_aside = _move_aside(self.path)
            except OSError as e:
                self._failed(e)
                return
        self._pending = first + header
        self._write_pending()

    def _close_off(self) -> str:
        # one comma per column: the cut line then has more cells than the header, and is skipped
        return "," * len(self.columns) + "\n"

    def _write_pending(self) -> None:
        if self.write_text(self._pending):
            self._pending = ""

    def write_rows(self, rows: Iterable[Sequence]) -> bool:
        return self.write_lines(self.formatter(rows))

    def write_lines(self, text: str) -> bool:
        """Rows already formatted as CSV lines (each ending in a newline)."""
        if self._pending:
            if not self.write_text(self._pending + text):
                return False
            self._pending = ""
            return True
        return self.write_text(text)


class EventLog(_AppendFile):
    """``<host>.events.jsonl``: one JSON object a line (time_unix, host, kind, detail)."""

    def __init__(self, path: str, host: str, on_error: Optional[ErrorHook] = None,
                 write: Callable[[int, bytes], int] = os.write, clock=None,
                 on_recover: Optional[RecoverHook] = None):
        super().__init__(path, on_error, write, on_recover)
        import time
        self.host = host
        self._clock = clock or time.time
        self.listener = None  # called with (kind, detail, time) after each record (the alerts' XIDs)
        self.moved_aside: Optional[str] = None
        if _planted(path):  # a link, FIFO, ...: moved aside as CsvLog moves a foreign file
            try:
                self.moved_aside = _move_aside(path)
            except OSError as e:
                self._failed(e)
        # A cut JSON object never parses (its closing brace is its last character), so ending
        # the line is enough here; readers then skip it as unparsable.
        elif os.path.isfile(path) and not _ends_with_newline(path):
            self.write_text("\n")

    def emit(self, kind: str, detail: Optional[dict] = None,
             time_unix: Optional[float] = None) -> bool:
        rec = {
            "time_unix": round(self._clock() if time_unix is None else time_unix, 3),
            "host": self.host,
            "kind": kind,
            "detail": detail or {},
        }
        try:  # strict JSON: NaN and infinities are no JSON values
            line = json.dumps(rec, default=str, separators=(",", ":"), allow_nan=False) + "\n"
        except (TypeError, ValueError) as e:  # never lose the event over a bad detail
            line = json.dumps({**rec, "detail": {"repr": repr(detail), "json_error": str(e)}},
                              separators=(",", ":")) + "\n"
        ok = self.write_text(line)
        if self.listener is not None:
            try:
                self.listener(kind, rec["detail"], rec["time_unix"])
            except Exception:  # an alert rule's failure never costs an event
                pass
        return ok


def stderr(msg: str) -> None:
    try:
        sys.stderr.write(f"hpclaunch-monitor: {msg}\n")
        sys.stderr.flush()
    except Exception:
        pass
