"""Start-up of two commits side by side, each installed as a wheel in its own venv, in one run.

    python bench/startup/compare_commits.py OLD_REV NEW_REV [--runs 30]

For each commit: `git worktree`-free export (`git archive`), `pip install .` into a fresh venv
under /tmp/hpclaunch-bench-<rev>, then the commands below are timed interleaved (old, new, floor,
old, new, floor, ...), from a scratch directory, so machine noise hits all alike. Prints medians,
quartiles and the new/old ratio of medians as a Markdown table, with the load average.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_startup import timeit  # noqa: E402  (the same timer as the startup bench)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB = """name: bench
profile: testcluster
launcher: torchrun
command: [python, train.py]
resources: {nodes: 2, tasks_per_node: 2, cpus_per_task: 1, time: "00:30:00"}
"""


def install(rev: str) -> str:
    sha = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.strip()
    venv = f"/tmp/hpclaunch-bench-{sha}"
    if not os.path.exists(os.path.join(venv, "bin", "hpclaunch")):
        src = tempfile.mkdtemp()
        archive = subprocess.run(["git", "archive", sha], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([f"{venv}/bin/pip", "install", "-q", src], check=True)
    return venv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    venvs = {"old": install(args.old), "new": install(args.new)}
    work = tempfile.mkdtemp()
    with open(os.path.join(work, "job.yaml"), "w") as f:
        f.write(JOB)
    cases = {"python -c pass": lambda v: [f"{v}/bin/python", "-c", "pass"]}
    for what in ("--help", "validate job.yaml", "render job.yaml"):
        for side in ("old", "new"):
            cases[f"{side}: hpclaunch {what}"] = (lambda w: lambda v: [f"{v}/bin/hpclaunch"] + w.split())(what)
    times = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, make in cases.items():
            venv = venvs["new" if name.startswith("new") else "old"]
            times[name].append(timeit(make(venv), work, None))
    print(f"old {args.old} ({venvs['old']}), new {args.new} ({venvs['new']}); {args.runs} interleaved runs; "
          f"load average {os.getloadavg()[0]:.2f}\n")
    print("| command | median ms | p25-p75 ms | new/old |")
    print("|---|---|---|---|")
    for name, ts in times.items():
        q = statistics.quantiles(ts, n=4)
        ratio = ""
        if name.startswith("new: "):
            old = statistics.median(times["old: " + name[5:]])
            ratio = f"{statistics.median(ts) / old:.2f}"
        print(f"| {name} | {statistics.median(ts) * 1000:.1f} | {q[0] * 1000:.1f}-{q[2] * 1000:.1f} | {ratio} |")


if __name__ == "__main__":
    main()
