"""`tune JOB.yaml [--resume]`, `tune status STUDY`, `tune report STUDY` (docs/tune.md); `submit` of a
study comes here too. Optuna (the `[tune]` extra) loads only in these commands."""
from __future__ import annotations

import argparse
import os
import sys

from hpclaunch.cli.output import emit_report, print_json, report_format
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.tune.study import StudyError

_VIEWS = ("status", "report")


def _need_optuna() -> None:
    import importlib.util

    if importlib.util.find_spec("optuna") is None:
        raise HpclaunchError("tune: Optuna is not installed \u2014 pip install 'hpclaunch[tune]' (on the login node "
                             "and wherever the trials run)")


def cmd_tune(args: argparse.Namespace) -> int:
    _need_optuna()
    try:
        if args.what in _VIEWS and not os.path.isfile(args.what):
            return _view(args)
        if args.study is not None:
            raise HpclaunchError(f"tune {args.what} {args.study}: one job file, or `tune status|report STUDY`")
        return start(args.what, args.override, resume=args.resume, backend=args.backend,
                     preflight=not args.no_preflight, detach=args.detach, as_json=args.json)
    except StudyError as e:
        raise HpclaunchError(f"tune: {e}") from None


def start(job_file: str, overrides, *, resume: bool = False, backend=None, preflight: bool = True,
          detach: bool = False, as_json: bool = False) -> int:
    from hpclaunch.runs.tuning import follow, start as start_study

    run = start_study(job_file, overrides, resume=resume, backend=backend, preflight=preflight)
    s = run.settings
    if as_json:
        print_json({"study": s["name"], "folder": run.folder, "trials": s["trials"], "tasks": run.left,
                    "interrupted": run.interrupted,
                    "job_id": run.job.id if run.job else None, "run_dir": run.job.run_dir if run.job else None})
    else:
        if run.interrupted:
            print(f"trials {', '.join(map(str, run.interrupted))} were interrupted: their points run again")
        if run.job is None:
            print(f"study {s['name']}: every one of its {s['trials']} trials has ended; nothing left to run "
                  f"(hpclaunch tune report {s['name']})")
            return 0
        print(f"study {s['name']} ({s['method']}, {s['mode']} {s['metric']}): {run.left} trials as "
              f"{run.job.record.backend} job {run.job.id}, at most {s['parallelism'] or run.left} at once")
        print(f"  study folder:  {run.folder}")
        print(f"  run directory: {run.job.run_dir}")
        print(f"  follow it:     hpclaunch tune status {s['name']}    stop it: hpclaunch cancel {run.job.id}")
    if detach or run.job is None:
        return 0
    try:
        return follow(run.folder, s, run.job, say=lambda line: print(line, flush=True) if not as_json else None)
    except KeyboardInterrupt:
        print(f"\ninterrupted: stopped following; the study's job {run.job.id} goes on "
              f"(hpclaunch tune status {s['name']})", file=sys.stderr)
        return 130


def _view(args: argparse.Namespace) -> int:
    from hpclaunch.runs import study_report
    from hpclaunch.runs.tuning import study_folder

    if not args.study:
        raise HpclaunchError(f"tune {args.what}: which study? \u2014 give its name (the job's name), e.g. "
                             f"hpclaunch tune {args.what} digits-tpe")
    folder = study_folder(args.study)
    if args.what == "status":
        doc = study_report.document(folder, energy=False)
        if args.json:
            print_json(doc)
        else:
            sys.stdout.write(study_report.text(doc, job_file=False))
        return 0
    fmt = report_format(args.format, args.output)
    doc = study_report.document(folder)
    if fmt == "json":
        import json
        out = json.dumps(doc, indent=2, allow_nan=False) + "\n"
    elif fmt == "html":
        out = study_report.html_page(doc, folder)
    else:
        out = study_report.text(doc)
    emit_report(out, args.output)
    return 0
