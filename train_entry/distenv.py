"""Which launcher started this process, and where it sits in the job.

Pure functions of an environment mapping (unit-tested with plain dicts); the one
side effect, asking ``scontrol show hostnames`` for the first host of a Slurm
node list, is injected as ``run`` so tests can fake it.
"""
from __future__ import annotations

import dataclasses
import re
import subprocess
import zlib
from typing import Callable, Dict, Mapping, Optional

from hpclaunch.common.rankenv import KINDS

LAUNCHERS = KINDS  # what DistEnv.launcher says: the kind of starter environment found

@dataclasses.dataclass(frozen=True)
class DistEnv:
    launcher: str            # one of LAUNCHERS
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int = 0
    master_addr: Optional[str] = None
    master_port: Optional[int] = None

    @property
    def distributed(self) -> bool:
        return self.world_size > 1 or self.launcher == "horovod"

    @property
    def is_main(self) -> bool:
        return self.rank == 0


class DistEnvError(RuntimeError):
    pass


def _int(env: Mapping[str, str], *names: str, default: Optional[int] = None) -> Optional[int]:
    for name in names:
        value = env.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError as exc:
                raise DistEnvError(f"{name}={value!r} is not an integer") from exc
    return default


def slurm_tasks_on_node(tasks_per_node: str, node_id: int) -> Optional[int]:
    """Tasks on node ``node_id`` from SLURM_TASKS_PER_NODE ("2(x3),1")."""
    if not tasks_per_node:
        return None
    idx = 0
    for part in tasks_per_node.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            return None
        count, reps = int(m.group(1)), int(m.group(2) or 1)
        if node_id < idx + reps:
            return count
        idx += reps
    return None


def rank_hint(env: Mapping[str, str]) -> str:
    """This process's rank as the first starter's variable says it, unchecked (log lines' prefix)."""
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "HOROVOD_RANK", "SLURM_PROCID"):
        if env.get(name):
            return env[name]
    return "0"


def detect(env: Mapping[str, str]) -> DistEnv:
    """Classify the launch from ``env`` alone (master address not resolved here).

    The launcher's own word first: the script exports HPCLAUNCH_RANK_ENV, the kind of variables its
    ranks carry (launchers/modes/<launcher>.py: RANK_ENV); horovod's is taken even without
    HOROVOD_RANK (srun --mpi starts its ranks). Then, most specific first: horovodrun
    (HOROVOD_RANK), torchrun (RANK/WORLD_SIZE/LOCAL_RANK, which also wins inside an srun step), Open
    MPI (OMPI_COMM_WORLD_*, which wins over the Slurm variables of the surrounding allocation),
    MPICH's Hydra, srun (SLURM_PROCID inside a step: SLURM_STEP_ID set; the batch shell itself is
    *not* a rank), else one process.
    """
    addr = env.get("MASTER_ADDR") or env.get("HPCLAUNCH_MASTER_ADDR") or None
    port = _int(env, "MASTER_PORT", "HPCLAUNCH_MASTER_PORT")
    # a script rendered before HPCLAUNCH_RANK_ENV (a job requeued across an upgrade) said horovod this way
    hint = env.get("HPCLAUNCH_RANK_ENV") or ("horovod" if env.get("HPCLAUNCH_LAUNCHER") == "horovod" else "")
    order = ([hint] if hint in _DETECTORS else []) + [k for k in _DETECTORS if k != hint]
    for kind in order:
        found = _DETECTORS[kind](env, addr, port, kind == hint)
        if found is not None:
            return _checked(found)
    return DistEnv("single", 0, 0, 1, 1, 0, addr, port)


def _horovod(env, addr, port, hinted) -> Optional[DistEnv]:
    if "HOROVOD_RANK" not in env and not hinted:
        return None
    rank = _int(env, "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", default=0)
    size = _int(env, "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", default=1)
    lrank = _int(env, "HOROVOD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", default=0)
    lsize = _int(env, "HOROVOD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", default=None)
    node = _int(env, "HOROVOD_CROSS_RANK", "OMPI_COMM_WORLD_NODE_RANK", "SLURM_NODEID", default=0)
    return DistEnv("horovod", rank, lrank, size, lsize or 1, node, addr, port)


def _torchrun(env, addr, port, hinted) -> Optional[DistEnv]:
    if "RANK" not in env or "WORLD_SIZE" not in env:
        return None
    rank = _int(env, "RANK")
    size = _int(env, "WORLD_SIZE")
    lrank = _int(env, "LOCAL_RANK", default=0)
    lsize = _int(env, "LOCAL_WORLD_SIZE", default=None)
    node = _int(env, "GROUP_RANK", "NODE_RANK", default=0)
    return DistEnv("torchrun", rank, lrank, size, lsize or 1, node, addr, port)


