"""The GPUs the local backend hands out, one job at a time, as Slurm's gres would.

The machine's GPUs, the first that says: ``$HPCLAUNCH_LOCAL_GPUS`` (a comma list of NVML indices
or UUIDs: the ones hpclaunch may use here), the submitter's ``CUDA_VISIBLE_DEVICES``, the driver's
(one folder a GPU under /proc/driver/nvidia/gpus: indices 0..n-1), NVML's device count. None of
them (a Jetson's integrated GPU, no driver): unknown, and jobs get no GPU variables, as before
leases existed.

A job that asks for N GPUs per node holds N of them, the lowest free first, from its first
attempt to its end: an exclusive flock on one file a GPU, in a folder private to the user, so a
lease ends with its runner however it ends (the kernel drops the lock). Jobs of another user on
the same machine do not see these leases.
"""
from __future__ import annotations

import fcntl
import os
import re
import tempfile
from typing import Callable, List, Mapping, Optional

from hpclaunch.common.atomic import make_private_dirs
from hpclaunch.common.errors import HpclaunchError

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
    """The user's lease folder on this machine (node-local /tmp: flock on a shared home is not)."""
    return os.path.join(tempfile.gettempdir(), f"hpclaunch-{os.getuid()}", "gpu-leases")


def private_lease_dir(folder: Optional[str] = None) -> str:
    """The lease folder, made if missing; refused if another user owns it or others may write in
    it (who could hold our GPUs' locks, or plant links where our lock files go)."""
    folder = folder or lease_dir()
    make_private_dirs(folder)
    for path in (os.path.dirname(folder), folder):
        st = os.lstat(path)
        if st.st_uid != os.getuid() or st.st_mode & 0o022 or not os.path.isdir(path) or os.path.islink(path):
            raise HpclaunchError(f"{path}: the GPU lease folder is not yours alone (owner uid {st.st_uid}, "
                                 f"mode {st.st_mode & 0o777:o}) \u2014 remove it, or set TMPDIR to a folder of yours")
    return folder


class Lease:
    """GPUs held by this process (open, locked files) until release() or its exit."""

    def __init__(self, ids: List[str], fds: List[int]):
        self.ids, self._fds = ids, fds

    def env(self) -> dict:
        """What Slurm sets for a job's GPUs without device cgroups: the node's own ids."""
        ids = ",".join(self.ids)
        return {"CUDA_VISIBLE_DEVICES": ids, "SLURM_JOB_GPUS": ids, "SLURM_STEP_GPUS": ids,
                "GPU_DEVICE_ORDINAL": ids}

    def release(self) -> None:
        for fd in self._fds:
            os.close(fd)  # closing drops the flock
        self._fds = []


def try_lease(ids: List[str], count: int, folder: Optional[str] = None) -> Optional[Lease]:
    """`count` of `ids`, the lowest free first, or None (and nothing held) if fewer are free."""
    folder = private_lease_dir(folder)
    got, fds = [], []
    for gpu in ids:
        if len(got) == count:
            break
        fd = os.open(os.path.join(folder, f"gpu-{gpu}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                     0o600)
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
