"""The job file: its schema as dataclasses, with per-field checks.

Cross-field rules and the profile's limits live in validate.py; this module only
says what each key is and which values are well-formed on their own.
"""
from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Literal, Optional, Tuple

from dataclasses import dataclass
from hpclaunch.common import schedenv
from hpclaunch.launchers import modes
from hpclaunch.spec.alerts import Alerts
from hpclaunch.spec.container import Container
from hpclaunch.spec.kubernetes import KubernetesOptions
from hpclaunch.spec.recovery import Recovery
from hpclaunch.spec.train import Train
from hpclaunch.spec.typedload import Scalar, field
from hpclaunch.spec.units import TIME_FORMATS, parse_mem_mib, parse_time_seconds

REQUEUE_SIGNALS = ("USR1", "USR2")
SECRET_MARKERS = ("TOKEN", "KEY", "PASSWORD", "PASSWD", "SECRET", "CREDENTIAL")

# Whole-string patterns, always used with fullmatch: `$` would also match before a final "\n",
# and a value ending in a newline breaks its #SBATCH line in two.
_SLURM_WORD = re.compile(r"[A-Za-z0-9_.,:+@%=-]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EXTRA = re.compile(r"--[a-z][a-z0-9-]*(=[A-Za-z0-9_.,:/@%+=()\[\]-]+)?")


def _time_check(value: str) -> Optional[Tuple[str, str]]:
    try:
        parse_time_seconds(value)
    except ValueError:
        return ("is not a Slurm time", f"use one of {TIME_FORMATS}, e.g. \"00:30:00\"")
    return None


def _mem_check(value: str) -> Optional[Tuple[str, str]]:
    try:
        parse_mem_mib(value)
    except ValueError:
        return ("is not a Slurm memory size", "use a number with an optional K, M, G or T suffix, e.g. 4G")
    return None


def _slurm_word(what: str) -> object:
    def check(value: str) -> Optional[Tuple[str, str]]:
        if not _SLURM_WORD.fullmatch(value):
            return (f"is not a valid {what} name",
                    "use letters, digits and _ . , : + @ % = - only")
        return None
    return check


def _launcher_check(value: str) -> Optional[Tuple[str, str]]:
    if modes.known(value):
        return None
    import difflib  # only to word an error
    choices = modes.names()
    close = difflib.get_close_matches(value, choices, n=1)
    return ("is not a valid choice", (f"did you mean '{close[0]}'? " if close else "") +
            "choose one of: " + ", ".join(choices))


def _no_nul(value: str) -> Optional[Tuple[str, str]]:
    if "\x00" in value:
        return ("contains a NUL character, which no process argument can carry", "remove it")
    return None


def _name_check(value: str) -> Optional[Tuple[str, str]]:
    if not value.strip():
        return ("is empty", "give the job a name, e.g. digits-ddp")
    return _no_nul(value)


def _command_check(value: List[str]) -> Optional[Tuple[str, str]]:
    if not value:
        return ("is empty", "write the program and its arguments as a list, e.g. [python, train.py]")
    for arg in value:
        if "\x00" in arg:
            return ("has an argument with a NUL character, which no process argument can carry",
                    "remove it")
    return None


@dataclass
class Resources:
    """What each job asks Slurm for."""

    nodes: int = field(1, help="number of nodes", minimum=1, maximum=100000)
    tasks_per_node: int = field(1, help="ranks per node (torchrun --nproc-per-node, horovod slots, MPI ranks)",
                                minimum=0, maximum=1024)
    gpus_per_node: int = field(0, help="GPUs per node", minimum=0, maximum=64)
    cpus_per_task: int = field(1, help="CPU cores per rank", minimum=1, maximum=4096)
    mem: Optional[str] = field(None, help="memory per node, Slurm form (e.g. 4G); null leaves it to the site",
                               check=_mem_check)
    time: str = field("00:30:00", help=f"time limit ({TIME_FORMATS})", check=_time_check)
    spare_nodes: int = field(0, help="extra nodes held for restarts inside the allocation: a dead node's "
                             "ranks restart on a spare, from the newest checkpoint (docs/recovery.md)",
                             minimum=0, maximum=1000)


@dataclass
class SlurmOptions:
    """Scheduler placement and pass-through options."""

    partition: Optional[str] = field(None, help="partition (queue)", check=_slurm_word("partition"))
    account: Optional[str] = field(None, help="account to charge", check=_slurm_word("account"))
    qos: Optional[str] = field(None, help="quality of service", check=_slurm_word("QOS"))
    constraint: Optional[str] = field(None, help="node features (--constraint)",
                                      check=_slurm_word("constraint"))
    exclusive: bool = field(False, help="whole nodes only (--exclusive)")
    extra: List[str] = field(default_factory=list,
                             help="extra sbatch long options, passed through after validation of their form")


@dataclass
class Monitor:
    """The per-node power/thermal monitor."""

    interval: float = field(1.0, help="seconds between samples; 0 disables the monitor",
                            minimum=0, maximum=3600,
                            check=lambda v: ("is too short to sample reliably", "use 0 (off) or at least 0.05")
                            if 0 < v < 0.05 else None)
    prometheus_port: Optional[int] = field(
        None, minimum=0, maximum=65535,
        help="serve the monitor's readings to Prometheus on this port of each node (1024-65535; when taken, "
        "the next free of 8, written to monitor/<host>.prometheus.port); 0: off, also over the profile's "
        "monitor.prometheus_port; null: the profile's (default: off)",
        check=lambda v: ("is a privileged port", "use a port from 1024 to 65535, or 0 to turn the exporter off")
        if 0 < v < 1024 else None)


DEFAULT_GRACE_S = 120
# Slurm's timer checks limits about every 30 s: a --signal may come up to 60 s before it is due (sbatch(1)).
SIGNAL_EARLY_S = 60


def signal_grace(grace: Optional[int], seconds: Optional[int]) -> Optional[int]:
    """The requeue signal's grace in effect: ``requeue.grace`` as set; unset, DEFAULT_GRACE_S, or None
    (no signal) where the time limit is so short that the signal could come at the start (a signalled
    train_entry checkpoints and requeues: a quick test job would requeue until it gave up)."""
    if grace is not None:
        return grace
    return None if seconds is not None and seconds <= DEFAULT_GRACE_S + SIGNAL_EARLY_S else DEFAULT_GRACE_S


@dataclass
class Requeue:
    """Automatic requeue before the time limit (or on preemption)."""

    max_attempts: int = field(3, help="attempts in all, the first included; 1 disables requeue",
                              minimum=1, maximum=1000)
    signal: str = field("USR2", help="signal Slurm sends to the batch shell before the time limit (USR2: NCCL "
                        "catches USR1 in some versions; Lightning needs USR1, see docs/requeue.md)",
                        check=lambda v: None if v in REQUEUE_SIGNALS else
                        ("is not a requeue signal", "use USR1 or USR2"))
    grace: Optional[int] = field(None, help="seconds before the time limit that the signal is sent; null: "
                                 f"{DEFAULT_GRACE_S}, and no signal for a time limit of "
                                 f"{DEFAULT_GRACE_S + SIGNAL_EARLY_S} s or less (Slurm may signal up to "
                                 f"{SIGNAL_EARLY_S} s early: a quick test job would requeue)",
                                 minimum=1, maximum=65535)
    signal_ranks: Optional[bool] = field(None, help="also send the signal to every rank process (for programs "
                                         "with their own handler); null: true when `by` is program")
    by: Literal["hpclaunch", "program"] = field("hpclaunch", help="who requeues: hpclaunch (after a signalled "
                                                "step that did not succeed), or the program itself (Lightning, "
                                                "submitit: `scontrol requeue`)")


@dataclass
class Rendezvous:
    """Where ranks meet: the head node and a per-job port."""

    port: Optional[int] = field(None, help="fixed port (default: derived from the job id into the profile's range)",
                                minimum=1024, maximum=65535)


@dataclass
class Prune:
    """Early stopping of a study's trials (docs/tune.md): a trial whose intermediate values fall
    behind the others' is stopped and recorded as pruned."""

    method: Literal["median", "asha"] = field(help="median: stop a trial below the median of the others at the "
                                              "same step; asha: asynchronous successive halving")
    warmup_steps: int = field(0, help="steps (a trial's reported steps; train_entry: epochs) a trial runs before "
                              "it can be pruned (asha: its minimum resource)", minimum=0, maximum=1000000)
    startup_trials: int = field(5, help="median: trials that finish before any is pruned", minimum=0,
                                maximum=100000)
    reduction_factor: int = field(3, help="asha: keep the best 1/N of trials at each rung", minimum=2, maximum=100)


@dataclass
class Sweep:
    """A parameter sweep: one Slurm job array, one task per point. `{name}` in command arguments
    and env values is replaced by the point's value of parameter `name`. With `metric:` it is a
    study (`hpclaunch tune`, docs/tune.md): each task asks the search for its trial's point."""

    parameters: Dict[str, Any] = field(help="name -> a list of values, {range: [start, stop, step]}, or for "
                                       "random search and tpe {choice: [...]}, {uniform: [a, b]}, "
                                       "{loguniform: [a, b]}", example="{lr: [0.1, 0.01]}")
    method: Literal["grid", "random", "tpe"] = field("grid", help="every combination, `samples` random points, or "
                                                     "(a study, with metric:) tpe: a search that learns from the "
                                                     "finished trials")
    samples: Optional[int] = field(None, help="points for random search", minimum=1, maximum=1000000)
    seed: int = field(0, help="seed of random search (a study: of its sampler)", minimum=0, maximum=2 ** 31 - 1)
    parallelism: Optional[int] = field(None, help="tasks running at once (--array=...%N)", minimum=1)
    trials: Optional[int] = field(None, help="a study's number of trials (default for grid: every combination)",
                                  minimum=1, maximum=10000)
    metric: Optional[str] = field(None, help="makes the sweep a study: the reported value it optimises, e.g. "
                                  "val_accuracy (train_entry's epoch records) or a name your program reports",
                                  check=lambda v: _metric_check(v))
    mode: Literal["max", "min"] = field("max", help="a study's direction: maximise or minimise the metric")
    prune: Optional[Prune] = field(None, help="a study's early stopping of trials that fall behind")

    @property
    def study(self) -> bool:
        """A study (`hpclaunch tune`): each task asks a search for its point, not one fixed per task."""
        return self.metric is not None


_METRIC = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")


def _metric_check(value: str) -> Optional[Tuple[str, str]]:
    if not _METRIC.fullmatch(value):
        return ("is not a metric name", "use letters, digits and _ . - (at most 64), e.g. val_accuracy")
    return None


@dataclass
class Job:
    """An hpclaunch job file."""

    name: str = field(help="job name", check=_name_check, example="digits-ddp")
    command: List[Scalar] = field(help="program and arguments, as a list", check=_command_check,
                                  example="[python, train.py]")
    profile: str = field("local", help="a shipped profile name, or a path to a profile YAML")
    launcher: str = field("torchrun", help="how ranks are started (launchers/modes/: one module each)",
                          check=_launcher_check, choices=modes.names)
    resources: Resources = field(default_factory=Resources)
    slurm: SlurmOptions = field(default_factory=SlurmOptions)
    env: Dict[str, Scalar] = field(default_factory=dict, help="exported to every rank")
    monitor: Monitor = field(default_factory=Monitor)
    requeue: Requeue = field(default_factory=Requeue)
    recovery: Recovery = field(default_factory=Recovery)
    rendezvous: Rendezvous = field(default_factory=Rendezvous)
    train: Train = field(default_factory=Train)
    workdir: Optional[str] = field(None, help="directory the ranks start in (default: the submit directory)",
                                   check=_no_nul)
    sweep: Optional[Sweep] = field(None, help="run the job once per parameter point, as a job array")
    container: Optional[Container] = field(None, help="run each rank's program in a container (docs/containers.md)")
    runs_root: Optional[str] = field(None, help="where run directories go (default: the profile's, else ./runs)",
                                     check=lambda v: runs_root_problem(v))
    kubernetes: Optional[KubernetesOptions] = field(None, help="for `hpclaunch render --target kubernetes`: "
                                                    "image, namespace, Kueue queue, volumes (docs/targets.md)")
    alerts: Alerts = field(default_factory=Alerts, help="alert rules and where alerts go (docs/alerts.md)")


def env_name_problem(name: str) -> Optional[Tuple[str, str]]:
    if not _ENV_NAME.fullmatch(name):
        return ("is not a valid environment variable name",
                "use letters, digits and _, not starting with a digit")
    if name.startswith(("HPCLAUNCH_",) + schedenv.PREFIXES):
        return ("is set by hpclaunch or Slurm and cannot be overridden here",
                "pick another name")
    return None


_RUNS_ROOT = re.compile(r"[A-Za-z0-9._/+-]+")


def runs_root_problem(value: str) -> Optional[Tuple[str, str]]:
    # It appears in #SBATCH --output, which Slurm does not shell-unquote: keep it plain.
    if not _RUNS_ROOT.fullmatch(value):
        return ("is not a plain path", "use letters, digits and . _ / + - only (no spaces, no ~)")
    return None


def looks_secret(name: str) -> bool:
    upper = name.upper()
    return any(marker in upper for marker in SECRET_MARKERS)


def env_entry_problem(name: str, values: Iterable[Any] = (), whose: str = "a job file's"
                      ) -> Optional[Tuple[str, Any, str]]:
    """What is wrong with exporting NAME with these values, as (message, value shown, fix), or
    None. Serves the job's env: section, a sweep's env.NAME parameter and a profile's env:, so
    none of them can write into the script what another refuses."""
    found = env_name_problem(name)
    if found:
        return found[0], name, found[1]
    if looks_secret(name):
        return (f"looks like a secret; {whose} values are written into the job script", name,
                f"remove it here and `export {name}` in your shell: the job inherits it by name")
    for value in values:
        if isinstance(value, str) and "\x00" in value:
            return "contains a NUL character, which no environment value can carry", value, "remove it"
    return None
