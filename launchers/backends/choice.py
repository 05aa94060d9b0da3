"""The backend table: every backend by name, and the one place backend names are compared.

Backends are found by name and imported only when asked for, as TorchX loads its schedulers: a
Slurm submission does not load the local backend (its GPU leases, process groups and `tempfile`,
~3 ms of a ~70 ms submit). The local backend still loads the Slurm one, whose script and
submit_env() it shares. Backends of other packages register under the entry point group
`hpclaunch.backends` (`NAME = "package.module:Class"`); the group is read only for a name that is
not built in, or to list every name (importlib.metadata costs ~10 ms).

What a backend can do is declared on its class (`Backend.capabilities`), never asked by name.
Registry rows of `submit --remote` carry the name REMOTE: no Backend answers for them here, the
remote's own hpclaunch does (runs/remote.py, cli/remote_commands.py), and `relayed()` is how the
callers tell.
"""
from __future__ import annotations

import importlib
from typing import Optional, Tuple, Type

from hpclaunch.common.errors import HpclaunchError
from hpclaunch.launchers.backends.base import Backend, Capability

# name -> (module, class), in the order a default is looked for (Backend.detected).
# tests/test_backend_choice.py checks each is a Backend under its own name.
BACKENDS = {
    "slurm": ("hpclaunch.launchers.backends.slurm", "SlurmBackend"),
    "local": ("hpclaunch.launchers.backends.local", "LocalBackend"),
    "submitit": ("hpclaunch.launchers.backends.submitit", "SubmititBackend"),
}
ENTRY_POINTS = "hpclaunch.backends"
REMOTE = "remote"

_installed: Optional[dict] = None


def installed() -> dict:
    """{name: entry point} of the backends other packages register (read once)."""
    global _installed
    if _installed is None:
        from importlib import metadata
        try:
            found = metadata.entry_points(group=ENTRY_POINTS)
        except TypeError:  # Python 3.9: a dict of groups
            found = metadata.entry_points().get(ENTRY_POINTS, ())
        _installed = {ep.name: ep for ep in found if ep.name not in BACKENDS and ep.name != REMOTE}
    return _installed


def relayed(name: str) -> bool:
    """Whether a registry row of backend `name` is answered by another machine's hpclaunch."""
    return name == REMOTE


def names(capability: Optional[Capability] = None) -> Tuple[str, ...]:
    """The backends' names, built in first, those with `capability` only."""
    out = tuple(BACKENDS) + tuple(sorted(installed()))
    return out if capability is None else tuple(n for n in out if capability in backend_class(n).capabilities)


def default_backend_name() -> str:
    """The first backend that says it is the one to use here: Slurm where a cluster is configured,
    else this machine."""
    for name in BACKENDS:
        cls = backend_class(name)
        if Capability.JOB_FILES in cls.capabilities and cls.detected():
            return name
    return "local"


def backend_class(name: str) -> Type[Backend]:
    if name in BACKENDS:
        module, cls = BACKENDS[name]
        return getattr(importlib.import_module(module), cls)
    if relayed(name):
        raise HpclaunchError(f"backend {name}: its jobs are followed through the remote's own hpclaunch, "
                             "not a backend here \u2014 use `hpclaunch status JOB` and `hpclaunch logs JOB`")
    entry = installed().get(name)
    if entry is None:
        raise HpclaunchError(f"--backend {name}: unknown backend \u2014 use "
                             f"{' or '.join(names(Capability.JOB_FILES))}")
    cls = entry.load()
    if not (isinstance(cls, type) and issubclass(cls, Backend)) or cls.name != name:
        raise HpclaunchError(f"--backend {name}: entry point {entry.value} ({ENTRY_POINTS}) is not a Backend "
                             f"named {name!r} \u2014 fix or uninstall the package that registers it")
    return cls


def get_backend(name: Optional[str] = None) -> Backend:
    cls = backend_class(name or default_backend_name())
    why = cls.unavailable()
    if why:
        raise HpclaunchError(why)
    return cls()


def job_backend(name: Optional[str] = None) -> Backend:
    """The backend a job file is submitted to (one that declares Capability.JOB_FILES)."""
    be = get_backend(name)
    if Capability.JOB_FILES not in be.capabilities:
        raise HpclaunchError(f"--backend {be.name}: it runs no job files \u2014 use "
                             f"{' or '.join(names(Capability.JOB_FILES))}")
    return be
