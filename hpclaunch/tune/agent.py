"""The trial agent: how one array task of a study runs its trial (`python -m hpclaunch.tune.agent
--study DIR -- COMMAND...`, the command the plan gives a study's tasks; docs/tune.md).

Every rank of the task runs it in place of the program. The first to create the attempt's lead
file (an exclusive create in the task's run directory) is the leader: it asks the study for the
task's trial (or, on a requeued attempt, takes the trial the task already has), writes it to
`.hpclaunch/trial.json`, and the others read it there. Each agent runs the program with the
trial's values filled in (`{name}` in its arguments and env values, train.KEY through
HPCLAUNCH_SWEEP_POINT as for a sweep; no shell: the words are the arguments) and passes on the
signals it gets. The leader follows the program's values (values.py), reports each to the study
and asks the pruner; when the pruner says stop it writes the pruned marker and ends the program
(SIGTERM to it and every process it started, SIGKILL after KILL_AFTER_S); the
other ranks' agents see the marker and do the same. Then the leader tells the study how the trial
ended: complete with its last value, pruned, or failed with the error.

Exit codes: 0 for a complete or pruned trial (the study holds which), the program's own code
for a failed one, 1 for a program that exited 0 without reporting the metric, 2 when the study
cannot be used. A program stopped from outside (cancel, time limit) leaves its trial running in the
study; `hpclaunch tune --resume` records it as interrupted and runs the point again.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import zlib
from typing import Any, Dict, List, Optional

from hpclaunch.common.atomic import write_atomic
from hpclaunch.tune import PRUNED_ENV, REPORT_ENV, TRIAL_ENV
from hpclaunch.tune.study import (ATTR_ERROR, ATTR_EXIT, ATTR_RUN_DIR, ATTR_STEPS, ATTR_TASK, StudyError,
                                  open_study, read_settings)
from hpclaunch.tune.values import REPORT_FILE, TrialValues

POLL_S = 0.5
KILL_AFTER_S = 30.0
WAIT_FOR_LEADER_S = 900.0
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} hpclaunch tune: {message}", file=sys.stderr,
          flush=True)


def fill(text: str, point: Dict[str, str]) -> str:
    return _PLACEHOLDER.sub(lambda m: point.get(m.group(1), m.group(0)), text)


def task_index(run_dir: str) -> int:
    name = os.path.basename(os.path.normpath(run_dir))
    return int(name[4:]) if name.startswith("task") and name[4:].isdigit() else 0


class Task:
    """One array task's place: its run directory, attempt, and the files the agents share there."""

    def __init__(self, run_dir: str, attempt: int):
        self.run_dir = run_dir
        self.attempt = attempt
        self.private = os.path.join(run_dir, ".hpclaunch")
        self.trial_file = os.path.join(self.private, "trial.json")
        self.pruned = os.path.join(self.private, "pruned")

    def lead(self) -> bool:
        """Whether this agent leads the attempt (the first to create its lead file)."""
        os.makedirs(self.private, mode=0o700, exist_ok=True)
        try:
            os.close(os.open(os.path.join(self.private, f"tune-lead.attempt{self.attempt}"),
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        except FileExistsError:
            return False
        return True

    def known_trial(self) -> Optional[Dict[str, Any]]:
        try:
            with open(self.trial_file, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) and isinstance(data.get("point"), dict) else None

    def wait_for_trial(self) -> Dict[str, Any]:
        deadline = time.monotonic() + WAIT_FOR_LEADER_S
        while time.monotonic() < deadline:
            trial = self.known_trial()
            if trial is not None:
                return trial
            time.sleep(0.2)
        raise StudyError(f"no trial in {self.trial_file} after {WAIT_FOR_LEADER_S:.0f} s (the leading rank's agent "
                         "did not write one)")


def seed_of(settings: Dict[str, Any], run_dir: str) -> int:
    """The task's sampler seed: the study's seed and the task's place, so that tasks asking at the
    same moment get different points, and the same task the same point on a rerun."""
    return zlib.crc32(f"{settings.get('seed', 0)}:{os.path.abspath(run_dir)}".encode()) & 0x7FFFFFFF


def ask(folder: str, settings: Dict[str, Any], task: Task):
    """(study, trial): the task's trial, asked now or (a later attempt) the one it already has."""
    import optuna

    from hpclaunch.tune.space import distributions, plain, point

    study = open_study(folder, settings, seed=seed_of(settings, task.run_dir))
    known = task.known_trial()
    if known is not None:
        return study, optuna.trial.Trial(study, int(known["trial_id"])), known
    trial = study.ask(distributions(settings["parameters"]))
    trial.set_user_attr(ATTR_RUN_DIR, os.path.abspath(task.run_dir))
    trial.set_user_attr(ATTR_TASK, task_index(task.run_dir))
    params = {k: plain(v) for k, v in trial.params.items()}
    record = {"number": trial.number, "trial_id": trial._trial_id, "params": params, "point": point(params)}
    write_atomic(task.trial_file, json.dumps(record, sort_keys=True) + "\n", mode=0o600)
    return study, trial, record


def child_env(settings: Dict[str, Any], record: Dict[str, Any], task: Task) -> Dict[str, str]:
    point = record["point"]
    env = dict(os.environ)
    for name, template in settings.get("env", {}).items():
        env[name] = fill(template, point)
    for name, value in point.items():
        if name.startswith("env."):
            env[name[4:]] = value
    env["HPCLAUNCH_SWEEP_POINT"] = json.dumps(point, sort_keys=True)
    env["HPCLAUNCH_SWEEP_INDEX"] = str(task_index(task.run_dir))
    env[REPORT_ENV] = os.path.join(os.path.abspath(task.run_dir), REPORT_FILE)
    env[PRUNED_ENV] = os.path.abspath(task.pruned)
    env[TRIAL_ENV] = str(record["number"])
    return env


_RUNNING: List["Program"] = []  # the program this agent started, stopped if the agent itself fails


class Program:
    """The trial's program. It stays in the task's process group, so whatever stops the task
    (Slurm's step cgroup, the local backend's killpg) stops it too; pruning ends its whole tree."""

    def __init__(self, argv: List[str], env: Dict[str, str]):
        self.proc = subprocess.Popen(argv, env=env)
        _RUNNING.append(self)
        self.outside = False  # a stop signal came from outside (cancel, time limit)
        for sig in _FORWARDED:
            signal.signal(sig, self._forward)

    def _forward(self, signum, _frame) -> None:
        # torchrun signals its child (this agent) only: pass it on (a step-wide signal reaches the
        # program too; a second SIGTERM changes nothing)
        if signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            self.outside = True
        try:
            os.kill(self.proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def wait(self, timeout: float) -> Optional[int]:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> int:
        """SIGTERM to the program and every process it started (DataLoader workers, a shell's
        children), SIGKILL to those left after KILL_AFTER_S; the program's exit code."""
        import psutil

        try:
            tree = [psutil.Process(self.proc.pid)]
            tree += tree[0].children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        for p in tree:
            try:
                p.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(tree, timeout=KILL_AFTER_S)
        for p in alive:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        return self.proc.wait()


def _report(trial, value: float, step: int) -> bool:
    """Report one value; False when the trial ended already (a --resume recorded it interrupted)."""
    try:
        trial.report(value, step)
    except RuntimeError:
        return False
    return True


def run_leader(folder: str, settings: Dict[str, Any], task: Task, command: List[str]) -> int:
    study, trial, record = ask(folder, settings, task)
    try:
        return _run(study, trial, record, settings, task, command)
    except Exception as e:  # the agent's own failure: the trial fails with it, the study goes on
        from optuna.trial import TrialState

        error = f"the trial agent failed: {type(e).__name__}: {e}"
        log(error)
        for program in _RUNNING:
            if program.proc.poll() is None:
                program.stop()
        try:
            trial.set_user_attr(ATTR_ERROR, error[:500])
            study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
        except Exception:
            pass
        return 1


def _run(study, trial, record: Dict[str, Any], settings: Dict[str, Any], task: Task, command: List[str]) -> int:
    from optuna.trial import TrialState

    frozen = study._storage.get_trial(trial._trial_id)
    if frozen.state.is_finished():
        log(f"trial {record['number']} already ended {frozen.state.name}; nothing to run")
        return 0
    log(f"trial {record['number']} of study {settings['name']}: "
        + ", ".join(f"{k}={v}" for k, v in sorted(record["point"].items())))
    values = TrialValues(task.run_dir, settings["metric"])
    reported = set(frozen.intermediate_values)
    program = Program([fill(a, record["point"]) for a in command], child_env(settings, record, task))
    rc: Optional[int] = None
    pruned = False
    while rc is None:
        rc = program.wait(POLL_S)
        for step, value in values.new():
            if step in reported:
                continue  # a requeued attempt repeats the steps after its checkpoint
            reported.add(step)
            if not _report(trial, value, step):
                continue
            if not pruned and rc is None and trial.should_prune():
                pruned = True
                write_atomic(task.pruned, json.dumps({"step": step, "value": value}) + "\n", mode=0o600)
                log(f"trial {record['number']} pruned at step {step} ({settings['metric']} {value}); "
                    "stopping the program")
                rc = program.stop()
    trial.set_user_attr(ATTR_STEPS, values.steps)
    code = rc if rc >= 0 else 128 - rc
    if pruned:
        study.tell(trial, state=TrialState.PRUNED, skip_if_finished=True)
        return 0
    if program.outside:
        log(f"trial {record['number']}: the task was stopped from outside (exit code {code}); the trial stays "
            "running in the study until `hpclaunch tune --resume` runs it again")
        return code
    attempts = int(os.environ.get("HPCLAUNCH_MAX_ATTEMPTS", "1") or 1)
    if code == int(os.environ.get("HPCLAUNCH_REQUEUE_EXIT", "75") or 75) and task.attempt + 1 < attempts:
        log(f"trial {record['number']}: the program asked to be requeued; the next attempt continues the trial")
        return code
    if code == 0 and values.last is not None:
        study.tell(trial, values.last[1], skip_if_finished=True)
        log(f"trial {record['number']} complete: {settings['metric']} {values.last[1]} after {values.steps} steps")
        return 0
    error = (f"exit code {code}" if code else f"the program reported no {settings['metric']} "
             f"(train_entry's epoch records, or lines in {REPORT_FILE})")
    trial.set_user_attr(ATTR_ERROR, error)
    trial.set_user_attr(ATTR_EXIT, code)
    study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)
    log(f"trial {record['number']} failed: {error}")
    return code or 1


def run_follower(task: Task, settings: Dict[str, Any], command: List[str]) -> int:
    record = task.wait_for_trial()
    program = Program([fill(a, record["point"]) for a in command], child_env(settings, record, task))
    while True:
        rc = program.wait(POLL_S)
        if rc is None and os.path.exists(task.pruned):
            program.stop()
            return 0
        if rc is not None:
            return 0 if os.path.exists(task.pruned) else (rc if rc >= 0 else 128 - rc)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hpclaunch.tune.agent")
    p.add_argument("--study", required=True, help="the study's folder")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    run_dir = os.environ.get("HPCLAUNCH_RUN_DIR")
    if not command or not args.study or not run_dir:
        log("needs --study DIR, a command, and HPCLAUNCH_RUN_DIR (it runs in a study's array task: "
            "hpclaunch tune JOB.yaml)")
        return 2
    task = Task(run_dir, int(os.environ.get("HPCLAUNCH_ATTEMPT", "0") or 0))
    try:
        settings = read_settings(args.study)
        if task.lead():
            return run_leader(args.study, settings, task, command)
        return run_follower(task, settings, command)
    except StudyError as e:
        log(str(e))
        return 2


if __name__ == "__main__":
    sys.exit(main())
