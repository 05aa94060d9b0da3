"""Requeue requests: the sentinel file and signals only *set a flag*; the trainer acts on it.

The batch shell traps Slurm's signal and creates ``$HPCLAUNCH_REQUEUE_FLAG``. SIGTERM,
SIGUSR1 and SIGUSR2 delivered to the rank itself set the same local flag. The handler does
nothing else (no checkpoint inside a handler: Lightning#21406). At agreed step boundaries the
trainer all-reduces the local flag so every rank stops at the same step, checkpoints, and
exits with ``$HPCLAUNCH_REQUEUE_EXIT`` (75).

A flag that was already served by an earlier attempt (same inode and mtime, recorded in
``.hpclaunch/requeue-served.json``) is ignored, so a rerun whose shell did not delete the
sentinel does not exit again at once.
"""
from __future__ import annotations

import json
import os
import signal
import time
from typing import Optional

DEFAULT_REQUEUE_EXIT = 75
STOP_SIGNALS = ("SIGTERM", "SIGUSR1", "SIGUSR2")


def _stat_key(path: str):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_ino, st.st_mtime_ns]


class StopRequest:
    def __init__(self, flag_path: Optional[str], control_dir: Optional[str] = None,
                 min_interval_s: float = 0.0):
        self.flag_path = flag_path or None
        self.control_dir = control_dir
        self.min_interval_s = min_interval_s
        self.signalled: Optional[int] = None
        self.reason: Optional[str] = None
        self._last_check = 0.0
        self._cached = False
        self._stale = self._load_served()
        self._old_handlers = {}

    # -- signals ------------------------------------------------------------------------------
    def install(self, names=STOP_SIGNALS) -> None:
        for name in names:
            sig = getattr(signal, name, None)
            if sig is None:
                continue
            try:
                self._old_handlers[sig] = signal.signal(sig, self._handler)
            except ValueError:  # not the main thread
                pass

    def uninstall(self) -> None:
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers.clear()

    def _handler(self, signum, frame) -> None:  # only sets a variable
        self.signalled = signum

    # -- the local view -----------------------------------------------------------------------
    def local(self) -> bool:
        """Cheap: a stat of the sentinel at most every ``min_interval_s``."""
        if self.signalled is not None:
            self.reason = f"signal {signal.Signals(self.signalled).name}"
            return True
        if not self.flag_path:
            return False
        now = time.monotonic()
        if self._cached or now - self._last_check >= self.min_interval_s:
            self._last_check = now
            key = _stat_key(self.flag_path)
            self._cached = key is not None and key != self._stale
            if self._cached:
                self.reason = f"requeue flag {self.flag_path}"
        return self._cached

    # -- bookkeeping across attempts ------------------------------------------------------------
    def _served_path(self) -> Optional[str]:
        return os.path.join(self.control_dir, "requeue-served.json") if self.control_dir else None

    def _load_served(self):
        p = self._served_path()
        if not p or not self.flag_path or not os.path.exists(p):
            return None
        try:
            with open(p) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            return None
        return rec.get("flag_stat") if rec.get("flag_path") == self.flag_path else None

    def mark_served(self, step: int) -> None:
        """Record which flag instance this exit answered (rank 0)."""
        p = self._served_path()
        if not p:
            return
        rec = {"flag_path": self.flag_path, "flag_stat": _stat_key(self.flag_path) if self.flag_path else None,
               "step": step, "reason": self.reason, "time_unix": time.time()}
        atomic_write_text(p, json.dumps(rec) + "\n")


def requeue_exit_code(env=None) -> int:
    env = os.environ if env is None else env
    try:
        return int(env.get("HPCLAUNCH_REQUEUE_EXIT", DEFAULT_REQUEUE_EXIT))
    except ValueError:
        return DEFAULT_REQUEUE_EXIT


def atomic_write_text(path: str, text: str) -> None:
    from hpclaunch.common.atomic import write_atomic
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    write_atomic(path, text, mode=0o644)


def write_requeue_marker(run_dir: str, info: dict, env=None) -> str:
    """``<run_dir>/.hpclaunch/requeue-exit.attempt<N>`` (rank 0, once the checkpoint is published):
    tells the batch shell "requeue me" even where torchrun or horovodrun turn the ranks' exit code
    into their own 1 (and horovodrun kills the ranks that had not exited yet)."""
    env = os.environ if env is None else env
    path = os.path.join(run_dir, ".hpclaunch", f"requeue-exit.attempt{env.get('HPCLAUNCH_ATTEMPT') or 0}")
    atomic_write_text(path, json.dumps(info, sort_keys=True) + "\n")
    return path


def write_finished(run_dir: str, info: dict) -> str:
    """``<run_dir>/.hpclaunch/finished``: tells the batch shell "done", not "needs requeue"."""
    path = os.path.join(run_dir, ".hpclaunch", "finished")
    atomic_write_text(path, json.dumps(info, sort_keys=True) + "\n")
    return path
