"""The local backend: the Slurm backend's script, run on this machine as a one-node allocation.

It runs it under a Slurm emulation (slurm_emulation.py: the variables Slurm would set, and
HPCLAUNCH_LOCAL=1, which makes the script's `hl_step` run tasks itself instead of srun).
A detached runner process (local_runner.py) supervises attempts, the time limit and cancel.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from typing import TYPE_CHECKING, Callable, List, Optional

from hpclaunch.common.atomic import make_private_dirs, write_atomic
from hpclaunch.common.errors import HpclaunchError
from hpclaunch.launchers.backends.base import Backend, Capability, JobRef, JobStatus, State
from hpclaunch.launchers.backends.local_gpus import checked_lease_dir, machine_gpus, shared_setting
from hpclaunch.launchers.backends.local_runner import (alive, end_group, group_alive, open_private_log, process_start,
                                                       read_state, record_state, runner_error, runner_path)
from hpclaunch.launchers.backends import slurm_emulation
from hpclaunch.launchers.backends.slurm import scripts, submit_env

if TYPE_CHECKING:
    from hpclaunch.launchers.backends.slurm_script import SlurmRequest
    from hpclaunch.launchers.plan import Plan


class LocalBackend(Backend):
    name = "local"
    capabilities = frozenset({Capability.JOB_FILES})

    @classmethod
    def detected(cls) -> bool:
        return True  # this machine: where no scheduler is configured
    _gpus_memo: Optional[tuple] = None  # (plan, its GPU list): check() and start() of one submit

    def _machine_gpus(self, plan: Plan) -> Optional[List[str]]:
        """The machine's GPUs for a GPU job (None: not a GPU job, or unknown), looked up once per
        submit: where only NVML can count them, each lookup is an nvmlInit (up to ~100 ms)."""
        if not plan.gpus_per_node:
            return None
        memo = self._gpus_memo
        if memo is None or memo[0] is not plan:
            memo = self._gpus_memo = (plan, machine_gpus(os.environ))
        return memo[1]

    def cluster_name(self) -> str:
        return "local:" + os.uname().nodename  # gethostname(), without importing socket

    def prepare(self, plan: Plan) -> SlurmRequest:
        """The Slurm backend's script: this backend runs it as Slurm would (its Slurm emulation)."""
        return scripts().prepare(plan)

    def check(self, request: SlurmRequest, sources) -> None:
        plan = request.plan
        if plan.container is not None and plan.container.runtime == "pyxis":
            raise HpclaunchError(f"{sources.of('container')}: container: pyxis runs containers through Slurm's "
                                 "srun — submit with --backend slurm, or use a profile whose "
                                 "container.runtime is apptainer or podman")
        if plan.nodes != 1:
            raise HpclaunchError(f"{sources.of('resources.nodes')}: resources.nodes: the local backend runs one node "
                                 f"({plan.nodes}) \u2014 use -o resources.nodes=1, "
                                 "or submit to Slurm with --backend slurm")
        gpus = self._machine_gpus(plan)
        if gpus is not None:
            checked_lease_dir(profile_dir=plan.gpu_lease_dir, profile=plan.profile_name)
        if gpus is not None and len(gpus) < plan.gpus_per_node:
            raise HpclaunchError(f"{sources.of('resources.gpus_per_node')}: resources.gpus_per_node: "
                                 f"{plan.gpus_per_node} asked, this machine has {len(gpus)} GPU(s) "
                                 f"({','.join(gpus) or 'CUDA_VISIBLE_DEVICES=' + os.environ.get('CUDA_VISIBLE_DEVICES', '')}"
                                 ") \u2014 ask for fewer, or set HPCLAUNCH_LOCAL_GPUS to the GPUs local jobs may use")

    def preflight(self, request: SlurmRequest, sources, test_only: bool = False) -> Optional[str]:
        return "it would start on this machine at once" if test_only else None

    def queue(self, request: SlurmRequest, *, cwd: str, new_id: Callable[[], str]) -> List[tuple]:
        """Nothing to hold: the job starts at release(). Its id comes from the registry's counter,
        which restarts in every registry (HPCLAUNCH_HOME): an id whose run directory another
        registry's job holds is skipped, and the free one is claimed by an exclusive mkdir, so two
        submitters in one folder never share (or rename) a run directory."""
        plan = request.plan
        root = scripts().runs_root(plan, cwd)
        make_private_dirs(root)
        for _ in range(10_000):
            job_id = new_id()
            try:
                os.mkdir(os.path.join(root, f"{plan.slug}-{job_id}"), 0o700)
            except FileExistsError:
                continue
            return [(job_id, plan.array_size)]
        raise HpclaunchError(f"{root}: 10000 run directories named {plan.slug}-<id> exist — "
                             "move old runs away or set runs_root")

    def release(self, ref: JobRef, request: SlurmRequest, *, cwd: str) -> None:
        self.start(request.plan, ref.run_dir, ref.job_id, cwd)

    def start(self, plan: Plan, run_dir: str, job_id: str, cwd: str) -> int:
        env = slurm_emulation.job_env(job_id, plan.slug, plan.tasks_per_node, plan.cpus_per_task, cwd)
        spec = {
            "env": env,
            "job_id": job_id,
            "cwd": cwd,
            "time_limit_s": plan.time_s,
            "grace_s": plan.requeue_grace,
            "requeue_signal": plan.requeue_signal if plan.warn_signal else None,
        }
        if plan.array_size:
            spec["array"] = {"size": plan.array_size, "parallelism": self.array_parallelism(plan)}
        gpus = self._machine_gpus(plan)
        if gpus is not None:  # leased by the runner; an unknown machine's jobs get no GPU variables
            # checked in check(); the runner leases there
            shared, what = shared_setting(profile_dir=plan.gpu_lease_dir, profile=plan.profile_name)
            spec["gpus"] = {"ids": gpus, "per_node": plan.gpus_per_node,
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
    def array_parallelism(plan: Plan) -> int:
        """How many sweep tasks run at once here: the sweep's parallelism, capped by what fits on
        this one node side by side (CPUs, and GPUs where tasks ask for them), as Slurm would."""
        fit = max(1, plan.node_cpus // max(1, plan.tasks_per_node * plan.cpus_per_task))
        if plan.gpus_per_node:
            fit = min(fit, max(1, plan.node_gpus // plan.gpus_per_node))
        return max(1, min(plan.parallelism or plan.array_size, fit, plan.array_size))

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
