"""ray: a Ray head on the first node and a worker on every other node, each with the node's share;
the command is the driver, on the head node, with RAY_ADDRESS set. templates/ray.j2."""
from __future__ import annotations

NAME = "ray"
PER_NODE = True
RANK_ENV = "single"   # the driver is one process; Ray places the work
STARTER = ("[python, driver.py]", "a Ray head on the first node, a worker on each other node; this command is the "
           "driver, on the head node, with RAY_ADDRESS set (ray.init() joins) and ip_head (the variable Ray's "
           "Slurm guide reads). The job ends when the driver does",
           1)  # one Ray node per node, with the node's devices


def problems(job, profile):
    if job.container is not None and profile.container.runtime is not None:
        yield ("container", "launcher ray runs no container yet (its driver runs on the head node's host)",
               job.container.image, "drop container: or use launcher srun/torchrun")
