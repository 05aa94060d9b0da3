"""The `hpclaunch` command. Imports stay inside the commands: `--help` and `render` load nothing heavy."""
from __future__ import annotations

import argparse
import os
import sys


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hpclaunch",
        description="Run distributed training on Slurm (or locally) and account for its energy and heat.",
    )
    from hpclaunch import __version__
    p.add_argument("--version", action="version", version=f"hpclaunch {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")

    def job_command(name: str, help: str) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help, description=help)
        c.add_argument("job", metavar="JOB.yaml", help="the job file")
        c.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                       help="override a job key, e.g. -o resources.nodes=4 (repeatable)")
        return c

    job_command("validate", "check a job file against the schema and its profile's limits")
    job_command("render", "print the sbatch script the job would submit, and nothing else")

    c = sub.add_parser("profiles", help="list cluster profiles, or show one",
                       description="List cluster profiles (yours first: ./hpc_profiles, ~/.config/hpclaunch/profiles, then shipped), or show one resolved.")
    c.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    c.add_argument("name", nargs="?", help="profile to show")

    c = sub.add_parser("init", help="write a commented starter job file for a profile")
    c.add_argument("file", nargs="?", default="job.yaml", help="where to write it (default: job.yaml)")
    c.add_argument("--profile", default="local", help="cluster profile (default: local)")
    c.add_argument("--name", default=None, help="job name (default: from the file name)")
    c.add_argument("--force", action="store_true", help="replace an existing file")

    c = job_command("submit", "validate, render and queue a job (Slurm, or this machine with --backend local)")
    c.add_argument("--backend", choices=["slurm", "local"], default=None,
                   help="where to run (default: slurm if a cluster is configured here, else local)")
    c.add_argument("--after", action="append", default=[], metavar="JOB[:KIND]",
                   help="start after JOB (id or name); KIND afterok (default), afterany or afternotok")
    c.add_argument("--wait", action="store_true", help="follow the job until it ends; exit with its exit code")
    c.add_argument("--no-preflight", action="store_true", help="skip the checks against the live cluster")
    c.add_argument("--test-only", action="store_true",
                   help="preflight and `sbatch --test-only` (when and where it would start); queue nothing")
    c.add_argument("--json", action="store_true", help="print the submission as JSON")

    c = sub.add_parser("status", help="state of a job (or of your active jobs)")
    c.add_argument("job", nargs="?", metavar="JOB", help="job id, name or run directory")
    c.add_argument("--json", action="store_true")

    c = sub.add_parser("list", help="jobs in the registry")
    c.add_argument("--all", action="store_true", help="finished jobs too")
    c.add_argument("--since", metavar="AGE", help="submitted within AGE, e.g. 2h, 7d")
    c.add_argument("--json", action="store_true")

    c = sub.add_parser("logs", help="per-rank logs of a job (the first failing rank first)")
    c.add_argument("job", metavar="JOB")
    c.add_argument("--rank", type=int, default=None, help="only this rank")
    c.add_argument("--task", type=int, default=None,
                   help="a sweep's task (default: the first that failed, else the last with logs)")
    c.add_argument("--attempt", type=int, default=None, help="this attempt (default: the latest)")
    c.add_argument("--tail", type=int, default=None, metavar="N", help="last N lines of each log")
    c.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until the job ends")
    c.add_argument("--json", action="store_true")

    c = sub.add_parser("cancel", help="cancel a job")
    c.add_argument("job", metavar="JOB")
    c.add_argument("--json", action="store_true")

    c = sub.add_parser("report", help="energy, power and thermal report of a job, or of the fleet with --since",
                       description="Energy, power and thermal report of a job (id, name or run directory): "
                                   "text, versioned JSON or one self-contained HTML page. With --since, a fleet view "
                                   "across the registry's jobs.")
    c.add_argument("job", nargs="?", metavar="JOB|RUN_DIR")
    c.add_argument("--format", "-f", choices=["text", "json", "html"], default=None,
                   help="default: text, or from the -o suffix (.json, .html)")
    c.add_argument("-o", "--output", metavar="FILE", help="write to FILE (atomically) instead of stdout")
    c.add_argument("--since", metavar="AGE", help="fleet view over jobs submitted within AGE, e.g. 7d")

    c = sub.add_parser("schema", help="print the JSON Schema of job files (or profiles), for editors")
    c.add_argument("--profile", action="store_true", help="the schema of profile files instead")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.cmd:
        _parser().print_help()
        return 2
    from hpclaunch.common.errors import HpclaunchError
    try:
        return _COMMANDS[args.cmd](args)
    except HpclaunchError as e:
        print(str(e), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from hpclaunch.spec.loading import resolve_job
    from hpclaunch.spec.yamlio import display_path
    r = resolve_job(args.job, args.override)
    j = r.job.resources
    print(f"{display_path(args.job)}: valid \u2014 job '{r.job.name}', profile '{r.profile.profile.name}', "
          f"{r.job.launcher}, {j.nodes} node(s) x {j.tasks_per_node} rank(s), time {j.time}")
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from hpclaunch.launchers.render import render_job
    from hpclaunch.spec.loading import resolve_job
    sys.stdout.write(render_job(resolve_job(args.job, args.override)))
    return 0


def cmd_profiles(args: argparse.Namespace) -> int:
    from hpclaunch.spec.profiles import available_profiles, find_profile, load_profile
    from hpclaunch.spec.yamlio import display_path, dump_yaml
    if args.action == "show" or args.name:
        if not args.name:
            from hpclaunch.common.errors import HpclaunchError
            raise HpclaunchError("profiles show: which profile? \u2014 e.g. hpclaunch profiles show local")
        lp = load_profile(args.name)
        print(f"# {display_path(lp.path)}" + (f" (extends {' <- '.join(display_path(c) for c in lp.chain[:-1])})"
                                               if len(lp.chain) > 1 else ""))
        sys.stdout.write(dump_yaml(lp.data))
        return 0
    for name in available_profiles():
        path = find_profile(name)
        try:
            lp = load_profile(name)
            desc = lp.profile.description
        except Exception as e:  # a broken user profile must not hide the others
            desc = f"(invalid: {str(e).splitlines()[0]})"
        print(f"{name:<14} {desc}  [{display_path(path)}]")
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    import os
    from hpclaunch.common.errors import HpclaunchError
    from hpclaunch.spec.starter import starter_job
    if os.path.exists(args.file) and not args.force:
        raise HpclaunchError(f"{args.file}: already exists \u2014 pick another name or add --force")
    name = args.name or os.path.splitext(os.path.basename(args.file))[0] or "job"
    _write_user_file(args.file, starter_job(args.profile, name, where=("command line", "--profile")), "job file")
    print(f"wrote {args.file} for profile '{args.profile}'; check it with: hpclaunch validate {args.file}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    import json
    from hpclaunch.spec.typedload import json_schema
    if args.profile:
        from hpclaunch.spec.profile import Profile
        schema = json_schema(Profile, "hpclaunch cluster profile")
    else:
        from hpclaunch.spec.job import Job
        schema = json_schema(Job, "hpclaunch job file")
    print(json.dumps(schema, indent=2, default=str))
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    from hpclaunch.runs.submission import submit, test_only
    if args.test_only:
        verdict = test_only(args.job, args.override, after=args.after)
        if args.json:
            _print_json({"queued": False, "sbatch_test_only": verdict})
        else:
            print(f"preflight passed; nothing queued. sbatch --test-only: {verdict}")
        return 0
    job = submit(args.job, args.override, backend=args.backend, after=args.after,
                 preflight=not args.no_preflight)
    rec = job.record
    logs = os.path.join(rec.run_dir, "logs")
    if args.json:
        _print_json({"job_id": rec.job_id, "name": rec.name, "backend": rec.backend, "cluster": rec.cluster,
                     "run_dir": rec.run_dir, "logs": logs})
    else:
        print(f"submitted {rec.backend} job {rec.job_id} ({rec.name}) on {rec.cluster}")
        print(f"  run directory: {rec.run_dir}")
        print(f"  logs:          tail -F {os.path.join(logs, 'slurm.out')}   or: hpclaunch logs {rec.job_id} -f")
    if not args.wait:
        return 0
    return _follow(job, quiet=args.json)


def _follow(job, quiet: bool = False) -> int:
    import time as _time
    start = _time.monotonic()

    def show(st) -> None:
        if quiet:
            return
        extra = f" tasks {_counts(st.tasks)}" if st.tasks else ""
        nodes = f" on {st.nodes}" if st.nodes else ""
        print(f"  [{_time.monotonic() - start:6.0f} s] {st.state}{nodes} attempt {st.attempts}{extra}",
              file=sys.stderr, flush=True)

    st = job.wait(poll=1.0, on_change=show)
    if st.exit_code is None:
        return 0 if st.state == "COMPLETED" else 1
    return st.exit_code if st.state != "COMPLETED" else 0


def _counts(tasks: dict) -> str:
    return ", ".join(f"{n} {s.lower()}" for s, n in sorted(tasks.items()))


def cmd_status(args: argparse.Namespace) -> int:
    from hpclaunch.runs.jobs import Job, find_job
    from hpclaunch.runs.registry import Registry
    if args.job:
        jobs = [find_job(args.job)]
    else:
        reg = Registry()
        jobs = [Job(r, reg) for r in reg.list(active_only=True)]
    rows = []
    for job in jobs:
        st = job.status()
        rows.append({"job_id": job.id, "name": job.name, "backend": job.record.backend, "state": st.state,
                     "exit_code": st.exit_code, "elapsed": st.elapsed, "nodes": st.nodes, "reason": st.reason,
                     "attempts": st.attempts, "tasks": st.tasks, "source": st.source, "run_dir": job.run_dir})
    if args.json:
        _print_json(rows if not args.job else rows[0])
        return 0
    if not rows:
        print("no active jobs (hpclaunch list --all shows finished ones)")
    for r in rows:
        extra = f" tasks: {_counts(r['tasks'])}" if r["tasks"] else ""
        code = f" exit {r['exit_code']}" if r["exit_code"] is not None else ""
        reason = f" ({r['reason']})" if r["reason"] and r["reason"] != "None" else ""
        print(f"{r['job_id']:>8} {r['name'][:30]:<30} {r['state']:<11}{code} attempts {r['attempts']} "
              f"elapsed {r['elapsed'] or '-'} nodes {r['nodes'] or '-'}{reason}{extra}")
    return 0


def _parse_age(text: str) -> float:
    import re
    m = re.match(r"^(\d+(?:\.\d+)?)([smhdw])$", text.strip())
    if not m:
        from hpclaunch.common.errors import HpclaunchError
        raise HpclaunchError(f"--since {text}: expected an age like 30m, 12h or 7d — e.g. --since 7d")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]


def cmd_list(args: argparse.Namespace) -> int:
    import time as _time
    from hpclaunch.runs.registry import Registry
    reg = Registry()
    since = _time.time() - _parse_age(args.since) if args.since else None
    recs = reg.list(since=since, active_only=not (args.all or args.since))
    if args.json:
        _print_json([r.public() for r in recs])
        return 0
    for r in recs:
        when = _time.strftime("%Y-%m-%d %H:%M", _time.localtime(r.submit_time))
        print(f"{r.job_id:>8} {r.backend:<6} {r.name[:30]:<30} {r.state:<11} {when} {r.user} {r.run_dir}")
    if not recs:
        print("no jobs" + ("" if args.all or args.since else " active (add --all for finished ones)"))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    from hpclaunch.runs.jobs import find_job, ordered_logs
    job = find_job(args.job)
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
        from hpclaunch.common.errors import HpclaunchError
        raise HpclaunchError(f"--task {task}: job {job.id} has no task {task} in {job.run_dir} \u2014 "
                             "give a task index of its sweep")
    logs = ordered_logs(job.rank_logs(args.attempt, task))
    if args.rank is not None:
        logs = [lg for lg in logs if lg.rank == args.rank]
    if args.json:
        _print_json([{"task": task, "rank": lg.rank, "path": lg.path, "exit_code": lg.exit_code,
                      "exit_time": lg.exit_time,
                      "text": job.logs(rank=lg.rank, attempt=args.attempt, tail=args.tail, task=task)}
                     for lg in logs])
        return 0
    if not args.follow:
        where = job.run_dir if task is None else os.path.join(job.run_dir, f"task{task}")
        if not logs:
            print(f"no rank logs yet in {where}/logs (the batch log: {job.run_dir}/logs/slurm"
                  f"{'-*.out' if task is not None else '.out'})")
        for lg in logs:
            status = "" if lg.exit_code is None else f" (exit {lg.exit_code})"
            print(f"==> {'' if task is None else f'task {task} '}rank {lg.rank}{status}: {lg.path} <==")
            sys.stdout.write(job.logs(rank=lg.rank, attempt=args.attempt, tail=args.tail, task=task))
        return 0
    return _follow_logs(job, args.rank, task)


def _follow_logs(job, rank, task=None) -> int:
    import time as _time
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
    from hpclaunch.runs.jobs import find_job
    job = find_job(args.job)
    job.cancel()
    if args.json:
        _print_json({"job_id": job.id, "name": job.name, "cancel_requested": True})
    else:
        print(f"cancel requested for {job.record.backend} job {job.id} ({job.name})")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from hpclaunch.common.errors import HpclaunchError
    fmt = args.format
    if fmt is None:
        suffix = os.path.splitext(args.output or "")[1].lower()
        fmt = {".json": "json", ".html": "html", ".htm": "html"}.get(suffix, "text")
    if args.since:
        import time as _time
        from hpclaunch.monitors.report import build_fleet_report, render_fleet
        from hpclaunch.runs.registry import Registry
        since = _time.time() - _parse_age(args.since)
        rows = [{"id": r.job_id, "name": r.name, "user": r.user, "partition": r.partition or "",
                 "run_dir": r.run_dir, "submit_time": r.submit_time} for r in Registry().list(since=since)]
        out = render_fleet(build_fleet_report(rows), fmt)
    else:
        if not args.job:
            raise HpclaunchError("report: which job? — give a job id, name or run directory, or --since 7d")
        run_dir = args.job if os.path.isdir(args.job) else None
        if run_dir is None:
            from hpclaunch.runs.jobs import find_job
            run_dir = find_job(args.job).run_dir
        if not os.path.isdir(os.path.join(run_dir, "monitor")) and not os.path.isdir(os.path.join(run_dir, "metrics")):
            raise HpclaunchError(f"{run_dir}: no monitor/ or metrics/ folder — is this a run directory?")
        from hpclaunch.monitors.report import build_report, render
        color = args.output is None and sys.stdout.isatty()
        out = render(build_report(run_dir), fmt, color=color)
    if args.output:
        _write_user_file(args.output, out, "report")
        print(f"report written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(out if isinstance(out, str) else out.decode())
    return 0


def _write_user_file(path: str, data, what: str) -> None:
    """Write a file the user named (atomically); a path that cannot be written is their one-line error."""
    from hpclaunch.common.atomic import file_in_the_way, write_atomic
    from hpclaunch.common.errors import HpclaunchError
    try:
        write_atomic(path, data, mode=0o644)
    except OSError as e:
        folder = os.path.dirname(os.path.abspath(path))
        blocker = file_in_the_way(folder)
        if blocker:
            fix = f"{blocker} is a file, not a folder: pick another path"
        elif not os.path.isdir(folder):  # not created for you: a typo in the path should not make folders
            fix = f"create the folder first (mkdir -p {folder}) or pick another path"
        elif os.path.isdir(path):
            fix = "that is a folder: name a file in it"
        else:
            fix = "pick a path you can write"
        raise HpclaunchError(f"{path}: cannot write the {what}: {e.strerror or e} \u2014 {fix}") from None


def _print_json(data) -> None:
    import json
    print(json.dumps(data, indent=2, default=str))


_COMMANDS = {
    "validate": cmd_validate,
    "render": cmd_render,
    "profiles": cmd_profiles,
    "init": cmd_init,
    "schema": cmd_schema,
    "submit": cmd_submit,
    "status": cmd_status,
    "list": cmd_list,
    "logs": cmd_logs,
    "cancel": cmd_cancel,
    "report": cmd_report,
}
