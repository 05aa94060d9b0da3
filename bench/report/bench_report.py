"""Benchmark: ``build_report`` against polars and pandas computing the same totals, side by side.

    python bench/report/bench_report.py [--hosts 16,64 --gpus 8 --hours 6 --reps 3]
                                        [--markdown docs/bench/report.md] [--candidates]

For each size (hosts x GPUs x hours at 1 Hz; 16 hosts = 2.76 M GPU rows, 64 = 11.1 M) the run
directory is generated once (cached under $TMPDIR). Then, interleaved, ``--reps`` rounds of the
peers, each a fresh process (so each has its own page cache state, imports excluded, and its own
peak RSS):

* ``hpclaunch``: ``build_report(run_dir)`` -- the whole report (every statistic, the series) -- as a
  user gets it once a job ended (its script's accounting step left a columnar copy of each log,
  reports/columnar.py), or after any earlier report; ``hpclaunch, first report``: the same with no
  copies (removed before the clock), so it parses every CSV and writes the copies: the work the job's
  accounting step does at its end, or a report of a job run without hpclaunch's script;
  ``hpclaunch, job running``: the same logs in a run directory whose record says the job still runs,
  without copies: the first report on a running job, which parses every CSV and copies each log's
  part written so far (reports/columnar.py ``Growing``); ``hpclaunch, job running, later report``:
  the next one, which reads those parts from the copies and parses the lines appended since. Here
  the logs do not grow between the two (the data is shared with the other peers), so that is none:
  a real later report also parses what the monitors appended meanwhile, at most REWRITE_SHARE of
  the copied part before the copy is renewed.
* ``polars``: the GPU energy per GPU (non-negative counter differences over time-sorted,
  de-duplicated rows), max temperature, mean utilisation, max power and memory per GPU, and the
  CPU (RAPL) energy, with polars' lazy CSV scan.
* ``pandas``: the same totals with pandas (read_csv + sort + groupby).

Every peer's GPU and CPU energy must equal the generator's truth (the energy counter is the exact
cumulative trapezoid of the logged power) to the millijoule. Figures: medians with their range,
wall and CPU seconds, ratios of medians. ``--candidates`` adds the CSV readers alone.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import benchlib  # noqa: E402

GPU_COLS = ["time_unix", "host", "gpu_index", "power_w", "energy_mj", "temp_c", "util_pct", "mem_used_mib"]
PEERS = ("hpclaunch", "hpclaunch, first report", "hpclaunch, job running", "hpclaunch, job running, later report",
         "polars", "pandas")
FIRST = "hpclaunch, first report"
RUNNING = "hpclaunch, job running"
LATER = "hpclaunch, job running, later report"


def data_dir(hosts: int, gpus: int, hours: float) -> Path:
    return Path(tempfile.gettempdir()) / f"hpclaunch-report-bench-{hosts}x{gpus}x{hours:g}h"


def ensure_data(d: Path, hosts: int, gpus: int, hours: float) -> dict:
    marker = d / "expected.json"
    if marker.exists():
        ensure_ended(d, hours)
        return json.loads(marker.read_text())
    import gen

    print(f"generating {hosts} hosts x {gpus} GPUs x {hours:g} h at 1 Hz into {d} ...", flush=True)
    exp = gen.generate(d, hosts, gpus, hours)
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps(exp))
    os.replace(tmp, marker)
    ensure_ended(d, hours)
    return exp


def ensure_ended(d: Path, hours: float) -> None:
    """The job script's record of the run (as templates/prologue.j2 writes it): it started at the
    first sample and ended after the last, so reports treat it as a finished job's directory."""
    state = d / ".hpclaunch" / "state"
    if not state.exists():
        import gen

        state.parent.mkdir(exist_ok=True)
        state.write_text(f"{int(gen.T0)} attempt=0 start\n{int(gen.T0 + hours * 3600) + 2} attempt=0 end\n")


