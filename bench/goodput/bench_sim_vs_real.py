#!/usr/bin/env python3
"""The failure simulator against real runs: local train_entry jobs (2 ranks of DDP on CPU) with hangs
injected as a Poisson process (a random rank SIGSTOPped), recovered by the job runtime (detected,
stacks saved, restarted from the newest checkpoint); each run's ETTR from its goodput report against
the simulator's prediction for the same job shape, failure rate and checkpoint interval.

    python bench/goodput/bench_sim_vs_real.py --runs 30 --markdown docs/bench/goodput_sim.md
    python bench/goodput/bench_sim_vs_real.py --from-raw docs/bench/goodput_sim.runs.json --markdown ...

The failure clock runs only while the job trains, as the simulator's does: from an attempt's first
step (its first step record, less the time the record stands for) to the injection, stopped after the
job's last step (the simulator has no failures while the job starts, restarts or ends). The state is
polled in the background so that an injection is late by the loop's 50 ms only.

The simulator's inputs are measured, none fitted to the answer: each run's own work (productive
seconds), start, end and checkpoint cost (its checkpointing seconds over its checkpoint records), since
the shared machine's load moves a run's speed several times over from one run to the next; likewise
its own time to detect a hang (injection to verdict) and to restart (the verdict to the next first
step), the means over its incidents (a run without one: the median detect, and its start x the
median restart / start ratio of the others); the checkpoint interval as the mean training time
between two saves of one attempt (the configured interval, plus the pipelined due check's lag, with
train_entry's saves at epoch ends);
the commit delay (a save counts once committed, 10 steps later) from each run's seconds a step.
The prediction is the mean over the runs of the simulator's expected ETTR for each run's shape. What
it predicts is how the failure process and the checkpoint interval turn into lost work and restarts.
Every run's measurements are kept (--raw), so the prediction can be remade from them (--from-raw).
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
from benchlib import Section, context  # noqa: E402

from hpclaunch.runtime.simulate import Shape, expected, run as sim_run  # noqa: E402
from hpclaunch.train_entry.trainer import COMMIT_AFTER_STEPS  # noqa: E402

PY = sys.executable
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "GAVE_UP")

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


def hl_cmd(*args):
    return [PY, "-m", "hpclaunch", *args]


def hl(home, *args, cwd):
    env = dict(os.environ, HPCLAUNCH_HOME=home)
    return subprocess.run(hl_cmd(*args), capture_output=True, text=True, cwd=cwd, env=env)


def ranks(run_dir):
    """(attempt, {rank: pid}) of the attempt the job runtime launched last."""
    try:
        attempt = open(os.path.join(run_dir, ".hpclaunch", "attempt")).read().split()[0]
        rows = open(os.path.join(run_dir, "logs", f"attempt{attempt}", "ranks.tsv")).read().splitlines()
    except (OSError, IndexError):
        return None, {}
    return attempt, {int(c[0]): int(c[2]) for c in (r.split("\t") for r in rows) if len(c) == 3}


def metrics(run_dir):
    """Rank 0's records (step and checkpoint records, attempt headers) in file order."""
    out = []
    try:
        with open(os.path.join(run_dir, "metrics", "rank0.jsonl"), "rb") as f:
            for line in f:
                if line.endswith(b"\n"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


class Tail:
    """Rank 0's step records as they come (the file read on from where it was left)."""

    def __init__(self, run_dir):
        self.path = os.path.join(run_dir, "metrics", "rank0.jsonl")
        self.pos, self.buf, self.steps = 0, b"", []     # steps: (start of its steps, end, step number, attempt)
        self.attempt = -1                                 # the attempt whose records come now (its header's)
        self.per_epoch = None                             # steps per epoch: the first epoch record's step

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                data = f.read()
        except OSError:
            return
        self.pos += len(data)
        lines = (self.buf + data).split(b"\n")
        self.buf = lines.pop()
        for line in lines:
            if b'"step"' not in line and b'"header"' not in line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("kind") == "header" and isinstance(rec.get("attempt"), int):
                self.attempt = rec["attempt"]
            if rec.get("kind") == "epoch" and rec.get("epoch") == 0 and self.per_epoch is None:
                self.per_epoch = int(rec["step"])
            if rec.get("kind") == "step":
                t = float(rec["time_unix"])
                busy = float(rec.get("step_time_s") or 0.0) * float(rec.get("steps") or 1)
                self.steps.append((t - busy, t, int(rec["step"]), self.attempt))

    def first_of(self, attempt):
        """The start of the first step record of an attempt after `attempt` (its first steps), or None:
        a record the stopped attempt's other rank writes after the injection starts no clock."""
        for s in self.steps:
            if s[3] > attempt:
                return s[0]
        return None


def one_run(work, data, epochs, interval, floor, mtbf, rng, label):
    """A job to its end, hangs injected at Poisson times of its training; its measurements."""
    home = os.path.join(work, f"home-{label}")
    job = os.path.join(work, f"job-{label}.yaml")
    with open(job, "w") as f:
        f.write(JOB.format(data=data, epochs=epochs, interval=interval, floor=floor))
    load0 = os.getloadavg()[0]
    out = hl(home, "submit", job, "--json", cwd=work)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    rec = json.loads(out.stdout)
    job_id, run_dir = rec.get("job_id") or rec.get("id"), rec["run_dir"]
    env = dict(os.environ, HPCLAUNCH_HOME=home)
    tail = Tail(run_dir)
    injected, lags = [], []
    clock_from = -1        # the failure clock starts at the first step of an attempt after this one
    next_at = None
    state, probe, loads = None, None, []
    while True:
        if probe is None:
            probe = subprocess.Popen(hl_cmd("status", job_id, "--json"), stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, cwd=work, env=env)
        elif probe.poll() is not None:
            text = probe.stdout.read()
            probe.stdout.close()
            try:
                state = json.loads(text).get("state") if probe.returncode == 0 else None
            except ValueError:
                state = None
            probe = None
            loads.append(os.getloadavg()[0])
            if state in FINAL:
                break
        if mtbf:
            tail.poll()
            if next_at is None:
                began = tail.first_of(clock_from)
                if began is not None:
                    next_at = began + rng.expovariate(1.0 / mtbf)   # the clock runs while it trains
            last_step = tail.steps[-1][2] if tail.steps else 0
            trains = tail.per_epoch is None or last_step < tail.per_epoch * epochs   # none after the last step
            if next_at is not None and time.time() >= next_at and trains:
                attempt, pids = ranks(run_dir)
                if pids:
                    r = rng.choice(sorted(pids))
                    try:
                        os.kill(pids[r], signal.SIGSTOP)
                        now = time.time()
                        injected.append(now)
                        lags.append(now - next_at)
                        clock_from = int(attempt)
                    except OSError:
                        pass
                    next_at = None
        time.sleep(0.05)
    doc = json.loads(hl(home, "report", job_id, "--goodput", "--format", "json", cwd=work).stdout)
    recs = metrics(run_dir)
    saves = [r for r in recs if r.get("kind") == "checkpoint"]
    # training seconds between two saves of one attempt: the gap less the later save's own stop
    gaps, last = [], None
    for r in recs:
        if r.get("kind") == "header":
            last = None
        elif r.get("kind") == "checkpoint":
            if last is not None:
                gaps.append(r["time_unix"] - last - r["seconds"])
            last = r["time_unix"]
    return dict(measure(doc), label=label, state=state, home=home, job_id=job_id, run_dir=run_dir,
                injected=injected, failure_gaps=failure_gaps(run_dir, injected), injection_lag_s=lags,
                saves=len(saves), save_gaps_s=[round(g, 3) for g in gaps],
                last_step=max([r.get("step", 0) for r in recs if r.get("kind") == "step"] or [0]),
                load=[load0] + loads)


def measure(doc):
    """What the comparison takes from a run's goodput document."""
    return {"ettr": doc["ettr"], "run_s": doc["run_s"], "seconds": doc["seconds"],
            "incidents": [{"detect_s": i.get("detect_s"), "cause": i.get("cause"), "since": i.get("since"),
                           "t": i.get("t")} for i in doc["incidents"]]}


def rebuild(run, cwd):
    """The run's goodput measurements again from its run directory (this tree's report), where it is kept."""
    if not run.get("home") or not os.path.isdir(run.get("run_dir") or ""):
        return run
    out = hl(run["home"], "report", run["job_id"], "--goodput", "--format", "json", cwd=cwd)
    run = dict(run, failure_gaps=failure_gaps(run["run_dir"], run["injected"]))
    return dict(run, **measure(json.loads(out.stdout))) if out.returncode == 0 else run


def failure_gaps(run_dir, injected):
    """Each injection's seconds after the first step of the attempt it stopped: the Poisson draws the
    failures came from, which the simulator can replay (the draw after the last one outlasted the job)."""
    starts, attempt = [], None
    for r in metrics(run_dir):
        if r.get("kind") == "header":
            attempt = r.get("attempt")
        elif r.get("kind") == "step" and (not starts or starts[-1][0] != attempt):
            busy = float(r.get("step_time_s") or 0.0) * float(r.get("steps") or 1)
            starts.append((attempt, float(r["time_unix"]) - busy))
    out = []
    for x in injected:
        began = [b for _, b in starts if b <= x]
        if began:
            out.append(round(x - began[-1], 3))
    return out


class Replay:
    """The simulator's random source, giving it a real run's failure gaps, then no more failures."""

    def __init__(self, gaps):
        self.gaps = list(gaps)

    def expovariate(self, _lam):
        return self.gaps.pop(0) if self.gaps else 1e15


def shape_of(run, detect, restart, mtbf):
    """The run's own work, start, end, checkpoint cost and commit delay (train_entry commits a checkpoint
    COMMIT_AFTER_STEPS steps after its save: the run's seconds a step), and the detect and restart given."""
    s = run["seconds"]
    cost = s["checkpointing"] / max(1, run["saves"])
    commit = COMMIT_AFTER_STEPS * s["productive"] / max(1, run["last_step"])
    return Shape(work=s["productive"], nodes=1, mtbf_node_s=mtbf, cost=cost, detect=detect, restart=restart,
                 start=s["starting"], end=s["ending"], commit=commit)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=30)
    p.add_argument("--calibration-runs", type=int, default=0,
                   help="undisturbed runs first (their save gaps join the measured checkpoint interval)")
    p.add_argument("--mtbf", type=float, default=25.0, help="mean seconds of training between injected hangs")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--interval", type=float, default=4.0, help="the checkpoint interval, seconds")
    p.add_argument("--floor", type=float, default=3.0, help="the hang bound's floor, seconds")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sim-runs", type=int, default=2000, help="simulated jobs per real run's shape")
    p.add_argument("--raw", default=None, help="keep every run's measurements here (JSON); default: beside "
                   "--markdown as NAME.runs.json")
    p.add_argument("--from-raw", default=None, help="no runs: the prediction from measurements kept by --raw")
    p.add_argument("--rebuild", action="store_true", help="with --from-raw: each run's goodput report made "
                   "again from its run directory, where it is still there")
    p.add_argument("--markdown", default=None)
    a = p.parse_args()
    if a.runs < 2 and not a.from_raw or a.mtbf <= 0 or a.interval <= 0 or a.epochs < 1:
        p.error("--runs at least 2, --mtbf, --interval and --epochs above 0")
    raw = a.raw or (os.path.splitext(a.markdown)[0] + ".runs.json" if a.markdown else None)
    if a.from_raw:
        try:
            with open(a.from_raw) as f:
                kept = json.load(f)
        except (OSError, ValueError) as e:
            print(f"--from-raw {a.from_raw}: {e}", file=sys.stderr)
            return 2
        args, calm, runs = kept["args"], kept["calibration"], kept["runs"]
        origin = kept.get("context") or {}
        if a.rebuild:
            calm = [rebuild(d, os.getcwd()) for d in calm]
            runs = [rebuild(d, os.getcwd()) for d in runs]
        for k in ("runs", "mtbf", "epochs", "interval", "floor", "seed", "calibration_runs"):
            setattr(a, k, args[k])
        raw = None
    else:
        rng = random.Random(a.seed)
        origin = context()
        work = tempfile.mkdtemp(prefix="hl-simreal-")
        data = os.path.join(work, "digits.csv")
        subprocess.run([PY, "-m", "hpclaunch.train_entry.digits", data], check=True, capture_output=True)
        calm = []
        for i in range(a.calibration_runs):
            calm.append(one_run(work, data, a.epochs, a.interval, a.floor, 0, rng, f"calm{i}"))
            print("calibration", calm[-1]["state"], calm[-1]["run_s"], calm[-1]["seconds"], flush=True)
        runs = []
        for i in range(a.runs):
            d = one_run(work, data, a.epochs, a.interval, a.floor, a.mtbf, rng, f"run{i}")
            runs.append(d)
            print(f"run {i}: {d['state']} ETTR {d['ettr']} run {d['run_s']:.0f} s injected {len(d['injected'])} "
                  f"incidents {len(d['incidents'])} load {statistics.fmean(d['load']):.1f}", flush=True)
            if raw:   # kept after every run: an interrupted bench leaves what it measured
                os.makedirs(os.path.dirname(os.path.abspath(raw)), exist_ok=True)
                with open(raw + ".tmp", "w") as f:
                    json.dump({"args": {k: getattr(a, k) for k in ("runs", "mtbf", "epochs", "interval", "floor",
                                                                   "seed", "calibration_runs")},
                               "context": origin, "calibration": calm, "runs": runs}, f, indent=0)
                os.replace(raw + ".tmp", raw)
    return report(a, calm, runs, origin if a.from_raw else None)


