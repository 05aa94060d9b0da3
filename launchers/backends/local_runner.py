"""Runs one local job: the rendered script as a one-node allocation, attempt after attempt.

Started detached by the local backend (`python -m hpclaunch.launchers.local_runner RUN_DIR`), it
plays Slurm's part: the variables Slurm sets, the time limit (the requeue signal `grace` seconds
before it, SIGTERM at it, SIGKILL after a grace), requeue when the script asks for it, cancel
(SIGTERM to this runner), and the GPUs a job asks for (leased, local_gpus.py; PENDING until free). Its state lives in RUN_DIR/.hpclaunch/local.json, written atomically.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

from hpclaunch.common.atomic import write_atomic
from hpclaunch.launchers.backends import slurm_emulation
from hpclaunch.launchers.backends.local_gpus import try_lease

KILL_WAIT = 10.0


def state_path(run_dir: str) -> str:
    return os.path.join(run_dir, ".hpclaunch", "local.json")


def runner_path(run_dir: str) -> str:
    """Where the backend records the runner it started (pid and start time) before the runner has
    written anything itself: a runner that dies at its start is then known dead, not PENDING."""
    return os.path.join(run_dir, ".hpclaunch", "local-runner.json")


def process_start(pid) -> str | None:
    """The process's start time (clock ticks since boot, /proc/PID/stat): with its pid, what names
    one process for good (a pid is reused); None when there is no such process or it is a zombie."""
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    return None if not fields or fields[0] == "Z" else fields[19]


def alive(pid, start: str | None = None) -> bool:
    """Whether process ``pid`` runs (not a zombie) and, given its start time, is that same process."""
    if not pid:
        return False
    now = process_start(pid)
    return now is not None and (start is None or now == start)


def runner_error(run_dir: str, limit: int = 1 << 14) -> str:
    """Why the runner ended: the last line of its log (logs/runner.log: what its Python printed,
    such as an import error), cut to fit one line."""
    try:
        with open(os.path.join(run_dir, "logs", "runner.log"), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [" ".join(line.split()) for line in tail.splitlines() if line.strip()]
    if not lines:
        return ""
    return lines[-1] if len(lines[-1]) <= 300 else lines[-1][:299] + "\u2026"


def read_state(run_dir: str) -> dict:
    try:
        with open(state_path(run_dir)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def open_private_log(path: str):
    """Append to PATH, creating it 0600 whatever the umask: logs hold the job's output (run
    directories are 0700, their files 0600, as the script's own `umask 077` makes them)."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")


_STATE_LOCK = threading.Lock()  # sweep tasks' threads update local.json too: one read-modify-write at a time


def record_state(run_dir: str, **fields) -> dict:
    with _STATE_LOCK:
        state = read_state(run_dir)
        state.update(fields)
        write_atomic(state_path(run_dir), json.dumps(state, indent=1, sort_keys=True))
        return state


def main(argv: list[str] | None = None) -> int:
    run_dir = (argv or sys.argv[1:])[0]
    try:
        return _main(run_dir)
    except BaseException as e:
        # Whatever stops the runner before it records the job's end ends the job FAILED, with why
        # (the traceback goes to logs/runner.log): nobody waits on a runner that is gone.
        if read_state(run_dir).get("end_time") is None:
            try:
                record_state(run_dir, state="FAILED", end_time=time.time(), exit_code=None,
                             reason=f"the local runner failed: {type(e).__name__}: {e}"[:300])
            except OSError:
                pass
        raise


