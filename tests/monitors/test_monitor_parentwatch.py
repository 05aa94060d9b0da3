"""ParentWatch: the daemon's --parent-pid check, through a pidfd and through /proc."""

import os
import select
import subprocess
import sys
import time

import pytest

from hpclaunch.monitors import schema
from hpclaunch.monitors.parentwatch import ParentWatch, proc_state
from monitor_helpers import read_events
from test_monitor_daemon import HOST, mon, start, wait_for_rows

HAS_PIDFD = hasattr(os, "pidfd_open")


def sleeper():
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def wait_zombie(pid, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        if proc_state(stat) == b"Z":
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} did not become a zombie")


@pytest.mark.parametrize("via", ["pidfd", "proc"])
def test_alive_zombie_then_reaped(via, monkeypatch):
    if via == "pidfd" and not HAS_PIDFD:
        pytest.fail("this Python/kernel has no os.pidfd_open: the pidfd path is not tested")
    if via == "proc":
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    child = sleeper()
    watch = ParentWatch(child.pid)
    try:
        assert (watch.pidfd is not None) == (via == "pidfd")
        assert (watch.fd is not None) == (via == "proc")
        assert watch.gone() is None
        child.kill()
        wait_zombie(child.pid)  # exited, not yet reaped by us
        assert watch.gone() == f"parent pid {child.pid} is a zombie"
        child.wait()
        assert watch.gone() == f"parent pid {child.pid} is gone"
    finally:
        watch.close()
        child.kill()
        child.wait()
    assert watch.pidfd is None and watch.fd is None


def test_registered_pidfd_is_told_by_the_poll_and_costs_no_syscall_a_check():
    if not HAS_PIDFD:
        pytest.fail("this Python/kernel has no os.pidfd_open: the pidfd path is not tested")
    child = sleeper()
    watch = ParentWatch(child.pid)
    poll = select.poll()
    try:
        assert watch.register(poll)
        assert poll.poll(0) == []
        child.kill()
        child.wait()
        # Registered, gone() reads the flag the daemon's poll sets: nothing else tells it.
        assert watch.gone() is None
        ready = poll.poll(5000)
        assert [fd for fd, _ in ready] == [watch.pidfd]
        watch.exited = True
        assert watch.gone() == f"parent pid {child.pid} is gone"
    finally:
        watch.close()


def test_a_pid_that_is_not_there_is_gone_at_once():
    child = sleeper()
    child.kill()
    child.wait()
    watch = ParentWatch(child.pid)  # reaped: no pidfd, no stat file to open (kill(0) says so)
    try:
        assert watch.pidfd is None and watch.fd is None
        assert watch.gone() == f"parent pid {child.pid} is gone"
    finally:
        watch.close()


def test_without_pidfd_the_reparenting_is_a_getppid_a_check(monkeypatch):
    monkeypatch.delattr(os, "pidfd_open", raising=False)
    watch = ParentWatch(None)
    assert watch.pidfd is None and watch.ppidfd is None and watch.fd is None
    assert not watch.register(select.poll()) and not watch.event_driven
    assert watch.gone() is None
    watch.ppid = -1  # as if our parent had changed
    assert watch.gone().startswith("reparented")


def test_no_parent_pid_watches_its_own_parent_through_a_pidfd():
    if not HAS_PIDFD:
        pytest.fail("this Python/kernel has no os.pidfd_open: the pidfd path is not tested")
    watch = ParentWatch(None)
    try:
        assert watch.pidfd is None and watch.ppidfd is not None
        poll = select.poll()
        assert watch.register(poll) and watch.event_driven
        assert poll.poll(0) == [] and watch.gone() is None
        assert not watch.ready(-1) and watch.ready(watch.ppidfd)  # what the daemon's poll does
        assert watch.gone() == f"reparented (parent {os.getppid()} exited)"
    finally:
        watch.close()
    assert watch.ppidfd is None


def test_a_parent_pid_that_is_the_parent_needs_one_pidfd():
    if not HAS_PIDFD:
        pytest.fail("this Python/kernel has no os.pidfd_open: the pidfd path is not tested")
    watch = ParentWatch(os.getppid())
    try:
        assert watch.pidfd is not None and watch.ppidfd is None
        assert watch.register(select.poll()) and watch.event_driven
    finally:
        watch.close()


