#!/usr/bin/env python3
"""`hpclaunch report --since 30d` over N ended jobs (default 10,000) whose summaries are in the
registry's fleet ledger, against the log-based path on a sample.

    .venv/bin/python bench/fleet/bench_fleet.py [--jobs 10000] [--reps 5] [--sample 20]

It makes a fresh HPCLAUNCH_HOME with N ended jobs, each a run directory with a small monitor log
(4 GPUs on 2 nodes, 120 s) copied from one synthetic run and a ledger entry whose signature
matches those logs; the summaries vary per job (energy, temperatures, user, partition). Then it
times the command end to end, from a fresh process each time (interpreter, registry, ledger,
signatures of every job's logs, aggregation and JSON rendering): median and spread over --reps.
It also rebuilds --sample jobs' summaries from their logs and checks the ledger's totals equal
the log-based ones. Prints one figure per line.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "report"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--sample", type=int, default=20)
    ap.add_argument("--keep", action="store_true", help="keep the work folder (to profile)")
    args = ap.parse_args()

    from synth import GpuSpec, HostSpec, write_run
    work = tempfile.mkdtemp(prefix="hl-bench-fleet-")
    home = os.path.join(work, "home")
    os.environ["HPCLAUNCH_HOME"] = home
    from hpclaunch.reports.fleet import job_summary, logs_signature
    from hpclaunch.runs.registry import Registry

    template = os.path.join(work, "template")
    write_run(template, [GpuSpec(h, i, a=200 + 10 * i, b=40, ranks=str(i)) for h in ("n1", "n2") for i in range(2)],
              hosts=[HostSpec("n1"), HostSpec("n2")], duration=120, jitter=0.2, metrics=None)
    base = job_summary(template)
    t0 = time.perf_counter()
    reg = Registry()
    entries = []
    users, parts = [f"user{u}" for u in range(40)], ["gpu", "big", "debug"]
    for k in range(args.jobs):
        rd = os.path.join(work, "runs", f"job-{k}")
        shutil.copytree(template, rd)
        rec = reg.add(backend="slurm", cluster="bench", job_id=str(10_000 + k), name=f"job{k}", run_dir=rd,
                      partition=parts[k % 3])
        reg.update_state(rec.key, "COMPLETED", exit_code=0)
        s = json.loads(json.dumps(base))
        scale = 1 + (k % 97) / 100
        for key in ("total", "gpu", "cpu"):
            if s["energy_j"][key] is not None:
                s["energy_j"][key] *= scale
        for g in s["gpus"]:
            g["avg_temp_c"] = (g["avg_temp_c"] or 60) + (k % 7)
        entries.append((rec.key, logs_signature(rd), json.dumps(s)))
    reg.put_ledger(entries)
    reg._db.execute("UPDATE jobs SET user = 'user' || (key % 40)")
    reg.close()
    print(f"setup: {args.jobs} jobs with ledger entries in {time.perf_counter() - t0:.1f} s ({work})")

    cmd = [sys.executable, "-m", "hpclaunch", "report", "--since", "30d", "--format", "json"]
    times = []
    for _ in range(args.reps):
        t = time.perf_counter()
        out = subprocess.run(cmd, capture_output=True, text=True, cwd="/")
        times.append(time.perf_counter() - t)
        assert out.returncode == 0, out.stderr
    fleet = json.loads(out.stdout)
    assert fleet["jobs_count"] == args.jobs, fleet["jobs_count"]
    med = statistics.median(times)
    print(f"report --since 30d over {args.jobs} ledgered jobs: median {med:.3f} s "
          f"(min {min(times):.3f}, max {max(times):.3f}, {args.reps} runs; load {os.getloadavg()[0]:.2f})")

    # the log-based path on a sample: the same summary from the logs as in the ledger (unscaled jobs)
    reg = Registry()
    sample = [r for r in reg.list() if int(r.job_id) % 97 == 10_000 % 97][: args.sample]
    kept = reg.ledger([r.key for r in sample])
    t = time.perf_counter()
    for r in sample:
        fresh = job_summary(r.run_dir)
        assert abs(fresh["energy_j"]["total"] - json.loads(kept[r.key][1])["energy_j"]["total"]) < 1e-6
    per_job = (time.perf_counter() - t) / max(1, len(sample))
    print(f"log-based summary: {per_job * 1000:.1f} ms per job ({len(sample)} sampled, totals equal to the "
          f"ledger's); {args.jobs} jobs from logs would take ~{per_job * args.jobs:.0f} s")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
