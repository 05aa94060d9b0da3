"""The job file's `recovery:` section: what hpclaunch does when a node dies or a rank hangs inside the
allocation, and how often programs are asked to checkpoint (docs/recovery.md).

`resources.spare_nodes` (spec/job.py) says how many extra nodes the job holds for in-allocation
restarts; this section says how failures are told and what a restart may do.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple, Union

from dataclasses import dataclass
from hpclaunch.spec.typedload import field

# A checkpoint interval: "auto" (Young/Daly from the partition's failure rate and the job's measured
# checkpoint cost, retuned at every restart), "off" (hpclaunch asks for none), or seconds.
CHECKPOINT_WORDS = ("auto", "off")
DAY_S = 86400.0


def _interval_check(value: Any) -> Optional[Tuple[str, str]]:
    if isinstance(value, bool):   # YAML reads a bare `off` as false (and `on` as true)
        return None
    if isinstance(value, str):
        return None if value in CHECKPOINT_WORDS else (
            "is not a checkpoint interval", "use auto, off, or a number of seconds (e.g. 600)")
    if not 1 <= value <= 30 * DAY_S:
        return ("is out of range", "use a number of seconds from 1 to 2592000, or auto, or off")
    return None


@dataclass
class Hang:
    """A rank is hung when it makes no progress (no new metrics step record, no new log output, and
    next to no CPU) for longer than factor x its p99 step-record interval, kept within floor and
    ceiling; before its first step record of an attempt, the ceiling applies."""

    enabled: bool = field(True, help="watch every rank for hangs (stacks saved, the step killed and restarted)")
    factor: float = field(3.0, help="the bound: this many times the p99 interval between a rank's step records",
                          minimum=1, maximum=1000)
    floor: float = field(120.0, help="the bound is at least this many seconds", minimum=1, maximum=30 * DAY_S)
    ceiling: float = field(1800.0, help="the bound is at most this many seconds (and is this before a rank's "
                           "first step record of an attempt)", minimum=1, maximum=30 * DAY_S)
    cpu: float = field(0.05, help="below this share of one core a rank counts as idle", minimum=0, maximum=1)


@dataclass
class Recovery:
    """In-allocation recovery from dead nodes and hung ranks (docs/recovery.md)."""

    enabled: bool = field(True, help="watch every node and rank (a heartbeat and progress per node); false: a dead "
                          "node or a hung rank is left to the scheduler and the time limit")
    hang: Hang = field(default_factory=Hang)
    heartbeat_timeout: float = field(10.0, help="seconds without a heartbeat from a node's watch before "
                                     "the node counts as dead", minimum=2, maximum=3600)
    shrink: bool = field(False, help="without a spare node left, go on with fewer nodes where the launcher "
                         "allows it (torchrun: --nnodes=MIN:MAX); else the job is requeued without the dead node")
    min_nodes: Optional[int] = field(None, help="the fewest nodes a shrunk job runs on (default: half, rounded up)",
                                     minimum=1, maximum=100000)
    checkpoint_interval: Union[float, str, bool] = field(
        "auto", check=_interval_check,
        help="HPCLAUNCH_CHECKPOINT_INTERVAL_S: auto (Young/Daly: the square root of 2 x the measured checkpoint "
        "cost x the job's mean time between failures, from the partition's failure rate; retuned at every "
        "restart), off (false), or seconds")
    checkpoint_cost: float = field(30.0, help="the checkpoint cost in seconds that auto assumes until the job "
                                   "has measured its own", minimum=0.1, maximum=DAY_S)


def hang_settings(hang: Hang) -> Optional[Tuple[float, float, float, float]]:
    """(factor, floor, ceiling, cpu share) of an enabled hang watch, else None."""
    if not hang.enabled:
        return None
    return (float(hang.factor), float(hang.floor), float(hang.ceiling), float(hang.cpu))
