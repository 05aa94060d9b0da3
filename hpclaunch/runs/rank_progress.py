"""Which ranks were still making progress when a job was stopped from outside (its time limit, a
cancellation, a preemption). At the stop every rank gets SIGTERM at once and ends within milliseconds
of the others, so the first to end is chance, not a cause; what tells a stalled rank from the others
is when each last made progress:

* the monitor's per-rank rows (``monitor/<host>.ranks.csv``, monitors/rank_progress.py): when its log
  last grew while it ran, and when its CPU time last grew;
* its metrics (``metrics/rank<R>.jsonl``, train_entry's): the time of its last record;
* else its log's modification time, unless the log was written as the rank ended (the wrapper and
  many programs write a last line when a signal kills them, which makes every log's time the stop's).

Growth seen after the stop (what was written as the ranks died) is not progress.
"""
from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

TAIL_BYTES = 8 << 20          # of each ranks.csv: at 8 ranks a node, ~16 h of rows
STOP_CLUSTER_S = 30.0         # ranks ending this close to the last one were stopped with it
MIN_GAP_S = 30.0              # a rank is "behind" when the others progressed this much later ...
MAX_GAP_S = 900.0             # ... or a tenth of the attempt, between these bounds


@dataclass
class Progress:
    rank: int
    host: Optional[str]
    last: Optional[float]              # when it last made progress (epoch seconds); None: not known
    log_last: Optional[float] = None   # when its log last grew while it ran (monitor rows; else its time)
    cpu_last: Optional[float] = None   # when its CPU time last grew (monitor rows)
    metrics_last: Optional[float] = None   # its last metrics record

    def evidence(self) -> str:
        """"log at 12:03:10, CPU at 12:03:12": what says when it last made progress."""
        import time

        parts = [f"{what} at {time.strftime('%H:%M:%S', time.localtime(t))}" for what, t in
                 (("log", self.log_last), ("CPU", self.cpu_last), ("metrics", self.metrics_last)) if t is not None]
        return ", ".join(parts)


KILLED = (128 + 15, 128 + 9)     # a rank that SIGTERM (or SIGKILL, KillWait later) ended


def stop_time(exits: Sequence[Tuple[Optional[int], Optional[float]]]) -> Optional[float]:
    """When the stop came: the first exit of a rank the signal killed; where every rank handled it
    (none was killed), the first exit among those that ended within STOP_CLUSTER_S of the last."""
    killed = [t for code, t in exits if t is not None and code in KILLED]
    if killed:
        return min(killed)
    times = [t for _, t in exits if t is not None]
    if not times:
        return None
    last = max(times)
    return min(t for t in times if t >= last - STOP_CLUSTER_S)


