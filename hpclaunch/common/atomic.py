"""Atomic file writes: temp file in the same directory, fsync, rename, fsync the directory.

The temporary file is made with O_EXCL under a random name, so a link or file another user planted
in a folder others can write (a shared textfile-collector folder, /tmp) is never opened, written or
chmod-ed: the monitor's Prometheus textfile comes through here too (docs/architecture.md lets the
monitors leaf use this module and nothing else of the core)."""
from __future__ import annotations

import os


def _temp_beside(path: str, folder: str) -> tuple[int, str]:
    """A new file beside ``path`` that nobody else can have opened (O_EXCL), as tempfile.mkstemp
    makes it; without tempfile, whose imports (random, hashlib, shutil) every command would pay."""
    for _ in range(100):
        tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"{folder}: no free temporary name beside {os.path.basename(path)}")


def write_atomic(path: str, data: str | bytes, mode: int = 0o600, durable: bool = True) -> None:
    """Readers see the old file or the whole new one, never a part, even after a crash.
    ``durable=False``: no fsync (a file rewritten every second and removed at exit, whose loss in a
    crash costs nothing: the monitor's textfile); still atomic, still never through a link."""
    folder = os.path.dirname(os.path.abspath(path))
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = _temp_beside(path, folder)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(folder)


def fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories; the rename is still atomic
    finally:
        os.close(fd)


def file_in_the_way(path: str) -> str | None:
    """The nearest existing ancestor of `path` (or `path` itself) when it is not a folder: the usual
    reason a folder cannot be created there, and what an error message should name."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    return probe if os.path.exists(probe) and not os.path.isdir(probe) else None


def make_private_dirs(path: str) -> None:
    """os.makedirs, but each folder it creates is 0700 (makedirs' mode covers the last one only).
    Folders that exist are left as their owner made them."""
    missing = []
    while path and not os.path.isdir(path):
        missing.append(path)
        path = os.path.dirname(path)
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:  # another submitter made it first
            pass
