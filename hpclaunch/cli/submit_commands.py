"""`submit`: queue a job and, with --wait, follow it to its end.

A module of its own so that a submission loads only what it uses: `submit --remote` (and the
commands that read remote jobs) load the ssh and packing machinery (remote_commands), which
cli/__init__ routes to.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time as _time

from hpclaunch.cli.output import counts, no_job_file, print_json
from hpclaunch.common import envknobs
from hpclaunch.launchers.backends.base import State, exit_code_for
from hpclaunch.runs.jobs import hosts_of
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.runs.submission import IsStudy, submit, test_only
from hpclaunch.runs.attempts import node_count
from hpclaunch.runs.progress import pending_text
from hpclaunch.runs.summary import alone_warning, attempts_summary, batch_log, failure_summary, last_lines
from hpclaunch.spec.program_warnings import program_warnings


def cmd_submit(args: argparse.Namespace) -> int:
    if args.job is None:
        raise no_job_file()
    if args.test_only:
        verdict = test_only(args.job, args.override, after=args.after)
        if args.json:
            print_json({"queued": False, "sbatch_test_only": verdict})
        else:
            print(f"preflight passed; nothing queued. sbatch --test-only: {verdict}")
        return 0
    heartbeat_s = _heartbeat_s() if args.wait else None  # a bad value refused before anything is queued
    try:
        job = submit(args.job, args.override, backend=args.backend, after=args.after,
                     preflight=not args.no_preflight)
    except IsStudy:  # a sweep with a metric: a study, as `hpclaunch tune` runs it (--wait follows it)
        if args.after:
            raise HpclaunchError("submit --after: a study's trials wait on nothing \u2014 submit it without --after") \
                from None
        from hpclaunch.cli.tune_commands import start
        return start(args.job, args.override, backend=args.backend, preflight=not args.no_preflight,
                     detach=not args.wait, as_json=args.json)
    rec = job.record
    logs = os.path.join(rec.run_dir, "logs")
    for line in program_warnings(json.loads(rec.resolved or "{}"), os.getcwd()):
        print(line, file=sys.stderr)
    if args.json:
        print_json({"job_id": rec.job_id, "name": rec.name, "backend": rec.backend, "cluster": rec.cluster,
                     "run_dir": rec.run_dir, "logs": logs})
    else:
        print(f"submitted {rec.backend} job {rec.job_id} ({rec.name}) on {rec.cluster}")
        print(f"  run directory: {rec.run_dir}")
        print(f"  logs:          tail -F {os.path.join(logs, 'slurm.out')}   or: hpclaunch logs {rec.job_id} -f")
    if not args.wait:
        return 0
    return _follow(job, heartbeat_s, quiet=args.json)



def _follow(job, heartbeat_s: float, quiet: bool = False) -> int:
    """Follow the job to its end; its exit code is the job's (README, "Exit codes"). A job that did
    not complete explains itself on stderr; Ctrl-C stops following, never the job."""
    start = _time.monotonic()
    seen = [None]

    def show(st) -> None:
        before, seen[0] = seen[0], st
        if quiet:
            return
        extra = f" tasks {counts(st.tasks)}" if st.tasks else ""
        where = _where(job, st)
        waiting = pending_text(st)
        said = f" ({waiting})" if waiting else ""
        if before is not None and st.attempts > before.attempts and not st.tasks:
            # a new attempt: say why the one before it ended (the scheduler's cause when it requeued it)
            ended = [a for a in job.history() if a["attempt"] == st.attempts - 2 and a.get("cause")]
            said += f"; attempt {st.attempts - 2} ended: {ended[0]['cause']}" if ended else ""
        print(f"  [{_time.monotonic() - start:6.0f} s] {st.state}{where} attempt {st.attempts - 1}{extra}{said}",
              file=sys.stderr, flush=True)

    said = [start]

    def heartbeat(st) -> None:
        # A long RUNNING stretch is not silent: every minute, the time and the newest log line; a long
        # wait in the queue, why and until when.
        now = _time.monotonic()
        if quiet or st.state not in (State.RUNNING, State.PENDING) or now - said[0] < heartbeat_s:
            return
        said[0] = now
        line = _newest_line(job) if st.state == State.RUNNING else pending_text(st)
        print(f"  [{now - start:6.0f} s] {st.state}, attempt {st.attempts - 1}" + (f": {line}" if line else ""),
              file=sys.stderr, flush=True)

    alerts = AlertLines(job.run_dir, job.record.resolved) if not quiet else None

    def poll(st) -> None:
        heartbeat(st)
        if alerts is not None:
            alerts.show(_time.monotonic() - start)

    def change(st) -> None:
        said[0] = _time.monotonic()
        show(st)
        if alerts is not None:
            alerts.show(_time.monotonic() - start)

    try:
        st = job.wait(poll=1.0, on_change=change, on_poll=poll)
        if alerts is not None:
            alerts.show(_time.monotonic() - start)  # the job's own, raised as it ended
    except KeyboardInterrupt:
        last = f" (last seen {seen[0].state})" if seen[0] is not None else ""
        print(f"\ninterrupted: stopped following; {job.record.backend} job {job.id} ({job.name}) goes on{last}.\n"
              f"  follow it:  hpclaunch status {job.id}    hpclaunch logs {job.id} -f\n"
              f"  stop it:    hpclaunch cancel {job.id}", file=sys.stderr, flush=True)
        return 130
    if st.state != State.COMPLETED:
        for line in failure_summary(job, st):
            print(line, file=sys.stderr)
    else:
        for line in ([] if quiet else attempts_summary(job, st)) + alone_warning(job, st):
            print(line, file=sys.stderr)
    return st.exit_code if st.exit_code is not None else exit_code_for(st.state)


class AlertLines:
    """`submit --wait`'s terminal sink: each new alert record of the run directory, one line on stderr
    (followed by offset: the files are append-only). Off with `alerts.terminal: false`."""

    def __init__(self, run_dir: str, resolved: str | None):
        import json
        try:
            conf = (json.loads(resolved or "{}").get("alerts") or {})
        except (ValueError, AttributeError):
            conf = {}
        self.on = bool(conf.get("enabled")) and conf.get("terminal", True)
        self.run_dir, self.offsets = run_dir, {}

    def show(self, elapsed: float) -> None:
        if not self.on:
            return
        from hpclaunch.monitors.alert_log import alert_files, read_jsonl
        for path in alert_files(self.run_dir):
            recs, self.offsets[path] = read_jsonl(path, self.offsets.get(path, 0))
            for r in recs:
                sev = "resolved" if r.get("event") == "resolved" else str(r.get("severity"))
                print(f"  [{elapsed:6.0f} s] ALERT {sev.upper()} {r.get('rule')}: {r.get('message')}"
                      + (f"  ({r['report']})" if r.get("report") and sev == "critical" else ""),
                      file=sys.stderr, flush=True)


def _heartbeat_s() -> float:
    """Seconds between the "still running" lines of `submit --wait` (HPCLAUNCH_HEARTBEAT_S)."""
    return envknobs.number("HPCLAUNCH_HEARTBEAT_S", 60.0, 1, 86400)


def _newest_line(job) -> str:
    """The newest non-empty line of rank 0's log of the newest attempt, else of the batch log, cut to fit."""
    logs = os.path.join(job.run_dir, "logs")
    attempts = sorted((d for d in os.listdir(logs) if d.startswith("attempt") and d[7:].isdigit()),
                      key=lambda d: int(d[7:])) if os.path.isdir(logs) else []
    for path in ([os.path.join(logs, attempts[-1], "rank0.log")] if attempts else []) + [batch_log(job)]:
        lines = [x for x in last_lines(path, 5) if x.strip()]
        if lines:
            # the program's text, not its terminal escapes
            text = " ".join("".join(c if c.isprintable() else " " for c in lines[-1]).split())
            return text if len(text) <= 100 else text[:99] + "…"
    return ""


def _where(job, st) -> str:
    """" on c1,c2": the hosts the ranks of this attempt run on (ranks.tsv), else the scheduler's node
    list; the node list too when the ranks ran on fewer nodes than the attempt had (Ray: one driver
    process, every node of the allocation working)."""
    if st.state in (State.PENDING, State.REQUEUED) or job.record.array_size:
        return f" on {st.nodes}" if st.nodes and st.state != State.PENDING else ""
    hosts = hosts_of(job.run_dir)
    if hosts and st.nodes and len(hosts) < node_count(job.run_dir):
        return f" on {st.nodes}"
    if hosts:
        return " on " + ",".join(sorted(hosts, key=lambda h: min(hosts[h])))
    return f" on {st.nodes}" if st.nodes else ""
