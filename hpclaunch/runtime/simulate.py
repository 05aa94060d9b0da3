"""A seeded discrete-event simulator of a job under failures: its effective training time ratio (ETTR)
for a job shape, a failure rate and a checkpoint policy (docs/recovery.md, "Checkpoint cadence").

    python -m hpclaunch.runtime.simulate --work 86400 --nodes 64 --mtbf-node-h 2000 --cost 60 \\
        --policy adaptive --runs 500 --seed 1

The job must do `work` seconds of training. Between checkpoints it trains `interval` seconds, then
stops `cost` seconds to save (a failure before the save ends loses everything since the last one).
Node failures come as a Poisson process: `nodes / mtbf_node` an hour, while the job trains or saves
(not while it starts, restarts or ends). After one: `detect` seconds until it is noticed, then
`restart` seconds (kill, relaunch, reload) and, without a spare node left, `requeue` seconds in the
queue first; the lost work is done again. A checkpoint written beside training (train_entry's:
committed 10 steps after the save) counts only `commit` seconds after its save ends: a failure before
then resumes from the one before it. The job starts with `start` seconds and ends with `end` seconds, as the goodput report counts them.
ETTR = work / (the time from the start to the end), the report's productive / run time.

Policies: ("fixed", SECONDS); ("steps", N, STEP_SECONDS), every N steps; ("daly", MTBF_S) and
("young", MTBF_S), Daly's and Young's intervals for a known MTBF; ("adaptive",), what the job runtime and its programs do (runtime/cadence.py,
train_entry): Daly's interval from the checkpoint cost measured so far (the prior before the first
save) and the failure rate the job was handed (the partition's), blended with the failures it has
seen; retuned after each save (the program, with the MTBF the runtime exports) and at every restart. The event loop jumps from failure to failure (the whole checkpoint cycles between two are
counted at once), so a day-long job under hourly failures costs microseconds.
"""
from __future__ import annotations

import argparse
import json
import math
import random
import sys
from typing import Optional, Sequence, Tuple

from hpclaunch.runtime import cadence


class Shape:
    """A job and its world."""

    __slots__ = ("work", "nodes", "mtbf_node_s", "cost", "detect", "restart", "requeue", "spares", "start", "end",
                 "rate_known", "cost_prior", "prior_node_hours", "commit")

    def __init__(self, work: float, nodes: int, mtbf_node_s: float, cost: float, detect: float = 10.0,
                 restart: float = 30.0, requeue: float = 0.0, spares: int = 1_000_000, start: float = 0.0,
                 end: float = 0.0, rate_known: Optional[float] = None, cost_prior: float = 30.0,
                 prior_node_hours: float = cadence.PRIOR_NODE_HOURS, commit: float = 0.0):
        self.work, self.nodes, self.mtbf_node_s, self.cost = work, nodes, mtbf_node_s, cost
        self.detect, self.restart, self.requeue, self.spares = detect, restart, requeue, spares
        self.start, self.end = start, end
        # the failure rate (per node-hour) the job is handed; None: the true one (a ledger that knows)
        self.rate_known = rate_known
        self.cost_prior = cost_prior
        self.prior_node_hours = prior_node_hours   # how much the handed rate weighs (runtime/cadence.py)
        self.commit = commit   # seconds after a save's end until it is the one a restart resumes from

    @property
    def job_mtbf_s(self) -> float:
        return self.mtbf_node_s / self.nodes


def interval_for(policy: Sequence, shape: Shape, cost_seen: Optional[float], failures: int, node_h: float) -> float:
    kind = policy[0]
    if kind == "fixed":
        return float(policy[1])
    if kind == "steps":
        return float(policy[1]) * float(policy[2])
    if kind == "daly":
        return cadence.interval_s(shape.cost, float(policy[1]))
    if kind == "young":
        return max(cadence.MIN_INTERVAL_S, cadence.young(shape.cost, float(policy[1])))
    if kind == "adaptive":
        rate = shape.rate_known if shape.rate_known is not None else 3600.0 / shape.mtbf_node_s
        cost = cost_seen if cost_seen is not None else shape.cost_prior
        return cadence.interval_s(cost, cadence.mtbf_s(rate, shape.nodes, failures, node_h, shape.prior_node_hours))
    raise ValueError(f"unknown policy {policy!r}")


