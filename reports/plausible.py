"""Rows a report must not trust (issue 15, defect 6): a monitor row stamped outside the run's
window (a node clock years off, time_unix 0, a torn row finished by the next write), non-finite
readings, and cumulative counters that read negative (a glitching energy counter at -5 made
40 MJ of a 27 kJ job, read as a reset and a huge increment). Such rows or cells are dropped before
any statistic, and the report says how many and why, per file.

The window comes from the job script's own record (.hpclaunch/state: a `start` and an `end` line per
attempt, head-node clock) widened by WINDOW_SLACK_S for node clock skew; without that record
(logs copied elsewhere, synthetic runs) nothing is dropped for its time.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Iterable, Optional, Tuple

import numpy as np

WINDOW_SLACK_S = 300.0


def run_window(run_dir) -> Optional[Tuple[float, float]]:
    """(first start - slack, last end + slack) from .hpclaunch/state; a run still going ends now."""
    attempts = _attempts(run_dir)
    if attempts is None or not attempts[0]:
        return None
    starts, ends, last_start = attempts
    end = max(ends) if ends and max(ends) >= last_start else time.time()
    return min(starts) - WINDOW_SLACK_S, end + WINDOW_SLACK_S


def run_ended(run_dir) -> Optional[bool]:
    """Has the job ended, by its own record (an `end` line at or after its last `start`)? None
    without a record."""
    attempts = _attempts(run_dir)
    if attempts is None or not attempts[0]:
        return None
    _, ends, last_start = attempts
    return bool(ends) and max(ends) >= last_start


def _attempts(run_dir) -> Optional[Tuple[list, list, float]]:
    """(start times, end times, the last start) of .hpclaunch/state; None if there is no such file."""
    try:
        text = (Path(run_dir) / ".hpclaunch" / "state").read_text(errors="replace")
    except OSError:
        return None
    starts, ends, last_start = [], [], 0.0
    for line in text.splitlines()[:100_000]:
        words = line.split()
        if len(words) < 3 or not words[0].isdigit():
            continue
        t = float(words[0])
        if words[2] == "start":
            starts.append(t)
            last_start = t
        elif words[2] == "end":
            ends.append(t)
    return starts, ends, last_start


def _inside(bounds, lo: float, hi: float, finite: bool = False) -> bool:
    """Whether a column's known (min, max) says every value is within [lo, hi] (and finite, with
    ``finite``); False when they are not known (then the column is checked value by value)."""
    if bounds is None:
        return False
    if bounds[0] is None:  # all missing: nothing to drop
        return True
    if finite and not (np.isfinite(bounds[0]) and np.isfinite(bounds[1])):
        return False
    return lo <= bounds[0] and bounds[1] <= hi


def drop_implausible(tb, window: Optional[Tuple[float, float]], counters: Iterable[str]):
    """(table, warning): `tb` (a readers.Table) without its rows stamped outside `window`, its
    infinite readings and negative counter readings made missing; the warning is None if all was
    plausible. `tb` itself is left as the reader made it (a changed table is a new one)."""
    why = None
    if tb.n == 0:
        return tb, why
    outside = np.zeros(tb.n, bool)
    if window is not None and not _inside(tb.bounds.get("time_unix"), *window):
        t = tb.col("time_unix")
        with np.errstate(invalid="ignore"):
            outside = np.isfinite(t) & ((t < window[0]) | (t > window[1]))
    nonfinite = negative = 0
    counters = set(counters)
    num = dict(tb.num)
    for name, a in tb.num.items():
        if a.dtype.kind != "f" or _inside(tb.bounds.get(name), 0.0 if name in counters else -np.inf, np.inf,
                                          finite=True):
            continue
        inf = np.isinf(a)
        bad = inf
        if name in counters:
            with np.errstate(invalid="ignore"):
                neg = a < 0
            negative += int(neg.sum())
            bad = inf | neg
        nonfinite += int(inf.sum())
        if bad.any():  # a new array: the reader's may be a read-only view of Arrow memory
            num[name] = np.where(bad, np.nan, a)
    dropped = int(outside.sum())
    text = tb.text
    if dropped:
        keep = ~outside
        num = {k: v[keep] for k, v in num.items()}
        text = {k: (codes[keep], dic) for k, (codes, dic) in tb.text.items()}
    if not (dropped or nonfinite or negative):
        return tb, why
    tb = dataclasses.replace(tb, num=num, text=text, n=tb.n - dropped, bounds={})
    parts = []
    if dropped:
        parts.append(f"dropped {dropped} row(s) stamped outside the run's window "
                     f"({window[0] + WINDOW_SLACK_S:.0f}..{window[1] - WINDOW_SLACK_S:.0f} "
                     f"± {WINDOW_SLACK_S:.0f} s; a node clock off, or a torn row)")
    if nonfinite:
        parts.append(f"{nonfinite} infinite reading(s) treated as missing")
    if negative:
        parts.append(f"{negative} negative counter reading(s) treated as missing (a counter glitch, not a reset)")
    return tb, f"{Path(tb.path).name}: " + "; ".join(parts)
