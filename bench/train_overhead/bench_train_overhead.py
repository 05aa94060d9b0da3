"""Throughput of the reference model through train_entry vs a bare torchrun DDP script.

Same data (a synthetic 64-feature, 10-class CSV), same MLP, batch and step count; runs
alternate A (train_entry) / B (bare) ``--reps`` times; reports per-run aggregate samples/s
(sum over ranks of samples / time between the end of warm-up step W and the last step,
taken from each process's own wall-clock stamps: train_entry's step records, one per
--log-every steps (default 10), and the bare script's per-step list, both cut every 10 steps),
medians, and the paired A/B ratios with a bootstrap 95 % interval.

    .venv/bin/python bench/train_overhead/bench_train_overhead.py --reps 11 --with-monitor
    ... -- --log-every 1    # extra flags for train_entry: a record (and grad norm) every step
"""
import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import benchlib  # noqa: E402
TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")


def make_csv(path, rows, features=64, classes=10, seed=0):
    import numpy as np

    rng = np.random.RandomState(seed)
    x = rng.rand(rows, features).astype(np.float32)
    w = rng.randn(features, classes).astype(np.float32)
    y = (x @ w).argmax(1)
    with open(path, "w") as f:
        f.write(",".join([f"f{i}" for i in range(features)] + ["label"]) + "\n")
        for row, label in zip(x, y):
            f.write(",".join(f"{v:.5f}" for v in row) + f",{label}\n")


def rate(times, samples, warmup, steps=None, window=10):
    """(wall, robust) samples/s of one process after `warmup` steps.

    times/samples: one entry per record, `samples` counting the samples since the previous record
    (train_entry writes one record per --log-every steps; the bare script one per step); steps:
    the step number of each record, default 1, 2, 3, ... Both sides are cut at the same steps
    (multiples of `window` from `warmup` on), so they are measured over the same intervals.
    wall: samples between the first and the last cut / the time between them.
    robust: the median over the windows of samples / time (insensitive to other tenants' spikes).
    """
    steps = steps or list(range(1, len(times) + 1))
    cum, c = [], 0
    for n in samples:
        c += n
        cum.append(c)
    cuts = [i for i, s in enumerate(steps) if s >= warmup and s % window == 0]
    t, n = [times[i] for i in cuts], [cum[i] for i in cuts]
    wall = (n[-1] - n[0]) / (t[-1] - t[0])
    robust = statistics.median((n1 - n0) / (t1 - t0) for n0, n1, t0, t1 in zip(n, n[1:], t, t[1:]))
    return wall, robust


def paired_median_ci(values, n_boot=10_000, seed=0):
    """Median of the paired ratios and a percentile-bootstrap 95 % interval for it."""
    import random
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(n_boot))
    return statistics.median(values), meds[int(0.025 * n_boot)], meds[int(0.975 * n_boot) - 1]


def _add(a, b):
    return (a[0] + b[0], a[1] + b[1])


def env_for_ranks():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OMPI_", "HPCLAUNCH_"))}
    env["OMP_NUM_THREADS"] = env.get("BENCH_OMP_THREADS", "1")
    return env


