"""srun: the scheduler starts tasks_per_node ranks per node, each running the command; programs
that read the scheduler's variables themselves (JAX, Lightning) run under it. templates/srun.j2."""
from __future__ import annotations

NAME = "srun"
RANK_ENV = "srun"
RECOVERY = ("spares",)  # its launch section runs again on healthy nodes (docs/recovery.md)
STARTER = ("[python, train.py]", "srun starts tasks_per_node ranks per node; Slurm's PROCID variable is the rank")
RECIPES = {
    "jax": ("[python, train.py]", "one process per node (tasks_per_node: 1); jax.distributed.initialize() with no "
            "arguments reads Slurm's variables", 1),
    "lightning": ("[python, train.py]", "tasks_per_node = Trainer(devices=...), nodes = Trainer(num_nodes=...); "
                  "Lightning's SLURMEnvironment reads Slurm's variables", None),
}
