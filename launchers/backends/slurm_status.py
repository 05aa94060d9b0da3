"""Reading Slurm's answers about jobs: squeue, sacct and scontrol output to JobStatus.

Pure functions over the commands' text, so that recorded real output (tests/fixtures/slurm/)
tests them without a cluster. The order of trust: squeue for live jobs, sacct (with -D, every
requeued attempt) for ended ones, scontrol while the controller still remembers the job.
"""
from __future__ import annotations

import datetime
from typing import Dict, Iterable, List, Optional

from hpclaunch.launchers.backends import slurmcli
from hpclaunch.launchers.backends import base
from hpclaunch.launchers.backends.base import AttemptRecord, JobStatus, State

# Every state word squeue (%T), sacct (State) and scontrol (JobState) print, mapped once
# (TorchX's SLURM_STATES); the rest of hpclaunch speaks State. Words not listed are UNKNOWN.
SLURM_STATES: Dict[str, State] = {
    "PENDING": State.PENDING, "CONFIGURING": State.PENDING, "REQUEUE_HOLD": State.PENDING,
    "REQUEUE_FED": State.PENDING, "RESV_DEL_HOLD": State.PENDING,
    "RUNNING": State.RUNNING, "RESIZING": State.RUNNING, "SIGNALING": State.RUNNING,
    "STAGE_OUT": State.COMPLETING, "COMPLETING": State.COMPLETING,
    "REQUEUED": State.REQUEUED, "SUSPENDED": State.SUSPENDED, "STOPPED": State.SUSPENDED,
    "COMPLETED": State.COMPLETED, "FAILED": State.FAILED, "CANCELLED": State.CANCELLED,
    "TIMEOUT": State.TIMEOUT, "NODE_FAIL": State.NODE_FAIL, "OUT_OF_MEMORY": State.OUT_OF_MEMORY,
    "PREEMPTED": State.PREEMPTED, "BOOT_FAIL": State.BOOT_FAIL, "DEADLINE": State.DEADLINE,
    "SPECIAL_EXIT": State.FAILED, "REVOKED": State.CANCELLED,
}




def state_of(word: Optional[str]) -> State:
    """A state word as squeue, sacct or scontrol print it ("CANCELLED by 0", "REQUEUE_HOLD"), as a State."""
    return base.state_of(word, SLURM_STATES)


# %S: a running job's start, a pending one's expected start (the backfill scheduler's, else N/A).
# Start is last in both: a recording made before it was there still parses.
SQUEUE_FORMAT = "%i|%T|%M|%N|%r|%S"
SACCT_FIELDS = "JobID,State,ExitCode,Elapsed,NodeList,End,Start"


def squeue_cmd(job_ids: Iterable[str]) -> List[str]:
    return ["squeue", "-h", "-r", "-j", ",".join(job_ids), "-o", SQUEUE_FORMAT]


def sacct_cmd(job_ids: Iterable[str]) -> List[str]:
    return ["sacct", "-n", "-P", "-X", "-D", "-j", ",".join(job_ids), "-o", SACCT_FIELDS]


def parse_squeue(text: str) -> Dict[str, List[str]]:
    """squeue rows by job id (`123`, or `123_4` for an array task): [state, elapsed, nodes, reason,
    start] (start "" where the output has no %S column)."""
    out: Dict[str, List[str]] = {}
    for cols in slurmcli.columns(text):
        cols = (cols + [""] * 6)[:6]
        out[cols[0]] = cols[1:]
    return out


def parse_sacct(text: str) -> Dict[str, List[List[str]]]:
    """sacct rows by job id, every attempt (-D) in order: [state, exit code, elapsed, nodes, end,
    start] (end and start "" where the output has no such column)."""
    out: Dict[str, List[List[str]]] = {}
    for cols in slurmcli.columns(text):
        if len(cols) >= 5:
            out.setdefault(cols[0], []).append((cols[1:7] + ["", ""])[:6])
    return out


def end_time_of(text: str) -> Optional[float]:
    """sacct's End or Start, squeue's %S ("2026-11-24T15:20:01", the cluster's local time) -> epoch
    seconds; "Unknown", "None", "N/A" or "" (not yet) -> None."""
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:
        return None


time_of = end_time_of


def seconds_of(text: str) -> Optional[float]:
    """Slurm's elapsed time ("1-02:03:04", "02:03:04", "03:04", "0:04") -> seconds; else None."""
    days, _, rest = (text or "").strip().rpartition("-")
    parts = rest.split(":")
    if not rest or len(parts) > 3 or not all(p.isdigit() for p in parts) or (days and not days.isdigit()):
        return None
    total = 0
    for p in parts:
        total = total * 60 + int(p)
    return total + int(days or 0) * 86400


