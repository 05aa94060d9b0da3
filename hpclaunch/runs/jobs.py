"""A handle on a submitted job: status, wait, cancel, logs. Works from any directory."""
from __future__ import annotations

import glob
import json
import os
import re
import time
from typing import Callable, Optional

from hpclaunch.common.errors import HpclaunchError
from dataclasses import dataclass, replace
from hpclaunch.launchers.backends.choice import get_backend, relayed
from hpclaunch.launchers.backends.base import FINAL_STATES, Capability, JobRef, JobStatus, State, exit_code_for
from hpclaunch.runs import attempts as run_attempts
from hpclaunch.runs.alerts import on_final
from hpclaunch.runs.registry import JobRecord, Registry
from hpclaunch.runs import goodput
from hpclaunch.runs.resubmit import resubmit


@dataclass
class RankLog:
    rank: int
    path: str
    exit_code: Optional[int]
    exit_time: Optional[float]
    host: Optional[str] = None      # from logs/attempt<N>/ranks.tsv


class Job:
    def __init__(self, record: JobRecord, registry: Optional[Registry] = None):
        self.record = record
        self.registry = registry or Registry()
        self.alerts: list = []  # the alerts its end raised, when this handle saw it end

    def __repr__(self) -> str:
        return f"Job({self.record.backend}:{self.record.job_id} {self.record.name!r})"

    @property
    def id(self) -> str:
        return self.record.job_id

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def run_dir(self) -> str:
        return self.record.run_dir

    def _backend(self):
        if relayed(self.record.backend):  # submit --remote: its hpclaunch, over ssh, follows it
            raise HpclaunchError(f"job {self.id} ran on remote {self.record.cluster}: follow it with the command "
                                 f"(hpclaunch status {self.id}, hpclaunch logs {self.id}), which asks the cluster")
        return get_backend(self.record.backend)

    def ref(self, record: Optional[JobRecord] = None) -> JobRef:
        rec = record or self.record
        return JobRef(rec.job_id, rec.run_dir, rec.array_size or 0)

    def status(self):
        be = self._backend()
        chunks = self.chunks() if self.record.array_size else [self.record]
        if len(chunks) > 1:
            return self.settle(self._array_status(be, chunks))
        return self.settle(be.status(self.ref()))

    def settle(self, st: JobStatus) -> JobStatus:
        """The backend's answer made whole: an array's one state, the registry's memory of a job
        the scheduler forgot, GAVE_UP, the attempts, and the exit code that tells the truth; then
        recorded in the registry."""
        if st.tasks and st.state == State.UNKNOWN:  # Slurm counts an array's tasks; one state from them
            st = _array_summary(st.tasks, self.record.array_size or 0)
        if st.state == "UNKNOWN":
            # Slurm has forgotten the job (no accounting, MinJobAge passed, or a reset cluster):
            # the registry still holds the last state hpclaunch saw.
            rec = self.registry.get(self.record.key)
            if rec.state != "PENDING" or rec.exit_code is not None:
                st.state, st.exit_code, st.source = rec.state, rec.exit_code, "registry"
        outcome = script_outcome(self.record.run_dir)
        if outcome and outcome.get("outcome") == "gave_up" and st.final:
            st.state = State.GAVE_UP
        attempts = max(st.attempts, int(outcome.get("attempt", -1)) + 1 if outcome else 1)
        if st.state in (State.COMPLETING, State.REQUEUED) and outcome.get("attempt", "").isdigit():
            # Slurm counts the restart as soon as the job is requeued, while the attempt that asked
            # for it is still completing: that attempt is the batch script's newest, not the next.
            attempts = int(outcome["attempt"]) + 1
        st.attempts = attempts
        if st.history and not self.record.array_size:
            run_attempts.record(self.record.run_dir, st.history)
        if st.final:
            st.exit_code = exit_code_for(st.state, self._failing_rank_code(), st.exit_code)
        if st.state not in ("UNKNOWN", ""):
            if self.registry.update_state(self.record.key, st.state, exit_code=st.exit_code, attempts=attempts,
                                          end_time=st.end_time) and st.final:
                try:
                    self.alerts = on_final(self, st)  # once, by whichever command sees the end first
                except Exception as e:  # noqa: BLE001 - an alert never costs the state (alerts list says more)
                    self.alerts = [{"rule": "error", "message": f"alerts: {type(e).__name__}: {e}"}]
        return st

    def history(self) -> list[dict]:
        """Every attempt so far, oldest first (runs/attempts.py): start, end, elapsed, cause, nodes."""
        return [] if self.record.array_size else run_attempts.history(self.record.run_dir)

    def _failing_rank_code(self) -> Optional[int]:
        """The exit code of the first rank to fail in the last attempt (of the first task to fail, for a sweep)."""
        failed = self.failed_tasks() if self.record.array_size else [None]
        for task in failed[:1]:
            logs = ordered_logs(self.rank_logs(task=task))
            if logs and logs[0].exit_code:
                return logs[0].exit_code
        return None

    def first_failure(self, task: Optional[int] = None) -> Optional[RankLog]:
        """The first rank to fail in the last attempt, or None."""
        logs = ordered_logs(self.rank_logs(task=task))
        return logs[0] if logs and logs[0].exit_code not in (None, 0) else None

    def chunks(self) -> list[JobRecord]:
        """A sweep's job arrays (one unless it was split at MaxArraySize)."""
        return self.registry.family(self.record.parent_key or self.record.key)

    def _array_status(self, be, chunks: list[JobRecord]):
        counts: dict[State, int] = {}
        for part in be.statuses([self.ref(r) for r in sorted(chunks, key=lambda r: r.key)]):
            for state, n in part.tasks.items():
                counts[state] = counts.get(state, 0) + n
        return _array_summary(counts, sum(r.array_size or 0 for r in chunks))

    def wait(self, poll: float = 2.0, timeout: Optional[float] = None,
             on_change: Optional[Callable[[object], None]] = None, resubmit_on_node_failure: bool = True,
             on_poll: Optional[Callable[[object], None]] = None):
        """Follow the job to its end. A node that fails under it (the job ends NODE_FAIL, or is stuck
        pending on a node that went down, or failed while one of its nodes is down) makes hpclaunch
        resubmit it without that node, into the same run directory, so it resumes from its checkpoint;
        `self` then follows the new job."""
        start = time.monotonic()
        last = None
        while True:
            st = self.status()
            if resubmit_on_node_failure and not self.record.array_size and \
                    Capability.NODE_FAILURES in self._backend().capabilities:
                replacement = self._resubmit_if_node_failed(st)
                if replacement is not None:
                    if on_change:
                        on_change(st)
                    self.record = replacement
                    last = None
                    continue
            key = (st.state, st.attempts, tuple(sorted(st.tasks.items())))
            if on_change and key != last:
                on_change(st)
            elif on_poll:
                on_poll(st)
            last = key
            if st.final:
                self._remember_goodput(st)
                return st
            if timeout is not None and time.monotonic() - start > timeout:
                return st
            time.sleep(poll)

    def _remember_goodput(self, st) -> None:
        """The ended job's goodput summary in the registry's ledger: the partition's failure rate and
        the fleet view read it (best effort: a job whose logs cannot be read is summarised later)."""
        if self.record.array_size:
            return
        try:
            goodput.remember(self.registry, replace(self.record, state=str(st.state),
                                                    end_time=st.end_time or self.record.end_time or time.time()))
        except Exception:  # noqa: BLE001 - following a job never fails for its report
            pass

    def _resubmit_if_node_failed(self, st) -> Optional[JobRecord]:
        be = self._backend()
        failing = st.state == "NODE_FAIL" or (st.state in ("FAILED", "TIMEOUT") and st.nodes) or (
            st.state == "PENDING" and any(w in st.reason for w in ("NodeDown", "ReqNodeNotAvail", "NodeFail")))
        if not failing:
            return None
        nodes = st.nodes or be.job_nodes(self.record.job_id)
        down = be.down_nodes(nodes)
        if not down:
            return None
        doc = json.loads(self.record.resolved or "{}")
        max_attempts = int(doc.get("requeue", {}).get("max_attempts", 1))
        attempts = max(st.attempts, self.record.attempts)
        if attempts >= max_attempts:
            return None
        if st.state == "PENDING":
            be.cancel(self.ref())
        return resubmit(self.record, self.registry, exclude=down, attempts_so_far=attempts,
                        reason=f"node failure: {','.join(down)} ({st.state})")

    def cancel(self) -> None:
        self._backend().cancel(self.ref())
        self.registry.event(self.record.key, "cancel_requested")

    def tasks(self) -> list[int]:
        """A sweep's task indices that have a folder (empty for a single job)."""
        found = []
        for path in glob.glob(os.path.join(self.record.run_dir, "task*")):
            m = re.search(r"task(\d+)$", path)
            if m and os.path.isdir(path):
                found.append(int(m.group(1)))
        return sorted(found)

    def failed_tasks(self) -> list[int]:
        """Tasks with a rank that exited non-zero, the first to fail first."""
        failed = []
        for t in self.tasks():
            bad = [r for r in rank_logs(self._dir(t)) if r.exit_code not in (None, 0)]
            if bad:
                failed.append((min(r.exit_time or 0 for r in bad), t))
        return [t for _, t in sorted(failed)]

    def _dir(self, task: Optional[int]) -> str:
        return self.record.run_dir if task is None else os.path.join(self.record.run_dir, f"task{task}")

    def rank_logs(self, attempt: Optional[int] = None, task: Optional[int] = None) -> list[RankLog]:
        return rank_logs(self._dir(task), attempt)

    def logs(self, rank: Optional[int] = None, attempt: Optional[int] = None, tail: Optional[int] = None,
             task: Optional[int] = None) -> str:
        parts = []
        for log in ordered_logs(self.rank_logs(attempt, task)):
            if rank is not None and log.rank != rank:
                continue
            parts.append(tail_text(log.path, tail) if tail else _read(log.path))
        return "".join(parts)


