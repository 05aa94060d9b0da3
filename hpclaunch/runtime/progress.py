"""What a rank's progress is, and when its silence is a hang: shared by the node watch (watch.py),
which measures, and the supervisor (supervise.py), which judges (docs/recovery.md).

A rank makes progress when its metrics file grows (a step record: `metrics/rank<R>.jsonl`, schema
hpclaunch.metrics/1, as train_entry writes it and any program may), its log grows, or it uses more
than a small share of a core. It is hung when it has done none of these for longer than its bound:
factor x the p99 interval between its step records (one record may stand for several steps), within
[floor, ceiling]; the ceiling alone before its first step record of the attempt (start-up: imports,
rendezvous, loading a checkpoint). A straggler that steps at twice its usual time still writes
records, so it is never hung; a rank that only waits for a hung one is quiet too, and the one to
name is the stopped one, or the one quiet the longest.
"""
from __future__ import annotations

import json
from typing import Iterable, List, Optional, Sequence, Tuple

# The step intervals a watch keeps per rank (the p99 of the newest ones; older ones say less).
KEEP_INTERVALS = 2048
# How much of an existing metrics file a watch reads at its start for the history (the tail).
HISTORY_BYTES = 1 << 20


def p99(values: Sequence[float]) -> Optional[float]:
    """The 99th percentile (nearest rank), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, -(-99 * len(ordered) // 100) - 1))]


def bound(p99_interval: Optional[float], stepped: bool, factor: float, floor: float, ceiling: float) -> float:
    """Seconds of silence after which a rank is hung."""
    if not stepped or p99_interval is None:
        return ceiling
    return min(ceiling, max(floor, factor * p99_interval))


def step_intervals(lines: Iterable[bytes]) -> List[Tuple[float, float]]:
    """(time_unix, interval) of each complete step record in these lines: the interval is the
    record's steps x step_time_s (what one record stands for), or the time since the previous
    record where it says no step time. Other lines (headers, events, a cut line) are skipped."""
    out: List[Tuple[float, float]] = []
    last = None
    for line in lines:
        if b'"step"' not in line or not line.endswith(b"\n"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or rec.get("kind") != "step":
            continue
        t = _num(rec.get("time_unix"))
        if t is None:
            continue
        dt = _num(rec.get("step_time_s"))
        steps = _num(rec.get("steps")) or 1.0
        interval = dt * steps if dt is not None else (t - last if last is not None else None)
        last = t
        if interval is not None and interval >= 0:
            out.append((t, interval))
    return out


def _num(value) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if value == value and abs(value) != float("inf") else None


def hung_rank(ranks: dict) -> Optional[str]:
    """The rank to name among quiet ones ({rank: {"state", "quiet_s"}}): a stopped or
    uninterruptible one first, else the one quiet the longest (the lowest rank on a tie)."""
    if not ranks:
        return None

    def key(item):
        rank, info = item
        stopped = info.get("state") in ("T", "t", "D")
        return (not stopped, -(info.get("quiet_s") or 0.0), int(rank) if str(rank).isdigit() else 0)

    return sorted(ranks.items(), key=key)[0][0]
