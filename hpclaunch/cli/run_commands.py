"""`status`, `list`, `logs`, `cancel`: the commands that follow jobs (`submit` is submit_commands)."""
from __future__ import annotations

import argparse
import os
import sys
import time as _time

from hpclaunch.cli.output import counts, parse_age, print_json
from hpclaunch.cli.parser import LIST_PAGE
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.launchers.backends.base import state_of
from hpclaunch.launchers.backends.choice import relayed
from hpclaunch.runs import attempts as run_attempts
from hpclaunch.runs.jobs import Job, copy_text, find_job, hosts_of, ordered_logs, refresh, tail_text
from hpclaunch.runs.progress import pending_text
from hpclaunch.runs.registry import Registry
from hpclaunch.runs.summary import batch_log


def _remote():
    """remote_commands (ssh, packing, the profile's remote section), loaded for a job recorded from
    another machine only: `status` and `list` of this machine's jobs start without it."""
    from hpclaunch.cli import remote_commands
    return remote_commands


def _is_remote(rec) -> bool:
    return relayed(rec.backend)


def _location(rec) -> str:
    """Where a job's run directory is, for listings: `NAME:path` for a remote job."""
    return f"{rec.cluster}:{rec.run_dir}" if _is_remote(rec) else rec.run_dir


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
        records = reg.recent(_time.time() - 3600)   # by index: the registry's whole history is not read
    remote = [r for r in records if _is_remote(r)]
    far = _remote().status_rows(remote, reg, tolerant=not args.job) if remote else {}
    rows = []
    for rec in records:
        if rec.key in far:
            rows.append(far[rec.key])
            continue
        job = Job(rec, reg)
        st = job.status()
        hosts = {} if job.record.array_size else hosts_of(job.run_dir)
        past = job.history()
        total = run_attempts.elapsed_s(past, st)
        rows.append({"job_id": job.id, "name": job.name, "backend": job.record.backend, "state": st.state,
                     "exit_code": st.exit_code, "elapsed": st.elapsed,
                     "elapsed_s": round(total, 1) if total is not None else None, "nodes": st.nodes,
                     "reason": st.reason, "waiting": pending_text(st), "expected_start": st.expected_start,
                     "attempt": max(st.attempts - 1, 0), "attempts": st.attempts, "attempt_history": past,
                     "tasks": st.tasks, "source": st.source, "run_dir": job.run_dir, "hosts": hosts})
    if args.json:
        print_json(rows if not args.job else rows[0])
        return 0
    if not rows:
        print("no active jobs and none ended in the last hour (hpclaunch list --all shows older ones)")
    for r in rows:
        for line in _status_lines(r):
            print(line)
    return 0


def _status_lines(r: dict) -> list:
    """A job's line, and one line per attempt when it has had more than one. Its elapsed time is the
    whole job's (first start to end, or now), the current attempt's beside it."""
    extra = f" tasks: {counts(r['tasks'])}" if r.get("tasks") else ""
    code = f" exit {r['exit_code']}" if r.get("exit_code") is not None else ""
    if r.get("waiting") or r.get("state") == "PENDING":
        reason = f" ({r['waiting']})" if r.get("waiting") else ""
    else:
        reason = f" ({r['reason']})" if r.get("reason") and r["reason"] != "None" else ""
    ranks = f" ranks on {_hosts_text(r['hosts'])}" if r.get("hosts") else ""
    where = f" on remote {r['remote']}" if r.get("remote") else ""
    past = r.get("attempt_history") or []
    if r.get("elapsed_s") is not None:
        elapsed = run_attempts.duration_text(r["elapsed_s"])
    else:   # not started (Slurm's "0:00" would say it ran no time), or a remote row of an older hpclaunch
        elapsed = "-" if r.get("state") == "PENDING" else (r.get("elapsed") or "-")
    if len(past) > 1:
        last = past[-1]
        now = last["elapsed_s"] if last.get("elapsed_s") is not None else (
            _time.time() - last["start_unix"] if last.get("start_unix") else None)
        elapsed += f" ({len(past)} attempts; this one {run_attempts.duration_text(now)})"
    lines = [f"{r['job_id']:>8} {r['name'][:30]:<30} {r['state']:<11}{code} attempt {r.get('attempt', 0)} "
             f"elapsed {elapsed} nodes {r.get('nodes') or '-'}{reason}{extra}{ranks}{where}"]
    if len(past) > 1:
        lines += [f"{'':>8}   {run_attempts.attempt_line(a)}" for a in past]
    return lines




def cmd_list(args: argparse.Namespace) -> int:
    """A page of the registry's jobs, newest first (--limit, --offset): never the whole history at once."""
    if args.limit < 0 or args.offset < 0:
        raise HpclaunchError(f"list --limit {args.limit} --offset {args.offset}: give whole numbers, 0 or more "
                             "(--limit 0: every job)")
    reg = Registry()
    since = _time.time() - parse_age(args.since) if args.since else None
    query = dict(since=since, active_only=not (args.all or args.since))
    recs = reg.list(**query, limit=args.limit, offset=args.offset)
    active = [r for r in recs if not state_of(r.state).final]
    if active:  # the registry holds the last state anyone saw: ask the backends, once each
        refresh([r for r in active if not _is_remote(r)], reg)
        remote = [r for r in active if _is_remote(r)]
        if remote:
            _remote().refresh(remote, reg)
        recs = reg.list(**query, limit=args.limit, offset=args.offset)
    left = reg.count(**query) - args.offset - len(recs) if args.limit and len(recs) == args.limit else 0
    more = (f"... {left} more: hpclaunch list {' '.join(_list_args(args) + ['--offset', str(args.offset + len(recs))])}"
            " (--limit 0: all)") if left > 0 else ""
    if args.json:
        print_json([r.public() for r in recs])
        if more:
            print(more, file=sys.stderr)
        return 0
    for r in recs:
        when = _time.strftime("%Y-%m-%d %H:%M", _time.localtime(r.submit_time))
        print(f"{r.job_id:>8} {r.backend:<6} {r.name[:30]:<30} {r.state:<11} {when} {r.user} {_location(r)}")
    if more:
        print(more)
    if not recs:
        print("no jobs" + ("" if args.all or args.since else " active (add --all for finished ones)"))
    return 0


def _list_args(args: argparse.Namespace) -> list:
    """The options of this listing, for the line that says how to see the next page."""
    return ((["--all"] if args.all else []) + (["--since", args.since] if args.since else [])
            + (["--limit", str(args.limit)] if args.limit != LIST_PAGE else []) + (["--json"] if args.json else []))



def cmd_logs(args: argparse.Namespace) -> int:
    if args.tail is not None and args.tail < 0:
        raise HpclaunchError(f"--tail {args.tail}: give a number of lines (0 or more; 0 = the whole log)")
    job = find_job(args.job)
    if _is_remote(job.record):
        return _remote().cmd_logs(args, job.record)
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
    if _is_remote(job.record):
        return _remote().cmd_cancel(args, job.record)
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