def refresh(records: list[JobRecord], registry: Registry) -> dict[int, JobStatus]:
    """The states of many jobs, by registry key, with one `statuses` call per backend (Slurm: one
    squeue and one sacct for them all; controllers rate-limit per-job polling), recorded as
    `Job.status` records them. A backend that cannot be reached here leaves its rows as they are."""
    out: dict[int, JobStatus] = {}
    by_backend: dict[str, list[Job]] = {}
    for rec in records:
        by_backend.setdefault(rec.backend, []).append(Job(rec, registry))
    for name, jobs in by_backend.items():
        try:
            be = get_backend(name)
        except HpclaunchError:
            continue
        split = [j for j in jobs if j.record.array_size and len(j.chunks()) > 1]  # a sweep split in chunks
        plain = [j for j in jobs if j not in split]
        for job, st in zip(plain, be.statuses([j.ref() for j in plain]) if plain else []):
            out[job.record.key] = job.settle(st)
        for job in split:
            out[job.record.key] = job.status()
    return out


def _array_summary(counts: dict, total: int) -> JobStatus:
    """One state for a sweep from its tasks' states."""
    active = [s for s in counts if s not in FINAL_STATES]
    if sum(counts.values()) < total:  # finished tasks reach sacct a moment after squeue forgets them
        active.append(State.RUNNING)
    if active:
        state = State.PENDING if set(active) <= {State.PENDING} else State.RUNNING
    else:
        state = State.COMPLETED if set(counts) == {State.COMPLETED} else State.FAILED if counts else State.UNKNOWN
    return JobStatus(state, None, "", "", f"{sum(counts.values())}/{total} tasks seen", 1, "squeue+sacct", counts)


