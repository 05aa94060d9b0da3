"""A plain HuggingFace Accelerate training loop, as its docs write one: nothing in it knows of Slurm
or of hpclaunch. Run it with `launcher: accelerate` (tests/test_accelerate_cluster.py).

    python accelerate_train.py [EPOCHS]

Each process prints one line: its index, the world's size, its host, the batches it saw, and the
loss of the trained model over the whole data set. In one world the model is the same on every
process (DDP averages the gradients), so every line gives the same loss; processes that each
trained alone say `of 1`.
"""
import socket
import sys

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

accelerator = Accelerator()
# Each process starts from its own random model: DDP makes them one (rank 0's) when it wraps it.
torch.manual_seed(1234 + accelerator.process_index)
gen = torch.Generator().manual_seed(0)
x = torch.randn(512, 8, generator=gen)
y = x @ torch.arange(1.0, 9.0).unsqueeze(1) + 0.01 * torch.randn(512, 1, generator=gen)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(1))
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

batches = 0
for epoch in range(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
    for xb, yb in loader:
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        batches += 1

with torch.no_grad():
    final = torch.nn.functional.mse_loss(accelerator.unwrap_model(model)(x), y).item()
print(f"process {accelerator.process_index} of {accelerator.num_processes} on {socket.gethostname()} "
      f"batches {batches} loss {final:.8f}", flush=True)
accelerator.end_training()
