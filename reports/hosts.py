"""Per-host statistics: CPU, memory, load, RAPL energy and CPU temperatures from the host logs."""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np

from hpclaunch.reports import readers
from hpclaunch.reports.energy import counter_total
from hpclaunch.reports.model import host_from_filename, rounded
from hpclaunch.reports.nanstats import nanmax, nanmean_max

def host_stats(tables: List[readers.Table], warnings, unavailable: Dict[str, Dict[str, str]] | None = None
               ) -> Dict[str, dict]:
    """Per host: CPU energy (RAPL), CPU, memory and load over the job, temperatures, the monitor's
    own cost. `unavailable` ({host: {source: reason}}, from the events logs) says why RAPL is missing."""
    unavailable = unavailable or {}
    rows: Dict[str, List[Tuple[readers.Table, np.ndarray]]] = {}
    for tb in tables:
        if tb.n == 0:
            continue
        fname_host = host_from_filename(tb.path)
        codes, dic = tb.text["host"]
        names = np.array(list(dic) + [fname_host], dtype=object)
        hv = names[np.where(codes < 0, len(dic), codes)]
        for h in dict.fromkeys(hv.tolist()):
            rows.setdefault(h, []).append((tb, hv == h))
    out = {}
    for h, parts in rows.items():
        cols = {c: np.concatenate([tb.col(c)[m] for tb, m in parts]) for c in readers.HOST_NUMERIC}
        t = cols["time_unix"]
        o = np.argsort(t, kind="stable")
        t = t[o]
        keep = np.concatenate([[True], np.diff(t) > 0]) & ~np.isnan(t)
        cols = {c: a[o][keep] for c, a in cols.items()}
        t = cols["time_unix"]
        d: Dict[str, Any] = {"first_unix": float(t[0]) if t.size else None,
                             "last_unix": float(t[-1]) if t.size else None, "samples": int(t.size)}
        rc = counter_total(t, cols["rapl_energy_uj"])
        if rc["total"] is not None:
            e = rc["total"] / 1e6
            if rc["resets"]:
                tv = rc["t"]
                rate = e / max(tv[-1] - tv[0] - sum(b - a for a, b in rc["resets"]), 1e-9)
                est = rate * sum(b - a for a, b in rc["resets"])
                e += est
                warnings.append(f"{h}: RAPL counter went backwards {len(rc['resets'])} time(s); "
                                f"{est:.1f} J estimated at the mean rate")
            d["cpu_energy_j"] = e
            d["cpu_energy_source"] = "rapl"
            d["cpu_window_s"] = float(rc["t"][-1] - rc["t"][0])
        else:
            d["cpu_energy_j"] = None
            d["cpu_energy_source"] = None
            d["cpu_window_s"] = None
            why = unavailable.get(h, {}).get("rapl") or "the host log has no RAPL readings"
            warnings.append(f"{h}: CPU energy unknown: {why}")
        mc = counter_total(t, cols["monitor_cpu_s"])
        span = float(t[-1] - t[0]) if t.size > 1 else None
        d["monitor_cpu_s"] = rounded(mc["total"], 3)
        d["monitor_cpu_pct_of_core"] = rounded(100 * mc["total"] / span, 4) if mc["total"] is not None and span else None
        d["monitor_max_rss_mib"] = rounded(nanmax(cols["monitor_rss_mib"]), 1)
        d["max_cpu_temp_c"] = rounded(nanmax(cols["cpu_temp_c"]), 1)
        avg, mx = nanmean_max(cols["cpu_pct"])
        d["avg_cpu_pct"], d["max_cpu_pct"] = rounded(avg, 2), rounded(mx, 2)
        avg, mx = nanmean_max(cols["mem_used_mib"])
        d["avg_host_mem_used_mib"], d["max_host_mem_used_mib"] = rounded(avg, 1), rounded(mx, 1)
        d["host_mem_total_mib"] = rounded(nanmax(cols["mem_total_mib"]), 1)
        avg, mx = nanmean_max(cols["load1"])
        d["avg_load1"], d["max_load1"] = rounded(avg, 2), rounded(mx, 2)
        out[h] = d
    return out


# ---------------------------------------------------------------------------- metrics