def attempts_of(run_dir: str) -> list[int]:
    found = []
    for path in glob.glob(os.path.join(run_dir, "logs", "attempt*")):
        m = re.search(r"attempt(\d+)$", path)
        if m:
            found.append(int(m.group(1)))
    return sorted(found)


def rank_logs(run_dir: str, attempt: Optional[int] = None) -> list[RankLog]:
    if attempt is None:
        attempts = attempts_of(run_dir)
        if not attempts:
            return _submitit_logs(run_dir)
        attempt = attempts[-1]
    folder = os.path.join(run_dir, "logs", f"attempt{attempt}")
    hosts = {rank: host for rank, host, _ in rank_map(folder)}
    out = []
    for path in glob.glob(os.path.join(folder, "rank*.log")):
        m = re.search(r"rank(\d+)\.log$", path)
        if not m:
            continue
        code = when = None
        try:
            with open(path[:-4] + ".exit") as f:
                a, b = f.read().split()[:2]
                code, when = int(a), float(b)
        except (OSError, ValueError):
            pass
        out.append(RankLog(int(m.group(1)), path, code, when, hosts.get(int(m.group(1)))))
    return sorted(out, key=lambda r: r.rank)


def rank_map(folder: str) -> list[tuple[int, str, int]]:
    """(rank, host, pid) per rank from an attempt's ranks.tsv, which every rank's wrapper appends to."""
    out = []
    try:
        with open(os.path.join(folder, "ranks.tsv")) as f:
            for line in f:
                cols = line.split()
                if len(cols) == 3 and cols[0].isdigit() and cols[2].isdigit():
                    out.append((int(cols[0]), cols[1], int(cols[2])))
    except OSError:
        pass
    return sorted(out)


