"""`export`: a run's checkpoint as a deployable model (RUN_DIR/exports/model.onnx + model.json)."""
from __future__ import annotations

import argparse
import os

from hpclaunch.cli.output import print_json
from hpclaunch.common.errors import HpclaunchError


def cmd_export(args: argparse.Namespace) -> int:
    from hpclaunch.train_entry.export import ExportError, export_run  # torch and onnx load inside export_run

    if args.output and not os.path.isdir(args.output):  # not created for you: a typo should not make folders
        raise HpclaunchError(f"--output {args.output}: no such folder \u2014 create it first (mkdir -p "
                             f"{args.output}) or leave --output out (RUN_DIR/exports)")
    run_dir = args.job
    if not os.path.isdir(run_dir) and os.sep not in run_dir:  # a job id or name: its run directory
        from hpclaunch.runs.jobs import find_job

        run_dir = find_job(args.job).run_dir
    try:
        desc = export_run(run_dir, step=args.step, fmt=args.format, precision=args.precision, out_dir=args.output,
                          factory=args.model)
    except ExportError as exc:
        task0 = os.path.join(run_dir, "task0")
        hint = f" (a sweep: export one task's run directory, e.g. {task0})" if os.path.isdir(task0) else ""
        raise HpclaunchError(f"{exc}{hint}") from None
    out = os.path.abspath(args.output) if args.output else os.path.join(os.path.abspath(run_dir), "exports")
    if args.json:
        print_json({**desc, "path": os.path.join(out, desc["file"])})
        return 0
    acc = "" if desc["val_accuracy"] is None else f", val_accuracy {desc['val_accuracy']:.4f}"
    check = desc["check"]
    checked = (f"onnxruntime agrees within {check['max_abs_diff']:.2g} on {check['rows']} rows"
               if "max_abs_diff" in check else f"not run in onnxruntime: {check.get('skipped')}")
    print(f"exported {desc['checkpoint']} (step {desc['step']}{acc}) to {os.path.join(out, desc['file'])}")
    print(f"  input {desc['input']['name']} [batch, {desc['input']['shape'][1]}] {desc['input']['dtype']}, "
          f"{len(desc['classes'] or [])} classes, opset {desc['opset']}; {checked}")
    print(f"  description: {os.path.join(out, 'model.json')}")
    return 0
