"""Per-GPU statistics: power, temperatures, clocks, throttle time per reason, idle time and the
plotted series of one GPU (its rows merged from every log by reports/gpu_index.py)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from hpclaunch.monitors import schema
from hpclaunch.reports.energy import PowerIntegral, counter_total
from hpclaunch.reports.model import GAP_FACTOR, IDLE_UTIL_PCT, NEAR_SLOWDOWN_C, NOT_THROTTLE_BITS, POWER_BITS, THERMAL_BITS, rounded
from hpclaunch.reports.nanstats import nanmax, nanmean, nanmean_max, nanmin

# ---------------------------------------------------------------------------- per GPU


def bits_time(tri: np.ndarray, present: int, dt_left: np.ndarray, mask: int) -> float:
    """Seconds during which any bit of ``mask`` was set (left-sample rule)."""
    if not (present & mask):
        return 0.0
    return float(np.add.reduce(dt_left, where=(tri & mask) != 0))


def idle_counter_energy(t: np.ndarray, util: np.ndarray, p: np.ndarray, tv: np.ndarray,
                        inc: np.ndarray, valid: Optional[np.ndarray] = None) -> float:
    """Counter energy (its unit) drawn while the GPU was idle (left-sample util <= IDLE_UTIL_PCT).

    Counter readings ``tv`` are a subset of the sample times ``t`` (the monitor reads the counter
    every few samples). Each counter increment is split over the sample intervals inside it in
    proportion to their power trapezoid (their length where power is missing), and each part is
    idle or not by its own left sample. With a reading at every sample this is the plain sum of
    the idle increments. ``valid``: which samples are the readings ``tv`` (times strictly
    increasing): their running count finds each interval's reading without a search."""
    if t.size < 2 or inc.size == 0:
        return 0.0
    dt = np.diff(t)
    if valid is not None and inc.size == dt.size and bool((dt > 0).all()):
        # a reading at every sample: each increment is one interval's, idle or not (what the
        # weighting below comes to when every weight is positive)
        frac = (util[:-1] <= IDLE_UTIL_PCT).astype(np.float64)
        ok = ~np.isnan(inc)
        return float((inc[ok] * frac[ok]).sum())
    with np.errstate(invalid="ignore"):
        e = 0.5 * (p[1:] + p[:-1]) * dt
    if valid is not None:  # the counter interval of each one
        k = np.cumsum(valid[:-1], dtype=np.int64) - 1
    else:
        k = np.searchsorted(tv, t[:-1], side="right") - 1
    inside = (k >= 0) & (k < inc.size)
    k = np.where(inside, k, 0)
    inside &= t[1:] <= tv[np.minimum(k + 1, tv.size - 1)]
    idle = inside & (util[:-1] <= IDLE_UTIL_PCT)
    n = inc.size
    # power weights per counter interval where every part has power; else time weights
    has_p = np.isfinite(e)
    p_all = np.bincount(k[inside & ~has_p], minlength=n) == 0
    p_sum = np.bincount(k[inside & has_p], weights=e[inside & has_p], minlength=n)
    use_p = p_all & (p_sum > 0)
    w = np.where(use_p[k] & has_p, e, dt)
    w_sum = np.bincount(k[inside], weights=w[inside], minlength=n)
    w_idle = np.bincount(k[idle], weights=w[idle], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(w_sum > 0, w_idle / w_sum, 0.0)
    ok = ~np.isnan(inc)
    return float((inc[ok] * frac[ok]).sum())


class _Sampling:
    """One GPU's sample times and the intervals between them: gaps are intervals over
    GAP_FACTOR x the sampling interval; ``dt_left`` is the time each sample holds (the
    left-sample rule), 0 across a gap and after the last sample."""

    def __init__(self, t: np.ndarray, recorded_interval: Optional[float]):
        self.t = t
        self.dt = np.diff(t)
        self.interval = recorded_interval if recorded_interval else (
            float(np.median(self.dt)) if self.dt.size else None)
        self.source = "recorded" if recorded_interval else ("estimated" if self.interval else None)
        self.gap = self.dt > GAP_FACTOR * self.interval if self.interval else np.zeros(self.dt.size, bool)
        self.dt_left = np.concatenate([np.where(self.gap, 0.0, self.dt), [0.0]])


def gpu_stats(host, index, c: Dict[str, np.ndarray], txt: Dict[str, Dict[str, int]],
               job_t0, job_t1, bins, warnings: List[str], recorded_interval: Optional[float] = None
               ) -> Tuple[dict, dict]:
    """One GPU's statistics and plotted series. The sampling interval (gaps are intervals over
    GAP_FACTOR of it) is the one the daemon recorded for this host; only without one is it
    estimated from the timestamps (median spacing)."""
    name = f"{host}/gpu{index}"
    t = c["time_unix"]
    g: Dict[str, Any] = {"host": host, "index": index}
    g.update(identity(name, txt, warnings))
    g["samples"] = int(t.size)
    s = _Sampling(t, recorded_interval)
    g["interval_s"] = rounded(s.interval, 4)
    g["interval_source"] = s.source
    pint = PowerIntegral(t, c["power_w"])
    en = energy_stats(name, s, c, pint, warnings)
    window_s, energy_j, idle_j = en.pop("_window_s"), en.pop("_energy_j"), en.pop("_idle_j")
    g.update(en)
    g.update(power_stats(name, c["power_w"], c["power_limit_w"], window_s, energy_j, warnings))
    g.update(thermal_stats(name, s, c, warnings))
    g.update(memory_util_stats(name, s, c, warnings))
    g["idle_energy_j"] = rounded(idle_j)
    ul = ~np.isnan(c["util_pct"]) & (c["util_pct"] <= IDLE_UTIL_PCT)
    g["idle_s"] = rounded(s.dt_left[ul].sum(), 2) if g["avg_util_pct"] is not None else None
    g.update(throttle_stats(name, s, c, g["energy_notes"], warnings))
    ecc = c["ecc_dbe_total"]
    e0, e1 = nanmin(ecc), nanmax(ecc)
    g["ecc_dbe_new"] = None if e0 is None else int(e1 - e0)
    if g["ecc_dbe_new"]:
        warnings.append(f"{name}: {g['ecc_dbe_new']} new double-bit ECC errors")
    g["coverage"] = coverage(s, c["power_w"], pint, g["energy_source"], job_t0, job_t1)
    return g, series(t, c, job_t0, job_t1, bins)


def identity(name: str, txt: Dict[str, Dict[str, int]], warnings: List[str]) -> Dict[str, Any]:
    """UUID, the ranks that used the GPU, and the rows the daemon logged an error for."""
    uu = [u for u in txt.get("gpu_uuid", {}) if u]
    if len(uu) > 1:
        warnings.append(f"{name}: several UUIDs logged for one index: {', '.join(sorted(uu))}")
    ranks = set()
    for rv in txt.get("ranks", {}):
        for x in str(rv).split(";"):
            x = x.strip()
            if x.lstrip("-").isdigit():
                ranks.add(int(x))
    errs = {e: k for e, k in txt.get("error", {}).items() if e}
    out = {"uuid": uu[0] if uu else None, "ranks": sorted(ranks), "shared": len(ranks) > 1,
           "error_rows": int(sum(errs.values()))}
    if errs:
        warnings.append(f"{name}: {out['error_rows']} rows without measurements: "
                        + "; ".join(f"{e} (x{k})" for e, k in list(errs.items())[:3]))
    return out


def energy_stats(name: str, s: _Sampling, c: Dict[str, np.ndarray], pint: PowerIntegral,
                 warnings: List[str]) -> Dict[str, Any]:
    """The GPU's energy: the counter's differences when it has one (resets and uncovered window
    edges estimated from power), else the power trapezoid; idle energy and the cross-check of the
    two. Also returns, for the caller, ``_window_s`` (the time the energy covers), ``_energy_j``
    (unrounded) and ``_idle_j``."""
    t, p, util = s.t, c["power_w"], c["util_pct"]
    ctr = counter_total(t, c["energy_mj"])
    notes: List[str] = []
    src, energy, est_j, idle_j, window_s = None, None, 0.0, None, 0.0
    if ctr["total"] is not None:
        src = "counter"
        energy, est_j, (win_a, win_b) = _counter_energy(ctr, pint, t, notes)
        window_s = win_b - win_a
        idle_j = idle_counter_energy(t, util, p, ctr["t"], ctr["inc"], ctr["valid"]) / 1000.0
        # the monitor reads the counter every few samples: only a spacing well over its own is a gap
        # (none can be when no spacing is over the sampling interval's: no median then)
        dtv = s.dt if ctr["every"] else np.diff(ctr["t"])
        if s.interval and not (dtv > GAP_FACTOR * s.interval).any():
            ctr_gap = dtv[:0]
        else:
            ctr_step = max(s.interval or 0.0, float(np.median(dtv)))
            ctr_gap = dtv > GAP_FACTOR * ctr_step
        if ctr_gap.any():
            notes.append(f"{int(ctr_gap.sum())} gap(s): counter difference exact across them")
    elif pint.ok:
        src = "integrated_power"
        energy = pint.total()
        window_s = pint.t[-1] - pint.t[0]
        seg_gap = np.diff(pint.t) > GAP_FACTOR * s.interval if s.interval else np.zeros(pint.seg.size, bool)
        est_j = float(pint.seg[seg_gap].sum())
        if est_j:
            notes.append(f"{est_j:.1f} J over gaps linearly interpolated")
        u_left = util[~np.isnan(p)][:-1]
        idle_j = float(pint.seg[u_left <= IDLE_UTIL_PCT].sum())
    else:
        warnings.append(f"{name}: no energy counter and fewer than 2 power samples: energy unknown")
    if energy is not None and not (~np.isnan(util)).any():
        idle_j = None
    xc = crosscheck(t, c["energy_mj"], ctr, pint) if src == "counter" else None
    return {"energy_j": rounded(energy), "energy_source": src,
            "energy_estimated_j": rounded(est_j) if src else None,
            "counter_resets": len(ctr["resets"]) if ctr["total"] is not None else None,
            "energy_notes": notes,
            "crosscheck_pct": 0.0 if rounded(xc, 3) == 0 else rounded(xc, 3),  # no "-0.0"
            "_window_s": window_s, "_energy_j": energy, "_idle_j": idle_j}


def _counter_energy(ctr: Dict[str, Any], pint: PowerIntegral, t: np.ndarray, notes: List[str]):
    """(joules, of which estimated, (window start, end)): the counter's sum, plus the intervals
    across its resets and the head/tail of the sample window it does not cover, from power."""
    tv = ctr["t"]
    energy = ctr["total"] / 1000.0
    est_j = 0.0
    for a, b in ctr["resets"]:
        if pint.ok and pint.t[0] <= a and b <= pint.t[-1]:
            est_j += float(pint.between(a, b))
        else:  # mean counter power
            est_j += energy / max(tv[-1] - tv[0], 1e-9) * (b - a)
    energy += est_j
    if ctr["resets"]:
        notes.append(f"{len(ctr['resets'])} counter reset(s)/wrap(s); {est_j:.1f} J across them estimated")
    win_a, win_b = float(tv[0]), float(tv[-1])
    head = (t[0], tv[0]) if tv[0] > t[0] else None
    tail = (tv[-1], t[-1]) if tv[-1] < t[-1] else None
    for w in (head, tail):
        if w and pint.ok:
            a, b = max(w[0], pint.t[0]), min(w[1], pint.t[-1])
            if b > a:
                e = float(pint.between(a, b))
                est_j += e
                energy += e
                win_a, win_b = min(win_a, a), max(win_b, b)
                notes.append(f"counter missing for {b - a:.1f} s at the window edge; power integral used")
    return energy, est_j, (win_a, win_b)


def crosscheck(t: np.ndarray, counter: np.ndarray, ctr: Dict[str, Any], pint: PowerIntegral) -> Optional[float]:
    """(power integral - counter) / counter in %, over the window both cover."""
    if not (pint.ok and ctr["total"]):
        return None
    a = max(ctr["t"][0], pint.t[0])
    b = min(ctr["t"][-1], pint.t[-1])
    if b <= a:
        return None
    same = a == ctr["t"][0] and b == ctr["t"][-1]
    sub = ctr if same else counter_total(*window(t, counter, a, b))
    if not sub["total"]:
        return None
    integ = float(pint.between(a, b))
    # intervals across resets are power-estimated on both sides: compare the rest
    cj = sub["total"] / 1000.0 + sum(float(pint.between(ra, rb)) for ra, rb in sub["resets"])
    return (integ - cj) / cj * 100.0 if cj else None


def power_stats(name: str, p: np.ndarray, lim: np.ndarray, window_s: float, energy_j: Optional[float],
                warnings: List[str]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    out["avg_power_w"] = rounded(energy_j / window_s if energy_j is not None and window_s > 0 else None)
    out["max_power_w"] = mx = rounded(nanmax(p))
    out["power_limit_w"] = cap = rounded(nanmax(lim))
    lmin = nanmin(lim)
    if lmin is not None and cap is not None and lmin != cap:
        warnings.append(f"{name}: power limit changed during the job ({lmin:g}..{cap:g} W)")
    out["power_headroom_w"] = rounded(cap - mx if cap is not None and mx is not None else None)
    out["avg_power_pct_of_limit"] = rounded(100 * out["avg_power_w"] / cap
                                            if out["avg_power_w"] is not None and cap else None, 2)
    return out


def thermal_stats(name: str, s: _Sampling, c: Dict[str, np.ndarray], warnings: List[str]) -> Dict[str, Any]:
    temp = c["temp_c"]
    avg, mx = nanmean_max(temp)
    out: Dict[str, Any] = {"avg_temp_c": rounded(avg, 2), "max_temp_c": rounded(mx, 2),
                           "max_mem_temp_c": rounded(nanmax(c["mem_temp_c"]), 2)}
    sd = c["slowdown_temp_c"]
    lo, hi = nanmin(sd), nanmax(sd)
    if lo is not None and lo == hi:   # one threshold (usual): its median, without a sort
        slow = lo
    else:
        sdv = sd[~np.isnan(sd)]
        slow = float(np.median(sdv)) if sdv.size else None
    out["slowdown_temp_c"] = rounded(slow, 1)
    if slow is None:
        out["time_near_slowdown_s"] = None
        out["slowdown_margin_c"] = None
        warnings.append(f"{name}: slowdown threshold not reported; time near slowdown unknown")
        return out
    thr = sd if lo is not None and lo == hi and not np.isnan(sd).any() else np.where(np.isnan(sd), slow, sd)
    near = temp >= thr - NEAR_SLOWDOWN_C   # False where temp is NaN
    out["time_near_slowdown_s"] = rounded(s.dt_left[near].sum(), 2)
    out["slowdown_margin_c"] = rounded(slow - out["max_temp_c"] if out["max_temp_c"] is not None else None, 2)
    return out


def memory_util_stats(name: str, s: _Sampling, c: Dict[str, np.ndarray], warnings: List[str]) -> Dict[str, Any]:
    out = {"max_mem_used_mib": rounded(nanmax(c["mem_used_mib"]), 1),
           "mem_total_mib": rounded(nanmax(c["mem_total_mib"]), 1),
           "avg_util_pct": rounded(nanmean(c["util_pct"]), 2)}
    if out["avg_util_pct"] is None:
        warnings.append(f"{name}: utilisation not measured; idle energy unknown")
    return out


def throttle_stats(name: str, s: _Sampling, c: Dict[str, np.ndarray], notes: List[str],
                   warnings: List[str]) -> Dict[str, Any]:
    """Seconds of each throttle reason (and of power, thermal, any slowdown): NVML's violation
    counters where logged, the sampled bitmask elsewhere; how each figure was measured."""
    t, dt_left = s.t, s.dt_left
    tr = c["throttle_reasons"]
    tr_ok = ~np.isnan(tr)
    have_bits = bool(tr_ok.any())
    tri = np.where(tr_ok, tr, 0).astype(np.int64)
    present = int(np.bitwise_or.reduce(tri)) if tri.size else 0
    thr_s: Dict[str, Optional[float]] = {}
    thr_src: Dict[str, str] = {}

    def counter_or_bits(key, col, bits):
        """Cumulative counter differences where ``col`` was logged (exact, events between samples
        included); the bitmask (left-sample rule) before its first and after its last value, e.g.
        an attempt from before the column existed; the bitmask alone without the counter."""
        ctr = c.get(col)
        vc = counter_total(t, ctr) if ctr is not None else None
        if vc is None or vc["total"] is None:
            thr_s[key] = rounded(bits_time(tri, present, dt_left, bits), 2) if have_bits else None
            thr_src[key] = "bitmask" if have_bits else "missing"
            return
        secs = vc["total"] / 1e9
        thr_src[key] = "violation_counter"
        if vc["resets"]:
            notes.append(f"{col} went backwards {len(vc['resets'])} time(s); those intervals skipped")
        a, b = vc["t"][0], vc["t"][-1]
        # left samples of the intervals outside the counter's span (none but the last, which holds 0 s,
        # when the counter spans every sample)
        edges = None if (a == t[0] and b == t[-1]) else (t < a) | (t >= b)
        if edges is not None and float(dt_left[edges].sum()) > 0:
            if have_bits:
                secs += float(np.add.reduce(dt_left, where=edges & ((tri & bits) != 0)))
                thr_src[key] = "violation_counter+bitmask"
            notes.append(f"{col} logged for {b - a:.0f} of {float(t[-1] - t[0]):.0f} s; "
                         + ("the bitmask covers the rest" if have_bits else "the rest is not counted"))
        thr_s[key] = rounded(secs, 3)

    for bit, rname in schema.THROTTLE_REASONS.items():
        counter_or_bits(rname, schema.THROTTLE_COUNTER_COLUMNS.get(rname), bit)
    counter_or_bits("power", "viol_power_ns", POWER_BITS)
    counter_or_bits("thermal", "viol_thermal_ns", THERMAL_BITS)
    thr_s["any_slowdown"] = rounded(bits_time(tri, present, dt_left, 0x1FF & ~NOT_THROTTLE_BITS), 2) if have_bits else None
    thr_src["any_slowdown"] = "bitmask" if have_bits else "missing"
    if not have_bits:
        warnings.append(f"{name}: throttle_reasons not logged")
    return {"throttle_s": thr_s, "throttle_source": thr_src}


def coverage(s: _Sampling, p: np.ndarray, pint: PowerIntegral, src: Optional[str], job_t0, job_t1) -> Dict[str, Any]:
    """The GPU's sampled time, its gaps (the first 50, with the energy over each) and its share of the job."""
    t, gap = s.t, s.gap
    n = t.size
    gaps = []
    for i in np.flatnonzero(gap)[:50]:
        a, b = float(t[i]), float(t[i + 1])
        gaps.append({"start_unix": a, "end_unix": b, "duration_s": rounded(b - a, 3),
                     "energy_j": rounded(pint.between(a, b)) if pint.ok else None,
                     "energy_method": "counter (exact)" if src == "counter" else
                     ("linear interpolation" if src else None)})
    span = float(t[-1] - t[0]) if n else 0.0
    gap_s = float(s.dt[gap].sum()) if s.dt.size else 0.0
    job_span = max(job_t1 - job_t0, 1e-9)
    return {
        "first_unix": rounded(t[0], 3) if n else None, "last_unix": rounded(t[-1], 3) if n else None,
        "sampled_s": rounded(span - gap_s, 3), "gap_s": rounded(gap_s, 3), "n_gaps": int(gap.sum()),
        "pct_of_job": rounded(100.0 * (span - gap_s) / job_span, 3),
        "missing_power_samples": int(np.isnan(p).sum()), "gaps": gaps,
    }


def series(t: np.ndarray, c: Dict[str, np.ndarray], job_t0, job_t1, nb: int) -> Dict[str, Any]:
    """Power and utilisation (means) and temperature (max) in ``nb`` bins over the job window."""
    ser: Dict[str, Any] = {}
    if not t.size:
        return ser
    job_span = max(job_t1 - job_t0, 1e-9)
    b = np.clip(((t - job_t0) / job_span * nb).astype(np.int64), 0, nb - 1)
    ordered = bool((b[1:] >= b[:-1]).all())
    k_all = None
    for nm, a, how in (("power", c["power_w"], "mean"), ("temp", c["temp_c"], "max"), ("util", c["util_pct"], "mean")):
        ok = ~np.isnan(a)
        if how == "mean" and ok.all():   # every row measured (usual): no copies of the rows
            s = np.bincount(b, a, nb)
            k = k_all = np.bincount(b, None, nb) if k_all is None else k_all
            with np.errstate(invalid="ignore", divide="ignore"):
                ser[nm] = np.where(k > 0, s / np.maximum(k, 1), np.nan)
        elif how == "mean":
            s = np.bincount(b[ok], a[ok], nb)
            k = np.bincount(b[ok], None, nb)
            with np.errstate(invalid="ignore", divide="ignore"):
                ser[nm] = np.where(k > 0, s / np.maximum(k, 1), np.nan)
        elif ordered:   # times in order (gpu_rows sorts them): each bin's rows are one run
            m = np.full(nb, np.nan)
            starts = np.flatnonzero(np.concatenate([[True], b[1:] != b[:-1]]))
            m[b[starts]] = np.fmax.reduceat(a, starts)   # fmax: NaN only where the whole bin is
            ser[nm] = m
        else:
            m = np.full(nb, -np.inf)
            np.maximum.at(m, b[ok], a[ok]) if ok.sum() < 200000 else bin_max(m, b[ok], a[ok])
            ser[nm] = np.where(np.isfinite(m), m, np.nan)
    return ser


def bin_max(m, b, a):
    order = np.lexsort((a, b))
    bs = b[order]
    last = np.concatenate([bs[1:] != bs[:-1], [True]])
    m[bs[last]] = a[order][last]


def window(t, c, a, b):
    w = (t >= a) & (t <= b)
    return t[w], c[w]


# ---------------------------------------------------------------------------- host files


