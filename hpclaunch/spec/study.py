"""A study's rules (`sweep:` with `metric:`, `hpclaunch tune`): what `validate` refuses before
anything is queued, each as one line. The parameter specs themselves are checked by sweep.py, as
for every sweep; this module adds what only a search needs: a metric to learn from, a number of
trials, and a space that is neither empty, contradictory nor too large to search.
"""
from __future__ import annotations

from typing import Any

from hpclaunch.spec.sweep import _length, _spec_problem

# A study's bounds: its trials are array tasks (spec/job.py caps `trials` at 10,000), a grid study
# enumerates its grid (here, and Optuna's GridSampler at every trial), and a categorical
# parameter of more than this many values is a list no search learns from: use a range or a draw.
MAX_GRID = 10_000
MAX_CHOICES = 1_000
# train_entry's epoch records (docs/train-entry.md, "Metrics"): what a study of it can optimise.
TRAIN_ENTRY_METRICS = ("val_accuracy", "val_loss", "accuracy", "loss")


def study_problems(job, bad) -> None:
    """Report, through bad(path, message, value, fix), what is wrong with the job's sweep as a study
    (or with study keys on a plain sweep)."""
    sweep = job.sweep
    if not sweep.study:
        for key, value, why in (("trials", sweep.trials, "a study's number of trials"),
                                ("prune", sweep.prune, "a study's early stopping")):
            if value is not None:
                bad(f"sweep.{key}", f"is {why}, and this sweep has no metric", key,
                    "add `metric: val_accuracy` (what the trials report) to make it a study, or remove it")
        if sweep.method == "tpe":
            bad("sweep.method", "tpe learns from the trials' results, and this sweep has no metric", "tpe",
                "add `metric: val_accuracy` (what the trials report) and `trials: 40`")
        return
    if sweep.samples is not None:
        bad("sweep.samples", "is for a plain random sweep; a study counts trials", sweep.samples,
            f"write `trials: {sweep.samples}` instead")
    if not sweep.parameters:
        bad("sweep.parameters", "is empty: a study has nothing to search", {},
            "add a parameter, e.g. `train.lr: {loguniform: [1.0e-4, 1.0e-1]}`")
        return
    if sweep.method in ("tpe", "random") and sweep.trials is None:
        bad("sweep.trials", f"a {sweep.method} study needs a number of trials", None, "add `trials: 40`")
    well_formed = True
    for name, spec in sweep.parameters.items():
        if _spec_problem(spec, sweep.method) is not None:
            well_formed = False  # sweep.check said so
            continue
        values = _choices(spec)
        if values is not None and len(values) > MAX_CHOICES:
            bad(f"sweep.parameters.{name}", f"lists {len(values)} values; a study searches at most {MAX_CHOICES} "
                "choices of one parameter", len(values), "use {range: [start, stop, step]} or {uniform: [a, b]}")
        elif values is not None:
            seen = set()
            for value in values:
                key = (type(value).__name__, value)
                if key in seen:
                    bad(f"sweep.parameters.{name}", "lists a value twice", value, "list each value once")
                    break
                seen.add(key)
    if sweep.method == "grid" and well_formed:
        points = 1
        for spec in sweep.parameters.values():
            points *= _length(spec)
        if points > MAX_GRID:
            bad("sweep.parameters", f"the grid has {points} points; a grid study searches at most {MAX_GRID}",
                points, "use method: tpe or random with `trials:`")
        elif sweep.trials is not None and sweep.trials > points:
            bad("sweep.trials", f"asks for more trials than the grid has points ({points}): the grid would "
                "repeat", sweep.trials, f"use at most {points}, or method: tpe or random")
    if job.container is not None:
        bad("sweep.metric", "a study's trials do not run in a container yet (the trial agent needs hpclaunch "
            "beside the program)", sweep.metric, "remove container:, or run the study without one")
    if _runs_train_entry(job.command) and sweep.metric not in TRAIN_ENTRY_METRICS:
        import difflib  # only to word an error
        close = difflib.get_close_matches(sweep.metric, TRAIN_ENTRY_METRICS, n=1, cutoff=0.4)
        bad("sweep.metric", "is not one of train_entry's epoch metrics", sweep.metric,
            f"use {close[0] if close else 'val_accuracy'} (one of {', '.join(TRAIN_ENTRY_METRICS)})")


def _choices(spec: Any):
    """A categorical spec's values (a list or a choice), else None."""
    if isinstance(spec, list):
        return spec
    if isinstance(spec, dict) and "choice" in spec:
        return spec["choice"]
    return None


def _runs_train_entry(command) -> bool:
    return any(str(word) == "hpclaunch.train_entry" for word in command or ())
