"""Cluster profiles: site knowledge as data (node shape, dialect, limits, defaults).

A profile says how a site wants things asked for (`--gpus-per-node` or `--gres`),
what a node holds, how to reach the head node, which lines set up the software,
and what the site allows. Job keys the profile wants to default go under
`defaults:`, in the job file's own shape.
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Literal, Optional, Tuple

from hpclaunch.spec.job import _mem_check, _slurm_word, _time_check, runs_root_problem
from dataclasses import dataclass
from hpclaunch.spec.container import ContainerRuntime, arguments_problem as _arguments
from hpclaunch.spec.remote import Remote
from hpclaunch.spec.typedload import Scalar, field, pattern_check

_HOST_PART = re.compile(r"[A-Za-z0-9.-]*")  # fullmatch: `$` would pass a final newline
_PLAIN_WORD = re.compile(r"[A-Za-z0-9._-]+")


# Every profile string that reaches the script or a terminal is checked here, as a field check, so
# the templates need no quoting of their own for it: the name is written into comment lines
# ("# ... profile 'NAME'"), where a newline would start a command; setup lines are trusted site
# code but one line each; arguments are quoted, but no argument can carry a NUL.
_plain_word = pattern_check(_PLAIN_WORD, "is not a plain name", "use letters, digits and . _ - only, e.g. my-cluster")


def _one_line(value: str) -> Optional[Tuple[str, str]]:
    if not value.isprintable():
        return ("must be one line of printable text", "remove the newlines and control characters")
    return None


def _lines(value: List[str]) -> Optional[Tuple[str, str]]:
    for line in value:
        if any(c in line for c in "\n\r\x00") or not line.replace("\t", " ").isprintable():
            return ("each entry must be one line, without control characters",
                    "write one shell line per list entry")
    return None


@dataclass
class NodeShape:
    """What one compute node holds."""

    cpus: int = field(help="CPU cores per node", minimum=1, example=64)
    mem: Optional[str] = field(None, help="usable memory per node (Slurm form, e.g. 500G)", check=_mem_check)
    gpus: int = field(0, help="GPUs per node", minimum=0)
    gpu_model: Optional[str] = field(None, help="GPU model, for reports", check=_one_line)
    gpu_mem_gib: Optional[float] = field(None, help="memory per GPU in GiB", minimum=0)


@dataclass
class Network:
    """How ranks find the head node and which interface collectives use."""

    interface: Optional[str] = field(None, help="NIC for NCCL/gloo/MPI traffic (sets NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME)",
                                     check=_slurm_word("interface"))
    hostname_suffix: str = field("", help="appended to Slurm node names to reach the fast network (e.g. 'i' for InfiniBand names)",
                                 check=lambda v: None if _HOST_PART.fullmatch(v) else
                                 ("is not a host name part", "use letters, digits, '.' and '-' only"))


@dataclass
class MpiSettings:
    """How the mpi launcher starts ranks on this site."""

    starter: Literal["srun", "mpirun"] = field("srun", help="srun --mpi=... or mpirun with a host list")
    srun_mpi: str = field("pmix", help="srun --mpi plugin (pmix, pmi2, none)", check=_slurm_word("MPI plugin"))
    mpirun_args: List[str] = field(default_factory=list, help="extra mpirun arguments (e.g. --oversubscribe)",
                                   check=_arguments)


@dataclass
class HorovodSettings:
    """How the horovod launcher starts ranks and how they talk."""

    starter: Literal["horovodrun", "srun"] = field(
        "horovodrun", help="horovodrun (reaches the other nodes with ssh) or srun (srun --mpi=<mpi.srun_mpi> "
        "starts the ranks, hvd.init() uses MPI: no ssh, needs Horovod built with MPI)")
    controller: Literal["gloo", "mpi"] = field("gloo", help="horovodrun --gloo or --mpi (srun starter: local backend only)")
    extra_args: List[str] = field(default_factory=list, help="extra horovodrun arguments", check=_arguments)


@dataclass
class RendezvousSettings:
    """Per-job rendezvous ports: base + (job id mod range), so concurrent jobs differ."""

    port_base: int = field(20000, minimum=1024, maximum=65535, help="lowest port used")
    port_range: int = field(10000, minimum=1, maximum=40000, help="number of ports to spread jobs over")


@dataclass
class Limits:
    """What the site allows; validation refuses more."""

    max_nodes: Optional[int] = field(None, minimum=1, help="nodes per job")
    max_time: Optional[str] = field(None, check=_time_check, help="time limit per job")
    partitions: List[str] = field(default_factory=list, help="allowed partitions (empty: any)")
    max_epochs: Optional[int] = field(None, minimum=1, help="train.epochs at most")
    max_batch_per_gpu: Optional[int] = field(None, minimum=1, help="train.batch_per_gpu at most")
    lr_range: Optional[List[float]] = field(None, help="[min, max] for train.lr",
                                            check=lambda v: None if len(v) == 2 and v[0] <= v[1] else
                                            ("must be two numbers [min, max] with min <= max", "e.g. [1.0e-6, 1.0]"))


@dataclass
class Training:
    """How train_entry runs on this hardware."""

    backend: Literal["nccl", "gloo"] = field("gloo", help="torch.distributed backend")
    lr_scaling: Literal["linear", "sqrt", "none"] = field("linear", help="learning-rate scaling with world size")
    mlflow_dir: Optional[str] = field(None, help="MLflow file store, relative to the run directory or absolute")
    tensorboard_dir: Optional[str] = field(None, help="TensorBoard log dir, relative to the run directory or absolute")


@dataclass
class MonitorSettings:
    """Which monitor sources this hardware has, and whether the site scrapes the monitors."""

    sources: List[Literal["nvml", "host", "rapl", "jetson"]] = field(
        default_factory=lambda: ["nvml", "host", "rapl"], help="sources the monitor samples")
    prometheus_port: Optional[int] = field(
        None, minimum=1024, maximum=65535,
        help="the site's Prometheus exporter port for every job's monitor (a job's monitor.prometheus_port "
        "wins; 0 there turns it off); null: off")
    prometheus_textfile_dir: Optional[str] = field(
        None, help="node-exporter's textfile directory (its --collector.textfile.directory) on the compute "
        "nodes: every job's monitor writes hpclaunch_<job id>_<node>.prom there each sample and removes it "
        "at the end; null: off",
        check=lambda v: runs_root_problem(v) or (None if v.startswith("/") else (
            "is not an absolute path", "give the directory node-exporter reads, e.g. "
            "/var/lib/node_exporter/textfile_collector")))


@dataclass
class LocalSettings:
    """How the local backend runs jobs on this machine (--backend local)."""

    gpu_lease_dir: Optional[str] = field(
        None, help="one folder for the GPU leases of every user of this machine, so that their local jobs take "
        "turns on its GPUs (an admin makes it once: install -d -m 1777 DIR); HPCLAUNCH_GPU_LEASE_DIR wins; "
        "null: each user's own",
        check=lambda v: runs_root_problem(v) or (None if v.startswith("/") else (
            "is not an absolute path", "give the machine's shared folder, e.g. /var/lib/hpclaunch/gpu-leases")))


@dataclass
class Profile:
    """An hpclaunch cluster profile."""

    name: str = field(help="profile name (letters, digits, . _ -)", example="my-cluster", check=_plain_word)
    node: NodeShape = field(help="the shape of one compute node", example="{cpus: 64}")
    description: str = field("", help="one line shown by `hpclaunch profiles`", check=_one_line)
    extends: Optional[str] = field(None, help="profile this one starts from (name or path)")
    defaults: Dict[str, Any] = field(default_factory=dict, help="defaults for job keys, in the job file's shape")
    gpu_request: Literal["gpus-per-node", "gres", "none"] = field("gpus-per-node", help="how GPUs are requested")
    gres_name: str = field("gpu", help="GRES name for gpu_request: gres", check=_slurm_word("GRES"))
    memory_request: Literal["per-node", "omit"] = field("per-node", help="send --mem, or leave memory to the site")
    network: Network = field(default_factory=Network)
    env: Dict[str, Scalar] = field(default_factory=dict, help="site environment for every job (e.g. NCCL settings)")
    setup: List[str] = field(default_factory=list, check=_lines,
                             help="shell lines run first in every job (module loads); trusted site code, one line each")
    mpi: MpiSettings = field(default_factory=MpiSettings)
    horovod: HorovodSettings = field(default_factory=HorovodSettings)
    rendezvous: RendezvousSettings = field(default_factory=RendezvousSettings)
    limits: Limits = field(default_factory=Limits)
    training: Training = field(default_factory=Training)
    monitor: MonitorSettings = field(default_factory=MonitorSettings)
    container: ContainerRuntime = field(default_factory=ContainerRuntime)
    local: LocalSettings = field(default_factory=LocalSettings)
    runs_root: str = field("runs", help="where run directories go, relative to the submit directory or absolute",
                           check=lambda v: runs_root_problem(v))
    remote: Optional[Remote] = field(None, help="how to reach this cluster's login node from your own machine "
                                     "(hpclaunch submit --remote; docs/remote.md)")
