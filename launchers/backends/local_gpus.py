"""The GPUs the local backend hands out, one job at a time, as Slurm's gres would.

The machine's GPUs, the first that says: ``$HPCLAUNCH_LOCAL_GPUS`` (a comma list of NVML indices
or UUIDs: the ones hpclaunch may use here), the submitter's ``CUDA_VISIBLE_DEVICES``, the driver's
(one folder a GPU under /proc/driver/nvidia/gpus: indices 0..n-1), NVML's device count. None of
them (a Jetson's integrated GPU, no driver): unknown, and jobs get no GPU variables, as before
leases existed.

A job that asks for N GPUs per node holds N of them, the lowest free first, from its first
attempt to its end: an exclusive flock on one file a GPU, so a lease ends with its runner however
it ends (the kernel drops the lock). The folder is the user's own, or ``$HPCLAUNCH_GPU_LEASE_DIR``,
one an admin made for every user of a shared workstation (then their jobs take turns too).
"""
from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import tempfile
from typing import Callable, List, Mapping, Optional, Tuple

from hpclaunch.common.atomic import make_private_dirs
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.launchers.backends import slurm_emulation

_ID = re.compile(r"^(?:\d{1,3}|(?:GPU|MIG)-[0-9A-Za-z-]{1,80})$")
_DRIVER = "/proc/driver/nvidia/gpus"


def machine_gpus(env: Mapping[str, str], driver_dir: str = _DRIVER,
                 nvml_count: Optional[Callable[[], int]] = None) -> Optional[List[str]]:
    """The GPU ids a local job may be given, or None where this machine does not say (``nvml_count``:
    the device count where the driver's folder says nothing; NVML's by default)."""
    value = env.get("HPCLAUNCH_LOCAL_GPUS", "").strip()
    if value:
        ids = [t.strip() for t in value.split(",") if t.strip()]
        bad = [t for t in ids if not _ID.match(t)]
        if bad or len(set(ids)) != len(ids):
            raise HpclaunchError(f"HPCLAUNCH_LOCAL_GPUS={value!r}: not a list of distinct GPU indices or UUIDs "
                                 f"({', '.join(bad) or 'a repeated one'}) \u2014 e.g. HPCLAUNCH_LOCAL_GPUS=0,1")
        return ids
    value = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if value:
        ids: List[str] = []
        for t in (t.strip() for t in value.split(",")):
            if not _ID.match(t) or t in ids:  # CUDA's rule: the list ends at the first entry it cannot use
                break                        # ("-1" and Slurm's "NoDevFiles" hide every GPU)
            ids.append(t)
        return ids
    try:
        count = len([d for d in os.listdir(driver_dir) if not d.startswith(".")])
    except OSError:
        count = 0
    count = count or (nvml_count or nvml_device_count)()
    return [str(i) for i in range(count)] if count else None


def nvml_device_count() -> int:
    """NVML's device count where the driver's /proc folder is missing (gVisor, some containers);
    0 without nvidia-ml-py or a driver."""
    try:
        import pynvml  # nvidia-ml-py (the monitor's extra); lazy: it loads the driver's library
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 (no driver, no library: NVMLError or OSError)
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:  # noqa: BLE001
        return 0
    finally:
        pynvml.nvmlShutdown()


def lease_dir() -> str:
    """The user's own lease folder on this machine (node-local /tmp: flock on a shared home is not)."""
    return os.path.join(tempfile.gettempdir(), f"hpclaunch-{os.getuid()}", "gpu-leases")


def shared_setting(env: Optional[Mapping[str, str]] = None, profile_dir: Optional[str] = None,
                   profile: str = "") -> Tuple[str, str]:
    """(one folder every user of the machine shares, made by an admin; what set it, for messages):
    ``$HPCLAUNCH_GPU_LEASE_DIR``, else the profile's ``local.gpu_lease_dir``; ("", "") where neither
    is set: each user's own."""
    folder = (env if env is not None else os.environ).get("HPCLAUNCH_GPU_LEASE_DIR", "").strip()
    if folder:
        return folder, f"HPCLAUNCH_GPU_LEASE_DIR={folder!r}"
    if profile_dir:
        return profile_dir, f"profile {profile!r}: local.gpu_lease_dir: {profile_dir!r}"
    return "", ""


def checked_lease_dir(env: Optional[Mapping[str, str]] = None, profile_dir: Optional[str] = None,
                      profile: str = "") -> str:
    """The lease folder jobs submitted with ``env`` (and a profile's setting) use, checked: the
    shared one where set, else the user's own (made if missing)."""
    shared, what = shared_setting(env, profile_dir, profile)
    return shared_lease_dir(shared, what) if shared else private_lease_dir()


