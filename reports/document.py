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

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from hpclaunch.monitors import schema
from hpclaunch.reports import attempts, columnar, events, readers, xid
from hpclaunch.reports.gpu_index import gpu_rows, index_gpu_tables
from hpclaunch.reports.gpu_stats import gpu_stats
from hpclaunch.reports.hosts import host_stats
from hpclaunch.reports.metrics import job_info, metrics_summary, rank_hosts
from hpclaunch.reports.plausible import Window, drop_implausible, report_window, run_ended
from hpclaunch.reports.model import GAP_FACTOR, IDLE_UTIL_PCT, REPORT_SCHEMA, Report, SERIES_BINS, STRAGGLER_RATIO, add_or_none, host_from_filename, rounded
from hpclaunch.reports.nanstats import nanmax

PEAK_BINS = 2_000_000  # time bins of the job-level peak power at most (16 MB an array)

# Cumulative counters: a negative reading is a glitch, never a value (nor a reset: resets go to 0).
GPU_COUNTERS = ("energy_mj", "viol_power_ns", "viol_thermal_ns", "ecc_dbe_total") + \
    tuple(schema.THROTTLE_COUNTER_COLUMNS.values())
HOST_COUNTERS = ("rapl_energy_uj", "monitor_cpu_s")


def build(run_dir, engine: str = "auto", bins: int = SERIES_BINS, logs_final: bool = False) -> Report:
    """``logs_final``: the caller knows every monitor of the run has stopped (the job script's epilogue),
    so the logs' columnar copies may be written now, before the run's record says it ended."""
    run_dir = Path(run_dir)
    warnings: List[str] = []
    files = readers.monitor_files(run_dir)
    job = job_info(run_dir, warnings)
    if not files["gpu"]:
        warnings.append(f"no GPU logs in {run_dir / schema.MONITOR_DIR}: GPU energy unknown")
    copies = columnar.Policy(True if logs_final else run_ended(run_dir)) if engine == "auto" else None
    # The ranks' metrics are read beside the monitor logs and the per-GPU statistics (pyarrow and
    # numpy leave the GIL): a first report parses both. Their warnings join at the same place as ever.
    pool = ThreadPoolExecutor(max_workers=1)
    met_warnings: List[str] = []
    met_future = pool.submit(metrics_summary, run_dir, met_warnings, copies)
    pool.shutdown(wait=False)
    logs = Logs(report_window(run_dir), engine, warnings, copies)
    # indexed as they are read: one file's raw columns in memory at a time, the reader's tables untouched
    keys, segs, fcols, txt, mstats = index_gpu_tables(logs.read(files["gpu"], readers.read_gpu_log, GPU_COUNTERS))
    htabs = list(logs.read(files["host"], readers.read_host_log, HOST_COUNTERS))
    if logs.skipped:
        warnings.append(f"{logs.skipped} malformed row(s) skipped (unterminated last lines or cell-count mismatches)")
    hosts = host_stats(htabs, warnings, events.unavailable_sources(files["events"]))
    t0, t1 = job_window(fcols, hosts)
    duration = (t1 - t0) if t0 is not None else None
    if duration is None:
        warnings.append("no samples at all: duration unknown")
    per_gpu = PerGpu(keys, segs, fcols, txt, warnings)
    if keys and duration is not None:
        per_gpu.run(t0, t1, bins, events.recorded_intervals(files["events"]))
    gpus = per_gpu.gpus
    mstats["duplicates"] = per_gpu.duplicates
    xid.apply(gpus, xid.read(files["events"]), warnings)  # gpus[].xids, from the events files
    per_gpu.fcols = fcols = None  # the per-GPU columns are done with: free them before the rest
    skipped = logs.skipped + power_trace_peaks(files["power_trace"], engine, gpus, warnings, logs.window)
    met = met_future.result()
    warnings.extend(met_warnings)
    ranks, med_all = rank_rows(run_dir, gpus, met, warnings)
    nodes = node_rows(gpus, hosts, per_gpu.node_peak, duration, warnings)
    history = attempts.attempts(run_dir)
    job["attempts"] = len(history)
    job["elapsed_s"] = rounded(attempts.total_elapsed(history, running=not run_ended(run_dir)), 3)
    data = {"schema": REPORT_SCHEMA, "job": job, "window": {"start_unix": t0, "end_unix": t1},
            "duration_s": rounded(duration, 3), "attempt_history": history}
    data.update(totals(gpus, hosts, met, duration, per_gpu.gpu_peak, warnings))
    data.update(throttle_total_s=throttle_totals(gpus), nodes=nodes, gpus=gpus, ranks=ranks,
                stragglers=stragglers(met, ranks, med_all),
                coverage=coverage(gpus, mstats, skipped, files, logs.engines, warnings),
                monitor_overhead=monitor_overhead(nodes), warnings=warnings)
    series: Dict[str, Any] = {"t0": t0, "t1": t1, "bins": bins, "gpu": per_gpu.series}
    if met:
        series["loss"] = downsample(met["loss"], 400)
        series["throughput"] = downsample(met["throughput"], 400)
        series["val"] = met["val"]
    return Report(data=data, series=series)