def running_dir(d: Path) -> Path:
    """A run directory of the same logs whose record says the job still runs (a start, no end), as a
    report on a running job reads it: its logs are links to ``d``'s, in folders of its own, where
    its copies go."""
    r = d.parent / (d.name + "-running")
    if (r / "monitor").is_symlink():  # as an earlier version of this bench made it: copies went to d's
        for sub in ("monitor", "metrics"):
            (r / sub).unlink()
    if not (r / "monitor").is_dir():
        (r / ".hpclaunch").mkdir(parents=True, exist_ok=True)
        for sub in ("monitor", "metrics"):
            (r / sub).mkdir(exist_ok=True)
            for f in (d / sub).iterdir():
                if f.is_file() and not (r / sub / f.name).exists():
                    (r / sub / f.name).symlink_to(f)
        start = (d / ".hpclaunch" / "state").read_text().splitlines()[0]
        tmp = r / ".hpclaunch" / "state.tmp"
        tmp.write_text(start + "\n")
        os.replace(tmp, r / ".hpclaunch" / "state")
    return r


def drop_copies(d: Path) -> None:
    import shutil

    from hpclaunch.reports import columnar

    for sub in ("monitor", "metrics"):
        shutil.rmtree(d / sub / columnar.SUBDIR, ignore_errors=True)


# ---------------------------------------------------------------------------- the peers (in a child)


def peer_hpclaunch(d: Path) -> dict:
    from hpclaunch.reports import build_report

    e = build_report(d).data["energy_j"]
    return {"gpu_j": e["gpu"], "cpu_j": e["cpu"]}


def peer_polars(d: Path) -> dict:
    import polars as pl

    f64 = {c: pl.Float64 for c in GPU_COLS if c != "host"}
    g = (pl.scan_csv(str(d / "monitor" / "*.gpu.csv"), comment_prefix="#", schema_overrides=f64)
         .select(GPU_COLS)
         .unique(subset=["host", "gpu_index", "time_unix"], keep="first", maintain_order=True)
         .sort(["host", "gpu_index", "time_unix"])
         .with_columns(inc=pl.col("energy_mj").diff().over(["host", "gpu_index"]))
         .group_by(["host", "gpu_index"])
         .agg(energy_j=pl.col("inc").filter(pl.col("inc") >= 0).sum() / 1000.0,
              max_temp=pl.col("temp_c").max(), avg_util=pl.col("util_pct").mean(),
              max_power=pl.col("power_w").max(), max_mem=pl.col("mem_used_mib").max()))
    h = (pl.scan_csv(str(d / "monitor" / "*.host.csv"), comment_prefix="#",
                     schema_overrides={"time_unix": pl.Float64, "rapl_energy_uj": pl.Float64})
         .select(["host", "time_unix", "rapl_energy_uj"]).sort(["host", "time_unix"])
         .with_columns(inc=pl.col("rapl_energy_uj").diff().over("host"))
         .select(cpu_j=pl.col("inc").filter(pl.col("inc") >= 0).sum() / 1e6))
    gd, hd = pl.collect_all([g, h])
    return {"gpu_j": round(float(gd["energy_j"].sum()), 3), "cpu_j": round(float(hd["cpu_j"][0]), 3),
            "gpus": gd.height}


def peer_pandas(d: Path) -> dict:
    import pandas as pd

    gfs = [pd.read_csv(f, skiprows=1, usecols=GPU_COLS) for f in sorted(glob.glob(str(d / "monitor" / "*.gpu.csv")))]
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
    return {"gpu_j": round(float(energy.sum()), 3), "cpu_j": round(float(hinc[hinc >= 0].sum()) / 1e6, 3),
            "gpus": len(agg)}


