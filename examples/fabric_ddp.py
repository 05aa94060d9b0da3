"""Lightning Fabric DDP under `launcher: srun` (tasks_per_node = devices), its loop written as Fabric's
docs write one: Fabric(...).launch(), fabric.setup(), fabric.backward(). Fabric's own SLURMEnvironment
reads Slurm's variables; nothing here knows about hpclaunch.

    python fabric_ddp.py NODES DEVICES

Each rank trains on its own data; prints `fabric rank R/W node N host H weights [...]`. DDP averages
the gradients, so every rank ends with the same weights. It ends as docs/launch-modes.md ("Ending a DDP
program") says a DDP program on gloo must: the model freed before the last barrier, then the process
group destroyed; else a rank may abort at exit (SIGABRT), as this one did once in CI.
"""
import gc
import socket
import sys

import torch
from lightning.fabric import Fabric


def main() -> int:
    nodes, devices = int(sys.argv[1]), int(sys.argv[2])
    fabric = Fabric(accelerator="cpu", devices=devices, num_nodes=nodes, strategy="ddp")
    fabric.launch()
    fabric.seed_everything(0)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    data = torch.Generator().manual_seed(fabric.global_rank)  # each rank its own batches
    for _ in range(20):
        x = torch.randn(32, 8, generator=data)
        loss = (model(x) - x.sum(1, keepdim=True)).pow(2).mean()
        optimizer.zero_grad()
        fabric.backward(loss)
        optimizer.step()
    weights = [round(v, 6) for v in model.weight.detach().flatten().tolist()[:3]]
    print(f"fabric rank {fabric.global_rank}/{fabric.world_size} node {fabric.node_rank} "
          f"host {socket.gethostname()} weights {weights}", flush=True)
    del model, optimizer, loss  # DDP's last all-reduce must not outlive the process group's threads
    gc.collect()
    fabric.barrier()
    torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
