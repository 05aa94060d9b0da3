#!/usr/bin/env python3
"""`hpclaunch report --since 30d` over N ended jobs (default 10,000) whose summaries are in the
registry's fleet ledger, end to end (a fresh `python -m hpclaunch` process each run, start to last
byte of output), text and JSON; beside it, the log-based path on a sample of the same jobs.

    .venv/bin/python bench/fleet/bench_fleet.py [--jobs 10000] [--reps 7] [--sample 40] \
        [--markdown docs/bench/fleet.md]

Set-up (not timed): one synthetic run directory (2 nodes x 4 GPUs, 10 min at 1 s, tests/report/synth.py)
is summarised once; each of the N jobs gets a copy of it as its run directory, a registry row (40 users,
3 partitions, 200 nodes) and a ledger entry varied from that summary (energy, temperatures, hosts,
throttle time). Jobs are submitted over the last 29 days, as a month's fleet is; the view trusts the
ledger entries of jobs that ended over a day ago and stats the logs of the rest (docs/fleet.md).

Timed, interleaved, --reps rounds each, as median [min-max]:
  * `python -c pass` (the floor of any Python command);
  * the view over the N jobs, JSON and text;
  * the worst case: every job ended within the last day, so every job's logs are statted;
  * the log-based path: the view over a registry of --sample of those jobs with no ledger (each job's
    report is built from its logs, as the first view of a job does), against the ledgered view of the
    same sample; its per-job time times N is what the view would cost without a ledger.
The sample's fleet totals from the logs and from the ledger are printed side by side (the test
tests/report/test_fleet_ledger.py checks they are equal). The load average is printed before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "report"))
import benchlib  # noqa: E402

DAY = 86400.0


def make_fleet(work: str, jobs: int, sample_every: int) -> tuple:
    """The registry of `jobs` ledgered jobs under work/home, and the keys of the unvaried sample jobs."""
    from synth import GpuSpec, HostSpec, write_run
    from hpclaunch.reports.fleet import job_summary, logs_signature
    from hpclaunch.runs.registry import Registry

    template = os.path.join(work, "template")
    write_run(template, [GpuSpec(h, i, a=200 + 10 * i, b=40, ranks=str(4 * n + i), throttle_window=(100, 160) if i == 1 else None)
                         for n, h in enumerate(("n1", "n2")) for i in range(4)],
              hosts=[HostSpec("n1"), HostSpec("n2")], duration=600, jitter=0.2, metrics=None)
    base = job_summary(template)
    rng = random.Random(17)
    now = time.time()
    reg = Registry(os.path.join(work, "home", "registry.db"))
    entries, times, sample = [], [], []
    for k in range(jobs):
        rd = os.path.join(work, "runs", f"job-{k}")
        shutil.copytree(template, rd)
        rec = reg.add(backend="slurm", cluster="bench", job_id=str(100_000 + k), name=f"job{k}", run_dir=rd,
                      partition=("gpu", "big", "debug")[k % 3])
        reg.update_state(rec.key, "COMPLETED", exit_code=0)
        s = json.loads(json.dumps(base))
        if k % sample_every == 0:
            sample.append(rec.key)   # as its logs say: the log-based path must give the same
        else:
            scale = 1 + (k % 97) / 100
            s[1:4] = [None if v is None else v * scale for v in s[1:4]]
            first = rng.randrange(200)
            for j, g in enumerate(s[8]):
                g[0] = f"n{(first + j // 4) % 200:03d}"
                g[3] = (g[3] or 60) + rng.uniform(-2, 8)
                g[4] = (g[4] or 70) + rng.uniform(0, 10)
            for j, n in enumerate(s[9]):
                n[0] = f"n{(first + j) % 200:03d}"
        submit = now - rng.uniform(0.05, 29) * DAY
        times.append((submit, submit + rng.uniform(60, 6 * 3600), rec.key))
        entries.append((rec.key, logs_signature(rd), json.dumps(s, separators=(",", ":"))))
    reg.put_ledger(entries)
    reg._db.executemany("UPDATE jobs SET submit_time = ?, end_time = min(?, strftime('%s','now') - 60) WHERE key = ?",
                        times)
    reg._db.execute("UPDATE jobs SET user = 'user' || (key % 40)")
    reg.close()
    return sample


def sample_registry(work: str, sample: list, name: str, ledger: bool) -> str:
    """A registry of the sample jobs only (same rows), with or without their ledger entries."""
    import sqlite3
    home = os.path.join(work, name)
    os.makedirs(home)
    shutil.copy(os.path.join(work, "home", "registry.db"), os.path.join(home, "registry.db"))
    db = sqlite3.connect(os.path.join(home, "registry.db"))
    keys = ",".join(str(k) for k in sample)
    db.execute(f"DELETE FROM ledger WHERE job_key NOT IN ({keys})" if ledger else "DELETE FROM ledger")
    db.execute(f"DELETE FROM events WHERE job_key NOT IN ({keys})")
    db.execute(f"DELETE FROM jobs WHERE key NOT IN ({keys})")
    db.commit()
    db.execute("VACUUM")
    db.close()
    return home


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--sample", type=int, default=40, help="jobs in the log-based sample")
    ap.add_argument("--markdown", default=None, metavar="PATH", help="write the section here (docs/bench/fleet.md)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (to profile)")
    args = ap.parse_args()
    benchlib.run_from_wheel()
    section = benchlib.Section(f"Fleet view over {args.jobs:,} ledgered jobs (`bench/fleet/bench_fleet.py`)",
                               " ".join(["python", "bench/fleet/bench_fleet.py"] + sys.argv[1:]))
    work = tempfile.mkdtemp(prefix="hl-bench-fleet-")
    try:  # GBs of run directories: removed however the run ends (Ctrl-C, an error), unless --keep
        _bench(args, section, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _bench(args, section, work: str) -> None:
    t0 = time.perf_counter()
    sample = make_fleet(work, args.jobs, max(1, args.jobs // args.sample))
    home = os.path.join(work, "home")
    logs_home = sample_registry(work, sample, "sample-logs", ledger=False)
    ledger_home = sample_registry(work, sample, "sample-ledger", ledger=True)
    worst_home = os.path.join(work, "worst")
    os.makedirs(worst_home)
    shutil.copy(os.path.join(home, "registry.db"), os.path.join(worst_home, "registry.db"))
    import sqlite3
    db = sqlite3.connect(os.path.join(worst_home, "registry.db"))
    db.execute("UPDATE jobs SET end_time = strftime('%s','now') - 3600")  # all ended an hour ago
    db.commit()
    db.close()
    print(f"set-up: {args.jobs} jobs in {time.perf_counter() - t0:.0f} s ({work})", file=sys.stderr)

    hl = [sys.executable, "-m", "hpclaunch", "report", "--since", "30d"]
    cases = {
        "python -c pass": ([sys.executable, "-c", "pass"], home, None),
        f"report --since 30d --format json, {args.jobs:,} jobs": (hl + ["--format", "json"], home, None),
        f"report --since 30d (text), {args.jobs:,} jobs": (hl, home, None),
        f"worst case: all {args.jobs:,} ended within a day (JSON)": (hl + ["--format", "json"], worst_home, None),
        f"log-based: {len(sample)} jobs, no ledger (JSON)": (hl + ["--format", "json"], logs_home, "fresh"),
        f"ledgered: the same {len(sample)} jobs (JSON)": (hl + ["--format", "json"], ledger_home, None),
    }
    times = {name: [] for name in cases}
    cpu = {name: [] for name in cases}   # the process's CPU time: what load on the shared cores does not add
    outputs = {}
    load_before = os.getloadavg()
    for _ in range(args.reps):
        for name, (cmd, h, mode) in cases.items():
            if mode == "fresh":  # no ledger at the start of each run: every job from its logs
                db = sqlite3.connect(os.path.join(h, "registry.db"))
                db.execute("DELETE FROM ledger")
                db.commit()
                db.close()
            env = dict(os.environ, HPCLAUNCH_HOME=h)
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            out = subprocess.run(cmd, capture_output=True, text=True, cwd="/", env=env)
            times[name].append(time.perf_counter() - t)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
            if out.returncode != 0:
                raise SystemExit(f"{name}: exit {out.returncode}: {out.stderr[-2000:]}")
            outputs[name] = out.stdout
    load_after = os.getloadavg()
    names = list(cases)
    full = json.loads(outputs[names[1]])
    assert full["jobs_count"] == args.jobs, full["jobs_count"]
    assert "Fleet energy" in outputs[names[2]]
    from_logs, from_ledger = json.loads(outputs[names[4]]), json.loads(outputs[names[5]])
    # what each job adds to the view without a ledger: the log-based run less the ledgered run of the
    # same jobs (the interpreter and imports are in both), per job
    per_job = (benchlib.spread(times[names[4]])["median"] - benchlib.spread(times[names[5]])["median"]) / len(sample)

    floor = times[names[0]]
    rows = [(f"`{n}`" if n.startswith("python") else n, benchlib.fmt(times[n]), benchlib.fmt(cpu[n]),
             f"{benchlib.ratio(times[n], floor):.1f}×") for n in names]
    section.para(
        f"{args.jobs:,} ended jobs of 2 nodes × 4 GPUs each (10 min logs), submitted over the last 29 days: "
        f"the ledger entries of jobs that ended over a day ago are trusted, the other jobs' logs are statted. "
        f"Each figure is one `python -m hpclaunch` process, start to the last byte of output, interleaved, "
        f"{args.reps} rounds; load average {' / '.join(f'{x:.2f}' for x in load_before)} before and "
        f"{' / '.join(f'{x:.2f}' for x in load_after)} after (2 cores shared with other work). The process's CPU "
        f"time (user + system, from getrusage) is what it costs on an idle core: the wall time of a loaded "
        f"machine adds the waits for a core.")
    section.table(["command", "wall time, median [min–max, n]", "CPU time (user + system)", "wall vs `python -c pass`"],
                  rows)
    section.para(
        f"Without a ledger every job's report is built from its logs: "
        f"{per_job * 1000:.0f} ms a job here (the sample's log-based median less its ledgered one, over "
        f"{len(sample)} jobs), so "
        f"~{per_job * args.jobs:.0f} s for {args.jobs:,} jobs, against "
        f"{benchlib.spread(times[names[1]])['median']:.2f} s from the ledger. "
        f"The sample's totals, from the logs and from the ledger: "
        f"{from_logs['energy_j']:.3f} J and {from_ledger['energy_j']:.3f} J over {from_logs['jobs_count']} and "
        f"{from_ledger['jobs_count']} jobs (tests/report/test_fleet_ledger.py checks the two paths agree).")
    section.write(args.markdown)


if __name__ == "__main__":
    sys.exit(main())
