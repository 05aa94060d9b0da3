"""`report --since AGE`: the fleet view over the registry's jobs, read from its ledger (docs/fleet.md).

Its own module, apart from `report JOB`, so that it loads only the registry, the ledger and the
fleet aggregation: no log reader (numpy, pyarrow) and no backend (bench/fleet times it)."""
from __future__ import annotations

import argparse
import time

from hpclaunch.cli.output import emit_report, parse_age, report_format
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
    emit_report(render_fleet(build_fleet_report(fleet_rows(Registry(), since, refresh=args.refresh)), fmt),
                args.output)
    return 0
