"""Synthetic run directories in the exact monitor-log contract, with analytically known totals.

GPU power is p(t) = a + b·sin(ω(t − T0) + φ); the energy counter (mJ) is its exact integral (plus an
offset), optionally reset or wrapped; RAPL is the exact integral of c + d·sin(...). ``write_run``
returns the expected values so tests can compare the report with the truth.
"""
from __future__ import annotations

import csv
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from hpclaunch.monitors import schema

T0 = 1_763_000_000.0


@dataclass
class GpuSpec:
    host: str
    index: int
    a: float = 250.0                 # W
    b: float = 100.0                 # W
    period: float = 120.0            # s
    phase: float = 0.0
    ranks: str = ""
    uuid: Optional[str] = None
    counter: bool = True
    power: bool = True
    counter_offset_mj: float = 1.0e9
    reset_at: Optional[float] = None         # seconds after T0: counter restarts from 0
    wrap_mod_mj: Optional[float] = None      # counter stored modulo this
    drop_frac: float = 0.0                   # random rows missing
    gap: Optional[Tuple[float, float]] = None  # (start, end) seconds after T0 with no rows
    throttle_window: Optional[Tuple[float, float]] = None  # sw_power_cap set, viol_power_ns counts
    viol_counters: bool = True
    reason_counters: bool = False            # throttle_<reason>_ns columns (NVML per-reason counters)
    reason_counter_reset_at: Optional[float] = None   # the sw_power_cap counter restarts from 0 here
    hidden_hw_thermal: Optional[Tuple[float, float, float]] = None  # (start, end, fraction): short
    # hw thermal slowdowns between samples, `fraction` of the time: the counter sees them, the bitmask never
    hot_window: Optional[Tuple[float, float]] = None       # temp 86 °C (else 70)
    idle_window: Optional[Tuple[float, float]] = None      # util 0 (else 95)
    slowdown: Optional[float] = 89.0
    util: bool = True
    missing_power_frac: float = 0.0          # power cell empty (row kept)
    counter_every: int = 1                   # the monitor's costly counters (energy, hw thermal and
    # power-brake time) in every k-th row and the last, as `--counter-interval` writes them

    def p(self, t: float) -> float:
        w = 2 * math.pi / self.period
        return self.a + self.b * math.sin(w * (t - T0) + self.phase)

    def integral(self, t1: float, t2: float) -> float:
        w = 2 * math.pi / self.period
        F = lambda t: self.a * (t - T0) - self.b / w * math.cos(w * (t - T0) + self.phase)  # noqa: E731
        return F(t2) - F(t1)


@dataclass
class HostSpec:
    host: str
    c: float = 400.0
    d: float = 50.0
    period: float = 300.0
    rapl: bool = True
    interval: float = 5.0

    def integral(self, t1, t2):
        w = 2 * math.pi / self.period
        F = lambda t: self.c * (t - T0) - self.d / w * math.cos(w * (t - T0))  # noqa: E731
        return F(t2) - F(t1)


def _in(w, t):
    return w is not None and w[0] <= t - T0 < w[1]


def _overlap(w, a: float, b: float) -> float:
    """Seconds of window ``w`` (start, end, ...) inside [a, b] (seconds after T0)."""
    return max(0.0, min(w[1], b) - max(w[0], a)) if w else 0.0


