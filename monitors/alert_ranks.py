"""The rank rules of the node monitor's alerts: a rank hung, out of memory, or straggling.

Every CHECK_S (60) seconds from the first CHECK_S after the monitor's start (ranks have just started
then), not every sample, with a stat per file and a read only of what grew (about 0.3 ms of CPU a check, cold), from the files the job script and train_entry write in the
run directory (docs/run-directory.md):

* **hang**: ``metrics/rank<R>.jsonl`` of each rank on this node (``logs/attempt<N>/ranks.tsv``)
  has not grown for the rule's ``for_s`` since it last grew, while the rank runs (no
  ``rank<R>.exit`` yet). Only a rank whose metrics grew once under this monitor's eyes counts:
  a program that writes no metrics (not train_entry) is never called hung.
* **oom**: new text of this node's ``logs/attempt<N>/rank<R>.log`` (at most READ_MAX bytes a check)
  holds an out-of-memory message: CUDA's (``CUDA out of memory``, ``OutOfMemoryError``) or the
  kernel's OOM killer's as the rank's wrapper logs it.
* **straggler** (on the job's first node only, so that one monitor speaks for the job): each rank's
  median ``step_time_s`` over its last STEPS step records (the last TAIL bytes of at most MAX_RANKS
  metrics files) against the median of all ranks', as the report's stragglers are.
"""

from __future__ import annotations

import json
import os
from statistics import median
from typing import Dict, List, Optional, Tuple

CHECK_S = 60.0
STRAGGLER_EVERY_S = 120.0
READ_MAX = 256 * 1024
TAIL = 16 * 1024
STEPS = 20
MAX_RANKS = 1024
OOM_NEEDLES = (b"CUDA out of memory", b"OutOfMemoryError", b"CUDA error: out of memory",
               b"Out of memory: Killed process", b"oom-kill")