def report(a, calm, runs, origin=None) -> int:
    mean = lambda xs: statistics.fmean(xs) if xs else 0.0  # noqa: E731
    for d in runs:   # measurements kept before the failure gaps were: from the run directory, if kept
        if "failure_gaps" not in d and os.path.isdir(d.get("run_dir") or ""):
            d["failure_gaps"] = failure_gaps(d["run_dir"], d["injected"])
    if any(d["injected"] and "failure_gaps" not in d for d in runs):
        print("some runs lack their failure gaps and run directories: no replay", file=sys.stderr)
        return 2
    incidents = [i for d in runs for i in d["incidents"]]
    # detect: the injection (the failure) to the verdict; the report's detect_s starts at the rank's last
    # progress, a step before it at most
    def detects(d):
        return [i["t"] - max(x for x in d["injected"] if x <= i["t"] + 1.0) for i in d["incidents"]
                if i.get("t") is not None and any(x <= i["t"] + 1.0 for x in d["injected"])]

    from_injection = [x for d in runs for x in detects(d)]
    D_report = mean([i["detect_s"] for i in incidents if i.get("detect_s") is not None])
    # detect and restart move with the load as the start does (a restart is a start again, after a kill):
    # each run's own, over its incidents; a run without one: the median detect, and its own start x the
    # median restart / start of the runs with one
    hit_runs = [d for d in runs if d["incidents"]]
    D_med = statistics.median(from_injection) if from_injection else 0.0
    ratio = statistics.median([d["seconds"]["recovering"] / len(d["incidents"]) / max(d["seconds"]["starting"], 1e-9)
                               for d in hit_runs]) if hit_runs else 1.0
    shapes = [shape_of(d, mean(detects(d)) if detects(d) else D_med,
                       d["seconds"]["recovering"] / len(d["incidents"]) if d["incidents"]
                       else ratio * d["seconds"]["starting"], a.mtbf) for d in runs]
    kept = [i for i, d in enumerate(runs) if d["ettr"] is not None]
    runs, shapes = [runs[i] for i in kept], [shapes[i] for i in kept]
    D, R = mean([sh.detect for sh in shapes]), mean([sh.restart for sh in shapes])
    gaps = [g for d in runs + calm for g in d["save_gaps_s"]]
    tau = mean(gaps)
    measured = [d["ettr"] for d in runs if d["ettr"] is not None]
    m = mean(measured)
    se = statistics.stdev(measured) / len(measured) ** 0.5 if len(measured) > 1 else 0.0
    per_run = [expected(sh, ("fixed", tau), a.sim_runs, a.seed + i) for i, sh in enumerate(shapes)]
    sim = mean([r["ettr"] for r in per_run])
    sim_failures = mean([r["failures"] for r in per_run])
    sim_configured = mean([expected(sh, ("fixed", a.interval), a.sim_runs, a.seed + i)["ettr"]
                           for i, sh in enumerate(shapes)])
    # the same failure times as the real runs (each gap from an attempt's first step): a paired comparison,
    # without the luck of the draws
    replayed = [sim_run(sh, ("fixed", tau), Replay(d.get("failure_gaps", []))) for sh, d in zip(shapes, runs)]
    paired = [r["ettr"] - x for r, x in zip(replayed, measured)]
    paired_se = statistics.stdev(paired) / len(paired) ** 0.5 if len(paired) > 1 else 0.0
    # a run without a failure is its own shape exactly: the comparison's content is in the others
    hit = [x for x, d in zip(paired, runs) if d["incidents"]]
    hit_se = statistics.stdev(hit) / len(hit) ** 0.5 if len(hit) > 1 else 0.0
    injected = [t for d in runs for t in d["injected"]]
    lags = [x for d in runs for x in d["injection_lag_s"]]
    loads = [x for d in runs for x in d["load"]]
    completed = sum(d["state"] == "COMPLETED" for d in runs)
    col = lambda key: [d["seconds"][key] for d in runs]  # noqa: E731
    sec = Section("The failure simulator against real runs (`bench/goodput/bench_sim_vs_real.py`)",
                  f"python bench/goodput/bench_sim_vs_real.py --runs {a.runs} --mtbf {a.mtbf:g} "
                  f"--epochs {a.epochs} --interval {a.interval:g} --floor {a.floor:g}")
    sec.para(f"{len(runs)} local train_entry jobs (torchrun, 2 ranks of DDP on CPU, deterministic digits, {a.epochs} "
             f"epochs), each with hangs injected as a Poisson process while it trains (mean {a.mtbf:g} s of "
             "training between them, the clock running from an attempt's first step; a random rank SIGSTOPped; "
             "none after the last step), which the job runtime detects (hang bound floor "
             f"{a.floor:g} s), saves the stacks of, and recovers from by restarting the step from the newest "
             f"checkpoint (interval {a.interval:g} s). {completed} of {len(runs)} ended COMPLETED. Each run's ETTR "
             f"is its goodput report's (productive / run time); the simulator's is the mean over the runs of "
             f"{a.sim_runs:,} seeded jobs of each run's shape (its own work, start, end and checkpoint cost: the "
             "machine's load moves them from run to run), the failure rate and the measured checkpoint interval; "
             "replayed, the simulator is given each run's own failure times (seconds after an attempt's first "
             "step) instead of drawing them, which takes the luck of the draws out of the comparison (with each "
             "run's own detect and restart, what it then tests is the lost work: how the failure times and the "
             "checkpoint interval and commit turn into work done again). "
             f"The machine's 2 cores were shared with other workers: load average {min(loads):.1f}-{max(loads):.1f} "
             f"(mean {mean(loads):.1f}) during the runs, so a run's speed moves several times over.")
    sec.table(["simulator input", "value (mean over runs)", "measured from"], [
        ("work (productive)", f"{mean(col('productive')):.1f} s (min {min(col('productive')):.1f}, "
                              f"max {max(col('productive')):.1f})", "each run's report"),
        ("start, end", f"{mean(col('starting')):.1f} s, {mean(col('ending')):.1f} s", "the same"),
        ("checkpoint cost", f"{mean([sh.cost for sh in shapes]):.3f} s",
         "each run: checkpointing / its checkpoint records"),
        ("checkpoint commit", f"{mean([sh.commit for sh in shapes]):.2f} s",
         f"each run: {COMMIT_AFTER_STEPS} steps (train_entry commits a save then) x its productive s / step"),
        ("checkpoint interval", f"{tau:.2f} s (configured {a.interval:g} s)",
         f"the {len(gaps)} gaps between two saves of an attempt, less the save"),
        ("detect", f"{D:.2f} s (median {D_med:.2f})",
         f"each run's incidents: injection to verdict ({len(from_injection)} incidents; the reports' detect_s, "
         f"from the rank's last progress: {D_report:.2f} s); a run without one: the median"),
        ("restart (verdict to first step)", f"{R:.2f} s (min {min(sh.restart for sh in shapes):.1f}, max "
                                            f"{max(sh.restart for sh in shapes):.1f})",
         f"each run's recovering / incidents; a run without one: its start x {ratio:.2f}, the median ratio"),
        ("MTBF", f"{a.mtbf:g} s", f"the injection rate ({len(injected)} injected, late by "
                                  f"{mean(lags):.3f} s on average)")])
    sec.table(["", "ETTR", "failures per job"], [
        ("measured (mean of runs ± s.e.)", f"{100 * m:.1f} % ± {100 * se:.1f}",
         f"{mean([len(d['incidents']) for d in runs]):.2f}"),
        ("simulated, Poisson failures at the rate", f"{100 * sim:.1f} %", f"{sim_failures:.2f}"),
        (f"the same, the configured interval ({a.interval:g} s)", f"{100 * sim_configured:.1f} %", ""),
        ("simulated, the runs' own failure times replayed", f"{100 * mean([r['ettr'] for r in replayed]):.1f} %",
         f"{mean([r['failures'] for r in replayed]):.2f}")])
    sec.para(f"Difference, simulated - measured: **{100 * (sim - m):+.1f} points** at the rate (the measured mean's "
             f"s.e. {100 * se:.1f} points: each failure costs a run about "
             f"{D + R + tau / 2:.0f} s of its {mean([d['run_s'] for d in runs]):.0f}, and "
             f"{mean([len(d['incidents']) for d in runs]) * len(runs):.0f} Poisson draws came where "
             f"{sim_failures * len(runs):.1f} were expected); **{100 * mean(paired):+.1f} ± {100 * paired_se:.1f} "
             f"points** with the failure times replayed ({100 * mean(hit):+.1f} ± {100 * hit_se:.1f} over the "
             f"{len(hit)} runs with failures; a run without one is its own shape exactly). Goal: within ±2. "
             "Measured per run: "
             + ", ".join(f"{100 * x:.0f}" for x in measured) + " %.")
    if origin is not None:
        sec.para(f"Made with `--from-raw` from the measurements the runs kept (`{os.path.relpath(a.from_raw)}`)"
                 + (f", runs of {origin['date']} at commit {origin['commit']}" if origin.get("commit") else "")
                 + "; the load average above is the remake's, the runs' is the one in the first paragraph.")
    sec.write(a.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
