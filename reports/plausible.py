"""Rows a report must not trust (issue 15, defect 6; issue 44, defect 3): a monitor row stamped outside
the run's window (a node clock years off, time_unix 0, a torn row finished by the next write),
non-finite or absurd readings, and cumulative counters that read negative (a glitching energy
counter at -5 made 40 MJ of a 27 kJ job, read as a reset and a huge increment). Such rows or cells
are dropped before any statistic, and the report says how many and why, per file.

The window comes from the job script's own record (.hpclaunch/state: a `start` and an `end` line per
attempt, head-node clock) widened by WINDOW_SLACK_S for node clock skew. Whatever records exist, it
is never wider than the times a monitor row can have: from EPOCH_FLOOR (2001-09-09, before any
monitor; 0, 1e-9 and negative times are a clock never set) to FUTURE_SLACK_S past this machine's
clock (1e18, 1.8e16: torn rows). Without the record (logs copied off a cluster, a monitor started by
hand, a state file never written) those bounds are the window, and the data bound it closer: a few
rows (at most ISOLATED_ROWS, or 1 % of the file) lying more than ISOLATION_S away from the rest of
their file are dropped too. Readings beyond any physical value (|v| over GAUGE_MAX, counters over
COUNTER_MAX: a hand edit, a flipped bit) are treated as missing like infinities. So every span,
binning and energy a report computes is bounded by plausible data (docs/report-schema.md).
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Iterable, Optional, Tuple, Union

import numpy as np

WINDOW_SLACK_S = 300.0
EPOCH_FLOOR = 1e9               # 2001-09-09 01:46:40 UTC
FUTURE_SLACK_S = 86400.0
ISOLATION_S = 7 * 86400.0
ISOLATED_ROWS = 2
GAUGE_MAX = 1e9                 # W, °C, %, MiB, MHz, load: no reading comes near it
COUNTER_MAX = 1e18              # mJ, ns, µJ since driver load or monitor start: 31 years of ns
# Columns with other limits: a bitmask (NVML's is 64 bits); sample times (bounded by the window).
LIMITS = {"throttle_reasons": 2.0 ** 64, "time_unix": np.inf}


@dataclasses.dataclass(frozen=True)
class Window:
    """The times a row may have: [lo, hi]; ``record``: from the job's record (else only the bounds
    every monitor row is within); ``text``: the window as a warning says it."""
    lo: float
    hi: float
    record: bool
    text: str


def report_window(run_dir, now: Optional[float] = None) -> Window:
    """The job record's window (run_window) within the plausible bounds, else those bounds alone."""
    now = time.time() if now is None else now
    lo, hi = EPOCH_FLOOR, now + FUTURE_SLACK_S
    bounds = Window(lo, hi, False, "outside any plausible time (before 2001-09-09, or over a day past this "
                    "machine's clock: a node clock not set, or a torn row; no job record in .hpclaunch/state "
                    "to bound the run closer)")
    rec = run_window(run_dir)
    if rec is None or max(lo, rec[0]) > min(hi, rec[1]):  # no record, or one no monitor row could match
        return bounds
    return Window(max(lo, rec[0]), min(hi, rec[1]), True, _record_text(rec))


def _record_text(rec: Tuple[float, float]) -> str:
    return (f"outside the run's window ({rec[0] + WINDOW_SLACK_S:.0f}..{rec[1] - WINDOW_SLACK_S:.0f} "
            f"± {WINDOW_SLACK_S:.0f} s; a node clock off, or a torn row)")


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


