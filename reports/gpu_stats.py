"""Per-GPU statistics: rows of every log merged per GPU, then power, temperatures, clocks,
throttle time per reason, idle time and the plotted series of one GPU."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from hpclaunch.reports import readers
from hpclaunch.monitors import schema
from hpclaunch.reports.energy import PowerIntegral, counter_total
from hpclaunch.reports.model import GAP_FACTOR, IDLE_UTIL_PCT, NEAR_SLOWDOWN_C, NOT_THROTTLE_BITS, POWER_BITS, THERMAL_BITS, host_from_filename, rounded
from hpclaunch.reports.nanstats import nanmax, nanmean, nanmin

def index_gpu_tables(tables: List[readers.Table]):
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
        fname_host = host_from_filename(tb.path)
        hcodes, hdic = tb.text["host"]
        hnames = list(hdic) + [fname_host]
        hidx = np.where(hcodes < 0, len(hdic), hcodes).astype(np.int64)
        gi = tb.col("gpu_index")
        with np.errstate(invalid="ignore"):  # an index no GPU has (1e18, -1, 0.5) names none
            bad = ~((gi >= 0) & (gi < 100_000) & (gi == np.floor(gi)))
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


def gpu_rows(seglist, fcols) -> Tuple[Dict[str, np.ndarray], int, int]:
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


def bits_time(tri: np.ndarray, present: int, dt_left: np.ndarray, mask: int) -> float:
    """Seconds during which any bit of ``mask`` was set (left-sample rule)."""
    if not (present & mask):
        return 0.0
    return float(np.add.reduce(dt_left, where=(tri & mask) != 0))


def idle_counter_energy(t: np.ndarray, util: np.ndarray, p: np.ndarray, tv: np.ndarray,
                        inc: np.ndarray) -> float:
    """Counter energy (its unit) drawn while the GPU was idle (left-sample util <= IDLE_UTIL_PCT).

    Counter readings ``tv`` are a subset of the sample times ``t`` (the monitor reads the counter
    every few samples). Each counter increment is split over the sample intervals inside it in
    proportion to their power trapezoid (their length where power is missing), and each part is
    idle or not by its own left sample. With a reading at every sample this is the plain sum of
    the idle increments."""
    if t.size < 2 or inc.size == 0:
        return 0.0
    dt = np.diff(t)
    with np.errstate(invalid="ignore"):
        e = 0.5 * (p[1:] + p[:-1]) * dt
    k = np.searchsorted(tv, t[:-1], side="right") - 1          # the counter interval of each one
    inside = (k >= 0) & (k < inc.size)
    k = np.where(inside, k, 0)
    inside &= t[1:] <= tv[np.minimum(k + 1, tv.size - 1)]
    idle = inside & (util[:-1] <= IDLE_UTIL_PCT)
    n = inc.size
    # power weights per counter interval where every part has power; else time weights
    has_p = np.isfinite(e)
    p_all = np.bincount(k[inside], weights=has_p[inside].astype(float), minlength=n) == \
        np.bincount(k[inside], minlength=n)
    p_sum = np.bincount(k[inside & has_p], weights=e[inside & has_p], minlength=n)
    use_p = p_all & (p_sum > 0)
    w = np.where(use_p[k] & has_p, e, dt)
    w_sum = np.bincount(k[inside], weights=w[inside], minlength=n)
    w_idle = np.bincount(k[idle], weights=w[idle], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(w_sum > 0, w_idle / w_sum, 0.0)
    ok = ~np.isnan(inc)
    return float((inc[ok] * frac[ok]).sum())


def gpu_stats(host, index, c: Dict[str, np.ndarray], txt: Dict[str, Dict[str, int]],
               job_t0, job_t1, bins, warnings: List[str], recorded_interval: Optional[float] = None
               ) -> Tuple[dict, dict]:
    """One GPU's statistics. The sampling interval (gaps are intervals over GAP_FACTOR of it) is
    the one the daemon recorded for this host; only without one is it estimated from the
    timestamps (median spacing)."""
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
    interval = recorded_interval if recorded_interval else (float(np.median(dt)) if dt.size else None)
    g["interval_s"] = rounded(interval, 4)
    g["interval_source"] = "recorded" if recorded_interval else ("estimated" if interval else None)
    gap = dt > GAP_FACTOR * interval if interval else np.zeros(dt.size, bool)
    dt_eff = np.where(gap, 0.0, dt)
    dt_left = np.concatenate([dt_eff, [0.0]])  # sample i holds for the interval after it
    span = float(t[-1] - t[0]) if n else 0.0
    p = c["power_w"]
    pint = PowerIntegral(t, p)
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
        idle_j = idle_counter_energy(t, util, p, tv, ctr["inc"]) / 1000.0
        # the monitor reads the counter every few samples: only a spacing well over its own is a gap
        ctr_step = max(interval or 0.0, float(np.median(np.diff(tv))))
        ctr_gap = np.diff(tv) > GAP_FACTOR * ctr_step
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
    g["energy_j"] = rounded(energy)
    g["energy_source"] = src
    g["energy_estimated_j"] = rounded(est_j) if src else None
    g["counter_resets"] = len(ctr["resets"]) if ctr["total"] is not None else None
    g["energy_notes"] = notes
    # cross-check over the counter window
    xc = None
    if src == "counter" and pint.ok and ctr["total"]:
        a = max(ctr["t"][0], pint.t[0])
        b = min(ctr["t"][-1], pint.t[-1])
        if b > a:
            same = a == ctr["t"][0] and b == ctr["t"][-1]
            sub = ctr if same else counter_total(*window(t, c["energy_mj"], a, b))
            if sub["total"]:
                integ = float(pint.between(a, b))
                # intervals across resets are power-estimated on both sides: compare the rest
                cj = sub["total"] / 1000.0 + sum(float(pint.between(ra, rb)) for ra, rb in sub["resets"])
                xc = (integ - cj) / cj * 100.0 if cj else None
    g["crosscheck_pct"] = rounded(xc, 3)
    if g["crosscheck_pct"] == 0:
        g["crosscheck_pct"] = 0.0  # no "-0.0"
    # ---- power
    win = (win_b - win_a) if src == "counter" else (pint.t[-1] - pint.t[0] if pint.ok else 0)
    g["avg_power_w"] = rounded(energy / win if energy is not None and win > 0 else None)
    g["max_power_w"] = rounded(nanmax(p))
    lim = c["power_limit_w"]
    g["power_limit_w"] = rounded(nanmax(lim))
    lmin = nanmin(lim)
    if lmin is not None and g["power_limit_w"] is not None and lmin != g["power_limit_w"]:
        warnings.append(f"{name}: power limit changed during the job ({lmin:g}..{g['power_limit_w']:g} W)")
    g["power_headroom_w"] = rounded(g["power_limit_w"] - g["max_power_w"]
                               if g["power_limit_w"] is not None and g["max_power_w"] is not None else None)
    g["avg_power_pct_of_limit"] = rounded(100 * g["avg_power_w"] / g["power_limit_w"]
                                     if g["avg_power_w"] is not None and g["power_limit_w"] else None, 2)
    # ---- thermal
    temp = c["temp_c"]
    g["avg_temp_c"] = rounded(nanmean(temp), 2)
    g["max_temp_c"] = rounded(nanmax(temp), 2)
    g["max_mem_temp_c"] = rounded(nanmax(c["mem_temp_c"]), 2)
    sd = c["slowdown_temp_c"]
    sdv = sd[~np.isnan(sd)]
    slow = float(np.median(sdv)) if sdv.size else None
    g["slowdown_temp_c"] = rounded(slow, 1)
    if slow is None:
        g["time_near_slowdown_s"] = None
        g["slowdown_margin_c"] = None
        warnings.append(f"{name}: slowdown threshold not reported; time near slowdown unknown")
    else:
        thr = sd.copy()
        thr[np.isnan(thr)] = slow
        near = (temp >= thr - NEAR_SLOWDOWN_C) & ~np.isnan(temp)
        g["time_near_slowdown_s"] = rounded(dt_left[near].sum(), 2)
        g["slowdown_margin_c"] = rounded(slow - g["max_temp_c"] if g["max_temp_c"] is not None else None, 2)
    # ---- memory / util
    g["max_mem_used_mib"] = rounded(nanmax(c["mem_used_mib"]), 1)
    g["mem_total_mib"] = rounded(nanmax(c["mem_total_mib"]), 1)
    g["avg_util_pct"] = rounded(nanmean(util), 2)
    if g["avg_util_pct"] is None:
        warnings.append(f"{name}: utilisation not measured; idle energy unknown")
    g["idle_energy_j"] = rounded(idle_j)
    ul = ~np.isnan(util) & (util <= IDLE_UTIL_PCT)
    g["idle_s"] = rounded(dt_left[ul].sum(), 2) if g["avg_util_pct"] is not None else None
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
            thr_s[key] = rounded(bits_time(tri, present, dt_left, bits), 2) if have_bits else None
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
        thr_s[key] = rounded(secs, 3)

    for bit, rname in schema.THROTTLE_REASONS.items():
        counter_or_bits(rname, schema.THROTTLE_COUNTER_COLUMNS.get(rname), bit)
    counter_or_bits("power", "viol_power_ns", POWER_BITS)
    counter_or_bits("thermal", "viol_thermal_ns", THERMAL_BITS)
    thr_s["any_slowdown"] = rounded(bits_time(tri, present, dt_left, 0x1FF & ~NOT_THROTTLE_BITS), 2) if have_bits else None
    thr_src["any_slowdown"] = "bitmask" if have_bits else "missing"
    g["throttle_s"] = thr_s
    g["throttle_source"] = thr_src
    if not have_bits:
        warnings.append(f"{name}: throttle_reasons not logged")
    ecc = c["ecc_dbe_total"]
    e0, e1 = nanmin(ecc), nanmax(ecc)
    g["ecc_dbe_new"] = None if e0 is None else int(e1 - e0)
    if g["ecc_dbe_new"]:
        warnings.append(f"{name}: {g['ecc_dbe_new']} new double-bit ECC errors")
    # ---- coverage
    gaps = []
    for i in np.flatnonzero(gap)[:50]:
        a, b = float(t[i]), float(t[i + 1])
        gaps.append({"start_unix": a, "end_unix": b, "duration_s": rounded(b - a, 3),
                     "energy_j": rounded(pint.between(a, b)) if pint.ok else None,
                     "energy_method": "counter (exact)" if src == "counter" else
                     ("linear interpolation" if src else None)})
    gap_s = float(dt[gap].sum()) if dt.size else 0.0
    job_span = max(job_t1 - job_t0, 1e-9)
    g["coverage"] = {
        "first_unix": rounded(t[0], 3) if n else None, "last_unix": rounded(t[-1], 3) if n else None,
        "sampled_s": rounded(span - gap_s, 3), "gap_s": rounded(gap_s, 3), "n_gaps": int(gap.sum()),
        "pct_of_job": rounded(100.0 * (span - gap_s) / job_span, 3),
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
                np.maximum.at(m, b[ok], a[ok]) if ok.sum() < 200000 else bin_max(m, b[ok], a[ok])
                ser[nm] = np.where(np.isfinite(m), m, np.nan)
    return g, ser


def bin_max(m, b, a):
    order = np.lexsort((a, b))
    bs = b[order]
    last = np.concatenate([bs[1:] != bs[:-1], [True]])
    m[bs[last]] = a[order][last]


def window(t, c, a, b):
    w = (t >= a) & (t <= b)
    return t[w], c[w]


# ---------------------------------------------------------------------------- host files


