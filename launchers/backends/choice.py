"""Which backend runs a job: its name from the command line, or Slurm where a cluster is configured.

Backends are found by name and imported only when asked for, as TorchX's scheduler factories
are: a Slurm submission does not load the local backend (its GPU leases, process groups and
`tempfile`, ~3 ms of a ~70 ms submit). The local backend still loads the Slurm one, whose
submit_env() it shares."""
from __future__ import annotations

import importlib
import os
import shutil
from typing import Optional, Type

from hpclaunch.common.errors import HpclaunchError
from hpclaunch.launchers.backends import slurmcli
from hpclaunch.launchers.backends.base import Backend

# name -> (module, class). tests/test_backend_choice.py checks each is a Backend under its own name.
BACKENDS = {
    "slurm": ("hpclaunch.launchers.backends.slurm", "SlurmBackend"),
    "local": ("hpclaunch.launchers.backends.local", "LocalBackend"),
}
NAMES = tuple(BACKENDS)


def default_backend_name() -> str:
    """Slurm where a cluster is configured here, else this machine."""
    if shutil.which("sbatch") and (os.environ.get("SLURM_CONF") or os.path.exists("/etc/slurm/slurm.conf")):
        return "slurm"
    return "local"


def backend_class(name: str) -> Type[Backend]:
    if name not in BACKENDS:
        raise HpclaunchError(f"--backend {name}: unknown backend \u2014 use {' or '.join(NAMES)}")
    module, cls = BACKENDS[name]
    return getattr(importlib.import_module(module), cls)


def get_backend(name: Optional[str] = None) -> Backend:
    name = name or default_backend_name()
    if name == "slurm" and not slurmcli.available():
        raise HpclaunchError("--backend slurm: sbatch is not on PATH \u2014 run on a login node, "
                             "or use --backend local")
    return backend_class(name)()
