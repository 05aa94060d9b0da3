"""Energy per GPU: energy-counter differences with resets, and the power trapezoid."""
from __future__ import annotations

from typing import Any, Dict

import numpy as np


def counter_total(t: np.ndarray, c: np.ndarray) -> Dict[str, Any]:
    """Sum of non-negative differences of a cumulative counter over its valid samples.

    Returns dict(total, resets=list of (t_before, t_after), t_first, t_last, n_valid, dts of
    the valid-subsequence intervals and their increments for callers that attribute them)."""
    v = ~np.isnan(c)
    every = bool(v.all())
    tv, cv = (t, c) if every else (t[v], c[v])   # a reading at every sample (usual): no copies
    out: Dict[str, Any] = {"n_valid": int(tv.size), "t": tv, "valid": v, "every": every}
    if tv.size < 2:
        out.update(total=None, resets=[], inc=np.empty(0))
        return out
    inc = np.diff(cv)
    back = inc < 0
    if not back.any():   # never backwards: the same sum, without the NaN-aware pass
        out.update(total=float(np.sum(inc)), resets=[], inc=inc)
        return out
    resets = [(float(tv[i]), float(tv[i + 1])) for i in np.flatnonzero(back)]
    inc = np.where(back, np.nan, inc)
    out.update(total=float(np.nansum(inc)), resets=resets, inc=inc)
    return out


class PowerIntegral:
    """Cumulative trapezoid of valid power samples; integral between any two times."""

    def __init__(self, t: np.ndarray, p: np.ndarray):
        v = ~np.isnan(p)
        self.t, self.p = (t, p) if v.all() else (t[v], p[v])
        if self.t.size >= 2:
            seg = 0.5 * (self.p[1:] + self.p[:-1]) * np.diff(self.t)
            self.cum = np.concatenate([[0.0], np.cumsum(seg)])
            self.seg = seg
        else:
            self.cum = np.zeros(self.t.size)
            self.seg = np.empty(0)

    @property
    def ok(self) -> bool:
        return self.t.size >= 2

    def total(self) -> float:
        return float(self.cum[-1]) if self.ok else 0.0

    def between(self, a, b):
        """Integral over [a, b] (arrays ok); only meaningful inside [t0, t_end]."""
        return np.interp(b, self.t, self.cum) - np.interp(a, self.t, self.cum)


# ---------------------------------------------------------------------------- GPU rows


