"""The parser of the `hpclaunch` command: every command, its arguments and their help.

Loaded by hpclaunch/cli/__init__.py through its command table, like the command modules: `--help`
prints a copy of this parser's help kept in the user cache, keyed by this file's text, so
everything `--help` shows must be written here (not imported from elsewhere). `init --launcher`'s
choices come from the launcher registry (launchers/modes/): they are in `init --help` only.
"""
from __future__ import annotations

import argparse

from hpclaunch.common.version import __version__

LIST_PAGE = 100       # `list`: the newest jobs, a page at a time (--offset for the next)
FLEET_PAGE = 10_000   # `report --since`: the view over at most the newest this many jobs


class _NotBuilt:
    """Stands in for the parser of a command other than the one being run: its arguments are
    never built (they were two thirds of building the whole parser, ~8 ms, on every command)."""

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: self


def build(command: str | None = None) -> argparse.ArgumentParser:
    """The parser: of every command, or (``command``: the first word of a command line, one of the
    commands) of that command only, which parses that command line the same."""
    p = argparse.ArgumentParser(
        prog="hpclaunch",
        description="Run distributed training on Slurm (or locally) and account for its energy and heat.",
    )
    p.add_argument("--version", action="version", version=f"hpclaunch {__version__}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")

    def add_command(name: str, **kwargs):
        return sub.add_parser(name, **kwargs) if command in (None, name) else _NotBuilt()

    def job_command(name: str, help: str, default: str | None = None, optional: bool = False) -> argparse.ArgumentParser:
        c = add_command(name, help=help, description=help)
        if default:  # as `init` writes it
            c.add_argument("job", metavar="JOB.yaml", nargs="?", default=default, help=f"the job file (default: {default})")
        else:  # optional: the command says what is missing itself
            c.add_argument("job", metavar="JOB.yaml", help="the job file", **({"nargs": "?"} if optional else {}))
        c.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                       help="override a job key, e.g. -o resources.nodes=4 (repeatable)")
        return c

    job_command("validate", "check a job file against the schema and its profile's limits", default="job.yaml")
    c = job_command("render", "print the sbatch script the job would submit (or, with --target, what another "
                    "scheduler would be given), and nothing else", default="job.yaml")
    c.add_argument("--target", default=None, metavar="NAME",
                   help="what to render: slurm, the sbatch script (default), or another target by name; an "
                        "unknown name lists the known ones (docs/targets.md)")

    c = add_command("profiles", help="list cluster profiles, or show one",
                       description="List cluster profiles (yours first: ./hpc_profiles, ~/.config/hpclaunch/profiles, then shipped), or show one resolved.")
    c.add_argument("action", nargs="?", choices=["list", "show"], default="list")
    c.add_argument("name", nargs="?", help="profile to show")

    c = add_command("init", help="write a commented starter job file for a profile")
    c.add_argument("file", nargs="?", default="job.yaml", help="where to write it (default: job.yaml)")
    c.add_argument("--profile", default="local", help="cluster profile (default: local)")
    c.add_argument("--name", default=None, help="job name (default: from the file name)")
    if command in (None, "init"):  # the launcher registry, read only when init's arguments are built
        from hpclaunch.launchers import modes
        c.add_argument("--launcher", default="", choices=list(modes.starters()),
                       help="a starter for this launch mode: a launcher, or a recipe run by one (jax and "
                            "lightning run under launcher: srun)")
    c.add_argument("--force", action="store_true", help="replace an existing file")

    c = job_command("submit", "validate, render and queue a job (Slurm, or this machine with --backend local)",
                    optional=True)
    c.add_argument("--backend", default=None, metavar="NAME",
                   help="where to run: slurm, local, or a backend another package installed "
                        "(default: slurm if a cluster is configured here, else local)")
    c.add_argument("--after", action="append", default=[], metavar="JOB[:KIND]",
                   help="start after JOB (id or name); KIND afterok (default), afterany or afternotok")
    c.add_argument("--wait", action="store_true", help="follow the job until it ends; exit with its exit code")
    c.add_argument("--no-preflight", action="store_true", help="skip the checks against the live cluster")
    c.add_argument("--test-only", action="store_true",
                   help="preflight and `sbatch --test-only` (when and where it would start); queue nothing")
    c.add_argument("--json", action="store_true", help="print the submission as JSON")
    c.add_argument("--remote", nargs="?", const="", default=None, metavar="NAME",
                   help="submit from this machine over ssh: copy the project to the cluster of profile NAME "
                        "(default: the job's profile) and submit it there (docs/remote.md)")

    c = add_command("tune", help="run a study: a search over the sweep's parameters, trials as array tasks "
                    "(or `tune status|report STUDY`)",
                    description="Start a study (a job whose sweep has a metric: docs/tune.md) and follow its trials; "
                                "--resume continues one after a cancel or a crash. `tune status STUDY` prints its "
                                "trials, `tune report STUDY` its trials, best job file and energy as text, JSON or "
                                "HTML. Needs hpclaunch[tune].")
    c.add_argument("what", metavar="JOB.yaml|status|report", help="the study's job file, or status / report")
    c.add_argument("study", nargs="?", metavar="STUDY", help="status / report: the study's name (its job's name)")
    c.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                   help="override a job key, e.g. -o sweep.trials=60 (repeatable)")
    c.add_argument("--resume", action="store_true",
                   help="continue the study: trials interrupted by a cancel or a crash run again, none twice")
    c.add_argument("--backend", default=None, metavar="NAME", help="where the trials run: slurm or local (as submit)")
    c.add_argument("--no-preflight", action="store_true", help="skip the checks against the live cluster")
    c.add_argument("--detach", action="store_true", help="submit and return: the study runs on without this command")
    c.add_argument("--format", "-f", choices=["text", "json", "html"], default=None,
                   help="report: default text, or from the --output suffix (.json, .html)")
    c.add_argument("--output", metavar="FILE", help="report: write to FILE (atomically) instead of stdout")
    c.add_argument("--json", action="store_true", help="status / a start: print JSON")

    c = add_command("status", help="state of a job (or of your active jobs and those ended in the last hour)")
    c.add_argument("job", nargs="?", metavar="JOB", help="job id, name or run directory")
    c.add_argument("--json", action="store_true")

    c = add_command("list", help="jobs in the registry, newest first, a page at a time")
    c.add_argument("--all", action="store_true", help="finished jobs too")
    c.add_argument("--since", metavar="AGE", help="submitted within AGE, e.g. 2h, 7d")
    c.add_argument("--limit", type=int, default=LIST_PAGE, metavar="N",
                   help=f"at most N jobs (default {LIST_PAGE}; 0: all)")
    c.add_argument("--offset", type=int, default=0, metavar="K", help="skip the K newest (the next page)")
    c.add_argument("--json", action="store_true")

    c = add_command("logs", help="per-rank logs of a job (the first failing rank first)")
    c.add_argument("job", metavar="JOB")
    c.add_argument("--rank", type=int, default=None, help="only this rank")
    c.add_argument("--task", type=int, default=None,
                   help="a sweep's task (default: the first that failed, else the last with logs)")
    c.add_argument("--attempt", type=int, default=None,
                   help="this attempt, numbered from 0 as on disk (logs/attempt0) and in status (default: the latest)")
    c.add_argument("--tail", type=int, default=None, metavar="N", help="last N lines of each log")
    c.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until the job ends")
    c.add_argument("--json", action="store_true")

    c = add_command("cancel", help="cancel a job")
    c.add_argument("job", metavar="JOB")
    c.add_argument("--json", action="store_true")

    c = add_command("report", help="energy, power and thermal report of a job, or of the fleet with --since",
                       description="Energy, power and thermal report of a job (id, name or run directory): "
                                   "text, versioned JSON or one self-contained HTML page. With --since, a fleet view "
                                   "across the registry's jobs.")
    c.add_argument("job", nargs="?", metavar="JOB|RUN_DIR")
    c.add_argument("--format", "-f", choices=["text", "json", "html"], default=None,
                   help="default: text, or from the -o suffix (.json, .html)")
    c.add_argument("-o", "--output", metavar="FILE", help="write to FILE (atomically) instead of stdout")
    c.add_argument("--since", metavar="AGE", help="fleet view over jobs submitted within AGE, e.g. 7d")
    c.add_argument("--goodput", action="store_true",
                   help="where the job's time went: queued, starting, productive, recomputing, checkpointing, "
                   "detecting and recovering from failures; ETTR and lost GPU-hours by cause (with --since: "
                   "per partition and month) (docs/recovery.md)")
    c.add_argument("--refresh", action="store_true",
                   help="fleet view: check every job's logs against its ledger summary (by default only "
                   "jobs that ended in the last day are checked)")
    c.add_argument("--limit", type=int, default=None, metavar="N",
                   help=f"fleet view: over the N newest jobs since AGE (default {FLEET_PAGE:,}; 0: all of them)")
    c.add_argument("--offset", type=int, default=0, metavar="K", help="fleet view: skip the K newest (the next page)")
    c.add_argument("--full", action="store_true",
                   help="text and HTML: every node, GPU and rank in the tables (a large job's show its "
                   "hottest and slowest 24 and the nodes' spread; the JSON always has them all)")

    c = add_command("export", help="export a run's checkpoint to ONNX (RUN_DIR/exports/model.onnx + model.json)",
                       description="Export a train_entry run's checkpoint (the newest that verifies, or --step N) "
                                   "to ONNX, with a model.json describing its input, classes and source. "
                                   "Needs hpclaunch[export].")
    c.add_argument("job", metavar="RUN_DIR|JOB", help="the run directory (it holds checkpoints/), or a job id or name")
    c.add_argument("--step", type=int, default=None, help="export the checkpoint of this step (default: the newest)")
    c.add_argument("--format", choices=["onnx"], default="onnx", help="default: onnx")
    c.add_argument("--precision", choices=["fp32", "fp16", "bf16"], default="fp32",
                   help="dtype of the graph (default fp32, whatever the run trained in)")
    c.add_argument("-o", "--output", metavar="DIR", help="write into DIR (it must exist) instead of RUN_DIR/exports")
    c.add_argument("--model", metavar="MODULE:FACTORY", default=None,
                   help="import this factory to rebuild the model (a run trained with --model): export never "
                   "imports what a run directory names, only what you name here")
    c.add_argument("--json", action="store_true", help="print model.json's content")

    c = add_command("dashboard", help="a local web page of your jobs, live: state, ranks' progress, power, heat",
                       description="Serve a web page listing the registry's jobs and, per job, its state, "
                                   "attempts, nodes, each rank's progress and charts of GPU power and "
                                   "temperature, host CPU and memory, updated while it runs (docs/dashboard.md). "
                                   "Runs until Ctrl-C. Needs hpclaunch[dashboard].")
    c.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1, this machine only); any other "
                   "address needs the token in the printed URL")
    c.add_argument("--port", type=int, default=0, help="port (default 0: any free one; the URL says which)")
    c.add_argument("--since", default="7d", metavar="AGE",
                   help="list jobs submitted within AGE, e.g. 2h, 30d (default 7d), and every active one")
    c.add_argument("--token", action="store_true",
                   help="require the printed URL's token on 127.0.0.1 too (on a shared login node, every "
                   "user of the node can reach its 127.0.0.1)")

    c = add_command("alerts", help="alerts a job raised; undelivered ones sent again; Prometheus rules",
                    description="list: the alerts raised (critical, warning, info), from the run directories and "
                                "the registry, with what each sink got. send: send a finished job's undelivered "
                                "alerts again. prometheus-rules: Prometheus alerting rules for the monitor's "
                                "exporter metrics, with a job file's thresholds (default: hpclaunch's) "
                                "(docs/alerts.md).")
    c.add_argument("action", choices=["list", "send", "prometheus-rules"])
    c.add_argument("job", nargs="?", metavar="JOB",
                   help="list/send: a job id, name or run directory; prometheus-rules: a job file (JOB.yaml)")
    c.add_argument("--since", default="7d", metavar="AGE", help="list without JOB: jobs submitted within AGE")
    c.add_argument("-O", "--override", action="append", default=[], metavar="KEY=VALUE",
                   help="prometheus-rules: override a key of the job file, e.g. -O alerts.rules.memory.threshold=90")
    c.add_argument("-o", "--output", metavar="FILE", help="prometheus-rules: write the rules to FILE (atomically)")
    c.add_argument("--json", action="store_true", help="list: as JSON")

    c = add_command("schema", help="print the JSON Schema of job files (or profiles), for editors")
    c.add_argument("--profile", action="store_true", help="the schema of profile files instead")
    return p
