"""How often a job should checkpoint: the Young/Daly interval from its failure rate and its measured
checkpoint cost, retuned at every (re)start of its step (docs/recovery.md, "Checkpoint cadence").

    interval = sqrt(2 C M) [1 + sqrt(C / 2M) / 3 + (C / 2M) / 9] - C    (Daly 2006; M when C >= 2M)

C is the time the program stops for a checkpoint: the median of the last checkpoint events the job's
ranks recorded (`{"kind": "checkpoint", "seconds": C}` in metrics/rank<R>.jsonl; train_entry and
hpclaunch's Lightning callback write them), else the job's `recovery.checkpoint_cost`. M is the
job's mean time between failures: 1 / (rate x nodes), the rate being node failures per node-hour on
its partition (the fleet's record, handed to the job at submit), updated with what this job has seen
(each node it fenced, over the node-hours it has run), the fleet's record weighing as PRIOR_NODE_HOURS.
The simulator (runtime/simulate.py, bench/goodput/cadence.py) chose Daly's form over Young's sqrt(2CM).
"""
from __future__ import annotations

import os
from typing import List, Optional, Tuple

from hpclaunch.common.checkpoint_interval import (DEFAULT_RATE, MAX_INTERVAL_S, MIN_INTERVAL_S,  # noqa: F401
                                                  PRIOR_NODE_HOURS, daly, interval_s, mtbf_s, young)

COST_SAMPLES = 5              # the newest checkpoint events the cost is the median of
TAIL_BYTES = 256 * 1024


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
    # the median by hand: `statistics` (with fractions, decimal and random) would be most of what
    # submit imports for it (tests/test_submit_imports.py)
    costs = sorted(c for _, c in found[-COST_SAMPLES:])
    mid = len(costs) // 2
    return costs[mid] if len(costs) % 2 else (costs[mid - 1] + costs[mid]) / 2


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


def for_job(run_dir: str, policy: str, cost_prior: float, rate: Optional[float],
            nodes: int) -> Tuple[Optional[float], Optional[float]]:
    """(the interval to export for the next start of the step, the MTBF it assumed), or (None, None)
    with policy off; a fixed interval has no MTBF."""
    if policy == "off":
        return None, None
    if policy != "auto":
        return float(policy), None
    cost = measured_cost(run_dir)
    failures, node_hours = seen(run_dir, nodes)
    mtbf = mtbf_s(rate, nodes, failures, node_hours)
    return interval_s(cost if cost is not None else cost_prior, mtbf), mtbf
