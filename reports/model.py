"""The report document's vocabulary: its schema name, thresholds, throttle reasons, the Report
record, and the small numeric helpers every part of the model uses."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from hpclaunch.monitors import schema

REPORT_SCHEMA = "hpclaunch.report/1"
GAP_FACTOR = 3.0
NEAR_SLOWDOWN_C = 5.0
IDLE_UTIL_PCT = 1.0
SERIES_BINS = 240
STRAGGLER_RATIO = 1.05

POWER_BITS = 0x4 | 0x80          # sw_power_cap, hw_power_brake_slowdown
THERMAL_BITS = 0x20 | 0x40       # sw_thermal_slowdown, hw_thermal_slowdown
NOT_THROTTLE_BITS = 0x1 | 0x2 | 0x100  # idle, application clocks, display clock: not slowdowns
SLOWDOWN_REASONS = tuple(name for bit, name in sorted(schema.THROTTLE_REASONS.items()) if not bit & NOT_THROTTLE_BITS)


@dataclass
class Report:
    """``data`` is the JSON document (schema hpclaunch.report/1); ``series`` holds plot data."""

    data: Dict[str, Any]
    series: Dict[str, Any] = field(default_factory=dict)

    @property
    def warnings(self) -> List[str]:
        return self.data["warnings"]


def throttle_by_reason(gpu: Dict[str, Any]) -> List[Tuple[str, float, bool]]:
    """(reason, seconds, counted) for each slowdown reason with time on this GPU, in bit order, for
    the text and HTML views: the JSON's own ``throttle_s`` figures, no second computation.
    ``counted``: an NVML counter measured it (exact), rather than the sampled bitmask."""
    ts, src = gpu["throttle_s"], gpu["throttle_source"]
    return [(r, ts[r], src.get(r, "").startswith("violation_counter")) for r in SLOWDOWN_REASONS if ts.get(r)]


def throttle_by_reason_cell(gpu: Dict[str, Any]) -> str:
    """``reason=seconds`` per slowdown reason with time, ``*`` for an NVML counter figure, for the
    text and HTML tables; no space inside an item, so a wrapped cell breaks between reasons."""
    return "; ".join(f"{r}={v:,.1f}{'*' if c else ''}" if isinstance(v, float) else f"{r}={v}{'*' if c else ''}"
                     for r, v, c in throttle_by_reason(gpu))


def num(x) -> Optional[float]:
    """float or None (NaN/inf -> None)."""
    if x is None:
        return None
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def rounded(x, nd=3) -> Optional[float]:
    x = num(x)
    return None if x is None else round(x, nd)


def host_from_filename(path) -> str:
    """Host name from ``<host>.gpu.csv`` etc. (used only when the host cell is empty)."""
    name = Path(path).name
    for suf in (".gpu.csv", ".host.csv", ".power_trace.csv", ".events.jsonl"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return name.split(".")[0]


def add_or_none(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a + b


# ---------------------------------------------------------------------------- counters


def clean(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if hasattr(x, "item"):  # numpy scalar
        return clean(x.item())
    return x


def reasons_text(reasons: Dict[str, float]) -> str:
    """'sw_power_cap 180 s, hw_slowdown 3 s' for the text and HTML tables; '' for none."""
    return ", ".join(f"{r} {v:.0f} s" for r, v in reasons.items())


def energy_text(j: Optional[float], nd: int = 1) -> str:
    """Joules in the unit a reader wants: J, kJ, or kWh (two more decimals); n/a when unknown."""
    if j is None:
        return "n/a"
    if abs(j) >= 3.6e5:
        return f"{j / 3.6e6:,.{nd + 2}f} kWh"
    if abs(j) >= 1e3:
        return f"{j / 1e3:,.{nd}f} kJ"
    return f"{j:,.{nd}f} J"


def duration_text(s: Optional[float]) -> str:
    """Seconds in the unit a reader wants: 16 s, 4 min 05 s, 2 h 07 min, 3 d 04 h; n/a when unknown."""
    if s is None:
        return "n/a"
    s = float(s)
    if s < 60:
        return f"{s:.1f} s" if s < 10 else f"{s:.0f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    if s < 86400:
        return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"
    return f"{int(s // 86400)} d {int(s % 86400 // 3600):02d} h"


def sources_text(sources: Dict[str, int]) -> str:
    """{'counter': 4} -> 'counter: 4 GPU(s)'; 'none' when empty."""
    return ", ".join(f"{k}: {v} GPU(s)" for k, v in (sources or {}).items()) or "none"


def crosscheck_text(xc: Optional[Dict[str, float]]) -> str:
    """The counter-vs-integrated-power spread, '+0.12..+0.80 %'; 'n/a' without both sources."""
    if not xc or xc.get("min") is None or xc.get("max") is None:
        return "n/a"
    return f"{xc['min']:+.2f}..{xc['max']:+.2f} %"


# The per-rank memory view (text and HTML): heading, key of a rank's "memory" (document.rank_memory).
MEMORY_COLUMNS = (("params+grads+optim MiB", "state_mib"), ("params", "params_mib"), ("grads", "grads_mib"),
                  ("optimizer", "optimizer_mib"), ("peak RSS MiB", "peak_rss_mib"),
                  ("CUDA peak MiB", "cuda_peak_mib"), ("GPU used MiB", "gpu_mem_used_mib"))
