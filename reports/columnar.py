"""Columnar copies of finished logs: a report parses a monitor log (or a rank's metrics file) once, after
the job has ended, and later reports read its columns from the copy instead of parsing the text again.

The CSV and JSON-lines files stay the contract (docs/monitor-logs.md); a copy is only a cache of what the
readers made of them:

* ``<dir>/.columnar/<file name>.arrow``: an Arrow IPC file (zstd; a 6 h, 8-GPU log of 30 MB makes
  a copy of a few MB), one column per array, and a JSON description in its schema metadata: the
  format, the source file's identity (size, mtime in ns, inode), what was read from it (``kind``: the
  reader and its column lists) and the reader's small results (dictionary values, warnings, counts).
* A copy is used only when all of that matches the source file as it is now: a log that grew, was
  rewritten or replaced, or a copy from another reader version, is ignored (and rewritten by the next
  report that may write). Anything unreadable in a copy is ignored the same way, never trusted:
  no pickle, no code; the arrays must have the lengths and types the description says.
* Written atomically (a temporary file renamed over), only when the caller says the source is settled,
  and only when the source did not change while it was read. A run directory the reader cannot write
  (an admin reading a user's run) simply gets no copy, nor does one whose ``.columnar`` is a link
  (whoever can write the run directory could point it at a folder of the reader's).
* A log still being written (a running job's) gets a copy of its first part instead, up to a line's
  end (:class:`Growing`): the monitor only appends, so a later report reads that part from the copy
  and parses only the lines appended since. Such a copy names the part it holds by its length, the
  file's inode and a CRC of its first and last PREFIX_CHECK bytes, and is used only while the file
  still begins with those bytes. It is written for logs of MIN_PREFIX bytes or more, and again
  once the lines after it reach REWRITE_SHARE of it, so no report parses more than that share anew.
"""
from __future__ import annotations

import json
import os
import stat
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

FORMAT = "hpclaunch-columnar/1"
SUBDIR = ".columnar"
META_KEY = b"hpclaunch"
# Without a record of the job's end, a log counts as settled once nobody has written it for this long.
SETTLE_S = 120.0
# Types a copy may hold (anything else in a copy makes it ignored).
# numpy's name -> Arrow's.
DTYPES = {"float64": "double", "int32": "int32", "bool": "bool"}
PREFIX_CHECK = 4096      # bytes at each end of a copied first part whose CRC must still match
MIN_PREFIX = 1 << 20     # a growing log smaller than this is parsed whole: cheaper than a copy
REWRITE_SHARE = 0.25     # a new copy of a growing log once its unread rest is this share of the copy

Arrays = Dict[str, np.ndarray]


def copy_path(src) -> Path:
    src = Path(src)
    return src.parent / SUBDIR / (src.name + ".arrow")


def identity(st: os.stat_result) -> list:
    return [st.st_size, st.st_mtime_ns, st.st_ino]


@dataclass(frozen=True)
class Policy:
    """A report's use of copies: it reads valid ones; ``run_ended`` (the run's own record: True, False,
    None when there is none) says when it may write them."""

    run_ended: Optional[bool] = None

    def may_write(self, st: os.stat_result, now: Optional[float] = None) -> bool:
        """Yes once the job has ended; without a record of it, once the file has not changed for
        SETTLE_S. (A copy of a file still growing would only be replaced: it is keyed by the file.)"""
        if self.run_ended is not None:
            return self.run_ended
        return st.st_mtime < (time.time() if now is None else now) - SETTLE_S


@dataclass(frozen=True)
class Growing:
    """How a reader reads a log by parts while it is being written (``through``'s ``growing``).

    ``complete()``: (bytes through the file's last newline now, what a cut line after it adds to the
    value's count of skipped rows); ``parse(start, end)``: the rows of bytes ``start`` to ``end`` (0:
    from the file's beginning, its header included); ``merge(a, b)``: the value of two consecutive
    parts; ``finish(value, cut)``: the value with the cut line counted; ``kind``, ``to_copy`` and
    ``from_copy`` as ``through``'s, for a copy that keeps the file's row order (the part after it
    is appended in that order)."""

    kind: str
    complete: Callable[[], Tuple[int, int]]
    parse: Callable[[int, int], Any]
    merge: Callable[[Any, Any], Any]
    finish: Callable[[Any, int], Any]
    to_copy: Callable[[Any], Tuple[Arrays, dict]]
    from_copy: Callable[[Arrays, dict], Any]


