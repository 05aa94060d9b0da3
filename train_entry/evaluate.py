"""Validation: loss and accuracy on each rank's share of the validation split, summed over ranks."""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

VAL_BATCH = 4096


@torch.no_grad()
def validate(dist, module, x, y, amp_dtype, device, batches: int, batch: int = VAL_BATCH):
    """(loss, accuracy) over every rank's rows, or (None, None) without any. ``batches`` forwards
    on every rank, the same number everywhere (an FSDP2 forward gathers parameters: a rank with
    fewer rows runs empty ones)."""
    module.eval()
    loss_sum, correct = 0.0, 0.0
    for i in range(batches):
        xb, yb = x[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch]
        with (torch.autocast(device.type, dtype=amp_dtype) if amp_dtype else contextlib.nullcontext()):
            out = module(xb)
        if len(yb):
            loss_sum += F.cross_entropy(out.float(), yb, reduction="sum").item()
            correct += (out.argmax(1) == yb).sum().item()
    module.train()
    tot = dist.sum([loss_sum, correct, float(len(y))])
    if tot[2] == 0:
        return None, None
    return tot[0] / tot[2], tot[1] / tot[2]
