"""What a job is doing, in words, for `submit --wait`, `status` and the dashboard: why it waits and
when it should start, which attempt runs, on which nodes."""
from __future__ import annotations

import time
from typing import Optional

from hpclaunch.launchers.backends.base import JobStatus, State

# Slurm's pending reasons (squeue %r, scontrol's Reason) that users meet most, in words.
REASONS = {
    "Resources": "the nodes it needs are in use by other jobs",
    "Priority": "jobs of higher priority are ahead of it",
    "Dependency": "it waits for the jobs it depends on (--after)",
    "DependencyNeverSatisfied": "a job it depends on ended so that it can never start: cancel it",
    "BeginTime": "its start time has not come yet",
    "JobHeldUser": "held (scontrol release starts it)",
    "JobHeldAdmin": "held by an administrator",
    "ReqNodeNotAvail": "a node it needs is down, drained or reserved",
    "NodeDown": "a node it needs is down",
    "PartitionDown": "its partition is down",
    "PartitionInactive": "its partition is inactive",
    "PartitionNodeLimit": "it asks for more nodes than its partition allows",
    "PartitionTimeLimit": "it asks for more time than its partition allows",
    "Reservation": "it waits for its reservation",
    "BadConstraints": "no node can ever satisfy its constraints",
    "Licenses": "it waits for licenses",
    "JobArrayTaskLimit": "the sweep's parallelism limit (sweep.parallelism)",
}


def reason_text(reason: str) -> str:
    """Slurm's reason word with what it means ("Priority: jobs of higher priority are ahead of it");
    another backend's reason (already a sentence) as it is; "" for none."""
    reason = (reason or "").strip()
    if reason in ("", "None", "(null)"):
        return ""
    word = reason.split(",")[0].split("(")[0].strip()
    meaning = REASONS.get(word)
    if meaning is None and word.startswith(("QOS", "AssocGrp", "AssocMax", "MaxJobs", "MaxCpu", "MaxNode")):
        meaning = "a limit of its account or QOS"
    return f"{reason}: {meaning}" if meaning else reason


def start_text(expected: Optional[float], now: Optional[float] = None) -> str:
    """"expected to start 2026-11-29 00:12:30 (in 3 min)"; "" when the scheduler gave no time, or one
    already past (it has not looked again yet)."""
    now = time.time() if now is None else now
    if expected is None or expected < now - 1:
        return ""
    wait = expected - now
    within = f"in {wait:.0f} s" if wait < 90 else f"in {wait / 60:.0f} min" if wait < 5400 else f"in {wait / 3600:.1f} h"
    return f"expected to start {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(expected))} ({within})"


def pending_text(st: JobStatus, now: Optional[float] = None) -> str:
    """Why a pending job waits and when it should start, in one phrase; "" for a job not pending."""
    if st.state != State.PENDING:
        return ""
    return "; ".join(p for p in (reason_text(st.reason), start_text(st.expected_start, now)) if p)