def _main(run_dir: str) -> int:
    with open(os.path.join(run_dir, ".hpclaunch", "local-job.json")) as f:
        spec = json.load(f)
    spec["run_dir"] = run_dir
    cancelled = threading.Event()
    running: set = set()  # the batch scripts alive now (one, or one per running sweep task)
    lock = threading.Lock()

    def on_term(signum, frame):
        cancelled.set()
        with lock:
            procs = list(running)
        for proc in procs:
            _signal_group(proc, signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    record_state(run_dir, runner_pid=os.getpid(), runner_start=process_start(os.getpid()), state="RUNNING",
                 start_time=time.time())
    array = spec.get("array")
    if array:
        final, rc, attempts = _run_array(run_dir, spec, array, cancelled, running, lock)
    else:
        final, rc, attempts = _run_attempts(run_dir, spec, {}, os.path.join(run_dir, "logs", "slurm.out"),
                                            cancelled, running, lock,
                                            on_attempt=lambda n, pid: record_state(run_dir, attempts=n, script_pid=pid),
                                            on_state=lambda state, reason: record_state(
                                                run_dir, state=state, reason=reason,
                                                **({"start_time": time.time()} if state == "RUNNING" else {})))
    record_state(run_dir, state=final, exit_code=rc if rc is not None and rc >= 0 else 128 - (rc or 0),
           end_time=time.time(), attempts=attempts)
    return 0


def _run_attempts(marker_dir: str, spec: dict, extra_env: dict, log_path: str, cancelled: threading.Event,
                  running: set, lock: threading.Lock, on_attempt=None, on_state=None) -> tuple[str, int | None, int]:
    """One job (or one sweep task): its GPUs leased first, where it asks for some (waiting, PENDING,
    while other local jobs hold them), then attempt after attempt while its script asks to be requeued."""
    gpus = spec.get("gpus")
    if not gpus:
        return _attempts(marker_dir, spec, extra_env, log_path, cancelled, running, lock, on_attempt)
    folder = gpus.get("lease_dir")  # the machine's shared folder, checked at submit; else the user's own
    said = None
    while True:
        stuck: list = []
        lease = try_lease(gpus["ids"], gpus["per_node"], folder, shared=bool(folder), stuck=stuck,
                          what=gpus.get("lease_setting", ""))
        if lease is not None:
            break
        reason = (f"waiting for {gpus['per_node']} GPU(s) of {','.join(gpus['ids'])}: other local jobs hold them"
                  + (f" (any user's, through {folder})" if folder else "")
                  + (f"; lock files no lease can take: {'; '.join(stuck)} \u2014 their owner or an admin must "
                     "remove them" if stuck else ""))
        if on_state and reason != said:  # recorded when it changes: a file planted while it waits is named too
            on_state("PENDING", reason)
            said = reason
        if cancelled.wait(0.5):
            return "CANCELLED", None, 0
    if on_state:
        on_state("RUNNING", "")
    try:
        return _attempts(marker_dir, spec, {**extra_env, **lease.env()}, log_path, cancelled, running, lock,
                         on_attempt)
    finally:
        lease.release()


def _attempts(marker_dir: str, spec: dict, extra_env: dict, log_path: str, cancelled: threading.Event,
              running: set, lock: threading.Lock, on_attempt=None) -> tuple[str, int | None, int]:
    attempts, rc, final = 0, 0, "COMPLETED"
    requeue_marker = os.path.join(marker_dir, ".hpclaunch", "requeue")
    while True:
        if os.path.exists(requeue_marker):
            os.unlink(requeue_marker)
        env = dict(os.environ)
        env.update(spec["env"])
        env.update(extra_env)
        env.update(slurm_emulation.attempt_env(attempts))
        with lock:
            if cancelled.is_set():
                return "CANCELLED", rc, attempts
            with open_private_log(log_path) as out:
                proc = subprocess.Popen(["bash", os.path.join(spec["run_dir"], "script.sbatch")], cwd=spec["cwd"],
                                        env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True)
            running.add(proc)
            # The script leads its own process group (its session): every rank and whatever the
            # ranks start belongs to it, so the group is what cancel and cleanup act on, even
            # after this runner is gone (the backend reads the groups from local.json).
            record_state(spec["run_dir"], pgids=sorted({p.pid for p in running}))
        attempts += 1
        if on_attempt:
            on_attempt(attempts, proc.pid)
        timed_out = _supervise(proc, spec, cancelled)
        rc = proc.returncode
        end_group(proc.pid)  # nothing the job started outlives it (a rank's own child, say)
        with lock:
            running.discard(proc)
            record_state(spec["run_dir"], pgids=sorted({p.pid for p in running}))
        if cancelled.is_set():
            return "CANCELLED", rc, attempts
        if timed_out:
            return "TIMEOUT", rc, attempts
        if os.path.exists(requeue_marker):
            continue
        final = "COMPLETED" if rc == 0 else "FAILED"
        return final, rc, attempts


def _run_array(run_dir: str, spec: dict, array: dict, cancelled: threading.Event, running: set,
               lock: threading.Lock) -> tuple[str, int | None, int]:
    """A sweep as Slurm runs a job array on one node: task after task, at most `parallelism` at
    once, each with its own array task id (slurm_emulation.array_task_env), log (logs/slurm-<job>_<task>.out) and attempts."""
    size, parallelism = int(array["size"]), max(1, int(array["parallelism"]))
    job_id = spec["job_id"]
    states: dict[str, str] = {}
    results: dict[int, tuple] = {}
    next_task = iter(range(size))

    def record(task: int, state: str) -> None:
        with lock:
            states[str(task)] = state
            snapshot = dict(states)
        record_state(run_dir, tasks=snapshot)

    def worker() -> None:
        while not cancelled.is_set():
            with lock:
                task = next(next_task, None)
            if task is None:
                return
            record(task, "RUNNING")
            extra = slurm_emulation.array_task_env(job_id, task, size)
            task_dir = os.path.join(run_dir, f"task{task}")
            result = _run_attempts(task_dir, spec, extra, os.path.join(run_dir, "logs", f"slurm-{job_id}_{task}.out"),
                                   cancelled, running, lock, on_state=lambda state, _reason, t=task: record(t, state))
            results[task] = result
            record(task, result[0])

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(parallelism, size))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if cancelled.is_set():
        with lock:
            for task in range(size):
                states.setdefault(str(task), "CANCELLED")
            snapshot = dict(states)
        record_state(run_dir, tasks=snapshot)
        final = "CANCELLED"
    else:
        finals = {r[0] for r in results.values()}
        final = "COMPLETED" if finals == {"COMPLETED"} else ("TIMEOUT" if finals == {"COMPLETED", "TIMEOUT"}
                                                              or finals == {"TIMEOUT"} else "FAILED")
    codes = [r[1] for r in results.values() if r[1] is not None]
    rc = next((c for c in codes if c != 0), 0)
    return final, rc, max((r[2] for r in results.values()), default=0)


def group_alive(pgid: int) -> bool:
    """Whether any process of the group is left (a zombie leader not counted: it is reaped)."""
    try:
        os.killpg(int(pgid), 0)
        return True
    except (ProcessLookupError, PermissionError, ValueError, OSError):
        return False


def end_group(pgid: int, wait: float = 2.0) -> None:
    """SIGTERM to what is left of a process group, SIGKILL after `wait` seconds."""
    if not group_alive(pgid):
        return
    try:
        os.killpg(int(pgid), signal.SIGTERM)
    except OSError:
        return
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return
        time.sleep(0.05)
    try:
        os.killpg(int(pgid), signal.SIGKILL)
    except OSError:
        pass


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


if __name__ == "__main__":
    raise SystemExit(main())