def gpu_row(g: GpuSpec, t: float, rng: random.Random) -> Dict[str, object]:
    e_mj = None
    if g.counter:
        if g.reset_at is not None and t - T0 >= g.reset_at:
            e_mj = g.integral(T0 + g.reset_at, t) * 1000.0
        else:
            e_mj = g.counter_offset_mj + g.integral(T0, t) * 1000.0
        if g.wrap_mod_mj:
            e_mj = math.fmod(e_mj, g.wrap_mod_mj)
        e_mj = round(e_mj, 3)
    thr = 0
    if _in(g.throttle_window, t):
        thr |= 0x4
    util = 0.0 if _in(g.idle_window, t) else 95.0
    if util == 0.0:
        thr |= 0x1
    viol = None
    if g.viol_counters:
        w = g.throttle_window
        viol = int(round(min(max(t - T0 - w[0], 0.0), w[1] - w[0]) * 1e9)) if w else 0
    temp = 86.0 if _in(g.hot_window, t) else 70.0
    power = g.p(t) if g.power and rng.random() >= g.missing_power_frac else None
    reasons: Dict[str, object] = {}
    if g.reason_counters:
        r = g.reason_counter_reset_at
        since = r if r is not None and t - T0 >= r else 0.0   # the counter counts from its last reset
        cap_s = _overlap(g.throttle_window, since, t - T0)
        h = g.hidden_hw_thermal
        hw_s = _overlap(h, 0.0, t - T0) * h[2] if h else 0.0
        reasons = {"throttle_sw_power_cap_ns": int(round(cap_s * 1e9)), "throttle_sync_boost_ns": 0,
                   "throttle_sw_thermal_slowdown_ns": 0, "throttle_hw_thermal_slowdown_ns": int(round(hw_s * 1e9)),
                   "throttle_hw_power_brake_slowdown_ns": 0}
    return {**reasons,
        "time_unix": repr(t), "host": g.host, "gpu_index": g.index,
        "gpu_uuid": g.uuid or f"GPU-{g.host}-{g.index:02d}", "ranks": g.ranks,
        "power_w": "" if power is None else f"{power:.6f}", "power_avg_w": "",
        "energy_mj": "" if e_mj is None else repr(e_mj), "temp_c": temp, "mem_temp_c": temp + 4,
        "mem_used_mib": 40000 + g.index, "mem_total_mib": 81559, "util_pct": util if g.util else "",
        "mem_util_pct": 30, "sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "power_limit_w": 700,
        "throttle_reasons": thr, "slowdown_temp_c": "" if g.slowdown is None else g.slowdown,
        "shutdown_temp_c": 92, "viol_power_ns": "" if viol is None else viol,
        "viol_thermal_ns": 0 if g.viol_counters else "", "ecc_dbe_total": 0, "error": "",
    }