class Logs:
    """Reads a kind of log file by file: each table's implausible rows dropped (into a new table),
    its warnings and malformed rows noted."""

    def __init__(self, window: Optional[Window], engine: str, warnings: List[str],
                 copies: Optional[columnar.Policy] = None):
        self.window, self.engine, self.warnings, self.copies = window, engine, warnings, copies
        self.skipped = 0
        self.engines: set = set()

    def read(self, paths, reader, counters) -> Iterator[readers.Table]:
        paths = list(paths)
        # the next file is read (pyarrow: without the GIL) while the caller works on this one
        with ThreadPoolExecutor(max_workers=1) as pool:
            ahead = [pool.submit(reader, p, self.engine, self.copies) for p in paths[:1]]
            for i in range(len(paths)):
                ahead += [pool.submit(reader, p, self.engine, self.copies) for p in paths[i + 1:i + 2]]
                yield self._checked(ahead[i].result(), counters)
                ahead[i] = None  # one file's raw columns in memory at a time, besides the next one

    def _checked(self, raw: readers.Table, counters) -> readers.Table:
        tb, why = drop_implausible(raw, self.window, counters)
        if why:
            self.warnings.append(why)
        self.warnings.extend(tb.warnings)
        self.skipped += tb.skipped_rows
        self.engines.add(tb.engine)
        miss = [c for c in tb.missing_columns if c not in ("ecc_dbe_total",)]
        if miss:
            self.warnings.append(f"{tb.path}: columns absent: {', '.join(miss)} (treated as not measured)")
        return tb


def job_window(fcols, hosts) -> Tuple[Optional[float], Optional[float]]:
    """(first, last) sample time over every GPU and host log."""
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
    return (min(starts) if starts else None), (max(ends) if ends else None)


