"""The reference trainer's learning-rate schedule and gradient norm."""
from __future__ import annotations

import math

import torch


def lr_lambda(warmup: int, total: int, schedule: str):
    """The LambdaLR factor of a step: linear warm-up over ``warmup`` steps, then constant or cosine
    decay to 0 at ``total``."""
    def f(step: int) -> float:
        if warmup > 0 and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant" or total <= warmup:
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return f


def grad_norm_(params, max_norm: float) -> torch.Tensor:
    """Global L2 norm of the gradients; clip to ``max_norm`` when > 0 (the norm is logged either way)."""
    if max_norm > 0:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    return torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
