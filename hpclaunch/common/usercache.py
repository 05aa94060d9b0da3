"""A per-user cache of what is costly to make and cheap to keep (``$XDG_CACHE_HOME/hpclaunch``, else
``~/.cache/hpclaunch``): bytes only, never code. Its users, each justified in its own docstring by
a budget it keeps: the top-level help text (hpclaunch/cli/__init__.py), parsed job files
(spec/yamlio.py) and the Slurm facts a submission asks for (launchers/backends/slurm_facts.py).

An entry is a file of ``MAGIC``, the length of the material, the material (everything the payload
was made from: a job file's text, the parser's source and terminal width, the slurm.conf...) and
the payload. It is used only when that material equals today's byte for byte, so a stale entry is
never read, only left behind. The cache is a speed-up and nothing else, and whatever is in the
folder is read as untrusted input: an entry that is not a regular file of ours (a link, a FIFO,
another owner's), larger than its limit (``MAX_ENTRY``), truncated, of another format or another material is
ignored after at most one bounded read, and nothing in it is ever run or unmarshalled (a marshal
entry of 5 bytes could ask for 2**31-1 items: 47 s and 16.8 GB). A folder that cannot be made,
is not the user's own or is writable by others is not used; a failed write means the caller makes
the thing again next time.
"""
from __future__ import annotations

import os
import stat
import sys
import zlib

from hpclaunch.common.atomic import write_atomic
from hpclaunch.common.privatedir import private_dir
from hpclaunch.common.version import __version__

MAGIC = b"hpclaunch-cache 2\n"
# Bytes of an entry (material and payload) unless its user says otherwise; a larger file is not read.
# Reading and decoding one this size (a JSON payload of nothing but `[],` included) is ~5 ms and ~6 MB.
MAX_ENTRY = 256 << 10
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) \
    | getattr(os, "O_NOCTTY", 0)


def folder() -> str | None:
    """The cache folder, made 0700 if missing; None when it cannot be made or trusted (not ours, a
    link, or writable by others)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return private_dir(os.path.join(base, "hpclaunch"), open_bits=0o022)


def key(*parts: object, texts: list[str] | tuple[str, ...] = ()) -> str:
    """A short name for an entry made from ``parts`` and ``texts`` by this hpclaunch and this Python
    (and this entry format: another hpclaunch beside this one, of the same version number but an
    older format, does not overwrite these entries with its own). Only a name: load() compares the whole material, so a clash of names costs a rebuild, never a
    stale entry."""
    crc = zlib.crc32(repr((MAGIC, __version__, sys.implementation.cache_tag, sys.version_info[:3], parts)).encode())
    size = 0
    for text in texts:
        raw = text.encode("utf-8", "surrogatepass")
        crc = zlib.crc32(raw, zlib.crc32(b"\0", crc))
        size += len(raw)
    return f"{crc:08x}{size:x}"


def load(name: str, material: str, limit: int = MAX_ENTRY) -> bytes | None:
    """The payload stored under ``name`` when it was made from exactly ``material`` by this hpclaunch
    and Python, else None (also for anything in the folder that is not such an entry, or is larger
    than ``limit`` bytes)."""
    raw = _read(name, limit)
    if raw is None or not raw.startswith(MAGIC):
        return None
    head, newline, rest = raw[len(MAGIC):len(MAGIC) + 12].partition(b"\n")
    if not newline or not head.isdigit():
        return None
    start = len(MAGIC) + len(head) + 1
    want = _material(material)
    if int(head) != len(want) or raw[start:start + len(want)] != want:
        return None
    return raw[start + len(want):]


def store(name: str, material: str, payload: bytes, limit: int = MAX_ENTRY) -> bool:
    """Store ``payload`` made from ``material`` (atomically: readers see the old entry or the whole
    new one); best effort: False when it was not stored (also when larger than ``limit`` bytes)."""
    path = folder()
    want = _material(material)
    entry = b"%s%d\n%s%s" % (MAGIC, len(want), want, payload)
    if path is None or len(entry) > limit:
        return False
    try:
        write_atomic(os.path.join(path, name), entry, mode=0o600)
    except (OSError, ValueError):
        return False
    return True


def prune(prefix: str, keep: int) -> None:
    """Remove the oldest entries named ``prefix``... beyond the newest ``keep`` (best effort)."""
    path = folder()
    if path is None:
        return
    try:
        names = [n for n in os.listdir(path) if n.startswith(prefix)]
        if len(names) <= keep:
            return
        by_age = sorted(names, key=lambda n: os.lstat(os.path.join(path, n)).st_mtime_ns)
        for n in by_age[:len(names) - keep]:
            os.unlink(os.path.join(path, n))
    except OSError:
        pass


def _material(material: str) -> bytes:
    """The material with what every entry also depends on: this hpclaunch and this Python."""
    return f"{__version__}\0{sys.implementation.cache_tag}\0{sys.version}\0{material}".encode("utf-8", "surrogatepass")


def _read(name: str, limit: int) -> bytes | None:
    """The entry's bytes: a regular file of this user's, at most ``limit`` bytes, read in one bounded
    read (never through a link, never blocking on a FIFO or device); else None."""
    path = folder()
    if path is None:
        return None
    try:
        fd = os.open(os.path.join(path, name), _OPEN_FLAGS)
    except OSError:
        return None  # missing, a link (O_NOFOLLOW), unreadable
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_size > limit:
            return None
        data = os.read(fd, limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= limit else None
