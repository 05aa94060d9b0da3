"""The submitit backend: Python callables run through submitit, on Slurm (or this machine).

Its parameters come from a plan through the Slurm backend's translation (slurm_script.directives,
one translation, two consumers), so a callable submitted through submitit asks for exactly what
the same job file would. Its submissions go through submitit itself, the one side entrance
(hpclaunch.runs.functions: submit_function, map_function, executor): a pickled call is not a job
file, so this backend declares no Capability.JOB_FILES and refuses prepare/queue. Its jobs are
Slurm jobs, recorded under this backend's name and followed and cancelled through the Slurm
backend; submitit requeues them itself, so they are not resubmitted around failed nodes.

The runs layer (hpclaunch.runs.functions) builds the request from a profile and keyword settings
and owns the executor, the submission and the registry row.
"""
from __future__ import annotations

import math
import shlex
from typing import Any, List, Optional, Sequence

from hpclaunch.common.errors import HpclaunchError, InvalidInput, Problem
from hpclaunch.launchers.backends.base import Backend, JobRef, JobStatus
from hpclaunch.launchers.backends.slurm import SlurmBackend
from hpclaunch.launchers.backends.slurm_script import directives
from hpclaunch.launchers.plan import Plan
from hpclaunch.spec.job import SIGNAL_EARLY_S

# sbatch directives of the plan that have a submitit parameter of their own.
_DIRECT = {"partition": "slurm_partition", "account": "slurm_account", "qos": "slurm_qos",
           "constraint": "slurm_constraint", "mem": "slurm_mem", "gpus-per-node": "slurm_gpus_per_node",
           "gres": "slurm_gres"}


def exports(request: Plan) -> list[str]:
    """The plan's environment as the shell lines a batch script would run."""
    return [f"export {name}={shlex.quote(str(value))}" for name, value in request.env]


def parameters(request: Plan, cluster: str, sources, signal_chosen: bool) -> tuple[dict, dict]:
    """(AutoExecutor.update_parameters kwargs, AutoExecutor(...) kwargs) for `cluster` slurm|local."""
    minutes = max(1, math.ceil(request.time_s / 60))
    setup = list(request.setup) + exports(request)
    if cluster != "slurm":
        # LocalExecutor: one node; it knows the time limit, task count and setup lines only.
        if request.nodes != 1:
            raise InvalidInput([Problem(sources.of("resources.nodes"), "resources.nodes",
                                        "without Slurm, submitit runs on this machine only", request.nodes,
                                        "use nodes=1, or run where sbatch and SLURM_CONF are set")])
        return ({"timeout_min": minutes, "tasks_per_node": request.tasks_per_node,
                 "cpus_per_task": request.cpus_per_task, "gpus_per_node": request.gpus_per_node,
                 "name": request.slug, "local_setup": setup}, {})
    if request.requeue_grace + SIGNAL_EARLY_S > request.time_s:
        # submitit signals every Slurm job (its timeout/preemption handler), and Slurm may send a signal up
        # to a minute early: at the job's start, submitit takes it for a preemption and requeues a plain
        # callable again and again (a requeue on preemption uses up no attempt).
        least = request.requeue_grace + SIGNAL_EARLY_S
        raise InvalidInput([Problem(sources.of("resources.time"), "resources.time",
                                    f"submitit signals every job {request.requeue_grace} s before its time limit, "
                                    f"and Slurm may send it up to {SIGNAL_EARLY_S} s earlier: with a time limit of "
                                    f"{request.time_s} s it can come at the start, which submitit takes for a "
                                    "preemption and requeues", request.time_s,
                                    f"use a time limit of at least {least} s (time=\"{-(-least // 60)}\"), or a "
                                    "smaller requeue_grace")])
    p: dict[str, Any] = {
        "name": request.slug,
        "timeout_min": minutes,
        "nodes": request.nodes,
        "tasks_per_node": request.tasks_per_node,
        "cpus_per_task": request.cpus_per_task,
        "slurm_signal_delay_s": request.requeue_grace,
    }
    for opt, value in directives(request)[0]:
        if opt in _DIRECT:
            key = _DIRECT[opt]
            p[key] = int(value) if key == "slurm_gpus_per_node" else value
        elif opt == "exclusive":
            p["slurm_exclusive"] = True
    extra: dict[str, Any] = {}
    for opt in request.placement.extra:
        name, eq, value = opt[2:].partition("=")
        extra[name] = value if eq else True
    if signal_chosen:
        # The profile or the caller chose the signal: submitit must send and catch that one.
        # Otherwise submitit's USR2 stays (NCCL swallows USR1: NVIDIA/nccl#704).
        extra["signal"] = f"{request.requeue_signal}@{request.requeue_grace}"
        setup.append(f"export SUBMITIT_PREEMPT_SIGNAL={request.requeue_signal}")
    if extra:
        p["slurm_additional_parameters"] = extra
    if setup:
        p["slurm_setup"] = setup
    return p, {"slurm_max_num_timeout": max(0, request.max_attempts - 1)}


def executor_cluster(cluster: Optional[str]) -> str:
    """submitit's executor (its own words): `cluster` as given, else "slurm" where a Slurm cluster is
    configured here, else "local" (one node, this machine)."""
    return cluster or ("slurm" if SlurmBackend.detected() else "local")


def recorded(cluster: str) -> bool:
    """Whether a submission through that executor is a job of this backend (the registry's): a
    LocalExecutor's run is submitit's alone."""
    return cluster == "slurm"


class SubmititBackend(Backend):
    name = "submitit"
    capabilities = frozenset()   # no job files, no --after, no resubmission (submitit requeues its own)

    def __init__(self) -> None:
        self._slurm = SlurmBackend()

    @classmethod
    def unavailable(cls) -> Optional[str]:
        return SlurmBackend.unavailable()

    def cluster_name(self) -> str:
        return self._slurm.cluster_name()

    def _refuse(self, *args: Any, **kwargs: Any):
        raise HpclaunchError("--backend submitit: it runs Python callables (hpclaunch.submit_function), not "
                             "job files \u2014 submit a job file with --backend slurm")

    prepare = queue = release = _refuse

    def status(self, ref: JobRef) -> JobStatus:
        return self._slurm.status(ref)

    def statuses(self, refs: Sequence[JobRef]) -> List[JobStatus]:
        return self._slurm.statuses(refs)

    def cancel(self, ref: JobRef) -> None:
        self._slurm.cancel(ref)
