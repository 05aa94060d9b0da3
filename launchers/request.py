"""The batch request: everything a script needs, computed from job + profile, nothing rendered yet.

Rendering is a pipeline of pure steps (TorchX's dry-run shape): Resolved job ->
BatchRequest (this module) -> script text (render.py). Only a backend writes files
or calls sbatch.
"""
from __future__ import annotations

import json
import re
from typing import Optional, Tuple

from dataclasses import dataclass, field
from hpclaunch.launchers.container import ContainerPlan, container_plan
from hpclaunch.spec.job import DEFAULT_GRACE_S, signal_grace
from hpclaunch.spec.loading import Resolved
from hpclaunch.spec.sweep import fill, points
from hpclaunch.spec.units import format_time, parse_time_seconds

REQUEUE_EXIT = 75  # EX_TEMPFAIL: "save done, run me again"

_SLUG_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def slug(name: str) -> str:
    """A directory- and #SBATCH-safe form of a job name (the exact name travels in the environment)."""
    text = _SLUG_BAD.sub("_", name).strip("._")
    return (text or "job")[:64]


@dataclass(frozen=True)
class BatchRequest:
    job_name: str                      # exact, any characters
    slug: str                          # safe form, for --job-name and directories
    profile_name: str
    launcher: str
    directives: Tuple[Tuple[str, Optional[str]], ...]   # (option, value or None for flags), in order
    extra_directives: Tuple[str, ...]
    nodes: int
    tasks_per_node: int
    cpus_per_task: int
    gpus_per_node: int
    command: Tuple[str, ...]
    # What backends check and schedule with: the request is all they see of the job.
    time_s: int
    mem: Optional[str]
    partition: Optional[str]
    account: Optional[str]
    qos: Optional[str]
    requeue_grace: int
    node_cpus: int                     # the profile's node shape
    node_gpus: int
    env: Tuple[Tuple[str, str], ...]   # site env first, then the job's (the job wins)
    setup: Tuple[str, ...]
    runs_root: str
    workdir: Optional[str]
    monitor_interval: float
    monitor_sources: Tuple[str, ...]
    max_attempts: int
    requeue_signal: str
    rendezvous_port: Optional[int]
    port_base: int
    port_range: int
    hostname_suffix: str
    network_interface: Optional[str]
    mpi_starter: str
    srun_mpi: str
    mpirun_args: Tuple[str, ...]
    horovod_controller: str
    horovod_args: Tuple[str, ...]
    horovod_starter: str
    gpu_directive: Optional[str] = None  # "--gpus-per-node=4" / "--gres=gpu:4" for steps that need the GPUs
    requeue_exit: int = REQUEUE_EXIT
    requeue_by: str = "hpclaunch"      # who requeues: hpclaunch, or the program (`scontrol requeue`)
    signal_ranks: bool = False         # the batch shell passes the requeue signal on to every rank process
    warn_signal: bool = False          # Slurm sends requeue_signal `requeue_grace` s before the time limit
    container: Optional[ContainerPlan] = None  # each rank's program in a container (launchers/container.py)
    array: Optional[str] = None        # "0-49%10" for sweeps
    array_size: int = 0
    parallelism: Optional[int] = None
    # per sweep point: (command, env entries that vary, the point as JSON)
    sweep_tasks: Tuple[Tuple[Tuple[str, ...], Tuple[Tuple[str, str], ...], str], ...] = ()
    notes: Tuple[str, ...] = field(default_factory=tuple)
    # The monitor's Prometheus exporter port (job's monitor.prometheus_port, else the profile's); None: off.
    prometheus_port: Optional[int] = None
    # node-exporter's textfile directory on the nodes (the profile's monitor.prometheus_textfile_dir); None: off.
    prometheus_textfile_dir: Optional[str] = None
    # The local backend's GPU lease folder shared by the machine's users (the profile's local.gpu_lease_dir).
    gpu_lease_dir: Optional[str] = None

    @property
    def world_size(self) -> int:
        return self.nodes * self.tasks_per_node


