"""PyTorch Lightning DDP under `launcher: srun` (tasks_per_node = devices): Lightning's own
SLURMEnvironment reads Slurm's variables; nothing here knows about hpclaunch.

    python lightning_ddp.py NODES DEVICES

Prints `rank R/W node N host H` per rank and, on rank 0, `world size W ok`.
"""
import socket
import sys

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.demos.boring_classes import BoringModel


def main() -> int:
    nodes, devices = int(sys.argv[1]), int(sys.argv[2])
    trainer = Trainer(num_nodes=nodes, devices=devices, strategy="ddp", accelerator="cpu", max_epochs=1,
                      limit_train_batches=4, limit_val_batches=0, enable_checkpointing=False, logger=False,
                      enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(BoringModel())
    world = trainer.world_size
    print(f"rank {trainer.global_rank}/{world} node {trainer.node_rank} host {socket.gethostname()}", flush=True)
    # every rank reports its node; rank 0 checks the world spans every node
    nodes_seen = trainer.strategy.all_gather(torch.tensor([trainer.node_rank]))
    ok = world == nodes * devices and sorted(set(nodes_seen.view(-1).tolist())) == list(range(nodes))
    if trainer.global_rank == 0:
        print(f"world size {world} {'ok' if ok else 'WRONG'}", flush=True)
    # Leave the process group before exiting: gloo's threads torn down at interpreter exit can abort
    # the process ("terminate called without an active exception", pytorch/gloo#514).
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    return 0 if ok or trainer.global_rank != 0 else 3


if __name__ == "__main__":
    sys.exit(main())