class PerGpu:
    """Every GPU's statistics and series, and the job's and each node's peak GPU power."""

    def __init__(self, keys, segs, fcols, txt, warnings: List[str]):
        self.keys, self.segs, self.fcols, self.txt, self.warnings = keys, segs, fcols, txt, warnings
        self.gpus: List[dict] = []
        self.series: Dict[str, Any] = {}
        self.duplicates = 0
        self.gpu_peak: Optional[float] = None
        self.node_peak: Dict[str, float] = {}

    def peak_step(self, recorded: Dict[str, float]) -> float:
        """Bin width for the job-level peak power: the sampling interval the daemons recorded (the
        longest, if hosts differ); estimated from a few GPUs' timestamps only without one."""
        gpu_hosts = {self.keys[g_][0] for g_ in self.segs}
        unrecorded = sorted(h for h in gpu_hosts if h not in recorded)
        if unrecorded:
            self.warnings.append(f"sampling interval not recorded for {', '.join(unrecorded[:5])}"
                                 f"{' and others' if len(unrecorded) > 5 else ''} (no events header with "
                                 "interval_s): estimated from the timestamps")
        probe = [recorded[h] for h in gpu_hosts if h in recorded]
        for g_ in list(self.segs)[:8] if not probe else []:
            fi, sl0 = self.segs[g_][0]
            tt = self.fcols[fi]["time_unix"][sl0]
            dt = np.diff(tt[np.isfinite(tt)]) if tt.size > 1 else np.empty(0)
            if dt.size and np.isfinite(np.median(dt)) and np.median(dt) > 0:
                probe.append(float(np.median(dt)))
        return max((max(probe) if recorded and probe else float(np.median(probe))) if probe else 1.0, 1e-3)

    def run(self, t0: float, t1: float, bins: int, recorded: Dict[str, float]) -> None:
        # bins of the sampling interval, fewer and wider on a window of more than PEAK_BINS of them:
        # the arrays are bounded whatever the times say (the window is plausible: plausible.py)
        step = max(self.peak_step(recorded), (t1 - t0) / PEAK_BINS)
        nb = int(min(max((t1 - t0) / step, 1), PEAK_BINS)) + 1
        tot = np.zeros(nb)
        per_host: Dict[str, np.ndarray] = {}
        for g_ in sorted(self.segs, key=lambda k: self.keys[k]):
            host, idx = self.keys[g_]
            if idx < 0:
                self.warnings.append(f"{host}: {sum(self.fcols[fi]['time_unix'][sl].size for fi, sl in self.segs[g_])} "
                                     "rows without gpu_index ignored")
                continue
            sl, ndup, nbad = gpu_rows(self.segs[g_], self.fcols)
            self.duplicates += ndup
            if nbad:
                self.warnings.append(f"{host}/gpu{idx}: {nbad} rows without time_unix ignored")
            if sl["time_unix"].size == 0:
                continue
            gt = {c: self.txt[c].get(g_, {}) for c in self.txt}
            gs, ser = gpu_stats(host, idx, sl, gt, t0, t1, bins, self.warnings, recorded.get(host))
            self.gpus.append(gs)
            self.series[f"{host}/{idx}"] = ser
            m_ = binned_mean_power(sl, t0, step, nb)
            if m_ is not None:
                tot += m_
                if host not in per_host:
                    per_host[host] = np.zeros(nb)
                per_host[host] += m_
        self.gpu_peak = float(tot.max()) if per_host else None
        self.node_peak = {h: float(v.max()) for h, v in per_host.items()}


def binned_mean_power(sl: Dict[str, np.ndarray], t0: float, step: float, nb: int) -> Optional[np.ndarray]:
    """One GPU's mean power per ``step``-wide bin from ``t0`` (0 where it has no sample)."""
    p = sl["power_w"]
    ok = ~np.isnan(p)
    if not ok.any():
        return None
    bi = np.clip((sl["time_unix"][ok] - t0) / step, 0, nb - 1).astype(np.int64)
    s_ = np.bincount(bi, p[ok], nb)
    k_ = np.bincount(bi, None, nb)
    return np.where(k_ > 0, s_ / np.maximum(k_, 1), 0.0)


def power_trace_peaks(paths, engine: str, gpus: List[dict], warnings: List[str],
                      window: Optional[Window] = None) -> int:
    """Peak power per GPU from the optional high-rate power traces, into ``gpus``; returns the
    malformed rows skipped. Rows outside ``window`` and absurd readings are dropped as in the logs."""
    skipped = 0
    trace: Dict[Tuple[str, int], Tuple[float, float, int]] = {}
    for p_ in paths:
        tb = readers.read_power_trace(p_, engine)
        warnings.extend(tb.warnings)
        tb, why = drop_implausible(tb, window, ())
        if why:
            warnings.append(why)
        if tb.skipped_rows:
            skipped += tb.skipped_rows
            warnings.append(f"{p_.name}: {tb.skipped_rows} malformed power-trace row(s) skipped")
        if tb.n == 0:
            continue
        hv = tb.text_values("host")
        fname_host = host_from_filename(p_)
        gi = tb.col("gpu_index")
        pw = tb.col("power_w")
        tt = tb.col("time_unix")
        for h_ in set(hv.tolist()):
            for i_ in np.unique(gi[~np.isnan(gi)]).tolist():
                m_ = (hv == h_) & (gi == i_)
                pm = nanmax(pw[m_])
                ts_ = np.unique(tt[m_][~np.isnan(tt[m_])])
                iv = float(np.median(np.diff(ts_))) if ts_.size > 1 else None
                key = (h_ or fname_host, int(i_))
                old_ = trace.get(key)
                if pm is not None:
                    trace[key] = (max(pm, old_[0]) if old_ else pm, iv, int(m_.sum()) + (old_[2] if old_ else 0))
    for g in gpus:
        tr_ = trace.get((g["host"], g["index"]))
        g["max_power_trace_w"] = rounded(tr_[0]) if tr_ else None
        g["trace_interval_s"] = rounded(tr_[1], 4) if tr_ else None
    return skipped


