"""What a job that ended badly has to say for itself: the first failing rank (its host, exit
code and last lines), or the batch log when no rank started, and the command that shows more.
Read from the run directory only (the script writes rank<R>.log/.exit and ranks.tsv)."""
from __future__ import annotations

import os
from typing import Optional

from hpclaunch.launchers.backends.base import JobStatus, State
from hpclaunch.runs.jobs import Job

# One line on what each state means and where to look; FAILED speaks through its rank.
HINTS = {
    State.TIMEOUT: "it reached its time limit (resources.time); to resume instead, see docs/requeue.md",
    State.DEADLINE: "Slurm's deadline passed before it could end",
    State.CANCELLED: "it was cancelled (hpclaunch cancel, scancel, or an administrator)",
    State.NODE_FAIL: "a node failed under it",
    State.BOOT_FAIL: "a node failed to boot for it",
    State.OUT_OF_MEMORY: "a rank ran out of memory (resources.mem)",
    State.PREEMPTED: "a job of higher priority took its nodes",
    State.GAVE_UP: "every attempt was used (requeue.max_attempts) and it never succeeded",
    State.UNKNOWN: "the scheduler no longer knows it",
}


def _null_call(window: list[str]) -> bool:
    """Open MPI's report of a SIGSEGV at address 0 whose backtrace ends at the signal's own frame: a call
    through a null function pointer, which is how Open MPI 4.1's MPI_Init race ends."""
    return any(line.endswith("Failing at address: (nil)") for line in window) and \
        any("] [ 0] " in line for line in window) and not any("] [ 1] " in line for line in window)


# Known ways for a rank to fail, told by its exit code (None: any) and a line among its last 64 KB
# of log (or a test of those lines): (code, line or test, hint).
RANK_HINTS = [
    (134, "terminate called without an active exception",
     "a C++ abort: after a finished DDP run, torch's abort in interpreter teardown "
     "(docs/launch-modes.md, \"Ending a DDP program\")"),
    # Open MPI's own words; its abort lines come after them, so they are rarely among the last lines.
    (None, 'appears to have been direct launched using "srun"',
     "an MPI program started as plain srun tasks, without an MPI plugin (launcher: srun): use launcher: mpi, "
     "which starts its ranks with srun --mpi=<the profile's mpi.srun_mpi> or mpirun (docs/launch-modes.md)"),
    (139, _null_call,
     "a call through a null function pointer, with no frame to show: in an MPI program on Open MPI 4.1 over "
     "TCP, most likely its MPI_Init race; submit again, or use the UCX PML (docs/launch-modes.md, \"MPI over TCP\")"),
]


def batch_log(job: Job, task: Optional[int] = None) -> str:
    """The batch script's own log: logs/slurm.out, or logs/slurm-<job>_<task>.out for a sweep task."""
    logs = os.path.join(job.run_dir, "logs")
    if task is None:
        return os.path.join(logs, "slurm.out")
    for name in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
        if name.startswith("slurm-") and name.endswith(f"_{task}.out"):
            return os.path.join(logs, name)
    return os.path.join(logs, f"slurm-{job.id}_{task}.out")


def _window(path: str) -> list[str]:
    """The non-blank lines of a log's last 64 KB."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()]


def last_lines(path: str, n: int) -> list[str]:
    return _window(path)[-n:]


TRACEBACK = "Traceback (most recent call last):"


def last_traceback(lines: list[str], limit: int = 12) -> tuple[list[str], int]:
    """(the last Python traceback among ``lines``: its header, its deepest frames and the exception
    line, at most ``limit`` lines; the exception line's index), or ([], -1). After a rank's
    traceback come other lines often enough (torch's and NCCL's teardown warnings, Ray's relayed
    logs) that a log's last lines miss the error itself."""
    start = max((i for i, line in enumerate(lines) if line.rstrip() == TRACEBACK), default=-1)
    if start < 0:
        return [], -1
    end = start + 1
    while end < len(lines) and lines[end][:1] in (" ", "\t"):  # frames are indented; the exception is not
        end += 1
    if end == len(lines):  # cut off (the window's end): no exception line to show
        return [], -1
    block = lines[start:end + 1]
    if len(block) > limit:
        block = [block[0], "  [...]"] + block[-(limit - 2):]
    return block, end


def failure_summary(job: Job, st: JobStatus, tail: int = 10) -> list[str]:
    """Lines for a job that did not complete (none for one that did)."""
    if st.state == State.COMPLETED:
        return []
    lines = [f"job {job.id} ({job.name}) ended {st.state}, exit code {st.exit_code}, "
             f"after {st.attempts} attempt(s)"]
    if st.reason:  # what the backend knows of why (the local runner's own error, say)
        lines.append(f"  {st.reason}")
    if st.state in HINTS:
        lines.append(f"  {HINTS[st.state]}")
    task = None
    where = f"hpclaunch logs {job.id}"
    if job.record.array_size:
        failed = job.failed_tasks()
        if failed:
            task = failed[0]
            lines.append(f"  sweep: {len(failed)} task(s) failed; the first to fail: task {task}")
            where += f" --task {task}"
    first = job.first_failure(task)
    if first is not None:
        lines.append(f"  first failing rank: rank {first.rank} on {first.host or 'an unrecorded host'}, "
                     f"exit code {first.exit_code}")
        lines.append(f"  its last lines ({first.path}):")
        window = _window(first.path)
        shown = window[-tail:]
        lines += [f"    | {line}" for line in shown] or ["    | (nothing)"]
        tb, at = last_traceback(window)
        if tb and at < len(window) - tail:  # its exception line is not among those: show where it failed
            lines.append("  its last Python traceback, before those lines:")
            lines += [f"    | {line}" for line in tb]
        lines += [f"  {hint}" for code, needle, hint in RANK_HINTS if code in (None, first.exit_code) and
                  (needle(window) if callable(needle) else any(needle in text for text in window))]
        lines.append(f"  more: {where} --rank {first.rank}    (every rank: {where})")
        return lines
    started = job.rank_logs(task=task)
    path = batch_log(job, task)
    if not started:
        lines.append("  no rank started; the batch log says:")
    else:
        hosts = sorted({lg.host for lg in started if lg.host})
        lines.append(f"  no rank failed ({len(started)} rank(s){' on ' + ', '.join(hosts) if hosts else ''}); "
                     "the batch log says:")
    lines.append(f"  ({path})")
    lines += [f"    | {line}" for line in last_lines(path, tail)] or ["    | (nothing)"]
    lines.append(f"  more: {where}")
    return lines
