"""`report`: energy, power and thermal reports of a job, or of the fleet."""
from __future__ import annotations

import argparse
import os
import sys
import time as _time

from hpclaunch.cli.output import parse_age, write_user_file
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.reports import build_fleet_report, build_report, render, render_fleet
from hpclaunch.runs.jobs import find_job
from hpclaunch.runs.ledger import fleet_rows
from hpclaunch.runs.registry import Registry


def cmd_report(args: argparse.Namespace) -> int:
    fmt = args.format
    if fmt is None:
        suffix = os.path.splitext(args.output or "")[1].lower()
        fmt = {".json": "json", ".html": "html", ".htm": "html"}.get(suffix, "text")
    if args.since:
        since = _time.time() - parse_age(args.since)
        out = render_fleet(build_fleet_report(fleet_rows(Registry(), since, refresh=args.refresh)), fmt)
    else:
        if not args.job:
            raise HpclaunchError("report: which job? — give a job id, name or run directory, or --since 7d")
        run_dir = args.job if os.path.isdir(args.job) else None
        if run_dir is None:
            job = find_job(args.job)
            if job.record.backend == "remote":  # its run directory is on the cluster: its hpclaunch reports
                from hpclaunch.cli.remote_commands import cmd_report as remote_report
                return remote_report(args, job.record, fmt)
            run_dir = job.run_dir
        if not os.path.isdir(os.path.join(run_dir, "monitor")) and not os.path.isdir(os.path.join(run_dir, "metrics")):
            raise HpclaunchError(f"{run_dir}: no monitor/ or metrics/ folder — is this a run directory?")
        color = args.output is None and sys.stdout.isatty()
        out = render(build_report(run_dir), fmt, color=color)
    if args.output:
        write_user_file(args.output, out, "report")
        print(f"report written to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(out if isinstance(out, str) else out.decode())
    return 0