def build_request(resolved: Resolved) -> BatchRequest:
    job, profile = resolved.job, resolved.profile.profile
    r, s = job.resources, job.slurm
    # torchrun is one Slurm task per node that forks the ranks, ray one per node (a Ray node with the
    # node's share); the others are one task per rank.
    per_node = job.launcher in ("torchrun", "ray")
    step_tasks = 1 if per_node else r.tasks_per_node
    step_cpus = r.cpus_per_task * r.tasks_per_node if per_node else r.cpus_per_task
    seconds = parse_time_seconds(r.time)

    d: list[tuple[str, Optional[str]]] = [
        ("job-name", slug(job.name)),
        ("nodes", str(r.nodes)),
        ("ntasks-per-node", str(step_tasks)),
        ("cpus-per-task", str(step_cpus)),
    ]
    gpu_directive = None
    if r.gpus_per_node and profile.gpu_request == "gpus-per-node":
        d.append(("gpus-per-node", str(r.gpus_per_node)))
        gpu_directive = f"--gpus-per-node={r.gpus_per_node}"
    elif r.gpus_per_node and profile.gpu_request == "gres":
        d.append(("gres", f"{profile.gres_name}:{r.gpus_per_node}"))
        gpu_directive = f"--gres={profile.gres_name}:{r.gpus_per_node}"
    if r.mem is not None and profile.memory_request == "per-node":
        d.append(("mem", r.mem))
    d.append(("time", format_time(seconds)))
    for opt, value in (("partition", s.partition), ("account", s.account), ("qos", s.qos),
                       ("constraint", s.constraint)):
        if value is not None:
            d.append((opt, value))
    if s.exclusive:
        d.append(("exclusive", None))
    runs_root = job.runs_root or profile.runs_root
    sweep_tasks, varying = _sweep_tasks(job)
    d.append(("output", _log_path(slug(job.name), array=bool(sweep_tasks))))
    d.append(("open-mode", "append"))
    rq = job.requeue
    by_program = rq.by == "program"
    signal_ranks = by_program if rq.signal_ranks is None else bool(rq.signal_ranks)
    # The signal goes to the batch shell only (B:): Slurm's step-wide signal would also reach
    # torchrun, mpirun and the monitor, which have no handler for it and die, and every process
    # of a rank (its wrapper too). The shell passes it on to each rank process once (signal_ranks).
    grace = signal_grace(rq.grace, seconds)  # None: grace unset and a time limit too short to warn before
    warn = (rq.max_attempts > 1 or by_program or signal_ranks) and grace is not None
    if warn:
        d.append(("signal", f"B:{rq.signal}@{grace}"))
    # A program that requeues itself (`scontrol requeue`) needs a requeueable job, whatever max_attempts says.
    d.append(("requeue", None) if rq.max_attempts > 1 or by_program else ("no-requeue", None))

    env = list((k, v) for k, v in profile.env.items() if k not in job.env)
    if "OMP_NUM_THREADS" not in job.env and "OMP_NUM_THREADS" not in profile.env:
        # torchrun sets it only for nproc>1, and then to 1: say what the job asked for instead.
        env.append(("OMP_NUM_THREADS", str(r.cpus_per_task)))
    if profile.network.interface:
        for name in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
            if name not in job.env and name not in profile.env:
                env.append((name, profile.network.interface))
    env.extend((k, v) for k, v in job.env.items() if k not in varying)

    return BatchRequest(
        job_name=job.name,
        slug=slug(job.name),
        profile_name=profile.name,
        launcher=job.launcher,
        directives=tuple(d),
        extra_directives=tuple(s.extra),
        nodes=r.nodes,
        tasks_per_node=r.tasks_per_node,
        cpus_per_task=r.cpus_per_task,
        gpus_per_node=r.gpus_per_node,
        command=tuple(job.command),
        time_s=seconds,
        mem=r.mem,
        partition=s.partition,
        account=s.account,
        qos=s.qos,
        requeue_grace=grace if grace is not None else DEFAULT_GRACE_S,
        node_cpus=profile.node.cpus,
        node_gpus=profile.node.gpus,
        env=tuple(env),
        setup=tuple(profile.setup),
        runs_root=runs_root,
        workdir=job.workdir,
        monitor_interval=job.monitor.interval,
        monitor_sources=tuple(profile.monitor.sources),
        max_attempts=job.requeue.max_attempts,
        requeue_signal=job.requeue.signal,
        requeue_by=rq.by,
        signal_ranks=signal_ranks,
        warn_signal=warn,
        rendezvous_port=job.rendezvous.port,
        port_base=profile.rendezvous.port_base,
        port_range=profile.rendezvous.port_range,
        hostname_suffix=profile.network.hostname_suffix,
        network_interface=profile.network.interface,
        mpi_starter=profile.mpi.starter,
        srun_mpi=profile.mpi.srun_mpi,
        mpirun_args=tuple(profile.mpi.mpirun_args),
        horovod_controller=profile.horovod.controller,
        horovod_args=tuple(profile.horovod.extra_args),
        horovod_starter=profile.horovod.starter,
        gpu_directive=gpu_directive,
        container=container_plan(job.container, profile.container, [k for k, _ in env] + list(varying),
                                 r.gpus_per_node or 0),
        array=array_spec(len(sweep_tasks), job.sweep.parallelism) if sweep_tasks else None,
        array_size=len(sweep_tasks),
        parallelism=job.sweep.parallelism if job.sweep else None,
        sweep_tasks=sweep_tasks,
        prometheus_port=_prometheus_port(job.monitor.prometheus_port, profile.monitor.prometheus_port),
        prometheus_textfile_dir=profile.monitor.prometheus_textfile_dir,
        gpu_lease_dir=profile.local.gpu_lease_dir,
    )