def _mpi(env, addr, port, hinted) -> Optional[DistEnv]:
    if "OMPI_COMM_WORLD_RANK" in env:
        rank = _int(env, "OMPI_COMM_WORLD_RANK")
        size = _int(env, "OMPI_COMM_WORLD_SIZE", default=1)
        lrank = _int(env, "OMPI_COMM_WORLD_LOCAL_RANK", default=0)
        lsize = _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", default=1)
        node = _int(env, "OMPI_COMM_WORLD_NODE_RANK", default=0)
        return DistEnv("mpi", rank, lrank, size, lsize, node, addr, port)
    if "PMI_RANK" in env and "PMI_SIZE" in env and "SLURM_STEP_ID" not in env:  # MPICH/Hydra mpiexec
        rank = _int(env, "PMI_RANK")
        size = _int(env, "PMI_SIZE")
        lrank = _int(env, "MPI_LOCALRANKID", default=0)
        lsize = _int(env, "MPI_LOCALNRANKS", default=1)
        return DistEnv("mpi", rank, lrank, size, lsize, 0, addr, port)
    return None


def _srun(env, addr, port, hinted) -> Optional[DistEnv]:
    if "SLURM_PROCID" not in env or ("SLURM_STEP_ID" not in env and "SLURM_STEPID" not in env):
        return None
    rank = _int(env, "SLURM_PROCID")
    size = _int(env, "SLURM_NTASKS", "SLURM_NPROCS", default=1)
    lrank = _int(env, "SLURM_LOCALID", default=0)
    node = _int(env, "SLURM_NODEID", default=0)
    lsize = _int(env, "SLURM_NTASKS_PER_NODE", default=None)
    if lsize is None:
        lsize = slurm_tasks_on_node(env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", ""), node)
    return DistEnv("srun", rank, lrank, size, lsize or 1, node, addr, port)


def _single(env, addr, port, hinted) -> Optional[DistEnv]:
    return DistEnv("single", 0, 0, 1, 1, 0, addr, port) if hinted else None


# each kind of common/rankenv.py's KINDS, in the order tried when the script names none
_DETECTORS: Dict[str, Callable[..., Optional[DistEnv]]] = {
    "horovod": _horovod, "torchrun": _torchrun, "mpi": _mpi, "srun": _srun, "single": _single}


def _checked(d: DistEnv) -> DistEnv:
    if d.world_size < 1:
        raise DistEnvError(f"{d.launcher}: world size {d.world_size} < 1")
    if not 0 <= d.rank < d.world_size:
        raise DistEnvError(f"{d.launcher}: rank {d.rank} outside world size {d.world_size}")
    if not 0 <= d.local_rank:
        raise DistEnvError(f"{d.launcher}: negative local rank {d.local_rank}")
    return d


# --- master address / port -------------------------------------------------------------------

def first_host_of_nodelist(nodelist: str) -> str:
    """First host of a Slurm host list without scontrol ("gpu[07-09,12],cpu1" -> "gpu07")."""
    m = re.match(r"([^\[,]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not m:
        raise DistEnvError(f"cannot parse SLURM_JOB_NODELIST {nodelist!r}")
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    first = ranges.split(",")[0].split("-")[0]
    return prefix + first


def _scontrol_first_host(nodelist: str, run: Callable) -> Optional[str]:
    try:
        out = run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if getattr(out, "returncode", 1) != 0:
        return None
    lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
    return lines[0] if lines else None


def port_from_job_id(job_id: str, low: int = 20000, span: int = 20000) -> int:
    """A per-job port in [low, low+span): a hash, not the last digits (no aliasing every 1000 ids)."""
    return low + zlib.crc32(str(job_id).encode()) % span


def resolve_master(env: Mapping[str, str], run: Callable = subprocess.run) -> tuple[str, int]:
    """MASTER_ADDR/PORT, else HPCLAUNCH_MASTER_*, else first host of SLURM_JOB_NODELIST + job-id port."""
    addr = env.get("MASTER_ADDR") or env.get("HPCLAUNCH_MASTER_ADDR")
    port = env.get("MASTER_PORT") or env.get("HPCLAUNCH_MASTER_PORT")
    if not addr:
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        if nodelist:
            addr = _scontrol_first_host(nodelist, run) or first_host_of_nodelist(nodelist)
    if not port:
        job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
        if job_id:
            port = port_from_job_id(job_id)
    if not addr or not port:
        raise DistEnvError(
            "no rendezvous address: set MASTER_ADDR/MASTER_PORT (or HPCLAUNCH_MASTER_ADDR/PORT), "
            "or run inside a Slurm job (SLURM_JOB_NODELIST, SLURM_JOB_ID)")
    return addr, int(port)
