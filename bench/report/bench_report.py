"""Benchmark: ``hpclaunch report`` over ~11 M GPU samples vs a straightforward pandas version.

    .venv/bin/python bench/report/bench_report.py [--hosts 64 --gpus 8 --hours 6] [--dir DIR]

Generates the run directory once (cached under $TMPDIR, ~1.7 GB for the default size), then
measures: (1) the CSV reading candidates on the same GPU logs (pyarrow — our reader —, polars,
pandas C engine, the csv module extrapolated from a few files), (2) ``build_report`` end to end
(best of --repeat runs), (3) a plain pandas implementation of the same totals (read_csv +
groupby), and checks that both agree with the generator's known totals. Target: report <= 10 s.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import gen  # noqa: E402
from hpclaunch.monitors import schema  # noqa: E402
from hpclaunch.reports import readers  # noqa: E402


def _timed(fn, *a, **kw):
    t = time.perf_counter()
    r = fn(*a, **kw)
    return time.perf_counter() - t, r


def ensure_data(d: Path, hosts, gpus, hours) -> dict:
    marker = d / "expected.json"
    if marker.exists():
        return json.loads(marker.read_text())
    d.mkdir(parents=True, exist_ok=True)
    print(f"generating {hosts} hosts x {gpus} GPUs x {hours} h at 1 Hz into {d} ...", flush=True)
    t, exp = _timed(gen.generate, d, hosts, gpus, hours)
    exp["generate_s"] = round(t, 1)
    marker.write_text(json.dumps(exp))
    return exp


def read_candidates(d: Path, csv_files: int = 2) -> dict:
    files = sorted(glob.glob(str(d / "monitor" / "*.gpu.csv")))
    cols = list(readers.GPU_NUMERIC + readers.GPU_TEXT)
    out = {}
    t, n = _timed(lambda: sum(readers.read_gpu_log(f, "pyarrow").n for f in files))
    out["pyarrow (readers.read_gpu_log -> numpy)"] = (t, n)
    try:
        import polars as pl

        def pol():
            n = 0
            for f in files:
                df = pl.read_csv(f, skip_rows=1, columns=cols,
                                 schema_overrides={c: pl.Float64 for c in readers.GPU_NUMERIC})
                _ = {c: df[c].to_numpy() for c in readers.GPU_NUMERIC}
                n += df.height
            return n
        out["polars read_csv (+ to_numpy)"] = _timed(pol)
    except ImportError:
        pass
    import pandas as pd

    def pdr():
        n = 0
        for f in files:
            df = pd.read_csv(f, skiprows=1, usecols=cols, dtype={c: "float64" for c in readers.GPU_NUMERIC})
            n += len(df)
        return n
    out["pandas read_csv (C engine)"] = _timed(pdr)
    t, n = _timed(lambda: sum(readers.read_gpu_log(f, "csv").n for f in files[:csv_files]))
    out[f"csv module (extrapolated from {csv_files} files)"] = (t * len(files) / csv_files, n * len(files) // csv_files)
    return out


def pandas_baseline(d: Path) -> dict:
    """The straightforward way: read everything with pandas, sort, groupby."""
    import pandas as pd

    cols = ["time_unix", "host", "gpu_index", "power_w", "energy_mj", "temp_c", "util_pct", "mem_used_mib"]
    gfs = [pd.read_csv(f, skiprows=1, usecols=cols) for f in sorted(glob.glob(str(d / "monitor" / "*.gpu.csv")))]
    df = pd.concat(gfs, ignore_index=True)
    df = df.drop_duplicates(["host", "gpu_index", "time_unix"]).sort_values(["host", "gpu_index", "time_unix"])
    g = df.groupby(["host", "gpu_index"], sort=False)
    inc = g["energy_mj"].diff()
    energy = inc[inc >= 0].groupby([df["host"], df["gpu_index"]]).sum() / 1000.0
    agg = g.agg(max_temp=("temp_c", "max"), avg_util=("util_pct", "mean"), max_power=("power_w", "max"),
                max_mem=("mem_used_mib", "max"))
    hfs = [pd.read_csv(f, skiprows=1) for f in sorted(glob.glob(str(d / "monitor" / "*.host.csv")))]
    h = pd.concat(hfs, ignore_index=True).sort_values(["host", "time_unix"])
    hinc = h.groupby("host")["rapl_energy_uj"].diff()
    cpu = float(hinc[hinc >= 0].sum()) / 1e6
    return {"gpu_j": float(energy.sum()), "cpu_j": cpu, "gpus": len(agg), "max_temp": float(agg["max_temp"].max())}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--skip-candidates", action="store_true")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    a = ap.parse_args(argv)
    d = Path(a.dir or Path(tempfile.gettempdir()) / f"hpclaunch-report-bench-{a.hosts}x{a.gpus}x{a.hours:g}h")
    exp = ensure_data(d, a.hosts, a.gpus, a.hours)
    size = sum(p.stat().st_size for p in (d / "monitor").iterdir())
    print(f"data: {exp['rows']:,} GPU rows, {size / 2**30:.2f} GiB of logs in {d}")
    res = {"rows": exp["rows"], "bytes": size, "cpus": os.cpu_count(), "loadavg_before": os.getloadavg()}
    if not a.skip_candidates:
        print("\nCSV reading candidates (GPU logs only):")
        res["read"] = {}
        for k, (t, n) in read_candidates(d).items():
            print(f"  {k:48s} {t:7.2f} s  ({n / t / 1e6:5.2f} M rows/s)")
            res["read"][k] = round(t, 3)
    from hpclaunch.reports import build_report, render

    times, cpus, loads = [], [], []
    rep = None
    for _ in range(a.repeat):
        c0 = time.process_time()
        t, rep = _timed(build_report, d)
        cpus.append(time.process_time() - c0)
        times.append(t)
        loads.append(round(os.getloadavg()[0], 2))
    tj, js = _timed(render, rep, "json")
    th, ht = _timed(render, rep, "html")
    tt, tx = _timed(render, rep, "text")
    tp, base = _timed(pandas_baseline, d)
    e = rep.data["energy_j"]
    print("\nend to end:")
    print(f"  hpclaunch build_report (pyarrow + numpy)       {min(times):7.2f} s  (runs: {', '.join(f'{x:.2f}' for x in times)};"
          f" CPU s {', '.join(f'{x:.2f}' for x in cpus)}; 1-min load {loads})")
    print(f"  render json / html / text                      {tj:.2f} / {th:.2f} / {tt:.2f} s  ({len(ht) / 1e6:.1f} MB html)")
    print(f"  pandas baseline (read_csv + groupby totals)    {tp:7.2f} s")
    print("\ntotals (truth from the generator):")
    print(f"  GPU J  truth {exp['gpu_j']:.1f}  report {e['gpu']:.1f} ({(e['gpu'] / exp['gpu_j'] - 1) * 100:+.2e} %)"
          f"  pandas {base['gpu_j']:.1f} ({(base['gpu_j'] / exp['gpu_j'] - 1) * 100:+.2e} %)")
    print(f"  CPU J  truth {exp['cpu_j']:.1f}  report {e['cpu']:.1f}  pandas {base['cpu_j']:.1f}")
    print(f"  GPUs {len(rep.data['gpus'])} (pandas {base['gpus']}), max temp {max(g['max_temp_c'] for g in rep.data['gpus'])}"
          f" (pandas {base['max_temp']}), warnings {len(rep.data['warnings'])}")
    res.update(report_s=[round(x, 3) for x in times], report_best_s=round(min(times), 3),
               report_cpu_s=[round(x, 3) for x in cpus], loadavg_1min_per_run=loads,
               render_s={"json": round(tj, 3), "html": round(th, 3), "text": round(tt, 3)},
               pandas_baseline_s=round(tp, 3), gpu_j={"truth": exp["gpu_j"], "report": e["gpu"], "pandas": base["gpu_j"]},
               cpu_j={"truth": exp["cpu_j"], "report": e["cpu"], "pandas": base["cpu_j"]},
               loadavg_after=os.getloadavg(), target_s=10.0, ok=min(times) <= 10.0)
    print(f"\nload average before/after: {res['loadavg_before']} / {res['loadavg_after']} on {res['cpus']} CPUs")
    print(f"target <= 10 s: {'PASS' if res['ok'] else 'FAIL'}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
