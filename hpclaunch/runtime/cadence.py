"""How often a job should checkpoint: the Young/Daly interval from its failure rate and its measured
checkpoint cost, retuned at every (re)start of its step (docs/recovery.md, "Checkpoint cadence").

    interval = sqrt(2 C M) [1 + sqrt(C / 2M) / 3 + (C / 2M) / 9] - C    (Daly 2006; M when C >= 2M)

C is the time the program stops for a checkpoint: the median of the last checkpoint events the job's
ranks recorded (`{"kind": "checkpoint", "seconds": C}` in metrics/rank<R>.jsonl; train_entry and
hpclaunch's Lightning callback write them), else the job's `recovery.checkpoint_cost`. M is the
job's mean time between failures: 1 / (rate x nodes), the rate being node failures per node-hour on
its partition (the fleet's record, handed to the job at submit), updated with what this job has seen
(each node it fenced, over the node-hours it has run), the fleet's record weighing as PRIOR_NODE_HOURS.
The simulator (reports/goodput_sim.py) chose Daly's form over Young's sqrt(2CM) and this prior.
"""
from __future__ import annotations

import math
import os
from statistics import median
from typing import List, Optional, Tuple

# Llama 3's 419 interruptions in 54 days on 2,048 nodes of 8 GPUs: one per ~6,300 node-hours.
DEFAULT_RATE = 1.0 / 6000.0
PRIOR_NODE_HOURS = 2000.0     # how much the fleet's rate weighs against what the job sees
MIN_INTERVAL_S = 10.0
MAX_INTERVAL_S = 7 * 86400.0
COST_SAMPLES = 5              # the newest checkpoint events the cost is the median of
TAIL_BYTES = 256 * 1024


def daly(cost_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum: compute time between checkpoints."""
    if mtbf_s <= 0:
        return MIN_INTERVAL_S
    if cost_s >= 2 * mtbf_s:
        return mtbf_s
    x = cost_s / (2 * mtbf_s)
    return math.sqrt(2 * cost_s * mtbf_s) * (1 + math.sqrt(x) / 3 + x / 9) - cost_s


def young(cost_s: float, mtbf_s: float) -> float:
    return math.sqrt(2 * cost_s * max(mtbf_s, 0.0))


def mtbf_s(rate: Optional[float], nodes: int, failures: int = 0, node_hours: float = 0.0) -> float:
    """The job's mean time between failures, in seconds."""
    prior = rate if rate is not None and rate > 0 else DEFAULT_RATE
    blended = (prior * PRIOR_NODE_HOURS + failures) / (PRIOR_NODE_HOURS + max(node_hours, 0.0))
    return 3600.0 / (max(blended, 1e-12) * max(nodes, 1))


def interval_s(cost_s: float, mtbf: float) -> float:
    return min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, daly(cost_s, mtbf)))


def measured_cost(run_dir: str) -> Optional[float]:
    """The median of the newest checkpoint costs the ranks recorded, or None."""
    import json
    folder = os.path.join(run_dir, "metrics")
    found: List[Tuple[float, float]] = []
    try:
        names = [n for n in os.listdir(folder) if n.startswith("rank") and n.endswith(".jsonl")]
    except OSError:
        return None
    for name in sorted(names)[:64]:
        try:
            with open(os.path.join(folder, name), "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - TAIL_BYTES))
                data = f.read()
        except OSError:
            continue
        for line in data.splitlines():
            if b'"checkpoint"' not in line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("kind") == "checkpoint":
                t, c = rec.get("time_unix"), rec.get("seconds")
                if isinstance(t, (int, float)) and isinstance(c, (int, float)) and 0 <= c < 86400:
                    found.append((float(t), float(c)))
    if not found:
        return None
    found.sort()
    return median(c for _, c in found[-COST_SAMPLES:])


def seen(run_dir: str, nodes: int) -> Tuple[int, float]:
    """(nodes fenced, node-hours run) in this job so far, from its state file."""
    failures, node_hours, start = 0, 0.0, None
    try:
        with open(os.path.join(run_dir, ".hpclaunch", "state"), encoding="utf-8", errors="replace") as f:
            lines = f.read(4 << 20).splitlines()
    except OSError:
        return 0, 0.0
    last = None
    for line in lines:
        words = line.split()
        if len(words) < 3 or not words[0].isdigit():
            continue
        t = int(words[0])
        last = t
        if words[2] in ("start", "launch") and start is None:
            start = t
        elif words[2] == "end" and start is not None:
            node_hours += (t - start) * nodes / 3600.0
            start = None
        elif words[2] == "fence":
            failures += 1
    if start is not None and last is not None:
        node_hours += (last - start) * nodes / 3600.0
    return failures, node_hours


def for_job(run_dir: str, policy: str, cost_prior: float, rate: Optional[float], nodes: int) -> Optional[float]:
    """The interval to export for the next start of the step, or None (policy off)."""
    if policy == "off":
        return None
    if policy != "auto":
        return float(policy)
    cost = measured_cost(run_dir)
    failures, node_hours = seen(run_dir, nodes)
    return interval_s(cost if cost is not None else cost_prior, mtbf_s(rate, nodes, failures, node_hours))
