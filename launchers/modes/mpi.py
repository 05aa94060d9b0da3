"""mpi: srun --mpi=<plugin> (or mpirun over the allocation's hosts) starts every rank; MPI.COMM_WORLD
spans them. Reads the profile's `mpi:` section. templates/mpi.j2."""
from __future__ import annotations

NAME = "mpi"
RANK_ENV = "mpi"
RECOVERY = ("spares",)  # its launch section runs again on healthy nodes (docs/recovery.md)
STARTER = ("[python, train.py]", "mpirun or srun --mpi starts the ranks; MPI.COMM_WORLD spans them")


def settings(profile) -> dict:
    m = profile.mpi
    return {"starter": m.starter, "srun_mpi": m.srun_mpi, "mpirun_args": tuple(m.mpirun_args)}


def problems(job, profile):
    if job.container is not None and profile.container.runtime == "pyxis" and profile.mpi.starter != "srun":
        yield ("container", f"pyxis containers start with srun, but profile '{profile.name}' starts {NAME} ranks "
               "with mpirun", job.container.image, f"set {NAME}.starter: srun in the profile, or use launcher "
               "srun/torchrun")
