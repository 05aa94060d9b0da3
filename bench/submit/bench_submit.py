#!/usr/bin/env python3
"""Submitting a 1,000-point sweep: hpclaunch (one job array) vs submitit's executor.map_array.

    export SLURM_CONF=/tmp/hpclaunch-slurm/slurm.conf      # the test cluster (make cluster-up)
    .venv/bin/python bench/submit/bench_submit.py                  # one round: hpclaunch, then submitit
    .venv/bin/python bench/submit/bench_submit.py --rounds 2       # alternates the order each round
    .venv/bin/python bench/submit/bench_submit.py --points 100     # a quick check
    .venv/bin/python bench/submit/bench_submit.py --rounds 3 --no-wait   # submit times only, arrays cancelled

Both sides ask for the same thing: N tasks, one array, at most --parallelism running at once,
1 node x 1 task x 1 CPU, 1000M, 5 minutes, partition debug.

- hpclaunch: `hpclaunch submit sweep.yaml --backend slurm --json` (a fresh process, preflight on),
  the job file being `command: [bash, -c, "echo {i}"]` with
  `sweep: {parameters: {i: {range: [0, N]}}, parallelism: P}` and `monitor: {interval: 0}`.
- submitit: a fresh `python` process that imports submitit, makes an AutoExecutor with the same
  parameters and calls `executor.map_array(f, range(N))` on a trivial function.

Measured for each, from outside: submit = process start -> job ids printed (interpreter start and
imports included: what a user waits for); all-done = process start -> no task of that array left in
squeue (polled every 0.2 s). The submitit child also reports map_array's own time. Each run gets a
fresh work directory and a fresh submitit folder (a reused %j folder returns stale results);
hpclaunch's runs share one HPCLAUNCH_HOME, made before the first round by `hpclaunch list` (as a
user's first command makes it): a submit finds the registry there, as every submit but a user's
very first does (making it, with its tables, costs a first submit ~7 more fsyncs). Both run from
bytecode, as installed packages do. Afterwards sacct counts the tasks that
COMPLETED. Goal: hpclaunch >= 10x faster to submit. Each round also times the floor, just before
hpclaunch: a Python process that calls sbatch once for the same array (cancelled at once), the least
any tool can take; goal (issue 20): hpclaunch <= 3x the floor.
"""
from __future__ import annotations

import argparse
import functools
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import benchlib  # noqa: E402

PY = sys.executable
# The `hpclaunch` command a user runs (pip's script beside this Python), else `python -m hpclaunch`.
_SCRIPT = os.path.join(os.path.dirname(PY), "hpclaunch")
HPCLAUNCH = [_SCRIPT] if os.path.exists(_SCRIPT) else [PY, "-m", "hpclaunch"]
# Children run with bytecode, as after any pip install. With PYTHONDONTWRITEBYTECODE set (as on the
# development VMs) an editable hpclaunch recompiled its ~30 modules from source on every run (+0.1 s),
# while submitit's site-packages had .pyc from pip: that measured compilation, not submission.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

SUBMITIT_CHILD = textwrap.dedent("""
    import json, sys, time
    t_import = time.monotonic()
    import submitit

    def task(i):
        return i

    folder, points, parallelism = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
    ex.update_parameters(name="bench-submitit", timeout_min=5, nodes=1, tasks_per_node=1, cpus_per_task=1,
                         slurm_partition="debug", slurm_mem="1000M", slurm_array_parallelism=parallelism)
    t0 = time.monotonic()
    jobs = ex.map_array(task, range(points))
    t1 = time.monotonic()
    print(json.dumps({"job_id": jobs[0].job_id.split("_")[0], "tasks": len(jobs),
                      "map_array_s": t1 - t0, "import_and_setup_s": t0 - t_import}), flush=True)
""")


def sweep_job(points: int, parallelism: int) -> str:
    return textwrap.dedent(f"""\
        name: bench-sweep
        profile: testcluster
        launcher: srun
        command: [bash, -c, "echo {{i}}"]
        resources: {{nodes: 1, tasks_per_node: 1, cpus_per_task: 1, mem: 1000M, time: "00:05:00"}}
        slurm: {{partition: debug}}
        monitor: {{interval: 0}}
        sweep: {{parameters: {{i: {{range: [0, {points}]}}}}, parallelism: {parallelism}}}
        """)


