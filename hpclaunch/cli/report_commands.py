"""`report JOB`: the energy, power and thermal report of one job (`report --since` is fleet_commands)."""
from __future__ import annotations

import argparse
import os
import sys

from hpclaunch.cli.output import emit_report, report_format
from hpclaunch.common.envknobs import number
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.reports import build_report, render
from hpclaunch.launchers.backends.choice import relayed
from hpclaunch.runs.jobs import find_job


def cmd_report(args: argparse.Namespace) -> int:
    fmt = report_format(args.format, args.output)
    if not args.job:
        raise HpclaunchError("report: which job? — give a job id, name or run directory, or --since 7d")
    if args.limit is not None or args.offset:
        raise HpclaunchError("report: --limit and --offset page the fleet view (with --since AGE); a job's "
                             "report shows its top rows, or every row with --full")
    run_dir = args.job if os.path.isdir(args.job) else None
    if run_dir is None:
        job = find_job(args.job)
        if relayed(job.record.backend):  # its run directory is on the cluster: its hpclaunch reports
            from hpclaunch.cli.remote_commands import cmd_report as remote_report
            return remote_report(args, job.record, fmt)
        run_dir = job.run_dir
        _refresh_attempts(job)
    else:
        try:
            job = find_job(run_dir)
        except HpclaunchError:   # a run directory no registry here knows: the files alone
            job = None
        if job is not None and job.record.backend != "remote":
            _refresh_attempts(job)
    if args.goodput:
        from hpclaunch.reports.goodput_render import render as render_goodput
        from hpclaunch.runs import goodput
        doc = goodput.job_report(job.record) if job is not None else goodput.run_dir_report(run_dir)
        emit_report(render_goodput(doc, fmt), args.output)
        return 0
    if not os.path.isdir(os.path.join(run_dir, "monitor")) and not os.path.isdir(os.path.join(run_dir, "metrics")):
        raise HpclaunchError(f"{run_dir}: no monitor/ or metrics/ folder — is this a run directory?")
    color = args.output is None and sys.stdout.isatty()
    # a large job's nodes are shared among this many processes (reports/by_node.py); 0: one per CPU
    workers = int(number("HPCLAUNCH_REPORT_WORKERS", 0, 0, 256, integer=True)) or None
    emit_report(render(build_report(run_dir, workers=workers), fmt, color=color, full=args.full), args.output)
    return 0


def _refresh_attempts(job) -> None:
    """Ask the backend once, so that the scheduler's record of each attempt (a node failure Slurm
    requeued) is in the run directory the report is built from; a backend that cannot answer here
    leaves the record as it was."""
    try:
        job.status()
    except (HpclaunchError, OSError):
        pass