def isolated(t: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Rows of ``keep`` (finite times ``t``) in a group of at most max(ISOLATED_ROWS, 1 %) rows that
    lies over ISOLATION_S from every other row, beside a larger group: a bool mask over ``t``."""
    out = np.zeros(t.size, bool)
    idx = np.flatnonzero(keep)
    order = idx[np.argsort(t[idx], kind="stable")]
    group = np.concatenate([[0], np.cumsum(np.diff(t[order]) > ISOLATION_S)])
    counts = np.bincount(group)
    if counts.size < 2:
        return out
    small = (counts <= max(ISOLATED_ROWS, idx.size // 100)) & (np.arange(counts.size) != counts.argmax())
    out[order[small[group]]] = True
    return out


def drop_implausible(tb, window: Union[Window, Tuple[float, float], None], counters: Iterable[str]):
    """(table, warning): `tb` (a readers.Table) without its rows stamped outside `window` (a
    Window, or a job record's (start, end)), its infinite and absurd readings and negative counter
    readings made missing; the warning is None if all was plausible. `tb` itself is left as the
    reader made it (a changed table is a new one)."""
    why = None
    if tb.n == 0:
        return tb, why
    if window is not None and not isinstance(window, Window):
        window = Window(window[0], window[1], True, _record_text(window))
    outside = np.zeros(tb.n, bool)
    t = tb.col("time_unix")
    bounds_t = tb.bounds.get("time_unix")
    if window is not None and not _inside(bounds_t, window.lo, window.hi):
        with np.errstate(invalid="ignore"):
            outside = np.isfinite(t) & ((t < window.lo) | (t > window.hi))
    lone = np.zeros(tb.n, bool)
    # without the record, the data bound it: skipped when the times' range is short
    span = bounds_t or (float(np.fmin.reduce(t)), float(np.fmax.reduce(t)))
    if (window is None or not window.record) and span[0] is not None and span[1] - span[0] > ISOLATION_S:
        keep = np.isfinite(t) & ~outside
        if keep.sum() > 1 and np.ptp(t[keep]) > ISOLATION_S:
            lone = isolated(t, keep)
    nonfinite = negative = absurd = 0
    counters = set(counters)
    num = dict(tb.num)
    for name, a in tb.num.items():
        limit = LIMITS.get(name, COUNTER_MAX if name in counters else GAUGE_MAX)
        if a.dtype.kind != "f" or not a.size:
            continue
        # the copy's bounds, else two reductions (no temporary arrays): almost every column is fine
        known = tb.bounds.get(name) or (float(np.fmin.reduce(a)), float(np.fmax.reduce(a)))
        if _inside((None, None) if known[0] != known[0] else known, 0.0 if name in counters else -limit, limit,
                   finite=True):
            continue
        inf = np.isinf(a)
        with np.errstate(invalid="ignore"):
            big = ~inf & ((a > limit) | (a < -limit))
            neg = a < 0 if name in counters else None
        bad = inf | big
        if neg is not None:
            negative += int((neg & ~inf & ~big).sum())
            bad |= neg
        nonfinite += int(inf.sum())
        absurd += int(big.sum())
        if bad.any():  # a new array: the reader's may be a read-only view of Arrow memory
            num[name] = np.where(bad, np.nan, a)
    far, dropped = int(lone.sum()), int(outside.sum()) + int(lone.sum())
    text = tb.text
    if dropped:
        keep = ~(outside | lone)
        num = {k: v[keep] for k, v in num.items()}
        text = {k: (codes[keep], dic) for k, (codes, dic) in tb.text.items()}
    if not (dropped or nonfinite or negative or absurd):
        return tb, why
    tb = dataclasses.replace(tb, num=num, text=text, n=tb.n - dropped, bounds={})
    parts = []
    if dropped - far:
        parts.append(f"dropped {dropped - far} row(s) stamped {window.text}{_examples(t[outside])}")
    if far:
        parts.append(f"dropped {far} row(s) lying over {ISOLATION_S / 86400:.0f} days from the rest of the file "
                     "(a node clock off, or a torn row; no job record to say whether the run was that long)"
                     f"{_examples(t[lone])}")
    if nonfinite:
        parts.append(f"{nonfinite} infinite reading(s) treated as missing")
    if absurd:
        parts.append(f"{absurd} reading(s) beyond any physical value (|v| > {GAUGE_MAX:g}; counters > "
                     f"{COUNTER_MAX:g}) treated as missing")
    if negative:
        parts.append(f"{negative} negative counter reading(s) treated as missing (a counter glitch, not a reset)")
    return tb, f"{Path(tb.path).name}: " + "; ".join(parts)


def _examples(t: np.ndarray) -> str:
    """A few of the dropped rows' times, as a warning names them."""
    return ", e.g. time_unix " + ", ".join(f"{v:.10g}" for v in sorted(set(t[:1000].tolist()))[:3])