def start_monitor(run_dir):
    if importlib.util.find_spec("hpclaunch.monitors.__main__") is None:
        print("  (--with-monitor: hpclaunch.monitors has no __main__ yet; running without it)")
        return None
    return subprocess.Popen([sys.executable, "-m", "hpclaunch.monitors", "--interval", "1", "--run-dir", run_dir],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_a(args, data, work):
    run_dir = os.path.join(work, "A")
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    cmd = [TORCHRUN, "--standalone", f"--nproc-per-node={args.nproc}", "-m", "hpclaunch.train_entry",
           "--data", data, "--epochs", "1000", "--max-steps", str(args.steps), "--batch-size", str(args.batch),
           "--val-fraction", "0.01", "--run-dir", run_dir, "--no-resume", "--quiet", "--precision", args.precision]
    cmd += args.train_entry_args
    run_ranks(cmd, run_dir, args.with_monitor)
    total = (0.0, 0.0)
    for r in range(args.nproc):
        recs = [json.loads(line) for line in open(os.path.join(run_dir, "metrics", f"rank{r}.jsonl"))]
        steps = [x for x in recs if x["kind"] == "step"]
        total = _add(total, rate([s["time_unix"] for s in steps], [s["samples"] for s in steps], args.warmup,
                                 [s["step"] for s in steps]))
    return total


def run_ranks(cmd, out_dir, with_monitor):
    """Run one side's torchrun, with the monitor sampling into out_dir beside it if asked."""
    mon = start_monitor(out_dir) if with_monitor else None
    try:
        subprocess.run(cmd, env=env_for_ranks(), check=True, timeout=600)
    finally:
        if mon:
            mon.terminate()
            mon.wait(10)


def run_b(args, data, work):
    out = os.path.join(work, "B")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    cmd = [TORCHRUN, "--standalone", f"--nproc-per-node={args.nproc}", os.path.join(HERE, "bare_ddp.py"),
           "--data", data, "--steps", str(args.steps), "--batch-size", str(args.batch), "--out-dir", out]
    if args.precision != "fp32":
        raise SystemExit("the bare baseline is fp32 only")
    run_ranks(cmd, out, args.with_monitor)
    total = (0.0, 0.0)
    for r in range(args.nproc):
        d = json.load(open(os.path.join(out, f"bare-rank{r}.json")))
        total = _add(total, rate(d["times"], d["samples"], args.warmup))
    return total


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--rows", type=int, default=120_000)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--with-monitor", action="store_true")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--markdown", help="write the docs/benchmarks.md section here (docs/bench/train_overhead.md)")
    p.add_argument("train_entry_args", nargs="*", help="extra flags for train_entry (after --)")
    args = p.parse_args()
    benchlib.run_from_wheel()
    section = benchlib.Section("train_entry overhead (`bench/train_overhead/bench_train_overhead.py`)",
                               "python bench/train_overhead/bench_train_overhead.py " + " ".join(sys.argv[1:]))
    work = tempfile.mkdtemp(prefix="bench_train_overhead_")
    data = os.path.join(work, "synthetic.csv")
    make_csv(data, args.rows)
    a_rates, b_rates = [], []
    try:
        for i in range(args.reps):
            for label in ("AB" if i % 2 == 0 else "BA"):
                t0 = time.time()
                r = run_a(args, data, work) if label == "A" else run_b(args, data, work)
                (a_rates if label == "A" else b_rates).append(r)
                print(f"rep {i} {label}: wall {r[0]:8.0f} samples/s, median-window {r[1]:8.0f} samples/s "
                      f"({time.time() - t0:.1f} s)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    res = {"args": vars(args), "train_entry": a_rates, "bare": b_rates}
    for k, name in ((0, "wall-clock"), (1, "median window")):
        ma, mb = statistics.median(x[k] for x in a_rates), statistics.median(x[k] for x in b_rates)
        # Paired: each rep's A and B ran back to back, so their ratio cancels slow drifts of the
        # machine; the bootstrap interval says whether the goal is shown or only noise.
        paired = [a[k] / b[k] for a, b in zip(a_rates, b_rates)]
        mid, lo, hi = paired_median_ci(paired)
        res[name] = {"train_entry": ma, "bare": mb, "ratio": ma / mb, "paired_ratios": paired,
                     "paired_median": mid, "ci95": [lo, hi]}
        verdict = ("NOT MET" if hi < 0.98 else "not shown (interval spans 0.98)" if lo < 0.98 else
                   "not shown (interval wider than +-3 %: more reps)" if hi - lo > 0.06 else "SHOWN")
        print(f"{name:>12}: train_entry median {ma:8.0f} samples/s | bare DDP median {mb:8.0f} samples/s | "
              f"ratio {ma / mb:.3f}; paired median {mid:.3f}, 95% CI [{lo:.3f}, {hi:.3f}]: goal >= 0.98 {verdict}")
    cores = os.cpu_count() or 1
    crowded = (" (the ranks fill every core, so the monitor and the OS take time from a rank and its peers "
               "wait for it at each all-reduce: single reps vary by +-10 %)") if args.nproc >= cores else (
               " (a core left for the monitor and the OS, as a node's spare cores are)")
    setup = (f"{args.nproc} rank(s) on {cores} cores{crowded}, batch {args.batch}/rank, {args.steps} steps, "
             f"warm-up {args.warmup}, {args.reps} x A/B alternating; extra train_entry flags: {args.train_entry_args}")
    print(f"[{setup}]")
    section.para(
        "Samples/s of the reference model through train_entry (A) vs a bare torchrun DDP script of the "
        "same model, data and batch (B), " + ("the monitor sampling beside both" if args.with_monitor else
                                              "no monitor") + f"; {setup}. Paired: each rep's A and B ran back "
        "to back, their ratio cancels slow drifts; the interval is a percentile bootstrap of the median "
        "of the paired ratios. Goal: paired median >= 0.98 with an interval narrower than +-3 %.")
    section.table(["measure", "train_entry median", "bare DDP median", "ratio of medians",
                   "paired median [95 % CI]", "CI half-width"],
                  [[name, f"{res[name]['train_entry']:,.0f}/s", f"{res[name]['bare']:,.0f}/s",
                    f"{res[name]['ratio']:.3f}",
                    f"**{res[name]['paired_median']:.3f}** [{res[name]['ci95'][0]:.3f}, {res[name]['ci95'][1]:.3f}]",
                    f"{(res[name]['ci95'][1] - res[name]['ci95'][0]) / 2 * 100:.1f} %"]
                   for name in ("wall-clock", "median window")])
    section.write(args.markdown)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
