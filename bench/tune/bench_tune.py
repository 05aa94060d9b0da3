#!/usr/bin/env python3
"""`hpclaunch tune` on the test cluster (issue 48): a 40-trial TPE search of train_entry on digits,
4 trials at a time, without and with pruning, and the same search run by Ray Tune inside one
allocation (bench/tune/ray_tune.py), side by side in one run.

    python bench/tune/bench_tune.py [--trials 40] [--parallel 4] [--epochs 10] [--prune median,asha]
        [--skip-ray] [--markdown docs/bench/tune.md]

Needs the test cluster (make cluster-up; SLURM_CONF) and the [tune] extra; Ray from the
[frameworks] extra. Every trial's program runs at nice 10 (the machine is shared), and so does
Ray's. Prints, per run: wall time from the command's start to its end, the best validation
accuracy, the training steps run in total, trials by state; and checks that the registry (the
array's task states), the study (Optuna's journal) and the trials table agree on every trial.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import benchlib  # noqa: E402

REPO = benchlib.REPO
HIDDEN = ["64", "128", "256", "128,64", "256,128", "256,256"]

JOB = """\
name: {name}
profile: testcluster
launcher: torchrun
command: [nice, -n, "10", python3, -m, hpclaunch.train_entry, --data, digits, --epochs, "{epochs}",
          --hidden, "{{hidden}}", --no-tensorboard, --no-mlflow, --quiet]
resources: {{nodes: 1, tasks_per_node: 1, cpus_per_task: 1, mem: 1000M, time: "00:15:00"}}
monitor: {{interval: 0}}
env: {{OMP_NUM_THREADS: "1"}}
sweep:
  method: tpe
  metric: val_accuracy
  trials: {trials}
  parallelism: {parallel}
  seed: {seed}
{prune}  parameters:
    train.lr: {{loguniform: [1.0e-4, 1.0e-1]}}
    train.batch_per_gpu: [16, 32, 64, 128]
    hidden: {hidden}
"""
PRUNE = {"median": "  prune: {method: median, warmup_steps: 1, startup_trials: 5}\n",
         "asha": "  prune: {method: asha, warmup_steps: 1, reduction_factor: 3}\n"}


def hl(*args, env, cwd, timeout=7200):
    return subprocess.run([sys.executable, "-m", "hpclaunch", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def run_study(name: str, prune: str, args, env, work: str) -> dict:
    path = os.path.join(work, f"{name}.yaml")
    with open(path, "w") as f:
        f.write(JOB.format(name=name, epochs=args.epochs, trials=args.trials, parallel=args.parallel, seed=args.seed,
                           prune=PRUNE.get(prune, ""), hidden=json.dumps(HIDDEN)))
    t0 = time.time()
    proc = hl("tune", path, "--backend", "slurm", env=env, cwd=work)
    wall = time.time() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{name}: hpclaunch tune exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    doc = json.loads(hl("tune", "report", name, "--format", "json", env=env, cwd=work).stdout)
    table = hl("tune", "status", name, env=env, cwd=work).stdout
    return {"name": name, "prune": prune or "none", "wall_s": wall, "doc": doc,
            "agree": agreement(doc, table, env, work)}


def agreement(doc: dict, table: str, env, work) -> str:
    """'yes', or what disagrees: the registry's task states, the study's trials, the table's rows."""
    problems = []
    (job,) = doc["jobs"]
    st = json.loads(hl("status", job["job_id"], "--json", env=env, cwd=work).stdout)
    ended = [t for t in doc["trials"] if t["state"] in ("complete", "pruned", "failed")]
    tasks = st.get("tasks") or {}
    if len(ended) != doc["trials_owed"] or sum(tasks.values()) != doc["trials_owed"]:
        problems.append(f"{len(ended)} trials ended, the array has {sum(tasks.values())} tasks")
    if tasks.get("COMPLETED", 0) != sum(1 for t in ended if t["state"] in ("complete", "pruned")) or \
            tasks.get("FAILED", 0) != sum(1 for t in ended if t["state"] == "failed"):
        problems.append(f"registry tasks {tasks} vs study {doc['counts']}")
    rows = {line.split()[0]: line.split()[1] for line in table.splitlines()[2:] if line[:1].isdigit()}
    for t in doc["trials"]:
        if rows.get(str(t["number"])) != t["state"]:
            problems.append(f"trial {t['number']}: table {rows.get(str(t['number']))}, study {t['state']}")
        if os.path.dirname(t["run_dir"] or "") != st["run_dir"]:
            problems.append(f"trial {t['number']} ran outside the array's folder")
    if len({t["run_dir"] for t in ended}) != len(ended):
        problems.append("two trials in one task")
    return "yes" if not problems else "; ".join(problems[:3])


