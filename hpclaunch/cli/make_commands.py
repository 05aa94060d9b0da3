"""`render` and `init`: the commands that make text from a job or a profile (the sbatch script or
another target's text, a starter job file). Apart from `validate` so that checking a job loads no
renderer."""
from __future__ import annotations

import argparse
import os
import sys

from hpclaunch.cli.output import write_user_file
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.launchers.targets import renderer
from hpclaunch.spec.loading import resolve_job
from hpclaunch.spec.starter import starter_job


def cmd_render(args: argparse.Namespace) -> int:
    render = renderer(args.target)  # an unknown target is refused before the job is read
    sys.stdout.write(render(resolve_job(args.job, args.override)))
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    if os.path.exists(args.file) and not args.force:
        raise HpclaunchError(f"{args.file}: already exists \u2014 pick another name or add --force")
    name = args.name or os.path.splitext(os.path.basename(args.file))[0] or "job"
    write_user_file(args.file, starter_job(args.profile, name, where=("command line", "--profile"), mode=args.launcher), "job file")
    print(f"wrote {args.file} for profile '{args.profile}'; check it with: hpclaunch validate {args.file}")
    return 0