def hosts_of(run_dir: str, attempt: Optional[int] = None) -> dict[str, list[int]]:
    """host -> its ranks, in the given (else the last) attempt; empty before any rank started."""
    if attempt is None:
        attempts = attempts_of(run_dir)
        if not attempts:
            return {}
        attempt = attempts[-1]
    out: dict[str, list[int]] = {}
    for rank, host, _ in rank_map(os.path.join(run_dir, "logs", f"attempt{attempt}")):
        out.setdefault(host, []).append(rank)
    return out


def _submitit_logs(run_dir: str) -> list[RankLog]:
    """A submitit job's folder: <jobid>_<task>_log.out per task (stderr beside it as _log.err)."""
    out = []
    for path in glob.glob(os.path.join(run_dir, "*_log.out")):
        m = re.search(r"_(\d+)_log\.out$", path)
        if m:
            out.append(RankLog(int(m.group(1)), path, None, None))
    return sorted(out, key=lambda r: r.rank)


def ordered_logs(logs: list[RankLog]) -> list[RankLog]:
    """The first rank to fail comes first (it usually holds the cause); the rest by rank."""
    failed = sorted((r for r in logs if r.exit_code not in (None, 0)), key=lambda r: (r.exit_time or 0, r.rank))
    if not failed:
        return logs
    first = failed[0]
    return [first] + [r for r in logs if r is not first]


def script_outcome(run_dir: str) -> dict:
    """The last line the batch script wrote to .hpclaunch/state, as a dict."""
    try:
        with open(os.path.join(run_dir, ".hpclaunch", "state")) as f:
            lines = [line for line in f.read().splitlines() if line.strip()]
    except OSError:
        return {}
    if not lines:
        return {}
    fields = {}
    for item in lines[-1].split()[1:]:
        k, _, v = item.partition("=")
        fields[k] = v
    return fields


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"(cannot read {path}: {e})\n"


TAIL_WINDOW = 64 * 1024
TAIL_WINDOW_MAX = 16 << 20


def tail_lines(path: str, n: int) -> list[str]:
    """The last ``n`` lines of a file (str.splitlines' lines), read from its end in a window that
    doubles until it holds more than ``n`` lines: a 200 MB log costs its last lines, not 200 MB.
    Lines too long for TAIL_WINDOW_MAX come back cut, the first one marked ``[...]``."""
    if n <= 0:
        return []
    with open(path, "rb") as f:
        end, size = f.seek(0, os.SEEK_END), TAIL_WINDOW
        while True:
            start = max(0, end - size)
            f.seek(start)
            lines = f.read(end - start).decode("utf-8", "replace").splitlines()
            # more than n: the first, which may begin mid-line, is not among the last n
            if start == 0 or len(lines) > n or size >= TAIL_WINDOW_MAX:
                out = lines[-n:]
                if start > 0 and len(lines) <= n and out:
                    out[0] = "[...]" + out[0]
                return out
            size *= 2


def tail_text(path: str, n: int) -> str:
    try:
        lines = tail_lines(path, n)
        return "\n".join(lines) + "\n" if lines else ""
    except OSError as e:
        return f"(cannot read {path}: {e})\n"


def copy_text(path: str, out) -> None:
    """A whole log to ``out`` in blocks (decoded as _read does), never all of it in memory; ends
    with a newline."""
    import codecs

    dec, last = codecs.getincrementaldecoder("utf-8")("replace"), "\n"
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                text = dec.decode(block)
                out.write(text)
                last = text[-1:] or last
        text = dec.decode(b"", final=True)
        out.write(text + ("" if (text[-1:] or last) == "\n" else "\n"))  # the next header on its own line
    except OSError as e:
        out.write(f"(cannot read {path}: {e})\n")


def find_job(ref: str, registry: Optional[Registry] = None) -> Job:
    reg = registry or Registry()
    if os.path.isdir(ref):
        target = os.path.abspath(ref)
        # by the index first (run directories are recorded absolute); a row recorded otherwise, by a scan
        for rec in reg.by_run_dir(target) or reg.list():
            if os.path.abspath(rec.run_dir) == target:
                return Job(rec, reg)
    found = reg.find(ref)
    if not found:
        raise HpclaunchError(f"job {ref!r}: not in the registry ({reg.path}) \u2014 give a job id or name from "
                             "`hpclaunch list --all`")
    rec = found[0]
    if rec.parent_key:
        rec = reg.get(rec.parent_key)
    return Job(rec, reg)


def is_final(state: str) -> bool:
    return state in FINAL_STATES
