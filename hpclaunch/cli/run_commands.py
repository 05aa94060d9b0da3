"""`submit`, `status`, `list`, `logs`, `cancel`: the commands that queue and follow jobs."""
from __future__ import annotations

import argparse
import os
import sys
import time as _time

from hpclaunch.cli import remote_commands as remote
from hpclaunch.cli.output import counts, parse_age, print_json
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.launchers.backends.base import State, exit_code_for, state_of
from hpclaunch.runs.jobs import Job, copy_text, find_job, hosts_of, ordered_logs, refresh, tail_text
from hpclaunch.runs.registry import Registry
from hpclaunch.runs.submission import submit, test_only
from hpclaunch.runs.summary import batch_log, failure_summary, last_lines


def cmd_submit(args: argparse.Namespace) -> int:
    if args.job is None:
        if args.remote and args.remote.endswith((".yaml", ".yml")):  # `submit --remote job.yaml`: NAME is optional
            args.job, args.remote = args.remote, ""
        else:
            raise HpclaunchError("submit: which job file? \u2014 e.g. hpclaunch submit job.yaml "
                                 "(from your own machine: hpclaunch submit job.yaml --remote [NAME])")
    if args.remote is not None:
        return remote.cmd_submit(args)
    if args.test_only:
        verdict = test_only(args.job, args.override, after=args.after)
        if args.json:
            print_json({"queued": False, "sbatch_test_only": verdict})
        else:
            print(f"preflight passed; nothing queued. sbatch --test-only: {verdict}")
        return 0
    job = submit(args.job, args.override, backend=args.backend, after=args.after,
                 preflight=not args.no_preflight)
    rec = job.record
    logs = os.path.join(rec.run_dir, "logs")
    if args.json:
        print_json({"job_id": rec.job_id, "name": rec.name, "backend": rec.backend, "cluster": rec.cluster,
                     "run_dir": rec.run_dir, "logs": logs})
    else:
        print(f"submitted {rec.backend} job {rec.job_id} ({rec.name}) on {rec.cluster}")
        print(f"  run directory: {rec.run_dir}")
        print(f"  logs:          tail -F {os.path.join(logs, 'slurm.out')}   or: hpclaunch logs {rec.job_id} -f")
    if not args.wait:
        return 0
    return _follow(job, quiet=args.json)



def _follow(job, quiet: bool = False) -> int:
    """Follow the job to its end; its exit code is the job's (README, "Exit codes"). A job that did
    not complete explains itself on stderr; Ctrl-C stops following, never the job."""
    start = _time.monotonic()
    seen = [None]

    def show(st) -> None:
        seen[0] = st
        if quiet:
            return
        extra = f" tasks {counts(st.tasks)}" if st.tasks else ""
        where = _where(job, st)
        print(f"  [{_time.monotonic() - start:6.0f} s] {st.state}{where} attempt {st.attempts - 1}{extra}",
              file=sys.stderr, flush=True)

    said = [start]

    def heartbeat(st) -> None:
        # A long RUNNING stretch is not silent: every minute, the time and the newest log line.
        now = _time.monotonic()
        if quiet or st.state != State.RUNNING or now - said[0] < HEARTBEAT_S:
            return
        said[0] = now
        line = _newest_line(job)
        print(f"  [{now - start:6.0f} s] {st.state}, attempt {st.attempts - 1}" + (f": {line}" if line else ""),
              file=sys.stderr, flush=True)

    try:
        st = job.wait(poll=1.0, on_change=lambda st: (said.__setitem__(0, _time.monotonic()), show(st)),
                      on_poll=heartbeat)
    except KeyboardInterrupt:
        last = f" (last seen {seen[0].state})" if seen[0] is not None else ""
        print(f"\ninterrupted: stopped following; {job.record.backend} job {job.id} ({job.name}) goes on{last}.\n"
              f"  follow it:  hpclaunch status {job.id}    hpclaunch logs {job.id} -f\n"
              f"  stop it:    hpclaunch cancel {job.id}", file=sys.stderr, flush=True)
        return 130
    if st.state != State.COMPLETED:
        for line in failure_summary(job, st):
            print(line, file=sys.stderr)
    return st.exit_code if st.exit_code is not None else exit_code_for(st.state)


