#!/usr/bin/env python3
"""Every bench end to end, each writing its section into docs/bench/, then docs/benchmarks.md.

    python bench/run_all.py [--only startup,submit] [--quick]

Run by `make bench` (which brings up the test cluster for the submit bench). The startup bench
installs hpclaunch as a wheel (the work tree and the pre-move commit) and TorchX in venvs of their
own; the submit bench then runs with that wheel install's Python; the report, fleet, train_overhead and scale
benches rebuild this tree's wheel and re-run themselves with it first on PYTHONPATH
(benchlib.run_from_wheel), and the monitor bench installs it in its CodeCarbon venv: every figure is
of a wheel install, as users have, and each section says so. A bench that fails is reported
and the others still run; the exit status is 1 when any failed. A bench script without
``--markdown`` has its printed output kept as its section (benchlib.Section), so its figures still
reach the page. bench/gpu runs only where `nvidia-smi` answers; elsewhere docs/bench/gpu-h100.md
(figures recorded on a real H100) stays as it is.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import benchlib  # noqa: E402

REPO = benchlib.REPO
OUT = os.path.join(REPO, "docs", "bench")
WHEEL_PY = "/tmp/hpclaunch-bench-startup/new/bin/python"  # made by the startup bench


def benches(quick: bool) -> list[tuple[str, str, list[str], str]]:
    """(name, title, argv after the script, python) of every bench, in the order they run."""
    py = sys.executable
    wheel = WHEEL_PY  # made by the startup bench, which runs first: looked for when the submit bench starts
    out = [
        ("startup", "bench/startup/bench_startup.py", ["--setup-peers", "--runs", "10" if quick else "30"], py),
        ("submit", "bench/submit/bench_submit.py", ["--points", "100" if quick else "1000", "--rounds", "1" if quick else "5"],
         wheel),
        # the same sweep against Slurm's recorded answers (stubs, no cluster), the same wheel install
        ("submit_offline", "bench/submit/bench_submit_offline.py",
         ["--python", wheel, "--rounds", "3" if quick else "15"], py),
        ("monitor", "bench/monitor/bench_monitor.py", ["--quick"] if quick else [], py),
        ("monitor_alerts", "bench/monitor/bench_alerts.py",
         ["--rounds", "1", "--seconds", "15"] if quick else ["--rounds", "6", "--seconds", "70"], py),
        ("report", "bench/report/bench_report.py", ["--hosts", "4"] if quick else [], py),
        ("fleet", "bench/fleet/bench_fleet.py", ["--jobs", "1000"] if quick else [], py),
        # issue 50: a day-long 1,024-node job's report, its dashboard page, the exporter's series, the
        # registry at 100,000 rows and under 64 submitters (Slurm's part on the test cluster)
        ("scale-report", "bench/scale/bench_report_scale.py", ["--sizes", "1", "--rounds", "1"] if quick else [], py),
        ("scale-dashboard", "bench/scale/bench_dashboard_scale.py",
         ["--nodes", "64", "--seconds", "20"] if quick else [], py),
        ("scale-exporter", "bench/scale/bench_exporter_scale.py", ["--scrapes", "5"] if quick else [], py),
        ("scale-registry", "bench/scale/bench_registry_scale.py",
         ["--rows", "1000", "--runs", "3", "--submitters", "4", "--jobs", "3"] if quick else ["--slurm"], py),
        ("train_overhead", "bench/train_overhead/bench_train_overhead.py",
         # one rank on a 2-core machine: two ranks and the monitor oversubscribe it and single reps vary by
         # +-10 %, too much for the +-3 % interval the issue asks for in a quarter of an hour
         ["--with-monitor", "--nproc", "1"] + (["--reps", "2", "--steps", "100"] if quick else ["--reps", "40"]), py),
        # 40 trials three times over and Ray Tune beside them: ~30 min on the shared 2-vCPU VM
        ("tune", "bench/tune/bench_tune.py",
         ["--trials", "12", "--epochs", "5", "--prune", "median", "--skip-ray"] if quick else ["--prune", "median,asha"],
         py),
        # the failure simulator's cadence against fixed intervals (docs/recovery.md): ~25 min at 300 jobs a cell
        ("goodput_cadence", "bench/goodput/bench_cadence.py", ["--runs", "20" if quick else "300"], py),
        # on the test cluster (make bench brings it up); 50 runs each way take 1-2 hours on the shared machine
        ("ddp_teardown", "bench/ddp_teardown/bench_ddp_teardown.py", ["--runs", "3" if quick else "50"], py),
    ]
    gpu = shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0
    # ZeRO 0-3 (issue 49): on a GPU machine its own section (zero-gpu), else the CPU smoke run
    out.append(("zero-gpu" if gpu else "zero", "bench/zero/bench_zero.py", [] if gpu else ["--quick"], py))
    if gpu:
        out.append(("gpu", "bench/gpu/gpu_checks.py", ["--out", tempfile.mkdtemp(prefix="hpclaunch-gpu-")], py))
    return out


def takes_markdown(python: str, script: str) -> bool:
    proc = subprocess.run([python, script, "--help"], cwd=REPO, capture_output=True, text=True)
    return "--markdown" in proc.stdout


def run(name: str, script: str, argv: list[str], python: str, out: str) -> bool:
    """Run one bench (by path: the repository is not on a wheel Python's sys.path) into out/NAME.md."""
    target = os.path.join(out, f"{name}.md")
    if takes_markdown(python, script):
        # cwd is the repository: a target inside it by its relative path, which the section then shows
        rel = os.path.relpath(target, REPO)
        cmd = [python, os.path.join(REPO, script), *argv, "--markdown", target if rel.startswith("..") else rel]
        print(f"== {name}: {' '.join(cmd)}", flush=True)
        return subprocess.run(cmd, cwd=REPO).returncode == 0
    cmd = [python, os.path.join(REPO, script), *argv]
    print(f"== {name}: {' '.join(cmd)} (no --markdown: its output becomes the section)", flush=True)
    proc = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
    print(proc.stdout, flush=True)
    if proc.returncode != 0:
        return False
    section = benchlib.Section(f"`{script}`", " ".join([os.path.relpath(python, REPO), script, *argv]), python=python)
    section.para("This bench prints its figures rather than writing a section; its output, as printed:")
    section.para("```\n" + proc.stdout.strip() + "\n```")
    section.write(target)
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="comma list of bench names (default: all)")
    ap.add_argument("--quick", action="store_true",
                    help="small sizes, to check that every bench runs; sections go to a scratch folder, "
                         "docs/ is left alone")
    args = ap.parse_args()
    out = tempfile.mkdtemp(prefix="hpclaunch-bench-quick-") if args.quick else OUT
    only = {n for n in args.only.split(",") if n}
    failed = []
    for name, script, argv, python in benches(args.quick):
        if only and name not in only:
            continue
        if name == "submit" and not os.path.exists(python):
            print("submit: no wheel install yet (run the startup bench first); using this Python", flush=True)
            python = sys.executable
        if name == "submit_offline" and not os.path.exists(WHEEL_PY):
            argv = [sys.executable if a == WHEEL_PY else a for a in argv]
        if not run(name, script, argv, python, out):
            failed.append(name)
    if args.quick:
        print(f"sections of the quick run: {out} (docs/ unchanged)")
    else:
        subprocess.run([sys.executable, os.path.join(HERE, "assemble.py")], check=True)
    if failed:
        print(f"benches that failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
