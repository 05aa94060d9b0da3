"""The local backend: the same rendered script, run on this machine as a one-node allocation.

It sets the variables Slurm would (job id, node list, task counts, restart count) and
HPCLAUNCH_LOCAL=1, which makes the script's `hl_step` run tasks itself instead of srun.
A detached runner process (local_runner.py) supervises attempts, the time limit and cancel.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from typing import Callable, List, Optional, Sequence

from hpclaunch.common.atomic import make_private_dirs, write_atomic
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.launchers.backends.base import Backend, JobRef, JobStatus, State
from hpclaunch.launchers.backends.local_gpus import checked_lease_dir, machine_gpus, shared_setting
from hpclaunch.launchers.backends.local_runner import (alive, end_group, group_alive, open_private_log, process_start,
                                                       read_state, record_state, runner_error, runner_path)
from hpclaunch.launchers.backends.slurm import submit_env
from hpclaunch.launchers.request import BatchRequest


class LocalBackend(Backend):
    name = "local"
    _gpus_memo: Optional[tuple] = None  # (request, its GPU list): check() and start() of one submit

    def _machine_gpus(self, request: BatchRequest) -> Optional[List[str]]:
        """The machine's GPUs for a GPU job (None: not a GPU job, or unknown), looked up once per
        submit: where only NVML can count them, each lookup is an nvmlInit (up to ~100 ms)."""
        if not request.gpus_per_node:
            return None
        memo = self._gpus_memo
        if memo is None or memo[0] is not request:
            memo = self._gpus_memo = (request, machine_gpus(os.environ))
        return memo[1]

    def cluster_name(self) -> str:
        return "local:" + os.uname().nodename  # gethostname(), without importing socket

    def check(self, request: BatchRequest, args: Sequence[str], sources) -> None:
        if any(a.startswith("--dependency=") for a in args):
            raise HpclaunchError("--after: dependencies need Slurm \u2014 submit with --backend slurm")
        if request.container is not None and request.container.runtime == "pyxis":
            raise HpclaunchError(f"{sources.of('container')}: container: pyxis runs containers through Slurm's "
                                 "srun — submit with --backend slurm, or use a profile whose "
                                 "container.runtime is apptainer or podman")
        if request.nodes != 1:
            raise HpclaunchError(f"{sources.of('resources.nodes')}: resources.nodes: the local backend runs one node "
                                 f"({request.nodes}) \u2014 use -o resources.nodes=1, "
                                 "or submit to Slurm with --backend slurm")
        gpus = self._machine_gpus(request)
        if gpus is not None:
            checked_lease_dir(profile_dir=request.gpu_lease_dir, profile=request.profile_name)
        if gpus is not None and len(gpus) < request.gpus_per_node:
            raise HpclaunchError(f"{sources.of('resources.gpus_per_node')}: resources.gpus_per_node: "
                                 f"{request.gpus_per_node} asked, this machine has {len(gpus)} GPU(s) "
                                 f"({','.join(gpus) or 'CUDA_VISIBLE_DEVICES=' + os.environ.get('CUDA_VISIBLE_DEVICES', '')}"
                                 ") \u2014 ask for fewer, or set HPCLAUNCH_LOCAL_GPUS to the GPUs local jobs may use")

    def preflight(self, request: BatchRequest, script: str, args: Sequence[str], sources,
                  test_only: bool = False) -> Optional[str]:
        return "it would start on this machine at once" if test_only else None

    def queue(self, request: BatchRequest, script: str, args: Sequence[str], *, cwd: str,
              new_id: Callable[[], str]) -> List[tuple]:
        """Nothing to hold: the job starts at release(). Its id comes from the registry's counter,
        which restarts in every registry (HPCLAUNCH_HOME): an id whose run directory another
        registry's job holds is skipped, and the free one is claimed by an exclusive mkdir, so two
        submitters in one folder never share (or rename) a run directory."""
        root = request.runs_root if os.path.isabs(request.runs_root) else os.path.join(cwd, request.runs_root)
        make_private_dirs(root)
        for _ in range(10_000):
            job_id = new_id()
            try:
                os.mkdir(os.path.join(root, f"{request.slug}-{job_id}"), 0o700)
            except FileExistsError:
                continue
            return [(job_id, request.array_size)]
        raise HpclaunchError(f"{root}: 10000 run directories named {request.slug}-<id> exist — "
                             "move old runs away or set runs_root")

    def release(self, ref: JobRef, request: BatchRequest, *, cwd: str) -> None:
        self.start(request, ref.run_dir, ref.job_id, cwd)

    def start(self, request: BatchRequest, run_dir: str, job_id: str, cwd: str) -> int:
        node_cpus = str(request.tasks_per_node * request.cpus_per_task)
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
            # sbatch's: Open MPI's mpirun reads the allocation from SLURM_NODELIST and these
            "SLURM_TASKS_PER_NODE": str(request.tasks_per_node),
            "SLURM_JOB_CPUS_PER_NODE": node_cpus,
            "SLURM_CPUS_ON_NODE": node_cpus,
            "SLURM_CPUS_PER_TASK": str(request.cpus_per_task),
            "SLURM_SUBMIT_DIR": cwd,
            "SLURM_CLUSTER_NAME": "local",
            "SLURM_JOB_PARTITION": "local",
        }
        spec = {
            "env": env,
            "cwd": cwd,
            "time_limit_s": request.time_s,
            "grace_s": request.requeue_grace,
            "requeue_signal": request.requeue_signal if request.warn_signal else None,
        }
        if request.array_size:
            spec["array"] = {"size": request.array_size, "parallelism": self.array_parallelism(request)}
        gpus = self._machine_gpus(request)
        if gpus is not None:  # leased by the runner; an unknown machine's jobs get no GPU variables
            # checked in check(); the runner leases there
            shared, what = shared_setting(profile_dir=request.gpu_lease_dir, profile=request.profile_name)
            spec["gpus"] = {"ids": gpus, "per_node": request.gpus_per_node,
                            **({"lease_dir": shared, "lease_setting": what} if shared else {})}
        write_atomic(os.path.join(run_dir, ".hpclaunch", "local-job.json"), json.dumps(spec, indent=1))
        runner_env = submit_env()
        with open_private_log(os.path.join(run_dir, "logs", "runner.log")) as log:
            proc = subprocess.Popen([sys.executable, "-m", "hpclaunch.launchers.backends.local_runner", run_dir],
                                    cwd=cwd, env=runner_env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        write_atomic(runner_path(run_dir), json.dumps({"pid": proc.pid, "start": process_start(proc.pid)}))
        return proc.pid

    @staticmethod
    def array_parallelism(request: BatchRequest) -> int:
        """How many sweep tasks run at once here: the sweep's parallelism, capped by what fits on
        this one node side by side (CPUs, and GPUs where tasks ask for them), as Slurm would."""
        fit = max(1, request.node_cpus // max(1, request.tasks_per_node * request.cpus_per_task))
        if request.gpus_per_node:
            fit = min(fit, max(1, request.node_gpus // request.gpus_per_node))
        return max(1, min(request.parallelism or request.array_size, fit, request.array_size))

    def status(self, ref: JobRef) -> JobStatus:
        run_dir = ref.run_dir
        st = read_state(run_dir)
        if not st:
            runner = _runner(run_dir)
            if runner and not alive(runner.get("pid"), runner.get("start")):
                # The runner died before writing a word (its Python could not even import it).
                return JobStatus(State.FAILED, None, "", os.uname().nodename,
                                 _died(run_dir, "the local runner died before the job started"), source="local")
            return JobStatus(State.PENDING, source="local")
        state = st.get("state", "PENDING")
        reason = st.get("reason", "") if state in ("PENDING", "FAILED") else ""
        if state in ("RUNNING", "PENDING") and not alive(st.get("runner_pid"), st.get("runner_start")):
            # The runner died without a word (kill -9): the job runs while its processes do.
            if any(group_alive(g) for g in st.get("pgids", [])):
                reason = "the local runner died; the job's processes still run (hpclaunch cancel stops them)"
            else:
                state = "FAILED"
                reason = _died(run_dir, "the local runner died")
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
        # the name the job script's ranks.tsv and the monitor's logs give this host ($(hostname), the
        # kernel's node name), so "RUNNING on X" names the same host before the ranks start as after
        out = JobStatus(state, st.get("exit_code"), elapsed, os.uname().nodename, reason, int(st.get("attempts", 1) or 1),
                        "local", tasks)
        if out.final:
            out.end_time = st.get("end_time")  # the runner's record: the registry keeps when it ended, not when asked
        return out

    def cancel(self, ref: JobRef) -> None:
        st = read_state(ref.run_dir)
        pid = st.get("runner_pid")
        if pid and alive(pid, st.get("runner_start")):
            os.kill(int(pid), signal.SIGTERM)  # the runner stops the groups and records CANCELLED
            return
        # No runner (killed): stop the job's process groups here and record the ending ourselves.
        groups = [g for g in st.get("pgids", []) if group_alive(g)]
        for g in groups:
            end_group(g)
        if groups and st.get("state") == "RUNNING":
            record_state(ref.run_dir, state="CANCELLED", end_time=time.time(), exit_code=None, pgids=[])


def _spec(run_dir: str) -> dict:
    try:
        with open(os.path.join(run_dir, ".hpclaunch", "local-job.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _runner(run_dir: str) -> dict:
    """The runner start() recorded ({pid, start}), or {}."""
    try:
        with open(runner_path(run_dir)) as f:
            found = json.load(f)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _died(run_dir: str, what: str) -> str:
    error = runner_error(run_dir)
    return f"{what}: {error}" if error else f"{what} (logs/runner.log is empty)"


def _fmt(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:d}:{s // 60 % 60:02d}:{s % 60:02d}"
