"""The `hpclaunch` command: the dispatch to the parser and to each command's module.

The parser (cli/parser.py) and the command modules load on first use, through the name table
below, not through imports at the top: `render` loads nothing it does not use. With the backend
table (launchers/backends/choice.py), the places the core loads its own modules lazily
(docs/architecture.md).

`hpclaunch --help` (and `-h`, or no command) prints the parser's help from the user cache
(hpclaunch/common/usercache.py) when it was made before for the same parser text, terminal width
and Python: then it loads neither argparse nor the parser, about half of what it costs otherwise.
"""
from __future__ import annotations

import gc
import importlib
import os
import sys

from hpclaunch.common import usercache
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.common.version import __version__

_COMMANDS = {
    "validate": "spec_commands", "render": "make_commands", "profiles": "spec_commands",
    "init": "make_commands", "schema": "schema_commands",
    "submit": "submit_commands", "status": "run_commands", "list": "run_commands", "logs": "run_commands",
    "cancel": "run_commands", "report": "report_commands", "export": "export_commands",
    "dashboard": "dashboard_commands", "alerts": "alerts_commands", "tune": "tune_commands",
}
_PARSER = "parser"


def _load(name: str):
    return importlib.import_module(f"hpclaunch.cli.{name}")


def _module(args) -> str:  # args: the parsed argparse.Namespace
    """The command's module. `report --since` (the fleet view) has its own: it loads neither the log
    readers (numpy) nor the backends, since it answers for 10,000 ledgered jobs within a second.
    `submit --remote` is remote_commands'; a submission here loads no ssh or packing code."""
    if args.cmd == "report" and args.since:
        return "fleet_commands"
    if args.cmd == "submit" and args.remote is not None:
        return "remote_commands"  # ssh and packing: not loaded by a submission here
    return _COMMANDS[args.cmd]


def main(argv: list[str] | None = None) -> int:
    """The command line ``argv`` (default: this process's own, which also sets collection as
    `_load_quickly` says; a caller in a longer-lived process keeps its own)."""
    own = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--version"]:
        print(f"hpclaunch {__version__}")
        return 0
    if argv in ([], ["-h"], ["--help"]):
        sys.stdout.write(top_help())
        return 0 if argv else 2
    try:
        args, module = _load_quickly(argv) if own else _parse_and_load(argv)
        return getattr(module, f"cmd_{args.cmd}")(args)
    except HpclaunchError as e:
        print(str(e), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def _parse_and_load(argv: list[str]):
    # Only the command's own parser is built (argv[0] names it; -h/--help and typos build all).
    args = _load(_PARSER).build(argv[0] if argv[0] in _COMMANDS else None).parse_args(argv)
    return args, _load(_module(args))


def _load_quickly(argv: list[str]):
    """_parse_and_load without the garbage collector. Start-up makes ~150 modules' objects, all kept
    to the end: a collection during it frees nothing, and the one at exit walks them all. None
    runs until the command's module is loaded; then those objects are frozen out of every later
    one (exit's too) and collection is on again for the command's own work. Measured on a wheel
    install: importing the submit path and exiting 38.5 -> 33.2 ms; a 1,000-point sweep submit
    69 -> 60 ms (commit 325be4d)."""
    gc.disable()
    try:
        return _parse_and_load(argv)
    finally:
        gc.freeze()
        gc.enable()


def top_help() -> str:
    """What argparse prints for `hpclaunch --help` here and now, from the cache when it can be.

    The one reason this cache exists is the budget `--help` <= 2x `python -c pass`: building the
    parser imports argparse (with re, gettext) and builds every command's parser. Measured on wheel
    installs, 30 interleaved rounds on the shared 2-core machine (load ~7, so CPU-time medians, with
    wall-time medians in brackets): from the cache 1.23x (1.16x), without it 2.85x (3.01x);
    docs/benchmarks.md has the current figures."""
    material = repr(_help_material())
    name = f"help-{usercache.key('help', texts=[material])}"
    cached = usercache.load(name, material)
    if cached is not None:
        try:
            return cached.decode("utf-8")
        except UnicodeDecodeError:
            pass  # damaged: made again below, and the entry replaced
    text = _load(_PARSER).build().format_help()
    if usercache.store(name, material, text.encode("utf-8")):  # one per terminal width
        usercache.prune("help-", 8)
    return text


def _help_material() -> tuple:
    """Everything argparse's help text depends on: the parser's source, the width argparse wraps at
    (shutil.get_terminal_size's columns), and what decides colour in Pythons that colour help."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        with open(os.path.join(here, f"{_PARSER}.py"), encoding="utf-8") as f:
            source = f.read()
    except OSError:
        source = ""
    tty = sys.stdout.isatty() if hasattr(sys.stdout, "isatty") else False
    colour = tuple(os.environ.get(k) for k in ("PYTHON_COLORS", "NO_COLOR", "FORCE_COLOR", "TERM"))
    return ("help", source, _columns(), tty, colour)


def _columns() -> int:
    """shutil.get_terminal_size().columns, without importing shutil (argparse wraps at this - 2)."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns or 80
        except (AttributeError, ValueError, OSError):
            columns = 80
    return columns
