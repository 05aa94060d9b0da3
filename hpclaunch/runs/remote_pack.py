"""The project a remote submission copies: which files, their content address, and the tar stream.

What is shipped is what users expect from git: the tracked files plus the untracked ones git does
not ignore (`git ls-files -co --exclude-standard`), from the repository's top folder; outside a
repository, the whole folder. Never `.git` itself, and never the local folder run directories go
in (the job's runs_root, default `runs/`): those are outputs, and they would change the address on
every run. The address is a hash of each file's path, kind (file, executable, link) and content,
so an unchanged project maps to the code directory already on the cluster and is not copied again.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
import stat
import subprocess
import tarfile
from typing import BinaryIO, List, NamedTuple

from hpclaunch.common.errors import HpclaunchError

MAX_FILES = 100_000
_CHUNK = 1 << 20


class Entry(NamedTuple):
    path: str          # relative to the package root, '/'-separated
    kind: str          # "f" file, "x" executable file, "l" symbolic link
    size: int
    digest: str        # sha256 of the content (of the link target for a link)


class Package(NamedTuple):
    root: str          # the local folder shipped
    entries: List[Entry]
    digest: str        # the content address of the whole
    size: int          # bytes of file content
    git: bool          # listed by git (else: every file of the folder)

    @property
    def slug(self) -> str:
        """The code directory's name on the cluster: the folder's name and the address."""
        base = re.sub(r"[^A-Za-z0-9._-]+", "-", os.path.basename(self.root.rstrip("/")))[:40].strip(".-") or "project"
        return f"{base}-{self.digest[:24]}"


def project_root(cwd: str) -> tuple[str, bool]:
    """(the folder to ship, whether git lists its files): the repository's top folder, else `cwd`."""
    if shutil.which("git") is None:
        probe = cwd
        while True:
            if os.path.exists(os.path.join(probe, ".git")):
                raise HpclaunchError(f"{probe}: is a git repository, but git is not installed here \u2014 install "
                                     "git: it tells which files to copy (tracked and not ignored)")
            if os.path.dirname(probe) == probe:
                return cwd, False
            probe = os.path.dirname(probe)
    res = subprocess.run(["git", "-C", cwd, "rev-parse", "--show-toplevel"], capture_output=True)
    if res.returncode != 0:
        return cwd, False
    return os.fsdecode(res.stdout.rstrip(b"\n")), True


def _listed(root: str, git: bool) -> List[str]:
    if git:
        res = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True)
        if res.returncode != 0:
            raise HpclaunchError(f"{root}: git ls-files failed ({os.fsdecode(res.stderr).strip()[:200]}) \u2014 "
                                 "fix the repository, or submit from a folder outside it")
        return sorted({os.fsdecode(p) for p in res.stdout.split(b"\0") if p})
    out = []
    for dirpath, dirnames, files in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != ".git" and not os.path.islink(os.path.join(dirpath, d)))
        rel = os.path.relpath(dirpath, root)
        out += [name if rel == "." else f"{rel}/{name}" for name in files]
        out += [d if rel == "." else f"{rel}/{d}" for d in os.listdir(dirpath)
                if d != ".git" and os.path.islink(os.path.join(dirpath, d))]
        if len(out) > MAX_FILES:
            break
    return sorted(set(out))


