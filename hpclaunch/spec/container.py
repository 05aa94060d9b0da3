"""Containers: the job's `container:` block (what image, which folders) and the profile's
`container:` block (which runtime the site has). Rendering is in launchers/container.py."""
from __future__ import annotations

import re
from typing import List, Literal, Optional, Tuple

from dataclasses import dataclass
from hpclaunch.spec.typedload import field, pattern_check

RUNTIMES = ("pyxis", "apptainer", "podman")

# One form for all three runtimes: SRC:DST[:ro|rw], absolute paths; no commas (pyxis joins mounts
# with them), no colons inside a path, nothing a shell or #SBATCH line would read otherwise.
_PATH = r"/[A-Za-z0-9._/+@%=-]*"
_MOUNT = re.compile(rf"({_PATH})(:({_PATH}))?(:(ro|rw))?")
_IMAGE = re.compile(r"[A-Za-z0-9._/:@+=%#-]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?")


def mount_problem(value: str) -> Optional[Tuple[str, str]]:
    if not _MOUNT.fullmatch(value):
        return ("is not a mount", "use SRC:DST[:ro], absolute paths of letters, digits and . _ / + @ % = -")
    return None


def _mounts(values: List[str]) -> Optional[Tuple[str, str]]:
    for v in values:
        found = mount_problem(v)
        if found:
            return (f"entry {v!r} {found[0]}", found[1])
    return None


_image = pattern_check(_IMAGE, "is not an image reference", "e.g. nvcr.io#nvidia/pytorch:24.05-py3, docker://..., "
                       "/path/to/image.sif or localhost/name:tag")


def _env_names(values: List[str]) -> Optional[Tuple[str, str]]:
    for v in values:
        if not _ENV_NAME.fullmatch(v):
            return (f"entry {v!r} is not a variable name", "letters, digits and _ (a final * passes a prefix)")
    return None


def _workdir(value: str) -> Optional[Tuple[str, str]]:
    if not re.fullmatch(_PATH, value):
        return ("is not an absolute plain path", "e.g. /workspace")
    return None


def arguments_problem(value: List[str]) -> Optional[Tuple[str, str]]:
    """Extra arguments for a program (runtime, mpirun, horovodrun): anything but a NUL is an argument."""
    if any("\x00" in arg for arg in value):
        return ("has an argument with a NUL character, which no process argument can carry", "remove it")
    return None


@dataclass
class Container:
    """Run each rank's program in a container image (the profile names the runtime)."""

    image: str = field(help="image: a registry reference (pyxis, podman), a .sif file or docker:// URI "
                       "(apptainer)", check=_image, example="nvcr.io#nvidia/pytorch:24.05-py3")
    mounts: List[str] = field(default_factory=list, check=_mounts,
                              help="SRC:DST[:ro] folders to mount; the run directory and the working directory "
                              "are always mounted at their own paths")
    workdir: Optional[str] = field(None, check=_workdir,
                                   help="where the program starts inside (default: the job's working directory)")
    env: List[str] = field(default_factory=list, check=_env_names,
                           help="more variables passed in by name (podman passes only those it is told; "
                           "the job's env, Slurm's, the launchers' and hpclaunch's always are)")


@dataclass
class ContainerRuntime:
    """The container runtime this site has, and its site options."""

    runtime: Optional[Literal["pyxis", "apptainer", "podman"]] = field(
        None, help="pyxis (srun --container-image), apptainer (apptainer exec) or podman (podman run); "
        "null: containers are refused")
    args: List[str] = field(default_factory=list, check=arguments_problem,
                            help="extra arguments of `apptainer exec` / `podman run` (pyxis: of srun)")
    mounts: List[str] = field(default_factory=list, check=_mounts, help="site mounts for every container job")
