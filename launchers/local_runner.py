"""Runs one local job: the rendered script as a one-node allocation, attempt after attempt.

Started detached by the local backend (`python -m hpclaunch.launchers.local_runner RUN_DIR`), it
plays Slurm's part: the variables Slurm sets, the time limit (the requeue signal `grace` seconds
before it, SIGTERM at it, SIGKILL after a grace), requeue when the script asks for it, and cancel
(SIGTERM to this runner). Its state lives in RUN_DIR/.hpclaunch/local.json, written atomically.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

from hpclaunch.atomic import write_atomic

KILL_WAIT = 10.0


def state_path(run_dir: str) -> str:
    return os.path.join(run_dir, ".hpclaunch", "local.json")


def read_state(run_dir: str) -> dict:
    try:
        with open(state_path(run_dir)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _write(run_dir: str, **fields) -> dict:
    state = read_state(run_dir)
    state.update(fields)
    write_atomic(state_path(run_dir), json.dumps(state, indent=1, sort_keys=True))
    return state


def main(argv: list[str] | None = None) -> int:
    run_dir = (argv or sys.argv[1:])[0]
    with open(os.path.join(run_dir, ".hpclaunch", "local-job.json")) as f:
        spec = json.load(f)
    cancelled = threading.Event()
    current: dict = {"proc": None}

    def on_term(signum, frame):
        cancelled.set()
        proc = current["proc"]
        if proc is not None:
            _signal_group(proc, signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    _write(run_dir, runner_pid=os.getpid(), state="RUNNING", start_time=time.time())

    attempts, rc, final = 0, 0, "COMPLETED"
    while True:
        requeue_marker = os.path.join(run_dir, ".hpclaunch", "requeue")
        if os.path.exists(requeue_marker):
            os.unlink(requeue_marker)
        env = dict(os.environ)
        env.update(spec["env"])
        env["SLURM_RESTART_COUNT"] = str(attempts)
        with open(os.path.join(run_dir, "logs", "slurm.out"), "ab") as out:
            proc = subprocess.Popen(["bash", os.path.join(run_dir, "script.sbatch")], cwd=spec["cwd"], env=env,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        current["proc"] = proc
        attempts += 1
        _write(run_dir, attempts=attempts, script_pid=proc.pid)
        timed_out = _supervise(proc, spec, cancelled)
        rc = proc.returncode
        current["proc"] = None
        if cancelled.is_set():
            final = "CANCELLED"
            break
        if timed_out:
            final = "TIMEOUT"
        if os.path.exists(requeue_marker) and not timed_out:
            continue
        if timed_out:
            break
        final = "COMPLETED" if rc == 0 else "FAILED"
        break
    _write(run_dir, state=final, exit_code=rc if rc is not None and rc >= 0 else 128 - (rc or 0),
           end_time=time.time(), attempts=attempts)
    _update_registry(spec, final, rc, attempts)
    return 0


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _supervise(proc: subprocess.Popen, spec: dict, cancelled: threading.Event) -> bool:
    """Wait for the script, sending the requeue signal and the time limit as Slurm would."""
    start = time.monotonic()
    limit = spec["time_limit_s"]
    warn_at = limit - spec["grace_s"] if spec["requeue_signal"] else None
    warned = terminated = False
    term_at = None
    while True:
        try:
            proc.wait(timeout=0.2)
            return terminated
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic() - start
        if warn_at is not None and not warned and now >= warn_at:
            warned = True
            try:  # like --signal=B:SIG: to the batch shell only
                os.kill(proc.pid, getattr(signal, "SIG" + spec["requeue_signal"]))
            except ProcessLookupError:
                pass
        if not terminated and now >= limit:
            terminated = True
            term_at = time.monotonic()
            _signal_group(proc, signal.SIGTERM)
        if (terminated or cancelled.is_set()) and term_at is None:
            term_at = time.monotonic()
        if term_at is not None and time.monotonic() - term_at > KILL_WAIT:
            _signal_group(proc, signal.SIGKILL)


def _update_registry(spec: dict, state: str, rc: int | None, attempts: int) -> None:
    try:
        from hpclaunch.registry import Registry
        reg = Registry(spec.get("registry"))
        reg.update_state(int(spec["registry_key"]), state, exit_code=rc, attempts=attempts)
        reg.close()
    except Exception as e:  # the run directory still holds the truth
        print(f"hpclaunch local runner: could not update the registry: {e}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
