#!/usr/bin/env python3
"""How often torch's DDP teardown abort ("terminate called without an active exception", SIGABRT,
exit 134) ends a DDP program through hpclaunch, against the same program under plain sbatch, on the
2-node test cluster: the shape of pytorch/examples' multinode tutorial (ddp_tutorial_cpu.py beside
this file, gloo on CPU), 2 nodes x 1 rank under torchrun, run after run, alternating.

    python bench/ddp_teardown/bench_ddp_teardown.py --runs 50 --markdown docs/bench/ddp_teardown.md

Each run gets a fresh folder (the program resumes from a snapshot in its folder otherwise). Through
hpclaunch: `hpclaunch submit --backend slurm --wait` of a torchrun job, the profile's defaults (the
monitor on); plain: an sbatch script written as the tutorial's slurm/sbatch_run.sh is (`srun torchrun
--rdzv_backend c10d`), `sbatch --wait`. A run counts as aborted when a rank's output holds the abort's
line or a rank's exit code (hpclaunch's rank<R>.exit; the plain job's output) is 134.

Needs the cluster (SLURM_CONF) and torch; runs nice'd as it is started. Not a test: minutes per run
on the shared 2-CPU machine.
"""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import benchlib  # noqa: E402

PROGRAM = os.path.join(HERE, "ddp_tutorial_cpu.py")
ABORT = "terminate called without an active exception"
ARGS = ["50", "10"]     # the tutorial's sbatch_run.sh: 50 epochs, a snapshot every 10

JOB = """name: ddp-teardown
profile: testcluster
launcher: torchrun
command: [{python}, {program}, {args}]
resources: {{nodes: 2, tasks_per_node: 1, cpus_per_task: 1, time: "00:10:00"}}
requeue: {{max_attempts: 1}}
"""

SBATCH = """#!/bin/bash
#SBATCH --job-name=ddp-teardown-plain
#SBATCH --nodes=2
#SBATCH --ntasks=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=1
#SBATCH --time=00:10:00
#SBATCH --output={out}
nodes=( $(scontrol show hostnames "$SLURM_JOB_NODELIST") )
head_node=${{nodes[0]}}
export LOGLEVEL=INFO
srun bash -c '{python} -m torch.distributed.run --nnodes 2 --nproc_per_node 1 --rdzv_id $SLURM_JOB_ID \\
  --rdzv_backend c10d --rdzv_endpoint '"$head_node"':$((29500 + SLURM_JOB_ID % 1000)) {program} {args}; \\
  rc=$?; echo "hpclaunch-bench: node $(hostname) torchrun exit $rc"; exit $rc'
"""


def through_hpclaunch(folder: str) -> dict:
    with open(os.path.join(folder, "job.yaml"), "w") as f:
        f.write(JOB.format(python=sys.executable, program=PROGRAM, args=", ".join(f'"{a}"' for a in ARGS)))
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "hpclaunch", "submit", "job.yaml", "--backend", "slurm", "--wait"],
                          cwd=folder, capture_output=True, text=True, timeout=900)
    runs = glob.glob(os.path.join(folder, "runs", "ddp-teardown-*"))
    codes, text = [], proc.stderr
    for exit_file in glob.glob(os.path.join(runs[0] if runs else folder, "logs", "attempt0", "rank*.exit")):
        codes.append(int(open(exit_file).read().split()[0]))
        text += open(exit_file[:-5] + ".log", errors="replace").read()
    return {"mode": "hpclaunch", "rc": proc.returncode, "rank_codes": sorted(codes), "s": time.time() - t0,
            "aborted": ABORT in text or 134 in codes, "started": bool(codes)}


