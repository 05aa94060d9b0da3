"""`validate`, `profiles`, `schema`: the commands that check job files and show profiles and schemas."""
from __future__ import annotations

import argparse
import os
import sys

from hpclaunch.common.errors import HpclaunchError
from hpclaunch.spec.loading import resolve_job
from hpclaunch.spec.profiles import available_profiles, find_profile, load_profile
from hpclaunch.spec.yamlio import display_path, dump_yaml


def cmd_validate(args: argparse.Namespace) -> int:
    r = resolve_job(args.job, args.override)
    j = r.job.resources
    print(f"{display_path(args.job)}: valid \u2014 job '{r.job.name}', profile '{r.profile.profile.name}', "
          f"{r.job.launcher}, {j.nodes} node(s) x {j.tasks_per_node} rank(s), time {j.time}")
    for line in literal_dollar_warnings(r.job.env, "env"):
        print(line, file=sys.stderr)
    from hpclaunch.spec.program_warnings import program_warnings

    for line in program_warnings(r.to_document(), os.getcwd()):
        print(line, file=sys.stderr)
    return 0


def literal_dollar_warnings(env: dict, where: str) -> list[str]:
    """Warnings (not errors: a literal `$` may be meant) for env values with a `$` in them: every value is
    exported shell-quoted, exactly as written, so `$HOME` or `${SLURM_JOB_ID}` is never expanded."""
    return [f"warning: {where}.{name} = {value!r} is exported literally: the '$' is not expanded. To expand it, "
            f"set it in the profile's setup: lines (export {name}=\"{value}\") or in the command "
            f"([bash, -c, '... \"{value}\" ...'])"
            for name, value in env.items() if "$" in str(value)]



def cmd_profiles(args: argparse.Namespace) -> int:
    if args.action == "show" or args.name:
        if not args.name:
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