def rank_rows(run_dir, gpus: List[dict], met, warnings: List[str]) -> Tuple[List[dict], Optional[float]]:
    """One row per rank (its GPUs, energy share, step times), and the median step time of all ranks."""
    rank_gpus: Dict[int, List[dict]] = {}
    for g in gpus:
        for r in g["ranks"]:
            rank_gpus.setdefault(r, []).append(g)
    if gpus and not rank_gpus:
        warnings.append("no rank-to-GPU mapping in the GPU logs (ranks column empty): per-rank energy unknown")
    started = rank_hosts(run_dir)  # every program's ranks, from the job script's record
    all_ranks = set(rank_gpus) | (set(met["per_rank"]) if met else set()) | set(started)
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
            "rank": r, "host": gl[0]["host"] if gl else started.get(r),
            "gpus": [f"{g['host']}/{g['index']}" for g in gl],
            "energy_j": rounded(e), "gpu_shared_by": max((len(g["ranks"]) for g in gl), default=None),
            "energy_split": "even share of a shared GPU" if any(g["shared"] for g in gl) else
            ("whole GPU" if gl else None),
        }
        if mr:
            ms = mr["median_step_time_s"]
            rd.update(steps=mr["steps"], samples=mr["samples"], median_step_time_s=rounded(ms, 6),
                      slowdown_vs_median=rounded(ms / med_all, 4) if ms and med_all else None,
                      final_loss=rounded(mr["final_loss"], 6),
                      energy_per_sample_j=rounded(e / mr["samples"]) if e is not None and mr["samples"] else None)
        else:
            rd.update(steps=None, samples=None, median_step_time_s=None, slowdown_vs_median=None,
                      final_loss=None, energy_per_sample_j=None)
        rd["memory"] = rank_memory(mr.get("memory") if mr else None, gl)
        ranks.append(rd)
    return ranks, med_all


def rank_memory(mem: Optional[dict], gl: List[dict]) -> Optional[Dict[str, Any]]:
    """A rank's memory in MiB: what it holds of parameters, gradients and optimizer state (its
    ``memory`` records: from the tensors, ZeRO's saving), its peak RSS and torch's peak CUDA
    allocation (the rank's own view), and the monitor's peak memory use of its GPU where the GPU is
    the rank's alone (a shared GPU's use is not one rank's)."""
    gpu = gl[0]["max_mem_used_mib"] if len(gl) == 1 and len(gl[0]["ranks"]) == 1 else None
    if mem is None and gpu is None:
        return None
    mib = (lambda v: rounded(v / 1048576.0, 3) if v is not None else None)
    mem = mem or {}
    return {"state_mib": mib(mem.get("state_bytes")), "params_mib": mib(mem.get("params_bytes")),
            "grads_mib": mib(mem.get("grads_bytes")), "optimizer_mib": mib(mem.get("optimizer_bytes")),
            "peak_rss_mib": mib(mem.get("peak_rss_bytes")), "cuda_peak_mib": mib(mem.get("cuda_peak_bytes")),
            "gpu_mem_used_mib": gpu}


