"""Numeric tuning knobs read from the environment (HPCLAUNCH_HEARTBEAT_S, HPCLAUNCH_SLURM_RETRIES,
...; docs/environment.md). A value that is not a number, not finite or out of its range is the
user's input like any other: one line naming the variable, the value and what to use, exit 2 —
never a traceback, and never a silent fallback to the default that hides the typo."""
from __future__ import annotations

import math
import os
from typing import Mapping, Optional

from .errors import HpclaunchError


def number(name: str, default: float, lo: float, hi: float, *, integer: bool = False,
           env: Optional[Mapping[str, str]] = None) -> float:
    """``name``'s value (unset or empty: ``default``), checked to lie in [lo, hi]."""
    raw = (os.environ if env is None else env).get(name, "")
    if raw.strip() == "":
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or not lo <= value <= hi:
        kind = "a whole number" if integer else "a number"
        raise HpclaunchError(f"environment: {name}={raw[:40]!r} is not {kind} from {lo:g} to {hi:g}; "
                             f"set one in that range, or unset it for the default ({default:g})")
    return value
