"""The plan: everything a job asks for, computed once from job + profile, in no scheduler's terms.

Rendering is a pipeline of pure steps (TorchX's dry-run shape): Resolved job -> Plan (this
module) -> each backend's native request (`Backend.prepare`: Slurm's #SBATCH directives and sbatch
flags, launchers/backends/slurm_script.py) -> script text. Only a backend writes files or calls a
scheduler, and only a backend knows its scheduler's words: nothing here is an sbatch option.

The flat fields are the ones the rank runtime (templates/prologue.j2, epilogue.j2) reads by name;
`placement` groups what the job asks of the scheduler's placement, `after` its dependencies as
(kind, job id) pairs; frozen dataclasses, as few as the render path can afford (each costs ~0.3 ms
to create).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from hpclaunch.common.checkpoint_interval import interval_s, mtbf_s
from hpclaunch.launchers import modes
from hpclaunch.launchers.container import ContainerPlan, container_plan
from hpclaunch.spec.job import DEFAULT_GRACE_S, signal_grace
from hpclaunch.spec.loading import Resolved
from hpclaunch.spec.recovery import hang_settings
from hpclaunch.spec.sweep import count, fill, points
from hpclaunch.spec.units import parse_time_seconds

REQUEUE_EXIT = 75  # EX_TEMPFAIL: "save done, run me again"

# The kinds of dependency a job may wait on (`submit --after JOB:KIND`, Plan.after's (kind, job id)
# pairs); a backend that declares Capability.DEPENDENCIES honours each.
DEPENDENCY_KINDS = ("afterok", "afterany", "afternotok", "after")

_SLUG_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def slug(name: str) -> str:
    """A directory- and scheduler-safe form of a job name (the exact name travels in the environment)."""
    text = _SLUG_BAD.sub("_", name).strip("._")
    return (text or "job")[:64]


@dataclass(frozen=True)
class Placement:
    """Where the scheduler should place the job (the job's `slurm:` section): each backend maps these
    to its own terms, or refuses what it cannot honour."""

    partition: Optional[str] = None   # the queue
    account: Optional[str] = None     # who is charged
    qos: Optional[str] = None
    constraint: Optional[str] = None  # node features
    exclusive: bool = False           # whole nodes only
    extra: Tuple[str, ...] = ()       # the job's pass-through options, validated for form (spec/validate.py)


@dataclass(frozen=True)
class Plan:
    job_name: str                      # exact, any characters
    slug: str                          # safe form, for the scheduler's job name and directories
    profile_name: str
    launcher: str
    nodes: int
    tasks_per_node: int                # ranks per node
    cpus_per_task: int                 # CPUs per rank
    gpus_per_node: int
    # The launcher's shape: scheduler tasks per node and CPUs each (torchrun and ray: one task a
    # node that forks the node's ranks; the others: one task a rank).
    step_tasks: int
    step_cpus: int
    command: Tuple[str, ...]
    time_s: int
    mem: Optional[str]                 # per node, the job's form (e.g. 4G)
    placement: Placement
    # How this site wants GPUs and memory asked for (the profile's): a backend reads what applies to it
    gpu_request: str                   # gpus-per-node | gres | none
    gres_name: str
    memory_request: str                # per-node | omit
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
    # The launcher's (launchers/modes/<launcher>.py): its profile settings (templates read r.launch),
    # its launch section (templates/<launcher>.j2), where its ranks read their place (common/rankenv.py)
    launch: Dict[str, Any] = field(hash=False)
    launch_template: Optional[str]
    rank_env: str
    requeue_exit: int = REQUEUE_EXIT
    requeue_by: str = "hpclaunch"      # who requeues: hpclaunch, or the program (`scontrol requeue`)
    signal_ranks: bool = False         # the batch shell passes the requeue signal on to every rank process
    warn_signal: bool = False          # the scheduler sends requeue_signal `requeue_grace` s before the time limit
    container: Optional[ContainerPlan] = None  # each rank's program in a container (launchers/container.py)
    array_size: int = 0                # a sweep: one task per point
    parallelism: Optional[int] = None  # sweep tasks running at once
    # per sweep point: (command, env entries that vary, the point as JSON)
    sweep_tasks: Tuple[Tuple[Tuple[str, ...], Tuple[Tuple[str, str], ...], str], ...] = ()
    # The monitor's Prometheus exporter port (job's monitor.prometheus_port, else the profile's); None: off.
    prometheus_port: Optional[int] = None
    # node-exporter's textfile directory on the nodes (the profile's monitor.prometheus_textfile_dir); None: off.
    prometheus_textfile_dir: Optional[str] = None
    # The local backend's GPU lease folder shared by the machine's users (the profile's local.gpu_lease_dir).
    gpu_lease_dir: Optional[str] = None
    # In-allocation recovery (spec/recovery.py, docs/recovery.md): the backend asks for nodes + spare_nodes
    # and keeps the allocation when one dies; the job runtime watches, fences and restarts.
    spare_nodes: int = 0
    recovery: bool = True              # the node watch and the supervisor run
    hang: Optional[Tuple[float, float, float, float]] = None   # (factor, floor s, ceiling s, idle CPU share)
    heartbeat_timeout: float = 10.0
    shrink_to: int = 0                 # the fewest nodes a shrunk step runs on; 0: no shrinking
    checkpoint_interval: str = "auto"  # auto | off | seconds (HPCLAUNCH_CHECKPOINT_INTERVAL_S)
    checkpoint_cost: float = 30.0      # seconds, assumed until the job measures its own
    # Submission-time facts: runs/submission.py fills them in (dataclasses.replace)
    after: Tuple[Tuple[str, str], ...] = ()   # (kind, job id): start after those jobs of the same backend
    failure_rate: Optional[float] = None      # node failures per node-hour on the partition (the fleet's record)

    @property
    def world_size(self) -> int:
        return self.nodes * self.tasks_per_node

    @property
    def checkpoint_words(self) -> str:
        """What the script says of the cadence: off, seconds, or auto:INTERVAL:MTBF, the first start's
        interval computed here (the prior cost, the partition's rate: nothing is measured yet), so that
        the job starts no Python for it; the job runtime retunes later starts (docs/recovery.md)."""
        if self.checkpoint_interval != "auto":
            return self.checkpoint_interval
        mtbf = mtbf_s(self.failure_rate, self.nodes)
        return f"auto:{interval_s(self.checkpoint_cost, mtbf):.0f}:{mtbf:.0f}"


# A study's trial (hpclaunch tune, docs/tune.md): each array task runs its command through the trial
# agent, which asks the study for the task's point, fills it in and reports the program's values.
# The interpreter is the monitor's (HPCLAUNCH_PYTHON, which the backends export, else python3); the
# study and the command are arguments, never shell text.
TRIAL_AGENT = ("bash", "-c", 'exec "${HPCLAUNCH_PYTHON:-python3}" -m hpclaunch.tune.agent "$@"', "hpclaunch-trial")


def trial_command(command, study_dir: str) -> Tuple[str, ...]:
    return TRIAL_AGENT + ("--study", study_dir, "--") + tuple(command)


def build_plan(resolved: Resolved, study_dir: Optional[str] = None, tasks: Optional[int] = None) -> Plan:
    """The plan of a resolved job. A study's (a sweep with a metric) is an array of `tasks` trial
    tasks (default: its trials) whose command is the trial agent's, on the study in `study_dir`
    (`hpclaunch tune` makes it; render shows where it would be)."""
    job, profile = resolved.job, resolved.profile.profile
    study = job.sweep is not None and job.sweep.study
    r, s = job.resources, job.slurm
    mode = modes.get(job.launcher)
    per_node = mode.per_node  # one task a node that starts the node's ranks (torchrun, ray), else one a rank
    seconds = parse_time_seconds(r.time)
    sweep_tasks, varying = ((), set()) if study else _sweep_tasks(job)
    rq = job.requeue
    rec = job.recovery
    by_program = rq.by == "program"
    signal_ranks = by_program if rq.signal_ranks is None else bool(rq.signal_ranks)
    grace = signal_grace(rq.grace, seconds)  # None: grace unset and a time limit too short to warn before
    warn = (rq.max_attempts > 1 or by_program or signal_ranks) and grace is not None

    env = list((k, v) for k, v in profile.env.items() if k not in job.env)
    if "OMP_NUM_THREADS" not in job.env and "OMP_NUM_THREADS" not in profile.env:
        # torchrun sets it only for nproc>1, and then to 1: say what the job asked for instead.
        env.append(("OMP_NUM_THREADS", str(r.cpus_per_task)))
    if profile.network.interface:
        for name in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
            if name not in job.env and name not in profile.env:
                env.append((name, profile.network.interface))
    # a study's env values with a {placeholder} are the trial agent's to fill in, as its command's
    env.extend((k, v) for k, v in job.env.items() if k not in varying and not (study and _has_placeholder(v)))

    return Plan(
        job_name=job.name,
        slug=slug(job.name),
        profile_name=profile.name,
        launcher=job.launcher,
        nodes=r.nodes,
        tasks_per_node=r.tasks_per_node,
        cpus_per_task=r.cpus_per_task,
        gpus_per_node=r.gpus_per_node,
        step_tasks=1 if per_node else r.tasks_per_node,
        step_cpus=r.cpus_per_task * r.tasks_per_node if per_node else r.cpus_per_task,
        command=trial_command(job.command, study_dir or "") if study else tuple(job.command),
        time_s=seconds,
        mem=r.mem,
        placement=Placement(s.partition, s.account, s.qos, s.constraint, bool(s.exclusive), tuple(s.extra)),
        gpu_request=profile.gpu_request,
        gres_name=profile.gres_name,
        memory_request=profile.memory_request,
        requeue_grace=grace if grace is not None else DEFAULT_GRACE_S,
        node_cpus=profile.node.cpus,
        node_gpus=profile.node.gpus,
        env=tuple(env),
        setup=tuple(profile.setup),
        runs_root=job.runs_root or profile.runs_root,
        workdir=job.workdir,
        monitor_interval=job.monitor.interval,
        monitor_sources=tuple(profile.monitor.sources),
        max_attempts=rq.max_attempts,
        requeue_signal=rq.signal,
        requeue_by=rq.by,
        signal_ranks=signal_ranks,
        warn_signal=warn,
        rendezvous_port=job.rendezvous.port,
        port_base=profile.rendezvous.port_base,
        port_range=profile.rendezvous.port_range,
        hostname_suffix=profile.network.hostname_suffix,
        network_interface=profile.network.interface,
        launch=dict(mode.settings(profile)),
        launch_template=mode.template,
        rank_env=mode.rank_env,
        container=container_plan(job.container, profile.container, [k for k, _ in env] + list(varying),
                                 r.gpus_per_node or 0),
        array_size=(count(job.sweep) if tasks is None else tasks) if study else len(sweep_tasks),
        parallelism=job.sweep.parallelism if job.sweep else None,
        sweep_tasks=sweep_tasks,
        prometheus_port=_prometheus_port(job.monitor.prometheus_port, profile.monitor.prometheus_port),
        prometheus_textfile_dir=profile.monitor.prometheus_textfile_dir,
        gpu_lease_dir=profile.local.gpu_lease_dir,
        spare_nodes=r.spare_nodes,
        recovery=bool(rec.enabled),
        hang=hang_settings(rec.hang),
        heartbeat_timeout=float(rec.heartbeat_timeout),
        shrink_to=(rec.min_nodes or (r.nodes + 1) // 2) if rec.shrink and r.nodes > 1 else 0,
        checkpoint_interval=_interval_text(rec.checkpoint_interval),
        checkpoint_cost=float(rec.checkpoint_cost),
    )


def _interval_text(value) -> str:
    """auto, off, or whole seconds, as the script exports them (YAML's bare off is false, on true)."""
    if isinstance(value, bool):
        return "auto" if value else "off"
    return value if isinstance(value, str) else str(int(round(value)))


def _prometheus_port(job_port: Optional[int], profile_port: Optional[int]) -> Optional[int]:
    """The job's port wins; its 0 turns the exporter off, the profile's port too."""
    port = profile_port if job_port is None else job_port
    return port or None


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
