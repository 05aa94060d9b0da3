"""accelerate: HuggingFace Accelerate's own launcher, as its docs prescribe for Slurm
(examples/slurm/submit_multinode.sh): one task per node runs `accelerate launch` with the job's
machine count, this node's rank and the head node's address, and it starts the node's processes
(torch.distributed.run), which meet at the head node as one world. A user's unchanged
`Accelerator()` loop then trains once across every rank, not once per rank. templates/accelerate.j2.
"""
from __future__ import annotations

NAME = "accelerate"
PER_NODE = True
RANK_ENV = "torchrun"   # accelerate launch --multi_gpu runs torch.distributed.run: RANK, WORLD_SIZE, LOCAL_RANK
RECOVERY = ("spares",)  # its launch section runs again on healthy nodes (docs/recovery.md)
STARTER = ("[python, train.py]", "one task per node runs accelerate launch, which starts tasks_per_node processes "
           "there; they meet at the head node and Accelerator() joins them into one world (on nodes without GPUs "
           "through ACCELERATE_USE_CPU=1, which hpclaunch sets)")

_STARTERS = ("accelerate", "torchrun", "srun", "mpirun", "horovodrun")


def problems(job, profile):
    if job.command and job.command[0] in _STARTERS:
        yield ("command[0]", f"the {NAME} launcher already runs accelerate launch; the command is what each process "
               "runs", job.command[0], "drop the launcher from command, e.g. [python, train.py]")
