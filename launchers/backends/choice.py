"""Which backend runs a job: its name from the command line, or Slurm where a cluster is configured."""
from __future__ import annotations

import os
import shutil
from typing import Optional

from hpclaunch.common.errors import HpclaunchError
from hpclaunch.launchers.backends import slurmcli
from hpclaunch.launchers.backends.base import Backend
from hpclaunch.launchers.backends.local import LocalBackend
from hpclaunch.launchers.backends.slurm import SlurmBackend

NAMES = ("slurm", "local")


def default_backend_name() -> str:
    """Slurm where a cluster is configured here, else this machine."""
    if shutil.which("sbatch") and (os.environ.get("SLURM_CONF") or os.path.exists("/etc/slurm/slurm.conf")):
        return "slurm"
    return "local"


def get_backend(name: Optional[str] = None) -> Backend:
    name = name or default_backend_name()
    if name == "local":
        return LocalBackend()
    if name == "slurm":
        if not slurmcli.available():
            raise HpclaunchError("--backend slurm: sbatch is not on PATH \u2014 run on a login node, "
                                 "or use --backend local")
        return SlurmBackend()
    raise HpclaunchError(f"--backend {name}: unknown backend \u2014 use slurm or local")
