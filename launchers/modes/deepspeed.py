"""deepspeed: DeepSpeed's own launcher, one per node, as DeepSpeed's docs prescribe where its launcher
cannot reach the nodes itself: "Launching without passwordless SSH" (docs/_tutorials/getting-started.md,
DeepSpeed >= 0.14.5) runs `deepspeed --hostfile=H --no_ssh --node_rank=<n> --master_addr=<addr>
--master_port=<port> train.py ARGS` separately on every node. One task per node (srun) does that
here: the hostfile names the allocation's nodes with `tasks_per_node` slots each, the node rank is
the task's own (SLURM_NODEID), the address and port are the head node's and the job's. DeepSpeed's
launcher then starts the node's processes with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT set and `--local_rank=<n>` after the script (`python -u train.py --local_rank=0 ARGS`),
so a user's unchanged `deepspeed.init_distributed()` + `deepspeed.initialize` joins one world.

Not `deepspeed --launcher slurm` (deepspeed/launcher/multinode_runner.py's SlurmRunner): it runs
`srun -n <ranks> python -u train.py` from the batch node with no rank variables and no
`--local_rank`, so `init_distributed()` falls back to discovering MPI through mpi4py, which needs
srun's PMI wired to an MPI library; it also wants a hostfile and ssh to the first host, and
starts the processes itself, past hpclaunch's rank wrapper.

Each process runs under hpclaunch's rank wrapper (`--no_python --no_local_rank`, then the job's
command with `--local_rank=$LOCAL_RANK` put where DeepSpeed puts it: after the script, or after
`-m MODULE`). `--log_level=warning` (DeepSpeed >= 0.17.6) keeps DeepSpeed's launcher from logging
every process's command line, the rank wrapper included, into the batch log. On CPU nodes DeepSpeed
picks its CPU accelerator and gloo by itself, and JIT-compiles its shared-memory op on first use
(docs/launch-modes.md). templates/deepspeed.j2; tests/test_deepspeed_cluster.py.
"""
from __future__ import annotations

NAME = "deepspeed"
PER_NODE = True
RANK_ENV = "torchrun"   # DeepSpeed's launcher sets RANK, WORLD_SIZE, LOCAL_RANK (and LOCAL_SIZE, CROSS_RANK)
STARTER = ("[python, train.py]", "one task per node runs DeepSpeed's launcher (deepspeed --no_ssh --node_rank), "
           "which starts tasks_per_node processes there, each with --local_rank; deepspeed.init_distributed() "
           "joins them at the head node into one world")

_STARTERS = ("deepspeed", "torchrun", "accelerate", "srun", "mpirun", "horovodrun")


def problems(job, profile):
    if job.command and job.command[0] in _STARTERS:
        yield ("command[0]", f"the {NAME} launcher already runs DeepSpeed's launcher; the command is what each process "
               "runs", job.command[0], "drop the launcher from command, e.g. [python, train.py]")
