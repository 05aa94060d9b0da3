"""The shape of pytorch/examples' multinode DDP tutorial (distributed/ddp-tutorial-series/multinode.py),
on CPU: a Trainer object holds the DDP-wrapped model and lives until ``main`` returns, after
``destroy_process_group()``, so the DDP wrapper (and gloo's last all-reduce work) outlives the process
group into the interpreter's teardown, as in the tutorial. Written for the teardown bench, not copied.

    torchrun ... ddp_tutorial_cpu.py TOTAL_EPOCHS SAVE_EVERY [--batch-size 32]
"""
import argparse
import os

import torch
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class RandomPairs(Dataset):
    def __init__(self, size):
        self.items = [(torch.rand(20), torch.rand(1)) for _ in range(size)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


class Trainer:
    def __init__(self, model, data, optimizer, save_every, snapshot):
        self.rank = int(os.environ["RANK"])
        self.data, self.optimizer, self.save_every, self.snapshot = data, optimizer, save_every, snapshot
        self.first_epoch = 0
        if os.path.exists(snapshot):
            state = torch.load(snapshot)
            model.load_state_dict(state["model"])
            self.first_epoch = state["epochs_run"]
            print(f"resuming from epoch {self.first_epoch}", flush=True)
        self.model = DDP(model)

    def epoch(self, n):
        self.data.sampler.set_epoch(n)
        for x, y in self.data:
            self.optimizer.zero_grad()
            F.mse_loss(self.model(x), y).backward()
            self.optimizer.step()
        print(f"[rank {self.rank}] epoch {n} | steps {len(self.data)}", flush=True)

    def train(self, epochs):
        for n in range(self.first_epoch, epochs):
            self.epoch(n)
            if self.rank == 0 and n % self.save_every == 0:
                torch.save({"model": self.model.module.state_dict(), "epochs_run": n}, self.snapshot)


def main(epochs, save_every, batch_size, snapshot):
    init_process_group(backend="gloo")
    data = DataLoader(RandomPairs(2048), batch_size=batch_size, sampler=DistributedSampler(RandomPairs(2048)))
    model = torch.nn.Linear(20, 1)
    trainer = Trainer(model, data, torch.optim.SGD(model.parameters(), lr=1e-3), save_every, snapshot)
    trainer.train(epochs)
    destroy_process_group()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("total_epochs", type=int)
    ap.add_argument("save_every", type=int)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--snapshot", default=os.path.join(os.environ.get("SNAPSHOT_DIR", "."), "snapshot.pt"))
    a = ap.parse_args()
    main(a.total_epochs, a.save_every, a.batch_size, a.snapshot)
