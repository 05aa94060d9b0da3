"""horovod: horovodrun starts the ranks from the batch node (ssh to the others), or srun --mpi does
and hvd.init() joins them over MPI. Reads the profile's `horovod:` section (and `mpi.srun_mpi`).
templates/horovod.j2."""
from __future__ import annotations

NAME = "horovod"
RANK_ENV = "horovod"
RECOVERY = ("spares",)  # its launch section runs again on healthy nodes (docs/recovery.md)
STARTER = ("[python, train.py]", "horovodrun starts the ranks; hvd.init() finds them")


def settings(profile) -> dict:
    h = profile.horovod
    return {"starter": h.starter, "controller": h.controller, "args": tuple(h.extra_args),
            "srun_mpi": profile.mpi.srun_mpi}


def problems(job, profile):
    if job.container is not None and profile.container.runtime == "pyxis" and profile.horovod.starter != "srun":
        yield ("container", f"pyxis containers start with srun, but profile '{profile.name}' starts {NAME} ranks "
               "with horovodrun", job.container.image, f"set {NAME}.starter: srun in the profile, or use launcher "
               "srun/torchrun")