def cut_in_last_cell(cells: List[str]) -> str:
    """A killed writer's last line cut inside its last cell: the cell count is right, the last
    value is wrong (half its characters), no newline. An empty last cell (the GPU ``error``) is cut
    just before the newline: every value is right and it still does not count."""
    line = ",".join(cells)
    return line[: len(line) - len(cells[-1]) // 2]


def _write_csv(path: Path, schema_name: str, columns, rows: List[Dict[str, object]], partial=False,
               next_row: Optional[Dict[str, object]] = None):
    """``partial``: False; True / "cells" = half of the last row again (wrong cell count);
    "last_cell" = ``next_row`` (the sample being written when the writer was killed), cut inside
    its last cell by :func:`cut_in_last_cell`."""
    with open(path, "w", newline="") as f:
        f.write(schema.header_comment(schema_name))
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow([r.get(c, "") for c in columns])
        if partial == "last_cell":
            f.write(cut_in_last_cell([str(next_row.get(c, "")) for c in columns]))
        elif partial and rows:
            line = ",".join(str(rows[-1].get(c, "")) for c in columns)
            f.write(line[: len(line) // 2])  # a killed writer's partial last line, no newline


def write_run(run_dir, gpus: List[GpuSpec], hosts: Optional[List[HostSpec]] = None, duration: float = 3600.0,
              interval: float = 1.0, jitter: float = 0.0, seed: int = 0, partial_last_line=False,
              shuffle: bool = False, split_overlap: bool = False, metrics: Optional[dict] = None,
              job_yaml: Optional[str] = None, old_gpu_header: bool = False) -> dict:
    """Write ``run_dir/monitor/*`` (and metrics) and return the expected truth.

    ``partial_last_line``: False, True (half a row: wrong cell count) or "last_cell" (the next
    sample cut inside its last cell: right cell count, see ``_write_csv``); never in the truth.
    ``old_gpu_header``: GPU files with the header written before the columns appended after
    ``error`` (the per-reason counters, ``xid_count``)."""
    run_dir = Path(run_dir)
    mon = run_dir / schema.MONITOR_DIR
    mon.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    n = int(round(duration / interval)) + 1
    times = [T0 + k * interval + (rng.uniform(-jitter, jitter) if 0 < k < n - 1 else 0.0) for k in range(n)]
    exp: Dict[str, object] = {"gpu": {}, "window": {}, "cpu": {}}
    by_host: Dict[str, List[Dict[str, object]]] = {}
    for g in gpus:
        kept = []
        for t in times:
            if g.gap and g.gap[0] <= t - T0 < g.gap[1]:
                continue
            if g.drop_frac and 0 < (t - T0) < duration and rng.random() < g.drop_frac:
                continue
            kept.append(t)
        exp["gpu"][(g.host, g.index)] = g.integral(kept[0], kept[-1])
        exp["window"][(g.host, g.index)] = (kept[0], kept[-1])
        for k, t in enumerate(kept):
            row = gpu_row(g, t, rng)
            if k % g.counter_every and k != len(kept) - 1:
                for col in ("energy_mj", "viol_thermal_ns", "throttle_hw_thermal_slowdown_ns",
                            "throttle_hw_power_brake_slowdown_ns"):
                    if col in row:
                        row[col] = ""
            by_host.setdefault(g.host, []).append(row)
    gcols = schema.GPU_COLUMNS[:schema.GPU_COLUMNS.index("error") + 1] if old_gpu_header else schema.GPU_COLUMNS
    for h, rows in by_host.items():
        rows.sort(key=lambda r: float(r["time_unix"]))
        g_next = next(g for g in gpus if g.host == h)
        nxt = gpu_row(g_next, float(rows[-1]["time_unix"]) + interval, random.Random(seed))  # own rng: same files
        if shuffle:
            rng.shuffle(rows)
        if split_overlap:
            k1, k2 = int(len(rows) * 0.6), int(len(rows) * 0.4)
            _write_csv(mon / f"{h}.a.gpu.csv", schema.GPU_SCHEMA, gcols, rows[:k1])
            _write_csv(mon / f"{h}.b.gpu.csv", schema.GPU_SCHEMA, gcols, rows[k2:], partial_last_line,
                       nxt)
        else:
            _write_csv(mon / schema.gpu_file(h), schema.GPU_SCHEMA, gcols, rows, partial_last_line, nxt)
    exp["gpu_total"] = sum(exp["gpu"].values())
    for hs in hosts or []:
        m = int(duration / hs.interval) + 1

        def host_row(t, rss=30.0):
            return {"time_unix": repr(t), "host": hs.host, "cpu_pct": 40.0, "mem_used_mib": 1000,
                    "mem_total_mib": 4000, "load1": 3.0,
                    "rapl_energy_uj": int(round(5e12 + hs.integral(T0, t) * 1e6)) if hs.rapl else "",
                    "cpu_temp_c": 60.0, "monitor_cpu_s": round(0.004 * (t - T0), 6),
                    "monitor_rss_mib": rss}
        rows = [host_row(T0 + k * hs.interval) for k in range(m)]
        # the sample being written when the writer was killed: its RSS had grown to 31.25 MiB,
        # cut inside that cell it would read as 31 (or 3)
        nxt = host_row(T0 + m * hs.interval, rss=31.25)
        _write_csv(mon / schema.host_file(hs.host), schema.HOST_SCHEMA, schema.HOST_COLUMNS, rows, partial_last_line,
                   nxt)
        exp["cpu"][hs.host] = hs.integral(T0, T0 + (m - 1) * hs.interval) if hs.rapl else None
    if metrics:
        write_metrics(run_dir, **metrics)
    if job_yaml is not None:
        (run_dir / "job.yaml").write_text(job_yaml)
    return exp


def write_power_trace(run_dir, host: str, gpus: int = 1, n: int = 600, interval: float = 0.1,
                      spike: Optional[Tuple[int, float]] = None, partial_last_line=False) -> Path:
    """``<host>.power_trace.csv``: ``n`` samples per GPU at ``interval``, 300 W (+ ``spike`` =
    (sample k, extra W) on GPU 0). ``partial_last_line`` as in :func:`write_run`; the cut row
    of "last_cell" is a 312.5 W sample of GPU 0 that would read as 312."""
    path = Path(run_dir) / schema.MONITOR_DIR / schema.power_trace_file(host)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for k in range(n):
        for i in range(gpus):
            extra = spike[1] if spike and i == 0 and k == spike[0] else 0.0
            rows.append({"time_unix": repr(T0 + k * interval), "host": host, "gpu_index": i, "power_w": 300.0 + extra})
    nxt = {"time_unix": repr(T0 + n * interval), "host": host, "gpu_index": 0, "power_w": 312.5}
    _write_csv(path, schema.POWER_TRACE_SCHEMA, schema.POWER_TRACE_COLUMNS, rows, partial_last_line, nxt)
    return path


def write_metrics(run_dir, ranks: int = 4, steps: int = 100, step_time: float = 0.5, slow_rank: Optional[int] = None,
                  slow_factor: float = 1.25, samples: int = 32, partial: bool = True, epochs: int = 1,
                  log_every: int = 1):
    d = Path(run_dir) / "metrics"
    d.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        st = step_time * (slow_factor if r == slow_rank else 1.0)
        with open(d / f"rank{r}.jsonl", "w") as f:
            f.write(json.dumps({"kind": "header", "schema": "hpclaunch.metrics/1", "rank": r}) + "\n")
            t = T0
            for s in range(steps):
                t += st
                if (s + 1) % log_every:
                    continue
                # one record per log_every steps (train_entry --log-every): sums and means over them
                rec = {"kind": "step", "time_unix": t, "rank": r, "epoch": s * epochs // steps,
                       "step": s, "loss": 2.0 / (1.0 + 0.05 * s), "samples_per_s": samples / st,
                       "step_time_s": st, "samples": samples * log_every}
                if log_every > 1:
                    rec["steps"] = log_every
                f.write(json.dumps(rec) + "\n")
            for e in range(epochs):
                f.write(json.dumps({"kind": "epoch", "time_unix": t, "rank": r, "epoch": e, "step": steps - 1,
                                    "loss": 1.0, "val_loss": 1.1, "val_accuracy": 0.8}) + "\n")
            if partial:
                f.write('{"kind": "step", "time_unix": 17630')


def write_events(run_dir, host: str, records: List[Tuple[float, str, dict]], name: Optional[str] = None,
                 partial: Optional[Tuple[float, str, dict]] = None) -> Path:
    """``<host>.events.jsonl`` as the daemon writes it: a header, then ``(seconds after T0, kind,
    detail)`` records; ``partial``: one more record cut before its newline (a killed writer)."""
    path = Path(run_dir) / schema.MONITOR_DIR / (name or schema.events_file(host))
    path.parent.mkdir(parents=True, exist_ok=True)

    def line(t, kind, detail):
        return json.dumps({"time_unix": round(T0 + t, 3), "host": host, "kind": kind, "detail": detail},
                          separators=(",", ":"))
    text = line(0.0, "header", {"schema": schema.EVENTS_SCHEMA}) + "\n"
    text += "".join(line(*r) + "\n" for r in records)
    if partial:
        text += line(*partial)
    path.write_text(text)
    return path
