"""`report --since AGE`: the fleet view over the registry's jobs, read from its ledger (docs/fleet.md).

Its own module, apart from `report JOB`, so that it loads only the registry, the ledger and the
fleet aggregation: no log reader (numpy, pyarrow) and no backend (bench/fleet times it)."""
from __future__ import annotations

import argparse
import time

from hpclaunch.cli.output import emit_report, parse_age, report_format
from hpclaunch.cli.parser import FLEET_PAGE
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.reports.fleet import build_fleet_report, render_fleet
from hpclaunch.runs.ledger import fleet_rows
from hpclaunch.runs.registry import Registry


def cmd_report(args: argparse.Namespace) -> int:
    fmt = report_format(args.format, args.output)
    since = time.time() - parse_age(args.since)
    if args.goodput:
        from hpclaunch.reports.goodput_render import render as render_goodput
        from hpclaunch.runs.goodput import fleet_report
        emit_report(render_goodput(fleet_report(Registry(), since, refresh=args.refresh), fmt), args.output)
        return 0
    limit = FLEET_PAGE if args.limit is None else args.limit
    if limit < 0 or args.offset < 0:
        raise HpclaunchError(f"report --since: --limit {limit} --offset {args.offset}: give whole numbers, 0 or "
                             "more (--limit 0: every job since AGE)")
    reg = Registry()
    # a page of the newest jobs: a registry of 100,000 jobs is not read whole (docs/fleet.md)
    fleet = build_fleet_report(fleet_rows(reg, since, refresh=args.refresh, limit=limit, offset=args.offset))
    fleet.data["page"] = {"offset": args.offset, "limit": limit or None, "jobs_in_window": reg.count(since=since)}
    emit_report(render_fleet(fleet, fmt), args.output)
    return 0
