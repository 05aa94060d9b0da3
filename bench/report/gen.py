"""Fast generator of a large synthetic run directory for the report benchmark.

Writes ``monitor/<host>.gpu.csv`` and ``<host>.host.csv`` in the exact contract format
(``monitors/schema.py``: schema comment line, header, rows; empty cell = not measured)
plus ``metrics/rank<R>.jsonl``. Uses pyarrow's CSV writer for speed when available, else
the csv module (slow for 10 M rows). The totals are known: the energy counter is the exact
cumulative trapezoid of the power column, so a report must reproduce ``expected_totals``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from hpclaunch.monitors import schema  # noqa: E402

T0 = 1_763_000_000.0


def _gpu_columns(h: int, ngpu: int, nsamples: int, interval: float, rng):
    n = ngpu * nsamples
    k = np.arange(nsamples, dtype=np.float64)
    t = T0 + k * interval + rng.uniform(0, 0.004, nsamples)  # one timestamp per sweep
    t = np.repeat(t, ngpu)
    g = np.tile(np.arange(ngpu), nsamples)
    phase = (h * ngpu + g) * 0.37
    power = 250.0 + 120.0 * np.sin(2 * np.pi * (t - T0) / 300.0 + phase) + 3.0 * (g % 3)
    power = np.round(power, 3)
    # counter = exact cumulative trapezoid of the logged power (mJ), per GPU
    p2 = power.reshape(nsamples, ngpu)
    t2 = t.reshape(nsamples, ngpu)
    seg = 0.5 * (p2[1:] + p2[:-1]) * np.diff(t2, axis=0) * 1000.0
    energy = np.vstack([np.zeros((1, ngpu)), np.cumsum(seg, axis=0)]) + 5e9
    temp = np.round(60 + 0.08 * (power - 250) + (g == (h % ngpu)) * 12, 1)
    util = np.where(((t - T0) % 1800) < 60, 0.0, 97.0)
    throttle = np.where(power > 360, 0x4, 0x0) | np.where(util == 0, 0x1, 0)
    ranks = [str(h * ngpu + i) for i in range(ngpu)]
    cols = {
        "time_unix": t, "host": np.full(n, f"node{h:03d}"), "gpu_index": g,
        "gpu_uuid": np.array([f"GPU-{h:04d}-{i:04d}-aaaa-bbbb" for i in range(ngpu)])[g],
        "ranks": np.array(ranks)[g], "power_w": power, "power_avg_w": power,
        "energy_mj": np.round(energy.reshape(-1), 0).astype(np.int64), "temp_c": temp,
        "mem_temp_c": temp + 5, "mem_used_mib": np.full(n, 61234, np.int64),
        "mem_total_mib": np.full(n, 81559, np.int64), "util_pct": util, "mem_util_pct": util / 2,
        "sm_clock_mhz": np.full(n, 1980, np.int64), "mem_clock_mhz": np.full(n, 2619, np.int64),
        "power_limit_w": np.full(n, 700.0), "throttle_reasons": throttle.astype(np.int64),
        "slowdown_temp_c": np.full(n, 89.0), "shutdown_temp_c": np.full(n, 92.0),
        "viol_power_ns": (np.cumsum((throttle & 0x4).reshape(nsamples, ngpu) > 0, axis=0)
                          .reshape(-1) * int(interval * 1e9)).astype(np.int64),
        "viol_thermal_ns": np.zeros(n, np.int64), "ecc_dbe_total": np.zeros(n, np.int64),
        "error": np.full(n, ""),
    }
    # per-reason counters as an H100 logs them: the power-cap one follows viol_power_ns, the rest 0
    for reason, col in schema.THROTTLE_COUNTER_COLUMNS.items():
        cols[col] = cols["viol_power_ns"] if reason == "sw_power_cap" else np.zeros(n, np.int64)
    cols["xid_count"] = np.zeros(n, np.int64)  # XIDs collected, none raised
    return cols, energy[-1] - energy[0]


def _write_table(path: Path, schema_name: str, columns, cols: dict):
    with open(path, "w") as f:
        f.write(schema.header_comment(schema_name))
        f.write(",".join(columns) + "\n")
    try:
        import pyarrow as pa
        import pyarrow.csv as pcsv
    except ImportError:  # pragma: no cover - slow path
        import csv
        with open(path, "a", newline="") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerows(zip(*(cols[c].tolist() for c in columns)))
        return
    tbl = pa.table({c: cols[c] for c in columns})
    with open(path, "ab") as f:
        pcsv.write_csv(tbl, f, pcsv.WriteOptions(quoting_style="none", include_header=False))


def generate(run_dir, nhosts=64, ngpu=8, hours=6.0, interval=1.0, steps_per_rank=600, seed=0):
    run_dir = Path(run_dir)
    mon = run_dir / schema.MONITOR_DIR
    mon.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics").mkdir(exist_ok=True)
    rng = np.random.default_rng(seed)
    nsamples = int(hours * 3600 / interval)
    gpu_total_j = 0.0
    for h in range(nhosts):
        host = f"node{h:03d}"
        cols, e_mj = _gpu_columns(h, ngpu, nsamples, interval, rng)
        gpu_total_j += float(np.sum(np.round(e_mj))) / 1000.0
        _write_table(mon / schema.gpu_file(host), schema.GPU_SCHEMA, schema.GPU_COLUMNS, cols)
        m = max(2, nsamples // 10)
        th = T0 + np.arange(m) * interval * 10
        hc = {
            "time_unix": th, "host": np.full(m, host), "cpu_pct": np.full(m, 35.0),
            "mem_used_mib": np.full(m, 200000, np.int64), "mem_total_mib": np.full(m, 512000, np.int64),
            "load1": np.full(m, 12.0),
            "rapl_energy_uj": (1e12 + (th - T0) * 400.0 * 1e6).astype(np.int64),
            "cpu_temp_c": np.full(m, 55.0), "monitor_cpu_s": (th - T0) * 0.002,
            "monitor_rss_mib": np.full(m, 24.0),
        }
        _write_table(mon / schema.host_file(host), schema.HOST_SCHEMA, schema.HOST_COLUMNS, hc)
        for i in range(ngpu):
            r = h * ngpu + i
            with open(run_dir / "metrics" / f"rank{r}.jsonl", "w") as f:
                f.write(json.dumps({"kind": "header", "schema": "hpclaunch.metrics/1", "rank": r}) + "\n")
                st = 0.5 * (1.3 if r == 7 else 1.0)
                for s in range(steps_per_rank):
                    f.write(json.dumps({"kind": "step", "time_unix": T0 + s * hours * 3600 / steps_per_rank,
                                        "rank": r, "epoch": 0, "step": s, "loss": 2.0 / (1 + s / 100),
                                        "samples_per_s": 64 / st, "step_time_s": st, "samples": 64}) + "\n")
    # host RAPL: 400 W for (m-1)*10 s per host
    cpu_total_j = nhosts * 400.0 * (max(2, nsamples // 10) - 1) * interval * 10
    return {"gpu_j": gpu_total_j, "cpu_j": cpu_total_j, "rows": nhosts * ngpu * nsamples}


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=6.0)
    a = ap.parse_args()
    print(json.dumps(generate(a.run_dir, a.hosts, a.gpus, a.hours)))
