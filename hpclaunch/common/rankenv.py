"""Where a rank reads its place in the job: the kinds of starter environment train_entry knows.

Each launcher (launchers/modes/) declares which of these its ranks carry (RANK_ENV); the rendered
script exports it as HPCLAUNCH_RANK_ENV, and train_entry/distenv.py reads that kind's variables
first. The launchers' names live only in their registry; this is the only list train_entry shares.
"""
from __future__ import annotations

KINDS = (
    "torchrun",   # RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (torchrun, accelerate, torch.distributed.run)
    "horovod",    # HOROVOD_RANK ... (horovodrun), else MPI's or Slurm's rank variables
    "mpi",        # OMPI_COMM_WORLD_* (Open MPI), PMI_RANK/PMI_SIZE (MPICH's Hydra)
    "srun",       # SLURM_PROCID inside a job step (srun, or the local backend's emulated steps)
    "single",     # one process: the batch shell, Ray's driver
)
