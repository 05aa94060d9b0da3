#!/usr/bin/env python3
"""A node dies under a running 2-node job on the test cluster (3 nodes: 2 working + 1 spare): the job
restarts inside its allocation on the spare (resources.spare_nodes: 1), side by side with today's
path (no spare, recovery off: Slurm notices the node after SlurmdTimeout, the job ends NODE_FAIL and
Slurm requeues it). Per program (train_entry under torchrun, a JAX program under srun, an MPI
program) and path: the time from the kill to the first new training step (its step record), the work
lost, whether it completed with the result of an undisturbed run, whether the dead node was used
again, and whether any of its processes were left on a node.

    bash tests/cluster/slurm-up.sh -n 3 ...      # the 3-node cluster (see tests/cluster/README.md)
    python bench/goodput/bench_node_death.py --trials 20 --markdown docs/bench/goodput_node_death.md

A node dies as a machine's processes all do: SIGKILL to everything in its network namespace
(tests/cluster/fixture.py kill_node); it is brought back before the next trial.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchlib import Section  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = sys.executable
spec = importlib.util.spec_from_file_location("fx", os.path.join(REPO, "tests", "cluster", "fixture.py"))
fx = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fx)

INTERVAL = 5          # checkpoint interval, seconds (recovery.checkpoint_interval)
# 12 epochs: ~55 s of training on a quiet machine (4 ended before a trial's 12 s of training before the kill)
TRAIN = ["--epochs", "12", "--batch-size", "4", "--hidden", "256,256", "--log-every", "1", "--stop-check-every", "2",
         "--deterministic"]
PROGRAMS = {
    "train": ("torchrun (train_entry)", "torchrun",
              lambda data: ["python", "-m", "hpclaunch.train_entry", "--data", data, *TRAIN], "cpus_per_task: 2"),
    "jax": ("srun (JAX)", "srun", lambda data: ["python", f"{REPO}/examples/resumable_jax.py", "300", "0.1"],
            "cpus_per_task: 1"),
    "mpi": ("mpi (mpi4py, srun --mpi=pmix)", "mpi",
            lambda data: ["python", f"{REPO}/examples/resumable_mpi.py", "300", "0.1"], "cpus_per_task: 1"),
}
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "GAVE_UP", "NODE_FAIL")


def hl(home, *args, cwd):
    env = dict(os.environ, HPCLAUNCH_HOME=home)
    p = subprocess.run([PY, "-m", "hpclaunch", *args], capture_output=True, text=True, cwd=cwd, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"hpclaunch {' '.join(args)}: {p.stderr[-2000:]}")
    return p.stdout


def job_text(program, path, data):
    title, launcher, cmd, cpus = PROGRAMS[program]
    command = ", ".join(json.dumps(a) for a in cmd(data))
    spare = "spare_nodes: 1, " if path == "spare" else ""
    rec = ("{heartbeat_timeout: 5, checkpoint_interval: %d}" % INTERVAL if path == "spare" else
           "{enabled: false, checkpoint_interval: %d}" % INTERVAL)
    return (f"name: death-{program}-{path}\nprofile: testcluster\nlauncher: {launcher}\ncommand: [{command}]\n"
            f"resources: {{nodes: 2, {spare}tasks_per_node: 1, {cpus}, time: \"00:20:00\"}}\n"
            f"monitor: {{interval: 0}}\nrequeue: {{max_attempts: 5}}\nrecovery: {rec}\n"
            # whole nodes: a node killed under this job runs nobody else's work
            f"slurm: {{exclusive: true}}\n")


def records(run_dir):
    out = []
    try:
        lines = open(os.path.join(run_dir, "metrics", "rank0.jsonl")).read().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def state_lines(run_dir):
    try:
        return open(os.path.join(run_dir, ".hpclaunch", "state")).read().splitlines()
    except OSError:
        return []


def launches(run_dir):
    lines = state_lines(run_dir)
    return [line.split(" launch nodes=")[1].split()[0].split(",") for line in lines if " launch nodes=" in line]


def result_of(program, run_dir):
    if program == "train":
        try:
            return json.load(open(os.path.join(run_dir, ".hpclaunch", "finished")))["val_accuracy"]
        except (OSError, ValueError, KeyError):
            return None
    try:
        return json.load(open(os.path.join(run_dir, "result.json")))
    except (OSError, ValueError):
        return None


def leftovers(run_dir, alive):
    needle = f"HPCLAUNCH_RUN_DIR={run_dir}".encode()
    n = 0
    for i in alive:
        for pid in fx.node_pids(i):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    n += needle in f.read().split(b"\0")
            except OSError:
                pass
    return n


def trial(work, home, program, path, data, kill=True):
    job = os.path.join(work, f"{program}-{path}.yaml")
    with open(job, "w") as f:
        f.write(job_text(program, path, data))
    rec = json.loads(hl(home, "submit", job, "--backend", "slurm", "--json", cwd=work))
    job_id, run_dir = rec["job_id"], rec["run_dir"]
    out = {"job": job_id, "run_dir": run_dir}
    deadline = time.time() + 600
    while time.time() < deadline:          # training for a while, with a checkpoint behind it
        steps = [r for r in records(run_dir) if r.get("kind") == "step"]
        saves = [r for r in records(run_dir) if r.get("kind") == "checkpoint"]
        if steps and saves and steps[-1]["time_unix"] - steps[0]["time_unix"] > 12:
            break
        time.sleep(0.5)
    victim = None
    # another job queued meanwhile would wait for nodes this one's requeue needs: say so per trial
    out["others"] = sorted(set(subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True)
                               .stdout.split()) - {job_id})
    if kill:
        nodes = launches(run_dir)[0]
        victim = int(nodes[1][1:])
        before = max(r["step"] for r in records(run_dir) if r.get("kind") == "step")
        killed_at = time.time()
        fx.kill_node(victim)
        out.update(victim=f"c{victim}", killed_at=killed_at, step_before=before)
    revived = not kill
    while True:
        if not revived and any(re.search(r" end rc=\S+ outcome=(completed|failed|gave_up)", line)
                               for line in state_lines(run_dir)[-1:]):
            fx.revive_node(victim)   # the job has ended: else Slurm holds it COMPLETING until it gives up on the node
            revived = True
        st = json.loads(hl(home, "status", job_id, "--json", cwd=work))
        if st["state"] in FINAL:
            break
        time.sleep(2)
    out["state"] = st["state"]
    out["result"] = result_of(program, run_dir)
    recs = records(run_dir)
    if kill:
        # The first step of the attempt that started after the kill: the surviving ranks record a step
        # or two of the old attempt after the kill, until their collective waits on the dead node.
        restart = next((i for i, r in enumerate(recs)
                        if r.get("kind") == "header" and r.get("time_unix", 0) > out["killed_at"]), None)
        after = [r for r in recs[restart + 1:] if r.get("kind") == "step"] if restart is not None else []
        headers = [r for r in recs if r.get("kind") == "header"]
        out["kill_to_step_s"] = after[0]["time_unix"] - out["killed_at"] if after else None
        out["resumed_step"] = headers[-1].get("resumed_step") if len(headers) > 1 else None
        pace = statistics.median(r["step_time_s"] for r in recs if r.get("kind") == "step" and r.get("step_time_s"))
        out["lost_s"] = ((out["step_before"] - out["resumed_step"]) * pace if out["resumed_step"] is not None else None)
        out["reused"] = any(out["victim"] in n for n in launches(run_dir)[1:])
        out["left"] = leftovers(run_dir, [i for i in (1, 2, 3) if i != victim])
        if not revived:
            fx.revive_node(victim)
    return out


def p95(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))] if xs else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--programs", default="train,jax,mpi")
    p.add_argument("--paths", default="spare,requeue")
    p.add_argument("--markdown", default=None)
    p.add_argument("--json", default=None, help="write every trial's record here too")
    a = p.parse_args()
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True).stdout.split()
    if sorted(set(nodes)) != ["c1", "c2", "c3"]:
        sys.exit(f"bench_node_death: needs the 3-node test cluster (sinfo lists {sorted(set(nodes))}): "
                 "bash tests/cluster/slurm-up.sh -n 3, with SLURM_CONF set")
    work = tempfile.mkdtemp(prefix="hl-death-", dir="/tmp")
    home = os.path.join(work, "home")
    data = os.path.join(work, "digits.csv")
    subprocess.run([PY, "-m", "hpclaunch.train_entry.digits", data], check=True, capture_output=True)
    programs, paths = a.programs.split(","), a.paths.split(",")
    found = {}
    t0 = time.time()
    for program in programs:
        ref = trial(work, home, program, "spare", data, kill=False)
        print("reference", program, ref["state"], ref["result"], flush=True)
        for k in range(a.trials):
            for path in paths:           # side by side: the paths alternate
                r = trial(work, home, program, path, data)
                r["same_result"] = r["result"] == ref["result"] and r["result"] is not None
                found.setdefault((program, path), []).append(r)
                print(program, path, k, {x: r.get(x) for x in ("state", "kill_to_step_s", "lost_s", "same_result",
                                                               "reused", "left")}, flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({f"{k[0]}/{k[1]}": v for k, v in found.items()}, f, indent=1)
    rows = []
    for program in programs:
        by = {}
        for path in paths:
            rs = found[(program, path)]
            times = [r["kill_to_step_s"] for r in rs if r["kill_to_step_s"] is not None]
            lost = [r["lost_s"] for r in rs if r["lost_s"] is not None]
            by[path] = p95(times)
            rows.append((PROGRAMS[program][0], "in-allocation, 1 spare" if path == "spare" else "today's: Slurm requeues",
                         len(rs), sum(r["state"] == "COMPLETED" for r in rs),
                         f"{statistics.median(times):.1f}" if times else "-", f"{p95(times):.1f}" if times else "-",
                         f"{max(times):.1f}" if times else "-", f"{max(lost):.1f}" if lost else "-",
                         sum(r["same_result"] for r in rs), sum(r["reused"] for r in rs), sum(r["left"] for r in rs)))
        if "spare" in by and "requeue" in by and by["spare"] and by["requeue"]:
            rows.append((PROGRAMS[program][0], "p95 ratio", "", "", "", f"{by['spare'] / by['requeue']:.2f}x", "", "",
                         "", "", ""))
    sec = Section("A dead node, recovered inside the allocation (`bench/goodput/bench_node_death.py`)",
                  f"python bench/goodput/bench_node_death.py --trials {a.trials} --programs {a.programs} "
                  f"--paths {a.paths}")
    sec.para("On the 3-node test cluster (SlurmdTimeout=60 s, cred_expire=10 s), a 2-node job (one rank a node) is "
             "killed a node under it once it has trained for 12 s with a checkpoint behind it (every "
             f"{INTERVAL} s): every process in the node's namespace, slurmd and sshd included, gets SIGKILL. "
             "*In-allocation*: `resources.spare_nodes: 1`, heartbeat timeout 5 s: the job runtime fences the node "
             "and restarts the step on the spare. *Today's*: no spare and `recovery.enabled: false`: Slurm marks the "
             "node down after SlurmdTimeout, the job ends NODE_FAIL and Slurm requeues it (onto the third node). "
             "The paths alternate, trial by trial. Kill to first step: the kill to rank 0's first step record after "
             "it. Lost: the steps between the last one before the kill and the one resumed from, at the job's "
             "median step time (goal: at most one checkpoint interval). Same result: the final validation "
             "accuracy (train_entry, deterministic) or result.json of an undisturbed run. Reused: a later step on "
             "the dead node. Left: processes of the job alive on a node after it ended.")
    sec.table(["program", "path", "trials", "completed", "kill to first step median s", "p95 s", "max s",
               "max lost s", "same result", "dead node reused", "processes left"], rows)
    busy = sum(1 for rs in found.values() for r in rs if r.get("others"))
    sec.para(f"Goal: p95 <= 45 s and <= half of today's path's. {busy} trial(s) had other users' jobs in the queue "
             f"when the node was killed (the cluster is shared). {time.time() - t0:.0f} s in all.")
    sec.write(a.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