def through(src, kind: str, policy: Policy, parse: Callable[[], Any],
            to_copy: Callable[[Any], Tuple[Arrays, dict]], from_copy: Callable[[Arrays, dict], Any],
            growing: Optional[Growing] = None) -> Any:
    """What a reader returns for ``src``: from its valid copy of ``kind`` when there is one, else
    ``parse()``, kept as a copy (``to_copy``) when the policy allows. Once ``to_copy`` has run, the
    value returned is the copy's (``from_copy`` of it, in memory), stored or not: the first report
    then sees what every later one reads (the rows in the copy's order, its stored results), and
    gets that order's work for free (a GPU log's copy groups its rows by GPU; the reader runs in a
    thread beside the report's own work). ``growing``: how to read the log by parts (:class:`Growing`),
    for a log still being written and for the copy of one that has just settled."""
    st = os.stat(src)
    hit = load(src, kind, st)
    if hit is not None:
        return from_copy(*hit)
    settled = policy.may_write(st)
    value = _by_parts(src, st, growing, copy_part=not settled) if growing is not None else None
    if value is None:
        value = parse()
    if settled:
        arrays, data = to_copy(value)
        store(src, kind, st, arrays, data)
        return from_copy(arrays, data)
    return value


def _by_parts(src, st: os.stat_result, g: Growing, copy_part: bool) -> Any:
    """A log's value from the copy of its first part and the lines after it (the copy made while its
    job ran, also the quickest way to the whole file's copy once it ended); ``copy_part``: it still
    grows, so copy the part written so far, first and when the rest after the copy is large enough.
    None where there is no such copy and none is to be made (the caller parses the file whole)."""
    hit = load_prefix(src, g.kind, st)
    if hit is None and (st.st_size < MIN_PREFIX or not copy_part):
        return None  # before complete()'s read of the file's tail: the caller parses it whole anyway
    end, cut = g.complete()
    if hit is None and end < MIN_PREFIX:
        return None
    if hit is not None:
        arrays, data, start = hit
        value = g.from_copy(arrays, data)
        if end > start:
            value = g.merge(value, g.parse(start, end))
    else:
        start, value = 0, g.parse(0, end)
    if copy_part and end >= MIN_PREFIX and (start == 0 or end - start >= REWRITE_SHARE * start) \
            and can_store(src):  # an admin reading a user's running job: no copy made at every report
        source = prefix_identity(src, end)
        if source is not None:
            arrays, data = g.to_copy(value)
            store(src, g.kind, st, arrays, data, source=source)
    return g.finish(value, cut)


def can_store(src) -> bool:
    """Whether a copy of ``src`` could be written: its folder of copies is one this process may write,
    or may be made in the log's folder."""
    d = copy_path(src).parent
    if d.is_dir():
        return os.access(d, os.W_OK | os.X_OK)
    return not d.exists() and os.access(d.parent, os.W_OK | os.X_OK)


def prefix_identity(src, end: int) -> Optional[list]:
    """What names the first ``end`` bytes of ``src``: ["prefix", end, inode, CRC of the first and of
    the last PREFIX_CHECK of them]; None when the file is shorter (rewritten) or unreadable."""
    try:
        fd = os.open(src, os.O_RDONLY)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_size < end:
            return None
        head = os.pread(fd, min(end, PREFIX_CHECK), 0)
        tail = os.pread(fd, min(end, PREFIX_CHECK), max(0, end - PREFIX_CHECK))
        if len(head) != min(end, PREFIX_CHECK) or len(tail) != len(head):
            return None
        return ["prefix", end, st.st_ino, zlib.crc32(head), zlib.crc32(tail)]
    except OSError:
        return None
    finally:
        os.close(fd)


def load_prefix(src, kind: str, st: os.stat_result) -> Optional[Tuple[Arrays, dict, int]]:
    """(arrays, the stored results, bytes it covers) of ``src``'s copy of its first part, if the file
    still begins with that part; None otherwise."""
    def holds(desc: dict) -> bool:
        source = desc.get("source")
        return (desc.get("kind") == kind and isinstance(source, list) and len(source) == 5
                and source[0] == "prefix" and type(source[1]) is int and source[2] == st.st_ino
                and 0 < source[1] <= st.st_size and prefix_identity(src, source[1]) == source)

    got = _read(src, holds)
    return None if got is None else (got[1], got[0]["data"], got[0]["source"][1])


def load(src, kind: str, st: os.stat_result) -> Optional[Tuple[Arrays, dict]]:
    """(arrays, the stored results) of ``src``'s copy if it is a valid copy of ``src`` as ``st`` shows
    it, read by ``kind``; None otherwise (no copy, stale, foreign or damaged)."""
    source = identity(st)
    got = _read(src, lambda desc: desc.get("kind") == kind and desc.get("source") == source)
    return None if got is None else (got[1], got[0]["data"])


def description(src, kind: str) -> Optional[dict]:
    """The stored results of ``src``'s valid copy of ``kind`` (its schema's metadata only: no column is
    read or decompressed), for a caller that needs a log's bounds before reading it; None when there
    is none. Its columns are checked only when read (``load``)."""
    try:
        import pyarrow as pa
        import pyarrow.ipc as ipc
    except ImportError:
        return None
    try:
        source = identity(os.stat(src))
        with pa.memory_map(str(copy_path(src))) as mm:
            desc = json.loads((ipc.open_file(mm).schema.metadata or {}).get(META_KEY, b"null"))
    except (OSError, ValueError, pa.ArrowException):
        return None
    if not isinstance(desc, dict) or desc.get("format") != FORMAT or desc.get("kind") != kind \
            or desc.get("source") != source or not isinstance(desc.get("data"), dict):
        return None
    return desc["data"]