def _tail(path: str, size: int) -> str:
    try:
        with open(path, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            f.seek(max(0, end - size))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    if end > size:
        text = text.split("\n", 1)[-1]   # the first line may begin mid-row
    return text[:text.rfind("\n") + 1]   # an unterminated last row is not a row


def monitor_rows(run_dir: str, attempt: int) -> Dict[int, List[tuple]]:
    """rank -> [(time, cpu_s, log_bytes, sockets)] of this attempt, in time order."""
    out: Dict[int, List[tuple]] = {}
    for path in sorted(glob.glob(os.path.join(run_dir, "monitor", "*.ranks.csv"))):
        header: Optional[List[str]] = None
        for line in _tail(path, TAIL_BYTES).splitlines():
            if line.startswith("#"):
                header = None
                continue
            cells = line.split(",")
            if header is None or cells[0] == "time_unix":
                header = cells
                continue
            if len(cells) != len(header):
                continue
            row = dict(zip(header, cells))
            try:
                if int(row.get("attempt") or -1) != attempt:
                    continue
                when, rank = float(row["time_unix"]), int(row["rank"])
                cpu = float(row["cpu_s"]) if row.get("cpu_s") else None
                size = int(row["log_bytes"]) if row.get("log_bytes") else None
                sockets = int(row["sockets"]) if row.get("sockets") else None
            except (KeyError, ValueError):
                continue
            out.setdefault(rank, []).append((when, cpu, size, sockets))
    for rows in out.values():
        rows.sort(key=lambda r: r[0])
    return out


STOP_MARGIN_S = 1.0            # growth seen this close to the stop may be what the stop made write


def _last_growth(rows, column: int, stop: float, least: float = 0.0) -> Optional[float]:
    """The time of the last sample, taken while the rank still ran and before the stop, at which
    the column had grown since the sample before it (by more than ``least``)."""
    last = None
    for (_, *a), (t, *b) in zip(rows, rows[1:]):
        x, y = a[column], b[column]
        if t < stop - STOP_MARGIN_S and b[0] is not None and x is not None and y is not None and y - x > least:
            last = t
    return last


def _metrics_last(run_dir: str, rank: int, stop: float) -> Optional[float]:
    """The time of a rank's last metrics record written before the stop."""
    best = None
    for line in _tail(os.path.join(run_dir, "metrics", f"rank{rank}.jsonl"), 64 * 1024).splitlines()[-50:]:
        try:
            t = json.loads(line).get("time_unix")
        except (ValueError, AttributeError):
            continue
        if isinstance(t, (int, float)) and t <= stop + 1 and (best is None or t > best):
            best = float(t)
    return best


CPU_STEP_S = 0.05              # CPU seconds between two samples that count as work (not a sleeping wait)


def rank_progress(run_dir: str, attempt: int, logs: Sequence, stop: float) -> List[Progress]:
    """Each rank's last progress before ``stop``: the latest of its log's growth and its CPU time's
    (the monitor's rows) and its last metrics record; ``logs``: the attempt's RankLogs. A rank whose
    log is silent (many programs print on rank 0 only) still shows its work in its CPU time; one
    that waits in a sleep, a blocking read or a stopped state shows neither."""
    rows = monitor_rows(run_dir, attempt)
    out = []
    for lg in logs:
        mine = rows.get(lg.rank, [])
        log_last, cpu_last = _last_growth(mine, 1, stop), _last_growth(mine, 0, stop, CPU_STEP_S)
        if log_last is None and len(mine) > 1 and mine[0][0] < stop:
            log_last = mine[0][0]   # no growth seen: none since the monitor's first sample of it
        if not mine:
            try:
                mtime = os.stat(lg.path).st_mtime
            except OSError:
                mtime = None
            # a log written as its rank ended says nothing of when the rank last worked
            if mtime is not None and lg.exit_time is not None and mtime < min(lg.exit_time, stop) - STOP_MARGIN_S:
                log_last = mtime
        met = _metrics_last(run_dir, lg.rank, stop)
        known = [t for t in (log_last, cpu_last, met) if t is not None]
        out.append(Progress(lg.rank, lg.host, max(known) if known else None, log_last, cpu_last, met))
    return out


def behind(progress: List[Progress], stop: float, started: Optional[float]) -> Tuple[List[Progress], float]:
    """(the ranks whose last progress came long before the others', earliest first; the gap that
    counts as long: a tenth of the attempt, between MIN_GAP_S and MAX_GAP_S)."""
    span = stop - started if started is not None and started < stop else 0.0
    gap = min(MAX_GAP_S, max(MIN_GAP_S, span / 10))
    known = [p for p in progress if p.last is not None]
    if len(known) < 2:
        return [], gap
    lead = max(p.last for p in known)
    late = sorted((p for p in known if lead - p.last >= gap), key=lambda p: (p.last, p.rank))
    return (late if len(late) < len(known) else []), gap


def never_connected(run_dir: str, attempt: int, ranks: int) -> bool:
    """True when every one of the attempt's ``ranks`` (more than one) was seen running at least twice
    and none ever held a socket: they never talked to each other, each a world of its own (an
    Accelerate program under launcher: srun). False whenever it cannot be told (no monitor rows, a
    monitor of an older hpclaunch, a rank not sampled while it ran)."""
    rows = monitor_rows(run_dir, attempt)
    if ranks < 2 or len(rows) < ranks:
        return False
    for samples in rows.values():
        seen = [r[3] for r in samples if r[1] is not None and r[3] is not None]
        if len(seen) < 2 or max(seen) > 0:
            return False
    return True
