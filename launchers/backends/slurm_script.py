"""The Slurm backend's translation of a plan: #SBATCH directives, sbatch's flags, the batch script.

Pure and light (no subprocess, no scheduler): `hpclaunch render` prints what this makes, and the
Slurm and local backends' `prepare` is this. The script is one template tree (templates/job.sbatch.j2):
its header (templates/sbatch_header.j2) is Slurm's own; the rank runtime and the launchers' templates
read the plan as `r` and this request as `s` (the GPU option of a job step).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Optional, Tuple

from hpclaunch.common.version import __version__
from hpclaunch.launchers import modes, templating
from hpclaunch.launchers.plan import Plan

if TYPE_CHECKING:  # base (enum, three dataclasses) is not on the render path
    from hpclaunch.launchers.backends.base import Rerun
from hpclaunch.spec.units import format_time

TEMPLATE = "job.sbatch.j2"


@dataclass(frozen=True)
class SlurmRequest:
    """A plan in Slurm's terms: what sbatch reads from the script, and the script."""

    plan: Plan
    directives: Tuple[Tuple[str, Optional[str]], ...]   # (option, value or None for flags), in order
    extra_directives: Tuple[str, ...]                   # the job's pass-through options (slurm.extra)
    gpu_directive: Optional[str]                        # "--gpus-per-node=4" / "--gres=gpu:4" for steps that need the GPUs
    array: Optional[str]                                # "0-49%10" for a sweep
    launch_text: Optional[str] = None                   # a launcher's own launch section (modes: launch_text)
    script: str = ""                                    # the batch script (filled in by prepare)


def directives(plan: Plan) -> Tuple[Tuple[Tuple[str, Optional[str]], ...], Optional[str]]:
    """The #SBATCH directives of a plan, in the script's order, and the GPU option of its steps."""
    place = plan.placement
    d: list[tuple[str, Optional[str]]] = [
        ("job-name", plan.slug),
        ("nodes", str(plan.nodes + plan.spare_nodes)),
        ("ntasks-per-node", str(plan.step_tasks)),
        ("cpus-per-task", str(plan.step_cpus)),
    ]
    gpu = None
    if plan.gpus_per_node and plan.gpu_request == "gpus-per-node":
        d.append(("gpus-per-node", str(plan.gpus_per_node)))
        gpu = f"--gpus-per-node={plan.gpus_per_node}"
    elif plan.gpus_per_node and plan.gpu_request == "gres":
        d.append(("gres", f"{plan.gres_name}:{plan.gpus_per_node}"))
        gpu = f"--gres={plan.gres_name}:{plan.gpus_per_node}"
    if plan.mem is not None and plan.memory_request == "per-node":
        d.append(("mem", plan.mem))
    d.append(("time", format_time(plan.time_s)))
    for opt, value in (("partition", place.partition), ("account", place.account), ("qos", place.qos),
                       ("constraint", place.constraint)):
        if value is not None:
            d.append((opt, value))
    if place.exclusive:
        d.append(("exclusive", None))
    # A dead node ends the job unless it asked otherwise; with spares (or room to shrink) the job
    # runtime fences the node and starts the step again on the healthy ones (docs/recovery.md).
    if plan.spare_nodes or plan.shrink_to:
        d.append(("no-kill", None))
    d.append(("output", log_path(plan.slug, array=bool(plan.array_size))))
    d.append(("open-mode", "append"))
    # The signal goes to the batch shell only (B:): Slurm's step-wide signal would also reach
    # torchrun, mpirun and the monitor, which have no handler for it and die, and every process
    # of a rank (its wrapper too). The shell passes it on to each rank process once (signal_ranks).
    if plan.warn_signal:
        d.append(("signal", f"B:{plan.requeue_signal}@{plan.requeue_grace}"))
    # A program that requeues itself (`scontrol requeue`) needs a requeueable job, whatever max_attempts says.
    by_program = plan.requeue_by == "program"
    d.append(("requeue", None) if plan.max_attempts > 1 or by_program else ("no-requeue", None))
    return tuple(d), gpu


def prepare(plan: Plan) -> SlurmRequest:
    """The plan as Slurm's request, its batch script rendered."""
    found, gpu = directives(plan)
    builder = modes.get(plan.launcher).launch_text
    request = SlurmRequest(plan=plan, directives=found, extra_directives=plan.placement.extra, gpu_directive=gpu,
                           array=array_spec(plan.array_size, plan.parallelism) if plan.array_size else None,
                           launch_text=builder(plan).rstrip("\n") if builder else None)
    return replace(request, script=render(request))


_ENV = None


def _environment():
    global _ENV
    if _ENV is None:
        _ENV = templating.environment()
    return _ENV


def render(request: SlurmRequest) -> str:
    return _environment().get_template(TEMPLATE).render(r=request.plan, s=request, version=__version__)


def dependency(plan: Plan, more: Tuple[str, ...] = ()) -> list[str]:
    """sbatch's --dependency flag for the plan's dependencies (and `more`, Slurm's own "kind:id" words)."""
    words = [f"{kind}:{job_id}" for kind, job_id in plan.after] + list(more)
    return [f"--dependency={','.join(words)}"] if words else []


def rerun_flags(rerun: "Rerun") -> list[str]:
    """sbatch's flags for a Rerun: the failed nodes left out, the run directory and the attempts so
    far handed to the script (prologue.j2 reads HPCLAUNCH_RESUME_DIR and HPCLAUNCH_ATTEMPT_BASE),
    Slurm's log appended to the run directory's."""
    return [f"--exclude={','.join(rerun.exclude)}",
            f"--export=ALL,HPCLAUNCH_RESUME_DIR={rerun.run_dir},HPCLAUNCH_ATTEMPT_BASE={rerun.attempts_so_far}",
            f"--output={os.path.join(rerun.run_dir, 'logs', 'slurm.out')}"]


def array_spec(n: int, parallelism: Optional[int], offset: int = 0) -> str:
    spec = f"{offset}-{offset + n - 1}" if n > 1 else str(offset)
    return spec + (f"%{parallelism}" if parallelism else "")


def log_path(name_slug: str, array: bool) -> str:
    """The script's own --output: the submit directory, which exists when Slurm opens the log: the
    script given straight to `sbatch` runs too (Slurm creates no folders), and links the log into its
    run directory. `hpclaunch submit` names the run directory's log on sbatch's command line instead
    (run_log, sweep_log)."""
    return f"slurm-{name_slug}-%A_%a.out" if array else f"slurm-{name_slug}-%j.out"


def runs_root(plan: Plan, cwd: str) -> str:
    return plan.runs_root if os.path.isabs(plan.runs_root) else os.path.join(cwd, plan.runs_root)


def run_log(plan: Plan, cwd: str) -> str:
    """Slurm's log in the run directory, which submit has made by the time the job starts."""
    return os.path.join(runs_root(plan, cwd), f"{plan.slug}-%j", "logs", "slurm.out")


def sweep_log(plan: Plan, cwd: str, first_id: str) -> str:
    return os.path.join(runs_root(plan, cwd), f"{plan.slug}-{first_id}", "logs", "slurm-%A_%a.out")
