"""`hpclaunch tune`'s trial side (docs/tune.md): the helper a program calls to report its
intermediate values, and (in submodules) the trial agent, the study's files and its search space.

A program tuned by a study reports with one call per evaluation:

    from hpclaunch.tune import report
    report(step, value)        # e.g. after each epoch; raises Pruned once the study stopped the trial

It appends one line to the file named by HPCLAUNCH_TUNE_REPORT, the same line any other program
can write (`{"step": 3, "value": 0.91}` and a newline). Outside a study it does nothing, so the
program runs alone unchanged. This module imports nothing heavy: no Optuna.
"""
from __future__ import annotations

import json
import math
import os

__all__ = ["report", "pruned", "Pruned", "REPORT_ENV", "PRUNED_ENV", "TRIAL_ENV"]

REPORT_ENV = "HPCLAUNCH_TUNE_REPORT"   # the file report() appends to
PRUNED_ENV = "HPCLAUNCH_TUNE_PRUNED"   # a file that exists once the study pruned the trial
TRIAL_ENV = "HPCLAUNCH_TUNE_TRIAL"     # the trial's number in the study


class Pruned(SystemExit):
    """The study stopped this trial (it fell behind the others). A SystemExit with code 0: the
    program ends as if it finished, through its `finally` blocks; the study records the trial as
    pruned whatever the program's exit code."""

    def __init__(self) -> None:
        super().__init__(0)


def report(step: int, value: float) -> None:
    """Report the trial's value at `step` (an int that grows: an epoch, an evaluation); the last
    value reported before the program exits 0 is the trial's result. Raises Pruned when the study
    has pruned the trial (the trial agent also sends SIGTERM)."""
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    value = float(value)
    line = json.dumps({"step": int(step), "value": value if math.isfinite(value) else None}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, line.encode())  # one write of one line with O_APPEND: lines never interleave
    finally:
        os.close(fd)
    if pruned():
        raise Pruned()


def pruned() -> bool:
    """Whether the study has pruned this trial (False outside a study)."""
    marker = os.environ.get(PRUNED_ENV)
    return bool(marker) and os.path.exists(marker)
