"""The monitor daemon's "is my parent still there" (``--parent-pid``, and reparenting)."""

from __future__ import annotations

import os
import select
from typing import Optional

from .logfiles import close_fds


def proc_state(stat: bytes) -> bytes:
    """The state letter of a ``/proc/<pid>/stat`` line (b"" if cut short): it follows the name in
    (...), which may hold anything, so it is found after the last ")"."""
    return stat[stat.rfind(b")") + 2:][:1]


class ParentWatch:
    """"Is my parent still there", at no cost a sample where the kernel can say it.

    ``--parent-pid`` on Linux >= 5.3: a pidfd (``os.pidfd_open``) becomes readable when that
    process exits (zombie or reaped) and stays bound to it even if the pid is reused. The daemon
    waits on it beside its signal pipe (``register``), so the check costs nothing per sample
    and the daemon stops as soon as the parent does, not at the next sample. A cold ``pread``
    of ``/proc/<pid>/stat`` every second was a sixth of a host-only daemon's CPU. Otherwise:
    ``/proc/<pid>/stat`` opened once and re-read with one ``pread`` a check (the open file stays
    bound to that process: once it is reaped the read fails, ESRCH; a zombie reads state ``Z``);
    without ``/proc``, psutil (``is_running`` also catches a reused pid), else ``kill(pid, 0)``.

    Reparenting (what started the daemon is gone) is watched the same way: a pidfd of its own
    parent, registered beside the other (the kernel reparents the children before it wakes the
    pidfd), else a ``getppid()`` a check: a syscall each sample, cold at 1 Hz, for an answer the
    kernel can push.
    """

    def __init__(self, pid: Optional[int], proc_root: str = "/proc"):
        self.pid = pid
        self.ppid = os.getppid()
        self.proc_root = proc_root
        self.fd = self.pidfd = self.ppidfd = None
        self.proc = None
        self.exited = False  # the pidfd was readable
        self.reparented = False  # the parent's pidfd was readable
        self.registered = False  # the daemon's poll watches the pidfds and calls ``ready``
        self.event_driven = False  # registered, and nothing is left to check by a syscall
        if pid != self.ppid:  # the same process needs one pidfd, and its message is --parent-pid's
            self._watch_own_parent()
        if pid is None:
            return
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is not None:
            try:
                self.pidfd = pidfd_open(pid)
            except OSError:  # ESRCH: not there (said below); ENOSYS, EPERM: the older ways
                self.pidfd = None
            if self.pidfd is not None:
                self.exited = bool(select.select([self.pidfd], [], [], 0)[0])
                return
        try:
            self.fd = os.open(os.path.join(proc_root, str(pid), "stat"), os.O_RDONLY)
        except OSError:
            self.fd = None
        # With /proc there and no such pid, kill(pid, 0) below says it is gone.
        if self.fd is None and not os.path.isdir(os.path.join(proc_root, "self")):
            try:
                import psutil  # noqa: WPS433
                self.proc = psutil.Process(pid)
            except Exception:
                self.proc = None

    def _watch_own_parent(self) -> None:
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is None or self.ppid <= 0:  # 0: started from outside this pid namespace
            return
        try:
            self.ppidfd = pidfd_open(self.ppid)
        except OSError:  # ESRCH (it just exited), ENOSYS, EPERM: getppid() a check
            return
        # Between getppid() and pidfd_open the parent may have exited and its pid been reused.
        if os.getppid() != self.ppid or select.select([self.ppidfd], [], [], 0)[0]:
            self.reparented = True

    def register(self, poll) -> bool:
        """Watch the pidfds in ``poll``; the caller hands each readable fd to :meth:`ready`."""
        if poll is not None:
            for fd in (self.pidfd, self.ppidfd):
                if fd is not None:
                    poll.register(fd, select.POLLIN)
                    self.registered = True
        # Both questions answered by the poll: --parent-pid's (or none asked) and the reparenting's.
        self.event_driven = self.registered and (self.pid is None or self.pidfd is not None) and (
            self.ppidfd is not None or (self.pid == self.ppid and self.pidfd is not None))
        return self.registered

    def ready(self, fd: int) -> bool:
        """The daemon's poll found ``fd`` readable: True (and noted) if it is one of these pidfds."""
        if fd == self.pidfd:
            self.exited = True
        elif fd == self.ppidfd:
            self.reparented = True
        else:
            return False
        return True

    def _exit_reason(self) -> str:
        try:  # zombie or reaped? one read, only now that it is over
            with open(os.path.join(self.proc_root, str(self.pid), "stat"), "rb") as f:
                stat = f.read(512)
            if proc_state(stat) == b"Z":
                return f"parent pid {self.pid} is a zombie"
        except OSError:
            pass
        return f"parent pid {self.pid} is gone"

    def gone(self) -> Optional[str]:
        if self.event_driven and not (self.exited or self.reparented):
            return None  # the daemon's poll watches both: nothing to ask the kernel
        if self.pidfd is not None:
            if not self.exited and not self.registered:
                self.exited = bool(select.select([self.pidfd], [], [], 0)[0])
            if self.exited:
                return self._exit_reason()
        elif self.pid is not None:
            if self.fd is not None:
                try:
                    stat = os.pread(self.fd, 512, 0)
                except OSError:  # ESRCH: exited and reaped
                    return f"parent pid {self.pid} is gone"
                state = proc_state(stat)
                if state in (b"Z", b"X", b""):
                    return f"parent pid {self.pid} is {'a zombie' if state == b'Z' else 'gone'}"
            elif self.proc is not None:
                try:
                    if not self.proc.is_running():  # also catches a recycled pid
                        return f"parent pid {self.pid} is gone"
                    if self.proc.status() == "zombie":
                        return f"parent pid {self.pid} is a zombie"
                except Exception:
                    return f"parent pid {self.pid} is gone"
            else:
                try:
                    os.kill(self.pid, 0)
                except ProcessLookupError:
                    return f"parent pid {self.pid} is gone"
                except PermissionError:
                    pass
        if self.ppidfd is not None:
            if not self.reparented and not self.registered:
                self.reparented = bool(select.select([self.ppidfd], [], [], 0)[0])
            if self.reparented:
                return f"reparented (parent {self.ppid} exited)"
        elif self.reparented or os.getppid() != self.ppid:
            return f"reparented (parent {self.ppid} exited)"
        return None

    def close(self) -> None:
        self.fd = self.pidfd = self.ppidfd = close_fds(self.fd, self.pidfd, self.ppidfd)
