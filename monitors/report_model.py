"""Computation of the power/thermal report from a run directory (pure: reads files only).

Conventions (documented in docs/report-schema.md):

* A GPU is identified by (host, gpu_index). Rows are merged from every ``*.gpu.csv`` in
  ``monitor/``, sorted by time, and exact duplicates on (host, gpu_index, time_unix) — overlapping
  or copied files — are dropped (first kept).
* Energy per GPU: ``"counter"`` = sum of ``energy_mj`` differences between consecutive valid
  samples; a counter going backwards (driver reload, reset, wrap) starts a new segment and the
  interval across the break is estimated from the power trapezoid (counted in
  ``energy_estimated_j``). Without a counter: ``"integrated_power"`` = trapezoid of ``power_w``
  over valid samples; intervals longer than 3 sampling intervals (gaps) are linear
  interpolations and are flagged. Both exist -> ``crosscheck_pct`` = (integral - counter)/counter.
* Time-based statistics (throttle, near-slowdown, idle) use the left-sample rule: a sample's state
  holds until the next sample; gap intervals are excluded.
* Missing data is ``None`` plus a warning, never 0.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from . import readers, report_xid, schema

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


def _f(x) -> Optional[float]:
    """float or None (NaN/inf -> None)."""
    if x is None:
        return None
    try:
        x = float(x)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _r(x, nd=3) -> Optional[float]:
    x = _f(x)
    return None if x is None else round(x, nd)


def _nanmax(a) -> Optional[float]:
    if a.size == 0:
        return None
    v = float(np.fmax.reduce(a))  # ignores NaN unless all are NaN
    return None if math.isnan(v) else v


def _nanmin(a) -> Optional[float]:
    if a.size == 0:
        return None
    v = float(np.fmin.reduce(a))
    return None if math.isnan(v) else v


def _nanmean(a) -> Optional[float]:
    ok = ~np.isnan(a)
    k = int(np.count_nonzero(ok))
    return float(np.sum(a, where=ok) / k) if k else None


def _host_from_filename(path) -> str:
    """Host name from ``<host>.gpu.csv`` etc. (used only when the host cell is empty)."""
    name = Path(path).name
    for suf in (".gpu.csv", ".host.csv", ".power_trace.csv", ".events.jsonl"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return name.split(".")[0]


def _add(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return a + b


# ---------------------------------------------------------------------------- counters


def counter_total(t: np.ndarray, c: np.ndarray) -> Dict[str, Any]:
    """Sum of non-negative differences of a cumulative counter over its valid samples.

    Returns dict(total, resets=list of (t_before, t_after), t_first, t_last, n_valid, dts of
    the valid-subsequence intervals and their increments for callers that attribute them)."""
    v = ~np.isnan(c)
    tv, cv = t[v], c[v]
    out: Dict[str, Any] = {"n_valid": int(tv.size), "t": tv}
    if tv.size < 2:
        out.update(total=None, resets=[], inc=np.empty(0))
        return out
    inc = np.diff(cv)
    back = inc < 0
    resets = [(float(tv[i]), float(tv[i + 1])) for i in np.flatnonzero(back)]
    inc = np.where(back, np.nan, inc)
    out.update(total=float(np.nansum(inc)), resets=resets, inc=inc)
    return out


class _PowerIntegral:
    """Cumulative trapezoid of valid power samples; integral between any two times."""

    def __init__(self, t: np.ndarray, p: np.ndarray):
        v = ~np.isnan(p)
        self.t = t[v]
        self.p = p[v]
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


def _index_gpu_tables(tables: List[readers.Table]):
    """Assign a GPU id per (host, gpu_index) and sort each file's rows by GPU (stable, so time
    order within a file is kept). Sorting per file keeps the gathers cache-resident.

    Returns (keys: list[(host, index)], segs: gid -> [(file, a, b)], per-file sorted columns,
    text value counts per gid, stats)."""
    key_to_gid: Dict[Tuple[str, int], int] = {}
    segs: Dict[int, List[Tuple[int, int, int]]] = {}
    fcols: List[Dict[str, np.ndarray]] = []
    txt: Dict[str, Dict[int, Dict[str, int]]] = {c: {} for c in ("gpu_uuid", "ranks", "error")}
    stats = {"rows": 0, "unindexed": 0, "bad_time": 0}
    M = 1_000_003
    for fi, tb in enumerate(tables):
        if tb.n == 0:
            fcols.append({})
            continue
        stats["rows"] += tb.n
        fname_host = _host_from_filename(tb.path)
        hcodes, hdic = tb.text["host"]
        hnames = list(hdic) + [fname_host]
        hidx = np.where(hcodes < 0, len(hdic), hcodes).astype(np.int64)
        gi = tb.col("gpu_index")
        bad = np.isnan(gi)
        stats["unindexed"] += int(bad.sum())
        local = hidx * M + (np.where(bad, -1, gi).astype(np.int64) + 1)
        uniq, inv = np.unique(local, return_inverse=True)
        lut = np.empty(uniq.size, np.int32)
        for j, lk in enumerate(uniq.tolist()):
            hi, ix = divmod(lk, M)
            lut[j] = key_to_gid.setdefault((str(hnames[hi]), ix - 1), len(key_to_gid))
        gid_f = lut[inv.reshape(-1)]
        k = uniq.size
        n = gid_f.size
        cols = readers.GPU_NUMERIC + tuple(c for c in readers.GPU_OPTIONAL if c in tb.num)
        if k == 1:
            fcols.append(dict(tb.num))
            segs.setdefault(int(gid_f[0]), []).append((fi, slice(0, n)))
        elif n % k == 0 and np.array_equal(gid_f.reshape(-1, k), np.broadcast_to(gid_f[:k], (n // k, k))):
            # the daemon's usual layout: one row per GPU per sweep, same order -> strided views
            # the daemon's usual layout: one row per GPU per sweep, same order -> a blocked
            # transpose makes each GPU's rows contiguous (cheaper than a gather or strided views)
            m = n // k
            fcols.append({c: np.ascontiguousarray(tb.col(c).reshape(m, k).T).reshape(-1)
                          for c in cols})
            for j in range(k):
                segs.setdefault(int(gid_f[j]), []).append((fi, slice(j * m, (j + 1) * m)))
        else:
            order = np.argsort(gid_f.astype(np.int16) if len(key_to_gid) < 32000 else gid_f, kind="stable")
            gs = gid_f[order]
            fcols.append({c: tb.col(c)[order] for c in cols})
            bounds = np.flatnonzero(gs[1:] != gs[:-1]) + 1
            st = np.concatenate([[0], bounds])
            en = np.concatenate([bounds, [gs.size]])
            for a_, b_ in zip(st.tolist(), en.tolist()):
                segs.setdefault(int(gs[a_]), []).append((fi, slice(a_, b_)))
        for c in readers.GPU_NUMERIC:
            fcols[-1].setdefault(c, np.full(n, np.nan))
        tb.num = {}
        for c in txt:
            codes, dic = tb.text[c]
            pair = codes.astype(np.int64) * 65536 + gid_f
            up, cnt = np.unique(pair, return_counts=True)
            for p_, k_ in zip(up.tolist(), cnt.tolist()):
                code, gg = divmod(p_, 65536)
                val = dic[code] if code >= 0 else ""
                dd = txt[c].setdefault(gg, {})
                dd[val] = dd.get(val, 0) + k_
    keys: List[Tuple[str, int]] = [None] * len(key_to_gid)  # type: ignore
    for k, g in key_to_gid.items():
        keys[g] = k
    return keys, segs, fcols, txt, stats


def _gpu_rows(seglist, fcols) -> Tuple[Dict[str, np.ndarray], int, int]:
    """One GPU's rows from all files: time-sorted, exact duplicates on time dropped.
    Returns (columns, duplicates removed, rows without a time)."""
    if len(seglist) == 1:
        fi, sl = seglist[0]
        cols = {c: v[sl] for c, v in fcols[fi].items()}
    else:
        cols = {c: np.concatenate([fcols[fi][c][sl] for fi, sl in seglist]) for c in readers.GPU_NUMERIC}
        for c in readers.GPU_OPTIONAL:  # files from before the column: NaN for their rows
            if any(c in fcols[fi] for fi, _ in seglist):
                cols[c] = np.concatenate([fcols[fi][c][sl] if c in fcols[fi] else
                                          np.full(fcols[fi]["time_unix"][sl].size, np.nan)
                                          for fi, sl in seglist])
    t = cols["time_unix"]
    nan_t = np.isnan(t)
    nbad = int(nan_t.sum())
    if nbad:
        cols = {c: v[~nan_t] for c, v in cols.items()}
        t = cols["time_unix"]
    d = np.diff(t)
    if (d < 0).any():
        o = np.argsort(t, kind="stable")
        cols = {c: v[o] for c, v in cols.items()}
        t = cols["time_unix"]
        d = np.diff(t)
    dup = d == 0
    ndup = int(dup.sum())
    if ndup:
        keep = np.concatenate([[True], ~dup])
        cols = {c: v[keep] for c, v in cols.items()}
    return cols, ndup, nbad


# ---------------------------------------------------------------------------- per GPU


def _bits_time(tri: np.ndarray, present: int, dt_left: np.ndarray, mask: int) -> float:
    """Seconds during which any bit of ``mask`` was set (left-sample rule)."""
    if not (present & mask):
        return 0.0
    return float(np.add.reduce(dt_left, where=(tri & mask) != 0))


def _gpu_stats(host, index, c: Dict[str, np.ndarray], txt: Dict[str, Dict[str, int]],
               job_t0, job_t1, bins, warnings: List[str]) -> Tuple[dict, dict]:
    name = f"{host}/gpu{index}"
    t = c["time_unix"]
    n = t.size
    g: Dict[str, Any] = {"host": host, "index": index}
    uu = [u for u in txt.get("gpu_uuid", {}) if u]
    g["uuid"] = uu[0] if uu else None
    if len(uu) > 1:
        warnings.append(f"{name}: several UUIDs logged for one index: {', '.join(sorted(uu))}")
    ranks: List[int] = []
    for rv in txt.get("ranks", {}):
        for x in str(rv).split(";"):
            x = x.strip()
            if x.lstrip("-").isdigit():
                ranks.append(int(x))
    g["ranks"] = sorted(set(ranks))
    g["shared"] = len(g["ranks"]) > 1
    errs = {e: k for e, k in txt.get("error", {}).items() if e}
    g["error_rows"] = int(sum(errs.values()))
    if errs:
        warnings.append(f"{name}: {g['error_rows']} rows without measurements: "
                        + "; ".join(f"{e} (x{k})" for e, k in list(errs.items())[:3]))
    g["samples"] = int(n)
    dt = np.diff(t)
    interval = float(np.median(dt)) if dt.size else None
    g["interval_s"] = _r(interval, 4)
    gap = dt > GAP_FACTOR * interval if interval else np.zeros(dt.size, bool)
    dt_eff = np.where(gap, 0.0, dt)
    dt_left = np.concatenate([dt_eff, [0.0]])  # sample i holds for the interval after it
    span = float(t[-1] - t[0]) if n else 0.0
    p = c["power_w"]
    pint = _PowerIntegral(t, p)
    ctr = counter_total(t, c["energy_mj"])
    util = c["util_pct"]

    # ---- energy
    est_j = 0.0
    src = None
    energy = None
    notes: List[str] = []
    interp_j = 0.0
    if ctr["total"] is not None:
        src = "counter"
        energy = ctr["total"] / 1000.0
        tv = ctr["t"]
        # intervals across a reset: estimate from power
        for a, b in ctr["resets"]:
            if pint.ok and pint.t[0] <= a and b <= pint.t[-1]:
                e = float(pint.between(a, b))
                how = "power trapezoid"
            else:
                rate = energy / max(tv[-1] - tv[0], 1e-9)
                e = rate * (b - a)
                how = "mean counter power"
            est_j += e
        energy += est_j
        if ctr["resets"]:
            notes.append(f"{len(ctr['resets'])} counter reset(s)/wrap(s); {est_j:.1f} J across them "
                         "estimated")
        # uncovered head/tail of this GPU's sample window (counter cells missing there)
        head = (t[0], tv[0]) if tv[0] > t[0] else None
        tail = (tv[-1], t[-1]) if tv[-1] < t[-1] else None
        win_a, win_b = float(tv[0]), float(tv[-1])
        for w in (head, tail):
            if w and pint.ok:
                a, b = max(w[0], pint.t[0]), min(w[1], pint.t[-1])
                if b > a:
                    e = float(pint.between(a, b))
                    est_j += e
                    energy += e
                    win_a, win_b = min(win_a, a), max(win_b, b)
                    notes.append(f"counter missing for {b - a:.1f} s at the window edge; power integral used")
        # idle energy from counter increments, left-sample util
        vmask = ~np.isnan(c["energy_mj"])
        u_left = util[vmask][:-1]
        inc = ctr["inc"]
        idle_mask = (u_left <= IDLE_UTIL_PCT) & ~np.isnan(inc)
        idle_j = float(inc[idle_mask].sum()) / 1000.0
        ctr_gap = np.diff(tv) > GAP_FACTOR * interval if interval else np.zeros(tv.size - 1, bool)
        if ctr_gap.any():
            notes.append(f"{int(ctr_gap.sum())} gap(s): counter difference exact across them")
    elif pint.ok:
        src = "integrated_power"
        energy = pint.total()
        seg_gap = np.diff(pint.t) > GAP_FACTOR * interval if interval else np.zeros(pint.seg.size, bool)
        interp_j = float(pint.seg[seg_gap].sum())
        est_j = interp_j
        if interp_j:
            notes.append(f"{interp_j:.1f} J over gaps linearly interpolated")
        vmask = ~np.isnan(p)
        u_left = util[vmask][:-1]
        idle_j = float(pint.seg[u_left <= IDLE_UTIL_PCT].sum())
    else:
        idle_j = None
        warnings.append(f"{name}: no energy counter and fewer than 2 power samples: energy unknown")
    if energy is not None and not (~np.isnan(util)).any():
        idle_j = None
    g["energy_j"] = _r(energy)
    g["energy_source"] = src
    g["energy_estimated_j"] = _r(est_j) if src else None
    g["counter_resets"] = len(ctr["resets"]) if ctr["total"] is not None else None
    g["energy_notes"] = notes
    # cross-check over the counter window
    xc = None
    if src == "counter" and pint.ok and ctr["total"]:
        a = max(ctr["t"][0], pint.t[0])
        b = min(ctr["t"][-1], pint.t[-1])
        if b > a:
            same = a == ctr["t"][0] and b == ctr["t"][-1]
            sub = ctr if same else counter_total(*_window(t, c["energy_mj"], a, b))
            if sub["total"]:
                integ = float(pint.between(a, b))
                # intervals across resets are power-estimated on both sides: compare the rest
                cj = sub["total"] / 1000.0 + sum(float(pint.between(ra, rb)) for ra, rb in sub["resets"])
                xc = (integ - cj) / cj * 100.0 if cj else None
    g["crosscheck_pct"] = _r(xc, 3)
    if g["crosscheck_pct"] == 0:
        g["crosscheck_pct"] = 0.0  # no "-0.0"
    # ---- power
    win = (win_b - win_a) if src == "counter" else (pint.t[-1] - pint.t[0] if pint.ok else 0)
    g["avg_power_w"] = _r(energy / win if energy is not None and win > 0 else None)
    g["max_power_w"] = _r(_nanmax(p))
    lim = c["power_limit_w"]
    g["power_limit_w"] = _r(_nanmax(lim))
    lmin = _nanmin(lim)
    if lmin is not None and g["power_limit_w"] is not None and lmin != g["power_limit_w"]:
        warnings.append(f"{name}: power limit changed during the job ({lmin:g}..{g['power_limit_w']:g} W)")
    g["power_headroom_w"] = _r(g["power_limit_w"] - g["max_power_w"]
                               if g["power_limit_w"] is not None and g["max_power_w"] is not None else None)
    g["avg_power_pct_of_limit"] = _r(100 * g["avg_power_w"] / g["power_limit_w"]
                                     if g["avg_power_w"] is not None and g["power_limit_w"] else None, 2)
    # ---- thermal
    temp = c["temp_c"]
    g["avg_temp_c"] = _r(_nanmean(temp), 2)
    g["max_temp_c"] = _r(_nanmax(temp), 2)
    g["max_mem_temp_c"] = _r(_nanmax(c["mem_temp_c"]), 2)
    sd = c["slowdown_temp_c"]
    sdv = sd[~np.isnan(sd)]
    slow = float(np.median(sdv)) if sdv.size else None
    g["slowdown_temp_c"] = _r(slow, 1)
    if slow is None:
        g["time_near_slowdown_s"] = None
        g["slowdown_margin_c"] = None
        warnings.append(f"{name}: slowdown threshold not reported; time near slowdown unknown")
    else:
        thr = sd.copy()
        thr[np.isnan(thr)] = slow
        near = (temp >= thr - NEAR_SLOWDOWN_C) & ~np.isnan(temp)
        g["time_near_slowdown_s"] = _r(dt_left[near].sum(), 2)
        g["slowdown_margin_c"] = _r(slow - g["max_temp_c"] if g["max_temp_c"] is not None else None, 2)
    # ---- memory / util
    g["max_mem_used_mib"] = _r(_nanmax(c["mem_used_mib"]), 1)
    g["mem_total_mib"] = _r(_nanmax(c["mem_total_mib"]), 1)
    g["avg_util_pct"] = _r(_nanmean(util), 2)
    if g["avg_util_pct"] is None:
        warnings.append(f"{name}: utilisation not measured; idle energy unknown")
    g["idle_energy_j"] = _r(idle_j)
    ul = ~np.isnan(util) & (util <= IDLE_UTIL_PCT)
    g["idle_s"] = _r(dt_left[ul].sum(), 2) if g["avg_util_pct"] is not None else None
    # ---- throttle
    tr = c["throttle_reasons"]
    thr_s: Dict[str, Optional[float]] = {}
    thr_src: Dict[str, str] = {}
    tr_ok = ~np.isnan(tr)
    have_bits = bool(tr_ok.any())
    tri = np.where(tr_ok, tr, 0).astype(np.int64)
    present = int(np.bitwise_or.reduce(tri)) if tri.size else 0
    def counter_or_bits(key, col, bits):
        """Cumulative counter differences where ``col`` was logged (exact, events between samples
        included); the bitmask (left-sample rule) before its first and after its last value, e.g.
        an attempt from before the column existed; the bitmask alone without the counter."""
        ctr = c.get(col)
        vc = counter_total(t, ctr) if ctr is not None else None
        if vc is None or vc["total"] is None:
            thr_s[key] = _r(_bits_time(tri, present, dt_left, bits), 2) if have_bits else None
            thr_src[key] = "bitmask" if have_bits else "missing"
            return
        secs = vc["total"] / 1e9
        thr_src[key] = "violation_counter"
        if vc["resets"]:
            notes.append(f"{col} went backwards {len(vc['resets'])} time(s); those intervals skipped")
        a, b = vc["t"][0], vc["t"][-1]
        edges = (t < a) | (t >= b)  # left samples of the intervals outside the counter's span
        if float(dt_left[edges].sum()) > 0:
            if have_bits:
                secs += float(np.add.reduce(dt_left, where=edges & ((tri & bits) != 0)))
                thr_src[key] = "violation_counter+bitmask"
            notes.append(f"{col} logged for {b - a:.0f} of {float(t[-1] - t[0]):.0f} s; "
                         + ("the bitmask covers the rest" if have_bits else "the rest is not counted"))
        thr_s[key] = _r(secs, 3)

    for bit, rname in schema.THROTTLE_REASONS.items():
        counter_or_bits(rname, schema.THROTTLE_COUNTER_COLUMNS.get(rname), bit)
    counter_or_bits("power", "viol_power_ns", POWER_BITS)
    counter_or_bits("thermal", "viol_thermal_ns", THERMAL_BITS)
    thr_s["any_slowdown"] = _r(_bits_time(tri, present, dt_left, 0x1FF & ~NOT_THROTTLE_BITS), 2) if have_bits else None
    thr_src["any_slowdown"] = "bitmask" if have_bits else "missing"
    g["throttle_s"] = thr_s
    g["throttle_source"] = thr_src
    if not have_bits:
        warnings.append(f"{name}: throttle_reasons not logged")
    ecc = c["ecc_dbe_total"]
    e0, e1 = _nanmin(ecc), _nanmax(ecc)
    g["ecc_dbe_new"] = None if e0 is None else int(e1 - e0)
    if g["ecc_dbe_new"]:
        warnings.append(f"{name}: {g['ecc_dbe_new']} new double-bit ECC errors")
    # ---- coverage
    gaps = []
    for i in np.flatnonzero(gap)[:50]:
        a, b = float(t[i]), float(t[i + 1])
        gaps.append({"start_unix": a, "end_unix": b, "duration_s": _r(b - a, 3),
                     "energy_j": _r(pint.between(a, b)) if pint.ok else None,
                     "energy_method": "counter (exact)" if src == "counter" else
                     ("linear interpolation" if src else None)})
    gap_s = float(dt[gap].sum()) if dt.size else 0.0
    job_span = max(job_t1 - job_t0, 1e-9)
    g["coverage"] = {
        "first_unix": _r(t[0], 3) if n else None, "last_unix": _r(t[-1], 3) if n else None,
        "sampled_s": _r(span - gap_s, 3), "gap_s": _r(gap_s, 3), "n_gaps": int(gap.sum()),
        "pct_of_job": _r(100.0 * (span - gap_s) / job_span, 3),
        "missing_power_samples": int(np.isnan(p).sum()), "gaps": gaps,
    }
    # ---- series (binned over the job window)
    ser: Dict[str, Any] = {}
    nb = bins
    if n:
        b = np.clip(((t - job_t0) / job_span * nb).astype(np.int64), 0, nb - 1)
        for nm, a, how in (("power", p, "mean"), ("temp", temp, "max"), ("util", util, "mean")):
            ok = ~np.isnan(a)
            if how == "mean":
                s = np.bincount(b[ok], a[ok], nb)
                k = np.bincount(b[ok], None, nb)
                with np.errstate(invalid="ignore", divide="ignore"):
                    ser[nm] = np.where(k > 0, s / np.maximum(k, 1), np.nan)
            else:
                m = np.full(nb, -np.inf)
                np.maximum.at(m, b[ok], a[ok]) if ok.sum() < 200000 else _bin_max(m, b[ok], a[ok])
                ser[nm] = np.where(np.isfinite(m), m, np.nan)
    return g, ser


def _bin_max(m, b, a):
    order = np.lexsort((a, b))
    bs = b[order]
    last = np.concatenate([bs[1:] != bs[:-1], [True]])
    m[bs[last]] = a[order][last]


def _window(t, c, a, b):
    w = (t >= a) & (t <= b)
    return t[w], c[w]


# ---------------------------------------------------------------------------- host files


def _host_stats(tables: List[readers.Table], warnings) -> Dict[str, dict]:
    rows: Dict[str, List[Tuple[readers.Table, np.ndarray]]] = {}
    for tb in tables:
        if tb.n == 0:
            continue
        fname_host = _host_from_filename(tb.path)
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
            warnings.append(f"{h}: no RAPL energy in the host log (not readable without privileges?): "
                            "CPU energy unknown")
        mc = counter_total(t, cols["monitor_cpu_s"])
        span = float(t[-1] - t[0]) if t.size > 1 else None
        d["monitor_cpu_s"] = _r(mc["total"], 3)
        d["monitor_cpu_pct_of_core"] = _r(100 * mc["total"] / span, 4) if mc["total"] is not None and span else None
        d["monitor_max_rss_mib"] = _r(_nanmax(cols["monitor_rss_mib"]), 1)
        d["max_cpu_temp_c"] = _r(_nanmax(cols["cpu_temp_c"]), 1)
        d["avg_cpu_pct"] = _r(_nanmean(cols["cpu_pct"]), 2)
        d["max_host_mem_used_mib"] = _r(_nanmax(cols["mem_used_mib"]), 1)
        out[h] = d
    return out


# ---------------------------------------------------------------------------- metrics


def _metrics(run_dir, warnings) -> Optional[dict]:
    files = readers.metrics_files(run_dir)
    if not files:
        return None
    per_rank: Dict[int, dict] = {}
    all_step, all_loss, all_sps, all_t = [], [], [], []
    val: List[Tuple[float, float, Optional[float]]] = []
    bad_total = 0
    for f in files:
        m = re.match(r"rank(\d+)\.jsonl$", f.name)
        if not m:
            continue
        rank = int(m.group(1))
        a, bad = readers.read_metrics_arrays(f)
        bad_total += bad
        st = a["is_step"]
        # a record stands for `steps` optimizer steps (train_entry --log-every N; absent: 1)
        covered = a["steps"][st] if "steps" in a else np.full(int(st.sum()), np.nan)
        nsteps = int(np.where(np.isnan(covered), 1.0, covered).sum())
        stt = a["step_time_s"][st]
        stt = stt[~np.isnan(stt)]
        smp = a["samples"][st]
        tt = a["time_unix"][st]
        tt = tt[~np.isnan(tt)]
        lo = a["loss"][st]
        lo_ok = lo[~np.isnan(lo)]
        per_rank[rank] = {
            "steps": nsteps,
            "samples": float(np.nansum(smp)) if nsteps and (~np.isnan(smp)).any() else None,
            "median_step_time_s": float(np.median(stt)) if stt.size else None,
            "mean_step_time_s": float(np.mean(stt)) if stt.size else None,
            "first_unix": float(tt.min()) if tt.size else None,
            "last_unix": float(tt.max()) if tt.size else None,
            "final_loss": float(lo_ok[-1]) if lo_ok.size else None,
        }
        sv = a["step"][st]
        okv = ~np.isnan(sv)
        all_step.append(sv[okv])
        all_loss.append(lo[okv])
        all_sps.append(a["samples_per_s"][st][okv])
        all_t.append(a["time_unix"][st][okv])
        ep = a["is_epoch"]
        for t_, vl, va in zip(a["time_unix"][ep].tolist(), a["val_loss"][ep].tolist(), a["val_accuracy"][ep].tolist()):
            if vl == vl:
                val.append((t_ if t_ == t_ else 0.0, vl, va if va == va else None))
    if bad_total:
        warnings.append(f"metrics: {bad_total} unparsable line(s) skipped (partial last lines?)")
    loss, tput = [], []
    if all_step:
        sv = np.concatenate(all_step)
        if sv.size:
            u, inv = np.unique(sv, return_inverse=True)
            lo = np.concatenate(all_loss)
            sp = np.concatenate(all_sps)
            ok = ~np.isnan(lo)
            ls = np.bincount(inv[ok], lo[ok], u.size)
            lk = np.bincount(inv[ok], None, u.size)
            ok2 = ~np.isnan(sp)
            ts = np.bincount(inv[ok2], sp[ok2], u.size)
            tk = np.bincount(inv[ok2], None, u.size)
            loss = [(int(s_), float(a_ / k_)) for s_, a_, k_ in zip(u.tolist(), ls.tolist(), lk.tolist()) if k_]
            tput = [(int(s_), float(a_)) for s_, a_, k_ in zip(u.tolist(), ts.tolist(), tk.tolist()) if k_]
    return {"per_rank": per_rank, "loss": loss, "throughput": tput, "val": sorted(val), "files": len(files)}


# ---------------------------------------------------------------------------- job info


def _job_info(run_dir: Path, warnings) -> dict:
    job: Dict[str, Any] = {"run_dir": str(run_dir), "id": None, "name": None}
    m = re.match(r"^(.*)-(\d+)$", run_dir.name)
    if m:
        job["name"], job["id"] = m.group(1), m.group(2)
    elif run_dir.name.startswith("task") and run_dir.parent.name:
        m2 = re.match(r"^(.*)-(\d+)$", run_dir.parent.name)
        if m2:
            job["name"], job["id"] = m2.group(1), f"{m2.group(2)}_{run_dir.name[4:]}"
    jy = run_dir / "job.yaml"
    if jy.is_file():
        try:
            import yaml  # launcher dependency
            d = yaml.safe_load(jy.read_text()) or {}
            if isinstance(d, dict):
                if d.get("name"):
                    job["name"] = str(d["name"])
                for k in ("job_id", "jobid", "id"):
                    if d.get(k) is not None:
                        job["id"] = str(d[k])
                        break
                res = d.get("resources") if isinstance(d.get("resources"), dict) else {}
                for k in ("user", "partition", "account"):
                    v = d.get(k) or res.get(k)
                    if v:
                        job[k] = str(v)
        except Exception as e:  # noqa: BLE001
            warnings.append(f"job.yaml unreadable: {e}")
    return job


# ---------------------------------------------------------------------------- build


def build(run_dir, engine: str = "auto", bins: int = SERIES_BINS) -> Report:
    run_dir = Path(run_dir)
    warnings: List[str] = []
    files = readers.monitor_files(run_dir)
    job = _job_info(run_dir, warnings)
    if not files["gpu"]:
        warnings.append(f"no GPU logs in {run_dir / schema.MONITOR_DIR}: GPU energy unknown")
    gtabs = [readers.read_gpu_log(p, engine) for p in files["gpu"]]
    htabs = [readers.read_host_log(p, engine) for p in files["host"]]
    skipped = 0
    engines = set()
    for tb in gtabs + htabs:
        warnings.extend(tb.warnings)
        skipped += tb.skipped_rows
        engines.add(tb.engine)
        miss = [c for c in tb.missing_columns if c not in ("ecc_dbe_total",)]
        if miss:
            warnings.append(f"{tb.path}: columns absent: {', '.join(miss)} (treated as not measured)")
    if skipped:
        warnings.append(f"{skipped} malformed row(s) skipped (unterminated last lines or cell-count mismatches)")
    keys, segs, fcols, txt, mstats = _index_gpu_tables(gtabs)
    hosts = _host_stats(htabs, warnings)
    # job window
    starts, ends = [], []
    for fc in fcols:
        tt = fc.get("time_unix")
        if tt is not None and tt.size and not np.isnan(tt).all():
            starts.append(float(np.nanmin(tt)))
            ends.append(float(np.nanmax(tt)))
    for h in hosts.values():
        if h["first_unix"] is not None:
            starts.append(h["first_unix"])
            ends.append(h["last_unix"])
    t0 = min(starts) if starts else None
    t1 = max(ends) if ends else None
    duration = (t1 - t0) if t0 is not None else None
    if duration is None:
        warnings.append("no samples at all: duration unknown")
    gpus: List[dict] = []
    series: Dict[str, Any] = {"t0": t0, "t1": t1, "bins": bins, "gpu": {}}
    gpu_peak = None
    node_peak: Dict[str, float] = {}
    ndup_total = 0
    if keys and duration is not None:
        # bin width for the job-level peak power: median sampling interval of a few GPUs
        probe = []
        for g_ in list(segs)[:8]:
            fi, sl0 = segs[g_][0]
            tt = fcols[fi]["time_unix"][sl0]
            if tt.size > 1:
                probe.append(float(np.median(np.diff(tt))))
        step = max(float(np.median(probe)) if probe else 1.0, 1e-3)
        nb = int(min(max(duration / step, 1), 2_000_000)) + 1
        tot = np.zeros(nb)
        per_host: Dict[str, np.ndarray] = {}
        for g_ in sorted(segs, key=lambda k: keys[k]):
            host, idx = keys[g_]
            if idx < 0:
                warnings.append(f"{host}: {sum(fcols[fi]['time_unix'][sl].size for fi, sl in segs[g_])} "
                                "rows without gpu_index ignored")
                continue
            sl, ndup, nbad = _gpu_rows(segs[g_], fcols)
            ndup_total += ndup
            if nbad:
                warnings.append(f"{host}/gpu{idx}: {nbad} rows without time_unix ignored")
            if sl["time_unix"].size == 0:
                continue
            gt = {c: txt[c].get(g_, {}) for c in txt}
            gs, ser = _gpu_stats(host, idx, sl, gt, t0, t1, bins, warnings)
            gpus.append(gs)
            series["gpu"][f"{host}/{idx}"] = ser
            p = sl["power_w"]
            ok = ~np.isnan(p)
            if ok.any():
                bi = ((sl["time_unix"][ok] - t0) / step).astype(np.int64)
                s_ = np.bincount(bi, p[ok], nb)
                k_ = np.bincount(bi, None, nb)
                m_ = np.where(k_ > 0, s_ / np.maximum(k_, 1), 0.0)
                tot += m_
                if host not in per_host:
                    per_host[host] = np.zeros(nb)
                per_host[host] += m_
        gpu_peak = float(tot.max()) if per_host else None
        node_peak = {h: float(v.max()) for h, v in per_host.items()}
    mstats["duplicates"] = ndup_total
    report_xid.apply(gpus, report_xid.read(files["events"]), warnings)  # gpus[].xids, from the events files
    del fcols
    # ---- optional high-rate power traces: peak power per GPU
    trace: Dict[Tuple[str, int], Tuple[float, float, int]] = {}
    for p_ in files["power_trace"]:
        tb = readers.read_power_trace(p_, engine)
        warnings.extend(tb.warnings)
        if tb.skipped_rows:
            skipped += tb.skipped_rows
            warnings.append(f"{p_.name}: {tb.skipped_rows} malformed power-trace row(s) skipped")
        if tb.n == 0:
            continue
        hv = tb.text_values("host")
        fname_host = _host_from_filename(p_)
        gi = tb.col("gpu_index")
        pw = tb.col("power_w")
        tt = tb.col("time_unix")
        for h_ in set(hv.tolist()):
            for i_ in np.unique(gi[~np.isnan(gi)]).tolist():
                m_ = (hv == h_) & (gi == i_)
                pm = _nanmax(pw[m_])
                ts_ = np.unique(tt[m_][~np.isnan(tt[m_])])
                iv = float(np.median(np.diff(ts_))) if ts_.size > 1 else None
                key = (h_ or fname_host, int(i_))
                old_ = trace.get(key)
                if pm is not None:
                    trace[key] = (max(pm, old_[0]) if old_ else pm, iv, int(m_.sum()) + (old_[2] if old_ else 0))
    for g in gpus:
        tr_ = trace.get((g["host"], g["index"]))
        g["max_power_trace_w"] = _r(tr_[0]) if tr_ else None
        g["trace_interval_s"] = _r(tr_[1], 4) if tr_ else None
    # ---- metrics and ranks
    met = _metrics(run_dir, warnings)
    rank_gpus: Dict[int, List[dict]] = {}
    for g in gpus:
        for r in g["ranks"]:
            rank_gpus.setdefault(r, []).append(g)
    if gpus and not rank_gpus:
        warnings.append("no rank-to-GPU mapping in the GPU logs (ranks column empty): per-rank energy unknown")
    all_ranks = set(rank_gpus) | (set(met["per_rank"]) if met else set())
    ranks: List[dict] = []
    med_all = None
    if met:
        meds = [v["median_step_time_s"] for v in met["per_rank"].values() if v["median_step_time_s"] is not None]
        med_all = float(np.median(meds)) if meds else None
    for r in sorted(all_ranks):
        gl = rank_gpus.get(r, [])
        e = None
        if gl:
            parts = [g["energy_j"] / len(g["ranks"]) if g["energy_j"] is not None else None for g in gl]
            e = None if any(x is None for x in parts) else sum(parts)
        mr = met["per_rank"].get(r) if met else None
        rd: Dict[str, Any] = {
            "rank": r, "host": gl[0]["host"] if gl else None,
            "gpus": [f"{g['host']}/{g['index']}" for g in gl],
            "energy_j": _r(e), "gpu_shared_by": max((len(g["ranks"]) for g in gl), default=None),
            "energy_split": "even share of a shared GPU" if any(g["shared"] for g in gl) else
            ("whole GPU" if gl else None),
        }
        if mr:
            ms = mr["median_step_time_s"]
            rd.update(steps=mr["steps"], samples=mr["samples"], median_step_time_s=_r(ms, 6),
                      slowdown_vs_median=_r(ms / med_all, 4) if ms and med_all else None,
                      final_loss=_r(mr["final_loss"], 6),
                      energy_per_sample_j=_r(e / mr["samples"]) if e is not None and mr["samples"] else None)
        else:
            rd.update(steps=None, samples=None, median_step_time_s=None, slowdown_vs_median=None,
                      final_loss=None, energy_per_sample_j=None)
        ranks.append(rd)
    # ---- nodes
    node_names = sorted(set(g["host"] for g in gpus) | set(hosts))
    nodes = []
    for h in node_names:
        gl = [g for g in gpus if g["host"] == h]
        ge = [g["energy_j"] for g in gl]
        gsum = None if (not gl or any(x is None for x in ge)) else sum(ge)
        if gl and gsum is None and any(x is not None for x in ge):
            gsum = sum(x for x in ge if x is not None)
            warnings.append(f"{h}: GPU energy is a lower bound (some GPUs unknown)")
        hd = hosts.get(h, {})
        ce = hd.get("cpu_energy_j")
        if h not in hosts:
            warnings.append(f"{h}: no host log: CPU energy and monitor overhead unknown")
        nodes.append({
            "host": h, "gpus": [g["index"] for g in gl],
            "energy_j": {"gpu": _r(gsum), "cpu": _r(ce), "total": _r(_add(gsum, ce))},
            "cpu_energy_source": hd.get("cpu_energy_source"),
            "avg_power_w": {"gpu": _r(gsum / duration if gsum is not None and duration else None),
                            "cpu": _r(ce / hd["cpu_window_s"] if ce is not None and hd.get("cpu_window_s") else None)},
            "peak_gpu_power_w": _r(node_peak.get(h)),
            "max_gpu_temp_c": _r(max((g["max_temp_c"] for g in gl if g["max_temp_c"] is not None), default=None), 2),
            "max_cpu_temp_c": hd.get("max_cpu_temp_c"), "avg_cpu_pct": hd.get("avg_cpu_pct"),
            "monitor": {"cpu_s": hd.get("monitor_cpu_s"), "cpu_pct_of_core": hd.get("monitor_cpu_pct_of_core"),
                        "max_rss_mib": hd.get("monitor_max_rss_mib")},
        })
    # ---- totals
    gvals = [g["energy_j"] for g in gpus]
    gpu_total = sum(x for x in gvals if x is not None) if gvals and any(x is not None for x in gvals) else None
    gpu_complete = bool(gvals) and all(x is not None for x in gvals)
    cvals = [hosts[h]["cpu_energy_j"] for h in hosts]
    cpu_total = sum(x for x in cvals if x is not None) if any(x is not None for x in cvals) else None
    cpu_complete = bool(cvals) and all(x is not None for x in cvals) and set(hosts) >= set(g["host"] for g in gpus)
    total = _add(gpu_total, cpu_total)
    if gpu_total is not None and not gpu_complete:
        warnings.append("GPU energy total is a lower bound: some GPUs have unknown energy")
    if total is not None and not cpu_complete:
        warnings.append("total energy excludes CPU energy of hosts without RAPL data")
    idle_vals = [g["idle_energy_j"] for g in gpus]
    idle = sum(x for x in idle_vals if x is not None) if any(x is not None for x in idle_vals) else None
    # efficiency
    eff: Dict[str, Any] = {"steps": None, "samples": None, "energy_per_step_j": None, "energy_per_sample_j": None}
    if met and met["per_rank"]:
        steps = max(v["steps"] for v in met["per_rank"].values())
        samples = sum(v["samples"] or 0 for v in met["per_rank"].values())
        eff["steps"] = steps or None
        eff["samples"] = samples or None
        eff["energy_per_step_j"] = {"gpu": _r(gpu_total / steps if gpu_total is not None and steps else None),
                                    "total": _r(total / steps if total is not None and steps and cpu_complete else None)}
        eff["energy_per_sample_j"] = {"gpu": _r(gpu_total / samples if gpu_total is not None and samples else None, 6),
                                      "total": _r(total / samples if total is not None and samples and cpu_complete else None, 6)}
        if not samples:
            warnings.append("metrics have no 'samples' counts: energy per sample unknown")
    else:
        warnings.append("no metrics/rank*.jsonl: energy per step/sample and stragglers unknown")
    # stragglers
    strag = None
    if met and med_all:
        rr = [r for r in ranks if r.get("slowdown_vs_median")]
        rr.sort(key=lambda r: -r["slowdown_vs_median"])
        meds = [r["median_step_time_s"] for r in rr]
        strag = {
            "median_step_time_s": _r(med_all, 6),
            "slowest_rank": rr[0]["rank"] if rr else None,
            "slowest_ratio": rr[0]["slowdown_vs_median"] if rr else None,
            "fastest_ratio": rr[-1]["slowdown_vs_median"] if rr else None,
            "spread_pct": _r(100 * (max(meds) - min(meds)) / med_all, 3) if meds else None,
            "threshold_ratio": STRAGGLER_RATIO,
            "ranks": [{"rank": r["rank"], "host": r["host"], "ratio": r["slowdown_vs_median"],
                       "median_step_time_s": r["median_step_time_s"]}
                      for r in rr if r["slowdown_vs_median"] >= STRAGGLER_RATIO][:20],
        }
    # throttle totals
    thr_tot: Dict[str, Optional[float]] = {}
    for g in gpus:
        for k, v in g["throttle_s"].items():
            if v is not None:
                thr_tot[k] = round(thr_tot.get(k, 0.0) + v, 3)
    # coverage
    pcts = [g["coverage"]["pct_of_job"] for g in gpus if g["coverage"]["pct_of_job"] is not None]
    all_gaps = [dict(gap, host=g["host"], index=g["index"]) for g in gpus for gap in g["coverage"]["gaps"]]
    for gap in all_gaps[:20]:
        warnings.append(f"{gap['host']}/gpu{gap['index']}: sampling gap of {gap['duration_s']:.1f} s "
                        f"(energy: {gap['energy_method']})")
    if len(all_gaps) > 20:
        warnings.append(f"... {len(all_gaps) - 20} more sampling gaps (see coverage.gaps)")
    for g in gpus:
        for nt in g["energy_notes"]:
            warnings.append(f"{g['host']}/gpu{g['index']}: {nt}")
    xcs = [g["crosscheck_pct"] for g in gpus if g["crosscheck_pct"] is not None]
    coverage = {
        "gpu_rows_read": mstats["rows"] if mstats else 0,
        "duplicate_rows_removed": mstats["duplicates"] if mstats else 0,
        "malformed_rows_skipped": skipped,
        "gap_threshold": f"{GAP_FACTOR:g} x median sampling interval",
        "min_gpu_coverage_pct": min(pcts) if pcts else None,
        "gaps": all_gaps[:200], "n_gaps": len(all_gaps),
        "energy_sources": {(s or "unknown"): sum(1 for g in gpus if g["energy_source"] == s)
                           for s in ("counter", "integrated_power", None) if any(g["energy_source"] == s for g in gpus)},
        "crosscheck_pct": {"min": min(xcs), "max": max(xcs), "median": _r(float(np.median(xcs)), 3)} if xcs else None,
        "files": {k: [p.name for p in v] for k, v in files.items()},
        "reader": sorted(engines),
    }
    mon_cpu = [n["monitor"]["cpu_pct_of_core"] for n in nodes if n["monitor"]["cpu_pct_of_core"] is not None]
    mon_rss = [n["monitor"]["max_rss_mib"] for n in nodes if n["monitor"]["max_rss_mib"] is not None]
    data = {
        "schema": REPORT_SCHEMA,
        "job": job,
        "window": {"start_unix": t0, "end_unix": t1},
        "duration_s": _r(duration, 3),
        "energy_j": {"total": _r(total), "gpu": _r(gpu_total), "cpu": _r(cpu_total),
                     "complete": bool(gpu_complete and cpu_complete)},
        "energy_kwh": {"total": _r(total / 3.6e6 if total is not None else None, 6),
                       "gpu": _r(gpu_total / 3.6e6 if gpu_total is not None else None, 6),
                       "cpu": _r(cpu_total / 3.6e6 if cpu_total is not None else None, 6)},
        "power_w": {"gpu_avg": _r(gpu_total / duration if gpu_total is not None and duration else None),
                    "gpu_peak": _r(gpu_peak),
                    "cpu_avg": _r(cpu_total / duration if cpu_total is not None and duration else None),
                    "peak_method": "max over time bins (median sampling interval) of the sum of per-GPU mean power"},
        "idle": {"energy_j": _r(idle), "share_of_gpu_pct": _r(100 * idle / gpu_total if idle is not None and gpu_total else None, 3),
                 "gpu_s": _r(sum(g["idle_s"] for g in gpus if g["idle_s"] is not None), 2) if gpus else None,
                 "util_threshold_pct": IDLE_UTIL_PCT},
        "efficiency": eff,
        "throttle_total_s": thr_tot,
        "nodes": nodes,
        "gpus": gpus,
        "ranks": ranks,
        "stragglers": strag,
        "coverage": coverage,
        "monitor_overhead": {"max_cpu_pct_of_core": max(mon_cpu) if mon_cpu else None,
                             "max_rss_mib": max(mon_rss) if mon_rss else None,
                             "cpu_s_total": _r(sum(n["monitor"]["cpu_s"] for n in nodes if n["monitor"]["cpu_s"] is not None), 3) if mon_cpu else None},
        "warnings": warnings,
    }
    if met:
        series["loss"] = _downsample(met["loss"], 400)
        series["throughput"] = _downsample(met["throughput"], 400)
        series["val"] = met["val"]
    return Report(data=data, series=series)


def _downsample(pairs, k):
    if len(pairs) <= k:
        return list(pairs)
    idx = np.linspace(0, len(pairs) - 1, k).astype(int)
    return [pairs[i] for i in idx]
