"""What a job that ended badly has to say for itself: the first failing rank (its host, exit
code and last lines), or the batch log when no rank started, and the command that shows more.
Read from the run directory only (the script writes rank<R>.log/.exit and ranks.tsv)."""
from __future__ import annotations

import os
import time
from typing import List, Optional

from hpclaunch.launchers.backends.base import JobStatus, State
from hpclaunch.runs import attempts as run_attempts
from hpclaunch.runs.jobs import Job, RankLog, attempts_of
from hpclaunch.runs.rank_progress import KILLED, behind, never_connected, rank_progress, stop_time

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


# States in which something outside the program stopped every rank at once (Slurm sends SIGTERM to
# every process of the job): which rank ended first is chance, and its SIGTERM is no failure.
STOPPED = {State.TIMEOUT: "the time limit", State.DEADLINE: "the deadline", State.CANCELLED: "the cancellation",
           State.PREEMPTED: "the preemption"}


def attempts_summary(job: Job, st: JobStatus) -> list[str]:
    """Each attempt with its cause and nodes, when the job had more than one."""
    past = job.history()
    if len(past) < 2:
        return []
    total = run_attempts.elapsed_s(past, st)
    return [f"  {len(past)} attempts, {run_attempts.duration_text(total)} in all:"] + \
        [f"    {run_attempts.attempt_line(a)}" for a in past]


def alone_warning(job: Job, st: JobStatus) -> list[str]:
    """A job of several ranks that completed although its ranks never held a socket: they never talked
    to each other (each a world of one, e.g. an Accelerate program under launcher: srun)."""
    if st.state != State.COMPLETED or job.record.array_size:
        return []
    attempts = attempts_of(job.run_dir)
    ranks = len(job.rank_logs())
    if not attempts or not never_connected(job.run_dir, attempts[-1], ranks):
        return []
    return [f"warning: the {ranks} ranks of job {job.id} never held a socket while they ran: they never talked to "
            "each other, each a world of its own (the same training run once per rank?). An Accelerate program "
            "needs launcher: torchrun, and ACCELERATE_USE_CPU on CPU nodes (docs/launch-modes.md, \"Accelerate\")"]


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
    lines += attempts_summary(job, st)
    task = None
    where = f"hpclaunch logs {job.id}"
    if job.record.array_size:
        failed = job.failed_tasks()
        if failed:
            task = failed[0]
            lines.append(f"  sweep: {len(failed)} task(s) failed; the first to fail: task {task}")
            where += f" --task {task}"
    first = job.first_failure(task)
    if st.state in STOPPED and not job.record.array_size:
        stopped = _stopped(job, st, tail, where)
        if stopped:
            return lines + stopped
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


def _rank_lines(rank: RankLog, tail: int) -> list[str]:
    window = _window(rank.path)
    lines = [f"  its last lines ({rank.path}):"]
    lines += [f"    | {line}" for line in window[-tail:]] or ["    | (nothing)"]
    return lines


def _clock(t: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t))


def _stopped(job: Job, st: JobStatus, tail: int, where: str) -> List[str]:
    """What a job stopped from outside says: a rank that failed before the stop, as any failure;
    else that the stop ended every rank (no failure), and which ranks had stopped making progress
    long before the others. [] when no rank ended."""
    attempts = attempts_of(job.run_dir)
    logs = job.rank_logs()
    stop = stop_time([(lg.exit_code, lg.exit_time) for lg in logs])
    if not attempts or not logs or stop is None:
        return []
    what = STOPPED[st.state]
    early = sorted((lg for lg in logs if lg.exit_code not in (None, 0, *KILLED) and lg.exit_time is not None
                    and lg.exit_time < stop - 1), key=lambda lg: (lg.exit_time, lg.rank))
    if early:  # a rank failed before the stop: that is the failure (the others may have waited for it)
        first = early[0]
        return [f"  first failing rank, {stop - first.exit_time:.0f} s before {what}: rank {first.rank} on "
                f"{first.host or 'an unrecorded host'}, exit code {first.exit_code}"] + _rank_lines(first, tail) + \
            [f"  more: {where} --rank {first.rank}    (every rank: {where})"]
    codes = sorted({lg.exit_code for lg in logs if lg.exit_code is not None})
    lines = [f"  {what} stopped every rank (SIGTERM; exit code{'s' if len(codes) > 1 else ''} "
             f"{', '.join(map(str, codes)) or 'unknown'}): no rank failed before it"]
    record = run_attempts.history(job.run_dir)
    started = record[-1]["start_unix"] if record else None
    progress = rank_progress(job.run_dir, attempts[-1], logs, stop)
    late, gap = behind(progress, stop, started)
    known = [p for p in progress if p.last is not None]
    by_rank = {lg.rank: lg for lg in logs}
    if late:
        others = len(known) - len(late)
        for p in late[:5]:
            lines.append(f"  rank {p.rank} on {p.host or 'an unrecorded host'} stopped making progress "
                         f"{run_attempts.duration_text(stop - p.last)} before {what} (its last signs: {p.evidence()})")
        if len(late) > 5:
            lines.append(f"  ... and {len(late) - 5} more rank(s) like it")
        lead = max(p.last for p in known)
        lines.append(f"  the other {others} rank(s) made progress until {run_attempts.duration_text(stop - lead)} "
                     f"before it: look at rank {late[0].rank} first")
        lines += _rank_lines(by_rank[late[0].rank], tail)
        lines.append(f"  more: {where} --rank {late[0].rank}    (every rank: {where})")
        return lines
    if len(known) == len(progress) and known:
        lead = max(p.last for p in known)
        first = min(known, key=lambda p: (p.last, p.rank))
        if stop - lead >= gap:
            lines.append(f"  no rank made progress in its last {run_attempts.duration_text(stop - lead)} before "
                         f"{what} (all waited: a hang?); the first to stop: rank {first.rank} on "
                         f"{first.host or 'an unrecorded host'} at {_clock(first.last)}")
        else:
            lines.append(f"  every rank made progress until {run_attempts.duration_text(stop - lead)} "
                         f"before {what}, within {run_attempts.duration_text(lead - first.last)} of each other")
    else:
        lines.append("  which rank stopped making progress first cannot be told: no monitor rows of the ranks "
                     "(monitor.interval: 0?) nor metrics, and their logs were written as they ended")
    lines.append(f"  more: {where}")
    return lines
