"""Ray Train for `launcher: ray`: a TorchTrainer whose workers Ray spreads over the job's nodes, DDP
over gloo on the CPU, as Ray's docs write one (nothing of hpclaunch in it).

    python ray_train.py [WORKERS]      (RAY_ADDRESS and HPCLAUNCH_RUN_DIR are set by hpclaunch)

Each worker prints its rank, host and final loss (equal on every worker: DDP keeps the replicas in
step); the driver prints whether fit() ended without an error, and exits 0 only then.
"""
import os
import socket
import sys

import ray
import ray.train
import torch
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer, prepare_model


def train_func():
    torch.manual_seed(0)
    model = prepare_model(torch.nn.Linear(4, 1))  # DistributedDataParallel over the worker group
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(256, 4) + ray.train.get_context().get_world_rank()  # each worker its own data
    y = x.sum(1, keepdim=True)
    for _ in range(20):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    ctx = ray.train.get_context()
    w = [round(float(v), 6) for v in model.module.weight.flatten()]
    print(f"worker rank {ctx.get_world_rank()}/{ctx.get_world_size()} host {socket.gethostname()} weights {w}",
          flush=True)
    ray.train.report({"loss": loss.item()})


def main() -> int:
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    ray.init()
    trainer = TorchTrainer(
        train_func,
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=False, resources_per_worker={"CPU": 1},
                                     placement_strategy="SPREAD"),
        # multi-node Ray Train needs storage every node sees: the run directory (a shared filesystem)
        run_config=RunConfig(storage_path=os.path.join(os.environ["HPCLAUNCH_RUN_DIR"], "ray_results"),
                             name="train"))
    result = trainer.fit()
    print(f"fit done, error: {result.error}", flush=True)
    return 0 if result.error is None else 1


if __name__ == "__main__":
    sys.exit(main())
