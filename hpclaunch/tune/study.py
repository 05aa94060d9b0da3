"""A study on disk: its folder beside the registry, its settings, Optuna's journal, and the sampler
and pruner every process builds the same way from those settings.

    <home>/studies/<name>/study.json   settings (hpclaunch.study/1): the search, the command, the jobs
    <home>/studies/<name>/journal.log  Optuna's JournalStorage: every trial's ask, reports and tell

The journal is Optuna's file backend with its O_EXCL lock file (JournalFileOpenLock): every trial
task, on any node, appends to it, and the lock is an exclusive create, which NFSv3 and later and
Lustre honour. SQLite is not used here: its fcntl locks are unreliable on NFS, so many writers
on shared storage may corrupt it (docs/tune.md, "Storage").
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional

from hpclaunch.common.atomic import write_atomic

SCHEMA = "hpclaunch.study/1"
SETTINGS = "study.json"
JOURNAL = "journal.log"
# A lock whose holder died (a node lost mid-write) is taken over after this many seconds.
LOCK_GRACE_S = 30
# What a trial's user attributes hold (docs/tune.md, "Trials").
ATTR_RUN_DIR, ATTR_TASK, ATTR_STEPS, ATTR_ERROR, ATTR_EXIT = "run_dir", "task", "steps", "error", "exit_code"
ATTR_INTERRUPTED = "interrupted"  # the task was cancelled or lost before it ended; --resume runs it again


class StudyError(Exception):
    """A study's folder or settings cannot be used (one line, said to the user)."""


def settings_path(folder: str) -> str:
    return os.path.join(folder, SETTINGS)


def read_settings(folder: str) -> Dict[str, Any]:
    path = settings_path(folder)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise StudyError(f"{folder}: no study here ({SETTINGS} is missing)") from None
    except (OSError, ValueError) as e:
        raise StudyError(f"{path}: cannot read the study's settings: {e}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise StudyError(f"{path}: not a study's settings (schema {SCHEMA})")
    return data


def write_settings(folder: str, settings: Dict[str, Any]) -> None:
    write_atomic(settings_path(folder), json.dumps(dict(settings, schema=SCHEMA), indent=1, sort_keys=True) + "\n",
                 mode=0o600)


def storage(folder: str):
    """Optuna's journal storage of the study in `folder`."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    path = os.path.join(folder, JOURNAL)
    return JournalStorage(JournalFileBackend(path, lock_obj=JournalFileOpenLock(path, grace_period=LOCK_GRACE_S)))


def _quiet() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


def sampler(settings: Dict[str, Any], seed: Optional[int] = None):
    """The settings' sampler. Each task seeds its own (`seed`): trials asked at the same time with
    the same history would otherwise get the same point."""
    import optuna

    method = settings["method"]
    if method in ("grid", "random"):
        # A grid study's points are all queued when it is made (enqueue_grid): each task takes the
        # next waiting one, which the journal gives to one task only. Optuna's GridSampler picks
        # an unvisited point at random instead, and two tasks asking at once may pick the same.
        return optuna.samplers.RandomSampler(seed=seed)
        # constant_liar: a running trial counts as a poor result, so parallel tasks spread out
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True, n_startup_trials=_startup(settings))


def _startup(settings: Dict[str, Any]) -> int:
    """TPE's random trials before it models the results: Optuna's 10, fewer for a small study."""
    return max(2, min(10, int(settings["trials"]) // 4))


def pruner(settings: Dict[str, Any]):
    import optuna

    prune = settings.get("prune")
    if not prune:
        return optuna.pruners.NopPruner()
    if prune["method"] == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=prune["startup_trials"],
                                           n_warmup_steps=prune["warmup_steps"])
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=max(1, prune["warmup_steps"]),
                                                  reduction_factor=prune["reduction_factor"])


def enqueue_grid(study, settings: Dict[str, Any]) -> None:
    """Queue a new grid study's points, its first `trials` in the grid's order."""
    from hpclaunch.tune.space import grid_points

    if settings["method"] == "grid":
        for params in grid_points(settings["parameters"], int(settings["trials"])):
            study.enqueue_trial(params)


def direction(settings: Dict[str, Any]) -> str:
    return "maximize" if settings["mode"] == "max" else "minimize"


def open_study(folder: str, settings: Dict[str, Any], seed: Optional[int] = None, create: bool = False):
    """The Optuna study in `folder` (made when `create`), with the settings' sampler and pruner."""
    import optuna

    _quiet()
    kwargs = dict(study_name=settings["name"], storage=storage(folder), sampler=sampler(settings, seed),
                  pruner=pruner(settings))
    if create:
        return optuna.create_study(direction=direction(settings), load_if_exists=True, **kwargs)
    try:
        return optuna.load_study(**kwargs)
    except KeyError:
        raise StudyError(f"{folder}: the journal holds no study named {settings['name']!r}") from None


def finished(trial) -> bool:
    """A trial that counts towards the study's budget: it ended, and was not interrupted."""
    from optuna.trial import TrialState

    if trial.state in (TrialState.COMPLETE, TrialState.PRUNED):
        return True
    return trial.state == TrialState.FAIL and not trial.user_attrs.get(ATTR_INTERRUPTED)


def budget_left(trials: List[Any], total: int) -> int:
    return max(0, total - sum(1 for t in trials if finished(t)))


def state_word(trial) -> str:
    """How the study's views name a trial's state: complete, pruned, failed, running, waiting, or
    interrupted (a trial recorded so by --resume)."""
    if trial.user_attrs.get(ATTR_INTERRUPTED):
        return "interrupted"
    name = trial.state.name.lower()
    return "failed" if name == "fail" else name