# A grandchild watches with no --parent-pid; its parent, the middle process, is then killed.
_ORPHAN = r"""
import os, select, sys
from hpclaunch.monitors.parentwatch import ParentWatch
w = ParentWatch(None)
poll = select.poll()
w.register(poll)
print(os.getpid(), w.event_driven, flush=True)
ready = poll.poll(20000)
for fd, _ in ready:
    w.ready(fd)
print(w.gone(), flush=True)
"""


def test_the_poll_wakes_when_its_parent_exits_and_says_reparented(tmp_path):
    if not HAS_PIDFD:
        pytest.fail("this Python/kernel has no os.pidfd_open: the pidfd path is not tested")
    out = tmp_path / "out"
    middle = subprocess.Popen(["sh", "-c", f'"{sys.executable}" -c "$0" > "{out}" & wait', _ORPHAN])
    end = time.monotonic() + 20
    while time.monotonic() < end and not (out.exists() and out.read_text().count("\n") >= 1):
        time.sleep(0.02)
    pid, driven = out.read_text().split()[:2]
    assert driven == "True"
    t0 = time.monotonic()
    middle.kill()
    middle.wait()
    while time.monotonic() < end and out.read_text().count("\n") < 2:
        time.sleep(0.02)
    took = time.monotonic() - t0
    assert out.read_text().splitlines()[1] == f"reparented (parent {middle.pid} exited)"
    assert took < 5, f"told {took:.1f} s after its parent exited"


@pytest.mark.parametrize("interval,within", [(0.1, 3.0), (5.0, 2.5)])
def test_the_daemon_stops_when_its_parent_is_gone(tmp_path, interval, within):
    """At 0.1 s a check a sample would do too; at 5 s the daemon is waiting when its parent dies, and
    only the pidfd wakes it before its next sample. (Bounds with slack for a loaded CI box.)"""
    if interval > within and not HAS_PIDFD:
        pytest.fail("this Python/kernel has no os.pidfd_open: the pidfd path is not tested")
    parent = sleeper()
    try:
        p = start(tmp_path, "--parent-pid", str(parent.pid), "--no-nvml", interval=interval)
        wait_for_rows(mon(tmp_path, schema.host_file(HOST)), 1)
    finally:
        parent.kill()
        parent.wait()
    t0 = time.monotonic()
    _, err = p.communicate(timeout=20)
    took = time.monotonic() - t0
    assert p.returncode == 0, err
    assert took < within, f"stopped {took:.1f} s after its parent (interval {interval} s)"
    ev = read_events(mon(tmp_path, schema.events_file(HOST)))
    # Woken when the parent exited: before or after the test reaped it.
    assert ev[-1]["kind"] == "stopped" and ev[-1]["detail"]["reason"] in (
        f"parent pid {parent.pid} is gone", f"parent pid {parent.pid} is a zombie")


def test_the_daemon_stops_at_once_when_what_started_it_exits(tmp_path):
    """No --parent-pid, a 5 s interval: only the pidfd of its own parent wakes it before its next sample."""
    if not HAS_PIDFD:
        pytest.fail("this Python/kernel has no os.pidfd_open: the pidfd path is not tested")
    cmd = [sys.executable, "-m", "hpclaunch.monitors", "--interval", "5", "--no-nvml",
           "--run-dir", str(tmp_path), "--host", HOST]
    middle = subprocess.Popen(["sh", "-c", '"$@" & wait', "sh", *cmd], stderr=subprocess.PIPE)
    events = mon(tmp_path, schema.events_file(HOST))
    try:
        wait_for_rows(mon(tmp_path, schema.host_file(HOST)), 1)
    finally:
        middle.kill()
        middle.wait()
    t0 = time.monotonic()
    ev = []
    while time.monotonic() - t0 < 10 and not (ev and ev[-1]["kind"] == "stopped"):
        time.sleep(0.05)
        ev = read_events(events)
    took = time.monotonic() - t0
    assert ev[-1]["kind"] == "stopped", ev[-3:]
    assert ev[-1]["detail"]["reason"] == f"reparented (parent {middle.pid} exited)"
    assert took < 2.5, f"stopped {took:.1f} s after its parent (interval 5 s)"
