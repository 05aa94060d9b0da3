"""This node's ranks as they run: each one's CPU time and the size of its log, sampled every
EVERY_S seconds into ``<host>.ranks.csv`` (schema.RANKS_COLUMNS).

What they tell after the job: when each rank last made progress, and whether the ranks ever talked
to each other (the sockets each held: ranks that held none ran as worlds of their own). At a time limit every rank gets
SIGTERM at once and ends within milliseconds of the others, and what is written as they die (the
program's own last words, the wrapper's) makes every log's modification time the same instant; these
rows keep the times at which each log grew while its rank was alive, and its CPU time. A rank that
stalled (waiting for a peer that never came, a deadlock, a stopped process) shows a log that stopped
growing long before the others' (runs/rank_progress.py reads them).

The ranks are those of ``$HPCLAUNCH_LOG_DIR/ranks.tsv`` ("rank host pid", one line appended by each
rank's wrapper as it starts; the pid is the rank's own process, which the wrapper's subshell became
by exec) whose host is this node. /proc/<pid>/stat gives the CPU time (the process's and its reaped
children's); a pid no longer running (or reused by another program: its start time changed) gives an
empty cell.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence, Tuple

EVERY_S = 5.0
MAX_RANKS = 1024              # of this node
MAP_MAX = 1 << 20             # bytes of ranks.tsv read at most
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_stat(pid: int) -> Optional[Tuple[float, int]]:
    """(CPU seconds: user+system of the process and its reaped children, start time in ticks)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read(4096)
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()
    try:  # fields[0] is the state (stat's 3rd field): utime is stat's 14th, starttime its 22nd
        if fields[0] == b"Z":
            return None
        ticks = sum(int(x) for x in fields[11:15])
        return ticks / _TICK, int(fields[19])
    except (IndexError, ValueError):
        return None


class RankProgress:
    def __init__(self, log_dir: str, host: str, names: Sequence[str], attempt: Optional[str]):
        self.log_dir = log_dir
        self.host = host
        self.names = {n for n in names if n}       # what this node's `hostname` may print
        self.attempt = int(attempt) if attempt and attempt.isdigit() else None
        self.ranks: Dict[int, int] = {}           # rank -> pid, this node's
        self.started: Dict[int, int] = {}         # rank -> its process's start time (ticks)
        self._map_size = -1
        self.next_at = 0.0

    def _read_map(self) -> None:
        path = os.path.join(self.log_dir, "ranks.tsv")
        try:
            size = os.stat(path).st_size
        except OSError:
            return
        if size == self._map_size:
            return
        self._map_size = size
        try:
            with open(path, "rb") as f:
                text = f.read(MAP_MAX).decode("utf-8", "replace")
        except OSError:
            return
        for line in text.splitlines():
            cols = line.split("\t")
            if len(cols) == 3 and cols[0].isdigit() and cols[2].isdigit() and cols[1] in self.names:
                if len(self.ranks) < MAX_RANKS or int(cols[0]) in self.ranks:
                    self.ranks[int(cols[0])] = int(cols[2])

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def sample(self, now: float) -> List[tuple]:
        """One row per rank of this node: (time_unix, host, attempt, rank, pid, cpu_s, log_bytes, sockets)."""
        self.next_at = now + EVERY_S
        self._read_map()
        rows = []
        for rank in sorted(self.ranks):
            pid = self.ranks[rank]
            stat = _proc_stat(pid)
            cpu = None
            if stat is not None:
                first = self.started.setdefault(rank, stat[1])
                cpu = stat[0] if stat[1] == first else None   # a reused pid is not the rank
            try:
                size: Optional[int] = os.stat(os.path.join(self.log_dir, f"rank{rank}.log")).st_size
            except OSError:
                size = None
            rows.append((now, self.host, self.attempt, rank, pid, cpu, size, _sockets(pid) if cpu is not None else None))
        return rows


def _sockets(pid: int) -> Optional[int]:
    """How many sockets the process holds (its /proc/<pid>/fd links to socket:[...]); None unreadable.
    A rank of a distributed program holds some all along (its rendezvous store, gloo's or NCCL's
    peers, an MPI or PMIx server, gRPC): ranks that never held one ran alone."""
    folder = f"/proc/{pid}/fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    n = 0
    for name in names[:65536]:
        try:
            n += os.readlink(os.path.join(folder, name)).startswith("socket:")
        except OSError:
            pass
    return n
