"""`dashboard`: the live web view of the registry's jobs (hpclaunch/dashboard/, docs/dashboard.md)."""
from __future__ import annotations

import argparse

from hpclaunch.cli.output import parse_age


def cmd_dashboard(args: argparse.Namespace) -> int:
    since = parse_age(args.since)
    from hpclaunch.dashboard.server import serve  # aiohttp and the rest load only for this command

    return serve(args.host, args.port, since, token=args.token)