def squeue_left(job_ids: list[str]) -> int:
    """Tasks of these arrays still pending/running/completing (0 once Slurm has forgotten them)."""
    proc = subprocess.run(["squeue", "-h", "-r", "-j", ",".join(job_ids), "-o", "%T"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return 0  # "Invalid job id specified": gone
    return sum(1 for s in proc.stdout.split() if s in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING",
                                                       "SUSPENDED", "REQUEUED", "RESIZING", "SIGNALING"))


def wait_done(job_ids: list[str], start: float, timeout: float) -> float:
    time.sleep(0.2)
    while squeue_left(job_ids):
        if time.monotonic() - start > timeout:
            raise SystemExit(f"timeout: jobs {job_ids} still in squeue after {timeout:.0f} s")
        time.sleep(0.2)
    return time.monotonic() - start


def completed(job_ids: list[str], expected: int) -> dict:
    counts: dict = {}
    for _ in range(40):  # the dbd lags behind the controller: wait until it has every task
        proc = subprocess.run(["sacct", "-n", "-P", "-X", "-j", ",".join(job_ids), "-o", "JobID,State"],
                              capture_output=True, text=True)
        counts = {}
        for line in proc.stdout.splitlines():
            if "|" in line and "[" not in line:
                state = line.split("|")[1].split()[0]
                counts[state] = counts.get(state, 0) + 1
        if sum(counts.values()) >= expected and all(s in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY")
                                             for s in counts):
            break
        time.sleep(0.5)
    return counts


def boot_time() -> str:
    """slurmctld's start: a run during which it changed was cut short by a cluster restart."""
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("BOOT_TIME"):
            return line.split("=", 1)[1].strip()
    return "?"


def wait_queue_empty(limit: float = 600) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h"], capture_output=True, text=True).stdout
        if not out.strip():
            return
        time.sleep(1)
    print("warning: the queue is not empty; other jobs share the cluster", file=sys.stderr)


def cancel_now(job_ids: list[str]) -> float:
    """--no-wait: the arrays are cancelled at once (only the submit time counts); waits until
    squeue no longer lists them, so that the next run sees the same queue."""
    subprocess.run(["scancel", *job_ids], capture_output=True)
    wait_done(job_ids, time.monotonic(), 120)
    return float("nan")


def make_home() -> str:
    """An HPCLAUNCH_HOME with its registry, made as a user's first command makes it."""
    home = tempfile.mkdtemp(prefix="bench-hpclaunch-home-")
    subprocess.run(HPCLAUNCH + ["list"], env=dict(os.environ, HPCLAUNCH_HOME=home), capture_output=True,
                   check=True)
    if not os.path.exists(os.path.join(home, "registry.db")):
        raise SystemExit(f"`hpclaunch list` made no registry in {home}")
    return home


def run_hpclaunch(points: int, parallelism: int, timeout: float, wait: bool = True, home: str = "") -> dict:
    """One hpclaunch submit of the sweep; ``home``: the HPCLAUNCH_HOME the rounds share (else a new one)."""
    work = tempfile.mkdtemp(prefix="bench-hpclaunch-")
    job = os.path.join(work, "sweep.yaml")
    with open(job, "w") as f:
        f.write(sweep_job(points, parallelism))
    env = dict(os.environ, HPCLAUNCH_HOME=home or os.path.join(work, "home"))
    start = time.monotonic()
    proc = subprocess.run(HPCLAUNCH + ["submit", job, "--backend", "slurm", "--json"],
                          cwd=work, env=env, capture_output=True, text=True)
    submit_s = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"hpclaunch submit failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    json.loads(proc.stdout[: proc.stdout.rindex("}") + 1])  # the --json answer parses
    # A sweep larger than MaxArraySize is several arrays; the registry has them all.
    listing = subprocess.run(HPCLAUNCH + ["list", "--all", "--json"], cwd=work, env=env,
                             capture_output=True, text=True, check=True)
    ids = sorted({r["job_id"] for r in json.loads(listing.stdout) if r["run_dir"].startswith(os.path.realpath(work) + os.sep)},
                 key=int)  # this run's arrays, not the earlier rounds' in the same registry
    done_s = wait_done(ids, start, timeout) if wait else cancel_now(ids)
    res = {"tool": "hpclaunch", "submit_s": submit_s, "all_done_s": done_s, "job_ids": ids,
           "states": completed(ids, points) if wait else {}}
    shutil.rmtree(work, ignore_errors=True)  # ~140 MB a run (1,000 task directories): not left in /tmp
    return res


FLOOR_CHILD = textwrap.dedent("""
    import subprocess, sys
    points, parallelism = int(sys.argv[1]), int(sys.argv[2])
    out = subprocess.run(["sbatch", "--parsable", "--job-name=bench-floor", f"--array=0-{points - 1}%{parallelism}",
                          "--partition=debug", "--nodes=1", "--ntasks=1", "--cpus-per-task=1", "--mem=1000M",
                          "--time=5", "--output=/dev/null", "--wrap", "echo $SLURM_ARRAY_TASK_ID"],
                         capture_output=True, text=True, check=True).stdout
    print(out.strip().split(";")[0])
""")