def _folder_beneath(root: str, rel: str) -> int:
    """A descriptor of the folder that holds `rel` under `root`, reached one component at a time
    without following a link (O_NOFOLLOW): a folder on the path that became a link raises OSError
    instead of leading elsewhere."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in rel.split("/")[:-1]:
            if part in ("", ".", ".."):
                raise OSError(f"{rel}: not a plain relative path")
            step = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_beneath(root: str, rel: str) -> BinaryIO:
    """The regular file `rel` under `root`, never through a link, opened non-blocking (a FIFO put in
    its place never waits for a writer); anything but a regular file raises OSError."""
    folder = _folder_beneath(root, rel)
    try:
        fd = os.open(rel.rsplit("/", 1)[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                     dir_fd=folder)
    finally:
        os.close(folder)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{rel}: not a regular file")
    return os.fdopen(fd, "rb")


def readlink_beneath(root: str, rel: str) -> str:
    """The target of the link `rel` under `root`, its folders reached without following a link."""
    folder = _folder_beneath(root, rel)
    try:
        return os.readlink(rel.rsplit("/", 1)[-1], dir_fd=folder)
    finally:
        os.close(folder)


def _file_digest(root: str, rel: str) -> str:
    h = hashlib.sha256()
    with open_beneath(root, rel) as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _target(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _linked_folder(root: str, rel: str, checked: dict) -> str | None:
    """The first folder on `rel`'s path that is a symbolic link (git's index can list files under a
    folder since replaced by a link), or None. `checked` keeps the answers per folder."""
    parts = rel.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        folder = "/".join(parts[:i])
        if folder not in checked:
            try:
                checked[folder] = os.path.islink(os.path.join(root, folder))
            except OSError:
                checked[folder] = False
        if checked[folder]:
            return folder
    return None


def collect(root: str, git: bool, excluded: List[str], max_bytes: int, limit_source: str) -> Package:
    """The package of `root`: its files (less the `excluded` folders, relative to root), hashed.
    Too many files or bytes is the user's one line, naming the biggest parts and the setting."""
    prefixes = tuple(e.rstrip("/") + "/" for e in excluded if e and not e.startswith(".."))
    entries: List[Entry] = []
    total = 0
    names = [p for p in _listed(root, git) if p != ".git" and not p.startswith(".git/") and not p.startswith(prefixes)]
    if len(names) > MAX_FILES:
        raise HpclaunchError(f"{root}: more than {MAX_FILES} files to copy \u2014 list what is not code in "
                             ".gitignore (data, outputs, environments), or submit from a smaller folder")
    linked: dict = {}
    for rel in names:
        path = os.path.join(root, rel)
        folder = _linked_folder(root, rel, linked)
        if folder is not None:
            raise HpclaunchError(f"{path}: git lists it, but {folder} on its path is a symbolic link (to "
                                 f"{_target(os.path.join(root, folder))}): hpclaunch copies no file through a "
                                 f"link \u2014 if the link is meant, `git rm -r --cached {folder}` (then `git add "
                                 f"{folder}` to keep the link itself); else put the folder back")
        try:
            st = os.lstat(path)
        except OSError:
            continue  # tracked but deleted in the working tree: not part of what runs
        if stat.S_ISLNK(st.st_mode):
            try:
                target = readlink_beneath(root, rel)
            except OSError:
                raise _changed(path) from None
            entries.append(Entry(rel, "l", 0, hashlib.sha256(os.fsencode(target)).hexdigest()))
        elif stat.S_ISREG(st.st_mode):
            total += st.st_size
            if total > max_bytes:
                raise _too_big(root, names, max_bytes, limit_source)
            try:
                digest = _file_digest(root, rel)
            except OSError:
                raise _changed(path) from None
            entries.append(Entry(rel, "x" if st.st_mode & 0o100 else "f", st.st_size, digest))
        # a folder (a git submodule) or a socket or FIFO: not shipped
    h = hashlib.sha256()
    for e in entries:
        h.update(b"%s\0%s\0%s\n" % (e.kind.encode(), os.fsencode(e.path), e.digest.encode()))
    return Package(root, entries, h.hexdigest(), total, git)


def _too_big(root: str, names: List[str], max_bytes: int, limit_source: str) -> HpclaunchError:
    by_top: dict[str, int] = {}
    total = 0
    linked: dict = {}
    for rel in names:
        if _linked_folder(root, rel, linked) is not None:
            continue
        try:
            st = os.lstat(os.path.join(root, rel))
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            top = rel.split("/", 1)[0] + ("/" if "/" in rel else "")
            by_top[top] = by_top.get(top, 0) + st.st_size
            total += st.st_size
    biggest = ", ".join(f"{name} {human(size)}" for name, size in sorted(by_top.items(), key=lambda kv: -kv[1])[:3])
    return HpclaunchError(f"{root}: the project is {human(total)}, more than remote.max_upload ({human(max_bytes)}, "
                          f"{limit_source}); biggest: {biggest} \u2014 list data and outputs in .gitignore (keep data "
                          "on the cluster), or raise remote.max_upload")


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class _Counting:
    """A write-only file that counts what passes (the bytes that cross the connection)."""

    def __init__(self, out: BinaryIO):
        self.out, self.count = out, 0

    def write(self, data: bytes) -> int:
        self.out.write(data)
        self.count += len(data)
        return len(data)

    def flush(self) -> None:
        self.out.flush()


class _Hashing:
    """A file read through for tarfile, hashing what it reads."""

    def __init__(self, f: BinaryIO):
        self.f, self.h = f, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.h.update(data)
        return data


def write_tar(pkg: Package, out: BinaryIO) -> int:
    """The package as a gzipped tar stream to `out`; returns the bytes written. A file that changed
    since it was hashed stops the copy (the address would name other content)."""
    counted = _Counting(out)
    # gzip level 6 (gzip's own default): tarfile's "w|gz" is level 9, several times slower for the
    # last few per cent; the copy is often limited by this machine's one core, not the network.
    gz = gzip.GzipFile(fileobj=counted, mode="wb", compresslevel=6, mtime=0)
    with gz, tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for e in pkg.entries:
            path = os.path.join(pkg.root, e.path)
            info = tarfile.TarInfo(e.path)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if e.kind == "l":
                try:
                    info.type, info.linkname = tarfile.SYMTYPE, readlink_beneath(pkg.root, e.path)
                except OSError:
                    raise _changed(path) from None
                if hashlib.sha256(os.fsencode(info.linkname)).hexdigest() != e.digest:
                    raise _changed(path)
                tar.addfile(info)
                continue
            info.mode = 0o755 if e.kind == "x" else 0o644
            info.size = e.size
            try:
                with open_beneath(pkg.root, e.path) as f:
                    info.mtime = int(os.fstat(f.fileno()).st_mtime)
                    reader = _Hashing(f)
                    tar.addfile(info, reader)
            except OSError:
                raise _changed(path) from None
            if reader.h.hexdigest() != e.digest:
                raise _changed(path)
    return counted.count


def _changed(path: str) -> HpclaunchError:
    return HpclaunchError(f"{path}: changed while it was being copied \u2014 submit again once it is written")