def _heartbeat_s() -> float:
    try:
        return max(1.0, float(os.environ.get("HPCLAUNCH_HEARTBEAT_S", "60")))
    except ValueError:
        return 60.0


HEARTBEAT_S = _heartbeat_s()


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
    """" on c1,c2": the hosts the ranks of this attempt run on (ranks.tsv), else the scheduler's node list."""
    if st.state in (State.PENDING, State.REQUEUED) or job.record.array_size:
        return f" on {st.nodes}" if st.nodes and st.state != State.PENDING else ""
    hosts = hosts_of(job.run_dir)
    if hosts:
        return " on " + ",".join(sorted(hosts, key=lambda h: min(hosts[h])))
    return f" on {st.nodes}" if st.nodes else ""


def _hosts_text(hosts: dict) -> str:
    """"c1 (ranks 0,1), c2 (ranks 2,3)"."""
    return ", ".join(f"{h} (rank{'s' if len(r) > 1 else ''} {','.join(map(str, r))})"
                     for h, r in sorted(hosts.items(), key=lambda kv: min(kv[1])))



def cmd_status(args: argparse.Namespace) -> int:
    """One job, or (no JOB) the active jobs and those that ended in the last hour: a job that just ended
    is what one asks about. Attempts are numbered from 0, as on disk (logs/attempt0) and in `logs --attempt`:
    `attempt` is the latest one's number, `attempts` how many have run."""
    reg = Registry()
    if args.job:
        records = [find_job(args.job, reg).record]
    else:
        from hpclaunch.runs.registry import FINAL_STATES
        recent = _time.time() - 3600
        records = [r for r in reg.list() if r.state not in FINAL_STATES or (r.end_time or r.submit_time) >= recent]
    far = remote.status_rows([r for r in records if remote.is_remote(r)], reg, tolerant=not args.job)
    rows = []
    for rec in records:
        if rec.key in far:
            rows.append(far[rec.key])
            continue
        job = Job(rec, reg)
        st = job.status()
        hosts = {} if job.record.array_size else hosts_of(job.run_dir)
        rows.append({"job_id": job.id, "name": job.name, "backend": job.record.backend, "state": st.state,
                     "exit_code": st.exit_code, "elapsed": st.elapsed, "nodes": st.nodes, "reason": st.reason,
                     "attempt": max(st.attempts - 1, 0), "attempts": st.attempts, "tasks": st.tasks,
                     "source": st.source, "run_dir": job.run_dir, "hosts": hosts})
    if args.json:
        print_json(rows if not args.job else rows[0])
        return 0
    if not rows:
        print("no active jobs and none ended in the last hour (hpclaunch list --all shows older ones)")
    for r in rows:
        extra = f" tasks: {counts(r['tasks'])}" if r.get("tasks") else ""
        code = f" exit {r['exit_code']}" if r.get("exit_code") is not None else ""
        reason = f" ({r['reason']})" if r.get("reason") and r["reason"] != "None" else ""
        ranks = f" ranks on {_hosts_text(r['hosts'])}" if r.get("hosts") else ""
        where = f" on remote {r['remote']}" if r.get("remote") else ""
        print(f"{r['job_id']:>8} {r['name'][:30]:<30} {r['state']:<11}{code} attempt {r.get('attempt', 0)} "
              f"elapsed {r.get('elapsed') or '-'} nodes {r.get('nodes') or '-'}{reason}{extra}{ranks}{where}")
    return 0



def cmd_list(args: argparse.Namespace) -> int:
    reg = Registry()
    since = _time.time() - parse_age(args.since) if args.since else None
    recs = reg.list(since=since, active_only=not (args.all or args.since))
    active = [r for r in recs if not state_of(r.state).final]
    if active:  # the registry holds the last state anyone saw: ask the backends, once each
        refresh([r for r in active if not remote.is_remote(r)], reg)
        remote.refresh([r for r in active if remote.is_remote(r)], reg)
        recs = reg.list(since=since, active_only=not (args.all or args.since))
    if args.json:
        print_json([r.public() for r in recs])
        return 0
    for r in recs:
        when = _time.strftime("%Y-%m-%d %H:%M", _time.localtime(r.submit_time))
        print(f"{r.job_id:>8} {r.backend:<6} {r.name[:30]:<30} {r.state:<11} {when} {r.user} {remote.location(r)}")
    if not recs:
        print("no jobs" + ("" if args.all or args.since else " active (add --all for finished ones)"))
    return 0