def _read(src, holds: Callable[[dict], bool]) -> Optional[Tuple[dict, Arrays]]:
    """(description, arrays) of ``src``'s copy when its description ``holds`` (asked before any column
    is read: a copy of another kind or version costs no decompression), its arrays checked against
    the description; None when there is none or it does not hold."""
    path = copy_path(src)
    try:
        import pyarrow as pa
        import pyarrow.ipc as ipc
    except ImportError:
        return None
    try:
        with pa.memory_map(str(path)) as mm:
            reader = ipc.open_file(mm)
            desc = json.loads((reader.schema.metadata or {}).get(META_KEY, b"null"))
            if not isinstance(desc, dict) or desc.get("format") != FORMAT or not isinstance(desc.get("data"), dict) \
                    or not holds(desc):
                return None
            table = reader.read_all()
        n, types = desc["rows"], desc["types"]
        if table.num_rows != n or sorted(table.column_names) != sorted(types):
            return None
        arrays = {name: _column(table.column(name), types[name], n) for name in table.column_names}
        return desc, arrays
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return None


def _column(col, type_name: str, n: int) -> np.ndarray:
    """One column of a copy as numpy (of Arrow memory; copied only when chunked)."""
    dtype = np.dtype(type_name)
    chunks = []
    for ch in col.chunks:
        if ch.null_count or str(ch.type) != DTYPES.get(type_name):
            raise ValueError("unexpected column in a copy")
        if type_name == "bool":  # Arrow packs booleans into bits
            bits = np.frombuffer(ch.buffers()[1], np.uint8)
            chunks.append(np.unpackbits(bits, bitorder="little", count=ch.offset + len(ch))[ch.offset:].astype(bool))
        else:
            chunks.append(np.frombuffer(ch.buffers()[1], dtype, count=len(ch), offset=ch.offset * dtype.itemsize))
    out = chunks[0] if len(chunks) == 1 else (np.concatenate(chunks) if chunks else np.empty(0, dtype))
    if out.size != n:
        raise ValueError("column length differs from the copy's row count")
    return out


def _arrow(pa, a: np.ndarray):
    """A numpy array as Arrow's, from its memory (pa.array would import pandas: 0.3 s)."""
    if a.dtype == np.bool_:
        data = pa.py_buffer(np.packbits(a, bitorder="little"))
        return pa.Array.from_buffers(pa.bool_(), a.size, [None, data])
    return pa.Array.from_buffers(pa.from_numpy_dtype(a.dtype), a.size, [None, pa.py_buffer(np.ascontiguousarray(a))])


def store(src, kind: str, st: os.stat_result, arrays: Arrays, data: dict, source: Optional[list] = None) -> bool:
    """Writes ``src``'s copy from what its reader made of it (``arrays`` of one length, JSON-able
    ``data``) if ``src`` is still as ``st`` shows it (``source``: a copy of its first part, if the
    file still begins with what ``prefix_identity`` named). False when it cannot (no pyarrow, a
    directory it may not write, a source that changed meanwhile): the report goes on without a copy."""
    try:
        import pyarrow as pa
        import pyarrow.ipc as ipc
    except ImportError:
        return False
    try:
        if source is None and identity(os.stat(src)) != identity(st):
            return False  # written to while it was read: that copy would describe neither version
        if source is not None and prefix_identity(src, source[1]) != source:
            return False  # rewritten while it was read
        lengths = {a.size for a in arrays.values()}
        types = {name: a.dtype.name for name, a in arrays.items()}
        if len(lengths) > 1 or any(t not in DTYPES for t in types.values()):
            raise ValueError(f"cannot copy columns {types}")
        desc = {"format": FORMAT, "kind": kind, "source": identity(st) if source is None else source,
                "rows": lengths.pop() if lengths else 0,
                "types": types, "data": data}
        table = pa.Table.from_arrays([_arrow(pa, a) for a in arrays.values()], names=list(arrays))
        table = table.replace_schema_metadata({META_KEY: json.dumps(desc, separators=(",", ":"))})
        out = copy_path(src)
        out.parent.mkdir(exist_ok=True)
        if not stat.S_ISDIR(os.lstat(out.parent).st_mode):
            return False  # a link there (a colleague's run directory): copies go nowhere it names
        fd, tmp = tempfile.mkstemp(prefix=out.name + ".", suffix=".tmp", dir=out.parent)
        try:
            os.fchmod(fd, st.st_mode & 0o666)  # as readable as the log it copies (mkstemp: 0600)
            with os.fdopen(fd, "wb") as f, ipc.new_file(f, table.schema,
                                                         options=ipc.IpcWriteOptions(compression="zstd")) as w:
                w.write_table(table, max_chunksize=1 << 20)
            os.replace(tmp, out)
        except BaseException:
            os.unlink(tmp)
            raise
        return True
    except (OSError, ValueError, TypeError, pa.ArrowException):  # a cache: never the report's failure
        return False
