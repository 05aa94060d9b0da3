#!/usr/bin/env python3
"""The failure simulator against real runs: local train_entry jobs (2 ranks of DDP on CPU) with hangs
injected as a Poisson process (a random rank SIGSTOPped), recovered by the job runtime (detected,
stacks saved, restarted from the newest checkpoint); each run's ETTR from its goodput report, their
mean against the simulator's prediction for the same job shape, failure rate and checkpoint interval.

    python bench/goodput/bench_sim_vs_real.py --runs 30 --mtbf 40 --markdown docs/bench/goodput_sim.md

The simulator's inputs are measured: the work, start, end and checkpoint cost from undisturbed runs
of the same job; the time to detect a hang and to restart (the verdict to the next first step) as
the means over the disturbed runs' incidents. What it predicts is how the failure process and the
checkpoint interval turn into lost work and restarts, and so the ETTR.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import Section  # noqa: E402

from hpclaunch.runtime.simulate import Shape, expected  # noqa: E402

PY = sys.executable

JOB = """name: simreal
profile: local
launcher: torchrun
command: [python, -m, hpclaunch.train_entry, --data, {data}, --epochs, "{epochs}", --batch-size, "4",
          --hidden, "512,512", --log-every, "5", --stop-check-every, "5", --deterministic]
