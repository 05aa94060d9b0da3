"""A plain DeepSpeed training program, as DeepSpeed's getting-started guide writes one: it parses the
`--local_rank` DeepSpeed's launcher passes, calls `deepspeed.init_distributed()` and
`deepspeed.initialize` with a ZeRO stage-2 config; nothing in it knows of Slurm or of hpclaunch.
Run it with `launcher: deepspeed` (tests/test_deepspeed_cluster.py).

    python deepspeed_train.py [--steps N] [--local_rank N]

The optimizer is torch's Adam handed to DeepSpeed (`"zero_allow_untested_optimizer": true`), a
pattern DeepSpeed supports: its own "Adam" would build the fused_adam C++ op on the first run.

Each rank prints one line: its rank, the world's size, its host, the --local_rank it was given (-1:
none) and LOCAL_RANK, the loss of the trained model over the whole data set, and its arguments.
ZeRO-2 keeps one model across the world, so every rank gives the same loss; ranks that each
trained alone say `of 1`.
"""
import argparse
import gc
import socket
import sys

import deepspeed
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int, default=-1, help="passed by DeepSpeed's launcher")
parser.add_argument("--steps", type=int, default=60)
parser = deepspeed.add_config_arguments(parser)
args = parser.parse_args()
given_local_rank = args.local_rank   # deepspeed.initialize overwrites it with LOCAL_RANK

deepspeed.init_distributed()
world = torch.distributed.get_world_size()
rank = torch.distributed.get_rank()

torch.manual_seed(0)
gen = torch.Generator().manual_seed(0)
x = torch.randn(512, 8, generator=gen)
y = x @ torch.arange(1.0, 9.0).unsqueeze(1) + 0.01 * torch.randn(512, 1, generator=gen)
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
config = {
    "train_batch_size": 32,
    "zero_optimization": {"stage": 2},
    "zero_allow_untested_optimizer": True,
}
engine, _, _, _ = deepspeed.initialize(args=args, model=model, optimizer=torch.optim.Adam(model.parameters(), lr=0.05),
                                       config=config)

per_rank = 32 // world
for step in range(args.steps):
    # this rank's share of the step's batch
    start = (step * 32 + rank * per_rank) % 512
    loss = torch.nn.functional.mse_loss(engine(x[start:start + per_rank]), y[start:start + per_rank])
    engine.backward(loss)
    engine.step()

with torch.no_grad():
    final = torch.nn.functional.mse_loss(engine.module(x), y).item()
print(f"rank {rank} of {world} on {socket.gethostname()} --local_rank {given_local_rank} "
      f"LOCAL_RANK {deepspeed.comm.get_local_rank()} loss {final:.8f} argv {sys.argv[1:]}", flush=True)
# Let go of the model before the last barrier: gloo's threads then hold nothing at exit
# (docs/launch-modes.md, "Ending a DDP program").
del engine, model, loss
gc.collect()
torch.distributed.barrier()
torch.distributed.destroy_process_group()