def node_rows(gpus: List[dict], hosts: Dict[str, dict], node_peak: Dict[str, float], duration,
              warnings: List[str]) -> List[dict]:
    nodes = []
    for h in sorted(set(g["host"] for g in gpus) | set(hosts)):
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
            "energy_j": {"gpu": rounded(gsum), "cpu": rounded(ce), "total": rounded(add_or_none(gsum, ce))},
            "cpu_energy_source": hd.get("cpu_energy_source"),
            "avg_power_w": {"gpu": rounded(gsum / duration if gsum is not None and duration else None),
                            "cpu": rounded(ce / hd["cpu_window_s"] if ce is not None and hd.get("cpu_window_s") else None)},
            "peak_gpu_power_w": rounded(node_peak.get(h)),
            "max_gpu_temp_c": rounded(max((g["max_temp_c"] for g in gl if g["max_temp_c"] is not None), default=None), 2),
            "max_cpu_temp_c": hd.get("max_cpu_temp_c"), "avg_cpu_pct": hd.get("avg_cpu_pct"),
            "max_cpu_pct": hd.get("max_cpu_pct"),
            "mem_used_mib": {"avg": hd.get("avg_host_mem_used_mib"), "max": hd.get("max_host_mem_used_mib"),
                             "total": hd.get("host_mem_total_mib")},
            "load1": {"avg": hd.get("avg_load1"), "max": hd.get("max_load1")},
            "monitor": {"cpu_s": hd.get("monitor_cpu_s"), "cpu_pct_of_core": hd.get("monitor_cpu_pct_of_core"),
                        "max_rss_mib": hd.get("monitor_max_rss_mib")},
        })
    return nodes


def totals(gpus: List[dict], hosts: Dict[str, dict], met, duration, gpu_peak, warnings: List[str]) -> Dict[str, Any]:
    """The job's energy (GPU, CPU, total), power, idle energy and energy per step and sample."""
    gvals = [g["energy_j"] for g in gpus]
    gpu_total = sum(x for x in gvals if x is not None) if gvals and any(x is not None for x in gvals) else None
    gpu_complete = bool(gvals) and all(x is not None for x in gvals)
    cvals = [hosts[h]["cpu_energy_j"] for h in hosts]
    cpu_total = sum(x for x in cvals if x is not None) if any(x is not None for x in cvals) else None
    cpu_complete = bool(cvals) and all(x is not None for x in cvals) and set(hosts) >= set(g["host"] for g in gpus)
    total = add_or_none(gpu_total, cpu_total)
    if gpu_total is not None and not gpu_complete:
        warnings.append("GPU energy total is a lower bound: some GPUs have unknown energy")
    if total is not None and not cpu_complete:
        warnings.append("total energy excludes CPU energy of hosts without RAPL data")
    idle_vals = [g["idle_energy_j"] for g in gpus]
    idle = sum(x for x in idle_vals if x is not None) if any(x is not None for x in idle_vals) else None
    kwh = lambda j: rounded(j / 3.6e6 if j is not None else None, 6)  # noqa: E731
    per_s = lambda j: rounded(j / duration if j is not None and duration else None)  # noqa: E731
    return {
        "energy_j": {"total": rounded(total), "gpu": rounded(gpu_total), "cpu": rounded(cpu_total),
                     "complete": bool(gpu_complete and cpu_complete)},
        "energy_kwh": {"total": kwh(total), "gpu": kwh(gpu_total), "cpu": kwh(cpu_total)},
        "power_w": {"gpu_avg": per_s(gpu_total), "gpu_peak": rounded(gpu_peak), "cpu_avg": per_s(cpu_total),
                    "peak_method": "max over time bins (the sampling interval) of the sum of per-GPU mean power"},
        "idle": {"energy_j": rounded(idle), "share_of_gpu_pct": rounded(100 * idle / gpu_total if idle is not None and gpu_total else None, 3),
                 "gpu_s": rounded(sum(g["idle_s"] for g in gpus if g["idle_s"] is not None), 2) if gpus else None,
                 "util_threshold_pct": IDLE_UTIL_PCT},
        "efficiency": efficiency(met, gpu_total, total if cpu_complete else None, warnings),
    }


