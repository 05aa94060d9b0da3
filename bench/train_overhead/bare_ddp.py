"""The baseline: a bare torchrun DDP loop over the same model, data, batch and steps.

No checkpoints, no metrics files, no requeue checks, no grad clipping: only what any DDP script
does. Writes {"rank", "times": [time after each step], "samples": [...]} to --out-dir/bare-rank<R>.json.
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from hpclaunch.train_entry.data import BatchIndexDataset
from hpclaunch.train_entry.model import MLP


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--out-dir", required=True)
    a = p.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    table = np.loadtxt(a.data, delimiter=",", skiprows=1, dtype=np.float32)
    x, y = torch.from_numpy(table[:, :-1].copy()), torch.from_numpy(table[:, -1].astype(np.int64))
    ds = BatchIndexDataset(x, y)
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=True, seed=0, drop_last=True)
    loader = DataLoader(ds, sampler=BatchSampler(sampler, a.batch_size, drop_last=True), batch_size=None)
    model = DDP(MLP(x.shape[1], int(y.max()) + 1))
    # the same optimizer settings as train_entry's defaults (AdamW, no weight decay)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr * world, weight_decay=0.0)
    times, samples = [], []
    step = 0
    epoch = 0
    while step < a.steps:
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss.item()
            step += 1
            times.append(time.time())
            samples.append(len(yb))
            if step >= a.steps:
                break
        epoch += 1
    with open(os.path.join(a.out_dir, f"bare-rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "times": times, "samples": samples}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