def cmd_logs(args: argparse.Namespace) -> int:
    if args.tail is not None and args.tail < 0:
        raise HpclaunchError(f"--tail {args.tail}: give a number of lines (0 or more; 0 = the whole log)")
    job = find_job(args.job)
    if remote.is_remote(job.record):
        return remote.cmd_logs(args, job.record)
    task = args.task
    tasks = job.tasks() if task is None else []
    if tasks:  # a sweep: one task's logs, the first failure's by default
        failed = job.failed_tasks()
        with_logs = [t for t in tasks if job.rank_logs(task=t)]
        task = failed[0] if failed else (with_logs[-1] if with_logs else tasks[0])
        if not args.json:
            print(f"sweep of {len(tasks)} task(s): {len(failed)} failed"
                  f"{' (' + ', '.join(map(str, failed[:10])) + (', ...' if len(failed) > 10 else '') + ')' if failed else ''}"
                  f"; showing task {task} \u2014 another with --task N", file=sys.stderr)
    elif task is not None and not os.path.isdir(os.path.join(job.run_dir, f"task{task}")):
        raise HpclaunchError(f"--task {task}: job {job.id} has no task {task} in {job.run_dir} \u2014 "
                             "give a task index of its sweep")
    logs = ordered_logs(job.rank_logs(args.attempt, task))
    if args.rank is not None:
        logs = [lg for lg in logs if lg.rank == args.rank]
    if args.json:
        print_json([{"task": task, "rank": lg.rank, "host": lg.host, "path": lg.path, "exit_code": lg.exit_code,
                      "exit_time": lg.exit_time,
                      "text": job.logs(rank=lg.rank, attempt=args.attempt, tail=args.tail, task=task)}
                     for lg in logs])
        return 0
    if not args.follow:
        where = job.run_dir if task is None else os.path.join(job.run_dir, f"task{task}")
        if not logs:  # nothing ran (or nothing yet): the batch script's own log says why
            path = batch_log(job, task)
            print(f"no rank logs in {where}/logs; the batch log instead:")
            print(f"==> batch log: {path} <==")
            if os.path.exists(path):
                if args.tail:
                    sys.stdout.write(tail_text(path, args.tail))
                else:
                    copy_text(path, sys.stdout)
            else:
                print("(not written yet: the job has not started)")
        for lg in logs:
            status = "" if lg.exit_code is None else f" (exit {lg.exit_code})"
            host = f" on {lg.host}" if lg.host else ""
            print(f"==> {'' if task is None else f'task {task} '}rank {lg.rank}{status}{host}: {lg.path} <==")
            if args.tail:   # from the end of the file; the whole of it, in blocks: never all in memory
                sys.stdout.write(tail_text(lg.path, args.tail))
            else:
                copy_text(lg.path, sys.stdout)
        return 0
    return _follow_logs(job, args.rank, task)



def _follow_logs(job, rank, task=None) -> int:
    offsets: dict[str, int] = {}
    while True:
        for lg in job.rank_logs(task=task):
            if rank is not None and lg.rank != rank:
                continue
            with open(lg.path, "rb") as f:
                f.seek(offsets.get(lg.path, 0))
                data = f.read()
                offsets[lg.path] = f.tell()
            for line in data.decode("utf-8", "replace").splitlines(keepends=True):
                sys.stdout.write(f"[rank {lg.rank}] {line}")
        sys.stdout.flush()
        if job.status().final:
            return 0
        _time.sleep(1.0)



def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel a job; one that already ended is left as it is, and that is not an error (exit 0)."""
    job = find_job(args.job)
    if remote.is_remote(job.record):
        return remote.cmd_cancel(args, job.record)
    st = job.status()
    if st.final:
        if args.json:
            print_json({"job_id": job.id, "name": job.name, "cancel_requested": False, "state": st.state,
                        "exit_code": st.exit_code})
        else:
            print(f"{job.record.backend} job {job.id} ({job.name}) already ended ({st.state}); nothing to cancel")
        return 0
    job.cancel()
    if args.json:
        print_json({"job_id": job.id, "name": job.name, "cancel_requested": True})
    else:
        print(f"cancel requested for {job.record.backend} job {job.id} ({job.name}, {st.state})")
    return 0