def _prometheus_port(job_port: Optional[int], profile_port: Optional[int]) -> Optional[int]:
    """The job's port wins; its 0 turns the exporter off, the profile's port too."""
    port = profile_port if job_port is None else job_port
    return port or None


def array_spec(n: int, parallelism: Optional[int], offset: int = 0) -> str:
    spec = f"{offset}-{offset + n - 1}" if n > 1 else str(offset)
    return spec + (f"%{parallelism}" if parallelism else "")


# json.dumps(point, sort_keys=True) made a new encoder for every point: a tenth of a 1,000-point
# submit's request. The same encoder, made once, gives the same text.
_POINT_JSON = json.JSONEncoder(sort_keys=True).encode


def _sweep_tasks(job):
    if job.sweep is None:
        return (), set()
    varying = {k for k, v in job.env.items() if _has_placeholder(v)}
    tasks = []
    swept_env = [name.split(".", 1)[1] for name in job.sweep.parameters if name.startswith("env.")]
    varying |= set(swept_env)
    # Only the words with a placeholder are filled in for each point; the others are the same for all.
    filled = [_has_placeholder(a) for a in job.command]
    for point in points(job.sweep):
        cmd = tuple(fill(a, point) if f else a for a, f in zip(job.command, filled))
        env = tuple((k, fill(job.env[k], point)) for k in job.env if k in varying and k not in swept_env)
        env += tuple((k, point[f"env.{k}"]) for k in swept_env)
        tasks.append((cmd, env, _POINT_JSON(point)))
    return tuple(tasks), varying


def _has_placeholder(text: str) -> bool:
    return re.search(r"\{[A-Za-z_][A-Za-z0-9_]*\}", text) is not None


def _log_path(name_slug: str, array: bool) -> str:
    # The submit directory, which exists when Slurm opens the log: the script given straight to
    # `sbatch` runs too (Slurm creates no folders), and links the log into its run directory.
    # `hpclaunch submit` names the run directory's log on sbatch's command line instead.
    return f"slurm-{name_slug}-%A_%a.out" if array else f"slurm-{name_slug}-%j.out"