def run_floor(points: int, parallelism: int) -> dict:
    """The least any Python tool can do: start an interpreter and call sbatch once for the same
    array (no validation, no script, no record). Cancelled at once: only its submit time counts."""
    start = time.monotonic()
    proc = subprocess.run([PY, "-c", FLOOR_CHILD, str(points), str(parallelism)], capture_output=True, text=True)
    submit_s = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"bare sbatch failed ({proc.returncode}):\n{proc.stderr}")
    job_id = proc.stdout.strip()
    subprocess.run(["scancel", job_id], capture_output=True)
    wait_done([job_id], time.monotonic(), 120)
    return {"tool": "floor", "submit_s": submit_s, "job_ids": [job_id]}


def run_submitit(points: int, parallelism: int, timeout: float, wait: bool = True) -> dict:
    work = tempfile.mkdtemp(prefix="bench-submitit-")
    folder = os.path.join(work, "submitit", "%j")
    start = time.monotonic()
    proc = subprocess.run([PY, "-c", SUBMITIT_CHILD, folder, str(points), str(parallelism)], cwd=work,
                          capture_output=True, text=True)
    submit_s = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"submitit map_array failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    ids = [out["job_id"]]
    done_s = wait_done(ids, start, timeout) if wait else cancel_now(ids)
    res = {"tool": "submitit", "submit_s": submit_s, "all_done_s": done_s, "job_ids": ids,
           "map_array_s": out["map_array_s"], "import_and_setup_s": out["import_and_setup_s"],
           "states": completed(ids, points) if wait else {}}
    shutil.rmtree(work, ignore_errors=True)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", type=int, default=1000)
    ap.add_argument("--parallelism", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=1, help="rounds; the order alternates each round")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds to wait for one run to drain")
    ap.add_argument("--json", metavar="FILE", help="also write the figures here")
    ap.add_argument("--markdown", metavar="FILE", help="write this bench's section of docs/benchmarks.md here")
    ap.add_argument("--no-wait", action="store_true",
                    help="time the submissions only: cancel each array at once, no all-done time or task counts "
                         "(the default waits for every task, minutes a round)")
    args = ap.parse_args()
    section = benchlib.Section("Submitting a 1,000-point sweep (`bench/submit/bench_submit.py`)"
                               if args.points == 1000 else f"Submitting a {args.points}-point sweep",
                               f"{os.path.relpath(PY)} bench/submit/bench_submit.py --points {args.points} "
                               f"--parallelism {args.parallelism} --rounds {args.rounds}" + (" --no-wait" if args.no_wait else ""))
    if not os.environ.get("SLURM_CONF") and os.path.exists("/tmp/hpclaunch-slurm/slurm.conf"):
        os.environ["SLURM_CONF"] = "/tmp/hpclaunch-slurm/slurm.conf"
    sinfo = subprocess.run(["sinfo", "-h", "-o", "%D nodes x %c CPUs, %P"], capture_output=True, text=True)
    if sinfo.returncode != 0:
        raise SystemExit(f"no Slurm cluster answers: {sinfo.stderr.strip()} \u2014 run `make cluster-up` and "
                         "export SLURM_CONF")
    print(f"cluster: {sinfo.stdout.strip()}; {args.points} points, parallelism {args.parallelism}, "
          f"{args.rounds} round(s)", flush=True)

    # Bytecode for both sides up front (see PYTHONDONTWRITEBYTECODE above).
    import compileall
    import submitit
    for pkg in ("hpclaunch", "launchers", "monitors", "templates", "train_entry"):
        compileall.compile_dir(os.path.join(ROOT, pkg), quiet=1)
    compileall.compile_dir(os.path.dirname(submitit.__file__), quiet=1)

    home = make_home()
    hpclaunch_run = functools.partial(run_hpclaunch, home=home)
    runs: list[dict] = []
    floors: list[dict] = []
    timeline: list[dict] = []  # runs and floors in the order they ran
    for rnd in range(args.rounds):
        order = [hpclaunch_run, run_submitit] if rnd % 2 == 0 else [run_submitit, hpclaunch_run]
        for fn in order:
            if fn is hpclaunch_run:  # the floor just before hpclaunch: the two see the same machine
                wait_queue_empty()
                floor = run_floor(args.points, args.parallelism)
                floor["round"] = rnd
                floors.append(floor)
                timeline.append(floor)
                print(f"round {rnd} floor     submit {floor['submit_s']:7.3f} s   (python + one bare sbatch, "
                      "cancelled at once)", flush=True)
            for _ in range(3):  # the test cluster is shared: another session may restart it mid-run
                wait_queue_empty()
                boot = boot_time()
                r = fn(args.points, args.parallelism, args.timeout, wait=not args.no_wait)
                if boot_time() == boot:
                    break
                print(f"round {rnd} {r['tool']}: the cluster was restarted during the run; running it again",
                      file=sys.stderr, flush=True)
            r["round"] = rnd
            runs.append(r)
            timeline.append(r)
            extra = (f"  (map_array {r['map_array_s']:.2f} s, import+setup {r['import_and_setup_s']:.2f} s)"
                     if r["tool"] == "submitit" else "")
            print(f"round {rnd} {r['tool']:<9} submit {r['submit_s']:7.3f} s   all done {r['all_done_s']:7.1f} s"
                  f"   arrays {','.join(r['job_ids'])}   tasks {r['states']}{extra}", flush=True)

    def med(tool: str, key: str) -> float:
        return statistics.median(r[key] for r in runs if r["tool"] == tool)

    h_sub, s_sub = med("hpclaunch", "submit_s"), med("submitit", "submit_s")
    h_done, s_done = med("hpclaunch", "all_done_s"), med("submitit", "all_done_s")
    print()
    print(f"{'':<22}{'hpclaunch':>12}{'submitit':>12}{'submitit/hpclaunch':>22}")
    print(f"{'submit (s)':<22}{h_sub:>12.2f}{s_sub:>12.2f}{s_sub / h_sub:>21.1f}x")
    if not args.no_wait:
        print(f"{'submit -> all done (s)':<22}{h_done:>12.1f}{s_done:>12.1f}{s_done / h_done:>21.2f}x")
    f_sub = statistics.median(r["submit_s"] for r in floors)
    print(f"{'floor: python + sbatch':<22}{f_sub:>12.2f}{'':>12}{s_sub / f_sub:>21.1f}x  "
          f"(the most any Python tool could gain over submitit here; hpclaunch = {h_sub / f_sub:.1f}x the floor)")
    print(f"goal hpclaunch >= 10x faster to submit: {'MET' if s_sub / h_sub >= 10 else 'NOT MET'} "
          f"({s_sub / h_sub:.1f}x; medians over {args.rounds} round(s))")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"points": args.points, "parallelism": args.parallelism, "runs": runs,
                       "median": {"hpclaunch_submit_s": h_sub, "submitit_submit_s": s_sub,
                                  "hpclaunch_all_done_s": h_done, "submitit_all_done_s": s_done,
                                  "floor_submit_s": f_sub, "floors": floors,
                                  "submit_ratio": s_sub / h_sub}}, f, indent=2)
    section.para(f"On the 2-node test cluster (`make cluster-up`), {args.points} points, parallelism "
                 f"{args.parallelism}, each side a fresh process (`{' '.join(os.path.basename(c) for c in HPCLAUNCH)} "
                 "submit`, submitit's `map_array`), the order alternated each round; each round also times the "
                 "floor, just before hpclaunch: a Python process that calls `sbatch` once for the same array "
                 "(cancelled at once). hpclaunch's runs share one HPCLAUNCH_HOME whose registry `hpclaunch list` "
                 "made before the first round, as a user's first command makes it.")
    section.table(["round", "tool", "submit (s)", "submit -> all done (s)", "tasks"],
                  [[r["round"], r["tool"], f"{r['submit_s']:.3f}",
                    f"{r['all_done_s']:.1f}" if r.get("all_done_s", math.nan) == r.get("all_done_s", math.nan) else "—",
                    ", ".join(f"{k} {v}" for k, v in r.get("states", {}).items()) or "—"]
                   for r in timeline], "llrrl")
    h_all = [r["submit_s"] for r in runs if r["tool"] == "hpclaunch"]
    section.para(f"- hpclaunch submit: {benchlib.fmt(h_all)}; submitit {s_sub:.3f} s; floor {f_sub:.3f} s (medians)\n"
                 f"- hpclaunch / floor = **{h_sub / f_sub:.2f}** (goal <= 3: {'met' if h_sub / f_sub <= 3 else 'NOT met'})\n"
                 f"- submitit / hpclaunch = **{s_sub / h_sub:.2f}x** to submit"
                 + (" (--no-wait: arrays cancelled at once)\n" if args.no_wait else f", {s_done / h_done:.2f}x to all done\n")
                 + f"- load average at the end: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    section.write(args.markdown)
    shutil.rmtree(home, ignore_errors=True)
    bad = [r for r in runs if not args.no_wait and
           (set(r["states"]) != {"COMPLETED"} or sum(r["states"].values()) != args.points)]
    if bad:
        print(f"warning: not every task COMPLETED: {[(r['tool'], r['states']) for r in bad]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
