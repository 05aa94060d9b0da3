"""A job's attempts: the scheduler's record of each one kept in its run directory, and what `status`,
`submit --wait` and the report say of them.

The batch script records each attempt it ran (.hpclaunch/state); the scheduler alone knows an attempt
whose script was cut short by a failed node, and who requeued it. What the backend says of each
attempt (Slurm: `sacct -D`, asked once per poll of a job that has restarted) is written to
.hpclaunch/attempts.json when it changed, so the report, built from the run directory alone, names
every attempt with its cause and nodes even after the scheduler has forgotten the job. Both are read
back as one list by reports/attempts.py.
"""
from __future__ import annotations

import json
import os
import time
from typing import List, Optional, Sequence

from hpclaunch.common.atomic import write_atomic
from hpclaunch.launchers.backends.base import AttemptRecord, JobStatus, State
from hpclaunch.launchers.backends.slurm_status import seconds_of
from hpclaunch.reports import attempts as record_reader

SCHEMA = record_reader.SCHEMA


def _row(rec: AttemptRecord) -> dict:
    return {"job_id": rec.job_id, "state": str(rec.state), "exit_code": rec.exit_code,
            "start_unix": rec.start_time, "end_unix": rec.end_time, "elapsed_s": rec.elapsed_s, "nodes": rec.nodes}


def record(run_dir: str, history: Sequence[AttemptRecord]) -> bool:
    """Keep the scheduler's rows of one job (every attempt of its id) in the run directory, beside
    those of the jobs it continues (a resubmission after a node failure shares the folder). Written
    atomically, only when they changed; a run directory this user cannot write is left alone.
    True when the file was written."""
    folder = os.path.join(run_dir, ".hpclaunch")
    if not history or not os.path.isdir(folder):
        return False
    ids = {h.job_id for h in history}
    kept = [{"job_id": r["job_id"], "state": r["state"], "exit_code": r["exit_code"], "start_unix": r["start"],
             "end_unix": r["end"], "elapsed_s": r["elapsed"], "nodes": r["nodes"]}
            for r in record_reader.scheduler_record(run_dir) if r["job_id"] not in ids]
    rows = kept + [_row(h) for h in history]
    rows.sort(key=lambda r: (r["start_unix"] is None, r["start_unix"] or 0))
    text = json.dumps({"schema": SCHEMA, "attempts": rows[-record_reader.MAX_ATTEMPTS:]}, indent=1) + "\n"
    path = os.path.join(run_dir, record_reader.SCHEDULER_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return False
    except OSError:
        pass
    try:
        write_atomic(path, text)
    except OSError:
        return False
    return True


def history(run_dir: str) -> List[dict]:
    """Every attempt of the job in this run directory (reports/attempts.py's list)."""
    return record_reader.attempts(run_dir)


def node_count(run_dir: str) -> int:
    """How many nodes the newest attempt had, as its batch script counted them (0: not known)."""
    script = record_reader.script_record(run_dir)
    return (script[max(script)].get("nodes") or 0) if script else 0


def elapsed_s(past: List[dict], st: JobStatus, now: Optional[float] = None) -> Optional[float]:
    """The whole job's elapsed time: from its first attempt's start to its end, or to now while it
    runs (pending again between attempts included); the scheduler's own figure without a record."""
    now = time.time() if now is None else now
    active = not st.final and st.state != State.UNKNOWN
    total = record_reader.total_elapsed(past, running=active, now=now)
    if total is not None:
        return total
    if st.state == State.PENDING:
        return None                     # it has not started (Slurm's "0:00" would say it ran no time)
    if st.start_time is not None:
        return max(0.0, (st.end_time or now) - st.start_time) if st.final or active else None
    return seconds_of(st.elapsed)


duration_text = record_reader.duration_text
attempt_line = record_reader.attempt_line