def run(shape: Shape, policy: Sequence, rng: random.Random) -> dict:
    """One job to its end: {ettr, elapsed, failures, seconds by category}. The first pass over any
    work is productive, a pass over work a failure lost is recomputing (as the goodput report counts)."""
    lam = 1.0 / shape.job_mtbf_s
    t = shape.start
    done = high = 0.0               # saved work; the most work ever reached
    before = 0.0                    # the work saved before the last save, what a restart resumes from
    saved_at = -math.inf            # until the last save is committed (its end + commit)
    failures = 0
    spares = shape.spares
    cost_seen: Optional[float] = None
    sec = {"starting": shape.start, "productive": 0.0, "recomputing": 0.0, "checkpointing": 0.0, "detecting": 0.0,
           "recovering": 0.0, "queued": 0.0, "ending": shape.end}

    def train(x: float) -> None:
        nonlocal high
        redo = min(x, max(0.0, high - pos[0]))
        sec["recomputing"] += redo
        sec["productive"] += x - redo
        pos[0] += x
        high = max(high, pos[0])

    pos = [0.0]
    next_fail = t + rng.expovariate(lam)
    tau = interval_for(policy, shape, cost_seen, failures, 0.0)
    while done < shape.work:
        left = shape.work - done
        before_last = int(math.ceil(left / tau - 1e-9)) - 1      # whole segments followed by a save
        if before_last >= 1:
            k = min(before_last, int((next_fail - t) // (tau + shape.cost)))
            if cost_seen is None and policy[0] == "adaptive":
                k = min(k, 1)                                    # retuned after its first save
            if k >= 1:                                           # k whole cycles before the next failure
                pos[0] = done
                train(k * tau)
                sec["checkpointing"] += k * shape.cost
                t += k * (tau + shape.cost)
                before, done, saved_at = done + (k - 1) * tau, done + k * tau, t
                cost_seen = shape.cost
                tau = interval_for(policy, shape, cost_seen, failures, t * shape.nodes / 3600.0)
                continue
        seg = min(tau, left)
        need = seg + (0.0 if seg >= left else shape.cost)
        pos[0] = done
        if t + need <= next_fail:
            train(seg)
            sec["checkpointing"] += need - seg
            t += need
            before, done, saved_at = done, done + seg, t
            if need > seg:
                cost_seen = shape.cost
                tau = interval_for(policy, shape, cost_seen, failures, t * shape.nodes / 3600.0)
            continue
        # a failure inside this cycle: what was done since the last save is lost
        ran = next_fail - t
        train(min(ran, seg))
        sec["checkpointing"] += max(0.0, ran - seg)
        if next_fail < saved_at + shape.commit:     # the last save not committed yet: the one before it
            done = before
        saved_at = -math.inf
        failures += 1
        t = next_fail + shape.detect + shape.restart
        sec["detecting"] += shape.detect
        sec["recovering"] += shape.restart
        if spares > 0:
            spares -= 1
        else:
            sec["queued"] += shape.requeue
            t += shape.requeue
        next_fail = t + rng.expovariate(lam)
        tau = interval_for(policy, shape, cost_seen, failures, t * shape.nodes / 3600.0)
    elapsed = t + shape.end
    return {"ettr": shape.work / elapsed, "elapsed": elapsed, "failures": failures, "seconds": sec}


def expected(shape: Shape, policy: Sequence, runs: int = 200, seed: int = 0) -> dict:
    """The mean over `runs` seeded jobs: ETTR, its standard error, elapsed, failures, lost seconds."""
    rng = random.Random(seed)
    ettrs, elapsed, failures, lost = [], 0.0, 0, 0.0
    for _ in range(runs):
        r = run(shape, policy, rng)
        ettrs.append(r["ettr"])
        elapsed += r["elapsed"]
        failures += r["failures"]
        lost += r["elapsed"] - shape.work
    mean = sum(ettrs) / runs
    sd = math.sqrt(sum((e - mean) ** 2 for e in ettrs) / max(1, runs - 1))
    return {"ettr": mean, "ettr_se": sd / math.sqrt(runs), "elapsed_s": elapsed / runs,
            "failures": failures / runs, "lost_s": lost / runs}


def best_fixed(shape: Shape, runs: int = 200, seed: int = 0, grid: Optional[Sequence[float]] = None) -> Tuple[float, dict]:
    """The fixed interval with the highest ETTR in hindsight (on a log grid around Young's), and its result.
    Every interval sees the same failures (the same seed)."""
    if grid is None:
        centre = max(cadence.young(shape.cost, shape.job_mtbf_s), 1.0)
        grid = [centre * 2 ** (k / 4) for k in range(-12, 13)]
    best = None
    for tau in grid:
        r = expected(shape, ("fixed", tau), runs, seed)
        if best is None or r["ettr"] > best[1]["ettr"]:
            best = (tau, r)
    return best


def parse_policy(text: str) -> tuple:
    kind, _, rest = text.partition(":")
    args = [float(x) for x in rest.split(",") if x]
    if kind in ("fixed", "daly", "young") and len(args) == 1 or kind == "steps" and len(args) == 2 or kind == "adaptive" and not args:
        return (kind, *args)
    raise argparse.ArgumentTypeError(f"{text!r}: use fixed:SECONDS, steps:N,STEP_SECONDS, daly:MTBF_S, young:MTBF_S "
                                     "or adaptive")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpclaunch.runtime.simulate", description=__doc__.split("\n")[0])
    p.add_argument("--work", type=float, required=True, help="seconds of training the job needs")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--mtbf-node-h", type=float, required=True, help="a node's mean time between failures, hours")
    p.add_argument("--cost", type=float, required=True, help="seconds a checkpoint stops training for")
    p.add_argument("--detect", type=float, default=10.0)
    p.add_argument("--restart", type=float, default=30.0)
    p.add_argument("--requeue", type=float, default=0.0, help="queue wait after a failure with no spare left")
    p.add_argument("--spares", type=int, default=1_000_000)
    p.add_argument("--start", type=float, default=0.0)
    p.add_argument("--end", type=float, default=0.0)
    p.add_argument("--commit", type=float, default=0.0, help="seconds after a save until a restart resumes from it")
    p.add_argument("--policy", type=parse_policy, default=("adaptive",))
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    if a.work <= 0 or a.nodes < 1 or a.mtbf_node_h <= 0 or a.cost < 0 or a.runs < 1 or a.commit < 0:
        p.error("--work, --mtbf-node-h and --runs above 0, --nodes at least 1, --cost and --commit at least 0")
    shape = Shape(a.work, a.nodes, a.mtbf_node_h * 3600.0, a.cost, a.detect, a.restart, a.requeue, a.spares,
                  a.start, a.end, commit=a.commit)
    json.dump({"policy": list(a.policy), **expected(shape, a.policy, a.runs, a.seed)}, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