def attempts_of(job_id: str, rows: List[List[str]]) -> List[AttemptRecord]:
    """sacct -D's rows of one job, one per attempt, oldest first."""
    return [AttemptRecord(job_id, state_of(state), exit_code_of(code), time_of(start), time_of(end),
                          seconds_of(elapsed), nodes if nodes not in ("None assigned", "(null)") else "")
            for state, code, elapsed, nodes, end, start in rows]


def exit_code_of(text: str) -> Optional[int]:
    """sacct/scontrol `ExitCode` "2:0" -> 2; a signal "0:9" -> 128+9; "" -> None."""
    code, _, sig = (text or "").partition(":")
    if not code.isdigit():
        return None
    if int(code) == 0 and sig.isdigit() and int(sig):
        return 128 + int(sig)
    return int(code)


def from_squeue(row: List[str], restarts: int) -> JobStatus:
    state, elapsed, nodes, reason, start = row
    st = JobStatus(state_of(state), None, elapsed, nodes, reason, restarts + 1, "squeue")
    if st.state == State.PENDING:
        st.expected_start = time_of(start)
    else:
        st.start_time = time_of(start)
    return st


def from_sacct(rows: List[List[str]], job_id: str = "") -> JobStatus:
    state, code, elapsed, nodes, end, start = rows[-1]
    st = JobStatus(state_of(state), exit_code_of(code), elapsed, nodes, "", len(rows), "sacct")
    st.end_time = end_time_of(end) if st.final else None
    st.start_time = time_of(start)
    st.history = attempts_of(job_id, rows)
    return st


def from_scontrol(rec: Dict[str, str]) -> JobStatus:
    try:
        restarts = int(rec.get("Restarts", "0") or 0)
    except ValueError:
        restarts = 0
    st = JobStatus(state_of(rec.get("JobState")), exit_code_of(rec.get("ExitCode", "")), rec.get("RunTime", ""),
                   rec.get("NodeList", ""), rec.get("Reason", ""), restarts + 1, "scontrol")
    start = time_of(rec.get("StartTime", ""))
    if st.state == State.PENDING:
        st.expected_start = start
    else:
        st.start_time = start
        st.end_time = time_of(rec.get("EndTime", "")) if st.final else None
    return st


def _range_tasks(text: str, limit: int = 1_000_000) -> List[int]:
    """The task indices of a pending range as sacct prints it ("2-5%2", "4,6-7"); [] if malformed."""
    out: List[int] = []
    for part in text.split("%", 1)[0].split(","):
        first, _, last = part.partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            return []
        lo, hi = int(first), int(last or first)
        if hi < lo or len(out) + hi - lo >= limit:
            return []
        out.extend(range(lo, hi + 1))
    return out


def array_counts(job_id: str, squeue_rows: Dict[str, List[str]], sacct_rows: Optional[Dict[str, List[List[str]]]],
                 scontrol_recs: List[Dict[str, str]]) -> Dict[State, int]:
    """Counts per state over one array's tasks. Each source lays over the one before: scontrol
    (the controller's memory), sacct (ended tasks; it lags the controller while slurmdbd catches
    up), squeue (live tasks). Rows of other jobs and pending ranges ("2-3%2") are ignored."""
    per: Dict[str, State] = {}
    prefix = f"{job_id}_"
    for rec in scontrol_recs:
        if rec.get("ArrayJobId") == job_id and rec.get("ArrayTaskId", "").isdigit():
            per[f"{job_id}_{rec['ArrayTaskId']}"] = state_of(rec.get("JobState"))
    ranges = []
    for jid, rows in (sacct_rows or {}).items():
        if jid.startswith(prefix) and "[" not in jid:
            per[jid] = state_of(rows[-1][0])
        elif jid.startswith(prefix + "["):
            ranges.append((jid, state_of(rows[-1][0])))
    for jid, state in ranges:
        # A range ("ID_[2-5%2]") that ended is the tasks that never started: an array cancelled while
        # they waited. They have no row of their own, so without this the array never ends.
        if state in base.FINAL_STATES:
            for index in _range_tasks(jid[len(prefix) + 1:-1]):
                per.setdefault(f"{prefix}{index}", state)
    for jid, row in squeue_rows.items():
        if jid.startswith(prefix):
            per[jid] = state_of(row[0])
    counts: Dict[State, int] = {}
    for state in per.values():
        counts[state] = counts.get(state, 0) + 1
    return counts
