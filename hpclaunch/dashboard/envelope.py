"""What a job page shows of a job too large to draw line by line: a chart's readings from many GPUs or
hosts as three lines (their minimum, mean and maximum per time bucket), and its ranks as a summary and
the few furthest behind. A 1,024-node job's page stays a few lines and a few rows, whatever the size.

A bucket is drawn once every node's rows for it have had time to arrive (SETTLE_S after it ends, by
this machine's clock); a row for a bucket already drawn is counted as late and left out.
"""
from __future__ import annotations

import math
import time
from typing import Dict, List, Optional, Tuple

import numpy as np

SETTLE_S = 10.0
TOP_RANKS = 16   # the ranks a large job's page lists: those furthest behind


def pairs(a: np.ndarray, how: str = "mean") -> np.ndarray:
    """Neighbouring pairs made one (NaN only where both are; an odd last point stays): their mean, min
    or max."""
    n = a.size // 2 * 2
    head = a[:n].reshape(-1, 2)
    if how == "min":
        out = np.fmin(head[:, 0], head[:, 1])
    elif how == "max":
        out = np.fmax(head[:, 0], head[:, 1])
    else:
        ok = ~np.isnan(head)
        count = ok.sum(axis=1)
        out = np.where(count > 0, np.where(ok, head, 0.0).sum(axis=1) / np.maximum(count, 1), np.nan)
    return np.concatenate([out, a[n:]])


class Envelope:
    """Min, mean and max per bucket of every reading added, as three series (Series of live.py)."""

    def __init__(self, series_factory, bucket_s: float = 1.0):
        self.bucket_s = bucket_s
        self.lines = {how: series_factory(how) for how in ("max", "mean", "min")}
        self.open: Dict[int, List[float]] = {}   # bucket -> [sum, count, min, max]
        self.drawn_upto = -math.inf               # buckets below this one are drawn
        self.late = 0
        self.sources: set = set()
        self._t: List[np.ndarray] = []
        self._y: List[np.ndarray] = []

    def add(self, label: str, t: np.ndarray, y: np.ndarray) -> None:
        self.sources.add(label)
        self._t.append(t)
        self._y.append(y)

    def add_many(self, labels: List[str], t: np.ndarray, y: np.ndarray) -> None:
        """The readings of many GPUs or hosts (``labels``) at once: bucketed alike, whoever read them."""
        self.sources.update(labels)
        self._t.append(t)
        self._y.append(y)

    def settle(self, now: Optional[float] = None) -> bool:
        """Fold the readings added into their buckets, draw the buckets old enough; True when a line was
        thinned (the page is sent the whole series again)."""
        if self._t:
            t, y = np.concatenate(self._t), np.concatenate(self._y)
            self._t, self._y = [], []
            ok = np.isfinite(t) & np.isfinite(y)
            b = np.floor(t[ok] / self.bucket_s).astype(np.int64)
            y = y[ok]
            late = b < self.drawn_upto
            self.late += int(late.sum())
            b, y = b[~late], y[~late]
            if b.size:   # by bucket: one sort, then each bucket's run reduced
                o = np.argsort(b, kind="stable")
                b, y = b[o], y[o]
                starts = np.flatnonzero(np.concatenate([[True], b[1:] != b[:-1]]))
                keys, counts = b[starts], np.diff(np.append(starts, b.size))
                sums, mins, maxs = (f.reduceat(y, starts) for f in (np.add, np.minimum, np.maximum))
                for k, s, c, lo, hi in zip(keys.tolist(), sums.tolist(), counts.tolist(), mins.tolist(), maxs.tolist()):
                    cur = self.open.get(k)
                    if cur is None:
                        self.open[k] = [s, c, lo, hi]
                    else:
                        cur[0] += s
                        cur[1] += c
                        cur[2] = min(cur[2], lo)
                        cur[3] = max(cur[3], hi)
        edge = math.floor(((time.time() if now is None else now) - SETTLE_S) / self.bucket_s)
        ready = sorted(k for k in self.open if k < edge)
        if not ready:
            return False
        self.drawn_upto = max(self.drawn_upto, ready[-1] + 1)
        vals = np.array([self.open.pop(k) for k in ready])
        tt = (np.array(ready, dtype=np.float64) + 0.5) * self.bucket_s
        thinned = False
        for how, col in (("max", vals[:, 3]), ("mean", vals[:, 0] / vals[:, 1]), ("min", vals[:, 2])):
            thinned = self.lines[how].extend(tt, col) or thinned
        return thinned

    def note(self, what: str) -> str:
        n = len(self.sources)
        return f"min, mean and max over {n:,} {what}{'' if n == 1 else 's'}" + \
            (f"; {self.late:,} late readings left out" if self.late else "")


def rank_summary(ranks: List[dict]) -> Tuple[dict, List[dict]]:
    """(the ranks in figures, the TOP_RANKS furthest behind: lowest step, then oldest record)."""
    steps = sorted(r["step"] for r in ranks if isinstance(r.get("step"), (int, float)))
    sps = [r["samples_per_s"] for r in ranks if isinstance(r.get("samples_per_s"), (int, float))]
    summary = {"ranks": len(ranks), "reporting": len(steps),
               "step_min": steps[0] if steps else None, "step_median": steps[len(steps) // 2] if steps else None,
               "step_max": steps[-1] if steps else None, "samples_per_s_total": round(sum(sps), 2) if sps else None,
               "listed": min(TOP_RANKS, len(ranks))}
    behind = sorted(ranks, key=lambda r: (r.get("step", -1) if isinstance(r.get("step"), (int, float)) else -1,
                                          r.get("time_unix") or 0.0, r["rank"]))
    return summary, behind[:TOP_RANKS]
