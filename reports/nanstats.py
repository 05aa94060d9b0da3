"""NaN-aware reductions of a sample column (a numpy array): None where nothing was measured.

Apart from the report model (model.py) so that the fleet view, which reads only the registry's
ledger, does not load numpy."""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np


def nanmax(a) -> Optional[float]:
    if a.size == 0:
        return None
    v = float(np.fmax.reduce(a))  # ignores NaN unless all are NaN
    return None if math.isnan(v) else v


def nanmin(a) -> Optional[float]:
    if a.size == 0:
        return None
    v = float(np.fmin.reduce(a))
    return None if math.isnan(v) else v


def nanmean(a) -> Optional[float]:
    ok = ~np.isnan(a)
    k = int(np.count_nonzero(ok))
    return float(np.sum(a, where=ok) / k) if k else None


def nanmean_max(a) -> Tuple[Optional[float], Optional[float]]:
    """(mean, max) with the mean never above the max: the float sum of n equal readings can land
    an ulp above them (3 x 0.485 / 3 = 0.48500000000000004), and rounding both to the report's
    digits then prints an average over the maximum (0.49 > 0.48)."""
    m, x = nanmean(a), nanmax(a)
    return (x if m is not None and x is not None and m > x else m), x