resources: {{nodes: 1, tasks_per_node: 2, cpus_per_task: 1, time: "00:30:00"}}
monitor: {{interval: 0}}
requeue: {{max_attempts: 50}}
recovery: {{checkpoint_interval: {interval}, hang: {{floor: {floor}, ceiling: 600}}}}
"""


def hl(home, *args, cwd):
    env = dict(os.environ, HPCLAUNCH_HOME=home)
    return subprocess.run([PY, "-m", "hpclaunch", *args], capture_output=True, text=True, cwd=cwd, env=env)


def ranks(run_dir):
    """{rank: pid} of the attempt the job runtime launched last."""
    try:
        attempt = open(os.path.join(run_dir, ".hpclaunch", "attempt")).read().split()[0]
        rows = open(os.path.join(run_dir, "logs", f"attempt{attempt}", "ranks.tsv")).read().splitlines()
    except (OSError, IndexError):
        return attempt if False else None, {}
    return attempt, {int(c[0]): int(c[2]) for c in (r.split("\t") for r in rows) if len(c) == 3}


def stepping_since(run_dir, attempt, t):
    """Whether rank 0 wrote a step record after t (the current attempt trains)."""
    try:
        with open(os.path.join(run_dir, "metrics", "rank0.jsonl"), "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 4096))
            lines = f.read().splitlines()[1:]
    except OSError:
        return False
    for line in reversed(lines):
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("kind") == "step":
            return rec.get("time_unix", 0) > t
    return False


def one_run(work, data, epochs, interval, floor, mtbf, rng, label):
    """A job to its end, hangs injected at Poisson times while it trains; its goodput document."""
    home = os.path.join(work, f"home-{label}")
    job = os.path.join(work, f"job-{label}.yaml")
    with open(job, "w") as f:
        f.write(JOB.format(data=data, epochs=epochs, interval=interval, floor=floor))
    out = hl(home, "submit", job, "--json", cwd=work)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    rec = json.loads(out.stdout)
    job_id, run_dir = rec.get("job_id") or rec.get("id"), rec["run_dir"]
    injected = []
    next_at = None
    while True:
        st = hl(home, "status", job_id, "--json", cwd=work)
        state = json.loads(st.stdout).get("state") if st.returncode == 0 else None
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "GAVE_UP"):
            break
        if mtbf:
            attempt, pids = ranks(run_dir)
            since = injected[-1][0] if injected else 0.0
            if pids and stepping_since(run_dir, attempt, since):
                if next_at is None:
                    next_at = time.time() + rng.expovariate(1.0 / mtbf)   # the clock runs while it trains
                elif time.time() >= next_at:
                    r = rng.choice(sorted(pids))
                    try:
                        os.kill(pids[r], signal.SIGSTOP)
                        injected.append((time.time(), attempt, r))
                    except OSError:
                        pass
                    next_at = None
        time.sleep(0.2)
    doc = json.loads(hl(home, "report", job_id, "--goodput", "--format", "json", cwd=work).stdout)
    doc["injected"] = len(injected)
    doc["state"] = state
    return doc


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--calibration-runs", type=int, default=3)
    p.add_argument("--mtbf", type=float, default=25.0, help="mean seconds of training between injected hangs")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--interval", type=float, default=4.0, help="the checkpoint interval, seconds")
    p.add_argument("--floor", type=float, default=3.0, help="the hang bound's floor, seconds")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--markdown", default=None)
    a = p.parse_args()
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="hl-simreal-")
    data = os.path.join(work, "digits.csv")
    subprocess.run([PY, "-m", "hpclaunch.train_entry.digits", data], check=True, capture_output=True)
    calm = [one_run(work, data, a.epochs, a.interval, a.floor, 0, rng, f"calm{i}") for i in range(a.calibration_runs)]
    for d in calm:
        print("calibration", d["state"], d["run_s"], d["seconds"], flush=True)
    mean = lambda xs: statistics.fmean(xs) if xs else 0.0  # noqa: E731
    W = mean([d["seconds"]["productive"] for d in calm])
    S = mean([d["seconds"]["starting"] for d in calm])
    E = mean([d["seconds"]["ending"] for d in calm])
    saves = [d["seconds"]["checkpointing"] for d in calm]
    n_saves = max(1, int(W // a.interval))
    C = mean(saves) / n_saves
    runs = []
    for i in range(a.runs):
        d = one_run(work, data, a.epochs, a.interval, a.floor, a.mtbf, rng, f"run{i}")
        runs.append(d)
        print(f"run {i}: {d['state']} ETTR {d['ettr']} injected {d['injected']} incidents {len(d['incidents'])}",
              flush=True)
    incidents = [i for d in runs for i in d["incidents"]]
    D = mean([i["detect_s"] for i in incidents if "detect_s" in i])
    R = mean([d["seconds"]["recovering"] / max(1, len(d["incidents"])) for d in runs if d["incidents"]])
    measured = [d["ettr"] for d in runs if d["ettr"] is not None]
    m = mean(measured)
    se = statistics.stdev(measured) / len(measured) ** 0.5 if len(measured) > 1 else 0.0
    shape = Shape(work=W, nodes=1, mtbf_node_s=a.mtbf, cost=C, detect=D, restart=R, start=S, end=E)
    sim = expected(shape, ("fixed", a.interval), 4000, a.seed)
    completed = sum(d["state"] == "COMPLETED" for d in runs)
    sec = Section("The failure simulator against real runs (`bench/goodput/bench_sim_vs_real.py`)",
                  f"python bench/goodput/bench_sim_vs_real.py --runs {a.runs} --mtbf {a.mtbf:g} "
                  f"--epochs {a.epochs} --interval {a.interval:g} --floor {a.floor:g}")
    sec.para(f"{a.runs} local train_entry jobs (torchrun, 2 ranks of DDP on CPU, deterministic digits, {a.epochs} "
             f"epochs), each with hangs injected as a Poisson process while it trains (mean {a.mtbf:g} s of "
             "training between them; a random rank SIGSTOPped), which the job runtime detects (hang bound floor "
             f"{a.floor:g} s), saves the stacks of, and recovers from by restarting the step from the newest "
             f"checkpoint (every {a.interval:g} s). {completed} of {a.runs} ended COMPLETED. Each run's ETTR "
             "is its goodput report's (productive / run time); the simulator's is the mean of 4,000 seeded jobs "
             "of the same shape, failure rate and checkpoint interval.")
    sec.table(["simulator input", "value", "measured from"], [
        ("work (productive)", f"{W:.1f} s", f"{a.calibration_runs} undisturbed runs"),
        ("start, end", f"{S:.1f} s, {E:.1f} s", "the same"),
        ("checkpoint cost", f"{C:.3f} s", "the same (checkpointing / saves)"),
        ("detect", f"{D:.1f} s", f"the {len(incidents)} incidents' detect_s"),
        ("restart (verdict to first step)", f"{R:.1f} s", "recovering / incidents, per run"),
        ("MTBF", f"{a.mtbf:g} s", "the injection rate")])
    sec.table(["", "ETTR", "failures per job"], [
        ("measured (mean of runs ± s.e.)", f"{100 * m:.1f} % ± {100 * se:.1f}",
         f"{mean([len(d['incidents']) for d in runs]):.2f}"),
        ("simulated", f"{100 * sim['ettr']:.1f} %", f"{sim['failures']:.2f}")])
    sec.para(f"Difference: **{100 * (sim['ettr'] - m):+.1f} points** (goal: within ±2). Per run: "
             + ", ".join(f"{100 * x:.0f}" for x in measured) + " %.")
    sec.write(a.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
