"""The checkpoint interval for a checkpoint cost and a mean time between failures (Young 1974, Daly
2006): shared by the job runtime, which exports it at every start of the step, and the programs
that retune it once they have measured their own cost (train_entry, the Lightning callback), with
the MTBF the runtime exports beside it (HPCLAUNCH_MTBF_S; docs/recovery.md)."""
from __future__ import annotations

import math

from typing import Optional

MIN_INTERVAL_S = 10.0
MAX_INTERVAL_S = 7 * 86400.0
# Llama 3's 419 interruptions in 54 days on 2,048 nodes of 8 GPUs: one per ~6,300 node-hours.
DEFAULT_RATE = 1.0 / 6000.0
PRIOR_NODE_HOURS = 500.0      # how much the partition's rate weighs against what the job sees (bench/goodput/bench_cadence.py chose it)


def young(cost_s: float, mtbf_s: float) -> float:
    return math.sqrt(2 * max(cost_s, 0.0) * max(mtbf_s, 0.0))


def daly(cost_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum: compute time between checkpoints,
    sqrt(2CM) [1 + sqrt(C/2M)/3 + (C/2M)/9] - C, and M once C >= 2M."""
    if mtbf_s <= 0:
        return MIN_INTERVAL_S
    if cost_s >= 2 * mtbf_s:
        return mtbf_s
    x = max(cost_s, 0.0) / (2 * mtbf_s)
    return math.sqrt(2 * max(cost_s, 0.0) * mtbf_s) * (1 + math.sqrt(x) / 3 + x / 9) - cost_s


def interval_s(cost_s: float, mtbf_s: float) -> float:
    """Daly's interval, within [MIN_INTERVAL_S, MAX_INTERVAL_S]."""
    return min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, daly(cost_s, mtbf_s)))


def mtbf_s(rate: Optional[float], nodes: int, failures: int = 0, node_hours: float = 0.0,
           prior_node_hours: float = PRIOR_NODE_HOURS) -> float:
    """A job's mean time between failures, in seconds: `rate` (node failures per node-hour on its
    partition; None: DEFAULT_RATE) weighing as PRIOR_NODE_HOURS against the failures the job has seen
    over the node-hours it has run."""
    prior = rate if rate is not None and rate > 0 else DEFAULT_RATE
    blended = (prior * prior_node_hours + failures) / (prior_node_hours + max(node_hours, 0.0))
    return 3600.0 / (max(blended, 1e-12) * max(nodes, 1))