def run_ray(args, env, work) -> dict:
    """Ray Tune in one allocation: a plain hpclaunch job of one node holding `parallel` CPUs."""
    out = os.path.join(work, "ray-result.json")
    path = os.path.join(work, "ray.yaml")
    with open(path, "w") as f:
        f.write(f"""name: ray-tune-peer
profile: testcluster
launcher: srun
command: [nice, -n, "10", python3, {json.dumps(os.path.join(HERE, 'ray_tune.py'))}, --trials, "{args.trials}",
          --parallel, "{args.parallel}", --epochs, "{args.epochs}", --seed, "{args.seed}", --out, {json.dumps(out)}]
resources: {{nodes: 1, tasks_per_node: 1, cpus_per_task: {args.parallel}, mem: 8G, time: "01:00:00"}}
monitor: {{interval: 0}}
requeue: {{max_attempts: 1}}
""")
    t0 = time.time()
    proc = hl("submit", path, "--backend", "slurm", "--wait", env=env, cwd=work)
    wall = time.time() - t0
    if proc.returncode != 0:
        raise SystemExit(f"ray: exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    with open(out) as f:
        res = json.load(f)
    return dict(res, wall_s=wall, inner_s=res["wall_s"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prune", default="median", help="pruners to run beside the plain search, comma-separated")
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--markdown", default=None, metavar="PATH", help="write the section here (docs/bench/tune.md)")
    args = ap.parse_args()
    os.nice(10)
    if not os.environ.get("SLURM_CONF"):
        os.environ["SLURM_CONF"] = "/tmp/hpclaunch-slurm/slurm.conf"
    work = tempfile.mkdtemp(prefix="hpclaunch-bench-tune-")
    env = dict(os.environ, HPCLAUNCH_HOME=os.path.join(work, "home"),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    load0 = [round(x, 2) for x in os.getloadavg()]
    section = benchlib.Section("`hpclaunch tune`: a 40-trial search on the test cluster, beside Ray Tune",
                               " ".join(["python bench/tune/bench_tune.py", *sys.argv[1:]]))
    runs = [run_study("tune-plain", "", args, env, work)]
    for p in [p for p in args.prune.split(",") if p]:
        runs.append(run_study(f"tune-{p}", p, args, env, work))
    ray = None if args.skip_ray else run_ray(args, env, work)
    load1 = [round(x, 2) for x in os.getloadavg()]
    base = runs[0]["doc"]
    rows = []
    for r in runs:
        d = r["doc"]
        c = d["counts"]
        saved = 1 - d["steps_total"] / base["steps_total"] if base["steps_total"] else 0.0
        epochs = sum(t["reported"] for t in d["trials"])
        rows.append([f"hpclaunch tune, pruning: {r['prune']}", f"{r['wall_s']:.0f} s", f"{100 * d['best']['value']:.2f} %",
                     f"{d['steps_total']}", f"{100 * saved:.0f} %" if r is not runs[0] else "-", f"{epochs}",
                     f"{c['complete']} / {c['pruned']} / {c['failed']}", r["agree"]])
    if ray:
        rows.append(["Ray Tune (OptunaSearch TPE) in one allocation", f"{ray['wall_s']:.0f} s",
                     f"{100 * ray['best']:.2f} %", f"{ray['steps_total']}", "-", f"{args.trials * args.epochs}",
                     f"{ray['trials'] - ray['errors']} / 0 / {ray['errors']}", "-"])
    section.para(f"train_entry on scikit-learn's digits, {args.epochs} epochs a trial, one process of one CPU "
                 f"a trial; {args.trials} trials, {args.parallel} at a time; TPE seeded {args.seed} (Optuna "
                 "5; each hpclaunch task seeds its sampler from the study's seed and its place, so parallel runs "
                 "are not bit-reproducible); space: lr log-uniform 1e-4..1e-1, batch 16/32/64/128, hidden "
                 f"{'/'.join(HIDDEN)}. Every program at nice 10. Load average {load0} at the start, {load1} "
                 "at the end (the 2-vCPU VM is shared with other engineers' tests).")
    section.table(["run", "wall", "best val. accuracy", "training steps", "steps saved", "epochs run",
                   "complete / pruned / failed", "registry = study = table"], rows, align="lrrrrrrl")
    section.para("Steps saved compare each pruned search with the plain one; the two searches choose their own "
                 "batch sizes (a trial of batch 16 runs 8 times the steps of one of 128), so epochs run is given "
                 "beside them.")
    if ray:
        section.para(f"Wall time is from the command's start to its end: `hpclaunch tune` (submit, {args.trials} "
                     f"array tasks, the last trial told) against `hpclaunch submit --wait` of one job running "
                     f"Ray Tune on a node's {args.parallel} CPUs (Ray's start {ray['ray_init_s']:.1f} s, its "
                     f"script {ray['inner_s']:.0f} s). Both run the same program as a subprocess per trial.")
    section.write(args.markdown)
    print(json.dumps({"runs": [{k: r[k] for k in ("name", "wall_s", "agree")} | {
        "best": r["doc"]["best"]["value"], "steps": r["doc"]["steps_total"]} for r in runs], "ray": ray}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