class RankWatch:
    CHECK_S = CHECK_S

    def __init__(self, run_dir: str, host: str, attempt: Optional[str], first_node: bool, rules: dict):
        self.run_dir, self.host, self.first_node = run_dir, host, first_node
        self.attempt = attempt if attempt and attempt.isdigit() else None
        self.hang, self.oom, self.straggler = rules.get("hang"), rules.get("oom"), rules.get("straggler")
        self.next_check = None      # the first check CHECK_S after the first sample (set by the engine's first look)
        self.next_straggler = 0.0
        self.local: Dict[int, str] = {}                 # rank -> host, this node's ranks
        self.size: Dict[int, Tuple[int, float, bool]] = {}  # rank -> (metrics size, when it last grew, grew once)
        self.log_off: Dict[int, int] = {}
        self.ranks_key = None                            # ranks.tsv's (size, mtime) when read
        self.all_ranks: Dict[int, str] = {}
        self.tracks: Dict[Tuple[str, int], object] = {}

    def _attempt_dir(self) -> Optional[str]:
        logs = os.path.join(self.run_dir, "logs")
        if self.attempt is None:
            try:
                found = [int(d[7:]) for d in os.listdir(logs) if d.startswith("attempt") and d[7:].isdigit()]
            except OSError:
                return None
            if not found:
                return None
            self.attempt = str(max(found))
        return os.path.join(logs, f"attempt{self.attempt}")

    def _ranks(self, folder: str) -> Dict[int, str]:
        out: Dict[int, str] = {}
        try:
            with open(os.path.join(folder, "ranks.tsv"), encoding="utf-8", errors="replace") as f:
                for line in f.read(1 << 20).splitlines():
                    cols = line.split()
                    if len(cols) >= 2 and cols[0].isdigit():
                        out[int(cols[0])] = cols[1].split(".")[0]
        except OSError:
            pass
        return out

    def _track(self, engine, rule: str, rank: int):
        tr = self.tracks.get((rule, rank))
        if tr is None:
            tr = self.tracks[(rule, rank)] = engine.new_track()
        return tr

    def check(self, engine, now: float) -> None:
        self.next_check = now + CHECK_S
        folder = self._attempt_dir()
        if folder is None:
            return
        try:
            st = os.stat(os.path.join(folder, "ranks.tsv"))
            key = (st.st_size, st.st_mtime_ns)
        except OSError:
            key = None
        if key != self.ranks_key:  # read again only when the job script added to it
            self.ranks_key, self.all_ranks = key, self._ranks(folder)
            self.local = {r: h for r, h in self.all_ranks.items() if h == self.host}
        for rank in sorted(self.local)[:MAX_RANKS]:
            where = {"rank": rank, "ranks": str(rank)}
            if self.hang:
                self._hang(engine, now, rank, where, folder)
            if self.oom:
                self._oom(engine, now, rank, where, folder)
        if self.straggler and self.first_node and now >= self.next_straggler:
            self.next_straggler = now + STRAGGLER_EVERY_S
            self._stragglers(engine, now, self.all_ranks)

    def _hang(self, engine, now: float, rank: int, where: dict, folder: str) -> None:
        try:
            size = os.stat(os.path.join(self.run_dir, "metrics", f"rank{rank}.jsonl")).st_size
        except OSError:
            return
        old = self.size.get(rank)
        if old is None or size != old[0]:
            self.size[rank] = (size, now, old is not None)
            tr = self.tracks.get(("hang", rank))
            if tr is not None and tr.active:
                engine.miss(tr, now)
            return
        _, grew_at, started = old
        quiet = now - grew_at
        tr = self._track(engine, "hang", rank)
        if started and quiet >= self.hang["for_s"] and not os.path.exists(os.path.join(folder, f"rank{rank}.exit")):
            engine.hit(tr, "hang", now, where, round(quiet), self.hang["for_s"], " s",
                       f"rank {rank} on {self.host} made no progress for {quiet:.0f} s (no new metrics record)")
        elif tr.active:
            engine.miss(tr, now)

    def _oom(self, engine, now: float, rank: int, where: dict, folder: str) -> None:
        path = os.path.join(folder, f"rank{rank}.log")
        start = self.log_off.get(rank, 0)
        try:
            end = os.stat(path).st_size
            if end == start:  # nothing new: no open, no read
                data = b""
            else:
                with open(path, "rb") as f:
                    if end < start:
                        start = 0
                    start = max(start, end - READ_MAX)
                    f.seek(start)
                    data = f.read(end - start)
        except OSError:
            return
        self.log_off[rank] = start + len(data)
        found = next((n for n in OOM_NEEDLES if n in data), None)
        tr = self._track(engine, "oom", rank)
        if found is not None:
            engine.hit(tr, "oom", now, where, found.decode(), None, "",
                       f"rank {rank} on {self.host} ran out of memory ({found.decode()})")
        elif tr.active:
            engine.miss(tr, now)

    def _stragglers(self, engine, now: float, hosts: Dict[int, str]) -> None:
        meds: Dict[int, float] = {}
        d = os.path.join(self.run_dir, "metrics")
        try:
            names = [n for n in os.listdir(d) if n.startswith("rank") and n.endswith(".jsonl") and n[4:-6].isdigit()]
        except OSError:
            return
        for name in sorted(names, key=lambda n: int(n[4:-6]))[:MAX_RANKS]:
            times = _step_times(os.path.join(d, name))
            if times:
                meds[int(name[4:-6])] = median(times)
        if len(meds) < 2:
            return
        mid = median(meds.values())
        if mid <= 0:
            return
        rule = self.straggler
        for rank, m in meds.items():
            ratio = round(m / mid, 3)
            tr = self._track(engine, "straggler", rank)
            if ratio >= rule["threshold"]:
                engine.hit(tr, "straggler", now, {"rank": rank, "ranks": str(rank), "rank_node": hosts.get(rank)},
                           ratio, rule["threshold"], "x",
                           f"rank {rank}{' on ' + hosts[rank] if rank in hosts else ''} is a straggler: its steps "
                           f"take {ratio:g}x the median rank's ({m:.3g} s against {mid:.3g} s)", rule["for_s"])
            elif tr.active:
                engine.miss(tr, now)


def _step_times(path: str) -> List[float]:
    """step_time_s of the last STEPS step records in the last TAIL bytes of a metrics file."""
    try:
        with open(path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            f.seek(max(0, end - TAIL))
            data = f.read()
    except OSError:
        return []
    out: List[float] = []
    for line in reversed(data.split(b"\n")[1:-1] if len(data) >= TAIL else data.split(b"\n")[:-1]):
        if b"step_time_s" not in line:  # the cheap test first: most lines of a long tail are steps anyway
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        v = rec.get("step_time_s") if isinstance(rec, dict) and rec.get("kind") == "step" else None
        if isinstance(v, (int, float)) and v > 0:
            out.append(float(v))
            if len(out) >= STEPS:
                break
    return out