def shared_lease_dir(folder: str, what: str = "") -> str:
    """A lease folder the machine's users share. It must already be there (``install -d -m 1777
    DIR``, or ``-m 3770 -g GROUP`` for one group), owned by root or by this user, and sticky if others
    may write in it: else someone could replace the lock files the other users hold. ``what``: the
    setting that named it, as messages say it."""
    what = what or f"HPCLAUNCH_GPU_LEASE_DIR={folder!r}"
    if not os.path.isabs(folder):
        raise HpclaunchError(f"{what}: not an absolute path — e.g. HPCLAUNCH_GPU_LEASE_DIR=/var/lib/hpclaunch/gpu-leases")
    try:
        st = os.lstat(folder)
    except OSError as e:
        raise HpclaunchError(f"{what}: {e.strerror} — an admin makes it once for every user: "
                             f"install -d -m 1777 {folder}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise HpclaunchError(f"{what}: not a folder (a link or a file) — point it at a real folder")
    if st.st_uid not in (0, os.getuid()):
        raise HpclaunchError(f"{what}: owned by uid {st.st_uid}, who could replace the lock files — "
                             "the folder must belong to root (or to you)")
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise HpclaunchError(f"{what}: others may write in it (mode {st.st_mode & 0o7777:o}) without the sticky "
                             f"bit, so they could replace the lock files — chmod +t {folder}")
    return folder


def private_lease_dir(folder: Optional[str] = None) -> str:
    """The user's own lease folder, made if missing; refused if another user owns it or others may
    write in it (who could hold our GPUs' locks, or plant links where our lock files go)."""
    folder = folder or lease_dir()
    make_private_dirs(folder)
    for path in (os.path.dirname(folder), folder):
        st = os.lstat(path)
        if st.st_uid != os.getuid() or st.st_mode & 0o022 or not os.path.isdir(path) or os.path.islink(path):
            raise HpclaunchError(f"{path}: the GPU lease folder is not yours alone (owner uid {st.st_uid}, "
                                 f"mode {st.st_mode & 0o777:o}) — remove it, or set TMPDIR to a folder of yours")
    return folder


def _open_lock(path: str) -> Tuple[Optional[int], Optional[str]]:
    """(fd, None): a GPU's lock file, opened read-only (flock needs no more, and other users of a
    shared folder can open a file made 0644); (None, why): one no lease can take, said with its kind
    and owner (another user made it unreadable; a planted link, FIFO or socket: O_NONBLOCK keeps the
    open from waiting on a FIFO). Such a file counts as held, and no job's end will free it."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            try:  # O_EXCL: made here, so its mode is ours to set (0644 whatever the umask)
                fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
                os.fchmod(fd, 0o644)
            except FileExistsError:
                fd = os.open(path, flags)
    except PermissionError:
        return None, _unusable(path, "unreadable")
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENXIO):  # a planted link, or a socket
            return None, _unusable(path, "a link" if e.errno == errno.ELOOP else "not a regular file")
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None, f"{path} (not a regular file, owner uid {st.st_uid})"
    return fd, None


def _unusable(path: str, kind: str) -> str:
    try:
        st = os.lstat(path)
    except OSError:  # gone meanwhile: the next try sees what is there then
        return f"{path} ({kind})"
    if kind == "unreadable":
        kind = f"unreadable, mode {st.st_mode & 0o777:o}"
    return f"{path} ({kind}, owner uid {st.st_uid})"


class Lease:
    """GPUs held by this process (open, locked files) until release() or its exit."""

    def __init__(self, ids: List[str], fds: List[int]):
        self.ids, self._fds = ids, fds

    def env(self) -> dict:
        """The leased GPUs as Slurm would give them (slurm_emulation.gpu_env)."""
        return slurm_emulation.gpu_env(self.ids)

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)  # closing drops the flock
        self._fds = []


def try_lease(ids: List[str], count: int, folder: Optional[str] = None, shared: bool = False,
              stuck: Optional[List[str]] = None, what: str = "") -> Optional[Lease]:
    """`count` of `ids`, the lowest free first, or None (and nothing held) if fewer are free.
    ``folder``: the user's own lease folder by default; ``shared``: it is the machine's shared one,
    named by the setting ``what`` (for messages). ``stuck``: gets each lock file this try found no
    lease can take (all of them, when it fails)."""
    folder = shared_lease_dir(folder, what) if shared and folder else private_lease_dir(folder)
    got, fds = [], []
    for gpu in ids:
        if len(got) == count:
            break
        fd, why = _open_lock(os.path.join(folder, f"gpu-{gpu}.lock"))
        if fd is None:  # unusable here: as good as held
            if stuck is not None:
                stuck.append(why)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        got.append(gpu)
        fds.append(fd)
    lease = Lease(got, fds)
    if len(got) < count:
        lease.release()
        return None
    return lease
