"""What the CLI's commands share: JSON output, ages, files the user names."""
from __future__ import annotations

import json
import os
import re
import sys

from hpclaunch.common.atomic import file_in_the_way, write_atomic
from hpclaunch.common.errors import HpclaunchError


def no_job_file() -> HpclaunchError:
    """`submit` without a job file, here or with --remote: the same line."""
    return HpclaunchError("submit: which job file? \u2014 e.g. hpclaunch submit job.yaml "
                          "(from your own machine: hpclaunch submit job.yaml --remote [NAME])")


def counts(tasks: dict) -> str:
    return ", ".join(f"{n} {s.lower()}" for s, n in sorted(tasks.items()))



def parse_age(text: str) -> float:
    m = re.match(r"^(\d+(?:\.\d+)?)([smhdw])$", text.strip())
    if not m:
        raise HpclaunchError(f"--since {text}: expected an age like 30m, 12h or 7d — e.g. --since 7d")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]



def write_user_file(path: str, data, what: str) -> None:
    """Write a file the user named (atomically); a path that cannot be written is their one-line error."""
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



def print_json(data) -> None:
    print(json.dumps(data, indent=2, default=str))


def report_format(fmt: str | None, output: str | None) -> str:
    """--format, else from the -o suffix (.json, .html), else text."""
    if fmt is not None:
        return fmt
    suffix = os.path.splitext(output or "")[1].lower()
    return {".json": "json", ".html": "html", ".htm": "html"}.get(suffix, "text")


def emit_report(out, output: str | None) -> None:
    """A rendered report to -o FILE (atomically; saying where on stderr), or to stdout."""
    if output:
        write_user_file(output, out, "report")
        print(f"report written to {output}", file=sys.stderr)
    else:
        sys.stdout.write(out if isinstance(out, str) else out.decode())
