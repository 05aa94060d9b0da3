#!/usr/bin/env python3
"""The node monitor's CPU per sample with the job's alert rules on, against the same daemon without them.

    .venv/bin/python bench/monitor/bench_alerts.py --rounds 6 --seconds 70 --markdown docs/bench/monitor_alerts.md  # ~8 min
    .venv/bin/python bench/monitor/bench_alerts.py --rounds 2 --seconds 15                                          # a quick look

Each round starts the daemons side by side (``python -m hpclaunch.monitors`` at 1 Hz, their sample grids
staggered over the interval, the order turned each round, as bench_monitor.py's section 6 does): 2 GPUs
through the real nvidia-ml-py binding over tests/monitors/fake_libnvml.c (what a GPU node's daemon runs,
less the driver's time) and 2 GPUs of the Python fake NVML, each once without alerts and once with the
job's default rules and a webhook sink (run directory with ``.hpclaunch/alerts.json``, as a submission
writes it; ``logs/attempt0/ranks.tsv`` and the ranks' metrics and logs, so that the rank rules read
files as on a node: every 60 s, the first time 60 s after the start, so a run of 70 s has one). Nothing
is wrong in these samples: this is what the rules cost while they find nothing, which is nearly always. CPU per sample from each daemon's own ``monitor_stats``; the ratio of
each pair round by round (they ran side by side), then the median over the rounds.

Goal (issue 47): with alerts on, at most 5 % more CPU per sample than without.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]
import benchlib  # noqa: E402  (bench/benchlib.py)
from daemons import FAKE, build_libnvml, fake_scenario  # noqa: E402  (bench/monitor/daemons.py)

GOAL = 1.05


def alert_settings() -> dict:
    """The job's resolved alerts: section with hpclaunch's defaults and one webhook, as submission writes it."""
    from hpclaunch.spec.alerts import Alerts, Webhook
    from hpclaunch.spec.typedload import to_plain
    return to_plain(Alerts(webhooks=[Webhook(url_env="BENCH_WEBHOOK_URL")]))


def _run_dir(tmp: str, name: str, alerts: bool) -> str:
    d = os.path.join(tmp, name)
    os.makedirs(os.path.join(d, "logs", "attempt0"))
    os.makedirs(os.path.join(d, "metrics"))
    with open(os.path.join(d, "logs", "attempt0", "ranks.tsv"), "w") as f:
        f.write("0\tbench\t100\n1\tbench\t101\n")
    for r in (0, 1):
        with open(os.path.join(d, "logs", "attempt0", f"rank{r}.log"), "w") as f:
            f.write("step 1\n")
        with open(os.path.join(d, "metrics", f"rank{r}.jsonl"), "w") as f:
            f.write(json.dumps({"kind": "step", "step": 1, "step_time_s": 0.1}) + "\n")
    if alerts:
        os.makedirs(os.path.join(d, ".hpclaunch"))
        with open(os.path.join(d, ".hpclaunch", "alerts.json"), "w") as f:
            json.dump(alert_settings(), f)
    return d


def one_round(seconds: float, libnvml, rotate: int) -> dict:
    """{(driver, alerts on): monitor_stats} of one round of daemons started side by side."""
    keys = [(drv, on) for drv in (["libnvml"] if libnvml else []) + ["fake"] for on in (False, True)]
    out, procs = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        sc = os.path.join(tmp, "scenario.json")
        with open(sc, "w") as f:
            json.dump(fake_scenario(2, int(seconds) + 10), f)
        starts = []
        for drv, on in keys:
            run = _run_dir(tmp, f"{drv}-{'on' if on else 'off'}", on)
            env = {k: v for k, v in os.environ.items() if k not in (
                "SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES", "SLURM_NODEID", "HPCLAUNCH_RUN_DIR")}
            env.update(HPCLAUNCH_TASKS_PER_NODE="2", SLURM_JOB_ID="4242", HPCLAUNCH_ATTEMPT="0",
                       BENCH_WEBHOOK_URL="json://127.0.0.1:9/never-sent")
            if drv == "libnvml":
                env.update(LD_LIBRARY_PATH=libnvml, FAKE_LIBNVML_GPUS="2")
            else:
                env.update(HPCLAUNCH_MONITOR_FAKE_NVML=FAKE, HPCLAUNCH_FAKE_NVML_SCENARIO=sc)
            cmd = [sys.executable, "-m", "hpclaunch.monitors", "--interval", "1", "--duration", str(seconds),
                   "--run-dir", run, "--host", "bench"]
            starts.append(((drv, on), cmd, env, run))
        rotate %= len(starts)
        t0 = time.monotonic()
        for i, (key, cmd, env, run) in enumerate(starts[rotate:] + starts[:rotate]):
            time.sleep(max(0.0, t0 + i / len(starts) - time.monotonic()))
            procs[key] = (subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), run)
        for key, (p, run) in procs.items():
            _, err = p.communicate(timeout=seconds + 120)
            if p.returncode != 0:
                raise RuntimeError(f"daemon {key} exited {p.returncode}: {err[-2000:]}")
            stats = None
            with open(os.path.join(run, "monitor", "bench.events.jsonl")) as f:
                for line in f:
                    rec = json.loads(line)
                    if rec["kind"] == "monitor_stats":
                        stats = rec["detail"]
            if stats is None or stats.get("gpus") != 2:
                raise RuntimeError(f"daemon {key}: no monitor_stats for 2 GPUs: {stats}")
            if key[1] and os.path.exists(os.path.join(run, "alerts", "node-bench.jsonl")):
                raise RuntimeError(f"daemon {key} raised alerts on a quiet scenario: "
                                   + open(os.path.join(run, "alerts", "node-bench.jsonl")).read()[:500])
            out[key] = stats
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=70.0, help="each daemon's run (1 Hz); over 60 s, so that "
                    "it holds one check of the rank rules")
    ap.add_argument("--markdown", default=None, metavar="FILE", help="write the section here (docs/bench/...)")
    args = ap.parse_args()
    libnvml, why = build_libnvml()
    if libnvml is None:
        print(f"no fake libnvidia-ml ({why}): the Python fake only")
    per: dict = {}
    loads = []
    for r in range(args.rounds):
        loads.append(os.getloadavg()[0])
        res = one_round(args.seconds, libnvml, r)
        for key, st in res.items():
            per.setdefault(key, []).append(st["cpu_s_per_sample"] * 1e3)
        print(f"round {r + 1}: load {loads[-1]:.2f}; " + ", ".join(
            f"{d} alerts {'on' if on else 'off'} {st['cpu_s_per_sample'] * 1e3:.3f} ms" for (d, on), st in res.items()),
            flush=True)
    rows, verdicts = [], []
    names = {"libnvml": "2 GPUs, pynvml + fake libnvidia-ml", "fake": "2 fake GPUs (Python fake NVML)"}
    for drv in [d for d in ("libnvml", "fake") if (d, False) in per]:
        off, on = per[(drv, False)], per[(drv, True)]
        ratios = [b / a for a, b in zip(off, on)]
        med = statistics.median(ratios)
        rows.append((names[drv], benchlib.fmt(off, "ms"), benchlib.fmt(on, "ms"), benchlib.fmt(ratios, "x", 3)))
        verdicts.append(f"{names[drv]}: alerts on / off = **{med:.3f}** (goal <= {GOAL}: "
                        f"{'met' if med <= GOAL else 'NOT met'})")
        print(f"{names[drv]}: off {benchlib.fmt(off, 'ms')}, on {benchlib.fmt(on, 'ms')}, on/off {benchlib.fmt(ratios, 'x', 3)}")
    for v in verdicts:
        print("goal: " + v.replace("**", ""))
    section = benchlib.Section("Monitor cost with alerts on (`bench/monitor/bench_alerts.py`)",
                               "python bench/monitor/bench_alerts.py " + " ".join(
                                   a for a in sys.argv[1:]))
    section.para(f"{args.rounds} rounds of {args.seconds:g} s at 1 Hz; in each, the daemons started side by side, "
                 "staggered over the interval, the order turned each round. `on`: the job's default alert rules "
                 "(every rule of docs/alerts.md, looked at every 5 s) and a webhook sink, read from the run "
                 "directory's `.hpclaunch/alerts.json`, with two ranks' logs and metrics for the rank rules "
                 "(checked every 60 s: once in a run over 60 s); nothing fires. "
                 "CPU per sample from each daemon's `monitor_stats`; the ratio is taken round by round. "
                 f"Load average (1 min) at the start of each round: {', '.join(f'{x:.2f}' for x in loads)}.")
    section.table(("daemon", "alerts off, CPU per sample", "alerts on", "on / off"), rows)
    section.para("Goal (issue 47): at most 5 % more CPU per sample with alerts on.\n"
                 + "\n".join(f"- {v}" for v in verdicts))
    section.write(args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
