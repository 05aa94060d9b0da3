#!/usr/bin/env python3
"""A job's start to its first rank, on the local backend: the job script of this working tree vs
one of an older commit (by default the last before the job runtime was shipped once).

    python bench/job_start/bench_job_start.py [--runs 20] [--old 4f50821] [--markdown PATH]

Each side is its commit's wheel (benchlib.wheel_site), which renders a one-rank `launcher: srun` job
running `true` (monitor off, then on), and the script runs as the local backend runs it: `bash
script.sbatch` with the variables the backend gives (HPCLAUNCH_LOCAL, SLURM_*, and what
`submit_env()` adds: HPCLAUNCH_PYTHON, and HPCLAUNCH_RUNTIME where the side has one). A third side is
the new script without HPCLAUNCH_RUNTIME, as when given straight to sbatch: it starts Python once
to find its runtime. Runs are interleaved (A B C, C A B, ...), each in a fresh submit folder.

Measured from the script's start (just before its process starts): to the first rank's end (the
time its wrapper writes in rank0.exit, `true` included), and to the script's own end (the attempt's
end: the monitor stopped and its accounting step run, the state file written).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import benchlib  # noqa: E402

JOB = """name: start-bench
profile: local
launcher: srun
command: ["true"]
resources: {{nodes: 1, tasks_per_node: 1, time: "00:10:00"}}
monitor: {{interval: {interval}}}
"""


def render(site: str, folder: str, interval: float) -> str:
    job = os.path.join(folder, f"job-{interval}.yaml")
    with open(job, "w") as f:
        f.write(JOB.format(interval=interval))
    env = dict(os.environ, PYTHONPATH=site)
    p = subprocess.run([sys.executable, "-m", "hpclaunch", "render", job], capture_output=True, text=True, env=env,
                       cwd=folder)
    if p.returncode != 0:
        raise SystemExit(f"render with {site}: {benchlib.last_line(p)}")
    return p.stdout


def local_env(site: str, job_id: str, submit_dir: str, runtime: bool) -> dict:
    """What the local backend gives the script (launchers/backends/local.py start(), submit_env())."""
    env = dict(os.environ, PYTHONPATH=site, HPCLAUNCH_PYTHON=sys.executable, HPCLAUNCH_LOCAL="1",
               SLURM_JOB_ID=job_id, SLURM_JOBID=job_id, SLURM_JOB_NAME="start-bench", SLURM_JOB_NODELIST="localhost",
               SLURM_NODELIST="localhost", SLURM_JOB_NUM_NODES="1", SLURM_NNODES="1", SLURM_NTASKS="1",
               SLURM_NTASKS_PER_NODE="1", SLURM_TASKS_PER_NODE="1", SLURM_JOB_CPUS_PER_NODE="1",
               SLURM_CPUS_ON_NODE="1", SLURM_CPUS_PER_TASK="1", SLURM_SUBMIT_DIR=submit_dir,
               SLURM_CLUSTER_NAME="local", SLURM_JOB_PARTITION="local", SLURM_RESTART_COUNT="0")
    env.pop("HPCLAUNCH_RUNTIME", None)
    job_sh = os.path.join(site, "hpclaunch", "runtime", "job.sh")
    if runtime and os.path.exists(job_sh):
        env["HPCLAUNCH_RUNTIME"] = job_sh
    return env


def one(script: str, site: str, runtime: bool, job_id: int, scratch: str) -> tuple[float, float]:
    folder = os.path.join(scratch, f"j{job_id}")
    os.makedirs(folder)
    path = os.path.join(folder, "script.sbatch")
    with open(path, "w") as f:
        f.write(script)
    env = local_env(site, str(job_id), folder, runtime)
    with open(os.path.join(folder, "out"), "wb") as out:
        t0 = time.time()
        p = subprocess.run(["bash", path], cwd=folder, env=env, stdin=subprocess.DEVNULL, stdout=out,
                           stderr=subprocess.STDOUT, start_new_session=True)
        t1 = time.time()
    exit_file = os.path.join(folder, "runs", f"start-bench-{job_id}", "logs", "attempt0", "rank0.exit")
    if p.returncode != 0 or not os.path.exists(exit_file):
        with open(os.path.join(folder, "out")) as f:
            raise SystemExit(f"the job script failed (exit {p.returncode}): {f.read()[-1500:]}")
    with open(exit_file) as f:
        rank_end = float(f.read().split()[1])
    shutil.rmtree(folder)
    return rank_end - t0, t1 - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--old", default="4f50821", help="commit to compare with (default: the last before job.sh)")
    ap.add_argument("--markdown", help="write this bench's section of docs/benchmarks.md here")
    args = ap.parse_args()
    new_site, new_note = benchlib.wheel_site(None)
    old_site, old_note = benchlib.wheel_site(args.old)
    if new_site is None or old_site is None:
        raise SystemExit(new_note if new_site is None else old_note)
    rows = []
    with tempfile.TemporaryDirectory(prefix="hpclaunch-bench-start-") as scratch:
        for interval, what in ((0, "monitor off"), (1.0, "monitor on (1 s)")):
            sides = {f"{args.old} (the runtime pasted into the script)": (render(old_site, scratch, interval), old_site, False),
                     "this tree, HPCLAUNCH_RUNTIME set (hpclaunch submit)": (render(new_site, scratch, interval), new_site, True),
                     "this tree, found through Python (plain sbatch)": (render(new_site, scratch, interval), new_site, False)}
            names = list(sides)
            first: dict = {n: [] for n in names}
            total: dict = {n: [] for n in names}
            job_id = 1000 if interval else 0
            for i in range(args.runs):
                order = names[i % len(names):] + names[:i % len(names)]
                for name in order:
                    job_id += 1
                    script, site, runtime = sides[name]
                    a, b = one(script, site, runtime, job_id, scratch)
                    first[name].append(a)
                    total[name].append(b)
            base = names[0]
            for name in names:
                rows.append([what, name, f"{statistics.median(first[name]) * 1000:.0f}",
                             f"{statistics.median(total[name]) * 1000:.0f}",
                             f"{benchlib.ratio(first[name], first[base]):.2f}x",
                             f"{len(sides[name][0].splitlines())}"])
                print(" | ".join(rows[-1]), file=sys.stderr)
    section = benchlib.Section("A job's start to its first rank (`bench/job_start/bench_job_start.py`)",
                               f"python bench/job_start/bench_job_start.py --runs {args.runs} --old {args.old}")
    section.para(f"Old: {old_note}. New: {new_note}. The median of {args.runs} interleaved runs of each "
                 "side; a one-rank local job running `true`, its script run as the local backend runs it. "
                 "First rank: the script's start to its rank's end (`true` included); script: to the "
                 "script's end. The last column is the script's length in lines.")
    section.para("Goal: a job starts no slower with its logic in hpclaunch's job runtime (sourced) than "
                 "pasted into the script. hpclaunch's backends set HPCLAUNCH_RUNTIME, so a submitted job "
                 "finds the runtime without starting Python; the third side is a script given straight "
                 "to sbatch, which asks the job's Python where it is (`python -m hpclaunch.runtime "
                 "--path`): one Python start more, on this machine's ~0.1-0.15 s interpreter start.")
    section.table(["job", "script", "first rank ms", "script ms", "first rank vs old", "lines"], rows,
                  align="llrrrr")
    section.write(args.markdown)


if __name__ == "__main__":
    main()
