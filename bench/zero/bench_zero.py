"""ZeRO stages 0-3 on one model size: samples/s and memory per rank, through train_entry.

For each stage, ``torchrun --nproc-per-node N -m hpclaunch.train_entry --model transformer --size S
--zero Z`` trains ``--steps`` optimizer steps (a record every step) on scikit-learn's digits; the
figures come from its metrics files:
- samples/s: the sum over ranks of samples / wall time between the end of step ``--warmup`` and the
  last step (each rank's own clock), the median over ``--reps`` runs;
- per rank: parameters + gradients + optimizer state held (from the tensors, train_entry's memory
  records), and the peak memory: torch's peak CUDA allocation on a GPU machine, the peak resident
  set (VmHWM) on CPU; the largest over ranks.

On a GPU machine (NCCL, one rank per GPU; bf16 by default) it is the issue 49 bench:

    .venv/bin/python bench/zero/bench_zero.py --size large --markdown docs/bench/zero-gpu.md
    .venv/bin/python bench/zero/bench_zero.py --size xl --batch-size 32 --steps 30

It runs on CPU too (gloo, 2 ranks, tiny size by default) so that it is tested where no GPU is:

    .venv/bin/python bench/zero/bench_zero.py --quick
"""
import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import benchlib  # noqa: E402

TORCHRUN = os.path.join(os.path.dirname(sys.executable), "torchrun")
MIB = float(1 << 20)


def gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def records(run_dir: str) -> list:
    out = []
    for path in sorted(glob.glob(os.path.join(run_dir, "metrics", "rank*.jsonl"))):
        with open(path) as f:
            out += [json.loads(line) for line in f if line.endswith("\n")]
    return out


def measure(run_dir: str, warmup: int) -> dict:
    """samples/s (sum over ranks) after ``warmup`` steps, and the largest per-rank memory figures."""
    recs = records(run_dir)
    rate = 0.0
    for rank in sorted({r["rank"] for r in recs}):
        steps = [r for r in recs if r["kind"] == "step" and r["rank"] == rank]
        after = [r for r in steps if r["step"] > warmup]
        start = next((r for r in reversed(steps) if r["step"] <= warmup), None)
        if not after or start is None:
            raise SystemExit(f"{run_dir}: rank {rank} has no steps after the warm-up ({len(steps)} steps)")
        rate += sum(r["samples"] for r in after) / (after[-1]["time_unix"] - start["time_unix"])
    mem = [r for r in recs if r["kind"] == "memory"]
    peak = "cuda_peak_bytes" if any(r.get("cuda_peak_bytes") for r in mem) else "peak_rss_bytes"
    header = next(r for r in recs if r["kind"] == "header")
    return {"samples_per_s": rate, "params": header["params"], "world_size": header["world_size"],
            "state_mib": max(r["state_bytes"] for r in mem) / MIB,
            "peak_mib": max(r[peak] for r in mem if r.get(peak)) / MIB, "peak_kind": peak}


def run_stage(args, stage: int, workdir: str, nproc: int) -> dict:
    run_dir = os.path.join(workdir, f"zero{stage}")
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [TORCHRUN, "--standalone", f"--nproc-per-node={nproc}", "-m", "hpclaunch.train_entry",
           "--data", "digits", "--model", "transformer", "--size", args.size, "--zero", str(stage),
           "--batch-size", str(args.batch_size), "--max-steps", str(args.steps), "--epochs", "1000",
           "--precision", args.precision, "--log-every", "1", "--run-dir", run_dir, "--no-resume",
           "--no-tensorboard", "--no-mlflow", "--quiet", "--lr-scaling", "none", *args.extra]
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise SystemExit(f"zero {stage} failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return measure(run_dir, args.warmup)


def main() -> int:
    n_gpu = gpus()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=n_gpu or 2, help="ranks (default: the GPUs visible, else 2)")
    p.add_argument("--size", default="large" if n_gpu else "tiny", help="transformer size (train_entry --size)")
    p.add_argument("--batch-size", type=int, default=64 if n_gpu else 32)
    p.add_argument("--precision", default="bf16" if n_gpu else "fp32")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--stages", default="0,1,2,3")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--quick", action="store_true", help="1 rep, 20 steps (a CPU smoke run)")
    p.add_argument("--markdown", help="write the section here (docs/bench/zero.md by convention)")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("extra", nargs="*", help="after --: more train_entry flags")
    args = p.parse_args()
    if args.quick:
        args.reps, args.steps, args.warmup = 1, 20, 5
    stages = [int(s) for s in args.stages.split(",")]
    workdir = tempfile.mkdtemp(prefix="hpclaunch-bench-zero-")
    results = {}
    try:
        for stage in stages:
            reps = [run_stage(args, stage, workdir, args.nproc) for _ in range(args.reps)]
            results[stage] = {**reps[-1], "samples_per_s": statistics.median(r["samples_per_s"] for r in reps),
                              "samples_per_s_all": [round(r["samples_per_s"], 1) for r in reps]}
            print(f"zero {stage}: {results[stage]['samples_per_s']:.1f} samples/s, state {results[stage]['state_mib']:.1f} "
                  f"MiB, peak {results[stage]['peak_mib']:.1f} MiB per rank", flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    first = results[stages[0]]
    device = f"{args.nproc} GPU(s), NCCL" if n_gpu else f"{args.nproc} CPU rank(s), gloo"
    peak_name = "peak CUDA allocated MiB" if first["peak_kind"] == "cuda_peak_bytes" else "peak RSS MiB"
    section = benchlib.Section(f"ZeRO stages: transformer {args.size}, {device}",
                               "python bench/zero/bench_zero.py " + " ".join(sys.argv[1:]))
    section.para(f"{first['params']:,} parameters, batch {args.batch_size} per rank, {args.precision}, "
                 f"{args.steps} steps (samples/s after step {args.warmup}, median of {args.reps} run(s)); memory "
                 "per rank, the largest over ranks: parameters + gradients + optimizer state held (from the tensors) "
                 "and the peak.")
    if args.nproc == 1:
        section.para("One rank: ZeRO shards over the ranks, so with one every stage holds everything (this "
                     "measures the stages' overhead only).")
    if not n_gpu:
        section.para("A CPU smoke run (gloo, the tiny size): it shows the bench works and the state each rank "
                     "holds; the peak RSS is mostly the Python and torch runtime (~500 MiB a process), and the "
                     "throughput of a shared 2-core VM says nothing of a GPU machine's. The issue 49 figures are "
                     "for a GPU machine: `python bench/zero/bench_zero.py --size large --markdown "
                     "docs/bench/zero-gpu.md` there (not yet run: no GPU machine was available to this work).")
    base = results[stages[0]]
    section.table(["stage", "samples/s", "state MiB", f"× stage {stages[0]}", peak_name, f"× stage {stages[0]}"],
                  [(s, f"{r['samples_per_s']:.1f}", f"{r['state_mib']:.2f}", f"{r['state_mib'] / base['state_mib']:.3f}",
                    f"{r['peak_mib']:.1f}", f"{r['peak_mib'] / base['peak_mib']:.3f}") for s, r in results.items()])
    section.write(args.markdown)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({str(k): v for k, v in results.items()}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
