"""The local backend: the same rendered script, run on this machine as a one-node allocation.

It sets the variables Slurm would (job id, node list, task counts, restart count) and
HPCLAUNCH_LOCAL=1, which makes the script's `hl_step` run tasks itself instead of srun.
A detached runner process (local_runner.py) supervises attempts, the time limit and cancel.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

from hpclaunch.common.atomic import write_atomic
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.spec.units import parse_time_seconds

from hpclaunch.launchers.backends.local_runner import open_private_log, read_state
from hpclaunch.launchers.backends.slurm import JobStatus, submit_env


class LocalBackend:
    name = "local"

    def cluster_name(self) -> str:
        return "local:" + socket.gethostname()

    def check(self, resolved) -> None:
        if resolved.job.resources.nodes != 1:
            raise HpclaunchError(f"{resolved.job_path}: resources.nodes: the local backend runs one node "
                                 f"({resolved.job.resources.nodes}) \u2014 use -o resources.nodes=1, "
                                 "or submit to Slurm with --backend slurm")

    def start(self, resolved, request, run_dir: str, job_id: str, registry_key: int, registry_path: str,
              cwd: str) -> int:
        job = resolved.job
        env = {
            "HPCLAUNCH_LOCAL": "1",
            "SLURM_JOB_ID": job_id,
            "SLURM_JOBID": job_id,
            "SLURM_JOB_NAME": request.slug,
            "SLURM_JOB_NODELIST": "localhost",
            "SLURM_NODELIST": "localhost",
            "SLURM_JOB_NUM_NODES": "1",
            "SLURM_NNODES": "1",
            "SLURM_NTASKS": str(request.tasks_per_node),
            "SLURM_NTASKS_PER_NODE": str(request.tasks_per_node),
            "SLURM_CPUS_PER_TASK": str(request.cpus_per_task),
            "SLURM_SUBMIT_DIR": cwd,
            "SLURM_CLUSTER_NAME": "local",
            "SLURM_JOB_PARTITION": "local",
        }
        spec = {
            "env": env,
            "cwd": cwd,
            "time_limit_s": parse_time_seconds(job.resources.time),
            "grace_s": job.requeue.grace,
            "requeue_signal": job.requeue.signal if job.requeue.max_attempts > 1 else None,
            "registry": registry_path,
            "registry_key": registry_key,
        }
        if request.array_size:
            spec["array"] = {"size": request.array_size, "parallelism": self.array_parallelism(resolved, request)}
        write_atomic(os.path.join(run_dir, ".hpclaunch", "local-job.json"), json.dumps(spec, indent=1))
        runner_env = submit_env()
        with open_private_log(os.path.join(run_dir, "logs", "runner.log")) as log:
            proc = subprocess.Popen([sys.executable, "-m", "hpclaunch.launchers.backends.local_runner", run_dir],
                                    cwd=cwd, env=runner_env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        return proc.pid

    @staticmethod
    def array_parallelism(resolved, request) -> int:
        """How many sweep tasks run at once here: the sweep's parallelism, capped by what fits on
        this one node side by side (CPUs, and GPUs where tasks ask for them), as Slurm would."""
        node, r = resolved.profile.profile.node, resolved.job.resources
        fit = max(1, node.cpus // max(1, request.tasks_per_node * request.cpus_per_task))
        if r.gpus_per_node:
            fit = min(fit, max(1, node.gpus // r.gpus_per_node))
        return max(1, min(request.parallelism or request.array_size, fit, request.array_size))

    def status(self, run_dir: str) -> JobStatus:
        st = read_state(run_dir)
        if not st:
            return JobStatus("PENDING", source="local")
        state = st.get("state", "PENDING")
        if state == "RUNNING" and not _alive(st.get("runner_pid")):
            state = "FAILED"  # the runner died without a word: say so rather than "running" forever
        start = st.get("start_time")
        end = st.get("end_time") or time.time()
        elapsed = _fmt(end - start) if start else ""
        tasks: dict[str, int] = {}
        if "tasks" in st or os.path.exists(os.path.join(run_dir, ".hpclaunch", "local-job.json")):
            size = (_spec(run_dir).get("array") or {}).get("size", 0)
            if size:
                seen = st.get("tasks", {})
                for task in range(size):
                    s = seen.get(str(task), "PENDING")
                    if s == "RUNNING" and state != "RUNNING":
                        s = state  # the runner ended (or died) while this task ran
                    tasks[s] = tasks.get(s, 0) + 1
        return JobStatus(state, st.get("exit_code"), elapsed, "localhost", "", int(st.get("attempts", 1) or 1),
                         "local", tasks)

    def cancel(self, run_dir: str) -> None:
        st = read_state(run_dir)
        pid = st.get("runner_pid")
        if not pid or not _alive(pid):
            return
        os.kill(int(pid), signal.SIGTERM)


def _spec(run_dir: str) -> dict:
    try:
        with open(os.path.join(run_dir, ".hpclaunch", "local-job.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _alive(pid) -> bool:
    if not pid:
        return False
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except (OSError, ValueError):
        return False


def _fmt(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}"
