"""What the script needs to run each rank's program in a container: pure, from the job's
`container:` and the profile's runtime. templates/container.j2 turns it into `hl_ctr` (a command
prefix: apptainer exec / podman run) or `hl_ctr_opts` (srun options: pyxis).

The run directory and the working directory are mounted at their own paths (logs, checkpoints and
relative paths work unchanged); the monitor, the rank wrapper and the starter (torchrun, mpirun,
horovodrun) stay on the host for apptainer and podman, as in Apptainer's hybrid MPI model; pyxis
runs the whole step (torchrun included) in the container.
"""
from __future__ import annotations

from typing import Iterable, Optional, Tuple

from dataclasses import dataclass

from hpclaunch.common import schedenv

# What podman must be told to pass in (apptainer and pyxis pass the whole environment): the scheduler's,
# hpclaunch's and every launcher's rank variables, and the threading/accelerator settings.
PASSED = tuple(f"{p}*" for p in schedenv.PREFIXES) + ("HPCLAUNCH_*", "MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE",
          "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE", "TORCHELASTIC_*", "OMPI_*",
          "PMIX_*", "PMI_*", "HOROVOD_*", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "NCCL_*", "GLOO_*", "TF_CONFIG")


@dataclass(frozen=True)
class ContainerPlan:
    runtime: str                  # pyxis | apptainer | podman
    image: str
    mounts: Tuple[str, ...]       # site's, then the job's: SRC[:DST][:ro]
    workdir: Optional[str]        # None: the job's working directory, mounted at its own path
    args: Tuple[str, ...]         # the site's extra runtime arguments
    env: Tuple[str, ...]          # names (or PREFIX_*) podman passes in
    gpus: bool                    # apptainer --nv


def container_plan(container, runtime, env_names: Iterable[str], gpus: int) -> Optional[ContainerPlan]:
    if container is None or runtime is None or runtime.runtime is None:
        return None
    names = list(PASSED)
    for name in list(env_names) + list(container.env):
        if name not in names:
            names.append(name)
    return ContainerPlan(runtime=runtime.runtime, image=container.image,
                         mounts=tuple(runtime.mounts) + tuple(container.mounts), workdir=container.workdir,
                         args=tuple(runtime.args), env=tuple(names), gpus=gpus > 0)