def child(peer: str, d: str) -> None:
    fn = {"hpclaunch": peer_hpclaunch, FIRST: peer_hpclaunch, RUNNING: peer_hpclaunch, LATER: peer_hpclaunch,
          "polars": peer_polars, "pandas": peer_pandas}[peer]
    if peer.startswith("hpclaunch"):  # imports are not the report's work: load them before the clock
        import hpclaunch.reports.document  # noqa: F401
        import pyarrow.csv  # noqa: F401
        import pyarrow.ipc  # noqa: F401
        if peer in (RUNNING, LATER):  # the same logs, the run's record saying the job still runs
            d = str(running_dir(Path(d)))
        if peer in (FIRST, RUNNING):
            drop_copies(Path(d))
    elif peer == "polars":
        import polars  # noqa: F401
    else:
        import pandas  # noqa: F401
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn(Path(d))
    out.update(wall_s=time.perf_counter() - t0, cpu_s=time.process_time() - c0,
               maxrss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(out))


def run_peer(peer: str, d: Path) -> dict:
    p = subprocess.run([sys.executable, __file__, "--child", peer, str(d)], capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{peer} failed on {d}:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------- readers alone (optional)


def read_candidates(d: Path) -> dict:
    import polars as pl
    import pandas as pd
    from hpclaunch.reports import readers

    files = sorted(glob.glob(str(d / "monitor" / "*.gpu.csv")))
    cols = list(readers.GPU_NUMERIC + readers.GPU_TEXT)
    f64 = {c: pl.Float64 for c in readers.GPU_NUMERIC}
    cases = {
        "hpclaunch reader (pyarrow -> numpy columns)": lambda: sum(readers.read_gpu_log(f, "pyarrow").n for f in files),
        "polars read_csv, same columns (+ to_numpy)":
            lambda: sum(len({c: df[c].to_numpy() for c in readers.GPU_NUMERIC} and df)
                        for df in (pl.read_csv(f, comment_prefix="#", columns=cols, schema_overrides=f64) for f in files)),
        "pandas read_csv (C engine), same columns":
            lambda: sum(len(pd.read_csv(f, skiprows=1, usecols=cols)) for f in files),
    }
    out = {}
    for k, fn in cases.items():
        c0, t0 = time.process_time(), time.perf_counter()
        n = fn()
        out[k] = (time.perf_counter() - t0, time.process_time() - c0, n)
    return out


# ---------------------------------------------------------------------------- main


def bench_size(hosts: int, gpus: int, hours: float, reps: int, sec: benchlib.Section, candidates: bool) -> bool:
    d = data_dir(hosts, gpus, hours)
    exp = ensure_data(d, hosts, gpus, hours)
    size = sum(p.stat().st_size for p in (d / "monitor").iterdir())
    rows = exp["rows"]
    print(f"\n{hosts} hosts: {rows:,} GPU rows, {size / 2**20:,.0f} MiB of CSV in {d}", flush=True)
    runs = {p: [] for p in PEERS}
    run_peer(FIRST, d)  # untimed: the copies later reports read, whichever peer a round starts with
    run_peer(RUNNING, d)  # the same for the later report on the running job
    load0 = os.getloadavg()
    for r in range(reps):
        order = PEERS if r % 2 == 0 else PEERS[::-1]  # no peer always first after the cache warms
        for p in order:
            res = run_peer(p, d)
            runs[p].append(res)
            print(f"  round {r + 1} {p:24s} {res['wall_s']:7.2f} s wall  {res['cpu_s']:7.2f} s CPU  "
                  f"{res['maxrss_mib']:7.0f} MiB  load {os.getloadavg()[0]:.2f}", flush=True)
    load1 = os.getloadavg()
    truth = {"gpu_j": round(exp["gpu_j"], 3), "cpu_j": round(exp["cpu_j"], 3)}
    exact = {p: all(abs(x["gpu_j"] - truth["gpu_j"]) < 5e-4 and abs(x["cpu_j"] - truth["cpu_j"]) < 5e-4
                    for x in runs[p]) for p in PEERS}
    wall = {p: [x["wall_s"] for x in runs[p]] for p in PEERS}
    cpu = {p: [x["cpu_s"] for x in runs[p]] for p in PEERS}
    rss = {p: max(x["maxrss_mib"] for x in runs[p]) for p in PEERS}
    sec.para(f"**{hosts} hosts x {gpus} GPUs x {hours:g} h at 1 Hz: {rows:,} GPU rows, {size / 2**20:,.0f} MiB of "
             f"CSV.** {reps} interleaved rounds, each peer a fresh process; load average "
             f"{' / '.join(f'{x:.2f}' for x in load0)} before, {' / '.join(f'{x:.2f}' for x in load1)} after "
             f"(2 cores shared with other work: read the ratios, not the seconds).")
    rows_t = []
    for p in PEERS:
        rows_t.append([p, benchlib.fmt(wall[p], digits=2), benchlib.fmt(cpu[p], digits=2),
                       f"{benchlib.ratio(wall['hpclaunch'], wall[p]):.2f}x" if p != "hpclaunch" else "1.00x",
                       f"{rss[p]:,.0f}", f"{runs[p][-1]['gpu_j']:,.3f}", "yes" if exact[p] else "NO"])
    sec.table(["peer", "wall, median [min–max, n]", "CPU s, median [min–max, n]", "hpclaunch / peer (wall)",
               "peak RSS MiB", "GPU J", "exact"], rows_t)
    ok = True
    for who, what in (("hpclaunch", "A report after a job ended, or any later report (columnar copies)"),
                      (FIRST, "A report with no copies yet (CSV parsed, copies written: the job's "
                              "accounting step does it at the job's end)"),
                      (RUNNING, "The first report while the job runs (CSV parsed, the parts written so far "
                                "copied)"),
                      (LATER, "A later report while the job runs (the copied parts read; the lines appended "
                              "since parsed: here none)")):
        vs_polars = benchlib.ratio(wall[who], wall["polars"])
        vs_pandas = benchlib.ratio(wall["pandas"], wall[who])
        cpu_polars = benchlib.ratio(cpu[who], cpu["polars"])
        met = vs_polars <= 1.2 and vs_pandas >= 3.0 and exact[who]
        ok &= met or who in (FIRST, RUNNING, LATER)
        sec.para(f"{what}: **{vs_polars:.2f}x polars' time** (CPU seconds: {cpu_polars:.2f}x), **pandas takes "
                 f"{vs_pandas:.2f}x hpclaunch's time**, totals {'exact' if exact[who] else 'NOT exact'}. "
                 f"Goal (issue 20: `build_report` <= 1.2x polars and >= 3x faster than pandas, totals exact): "
                 f"{'met' if met else 'NOT met'}.")
    sec.para(f"Truth: {truth['gpu_j']:,.3f} J GPU, {truth['cpu_j']:,.3f} J CPU.")
    if candidates:
        cand = read_candidates(d)
        sec.table(["CSV reader alone (GPU logs)", "wall s", "CPU s", "M rows/s"],
                  [[k, f"{t:.2f}", f"{c:.2f}", f"{n / t / 1e6:.2f}"] for k, (t, c, n) in cand.items()])
    return ok


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", default="16,64", help="comma-separated host counts (16: 2.8 M rows, 64: 11 M)")
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--candidates", action="store_true", help="also time the CSV readers alone")
    ap.add_argument("--markdown", default=None, help="write this bench's section here (docs/bench/report.md)")
    ap.add_argument("--child", nargs=2, metavar=("PEER", "DIR"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child(*a.child)
        return 0
    benchlib.run_from_wheel()
    cmd = "python bench/report/bench_report.py " + " ".join(argv if argv is not None else sys.argv[1:])
    sec = benchlib.Section("Report: `build_report` vs polars and pandas (`bench/report/bench_report.py`)", cmd.strip())
    ok = True
    for h in (int(x) for x in a.hosts.split(",")):
        ok &= bench_size(h, a.gpus, a.hours, a.reps, sec, a.candidates)
    sec.write(a.markdown)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
