"""A per-user cache of what is costly to make and cheap to keep: the compiled templates and the
top-level help text (``$XDG_CACHE_HOME/hpclaunch``, else ``~/.cache/hpclaunch``).

Every entry carries everything it was made from (the caller's material: template texts, parser
source, terminal width...) and is used only when that equals today's in full, so a stale entry is
never read, only left behind. The cache is a speed-up and nothing else: a folder that cannot
be made, is not the user's own, or is writable by others is not used (what is read from it is run),
and a failed read or write means the caller makes the thing again.
"""
from __future__ import annotations

import marshal
import os
import sys
import zlib

from hpclaunch.common.atomic import write_atomic
from hpclaunch.common.privatedir import private_dir
from hpclaunch.common.version import __version__


def folder() -> str | None:
    """The cache folder, made 0700 if missing; None when it cannot be made or trusted (not ours, a
    link, or writable by others: what is read from it is run)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return private_dir(os.path.join(base, "hpclaunch"), open_bits=0o022)


def key(*parts: object, texts: list[str] | tuple[str, ...] = ()) -> str:
    """A short name for an entry made from ``parts`` and ``texts`` by this hpclaunch and this Python.
    Only a name: load() compares the whole material, so a clash of names costs a rebuild, never a
    stale entry."""
    crc = zlib.crc32(repr((__version__, sys.implementation.cache_tag, sys.version_info[:3], parts)).encode())
    size = 0
    for text in texts:
        raw = text.encode("utf-8", "surrogatepass")
        crc = zlib.crc32(raw, zlib.crc32(b"\0", crc))
        size += len(raw)
    return f"{crc:08x}{size:x}"


def load(name: str, material: tuple) -> object | None:
    """The data stored under ``name`` when it was made from exactly ``material`` (compared in full,
    text for text), else None."""
    raw = _read(name)
    if raw is None:
        return None
    try:
        stored, data = marshal.loads(raw)
    except (ValueError, EOFError, TypeError):
        return None  # a damaged or foreign entry: the caller makes the thing again
    return data if stored == (_ENVIRONMENT, material) else None


def store(name: str, material: tuple, data: object) -> bool:
    """Store ``data`` made from ``material`` (atomically: readers see the old entry or the whole new
    one); best effort: False when it was not stored."""
    path = folder()
    if path is None:
        return False
    try:
        write_atomic(os.path.join(path, name), marshal.dumps(((_ENVIRONMENT, material), data)), mode=0o600)
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
        by_age = sorted(names, key=lambda n: os.stat(os.path.join(path, n)).st_mtime_ns)
        for n in by_age[:len(names) - keep]:
            os.unlink(os.path.join(path, n))
    except OSError:
        pass


# What every entry also depends on: marshal's format and code objects change with Python.
_ENVIRONMENT = (__version__, sys.implementation.cache_tag, tuple(sys.version_info[:3]), marshal.version)


def _read(name: str) -> bytes | None:
    path = folder()
    if path is None:
        return None
    try:
        with open(os.path.join(path, name), "rb") as f:
            return f.read()
    except OSError:
        return None
