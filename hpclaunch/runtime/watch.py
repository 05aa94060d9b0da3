"""The node watch: ``python -m hpclaunch.runtime.watch --run-dir DIR --node NAME``, one per node of
the allocation, beside the monitor (the job runtime starts it: hl_watch_start in recovery.sh).

Every ``--interval`` seconds it writes ``DIR/.hpclaunch/watch/<NAME>.json`` (atomically): its
heartbeat (a sequence number: the supervisor times heartbeats on its own clock, so the nodes' clocks
never matter) and, for each rank of the current attempt that runs on this host
(``logs/attempt<N>/ranks.tsv``), whether its process lives, its state (R, S, T...), how long it has
made no progress, whether it has written a step record this attempt, and the p99 interval between
its step records (progress.py says what counts). It also answers the supervisor's request for stacks
(``.hpclaunch/dump-request``): every local rank's, through stacks.py, into the folder the request
names, in a thread, so that the heartbeat goes on meanwhile.

It is a separate process that reads /proc and a few files: it never touches a rank. It ends on
SIGTERM, or when ``--parent-pid`` is gone (the local backend's batch shell).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections import deque
from typing import Dict, Optional

from hpclaunch.common.atomic import write_atomic
from hpclaunch.runtime import progress, stacks

READ_MAX = 4 << 20   # bytes of a metrics file read per look


def _clock_ticks() -> int:
    try:
        return os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        return 100


TICKS = _clock_ticks()


def proc_stat(pid: int):
    """(state, start ticks, CPU seconds of the process and its waited-for children), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text.rsplit(")", 1)[-1].split()
    try:
        cpu = (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / TICKS
        return fields[0], int(fields[19]), cpu
    except (IndexError, ValueError):
        return None


def children(pid: int):
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return out


def tree_cpu(pid: int, limit: int = 256) -> float:
    """CPU seconds of a process and its living descendants (a data loader's workers are the rank's)."""
    total, todo, seen = 0.0, [pid], 0
    while todo and seen < limit:
        p = todo.pop()
        seen += 1
        st = proc_stat(p)
        if st is None:
            continue
        total += st[2]
        todo.extend(children(p))
    return total


class Rank:
    """What the watch knows of one local rank."""

    def __init__(self, rank: str, pid: int, now: float):
        self.rank, self.pid = rank, pid
        st = proc_stat(pid)
        self.start = st[1] if st else None
        self.cpu = tree_cpu(pid) if st else 0.0
        self.cpu_at = now
        self.last_progress = now
        self.log_size = -1
        self.stepped = False

    def state(self) -> Optional[str]:
        st = proc_stat(self.pid)
        if st is None or (self.start is not None and st[1] != self.start):
            return None   # gone, or its pid taken by another process
        return st[0]


class Metrics:
    """A rank's metrics file, read as it grows: its step intervals (for the p99) and whether a step
    record came after a given time."""

    def __init__(self, path: str):
        self.path = path
        self.offset: Optional[int] = None
        self.intervals: deque = deque(maxlen=progress.KEEP_INTERVALS)
        self.last_step_time = 0.0

    def read(self) -> bool:
        """True when the file grew."""
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return False
        if self.offset is None:
            self.offset = max(0, size - progress.HISTORY_BYTES)
            skip_partial = self.offset > 0
        else:
            skip_partial = False
            if size < self.offset:  # replaced
                self.offset = 0
        if size == self.offset:
            return False
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(min(READ_MAX, size - self.offset))
        end = data.rfind(b"\n")
        if end < 0:
            return size > self.offset   # a record being written is progress too
        lines = data[:end + 1].splitlines(keepends=True)
        if skip_partial and lines:
            lines = lines[1:]
        self.offset += end + 1
        for t, interval in progress.step_intervals(lines):
            self.intervals.append(interval)
            self.last_step_time = max(self.last_step_time, t)
        return True


class Watch:
    def __init__(self, run_dir: str, node: str, interval: float, idle_cpu: float):
        self.run_dir, self.node, self.interval, self.idle_cpu = run_dir, node, interval, idle_cpu
        self.host = os.uname().nodename
        self.ctl = os.path.join(run_dir, ".hpclaunch")
        self.out = os.path.join(self.ctl, "watch", f"{node}.json")
        self.seq = 0
        self.attempt: Optional[str] = None
        self.launched = 0.0
        self.ranks: Dict[str, Rank] = {}
        self.metrics: Dict[str, Metrics] = {}
        self.ranks_key = None
        self.dumped = 0
        self.dumping: Optional[threading.Thread] = None
        self.said = False

    def _attempt(self) -> None:
        """The attempt the job runtime launched last (.hpclaunch/attempt: "N launch-time")."""
        try:
            with open(os.path.join(self.ctl, "attempt")) as f:
                words = f.read(200).split()
        except OSError:
            return
        if words and words[0].isdigit() and words[0] != self.attempt:
            self.attempt, self.ranks, self.ranks_key = words[0], {}, None
            try:
                self.launched = float(words[1])
            except (IndexError, ValueError):
                self.launched = time.time()

    def _read_ranks(self, now: float) -> None:
        path = os.path.join(self.run_dir, "logs", f"attempt{self.attempt}", "ranks.tsv")
        try:
            st = os.stat(path)
        except OSError:
            return
        key = (st.st_size, st.st_mtime_ns)
        if key == self.ranks_key:
            return
        self.ranks_key = key
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f.read(1 << 20).splitlines():
                cols = line.split("\t")
                if len(cols) >= 3 and cols[0].isdigit() and cols[2].isdigit() and cols[1] == self.host:
                    old = self.ranks.get(cols[0])
                    if old is None or old.pid != int(cols[2]):
                        self.ranks[cols[0]] = Rank(cols[0], int(cols[2]), now)

    def look(self) -> dict:
        now = time.monotonic()
        wall = time.time()
        self._attempt()
        ranks = {}
        if self.attempt is not None:
            self._read_ranks(now)
            for name, r in sorted(self.ranks.items(), key=lambda kv: int(kv[0])):
                ranks[name] = self._look_rank(r, now, wall)
        self._serve_dump_request()
        self.seq += 1
        return {"node": self.node, "host": self.host, "pid": os.getpid(), "seq": self.seq, "time_unix": wall,
                "attempt": int(self.attempt) if self.attempt else None, "interval_s": self.interval,
                "ranks": ranks, "dumped": self.dumped}

    def _look_rank(self, r: Rank, now: float, wall: float) -> dict:
        state = r.state()
        moved = False
        m = self.metrics.get(r.rank)
        if m is None:
            m = self.metrics[r.rank] = Metrics(os.path.join(self.run_dir, "metrics", f"rank{r.rank}.jsonl"))
        if m.read():
            moved = True
        if m.last_step_time >= self.launched - 1.0:
            r.stepped = True
        try:
            size = os.stat(os.path.join(self.run_dir, "logs", f"attempt{self.attempt}", f"rank{r.rank}.log")).st_size
        except OSError:
            size = -1
        if size != r.log_size:
            moved = moved or r.log_size >= 0
            r.log_size = size
        if state is not None:
            cpu = tree_cpu(r.pid)
            if cpu - r.cpu > self.idle_cpu * max(now - r.cpu_at, 1e-3):
                moved = True
            r.cpu, r.cpu_at = cpu, now
        if moved:
            r.last_progress = now
        return {"pid": r.pid, "alive": state is not None and state not in ("Z", "X"), "state": state,
                "quiet_s": round(now - r.last_progress, 3), "stepped": r.stepped,
                "p99_s": progress.p99(list(m.intervals)), "cpu_s": round(r.cpu, 3)}

    def _serve_dump_request(self) -> None:
        if self.dumping is not None and self.dumping.is_alive():
            return
        try:
            with open(os.path.join(self.ctl, "dump-request")) as f:
                req = json.loads(f.read(4096))
            serial, folder = int(req["serial"]), str(req["dir"])
        except (OSError, ValueError, KeyError, TypeError):
            return
        if serial <= self.dumped or req.get("attempt") != (int(self.attempt) if self.attempt else None):
            return
        ranks = dict(self.ranks)
        log_dir = os.path.join(self.run_dir, "logs", f"attempt{self.attempt}")

        def dump():
            os.makedirs(folder, mode=0o700, exist_ok=True)
            for name, r in sorted(ranks.items()):
                stacks.dump_rank(r.pid, name, self.host, os.path.join(folder, f"rank{name}.txt"),
                                 os.path.join(log_dir, f"rank{name}.log"))
            self.dumped = serial

        self.dumping = threading.Thread(target=dump, daemon=True)
        self.dumping.start()

    def beat(self) -> None:
        try:
            write_atomic(self.out, json.dumps(self.look(), separators=(",", ":")), durable=False)
        except Exception as e:  # noqa: BLE001 - a watch that stops beating would fence a healthy node
            if not self.said:
                self.said = True
                print(f"hpclaunch watch on {self.node}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m hpclaunch.runtime.watch", description=__doc__.split("\n")[0])
    p.add_argument("--run-dir", required=True)
    p.add_argument("--node", required=True, help="this node's name in the allocation (the heartbeat's file name)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between heartbeats (default 1)")
    p.add_argument("--idle-cpu", type=float, default=0.05, help="below this share of a core a rank is idle")
    p.add_argument("--parent-pid", type=int, default=None, help="end when this process is gone")
    a = p.parse_args(argv)
    if not 0.05 <= a.interval <= 60:
        p.error(f"--interval {a.interval!r}: use 0.05 to 60 seconds")
    if not 0 <= a.idle_cpu <= 1:
        p.error(f"--idle-cpu {a.idle_cpu!r}: use a share of one core from 0 to 1")
    if not a.node or "/" in a.node or a.node.startswith("."):
        p.error(f"--node {a.node!r}: give the node's name")
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    watch = Watch(a.run_dir, a.node, a.interval, a.idle_cpu)
    os.makedirs(os.path.dirname(watch.out), mode=0o700, exist_ok=True)
    parent = os.getppid()
    while not stop.is_set():
        watch.beat()
        if a.parent_pid is not None and (not _alive(a.parent_pid) or os.getppid() != parent):
            break
        stop.wait(a.interval)
    return 0


def _alive(pid: int) -> bool:
    st = proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


if __name__ == "__main__":
    raise SystemExit(main())