def efficiency(met, gpu_total, total, warnings: List[str]) -> Dict[str, Any]:
    """Energy per step and per sample; ``total`` is None unless it includes every host's CPU."""
    eff: Dict[str, Any] = {"steps": None, "samples": None, "energy_per_step_j": None, "energy_per_sample_j": None}
    if not (met and met["per_rank"]):
        warnings.append("no metrics/rank*.jsonl: energy per step/sample and stragglers unknown")
        return eff
    steps = max(v["steps"] for v in met["per_rank"].values())
    samples = sum(v["samples"] or 0 for v in met["per_rank"].values())
    eff["steps"] = steps or None
    eff["samples"] = samples or None
    eff["energy_per_step_j"] = {"gpu": rounded(gpu_total / steps if gpu_total is not None and steps else None),
                                "total": rounded(total / steps if total is not None and steps else None)}
    eff["energy_per_sample_j"] = {"gpu": rounded(gpu_total / samples if gpu_total is not None and samples else None, 6),
                                  "total": rounded(total / samples if total is not None and samples else None, 6)}
    if not samples:
        warnings.append("metrics have no 'samples' counts: energy per sample unknown")
    return eff


def stragglers(met, ranks: List[dict], med_all: Optional[float]) -> Optional[Dict[str, Any]]:
    if not (met and med_all):
        return None
    rr = [r for r in ranks if r.get("slowdown_vs_median")]
    rr.sort(key=lambda r: -r["slowdown_vs_median"])
    meds = [r["median_step_time_s"] for r in rr]
    return {
        "median_step_time_s": rounded(med_all, 6),
        "slowest_rank": rr[0]["rank"] if rr else None,
        "slowest_ratio": rr[0]["slowdown_vs_median"] if rr else None,
        "fastest_ratio": rr[-1]["slowdown_vs_median"] if rr else None,
        "spread_pct": rounded(100 * (max(meds) - min(meds)) / med_all, 3) if meds else None,
        "threshold_ratio": STRAGGLER_RATIO,
        "ranks": [{"rank": r["rank"], "host": r["host"], "ratio": r["slowdown_vs_median"],
                   "median_step_time_s": r["median_step_time_s"]}
                  for r in rr if r["slowdown_vs_median"] >= STRAGGLER_RATIO][:20],
    }


def throttle_totals(gpus: List[dict]) -> Dict[str, float]:
    thr_tot: Dict[str, float] = {}
    for g in gpus:
        for k, v in g["throttle_s"].items():
            if v is not None:
                thr_tot[k] = round(thr_tot.get(k, 0.0) + v, 3)
    return thr_tot


def coverage(gpus: List[dict], mstats, skipped: int, files, engines, warnings: List[str]) -> Dict[str, Any]:
    """Rows read, dropped and skipped, sampling gaps, energy sources and the counter cross-check;
    warns of the first gaps and of every GPU's energy notes."""
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
    return {
        "gpu_rows_read": mstats["rows"] if mstats else 0,
        "duplicate_rows_removed": mstats["duplicates"] if mstats else 0,
        "malformed_rows_skipped": skipped,
        "gap_threshold": f"{GAP_FACTOR:g} x the sampling interval (the daemon's recorded one, else the median spacing)",
        "min_gpu_coverage_pct": min(pcts) if pcts else None,
        "gaps": all_gaps[:200], "n_gaps": len(all_gaps),
        "energy_sources": {(s or "unknown"): sum(1 for g in gpus if g["energy_source"] == s)
                           for s in ("counter", "integrated_power", None) if any(g["energy_source"] == s for g in gpus)},
        "crosscheck_pct": {"min": min(xcs), "max": max(xcs), "median": rounded(float(np.median(xcs)), 3)} if xcs else None,
        "files": {k: [p.name for p in v] for k, v in files.items()},
        "reader": sorted(engines),
    }


def monitor_overhead(nodes: List[dict]) -> Dict[str, Any]:
    mon_cpu = [n["monitor"]["cpu_pct_of_core"] for n in nodes if n["monitor"]["cpu_pct_of_core"] is not None]
    mon_rss = [n["monitor"]["max_rss_mib"] for n in nodes if n["monitor"]["max_rss_mib"] is not None]
    return {"max_cpu_pct_of_core": max(mon_cpu) if mon_cpu else None,
            "max_rss_mib": max(mon_rss) if mon_rss else None,
            "cpu_s_total": rounded(sum(n["monitor"]["cpu_s"] for n in nodes if n["monitor"]["cpu_s"] is not None), 3) if mon_cpu else None}


def downsample(pairs, k):
    if len(pairs) <= k:
        return list(pairs)
    idx = np.linspace(0, len(pairs) - 1, k).astype(int)
    return [pairs[i] for i in idx]

