#!/usr/bin/env python3
"""The peer of bench/tune: the same search run by Ray Tune inside one allocation (one node, its CPUs
for Ray). Same program (train_entry on digits, one process a trial), same space, same sampler
(Optuna's TPE through Ray's OptunaSearch, seeded), same budget and concurrency; no pruning (the
figure compared is bench_tune's search without it).

    python bench/tune/ray_tune.py --trials 40 --parallel 4 --epochs 10 --out result.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

# bench_tune.SPACE, in Ray's terms
HIDDEN = ["64", "128", "256", "128,64", "256,128", "256,256"]
BATCHES = [16, 32, 64, 128]


def trainable(config, epochs: int, python: str, root: str):
    from ray import tune

    run_dir = tempfile.mkdtemp(prefix="trial-", dir=root)
    cmd = ["nice", "-n", "10", python, "-m", "hpclaunch.train_entry", "--data", "digits", "--epochs", str(epochs),
           "--hidden", config["hidden"], "--lr", repr(config["lr"]), "--batch-size", str(config["batch"]),
           "--no-tensorboard", "--no-mlflow", "--quiet", "--run-dir", run_dir]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for k in [k for k in env if k.startswith(("HPCLAUNCH_RUN_DIR", "SLURM_", "RANK", "WORLD_SIZE"))]:
        env.pop(k)  # one process of its own, as each hpclaunch trial is
    subprocess.run(cmd, env=env, check=True)
    best = None
    steps = 0
    with open(os.path.join(run_dir, "metrics", "rank0.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            steps = max(steps, rec.get("step") or 0)
            if rec.get("kind") == "epoch":
                best = rec["val_accuracy"]
    tune.report({"val_accuracy": best, "steps": steps})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    t0 = time.time()
    import optuna
    import ray
    from ray import tune
    from ray.tune.search.optuna import OptunaSearch

    ray.init(num_cpus=args.parallel, include_dashboard=False, logging_level="ERROR")
    t_ray = time.time() - t0
    space = {"lr": tune.loguniform(1e-4, 1e-1), "batch": tune.choice(BATCHES), "hidden": tune.choice(HIDDEN)}
    search = OptunaSearch(sampler=optuna.samplers.TPESampler(seed=args.seed), metric="val_accuracy", mode="max")
    root = tempfile.mkdtemp(prefix="ray-tune-")
    fn = tune.with_parameters(trainable, epochs=args.epochs, python=sys.executable, root=root)
    tuner = tune.Tuner(tune.with_resources(fn, {"cpu": 1}), param_space=space,
                       tune_config=tune.TuneConfig(search_alg=search, num_samples=args.trials,
                                                   max_concurrent_trials=args.parallel),
                       run_config=tune.RunConfig(storage_path=root, verbose=0))
    results = tuner.fit()
    best = results.get_best_result(metric="val_accuracy", mode="max")
    out = {"wall_s": time.time() - t0, "ray_init_s": t_ray, "trials": len(results),
           "errors": len(results.errors), "best": best.metrics["val_accuracy"], "best_config": best.config,
           "steps_total": sum(r.metrics.get("steps", 0) for r in results if r.metrics)}
    with open(args.out, "w") as f:
        json.dump(out, f)
    print(json.dumps(out))
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
