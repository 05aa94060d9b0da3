"""The `hpclaunch` command. Imports stay inside the commands: `--help` and `render` load nothing heavy."""
from __future__ import annotations

import argparse
import sys


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hpclaunch",
        description="Run distributed training on Slurm (or locally) and account for its energy and heat.",
    )
    from . import __version__
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

    c = sub.add_parser("schema", help="print the JSON Schema of job files (or profiles), for editors")
    c.add_argument("--profile", action="store_true", help="the schema of profile files instead")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not args.cmd:
        _parser().print_help()
        return 2
    from .errors import HpclaunchError
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
    from .loading import resolve_job
    from .yamlio import display_path
    r = resolve_job(args.job, args.override)
    j = r.job.resources
    print(f"{display_path(args.job)}: valid \u2014 job '{r.job.name}', profile '{r.profile.profile.name}', "
          f"{r.job.launcher}, {j.nodes} node(s) x {j.tasks_per_node} rank(s), time {j.time}")
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    from .launchers.render import render_job
    from .loading import resolve_job
    sys.stdout.write(render_job(resolve_job(args.job, args.override)))
    return 0


def cmd_profiles(args: argparse.Namespace) -> int:
    from .profiles import available_profiles, find_profile, load_profile
    from .yamlio import display_path, dump_yaml
    if args.action == "show" or args.name:
        if not args.name:
            from .errors import HpclaunchError
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
    from .atomic import write_atomic
    from .errors import HpclaunchError
    from .starter import starter_job
    if os.path.exists(args.file) and not args.force:
        raise HpclaunchError(f"{args.file}: already exists \u2014 pick another name or add --force")
    name = args.name or os.path.splitext(os.path.basename(args.file))[0] or "job"
    write_atomic(args.file, starter_job(args.profile, name), mode=0o644)
    print(f"wrote {args.file} for profile '{args.profile}'; check it with: hpclaunch validate {args.file}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    import json
    from .typedload import json_schema
    if args.profile:
        from .profile import Profile
        schema = json_schema(Profile, "hpclaunch cluster profile")
    else:
        from .job import Job
        schema = json_schema(Job, "hpclaunch job file")
    print(json.dumps(schema, indent=2, default=str))
    return 0


_COMMANDS = {
    "validate": cmd_validate,
    "render": cmd_render,
    "profiles": cmd_profiles,
    "init": cmd_init,
    "schema": cmd_schema,
}