def plain_sbatch(folder: str) -> dict:
    out = os.path.join(folder, "slurm.out")
    script = os.path.join(folder, "run.sbatch")
    with open(script, "w") as f:
        f.write(SBATCH.format(out=out, python=sys.executable, program=PROGRAM, args=" ".join(ARGS)))
    t0 = time.time()
    proc = subprocess.run(["sbatch", "--wait", script], cwd=folder, capture_output=True, text=True, timeout=900)
    text = open(out, errors="replace").read() if os.path.exists(out) else ""
    codes = [int(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("hpclaunch-bench: node")]
    return {"mode": "plain sbatch", "rc": proc.returncode, "rank_codes": sorted(codes), "s": time.time() - t0,
            "aborted": ABORT in text or 134 in codes, "started": bool(codes)}


def wilson(k: int, n: int, z: float = 1.96) -> tuple:
    """The 95 % Wilson score interval of k successes in n trials."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, mid - half), min(1.0, mid + half))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50, help="runs each way (default 50)")
    ap.add_argument("--markdown", help="write the section here (docs/bench/ddp_teardown.md)")
    ap.add_argument("--log", default=None, help="append each run's record here as JSON lines")
    ap.add_argument("--note", default="", help="a paragraph to add (with --from-log: when and where the runs were made)")
    ap.add_argument("--from-log", default=None, help="write the section from the records of an earlier run's --log "
                    "(the runs it finished) instead of running")
    a = ap.parse_args()
    section = benchlib.Section("DDP teardown abort: hpclaunch vs plain sbatch (`bench/ddp_teardown/bench_ddp_teardown.py`)",
                               f"python bench/ddp_teardown/bench_ddp_teardown.py --runs {a.runs} --markdown "
                               "docs/bench/ddp_teardown.md")
    root = tempfile.mkdtemp(prefix="hpclaunch-ddp-teardown-")
    records = []
    order = [m for _ in range(a.runs) for m in random.sample([through_hpclaunch, plain_sbatch], 2)]
    if a.from_log:
        records = [json.loads(line) for line in open(a.from_log) if line.strip()]
        order = []
        a.runs = min(sum(r["mode"] == m for r in records) for m in ("hpclaunch", "plain sbatch"))
        section.command = (f"python bench/ddp_teardown/bench_ddp_teardown.py --runs {a.runs} --log runs.jsonl\n"
                           "python bench/ddp_teardown/bench_ddp_teardown.py --from-log runs.jsonl --markdown "
                           "docs/bench/ddp_teardown.md")
    for i, run in enumerate(order):
        folder = os.path.join(root, f"run{i:03d}")
        os.makedirs(folder)
        rec = run(folder)
        rec["i"] = i
        records.append(rec)
        print(json.dumps(rec), flush=True)
        if a.log:
            with open(a.log, "a") as f:
                f.write(json.dumps(rec) + "\n")
    rows = []
    counts = {}
    for mode in ("hpclaunch", "plain sbatch"):
        mine = [r for r in records if r["mode"] == mode and r["started"]]
        k, n = sum(r["aborted"] for r in mine), len(mine)
        lo, hi = wilson(k, n)
        other = sum(1 for r in mine if not r["aborted"] and r["rc"] != 0)
        counts[mode] = (k, n)
        rows.append((mode, n, k, f"{100 * k / n:.1f} %" if n else "n/a", f"[{100 * lo:.1f} %, {100 * hi:.1f} %]", other,
                     f"{sorted(r['s'] for r in mine)[n // 2]:.0f} s" if n else "n/a"))
    from scipy.stats import fisher_exact  # noqa: PLC0415 (a bench dependency, not hpclaunch's)
    (ka, na), (kb, nb) = counts["hpclaunch"], counts["plain sbatch"]
    p = fisher_exact([[ka, na - ka], [kb, nb - kb]])[1] if na and nb else float("nan")
    section.para(f"{a.runs} runs each way, alternating in random pairs (hpclaunch first or plain first, by chance), "
                 f"each a 2-node x 1-rank torchrun job of `bench/ddp_teardown/ddp_tutorial_cpu.py` ({' '.join(ARGS)}: "
                 "the tutorial's epochs and snapshot interval), gloo on CPU. Aborted: a rank's output holds "
                 f"`{ABORT}` or its exit code is 134. A run that never started a rank is not counted.")
    section.table(("how", "runs", "aborted", "rate", "95 % interval (Wilson)", "other failures", "median run"), rows)
    section.para(f"Fisher's exact test, hpclaunch against plain sbatch: p = {p:.3g} "
                 f"({'the rates differ' if p < 0.05 else 'no difference these runs can show'}).")
    if a.note:
        section.para(a.note)
    section.write(a.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
