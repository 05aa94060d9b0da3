"""torchrun: one task per node runs torchrun, which forks the node's ranks; they meet at the head
node (c10d rendezvous). templates/torchrun.j2."""
from __future__ import annotations

NAME = "torchrun"
PER_NODE = True
RANK_ENV = "torchrun"
RECOVERY = ("spares", "shrink")  # its launch section runs again on healthy nodes (docs/recovery.md)
TRAIN_ENTRY = '[python, -m, hpclaunch.train_entry, --data, digits.csv, --epochs, "5"]'
STARTER = (TRAIN_ENTRY, "torchrun forks tasks_per_node ranks per node; they meet at the head node")

_STARTERS = ("torchrun", "srun", "mpirun", "horovodrun")


def problems(job, profile):
    if job.command and job.command[0] in _STARTERS:
        yield ("command[0]", f"the {NAME} launcher already starts ranks; the command is what each rank runs",
               job.command[0], "drop the launcher from command, e.g. [python, train.py]")
