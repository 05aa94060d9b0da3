"""`hpclaunch tune JOB.yaml [--resume]`: start or continue a study, and follow it (docs/tune.md).

A study is a job whose sweep has a metric. Its folder is beside the registry
(<home>/studies/<name>: the settings, study.json, and Optuna's journal, hpclaunch/tune/study.py),
so it must be on storage the nodes share, as the registry's home is. Starting it writes the
settings, creates the study in the journal, and submits one array of as many tasks as trials are
left, at most `parallelism` at once: the scheduler starts the next task as one ends (Slurm's
`%P` throttle; the local backend's array does the same), and each task's trial agent asks the
study for its point then (hpclaunch/tune/agent.py). Nothing here needs to keep running: the search
lives in the tasks and the journal, so the user may log out; following is only for watching.

--resume after a cancel or a crash: once no job of the study is active, the trials left running by
a task that never ended are recorded as interrupted (failed, with the attribute `interrupted`)
and their points asked again first; the study then runs as many tasks as trials are still owed.
So every trial the study owes runs once and counts once, however often it is stopped.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from dataclasses import dataclass
from hpclaunch.common.atomic import make_private_dirs
from hpclaunch.common.errors import HpclaunchError, InvalidInput, Problem
from hpclaunch.launchers.backends.base import FINAL_STATES
from hpclaunch.launchers.plan import slug
from hpclaunch.runs.jobs import Job
from hpclaunch.runs.registry import Registry, home
from hpclaunch.runs.submission import sources_of, submit
from hpclaunch.spec.loading import Resolved, resolve_job
from hpclaunch.spec.typedload import to_plain
from hpclaunch.tune import study as files

# What defines the search: a study resumed with others would mix two searches in one journal.
SEARCH_KEYS = ("method", "metric", "mode", "parameters", "prune", "seed")


def studies_root() -> str:
    return os.path.join(home(), "studies")


def study_folder(name: str) -> str:
    """The folder of study NAME (a job's name, or a path to a study folder)."""
    if os.sep in name and os.path.isfile(os.path.join(name, files.SETTINGS)):
        return os.path.abspath(name)
    return os.path.join(studies_root(), slug(name))


def written_job(resolved: Resolved, overrides: Sequence[str]) -> Dict[str, Any]:
    """The job as its file says (overrides applied), without the profile's defaults: what the best
    trial's job file starts from."""
    from hpclaunch.spec.merge import copy_plain, set_path
    from hpclaunch.spec.overrides import parse_override
    from hpclaunch.spec.yamlio import load_yaml_bytes

    data = copy_plain(load_yaml_bytes(resolved.source_bytes, resolved.job_path))
    for key, value in (parse_override(o) for o in overrides):
        set_path(data, key, value)
    return data


def settings_of(resolved: Resolved, written: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The study's settings from its job: the search, and what the trial agent fills in."""
    job = resolved.job
    sweep = job.sweep
    if sweep is None or not sweep.study:
        raise InvalidInput([Problem(sources_of(resolved).of("sweep"), "sweep.metric",
                                    "is not set: this job is not a study", None,
                                    "add `metric: val_accuracy` (and method: tpe, trials: N) under sweep:, or run "
                                    "it with `hpclaunch submit`", has_value=False)])
    from hpclaunch.spec.sweep import count

    env = {k: str(v) for k, v in job.env.items() if "{" in str(v)}
    return {
        "name": job.name, "method": sweep.method, "metric": sweep.metric, "mode": sweep.mode, "seed": sweep.seed,
        "trials": count(sweep), "parallelism": sweep.parallelism, "parameters": to_plain(sweep.parameters),
        "prune": to_plain(sweep.prune) if sweep.prune is not None else None,
        "command": [str(a) for a in job.command], "env": env, "job": written if written is not None else to_plain(job),
        "job_file": os.path.abspath(resolved.job_path), "jobs": [],
    }


@dataclass
class Started:
    folder: str
    settings: Dict[str, Any]
    job: Optional[Job]          # None: nothing was left to run
    left: int                   # trials this submission runs
    interrupted: List[int]      # trials recorded as interrupted by this --resume


def start(job_path: str, overrides: Sequence[str] = (), *, resume: bool = False, backend: Optional[str] = None,
          preflight: bool = True, registry: Optional[Registry] = None) -> Started:
    resolved = resolve_job(job_path, overrides)
    settings = settings_of(resolved, written_job(resolved, overrides))
    folder = study_folder(settings["name"])
    reg = registry or Registry()
    exists = os.path.isfile(files.settings_path(folder))
    if exists and not resume:
        raise HpclaunchError(f"study {settings['name']!r} exists ({folder}) \u2014 continue it with `hpclaunch tune "
                             f"{job_path} --resume`, or give the job another name (-o name=...)")
    if resume and not exists:
        raise HpclaunchError(f"--resume: no study {settings['name']!r} ({folder}) \u2014 start it with "
                             f"`hpclaunch tune {job_path}`")
    interrupted: List[int] = []
    if exists:
        old = files.read_settings(folder)
        changed = [k for k in SEARCH_KEYS if old.get(k) != settings[k]]
        if changed:
            raise HpclaunchError(f"--resume: {job_path} changes the study's {', '.join('sweep.' + k for k in changed)} "
                                 f"\u2014 a study keeps its search; start a new one under another name (-o name=...)")
        _refuse_active(old, reg)
        settings["jobs"] = old.get("jobs", [])
        study = files.open_study(folder, settings)
        interrupted = mark_interrupted(study)
    else:
        make_private_dirs(folder)
        files.write_settings(folder, settings)
        study = files.open_study(folder, settings, create=True)
        files.enqueue_grid(study, settings)
    files.write_settings(folder, settings)
    left = files.budget_left(study.get_trials(deepcopy=False), settings["trials"])
    if left == 0:
        return Started(folder, settings, None, 0, interrupted)
    job = submit(resolved, backend=backend, preflight=preflight, registry=reg, study_dir=folder, tasks=left)
    settings["jobs"].append({"key": job.record.key, "backend": job.record.backend, "job_id": job.id,
                             "run_dir": job.run_dir, "tasks": left, "time": time.time()})
    files.write_settings(folder, settings)
    return Started(folder, settings, job, left, interrupted)


def jobs_of(settings: Dict[str, Any], registry: Registry) -> List[Job]:
    out = []
    for entry in settings.get("jobs", []):
        try:
            out.append(Job(registry.get(int(entry["key"])), registry))
        except (KeyError, ValueError, TypeError, HpclaunchError):
            continue  # a registry reset or moved: the study's trials still say where they ran
    return out


def _refuse_active(settings: Dict[str, Any], registry: Registry) -> None:
    for job in jobs_of(settings, registry):
        st = job.status()
        if st.state not in FINAL_STATES:
            raise HpclaunchError(f"--resume: job {job.id} of study {settings['name']!r} is still {st.state.value} "
                                 f"\u2014 wait for it (hpclaunch status {job.id}) or cancel it (hpclaunch cancel "
                                 f"{job.id}), then resume")


def mark_interrupted(study) -> List[int]:
    """Record the trials still running (no job of the study is active) as interrupted, and ask their
    points again first: each becomes a failed trial with the attribute `interrupted`, which
    counts towards nothing, and a waiting trial with the same values."""
    from optuna.trial import Trial, TrialState

    out = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        Trial(study, t._trial_id).set_user_attr(files.ATTR_INTERRUPTED, True)
        study.tell(t.number, state=TrialState.FAIL, skip_if_finished=True)
        study.enqueue_trial(dict(t.params), user_attrs={"retry_of": t.number})
        out.append(t.number)
    return out


def follow(folder: str, settings: Dict[str, Any], job: Job, say: Callable[[str], None],
           poll: float = 2.0) -> int:
    """Print each trial as it ends until the study's job ends; the study's exit code: 0 when every
    trial it owes ended and one completed, 1 when none completed, else the job's (a cancelled one:
    125, then --resume continues)."""
    from hpclaunch.tune.study import finished

    study = files.open_study(folder, settings)
    seen: set = set()
    while True:
        st = job.status()
        for t in study.get_trials(deepcopy=False):
            if t.number in seen or not t.state.is_finished():
                continue
            seen.add(t.number)
            if t.user_attrs.get(files.ATTR_INTERRUPTED):
                continue
            value = "" if t.value is None else f" {settings['metric']} {t.value:.6g}"
            error = f" ({t.user_attrs[files.ATTR_ERROR]})" if t.user_attrs.get(files.ATTR_ERROR) else ""
            params = ", ".join(f"{k}={v}" for k, v in sorted(t.params.items()))
            say(f"  trial {t.number:>3} {files.state_word(t):<8}{value}{error}  {params}")
        if st.state in FINAL_STATES:
            break
        time.sleep(poll)
    trials = study.get_trials(deepcopy=False)
    done = sum(1 for t in trials if finished(t))
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    if done >= settings["trials"]:
        if not complete:
            say(f"study {settings['name']}: no trial completed")
            return 1
        best = study.best_trial
        say(f"study {settings['name']}: {done} trials; best {settings['metric']} {best.value:.6g} (trial "
            f"{best.number}): " + ", ".join(f"{k}={v}" for k, v in sorted(best.params.items())))
        return 0
    say(f"study {settings['name']}: {done} of {settings['trials']} trials ended; the job ended {st.state.value} "
        f"\u2014 continue with `hpclaunch tune {settings['job_file']} --resume`")
    return st.exit_code if st.exit_code else 1
