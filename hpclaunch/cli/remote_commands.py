"""The commands for jobs submitted with `submit --remote`: the same commands, answered by the remote
hpclaunch over one ssh connection per command (hpclaunch/runs/remote.py, docs/remote.md)."""
from __future__ import annotations

import argparse
import sys
import time as _time
from typing import Dict, List

from hpclaunch.cli.output import emit_report, no_job_file, print_json
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.launchers.backends.base import State, exit_code_for, state_of
from hpclaunch.launchers.backends.choice import relayed
from hpclaunch.runs import remote
from hpclaunch.runs.registry import JobRecord, Registry
from hpclaunch.runs.remote_ssh import write_through

POLL_S = 2.0


def is_remote(record: JobRecord) -> bool:
    return relayed(record.backend)


def cmd_submit(args: argparse.Namespace) -> int:
    """`submit --remote [NAME]`: ship the project, submit there, record the job here."""
    if args.job is None:
        if args.remote and args.remote.endswith((".yaml", ".yml")):  # `submit --remote job.yaml`: NAME is optional
            args.job, args.remote = args.remote, ""
        else:
            raise no_job_file()
    target = remote.target_for_submit(args.job, args.remote or None, args.override)
    sessions = remote.Sessions()
    rec, answer = remote.submit_remote(
        args.job, args.override, target, backend=args.backend, after=args.after, preflight=not args.no_preflight,
        test_only=args.test_only, say=lambda line: print(line, file=sys.stderr, flush=True), sessions=sessions)
    if args.test_only:
        if args.json:
            print_json(answer)
        else:
            print(f"preflight passed on {target.name}; nothing queued. sbatch --test-only: "
                  f"{answer.get('sbatch_test_only', '')}")
        return 0
    if args.json:
        print_json({"job_id": rec.job_id, "name": rec.name, "backend": rec.backend, "cluster": rec.cluster,
                    "run_dir": rec.run_dir, "logs": answer.get("logs"), "remote": target.name,
                    "remote_backend": answer.get("backend"), "remote_cluster": answer.get("cluster")})
    else:
        print(f"submitted remote job {rec.job_id} ({rec.name}) on {target.name}: {answer.get('backend')} job "
              f"{answer.get('job_id')} on {answer.get('cluster')}")
        print(f"  run directory: {target.remote.host}:{rec.run_dir}")
        print(f"  follow it:     hpclaunch status {rec.job_id}    hpclaunch logs {rec.job_id} -f")
    if not args.wait:
        return 0
    return _follow(rec, sessions, quiet=args.json)


def _follow(rec: JobRecord, sessions: remote.Sessions, quiet: bool) -> int:
    """Poll the remote job until it ends (over the command's one connection); its exit code."""
    reg, start, last = Registry(), _time.monotonic(), None
    try:
        while True:
            row = remote.statuses([rec], reg, sessions)[rec.key]
            seen = (row.get("state"), row.get("attempts"))
            if seen != last and not quiet:
                where = f" on {row['nodes']}" if row.get("nodes") else ""
                print(f"  [{_time.monotonic() - start:6.0f} s] {row.get('state')}{where} attempt "
                      f"{row.get('attempt', 0)}", file=sys.stderr, flush=True)
            last = seen
            state = state_of(row.get("state"))
            if state.final:
                break
            _time.sleep(POLL_S)
    except KeyboardInterrupt:
        print(f"\ninterrupted: stopped following; remote job {rec.job_id} goes on.\n"
              f"  follow it:  hpclaunch status {rec.job_id}    hpclaunch logs {rec.job_id} -f", file=sys.stderr)
        return 130
    if state != State.COMPLETED:
        print(f"remote job {rec.job_id} ({rec.name}) ended {state.value}; its logs: hpclaunch logs {rec.job_id}",
              file=sys.stderr)
    code = row.get("exit_code")
    return int(code) if code is not None else exit_code_for(state)


def status_rows(records: List[JobRecord], reg: Registry, tolerant: bool = False) -> Dict[int, dict]:
    """The remote jobs' `status --json` rows, by registry key, one connection per remote. With
    `tolerant` (a listing of many jobs), a remote that cannot be asked leaves its rows as the registry
    last saw them, and says so on stderr; otherwise its error is the command's."""
    sessions, out = remote.Sessions(), {}
    groups: Dict[str, List[JobRecord]] = {}
    for rec in records:
        groups.setdefault(rec.cluster, []).append(rec)
    for name, recs in groups.items():
        try:
            out.update(remote.statuses(recs, reg, sessions))
        except HpclaunchError as e:
            if not tolerant:
                raise
            print(f"warning: remote {name}: states not refreshed: {str(e).splitlines()[0]}", file=sys.stderr)
            for rec in recs:
                out[rec.key] = {"job_id": rec.job_id, "name": rec.name, "backend": rec.backend, "state": rec.state,
                                "exit_code": rec.exit_code, "attempt": max(rec.attempts - 1, 0),
                                "attempts": rec.attempts, "source": "registry", "run_dir": rec.run_dir,
                                "remote": name, "reason": "not refreshed"}
    return out


def refresh(records: List[JobRecord], reg: Registry) -> None:
    """`list`: the remote jobs' states recorded in the registry (see status_rows, tolerant)."""
    status_rows(records, reg, tolerant=True)


def cmd_logs(args: argparse.Namespace, rec: JobRecord) -> int:
    flags = []
    for flag, value in (("--rank", args.rank), ("--task", args.task), ("--attempt", args.attempt),
                        ("--tail", args.tail)):
        if value is not None:
            flags += [flag, str(value)]
    flags += ["--follow"] if args.follow else []
    flags += ["--json"] if args.json else []
    code, _, _ = remote.run_on(rec, "logs", flags, remote.Sessions(), out=write_through(sys.stdout),
                               err=write_through(sys.stderr))
    return code


def cmd_cancel(args: argparse.Namespace, rec: JobRecord) -> int:
    code, _, _ = remote.run_on(rec, "cancel", ["--json"] if args.json else [], remote.Sessions(),
                               out=write_through(sys.stdout), err=write_through(sys.stderr))
    if code == 0:
        Registry().event(rec.key, "cancel_requested", {"remote": rec.cluster})
    return code


def cmd_report(args: argparse.Namespace, rec: JobRecord, fmt: str) -> int:
    sessions = remote.Sessions()
    code, out, err = remote.run_on(rec, "report", ["--format", fmt] + (["--full"] if args.full else []), sessions)
    if code != 0:
        raise remote.relay_failure(sessions.get(remote.target_of(rec)), code, err)
    emit_report(out, args.output)
    return 0


